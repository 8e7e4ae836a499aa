//! The durable state format.
//!
//! A run serializes to one JSON object with a `format_version`. Deserialize →
//! continue gives the outputs the uninterrupted run would have given;
//! serialize → deserialize → serialize is byte-identical. No API key or
//! secret header ever enters it (they live in [`Run`]'s memory only). Old
//! versions are migrated on load; `tests/fixtures/state/` keeps one file per
//! released version and CI loads them all.

use serde::Deserialize;

use crate::error::StateError;
use crate::run::{Run, RunState};

/// The version this build writes.
pub const FORMAT_VERSION: u64 = 1;

#[derive(Deserialize)]
struct VersionProbe {
    format_version: Option<u64>,
}

impl Run {
    /// The whole run as JSON bytes: config (minus secrets), tools, transcript,
    /// ledger. Take it at any point; it is what a durable host stores.
    pub fn snapshot(&self) -> Vec<u8> {
        // RunState holds only strings, numbers, and JSON values: serializing cannot fail.
        serde_json::to_vec(&self.state).unwrap_or_default()
    }

    /// Rebuilds a run from [`Run::snapshot`] bytes (any supported version).
    /// A request that was in flight is sent again; tool calls that were
    /// running when the snapshot was taken come back **in doubt** (a request of
    /// kind `in_doubt`) instead of being re-run. Give the API key again with
    /// [`Run::set_api_key`].
    pub fn restore(bytes: &[u8]) -> Result<Run, StateError> {
        let probe: VersionProbe = serde_json::from_slice(bytes).map_err(|e| StateError::Corrupt(e.to_string()))?;
        let version = probe.format_version.ok_or_else(|| StateError::Corrupt("no format_version".into()))?;
        if version == 0 || version > FORMAT_VERSION {
            return Err(StateError::UnsupportedVersion { found: version, supported: FORMAT_VERSION });
        }
        let state: RunState = serde_json::from_slice(bytes).map_err(|e| StateError::Corrupt(e.to_string()))?;
        check(&state)?;
        let mut run = Run::from_state(state);
        run.after_restore();
        Ok(run)
    }
}

/// Invariants serde cannot express.
fn check(state: &RunState) -> Result<(), StateError> {
    if state.history_len > state.transcript.len() {
        return Err(StateError::Inconsistent("history_len is past the end of the transcript".into()));
    }
    state.config.validate().map_err(|e| StateError::Inconsistent(e.to_string()))?;
    Ok(())
}
