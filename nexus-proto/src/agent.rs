//! Sub-agents: a tool whose execution is a child run.
//!
//! A run's config may name agents ([`Agents`]); each becomes a tool of the
//! run (input `{"prompt": string}`). A call of one starts a child [`Run`]
//! that lives in the parent's ledger entry for that call, so one state
//! document covers the whole tree. The parent drives its children: their
//! requests, tool batches and events come out of the parent's
//! [`Run::poll_output`] with their ids qualified by path (the delegating
//! call id, [`PATH_SEPARATOR`], then the child's own id, to any depth), and
//! an input given to the parent is routed by that path to the deepest run
//! that owns it; only that run advances. When a child finishes, its final
//! text becomes the delegating call's result.
//!
//! Why `/` separates: every provider's call ids are drawn from
//! `[A-Za-z0-9_-]` (Anthropic documents the pattern; OpenAI, Gemini and
//! the ids this crate makes up follow it), so the first `/` of a qualified id
//! always ends the delegating call id, and the rest, whatever it holds, is
//! the child's. A delegating call whose id holds a `/` is refused with an
//! error result instead of being started.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::config::RunConfig;
use crate::error::InputError;
use crate::event::StreamEvent;
use crate::http::ExchangeId;
use crate::ledger::{Batch, CallState, Entry};
use crate::message::{Message, Usage};
use crate::run::{Input, Outcome, Output, Phase, Run, RunState, Status};
use crate::suspend::{Request, ToolResult};
use crate::time::Timestamp;
use crate::tool::{sanitize_name, ToolDecl};

/// Separates the segments of a qualified id or an agent path.
pub const PATH_SEPARATOR: char = '/';
/// How deep delegation may go when the config does not say (the top run is depth 0).
pub const DEFAULT_MAX_DEPTH: u32 = 3;

/// One agent a run may delegate to: the tool the model sees, and the child
/// run a call of it starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// The tool name (sanitized like any tool name).
    pub name: String,
    /// What the agent does, for the model.
    pub description: String,
    /// The child run's config: its upstream (any wire format), system
    /// prompt, `max_turns`, and its own agents for a deeper level.
    pub config: RunConfig,
    /// The child's tools. Their calls reach the driver qualified by path, so
    /// the host serves them by name like the parent's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<ToolDecl>,
}

impl AgentSpec {
    /// An agent named `name` whose child runs with `config` and no tools.
    pub fn new(name: &str, description: impl Into<String>, config: RunConfig) -> AgentSpec {
        AgentSpec { name: sanitize_name(name), description: description.into(), config, tools: Vec::new() }
    }

    /// The same agent with these tools.
    pub fn with_tools(mut self, tools: Vec<ToolDecl>) -> AgentSpec {
        self.tools = tools;
        self
    }

    /// The tool declaration the parent's model sees.
    pub fn decl(&self) -> ToolDecl {
        ToolDecl::new(
            &self.name,
            self.description.clone(),
            serde_json::json!({
                "type": "object",
                "properties": {"prompt": {"type": "string", "description": "The task, with everything the agent needs to know"}},
                "required": ["prompt"],
            }),
        )
    }
}

/// The agents of a run ([`RunConfig::agents`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Agents {
    /// The agents, each declared as a tool of the run.
    pub agents: Vec<AgentSpec>,
    /// How deep delegation may go (children are depth 1). A call that would
    /// start a run deeper gets an error result.
    pub max_depth: u32,
}

impl Default for Agents {
    fn default() -> Agents {
        Agents { agents: Vec::new(), max_depth: DEFAULT_MAX_DEPTH }
    }
}

