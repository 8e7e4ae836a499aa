//! Traces and metrics (SPEC §22): `nexus run` and `nexus resume` against the
//! fake provider, exporting over OTLP/HTTP to a loopback collector that
//! decodes with the official protobuf definitions.
#![cfg(feature = "cli")]

mod cli_support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cli_support::*;
use nexus_tests::fake::{Fault, FaultKind, Script, Scripts, Turn};
use nexus_tests::otlp::proto::tonic::trace::v1::span::SpanKind;
use nexus_tests::otlp::proto::tonic::trace::v1::Span;
use nexus_tests::otlp::{attr, hex, refused_endpoint, OtlpReceiver};
use serde_json::{json, Value};

const MODEL: &str = "m-otel";
/// A word scripted into the prompt, the system prompt, the tool arguments,
/// the tool results and a provider error body: with capture off it must
/// appear nowhere in what is exported.
const SECRET: &str = "zebra-oyster-5521";

fn named<'a>(spans: &'a [Span], prefix: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name.starts_with(prefix)).collect()
}

/// Telemetry variables for a command, exporting to `endpoint`.
fn otel(cmd: &mut Command, endpoint: &str) {
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_SERVICE_NAME", "nexus-test")
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .env_remove("OTEL_SEMCONV_STABILITY_OPT_IN")
        .env_remove("TRACEPARENT");
}

/// Turn 1 reads two files at once (its first attempt fails with an error
/// body holding the secret; the retry succeeds); turn 2 answers.
fn two_tools(dir: &Path) -> Scripts {
    std::fs::write(dir.join("a.txt"), format!("alpha {SECRET}")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.join("b.txt"), format!("beta {SECRET}")).unwrap_or_else(|e| panic!("{e}"));
    let error_body = json!({"error": {"message": format!("bad {SECRET}"), "type": "server_error"}}).to_string();
    let fault = Fault::new(FaultKind::Status { status: 500, retry_after: Some("0".into()), body: Some(error_body) });
    Scripts::new(KEY).model(
        MODEL,
        Script::new(vec![
            Turn::default()
                .call("read", json!({"path": format!("a.txt#{SECRET}")}).to_string())
                .call("read", json!({"path": "b.txt"}).to_string())
                .usage(11, 7)
                .fault(fault),
            Turn::text("done").usage(20, 3),
        ]),
    )
}

fn run_two_tools(capture: bool) -> (OtlpReceiver, Value, Vec<Span>) {
    let dir = scratch("otel-tools");
    let fake = fake(two_tools(&dir));
    let collector = OtlpReceiver::start();
    let root = dir.to_string_lossy().into_owned();
    let prompt = format!("read both files {SECRET}");
    let system = format!("you are careful {SECRET}");
    let args = ["--builtins=read", "--root", &root, "--system", &system, "--json", &prompt];
    let mut cmd = run_cmd(&dir, &fake, "openai", MODEL, &args);
    otel(&mut cmd, &collector.endpoint());
    if capture {
        cmd.env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY");
    }
    let out = run(cmd).expect(0);
    let result = out.json();
    let spans = collector.wait_for(Duration::from_secs(10), |s| named(s, "invoke_agent").len() == 1);
    (collector, result, spans)
}

