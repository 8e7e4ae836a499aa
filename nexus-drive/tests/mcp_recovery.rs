//! How the MCP client recovers, against real servers over real stdio and
//! HTTP: a protocol version refused by `initialize`, a probe answered after
//! its timeout, response streams cut or lost mid-call (reattached in the
//! legacy era, in doubt otherwise — never replayed), and a 2026 cancel that
//! closes the call's stream.
#![cfg(feature = "mcp")]

mod mcp_support;

use std::time::{Duration, Instant};

use futures_lite::future::block_on;
use mcp_support::{kitchen_http, python, server};
use nexus_drive::mcp::{CallOutcome, DriverOptions, ServerConfig, ServerHandle};
use nexus_proto::mcp::{CallRequest, Era};
use nexus_proto::ToolResult;
use serde_json::{json, Value};

fn call(h: &ServerHandle, key: &str, tool: &str, arguments: Value) -> ToolResult {
    let req = CallRequest { call: key.into(), tool: tool.into(), arguments, resume: None };
    match block_on(h.call(req)).expect("the driver runs") {
        CallOutcome::Done(r) => r,
        CallOutcome::Pending(r) => panic!("unexpected suspension: {r:?}"),
    }
}

/// The text the model sees first (a structured copy may follow it).
fn text(r: &ToolResult) -> &str {
    assert!(!r.is_error, "{r:?}");
    r.output.lines().next().unwrap_or_default()
}

fn start(cfg: &ServerConfig, options: &DriverOptions) -> ServerHandle {
    ServerHandle::start(cfg, options).expect("the driver starts")
}

fn http(name: &str, url: &str, era: Era) -> ServerConfig {
    let mut cfg = ServerConfig::http(name, url);
    cfg.era = Some(era);
    cfg
}

const IN_DOUBT: &str = "may or may not have completed and was not re-run";

#[test]
fn initialize_refused_with_32022_is_retried_with_the_version_the_server_speaks() {
    let Some(py) = python() else { return };
    let cfg = ServerConfig::stdio("picky", &py, &[&server("bad.py"), "version-picky"]);
    let h = start(&cfg, &DriverOptions::default());
    let tools = block_on(h.list_tools()).expect("listed after the second initialize");
    assert_eq!(tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["ping_tool"]);
    assert_eq!(text(&call(&h, "c1", "ping_tool", json!({}))), "pong");
    assert!(h.errors().is_empty(), "{:?}", h.errors());
}

#[test]
fn a_probe_answered_after_its_timeout_switches_the_session_to_the_modern_era() {
    let Some(py) = python() else { return };
    // The server answers the probe after 11 s (longer than any probe
    // timeout a driver imposed before) and then refuses anything but 2026
    // requests on that connection, initialize included.
    let cfg = ServerConfig::stdio("slow", &py, &[&server("bad.py"), "slow-modern", "11"]);
    let options = DriverOptions { stdio_probe_timeout: Duration::from_millis(300), ..DriverOptions::default() };
    let h = start(&cfg, &options);
    let tools = block_on(h.list_tools()).expect("listed in the modern era");
    assert_eq!(tools.len(), 1);
    assert_eq!(text(&call(&h, "c1", "ping_tool", json!({}))), "pong");
}

/// A server that dies under an HTTP call breaks the call's response
/// stream: the call is in doubt at once (not when its timer runs out), and
/// is not sent again.
fn dying_http_server(era: Era) {
    let Some(py) = python() else { return };
    let srv = kitchen_http(&py, &[]);
    let mut cfg = http("k", &srv.url, era);
    cfg.timeout_ms = Some(120_000);
    let h = start(&cfg, &DriverOptions::default());
    assert_eq!(text(&call(&h, "c0", "echo", json!({"text": "up"}))), "up");
    let began = Instant::now();
    let r = call(&h, "c1", "crash", json!({"code": 3}));
    assert!(r.is_error && r.output.contains(IN_DOUBT), "{r:?}");
    assert!(began.elapsed() < Duration::from_secs(60), "took {:?}", began.elapsed());
}

#[test]
fn a_server_dying_under_a_legacy_http_call_leaves_it_in_doubt_at_once() {
    dying_http_server(Era::Legacy);
}

#[test]
fn a_server_dying_under_a_modern_http_call_leaves_it_in_doubt_at_once() {
    dying_http_server(Era::Modern);
}

#[test]
fn a_legacy_stream_cut_mid_call_is_reattached_from_its_last_event_id() {
    let Some(py) = python() else { return };
    let srv = kitchen_http(&py, &["--event-store"]);
    let h = start(&http("k", &srv.url, Era::Legacy), &DriverOptions::default());
    assert_eq!(text(&call(&h, "c1", "cut", json!({"seconds": 0.5}))), "survived the cut");
    // Once more on the same session: nothing left over from the first.
    assert_eq!(text(&call(&h, "c2", "cut", json!({"seconds": 0.1}))), "survived the cut");
}

#[test]
fn a_modern_http_call_that_times_out_has_its_stream_closed_which_cancels_it() {
    let Some(py) = python() else { return };
    let srv = kitchen_http(&py, &[]);
    let marker =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-mcp-watch-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let mut cfg = http("k", &srv.url, Era::Modern);
    cfg.timeout_ms = Some(1_000);
    let h = start(&cfg, &DriverOptions::default());
    let r = call(&h, "c1", "watch", json!({"seconds": 30, "marker": marker.to_string_lossy()}));
    assert!(r.is_error && r.output.contains("timed out"), "{r:?}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the server never saw the call cancelled");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "cancelled");
    let _ = std::fs::remove_file(&marker);
}
