//! Run configuration. Everything here is serialized into the run state, so it
//! must never hold a secret: API keys and secret headers are given to the
//! [`Run`](crate::Run) separately and live only in memory.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::agent::{AgentSpec, Agents};
use crate::context::ContextPolicy;
use crate::failover::{FailoverPolicy, Upstream};
use crate::output::{OutputSpec, SchemaCheck};
use crate::provider::{Style, RESERVED_PARAMS};
use crate::time::Timestamp;
use crate::InputError;

/// Default cap on model calls per run.
pub const DEFAULT_MAX_TURNS: u32 = 10;
/// Default response body limit (bytes).
pub const DEFAULT_MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// How failed model calls are retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Retries after the first attempt (`0` means none).
    pub retries: u32,
    /// Backoff base in milliseconds: attempt `n` waits `base·2ⁿ` plus up to half again of jitter.
    pub base_delay_ms: u64,
    /// Upper bound on one backoff (a `Retry-After` is honoured beyond it).
    pub max_delay_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy { retries: 2, base_delay_ms: 500, max_delay_ms: 30_000 }
    }
}

/// What a run needs to know, minus secrets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunConfig {
    /// Wire format.
    pub style: Style,
    /// API base URL (see [`Style::default_base_url`]).
    pub base_url: String,
    /// Model id, sent verbatim every turn.
    pub model: String,
    /// System prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// Cap on model calls; reaching it with tool calls still to answer ends the
    /// run `incomplete` with limit `maxTurns`.
    pub max_turns: u32,
    /// Output token cap per call (Anthropic defaults to 4096 when unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Ask for SSE streams.
    #[serde(default)]
    pub stream: bool,
    /// Retry policy.
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Seeds retry jitter and the run id.
    #[serde(default)]
    pub seed: u64,
    /// Whole-run deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Timestamp>,
    /// Extra body keys (caller keys win over ours; conversation keys are refused).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub params: Map<String, Value>,
    /// Extra, non-secret headers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<(String, String)>,
    /// Response body limit in bytes.
    pub max_body_bytes: usize,
    /// A fixed run id (else derived from the seed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Upstreams tried in order after the primary (`style`, `base_url`,
    /// `model`) when it fails (see [`FailoverPolicy`]). Empty: the primary only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fallbacks: Vec<Upstream>,
    /// When a failed call moves on to the next upstream.
    #[serde(default, skip_serializing_if = "is_default_failover")]
    pub failover: FailoverPolicy,
    /// The typed final output the run must end in (format 3 on; see
    /// [`OutputSpec`]). `None`: the run ends in text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputSpec>,
    /// Sub-agents this run may delegate to, each declared as a tool (see
    /// [`crate::agent`]). Format 3 on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<Agents>,
    /// The context budget: windows, compaction and tool-result caps (none:
    /// requests are sent as the transcript stands, with no budget). Format 3 on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextPolicy>,
}

fn is_default_failover(p: &FailoverPolicy) -> bool {
    *p == FailoverPolicy::default()
}

impl RunConfig {
    /// Defaults for `style` and `model`: the public base URL, 10 turns, 2 retries.
    pub fn new(style: Style, model: impl Into<String>) -> RunConfig {
        RunConfig {
            style,
            base_url: style.default_base_url().to_string(),
            model: model.into(),
            system: None,
            max_turns: DEFAULT_MAX_TURNS,
            max_tokens: None,
            stream: false,
            retry: RetryPolicy::default(),
            seed: 0,
            deadline: None,
            params: Map::new(),
            headers: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            run_id: None,
            fallbacks: Vec::new(),
            failover: FailoverPolicy::default(),
            output: None,
            agents: None,
            context: None,
        }
    }

    /// Adds a sub-agent the run may delegate to (declared as a tool of its own).
    pub fn with_agent(mut self, agent: AgentSpec) -> RunConfig {
        self.agents.get_or_insert_with(Agents::default).agents.push(agent);
        self
    }

    /// Adds an upstream tried after the primary and the fallbacks before it.
    pub fn with_fallback(mut self, upstream: Upstream) -> RunConfig {
        self.fallbacks.push(upstream);
        self
    }

    /// How many upstreams the run may use (the primary plus the fallbacks).
    pub fn upstream_count(&self) -> usize {
        1 + self.fallbacks.len()
    }

    /// Upstream `i` (0 is the primary), or `None` past the end.
    pub fn upstream(&self, i: usize) -> Option<Upstream> {
        match i {
            0 => Some(Upstream { style: self.style, base_url: self.base_url.clone(), model: self.model.clone() }),
            _ => self.fallbacks.get(i - 1).cloned(),
        }
    }

    /// Upstream `i`'s wire format, base URL and model, borrowed: the
    /// machine looks at the current upstream on every input, and
    /// [`RunConfig::upstream`] copies.
    pub(crate) fn upstream_parts(&self, i: usize) -> Option<(Style, &str, &str)> {
        match i {
            0 => Some((self.style, &self.base_url, &self.model)),
            _ => self.fallbacks.get(i - 1).map(|u| (u.style, u.base_url.as_str(), u.model.as_str())),
        }
    }

    /// [`upstream_parts`](Self::upstream_parts) of an upstream the run may
    /// be on (its index is always in range; past it, the primary's).
    pub(crate) fn parts_of(&self, i: usize) -> (Style, &str, &str) {
        self.upstream_parts(i).unwrap_or((self.style, &self.base_url, &self.model))
    }

    /// Whether any upstream (the primary or a fallback) speaks `style`.
    pub(crate) fn any_upstream_speaks(&self, style: Style) -> bool {
        self.style == style || self.fallbacks.iter().any(|u| u.style == style)
    }

    /// Every upstream in order, the primary first.
    pub fn upstreams(&self) -> Vec<Upstream> {
        (0..self.upstream_count()).filter_map(|i| self.upstream(i)).collect()
    }

    /// Refuses configs the machine cannot honour.
    pub fn validate(&self) -> Result<(), InputError> {
        self.validated().map(|_| ())
    }

    /// [`validate`](Self::validate), keeping the output schema it compiled
    /// (a run validates with it rather than compiling it again).
    pub(crate) fn validated(&self) -> Result<Option<SchemaCheck>, InputError> {
        if let Some(k) = self.params.keys().find(|k| RESERVED_PARAMS.contains(&k.as_str())) {
            return Err(InputError::Config(format!("param {k:?} is owned by the conversation and cannot be set")));
        }
        if self.model.is_empty() {
            return Err(InputError::Config("model is empty".into()));
        }
        if let Some(i) = self.fallbacks.iter().position(|u| u.model.is_empty() || u.base_url.is_empty()) {
            return Err(InputError::Config(format!("fallback {} has an empty model or base URL", i + 1)));
        }
        if self.max_turns == 0 {
            return Err(InputError::Config("max_turns must be at least 1".into()));
        }
        if let Some(agents) = &self.agents {
            agents.validate()?;
        }
        if let Some(why) = self.context.as_ref().and_then(|c| c.validate().err()) {
            return Err(InputError::Config(format!("context: {why}")));
        }
        if let Some((k, _)) = self.headers.iter().find(|(k, _)| crate::http::is_secret_header(k)) {
            return Err(InputError::Config(format!(
                "header {k:?} is a secret: give it with Run::set_secret_header so it never enters the state"
            )));
        }
        self.output.as_ref().map(OutputSpec::compile).transpose().map_err(InputError::Config)
    }
}
