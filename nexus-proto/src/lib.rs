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
//!
//! ## Driving a run
//!
//! Feed inputs with [`Run::handle_input`]; after each one, call
//! [`Run::poll_output`] until it returns [`Output::Wait`] or [`Output::Done`].
//! A complete driver over any HTTP client fits in a screen:
//!
//! ```no_run
//! use nexus_proto::*;
//!
//! # fn http_post(_r: &HttpRequest) -> (u16, Vec<(String, String)>, Vec<u8>) { unimplemented!() }
//! # fn now() -> Timestamp { Timestamp(0) }
//! # fn ask_the_human(_r: &Request) -> Answer { unimplemented!() }
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
//! # Ok::<(), InputError>(())
//! ```
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
//! - **Durable state**: [`Run::snapshot`] / [`Run::restore`], versioned JSON,
//!   no secrets.
//!
//! See `SPEC.md` in the repository for the full contract.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod config;
pub mod error;
pub mod event;
mod gate;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
mod ledger;
pub mod message;
pub mod provider;
mod rng;
mod run;
pub mod sse;
mod state;
pub mod suspend;
pub mod time;
pub mod tool;
pub mod translate;

pub use error::{DecodeError, GateError, InputError, ProviderError, RemoteError, RunError, StateError, TransportErrorKind};
pub use event::StreamEvent;
pub use http::{ExchangeId, HttpRequest};
pub use message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock, Usage};
pub use provider::{CallIds, ModelCall, Stop, StopReason, Style, TurnResponse};
pub use sse::{SseDecoder, SseEvent};
pub use suspend::{Answer, RelayCall, Request, ToolReply, ToolResult};
pub use time::Timestamp;
pub use tool::{ToolDecl, ToolKind};
pub use config::{RetryPolicy, RunConfig};
pub use gate::check as check_transcript;
pub use ledger::{ToolBatch, ToolInvocation};
pub use run::{Input, Outcome, Output, Run, Status, ToolCallRecord};
pub use state::FORMAT_VERSION;
