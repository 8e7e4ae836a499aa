//! What a `tools/call` through nexus's MCP client costs over a raw JSON-RPC
//! exchange with the same server, stdio and Streamable HTTP.
//!
//! ```text
//! eval "$(.ci/mcp-deps.sh)"
//! cargo bench -p nexus-drive --bench mcp_roundtrip
//! ```
//!
//! Both sides call the `echo` tool of tests/mcp/servers/kitchen.py (legacy
//! era, one session) the same number of times, alternating in pairs of
//! sittings; the raw side writes the request line (or POSTs it) and reads
//! the answer, nothing else. The difference is the client: the session
//! machine, the driver thread and its channels, the content mapping. Over
//! HTTP the raw side reads each SSE answer to the end of its body, as a
//! plain HTTP client does; nexus stops at the response event, so there the
//! raw side is not a floor. Timing numbers: see BENCHMARKS.md for how they
//! are taken (an idle machine).

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nexus_drive::mcp::{DriverOptions, ServerConfig, ServerHandle};
use nexus_proto::mcp::{CallRequest, Era};
use serde_json::{json, Value};

const CALLS: usize = 100;
const SITTINGS: usize = 3;

fn main() {
    let Ok(py) = std::env::var("NEXUS_MCP_PYTHON") else {
        eprintln!("NEXUS_MCP_PYTHON is not set: eval \"$(.ci/mcp-deps.sh)\" first");
        return;
    };
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/mcp/servers/kitchen.py");
    println!("| transport | raw JSON-RPC µs/call | nexus tools/call µs/call | added µs/call |");
    println!("|---|---|---|---|");
    let (mut raw, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..SITTINGS {
        raw.push(raw_stdio(&py, script));
        ours.push(nexus_call(ServerConfig::stdio("k", py.as_str(), &[script, "stdio"])));
    }
    report("stdio", &raw, &ours);
    let (mut child, url) = http_server(&py, script);
    let (mut raw, mut ours) = (Vec::new(), Vec::new());
    for _ in 0..SITTINGS {
        raw.push(raw_http(&url));
        ours.push(nexus_call(ServerConfig::http("k", url.as_str())));
    }
    report("Streamable HTTP (SSE answers)", &raw, &ours);
    let _ = child.kill();
    let _ = child.wait();
}

fn report(name: &str, raw: &[Duration], ours: &[Duration]) {
    let us = |d: &Duration| d.as_secs_f64() * 1e6 / CALLS as f64;
    let median = |v: &[Duration]| {
        let mut x: Vec<f64> = v.iter().map(us).collect();
        x.sort_by(|a, b| a.total_cmp(b));
        x[x.len() / 2]
    };
    let (r, o) = (median(raw), median(ours));
    println!("| {name} | {r:.0} | {o:.0} | {:.0} |", o - r);
}

fn init() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
}

fn call(id: usize) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "echo", "arguments": {"text": "x"}}})
}

fn raw_stdio(py: &str, script: &str) -> Duration {
    let mut child = Command::new(py)
        .args([script, "stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut exchange = |msg: &Value, answer: bool, line: &mut String| {
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
        if answer {
            line.clear();
            stdout.read_line(line).unwrap();
        }
    };
    exchange(&init(), true, &mut line);
    exchange(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), false, &mut line);
    exchange(&call(1), true, &mut line); // warm
    let start = Instant::now();
    for i in 0..CALLS {
        exchange(&call(i + 2), true, &mut line);
    }
    let took = start.elapsed();
    drop(stdin);
    let _ = child.wait();
    took
}

fn http_server(py: &str, script: &str) -> (std::process::Child, String) {
    let mut child =
        Command::new(py).args([script, "http"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().trim_start_matches("PORT ").to_string();
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

fn raw_http(url: &str) -> Duration {
    let agent = ureq::Agent::new_with_defaults();
    let post = |body: &Value, session: Option<&str>| {
        let mut req = agent
            .post(url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = session {
            req = req.header("mcp-session-id", s).header("mcp-protocol-version", "2025-11-25");
        }
        let mut resp = req.send(body.to_string()).unwrap();
        let session = resp.headers().get("mcp-session-id").and_then(|v| v.to_str().ok()).map(str::to_string);
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        (session, text)
    };
    let (session, _) = post(&init(), None);
    let session = session.expect("a session id");
    post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), Some(&session));
    post(&call(1), Some(&session));
    let start = Instant::now();
    for i in 0..CALLS {
        let (_, text) = post(&call(i + 2), Some(&session));
        assert!(text.contains("\"result\""), "{text}");
    }
    start.elapsed()
}

fn nexus_call(mut cfg: ServerConfig) -> Duration {
    cfg.era = Some(Era::Legacy);
    let h = ServerHandle::start(&cfg, &DriverOptions::default()).unwrap();
    let one = |i: usize| {
        let req =
            CallRequest { call: format!("c{i}"), tool: "echo".into(), arguments: json!({"text": "x"}), resume: None };
        futures_lite::future::block_on(h.call(req)).unwrap()
    };
    futures_lite::future::block_on(h.list_tools()).unwrap();
    one(0);
    let start = Instant::now();
    for i in 0..CALLS {
        one(i + 1);
    }
    start.elapsed()
}
