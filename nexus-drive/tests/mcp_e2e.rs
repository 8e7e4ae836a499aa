//! MCP servers' tools in real runs: a client on the fake provider (which
//! scripts the model's calls) runs the tools of real MCP servers — the
//! Python `mcp` test servers over stdio and Streamable HTTP, both eras —
//! through `McpTools`.
#![cfg(feature = "mcp")]

mod mcp_support;

use std::time::Duration;

use mcp_support::{kitchen_http, python, server};
use nexus_drive::mcp::{McpOptions, McpTools, ServerConfig};
use nexus_drive::{blocking::Client, Answer, ClientConfig, RunResult, Style};
use nexus_proto::mcp::Era;
use nexus_tests::fake::{FakeProvider, Script, Scripts, Turn};
use serde_json::{json, Value};

const MODEL: &str = "m-mcp";

fn kitchen_stdio(py: &str, name: &str, era: Option<Era>, extra: &[&str]) -> ServerConfig {
    let mut args = vec![server("kitchen.py"), "stdio".to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cfg = ServerConfig::stdio(name, py, &refs);
    cfg.era = era;
    cfg
}

fn http_cfg(name: &str, url: &str, era: Option<Era>) -> ServerConfig {
    let mut cfg = ServerConfig::http(name, url);
    cfg.era = era;
    cfg
}

fn start(configs: &[ServerConfig]) -> McpTools {
    let mcp = McpTools::start(configs, &McpOptions::default());
    assert!(mcp.errors().is_empty(), "{:?}", mcp.errors());
    mcp
}

fn client(fake: &FakeProvider, mcp: &McpTools, wait_for: Option<fn(nexus_drive::Request) -> Answer>) -> Client {
    let mut b = ClientConfig::builder(Style::OpenAi, MODEL)
        .base_url(fake.base_url(nexus_tests::fake::Style::OpenAi))
        .api_key(fake.api_key());
    for t in mcp.dyn_tools() {
        b = b.dyn_tool(t);
    }
    if let Some(f) = wait_for {
        b = b.wait_for(f);
    }
    Client::new(b.build().unwrap())
}

fn fake(turns: Vec<Turn>) -> FakeProvider {
    FakeProvider::start(Scripts::default().model(MODEL, Script::new(turns)))
}

fn run(fake: &FakeProvider, mcp: &McpTools) -> RunResult {
    client(fake, mcp, None).run("go").expect("run")
}

fn kitchen_tools_on_one_server(cfg: ServerConfig) {
    let p = &cfg.name.clone();
    let mcp = start(&[cfg]);
    let names: Vec<&str> = mcp.tools().iter().map(|t| t.exposed.as_str()).collect();
    for t in ["echo", "add", "all_content", "fail", "progress", "slow", "crash", "book"] {
        assert!(names.contains(&format!("{p}__{t}").as_str()), "{t} missing from {names:?}");
    }
    let f = fake(vec![
        Turn::default()
            .call(format!("{p}__echo"), r#"{"text": "hello"}"#)
            .call(format!("{p}__add"), r#"{"a": 2, "b": 40}"#)
            .call(format!("{p}__all_content"), "{}")
            .call(format!("{p}__fail"), r#"{"reason": "no fuel"}"#)
            .call(format!("{p}__progress"), r#"{"steps": 3}"#),
        Turn::text("done"),
    ]);
    let r = run(&f, &mcp);
    assert_eq!(r.text, "done");
    let out = |i: usize| (&r.tool_calls[i].output, r.tool_calls[i].is_error);
    // FastMCP-style servers send a structured copy too: the text comes first.
    assert!(out(0).0.starts_with("hello\n") && !out(0).1, "{:?}", out(0));
    assert!(out(0).0.contains(r#"{"result":"hello"}"#), "structuredContent is kept as JSON: {:?}", out(0));
    assert!(out(1).0.contains("42") && !out(1).1, "{:?}", out(1));
    let all = out(2).0;
    for piece in ["plain text", "image/png", "audio/wav", "file:///tmp/report.txt", "embedded note", "mem://blob"] {
        assert!(all.contains(piece), "{piece:?} missing from {all}");
    }
    assert!(!out(2).1);
    assert!(out(3).1 && out(3).0.contains("failed: no fuel"), "{:?}", out(3));
    assert!(out(4).0.contains("3 steps") && !out(4).1);
}

#[test]
fn every_content_type_error_and_progress_over_stdio_modern() {
    let Some(py) = python() else { return };
    kitchen_tools_on_one_server(kitchen_stdio(&py, "k", None, &["--page-size", "2"]));
}

#[test]
fn every_content_type_error_and_progress_over_stdio_legacy() {
    let Some(py) = python() else { return };
    kitchen_tools_on_one_server(kitchen_stdio(&py, "k", Some(Era::Legacy), &["--page-size", "3"]));
}

#[test]
fn every_content_type_error_and_progress_over_http_both_eras() {
    let Some(py) = python() else { return };
    let srv = kitchen_http(&py, &[]);
    kitchen_tools_on_one_server(http_cfg("h", &srv.url, None));
    kitchen_tools_on_one_server(http_cfg("l", &srv.url, Some(Era::Legacy)));
}

#[test]
fn a_slow_call_times_out_and_the_session_goes_on() {
    let Some(py) = python() else { return };
    for era in [None, Some(Era::Legacy)] {
        let mut cfg = kitchen_stdio(&py, "k", era, &[]);
        cfg.timeout_ms = Some(300);
        let mcp = start(&[cfg]);
        let f = fake(vec![
            Turn::default().call("k__slow", r#"{"seconds": 5}"#),
            Turn::default().call("k__echo", r#"{"text": "after"}"#),
            Turn::text("ok"),
        ]);
        let started = std::time::Instant::now();
        let r = run(&f, &mcp);
        assert!(r.tool_calls[0].is_error, "{:?}", r.tool_calls[0]);
        assert!(r.tool_calls[0].output.contains("timed out"), "{}", r.tool_calls[0].output);
        assert!(r.tool_calls[1].output.starts_with("after"), "{:?}", r.tool_calls[1]);
        assert!(started.elapsed() < Duration::from_secs(5), "the timeout did not cut the call short");
    }
}

#[test]
fn a_crash_fails_its_call_with_status_and_stderr_and_the_server_restarts() {
    let Some(py) = python() else { return };
    let mcp = start(&[kitchen_stdio(&py, "k", Some(Era::Legacy), &[])]);
    let f = fake(vec![
        Turn::default().call("k__crash", r#"{"code": 7}"#),
        Turn::default().call("k__echo", r#"{"text": "back"}"#),
        Turn::text("ok"),
    ]);
    let r = run(&f, &mcp);
    let crash = &r.tool_calls[0];
    assert!(crash.is_error, "{crash:?}");
    assert!(crash.output.contains("exited with status 7"), "{}", crash.output);
    assert!(crash.output.contains("about to crash"), "{}", crash.output);
    assert!(r.tool_calls[1].output.starts_with("back"), "the server was started again: {:?}", r.tool_calls[1]);
}

fn accept(req: nexus_drive::Request) -> Answer {
    let mut data = serde_json::Map::new();
    data.insert("confirm".into(), json!(true));
    data.insert("seats".into(), json!(4));
    Answer::ok(req.id, Some(data))
}

#[test]
fn legacy_elicitation_answered_in_process_through_wait_for() {
    let Some(py) = python() else { return };
    let srv = kitchen_http(&py, &[]);
    for cfg in [kitchen_stdio(&py, "k", Some(Era::Legacy), &[]), http_cfg("k", &srv.url, Some(Era::Legacy))] {
        let mcp = start(&[cfg]);
        let f = fake(vec![Turn::default().call("k__book", r#"{"city": "Oslo"}"#), Turn::text("ok")]);
        let r = client(&f, &mcp, Some(accept)).run("go").unwrap();
        assert!(r.tool_calls[0].output.starts_with("booked 4 in Oslo (none)"), "{:?}", r.tool_calls[0]);
    }
}

#[test]
fn modern_input_required_suspends_and_resumes_in_a_fresh_source() {
    let Some(py) = python() else { return };
    let srv = kitchen_http(&py, &[]);
    for cfg in [kitchen_stdio(&py, "k", None, &[]), http_cfg("k", &srv.url, None)] {
        let f = fake(vec![Turn::default().call("k__book", r#"{"city": "Rome"}"#), Turn::text("ok")]);
        let state = {
            let mcp = start(std::slice::from_ref(&cfg));
            let r = run(&f, &mcp);
            let s = r.suspended.expect("suspended on the question");
            assert_eq!(s.pending.len(), 1);
            let q = &s.pending[0];
            assert_eq!(q.kind, "input");
            assert_eq!(q.prompt, "Book a table in Rome?");
            let data = q.data.as_ref().unwrap();
            assert_eq!(data["server"], "k");
            assert_eq!(data["inputs"][0]["requestedSchema"]["required"], json!(["confirm"]));
            (s.state.clone(), q.clone())
        };
        // Everything above is gone (the stdio server was shut down); a new
        // source resumes the call from the saved state alone.
        let mcp = start(std::slice::from_ref(&cfg));
        let answer = accept(state.1);
        let r = client(&f, &mcp, None).resume(&state.0, vec![answer]).unwrap();
        assert!(r.tool_calls[0].output.starts_with("booked 4 in Rome (none)"), "{:?}", r.tool_calls[0]);
    }
}

#[test]
fn legacy_elicitation_without_an_answerer_ends_in_doubt_after_a_restart() {
    let Some(py) = python() else { return };
    let cfg = kitchen_stdio(&py, "k", Some(Era::Legacy), &[]);
    let f = fake(vec![Turn::default().call("k__book", r#"{"city": "Oslo"}"#), Turn::text("ok")]);
    let (state, q) = {
        let mcp = start(std::slice::from_ref(&cfg));
        let s = run(&f, &mcp).suspended.expect("suspended");
        (s.state.clone(), s.pending[0].clone())
    };
    let mcp = start(std::slice::from_ref(&cfg));
    let r = client(&f, &mcp, None).resume(&state, vec![accept(q)]).unwrap();
    let c = &r.tool_calls[0];
    assert!(c.is_error && c.output.contains("not re-run"), "{c:?}");
}

#[test]
fn tool_lists_page_change_and_filter() {
    let Some(py) = python() else { return };
    let mut cfg = kitchen_stdio(&py, "k", Some(Era::Legacy), &["--page-size", "1"]);
    cfg.deny = vec!["crash".into()];
    let mcp = start(std::slice::from_ref(&cfg));
    let names: Vec<String> = mcp.tools().iter().map(|t| t.exposed.clone()).collect();
    assert_eq!(names.len(), 12, "every page, minus the denied tool: {names:?}");
    assert!(!names.contains(&"k__crash".to_string()));
    // list_changed: the server adds a tool and says so; the next list has it.
    let f = fake(vec![Turn::default().call("k__add_tool", r#"{"name": "shout"}"#), Turn::text("ok")]);
    run(&f, &mcp);
    let handle = mcp.server("k").unwrap();
    let tools = futures_lite::future::block_on(handle.list_tools()).unwrap();
    assert!(tools.iter().any(|t| t.name == "shout"), "{:?}", tools.iter().map(|t| &t.name).collect::<Vec<_>>());

    let mut only = kitchen_stdio(&py, "o", None, &[]);
    only.allow = Some(vec!["echo".into()]);
    let mcp = start(&[only]);
    assert_eq!(mcp.tools().iter().map(|t| t.exposed.as_str()).collect::<Vec<_>>(), ["o__echo"]);
}

#[test]
fn drift_is_reported_for_changed_and_vanished_tools() {
    let Some(py) = python() else { return };
    let cfg = kitchen_stdio(&py, "k", None, &[]);
    let mcp = start(std::slice::from_ref(&cfg));
    let mut recorded = mcp.decls();
    assert!(mcp.drift(&recorded, std::slice::from_ref(&cfg)).is_empty());
    recorded[0].description = "something else".into();
    recorded.push(nexus_drive::ToolDecl::new("k__gone", "", json!({"type": "object"})));
    recorded.push(nexus_drive::ToolDecl::new("other_tool", "", json!({"type": "object"})));
    let drift: Vec<String> = mcp.drift(&recorded, &[cfg]).iter().map(|d| d.to_string()).collect();
    assert_eq!(drift.len(), 2, "{drift:?}");
    assert!(drift[0].contains("k__echo changed"), "{drift:?}");
    assert!(drift[1].contains("k__gone is no longer offered"), "{drift:?}");
}

#[test]
fn bad_servers_are_errors_for_themselves_while_the_others_serve() {
    let Some(py) = python() else { return };
    let bad = |name: &str, mode: &str| ServerConfig::stdio(name, &py, &[&server("bad.py"), mode]);
    let mut silent = bad("silent", "silent");
    silent.era = Some(Era::Legacy);
    let options = McpOptions { list_timeout: Duration::from_secs(15), ..McpOptions::default() };
    let mcp = McpTools::start(
        &[
            kitchen_stdio(&py, "good", None, &[]),
            silent,
            bad("garbage", "garbage"),
            bad("wrongver", "wrong-version"),
            bad("unknownid", "unknown-id"),
            ServerConfig::stdio("ghost", "/nonexistent/server", &[]),
        ],
        &options,
    );
    let errors: Vec<String> = mcp.errors().iter().map(|e| e.to_string()).collect();
    let servers: Vec<&str> = mcp.tools().iter().map(|t| t.server.as_str()).collect();
    assert!(servers.contains(&"good"), "{servers:?} / {errors:?}");
    assert!(errors.iter().any(|e| e.contains("\"silent\"")), "{errors:?}");
    assert!(errors.iter().any(|e| e.contains("\"ghost\"")), "{errors:?}");
    // A wrong jsonrpc version never counts as an answer.
    assert!(!servers.contains(&"wrongver"), "{errors:?}");
    // Garbage lines and answers to unknown ids are that server's errors; its real answers still count.
    assert!(servers.contains(&"garbage") && servers.contains(&"unknownid"), "{servers:?} / {errors:?}");
    let f = fake(vec![
        Turn::default()
            .call("garbage__ping_tool", "{}")
            .call("unknownid__ping_tool", "{}")
            .call("good__echo", r#"{"text": "fine"}"#),
        Turn::text("ok"),
    ]);
    let r = run(&f, &mcp);
    assert_eq!(r.tool_calls[0].output, "pong");
    assert_eq!(r.tool_calls[1].output, "pong");
    assert!(r.tool_calls[2].output.starts_with("fine"), "{:?}", r.tool_calls[2]);
    let noted = mcp.server_errors().join("\n");
    assert!(noted.contains("malformed JSON-RPC message"), "{noted}");
    assert!(noted.contains("987654"), "{noted}");
    let _: Value = json!(null);
}
