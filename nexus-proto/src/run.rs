//! The run: the whole tool-calling loop as one state machine.
//!
//! Inputs go in through [`Run::handle_input`]; outputs come out of
//! [`Run::poll_output`] until it returns [`Output::Wait`] (nothing to do
//! until an input arrives or the given time passes) or [`Output::Done`].
//! Every state transition lives in this file and in `ledger.rs`.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::RunConfig;
use crate::error::{DecodeError, InputError, RemoteError, RunError, TransportErrorKind};
use crate::event::StreamEvent;
use crate::failover::{Attempt, Breakers, CircuitState, Decision, FailoverRecord, ServedTurn, Upstream};
use crate::http::{ExchangeId, HttpRequest};
use crate::ledger::{Batch, CallState, Entry, ToolBatch};
use crate::message::{Block, Message, Role, ToolCall, Usage};
use crate::provider::{Assembler, CallIds, StopReason, Style, TurnResponse};
use crate::rng::SplitMix64;
use crate::sse::{SseDecoder, SseEvent};
use crate::suspend::{Answer, Request, ToolReply, ToolResult};
use crate::time::Timestamp;
use crate::tool::{ToolDecl, ToolKind, ToolSet};

/// Something the driver hands to the machine.
#[derive(Debug, Clone, PartialEq)]
pub enum Input<'a> {
    /// The status line and headers of a response.
    ResponseHead {
        /// Which exchange.
        exchange: ExchangeId,
        /// HTTP status.
        status: u16,
        /// Response headers (names in any case).
        headers: Vec<(String, String)>,
    },
    /// A piece of the response body, as read (any size, split anywhere).
    ResponseBody {
        /// Which exchange.
        exchange: ExchangeId,
        /// The bytes.
        chunk: &'a [u8],
    },
    /// The body is complete.
    ResponseEnd {
        /// Which exchange.
        exchange: ExchangeId,
    },
    /// The exchange failed in the transport.
    TransportError {
        /// Which exchange.
        exchange: ExchangeId,
        /// How.
        kind: TransportErrorKind,
        /// The driver's description.
        message: String,
    },
    /// A tool finished or suspended.
    ToolReply {
        /// The call id from the [`ToolBatch`].
        call_id: String,
        /// What it returned.
        reply: ToolReply,
    },
    /// The host answers an outstanding request.
    Answer(Answer),
    /// A timer the machine asked for (see [`Output::Wait`]) may have fired.
    /// Spurious timeouts are harmless.
    Timeout,
    /// Stop the run now. The driver aborts whatever it has in flight.
    Cancel,
    /// End the run with this error: the host decided (a hook refused, or its
    /// error classifier judged a failure final). Recorded as the outcome, so
    /// a snapshot or a replay says why the run ended.
    Abort {
        /// The error the run ends with.
        error: RunError,
    },
}

/// Something the machine asks of the driver. Drivers must handle every variant.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Send this request and feed the response back.
    Send(HttpRequest),
    /// Run these tool calls (concurrently) and feed each reply back.
    RunTools(ToolBatch),
    /// Show this to the host.
    Event(StreamEvent),
    /// The run cannot go on until these requests are answered. In-process
    /// hosts answer them now (`Input::Answer`); durable hosts take
    /// [`Run::snapshot`] and answer later, possibly in another process.
    Suspended(Vec<Request>),
    /// Nothing to do until an input arrives, or until `until` passes
    /// (then give [`Input::Timeout`]).
    Wait {
        /// When to wake the machine even without input.
        until: Option<Timestamp>,
    },
    /// The run is over. Returned on every poll from now on.
    Done(Outcome),
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The model gave its final answer.
    Done,
    /// A limit stopped the run (`limit`: `maxTurns`).
    Incomplete {
        /// Which limit.
        limit: String,
    },
    /// The run failed.
    Failed {
        /// Why.
        error: RunError,
    },
}

/// Where a run stands, for hosts that report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Working: a model call, a backoff or tools in progress.
    Running,
    /// Suspended on outstanding requests.
    Pending,
    /// Finished with an answer.
    Done,
    /// Stopped by a limit.
    Incomplete,
    /// Failed.
    Failed,
}

/// One tool call of this run with its result, for run summaries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRecord {
    /// Call id.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Parsed arguments.
    pub input: Value,
    /// The result text.
    pub output: String,
    /// Whether it was an error result.
    pub is_error: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub(crate) enum Phase {
    /// The next model request is to be built and sent.
    Ready { attempt: u32 },
    /// A model request is in flight.
    Awaiting { exchange: ExchangeId, attempt: u32 },
    /// Waiting before a retry.
    Backoff { until: Timestamp, attempt: u32 },
    /// The turn's tool calls are running or suspended.
    Tools { batch: Batch },
    /// Before the first model call: waiting for the host to settle requests
    /// it acts on itself (an MCP server's authorization, needed before its
    /// tools can be listed and declared). See [`Run::await_host`].
    Starting { requests: Vec<Request>, announced: bool },
    /// Over.
    Finished { outcome: Outcome },
}

/// Everything that survives a process boundary. Serialized as the state format.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RunState {
    #[serde(rename = "format_version")]
    pub format_version: u64,
    pub run_id: String,
    pub config: RunConfig,
    /// Shared with the client that declared them: every run of a client
    /// holds the same declarations, so a new run copies none.
    pub tools: ToolSet,
    pub transcript: Vec<Message>,
    /// Messages before this run began (given as history); summaries skip them.
    pub history_len: usize,
    /// Model calls completed.
    pub turns: u32,
    pub usage: Usage,
    #[serde(flatten)]
    pub phase: Phase,
    pub call_ids: CallIds,
    pub rng: SplitMix64,
    pub next_exchange: u64,
    pub last_now: Timestamp,
    /// The upstream model calls go to (0 the primary). Format 2 on.
    #[serde(default)]
    pub upstream: usize,
    /// Which upstream answered each turn. Format 2 on.
    #[serde(default)]
    pub served: Vec<ServedTurn>,
    /// Every move to another upstream. Format 2 on.
    #[serde(default)]
    pub failovers: Vec<FailoverRecord>,
    /// The typed output's strategies, retries and value (format 3 on;
    /// present when the config has an output spec).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<crate::output::OutputState>,
    /// Sub-agents: this run's depth and its finished children. Format 3 on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<crate::agent::AgentState>,
    /// The context budget's record (see `context`). Format 3 on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::context::ContextState>,
    /// The turn a `TurnStarted` was last emitted for: not again for a
    /// failover, a strategy fallback or a compaction of that turn, in this
    /// process or after a restore. Format 3 on; absent (0) before the first.
    #[serde(default, skip_serializing_if = "crate::state::is_zero")]
    pub announced_turn: u32,
}

