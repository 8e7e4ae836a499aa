//! Driving `nexus-proto` by hand from tokio.
//!
//! `nexus-proto` is a state machine that never does I/O: this file is a
//! complete driver for it on another runtime than the ones `nexus-drive`
//! ships, with reqwest for HTTP. It is the loop of the `nexus-proto` crate
//! docs, made concurrent:
//!
//! * one loop owns the [`Run`]: it polls outputs until the machine says
//!   `Wait`, then waits for the first of: an event from an I/O task, the
//!   timer the machine asked for, or Ctrl-C;
//! * every piece of I/O is a task — the HTTP exchange (its head, each body
//!   chunk as it arrives, its end), each tool call — that reports back on a
//!   channel; the loop turns each report into an [`Input`].
//!
//! Retries, backoff, turn limits, transcript balance and the tool ledger are
//! the machine's business; the driver only moves bytes and runs tools.
//!
//! ```text
//! cargo run --manifest-path examples/tokio-driver/Cargo.toml                  # offline, scripted provider
//! OPENAI_API_KEY=sk-… cargo run --manifest-path examples/tokio-driver/Cargo.toml "What's 17 * 23?"
//! ```
//!
//! Online when the style's key variable is set (`NEXUS_STYLE` picks the
//! style, `NEXUS_MODEL` the model); offline otherwise or with
//! `NEXUS_OFFLINE=1`, against a scripted provider on loopback.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nexus_proto::{
    ExchangeId, HttpRequest, Input, InputError, Message, Outcome, Output, Request, Run, RunConfig, StreamEvent, Style,
    Timestamp, ToolDecl, ToolInvocation, ToolReply, ToolResult, TransportErrorKind,
};
use nexus_tests::fake::{FakeProvider, Script, Scripts, Turn};
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Where a suspended run's state is written (durable suspension).
const STATE_FILE: &str = "nexus-state.json";

/// What an I/O task reports back. Owned, so it can cross the channel; the
/// loop borrows it as an [`Input`].
enum Report {
    Head { exchange: ExchangeId, status: u16, headers: Vec<(String, String)> },
    Chunk { exchange: ExchangeId, bytes: Vec<u8> },
    End { exchange: ExchangeId },
    Failed { exchange: ExchangeId, kind: TransportErrorKind, message: String },
    Tool { call_id: String, reply: ToolReply },
}

impl Report {
    fn as_input(&self) -> Input<'_> {
        match self {
            Report::Head { exchange, status, headers } => {
                Input::ResponseHead { exchange: *exchange, status: *status, headers: headers.clone() }
            }
            Report::Chunk { exchange, bytes } => Input::ResponseBody { exchange: *exchange, chunk: bytes },
            Report::End { exchange } => Input::ResponseEnd { exchange: *exchange },
            Report::Failed { exchange, kind, message } => {
                Input::TransportError { exchange: *exchange, kind: *kind, message: message.clone() }
            }
            Report::Tool { call_id, reply } => Input::ToolReply { call_id: call_id.clone(), reply: reply.clone() },
        }
    }
}

/// Milliseconds since the Unix epoch, never going backwards (the machine
/// refuses a time earlier than one it has seen).
#[derive(Default)]
struct Clock {
    last: u64,
}

impl Clock {
    fn now(&mut self) -> Timestamp {
        self.last = self.last.max(wall_ms());
        Timestamp(self.last)
    }
}

fn wall_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

/// How a drive ended.
enum Ended {
    Finished(Outcome),
    /// Suspended; the state was written to [`STATE_FILE`].
    Suspended(Vec<Request>),
}

