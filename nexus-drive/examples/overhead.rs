//! Framework-overhead runner: the shared benchmark scenario through the
//! blocking or the async driver, speaking the harness's runner protocol so
//! it can sit in the same table as the peers and the bare-HTTP floors.
//!
//! One request is one [`run`](nexus_drive::blocking::Client::run): turn 1
//! returns two parallel tool calls, `get_weather(city="Paris")` and
//! `add(a=2,b=2)`, which run as native typed tools; turn 2 returns the final
//! text. So one request = 2 model round trips + 2 tool executions, all
//! through the loop: request encoding, response decoding, the pre-send gate,
//! the tool ledger and the result, exactly as an application runs it.
//!
//! ```text
//! MOCK_URL=http://127.0.0.1:PORT overhead [--driver blocking|async] [--stream]
//!                                         [--style openai|openai-responses]
//!                                         [--timeout-ms N] [--context-window TOKENS]
//!                                         (--serve | [--warmup N] [--runs N])
//! ```
//!
//! With `OTEL_EXPORTER_OTLP_ENDPOINT` set, every run is traced and exported
//! (the tracing-on rows of BENCHMARKS.md); unset, no telemetry is built.
//!
//! * `--serve`: builds the client, prints `{"ready":true,"init_ms":X}`, then
//!   answers one JSON line per stdin command: `warmup K` → `{"ok":…}`,
//!   `run K` → `{"lat":[ms,…],"ok":…}`, `quit` or EOF → the summary line.
//! * otherwise: `--warmup` requests, then `--runs` measured ones, then the
//!   summary line only.
//! * `--style`: the wire format spoken to the mock, OpenAI Chat Completions
//!   (the default, as the peers) or OpenAI Responses (`POST /v1/responses`).
//! * `--context-window`: the context budget on with this window, so every
//!   request is estimated against it first (a window the scenario never
//!   nears: the row measures the check, not a compaction).
//!
//! `final_ok` holds only when every request ended in exactly the scripted
//! final text and each tool ran exactly once per request with the scripted
//! arguments (checked per request, not only in total, so a request that ran
//! one tool twice and another that ran it not at all cannot cancel out).
//!
//! Build with `cargo build --release -p nexus-drive --example overhead`.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nexus_drive::asynchronous::AsyncClient;
use nexus_drive::blocking::Client;
use nexus_drive::{
    AsyncTool, ClientConfig, DriveError, RunResult, RunStatus, Style, Tool, ToolContext, ToolError, ToolOutcome,
};
use serde::Deserialize;
use serde_json::{json, Value};

/// The final text the mock's turn 2 returns; anything else fails the request.
const FINAL_TEXT: &str = "The weather in Paris is Sunny, 22C. And 2 + 2 = 4.";
/// The question every runner of the harness asks.
const QUESTION: &str = "What's the weather in Paris and what is 2+2?";
/// The system prompt the floors' prebuilt bodies carry, so the bodies compare.
const SYSTEM: &str = "You are a helpful assistant.";
/// The key every runner sends; the mock ignores it.
const API_KEY: &str = "sk-mock-not-a-real-key";
const MODEL: &str = "mock-model";

const USAGE: &str =
    "usage: overhead [--driver blocking|async] [--stream] [--style openai|openai-responses] [--timeout-ms N] \
                     [--context-window TOKENS] (--serve | [--warmup N] [--runs N])\n\
                     reads MOCK_URL (http://127.0.0.1:PORT; the OpenAI base is $MOCK_URL/v1)";

/// How many times each tool ran, and how many runs saw unexpected arguments.
#[derive(Debug, Default)]
struct Tally {
    weather: AtomicU64,
    add: AtomicU64,
    bad_args: AtomicU64,
}

impl Tally {
    fn read(&self) -> (u64, u64, u64) {
        (self.weather.load(Ordering::SeqCst), self.add.load(Ordering::SeqCst), self.bad_args.load(Ordering::SeqCst))
    }
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

/// `get_weather(city)`: counts itself and checks the scripted city.
struct GetWeather(Arc<Tally>);

/// `add(a, b)`: counts itself and checks the scripted operands.
struct Add(Arc<Tally>);

impl GetWeather {
    fn weather(&self, args: WeatherArgs) -> String {
        self.0.weather.fetch_add(1, Ordering::SeqCst);
        if args.city != "Paris" {
            self.0.bad_args.fetch_add(1, Ordering::SeqCst);
        }
        format!("The weather in {} is Sunny, 22C.", args.city)
    }
}

impl Add {
    fn add(&self, args: AddArgs) -> i64 {
        self.0.add.fetch_add(1, Ordering::SeqCst);
        let sum = args.a.saturating_add(args.b);
        if (args.a, args.b) != (2, 2) {
            self.0.bad_args.fetch_add(1, Ordering::SeqCst);
        }
        sum
    }
}

/// The harness's schemas (runners/harness.py), so every runner's request
/// body advertises the same tools.
fn weather_schema() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}},
           "required": ["city"], "additionalProperties": false})
}

