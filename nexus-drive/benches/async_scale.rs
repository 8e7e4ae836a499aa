//! Async scale: N concurrent runs (100, 1,000, 10,000) on one smol executor
//! against the shared mock LLM on loopback. Every run suspends once (its
//! `get_weather` tool asks for approval and the in-process answerer holds
//! the answer back until all N runs are parked), then is resumed and
//! finishes. Reported: runs/s, the client's CPU per run, and the memory each
//! in-flight run holds beyond its transcript (target: ≤ 64 KiB).
//!
//! Method:
//! * The mock is `shared/bench/mock_llm.py` in its own process (so its
//!   memory never counts as ours), or the server at `MOCK_URL` when set.
//!   Its script: turn 1 calls `get_weather(city="Paris")` and `add(a=2,b=2)`
//!   in parallel; turn 2 (tool results present) answers with the final text.
//! * Each sample runs in a fresh process (this binary re-executed), so the
//!   allocator starts clean and one size's freed memory never hides the
//!   next size's growth.
//! * All N runs are spawned at once. At most `NEXUS_SCALE_HTTP` (default 16,
//!   the async client's idle-pool size) model calls are on the wire at any
//!   moment: a run holds an HTTP token while its model call is out and
//!   gives it back while parked. The mock is one Python process with a
//!   thread per connection; letting 10,000 connections race it would
//!   measure its accept queue, not the loop. Every run is in flight (spawned,
//!   started, not finished) at the moment memory is read: all N are parked.
//! * Memory: resident set (`VmRSS`) with all N runs parked, minus the
//!   resident set after a warm-up wave, divided by N; "beyond transcript"
//!   subtracts the JSON size of a run's transcript at that point.
//! * No timing is asserted; correctness is: every run ends with the exact
//!   final text, `get_weather` suspended once and ran once per run, `add`
//!   ran once per run, both with the scripted arguments.
//!
//! Run with `cargo bench -p nexus-drive --bench async_scale` (sizes via
//! `NEXUS_SCALE_SIZES=100,1000`, samples per size via `NEXUS_SCALE_SAMPLES`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use nexus_drive::asynchronous::AsyncClient;
use nexus_drive::{
    Answer, AsyncTool, ClientConfig, DriveError, Request, RunResult, RunStatus, Style, ToolContext, ToolError,
    ToolOutcome,
};
use serde::Deserialize;
use serde_json::{json, Value};
use smol::channel::{Receiver, Sender};

const FINAL_TEXT: &str = "The weather in Paris is Sunny, 22C. And 2 + 2 = 4.";
const QUESTION: &str = "What's the weather in Paris and what is 2+2?";
const SYSTEM: &str = "You are a helpful assistant.";
const CHILD_ENV: &str = "NEXUS_SCALE_CHILD";
/// How long a wave may take before the child gives up (a wedged mock).
const WAVE_LIMIT: Duration = Duration::from_secs(600);
const WARMUP_RUNS: usize = 32;
/// Starts the mock so that it gets SIGTERM when this process dies, however
/// it dies (a time limit's kill included): `prctl(PR_SET_PDEATHSIG)` then
/// `exec` of the mock, which exits cleanly on SIGTERM.
const PARENT_DEATH_SHIM: &str = "import ctypes, os, signal, sys\n\
try:\n    ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n\
except Exception:\n    pass\n\
os.execv(sys.executable, [sys.executable] + sys.argv[1:])\n";

// ---------------------------------------------------------------- tools --

/// Tool executions and suspensions, for the correctness check.
#[derive(Default)]
struct Tally {
    suspended: AtomicU64,
    weather: AtomicU64,
    add: AtomicU64,
    bad_args: AtomicU64,
}

#[derive(Deserialize)]
struct WeatherArgs {
    city: String,
}

#[derive(Deserialize)]
struct AddArgs {
    a: i64,
    b: i64,
}

/// Suspends on its first execution (an approval request); runs once approved.
struct GetWeather(Arc<Tally>);

struct Add(Arc<Tally>);

