//! An MCP server's tools in the loop.
//!
//! ```text
//! cargo run -p nexus-drive --example mcp_tools
//! ```
//!
//! The example is its own MCP server: started with `--serve-mcp`, it speaks
//! MCP on stdin/stdout (one JSON-RPC message per line) and offers a
//! `forecast` tool. The host part starts it as a stdio server named
//! `weather` — in its own process group, stderr captured — lists its tools,
//! which the model then sees as `weather__forecast`, and runs the loop.
//! Any `{"mcpServers": …}` entry works the same way
//! ([`nexus_drive::mcp::parse_servers`]), stdio or Streamable HTTP.
//!
//! Offline (no API key set) a scripted model calls the tool; with a key, a
//! real one decides.

mod support;

use std::io::{BufRead, Write};

use nexus_drive::blocking::Client;
use nexus_drive::mcp::{McpOptions, McpTools, ServerConfig};
use nexus_drive::proto::mcp::jsonrpc::{decode, error_response, response, Message};
use nexus_drive::StreamEvent;
use nexus_tests::fake::{Script, Turn};
use serde_json::{json, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().any(|a| a == "--serve-mcp") {
        serve();
        return Ok(());
    }
    // The host: this same program, as an MCP server over stdio.
    let exe = std::env::current_exe()?;
    let server = ServerConfig::stdio("weather", exe.to_string_lossy(), &["--serve-mcp"]);
    let mcp = McpTools::start(&[server], &McpOptions::default());
    if let Some(e) = mcp.errors().first() {
        return Err(e.to_string().into());
    }
    for t in mcp.tools() {
        println!("tool {} ({}/{}): {}", t.exposed, t.server, t.tool.name, t.tool.description.as_deref().unwrap_or(""));
    }

    let provider = support::Provider::pick(Script::new(vec![
        Turn::default().call("weather__forecast", r#"{"city": "Lisbon"}"#),
        Turn::text("Lisbon: 21°C and sunny."),
    ]));
    let mut builder = provider.builder().system("Answer weather questions with the tools. Be brief.").on_event(|e| {
        if let StreamEvent::ToolResult { name, result, .. } = e {
            println!("result of {name}: {}", result.output.replace('\n', " | "));
        }
    });
    for tool in mcp.dyn_tools() {
        builder = builder.dyn_tool(tool);
    }
    let result = Client::new(builder.build()?).run("What is the weather in Lisbon?")?;
    println!("status: {:?}, turns: {}", result.status, result.turns);
    println!("answer: {}", result.text);
    Ok(())
}

/// A minimal MCP server (legacy era: `initialize`, then requests), enough
/// for the example: one tool with text and structured content.
fn serve() {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(Message::Request { id, method, params }) = decode(line.as_bytes(), 1 << 20) else {
            continue; // notifications and anything else need no answer
        };
        let reply = match method.as_str() {
            "initialize" => response(
                &id,
                json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "weather-example", "version": "1.0.0"}
                }),
            ),
            "tools/list" => response(
                &id,
                json!({"tools": [{
                    "name": "forecast",
                    "description": "Today's forecast for a city.",
                    "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
                }]}),
            ),
            "tools/call" => {
                let city = params.as_ref().and_then(|p| p["arguments"]["city"].as_str()).unwrap_or("?").to_string();
                eprintln!("forecast asked for {city}"); // stderr: captured by the host, never shown
                response(
                    &id,
                    json!({
                        "content": [{"type": "text", "text": format!("{city}: 21°C, sunny")}],
                        "structuredContent": {"city": city, "celsius": 21, "sky": "sunny"}
                    }),
                )
            }
            "ping" => response(&id, Value::Object(Default::default())),
            // server/discover (the modern probe) and anything else: not here.
            _ => error_response(&id, -32601, "Method not found"),
        };
        let _ = stdout.write_all(&reply);
        let _ = stdout.write_all(b"\n");
        let _ = stdout.flush();
    }
}
