//! The session's inputs, outputs, events and configuration.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::ProtocolError;
use super::jsonrpc::RequestId;
use super::tools::McpTool;
use crate::suspend::{Answer, Request, ToolResult};
use crate::time::Timestamp;

/// The newest (stateless) protocol revision.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The `initialize`-era revisions this client speaks, newest first.
pub const LEGACY_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// Which wire era a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Era {
    /// 2026-07-28 and later: `_meta` on every request, `server/discover`, multi round-trip requests.
    Modern,
    /// 2025-11-25 and older: `initialize`, sessions, server→client requests.
    Legacy,
}

/// How the bytes travel; it changes what the session may rely on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportKind {
    /// A child process, one message per line.
    Stdio,
    /// Streamable HTTP (or the old HTTP+SSE): tools whose `x-mcp-header`
    /// annotations are invalid are left out, as the 2026 transport requires.
    Http,
}

/// What a server said about itself, kept so the next connection skips the
/// probe: export it with [`Session::discovery`](super::Session::discovery),
/// store it (it holds no secret), give it back in [`SessionConfig::discovery`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    /// The format of this record (1).
    #[serde(default = "one")]
    pub format_version: u32,
    /// The era.
    pub era: Era,
    /// The protocol version in use.
    pub version: String,
    /// The server's capabilities, as sent.
    #[serde(default)]
    pub capabilities: Value,
    /// `serverInfo`, as sent (display only; never trusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_info: Option<Value>,
    /// The server's instructions for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

fn one() -> u32 {
    1
}

/// How one server's session behaves. Start from [`SessionConfig::new`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SessionConfig {
    /// The server's key in the host's config: names its tools (`{server}__{tool}`) and its requests.
    pub server: String,
    /// The transport.
    pub transport: TransportKind,
    /// `clientInfo.name`.
    pub client_name: String,
    /// `clientInfo.version`.
    pub client_version: String,
    /// Declare elicitation (form and URL) to the server. Only when the host can answer it.
    pub elicitation: bool,
    /// Force an era instead of probing (`None`: probe modern, fall back to legacy).
    pub era: Option<Era>,
    /// What an earlier connection found (skips the probe).
    pub discovery: Option<Discovery>,
    /// A `tools/call` fails after this long without a response (default 60 s).
    pub call_timeout_ms: u64,
    /// Progress notifications extend a call's timeout, never past this (default 10 min).
    pub call_max_ms: u64,
    /// Timeout of protocol requests: `initialize`, `tools/list` (default 30 s).
    pub request_timeout_ms: u64,
    /// How long the modern probe waits before trying legacy (default 10 s).
    pub probe_timeout_ms: u64,
    /// The largest message accepted (default 16 MiB).
    pub max_message_bytes: usize,
    /// `tools/list` pages before giving up (default 1000).
    pub max_list_pages: u32,
    /// Input rounds of one call before it fails (default 8).
    pub max_input_rounds: u32,
}

impl SessionConfig {
    /// Defaults for the server named `server` (its config key).
    pub fn new(server: impl Into<String>, transport: TransportKind) -> SessionConfig {
        SessionConfig {
            server: server.into(),
            transport,
            client_name: "nexus".into(),
            client_version: env!("CARGO_PKG_VERSION").into(),
            elicitation: true,
            era: None,
            discovery: None,
            call_timeout_ms: 60_000,
            call_max_ms: 600_000,
            request_timeout_ms: 30_000,
            probe_timeout_ms: 10_000,
            max_message_bytes: 16 * 1024 * 1024,
            max_list_pages: 1000,
            max_input_rounds: 8,
        }
    }
}

/// A host's request to call one tool.
#[derive(Debug, Clone, PartialEq)]
pub struct CallRequest {
    /// The host's key for the call (the model's call id): every output about it carries it.
    pub call: String,
    /// The server's tool name (not the exposed one).
    pub tool: String,
    /// The arguments object.
    pub arguments: Value,
    /// Set on the retry after a suspension: the request the session
    /// suspended on and the host's answer to it.
    pub resume: Option<Resume>,
}

/// The request a call suspended on ([`Output::CallSuspended`]) and its answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    /// The request, exactly as the session gave it (its `data` carries the `requestState`).
    pub request: Request,
    /// The host's answer.
    pub answer: Answer,
}

