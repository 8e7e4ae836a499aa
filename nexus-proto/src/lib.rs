//! # nexus-proto
//!
//! The LLM tool-calling loop as a sans-IO state machine.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod error;
pub mod event;
pub mod http;
pub mod message;
pub mod provider;
mod rng;
pub mod sse;
pub mod suspend;
pub mod time;
pub mod tool;

pub use error::{DecodeError, GateError, InputError, ProviderError, RemoteError, RunError, StateError, TransportErrorKind};
pub use event::StreamEvent;
pub use http::{ExchangeId, HttpRequest};
pub use message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock, Usage};
pub use provider::{CallIds, ModelCall, Stop, StopReason, Style, TurnResponse};
pub use sse::{SseDecoder, SseEvent};
pub use suspend::{Answer, RelayCall, Request, ToolReply, ToolResult};
pub use time::Timestamp;
pub use tool::{ToolDecl, ToolKind};