impl Agents {
    pub(crate) fn validate(&self) -> Result<(), InputError> {
        if self.max_depth == 0 {
            return Err(InputError::Config("agents: max_depth must be at least 1".into()));
        }
        let mut names = std::collections::HashSet::new();
        for a in &self.agents {
            if a.name.is_empty() || !names.insert(a.name.as_str()) {
                return Err(InputError::Config(format!("agent names must be non-empty and distinct ({:?})", a.name)));
            }
            a.config.validate().map_err(|e| InputError::Config(format!("agent {}: {e}", a.name)))?;
        }
        Ok(())
    }
}

/// One agent's share of a run tree, for reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentReport {
    /// The agent path: delegating call ids from the top, joined by [`PATH_SEPARATOR`].
    pub path: String,
    /// The agent's name.
    pub name: String,
    /// Model calls the agent's run made.
    pub turns: u32,
    /// Its token counts (its own calls, not its children's).
    pub usage: Usage,
    /// `running`, `pending`, `done`, `incomplete` or `failed`.
    pub status: String,
}

/// The sub-agent part of a run's state (format 3 on).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AgentState {
    /// 0 for the top run.
    #[serde(default, skip_serializing_if = "crate::state::is_zero")]
    pub depth: u32,
    /// The tree's depth limit, inherited from the top.
    pub max_depth: u32,
    /// Children (and their descendants) that finished, in finishing order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finished: Vec<AgentReport>,
}

/// A child run held in its delegating call's ledger entry. Serialized as
/// the child's whole state; its memory-only parts (the response being read,
/// keys) are not state, as for any run.
#[derive(Debug)]
pub(crate) struct ChildRun(pub Box<Run>);

impl Serialize for ChildRun {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.state.serialize(s)
    }
}

impl<'de> Deserialize<'de> for ChildRun {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ChildRun, D::Error> {
        Ok(ChildRun(Box::new(Run::from_state(RunState::deserialize(d)?, None))))
    }
}

impl Clone for ChildRun {
    fn clone(&self) -> ChildRun {
        ChildRun(Box::new(self.0.duplicate()))
    }
}

impl PartialEq for ChildRun {
    fn eq(&self, other: &ChildRun) -> bool {
        self.0.state == other.0.state
    }
}

/// What the children of a run have for the driver.
pub(crate) enum ChildPoll {
    /// Give this to the driver.
    Output(Output),
    /// Nothing now; wake by `until`. `completed`: a child finished, so the
    /// batch may be complete.
    Idle { until: Option<Timestamp>, completed: bool },
}

/// Memory-only routing of a run to its children.
#[derive(Debug, Clone)]
pub(crate) struct Live {
    /// Exchanges of children in flight: (id given to the driver, call id, the child's id).
    routes: Vec<(ExchangeId, String, ExchangeId)>,
    /// Set on a child by its parent before each poll: how many more model
    /// calls may start across the tree. `None` on the top run.
    send_slots: Option<usize>,
    /// Top run only: model calls the driver takes in flight at once.
    max_exchanges: usize,
}

impl Default for Live {
    fn default() -> Live {
        Live { routes: Vec::new(), send_slots: None, max_exchanges: 1 }
    }
}

/// `head/rest`.
pub(crate) fn qualify(head: &str, rest: &str) -> String {
    let mut s = String::with_capacity(head.len() + 1 + rest.len());
    s.push_str(head);
    s.push(PATH_SEPARATOR);
    s.push_str(rest);
    s
}

/// The declarations of `config`'s agents after `tools` (unchanged when it has none).
pub(crate) fn declare(config: &RunConfig, tools: crate::tool::ToolSet) -> crate::tool::ToolSet {
    match &config.agents {
        Some(a) if !a.agents.is_empty() => {
            let mut all = tools.to_vec();
            all.extend(a.agents.iter().map(AgentSpec::decl));
            all.into()
        }
        _ => tools,
    }
}

/// The state a new run starts with: present when it can delegate.
pub(crate) fn initial_state(config: &RunConfig) -> Option<AgentState> {
    config.agents.as_ref().map(|a| AgentState { depth: 0, max_depth: a.max_depth, finished: Vec::new() })
}