/// The response being read; not part of the state (a restored run re-sends).
#[derive(Debug, Clone)]
struct Inflight {
    exchange: ExchangeId,
    status: Option<u16>,
    retry_after: Option<String>,
    body: Vec<u8>,
    stream: Option<(SseDecoder, Assembler)>,
    /// Bytes of a stream read so far, held to `max_body_bytes` like a whole body.
    streamed: usize,
    /// The time of the first input after the request was emitted: the head
    /// timeout counts from it (the machine reads no clock, and the time of its
    /// last input may be long past, as in a restored run).
    sent_at: Option<Timestamp>,
}

/// Secrets: in memory only, never serialized.
#[derive(Default, Clone)]
pub(crate) struct Secrets {
    pub(crate) api_key: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    /// Keys of the fallback upstreams, by upstream index.
    upstream_keys: Vec<(usize, String)>,
    /// Keys of agents' upstreams, by agent name (handed down the tree).
    pub(crate) agent_keys: Vec<(String, String)>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(redacted)")
    }
}

/// The tool-calling loop for one run. See the crate docs for the driving loop.
#[derive(Debug)]
pub struct Run {
    pub(crate) state: RunState,
    inflight: Option<Inflight>,
    events: VecDeque<StreamEvent>,
    pub(crate) secrets: Secrets,
    sse_scratch: Vec<SseEvent>,
    delta_scratch: Vec<StreamEvent>,
    /// Until when each upstream's circuit is open, as of the last
    /// [`Run::sync_circuits`] (empty: no breaker in use).
    open_until: Vec<Option<Timestamp>>,
    /// Outcomes of exchanges not yet handed to the breakers: (upstream, ok, at).
    reports: Vec<(usize, bool, Timestamp)>,
    /// The typed output's validator and request shapes.
    output: crate::output::OutputRule,
    /// Routing to the children of sub-agent calls (memory only).
    pub(crate) agent_live: crate::agent::Live,
}

impl Run {
    /// A new run over `messages` (history plus the new user turn, which must come last).
    ///
    /// `tools` is a `Vec<ToolDecl>`, an `Arc<[ToolDecl]>` or a [`ToolSet`]:
    /// a host that starts many runs over the same tools passes clones of one
    /// `ToolSet`, and they share the declarations and their encodings.
    pub fn new(config: RunConfig, tools: impl Into<ToolSet>, messages: Vec<Message>) -> Result<Run, InputError> {
        let tools: ToolSet = crate::agent::declare(&config, tools.into());
        let check = config.validated()?;
        crate::output::check_tools(config.output.as_ref(), &tools)?;
        let mut names = std::collections::HashSet::new();
        for t in tools.iter() {
            if !names.insert(t.name.as_str()) {
                return Err(InputError::Config(format!("two tools are named {:?}", t.name)));
            }
        }
        if messages.last().map(|m| m.role) != Some(Role::User) {
            return Err(InputError::Config("the conversation must end on a user turn".into()));
        }
        let mut rng = SplitMix64::new(config.seed);
        let run_id = config.run_id.clone().unwrap_or_else(|| format!("run_{:016x}", rng.next_u64()));
        let short: String = run_id.chars().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect();
        let history_len = messages.len() - 1;
        let output = config_output_state(&config);
        let agents = crate::agent::initial_state(&config);
        let mut messages = messages;
        if config.any_upstream_speaks(Style::Gemini) {
            // History Gemini did not write carries no signature it would accept.
            for m in &mut messages {
                crate::provider::gemini::stamp_placeholder(m);
            }
        }
        let state = RunState {
            format_version: crate::state::FORMAT_VERSION,
            call_ids: CallIds::new(format!("call_{short}_")),
            run_id,
            config,
            tools,
            transcript: messages,
            history_len,
            turns: 0,
            usage: Usage::default(),
            phase: Phase::Ready { attempt: 0 },
            rng,
            next_exchange: 1,
            last_now: Timestamp(0),
            upstream: 0,
            served: Vec::new(),
            failovers: Vec::new(),
            output,
            agents,
            context: None,
            announced_turn: 0,
        };
        Ok(Run::from_state(state, check))
    }

    /// A run over `state`, with the output validator compiled when its
    /// config was validated (`None`: compiled when first needed).
    pub(crate) fn from_state(state: RunState, output_check: Option<crate::output::SchemaCheck>) -> Run {
        Run {
            state,
            inflight: None,
            events: VecDeque::new(),
            secrets: Secrets::default(),
            sse_scratch: Vec::new(),
            delta_scratch: Vec::new(),
            open_until: Vec::new(),
            reports: Vec::new(),
            output: crate::output::OutputRule::with_check(output_check),
            agent_live: crate::agent::Live::default(),
        }
    }

    /// A copy of the run, memory-only parts included.
    pub(crate) fn duplicate(&self) -> Run {
        Run {
            state: self.state.clone(),
            inflight: self.inflight.clone(),
            events: self.events.clone(),
            secrets: self.secrets.clone(),
            sse_scratch: Vec::new(),
            delta_scratch: Vec::new(),
            open_until: self.open_until.clone(),
            reports: self.reports.clone(),
            output: self.output.clone(),
            agent_live: self.agent_live.clone(),
        }
    }

    /// The exchange in flight of this run itself (not of its children).
    pub(crate) fn inflight_exchange(&self) -> Option<ExchangeId> {
        self.inflight.as_ref().map(|f| f.exchange)
    }

    /// Gives the API key. Held in memory only: never in a snapshot.
    pub fn set_api_key(&mut self, key: impl Into<String>) {
        self.secrets.api_key = Some(key.into());
        self.sync_agent_secrets();
    }

    /// Gives the key of upstream `index` (0 is the primary, the same as
    /// [`set_api_key`](Self::set_api_key)). Memory only: never in a snapshot.
    pub fn set_upstream_api_key(&mut self, index: usize, key: impl Into<String>) {
        if index == 0 {
            self.set_api_key(key);
            return;
        }
        self.secrets.upstream_keys.retain(|(i, _)| *i != index);
        self.secrets.upstream_keys.push((index, key.into()));
    }

    /// Re-points upstream `index` (0 is the primary, as
    /// [`set_base_url`](Self::set_base_url)); out-of-range indexes are ignored.
    pub fn set_upstream_base_url(&mut self, index: usize, base_url: impl Into<String>) {
        match index {
            0 => self.set_base_url(base_url),
            i => {
                if let Some(u) = self.state.config.fallbacks.get_mut(i - 1) {
                    u.base_url = base_url.into();
                }
            }
        }
    }

