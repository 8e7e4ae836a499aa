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
    let mut times: Vec<Duration> = (0..samples)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..inner {
                f();
            }
            t.elapsed() / inner as u32
        })
        .collect();
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