/// An event of the child under `call_id`, as the parent shows it.
fn wrap(call_id: &str, event: StreamEvent) -> StreamEvent {
    match event {
        StreamEvent::Agent { agent, event } => {
            let event = match *event {
                StreamEvent::Pending { mut request } => {
                    request.id = qualify(call_id, &request.id);
                    Box::new(StreamEvent::Pending { request })
                }
                other => Box::new(other),
            };
            StreamEvent::Agent { agent: qualify(call_id, &agent), event }
        }
        StreamEvent::Pending { mut request } => {
            request.id = qualify(call_id, &request.id);
            StreamEvent::Agent { agent: call_id.to_string(), event: Box::new(StreamEvent::Pending { request }) }
        }
        other => StreamEvent::Agent { agent: call_id.to_string(), event: Box::new(other) },
    }
}

fn status_word(run: &Run) -> &'static str {
    match run.status() {
        Status::Running => "running",
        Status::Pending => "pending",
        Status::Done => "done",
        Status::Incomplete => "incomplete",
        Status::Failed => "failed",
    }
}

/// Where an input for a child goes: the entry index and the input as the child sees it.
type Target<'a> = (usize, Input<'a>);

impl Run {
    /// How many model calls the driver can have in flight at once across
    /// the run and its sub-agents (default 1, which every driver can do). A
    /// driver that reads several responses concurrently raises it, and
    /// parallel children then call their models at the same time. Memory
    /// only: a capability of the driver, not a part of the run.
    pub fn set_concurrent_exchanges(&mut self, n: usize) {
        self.agent_live.max_exchanges = n.max(1);
    }

    /// How many model calls the driver said it can have in flight at once
    /// ([`Run::set_concurrent_exchanges`]).
    pub fn concurrent_exchanges(&self) -> usize {
        self.agent_live.max_exchanges
    }

    /// The live run at agent path `path` (delegating call ids joined by
    /// `/`; this run for the empty path), `None` when no live child is
    /// there. With [`Run::exchange_owner`] a driver reads what belongs to
    /// the run that sent an exchange: its turn count, head deadline, usage
    /// and retry policy.
    pub fn agent_run(&self, path: &str) -> Option<&Run> {
        if path.is_empty() {
            return Some(self);
        }
        let (head, rest) = path.split_once(PATH_SEPARATOR).unwrap_or((path, ""));
        self.children().find(|(c, _, _)| *c == head)?.2.agent_run(rest)
    }

    /// The calls the tree's children will hand to the driver next, their
    /// ids qualified by agent path ([`Run::calls_to_run`] of each child,
    /// to any depth): a host checks it can run each of them too before it
    /// resumes a run.
    pub fn agent_calls_to_run(&self) -> Vec<crate::message::ToolCall> {
        let mut out = Vec::new();
        for (call_id, _, child) in self.children() {
            let mine = child.calls_to_run().into_iter().cloned();
            for mut call in mine.chain(child.agent_calls_to_run()) {
                call.id = qualify(call_id, &call.id);
                out.push(call);
            }
        }
        out
    }

    /// Gives the API key of the agent `name`'s upstream, for its children
    /// anywhere in the tree (memory only, never in a snapshot). A child with
    /// no key of its own uses the parent's when both call the same API root.
    pub fn set_agent_api_key(&mut self, name: &str, key: impl Into<String>) {
        let key = key.into();
        self.secrets.agent_keys.retain(|(n, _)| n != name);
        self.secrets.agent_keys.push((name.to_string(), key));
        self.sync_agent_secrets();
    }