impl AsyncTool for GetWeather {
    const NAME: &'static str = "get_weather";
    type Args = WeatherArgs;
    type Output = String;
    fn description(&self) -> String {
        "Get the current weather for a city.".into()
    }
    fn input_schema(&self) -> Option<Value> {
        Some(json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}))
    }
    async fn call(&self, args: WeatherArgs, ctx: ToolContext) -> Result<ToolOutcome<String>, ToolError> {
        match ctx.answer() {
            None => {
                self.0.suspended.fetch_add(1, Ordering::SeqCst);
                Ok(ToolOutcome::Pending(Request::new("approval", "Look up the weather?")))
            }
            Some(answer) if answer.ok => {
                self.0.weather.fetch_add(1, Ordering::SeqCst);
                if args.city != "Paris" {
                    self.0.bad_args.fetch_add(1, Ordering::SeqCst);
                }
                Ok(ToolOutcome::Done(format!("The weather in {} is Sunny, 22C.", args.city)))
            }
            Some(_) => Err(ToolError::msg("not approved")),
        }
    }
}

impl AsyncTool for Add {
    const NAME: &'static str = "add";
    type Args = AddArgs;
    type Output = i64;
    fn description(&self) -> String {
        "Add two integers.".into()
    }
    fn input_schema(&self) -> Option<Value> {
        Some(
            json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}),
        )
    }
    async fn call(&self, args: AddArgs, _ctx: ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
        self.0.add.fetch_add(1, Ordering::SeqCst);
        if (args.a, args.b) != (2, 2) {
            self.0.bad_args.fetch_add(1, Ordering::SeqCst);
        }
        Ok(ToolOutcome::Done(args.a.saturating_add(args.b)))
    }
}

// ------------------------------------------------------------ one wave --

/// What a run tells the wave's controller.
enum Signal {
    Parked,
    Finished,
}

/// One wave's measurements.
struct Wave {
    n: usize,
    parked_ms: f64,
    resumed_ms: f64,
    cpu_ms: f64,
    rss_parked_kib: u64,
    transcript_bytes: usize,
    future_bytes: usize,
    error: Option<String>,
}

/// Token bucket for model calls on the wire: `take` waits for a token, `give` returns one.
#[derive(Clone)]
struct Tokens(Sender<()>, Receiver<()>);

impl Tokens {
    fn new(k: usize) -> Tokens {
        let (tx, rx) = smol::channel::bounded(k.max(1));
        for _ in 0..k.max(1) {
            let _ = tx.try_send(());
        }
        Tokens(tx, rx)
    }
    async fn take(&self) {
        let _ = self.1.recv().await;
    }
    fn give(&self) {
        let _ = self.0.try_send(());
    }
}

