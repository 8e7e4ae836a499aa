//! # nexus-drive
//!
//! Drivers for [`nexus_proto`]: they do the I/O and run the tools; the
//! [`Run`](nexus_proto::Run) machine decides everything else (retries,
//! backoff, turn limits, transcript balance, suspension bookkeeping).
//!
//! ## Quickstart
//!
//! Blocking, on [`Client`] (the API key is read from the style's variable:
//! `OPENAI_API_KEY`, `ANTHROPIC_API_KEY` or `GEMINI_API_KEY`), with a tool
//! made of a plain function by [`#[tool]`](macro@tool):
//!
//! ```
//! # use nexus_tests::fake::{FakeProvider, Script, Scripts, Turn};
//! # let fake = FakeProvider::start(Scripts::default().model("gpt-4o-mini", Script::new(vec![
//! #     Turn::default().call("order_status", r#"{"order_id": "A-1001"}"#), Turn::text("It was delivered."),
//! # ])));
//! use nexus_drive::{tool, Client, Style, ToolError};
//!
//! /// Looks up an order's status.
//! ///
//! /// # Arguments
//! /// * `order_id` - The order's id, as on the receipt.
//! #[tool]
//! fn order_status(order_id: String) -> Result<String, ToolError> {
//!     Ok(format!("{order_id}: delivered"))
//! }
//!
//! let client = Client::builder(Style::OpenAi, "gpt-4o-mini")
//! #   .base_url(fake.base_url(nexus_tests::fake::Style::OpenAi)).api_key(fake.api_key())
//!     .tool(order_status)
//!     .build()?;
//! let result = client.run("Where is order A-1001?")?;
//! println!("{}", result.text);
//! # assert_eq!(result.tool_calls[0].output, "A-1001: delivered");
//! # assert_eq!(result.text, "It was delivered.");
//! # Ok::<(), nexus_drive::DriveError>(())
//! ```
//!
//! Async, on [`AsyncClient`] (feature `async`; any executor that drives
//! smol's reactor):
//!
//! ```
//! # use nexus_tests::fake::{FakeProvider, Script, Scripts, Turn};
//! # let fake = FakeProvider::start(Scripts::default().model("claude-haiku-4-5", Script::new(vec![Turn::text("Paris.")])));
//! use nexus_drive::{AsyncClient, Style};
//!
//! let client = AsyncClient::builder(Style::Anthropic, "claude-haiku-4-5")
//! #   .base_url(fake.base_url(nexus_tests::fake::Style::Anthropic)).api_key(fake.api_key())
//!     .build()?;
//! let result = smol::block_on(client.run("What is the capital of France?"))?;
//! println!("{}", result.text);
//! # assert_eq!(result.text, "Paris.");
//! # Ok::<(), nexus_drive::DriveError>(())
//! ```
//!
//! A base URL names the API root the wire format's paths are appended to:
//! for OpenAI and any OpenAI-compatible server it ends in `/v1`
//! (`https://api.openai.com/v1`, `http://localhost:11434/v1`). A client that
//! sets one sends the runs it resumes there too; one that does not sends
//! them to the base URL stored in the run.
//!
//! Both drivers share one pump (the crate's internal engine), so they cannot
//! drift. Both send through one HTTP/1.1 client ([ureq-proto](https://docs.rs/ureq-proto),
//! the engine under ureq, with rustls; a keep-alive pool per client): the
//! blocking one over std sockets, running a batch's tools on threads; the
//! async one over smol sockets, running a batch's tools as concurrent futures.
//!
//! ## Tools
//!
//! [`#[tool]`](macro@tool) makes a tool of a function. By hand, a typed tool has serde
//! arguments (a call whose arguments do not fit gets an error result naming
//! the problem, and the run goes on), an input schema (a tool whose
//! arguments have fields is refused without one) and any `Serialize`
//! output, given to the model in its fields' order. [`AsyncTool`] is the
//! same with a future, [`DynTool`] takes its schema and JSON arguments at run
//! time (MCP-style sources), and relay tools ([`ClientBuilder::relay_tool`])
//! are declarations whose calls go back to the caller. Any executed tool may
//! need a person's approval first ([`ApprovalPolicy`]).
//!
//! ```
//! # use nexus_tests::fake::{FakeProvider, Script, Scripts, Turn};
//! # let fake = FakeProvider::start(Scripts::default().model("gpt-4o-mini", Script::new(vec![
//! #     Turn::default().call("add", r#"{"a": 2, "b": 2}"#), Turn::text("2 + 2 = 4."),
//! # ])));
//! use nexus_drive::{blocking::Client, ClientConfig, Style, Tool, ToolContext, ToolError, ToolOutcome};
//! use serde::Deserialize;
//! use serde_json::{json, Value};
//!
//! #[derive(Deserialize)]
//! struct AddArgs {
//!     a: i64,
//!     b: i64,
//! }
//!
//! struct Add;
//!
//! impl Tool for Add {
//!     const NAME: &'static str = "add";
//!     type Args = AddArgs;
//!     type Output = i64;
//!
//!     fn description(&self) -> String {
//!         "Adds a and b".into()
//!     }
//!
//!     // Or derive it from `AddArgs` with the `schemars` feature.
//!     fn input_schema(&self) -> Option<Value> {
//!         Some(json!({
//!             "type": "object",
//!             "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
//!             "required": ["a", "b"],
//!         }))
//!     }
//!
//!     fn call(&self, args: AddArgs, _ctx: &ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
//!         Ok(ToolOutcome::Done(args.a + args.b))
//!     }
//! }
//!
//! let config = ClientConfig::builder(Style::OpenAi, "gpt-4o-mini")
//! #   .base_url(fake.base_url(nexus_tests::fake::Style::OpenAi)).api_key(fake.api_key())
//!     .tool(Add)
//!     .build()?;
//! let result = Client::new(config).run("What is 2 + 2?")?;
//! assert_eq!(result.tool_calls[0].output, "4");
//! # assert_eq!(result.text, "2 + 2 = 4.");
//! # Ok::<(), nexus_drive::DriveError>(())
//! ```
//!
//! ## Suspension: approvals, questions, relays
//!
//! The simplest approval is declarative: `#[tool(needs_approval)]`,
//! [`DynTool::needs_approval`] or [`ClientBuilder::needs_approval`] make a
//! call wait on an `approval` request before the tool runs (SPEC §19). A
//! tool may also suspend by itself:
//!
//! A tool that cannot finish without someone outside returns
//! [`ToolOutcome::Pending`] with a [`Request`]; every outstanding request of
//! a turn surfaces at once. The host either answers in-process
//! ([`ClientBuilder::wait_for`]), or lets the run end `pending`: the
//! [`RunResult`] then carries a [`SuspendedRun`] — the run's snapshot (no
//! secrets in it) and its requests — to keep in a [`RunStore`] and continue
//! later, in any process, with [`Client::run`] of a [`RunInput::resume`] or
//! [`RunInput::stored`] (or [`Client::resume`], [`Client::resume_stored`]).
//! On `ok: true` the same tool runs once more with the [`Answer`] in its
//! [`ToolContext`]; on `ok: false` the model gets an error result with the
//! answer's reason. A resume that would run a call of a tool the client does
//! not have is refused ([`DriveError::MissingTool`]), the stored run unchanged.
//!
//! ```
//! # use nexus_tests::fake::{FakeProvider, Script, Scripts, Turn};
//! # let fake = FakeProvider::start(Scripts::default().model("gpt-4o-mini", Script::new(vec![
//! #     Turn::default().call("send_email", r#"{"to": "sam@example.com"}"#), Turn::text("Sent."),
//! # ])));
//! use nexus_drive::{blocking::Client, Answer, ClientConfig, DynTool, Request, Style, ToolOutcome};
//! use serde_json::json;
//!
//! let send_email = DynTool::new("send_email", "Sends an email", json!({"type": "object"}), |args, ctx| {
//!     match ctx.answer() {
//!         None => Ok(ToolOutcome::Pending(Request::new("approval", format!("Email {}?", args["to"])))),
//!         Some(_approved) => Ok(ToolOutcome::Done(json!("sent"))),
//!     }
//! });
//! let config = ClientConfig::builder(Style::OpenAi, "gpt-4o-mini")
//! #   .base_url(fake.base_url(nexus_tests::fake::Style::OpenAi)).api_key(fake.api_key())
//!     .dyn_tool(send_email)
//!     .build()?;
//! let client = Client::new(config);
//!
//! let first = client.run("Email Sam the plan.")?;
//! let suspended = first.suspended.expect("pending on the approval");
//! // … store `suspended.state`, ask the user, and later (any process):
//! let answer = Answer::ok(suspended.pending[0].id.clone(), None);
//! let done = client.resume(&suspended.state, vec![answer])?;
//! assert_eq!(done.text, "Sent.");
//! # Ok::<(), nexus_drive::DriveError>(())
//! ```
//!
//! ## Streaming
//!
//! [`Client::stream`] yields the run's [`StreamEvent`]s as they happen (text
//! deltas as their bytes arrive, with `.stream(true)`), then its
//! [`RunResult`]; [`AsyncClient::stream`] is the same as a
//! `futures_lite::Stream`. Both take any [`RunInput`]: a stored run streams
//! the same way as a fresh one.
//!
//! ```no_run
//! use nexus_drive::{Client, StreamEvent, StreamItem, Style};
//!
//! let client = Client::builder(Style::Gemini, "gemini-2.5-flash").stream(true).build()?;
//! for item in client.stream("Tell me a story.") {
//!     match item? {
//!         StreamItem::Event(StreamEvent::TextDelta { text }) => print!("{text}"),
//!         StreamItem::Event(_) => {}
//!         StreamItem::Done(result) => println!("\n({} tokens)", result.usage.total_tokens),
//!     }
//! }
//! # Ok::<(), nexus_drive::DriveError>(())
//! ```
//!
//! ## What else is here
//!
//! * [`store`]: conversations by id (for [`Client::ask`]) and suspended runs
//!   with compare-and-swap claims, in memory or in files, and on SQLite and
//!   PostgreSQL (features below): a host uses [`RunStore`];
//!   [`stores::ClaimStore`] is for pools of workers.
//! * [`hooks`]: code around model and tool calls (rewrite, refuse, answer in
//!   a tool's place); [`metrics`]: one event per exchange, tool and run, and
//!   Prometheus text.
//! * [`cassette`]: record a session as JSON lines and replay it byte for byte.
//! * [`builtins`]: ten built-in tools (`bash`, `read`, `edit`, `grep`, …),
//!   each off until the host turns it on, confined to a root directory.
//! * [`skills`]: Agent Skills (`SKILL.md` folders): a catalog in the system
//!   prompt, a `skill` tool that loads one, its files readable once loaded.
//! * [`mcp`]: MCP servers' tools as tools of the loop (`{server}__{tool}`),
//!   over stdio or Streamable HTTP, both protocol eras; a question a server
//!   asks is a suspension like any other.
//! * [`serve`]: a gateway in front of any of the four wire formats (hyper on
//!   its own epoll event loops, HTTP/1.1 and h2c), with routes, client keys,
//!   limits, health and Prometheus metrics.
//! * [`CancelToken`], timeouts, retry policies, error classification: see
//!   [`ClientBuilder`].
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `blocking` | yes | [`Client`]: the HTTP/1.1 client (ureq-proto, rustls) over std sockets |
//! | `macros` | yes | [`#[tool]`](macro@tool): tools from plain functions (turns on `schemars`) |
//! | `async` | no | [`AsyncClient`] on smol: the same HTTP/1.1 client over smol sockets |
//! | `builtins` | with `cli` | the [`builtins`] module (compiled in, every tool still off until enabled) |
//! | `skills` | with `cli` | the [`skills`] module: Agent Skills discovered in folders, loaded on demand (saphyr parses their YAML) |
//! | `serve` | with `cli` | the [`serve`] gateway: hyper (HTTP/1.1 and h2c) on its own event loops (mio), the async driver's client upstream, TOML configuration |
//! | `redis` | with `cli` | `serve`'s `[limits] store = "redis://…"`: request and token limits, budgets and open circuits shared by every instance through Redis or Valkey (redis-rs's blocking client on a thread of its own) |
//! | `otel` | with `cli` | the [`telemetry`] module's spans and metrics in OpenTelemetry's GenAI conventions, exported over OTLP/HTTP (protobuf) by the official crates on a thread of their own (no tokio) |
//! | `cli` | no | the `nexus` binary (`run`, `resume`, `runs`, `replay`, `demo`, `tools`, `decode`, `serve`): `cargo run -p nexus-drive --features cli --bin nexus`; includes `sqlite` for `--store sqlite:PATH` |
//! | `mcp` | with `cli` | the [`mcp`] module: MCP servers' tools as tools of the loop (stdio, Streamable HTTP) |
//! | `schemars` | with `macros` | `Toolbox::add_derived` and `tool::schema_for`: input schemas derived from argument types |
//! | `sqlite` | with `cli` | [`SqliteStore`] (SQLite compiled in) |
//! | `postgres` | no | `PostgresStore`, for many workers over one database |
//!
//! ## Examples
//!
//! `nexus-drive/examples/` in the repository: `support_agent` (`#[tool]`
//! functions, a refund approved in-process and, stored in SQLite, by a
//! second process), `quickstart` (two typed tools),
//! `quickstart_async`, `approval` (`wait_for`), `durable_web_handler` (a run
//! suspended in one process and resumed in another), `relay_proxy`,
//! `streaming`, `mcp_tools` (an MCP server's tools); and `examples/tokio-driver`, a driver for `nexus-proto`
//! written by hand on tokio. Each runs offline against a scripted provider,
//! against the real API when its key is set, and against any
//! OpenAI-compatible server from `NEXUS_BASE_URL` (ending in `/v1`),
//! `NEXUS_MODEL` and `NEXUS_API_KEY`:
//! `cargo run -p nexus-drive --example quickstart`.
#![deny(missing_docs)]
#![forbid(unsafe_code)]
// The docs link the items of every feature; CI documents them all
// (`--all-features`), where every link is checked. A build with some
// features off has no target for the links to the others.
#![cfg_attr(
    not(all(
        feature = "async",
        feature = "builtins",
        feature = "skills",
        feature = "mcp",
        feature = "serve",
        feature = "sqlite",
        feature = "postgres"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]

mod agent;
#[cfg(feature = "skills")]
pub mod agent_files;
pub mod approval;
mod arg_fields;
mod cancel;
pub mod cassette;
pub mod config;
mod engine;
mod error;
#[cfg(any(feature = "blocking", feature = "async"))]
mod h1;
pub mod hooks;
#[cfg(any(feature = "blocking", feature = "async"))]
mod input;
#[cfg(feature = "machine-json")]
pub mod machine_json;
pub mod metrics;
mod result;
pub mod store;
pub mod stores;
pub mod telemetry;
pub mod tool;
pub mod workdir;

#[cfg(feature = "mcp")]
pub mod mcp;

#[cfg(feature = "async")]
pub mod asynchronous;
/// The async driver's former path.
#[cfg(feature = "async")]
#[deprecated(since = "0.2.0", note = "renamed `asynchronous`; `AsyncClient` is also at the crate root")]
pub mod asynk {
    pub use crate::asynchronous::*;
}
#[cfg(feature = "blocking")]
pub mod blocking;
#[cfg(feature = "builtins")]
pub mod builtins;
#[cfg(feature = "serve")]
pub mod serve;
#[cfg(feature = "skills")]
pub mod skills;

/// The core, `nexus-proto`, whole: the sans-IO machine ([`proto::Run`]),
/// its inputs and outputs, the wire codecs. A host of the drivers needs only
/// this crate; everything a host commonly names is also re-exported below.
pub use nexus_proto as proto;

pub use agent::AgentTool;
pub use approval::ApprovalPolicy;
#[cfg(feature = "async")]
pub use asynchronous::AsyncClient;
#[cfg(feature = "blocking")]
pub use blocking::Client;
pub use cancel::CancelToken;
pub use config::{ClientBuilder, ClientConfig, FailureInfo, RetryDecision};
pub use error::DriveError;
pub use hooks::{BeforeTool, HookAbort, Hooks};
#[cfg(any(feature = "blocking", feature = "async"))]
pub use input::RunInput;
pub use metrics::{Metric, Metrics};
pub use result::{CompactionReport, FailoverReport, RunResult, RunStatus, StreamItem, SuspendedRun, UpstreamTurn};
pub use store::{
    ConversationStore, FileConversationStore, FileRunStore, MemoryConversationStore, MemoryRunStore, RunRecord,
    RunStore, StoreError,
};
#[cfg(feature = "postgres")]
pub use stores::postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use stores::sqlite::SqliteStore;
pub use tool::{
    AsyncTool, DynTool, Tool, ToolContext, ToolError, ToolOutcome, Toolbox, ToolboxError, RESERVED_BUILTINS,
};

/// Typed final output: the spec, the strategy rule ([`output::decide`]) and the schema lowering.
pub use nexus_proto::output;

/// `#[tool]`: a tool from a plain `fn` or `async fn` (feature `macros`).
///
/// The model calls it by the function's name and reads its doc comment;
/// its input schema is derived from the arguments (an `Option` is not
/// required; `* \`name\` - text` lines under a `# Arguments` heading describe
/// them). An argument of type `&ToolContext` (or `ToolContext`) is the
/// call's context. The function becomes a unit struct of the same name
/// implementing [`Tool`] (or [`AsyncTool`] for an `async fn`), registered
/// with [`ClientBuilder::tool`] (or [`ClientBuilder::async_tool`]); the
/// function itself stays callable as `name::function(..)`.
///
/// It returns a value, a [`ToolOutcome`], or a `Result` of either whose
/// error converts into [`ToolError`]. Options: `name = "..."`,
/// `description = "..."`, `needs_approval` (every call) or
/// `needs_approval = path` (the calls for whose arguments `path(&Value)` holds).
///
/// ```
/// use nexus_drive::{tool, Tool, ToolError};
///
/// /// Looks up an order's status.
/// ///
/// /// # Arguments
/// /// * `order_id` - The order's id, as printed on the receipt.
/// #[tool]
/// fn order_status(order_id: String) -> Result<String, ToolError> {
///     Ok(format!("{order_id}: shipped"))
/// }
///
/// assert_eq!(order_status::NAME, "order_status");
/// assert_eq!(order_status.description(), "Looks up an order's status.");
/// let schema = order_status.input_schema().unwrap();
/// assert_eq!(schema["required"], serde_json::json!(["order_id"]));
/// assert_eq!(schema["properties"]["order_id"]["description"], "The order's id, as printed on the receipt.");
/// assert_eq!(order_status::function("A1".into()).unwrap(), "A1: shipped");
/// ```
#[cfg(feature = "macros")]
pub use nexus_macros::tool;

/// What `#[tool]` expands to names these; not an API.
#[cfg(feature = "macros")]
#[doc(hidden)]
pub mod __private {
    pub use schemars;
    pub use serde;
    pub use serde_json;
}

pub use nexus_proto::{
    AgentReport, Answer, BreakerPolicy, Breakers, ClearToolUses, Compaction, ContextPolicy, FailoverPolicy, Message,
    OutputError, OutputMode, OutputSpec, ProviderCompaction, Request, ResponsesCompaction, RunError, StopReason,
    Strategy, StrategyRecord, StreamEvent, Style, Timestamp, ToolCallRecord, ToolDecl, ToolReply, ToolResult, Upstream,
    Usage,
};