    /// Every agent of the tree below this run, live or finished: path,
    /// name, turns, usage and status. Finished ones first, in finishing
    /// order, then live ones in call order, each before its own children.
    pub fn agent_reports(&self) -> Vec<AgentReport> {
        let mut out: Vec<AgentReport> = self.state.agents.as_ref().map(|a| a.finished.clone()).unwrap_or_default();
        for (call_id, name, child) in self.children() {
            out.push(AgentReport {
                path: call_id.to_string(),
                name: name.to_string(),
                turns: child.turns(),
                usage: child.usage(),
                status: status_word(child).to_string(),
            });
            for mut r in child.agent_reports() {
                r.path = qualify(call_id, &r.path);
                out.push(r);
            }
        }
        out
    }

    /// Usage of the whole tree: this run's model calls and every agent's.
    pub fn tree_usage(&self) -> Usage {
        let mut total = self.usage();
        for r in self.agent_reports() {
            total.add(r.usage);
        }
        total
    }

    /// The agent path of the run that owns the outstanding request `id`
    /// (empty for this run), or `None` when nothing waits on that id.
    pub fn request_owner(&self, id: &str) -> Option<String> {
        if self.own_outstanding().iter().any(|r| r.id == id) {
            return Some(String::new());
        }
        let (head, rest) = id.split_once(PATH_SEPARATOR)?;
        let child = self.children().find(|(c, _, _)| *c == head)?.2;
        child.request_owner(rest).map(|p| if p.is_empty() { head.to_string() } else { qualify(head, &p) })
    }

    /// The run of the tree that sent exchange `id` and the upstream it went
    /// to: its agent path (empty for this run) and [`Upstream`](crate::Upstream); `None`
    /// when no run of the tree has that exchange in flight. A driver's
    /// telemetry names a sub-agent's model call by it (SPEC §22).
    pub fn exchange_owner(&self, id: ExchangeId) -> Option<(String, crate::failover::Upstream)> {
        if self.inflight_exchange() == Some(id) {
            return Some((String::new(), self.upstream()));
        }
        let (_, call, inner) = self.agent_live.routes.iter().find(|(outer, _, _)| *outer == id)?;
        let child = self.children().find(|(c, _, _)| c == call)?.2;
        let (path, upstream) = child.exchange_owner(*inner)?;
        Some((if path.is_empty() { call.clone() } else { qualify(call, &path) }, upstream))
    }

    /// The agent names along the agent path `path` (delegating call ids
    /// joined by `/`), from this run's child down; `None` when no live
    /// child is there. A driver serves a qualified tool call with the tools
    /// of the agent that made it: the names along the call id's path.
    pub fn agent_names(&self, path: &str) -> Option<Vec<String>> {
        let (head, rest) = match path.split_once(PATH_SEPARATOR) {
            Some((h, r)) => (h, Some(r)),
            None => (path, None),
        };
        let (_, name, child) = self.children().find(|(c, _, _)| *c == head)?;
        let mut names = vec![name.to_string()];
        if let Some(rest) = rest {
            names.extend(child.agent_names(rest)?);
        }
        Some(names)
    }

    /// The live children: (delegating call id, agent name, run).
    fn children(&self) -> impl Iterator<Item = (&str, &str, &Run)> {
        let calls = match &self.state.phase {
            Phase::Tools { batch } => &batch.calls[..],
            _ => &[],
        };
        calls.iter().filter_map(|e| match &e.state {
            CallState::Agent { agent, child } => Some((e.call.id.as_str(), agent.as_str(), &*child.0)),
            _ => None,
        })
    }

    fn child_at(&mut self, index: usize) -> Option<&mut Run> {
        match &mut self.state.phase {
            Phase::Tools { batch } => match &mut batch.calls.get_mut(index)?.state {
                CallState::Agent { child, .. } => Some(&mut child.0),
                _ => None,
            },
            _ => None,
        }
    }

    fn children_mut(&mut self) -> impl Iterator<Item = &mut Run> {
        let calls = match &mut self.state.phase {
            Phase::Tools { batch } => &mut batch.calls[..],
            _ => &mut [],
        };
        calls.iter_mut().filter_map(|e| match &mut e.state {
            CallState::Agent { child, .. } => Some(&mut *child.0),
            _ => None,
        })
    }

