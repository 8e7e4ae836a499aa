//! Rust errors as the package's exception hierarchy, with the Rust error's
//! message: `NexusError` → provider, limit, state, tool, config, store,
//! cancelled, replay, output (invalid, refused, truncated).

use nexus_drive::DriveError;
use nexus_proto::{OutputError, RunError};
use pyo3::prelude::*;
use pyo3::PyErr;

use crate::{
    ConfigError, LimitError, NexusError, OutputInvalidError, OutputRefusedError, OutputTruncatedError, ProviderError,
    RunCancelled, StateError, StoreError, ToolError,
};

/// The exception a driver error is raised as.
pub fn drive(e: DriveError) -> PyErr {
    let message = e.to_string();
    match e {
        DriveError::Run(RunError::Cancelled) => RunCancelled::new_err(message),
        DriveError::Run(RunError::Output(o)) => output(o, message),
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

/// A run that ended without a valid typed output: the subclass by kind,
/// with what the model wrote as `raw` (and, when invalid, `attempts` and
/// the validation `errors`) as attributes.
fn output(e: OutputError, message: String) -> PyErr {
    let (err, raw, detail) = match e {
        OutputError::Invalid { attempts, raw, errors } => {
            (OutputInvalidError::new_err(message), raw, Some((attempts, errors)))
        }
        OutputError::Refused { message: why } => (OutputRefusedError::new_err(message), why, None),
        OutputError::Truncated { raw } => (OutputTruncatedError::new_err(message), raw, None),
        _ => (crate::OutputError::new_err(message), String::new(), None),
    };
    Python::attach(|py| {
        let value = err.value(py);
        let (attempts, errors) = detail.unwrap_or_default();
        // Setting attributes on a fresh exception instance cannot fail.
        let _ = value.setattr("raw", raw);
        let _ = value.setattr("attempts", attempts);
        let _ = value.setattr("errors", errors);
    });
    err
}
