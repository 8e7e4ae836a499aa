//! # nexus-drive
//!
//! Drivers for [`nexus_proto`]: they do the I/O and run the tools; the
//! [`Run`](nexus_proto::Run) machine decides everything else (retries,
//! backoff, turn limits, transcript balance, suspension bookkeeping).
//!
//! ## Quickstart
//!
//! Blocking, on [`blocking::Client`] (the API key is read from the style's
//! variable: `OPENAI_API_KEY`, `ANTHROPIC_API_KEY` or `GEMINI_API_KEY`):
//!
//! ```
//! # use nexus_tests::fake::{FakeProvider, Script, Scripts, Turn};
//! # let fake = FakeProvider::start(Scripts::default().model("gpt-4o-mini", Script::new(vec![Turn::text("Paris.")])));
//! use nexus_drive::{blocking::Client, ClientConfig, Style};
//!
//! let config = ClientConfig::builder(Style::OpenAi, "gpt-4o-mini")
//! #   .base_url(fake.base_url(nexus_tests::fake::Style::OpenAi)).api_key(fake.api_key())
//!     .build()?;
//! let result = Client::new(config).run("What is the capital of France?")?;
//! println!("{}", result.text);
//! # assert_eq!(result.text, "Paris.");
//! # Ok::<(), nexus_drive::DriveError>(())
//! ```
//!
//! Async, on [`asynk::AsyncClient`] (any executor that drives smol's reactor):
//!
//! ```
//! # use nexus_tests::fake::{FakeProvider, Script, Scripts, Turn};
//! # let fake = FakeProvider::start(Scripts::default().model("claude-haiku-4-5", Script::new(vec![Turn::text("Paris.")])));
//! use nexus_drive::{asynk::AsyncClient, ClientConfig, Style};
//!
//! let config = ClientConfig::builder(Style::Anthropic, "claude-haiku-4-5")
//! #   .base_url(fake.base_url(nexus_tests::fake::Style::Anthropic)).api_key(fake.api_key())
//!     .build()?;
//! let result = smol::block_on(AsyncClient::new(config).run("What is the capital of France?"))?;
//! println!("{}", result.text);
//! # assert_eq!(result.text, "Paris.");
//! # Ok::<(), nexus_drive::DriveError>(())
//! ```
//!
//! Both drivers share one pump (the crate's internal engine), so they cannot
//! drift. Both send through one HTTP/1.1 client ([ureq-proto](https://docs.rs/ureq-proto),
//! the engine under ureq, with rustls; a keep-alive pool per client): the
//! blocking one over std sockets, running a batch's tools on threads; the
//! async one over smol sockets, running a batch's tools as concurrent futures.
//!
//! ## Tools
//!
//! A typed tool has serde arguments (a call whose arguments do not fit gets
//! an error result naming the problem, and the run goes on) and any
//! `Serialize` output. [`AsyncTool`] is the same with a future, [`DynTool`]
//! takes its schema and JSON arguments at run time (MCP-style sources), and
//! relay tools ([`ClientBuilder::relay_tool`]) are declarations whose calls
//! go back to the caller.
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
//! A tool that cannot finish without someone outside returns
//! [`ToolOutcome::Pending`] with a [`Request`]; every outstanding request of
//! a turn surfaces at once. The host either answers in-process
//! ([`ClientBuilder::wait_for`]), or lets the run end `pending`: the
//! [`RunResult`] then carries a [`SuspendedRun`] — the run's snapshot (no
//! secrets in it) and its requests — to keep in a [`RunStore`] and continue
//! later, in any process, with [`blocking::Client::resume`] or
//! [`blocking::Client::resume_stored`]. On `ok: true` the same tool runs once
//! more with the [`Answer`] in its [`ToolContext`]; on `ok: false` the model
//! gets an error result.
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
//! [`blocking::Client::stream`] yields the run's [`StreamEvent`]s as they
//! happen (text deltas as their bytes arrive, with `.stream(true)`), then
//! its [`RunResult`]; [`asynk::AsyncClient::stream`] is the same as a
//! `futures_lite::Stream`.
//!
//! ```no_run
//! use nexus_drive::{blocking::Client, ClientConfig, StreamEvent, StreamItem, Style};
//!
//! let client = Client::new(ClientConfig::builder(Style::Gemini, "gemini-2.5-flash").stream(true).build()?);
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
//! * [`store`]: conversations by id (for [`blocking::Client::ask`]) and
//!   suspended runs with compare-and-swap claims, in memory or in files;
//!   [`stores`]: the same on SQLite and PostgreSQL (features below).
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
//!   smol, HTTP/1.1 and h2c), with routes, client keys, limits, health and
//!   Prometheus metrics.
//! * [`CancelToken`], timeouts, retry policies, error classification: see
//!   [`ClientBuilder`].
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `blocking` | yes | [`blocking::Client`]: the HTTP/1.1 client (ureq-proto, rustls) over std sockets |
//! | `async` | yes | [`asynk::AsyncClient`] on smol: the same HTTP/1.1 client over smol sockets |
//! | `builtins` | yes | the [`builtins`] module (compiled in, every tool still off until enabled) |
//! | `skills` | yes | the [`skills`] module: Agent Skills discovered in folders, loaded on demand (saphyr parses their YAML) |
//! | `serve` | with `cli` | the [`serve`] gateway: hyper (HTTP/1.1 and h2c) on smol, the async driver's client upstream, TOML configuration |
//! | `redis` | with `cli` | `serve`'s `[limits] store = "redis://…"`: request and token limits, budgets and open circuits shared by every instance through Redis or Valkey (redis-rs's blocking client on a thread of its own) |
//! | `cli` | yes | the `nexus` binary (`run`, `resume`, `runs`, `replay`, `demo`, `tools`, `decode`, `serve`); includes `sqlite` for `--store sqlite:PATH` |
//! | `mcp` | yes | the [`mcp`] module: MCP servers' tools as tools of the loop (stdio, Streamable HTTP) |
//! | `schemars` | no | `Toolbox::add_derived` and `tool::schema_for`: input schemas derived from argument types |
//! | `sqlite` | with `cli` | `stores::sqlite::SqliteStore` (SQLite compiled in) |
//! | `postgres` | no | `stores::postgres::PostgresStore`, for many workers over one database |
//!
//! ## Examples
//!
//! `nexus-drive/examples/` in the repository: `quickstart` (two typed tools),
//! `quickstart_async`, `approval` (`wait_for`), `durable_web_handler` (a run
//! suspended in one process and resumed in another), `relay_proxy`,
//! `streaming`, `mcp_tools` (an MCP server's tools); and `examples/tokio-driver`, a driver for `nexus-proto`
//! written by hand on tokio. Each runs offline against a scripted provider,
//! and against the real API when its key is set:
//! `cargo run -p nexus-drive --example quickstart`.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod agent;
#[cfg(feature = "skills")]
pub mod agent_files;
mod cancel;
pub mod cassette;
pub mod config;
mod engine;
mod error;
#[cfg(any(feature = "blocking", feature = "async"))]
mod h1;
pub mod hooks;
pub mod metrics;
mod result;
pub mod store;
pub mod stores;
pub mod tool;

