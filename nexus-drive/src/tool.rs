//! Tools: typed (serde arguments, serializable output), async, or dynamic
//! (schema-only sources such as MCP), collected in a [`Toolbox`].
//!
//! A tool returns a result or suspends with [`ToolOutcome::Pending`]; on the
//! retry after the host answered, the same tool runs again with the answer
//! in its [`ToolContext`]. Relay tools are declarations only: their calls
//! surface to the caller and nothing runs here.
// Without a driver (the fuzz build) nothing runs the tool jobs: their
// runner and the pace they keep go unused there.
#![cfg_attr(not(any(feature = "blocking", feature = "async")), allow(dead_code))]

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nexus_proto::tool::sanitize_name;
use nexus_proto::{Answer, Request, ToolDecl, ToolKind, ToolReply, ToolResult, ToolSet};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use thiserror::Error;

use crate::approval::ApprovalPolicy;
use crate::cancel::CancelToken;

/// Names of the built-in tools. A relay tool may not take one of them, even
/// when built-ins are off, so a future built-in can never capture a
/// declaration-only tool.
pub const RESERVED_BUILTINS: &[&str] =
    &["bash", "read", "write", "edit", "grep", "glob", "webfetch", "question", "apply_patch", "todowrite"];

/// What one execution of a tool is told.
#[derive(Debug, Clone)]
pub struct ToolContext {
    pub(crate) call_id: String,
    pub(crate) name: String,
    pub(crate) turn: u32,
    pub(crate) arguments: String,
    pub(crate) idempotency_key: String,
    pub(crate) answer: Option<Answer>,
    pub(crate) request: Option<Request>,
    pub(crate) cancel: CancelToken,
    pub(crate) read_roots: Vec<PathBuf>,
    pub(crate) traceparent: Option<String>,
}

impl ToolContext {
    /// A context for calling a tool directly (tests, custom drivers).
    pub fn new(call_id: impl Into<String>, name: impl Into<String>) -> ToolContext {
        let call_id = call_id.into();
        ToolContext {
            idempotency_key: call_id.clone(),
            call_id,
            name: name.into(),
            turn: 0,
            arguments: String::new(),
            answer: None,
            request: None,
            cancel: CancelToken::new(),
            read_roots: Vec::new(),
            traceparent: None,
        }
    }

    /// The W3C `traceparent` of this call's `execute_tool` span, when the
    /// run is traced (SPEC §22): a tool that calls another service sends
    /// it on, so that service's spans join the run's trace.
    pub fn traceparent(&self) -> Option<&str> {
        self.traceparent.as_deref()
    }

    /// Adds a folder this call may read besides the workspace (as the folder
    /// of a skill the run activated is).
    pub fn with_read_root(mut self, dir: impl Into<PathBuf>) -> ToolContext {
        self.read_roots.push(dir.into());
        self
    }

    /// The folders this call may read besides the workspace root: the
    /// folders of the skills the run activated (see the `skills` module).
    /// Only the `read` built-in honours them; nothing may write there.
    pub fn read_roots(&self) -> &[PathBuf] {
        &self.read_roots
    }

    /// Sets the answer (as on the retry after a suspension).
    pub fn with_answer(mut self, answer: Answer) -> ToolContext {
        self.answer = Some(answer);
        self
    }

    /// The provider's call id.
    pub fn call_id(&self) -> &str {
        &self.call_id
    }

    /// The tool name the model called.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The model turn the call came from (1-based).
    pub fn turn(&self) -> u32 {
        self.turn
    }

    /// The arguments exactly as the provider sent them.
    pub fn raw_arguments(&self) -> &str {
        &self.arguments
    }

    /// Stable across retries and processes (`run_id/turn/call_id`): a tool with
    /// side effects can use it to make a second execution harmless.
    pub fn idempotency_key(&self) -> &str {
        &self.idempotency_key
    }

    /// On the retry after a suspension: the host's answer.
    pub fn answer(&self) -> Option<&Answer> {
        self.answer.as_ref()
    }

    /// On the retry after a suspension: the request the answer answers,
    /// exactly as this tool made it (a tool keeps what it needs to go on
    /// in the request's `data`, so the retry works in any process).
    pub fn request(&self) -> Option<&Request> {
        self.request.as_ref()
    }

