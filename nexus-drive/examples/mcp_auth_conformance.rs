//! The client the MCP conformance suite's `auth/*` scenarios run: it
//! connects to the protected server (last argument) through
//! [`Authorizer`], lists the tools and calls each one. The scenarios'
//! authorization servers authorize without a person, so the person's step is
//! taken by a [`FollowingBrowser`]; a pre-registered client comes from
//! `MCP_CONFORMANCE_CONTEXT` (`client_id`, `client_secret`).
//!
//! `.ci/mcp-auth-conformance.sh` runs it.

use std::sync::Arc;
use std::time::Duration;

use nexus_drive::mcp::auth::{Authorizer, FollowingBrowser, MemoryTokenStore, OAuthClient};
use nexus_drive::mcp::{CallOutcome, DriverOptions, ServerConfig, ServerHandle};
use nexus_proto::mcp::{CallRequest, Era, MODERN_VERSION};
use serde_json::{json, Map, Value};

/// The Client ID Metadata Document URL the suite expects.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

fn main() {
    let url = match std::env::args().next_back() {
        Some(u) if u.starts_with("http") => u,
        _ => {
            eprintln!("usage: mcp_auth_conformance SERVER_URL");
            std::process::exit(2);
        }
    };
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|c| serde_json::from_str(&c).ok())
        .unwrap_or(Value::Null);
    let mut auth = Authorizer::new(Arc::new(MemoryTokenStore::new()))
        .with_browser(Arc::new(FollowingBrowser::new("http://127.0.0.1:8976/callback")))
        .with_client_metadata_url(CLIENT_METADATA_URL);
    if let Some(id) = context.get("client_id").and_then(Value::as_str) {
        let secret = context.get("client_secret").and_then(Value::as_str).map(str::to_string);
        auth = auth.with_client(
            "conformance",
            OAuthClient { client_id: id.to_string(), client_secret: secret, ..OAuthClient::default() },
        );
    }
    let mut cfg = ServerConfig::http("conformance", url);
    cfg.era = match std::env::var("MCP_CONFORMANCE_PROTOCOL_VERSION").ok().as_deref() {
        Some(MODERN_VERSION) => Some(Era::Modern),
        Some(_) => Some(Era::Legacy),
        None => None,
    };
    cfg.timeout_ms = Some(20_000);
    let options = DriverOptions { auth: Some(Arc::new(auth)), ..DriverOptions::default() };
    let outcome = futures_lite::future::block_on(futures_lite::future::or(run(&cfg, &options), async {
        smol::Timer::after(Duration::from_secs(25)).await;
        Err("did not finish within 25 s".to_string())
    }));
    if let Err(e) = outcome {
        eprintln!("scenario {scenario:?}: {e}");
        std::process::exit(1);
    }
}

async fn run(cfg: &ServerConfig, options: &DriverOptions) -> Result<(), String> {
    let server = ServerHandle::start(cfg, options).map_err(|e| e.to_string())?;
    let listed = server.list_tools().await;
    for e in server.errors() {
        eprintln!("server: {e}");
    }
    let tools = listed.map_err(|e| e.to_string())?;
    for (i, tool) in tools.iter().enumerate() {
        let req = CallRequest {
            call: format!("call_{i}"),
            tool: tool.name.clone(),
            arguments: Value::Object(Map::new()),
            resume: None,
        };
        match server.call(req).await.map_err(|e| e.to_string())? {
            CallOutcome::Done(r) if r.is_error => return Err(format!("{}: {}", tool.name, r.output)),
            CallOutcome::Done(r) => eprintln!("{}: {}", tool.name, json!(r.output)),
            CallOutcome::Pending(r) => return Err(format!("{}: still needs {} ({})", tool.name, r.kind, r.prompt)),
        }
    }
    Ok(())
}
