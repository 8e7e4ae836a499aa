//! # nexus-proto
//!
//! The LLM tool-calling loop — model call → tool calls → tool results → model
//! call — as a synchronous, sans-IO state machine. It speaks Anthropic
//! Messages, OpenAI Chat Completions and Gemini `generateContent`, streamed
//! and not, over one neutral transcript.
//!
//! The core never does I/O, never reads a clock, never spawns, never sleeps
//! and draws no randomness of its own: the driver passes `now` with every
//! input and seeds the config. That makes every run reproducible and lets
//! the same machine sit under a blocking driver, an async one, or yours.
//! Ready-made drivers (blocking on ureq, async on smol, with typed tools and
//! stores) are in the `nexus-drive` crate; this one is for writing your own.
//!
//! ## The driving loop
//!
//! A [`Run`] is driven with two calls, in the style of
//! [str0m](https://docs.rs/str0m):
//!
//! * [`Run::handle_input`]`(now, input)` hands it something that happened:
//!   a response head, a piece of a body, its end, a transport failure, a
//!   tool's reply, an answer to a suspension, a timer firing, a cancel. An
//!   input it refuses ([`InputError`]: a response for an exchange it
//!   abandoned, an answer to nothing, time going backwards, …) changes
//!   nothing, so a driver may log it and go on.
//! * [`Run::poll_output`] says what to do next. After each input, poll until
//!   it returns [`Output::Wait`] or [`Output::Done`]:
//!
//! | [`Output`] | the driver |
//! |---|---|
//! | `Send(HttpRequest)` | sends it and feeds the response back under its [`ExchangeId`], chunk by chunk as it arrives |
//! | `RunTools(ToolBatch)` | runs every call (concurrently if it likes) and feeds each reply back, in any order |
//! | `Event(StreamEvent)` | shows it: text and reasoning deltas, tool calls, results, retries |
//! | `Suspended(Vec<Request>)` | answers the requests now, or stores [`Run::snapshot`] and stops |
//! | `Wait { until }` | waits for the next input; if `until` passes first, feeds [`Input::Timeout`] |
//! | `Done(Outcome)` | stops: done, incomplete (a limit) or failed |
//!
//! Retries and their backoff, turn limits, the deadline, transcript balance
//! and the tool-call ledger are the machine's business; the driver moves
//! bytes, runs tools and keeps time. `now` is milliseconds since the Unix
//! epoch and must never go backwards.
//!
//! A complete driver over any HTTP client fits in a screen (this one runs
//! as a test, against canned OpenAI responses):
//!
//! ```
//! use nexus_proto::*;
//!
//! # fn http_post(req: &HttpRequest) -> (u16, Vec<(String, String)>, Vec<u8>) {
//! #     let body = String::from_utf8_lossy(&req.body);
//! #     let json = if body.contains(r#""role":"tool""#) {
//! #         r#"{"id":"chatcmpl-2","object":"chat.completion","created":0,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"2 + 2 = 4."},"finish_reason":"stop"}],"usage":{"prompt_tokens":30,"completion_tokens":8,"total_tokens":38}}"#
//! #     } else {
//! #         r#"{"id":"chatcmpl-1","object":"chat.completion","created":0,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"add","arguments":"{\"a\":2,\"b\":2}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":20,"completion_tokens":10,"total_tokens":30}}"#
//! #     };
//! #     (200, vec![("content-type".into(), "application/json".into())], json.as_bytes().to_vec())
//! # }
//! # fn now() -> Timestamp { Timestamp(1_700_000_000_000) }
//! # fn ask_the_human(r: &Request) -> Answer { Answer::ok(r.id.clone(), None) }
//! let config = RunConfig::new(Style::OpenAi, "gpt-4o-mini");
//! let tools = vec![ToolDecl::new("add", "Adds a and b", serde_json::json!({
//!     "type": "object",
//!     "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
//! }))];
//! let mut run = Run::new(config, tools, vec![Message::user("What is 2 + 2?")])?;
//! run.set_api_key("sk-…"); // memory only: never in a snapshot
//!
//! let outcome = loop {
//!     match run.poll_output() {
//!         Output::Send(req) => {
//!             let (status, headers, body) = http_post(&req);
//!             let ex = req.exchange;
//!             run.handle_input(now(), Input::ResponseHead { exchange: ex, status, headers })?;
//!             run.handle_input(now(), Input::ResponseBody { exchange: ex, chunk: &body })?;
//!             run.handle_input(now(), Input::ResponseEnd { exchange: ex })?;
//!         }
//!         Output::RunTools(batch) => {
//!             for call in batch.calls {
//!                 let sum = call.input["a"].as_f64().unwrap_or(0.0) + call.input["b"].as_f64().unwrap_or(0.0);
//!                 let reply = ToolReply::Done(ToolResult::ok(sum.to_string()));
//!                 run.handle_input(now(), Input::ToolReply { call_id: call.call_id, reply })?;
//!             }
//!         }
//!         Output::Event(StreamEvent::TextDelta { text }) => print!("{text}"),
//!         Output::Event(_) => {}
//!         Output::Suspended(requests) => {
//!             // In-process: answer now. Durable: store run.snapshot() and
//!             // later Run::restore(..) and feed the answers, in any process.
//!             for r in &requests {
//!                 run.handle_input(now(), Input::Answer(ask_the_human(r)))?;
//!             }
//!         }
//!         Output::Wait { until: Some(t) } => {
//!             // retry backoff or the deadline: sleep until `t`, then
//!             run.handle_input(t, Input::Timeout)?;
//!         }
//!         Output::Wait { until: None } => unreachable!("this driver completes every exchange inline"),
//!         Output::Done(outcome) => break outcome,
//!     }
//! };
//! println!("\n{outcome:?}: {}", run.final_text());
//! # assert_eq!(outcome, Outcome::Done);
//! # assert_eq!(run.final_text(), "2 + 2 = 4.");
//! # assert_eq!(run.tool_calls()[0].output, "4");
//! # Ok::<(), InputError>(())
//! ```
//!
//! This driver does one thing at a time. A concurrent one keeps the same
//! loop but runs each exchange and each tool call as a task of its own,
//! returns to the loop on `Wait`, and feeds the inputs as the tasks report
//! them; a late report from an exchange the machine abandoned (after a retry
//! or a cancel) is refused by its [`ExchangeId`] and changes nothing.
//! `examples/tokio-driver` in the repository is such a driver on tokio and
//! reqwest, in one file.
//!
//! ## Durable runs
//!
//! [`Run::snapshot`] is the whole run as versioned JSON, API key and secret
//! headers left out; [`Run::restore`] brings it back in any process, and the
//! run continues exactly as the uninterrupted one would have. Snapshot a
//! suspended run, store it, answer it a week later:
//!
//! ```
//! # use nexus_proto::*;
//! # fn suspended_run() -> Run { Run::new(RunConfig::new(Style::OpenAi, "m"), vec![], vec![Message::user("hi")]).unwrap() }
//! # let run = suspended_run();
//! let state: Vec<u8> = run.snapshot(); // no secrets in it
//! // … store it; later, anywhere:
//! let mut run = Run::restore(&state)?;
//! run.set_api_key("sk-…");
//! for request in run.outstanding() {
//!     run.handle_input(Timestamp(1_700_000_000_000), Input::Answer(Answer::ok(request.id, None)))?;
//! }
//! // …and drive it as above.
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## MCP servers
//!
//! [`mcp::Session`] is an MCP client for one server, driven the same way:
//! the transport feeds it received messages and `now`, and sends what it
//! says to transmit. A server's tools become ordinary tools of the loop, and
//! a server asking the user something becomes a `Pending(Request)` like any
//! other suspension. See the [`mcp`] module docs for its driving loop.
//!
//! ## Sub-agents
//!
//! A [`RunConfig`] may list [`AgentSpec`]s: each is a tool whose execution is
//! a child run (its own upstream in any wire format, prompt, tools and turn
//! limit) held inside the parent's state. The parent's `poll_output` drives
//! the whole tree, with ids qualified by the agent path (`call_p1/toolu_c1`);
//! inputs route by path to the run that owns them. See [`agent`].
//!
//! ## Failover
//!
//! A [`RunConfig`] may list fallback [`Upstream`]s after its primary, in any
//! wire format. When the upstream is at fault (a reset, a timeout, a 5xx, a
//! 429/529 after its retries) and nothing of the answer reached the host,
//! the machine moves the turn to the next upstream and re-encodes the
//! transcript for it ([`StreamEvent::Failover`]); [`FailoverPolicy`] holds
//! the rules. Give each fallback its key with [`Run::set_upstream_api_key`].
//! Circuit breakers ([`Breakers`]) are the host's, shared by its runs: call
//! [`Run::sync_circuits`] before polling and routing skips open circuits.
//! A driver that enforces the policy's head timeout feeds
//! [`Input::Timeout`] as it sends and bounds its wait for the response head
//! by [`Run::head_deadline`].
//!
//! ## Guarantees
//!
//! - **Balanced transcripts**: every request passes a pre-send gate; a tool
//!   call always has its result in the very next turn.
//! - **Suspension is one primitive**: a tool may reply `Pending(Request)`;
//!   every outstanding request of a turn surfaces at once (all relay calls
//!   of a turn together as one `tool_call` request); completed results are
//!   kept and never re-run.
//! - **Exactly-once ledger**: a call running when a snapshot was taken comes
//!   back *in doubt* instead of being silently re-run or dropped.
//! - **Durable state**: [`Run::snapshot`] / [`Run::restore`], versioned JSON
//!   ([`FORMAT_VERSION`]), byte-identical round trips, no secrets.
//! - **Context budget** (with [`RunConfig::context`]): no request goes out
//!   over the model's window; the run compacts first, as a recorded summary
//!   request, and ends with [`RunError::ContextExhausted`] when nothing can
//!   fit (see [`context`]).
//! - **No panics on remote bytes**: every malformed response becomes a typed
//!   error ([`DecodeError`], [`ProviderError`]) and a failed run, never a panic.
//!
//! ## Features
//!
//! | feature | default | what it adds |
//! |---|---|---|
//! | `fuzzing` | no | `arbitrary::Arbitrary` on the inputs and the fuzz targets' helpers (not a stable API) |
//!
//! Dependencies: serde, serde_json and thiserror, nothing else.
//!
//! See `SPEC.md` in the repository for the full contract: wire shapes, loop
//! rules, the suspension protocol and the state format.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod agent;
pub mod config;
pub mod context;
pub mod error;
pub mod event;
pub mod failover;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
mod gate;
pub mod http;
pub mod json;
mod ledger;
pub mod mcp;
pub mod message;
pub mod output;
pub mod provider;
mod rng;
mod run;
pub mod schema;
pub mod sse;
mod state;
pub mod suspend;
pub mod time;
pub mod tool;
pub mod translate;

