//! MCP servers' tools as tools of the loop.
//!
//! The protocol itself (JSON-RPC, both eras, `tools/list`, `tools/call`,
//! elicitation as suspension, content → result) is the sans-IO machine
//! `nexus_proto::mcp`; this module only moves its bytes:
//!
//! * [`stdio`]: a server as a child process in its own process group, with
//!   stderr in a bounded ring buffer and a shutdown that leaves nothing
//!   running;
//! * [`http`]: Streamable HTTP (JSON or SSE responses, sessions, `404` →
//!   re-initialize, `retry:` and `Last-Event-ID` when the session asks to
//!   reattach, streams closed on cancel), with the 2024-11-05
//!   HTTP+SSE transport as the fallback;
//! * [`config`]: the common `{"mcpServers": {…}}` file, `${VAR}` expansion.
//!
//! Both transports deliver what a server sends as [`Inbound`] items on one
//! channel, which the blocking driver waits on with a deadline and the async
//! driver awaits.

pub mod auth;
mod cancel_io;
pub mod config;
pub mod http;
pub mod server;
pub mod source;
pub mod stdio;

use thiserror::Error;

pub use config::{parse_servers, ServerConfig, Transport};
pub use server::{CallOutcome, DriverOptions, ServerHandle};
pub use source::{ExposedTool, McpOptions, McpTools, ToolDrift};

/// One thing a server's link delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inbound {
    /// One JSON-RPC message, as received (the machine decodes it).
    Message(Vec<u8>),
    /// HTTP: a message that came on the SSE response stream of the request
    /// with this `id` (a server request there belongs to that call).
    Streamed {
        /// The message.
        message: Vec<u8>,
        /// The id of the request whose stream carried it.
        request: serde_json::Value,
    },
    /// HTTP: the server assigned this `Mcp-Session-Id` (delivered before the
    /// response that carried it).
    SessionId(String),
    /// HTTP: how a background `POST` ([`http::HttpLink::post_in_background`]) ended.
    Posted {
        /// The id of the request posted (`None` for notifications and responses).
        request: Option<serde_json::Value>,
        /// The outcome.
        outcome: Result<http::PostOutcome, McpError>,
    },
    /// HTTP: the SSE stream carrying the response to `request` ended
    /// before that response (fed to the session as `Input::StreamLost`).
    StreamLost {
        /// The id of the request.
        request: serde_json::Value,
        /// The id of the last event read on the stream, if the server gave ids.
        last_event_id: Option<String>,
    },
    /// Bytes that cannot be a message (over the size cap, a broken SSE
    /// event): an error for this server; the link goes on.
    Malformed(String),
    /// The server is gone (a stdio process exited, an HTTP stream ended for
    /// good). Calls in flight on it have failed.
    Exited(ServerExit),
}

/// How a server went away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerExit {
    /// `exited with status 7`, `killed by signal 9`, …
    pub status: String,
    /// The end of what it wrote to stderr (stdio servers).
    pub stderr_tail: String,
}

/// An MCP failure, for one server. The run and other servers go on.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum McpError {
    /// A configuration file or entry is wrong.
    #[error("MCP configuration: {0}")]
    Config(String),
    /// The server could not be started.
    #[error("MCP server {server:?} could not be started: {message}")]
    Spawn {
        /// The server.
        server: String,
        /// Why.
        message: String,
    },
    /// The server is gone (exited, closed its pipes, its endpoint refused).
    #[error("MCP server {server:?} {message}{}", tail_suffix(.stderr_tail))]
    Closed {
        /// The server.
        server: String,
        /// What happened (`exited with status 7`).
        message: String,
        /// The end of its stderr.
        stderr_tail: String,
    },
    /// The server broke the protocol or the transport's rules.
    #[error("MCP server {server:?}: {message}")]
    Protocol {
        /// The server.
        server: String,
        /// What was wrong.
        message: String,
    },
    /// An HTTP exchange failed.
    #[error("MCP server {server:?}: HTTP {message}")]
    Http {
        /// The server.
        server: String,
        /// The status or transport failure, with the body's start.
        message: String,
    },
    /// No answer in time.
    #[error("MCP server {server:?} did not answer {what} within {ms} ms")]
    Timeout {
        /// The server.
        server: String,
        /// What was waited for.
        what: String,
        /// How long.
        ms: u64,
    },
}

fn tail_suffix(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("; its stderr ends with:\n{tail}")
    }
}
