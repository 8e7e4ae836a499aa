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
///
/// - 1: the first format.
/// - 2: adds `upstream` (the index of the upstream calls go to), `served`
///   (which upstream answered each turn) and `failovers`; the config may
///   hold `fallbacks` and `failover`. A version-1 state is read as a run on
///   its primary upstream with nothing served or failed over yet recorded.
/// - 3: two optional parts, each absent in a version-2 state (read as a
///   run without them):
///   - typed output: the config may hold `output` (a typed output spec), and the state
///     then holds `output`: the strategy each upstream used, the validation
///     retries spent, an output tool's verdict waiting for its turn's other
///     calls, and the validated value. A version-2 state is read as a run
///     without typed output.
///   - sub-agents: the config may hold `agents` (each with its child's
///     config and tools, and `maxDepth`); a ledger entry of state `agent`
///     holds the child run's whole state; the state may hold `agents` (the
///     run's depth and its finished children's reports). A version-2 state is
///     a run without sub-agents.
///   - context budget: the config may hold `context` (the context budget)
///     and the state `context` (learned windows, the calibration,
///     compactions and a compaction under way). A version-2 state is read as
///     a run without a context budget.
///   - provider compactions: the budget may hold `responsesCompaction`
///     (`compactThreshold`) and the state's `context` then
///     `providerCompactions` (`turn`, `upstream`, `style`, `id` of each
///     compaction item an OpenAI Responses upstream returned; the item itself
///     rides on its assistant turn). A state without them is a run whose
///     providers compacted nothing.
///   - token counts: the budget may hold `countMargin`, and the state's
///     `context` then `count` (the count asked or answered for the next
///     request's body) and `tokenCounts` (`turn`, `upstream`, `estimate`,
///     `tokens`). A state without them is a run that counted nothing.
pub const FORMAT_VERSION: u64 = 3;

/// For `skip_serializing_if`: a count at zero is left out of the state,
/// so states that never used it stay byte-identical to earlier ones.
pub(crate) fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}

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
        let mut state: RunState = serde_json::from_slice(bytes).map_err(|e| StateError::Corrupt(e.to_string()))?;
        migrate(&mut state, version);
        let output_check = check(&state)?;
        let mut run = Run::from_state(state, output_check);
        run.after_restore();
        Ok(run)
    }
}

/// Brings an older state up to [`FORMAT_VERSION`]; what serde filled in with
/// defaults is already right, so only the version changes.
fn migrate(state: &mut RunState, from: u64) {
    if from < 2 {
        // Version 1 knew one upstream: calls went to the primary, and the
        // turns it served are not recorded (no record beats a guessed one).
        state.upstream = 0;
        state.served.clear();
        state.failovers.clear();
    }
    state.format_version = FORMAT_VERSION;
}

/// Invariants serde cannot express; the output schema compiled on the way.
pub(crate) fn check(state: &RunState) -> Result<Option<crate::output::SchemaCheck>, StateError> {
    if state.history_len > state.transcript.len() {
        return Err(StateError::Inconsistent("history_len is past the end of the transcript".into()));
    }
    let output_check = state.config.validated().map_err(|e| StateError::Inconsistent(e.to_string()))?;
    if let Some(ctx) = &state.context {
        crate::context::check_state(ctx, &state.transcript).map_err(StateError::Inconsistent)?;
    }
    let n = state.config.upstream_count();
    if state.upstream >= n {
        return Err(StateError::Inconsistent(format!("upstream {} is past the {n} configured", state.upstream)));
    }
    if state.served.iter().any(|s| s.upstream >= n) || state.failovers.iter().any(|f| f.from >= n || f.to >= n) {
        return Err(StateError::Inconsistent("a served turn or failover names an unknown upstream".into()));
    }
    crate::agent::check_children(state)?;
    Ok(output_check)
}
