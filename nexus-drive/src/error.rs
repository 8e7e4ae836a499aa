//! The drivers' error type.

use nexus_proto::{InputError, RunError, StateError};
use thiserror::Error;

use crate::store::StoreError;
use crate::tool::ToolboxError;

/// Why a driver call did not produce a [`RunResult`](crate::RunResult).
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum DriveError {
    /// The run failed: the provider refused (its status and message are kept),
    /// its bytes made no sense, the network failed after retries, the
    /// deadline passed, or the run was cancelled.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The call was refused before anything changed (an answer whose id
    /// matches no outstanding request, an invalid config, …).
    #[error(transparent)]
    Input(#[from] InputError),
    /// A saved state could not be restored. Nothing was changed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The client configuration is unusable (a missing API key variable, a bad tool set, …).
    #[error("invalid client config: {0}")]
    Config(String),
    /// A tool registration was refused.
    #[error(transparent)]
    Toolbox(#[from] ToolboxError),
    /// A hook aborted the run.
    #[error("aborted by hook: {0}")]
    Hook(String),
    /// A resumed run would run a call (an approved suspension, an in-doubt
    /// call asked to re-run) of a tool this client does not have. Nothing
    /// ran and nothing changed: a stored run is written back as it was.
    /// Resume it with a client that registers the tool, or decline the call.
    #[error("the run would run tool {tool:?} (call {call_id}), which this client does not have; nothing was changed")]
    MissingTool {
        /// The tool's name, as declared in the run.
        tool: String,
        /// The provider's call id.
        call_id: String,
    },
    /// A conversation or run store failed (or refused a stale write).
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl DriveError {
    /// The provider's HTTP status, when the run failed on a provider error that came as one.
    pub fn status(&self) -> Option<u16> {
        match self {
            DriveError::Run(RunError::Provider(p)) => p.status,
            _ => None,
        }
    }

    /// Whether the run ended because the host cancelled it.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, DriveError::Run(RunError::Cancelled))
    }
}