fn add_schema() -> Value {
    json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
           "required": ["a", "b"], "additionalProperties": false})
}

// The blocking driver runs `Tool`s, the async driver polls `AsyncTool`s:
// each driver with its own kind of tool, on the driver's thread. (A blocking
// `Tool` under the async driver runs there too once its calls have been
// quick; until then it goes to smol's blocking pool.)

impl Tool for GetWeather {
    const NAME: &'static str = "get_weather";
    type Args = WeatherArgs;
    type Output = String;
    fn description(&self) -> String {
        "Get the current weather for a city.".into()
    }
    fn input_schema(&self) -> Option<Value> {
        Some(weather_schema())
    }
    fn call(&self, args: WeatherArgs, _ctx: &ToolContext) -> Result<ToolOutcome<String>, ToolError> {
        Ok(ToolOutcome::Done(self.weather(args)))
    }
}

impl Tool for Add {
    const NAME: &'static str = "add";
    type Args = AddArgs;
    type Output = i64;
    fn description(&self) -> String {
        "Add two integers.".into()
    }
    fn input_schema(&self) -> Option<Value> {
        Some(add_schema())
    }
    fn call(&self, args: AddArgs, _ctx: &ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
        Ok(ToolOutcome::Done(self.add(args)))
    }
}

impl AsyncTool for GetWeather {
    const NAME: &'static str = "get_weather";
    type Args = WeatherArgs;
    type Output = String;
    fn description(&self) -> String {
        "Get the current weather for a city.".into()
    }
    fn input_schema(&self) -> Option<Value> {
        Some(weather_schema())
    }
    async fn call(&self, args: WeatherArgs, _ctx: ToolContext) -> Result<ToolOutcome<String>, ToolError> {
        Ok(ToolOutcome::Done(self.weather(args)))
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
        Some(add_schema())
    }
    async fn call(&self, args: AddArgs, _ctx: ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
        Ok(ToolOutcome::Done(self.add(args)))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DriverKind {
    Blocking,
    Async,
}

#[derive(Debug)]
struct Args {
    driver: DriverKind,
    style: Style,
    stream: bool,
    serve: bool,
    warmup: usize,
    runs: usize,
    /// A whole-run deadline per request (`--timeout-ms`), as a production host sets one.
    timeout: Option<Duration>,
    /// The context budget on, with this window in tokens (`--context-window`):
    /// every request is estimated against it before it is sent.
    context_window: Option<u64>,
}

fn parse_args(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut args = Args {
        driver: DriverKind::Blocking,
        style: Style::OpenAi,
        stream: false,
        serve: false,
        warmup: 20,
        runs: 200,
        timeout: None,
        context_window: None,
    };
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().ok_or_else(|| format!("{flag} needs a value"));
        match a.as_str() {
            "--driver" => {
                args.driver = match value("--driver")?.as_str() {
                    "blocking" => DriverKind::Blocking,
                    "async" => DriverKind::Async,
                    other => return Err(format!("--driver: {other:?} is neither blocking nor async")),
                }
            }
            "--stream" => args.stream = true,
            "--style" => {
                args.style = match value("--style")?.as_str() {
                    "openai" => Style::OpenAi,
                    "openai-responses" => Style::OpenAiResponses,
                    other => return Err(format!("--style: {other:?} is neither openai nor openai-responses")),
                }
            }
            "--serve" => args.serve = true,
            "--warmup" => args.warmup = value("--warmup")?.parse().map_err(|e| format!("--warmup: {e}"))?,
            "--runs" => args.runs = value("--runs")?.parse().map_err(|e| format!("--runs: {e}"))?,
            "--timeout-ms" => {
                let ms = value("--timeout-ms")?.parse().map_err(|e| format!("--timeout-ms: {e}"))?;
                args.timeout = Some(Duration::from_millis(ms));
            }
            "--context-window" => {
                let tokens = value("--context-window")?.parse().map_err(|e| format!("--context-window: {e}"))?;
                args.context_window = Some(tokens);
            }
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(args)
}

/// The process's OTLP export, when the standard variables name a collector.
fn pipeline() -> Option<&'static nexus_drive::telemetry::OtlpPipeline> {
    static PIPELINE: std::sync::OnceLock<Option<nexus_drive::telemetry::OtlpPipeline>> = std::sync::OnceLock::new();
    PIPELINE.get_or_init(|| nexus_drive::telemetry::OtlpPipeline::from_env().ok().flatten()).as_ref()
}

/// The client under test, built once and reused for every request.
enum Runner {
    Blocking(Client),
    Async(AsyncClient),
}

impl Runner {
    fn build(args: &Args, tally: &Arc<Tally>) -> Result<Runner, DriveError> {
        let mock = std::env::var("MOCK_URL").unwrap_or_else(|_| "http://127.0.0.1:8900".to_string());
        let mut builder = ClientConfig::builder(args.style, MODEL)
            .base_url(format!("{}/v1", mock.trim_end_matches('/')))
            .api_key(API_KEY)
            .system(SYSTEM)
            .stream(args.stream);
        if let Some(d) = args.timeout {
            builder = builder.timeout(d);
        }
        if let Some(tokens) = args.context_window {
            builder = builder.context_window(tokens);
        }
        // The tracing-on rows: with OTEL_EXPORTER_OTLP_ENDPOINT set, every
        // run exports its spans (SPEC §22); unset, nothing is built.
        if let Some(p) = pipeline() {
            builder = builder.telemetry(p.telemetry());
        }
        Ok(match args.driver {
            DriverKind::Blocking => {
                let cfg = builder.tool(GetWeather(tally.clone())).tool(Add(tally.clone())).build()?;
                Runner::Blocking(Client::new(cfg))
            }
            DriverKind::Async => {
                let cfg = builder.async_tool(GetWeather(tally.clone())).async_tool(Add(tally.clone())).build()?;
                Runner::Async(AsyncClient::new(cfg))
            }
        })
    }
}

/// Measurement state across batches (the harness's `_Runner`).
struct Bench {
    runner: Runner,
    tally: Arc<Tally>,
    lat: Vec<f64>,
    requests: u64,
    text_ok: bool,
    last_text: Option<String>,
    error: Option<String>,
}

impl Bench {
    /// Runs `k` requests; records their latencies when `record`. Stops at the
    /// first failed request (as the Python harness does) and says whether
    /// every request of the batch was correct.
    fn batch(&mut self, k: usize, record: bool) -> bool {
        match &self.runner {
            Runner::Blocking(client) => {
                let client = client.clone();
                self.each(k, record, || client.run(QUESTION))
            }
            Runner::Async(client) => {
                let client = client.clone();
                // One executor for the whole batch, as an async host would
                // await its runs; `block_on` also drives smol's reactor.
                smol::block_on(async { self.each_async(k, record, &client).await })
            }
        }
    }

    fn each(&mut self, k: usize, record: bool, mut run: impl FnMut() -> Result<RunResult, DriveError>) -> bool {
        let mut ok = true;
        for _ in 0..k {
            let before = self.tally.read();
            let t0 = Instant::now();
            let result = run();
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            match self.check(before, result, ms, record) {
                Some(good) => ok &= good,
                None => return false,
            }
        }
        ok
    }

    async fn each_async(&mut self, k: usize, record: bool, client: &AsyncClient) -> bool {
        let mut ok = true;
        for _ in 0..k {
            let before = self.tally.read();
            let t0 = Instant::now();
            let result = client.run(QUESTION).await;
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            match self.check(before, result, ms, record) {
                Some(good) => ok &= good,
                None => return false,
            }
        }
        ok
    }

    /// Books one request: `Some(correct)`, or `None` when it failed outright.
    fn check(
        &mut self,
        before: (u64, u64, u64),
        result: Result<RunResult, DriveError>,
        ms: f64,
        record: bool,
    ) -> Option<bool> {
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                self.error = Some(truncate(&format!("{e}"), 500));
                self.text_ok = false;
                return None;
            }
        };
        self.requests += 1;
        let after = self.tally.read();
        let tools_once = after.0 == before.0 + 1 && after.1 == before.1 + 1 && after.2 == before.2;
        let good = result.status == RunStatus::Done
            && result.text == FINAL_TEXT
            && tools_once
            && result.tool_calls.len() == 2
            && result.turns == 2;
        if !good {
            self.text_ok = false;
            if self.error.is_none() {
                self.error = Some(truncate(
                    &format!(
                        "request {} not as scripted: status {:?}, {} turns, {} tool calls, \
                         (get_weather, add, bad arguments) {:?} -> {:?}, text {:?}",
                        self.requests,
                        result.status,
                        result.turns,
                        result.tool_calls.len(),
                        before,
                        after,
                        result.text
                    ),
                    500,
                ));
            }
        }
        self.last_text = Some(result.text);
        if record {
            self.lat.push(ms);
        }
        Some(good)
    }