/// Runs `n` concurrent runs through one suspension each, on one executor.
fn wave(mock: &str, n: usize, http: usize) -> Wave {
    let tally = Arc::new(Tally::default());
    let tokens = Tokens::new(http);
    let (signal_tx, signal_rx) = smol::channel::unbounded::<Signal>();
    // The gate opens when its sender is dropped: every waiting answerer wakes.
    let (gate_tx, gate_rx) = smol::channel::bounded::<()>(1);
    let answerer = {
        let (tokens, signal_tx, gate_rx) = (tokens.clone(), signal_tx.clone(), gate_rx.clone());
        move |request: Request| {
            let (tokens, signal_tx, gate_rx) = (tokens.clone(), signal_tx.clone(), gate_rx.clone());
            async move {
                tokens.give();
                let _ = signal_tx.send(Signal::Parked).await;
                let _ = gate_rx.recv().await;
                tokens.take().await;
                Answer::ok(request.id, None)
            }
        }
    };
    let cfg = ClientConfig::builder(Style::OpenAi, "mock-model")
        .base_url(format!("{}/v1", mock.trim_end_matches('/')))
        .api_key("sk-mock-not-a-real-key")
        .system(SYSTEM)
        .async_tool(GetWeather(tally.clone()))
        .async_tool(Add(tally.clone()))
        .wait_for_async(answerer)
        .build();
    let client = match cfg {
        Ok(cfg) => AsyncClient::new(cfg),
        Err(e) => return Wave::failed(n, format!("config: {e}")),
    };
    let future_bytes = std::mem::size_of_val(&client.run(QUESTION));
    let ex = smol::Executor::new();
    let cpu0 = cpu_ms();
    let t0 = Instant::now();
    let outcome = smol::block_on(ex.run(async {
        let tasks: Vec<smol::Task<Result<RunResult, DriveError>>> = (0..n)
            .map(|_| {
                let (client, tokens, signal_tx) = (client.clone(), tokens.clone(), signal_tx.clone());
                ex.spawn(async move {
                    tokens.take().await;
                    let result = client.run(QUESTION).await;
                    tokens.give();
                    let _ = signal_tx.send(Signal::Finished).await;
                    result
                })
            })
            .collect();
        let (mut parked, mut finished) = (0usize, 0usize);
        let settle = async {
            while parked + finished < n {
                match signal_rx.recv().await {
                    Ok(Signal::Parked) => parked += 1,
                    Ok(Signal::Finished) => finished += 1,
                    Err(_) => break,
                }
            }
            true
        };
        let settled = settle
            .or(async {
                smol::Timer::after(WAVE_LIMIT).await;
                false
            })
            .await;
        let parked_at = t0.elapsed();
        let rss = rss_kib();
        drop(gate_tx);
        let mut results = Vec::with_capacity(n);
        if settled {
            for task in tasks {
                results.push(task.await);
            }
        }
        // Otherwise the tasks are dropped, which cancels runs stuck on a wedged mock.
        (settled, parked, parked_at, rss, results)
    }));
    let (settled, parked, parked_at, rss, results) = outcome;
    let total = t0.elapsed();
    let cpu = cpu_ms().zip(cpu0).map(|(b, a)| b - a).unwrap_or(f64::NAN);
    let error = check(n, settled, parked, &results, &tally);
    let transcript_bytes = results
        .iter()
        .find_map(|r| r.as_ref().ok())
        .and_then(|r| r.messages.get(..2).map(|m| serde_json::to_vec(m).map(|v| v.len()).unwrap_or(0)))
        .unwrap_or(0);
    Wave {
        n,
        parked_ms: parked_at.as_secs_f64() * 1e3,
        resumed_ms: total.saturating_sub(parked_at).as_secs_f64() * 1e3,
        cpu_ms: cpu,
        rss_parked_kib: rss.unwrap_or(0),
        transcript_bytes,
        future_bytes,
        error,
    }
}

impl Wave {
    fn failed(n: usize, error: String) -> Wave {
        Wave {
            n,
            parked_ms: 0.0,
            resumed_ms: 0.0,
            cpu_ms: 0.0,
            rss_parked_kib: 0,
            transcript_bytes: 0,
            future_bytes: 0,
            error: Some(error),
        }
    }
}

/// `None` when every run did what the script says; else the first problem.
fn check(
    n: usize,
    settled: bool,
    parked: usize,
    results: &[Result<RunResult, DriveError>],
    tally: &Tally,
) -> Option<String> {
    if !settled {
        return Some(format!("only {parked} of {n} runs parked within {WAVE_LIMIT:?}"));
    }
    if parked != n {
        return Some(format!("{parked} of {n} runs parked before the gate opened"));
    }
    for (i, r) in results.iter().enumerate() {
        match r {
            Err(e) => return Some(format!("run {i} failed: {e}")),
            Ok(r) if r.status != RunStatus::Done || r.text != FINAL_TEXT => {
                return Some(format!("run {i} ended {:?} with {:?}", r.status, r.text))
            }
            Ok(_) => {}
        }
    }
    let n = n as u64;
    let counts = [
        ("get_weather suspensions", tally.suspended.load(Ordering::SeqCst), n),
        ("get_weather runs", tally.weather.load(Ordering::SeqCst), n),
        ("add runs", tally.add.load(Ordering::SeqCst), n),
        ("bad arguments", tally.bad_args.load(Ordering::SeqCst), 0),
    ];
    counts.iter().find(|(_, got, want)| got != want).map(|(what, got, want)| format!("{what}: {got}, expected {want}"))
}

