//! What a run gives back.

use nexus_proto::{
    AgentReport, Message, ProviderCompaction, Request, Run, StopReason, Strategy, StrategyRecord, StreamEvent, Style,
    TokenCount, ToolCallRecord, Upstream, Usage,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a run that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// The model gave its final answer.
    Done,
    /// The run waits for answers to [`RunResult::pending`].
    Pending,
    /// A limit stopped it ([`RunResult::limit`] says which).
    Incomplete,
}

/// The result of a run that did not fail. Serializes with the CLI's keys:
/// `status`, `text`, `toolCalls`, `turns`, `usage`, `model`, `limit` (only
/// when incomplete), `pending` (an array, only when pending), plus
/// `stopReason`, the transcript as `messages`, which upstream answered each
/// turn (`upstreams`) and the moves between upstreams (`failovers`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunResult {
    /// done | pending | incomplete.
    pub status: RunStatus,
    /// The text of the last assistant turn.
    pub text: String,
    /// Every tool call of this run with its result, in order.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Model calls made.
    pub turns: u32,
    /// Token counts summed over the run.
    pub usage: Usage,
    /// The model asked for.
    pub model: String,
    /// Which limit stopped the run (`maxTurns`), when incomplete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// What the run waits for, when pending (every outstanding request of the turn).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Request>,
    /// Why the last model turn ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// The whole transcript, history included.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// The saved run, when pending: store it and resume it with the answers.
    #[serde(skip)]
    pub suspended: Option<SuspendedRun>,
    /// Which upstream answered each turn of this run.
    #[serde(default)]
    pub upstreams: Vec<UpstreamTurn>,
    /// Every move to another upstream in this run, in order.
    #[serde(default)]
    pub failovers: Vec<FailoverReport>,
    /// The validated final value, when the run has an output spec
    /// (`RunConfig::output`) and ended done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// The output strategy in force when the run ended (`native`, `tool`,
    /// `prompted`), when the run has an output spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_mode: Option<Strategy>,
    /// Every output strategy decision of the run: one per upstream used,
    /// plus one for each native field a provider refused.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_strategies: Vec<StrategyRecord>,
    /// Each sub-agent of the run (SPEC §17): its path, name, turns, usage
    /// and status. `usage` and `turns` above are the top run's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<AgentReport>,
    /// Every compaction of the context in this run, in order (left out of
    /// the JSON when there was none). Their usage is in [`usage`](Self::usage).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compactions: Vec<CompactionReport>,
    /// Every compaction a provider made on its side (OpenAI Responses
    /// server-side compaction), in order (left out of the JSON when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_compactions: Vec<ProviderCompaction>,
    /// Every token count an upstream's counter made for the run's requests
    /// (`ContextPolicy::count_margin`), in order (left out of the JSON when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_counts: Vec<TokenCount>,
}

/// One compaction of a run's context, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionReport {
    /// The 1-based turn it came before.
    pub turn: u32,
    /// Estimated input tokens of the request that set it off.
    pub tokens_before: u64,
    /// Estimated input tokens of the view after it.
    pub tokens_after: u64,
    /// Assistant turns the summary replaced.
    pub turns_replaced: u32,
    /// The compaction request's own usage.
    pub usage: Usage,
}

/// The upstream that answered one turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamTurn {
    /// 1-based turn.
    pub turn: u32,
    /// Wire format.
    pub style: Style,
    /// API root.
    pub base_url: String,
    /// Model.
    pub model: String,
}

/// One move from an upstream to the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailoverReport {
    /// The 1-based turn it happened in.
    pub turn: u32,
    /// The upstream left.
    pub from: Upstream,
    /// The upstream moved to.
    pub to: Upstream,
    /// Why: the failure, or `circuit open`.
    pub reason: String,
}

impl RunResult {
    /// The result of `run` as its state tells it, ending `status` (with
    /// `limit` for an incomplete run). What only a driver knows is left for
    /// it to fill: `messages` (empty here, so a finished run's transcript can
    /// be moved in rather than copied), `pending`, `stop_reason` and
    /// `suspended`.
    pub fn of_run(run: &Run, status: RunStatus, limit: Option<String>) -> RunResult {
        let (upstreams, failovers) = RunResult::routing(run);
        let (output, output_mode, output_strategies) = RunResult::typed_output(run);
        RunResult {
            status,
            text: run.final_text(),
            tool_calls: run.tool_calls(),
            turns: run.turns(),
            usage: run.usage(),
            model: run.config().model.clone(),
            limit,
            pending: Vec::new(),
            stop_reason: None,
            messages: Vec::new(),
            suspended: None,
            upstreams,
            failovers,
            output,
            output_mode,
            output_strategies,
            agents: run.agent_reports(),
            compactions: RunResult::compactions(run),
            provider_compactions: run.provider_compactions().to_vec(),
            token_counts: run.token_counts().to_vec(),
        }
    }