    fn final_ok(&self) -> bool {
        let (weather, add, bad) = self.tally.read();
        self.text_ok
            && self.error.is_none()
            && self.requests > 0
            && weather == self.requests
            && add == self.requests
            && bad == 0
    }

    fn summary(&self, name: &str, init_ms: f64) -> Value {
        let mut sorted = self.lat.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let mean = (n > 0).then(|| sorted.iter().sum::<f64>() / n as f64);
        let (weather, add, bad) = self.tally.read();
        json!({
            "framework": name,
            "version": format!("nexus-drive {}", env!("CARGO_PKG_VERSION")),
            "n": n,
            "mean_ms": mean.map(round4),
            "p50_ms": nearest_rank(&sorted, 50.0).map(round4),
            "p95_ms": nearest_rank(&sorted, 95.0).map(round4),
            "min_ms": sorted.first().copied().map(round4),
            "max_ms": sorted.last().copied().map(round4),
            "init_ms": round4(init_ms),
            "final_ok": self.final_ok(),
            "requests_total": self.requests,
            "tool_calls": {"get_weather": weather, "add": add, "bad_args": bad},
            "last_text": self.last_text,
            "error": self.error,
        })
    }
}

/// Nearest-rank percentile of sorted values (`q` in 0..=100), as the harness computes it.
fn nearest_rank(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

fn truncate(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// Writes one JSON line; `false` when stdout is gone (the harness quit).
fn emit(v: &Value) -> bool {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{v}").and_then(|()| out.flush()).is_ok()
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(msg) => {
            eprintln!("{msg}");
            return ExitCode::from(2);
        }
    };
    let name = format!(
        "nexus-{}{}{}",
        match args.driver {
            DriverKind::Blocking => "blocking",
            DriverKind::Async => "async",
        },
        if args.style == Style::OpenAiResponses { "-responses" } else { "" },
        if args.stream { "-stream" } else { "" }
    );
    let tally = Arc::new(Tally::default());
    let t0 = Instant::now();
    let runner = match Runner::build(&args, &tally) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("overhead: cannot build the client: {e}");
            return ExitCode::FAILURE;
        }
    };
    let init_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut bench = Bench { runner, tally, lat: Vec::new(), requests: 0, text_ok: true, last_text: None, error: None };

    if !args.serve {
        bench.batch(args.warmup, false);
        bench.batch(args.runs, true);
        emit(&bench.summary(&name, init_ms));
        if let Some(p) = pipeline() {
            p.shutdown();
        }
        return ExitCode::SUCCESS;
    }

    if !emit(&json!({"ready": true, "framework": name, "init_ms": round4(init_ms)})) {
        return ExitCode::FAILURE;
    }
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut words = line.split_whitespace();
        let cmd = words.next();
        let k = words.next().and_then(|w| w.parse::<usize>().ok());
        let reply = match (cmd, k) {
            (Some("warmup"), Some(k)) => {
                let ok = bench.batch(k, false);
                json!({"warmup": k, "ok": ok, "error": bench.error})
            }
            (Some("run"), Some(k)) => {
                let before = bench.lat.len();
                let ok = bench.batch(k, true);
                let lat: Vec<f64> = bench.lat.get(before..).unwrap_or_default().iter().copied().map(round4).collect();
                json!({"lat": lat, "ok": ok, "error": bench.error})
            }
            (Some("quit"), _) => break,
            (None, _) => continue,
            (Some(other), _) => json!({"ok": false, "error": format!("unknown command {other:?}")}),
        };
        if !emit(&reply) {
            return ExitCode::FAILURE;
        }
    }
    emit(&bench.summary(&name, init_ms));
    if let Some(p) = pipeline() {
        p.shutdown();
    }
    ExitCode::SUCCESS
}