    /// Sets the request being answered (as on the retry after a suspension).
    pub fn with_request(mut self, request: Request) -> ToolContext {
        self.request = Some(request);
        self
    }

    /// Whether the run was cancelled (long tools may stop early; their result is discarded).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }
}

/// What a tool produced.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolOutcome<T> {
    /// A value: a string is given to the model as-is, anything else as JSON text.
    Done(T),
    /// A full result (to mark it an error or attach host metadata).
    Result(ToolResult),
    /// The tool cannot finish until the host answers this request.
    Pending(Request),
}

impl<T> From<T> for ToolOutcome<T> {
    fn from(value: T) -> Self {
        ToolOutcome::Done(value)
    }
}

/// A tool failure: the model sees the message as an error result and the run goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError(String);

impl ToolError {
    /// A failure with this message.
    pub fn msg(message: impl Into<String>) -> ToolError {
        ToolError(message.into())
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for ToolError {
    fn from(e: E) -> Self {
        ToolError(e.to_string())
    }
}

/// A tool with typed arguments, run on the calling thread (the blocking
/// driver) or on the blocking thread pool (the async driver).
pub trait Tool: Send + Sync + 'static {
    /// The name the model calls it by (sanitized to `[a-zA-Z0-9_-]`).
    const NAME: &'static str;
    /// The arguments; a call whose arguments do not deserialize gets an error result naming the problem.
    type Args: DeserializeOwned + Send + 'static;
    /// The output: a string is given as-is, anything else as JSON text.
    type Output: Serialize;

    /// What the tool does, for the model.
    fn description(&self) -> String;

    /// JSON Schema of the arguments. `None` is allowed only for arguments
    /// without fields (an empty object schema is declared); for any other,
    /// registration is refused with [`ToolboxError::MissingSchema`]. `#[tool]`
    /// (feature `macros`) and [`Toolbox::add_derived`] (feature `schemars`)
    /// derive it from the argument type.
    fn input_schema(&self) -> Option<Value> {
        None
    }

    /// Whether a call needs a person's approval before it runs (see
    /// [`ApprovalPolicy`]); a client may also set it by name.
    fn needs_approval(&self) -> ApprovalPolicy {
        ApprovalPolicy::Never
    }

    /// Runs the tool.
    fn call(&self, args: Self::Args, ctx: &ToolContext) -> Result<ToolOutcome<Self::Output>, ToolError>;
}

/// A tool with typed arguments whose work is a future. The blocking driver
/// runs it with `block_on`; the async driver polls it alongside the batch's other calls.
pub trait AsyncTool: Send + Sync + 'static {
    /// The name the model calls it by.
    const NAME: &'static str;
    /// The arguments.
    type Args: DeserializeOwned + Send + 'static;
    /// The output.
    type Output: Serialize + Send;

    /// What the tool does, for the model.
    fn description(&self) -> String;

    /// JSON Schema of the arguments (see [`Tool::input_schema`]).
    fn input_schema(&self) -> Option<Value> {
        None
    }

    /// Whether a call needs a person's approval before it runs (see [`Tool::needs_approval`]).
    fn needs_approval(&self) -> ApprovalPolicy {
        ApprovalPolicy::Never
    }

    /// Runs the tool.
    fn call(
        &self,
        args: Self::Args,
        ctx: ToolContext,
    ) -> impl Future<Output = Result<ToolOutcome<Self::Output>, ToolError>> + Send;
}

pub(crate) type BoxFuture = Pin<Box<dyn Future<Output = ToolReply> + Send + 'static>>;
type BlockingFn = dyn Fn(Value, &ToolContext) -> ToolReply + Send + Sync;
type AsyncFn = dyn Fn(Value, ToolContext) -> BoxFuture + Send + Sync;

/// A type-erased tool body.
#[derive(Clone)]
pub(crate) enum Handler {
    Blocking(Arc<BlockingFn>),
    Async(Arc<AsyncFn>),
}

/// A tool known only by name, description and schema, over JSON values:
/// for tools whose shape is discovered at run time.
#[derive(Clone)]
pub struct DynTool {
    decl: ToolDecl,
    handler: Handler,
    timeout: Option<Duration>,
    approval: ApprovalPolicy,
}

