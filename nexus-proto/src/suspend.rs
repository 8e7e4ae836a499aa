//! Suspension: a tool may answer `Pending(Request)` instead of a result, and
//! the run waits for an [`Answer`]. Relay tools, approvals, logins and
//! questions are all uses of this one primitive.
//!
//! The JSON keys and their order are a fixed wire contract:
//! `Request{id, kind, prompt, url?, data?, expiresAt?}` and
//! `Answer{id, ok, data?, reason?}`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `kind` of the request that carries a turn's relay calls.
pub const KIND_TOOL_CALL: &str = "tool_call";
/// `kind` of the request that surfaces a call which may or may not have run.
pub const KIND_IN_DOUBT: &str = "in_doubt";

/// Something the run needs from outside before it can go on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Unique within the run; the answer echoes it.
    pub id: String,
    /// Open vocabulary: `authorization`, `approval`, `input`, `question`, `tool_call`, `in_doubt`, …
    pub kind: String,
    /// Human-readable text.
    pub prompt: String,
    /// Where to go (authorization flows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Kind-specific data (relay: `{"calls":[{id,name,input,arguments}]}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Map<String, Value>>,
    /// RFC 3339 expiry, advisory.
    #[serde(default, rename = "expiresAt", skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

impl Request {
    /// A request with the given kind and prompt; the id is stamped by the run when empty.
    pub fn new(kind: impl Into<String>, prompt: impl Into<String>) -> Request {
        Request { id: String::new(), kind: kind.into(), prompt: prompt.into(), url: None, data: None, expires_at: None }
    }
}

/// The host's reply to a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    /// The id of the request answered.
    pub id: String,
    /// The loop branches on this alone.
    pub ok: bool,
    /// Kind-specific data (relay: `{"results":[{id,output,isError}]}` or `{"output","isError"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Map<String, Value>>,
    /// When `ok` is false: `declined` | `cancelled` | `expired`, or a
    /// person's own words, which the model reads after the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Answer {
    /// `ok: true` with data.
    pub fn ok(id: impl Into<String>, data: Option<Map<String, Value>>) -> Answer {
        Answer { id: id.into(), ok: true, data, reason: None }
    }

    /// `ok: false` with a reason: `declined`, `cancelled`, `expired`, or
    /// free text the model reads (`declined: <prompt> — reason: <text>`).
    pub fn declined(id: impl Into<String>, reason: impl Into<String>) -> Answer {
        Answer { id: id.into(), ok: false, data: None, reason: Some(reason.into()) }
    }
}

/// What a tool returned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The text the model sees.
    pub output: String,
    /// Whether the call failed (the model sees that too).
    #[serde(rename = "isError", default)]
    pub is_error: bool,
    /// Host data, never sent to the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl ToolResult {
    /// A successful result.
    pub fn ok(output: impl Into<String>) -> ToolResult {
        ToolResult { output: output.into(), is_error: false, metadata: None }
    }

    /// An error result: the run goes on and the model decides what next.
    pub fn error(output: impl Into<String>) -> ToolResult {
        ToolResult { output: output.into(), is_error: true, metadata: None }
    }
}

/// A tool's reply to one execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", content = "value", rename_all = "snake_case")]
pub enum ToolReply {
    /// Finished with a result.
    Done(ToolResult),
    /// Cannot finish until the host answers this request.
    Pending(Request),
}

/// One relay call as it surfaces in a `tool_call` request's `data.calls`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RelayCall {
    /// The provider's call id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// Parsed arguments.
    pub input: Value,
    /// The raw argument string exactly as the provider sent it.
    pub arguments: String,
}