    /// The index of the upstream model calls go to now (0 is the primary).
    pub fn upstream_index(&self) -> usize {
        self.state.upstream
    }

    /// The upstream model calls go to now.
    pub fn upstream(&self) -> Upstream {
        self.state.config.upstream(self.state.upstream).unwrap_or_else(|| self.primary())
    }

    fn primary(&self) -> Upstream {
        let c = &self.state.config;
        Upstream { style: c.style, base_url: c.base_url.clone(), model: c.model.clone() }
    }

    /// The current upstream's style, base URL and model, borrowed.
    fn current(&self) -> (Style, &str, &str) {
        self.state.config.parts_of(self.state.upstream)
    }

    /// Which upstream answered each turn of this run.
    pub fn served(&self) -> &[ServedTurn] {
        &self.state.served
    }

    /// Every move to another upstream in this run, in order.
    pub fn failovers(&self) -> &[FailoverRecord] {
        &self.state.failovers
    }

    /// Exchanges the circuit breakers with the client's shared [`Breakers`]:
    /// hands over the outcomes of this run's model calls since the last
    /// call, then takes each upstream's circuit as it stands at `now`. Call
    /// it before polling when a breaker is in use; routing then never picks
    /// an upstream whose circuit is open (a run whose every upstream is open
    /// waits for the first cooldown to end). A run never synced routes
    /// without a breaker.
    pub fn sync_circuits(&mut self, now: Timestamp, breakers: &mut Breakers) {
        let upstreams = self.state.config.upstreams();
        for (i, ok, at) in self.reports.drain(..) {
            if let Some(u) = upstreams.get(i) {
                if ok {
                    breakers.record_success(&u.circuit_key(), at);
                } else {
                    breakers.record_failure(&u.circuit_key(), at);
                }
            }
        }
        self.open_until = upstreams
            .iter()
            .map(|u| match breakers.state(&u.circuit_key(), now) {
                CircuitState::Open { until } => Some(until),
                _ => None,
            })
            .collect();
    }

    /// Until when each upstream's circuit is open, as routing sees it now
    /// (as of the last [`Run::sync_circuits`] or [`Run::set_circuit_view`];
    /// empty: no breaker in use, every circuit closed).
    pub fn circuit_view(&self) -> &[Option<Timestamp>] {
        &self.open_until
    }

    /// Sets the circuits routing sees without a [`Breakers`]: a replay feeds
    /// back what the recording's breakers said at the same point, including
    /// circuits other runs of that client opened. Outcomes not yet handed to
    /// a breaker are dropped. The view names every upstream or none; any
    /// other length is refused and nothing changes.
    pub fn set_circuit_view(&mut self, open_until: Vec<Option<Timestamp>>) -> Result<(), InputError> {
        let upstreams = self.state.config.upstream_count();
        if !open_until.is_empty() && open_until.len() != upstreams {
            return Err(InputError::Config(format!(
                "a circuit view of {} upstreams for a run with {upstreams}",
                open_until.len()
            )));
        }
        self.reports.clear();
        self.open_until = open_until;
        Ok(())
    }

    /// When the exchange in flight must have its response head by (the
    /// failover policy's `head_timeout_ms`), or the run's deadline when
    /// earlier. Drivers bound their wait for a response head by it. The head
    /// timeout counts from the first input after the request was emitted: a
    /// driver feeds [`Input::Timeout`] as it sends to start it.
    pub fn head_deadline(&self) -> Option<Timestamp> {
        let deadline = self.state.config.deadline;
        let head = self
            .inflight
            .as_ref()
            .filter(|f| f.status.is_none())
            .and_then(|f| Some(f.sent_at?.plus_ms(self.state.config.failover.head_timeout_ms?)));
        match (deadline, head) {
            (Some(d), Some(h)) => Some(d.min(h)),
            (d, h) => d.or(h),
        }
    }

    /// Adds a secret header (held in memory only).
    pub fn set_secret_header(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.secrets.headers.push((name.into(), value.into()));
        self.sync_agent_secrets();
    }

    /// Points the run's later model calls at another API root: a resumed run
    /// whose deployment moved, or a host that sends through a proxy. The
    /// endpoint belongs to where the run executes, not to the conversation,
    /// so the host that resumes a stored run decides it. The new root is kept
    /// in the snapshot from here on; a request already emitted keeps its URL.
    pub fn set_base_url(&mut self, base_url: impl Into<String>) {
        let new = base_url.into();
        let old = std::mem::replace(&mut self.state.config.base_url, new.clone());
        self.rebase_agents(&old, &new);
    }

    /// The run id.
    pub fn id(&self) -> &str {
        &self.state.run_id
    }

    /// The config (as serialized).
    pub fn config(&self) -> &RunConfig {
        &self.state.config
    }

    /// The declared tools.
    pub fn tools(&self) -> &[ToolDecl] {
        &self.state.tools
    }

    /// The whole transcript, history included.
    pub fn transcript(&self) -> &[Message] {
        &self.state.transcript
    }

    /// Takes the whole transcript out of a finished (or abandoned) run
    /// without copying it.
    pub fn into_transcript(self) -> Vec<Message> {
        self.state.transcript
    }

    /// Takes the transcript out of a finished run without copying it, for a
    /// driver that keeps the run until it drops it: the run stays finished,
    /// with an empty transcript (and so no final text or tool calls) from
    /// then on. `None`, and nothing taken, while the run is not finished.
    pub fn take_transcript(&mut self) -> Option<Vec<Message>> {
        matches!(self.state.phase, Phase::Finished { .. }).then(|| std::mem::take(&mut self.state.transcript))
    }

    /// How many messages were history when the run began.
    pub fn history_len(&self) -> usize {
        self.state.history_len
    }

    /// Model calls completed.
    pub fn turns(&self) -> u32 {
        self.state.turns
    }

    /// Usage summed over this run's model calls.
    pub fn usage(&self) -> Usage {
        self.state.usage
    }

    /// Where the run stands.
    pub fn status(&self) -> Status {
        match &self.state.phase {
            Phase::Finished { outcome: Outcome::Done } => Status::Done,
            Phase::Finished { outcome: Outcome::Incomplete { .. } } => Status::Incomplete,
            Phase::Finished { outcome: Outcome::Failed { .. } } => Status::Failed,
            Phase::Tools { batch } if batch.settled() && !batch.complete() => Status::Pending,
            Phase::Starting { .. } => Status::Pending,
            _ => Status::Running,
        }
    }

