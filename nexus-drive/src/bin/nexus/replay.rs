//! `nexus replay CASSETTE [--json]`: re-runs a recorded session through the
//! real machine against its recording, with no network.

use nexus_drive::cassette::{replay, Cassette, Observer, ReplayEnd, Replayed};
use nexus_drive::{RunResult, RunStatus};
use nexus_proto::{Outcome, Run, StopReason, StreamEvent};
use serde_json::{json, Value};

use crate::trace::Trace;
use crate::{out, Fail};

/// Re-run a recorded session against its recording
///
/// Re-runs a recorded session (`nexus run --record FILE`) through the real state
/// machine, with no network: recorded responses, tool results and answers are
/// fed back, and every request the machine builds must be byte-identical to
/// the recorded one (secret header values are redacted in cassettes and not
/// compared). The first difference fails the replay (exit 1) and is named.
///
/// Prints a trace of the session, or with --json the final run result.
#[derive(clap::Args)]
pub struct ReplayArgs {
    /// Print the final run result as one JSON object (the shape of nexus run --json).
    #[arg(long)]
    json: bool,
    /// The cassette (`nexus run --record FILE`).
    #[arg(value_name = "CASSETTE")]
    cassette: String,
}

/// Remembers the last turn's stop reason (all `--json` needs from the events).
#[derive(Default)]
struct LastStop(Option<StopReason>);

impl Observer for LastStop {
    fn event(&mut self, event: &StreamEvent) {
        if let StreamEvent::TurnFinished { stop, .. } = event {
            self.0 = Some(*stop);
        }
    }
}

/// Runs the command.
pub fn main(args: ReplayArgs) -> Result<i32, Fail> {
    let path = &args.cassette;
    let cassette = Cassette::load(std::path::Path::new(path)).map_err(|e| Fail::runtime(format!("{path}: {e}")))?;
    if args.json {
        let mut obs = LastStop::default();
        let done = replay(&cassette, &mut obs).map_err(|e| Fail::runtime(format!("{path}: {e}")))?;
        out(&result_json(&done.run, &done.end, obs.0).to_string());
    } else {
        let mut trace = Trace::new(None, true);
        let done = replay(&cassette, &mut trace).map_err(|e| Fail::runtime(format!("{path}: {e}")))?;
        out("");
        out(&summary(&done));
    }
    Ok(0)
}

/// One line saying what was checked.
pub fn summary(done: &Replayed) -> String {
    let end = match &done.end {
        ReplayEnd::Finished(Outcome::Done) => "done".to_string(),
        ReplayEnd::Finished(Outcome::Incomplete { limit }) => format!("incomplete ({limit})"),
        ReplayEnd::Finished(Outcome::Failed { error }) => format!("failed ({error})"),
        ReplayEnd::Pending(r) => format!("pending on {} request(s)", r.len()),
    };
    format!(
        "✓ replay matches the recording: {} run(s), {} request(s) byte-identical; the session ends {end}",
        done.runs, done.requests
    )
}

/// The run result in the shape `nexus run --json` prints.
pub fn result_json(run: &Run, end: &ReplayEnd, stop: Option<StopReason>) -> Value {
    let (status, limit, pending) = match end {
        ReplayEnd::Finished(Outcome::Done) => (RunStatus::Done, None, Vec::new()),
        ReplayEnd::Finished(Outcome::Incomplete { limit }) => (RunStatus::Incomplete, Some(limit.clone()), Vec::new()),
        ReplayEnd::Pending(requests) => (RunStatus::Pending, None, requests.clone()),
        ReplayEnd::Finished(Outcome::Failed { error }) => {
            return json!({"status": "failed", "error": error, "turns": run.turns(), "model": run.config().model});
        }
    };
    let result = RunResult {
        pending,
        stop_reason: stop,
        messages: run.transcript().to_vec(),
        ..RunResult::of_run(run, status, limit)
    };
    serde_json::to_value(&result).unwrap_or(Value::Null)
}