impl fmt::Debug for DynTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynTool").field("name", &self.decl.name).finish_non_exhaustive()
    }
}

impl DynTool {
    /// A blocking dynamic tool.
    pub fn new<F>(name: &str, description: impl Into<String>, input_schema: Value, f: F) -> DynTool
    where
        F: Fn(Value, &ToolContext) -> Result<ToolOutcome<Value>, ToolError> + Send + Sync + 'static,
    {
        DynTool {
            decl: ToolDecl::new(name, description, input_schema),
            handler: Handler::Blocking(Arc::new(move |args, ctx| into_reply(f(args, ctx)))),
            timeout: None,
            approval: ApprovalPolicy::Never,
        }
    }

    /// An async dynamic tool.
    pub fn new_async<F, Fut>(name: &str, description: impl Into<String>, input_schema: Value, f: F) -> DynTool
    where
        F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<ToolOutcome<Value>, ToolError>> + Send + 'static,
    {
        DynTool {
            decl: ToolDecl::new(name, description, input_schema),
            handler: Handler::Async(Arc::new(move |args, ctx| {
                let fut = f(args, ctx);
                Box::pin(async move { into_reply(fut.await) })
            })),
            timeout: None,
            approval: ApprovalPolicy::Never,
        }
    }

    /// Gives up on a call after `timeout` (the call gets an error result).
    pub fn timeout(mut self, timeout: Duration) -> DynTool {
        self.timeout = Some(timeout);
        self
    }

    /// Asks a person before the calls `policy` applies to (see [`ApprovalPolicy`]).
    pub fn needs_approval(mut self, policy: impl Into<ApprovalPolicy>) -> DynTool {
        self.approval = policy.into();
        self
    }

    /// The declaration the model sees.
    pub fn decl(&self) -> &ToolDecl {
        &self.decl
    }
}

/// A registration refused by the [`Toolbox`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ToolboxError {
    /// Two tools would have the same (sanitized) name.
    #[error("two tools are named {0:?}")]
    Duplicate(String),
    /// A relay tool took a built-in tool's name.
    #[error(
        "relay tool name collides with a built-in tool: [{}] — rename the relay tool (the guard applies even \
         with builtins disabled, so a future builtin cannot capture a declaration-only tool)",
        .0.join(" ")
    )]
    RelayCollision(Vec<String>),
    /// An executed declaration was given without a body.
    #[error("tool {0:?} is declared as executed but has no implementation; use a relay declaration or add the tool")]
    NoHandler(String),
    /// A name that sanitizes to nothing.
    #[error("a tool name must not be empty")]
    EmptyName,
    /// A setting names a tool that is not registered.
    #[error("no tool named {0:?}")]
    Unknown(String),
    /// A typed tool whose arguments have fields gave no input schema: the
    /// model would be told it takes none.
    #[error(
        "tool {name:?} takes arguments ({}) but gives no input schema; return one from input_schema, or derive it \
         (#[tool] with feature macros, Toolbox::add_derived with feature schemars)",
        .fields.join(", ")
    )]
    MissingSchema {
        /// The tool.
        name: String,
        /// Its arguments' fields.
        fields: Vec<String>,
    },
    /// An approval policy was set on a declaration-only (relay) tool, whose
    /// calls already go to the caller.
    #[error("tool {0:?} is a relay tool: its calls already go to the caller, nothing runs here to approve")]
    RelayApproval(String),
}

#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) decl: ToolDecl,
    pub(crate) handler: Option<Handler>,
    pub(crate) timeout: Option<Duration>,
    /// Which calls wait for a person's approval before they run.
    pub(crate) approval: ApprovalPolicy,
    /// How quickly its calls have finished, shared by every clone of the toolbox.
    pub(crate) pace: Arc<Pace>,
}

/// How quickly a tool's recent calls finished, so that a driver can run the
/// quick ones on its own thread.
///
/// Handing a call to another thread costs a wake-up: a futex, a context
/// switch, and on a virtual machine an inter-processor interrupt, tens of
/// microseconds in all, more than most tools take. A tool whose last
/// [`Pace::TRUSTED`] calls each finished within [`Pace::QUICK`] is run where
/// the driver is; one call over that and the tool goes back to being handed
/// out until it has earned the trust again. The cost of being wrong is
/// bounded: a quick tool that turns slow delays the calls after it in its
/// batch once, then runs beside them again.
#[derive(Debug, Default)]
pub(crate) struct Pace {
    /// Calls in a row that finished within [`Pace::QUICK`].
    streak: AtomicU32,
}