    /// The outcome, once finished.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.state.phase {
            Phase::Finished { outcome } => Some(outcome),
            _ => None,
        }
    }

    /// The requests waiting for an answer (they may be answered while other
    /// calls of the turn are still running).
    ///
    /// A sub-agent's requests come after this run's own, their ids qualified
    /// by the agent path (see [`Run::request_owner`]).
    pub fn outstanding(&self) -> Vec<Request> {
        let mut out = self.own_outstanding();
        out.extend(self.agents_outstanding());
        out
    }

    /// The calls this run will hand to the driver next (answered suspensions
    /// and in-doubt calls the host asked to re-run, before the driver polls
    /// them): a host checks it can run each before it goes on.
    pub fn calls_to_run(&self) -> Vec<&ToolCall> {
        match &self.state.phase {
            Phase::Tools { batch } => batch.requested_calls(),
            _ => Vec::new(),
        }
    }

    /// Suspends a run that has not made its first model call on `requests`
    /// the host settles itself: a step that must happen before the run's
    /// tools are all known (an MCP server that needs a person's
    /// authorization before it lists its tools). The run polls
    /// [`Output::Suspended`] with them and is [`Status::Pending`]; its
    /// snapshot is a suspended run like any other, so a durable host keeps it
    /// and settles the requests in another process with [`Run::settle_host`].
    /// Ids must be non-empty and distinct. On `Err` nothing changed.
    pub fn await_host(&mut self, requests: Vec<Request>) -> Result<(), InputError> {
        let fresh = matches!(self.state.phase, Phase::Ready { attempt: 0 }) && self.state.turns == 0;
        if !fresh || self.inflight.is_some() {
            return Err(InputError::OutOfOrder("await_host before the first model call only"));
        }
        if requests.is_empty() {
            return Err(InputError::Config("await_host needs at least one request".into()));
        }
        let mut ids = std::collections::HashSet::new();
        for r in &requests {
            if r.id.is_empty() || !ids.insert(r.id.as_str()) {
                return Err(InputError::Config(format!(
                    "host request ids must be non-empty and distinct ({:?})",
                    r.id
                )));
            }
        }
        self.state.phase = Phase::Starting { requests, announced: false };
        Ok(())
    }

    /// The requests of [`Run::await_host`] still waiting (empty once the run
    /// has started).
    pub fn host_requests(&self) -> &[Request] {
        match &self.state.phase {
            Phase::Starting { requests, .. } => requests,
            _ => &[],
        }
    }

    /// The host settled the request `id` of [`Run::await_host`] (it took the
    /// answer and acted on it) and the run gains `tools` (declared from now
    /// on, as if given to [`Run::new`]). When no request is left, the run
    /// goes on to its first model call. An id that is not waiting is
    /// [`InputError::UnknownAnswer`], a tool name already declared is
    /// [`InputError::Config`]; on `Err` nothing changed.
    pub fn settle_host(&mut self, id: &str, tools: Vec<ToolDecl>) -> Result<(), InputError> {
        let Phase::Starting { requests, .. } = &self.state.phase else {
            return Err(InputError::UnknownAnswer(id.to_string()));
        };
        let Some(at) = requests.iter().position(|r| r.id == id) else {
            return Err(InputError::UnknownAnswer(id.to_string()));
        };
        let mut names: std::collections::HashSet<&str> = self.state.tools.iter().map(|t| t.name.as_str()).collect();
        for t in &tools {
            if !names.insert(t.name.as_str()) {
                return Err(InputError::Config(format!("two tools are named {:?}", t.name)));
            }
        }
        if !tools.is_empty() {
            // Declarations are shared between runs: a run that gains tools gets its own list.
            let mut all = self.state.tools.to_vec();
            all.extend(tools);
            self.state.tools = all.into();
        }
        if let Phase::Starting { requests, .. } = &mut self.state.phase {
            requests.remove(at);
            if requests.is_empty() {
                self.state.phase = Phase::Ready { attempt: 0 };
            }
        }
        Ok(())
    }

    /// The validated final value, once a run with an output spec is done.
    pub fn output(&self) -> Option<&Value> {
        self.state.output.as_ref()?.value.as_ref()
    }

    /// The output strategy each upstream used, in the order decided (a
    /// failover or a refused native field adds a record).
    pub fn output_strategies(&self) -> &[crate::output::StrategyRecord] {
        self.state.output.as_ref().map_or(&[], |o| &o.strategies)
    }

    /// The text of the last assistant turn of this run.
    pub fn final_text(&self) -> String {
        self.this_run().iter().rev().find(|m| m.role == Role::Assistant).map(Message::text).unwrap_or_default()
    }

    /// The messages of this run (after the history); none once the
    /// transcript was taken.
    fn this_run(&self) -> &[Message] {
        self.state.transcript.get(self.state.history_len..).unwrap_or_default()
    }

    /// Every tool call of this run whose result is recorded, in order.
    pub fn tool_calls(&self) -> Vec<ToolCallRecord> {
        let msgs = self.this_run();
        let mut out = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            let Some(next) = msgs.get(i + 1) else { break };
            for call in m.tool_calls() {
                if let Some(r) = next.tool_results().find(|r| r.call_id == call.id) {
                    out.push(ToolCallRecord {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        input: call.input.clone(),
                        output: r.output.clone(),
                        is_error: r.is_error,
                    });
                }
            }
        }
        out
    }

    /// Feeds one input. On `Err` nothing changed.
    pub fn handle_input(&mut self, now: Timestamp, input: Input<'_>) -> Result<(), InputError> {
        self.check(now, &input)?;
        let target = self.agent_target(&input);
        self.state.last_now = now;
        if let (None, Some(f)) = (&target, self.inflight.as_mut()) {
            f.sent_at.get_or_insert(now);
        }
        if self.state.config.deadline.is_some_and(|d| now >= d) {
            self.cancel_agents(now);
            self.finish(Outcome::Failed { error: RunError::DeadlineExceeded });
            return Ok(());
        }
        if let Some((index, inner)) = target {
            self.feed_agent(now, index, inner);
            return Ok(());
        }
        match input {
            Input::ResponseHead { status, headers, .. } => self.on_head(status, headers),
            Input::ResponseBody { chunk, .. } => self.on_body(now, chunk),
            Input::ResponseEnd { .. } => self.on_end(now),
            Input::TransportError { kind, message, .. } => {
                if let Some(turn) = self.complete_stream() {
                    self.inflight = None;
                    self.accept_turn(turn);
                } else {
                    let retryable = matches!(kind, TransportErrorKind::Connect | TransportErrorKind::Io);
                    self.fail_exchange(now, RunError::Transport { kind, message }, retryable, None);
                }
            }
            Input::ToolReply { call_id, reply } => {
                if let Phase::Tools { batch } = &mut self.state.phase {
                    if let Some(request) = batch.reply(&call_id, reply)? {
                        self.events.push_back(StreamEvent::Pending { request });
                    }
                }
                self.settle();
            }
            Input::Answer(answer) => {
                if let Phase::Tools { batch } = &mut self.state.phase {
                    batch.answer(answer)?;
                }
                self.settle();
            }
            Input::Timeout => {
                self.agents_timeout(now);
                if let Phase::Backoff { until, attempt } = self.state.phase {
                    if now >= until {
                        self.state.phase = Phase::Ready { attempt };
                    }
                }
                let head_due = self.inflight.as_ref().is_some_and(|f| f.status.is_none())
                    && self.head_deadline().is_some_and(|h| now >= h);
                if head_due {
                    let ms = self.state.config.failover.head_timeout_ms.unwrap_or_default();
                    let error = RunError::Transport {
                        kind: TransportErrorKind::Timeout,
                        message: format!("no response head within {ms} ms"),
                    };
                    self.fail_exchange(now, error, false, None);
                }
            }
            Input::Cancel => {
                self.cancel_agents(now);
                self.inflight = None;
                self.finish(Outcome::Failed { error: RunError::Cancelled });
            }
            Input::Abort { error } => {
                self.cancel_agents(now);
                self.inflight = None;
                self.finish(Outcome::Failed { error });
            }
        }
        Ok(())
    }

    /// Checks an input against the state without changing anything, so a
    /// refused input leaves the run exactly as it was.
    pub(crate) fn validate(&self, input: &Input<'_>) -> Result<(), InputError> {
        let exchange = match input {
            Input::ResponseHead { exchange, .. }
            | Input::ResponseBody { exchange, .. }
            | Input::ResponseEnd { exchange }
            | Input::TransportError { exchange, .. } => *exchange,
            Input::ToolReply { call_id, .. } => {
                let running = match &self.state.phase {
                    Phase::Tools { batch } => batch
                        .calls
                        .iter()
                        .any(|e| e.call.id == *call_id && matches!(e.state, CallState::Started { .. })),
                    _ => false,
                };
                return if running { Ok(()) } else { Err(InputError::UnknownToolCall(call_id.clone())) };
            }
            Input::Answer(answer) => {
                let known = match &self.state.phase {
                    Phase::Tools { batch } => batch.outstanding().iter().any(|r| r.id == answer.id),
                    Phase::Starting { requests, .. } if requests.iter().any(|r| r.id == answer.id) => {
                        return Err(InputError::HostSettles(answer.id.clone()))
                    }
                    _ => false,
                };
                return if known { Ok(()) } else { Err(InputError::UnknownAnswer(answer.id.clone())) };
            }
            Input::Timeout | Input::Cancel | Input::Abort { .. } => return Ok(()),
        };
        let inflight = self.inflight.as_ref().filter(|f| f.exchange == exchange);
        let Some(inflight) = inflight else {
            return Err(InputError::UnknownExchange(exchange.0));
        };
        match input {
            Input::ResponseHead { .. } if inflight.status.is_some() => {
                Err(InputError::OutOfOrder("a second response head"))
            }
            Input::ResponseBody { .. } | Input::ResponseEnd { .. } if inflight.status.is_none() => {
                Err(InputError::OutOfOrder("body before the response head"))
            }
            _ => Ok(()),
        }
    }

    /// The next thing to do. Poll until [`Output::Wait`] or [`Output::Done`].
    pub fn poll_output(&mut self) -> Output {
        if let Some(ev) = self.events.pop_front() {
            return Output::Event(ev);
        }
        let deadline = self.state.config.deadline;
        match &mut self.state.phase {
            Phase::Ready { attempt } => {
                let attempt = *attempt;
                if !self.may_send() {
                    // A sub-agent waits for a model call of the tree to end.
                    return Output::Wait { until: deadline };
                }
                if let Some(wait) = self.route() {
                    self.state.phase = Phase::Backoff { until: wait, attempt };
                    return self.poll_output();
                }
                if !self.events.is_empty() {
                    // A failover event goes out before the request it reroutes.
                    return self.poll_output();
                }
                let attempt = match self.state.phase {
                    Phase::Ready { attempt } => attempt,
                    _ => attempt,
                };
                match self.build_request(attempt) {
                    Ok(req) => Output::Send(req),
                    Err(e) => {
                        self.finish(Outcome::Failed { error: e });
                        self.poll_output()
                    }
                }
            }
            Phase::Awaiting { .. } => Output::Wait { until: self.head_deadline() },
            Phase::Backoff { until, .. } => Output::Wait { until: Some(deadline.map_or(*until, |d| d.min(*until))) },
            Phase::Tools { batch } => {
                if let Some(b) = batch.start_requested() {
                    return Output::RunTools(b);
                }
                let until = match self.poll_agents() {
                    crate::agent::ChildPoll::Output(output) => return output,
                    crate::agent::ChildPoll::Idle { completed: true, .. } => {
                        self.settle();
                        return self.poll_output();
                    }
                    crate::agent::ChildPoll::Idle { until, .. } => until,
                };
                let Phase::Tools { batch } = &mut self.state.phase else { return self.poll_output() };
                if batch.settled() && !batch.complete() && !batch.announced {
                    batch.announced = true;
                    return Output::Suspended(self.outstanding());
                }
                let until = match (deadline, until) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                Output::Wait { until }
            }
            Phase::Starting { requests, announced } => {
                if !*announced {
                    *announced = true;
                    return Output::Suspended(requests.clone());
                }
                Output::Wait { until: deadline }
            }
            Phase::Finished { outcome } => Output::Done(outcome.clone()),
        }
    }

    /// Builds, checks and records the next model request.
    fn build_request(&mut self, attempt: u32) -> Result<HttpRequest, RunError> {
        let index = self.state.upstream;
        crate::output::prepare(&mut self.state, &mut self.output, &mut self.events);
        let prepared = crate::context::prepare(&mut self.state, &self.output.shape())?;
        let (style, base_url, model) = self.current();
        let cfg = &self.state.config;
        let streaming = cfg.stream && !prepared.side();
        let side = prepared.side();
        let mut headers = style.base_headers();
        headers.extend(prepared.headers);
        let key = match index {
            0 => self.secrets.api_key.as_ref(),
            i => self.secrets.upstream_keys.iter().find(|(k, _)| *k == i).map(|(_, v)| v),
        };
        if let Some(key) = key {
            headers.push(style.auth_header(key));
        }
        // Secret headers belong to the primary's endpoint; plain ones go everywhere.
        let secret = if index == 0 { &self.secrets.headers[..] } else { &[] };
        for (k, v) in cfg.headers.iter().chain(secret.iter()) {
            headers.retain(|(name, _)| !name.eq_ignore_ascii_case(k));
            headers.push((k.clone(), v.clone()));
        }
        let exchange = ExchangeId(self.state.next_exchange);
        let request = HttpRequest {
            exchange,
            method: "POST",
            url: prepared.url.unwrap_or_else(|| style.endpoint(base_url, model, streaming)),
            headers,
            body: prepared.body,
            streaming,
        };
        self.state.next_exchange += 1;
        let turn = self.state.turns + 1;
        if attempt == 0 && self.state.announced_turn != turn && !side {
            self.state.announced_turn = turn;
            self.events.push_back(StreamEvent::TurnStarted { turn });
        }
        self.inflight = Some(Inflight {
            exchange,
            status: None,
            retry_after: None,
            body: Vec::new(),
            stream: None,
            streamed: 0,
            sent_at: None,
        });
        self.state.phase = Phase::Awaiting { exchange, attempt };
        Ok(request)
    }

    fn on_head(&mut self, status: u16, headers: Vec<(String, String)>) {
        let style = self.current().0;
        let Some(f) = self.inflight.as_mut() else { return };
        f.status = Some(status);
        let header = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str());
        f.retry_after = header("retry-after").map(str::to_string);
        const SSE: &str = "text/event-stream";
        let is_sse = match header("content-type") {
            Some(ct) => ct.get(..SSE.len()).is_some_and(|p| p.eq_ignore_ascii_case(SSE)),
            None => self.state.config.stream,
        };
        if (200..300).contains(&status) && is_sse {
            f.stream = Some((SseDecoder::new(), style.assembler()));
        }
    }

    fn on_body(&mut self, now: Timestamp, chunk: &[u8]) {
        let limit = self.state.config.max_body_bytes;
        let Some(f) = self.inflight.as_mut() else { return };
        let ok = f.status.is_some_and(|s| (200..300).contains(&s));
        match &mut f.stream {
            Some((decoder, assembler)) if ok => {
                // A stream that never ends is as unbounded as a huge body.
                f.streamed = f.streamed.saturating_add(chunk.len());
                if f.streamed > limit {
                    self.fail_exchange(now, RunError::Decode(DecodeError::TooLarge { limit }), false, None);
                    return;
                }
                decoder.feed(chunk, &mut self.sse_scratch);
                let res = assemble(assembler, &mut self.state.call_ids, &mut self.sse_scratch, &mut self.delta_scratch);
                let partial = self.output.observe(&self.delta_scratch);
                self.events.extend(self.delta_scratch.drain(..).chain(partial));
                if let Err(e) = res {
                    self.fail_remote(now, e);
                }
            }
            _ => {
                if f.body.len() + chunk.len() > limit {
                    if ok {
                        self.fail_exchange(now, RunError::Decode(DecodeError::TooLarge { limit }), false, None);
                    }
                    // An oversize error body is cut, not fatal: its start says enough.
                    return;
                }
                f.body.extend_from_slice(chunk);
            }
        }
    }

    fn on_end(&mut self, now: Timestamp) {
        let style = self.current().0;
        let Some(mut f) = self.inflight.take() else { return };
        let status = f.status.unwrap_or(0);
        if crate::context::counting(&self.state) {
            // A token count answered (or failed: the estimate stands); the
            // request is built again, at the attempt the count was asked for:
            // a count between retries must not give the retry budget back.
            crate::context::accept_count(&mut self.state, status, &f.body);
            if let Phase::Awaiting { attempt, .. } = self.state.phase {
                self.state.phase = Phase::Ready { attempt };
            }
            return;
        }
        if !(200..300).contains(&status) {
            let err = style.decode_error(Some(status), f.retry_after.as_deref(), &f.body);
            if crate::output::native_refused(&mut self.state, &err, &mut self.events) {
                self.state.phase = Phase::Ready { attempt: 0 };
                return;
            }
            let (retryable, after) = (err.retryable, err.retry_after_ms);
            if crate::context::on_too_long(&mut self.state, &err) {
                // The window is learned: the request is built again, compacted.
                if let Phase::Awaiting { attempt, .. } = self.state.phase {
                    self.state.phase = Phase::Ready { attempt };
                }
                return;
            }
            self.inflight = Some(f);
            self.fail_exchange(now, RunError::Provider(err), retryable, after);
            return;
        }
        let result = match &mut f.stream {
            Some((decoder, assembler)) => {
                let res = finish_stream(
                    decoder,
                    assembler,
                    &mut self.state.call_ids,
                    &mut self.sse_scratch,
                    &mut self.delta_scratch,
                );
                self.events.extend(self.delta_scratch.drain(..));
                res
            }
            None => style.decode_response(&f.body, &mut self.state.call_ids).inspect(|turn| {
                if !crate::context::compacting(&self.state) {
                    push_whole_deltas(turn, &mut self.events);
                }
            }),
        };
        match result {
            Ok(turn) if crate::context::compacting(&self.state) => {
                let event = crate::context::accept_summary(&mut self.state, turn);
                self.events.push_back(event);
                self.state.phase = Phase::Ready { attempt: 0 };
            }
            Ok(turn) => self.accept_turn(turn),
            Err(e) => {
                self.inflight = Some(f);
                self.fail_remote(now, e);
            }
        }
    }

    /// The turn of a stream cut after its provider's end marker (Anthropic
    /// `message_stop`, OpenAI `[DONE]`, Gemini's last chunk): only the
    /// connection's own end was lost (the chunked terminator, or the close
    /// of a close-delimited body). Such a turn is whole, and the host may
    /// have shown all of it; failing would throw it away, and retrying after
    /// visible output is not allowed. `None` when the cut came earlier.
    ///
    /// The stream is finished exactly as at a clean end, so a last event
    /// missing only its blank line counts here as it does there.
    fn complete_stream(&mut self) -> Option<TurnResponse> {
        let f = self.inflight.as_ref()?;
        if !f.status.is_some_and(|s| (200..300).contains(&s)) {
            return None;
        }
        // Copies: a stream that turns out incomplete keeps its state (and
        // the run its call ids) for the failure path.
        let (decoder, assembler) = f.stream.as_ref()?;
        let (mut decoder, mut assembler, mut ids) = (decoder.clone(), assembler.clone(), self.state.call_ids.clone());
        let mut deltas = Vec::new();
        let turn = finish_stream(&mut decoder, &mut assembler, &mut ids, &mut self.sse_scratch, &mut deltas).ok()?;
        self.state.call_ids = ids;
        self.events.extend(deltas);
        Some(turn)
    }

    fn fail_remote(&mut self, now: Timestamp, e: RemoteError) {
        match e {
            RemoteError::Provider(p) => {
                let (retryable, after) = (p.retryable, p.retry_after_ms);
                self.fail_exchange(now, RunError::Provider(p), retryable, after)
            }
            RemoteError::Decode(d) => {
                let retryable = matches!(d, DecodeError::Truncated(_));
                self.fail_exchange(now, RunError::Decode(d), retryable, None)
            }
        }
    }

    /// A model call failed: back off and retry when allowed, else end the run.
    /// A stream that already produced visible output is never retried (the
    /// host has shown it; a retry could say something else).
    fn fail_exchange(&mut self, now: Timestamp, error: RunError, retryable: bool, retry_after_ms: Option<u64>) {
        let emitted = self.inflight.take().and_then(|f| f.stream).is_some_and(|(_, a)| a.emitted_anything());
        let attempt = match self.state.phase {
            Phase::Awaiting { attempt, .. } => attempt,
            _ => return,
        };
        if crate::context::counting(&self.state) {
            // A count that could not be made leaves the estimate: no retry, failover or failure.
            crate::context::accept_count(&mut self.state, 0, &[]);
            self.state.phase = Phase::Ready { attempt };
            return;
        }
        if crate::failover::FailoverPolicy::upstream_at_fault(&error) {
            self.reports.push((self.state.upstream, false, now));
        }
        let next = self.next_upstream(now);
        let cfg = &self.state.config;
        let (retry, policy) = (cfg.retry, cfg.failover);
        let failovers = u32::try_from(self.state.failovers.len()).unwrap_or(u32::MAX);
        let rng = &mut self.state.rng;
        let attempt_info = Attempt {
            error: &error,
            retryable,
            retry_after_ms,
            attempt,
            delivered: emitted,
            failovers,
            has_next: next.is_some(),
        };
        match policy.decide(&retry, attempt_info, |bound| rng.below(bound)) {
            Decision::Retry { delay_ms } => {
                self.events.push_back(StreamEvent::Retrying {
                    attempt: attempt + 1,
                    delay_ms,
                    reason: error.to_string(),
                });
                self.state.phase = Phase::Backoff { until: now.plus_ms(delay_ms), attempt: attempt + 1 };
            }
            Decision::FailOver => match next {
                Some(to) => self.fail_over(to, error.to_string()),
                None => self.finish(Outcome::Failed { error }),
            },
            Decision::Fail => self.finish(Outcome::Failed { error }),
        }
    }

    /// The upstream after the current one, in order and wrapping around,
    /// whose circuit is not open at `now`; `None` when there is none.
    fn next_upstream(&self, now: Timestamp) -> Option<usize> {
        let n = self.state.config.upstream_count();
        let cur = self.state.upstream;
        (1..n).map(|k| (cur + k) % n).find(|&i| !self.is_open(i, now))
    }

    fn is_open(&self, i: usize, now: Timestamp) -> bool {
        self.open_until.get(i).copied().flatten().is_some_and(|until| now < until)
    }

    /// Moves the run to upstream `to`; the turn is sent there afresh.
    fn fail_over(&mut self, to: usize, reason: String) {
        let record = FailoverRecord { turn: self.state.turns + 1, from: self.state.upstream, to, reason };
        self.events.push_back(StreamEvent::Failover {
            turn: record.turn,
            from: record.from,
            to: record.to,
            reason: record.reason.clone(),
        });
        self.state.failovers.push(record);
        self.state.upstream = to;
        self.state.phase = Phase::Ready { attempt: 0 };
    }

    /// Before a request goes out: when the current upstream's circuit is
    /// open, move to the next one that is not (within the failover cap), or
    /// say until when to wait for the first cooldown to end.
    fn route(&mut self) -> Option<Timestamp> {
        let now = self.state.last_now;
        if !self.is_open(self.state.upstream, now) {
            return None;
        }
        let capped = self.state.failovers.len() >= self.state.config.failover.max_failovers as usize;
        match self.next_upstream(now) {
            Some(to) if !capped => {
                self.fail_over(to, "circuit open".to_string());
                None
            }
            // Every candidate is open (or no more failovers are allowed): the
            // current one's cooldown, or the first to end, is the wait.
            _ => {
                let until = if capped {
                    self.open_until.get(self.state.upstream).copied().flatten()
                } else {
                    self.open_until.iter().flatten().filter(|t| **t > now).min().copied()
                };
                until
            }
        }
    }

    /// A model turn arrived whole: record it, then run its tools or finish.
    fn accept_turn(&mut self, mut turn: TurnResponse) {
        if turn.usage.total_tokens == 0 {
            turn.usage.total_tokens = turn.usage.prompt_tokens + turn.usage.completion_tokens;
        }
        self.state.usage.add(turn.usage);
        crate::context::on_turn(&mut self.state, &turn);
        self.state.turns += 1;
        let turn_no = self.state.turns;
        self.state.served.push(ServedTurn { turn: turn_no, upstream: self.state.upstream });
        self.reports.push((self.state.upstream, true, self.state.last_now));
        // One copy of each call, shared by its event and the ledger; the
        // transcript keeps the turn's own.
        let calls: Vec<Arc<ToolCall>> = turn.tool_calls().map(|call| Arc::new(call.clone())).collect();
        for call in &calls {
            self.events.push_back(StreamEvent::ToolCallFinished { call: Arc::clone(call) });
        }
        self.events.push_back(StreamEvent::Usage { usage: turn.usage });
        self.events.push_back(StreamEvent::TurnFinished { turn: turn_no, stop: turn.stop.reason });
        let answered = !turn.content.is_empty();
        if answered {
            let mut message = Message { role: Role::Assistant, content: turn.content };
            if self.current().0 != Style::Gemini && self.state.config.any_upstream_speaks(Style::Gemini) {
                // Sent to a Gemini fallback later, this turn needs a signature.
                crate::provider::gemini::stamp_placeholder(&mut message);
            }
            self.state.transcript.push(message);
        }
        if calls.is_empty() {
            let outcome = match turn.stop.reason {
                StopReason::PauseTurn if turn_no < self.state.config.max_turns => {
                    // Anthropic paused a long server-side turn: send it back to continue.
                    self.state.transcript.push(Message::user("Continue."));
                    self.state.phase = Phase::Ready { attempt: 0 };
                    return;
                }
                _ => match crate::output::on_answer(&mut self.state, &mut self.output, &turn.stop, answered) {
                    crate::output::Next::Finish(outcome) => outcome,
                    crate::output::Next::Retry => return self.next_turn_or_limit(),
                },
            };
            self.finish(outcome);
            return;
        }
        let mut batch = Batch { turn: turn_no, calls: Vec::new(), relay_request: None, announced: false };
        for call in calls {
            let output = crate::output::on_output_call(&mut self.state, &mut self.output, &call, &turn.stop);
            let decl = self.state.tools.iter().find(|t| t.name == call.name);
            let state = match (decl, output) {
                (_, Some(result)) => CallState::Completed { result },
                (None, None) => {
                    CallState::Completed { result: ToolResult::error(format!("Unknown tool: {}", call.name)) }
                }
                (Some(_), None) if !arguments_valid(&call.arguments) => CallState::Completed {
                    result: ToolResult::error(format!(
                        "invalid arguments for {}: not a complete JSON value (stop reason {:?}); the tool was not run",
                        call.name,
                        turn.stop.raw.as_deref().unwrap_or("none")
                    )),
                },
                (Some(d), None) if d.kind == ToolKind::Relay => {
                    batch.relay_request.get_or_insert_with(|| format!("relay_{}", call.id));
                    CallState::Relay
                }
                (Some(_), None) => CallState::requested(),
            };
            batch.calls.push(Entry::new(&self.state.run_id, turn_no, call, state));
        }
        if batch.relay_request.is_some() {
            if let Some(req) = batch.outstanding().into_iter().find(|r| r.kind == crate::suspend::KIND_TOOL_CALL) {
                self.events.push_back(StreamEvent::Pending { request: req });
            }
        }
        self.start_agents(&mut batch);
        self.state.phase = Phase::Tools { batch };
        self.sync_agent_secrets();
        self.settle();
    }

    /// When every call of the turn is complete: record the result turn in
    /// call order and move on to the next model call (or the turn limit).
    fn settle(&mut self) {
        let Phase::Tools { batch } = &self.state.phase else { return };
        if !batch.complete() {
            return;
        }
        // The batch is done with: its results move into the transcript.
        let Phase::Tools { batch } = std::mem::replace(&mut self.state.phase, Phase::Ready { attempt: 0 }) else {
            return;
        };
        let results = batch.into_results();
        let mut content = Vec::with_capacity(results.len());
        for (block, result) in results {
            self.events.push_back(StreamEvent::ToolResult {
                call_id: block.call_id.clone(),
                name: block.name.clone(),
                result,
            });
            content.push(Block::ToolResult(block));
        }
        self.state.transcript.push(Message { role: Role::User, content });
        if let Some(outcome) = crate::output::commit(&mut self.state) {
            return self.finish(outcome);
        }
        self.next_turn_or_limit();
    }

    /// The next model call, unless the turn limit is reached.
    fn next_turn_or_limit(&mut self) {
        self.state.phase = Phase::Ready { attempt: 0 };
        if self.state.turns >= self.state.config.max_turns {
            self.finish(Outcome::Incomplete { limit: "maxTurns".into() });
        }
    }

    fn finish(&mut self, outcome: Outcome) {
        self.inflight = None;
        self.state.phase = Phase::Finished { outcome };
    }

    /// Restores the transient parts after deserializing a state: a request
    /// that was in flight is sent again (nothing of it entered the
    /// transcript), and calls that were running become in doubt.
    pub(crate) fn after_restore(&mut self) {
        match &mut self.state.phase {
            Phase::Awaiting { attempt, .. } => self.state.phase = Phase::Ready { attempt: *attempt },
            Phase::Tools { batch } => {
                batch.mark_in_doubt();
                crate::agent::after_restore(batch);
            }
            _ => {}
        }
    }
}