#[cfg(feature = "mcp")]
pub mod mcp;

#[cfg(feature = "async")]
pub mod asynk;
#[cfg(feature = "blocking")]
pub mod blocking;
#[cfg(feature = "builtins")]
pub mod builtins;
#[cfg(feature = "serve")]
pub mod serve;
#[cfg(feature = "skills")]
pub mod skills;

pub use agent::AgentTool;
pub use cancel::CancelToken;
pub use config::{ClientBuilder, ClientConfig, FailureInfo, RetryDecision};
pub use error::DriveError;
pub use hooks::{BeforeTool, HookAbort, Hooks};
pub use metrics::{Metric, Metrics};
pub use result::{CompactionReport, FailoverReport, RunResult, RunStatus, StreamItem, SuspendedRun, UpstreamTurn};
pub use store::{
    ConversationStore, FileConversationStore, FileRunStore, MemoryConversationStore, MemoryRunStore, RunRecord,
    RunStore, StoreError,
};
pub use tool::{
    AsyncTool, DynTool, Tool, ToolContext, ToolError, ToolOutcome, Toolbox, ToolboxError, RESERVED_BUILTINS,
};

/// Typed final output: the spec, the strategy rule ([`output::decide`]) and the schema lowering.
pub use nexus_proto::output;
pub use nexus_proto::{
    AgentReport, Answer, BreakerPolicy, Breakers, ClearToolUses, Compaction, ContextPolicy, FailoverPolicy, Message,
    OutputError, OutputMode, OutputSpec, Request, RunError, StopReason, Strategy, StrategyRecord, StreamEvent, Style,
    Timestamp, ToolCallRecord, ToolDecl, ToolReply, ToolResult, Upstream, Usage,
};