    /// Hands keys and secret headers down: each child gets the key set for
    /// its agent, else this run's when it calls the same API root.
    pub(crate) fn sync_agent_secrets(&mut self) {
        let secrets = self.secrets.clone();
        let (style, base) = (self.state.config.style, self.state.config.base_url.clone());
        let Phase::Tools { batch } = &mut self.state.phase else { return };
        for e in &mut batch.calls {
            let CallState::Agent { agent, child } = &mut e.state else { continue };
            let run = &mut child.0;
            let same_root = run.state.config.style == style && run.state.config.base_url == base;
            let own = secrets.agent_keys.iter().find(|(n, _)| n == agent).map(|(_, k)| k.clone());
            if let Some(key) = own.or_else(|| same_root.then(|| secrets.api_key.clone()).flatten()) {
                run.secrets.api_key = Some(key);
            }
            if same_root {
                run.secrets.headers = secrets.headers.clone();
            }
            run.secrets.agent_keys = secrets.agent_keys.clone();
            run.sync_agent_secrets();
        }
    }

    /// After the API root moved from `old` to `new`: agents that called the
    /// same root (started or not) follow it.
    pub(crate) fn rebase_agents(&mut self, old: &str, new: &str) {
        if let Some(a) = &mut self.state.config.agents {
            rebase_specs(a, old, new);
        }
        for child in self.children_mut() {
            if child.state.config.base_url == old {
                child.state.config.base_url = new.to_string();
            }
            child.rebase_agents(old, new);
        }
    }

    /// Model calls in flight across the tree.
    fn tree_inflight(&self) -> usize {
        usize::from(self.inflight_exchange().is_some())
            + self.children().map(|(_, _, c)| c.tree_inflight()).sum::<usize>()
    }

    /// Whether a new model call may start here now (false while a child
    /// waits for a slot other runs of the tree hold).
    pub(crate) fn may_send(&self) -> bool {
        self.agent_live.send_slots != Some(0)
    }

    /// Starts the child runs of a new batch's agent calls.
    pub(crate) fn start_agents(&mut self, batch: &mut Batch) {
        let Some(agents) = self.state.config.agents.clone() else { return };
        let depth = self.state.agents.as_ref().map_or(0, |a| a.depth) + 1;
        let max_depth = self.state.agents.as_ref().map_or(agents.max_depth, |a| a.max_depth);
        for e in &mut batch.calls {
            if !matches!(e.state, CallState::Requested { .. }) {
                continue;
            }
            let Some(spec) = agents.agents.iter().find(|a| a.name == e.call.name) else { continue };
            e.state = match self.new_child(spec, e, depth, max_depth) {
                Ok(run) => CallState::Agent { agent: spec.name.clone(), child: ChildRun(Box::new(run)) },
                Err(message) => CallState::Completed { result: ToolResult::error(message) },
            };
        }
    }

    fn new_child(&mut self, spec: &AgentSpec, e: &Entry, depth: u32, max_depth: u32) -> Result<Run, String> {
        if depth > max_depth {
            return Err(format!(
                "agent {} not started: the delegation depth limit ({max_depth}) is reached",
                spec.name
            ));
        }
        if e.call.id.contains(PATH_SEPARATOR) {
            return Err(format!("agent {} not started: its call id contains {PATH_SEPARATOR:?}", spec.name));
        }
        let prompt = match e.call.input.get("prompt").and_then(|p| p.as_str()) {
            Some(p) if !p.trim().is_empty() => p.to_string(),
            _ => return Err(format!("agent {} needs {{\"prompt\": string}} with the task", spec.name)),
        };
        let mut config = spec.config.clone();
        config.seed = self.state.rng.next_u64();
        config.run_id = Some(qualify(&self.state.run_id, &e.call.id));
        let mut run = Run::new(config, spec.tools.clone(), vec![Message::user(prompt)])
            .map_err(|err| format!("agent {} not started: {err}", spec.name))?;
        run.state.agents = Some(AgentState { depth, max_depth, finished: Vec::new() });
        Ok(run)
    }