/// Empty text is `{}`; anything else must be one complete JSON value.
fn arguments_valid(raw: &str) -> bool {
    raw.trim().is_empty() || serde_json::from_str::<serde::de::IgnoredAny>(raw).is_ok()
}

/// Ends a stream: the event the decoder still holds (a last `data:` line
/// without its blank line) goes to the assembler, which then gives the turn.
/// Deltas of that event land in `deltas`.
fn finish_stream(
    decoder: &mut SseDecoder,
    assembler: &mut Assembler,
    ids: &mut CallIds,
    sse: &mut Vec<SseEvent>,
    deltas: &mut Vec<StreamEvent>,
) -> Result<TurnResponse, RemoteError> {
    decoder.finish(sse);
    assemble(assembler, ids, sse, deltas)?;
    assembler.finish()
}

/// Feeds decoded SSE events to the assembler, up to the first that fails.
/// `sse` is left empty either way (events after a failure are dropped).
fn assemble(
    assembler: &mut Assembler,
    ids: &mut CallIds,
    sse: &mut Vec<SseEvent>,
    deltas: &mut Vec<StreamEvent>,
) -> Result<(), RemoteError> {
    let res = sse.iter().try_for_each(|ev| assembler.push(ev, ids, deltas));
    sse.clear();
    res
}

/// A whole body yields the same delta events a stream of it would.
fn push_whole_deltas(turn: &TurnResponse, events: &mut VecDeque<StreamEvent>) {
    for block in &turn.content {
        match block {
            Block::Text { text, .. } if !text.is_empty() => {
                events.push_back(StreamEvent::TextDelta { text: text.clone() })
            }
            Block::Reasoning { text, .. } if !text.is_empty() => {
                events.push_back(StreamEvent::ReasoningDelta { text: text.clone() })
            }
            Block::ToolCall(call) => {
                events.push_back(StreamEvent::ToolCallStarted { id: call.id.clone(), name: call.name.clone() });
                if !call.arguments.is_empty() {
                    events.push_back(StreamEvent::ToolCallDelta {
                        id: call.id.clone(),
                        arguments: call.arguments.clone(),
                    });
                }
            }
            _ => {}
        }
    }
}

/// A new run's output state: present exactly when the config asks for output.
fn config_output_state(config: &RunConfig) -> Option<crate::output::OutputState> {
    config.output.as_ref().map(|_| crate::output::OutputState::default())
}