/// The loop: poll until `Wait`, then wait for one report, the timer or Ctrl-C.
async fn drive(run: &mut Run) -> Result<Ended, InputError> {
    let http = reqwest::Client::new();
    let (tx, mut rx) = mpsc::unbounded_channel::<Report>();
    let mut clock = Clock::default();
    let mut exchange: Option<JoinHandle<()>> = None;
    let mut cancelled = false;
    let mut mid_line = false;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);

    loop {
        match run.poll_output() {
            Output::Send(req) => {
                // A new request supersedes one still open: the machine gave up
                // on it (a late report for it would be refused and ignored).
                if let Some(task) = exchange.take() {
                    task.abort();
                }
                exchange = Some(tokio::spawn(send(http.clone(), req, tx.clone())));
            }
            Output::RunTools(batch) => {
                // Every call of the batch at once; replies come back in any order.
                for call in batch.calls {
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let call_id = call.call_id.clone();
                        let reply = run_tool(call).await;
                        let _ = tx.send(Report::Tool { call_id, reply });
                    });
                }
            }
            Output::Event(event) => show(&event, &mut mid_line),
            Output::Suspended(requests) => {
                // Durable: the snapshot holds everything but the API key.
                // `Run::restore` in any process, then feed the answers.
                if let Err(e) = std::fs::write(STATE_FILE, run.snapshot()) {
                    eprintln!("cannot write {STATE_FILE}: {e}");
                }
                return Ok(Ended::Suspended(requests));
            }
            Output::Wait { until } => {
                let timer = async {
                    match until {
                        Some(t) => {
                            let left = t.0.saturating_sub(wall_ms());
                            tokio::time::sleep(Duration::from_millis(left)).await;
                        }
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    Some(report) = rx.recv() => {
                        // A refused input changes nothing: a report from an
                        // exchange the machine abandoned is simply dropped.
                        if let Err(e) = run.handle_input(clock.now(), report.as_input()) {
                            eprintln!("[ignored: {e}]");
                        }
                    }
                    () = timer => run.handle_input(clock.now(), Input::Timeout)?,
                    _ = &mut ctrl_c, if !cancelled => {
                        cancelled = true;
                        if let Some(task) = exchange.take() {
                            task.abort();
                        }
                        run.handle_input(clock.now(), Input::Cancel)?;
                    }
                }
            }
            Output::Done(outcome) => {
                if mid_line {
                    println!();
                }
                return Ok(Ended::Finished(outcome));
            }
        }
    }
}

/// One HTTP exchange: head, then every body chunk as it arrives, then the end.
async fn send(http: reqwest::Client, req: HttpRequest, tx: mpsc::UnboundedSender<Report>) {
    let exchange = req.exchange;
    let method = reqwest::Method::from_bytes(req.method.as_bytes()).unwrap_or(reqwest::Method::POST);
    let mut builder = http.request(method, &req.url).body(req.body);
    for (name, value) in &req.headers {
        builder = builder.header(name, value);
    }
    let mut response = match builder.send().await {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(failed(exchange, &e));
            return;
        }
    };
    let headers = response
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let status = response.status().as_u16();
    let _ = tx.send(Report::Head { exchange, status, headers });
    loop {
        let report = match response.chunk().await {
            Ok(Some(bytes)) => Report::Chunk { exchange, bytes: bytes.to_vec() },
            Ok(None) => Report::End { exchange },
            Err(e) => failed(exchange, &e),
        };
        let last = !matches!(report, Report::Chunk { .. });
        if tx.send(report).is_err() || last {
            return;
        }
    }
}

fn failed(exchange: ExchangeId, e: &reqwest::Error) -> Report {
    // Connect and I/O failures are retried by the machine; timeouts are not.
    let kind = if e.is_timeout() {
        TransportErrorKind::Timeout
    } else if e.is_connect() {
        TransportErrorKind::Connect
    } else {
        TransportErrorKind::Io
    };
    Report::Failed { exchange, kind, message: e.to_string() }
}

/// The tools' declarations, as the model sees them.
fn tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::new(
            "get_weather",
            "The current weather in a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        ToolDecl::new(
            "multiply",
            "Multiplies two integers.",
            json!({
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            }),
        ),
    ]
}

/// The tools' bodies. Arguments were parsed by the machine (a call whose
/// arguments are not JSON never gets here: it gets an error result).
async fn run_tool(call: ToolInvocation) -> ToolReply {
    let result = match call.name.as_str() {
        "get_weather" => {
            // Stands in for a call to a weather service.
            tokio::time::sleep(Duration::from_millis(100)).await;
            match call.input.get("city").and_then(Value::as_str) {
                Some("Paris") => ToolResult::ok("Paris: 18°C, sunny"),
                Some(city) => ToolResult::error(format!("no weather station in {city}")),
                None => ToolResult::error("city is required"),
            }
        }
        "multiply" => {
            let a = call.input.get("a").and_then(Value::as_i64);
            let b = call.input.get("b").and_then(Value::as_i64);
            match a.zip(b).and_then(|(a, b)| a.checked_mul(b)) {
                Some(product) => ToolResult::ok(product.to_string()),
                None => ToolResult::error("a and b must be integers whose product fits in 64 bits"),
            }
        }
        other => ToolResult::error(format!("no tool named {other}")),
    };
    ToolReply::Done(result)
}

