//! The pump both drivers share: what to do with each machine output, and
//! how each I/O result goes back in. The drivers only move bytes, run tool
//! jobs, sleep and answer; everything else (hooks, metrics, classification,
//! results) happens here, so the two cannot drift.

// Each driver uses a part of this; with one driver (or none) compiled in,
// the rest is unused by design.
#![cfg_attr(not(all(feature = "blocking", feature = "async")), allow(dead_code))]

mod exchanges;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nexus_proto::{
    Answer, HttpRequest, Input, InputError, Message, Outcome, Output, Request, Run, RunError, Status, StopReason,
    StreamEvent, Timestamp, ToolBatch, ToolInvocation, ToolReply, ToolResult,
};
use serde_json::Value;

use crate::approval::{approval_request, is_approval_request};
use crate::cancel::CancelToken;
use crate::config::ClientConfig;
use crate::error::DriveError;
use crate::hooks::{BeforeTool, ToolCallView};
use crate::metrics::Metric;
use crate::result::{RunResult, RunStatus, SuspendedRun};
use crate::tool::{ToolContext, ToolJob};

/// What the driver must do next.
pub(crate) enum Step {
    /// Hand this to the host.
    Event(StreamEvent),
    /// Send this request; feed the response with `on_head`/`on_body`/`on_end`.
    Send(HttpRequest),
    /// Run these calls concurrently; feed each reply with `on_tool_reply`.
    RunTools(Vec<ToolJob>),
    /// Ask the host's `wait_for` for each; feed each answer with `on_answer`.
    Resolve(Vec<Request>),
    /// Make progress on what is in flight (`busy`), or sleep; at `until`, call `on_timeout`.
    Wait { until: Option<Timestamp>, busy: bool },
    /// The run is over (or pending without an in-process answerer).
    /// Boxed: a result is far larger than the other steps.
    Finished(Box<Result<RunResult, DriveError>>),
}

struct Running {
    call_id: String,
    name: String,
    started: Instant,
    /// Kept only when an `after_tool` hook wants to see them: the
    /// arguments and the idempotency key.
    seen: Option<(Value, String)>,
}

