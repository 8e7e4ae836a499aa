//! Hooks: host code called around model calls and tool calls.
//!
//! Model hooks may abort the run (it fails with [`DriveError::Hook`](crate::DriveError::Hook));
//! `before_model` may rewrite the request body. Tool hooks may rewrite the
//! arguments, answer in the tool's place (with a result or a suspension), or
//! transform results. A suspension is not a failure: `after_tool` is not
//! called for it, and metrics count it as pending.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use nexus_proto::{ToolReply, ToolResult};
use serde_json::Value;

/// A hook's refusal: the run ends with this reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookAbort(pub String);

impl fmt::Display for HookAbort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A model request about to be sent.
#[derive(Debug)]
#[non_exhaustive]
pub struct ModelRequest<'a> {
    /// The model turn (1-based).
    pub turn: u32,
    /// 0 for the first attempt, then the retry number.
    pub attempt: u32,
    /// The URL.
    pub url: &'a str,
    /// The JSON body; the hook may rewrite it.
    pub body: &'a mut Vec<u8>,
}

/// A model exchange that ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ModelResponse {
    /// The model turn (1-based).
    pub turn: u32,
    /// 0 for the first attempt, then the retry number.
    pub attempt: u32,
    /// The HTTP status, when a response came.
    pub status: Option<u16>,
    /// From send to the end of the body.
    pub latency: Duration,
    /// Whether it produced a model turn.
    pub ok: bool,
}

/// A tool call about to run.
#[derive(Debug)]
#[non_exhaustive]
pub struct ToolCallView<'a> {
    /// The provider's call id.
    pub call_id: &'a str,
    /// The tool name.
    pub name: &'a str,
    /// The parsed arguments.
    pub input: &'a Value,
    /// `run_id/turn/call_id`.
    pub idempotency_key: &'a str,
}

/// What `before_tool` decides.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeTool {
    /// Run the tool as called.
    Continue,
    /// Run the tool with these arguments instead.
    Args(Value),
    /// Do not run the tool: this is its reply (a result, or a suspension; on
    /// the retry after the answer, the real tool runs with the answer).
    Reply(ToolReply),
}

type BeforeModelFn = dyn Fn(&mut ModelRequest<'_>) -> Result<(), HookAbort> + Send + Sync;
type AfterModelFn = dyn Fn(&ModelResponse) -> Result<(), HookAbort> + Send + Sync;
type BeforeToolFn = dyn Fn(&ToolCallView<'_>) -> BeforeTool + Send + Sync;
type AfterToolFn = dyn Fn(&ToolCallView<'_>, &mut ToolResult) + Send + Sync;

/// The hooks of a client. All optional.
#[derive(Clone, Default)]
pub struct Hooks {
    pub(crate) before_model: Option<Arc<BeforeModelFn>>,
    pub(crate) after_model: Option<Arc<AfterModelFn>>,
    pub(crate) before_tool: Option<Arc<BeforeToolFn>>,
    pub(crate) after_tool: Option<Arc<AfterToolFn>>,
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hooks")
            .field("before_model", &self.before_model.is_some())
            .field("after_model", &self.after_model.is_some())
            .field("before_tool", &self.before_tool.is_some())
            .field("after_tool", &self.after_tool.is_some())
            .finish()
    }
}

impl Hooks {
    /// No hooks.
    pub fn new() -> Hooks {
        Hooks::default()
    }

    /// Called before every model request (retries included), after the body transform.
    pub fn before_model(
        mut self,
        f: impl Fn(&mut ModelRequest<'_>) -> Result<(), HookAbort> + Send + Sync + 'static,
    ) -> Hooks {
        self.before_model = Some(Arc::new(f));
        self
    }

    /// Called when a model exchange ends (or fails in the transport).
    pub fn after_model(mut self, f: impl Fn(&ModelResponse) -> Result<(), HookAbort> + Send + Sync + 'static) -> Hooks {
        self.after_model = Some(Arc::new(f));
        self
    }

    /// Called before a tool runs (not on the retry after a suspension).
    pub fn before_tool(mut self, f: impl Fn(&ToolCallView<'_>) -> BeforeTool + Send + Sync + 'static) -> Hooks {
        self.before_tool = Some(Arc::new(f));
        self
    }

    /// Called with each finished result of an executed tool; may change it.
    /// Not called for suspensions nor for replies given by `before_tool`.
    pub fn after_tool(mut self, f: impl Fn(&ToolCallView<'_>, &mut ToolResult) + Send + Sync + 'static) -> Hooks {
        self.after_tool = Some(Arc::new(f));
        self
    }
}