// ------------------------------------------------------------- /proc --

/// Resident set size in KiB (`VmRSS`).
fn rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// User + system CPU time of this process (all threads) in ms. Linux
/// reports it in clock ticks, which are 100 per second on every kernel
/// this runs on (`USER_HZ`).
fn cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, after) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command name: state is field 3, utime 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 * 10.0)
}

// --------------------------------------------------------------- child --

/// One sample in a fresh process: a warm-up wave, then the measured wave;
/// prints one JSON line.
fn child(n: usize) {
    let mock = std::env::var("MOCK_URL").unwrap_or_else(|_| "http://127.0.0.1:8900".to_string());
    let http = env_usize("NEXUS_SCALE_HTTP").unwrap_or(16);
    let warm = wave(&mock, WARMUP_RUNS, http);
    let base = rss_kib().unwrap_or(0);
    let w = match warm.error {
        Some(e) => Wave::failed(n, format!("warm-up: {e}")),
        None => wave(&mock, n, http),
    };
    let line = json!({
        "scale": w.n,
        "ok": w.error.is_none(),
        "error": w.error,
        "parked_ms": w.parked_ms,
        "resumed_ms": w.resumed_ms,
        "cpu_ms": w.cpu_ms,
        "rss_base_kib": base,
        "rss_parked_kib": w.rss_parked_kib,
        "transcript_bytes": w.transcript_bytes,
        "future_bytes": w.future_bytes,
        "http": http,
    });
    println!("{line}");
}

// -------------------------------------------------------------- parent --

/// The mock's process, stopped (by its own handle) when dropped.
struct Mock {
    child: Option<Child>,
    url: String,
}

impl Drop for Mock {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn shared_dir() -> PathBuf {
    match std::env::var("NEXUS_SHARED") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"),
    }
}

