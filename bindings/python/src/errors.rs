//! Rust errors as the package's exception hierarchy, with the Rust error's
//! message: `NexusError` → provider, limit, state, tool, config, store,
//! cancelled, replay.

use nexus_drive::DriveError;
use nexus_proto::RunError;
use pyo3::PyErr;

use crate::{ConfigError, LimitError, NexusError, ProviderError, RunCancelled, StateError, StoreError, ToolError};

/// The exception a driver error is raised as.
pub fn drive(e: DriveError) -> PyErr {
    let message = e.to_string();
    match e {
        DriveError::Run(RunError::Cancelled) => RunCancelled::new_err(message),
        DriveError::Run(RunError::DeadlineExceeded) => LimitError::new_err(message),
        DriveError::Run(RunError::Transport { kind: nexus_proto::TransportErrorKind::Timeout, .. }) => {
            LimitError::new_err(message)
        }
        DriveError::Run(_) => ProviderError::new_err(message),
        DriveError::Input(_) | DriveError::State(_) => StateError::new_err(message),
        DriveError::Config(_) => ConfigError::new_err(message),
        DriveError::Toolbox(_) | DriveError::Hook(_) => ToolError::new_err(message),
        DriveError::Store(_) => StoreError::new_err(message),
        _ => NexusError::new_err(message),
    }
}

/// A bad value handed over by the facade (JSON it should not have built).
pub fn config(what: &str, e: impl std::fmt::Display) -> PyErr {
    ConfigError::new_err(format!("{what}: {e}"))
}

/// A store error.
pub fn store(e: nexus_drive::StoreError) -> PyErr {
    StoreError::new_err(e.to_string())
}