    /// Polls the children in call order until one has something for the driver.
    pub(crate) fn poll_agents(&mut self) -> ChildPoll {
        let slots = match self.agent_live.send_slots {
            Some(s) => s,
            None => self.agent_live.max_exchanges.saturating_sub(self.tree_inflight()),
        };
        let mut until: Option<Timestamp> = None;
        let mut completed = false;
        let mut suspended = false;
        let mut found = None;
        let Phase::Tools { batch } = &mut self.state.phase else {
            return ChildPoll::Idle { until: None, completed: false };
        };
        'calls: for e in &mut batch.calls {
            let CallState::Agent { agent, child } = &mut e.state else { continue };
            let run = &mut child.0;
            loop {
                run.agent_live.send_slots = Some(slots);
                match run.poll_output() {
                    Output::Event(ev) => {
                        found = Some(Output::Event(wrap(&e.call.id, ev)));
                        break 'calls;
                    }
                    Output::Send(mut req) => {
                        let outer = ExchangeId(self.state.next_exchange);
                        self.state.next_exchange += 1;
                        self.agent_live.routes.push((outer, e.call.id.clone(), req.exchange));
                        req.exchange = outer;
                        found = Some(Output::Send(req));
                        break 'calls;
                    }
                    Output::RunTools(mut tools) => {
                        for c in &mut tools.calls {
                            c.call_id = qualify(&e.call.id, &c.call_id);
                        }
                        found = Some(Output::RunTools(tools));
                        break 'calls;
                    }
                    // The tree's requests surface together, from the top.
                    Output::Suspended(_) => suspended = true,
                    Output::Wait { until: u } => {
                        until = match (until, u) {
                            (Some(a), Some(b)) => Some(a.min(b)),
                            (a, b) => a.or(b),
                        };
                        break;
                    }
                    Output::Done(outcome) => {
                        let (result, reports) = finish_child(&e.call.id, agent, run, &outcome);
                        let call_id = e.call.id.clone();
                        // The child's run ends here: its result is the call's.
                        e.state = CallState::Completed { result };
                        self.state.agents.get_or_insert_with(AgentState::default).finished.extend(reports);
                        self.agent_live.routes.retain(|(_, c, _)| *c != call_id);
                        completed = true;
                        break;
                    }
                }
            }
        }
        if suspended || completed {
            // The tree's outstanding set changed: say it again once settled.
            batch.announced = false;
        }
        match found {
            Some(o) => ChildPoll::Output(o),
            None => ChildPoll::Idle { until, completed },
        }
    }

    /// The child an input is for, when it is not this run's own: a response
    /// to an exchange a child started, or a reply or answer whose id is
    /// qualified by a delegating call's id.
    pub(crate) fn agent_target<'a>(&self, input: &Input<'a>) -> Option<Target<'a>> {
        let Phase::Tools { batch } = &self.state.phase else { return None };
        let index_of = |call: &str| {
            batch.calls.iter().position(|e| e.call.id == call && matches!(e.state, CallState::Agent { .. }))
        };
        let by_exchange = |x: ExchangeId| {
            if self.inflight_exchange() == Some(x) {
                return None;
            }
            let (_, call, inner) = self.agent_live.routes.iter().find(|(outer, _, _)| *outer == x)?;
            Some((index_of(call)?, *inner))
        };
        match input {
            Input::ResponseHead { exchange, status, headers } => by_exchange(*exchange)
                .map(|(i, x)| (i, Input::ResponseHead { exchange: x, status: *status, headers: headers.clone() })),
            Input::ResponseBody { exchange, chunk } => {
                by_exchange(*exchange).map(|(i, x)| (i, Input::ResponseBody { exchange: x, chunk }))
            }
            Input::ResponseEnd { exchange } => {
                by_exchange(*exchange).map(|(i, x)| (i, Input::ResponseEnd { exchange: x }))
            }
            Input::TransportError { exchange, kind, message } => by_exchange(*exchange)
                .map(|(i, x)| (i, Input::TransportError { exchange: x, kind: *kind, message: message.clone() })),
            Input::ToolReply { call_id, reply } => {
                if batch.calls.iter().any(|e| e.call.id == *call_id) {
                    return None;
                }
                let (head, rest) = call_id.split_once(PATH_SEPARATOR)?;
                Some((index_of(head)?, Input::ToolReply { call_id: rest.to_string(), reply: reply.clone() }))
            }
            Input::Answer(answer) => {
                if batch.outstanding().iter().any(|r| r.id == answer.id) {
                    return None;
                }
                let (head, rest) = answer.id.split_once(PATH_SEPARATOR)?;
                let mut inner = answer.clone();
                inner.id = rest.to_string();
                Some((index_of(head)?, Input::Answer(inner)))
            }
            Input::Timeout | Input::Cancel | Input::Abort { .. } => None,
        }
    }

    /// What [`Run::handle_input`] would refuse, without changing anything.
    pub(crate) fn check(&self, now: Timestamp, input: &Input<'_>) -> Result<(), InputError> {
        if now < self.state.last_now {
            return Err(InputError::TimeWentBackwards { now: now.0, last: self.state.last_now.0 });
        }
        if matches!(self.state.phase, Phase::Finished { .. }) {
            return Err(InputError::Finished);
        }
        if let Some((i, inner)) = self.agent_target(input) {
            let child = self.children_at(i);
            return child.map_or(Ok(()), |c| c.check(now, &inner)).map_err(|e| self.qualify_error(i, input, e));
        }
        self.validate(input)
    }

    fn children_at(&self, index: usize) -> Option<&Run> {
        match &self.state.phase {
            Phase::Tools { batch } => match &batch.calls.get(index)?.state {
                CallState::Agent { child, .. } => Some(&child.0),
                _ => None,
            },
            _ => None,
        }
    }

    /// A child's refusal as the parent's caller sees it: ids qualified, and
    /// a child that just finished refusing like an unknown owner.
    fn qualify_error(&self, index: usize, input: &Input<'_>, e: InputError) -> InputError {
        let call = match &self.state.phase {
            Phase::Tools { batch } => batch.calls.get(index).map(|e| e.call.id.as_str()).unwrap_or_default(),
            _ => "",
        };
        match (e, input) {
            (InputError::UnknownAnswer(id), _) => InputError::UnknownAnswer(qualify(call, &id)),
            (InputError::UnknownToolCall(id), _) => InputError::UnknownToolCall(qualify(call, &id)),
            (InputError::HostSettles(id), _) => InputError::HostSettles(qualify(call, &id)),
            (InputError::Finished, Input::Answer(a)) => InputError::UnknownAnswer(a.id.clone()),
            (InputError::Finished, Input::ToolReply { call_id, .. }) => InputError::UnknownToolCall(call_id.clone()),
            (
                InputError::UnknownExchange(_) | InputError::Finished,
                Input::ResponseHead { exchange, .. }
                | Input::ResponseBody { exchange, .. }
                | Input::ResponseEnd { exchange }
                | Input::TransportError { exchange, .. },
            ) => InputError::UnknownExchange(exchange.0),
            (other, _) => other,
        }
    }

    /// Feeds an input to the child it is for; only that child advances.
    /// [`Run::check`]ed first, so a refusal changed nothing anywhere in the tree.
    pub(crate) fn feed_agent(&mut self, now: Timestamp, index: usize, input: Input<'_>) {
        let answer = matches!(input, Input::Answer(_));
        if let Some(child) = self.child_at(index) {
            // Checked by the caller: the child takes it.
            let _ = child.handle_input(now, input);
        }
        if let (true, Phase::Tools { batch }) = (answer, &mut self.state.phase) {
            batch.announced = false;
        }
    }

    /// A timer may have fired: every child looks at its own.
    pub(crate) fn agents_timeout(&mut self, now: Timestamp) {
        for child in self.children_mut() {
            let _ = child.handle_input(now, Input::Timeout);
        }
    }

    /// The parent stops: so do its children, before they are dropped.
    pub(crate) fn cancel_agents(&mut self, now: Timestamp) {
        for child in self.children_mut() {
            let _ = child.handle_input(now, Input::Cancel);
        }
        self.agent_live.routes.clear();
    }

    /// The children's outstanding requests, ids qualified, in call order.
    pub(crate) fn agents_outstanding(&self) -> Vec<Request> {
        let mut out = Vec::new();
        for (call_id, _, child) in self.children() {
            for mut r in child.outstanding() {
                r.id = qualify(call_id, &r.id);
                out.push(r);
            }
        }
        out
    }

    pub(crate) fn own_outstanding(&self) -> Vec<Request> {
        match &self.state.phase {
            Phase::Tools { batch } => batch.outstanding(),
            Phase::Starting { requests, .. } => requests.clone(),
            _ => Vec::new(),
        }
    }
}