impl Pace {
    /// A call that finishes within this is quick: about the cost of a hand-off.
    pub(crate) const QUICK: Duration = Duration::from_micros(50);
    /// Quick calls in a row before a tool is run inline.
    pub(crate) const TRUSTED: u32 = 8;

    /// Whether the tool's recent calls were all quick.
    pub(crate) fn is_quick(&self) -> bool {
        self.streak.load(Ordering::Relaxed) >= Pace::TRUSTED
    }

    /// Counts a finished call that took `took`.
    pub(crate) fn record(&self, took: Duration) {
        if took <= Pace::QUICK {
            // Saturating: a tool quick for ever must not wrap back to untrusted.
            let _ = self.streak.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1));
        } else {
            self.streak.store(0, Ordering::Relaxed);
        }
    }
}

/// The tools of a client, by name.
#[derive(Clone, Default)]
pub struct Toolbox {
    entries: Vec<Entry>,
    /// The declarations as runs hold them, built on first use after a
    /// change: every run of a client shares this one copy, and the wire
    /// encodings made of it.
    shared: std::sync::OnceLock<ToolSet>,
}

impl fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.entries.iter().map(|e| (&e.decl.name, e.decl.kind))).finish()
    }
}

impl Toolbox {
    /// An empty toolbox.
    pub fn new() -> Toolbox {
        Toolbox::default()
    }

    /// Adds a typed blocking tool. A tool without an input schema whose
    /// arguments have fields is refused ([`ToolboxError::MissingSchema`]).
    pub fn add<T: Tool>(&mut self, tool: T) -> Result<&mut Toolbox, ToolboxError> {
        let schema = given_schema::<T::Args>(T::NAME, tool.input_schema())?;
        let decl = ToolDecl::new(T::NAME, tool.description(), schema);
        let approval = tool.needs_approval();
        self.insert(decl, Some(erase_blocking(tool)), None, approval)
    }

    /// Adds a typed blocking tool whose schema is derived from its argument
    /// type (unless it gives one itself).
    #[cfg(feature = "schemars")]
    pub fn add_derived<T: Tool>(&mut self, tool: T) -> Result<&mut Toolbox, ToolboxError>
    where
        T::Args: schemars::JsonSchema,
    {
        let schema = tool.input_schema().unwrap_or_else(schema_for::<T::Args>);
        let decl = ToolDecl::new(T::NAME, tool.description(), schema);
        let approval = tool.needs_approval();
        self.insert(decl, Some(erase_blocking(tool)), None, approval)
    }

    /// Adds a typed async tool (refused without a schema as [`add`](Self::add) is).
    pub fn add_async<T: AsyncTool>(&mut self, tool: T) -> Result<&mut Toolbox, ToolboxError> {
        let schema = given_schema::<T::Args>(T::NAME, tool.input_schema())?;
        let decl = ToolDecl::new(T::NAME, tool.description(), schema);
        let approval = tool.needs_approval();
        self.insert(decl, Some(erase_async(tool)), None, approval)
    }

    /// Adds a typed async tool with a derived schema (see [`Toolbox::add_derived`]).
    #[cfg(feature = "schemars")]
    pub fn add_async_derived<T: AsyncTool>(&mut self, tool: T) -> Result<&mut Toolbox, ToolboxError>
    where
        T::Args: schemars::JsonSchema,
    {
        let schema = tool.input_schema().unwrap_or_else(schema_for::<T::Args>);
        let decl = ToolDecl::new(T::NAME, tool.description(), schema);
        let approval = tool.needs_approval();
        self.insert(decl, Some(erase_async(tool)), None, approval)
    }

    /// Adds a dynamic tool.
    pub fn add_dyn(&mut self, tool: DynTool) -> Result<&mut Toolbox, ToolboxError> {
        self.insert(tool.decl, Some(tool.handler), tool.timeout, tool.approval)
    }

