//! Stream events: what a host shows while a run progresses. Streamed and
//! non-streamed responses yield the same events (a whole body is a stream of
//! one chunk), so hosts need one rendering path.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::message::{ToolCall, Usage};
use crate::provider::StopReason;
use crate::suspend::{Request, ToolResult};

/// One thing that happened in a run, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StreamEvent {
    /// A model call began (1-based turn).
    TurnStarted {
        /// Turn number.
        turn: u32,
    },
    /// A piece of visible text.
    TextDelta {
        /// The piece.
        text: String,
    },
    /// A piece of reasoning.
    ReasoningDelta {
        /// The piece.
        text: String,
    },
    /// The model began a tool call.
    ToolCallStarted {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// A piece of a tool call's raw argument text.
    ToolCallDelta {
        /// Call id.
        id: String,
        /// The piece.
        arguments: String,
    },
    /// A tool call is complete.
    ToolCallFinished {
        /// The assembled call. Shared with the run's ledger, which keeps it
        /// until the call's result is recorded: the event costs no copy of
        /// the arguments, however large, and serializes as the call itself.
        call: Arc<ToolCall>,
    },
    /// Usage of one model call.
    Usage {
        /// The counts.
        usage: Usage,
    },
    /// The model's turn ended.
    TurnFinished {
        /// Turn number.
        turn: u32,
        /// Why it ended.
        stop: StopReason,
    },
    /// A tool result was recorded (in call order once the turn's results are complete).
    ToolResult {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// The result.
        result: ToolResult,
    },
    /// A call suspended; the request is outstanding.
    Pending {
        /// What the run waits for.
        request: Request,
    },
    /// The model activated a skill: a `skill` call succeeded. The machine
    /// never emits this; a driver that loads skills does, right after that
    /// call's [`StreamEvent::ToolResult`].
    SkillActivated {
        /// The `skill` call's id.
        call_id: String,
        /// The skill's name.
        name: String,
    },
    /// The model call moves on to another upstream (indexes into the run's
    /// upstreams, 0 the primary): the turn is sent again there.
    Failover {
        /// The 1-based turn.
        turn: u32,
        /// The upstream left.
        from: usize,
        /// The upstream moved to.
        to: usize,
        /// Why: the failure, or `circuit open`.
        reason: String,
    },
    /// The output strategy of an upstream was decided (its first model call
    /// with an output spec) or changed (the provider refused the native field).
    OutputStrategy {
        /// The upstream (0 the primary).
        upstream: usize,
        /// The strategy from now on.
        strategy: crate::output::Strategy,
        /// Why.
        reason: String,
    },
    /// The output as streamed so far: partial, never validated (the final
    /// value is [`Run::output`](crate::Run::output) once the run is done).
    OutputPartial {
        /// The value written so far, open arrays and objects closed.
        value: serde_json::Value,
    },
    /// An event of a sub-agent's run. `agent` is its path: the delegating
    /// call ids from the top run down, joined by `/`. Events of the top run
    /// come unwrapped (path empty); a `Pending` request inside carries its
    /// qualified id, the one to answer.
    Agent {
        /// The agent path.
        agent: String,
        /// The child's event (never itself `Agent`).
        event: Box<StreamEvent>,
    },
    /// The run compacted its context before turn `turn`: a summary now
    /// stands for the oldest turns in the requests (the transcript keeps them).
    Compaction {
        /// The 1-based turn it came before.
        turn: u32,
        /// Estimated input tokens of the request that set it off.
        tokens_before: u64,
        /// Estimated input tokens of the view after it.
        tokens_after: u64,
        /// Assistant turns the summary replaced.
        turns_replaced: u32,
        /// The compaction request's usage (counted in the run's usage too).
        usage: Usage,
    },
    /// A failed model call will be retried.
    Retrying {
        /// 1-based retry number.
        attempt: u32,
        /// Milliseconds until the retry.
        delay_ms: u64,
        /// Why.
        reason: String,
    },
}

impl StreamEvent {
    /// The path of the run that emitted it: empty for the top run.
    pub fn agent_path(&self) -> &str {
        match self {
            StreamEvent::Agent { agent, .. } => agent,
            _ => "",
        }
    }

    /// The event itself, out of its `Agent` wrapping.
    pub fn inner(&self) -> &StreamEvent {
        match self {
            StreamEvent::Agent { event, .. } => event,
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_activated_has_a_tag_of_its_own() {
        let ev = StreamEvent::SkillActivated { call_id: "c1".into(), name: "pdf".into() };
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v, serde_json::json!({"type": "skill_activated", "call_id": "c1", "name": "pdf"}));
        assert_eq!(serde_json::from_value::<StreamEvent>(v).unwrap(), ev);
    }
}