/// Text pieces as they arrive; everything else on a line of its own.
fn show(event: &StreamEvent, mid_line: &mut bool) {
    let line = match event {
        StreamEvent::TextDelta { text } => {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "{text}");
            let _ = out.flush();
            *mid_line = !text.ends_with('\n');
            return;
        }
        StreamEvent::ToolCallFinished { call } => {
            format!("[tool call {} {}]", call.name, call.input)
        }
        StreamEvent::ToolResult { name, result, .. } => {
            format!("[tool result {name}: {}]", result.output)
        }
        StreamEvent::Retrying { attempt, delay_ms, reason } => format!("[retry {attempt} in {delay_ms} ms: {reason}]"),
        _ => return,
    };
    if std::mem::take(mid_line) {
        println!();
    }
    println!("{line}");
}

/// The scripted model (offline): two tools in parallel, then the answer.
fn script() -> Script {
    Script::new(vec![
        Turn::text("Checking.").call("get_weather", r#"{"city": "Paris"}"#).call("multiply", r#"{"a": 17, "b": 23}"#),
        Turn::text("Paris is at 18°C and sunny, and 17 × 23 = 391."),
    ])
}

/// The run config and key: the real provider when its key is set, else the
/// scripted one (returned too, so it lives as long as the run).
fn provider() -> (RunConfig, Option<String>, Option<FakeProvider>) {
    let forced = std::env::var("NEXUS_STYLE").ok().and_then(|s| Style::parse(&s));
    let offline = std::env::var("NEXUS_OFFLINE").is_ok_and(|v| !v.is_empty() && v != "0");
    let key_of = |s: Style| std::env::var(s.api_key_env()).ok().filter(|k| !k.is_empty());
    let online = match forced {
        Some(style) => key_of(style).map(|k| (style, k)),
        None => [Style::Anthropic, Style::OpenAi, Style::Gemini].into_iter().find_map(|s| key_of(s).map(|k| (s, k))),
    };
    match online.filter(|_| !offline) {
        Some((style, key)) => {
            let model = std::env::var("NEXUS_MODEL").unwrap_or_else(|_| {
                match style {
                    Style::Anthropic => "claude-haiku-4-5",
                    Style::OpenAi => "gpt-4o-mini",
                    Style::Gemini => "gemini-2.5-flash",
                    Style::OpenAiResponses => "gpt-5-mini",
                }
                .to_string()
            });
            eprintln!("# online: {} {model}", style.name());
            (RunConfig::new(style, model), Some(key), None)
        }
        None => {
            let style = forced.unwrap_or(Style::OpenAi);
            let fake = FakeProvider::start(Scripts::default().model("scripted-model", script()));
            let fake_style = match style {
                Style::Anthropic => nexus_tests::fake::Style::Anthropic,
                Style::OpenAi => nexus_tests::fake::Style::OpenAi,
                Style::Gemini => nexus_tests::fake::Style::Gemini,
                Style::OpenAiResponses => nexus_tests::fake::Style::OpenAiResponses,
            };
            eprintln!("# offline: a scripted {} provider at {}", style.name(), fake.addr());
            let mut config = RunConfig::new(style, "scripted-model");
            config.base_url = fake.base_url(fake_style);
            let key = fake.api_key().to_string();
            (config, Some(key), Some(fake))
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let prompt =
        std::env::args().nth(1).unwrap_or_else(|| "What's the weather in Paris, and what is 17 * 23?".to_string());
    let (mut config, key, _fake) = provider();
    config.stream = true;
    config.system = Some("Be brief. Use the tools.".into());
    // Seeds the run id (and so the tools' idempotency keys) and retry jitter.
    config.seed =
        u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() & u128::from(u64::MAX)))
            .unwrap_or(0);

    let mut run = match Run::new(config, tools(), vec![Message::user(prompt)]) {
        Ok(run) => run,
        Err(e) => {
            eprintln!("invalid run: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(key) = key {
        run.set_api_key(key); // memory only: never in a snapshot
    }

    match drive(&mut run).await {
        Ok(Ended::Finished(outcome)) => {
            let usage = run.usage();
            println!("outcome: {outcome:?}, turns: {}, tokens: {}", run.turns(), usage.total_tokens);
            println!("answer: {}", run.final_text());
            if matches!(outcome, Outcome::Done) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Ok(Ended::Suspended(requests)) => {
            for r in &requests {
                println!("waiting for {} ({}): {}", r.id, r.kind, r.prompt);
            }
            println!("state saved to {STATE_FILE}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("driver error: {e}");
            ExitCode::FAILURE
        }
    }
}