    /// Adds every tool of `other`, with its settings, after this one's.
    pub fn extend(&mut self, other: Toolbox) -> Result<&mut Toolbox, ToolboxError> {
        for entry in other.entries {
            let Entry { decl, handler, timeout, approval, .. } = entry;
            self.insert(decl, handler, timeout, approval)?;
        }
        Ok(self)
    }

    /// Adds a declaration-only (relay) tool: the model's calls to it surface
    /// to the caller as one `tool_call` request per turn.
    pub fn add_relay(
        &mut self,
        name: &str,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Result<&mut Toolbox, ToolboxError> {
        self.add_decl(ToolDecl::relay(name, description, input_schema))
    }

    /// Adds a declaration. Only relay declarations can come without a body.
    pub fn add_decl(&mut self, decl: ToolDecl) -> Result<&mut Toolbox, ToolboxError> {
        if decl.kind != ToolKind::Relay {
            return Err(ToolboxError::NoHandler(decl.name));
        }
        self.insert(decl, None, None, ApprovalPolicy::Never)
    }

    /// Gives up on calls to `name` after `timeout` (error result).
    pub fn set_timeout(&mut self, name: &str, timeout: Duration) -> Result<&mut Toolbox, ToolboxError> {
        let name = sanitize_name(name);
        let entry = self.entries.iter_mut().find(|e| e.decl.name == name).ok_or(ToolboxError::Unknown(name))?;
        entry.timeout = Some(timeout);
        Ok(self)
    }

    /// Asks a person before the calls of `name` that `policy` applies to
    /// run (any executed tool: typed, dynamic, built-in, an MCP server's).
    pub fn needs_approval(
        &mut self,
        name: &str,
        policy: impl Into<ApprovalPolicy>,
    ) -> Result<&mut Toolbox, ToolboxError> {
        let name = sanitize_name(name);
        let entry = self.entries.iter_mut().find(|e| e.decl.name == name).ok_or(ToolboxError::Unknown(name))?;
        if entry.handler.is_none() {
            return Err(ToolboxError::RelayApproval(entry.decl.name.clone()));
        }
        entry.approval = policy.into();
        Ok(self)
    }

    /// The approval policy of `name`, when it is registered.
    pub fn approval(&self, name: &str) -> Option<&ApprovalPolicy> {
        self.get(&sanitize_name(name)).map(|e| &e.approval)
    }

    /// The declarations, in registration order.
    pub fn decls(&self) -> Vec<ToolDecl> {
        self.entries.iter().map(|e| e.decl.clone()).collect()
    }

    /// The declarations, in registration order, as one shared copy: every
    /// run started over this toolbox holds the same one.
    pub fn shared_decls(&self) -> Arc<[ToolDecl]> {
        self.tool_set().decls().clone()
    }

    /// The shared declarations with their wire encodings, made once for
    /// every run of this toolbox.
    pub fn tool_set(&self) -> ToolSet {
        self.shared.get_or_init(|| self.decls().into()).clone()
    }

    /// The registered names, in registration order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.decl.name.as_str())
    }

    /// Whether no tool is registered.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tools named in `names`, in that order: a sub-agent's share of a
    /// client's tools. A name not here is [`ToolboxError::Unknown`].
    pub fn only(&self, names: &[String]) -> Result<Toolbox, ToolboxError> {
        let mut out = Toolbox::new();
        for name in names {
            let name = sanitize_name(name);
            let entry = self.get(&name).ok_or_else(|| ToolboxError::Unknown(name.clone()))?;
            if out.get(&name).is_none() {
                out.entries.push(entry.clone());
            }
        }
        Ok(out)
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.decl.name == name)
    }

    fn insert(
        &mut self,
        decl: ToolDecl,
        handler: Option<Handler>,
        timeout: Option<Duration>,
        approval: ApprovalPolicy,
    ) -> Result<&mut Toolbox, ToolboxError> {
        if decl.name.is_empty() {
            return Err(ToolboxError::EmptyName);
        }
        if decl.kind == ToolKind::Relay && RESERVED_BUILTINS.contains(&decl.name.as_str()) {
            return Err(ToolboxError::RelayCollision(vec![decl.name]));
        }
        if self.get(&decl.name).is_some() {
            return Err(ToolboxError::Duplicate(decl.name));
        }
        self.entries.push(Entry { decl, handler, timeout, approval, pace: Arc::default() });
        self.shared = std::sync::OnceLock::new();
        Ok(self)
    }
}

