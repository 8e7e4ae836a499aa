//! A tiny benchmark harness: repeated timed samples, medians, p95, ratios.
//! No timing is ever asserted; the numbers are printed for BENCHMARKS.md.
#![allow(dead_code)]

use std::time::{Duration, Instant};

/// Timing statistics of one measured function.
#[derive(Debug, Clone, Copy)]
pub struct Stats {
    pub median: Duration,
    pub p95: Duration,
    pub min: Duration,
}

/// Runs `f` for `warmup` then `samples` times; each sample runs it `inner` times.
pub fn measure(samples: usize, inner: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..(samples / 5).max(1) {
        f();
    }
    stats((0..samples).map(|_| time(inner, &mut f)).collect())
}

/// Times `ours` and `theirs` in alternating pairs (which of the two runs
/// first alternates too), each sample running its side `inner` times, so a
/// change in machine load during the run hits both sides of a pair alike.
/// Returns the per-side timings and the median of the per-pair ratios
/// `theirs / ours`.
pub fn paired(samples: usize, inner: usize, mut ours: impl FnMut(), mut theirs: impl FnMut()) -> (Stats, Stats, f64) {
    for _ in 0..(samples / 5).max(1) {
        time(inner, &mut ours);
        time(inner, &mut theirs);
    }
    let (mut a, mut b, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..samples {
        let (o, t) = if i % 2 == 0 {
            let o = time(inner, &mut ours);
            (o, time(inner, &mut theirs))
        } else {
            let t = time(inner, &mut theirs);
            (time(inner, &mut ours), t)
        };
        a.push(o);
        b.push(t);
        ratios.push(t.as_secs_f64() / o.as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    (stats(a), stats(b), ratios[ratios.len() / 2])
}

/// The time of one call of `f`, averaged over `inner` calls.
fn time(inner: usize, f: &mut impl FnMut()) -> Duration {
    let t = Instant::now();
    for _ in 0..inner {
        f();
    }
    t.elapsed() / inner as u32
}

/// Median, p95 and minimum of `times`.
pub fn stats(mut times: Vec<Duration>) -> Stats {
    times.sort();
    let pick = |q: f64| times[((times.len() as f64 - 1.0) * q).round() as usize];
    Stats { median: pick(0.5), p95: pick(0.95), min: times[0] }
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub fn mb_per_s(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e6
}

/// Samples from the environment (`NEXUS_BENCH_SAMPLES`), else `default`.
pub fn samples(default: usize) -> usize {
    std::env::var("NEXUS_BENCH_SAMPLES").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}
