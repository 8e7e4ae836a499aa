//! # nexus-drive
//!
//! Drivers for [`nexus_proto`]: they do the I/O and run the tools; the
//! [`Run`](nexus_proto::Run) machine decides everything else (retries,
//! backoff, turn limits, transcript balance, suspension bookkeeping).
//!
//! Two drivers share one pump (the crate's internal engine), so they cannot drift:
//!
//! * [`blocking::Client`] (feature `blocking`, on by default) sends over
//!   [ureq](https://docs.rs/ureq) and runs a batch's tools on threads;
//! * [`asynk::AsyncClient`] (feature `async`, on by default) runs on
//!   [smol](https://docs.rs/smol) with its own HTTP/1.1 client (ureq-proto over
//!   smol sockets, rustls) and runs a batch's tools as concurrent futures.
//!
//! ```no_run
//! # #[cfg(feature = "blocking")] {
//! use nexus_drive::{blocking::Client, ClientConfig, DynTool, Style, ToolOutcome};
//! use serde_json::json;
//!
//! let config = ClientConfig::builder(Style::OpenAi, "gpt-4o-mini")
//!     .dyn_tool(DynTool::new("add", "Adds a and b", json!({"type": "object"}), |args, _ctx| {
//!         let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
//!         Ok(ToolOutcome::Done(json!(sum)))
//!     }))
//!     .build()?;
//! let client = Client::new(config);
//! let result = client.run("What is 2 + 2?")?;
//! println!("{}", result.text);
//! # }
//! # Ok::<(), nexus_drive::DriveError>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod cancel;
pub mod cassette;
pub mod config;
mod engine;
mod error;
pub mod hooks;
pub mod metrics;
mod result;
pub mod store;
pub mod stores;
pub mod tool;

#[cfg(feature = "async")]
pub mod asynk;
#[cfg(feature = "blocking")]
pub mod blocking;
#[cfg(feature = "builtins")]
pub mod builtins;
#[cfg(feature = "blocking")]
pub mod serve;

pub use cancel::CancelToken;
pub use config::{ClientBuilder, ClientConfig, FailureInfo, RetryDecision};
pub use error::DriveError;
pub use hooks::{BeforeTool, HookAbort, Hooks};
pub use metrics::{Metric, Metrics};
pub use result::{RunResult, RunStatus, StreamItem, SuspendedRun};
pub use store::{
    ConversationStore, FileConversationStore, FileRunStore, MemoryConversationStore,
    MemoryRunStore, RunRecord, RunStore, StoreError,
};
pub use tool::{
    AsyncTool, DynTool, Tool, ToolContext, ToolError, ToolOutcome, Toolbox, ToolboxError,
    RESERVED_BUILTINS,
};

pub use nexus_proto::{
    Answer, Message, Request, RunError, StopReason, StreamEvent, Style, Timestamp, ToolCallRecord,
    ToolDecl, ToolReply, ToolResult, Usage,
};