/// Something the transport or the host hands to the session.
// Inputs are consumed at once; boxing the call would cost an allocation per call for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Input<'a> {
    /// One complete JSON-RPC message from the server (a stdio line, an SSE
    /// `data`, an HTTP JSON body).
    Received {
        /// Its bytes.
        message: &'a [u8],
        /// HTTP: the request whose response stream carried it (ties a live
        /// elicitation to its call). `None` on stdio or a standalone stream.
        stream_of: Option<RequestId>,
    },
    /// HTTP: the `Mcp-Session-Id` header of the response to `initialize`.
    SessionId(String),
    /// HTTP: the request got this status without a JSON-RPC body (a 400,
    /// 404 or 405 to the modern probe means a legacy server).
    Refused {
        /// The request.
        id: RequestId,
        /// The HTTP status.
        status: u16,
    },
    /// HTTP: 404 to a request carrying a session id (the session expired).
    /// Calls in flight end in doubt; the session initializes again.
    SessionExpired,
    /// The connection is gone (the child exited, the stream broke). Calls in
    /// flight end in doubt; the next output to transmit opens a new one.
    Closed {
        /// What happened (exit status, stderr tail).
        reason: String,
    },
    /// HTTP: the SSE stream carrying the response to request `id` ended
    /// (or broke) before that response came. A `tools/call` is then *in
    /// doubt*: on a legacy server that gave its events ids
    /// (`last_event_id`), the session asks to reattach
    /// ([`Output::Reattach`]); otherwise the call fails as in doubt — it is
    /// never sent again on its own.
    StreamLost {
        /// The request whose stream was lost.
        id: RequestId,
        /// The `id` of the last SSE event read on that stream, if the server gave ids.
        last_event_id: Option<String>,
    },
    /// A time the session asked for ([`Output::Wait`]) may have passed.
    Timeout,
    /// The host wants the tool list: answered by [`Output::ToolsListed`]
    /// (from the cache while it is fresh) or [`Output::ToolsFailed`].
    ListTools,
    /// Call a tool.
    Call(CallRequest),
    /// Stop a call (the run was cancelled): the server is told, the call ends
    /// with an error result, a late response is ignored.
    Cancel {
        /// The call key.
        call: String,
    },
    /// The host answers a live elicitation ([`Output::Elicit`]).
    Answer(Answer),
}

/// One message for the transport to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Transmit {
    /// The message (one line, no trailing newline).
    pub message: Vec<u8>,
    /// For requests: the id its response will carry.
    pub id: Option<RequestId>,
    /// The host call it belongs to, if any.
    pub call: Option<String>,
    /// HTTP headers the transport adds (Streamable HTTP): `MCP-Protocol-Version`,
    /// `Mcp-Session-Id`, `Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`. stdio ignores them.
    pub headers: Vec<(String, String)>,
}

/// What the session asks of its driver. Every variant must be handled.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send this message. When no connection is open, open one first.
    Transmit(Transmit),
    /// Stop reading the response to this request (HTTP: close its stream;
    /// in 2026 that is itself the cancellation). Later messages for it are ignored.
    Abandon {
        /// The request.
        id: RequestId,
    },
    /// Legacy HTTP: resume the lost SSE stream of request `id` with a `GET`
    /// carrying `Last-Event-ID: last_event_id` (after the server's `retry:`
    /// delay) and feed what it carries with `stream_of: Some(id)`. If that
    /// stream is lost too, give [`Input::StreamLost`] again; a refused `GET`
    /// is [`Input::StreamLost`] with no event id.
    Reattach {
        /// The request.
        id: RequestId,
        /// The last event id read before the stream was lost.
        last_event_id: String,
    },
    /// The server's tool list, whole (every page). `changed`: it differs
    /// from the list given before (a digest changed, a tool came or went).
    ToolsListed {
        /// The tools, in the server's order.
        tools: Vec<McpTool>,
        /// Whether it changed since the last list given.
        changed: bool,
    },
    /// Listing failed.
    ToolsFailed {
        /// Why.
        error: ProtocolError,
    },
    /// A call finished: this is its result (errors included).
    CallDone {
        /// The call key.
        call: String,
        /// The result for the model.
        result: ToolResult,
    },
    /// The call needs the user: reply `Pending(request)` for it. Once
    /// answered, call again with [`CallRequest::resume`] — in this process or
    /// any other, any time later (the request carries all it needs).
    CallSuspended {
        /// The call key.
        call: String,
        /// Kind `input` or `authorization`.
        request: Request,
    },
    /// Legacy: the server asks the user something in the middle of a call.
    /// Answer with [`Input::Answer`] in this process (the call's timer waits).
    Elicit {
        /// The call it belongs to, when known.
        call: Option<String>,
        /// Kind `input` (form) or `authorization` (URL).
        request: Request,
    },
    /// For the host to see.
    Event(Event),
    /// Nothing to do until an input arrives or `until` passes (then give [`Input::Timeout`]).
    Wait {
        /// When to wake the session even without input.
        until: Option<Timestamp>,
    },
}

/// Things that happened, for the host to log or show.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// The session is up.
    Connected {
        /// The era and version, and what the server said.
        discovery: Discovery,
    },
    /// The connection could not be set up; the work waiting for it failed.
    ConnectFailed {
        /// Why.
        error: ProtocolError,
    },
    /// `notifications/progress` for a call.
    Progress {
        /// The call key.
        call: String,
        /// Progress so far.
        progress: f64,
        /// The total, when known.
        total: Option<f64>,
        /// A message.
        message: Option<String>,
    },
    /// `notifications/message` (server logging).
    Log {
        /// The level.
        level: String,
        /// The logger.
        logger: Option<String>,
        /// The data.
        data: Value,
    },
    /// A declared tool was left out of the list.
    ToolRejected {
        /// Its name.
        tool: String,
        /// Why.
        reason: String,
    },
    /// The server withdrew a live elicitation (its request was cancelled):
    /// an answer to it is no longer wanted.
    ElicitationWithdrawn {
        /// The id of the [`Output::Elicit`] request.
        request: String,
    },
    /// `notifications/elicitation/complete` (legacy URL mode).
    ElicitationComplete {
        /// The server's `elicitationId`.
        elicitation_id: String,
    },
}
