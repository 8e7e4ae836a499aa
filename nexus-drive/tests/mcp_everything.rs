//! The reference server nobody here wrote: npm
//! `@modelcontextprotocol/server-everything`, over stdio and Streamable
//! HTTP, its tools run through real runs (the blocking and the async
//! driver), its elicitation answered in-process.
#![cfg(feature = "mcp")]

mod mcp_support;

use std::time::{Duration, Instant};

use mcp_support::{everything, node, HttpServer};
use nexus_drive::asynchronous::AsyncClient;
use nexus_drive::mcp::{McpOptions, McpTools, ServerConfig};
use nexus_drive::{blocking::Client, Answer, ClientConfig, Request, RunResult, Style};
use nexus_tests::fake::{FakeProvider, Script, Scripts, Turn};
use serde_json::json;

const MODEL: &str = "m-everything";

fn stdio_config() -> Option<ServerConfig> {
    let (node, pkg) = (node()?, everything()?);
    Some(ServerConfig::stdio("every", node, &[&format!("{pkg}/dist/index.js"), "stdio"]))
}

/// server-everything's Streamable HTTP transport on a free loopback port.
fn http_server() -> Option<HttpServer> {
    let (node, pkg) = (node()?, everything()?);
    let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let child = std::process::Command::new(node)
        .arg(format!("{pkg}/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server-everything did not listen on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(HttpServer { child, url: format!("http://127.0.0.1:{port}/mcp") })
}

fn fake(turns: Vec<Turn>) -> FakeProvider {
    FakeProvider::start(Scripts::default().model(MODEL, Script::new(turns)))
}

fn builder(f: &FakeProvider, mcp: &McpTools) -> nexus_drive::ClientBuilder {
    let mut b = ClientConfig::builder(Style::Anthropic, MODEL)
        .base_url(f.base_url(nexus_tests::fake::Style::Anthropic))
        .api_key(f.api_key());
    for t in mcp.dyn_tools() {
        b = b.dyn_tool(t);
    }
    b
}

fn start(cfg: &ServerConfig) -> McpTools {
    let mcp = McpTools::start(std::slice::from_ref(cfg), &McpOptions::default());
    assert!(mcp.errors().is_empty(), "{:?}", mcp.errors());
    mcp
}

fn turns() -> Vec<Turn> {
    vec![
        Turn::default()
            .call("every__echo", r#"{"message": "hello there"}"#)
            .call("every__get-sum", r#"{"a": 20, "b": 22}"#)
            .call("every__get-tiny-image", "{}")
            .call("every__get-structured-content", r#"{"location": "New York"}"#)
            .call("every__trigger-long-running-operation", r#"{"duration": 1, "steps": 3}"#)
            .call("every__get-resource-links", r#"{"count": 2}"#),
        Turn::text("done"),
    ]
}

fn check(r: &RunResult) {
    assert_eq!(r.text, "done");
    let out = |i: usize| {
        let c = &r.tool_calls[i];
        assert!(!c.is_error, "{c:?}");
        c.output.as_str()
    };
    assert!(out(0).contains("Echo: hello there"), "{}", out(0));
    assert!(out(1).contains("42"), "{}", out(1));
    assert!(out(2).contains("image/png"), "{}", out(2));
    assert!(out(3).contains(r#""temperature":"#) && out(3).contains("conditions"), "{}", out(3));
    assert!(out(4).contains("Long running operation completed"), "{}", out(4));
    assert!(out(5).contains("resource"), "{}", out(5));
}

fn answer_form(req: Request) -> Answer {
    let mut data = serde_json::Map::new();
    data.insert("name".into(), json!("Ada Lovelace"));
    data.insert("check".into(), json!(true));
    Answer::ok(req.id, Some(data))
}

#[test]
fn stdio_tools_through_both_drivers() {
    let Some(cfg) = stdio_config() else { return };
    let mcp = start(&cfg);
    let f = fake(turns());
    check(&Client::new(builder(&f, &mcp).build().unwrap()).run("go").unwrap());
    let f = fake(turns());
    let client = AsyncClient::new(builder(&f, &mcp).build().unwrap());
    check(&smol::block_on(client.run("go")).unwrap());
}

#[test]
fn stdio_server_sees_only_the_safe_environment() {
    let Some(cfg) = stdio_config() else { return };
    std::env::set_var("NEXUS_EVERYTHING_SECRET", "must-not-leak");
    let mcp = start(&cfg);
    let f = fake(vec![Turn::default().call("every__get-env", "{}"), Turn::text("ok")]);
    let r = Client::new(builder(&f, &mcp).build().unwrap()).run("go").unwrap();
    let env = &r.tool_calls[0].output;
    assert!(env.contains("PATH"), "{env}");
    assert!(!env.contains("must-not-leak"), "the host environment leaked: {env}");
}

#[test]
fn http_tools_and_elicitation_answered_in_process() {
    let Some(srv) = http_server() else { return };
    let cfg = ServerConfig::http("every", &srv.url);
    let mcp = start(&cfg);
    let f = fake(turns());
    check(&Client::new(builder(&f, &mcp).build().unwrap()).run("go").unwrap());
    assert!(
        mcp.tools().iter().any(|t| t.exposed == "every__trigger-elicitation-request"),
        "declared elicitation brings the elicitation tool"
    );
    let f = fake(vec![Turn::default().call("every__trigger-elicitation-request", "{}"), Turn::text("ok")]);
    let r = Client::new(builder(&f, &mcp).wait_for(answer_form).build().unwrap()).run("go").unwrap();
    let c = &r.tool_calls[0];
    assert!(!c.is_error && c.output.contains("Ada Lovelace"), "{c:?}");
    // Defaults of the requested schema fill what the answer left out.
    assert!(c.output.contains("It was a dark and stormy night."), "{c:?}");
}

#[test]
fn stdio_elicitation_answered_in_process() {
    let Some(cfg) = stdio_config() else { return };
    let mcp = start(&cfg);
    let f = fake(vec![Turn::default().call("every__trigger-elicitation-request", "{}"), Turn::text("ok")]);
    let r = Client::new(builder(&f, &mcp).wait_for(answer_form).build().unwrap()).run("go").unwrap();
    let c = &r.tool_calls[0];
    assert!(!c.is_error && c.output.contains("Ada Lovelace"), "{c:?}");
}