/// The schema a typed tool gave, or, when it gave none, the empty object
/// schema for arguments without fields; arguments with fields are refused.
fn given_schema<A: DeserializeOwned>(name: &str, schema: Option<Value>) -> Result<Value, ToolboxError> {
    match (schema, crate::arg_fields::struct_fields::<A>()) {
        (Some(schema), _) => Ok(schema),
        (None, Some(fields)) if !fields.is_empty() => Err(ToolboxError::MissingSchema {
            name: sanitize_name(name),
            fields: fields.iter().map(|f| f.to_string()).collect(),
        }),
        (None, _) => Ok(Value::Null),
    }
}

/// The JSON Schema of `T`, inlined (no `$ref`, which Gemini refuses) and
/// without the `$schema`/`title` keys providers do not want in tool parameters.
#[cfg(feature = "schemars")]
pub fn schema_for<T: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut value = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(obj) = &mut value {
        obj.remove("title");
        obj.remove("$schema");
    }
    value
}

fn erase_blocking<T: Tool>(tool: T) -> Handler {
    let tool = Arc::new(tool);
    Handler::Blocking(Arc::new(move |input, ctx| match parse_args::<T::Args>(T::NAME, input) {
        Ok(args) => into_reply(tool.call(args, ctx)),
        Err(reply) => *reply,
    }))
}

fn erase_async<T: AsyncTool>(tool: T) -> Handler {
    let tool = Arc::new(tool);
    Handler::Async(Arc::new(move |input, ctx| {
        let tool = tool.clone();
        Box::pin(async move {
            match parse_args::<T::Args>(T::NAME, input) {
                Ok(args) => into_reply(tool.call(args, ctx).await),
                Err(reply) => *reply,
            }
        })
    }))
}

/// The arguments, or the error result naming the problem.
fn parse_args<A: DeserializeOwned>(name: &str, input: Value) -> Result<A, Box<ToolReply>> {
    serde_json::from_value(input)
        .map_err(|e| Box::new(ToolReply::Done(ToolResult::error(format!("invalid arguments for {name}: {e}")))))
}

/// A tool's outcome as the machine's reply.
fn into_reply<T: Serialize>(r: Result<ToolOutcome<T>, ToolError>) -> ToolReply {
    match r {
        Ok(ToolOutcome::Done(v)) => ToolReply::Done(match render(&v) {
            Ok(text) => ToolResult::ok(text),
            Err(e) => ToolResult::error(format!("the tool output could not be serialized: {e}")),
        }),
        Ok(ToolOutcome::Result(r)) => ToolReply::Done(r),
        Ok(ToolOutcome::Pending(req)) => ToolReply::Pending(req),
        Err(e) => ToolReply::Done(ToolResult::error(e.0)),
    }
}

/// A string as-is, anything else as compact JSON text in the order the
/// output serializes its fields: written straight to text, not through a
/// `Value` (whose map sorts keys), so a struct reaches the model as declared.
fn render<T: Serialize>(v: &T) -> Result<String, serde_json::Error> {
    let text = serde_json::to_string(v)?;
    if text.starts_with('"') {
        return serde_json::from_str(&text);
    }
    Ok(text)
}

/// One call handed to a driver to execute.
pub(crate) struct ToolJob {
    pub(crate) call_id: String,
    pub(crate) input: Value,
    pub(crate) ctx: ToolContext,
    pub(crate) handler: Handler,
    pub(crate) timeout: Option<Duration>,
    /// The tool's [`Pace`], told how long this call took.
    pub(crate) pace: Arc<Pace>,
}

impl ToolJob {
    /// Whether the driver may run this call on its own thread: its tool's
    /// recent calls were all quick, and no timeout needs watching meanwhile.
    pub(crate) fn is_quick(&self) -> bool {
        self.timeout.is_none() && self.pace.is_quick()
    }

    /// Whether the async driver runs this call on the executor's thread: a
    /// blocking body that has been quick (the blocking pool's hand-off would
    /// cost more than the call).
    #[cfg(feature = "async")]
    pub(crate) fn runs_inline(&self) -> bool {
        matches!(self.handler, Handler::Blocking(_)) && self.is_quick()
    }

