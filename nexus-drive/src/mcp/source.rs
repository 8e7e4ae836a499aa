//! The MCP tool source: every configured server's tools as ordinary tools
//! of the loop, named `{server}__{tool}`.
//!
//! ```no_run
//! use nexus_drive::mcp::{parse_servers, McpTools, McpOptions};
//! use nexus_drive::{blocking::Client, ClientConfig, Style};
//!
//! let text = std::fs::read_to_string("mcp.json")?;
//! let servers = parse_servers(&text, &|k| std::env::var(k).ok())?;
//! let mcp = McpTools::start(&servers, &McpOptions::default());
//! for w in mcp.warnings() {
//!     eprintln!("{w}");
//! }
//! let mut builder = ClientConfig::builder(Style::Anthropic, "claude-haiku-4-5");
//! for tool in mcp.dyn_tools() {
//!     builder = builder.dyn_tool(tool);
//! }
//! let result = Client::new(builder.build()?).run("What is on my calendar?")?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! A call runs on the server's driver (see [`super::server`]); what it comes
//! to maps onto the tool outcomes the loop knows:
//!
//! | MCP | the tool answers |
//! |---|---|
//! | a result (any content; `isError`) | `Result(ToolResult)` (an error result the model sees) |
//! | 2026 `input_required`, a `-32042` URL elicitation | `Pending(Request)` of kind `input` / `authorization`; the answer resumes the call in any process |
//! | a legacy `elicitation/create` during the call | `Pending(Request)`; answered in this process (`wait_for`) the call goes on; answered after a restart, the call is in doubt and not re-run |
//! | the server died, timed out, refused | an error result naming the server, with its stderr tail |

use std::collections::BTreeMap;

use nexus_proto::mcp::{expose, CallRequest, McpTool, Resume};
use nexus_proto::{Request, ToolDecl, ToolResult};
use serde_json::Value;

use super::config::ServerConfig;
use super::server::{CallOutcome, DriverOptions, ServerHandle};
use super::McpError;
use crate::tool::{DynTool, ToolContext, ToolError, ToolOutcome};

/// How a source behaves.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// Transport and session options for every server.
    pub driver: DriverOptions,
    /// Warn when a server exposes more tools than this (default 64).
    pub warn_tools: usize,
    /// Warn when a server's schemas together exceed this many bytes (default 64 KiB).
    pub warn_schema_bytes: usize,
    /// How long the first `tools/list` of each server may take (default 60 s).
    pub list_timeout: std::time::Duration,
}

impl Default for McpOptions {
    fn default() -> Self {
        McpOptions {
            driver: DriverOptions::default(),
            warn_tools: 64,
            warn_schema_bytes: 64 * 1024,
            list_timeout: std::time::Duration::from_secs(60),
        }
    }
}

/// One exposed tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ExposedTool {
    /// The server (its config key).
    pub server: String,
    /// The name the model sees: `{server}__{tool}`, sanitized.
    pub exposed: String,
    /// The tool as the server declared it (raw schemas kept).
    pub tool: McpTool,
    /// The digest of its declaration ([`nexus_proto::mcp::digest`]).
    pub digest: String,
}

impl ExposedTool {
    /// The declaration the model sees.
    pub fn decl(&self) -> ToolDecl {
        self.tool.to_decl(&self.exposed)
    }
}

/// How a tool recorded in a run differs from what its server declares now.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolDrift {
    /// The server no longer declares it (or the server is not configured).
    Vanished {
        /// The exposed name.
        name: String,
    },
    /// What the model is shown of it changed ([`ToolDecl::digest`]:
    /// description, input schema): the model chose it for what it meant then.
    Changed {
        /// The exposed name.
        name: String,
    },
}

impl std::fmt::Display for ToolDrift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolDrift::Vanished { name } => write!(f, "MCP tool {name} is no longer offered by its server"),
            ToolDrift::Changed { name } => {
                write!(f, "MCP tool {name} changed (what the model is shown of it) since the run began")
            }
        }
    }
}

