//! The client the official MCP conformance suite drives
//! (`@modelcontextprotocol/conformance`, run by `.ci/mcp-conformance.sh`).
//!
//! The suite starts a mock server per scenario and runs this program with
//! the server's URL as the last argument, the scenario in
//! `MCP_CONFORMANCE_SCENARIO`, the protocol revision in
//! `MCP_CONFORMANCE_PROTOCOL_VERSION` and optional tool calls in
//! `MCP_CONFORMANCE_CONTEXT`. It does what any nexus host does with a
//! server: connect, list the tools, call them (the context's calls, or each
//! tool with arguments made from its schema), and answer every question a
//! call asks by accepting the form's defaults. The suite's own checks judge
//! the wire; this program only exits non-zero when something failed.

use std::time::Duration;

use nexus_drive::mcp::{CallOutcome, DriverOptions, ServerConfig, ServerHandle};
use nexus_drive::proto::mcp::{CallRequest, Era, McpTool, Resume, MODERN_VERSION};
use nexus_drive::proto::{Answer, Request};
use serde_json::{json, Map, Value};

/// Questions one call may ask before the client gives up.
const MAX_ROUNDS: usize = 8;

fn main() {
    let url = match std::env::args().next_back() {
        Some(u) if u.starts_with("http") => u,
        _ => {
            eprintln!("usage: mcp_conformance SERVER_URL (the suite passes it last)");
            std::process::exit(2);
        }
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let version = std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").ok();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    // The suite says which revision the scenario is for; without it the
    // client probes, as a host does.
    let mut cfg = ServerConfig::http("conformance", url);
    cfg.era = match version.as_deref() {
        Some(MODERN_VERSION) => Some(Era::Modern),
        Some(_) => Some(Era::Legacy),
        None => None,
    };
    cfg.timeout_ms = Some(20_000);
    let code = match futures_lite::future::block_on(futures_lite::future::or(run(&cfg, &context), async {
        smol::Timer::after(Duration::from_secs(25)).await;
        Err(format!("scenario {scenario:?} did not finish within 25 s"))
    })) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("scenario {scenario:?}: {e}");
            1
        }
    };
    std::process::exit(code);
}

async fn run(cfg: &ServerConfig, context: &Value) -> Result<(), String> {
    let server = ServerHandle::start(cfg, &with_authorizer(context)).map_err(|e| e.to_string())?;
    // A server may refuse the first request (an unsupported-version error
    // names what it supports); a host tries the listing once more.
    let tools = match server.list_tools().await {
        Ok(t) => t,
        Err(e) => {
            eprintln!("tools/list failed once ({e}); trying again");
            server.list_tools().await.map_err(|e| e.to_string())?
        }
    };
    eprintln!("{} tools: {:?}", tools.len(), tools.iter().map(|t| &t.name).collect::<Vec<_>>());
    let calls: Vec<(String, Value)> = match context.get("toolCalls").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => list
            .iter()
            .filter_map(|c| {
                let name = c.get("name")?.as_str()?.to_string();
                Some((name, c.get("arguments").cloned().unwrap_or_else(|| json!({}))))
            })
            .collect(),
        _ => tools.iter().map(|t| (t.name.clone(), arguments_for(t, &tools))).collect(),
    };
    let mut failures = Vec::new();
    for (i, (tool, arguments)) in calls.into_iter().enumerate() {
        let key = format!("call_{i}");
        match call(&server, &key, &tool, arguments).await {
            Ok(output) => eprintln!("{tool}: {output}"),
            Err(e) => failures.push(format!("{tool}: {e}")),
        }
    }
    for e in server.errors() {
        eprintln!("server error: {e}");
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    }
}

/// One call, answering every question it asks with the form's defaults.
async fn call(server: &ServerHandle, key: &str, tool: &str, arguments: Value) -> Result<String, String> {
    let mut req = CallRequest { call: key.to_string(), tool: tool.to_string(), arguments, resume: None };
    for _ in 0..MAX_ROUNDS {
        let outcome = match &req.resume {
            Some(r) if is_live(&r.request) => server.answer(key, r.answer.clone(), req.clone()).await,
            _ => server.call(req.clone()).await,
        }
        .map_err(|e| e.to_string())?;
        match outcome {
            CallOutcome::Done(result) => return Ok(result.output),
            CallOutcome::Pending(request) => {
                let answer = Answer::ok(request.id.clone(), Some(Map::new()));
                req.resume = Some(Resume { request, answer });
            }
        }
    }
    Err(format!("still asking after {MAX_ROUNDS} answers"))
}

fn is_live(request: &Request) -> bool {
    request.data.as_ref().and_then(|d| d.get("live")).and_then(Value::as_bool) == Some(true)
}

/// Arguments for the required properties, from their declared types. A
/// required object named `schema` gets another tool's input schema exactly
/// as listed (a server that echoes it can see nothing was lost on the way).
fn arguments_for(tool: &McpTool, all: &[McpTool]) -> Value {
    let schema = &tool.input_schema;
    let required: Vec<&str> =
        schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    let mut args = Map::new();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            if !required.contains(&name.as_str()) {
                continue;
            }
            let other = all.iter().find(|t| t.name != tool.name);
            let value = match prop.get("type").and_then(Value::as_str) {
                Some("object") if name == "schema" && other.is_some() => {
                    other.map(|t| t.input_schema.clone()).unwrap_or_default()
                }
                Some("number") => json!(1.0),
                Some("integer") => json!(1),
                Some("boolean") => json!(true),
                Some("array") => json!([]),
                Some("object") => json!({}),
                _ => json!("test"),
            };
            args.insert(name.clone(), value);
        }
    }
    Value::Object(args)
}

/// OAuth for the `auth/*` scenarios: their authorization servers approve at
/// once, so following the authorization URL's redirects is the person's
/// step; a pre-registered client comes from the context, and the suite's
/// Client ID Metadata Document URL is this client's.
fn with_authorizer(context: &Value) -> DriverOptions {
    use nexus_drive::mcp::auth::{Authorizer, FollowingBrowser, MemoryTokenStore, OAuthClient};
    use std::sync::Arc;
    let mut auth = Authorizer::new(Arc::new(MemoryTokenStore::new()))
        .with_browser(Arc::new(FollowingBrowser::new("http://127.0.0.1:8976/callback")))
        .with_client_metadata_url("https://conformance-test.local/client-metadata.json");
    if let Some(id) = context.get("client_id").and_then(Value::as_str) {
        let secret = context.get("client_secret").and_then(Value::as_str).map(str::to_string);
        let client = OAuthClient { client_id: id.to_string(), client_secret: secret, ..OAuthClient::default() };
        auth = auth.with_client("conformance", client);
    }
    DriverOptions { auth: Some(Arc::new(auth)), ..DriverOptions::default() }
}