    /// Runs the call on this thread. A panic becomes an error result.
    pub(crate) fn run_blocking(self) -> ToolReply {
        let ToolJob { input, ctx, handler, pace, .. } = self;
        let name = ctx.name.clone();
        let started = Instant::now();
        let run = AssertUnwindSafe(move || match handler {
            Handler::Blocking(f) => f(input, &ctx),
            Handler::Async(f) => futures_lite::future::block_on(f(input, ctx)),
        });
        let reply = catch_unwind(run).unwrap_or_else(|p| panicked(&name, p));
        pace.record(started.elapsed());
        reply
    }

    /// The call as a future (blocking bodies go to the blocking thread pool;
    /// the driver runs the quick ones itself, see [`ToolJob::runs_inline`]).
    /// A panic becomes an error result; the timeout, when set, too.
    #[cfg(feature = "async")]
    pub(crate) fn run_async(mut self) -> impl Future<Output = (String, ToolReply)> + Send + 'static {
        use futures_lite::FutureExt;
        // The body needs the rest; the id only labels the reply.
        let (call_id, timeout, name) = (std::mem::take(&mut self.call_id), self.timeout, self.ctx.name.clone());
        async move {
            let work = async move {
                match self.handler {
                    Handler::Blocking(_) => smol::unblock(move || self.run_blocking()).await,
                    Handler::Async(f) => {
                        let ToolJob { input, ctx, .. } = self;
                        let name = ctx.name.clone();
                        AssertUnwindSafe(f(input, ctx)).catch_unwind().await.unwrap_or_else(|p| panicked(&name, p))
                    }
                }
            };
            let reply = match timeout {
                Some(d) => {
                    work.or(async {
                        smol::Timer::after(d).await;
                        timed_out(&name, d)
                    })
                    .await
                }
                None => work.await,
            };
            (call_id, reply)
        }
    }
}

pub(crate) fn timed_out(name: &str, d: Duration) -> ToolReply {
    ToolReply::Done(ToolResult::error(format!("tool {name} timed out after {} ms", d.as_millis())))
}