/// The tools of a set of MCP servers.
pub struct McpTools {
    servers: Vec<ServerHandle>,
    tools: Vec<ExposedTool>,
    warnings: Vec<String>,
    errors: Vec<McpError>,
}

impl std::fmt::Debug for McpTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTools")
            .field("servers", &self.servers.iter().map(ServerHandle::name).collect::<Vec<_>>())
            .field("tools", &self.tools.iter().map(|t| &t.exposed).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl McpTools {
    /// Starts every server and lists its tools (all servers at once). A
    /// server that cannot be started or listed is left out and reported in
    /// [`errors`](Self::errors); the others are served.
    pub fn start(configs: &[ServerConfig], options: &McpOptions) -> McpTools {
        let mut errors = Vec::new();
        let mut started = Vec::new();
        for cfg in configs {
            match ServerHandle::start(cfg, &options.driver) {
                Ok(h) => started.push((cfg.clone(), h)),
                Err(e) => errors.push(e),
            }
        }
        // List every server concurrently, each under the list timeout.
        let lists: Vec<_> = futures_lite::future::block_on(async {
            let mut futures = Vec::new();
            for (_, h) in &started {
                let h = h.clone();
                let timeout = options.list_timeout;
                futures.push(smol::spawn(async move {
                    futures_lite::future::or(h.list_tools(), async {
                        smol::Timer::after(timeout).await;
                        Err(McpError::Timeout {
                            server: h.name().to_string(),
                            what: "tools/list".into(),
                            ms: timeout.as_millis() as u64,
                        })
                    })
                    .await
                }));
            }
            let mut out = Vec::new();
            for f in futures {
                out.push(f.await);
            }
            out
        });
        let mut servers = Vec::new();
        let mut warnings = Vec::new();
        let mut pairs: Vec<(String, McpTool)> = Vec::new();
        for ((cfg, handle), listed) in started.into_iter().zip(lists) {
            match listed {
                Ok(tools) => {
                    let kept: Vec<McpTool> = tools.into_iter().filter(|t| cfg.permits(&t.name)).collect();
                    let bytes: usize = kept.iter().map(|t| t.input_schema.to_string().len()).sum();
                    if kept.len() > options.warn_tools || bytes > options.warn_schema_bytes {
                        warnings.push(format!(
                            "MCP server {:?} exposes {} tools ({} bytes of schemas); consider an \"allow\" list",
                            cfg.name,
                            kept.len(),
                            bytes
                        ));
                    }
                    pairs.extend(kept.into_iter().map(|t| (cfg.name.clone(), t)));
                    for e in handle.errors() {
                        warnings.push(e);
                    }
                    servers.push(handle);
                }
                Err(e) => {
                    let extra = handle.errors();
                    errors.push(match (e, extra.last()) {
                        (McpError::Protocol { server, message }, Some(more)) if !message.contains(more.as_str()) => {
                            McpError::Protocol { server, message: format!("{message} ({more})") }
                        }
                        (e, _) => e,
                    });
                }
            }
        }
        let names = expose(pairs.iter().map(|(s, t)| (s.as_str(), t.name.as_str())));
        let tools = match names {
            Ok(names) => pairs
                .into_iter()
                .zip(names)
                .map(|((server, tool), exposed)| {
                    let digest = tool.digest();
                    ExposedTool { server, exposed, tool, digest }
                })
                .collect(),
            Err(collision) => {
                errors.push(McpError::Config(collision.to_string()));
                Vec::new()
            }
        };
        McpTools { servers, tools, warnings, errors }
    }

    /// The exposed tools, server by server in configuration order, each in its server's order.
    pub fn tools(&self) -> &[ExposedTool] {
        &self.tools
    }

    /// Their declarations.
    pub fn decls(&self) -> Vec<ToolDecl> {
        self.tools.iter().map(ExposedTool::decl).collect()
    }

    /// Warnings (very large tool lists, tools a server declared badly).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Servers left out, and why.
    pub fn errors(&self) -> &[McpError] {
        &self.errors
    }

    /// Errors servers caused outside any call since they started.
    pub fn server_errors(&self) -> Vec<String> {
        self.servers.iter().flat_map(ServerHandle::errors).collect()
    }

    /// The driver of the server `name`.
    pub fn server(&self, name: &str) -> Option<&ServerHandle> {
        self.servers.iter().find(|s| s.name() == name)
    }

    /// Every tool as a [`DynTool`] to add to a client.
    pub fn dyn_tools(&self) -> Vec<DynTool> {
        self.tools
            .iter()
            .filter_map(|t| {
                let handle = self.server(&t.server)?.clone();
                let tool_name = t.tool.name.clone();
                let decl = t.decl();
                Some(DynTool::new_async(
                    &decl.name,
                    decl.description.clone(),
                    decl.input_schema.clone(),
                    move |args, ctx| {
                        let handle = handle.clone();
                        let tool_name = tool_name.clone();
                        async move { call(&handle, &tool_name, args, &ctx).await }
                    },
                ))
            })
            .collect()
    }

    /// Compares the MCP tools a run recorded (its state's declarations)
    /// with what the servers declare now. Only names of configured servers'
    /// shape (`{server}__…`) are considered; other tools are not MCP's.
    pub fn drift(&self, recorded: &[ToolDecl], servers: &[ServerConfig]) -> Vec<ToolDrift> {
        let now: BTreeMap<&str, ToolDecl> = self.tools.iter().map(|t| (t.exposed.as_str(), t.decl())).collect();
        let mut out = Vec::new();
        for decl in recorded {
            let ours = servers.iter().any(|s| decl.name.starts_with(&format!("{}__", s.name)));
            if !ours {
                continue;
            }
            match now.get(decl.name.as_str()) {
                None => out.push(ToolDrift::Vanished { name: decl.name.clone() }),
                // The core's digest of the declaration: whatever the model is shown.
                Some(current) if current.digest() != decl.digest() => {
                    out.push(ToolDrift::Changed { name: decl.name.clone() })
                }
                Some(_) => {}
            }
        }
        out
    }
}

/// One call of an MCP tool, first time or retry after a suspension.
async fn call(
    handle: &ServerHandle,
    tool: &str,
    args: Value,
    ctx: &ToolContext,
) -> Result<ToolOutcome<Value>, ToolError> {
    let arguments = match args {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    let mut resume = match (ctx.answer(), ctx.request()) {
        (Some(answer), Some(request)) => Some(Resume { request: request.clone(), answer: answer.clone() }),
        _ => None,
    };
    // The authorization seam: an answered `authorization` request of this
    // server's authorizer is exchanged for tokens, then the call is made
    // afresh (it never reached the server).
    if let Some(r) =
        resume.as_ref().filter(|r| r.request.kind == "authorization" && r.request.id.starts_with("authorize-"))
    {
        if let Err(e) = handle.complete_authorization(&r.answer) {
            return Ok(ToolOutcome::Result(ToolResult::error(e.to_string())));
        }
        resume = None;
    }
    let live = resume.as_ref().is_some_and(|r| is_live(&r.request));
    let req = CallRequest { call: ctx.call_id().to_string(), tool: tool.to_string(), arguments, resume };
    let outcome = match (&req.resume, live) {
        (Some(r), true) => handle.answer(ctx.call_id(), r.answer.clone(), req.clone()).await,
        _ => handle.call(req).await,
    };
    match outcome {
        Ok(CallOutcome::Done(result)) => Ok(ToolOutcome::Result(result)),
        Ok(CallOutcome::Pending(request)) => Ok(ToolOutcome::Pending(request)),
        Err(e) => Ok(ToolOutcome::Result(ToolResult::error(e.to_string()))),
    }
}

/// Whether a request is a legacy live elicitation (asked during a call in this process).
fn is_live(request: &Request) -> bool {
    request.data.as_ref().and_then(|d| d.get("live")).and_then(Value::as_bool) == Some(true)
}