/// Restores the children of a restored batch: each one's request in flight
/// is sent again and its running tools come back in doubt.
pub(crate) fn after_restore(batch: &mut Batch) {
    for e in &mut batch.calls {
        if let CallState::Agent { child, .. } = &mut e.state {
            child.0.after_restore();
        }
    }
}

/// Whether an agent entry lets its batch be called settled: its child can do
/// nothing more without an answer.
pub(crate) fn child_blocked(child: &ChildRun) -> bool {
    child.0.status() == Status::Pending
}

/// The state invariants of every child, checked like the top's.
pub(crate) fn check_children(state: &RunState) -> Result<(), crate::error::StateError> {
    if let Phase::Tools { batch } = &state.phase {
        for e in &batch.calls {
            if let CallState::Agent { child, .. } = &e.state {
                crate::state::check(&child.0.state)?;
            }
        }
    }
    Ok(())
}

fn rebase_specs(agents: &mut Agents, old: &str, new: &str) {
    for spec in &mut agents.agents {
        if spec.config.base_url == old {
            spec.config.base_url = new.to_string();
        }
        if let Some(a) = &mut spec.config.agents {
            rebase_specs(a, old, new);
        }
    }
}

/// The delegating call's result for a child that ended, and the reports it leaves.
fn finish_child(call_id: &str, name: &str, child: &Run, outcome: &Outcome) -> (ToolResult, Vec<AgentReport>) {
    let turns = child.turns();
    let result = match outcome {
        // A typed child answers with its validated value, whatever carried
        // it (tool arguments, fenced or bare text): its text alone may be
        // empty (tool mode) or hold more than the value (prompted mode).
        Outcome::Done => {
            ToolResult::ok(child.output().map_or_else(|| child.final_text(), serde_json::Value::to_string))
        }
        Outcome::Incomplete { limit } => {
            let text = child.final_text();
            let partial = if text.is_empty() { String::new() } else { format!("; its last text: {text}") };
            ToolResult::error(format!(
                "agent {name} did not finish: it stopped at its {limit} limit after {turns} turns{partial}"
            ))
        }
        Outcome::Failed { error } => ToolResult::error(format!("agent {name} failed: {error}")),
    };
    let mut reports = Vec::new();
    for mut r in child.agent_reports() {
        r.path = qualify(call_id, &r.path);
        reports.push(r);
    }
    reports.push(AgentReport {
        path: call_id.to_string(),
        name: name.to_string(),
        turns,
        usage: child.usage(),
        status: status_word(child).to_string(),
    });
    (result, reports)
}