#[test]
fn one_run_is_one_trace_with_each_call_and_both_parallel_tools_under_it() {
    let (collector, result, spans) = run_two_tools(false);
    assert_eq!(result["text"], "done");
    let agents = named(&spans, "invoke_agent");
    assert_eq!(agents.len(), 1, "{spans:#?}");
    let agent = agents[0];
    assert_eq!(agent.kind, SpanKind::Internal as i32);
    assert_eq!(attr(&agent.attributes, "gen_ai.operation.name").as_deref(), Some("invoke_agent"));
    // A finished run prints no id: its spans all name the same one.
    let run_id = attr(&agent.attributes, "gen_ai.conversation.id").unwrap_or_default();
    assert!(run_id.starts_with("run_"), "{run_id}");
    assert_eq!(attr(&agent.attributes, "gen_ai.provider.name").as_deref(), Some("openai"));

    // One chat span per turn: the failed first attempt is inside the first.
    let chats = named(&spans, "chat ");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    for chat in &chats {
        assert_eq!(chat.name, format!("chat {MODEL}"));
        assert_eq!(chat.kind, SpanKind::Client as i32);
        assert_eq!(chat.parent_span_id, agent.span_id, "chat spans are children of the run");
        assert_eq!(attr(&chat.attributes, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert_eq!(attr(&chat.attributes, "gen_ai.provider.name").as_deref(), Some("openai"));
        assert_eq!(attr(&chat.attributes, "gen_ai.request.model").as_deref(), Some(MODEL));
        assert_eq!(attr(&chat.attributes, "gen_ai.response.model").as_deref(), Some(MODEL));
        assert_eq!(attr(&chat.attributes, "gen_ai.conversation.id"), Some(run_id.clone()));
        assert_eq!(attr(&chat.attributes, "server.address").as_deref(), Some("127.0.0.1"));
        assert!(attr(&chat.attributes, "server.port").is_some_and(|p| p.parse::<u16>().is_ok()));
        assert!(attr(&chat.attributes, "error.type").is_none(), "a retried failure is not the call's error");
    }
    let first = chats.iter().min_by_key(|s| s.start_time_unix_nano).copied().unwrap_or(chats[0]);
    assert_eq!(attr(&first.attributes, "gen_ai.usage.input_tokens").as_deref(), Some("11"));
    assert_eq!(attr(&first.attributes, "gen_ai.usage.output_tokens").as_deref(), Some("7"));
    assert_eq!(attr(&first.attributes, "gen_ai.response.finish_reasons").as_deref(), Some("[\"tool_call\"]"));
    assert!(first.events.iter().any(|e| e.name == "nexus.retry"), "the retry is an event of its call: {first:#?}");

    let tools = named(&spans, "execute_tool ");
    assert_eq!(tools.len(), 2, "{spans:#?}");
    let mut ids = Vec::new();
    for tool in &tools {
        assert_eq!(tool.name, "execute_tool read");
        assert_eq!(tool.kind, SpanKind::Internal as i32);
        assert_eq!(tool.parent_span_id, agent.span_id, "parallel tools keep their parent");
        assert_eq!(attr(&tool.attributes, "gen_ai.tool.name").as_deref(), Some("read"));
        assert_eq!(attr(&tool.attributes, "gen_ai.tool.type").as_deref(), Some("function"));
        ids.push(attr(&tool.attributes, "gen_ai.tool.call.id").unwrap_or_default());
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 2, "each call has its own id");
    assert!(spans.iter().all(|s| s.trace_id == agent.trace_id), "one trace");

    // Capture is off: the secret is in the prompt, the system prompt, an
    // argument, both results and an error body, and nowhere in the export.
    let raw = collector.raw();
    assert!(!raw.is_empty());
    assert!(!raw.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()), "content leaked into the export");
    assert!(!raw.windows(KEY.len()).any(|w| w == KEY.as_bytes()), "the API key leaked into the export");
    let (resource, _) = &collector.spans()[0];
    assert_eq!(attr(resource, "service.name").as_deref(), Some("nexus-test"));
}

#[test]
fn captured_content_follows_the_conventions_schema() {
    let (collector, _, spans) = run_two_tools(true);
    let chats = named(&spans, "chat ");
    let last = chats.iter().max_by_key(|s| s.start_time_unix_nano).copied().unwrap_or(chats[0]);
    let input: Value = serde_json::from_str(&attr(&last.attributes, "gen_ai.input.messages").unwrap_or_default())
        .unwrap_or_else(|e| panic!("input messages are JSON: {e}"));
    assert_eq!(input[0]["role"], "user");
    assert_eq!(input[0]["parts"][0], json!({"type": "text", "content": format!("read both files {SECRET}")}));
    assert_eq!(input[1]["role"], "assistant");
    assert_eq!(input[1]["parts"][0]["type"], "tool_call");
    assert_eq!(input[1]["parts"][0]["name"], "read");
    let responses: Vec<&Value> = input.as_array().into_iter().flatten().filter(|m| m["role"] == "tool").collect();
    assert!(!responses.is_empty(), "{input}");
    assert_eq!(responses[0]["parts"][0]["type"], "tool_call_response");
    let output: Value = serde_json::from_str(&attr(&last.attributes, "gen_ai.output.messages").unwrap_or_default())
        .unwrap_or_else(|e| panic!("output messages are JSON: {e}"));
    assert_eq!(
        output,
        json!([{"role": "assistant", "parts": [{"type": "text", "content": "done"}], "finish_reason": "stop"}])
    );
    let agent = named(&spans, "invoke_agent")[0];
    let system: Value =
        serde_json::from_str(&attr(&agent.attributes, "gen_ai.system_instructions").unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(system, json!([{"type": "text", "content": format!("you are careful {SECRET}")}]));
    let tool = named(&spans, "execute_tool ")[0];
    assert!(attr(&tool.attributes, "gen_ai.tool.call.result").is_some_and(|r| r.contains(SECRET)));
    assert!(attr(&tool.attributes, "gen_ai.tool.call.arguments").is_some());
    let raw = collector.raw();
    assert!(!raw.windows(KEY.len()).any(|w| w == KEY.as_bytes()), "keys are never exported");
}

#[test]
fn a_streamed_call_span_ends_at_its_last_chunk_and_records_the_first() {
    let dir = scratch("otel-stream");
    // Two events, 400 ms of silence, then the rest of the stream.
    let stall = Fault::new(FaultKind::StallMidStream { after_events: 2, ms: 400 });
    let fake = fake(Scripts::new(KEY).model(MODEL, Script::new(vec![Turn::text("hello there").fault(stall)])));
    let collector = OtlpReceiver::start();
    let mut cmd = run_cmd(&dir, &fake, "openai", MODEL, &["--stream", "hi"]);
    otel(&mut cmd, &collector.endpoint());
    run(cmd).expect(0);
    let spans = collector.wait_for(Duration::from_secs(10), |s| named(s, "invoke_agent").len() == 1);
    let chat = named(&spans, "chat ")[0];
    assert_eq!(attr(&chat.attributes, "gen_ai.request.stream").as_deref(), Some("true"));
    let ttft: f64 = attr(&chat.attributes, "gen_ai.response.time_to_first_chunk")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no time to first chunk: {chat:#?}"));
    let span_secs = (chat.end_time_unix_nano - chat.start_time_unix_nano) as f64 / 1e9;
    assert!(span_secs >= 0.4, "the span covers the silence before the last chunk ({span_secs} s)");
    assert!(ttft < span_secs - 0.3, "the first chunk came before the silence ({ttft} of {span_secs} s)");
    let until = Instant::now() + Duration::from_secs(10);
    while collector.metrics().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let names: Vec<String> = collector.metrics().iter().map(|m| m.name.clone()).collect();
    assert!(names.iter().any(|n| n == "gen_ai.client.operation.time_to_first_chunk"), "{names:?}");
}

#[test]
fn a_resumed_run_continues_the_trace_of_the_suspended_one_with_a_link() {
    let dir = scratch("otel-resume");
    let questions = r#"{"questions":[{"question":"Go?"}]}"#;
    let scripts = Scripts::new(KEY)
        .model(MODEL, Script::new(vec![Turn::default().call("question", questions), Turn::text("went")]));
    let fake = fake(scripts);
    let collector = OtlpReceiver::start();
    let root = dir.to_string_lossy().into_owned();
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let args = ["--builtins=question", "--root", &root, "--store", "sqlite:runs.db", "--json", "go"];
    let mut cmd = run_cmd(&dir, &fake, "openai", MODEL, &args);
    otel(&mut cmd, &collector.endpoint());
    cmd.env("TRACEPARENT", parent);
    let result = run(cmd).expect(3).json();
    let run_id = result["runId"].as_str().unwrap_or_default().to_string();
    let question = result["pending"][0]["id"].as_str().unwrap_or_default().to_string();
    let answers = write_json(&dir, "answers.json", &json!({"id": question, "ok": true, "data": {"answer": "yes"}}));
    let first = collector.wait_for(Duration::from_secs(10), |s| named(s, "invoke_agent").len() == 1);
    let suspended = named(&first, "invoke_agent")[0].clone();
    assert_eq!(hex(&suspended.trace_id), "0af7651916cd43dd8448eb211c80319c", "the host's trace");
    assert_eq!(hex(&suspended.parent_span_id), "b7ad6b7169203331", "under the host's span");
    assert!(suspended.events.iter().any(|e| e.name == "nexus.run.suspended"));
    assert_eq!(attr(&suspended.attributes, "nexus.run.status").as_deref(), Some("pending"));

    // Another process resumes it, with no traceparent of its own.
    let mut cmd = nexus(&dir, Some("openai"));
    cmd.args(["resume", "--store", "sqlite:runs.db", "--run", &run_id, "--answer", &answers, "--json", "--root"])
        .arg(&dir);
    otel(&mut cmd, &collector.endpoint());
    run(cmd).expect(0);
    let spans = collector.wait_for(Duration::from_secs(10), |s| named(s, "invoke_agent").len() == 2);
    let segments = named(&spans, "invoke_agent");
    assert_eq!(segments.len(), 2, "{spans:#?}");
    let resumed = segments.iter().find(|s| s.span_id != suspended.span_id).copied().unwrap_or(segments[0]);
    assert_eq!(resumed.trace_id, suspended.trace_id, "one trace across the suspension");
    assert_eq!(resumed.parent_span_id, suspended.span_id, "parented on the stored context");
    assert_eq!(resumed.links.len(), 1);
    assert_eq!(resumed.links[0].span_id, suspended.span_id, "linked to the suspended segment");
    assert_eq!(attr(&resumed.attributes, "gen_ai.conversation.id"), Some(run_id));
    assert!(named(&spans, "chat ").iter().all(|c| c.trace_id == suspended.trace_id));
}

#[test]
fn a_dead_or_hanging_collector_changes_no_result() {
    let dir = scratch("otel-dead");
    let script = || Scripts::new(KEY).model(MODEL, Script::new(vec![Turn::text("fine")]));
    let provider = fake(script());
    let mut plain = run_cmd(&dir, &provider, "openai", MODEL, &["--json", "hi"]);
    plain.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT").env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let expected = run(plain).expect(0).json()["text"].clone();

    let refused = refused_endpoint();
    let hanging = OtlpReceiver::hanging();
    for endpoint in [refused, hanging.endpoint()] {
        let fake = fake(script());
        let mut cmd = run_cmd(&dir, &fake, "openai", MODEL, &["--json", "hi"]);
        otel(&mut cmd, &endpoint);
        let started = Instant::now();
        let out = run(cmd).expect(0);
        // The export timeout is 2 s; a collector that never answers must
        // not hold the process (the collector itself waits an hour).
        let took = started.elapsed();
        println!("{endpoint}: the run took {} ms with a 2000 ms export timeout", took.as_millis());
        assert!(took < Duration::from_secs(30), "the exit waited on the collector");
        assert_eq!(out.json()["text"], expected, "the same result");
        assert_eq!(out.stderr.matches("telemetry export").count(), 1, "one warning: {}", out.stderr);
    }
    assert!(hanging.requests() >= 1, "the hanging collector was asked");
}

#[test]
fn model_calls_are_measured_in_the_conventions_metrics() {
    let dir = scratch("otel-metrics");
    let fake = fake(Scripts::new(KEY).model(MODEL, Script::new(vec![Turn::text("fine").usage(13, 5)])));
    let collector = OtlpReceiver::start();
    let mut cmd = run_cmd(&dir, &fake, "openai", MODEL, &["hi"]);
    otel(&mut cmd, &collector.endpoint());
    run(cmd).expect(0);
    let until = Instant::now() + Duration::from_secs(10);
    while collector.metrics().is_empty() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let metrics = collector.metrics();
    let names: Vec<&str> = metrics.iter().map(|m| m.name.as_str()).collect();
    assert!(names.contains(&"gen_ai.client.operation.duration"), "{names:?}");
    let usage = metrics.iter().find(|m| m.name == "gen_ai.client.token.usage").unwrap_or_else(|| panic!("{names:?}"));
    use nexus_tests::otlp::proto::tonic::metrics::v1::metric::Data;
    let Some(Data::Histogram(h)) = &usage.data else { panic!("token usage is a histogram: {usage:#?}") };
    let sum_of = |kind: &str| {
        h.data_points
            .iter()
            .filter(|p| attr(&p.attributes, "gen_ai.token.type").as_deref() == Some(kind))
            .map(|p| p.sum.unwrap_or(0.0))
            .sum::<f64>()
    };
    assert_eq!(sum_of("input"), 13.0);
    assert_eq!(sum_of("output"), 5.0);
    assert_eq!(usage.unit, "{token}");
}

/// `nexus serve` continues a client's trace: a SERVER span under the
/// client's span, one CLIENT `chat` span per upstream attempt (a failover
/// is two siblings), each attempt's context sent upstream as `traceparent`,
/// and the trace id in the access log.
#[test]
fn the_gateway_continues_the_clients_trace_and_forwards_it_upstream() {
    gateway_traces(false);
}

/// The same, with the collector named by the configuration file's
/// `[telemetry]` table instead of the environment.
#[test]
fn the_gateway_takes_its_collector_from_the_configuration_file() {
    gateway_traces(true);
}

fn gateway_traces(from_file: bool) {
    use std::io::{BufRead, BufReader, Read, Write};
    let overloaded = Fault::new(FaultKind::Status { status: 529, retry_after: None, body: None }).times(u32::MAX);
    let provider = fake(
        Scripts::new(KEY)
            .model("m-529", Script::new(vec![Turn::text("no").fault(overloaded)]))
            .model("m-text", Script::new(vec![Turn::text("fine").usage(3, 5)])),
    );
    let collector = OtlpReceiver::start();
    let dir = scratch("otel-serve");
    let table = match from_file {
        true => format!("[telemetry]\nendpoint = \"{}/v1/traces\"\ntimeout = 2\n", collector.endpoint()),
        false => String::new(),
    };
    let config = format!(
        r#"
listen = "127.0.0.1:0"
{table}
[[upstreams]]
name = "anth"
style = "anthropic"
base_url = "{anth}"
api_key_env = "UPSTREAM_KEY"
[[upstreams]]
name = "oai"
style = "openai"
base_url = "{oai}"
api_key_env = "UPSTREAM_KEY"
[[routes]]
model = "smart"
upstreams = [{{ name = "anth", model = "m-529" }}, {{ name = "oai", model = "m-text" }}]
"#,
        anth = provider.base_url(nexus_tests::fake::Style::Anthropic),
        oai = provider.base_url(nexus_tests::fake::Style::OpenAi),
    );
    std::fs::write(dir.join("gateway.toml"), config).unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = nexus(&dir, None);
    cmd.args(["serve", "--config", "gateway.toml"])
        .env("UPSTREAM_KEY", KEY)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    otel(&mut cmd, &collector.endpoint());
    if from_file {
        cmd.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start nexus serve: {e}"));
    let mut line = String::new();
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    BufReader::new(stdout).read_line(&mut line).unwrap_or_else(|e| panic!("{e}"));
    let listening: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    let addr = listening["listening"].as_str().unwrap_or_default().to_string();

    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let body = json!({"model": "smart", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let mut s = std::net::TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\ntraceparent: 00-{client_trace}-{client_span}-01\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes())).unwrap_or_else(|e| panic!("{e}"));
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap_or_else(|e| panic!("{e}"));
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");

    let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    let spans = collector.wait_for(Duration::from_secs(10), |s| named(s, "chat ").len() == 2);

    let servers: Vec<&Span> = spans.iter().filter(|s| s.kind == SpanKind::Server as i32).collect();
    assert_eq!(servers.len(), 1, "{spans:#?}");
    let server = servers[0];
    assert_eq!(server.name, "POST /v1/chat/completions");
    assert_eq!(hex(&server.trace_id), client_trace, "the client's trace");
    assert_eq!(hex(&server.parent_span_id), client_span, "under the client's span");
    assert_eq!(attr(&server.attributes, "http.response.status_code").as_deref(), Some("200"));
    assert_eq!(attr(&server.attributes, "gen_ai.request.model").as_deref(), Some("smart"));
    assert_eq!(attr(&server.attributes, "gen_ai.usage.input_tokens").as_deref(), Some("3"));
    assert_eq!(attr(&server.attributes, "gen_ai.usage.output_tokens").as_deref(), Some("5"));
    let mut attempts = named(&spans, "chat ");
    attempts.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(attempts.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["chat m-529", "chat m-text"]);
    for a in &attempts {
        assert_eq!(a.kind, SpanKind::Client as i32);
        assert_eq!(a.parent_span_id, server.span_id, "attempts are siblings under the request");
    }
    assert_eq!(attr(&attempts[0].attributes, "error.type").as_deref(), Some("529"));
    assert_eq!(attr(&attempts[0].attributes, "gen_ai.provider.name").as_deref(), Some("anthropic"));
    assert_eq!(attr(&attempts[1].attributes, "gen_ai.provider.name").as_deref(), Some("openai"));
    assert!(attr(&attempts[1].attributes, "error.type").is_none());

    // Each upstream request carried its own attempt's context.
    let sent: Vec<String> = provider
        .requests()
        .iter()
        .filter_map(|r| r.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("traceparent")).map(|(_, v)| v.clone()))
        .collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    for (tp, attempt) in sent.iter().zip(&attempts) {
        assert_eq!(tp, &format!("00-{client_trace}-{}-01", hex(&attempt.span_id)));
    }
    let logged: Vec<Value> = log.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert!(logged.iter().any(|l| l["trace_id"] == client_trace), "the access log names the trace: {log}");
}

/// A run that fails over: one `chat` span for the call, the move to the
/// fallback an event on it, the answering upstream its response model.
#[test]
fn a_failover_is_an_event_of_its_call() {
    let dir = scratch("otel-failover");
    let mut refused = Turn::text("never");
    refused.faults = vec![Fault::status_retry_after(429, "60")];
    let primary = fake(Scripts::new(KEY).model("m-primary", Script::new(vec![refused])));
    let backup = fake(Scripts::new(KEY).model("m-backup", Script::new(vec![Turn::text("from the backup")])));
    let fallback = format!(
        "style=anthropic,base-url={},model=m-backup,api-key-env=BACKUP_KEY",
        backup.base_url(nexus_tests::fake::Style::Anthropic)
    );
    let collector = OtlpReceiver::start();
    let mut cmd = run_cmd(&dir, &primary, "openai", "m-primary", &["--fallback", &fallback, "--json", "hi"]);
    cmd.env("BACKUP_KEY", KEY);
    otel(&mut cmd, &collector.endpoint());
    assert_eq!(run(cmd).expect(0).json()["text"], "from the backup");
    let spans = collector.wait_for(Duration::from_secs(10), |s| named(s, "invoke_agent").len() == 1);
    let chats = named(&spans, "chat ");
    assert_eq!(chats.len(), 1, "{spans:#?}");
    let chat = chats[0];
    assert_eq!(attr(&chat.attributes, "gen_ai.request.model").as_deref(), Some("m-primary"));
    assert_eq!(attr(&chat.attributes, "gen_ai.response.model").as_deref(), Some("m-backup"));
    let event = chat.events.iter().find(|e| e.name == "nexus.failover").unwrap_or_else(|| panic!("{chat:#?}"));
    assert_eq!(attr(&event.attributes, "nexus.failover.from").as_deref(), Some("openai m-primary"));
    assert_eq!(attr(&event.attributes, "nexus.failover.to").as_deref(), Some("anthropic m-backup"));
    assert!(attr(&event.attributes, "nexus.reason").is_none(), "the reason is content");
}

/// `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`: the newest
/// shape (no `gen_ai.system`, the draft suspension event, the
/// `gen_ai.client.inference.*` metrics); the default keeps the shape
/// backends read today.
#[test]
fn the_latest_shape_is_opt_in() {
    let questions = r#"{"questions":[{"question":"Go?"}]}"#;
    for latest in [false, true] {
        let dir = scratch("otel-latest");
        let turns = vec![Turn::default().call("question", questions).usage(4, 2)];
        let provider = fake(Scripts::new(KEY).model(MODEL, Script::new(turns)));
        let collector = OtlpReceiver::start();
        let args = ["--builtins=question", "--state", "st.json", "--json", "go"];
        let mut cmd = run_cmd(&dir, &provider, "openai", MODEL, &args);
        otel(&mut cmd, &collector.endpoint());
        if latest {
            cmd.env("OTEL_SEMCONV_STABILITY_OPT_IN", "http,gen_ai_latest_experimental");
        }
        run(cmd).expect(3);
        let spans = collector.wait_for(Duration::from_secs(10), |s| named(s, "invoke_agent").len() == 1);
        let agent = named(&spans, "invoke_agent")[0];
        let chat = named(&spans, "chat ")[0];
        assert_eq!(attr(&chat.attributes, "gen_ai.system").is_some(), !latest, "latest={latest}");
        assert_eq!(attr(&chat.attributes, "gen_ai.provider.name").as_deref(), Some("openai"));
        let paused = if latest { "gen_ai.agent.paused" } else { "nexus.run.suspended" };
        assert!(agent.events.iter().any(|e| e.name == paused), "latest={latest}: {:?}", agent.events);
        // The state file carries the trace beside the machine's bytes.
        let state = std::fs::read(dir.join("st.json")).unwrap_or_else(|e| panic!("{e}"));
        let stored: Value = serde_json::from_slice(&state).unwrap_or_else(|e| panic!("{e}"));
        let traceparent = stored["trace"]["traceparent"].as_str().unwrap_or_default().to_string();
        assert_eq!(traceparent, format!("00-{}-{}-01", hex(&agent.trace_id), hex(&agent.span_id)));
        let until = Instant::now() + Duration::from_secs(10);
        while collector.metrics().is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let names: Vec<String> = collector.metrics().iter().map(|m| m.name.clone()).collect();
        let expected: &[&str] = if latest {
            &["gen_ai.client.inference.duration", "gen_ai.client.inference.usage.input_tokens"]
        } else {
            &["gen_ai.client.operation.duration", "gen_ai.client.token.usage"]
        };
        for name in expected {
            assert!(names.iter().any(|n| n == name), "latest={latest}: {name} in {names:?}");
        }
    }
}

/// A sub-agent's run is an `invoke_agent {name}` span under its parent's,
/// and its own tool calls are children of it.
#[test]
fn a_sub_agent_nests_under_its_run_and_its_calls_under_it() {
    let dir = scratch("otel-agents");
    let agents = dir.join("agents");
    std::fs::create_dir_all(&agents).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        agents.join("asker.md"),
        "---\nname: asker\ndescription: Asks what the traveller prefers\ntools: question\nmodel: child-model\n---\nAsk.\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let seat = r#"{"questions":[{"question":"Window or aisle?"}]}"#;
    let provider = fake(
        Scripts::new(KEY)
            .model(
                "parent-model",
                Script::new(vec![Turn::default().call_with_id("c_del", "asker", r#"{"prompt": "seat?"}"#)]),
            )
            .model("child-model", Script::new(vec![Turn::default().call_with_id("q_seat", "question", seat)])),
    );
    let collector = OtlpReceiver::start();
    let agents = agents.to_string_lossy().into_owned();
    let args = ["--builtins=question", "--agents", &agents, "--state", "st.json", "--json", "book"];
    let mut cmd = run_cmd(&dir, &provider, "openai", "parent-model", &args);
    otel(&mut cmd, &collector.endpoint());
    run(cmd).expect(3);
    let spans = collector.wait_for(Duration::from_secs(10), |s| named(s, "invoke_agent").len() == 2);
    let top = spans.iter().find(|s| s.name == "invoke_agent").unwrap_or_else(|| panic!("{spans:#?}"));
    let child = spans.iter().find(|s| s.name == "invoke_agent asker").unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(child.parent_span_id, top.span_id, "the sub-agent runs under its parent");
    assert_eq!(attr(&child.attributes, "gen_ai.agent.name").as_deref(), Some("asker"));
    assert_eq!(attr(&child.attributes, "nexus.agent.path").as_deref(), Some("c_del"));
    let question = named(&spans, "execute_tool question");
    assert_eq!(question.len(), 1, "{spans:#?}");
    assert_eq!(question[0].parent_span_id, child.span_id, "the sub-agent's call is under the sub-agent");
    assert_eq!(attr(&question[0].attributes, "nexus.tool.pending").as_deref(), Some("true"));
    // Each model call is under the run that made it, named by its own model.
    let parent_chat = named(&spans, "chat parent-model");
    let child_chat = named(&spans, "chat child-model");
    assert_eq!((parent_chat.len(), child_chat.len()), (1, 1), "{spans:#?}");
    assert_eq!(parent_chat[0].parent_span_id, top.span_id);
    assert_eq!(child_chat[0].parent_span_id, child.span_id, "the sub-agent's model call is under the sub-agent");
    assert_eq!(attr(&child_chat[0].attributes, "gen_ai.response.model").as_deref(), Some("child-model"));
}

/// A resume given the caller's own `traceparent` runs under the caller's
/// span and still links to the suspended segment; a malformed one is a
/// usage error.
#[test]
fn a_resume_under_a_callers_context_links_to_the_suspended_segment() {
    let dir = scratch("otel-caller");
    let questions = r#"{"questions":[{"question":"Go?"}]}"#;
    let provider = fake(
        Scripts::new(KEY)
            .model(MODEL, Script::new(vec![Turn::default().call("question", questions), Turn::text("went")])),
    );
    let collector = OtlpReceiver::start();
    let args = ["--builtins=question", "--state", "st.json", "--json", "go"];
    let mut cmd = run_cmd(&dir, &provider, "openai", MODEL, &args);
    otel(&mut cmd, &collector.endpoint());
    let question = run(cmd).expect(3).json()["pending"][0]["id"].as_str().unwrap_or_default().to_string();
    let answers = write_json(&dir, "answers.json", &json!({"id": question, "ok": true, "data": {"answer": "yes"}}));
    let first = collector.wait_for(Duration::from_secs(10), |s| named(s, "invoke_agent").len() == 1);
    let suspended = named(&first, "invoke_agent")[0].clone();

    let resume = |traceparent: &str| {
        let mut cmd = nexus(&dir, Some("openai"));
        cmd.args(["resume", "--state", "st.json", "--answer", &answers, "--json", "--traceparent", traceparent]);
        otel(&mut cmd, &collector.endpoint());
        run(cmd)
    };
    let refused = resume("00-not-a-trace").expect(2);
    assert!(refused.stderr.contains("--traceparent"), "{}", refused.stderr);

    let caller_trace = "11111111111111111111111111111111";
    let caller_span = "2222222222222222";
    resume(&format!("00-{caller_trace}-{caller_span}-01")).expect(0);
    let spans = collector.wait_for(Duration::from_secs(10), |s| named(s, "invoke_agent").len() == 2);
    let resumed = named(&spans, "invoke_agent").into_iter().find(|s| s.span_id != suspended.span_id);
    let resumed = resumed.unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(hex(&resumed.trace_id), caller_trace, "the caller's trace");
    assert_eq!(hex(&resumed.parent_span_id), caller_span, "under the caller's span");
    assert_eq!(resumed.links.len(), 1);
    assert_eq!((&resumed.links[0].trace_id, &resumed.links[0].span_id), (&suspended.trace_id, &suspended.span_id));
    assert_eq!(
        attr(&resumed.attributes, "gen_ai.conversation.id"),
        attr(&suspended.attributes, "gen_ai.conversation.id"),
        "both segments name the same run"
    );
}