pub use agent::{AgentReport, AgentSpec, Agents};
pub use config::{RetryPolicy, RunConfig};
pub use context::{
    ClearToolUses, Compaction, ContextItem, ContextPolicy, ProviderCompaction, ResponsesCompaction, TokenCount,
};
pub use error::{
    DecodeError, GateError, InputError, ProviderError, RemoteError, RunError, StateError, TransportErrorKind,
};
pub use event::StreamEvent;
pub use failover::{
    Attempt, BreakerPolicy, Breakers, CircuitState, Decision, FailoverPolicy, FailoverRecord, ServedTurn, Upstream,
};
pub use gate::check as check_transcript;
pub use http::{ExchangeId, HttpRequest};
pub use ledger::{ToolBatch, ToolInvocation, MAX_SUSPENSION_ROUNDS};
pub use message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock, Usage};
pub use output::{OutputError, OutputMode, OutputSpec, Strategy, StrategyRecord};
pub use provider::{CallIds, ModelCall, Stop, StopReason, Style, TurnResponse};
pub use run::{Input, Outcome, Output, Run, Status, ToolCallRecord};
pub use sse::{SseDecoder, SseEvent};
pub use state::FORMAT_VERSION;
pub use suspend::{Answer, RelayCall, Request, ToolReply, ToolResult};
pub use time::Timestamp;
pub use tool::{ToolDecl, ToolKind, ToolSet};