pub(crate) struct Engine {
    run: Run,
    cfg: Arc<ClientConfig>,
    cancel: CancelToken,
    started: Instant,
    last_now: u64,
    last_stop: Option<StopReason>,
    /// The model calls in flight, the run's own or its sub-agents'.
    exchanges: Vec<exchanges::Exchange>,
    /// Turn and attempt numbers by agent path (empty for the top run).
    paces: HashMap<String, exchanges::Pace>,
    tools: Vec<Running>,
    resolving: HashSet<String>,
    /// Set when the driver (a hook, the classifier) ended the run: reported
    /// instead of the machine's `Cancelled`.
    failure: Option<DriveError>,
    finished: bool,
    /// Whether an input was accepted at our clock yet (before that, a
    /// restored run may hold a later time; see `feed`).
    synced: bool,
    /// Events of the driver's own (a skill activation), shown before the
    /// machine's next output.
    queued: VecDeque<StreamEvent>,
    /// The run's spans (SPEC §22); nothing without telemetry.
    spans: crate::telemetry::RunSpans,
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

impl Engine {
    /// A new run over `messages` (the last one a user turn).
    pub(crate) fn start(
        cfg: Arc<ClientConfig>,
        cancel: CancelToken,
        messages: Vec<Message>,
    ) -> Result<Engine, DriveError> {
        let mut rc = cfg.run.clone();
        if !cfg.fixed_seed {
            rc.seed = fresh_seed();
        }
        if let Some(t) = cfg.timeout {
            let d = Timestamp(now_ms()).plus_ms(u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
            rc.deadline = Some(rc.deadline.map_or(d, |x| x.min(d)));
        }
        let mut run = Run::new(rc, cfg.toolbox.tool_set(), messages)?;
        // Before the tap sees the run: a cassette replays with the same number.
        run.set_concurrent_exchanges(cfg.model_calls);
        if let Some(tap) = &cfg.tap {
            tap.started(&run);
        }
        let mut engine = Engine::with_run(cfg, cancel, run, None);
        // A new run has seen no time yet: no input of it can be refused as
        // earlier than its last, so none needs a copy for a retry (`feed`).
        engine.synced = true;
        Ok(engine)
    }

    /// A new run suspended before its first model call on `requests` the
    /// host settles itself ([`Run::await_host`]).
    pub(crate) fn start_awaiting(
        cfg: Arc<ClientConfig>,
        cancel: CancelToken,
        messages: Vec<Message>,
        requests: Vec<Request>,
    ) -> Result<Engine, DriveError> {
        let mut engine = Engine::start(cfg, cancel, messages)?;
        engine.run.await_host(requests)?;
        Ok(engine)
    }

    /// A run restored from a snapshot, with `answers` applied. An answer that
    /// matches no outstanding request is refused before any I/O.
    pub(crate) fn resume(
        cfg: Arc<ClientConfig>,
        cancel: CancelToken,
        state: &[u8],
        answers: Vec<Answer>,
    ) -> Result<Engine, DriveError> {
        let run = Run::restore(state)?;
        let mut engine = Engine::with_run(cfg, cancel, run, Some(state));
        for a in answers {
            engine.feed(Input::Answer(a))?;
        }
        // An approved call this client cannot run would reach the model as
        // `Unknown tool` and end the run: the approval would be lost. Refuse
        // before anything runs, so the stored run stays as it was.
        // The tree's children hand out calls too: each is served by its own agent's tools.
        let calls = engine.run.calls_to_run().into_iter().cloned().chain(engine.run.agent_calls_to_run());
        let unbound = calls.into_iter().find(|call| {
            engine.toolbox_for(&call.id).and_then(|t| t.get(&call.name)).is_none_or(|e| e.handler.is_none())
        });
        if let Some(call) = unbound {
            return Err(DriveError::MissingTool { tool: call.name, call_id: call.id });
        }
        Ok(engine)
    }

    /// `state`: what a resumed run was restored from (its envelope may
    /// carry the suspended segment's trace context).
    fn with_run(cfg: Arc<ClientConfig>, cancel: CancelToken, mut run: Run, state: Option<&[u8]>) -> Engine {
        if cfg.base_url_set && run.config().style == cfg.run.style && run.config().base_url != cfg.run.base_url {
            run.set_base_url(cfg.run.base_url.clone());
        }
        if let Some(key) = &cfg.api_key {
            run.set_api_key(key.clone());
        }
        for i in 1..run.config().upstream_count() {
            if let Some(key) = run.config().upstream(i).and_then(|u| cfg.key_for(&u)) {
                run.set_upstream_api_key(i, key);
            }
        }
        for (k, v) in &cfg.secret_headers {
            run.set_secret_header(k.clone(), v.clone());
        }
        for (name, key) in &cfg.agent_keys {
            run.set_agent_api_key(name, key.clone());
        }
        run.set_concurrent_exchanges(cfg.model_calls);
        if let (Some(tap), Some(_)) = (&cfg.tap, state) {
            tap.restored(&run);
        }
        let spans = crate::telemetry::RunSpans::begin(&cfg, &run, state);
        Engine {
            spans,
            run,
            cfg,
            cancel,
            started: Instant::now(),
            last_now: 0,
            last_stop: None,
            exchanges: Vec::new(),
            paces: HashMap::new(),
            tools: Vec::new(),
            resolving: HashSet::new(),
            failure: None,
            finished: false,
            synced: false,
            queued: VecDeque::new(),
        }
    }

    pub(crate) fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    pub(crate) fn config(&self) -> &Arc<ClientConfig> {
        &self.cfg
    }

    /// The run's deadline.
    pub(crate) fn deadline(&self) -> Option<Timestamp> {
        self.run.config().deadline
    }

    /// How long until `t` by the wall clock (zero when past).
    pub(crate) fn until(&self, t: Timestamp) -> Duration {
        Duration::from_millis(t.0.saturating_sub(now_ms()))
    }

    fn now(&mut self) -> Timestamp {
        self.last_now = self.last_now.max(now_ms());
        Timestamp(self.last_now)
    }

    /// Feeds one input at the current time, and shows it to the tap once
    /// accepted. A snapshot taken on a machine whose clock ran ahead is fed
    /// at its latest time instead of being refused; once one input is
    /// accepted our clock is at least the run's, so later inputs need no
    /// copy for that retry.
    fn feed(&mut self, input: Input<'_>) -> Result<(), InputError> {
        let mut at = self.now();
        let copy = (self.cfg.tap.is_some() || !self.synced).then(|| input.clone());
        let mut fed = self.run.handle_input(at, input);
        if let (Err(InputError::TimeWentBackwards { last, .. }), Some(c)) = (&fed, &copy) {
            self.last_now = *last;
            at = Timestamp(*last);
            fed = self.run.handle_input(at, c.clone());
        }
        if fed.is_ok() {
            self.synced = true;
            if let (Some(tap), Some(c)) = (&self.cfg.tap, &copy) {
                tap.input(at, c);
            }
        }
        fed
    }

    /// The next thing to do.
    pub(crate) fn step(&mut self) -> Step {
        loop {
            if self.finished {
                return Step::Finished(Box::new(Err(DriveError::Input(InputError::Finished))));
            }
            if let Some(ev) = self.queued.pop_front() {
                return Step::Event(ev);
            }
            if self.cancel.is_cancelled() && self.run.outcome().is_none() {
                self.drop_exchanges();
                let _ = self.feed(Input::Cancel);
            }
            if self.run.config().upstream_count() > 1 {
                // Routing skips upstreams whose circuit the client's other runs opened.
                let now = self.now();
                let before = self.cfg.tap.as_ref().map(|_| open_circuits(self.run.circuit_view()));
                let mut breakers = self.cfg.breakers.lock().unwrap_or_else(|e| e.into_inner());
                self.run.sync_circuits(now, &mut breakers);
                drop(breakers);
                if let (Some(tap), Some(before)) = (&self.cfg.tap, before) {
                    // Other runs move these: a cassette keeps them so the replay routes the same way.
                    if open_circuits(self.run.circuit_view()) != before {
                        tap.circuits(&self.run);
                    }
                }
            }
            let output = self.run.poll_output();
            if let Some(tap) = &self.cfg.tap {
                tap.output(&self.run, &output);
            }
            match output {
                Output::Event(ev) => {
                    match &ev {
                        StreamEvent::TurnFinished { stop, .. } => self.last_stop = Some(*stop),
                        StreamEvent::ToolResult { call_id, name, result } => {
                            if let Some(activated) = self.activation(call_id, name, result) {
                                self.queued.push_back(activated);
                            }
                        }
                        _ => {}
                    }
                    self.pace_event(&ev);
                    self.spans.event(&self.run, &ev);
                    return Step::Event(ev);
                }
                Output::Send(req) => {
                    if let Some(req) = self.prepare_send(req) {
                        return Step::Send(req);
                    }
                }
                Output::RunTools(batch) => {
                    let jobs = self.prepare_tools(batch);
                    if !jobs.is_empty() {
                        return Step::RunTools(jobs);
                    }
                }
                Output::Suspended(requests) => {
                    if let Some(step) = self.suspended(requests) {
                        return step;
                    }
                }
                Output::Wait { until } => {
                    let busy = !self.exchanges.is_empty() || !self.tools.is_empty() || !self.resolving.is_empty();
                    if !busy && self.run.status() == Status::Pending {
                        // Resumed without answers, or answers for only some
                        // requests: still pending on the rest.
                        let outstanding = self.run.outstanding();
                        if let Some(step) = self.suspended(outstanding) {
                            return step;
                        }
                        continue;
                    }
                    return Step::Wait { until, busy };
                }
                Output::Done(outcome) => {
                    self.finished = true;
                    return Step::Finished(Box::new(self.finish(outcome)));
                }
            }
        }
    }

    fn suspended(&mut self, requests: Vec<Request>) -> Option<Step> {
        if self.cfg.wait_for.is_some() {
            let fresh: Vec<Request> = requests.into_iter().filter(|r| !self.resolving.contains(&r.id)).collect();
            if fresh.is_empty() {
                return None;
            }
            self.resolving.extend(fresh.iter().map(|r| r.id.clone()));
            return Some(Step::Resolve(fresh));
        }
        self.finished = true;
        let state = self.spans.suspended(&requests, self.run.snapshot());
        let suspended = SuspendedRun { run_id: self.run.id().to_string(), state, pending: requests };
        let mut result = self.result(RunStatus::Pending, None, false);
        result.pending = suspended.pending.clone();
        result.suspended = Some(suspended);
        self.run_metric("pending", &result, None);
        Some(Step::Finished(Box::new(Ok(result))))
    }

    /// Ends the run with `err` (a hook or the classifier decided).
    fn abort(&mut self, err: DriveError) {
        let error = match &err {
            DriveError::Run(e) => e.clone(),
            other => RunError::Aborted { reason: other.to_string() },
        };
        self.failure.get_or_insert(err);
        self.drop_exchanges();
        let _ = self.feed(Input::Abort { error });
    }

    /// The folders the run's calls may read besides the workspace: those of
    /// the skills activated so far, found in the transcript (so a restored
    /// run gets them back with no state of their own).
    fn read_roots(&self) -> Vec<PathBuf> {
        #[cfg(feature = "skills")]
        if let Some(skills) = &self.cfg.skills {
            return skills.granted_dirs(self.run.transcript());
        }
        Vec::new()
    }

    /// The event that shows a successful `skill` call, when this is one.
    fn activation(&self, call_id: &str, name: &str, result: &ToolResult) -> Option<StreamEvent> {
        #[cfg(feature = "skills")]
        if self.cfg.skills.is_some() && name == crate::skills::SKILL_TOOL && !result.is_error {
            let skill = result.metadata.as_ref()?.get("skill")?.as_str()?;
            return Some(StreamEvent::SkillActivated { call_id: call_id.to_string(), name: skill.to_string() });
        }
        let _ = (call_id, name, result);
        None
    }

    fn prepare_tools(&mut self, batch: ToolBatch) -> Vec<ToolJob> {
        let mut jobs = Vec::with_capacity(batch.calls.len());
        let mut grants: Option<Vec<PathBuf>> = None;
        for inv in batch.calls {
            let ToolInvocation { call_id, name, mut input, arguments, idempotency_key, answer, request } = inv;
            let started = Instant::now();
            let traceparent = self.spans.tool_started(&self.run, &call_id, &name, &input);
            if answer.is_none() {
                if let Some(hook) = self.cfg.hooks.before_tool.clone() {
                    let view = ToolCallView {
                        call_id: &call_id,
                        name: &name,
                        input: &input,
                        idempotency_key: &idempotency_key,
                    };
                    match hook(&view) {
                        BeforeTool::Continue => {}
                        BeforeTool::Args(v) => input = v,
                        BeforeTool::Reply(reply) => {
                            self.record_reply(&call_id, &name, started, None, reply, false);
                            continue;
                        }
                    }
                }
            }
            // One entry gives the handler and the approval policy: a
            // sub-agent's call is served, and asked about, by its own tools.
            let entry = self.toolbox_for(&call_id).and_then(|t| t.get(&name));
            let asks = entry.is_some_and(|e| e.approval.applies_to(&input));
            let bound =
                entry.and_then(|e| e.handler.clone().map(|h| (h, e.timeout.or(self.cfg.tool_timeout), e.pace.clone())));
            let Some((handler, timeout, pace)) = bound else {
                // Declared in the run (maybe by another process) but not bound here.
                let reply = ToolReply::Done(ToolResult::error(format!("Unknown tool: {name}")));
                self.record_reply(&call_id, &name, started, None, reply, false);
                continue;
            };
            let (answer, request) = if request.as_ref().is_some_and(is_approval_request) {
                // Approved: the tool runs as if it had never been asked.
                (None, None)
            } else {
                if answer.is_none() && asks {
                    let reply = ToolReply::Pending(approval_request(&name, &input, &arguments));
                    self.record_reply(&call_id, &name, started, None, reply, false);
                    continue;
                }
                (answer, request)
            };
            let seen = self.cfg.hooks.after_tool.is_some().then(|| (input.clone(), idempotency_key.clone()));
            let read_roots = grants.get_or_insert_with(|| self.read_roots()).clone();
            self.tools.push(Running { call_id: call_id.clone(), name: name.clone(), started, seen });
            let ctx = ToolContext {
                call_id: call_id.clone(),
                name,
                turn: batch.turn,
                arguments,
                idempotency_key,
                answer,
                request,
                cancel: self.cancel.clone(),
                read_roots,
                traceparent,
            };
            jobs.push(ToolJob { call_id, input, ctx, handler, timeout, pace });
        }
        jobs
    }

    /// The tools a call is served from: a sub-agent's call (its id qualified
    /// by the agent path) from that agent's own.
    fn toolbox_for(&self, call_id: &str) -> Option<&crate::tool::Toolbox> {
        match call_id.rsplit_once(nexus_proto::agent::PATH_SEPARATOR) {
            None => Some(&self.cfg.toolbox),
            Some((path, _)) => self.cfg.agents.toolbox(&self.run.agent_names(path)?),
        }
    }

    /// Runs `job` on this thread and feeds its reply.
    pub(crate) fn run_here(&mut self, mut job: ToolJob) {
        // The body does not need the id; only the reply is labelled with it.
        let id = std::mem::take(&mut job.call_id);
        let reply = job.run_blocking();
        self.on_tool_reply(&id, reply);
    }

    /// A tool finished or suspended. Late replies (after a timeout reply) are ignored.
    pub(crate) fn on_tool_reply(&mut self, call_id: &str, reply: ToolReply) {
        let Some(pos) = self.tools.iter().position(|r| r.call_id == call_id) else {
            return;
        };
        let r = self.tools.swap_remove(pos);
        self.record_reply(&r.call_id, &r.name, r.started, r.seen.as_ref(), reply, true);
    }

    fn record_reply(
        &mut self,
        call_id: &str,
        name: &str,
        started: Instant,
        seen: Option<&(Value, String)>,
        mut reply: ToolReply,
        after_hook: bool,
    ) {
        if let (true, Some(hook), ToolReply::Done(result), Some((input, key))) =
            (after_hook, &self.cfg.hooks.after_tool, &mut reply, seen)
        {
            let view = ToolCallView { call_id, name, input, idempotency_key: key };
            hook(&view, result);
        }
        if let Some(m) = &self.cfg.on_metric {
            let (is_error, pending) = match &reply {
                ToolReply::Done(r) => (r.is_error, false),
                ToolReply::Pending(_) => (false, true),
            };
            m(&Metric::Tool { name: name.to_string(), latency: started.elapsed(), is_error, pending });
        }
        self.spans.tool_ended(call_id, &reply);
        let _ = self.feed(Input::ToolReply { call_id: call_id.to_string(), reply });
    }

    /// The host answered a request.
    pub(crate) fn on_answer(&mut self, answer: Answer) -> Result<(), DriveError> {
        self.resolving.remove(&answer.id);
        if self.run.outcome().is_some() {
            return Ok(());
        }
        self.feed(Input::Answer(answer)).map_err(DriveError::Input)
    }

    /// A timer the machine asked for may have fired.
    pub(crate) fn on_timeout(&mut self) {
        let _ = self.feed(Input::Timeout);
        // A head timeout may have failed a call: the driver stops reading it.
        self.prune_exchanges();
    }

    fn finish(&mut self, outcome: Outcome) -> Result<RunResult, DriveError> {
        let (status, limit) = match outcome {
            Outcome::Done => (RunStatus::Done, None),
            Outcome::Incomplete { limit } => (RunStatus::Incomplete, Some(limit)),
            Outcome::Failed { error } => {
                let err = self.failure.take().unwrap_or(DriveError::Run(error));
                self.spans.finished(&self.run, "failed", None, Some(&err));
                let result = self.result(RunStatus::Done, None, false);
                self.run_metric("failed", &result, Some(err.to_string()));
                return Err(err);
            }
        };
        let label = if status == RunStatus::Done { "done" } else { "incomplete" };
        self.spans.finished(&self.run, label, limit.as_deref(), None);
        let result = self.result(status, limit, true);
        self.run_metric(if status == RunStatus::Done { "done" } else { "incomplete" }, &result, None);
        Ok(result)
    }

    /// The run's result. With `last`, the run is over and the transcript
    /// moves into the result instead of being copied.
    fn result(&mut self, status: RunStatus, limit: Option<String>, last: bool) -> RunResult {
        let mut result = RunResult::of_run(&self.run, status, limit);
        result.stop_reason = self.last_stop;
        let taken = if last { self.run.take_transcript() } else { None };
        result.messages = taken.unwrap_or_else(|| self.run.transcript().to_vec());
        result
    }

    fn run_metric(&self, status: &'static str, r: &RunResult, error: Option<String>) {
        if let Some(m) = &self.cfg.on_metric {
            m(&Metric::Run {
                model: r.model.clone(),
                status,
                turns: r.turns,
                tool_calls: r.tool_calls.len(),
                total_tokens: r.usage.total_tokens,
                latency: self.started.elapsed(),
                error,
            });
        }
    }
}

/// `ask`: the config's conversation store (`ask` without one is a config error).
pub(crate) fn conversations(cfg: &ClientConfig) -> Result<&Arc<dyn crate::store::ConversationStore>, DriveError> {
    cfg.conversations.as_ref().ok_or_else(|| DriveError::Config("ask needs a conversation store".into()))
}

/// `ask`: the stored transcript of a conversation (empty when new).
pub(crate) fn load_conversation(cfg: &ClientConfig, id: &str) -> Result<Vec<Message>, DriveError> {
    Ok(conversations(cfg)?.get(id)?.unwrap_or_default())
}

/// `ask`: saves the transcript of a run that is not pending (a pending
/// transcript ends on unanswered calls; it is saved once the run resumes).
pub(crate) fn save_conversation(cfg: &ClientConfig, id: &str, result: &RunResult) -> Result<(), DriveError> {
    if let (Some(store), false) = (&cfg.conversations, result.is_pending()) {
        store.save(id, &result.messages)?;
    }
    Ok(())
}

/// After resuming a claimed run: write it back when still pending, remove
/// it when finished or failed, release the claim when nothing happened.
pub(crate) fn settle_stored(
    store: &dyn crate::store::RunStore,
    run_id: &str,
    claimed: &crate::store::RunRecord,
    result: Result<RunResult, DriveError>,
) -> Result<RunResult, DriveError> {
    match &result {
        Ok(r) => match &r.suspended {
            Some(s) => {
                store.save(run_id, &s.state, Some(claimed.version))?;
            }
            None => store.delete(run_id, claimed.version)?,
        },
        // Refused before anything ran: the run is as it was.
        Err(DriveError::Input(_)) | Err(DriveError::State(_)) | Err(DriveError::MissingTool { .. }) => {
            store.save(run_id, &claimed.state, Some(claimed.version))?;
        }
        Err(_) => store.delete(run_id, claimed.version)?,
    }
    result
}

/// A seed of its own for every run that did not fix one: the run id, and so
/// every idempotency key (`run id/turn/call id`), derives from it.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    // The process id is read once: it is a system call, and a run is cheap.
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let pid = *PID.get_or_init(std::process::id);
    nanos ^ (u64::from(pid) << 32) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// The circuits of a view that are open (an empty view and an all-closed one are the same).
fn open_circuits(view: &[Option<Timestamp>]) -> Vec<(usize, Timestamp)> {
    view.iter().enumerate().filter_map(|(i, t)| t.map(|t| (i, t))).collect()
}