fn start_mock() -> Result<Mock, String> {
    if let Ok(url) = std::env::var("MOCK_URL") {
        return Ok(Mock { child: None, url });
    }
    let script = shared_dir().join("bench/mock_llm.py");
    if !script.exists() {
        return Err(format!("no mock at {} (set NEXUS_SHARED or MOCK_URL)", script.display()));
    }
    let port_file = std::env::temp_dir().join(format!("nexus-scale-mock-{}.port", std::process::id()));
    let _ = std::fs::remove_file(&port_file);
    let python = std::env::var("NEXUS_BENCH_PYTHON").unwrap_or_else(|_| "python3".to_string());
    let child = Command::new(python)
        .args(["-c", PARENT_DEATH_SHIM])
        .arg(&script)
        .args(["--port", "0", "--port-file"])
        .arg(&port_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the mock: {e}"))?;
    let mut mock = Mock { child: Some(child), url: String::new() };
    for _ in 0..200 {
        if let Some(port) = std::fs::read_to_string(&port_file).ok().and_then(|s| s.trim().parse::<u16>().ok()) {
            let _ = std::fs::remove_file(&port_file);
            mock.url = format!("http://127.0.0.1:{port}");
            return Ok(mock);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("the mock did not report its port within 10 s".to_string())
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Runs one sample in a fresh process of this binary.
fn sample(mock: &str, n: usize) -> Result<Value, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(exe);
    // Under the libtest harness, select just this benchmark; without a
    // harness the arguments are ignored.
    if cfg!(test) {
        cmd.args(["--ignored", "--exact", "fallback::async_scale", "--nocapture", "--test-threads", "1"]);
    }
    let out = cmd
        .env(CHILD_ENV, n.to_string())
        .env("MOCK_URL", mock)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout);
    // libtest may print its `test … ` prefix on the same line.
    text.lines()
        .filter_map(|l| l.find('{').and_then(|i| l.get(i..)))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v.get("scale").is_some())
        .ok_or_else(|| format!("sample for {n} printed no result (exit {:?})", out.status.code()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        len => v.get((len - 1) / 2).copied().unwrap_or(f64::NAN),
    }
}

fn spread(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

fn parent() {
    let sizes: Vec<usize> = std::env::var("NEXUS_SCALE_SIZES")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![100, 1_000, 10_000]);
    let mock = match start_mock() {
        Ok(m) => m,
        Err(e) => {
            println!("## Async scale\n\nskipped: {e}");
            return;
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "## Async scale: N concurrent runs on one smol executor, each suspended once and resumed\n");
    let _ = writeln!(
        out,
        "| concurrent runs | samples | runs/s median (min–max) | start → all parked, ms | resume → all done, ms | client CPU per run, µs | RSS growth with all parked | per in-flight run | its transcript (JSON) | beyond transcript | run future (inline) | ok |"
    );
    let _ = writeln!(out, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|");
    let _ = out.flush();
    for n in sizes {
        let samples = env_usize("NEXUS_SCALE_SAMPLES").unwrap_or(match n {
            0..=999 => 7,
            1_000..=9_999 => 5,
            _ => 3,
        });
        let mut rows: Vec<Value> = Vec::new();
        let mut errors: Vec<String> = Vec::new();
        for _ in 0..samples {
            match sample(&mock.url, n) {
                Ok(v) if v["ok"] == true => rows.push(v),
                Ok(v) => errors.push(v["error"].as_str().unwrap_or("failed").to_string()),
                Err(e) => errors.push(e),
            }
        }
        errors.sort();
        errors.dedup();
        if rows.is_empty() {
            let _ = writeln!(out, "| {n} | 0 | — | — | — | — | — | — | — | — | — | ❌ {} |", errors.join("; "));
            let _ = out.flush();
            continue;
        }
        let f = |key: &str| -> Vec<f64> { rows.iter().filter_map(|r| r[key].as_f64()).collect() };
        let rate: Vec<f64> = rows
            .iter()
            .filter_map(|r| Some(n as f64 / ((r["parked_ms"].as_f64()? + r["resumed_ms"].as_f64()?) / 1e3)))
            .collect();
        let growth: Vec<f64> =
            rows.iter().filter_map(|r| Some(r["rss_parked_kib"].as_f64()? - r["rss_base_kib"].as_f64()?)).collect();
        let per_run = median(growth.clone()) * 1024.0 / n as f64;
        let transcript = median(f("transcript_bytes"));
        let (lo, hi) = spread(&rate);
        let (glo, ghi) = spread(&growth);
        let _ = writeln!(
            out,
            "| {n} | {} | {:.0} ({:.0}–{:.0}) | {:.0} | {:.0} | {:.0} | {:.1} MiB ({:.1}–{:.1}) | {:.1} KiB | {:.0} B | {:.1} KiB | {:.0} B | {} |",
            rows.len(),
            median(rate.clone()),
            lo,
            hi,
            median(f("parked_ms")),
            median(f("resumed_ms")),
            median(f("cpu_ms")) * 1e3 / n as f64,
            median(growth.clone()) / 1024.0,
            glo / 1024.0,
            ghi / 1024.0,
            per_run / 1024.0,
            transcript,
            (per_run - transcript) / 1024.0,
            median(f("future_bytes")),
            if errors.is_empty() { "✅".to_string() } else { format!("❌ {}", errors.join("; ")) },
        );
        let _ = out.flush();
    }
    let http = env_usize("NEXUS_SCALE_HTTP").unwrap_or(16);
    let _ = writeln!(
        out,
        "\nAt most {http} model calls on the wire at once; every run is spawned at the start and parked together. \
         Memory = VmRSS with all runs parked − VmRSS after a {WARMUP_RUNS}-run warm-up wave, in a fresh process per sample."
    );
}

fn main() {
    match env_usize(CHILD_ENV) {
        Some(n) => child(n),
        None => parent(),
    }
}

/// Until the package declares this bench with `harness = false`, it is
/// built under the libtest harness, which skips plain functions under
/// `cargo bench`; this ignored test runs it with
/// `cargo test --release -p nexus-drive --bench async_scale -- --ignored --nocapture`.
#[cfg(test)]
mod fallback {
    #[test]
    #[ignore = "a benchmark: run explicitly"]
    fn async_scale() {
        super::main();
    }
}
