//! The MCP transports against real processes and real HTTP servers (the
//! Python `mcp` test servers in tests/mcp/servers), at the message level.
#![cfg(feature = "mcp")]

mod mcp_support;

use std::collections::BTreeMap;
use std::time::Duration;

use mcp_support::{alive, kitchen_http, our_zombie, python, server};
use nexus_drive::mcp::http::{HttpLink, PostOutcome};
use nexus_drive::mcp::stdio::{StdioLink, StdioOptions, STDERR_RING_BYTES};
use nexus_drive::mcp::Inbound;
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(20);

fn spawn(py: &str, args: &[&str], options: &StdioOptions) -> StdioLink {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    StdioLink::spawn("t", py, &args, &BTreeMap::new(), None, options).expect("spawn")
}

fn req(id: u64, method: &str, params: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap()
}

fn init_params() -> Value {
    json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}})
}

/// The next message on a stdio link that answers `id`, skipping notifications.
fn answer(link: &StdioLink, id: u64) -> Value {
    loop {
        match link.recv_timeout(WAIT).expect("an answer in time") {
            Inbound::Message(bytes) => {
                let v: Value = serde_json::from_slice(&bytes).expect("JSON");
                if v["id"] == json!(id) && v.get("method").is_none() {
                    return v;
                }
            }
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

fn initialize(link: &StdioLink) {
    link.send(&req(1, "initialize", init_params())).unwrap();
    let v = answer(link, 1);
    assert_eq!(v["result"]["protocolVersion"], "2025-11-25", "{v}");
    link.send(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
}

#[test]
fn stdio_round_trip_with_pages() {
    let Some(py) = python() else { return };
    let link = spawn(&py, &[&server("kitchen.py"), "stdio", "--page-size", "2"], &StdioOptions::default());
    initialize(&link);
    link.send(&req(2, "tools/list", json!({}))).unwrap();
    let page = answer(&link, 2);
    assert_eq!(page["result"]["tools"].as_array().unwrap().len(), 2);
    assert_eq!(page["result"]["nextCursor"], "2");
    link.send(&req(3, "tools/call", json!({"name": "echo", "arguments": {"text": "hi"}}))).unwrap();
    assert_eq!(answer(&link, 3)["result"]["content"][0]["text"], "hi");
    assert!(link.shutdown().contains("exited with status 0"), "a server exits on EOF");
}

#[test]
fn stderr_goes_to_a_bounded_ring_and_its_tail_to_errors() {
    let Some(py) = python() else { return };
    let link = spawn(&py, &[&server("kitchen.py"), "stdio"], &StdioOptions::default());
    initialize(&link);
    link.send(&req(2, "tools/call", json!({"name": "spam", "arguments": {"lines": 3000}}))).unwrap();
    assert_eq!(answer(&link, 2)["result"]["content"][0]["text"], "3000 lines");
    // The reader thread may still be draining the pipe.
    let deadline = std::time::Instant::now() + WAIT;
    while !link.stderr_tail(200).contains("spam line 2999") {
        assert!(std::time::Instant::now() < deadline, "the last stderr line never arrived");
        std::thread::sleep(Duration::from_millis(10));
    }
    let all = link.stderr_tail(usize::MAX);
    assert!(all.len() <= STDERR_RING_BYTES, "{} bytes kept", all.len());
    assert!(!all.contains("spam line 0 "), "the ring keeps only the tail");
    // The session is unharmed by the noise.
    link.send(&req(3, "tools/call", json!({"name": "echo", "arguments": {"text": "still here"}}))).unwrap();
    assert_eq!(answer(&link, 3)["result"]["content"][0]["text"], "still here");
}

#[test]
fn a_crash_mid_call_reports_status_and_stderr_tail() {
    let Some(py) = python() else { return };
    let link = spawn(&py, &[&server("kitchen.py"), "stdio"], &StdioOptions::default());
    initialize(&link);
    link.send(&req(2, "tools/call", json!({"name": "crash", "arguments": {"code": 7}}))).unwrap();
    let exit = match link.recv_timeout(WAIT).expect("the exit in time") {
        Inbound::Exited(exit) => exit,
        Inbound::Message(m) => panic!("no answer expected: {}", String::from_utf8_lossy(&m)),
        other => panic!("{other:?}"),
    };
    assert_eq!(exit.status, "exited with status 7");
    assert!(exit.stderr_tail.contains("about to crash"), "{exit:?}");
    assert!(link.has_exited());
    assert!(!our_zombie(link.pid()));
    // Nothing more arrives: the channel is closed, not hanging.
    assert_eq!(link.recv_timeout(Duration::from_millis(200)), None);
}

#[test]
fn shutdown_leaves_no_grandchild_and_no_zombie() {
    let Some(py) = python() else { return };
    let link = spawn(&py, &[&server("kitchen.py"), "stdio"], &StdioOptions::default());
    initialize(&link);
    link.send(&req(2, "tools/call", json!({"name": "spawn_child", "arguments": {}}))).unwrap();
    let grandchild: u32 = answer(&link, 2)["result"]["content"][0]["text"].as_str().unwrap().parse().unwrap();
    assert!(alive(grandchild), "the grandchild runs while the server does");
    let server_pid = link.pid();
    link.shutdown();
    assert!(!our_zombie(server_pid), "the server was reaped");
    let deadline = std::time::Instant::now() + WAIT;
    while alive(grandchild) {
        assert!(std::time::Instant::now() < deadline, "grandchild {grandchild} outlived its server");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_server_ignoring_eof_and_sigterm_is_killed() {
    let Some(py) = python() else { return };
    let stubborn = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: time.sleep(1)";
    let options = StdioOptions { grace: Duration::from_millis(200), ..StdioOptions::default() };
    let link = spawn(&py, &["-c", stubborn], &options);
    std::thread::sleep(Duration::from_millis(300)); // let it install the handler
    assert_eq!(link.shutdown(), "killed by signal 9");
    assert!(!alive(link.pid()) && !our_zombie(link.pid()));
}

#[test]
fn bad_lines_are_delivered_for_the_protocol_to_judge_and_oversized_ones_are_capped() {
    let Some(py) = python() else { return };
    let options = StdioOptions { max_message_bytes: 1024 * 1024, ..StdioOptions::default() };
    let link = spawn(&py, &[&server("bad.py"), "oversized"], &options);
    initialize(&link);
    link.send(&req(2, "tools/list", json!({}))).unwrap();
    match link.recv_timeout(WAIT) {
        Some(Inbound::Malformed(why)) => assert!(why.contains("1048576-byte limit"), "{why}"),
        other => panic!("expected the cap to trip, got {other:?}"),
    }
    // The stream goes on after the dropped line.
    link.send(&req(3, "ping", json!({}))).unwrap();
    assert_eq!(answer(&link, 3)["result"], json!({}));

    let link = spawn(&py, &[&server("bad.py"), "garbage"], &StdioOptions::default());
    initialize(&link);
    link.send(&req(2, "ping", json!({}))).unwrap();
    assert_eq!(link.recv_timeout(WAIT), Some(Inbound::Message(b"this is not JSON".to_vec())));
    assert_eq!(answer(&link, 2)["result"], json!({}));
}

#[test]
fn a_missing_program_is_a_spawn_error() {
    let err =
        StdioLink::spawn("ghost", "/nonexistent/mcp-server", &[], &BTreeMap::new(), None, &StdioOptions::default())
            .unwrap_err();
    assert!(err.to_string().contains("\"ghost\" could not be started"), "{err}");
}

#[test]
fn the_child_gets_only_the_safe_environment_and_its_own() {
    let Some(py) = python() else { return };
    std::env::set_var("NEXUS_TEST_SECRET_KEY", "do-not-leak");
    let mut env = BTreeMap::new();
    env.insert("GIVEN".to_string(), "yes".to_string());
    let code = "import os, json; print(json.dumps({'given': os.environ.get('GIVEN'), 'secret': os.environ.get('NEXUS_TEST_SECRET_KEY'), 'path': bool(os.environ.get('PATH'))}), flush=True)";
    let link = StdioLink::spawn("env", &py, &["-c".into(), code.into()], &env, None, &StdioOptions::default()).unwrap();
    let Some(Inbound::Message(line)) = link.recv_timeout(WAIT) else { panic!("no line") };
    let v: Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(v, json!({"given": "yes", "secret": null, "path": true}));
}

// ---------------------------------------------------------------- HTTP

fn http_answer(link: &HttpLink, id: u64) -> Value {
    loop {
        match link.recv_timeout(WAIT).expect("an answer in time") {
            Inbound::SessionId(_) => {}
            Inbound::Message(bytes) | Inbound::Streamed { message: bytes, .. } => {
                let v: Value = serde_json::from_slice(&bytes).expect("JSON");
                if v["id"] == json!(id) && v.get("method").is_none() {
                    return v;
                }
            }
            other => panic!("expected a message, got {other:?}"),
        }
    }
}

fn http_round_trips(extra: &[&str]) {
    let Some(py) = python() else { return };
    let srv = kitchen_http(&py, extra);
    let link = HttpLink::new("k", &srv.url, vec![("X-Static".into(), "v".into())], Duration::from_secs(5));
    let out = link.post(&req(1, "initialize", init_params()), &[]).unwrap();
    assert!(matches!(out, PostOutcome::Delivered | PostOutcome::Streaming), "{out:?}");
    assert_eq!(http_answer(&link, 1)["result"]["protocolVersion"], "2025-11-25");
    let session = link.session_id().expect("a session id");
    link.set_protocol_version(Some("2025-11-25".into()));
    let out = link.post(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, &[]).unwrap();
    assert_eq!(out, PostOutcome::Accepted);
    link.post(
        &req(2, "tools/call", json!({"name": "progress", "arguments": {"steps": 2}, "_meta": {"progressToken": "p"}})),
        &[],
    )
    .unwrap();
    let mut progress = 0;
    loop {
        let m = match link.recv_timeout(WAIT) {
            Some(Inbound::Message(m)) => m,
            Some(Inbound::Streamed { message, request }) => {
                assert_eq!(request, json!(2), "messages on a call's stream are tagged with its id");
                message
            }
            other => panic!("stream ended: {other:?}"),
        };
        let v: Value = serde_json::from_slice(&m).unwrap();
        if v["method"] == "notifications/progress" {
            progress += 1;
        } else {
            assert_eq!(v["result"]["content"][0]["text"], "2 steps");
            break;
        }
    }
    if !extra.contains(&"--json-response") {
        assert_eq!(progress, 2, "progress arrives on the call's SSE stream before its result");
    }
    // The session expires (ended behind our back): the next request says so.
    let agent = ureq::Agent::new_with_defaults();
    let del = ureq::http::Request::builder()
        .method("DELETE")
        .uri(srv.url.as_str())
        .header("mcp-session-id", session.as_str())
        .header("mcp-protocol-version", "2025-11-25")
        .body(())
        .unwrap();
    assert!(agent.run(del).unwrap().status().is_success());
    let out = link.post(&req(3, "tools/list", json!({})), &[]).unwrap();
    assert_eq!(out, PostOutcome::SessionExpired);
    assert_eq!(link.session_id(), None);
    // Re-initialized, the link works again.
    link.post(&req(4, "initialize", init_params()), &[]).unwrap();
    http_answer(&link, 4);
    assert!(link.session_id().is_some_and(|s| s != session));
}

#[test]
fn http_sse_responses_sessions_and_expiry() {
    http_round_trips(&[]);
}

#[test]
fn http_json_responses_sessions_and_expiry() {
    http_round_trips(&["--json-response"]);
}

#[test]
fn http_refusals_deliver_json_rpc_errors_and_report_the_status() {
    let Some(py) = python() else { return };
    let srv = kitchen_http(&py, &[]);
    let link = HttpLink::new("k", &srv.url, vec![], Duration::from_secs(5));
    // A request before initialize: the server refuses it.
    let out = link.post(&req(9, "tools/list", json!({})), &[]).unwrap();
    let PostOutcome::Rejected { status, .. } = out else { panic!("{out:?}") };
    assert!((400..500).contains(&status), "{status}");
    let unreachable = HttpLink::new("gone", "http://127.0.0.1:9/mcp", vec![], Duration::from_secs(2));
    let err = unreachable.post(&req(1, "initialize", init_params()), &[]).unwrap_err();
    assert!(err.to_string().starts_with("MCP server \"gone\": HTTP POST"), "{err}");
}