    /// The routing of `run` as reported: `(upstreams, failovers)`.
    pub fn routing(run: &Run) -> (Vec<UpstreamTurn>, Vec<FailoverReport>) {
        let cfg = run.config();
        let at = |i: usize| cfg.upstream(i).unwrap_or_else(|| Upstream::new(cfg.style, cfg.model.clone()));
        let upstreams = run
            .served()
            .iter()
            .map(|s| {
                let u = at(s.upstream);
                UpstreamTurn { turn: s.turn, style: u.style, base_url: u.base_url, model: u.model }
            })
            .collect();
        let failovers = run
            .failovers()
            .iter()
            .map(|f| FailoverReport { turn: f.turn, from: at(f.from), to: at(f.to), reason: f.reason.clone() })
            .collect();
        (upstreams, failovers)
    }

    /// The compactions of `run` as reported.
    pub fn compactions(run: &Run) -> Vec<CompactionReport> {
        run.compactions()
            .iter()
            .map(|c| CompactionReport {
                turn: c.turn,
                tokens_before: c.tokens_before,
                tokens_after: c.tokens_after,
                turns_replaced: c.turns_replaced,
                usage: c.usage,
            })
            .collect()
    }

    /// Whether the run waits for answers.
    pub fn is_pending(&self) -> bool {
        self.status == RunStatus::Pending
    }

    /// The typed output of `run` as reported: `(output, output_mode, output_strategies)`.
    pub fn typed_output(run: &Run) -> (Option<Value>, Option<Strategy>, Vec<StrategyRecord>) {
        let strategies = run.output_strategies().to_vec();
        let mode = strategies.iter().rev().find(|r| r.upstream == run.upstream_index()).map(|r| r.strategy);
        (run.output().cloned(), mode, strategies)
    }

    /// The validated output as a `T` (for a run whose spec was made from
    /// `T`, see [`ClientBuilder::output_type`](crate::ClientBuilder::output_type)).
    /// `None` when the run has no output (no spec, or not done).
    pub fn output_as<T: DeserializeOwned>(&self) -> Option<Result<T, serde_json::Error>> {
        self.output.as_ref().map(|v| T::deserialize(v))
    }
}

/// A suspended run: the machine's snapshot (no secrets in it) and what it waits for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SuspendedRun {
    /// The run id (a natural key for a [`RunStore`](crate::RunStore)).
    pub run_id: String,
    /// [`Run::snapshot`](nexus_proto::Run::snapshot) bytes.
    #[serde(with = "state_text")]
    pub state: Vec<u8>,
    /// The outstanding requests.
    pub pending: Vec<Request>,
}

/// What a stream yields: the run's events, then its result.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // the result comes once per run; boxing it buys nothing
pub enum StreamItem {
    /// Something happened.
    Event(StreamEvent),
    /// The run is over (done, pending or incomplete). Nothing follows.
    Done(RunResult),
}

/// The state is JSON text: embed it as text, not as an array of numbers.
mod state_text {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(bytes) {
            Ok(text) => s.serialize_str(text),
            Err(_) => s.serialize_bytes(bytes),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        Ok(String::deserialize(d)?.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base(status: RunStatus) -> RunResult {
        RunResult {
            status,
            text: "hi".into(),
            tool_calls: vec![],
            turns: 1,
            usage: Usage { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5, ..Usage::default() },
            model: "m".into(),
            limit: None,
            pending: vec![],
            stop_reason: Some(StopReason::EndTurn),
            messages: vec![],
            suspended: None,
            upstreams: vec![],
            failovers: vec![],
            output: None,
            output_mode: None,
            output_strategies: vec![],
            agents: vec![],
            compactions: vec![],
            provider_compactions: vec![],
            token_counts: vec![],
        }
    }

    #[test]
    fn cli_keys() {
        let v = serde_json::to_value(base(RunStatus::Done)).unwrap();
        assert_eq!(v["status"], "done");
        assert_eq!(v["toolCalls"], json!([]));
        assert_eq!(v["usage"], json!({"promptTokens": 3, "completionTokens": 2, "totalTokens": 5}));
        assert!(v.get("limit").is_none() && v.get("pending").is_none());

        let mut p = base(RunStatus::Pending);
        p.pending = vec![Request::new("approval", "ok?")];
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(v["status"], "pending");
        assert!(v["pending"].is_array());
        assert_eq!(v["pending"][0]["kind"], "approval");

        let mut i = base(RunStatus::Incomplete);
        i.limit = Some("maxTurns".into());
        assert_eq!(serde_json::to_value(&i).unwrap()["limit"], "maxTurns");
    }

    #[test]
    fn suspended_state_is_embedded_as_text() {
        let s = SuspendedRun { run_id: "r".into(), state: br#"{"a":1}"#.to_vec(), pending: vec![] };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v["state"], r#"{"a":1}"#);
        let back: SuspendedRun = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
    }
}
