//! MCP errors, split like the run's: [`McpInputError`] is local misuse (the
//! session is unchanged), [`ProtocolError`] is the server sending something
//! wrong (also leaving the session unchanged: the driver attaches it to that
//! server's errors and goes on). [`HandleError`] is either, as returned by
//! [`Session::handle_input`](super::Session::handle_input).

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::jsonrpc::RequestId;

/// The server sent something that is not valid MCP. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
#[serde(tag = "type", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProtocolError {
    /// Not JSON (or not UTF-8).
    #[error("malformed JSON-RPC message: {0}")]
    Json(String),
    /// A message over the size cap.
    #[error("message over the {limit}-byte limit")]
    TooLarge {
        /// The cap in bytes.
        limit: usize,
    },
    /// A JSON-RPC batch (an array): no MCP revision lets a server send one.
    #[error("JSON-RPC batches are not accepted")]
    Batch,
    /// `jsonrpc` is not `"2.0"`.
    #[error("wrong JSON-RPC version {0}")]
    Version(String),
    /// JSON that is not a JSON-RPC message, or a result not of the method's shape.
    #[error("unexpected message shape: {0}")]
    Shape(String),
    /// A response to an id that was never sent (or already answered).
    #[error("response to request id {0}, which is not outstanding")]
    UnknownResponse(String),
    /// `tools/list` returned a cursor it had returned before.
    #[error("tools/list returned the cursor {0:?} twice")]
    RepeatedCursor(String),
    /// `tools/list` ran past the page cap.
    #[error("tools/list returned more than {0} pages")]
    TooManyPages(u32),
    /// The server speaks no protocol version this client speaks.
    #[error("the server offers protocol version {offered:?}; this client speaks {supported}")]
    UnsupportedVersion {
        /// What the server offered.
        offered: String,
        /// What this client speaks.
        supported: String,
    },
    /// The server answered a protocol request with an error.
    #[error("{method} failed: {message} ({code})")]
    Rpc {
        /// The request method.
        method: String,
        /// The JSON-RPC error code.
        code: i64,
        /// The server's message.
        message: String,
    },
    /// The server did not answer a protocol request in time.
    #[error("{method} timed out after {after_ms} ms")]
    Timeout {
        /// The request method.
        method: String,
        /// How long it waited.
        after_ms: u64,
    },
    /// The transport refused a request (HTTP status without a JSON-RPC body).
    #[error("{method} refused by the transport (HTTP {status})")]
    Refused {
        /// The request method.
        method: String,
        /// The HTTP status.
        status: u16,
    },
    /// The connection closed.
    #[error("connection closed: {0}")]
    Closed(String),
    /// The stream carrying the response to a request was lost before the response.
    #[error("the stream carrying the answer to {method} was lost")]
    StreamLost {
        /// The request method.
        method: String,
    },
}

impl ProtocolError {
    pub(crate) fn unknown_response(id: &RequestId) -> ProtocolError {
        ProtocolError::UnknownResponse(id.to_string())
    }
}

/// The driver misused the session. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum McpInputError {
    /// Time went backwards.
    #[error("time went backwards: {now} < {last}")]
    TimeWentBackwards {
        /// The time given.
        now: u64,
        /// The latest time seen before.
        last: u64,
    },
    /// A call key that is already in use by a call in progress.
    #[error("call {0:?} is already in progress")]
    DuplicateCall(String),
    /// A cancel for a call that is not in progress.
    #[error("call {0:?} is not in progress")]
    UnknownCall(String),
    /// An answer whose id matches no live request of this session.
    #[error("answer id {0:?} matches no live request of this session")]
    UnknownAnswer(String),
    /// A transport signal for a request that is not outstanding.
    #[error("request {0} is not outstanding")]
    UnknownRequest(String),
    /// Invalid configuration or an invalid imported discovery.
    #[error("invalid session config: {0}")]
    Config(String),
}

/// What [`Session::handle_input`](super::Session::handle_input) refuses; either way nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum HandleError {
    /// Local misuse.
    #[error(transparent)]
    Input(#[from] McpInputError),
    /// The server's fault: attach it to that server's errors and go on.
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
}