fn panicked(name: &str, payload: Box<dyn Any + Send>) -> ToolReply {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".to_string());
    ToolReply::Done(ToolResult::error(format!("tool {name} panicked: {msg}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Deserialize)]
    struct AddArgs {
        a: i64,
        b: i64,
    }

    struct Add;
    impl Tool for Add {
        const NAME: &'static str = "add";
        type Args = AddArgs;
        type Output = i64;
        fn description(&self) -> String {
            "adds".into()
        }
        fn input_schema(&self) -> Option<Value> {
            Some(json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}))
        }
        fn call(&self, args: AddArgs, _ctx: &ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
            Ok((args.a + args.b).into())
        }
    }

    #[test]
    fn a_typed_tool_with_arguments_and_no_schema_is_refused() {
        struct Schemaless;
        impl Tool for Schemaless {
            const NAME: &'static str = "add";
            type Args = AddArgs;
            type Output = i64;
            fn description(&self) -> String {
                "adds".into()
            }
            fn call(&self, args: AddArgs, _ctx: &ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
                Ok((args.a + args.b).into())
            }
        }
        let mut tb = Toolbox::new();
        let err = tb.add(Schemaless).map(|_| ()).expect_err("refused");
        assert_eq!(err, ToolboxError::MissingSchema { name: "add".into(), fields: vec!["a".into(), "b".into()] });
        assert!(err.to_string().contains("takes arguments (a, b) but gives no input schema"), "{err}");
        assert!(tb.is_empty(), "nothing registered");
        // Arguments without fields declare the empty object schema, as before.
        #[derive(Deserialize)]
        struct NoArgs {}
        struct Ping;
        impl Tool for Ping {
            const NAME: &'static str = "ping";
            type Args = NoArgs;
            type Output = &'static str;
            fn description(&self) -> String {
                "pings".into()
            }
            fn call(&self, _: NoArgs, _ctx: &ToolContext) -> Result<ToolOutcome<&'static str>, ToolError> {
                Ok("pong".into())
            }
        }
        tb.add(Ping).unwrap();
        assert_eq!(tb.decls()[0].input_schema, json!({"type": "object", "properties": {}}));
    }

    fn run(tb: &Toolbox, name: &str, input: Value) -> ToolReply {
        let entry = tb.get(name).expect("registered");
        ToolJob {
            call_id: "c1".into(),
            input,
            ctx: ToolContext::new("c1", name),
            handler: entry.handler.clone().expect("executed"),
            timeout: None,
            pace: entry.pace.clone(),
        }
        .run_blocking()
    }

    #[test]
    fn typed_tool_output_is_json_text_and_bad_args_name_the_problem() {
        let mut tb = Toolbox::new();
        tb.add(Add).unwrap();
        assert_eq!(run(&tb, "add", json!({"a": 2, "b": 3})), ToolReply::Done(ToolResult::ok("5")));
        let ToolReply::Done(r) = run(&tb, "add", json!({"a": "x"})) else { panic!("not done") };
        assert!(r.is_error);
        assert!(r.output.starts_with("invalid arguments for add:"), "{}", r.output);
    }

    #[test]
    fn struct_outputs_keep_their_field_order() {
        #[derive(Serialize)]
        struct Refund {
            status: &'static str,
            amount: u32,
            currency: &'static str,
        }
        let text = render(&Refund { status: "queued", amount: 40, currency: "EUR" }).unwrap();
        assert_eq!(text, r#"{"status":"queued","amount":40,"currency":"EUR"}"#);
        assert_eq!(render(&"plain \"text\"").unwrap(), "plain \"text\"");
        assert_eq!(render(&json!({"z": 1, "a": 2})).unwrap(), r#"{"a":2,"z":1}"#, "a Value keeps its own order");
    }

    #[test]
    fn strings_pass_as_is_and_panics_become_error_results() {
        let mut tb = Toolbox::new();
        tb.add_dyn(DynTool::new("echo", "", Value::Null, |v, _| Ok(ToolOutcome::Done(v["s"].clone())))).unwrap();
        tb.add_dyn(DynTool::new("boom", "", Value::Null, |_, _| panic!("kaboom"))).unwrap();
        assert_eq!(run(&tb, "echo", json!({"s": "he said \"hi\""})), ToolReply::Done(ToolResult::ok("he said \"hi\"")));
        let ToolReply::Done(r) = run(&tb, "boom", json!({})) else { panic!("not done") };
        assert!(r.is_error && r.output.contains("kaboom"), "{r:?}");
    }

    #[cfg(feature = "schemars")]
    #[test]
    fn derived_schemas_are_inline_and_bare() {
        #[derive(Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Inner {
            city: String,
        }
        #[derive(Deserialize, schemars::JsonSchema)]
        #[allow(dead_code)]
        struct Args {
            /// How many.
            n: u32,
            at: Inner,
        }
        let s = schema_for::<Args>();
        assert_eq!(s["type"], "object");
        assert_eq!(s["properties"]["n"]["description"], "How many.");
        // Nested types are inlined: Gemini does not follow `$ref`.
        assert_eq!(s["properties"]["at"]["properties"]["city"]["type"], "string");
        let text = s.to_string();
        assert!(!text.contains("$ref") && !text.contains("$schema"), "{text}");
        assert!(s.get("title").is_none());
    }

    #[test]
    fn duplicates_and_relay_collisions_are_refused() {
        let mut tb = Toolbox::new();
        tb.add(Add).unwrap();
        assert_eq!(tb.add(Add).err(), Some(ToolboxError::Duplicate("add".into())));
        let err = tb.add_relay("bash", "", Value::Null).err().unwrap();
        assert_eq!(
            err.to_string(),
            "relay tool name collides with a built-in tool: [bash] — rename the relay tool (the guard applies \
             even with builtins disabled, so a future builtin cannot capture a declaration-only tool)"
        );
        // An executed tool may shadow a built-in name; only relays are guarded.
        tb.add_dyn(DynTool::new("bash", "", Value::Null, |_, _| Ok(ToolOutcome::Done(json!("ok"))))).unwrap();
        assert!(matches!(tb.add_decl(ToolDecl::new("x", "", Value::Null)), Err(ToolboxError::NoHandler(_))));
    }
}
