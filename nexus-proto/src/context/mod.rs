//! The context budget: no request is sent that would overflow the model's
//! context window; the run compacts first, as a recorded step.
//!
//! Before every model request the machine estimates its input tokens (the
//! last reported usage, scaled to the request's size, plus a local estimate
//! of what was added since) and compares them with the upstream's window
//! (the config's override, a window learned from the provider's "too long"
//! error, or the built-in table). Above `compactAt` of the window it
//! compacts: an ordinary model request asks for a summary of the oldest
//! turns, the summary and what it replaces are recorded in the state, and
//! from then on requests carry the *model view* — the summary, then the kept
//! recent turns. The canonical transcript is never changed. Cuts fall before
//! an assistant turn only, so a call always stays with its results, and the
//! turn being answered is always kept. A view that cannot be brought under
//! the window ends the run with [`RunError::ContextExhausted`] naming the
//! biggest items, never a provider's 400.
//!
//! Tool results longer than their cap are cut in the view (head and tail
//! kept, a marker says how much was left out); the full result stays in the
//! transcript and the ledger.

mod count;
mod native;
mod view;
mod window;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use count::TokenCount;
pub(crate) use count::{accept as accept_count, counting};
pub use native::{ClearToolUses, ProviderCompaction, ResponsesCompaction, ANTHROPIC_CONTEXT_BETA};
pub use view::{cap_text, SUMMARY_PREFIX};
pub use window::builtin_window;

use crate::error::{ProviderError, RunError};
use crate::event::StreamEvent;
use crate::failover::params_for;
use crate::message::{Message, Role, Usage};
use crate::provider::{ModelCall, Style, TurnResponse};
use crate::run::{Run, RunState};

/// The instruction a compaction request carries when the config gives none.
pub const DEFAULT_COMPACTION_INSTRUCTION: &str = "You are compacting a long tool-using conversation so that it can \
continue within the model's context window. Summarize the conversation below for the assistant that will continue \
it: the user's goal and instructions, decisions made, facts learned from tool results (names, paths, values, \
errors), the work done and what remains. The summary replaces these messages; the most recent turns follow it \
verbatim. Answer with the summary only.";

/// Output tokens assumed for the reserve when the config sets no `max_tokens`.
pub const DEFAULT_OUTPUT_RESERVE: u64 = 4096;

fn default_compact_at() -> f64 {
    0.8
}

fn default_low_water() -> f64 {
    0.5
}

fn default_margin() -> u64 {
    1024
}

/// How a run keeps within its context window ([`RunConfig::context`](crate::RunConfig::context)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextPolicy {
    /// Window overrides by upstream index (0 the primary), in tokens. An
    /// upstream without one uses a learned window, then the built-in table.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub windows: BTreeMap<usize, u64>,
    /// Compact when the next request's estimate passes this fraction of the window.
    #[serde(default = "default_compact_at")]
    pub compact_at: f64,
    /// Compact down to this fraction of the window (the low-water mark): large
    /// steps keep the cached prefix between compactions.
    #[serde(default = "default_low_water")]
    pub low_water: f64,
    /// Tokens kept free beyond the output cap (`max_tokens`, else
    /// [`DEFAULT_OUTPUT_RESERVE`]): no request is sent over `window − reserve`.
    #[serde(default = "default_margin")]
    pub margin_tokens: u64,
    /// Cap in bytes on a tool result in the model view (none: uncapped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_result_bytes: Option<usize>,
    /// Caps by tool name, over the default one.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_result_caps: BTreeMap<String, usize>,
    /// The compaction request's instruction (none: [`DEFAULT_COMPACTION_INSTRUCTION`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
    /// Anthropic context editing, sent to Anthropic upstreams (opt-in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub anthropic_clear_tool_uses: Option<ClearToolUses>,
    /// OpenAI Responses server-side compaction, asked of Responses upstreams (opt-in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses_compaction: Option<ResponsesCompaction>,
    /// Ask the upstream's token counter (Anthropic, Responses, Gemini) for
    /// a request whose estimate is within this fraction of the trigger, and
    /// go by its count (none: the estimate decides).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count_margin: Option<f64>,
}

impl Default for ContextPolicy {
    fn default() -> Self {
        ContextPolicy {
            windows: BTreeMap::new(),
            compact_at: default_compact_at(),
            low_water: default_low_water(),
            margin_tokens: default_margin(),
            max_tool_result_bytes: None,
            tool_result_caps: BTreeMap::new(),
            instruction: None,
            anthropic_clear_tool_uses: None,
            responses_compaction: None,
            count_margin: None,
        }
    }
}

impl ContextPolicy {
    /// The cap on results of tool `name`.
    pub fn cap_for(&self, name: &str) -> Option<usize> {
        self.tool_result_caps.get(name).copied().or(self.max_tool_result_bytes)
    }

    /// Refuses fractions outside (0, 1] and a low-water mark above the trigger.
    pub fn validate(&self) -> Result<(), String> {
        let ok = |f: f64| f > 0.0 && f <= 1.0;
        if !ok(self.compact_at) || !ok(self.low_water) {
            return Err("compactAt and lowWater must be in (0, 1]".into());
        }
        if self.low_water > self.compact_at {
            return Err("lowWater must not be above compactAt".into());
        }
        if self.count_margin.is_some_and(|m| !(m > 0.0 && m <= 1.0)) {
            return Err("countMargin must be in (0, 1]".into());
        }
        if self.cap_for("").is_some_and(|c| c < 64) || self.tool_result_caps.values().any(|c| *c < 64) {
            return Err("a tool result cap must be at least 64 bytes".into());
        }
        Ok(())
    }
}

/// One compaction of this run, as recorded in the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Compaction {
    /// The 1-based turn the compaction came before.
    pub turn: u32,
    /// Transcript index of the first kept message: everything before it is
    /// replaced in the view by [`summary`](Self::summary).
    pub upto: usize,
    /// The summary the model wrote (it covers the previous summary too).
    pub summary: String,
    /// The estimate of the request that set it off.
    pub tokens_before: u64,
    /// The estimate of the view right after it.
    pub tokens_after: u64,
    /// Assistant turns it replaced (besides the previous summary).
    pub turns_replaced: u32,
    /// The compaction request's own usage (also counted in the run's).
    pub usage: Usage,
    /// The upstream that wrote the summary.
    pub upstream: usize,
}

/// A message that weighs much in the view, named by a [`RunError::ContextExhausted`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextItem {
    /// Index in the transcript (`None`: the summary of a compaction).
    pub index: Option<usize>,
    /// What it is: `user text`, `assistant turn`, `tool result read_file (call_1)`, `summary`.
    pub what: String,
    /// Estimated tokens.
    pub tokens: u64,
}

/// The context budget's part of the run state (format 3 on).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ContextState {
    /// Windows learned from a provider's "too long" refusal, by upstream.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub learned: BTreeMap<usize, u64>,
    /// Every compaction, in order; the last one shapes the view.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compactions: Vec<Compaction>,
    /// Tokens per byte as last reported: (upstream, body bytes, prompt tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<(usize, u64, u64)>,
    /// The request in flight: (upstream, body bytes, estimate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent: Option<(usize, u64, u64)>,
    /// A compaction whose request is being made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacting: Option<Job>,
    /// Compactions a provider made on its side (OpenAI Responses), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_compactions: Vec<ProviderCompaction>,
    /// A token count asked or answered for the next request's body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<count::Pending>,
    /// Every count an upstream made for the run, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub token_counts: Vec<TokenCount>,
}

/// A compaction under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Job {
    pub from: usize,
    pub upto: usize,
    pub tokens_before: u64,
    pub turns_replaced: u32,
    /// Bytes of the view outside its messages (system prompt, tools, framing).
    pub overhead: u64,
}

/// The next request's body, built by [`prepare`].
pub(crate) struct Prepared {
    pub body: Vec<u8>,
    /// A compaction request (never streamed, shows no deltas, is not a turn).
    pub compaction: bool,
    pub headers: Vec<(String, String)>,
    /// A token count's URL (the request goes there instead of the model's
    /// endpoint; never streamed, not a turn).
    pub url: Option<String>,
}

impl Prepared {
    /// A request of the budget's own (a compaction or a count), not a turn.
    pub(crate) fn side(&self) -> bool {
        self.compaction || self.url.is_some()
    }
}

/// Limits for one upstream, in tokens.
struct Budget {
    window: u64,
    /// `window − reserve`: nothing is sent above it.
    limit: u64,
    trigger: u64,
    low_water: u64,
}

fn budget(state: &RunState, policy: &ContextPolicy, upstream: usize, model: &str) -> Option<Budget> {
    let learned = state.context.as_ref().and_then(|c| c.learned.get(&upstream).copied());
    let window = policy.windows.get(&upstream).copied().or(learned).or_else(|| builtin_window(model))?;
    let window = learned.map_or(window, |l| l.min(window));
    let out = state.config.max_tokens.map_or(DEFAULT_OUTPUT_RESERVE, u64::from);
    let limit = window.saturating_sub(out + policy.margin_tokens);
    let frac = |f: f64| (window as f64 * f) as u64;
    let trigger = frac(policy.compact_at).min(limit);
    Some(Budget { window, limit, trigger, low_water: frac(policy.low_water).min(trigger) })
}

/// Estimated input tokens of a body of `bytes` bytes to `upstream`: the
/// last prompt tokens this upstream reported plus the growth since, at the
/// tokens-per-byte that report showed (`p + (bytes − b)·p/b`), and never less
/// than the local estimate of a token per four bytes. Erring high only
/// compacts a little early; erring low would send an over-long request.
fn estimate(ctx: Option<&ContextState>, upstream: usize, bytes: u64) -> u64 {
    let local = bytes.div_ceil(4);
    match ctx.and_then(|c| c.calibration).filter(|c| c.0 == upstream && c.1 > 0) {
        Some((_, b, p)) => {
            let scaled = u128::from(bytes) * u128::from(p) / u128::from(b);
            local.max(u64::try_from(scaled).unwrap_or(u64::MAX))
        }
        None => local,
    }
}

/// Bytes of text that [`estimate`] puts at no more than `tokens`.
fn bytes_for(ctx: Option<&ContextState>, upstream: usize, tokens: u64) -> u64 {
    let local = tokens.saturating_mul(4);
    match ctx.and_then(|c| c.calibration).filter(|c| c.0 == upstream && c.2 > 0) {
        Some((_, b, p)) => {
            local.min(u64::try_from(u128::from(tokens) * u128::from(b) / u128::from(p)).unwrap_or(u64::MAX))
        }
        None => local,
    }
}

/// The summary in force and where the kept part starts.
fn current_cut(state: &RunState) -> Option<(&str, usize)> {
    let c = state.context.as_ref()?.compactions.last()?;
    Some((c.summary.as_str(), c.upto))
}

fn encode(
    state: &RunState,
    style: Style,
    upstream: usize,
    system: Option<&str>,
    messages: &[Message],
    extra: &Map<String, Value>,
    shape: Option<&crate::output::Shape<'_>>,
) -> Vec<u8> {
    // A compaction request has no output shape: the run's own requests
    // always pass theirs (§16).
    let compaction = shape.is_none();
    let cfg = &state.config;
    let (_, _, model) = cfg.parts_of(upstream);
    let no_params = Map::new();
    let base = params_for(cfg.style, style, &cfg.params, &no_params);
    let merged;
    let params = if extra.is_empty() {
        base
    } else {
        let mut m = base.clone();
        m.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        merged = m;
        &merged
    };
    let tool_set = shape.and_then(|s| s.tools).unwrap_or(&state.tools);
    let call = ModelCall {
        model,
        system: shape.and_then(|s| s.system).or(system),
        messages,
        tools: if compaction { &[] } else { tool_set },
        max_tokens: cfg.max_tokens,
        stream: cfg.stream && !compaction,
        params,
        output: shape.and_then(|s| s.format),
    };
    let mut body = Vec::with_capacity(1024);
    let tools = if compaction { None } else { tool_set.encoded(style) };
    style.write_body_with(&call, tools, &mut body);
    body
}

/// Builds the next request's body: the transcript as it is when the run has
/// no context policy; otherwise the model view, after compacting first when
/// the estimate is over the trigger (then the body is the compaction
/// request). `Err` when nothing can bring the view under the limit.
pub(crate) fn prepare(state: &mut RunState, shape: &crate::output::Shape<'_>) -> Result<Prepared, RunError> {
    let upstream = state.upstream;
    let style = state.config.parts_of(upstream).0;
    let Some(policy) = state.config.context.clone() else {
        crate::gate::check(style, &state.transcript).map_err(RunError::Gate)?;
        let body =
            encode(state, style, upstream, state.config.system.as_deref(), &state.transcript, &Map::new(), Some(shape));
        return Ok(Prepared { body, compaction: false, headers: Vec::new(), url: None });
    };
    let model = state.config.parts_of(upstream).2.to_string();
    let (extra, headers) = native::options(&policy, style);
    loop {
        let budget = budget(state, &policy, upstream, &model);
        if let Some(job) = state.context.as_ref().and_then(|c| c.compacting.clone()) {
            let body = compaction_body(state, &policy, style, upstream, &job, budget.as_ref());
            let est = estimate(state.context.as_ref(), upstream, body.len() as u64);
            state.context.get_or_insert_with(Default::default).sent = Some((upstream, body.len() as u64, est));
            return Ok(Prepared { body, compaction: true, headers: Vec::new(), url: None });
        }
        let system = state.config.system.as_deref();
        let view = view::build(&state.transcript, current_cut(state), Some(&policy));
        crate::gate::check(style, &view).map_err(RunError::Gate)?;
        let body = encode(state, style, upstream, system, &view, &extra, Some(shape));
        let est = estimate(state.context.as_ref(), upstream, body.len() as u64);
        drop(view);
        let est = match count::settle(state, &policy, budget.as_ref(), style, &body, est, &headers) {
            count::Counted::Ask(request) => return Ok(request),
            count::Counted::Tokens(n) => n,
        };
        // Over the trigger: a compaction, if a cut is left; none and over
        // the limit, nothing can be sent.
        let planned = match &budget {
            Some(budget) if est > budget.trigger => {
                let view = view::build(&state.transcript, current_cut(state), Some(&policy));
                let overhead = (body.len() as u64).saturating_sub(view.iter().map(|m| view::weight(m, &policy)).sum());
                let planned = plan(state, &policy, upstream, budget, est, overhead);
                if planned.is_none() && est > budget.limit {
                    return Err(exhausted(state, &policy, upstream, &view, est, budget.limit));
                }
                planned
            }
            _ => None,
        };
        let ctx = state.context.get_or_insert_with(Default::default);
        match planned {
            Some(job) => ctx.compacting = Some(job),
            None => {
                ctx.sent = Some((upstream, body.len() as u64, est));
                return Ok(Prepared { body, compaction: false, headers, url: None });
            }
        }
    }
}

/// Chooses the cut of a compaction: the first that brings the view down to
/// the low-water mark, else the last one possible. `None` when no cut is
/// left (the view is the summary and the turn being answered).
fn plan(
    state: &RunState,
    policy: &ContextPolicy,
    upstream: usize,
    budget: &Budget,
    est: u64,
    overhead: u64,
) -> Option<Job> {
    let from = current_cut(state).map_or(0, |(_, upto)| upto);
    let points = view::cut_points(&state.transcript, from);
    let last = *points.last()?;
    let ctx = state.context.as_ref();
    let summary_bytes = bytes_for(ctx, upstream, state.config.max_tokens.map_or(1024, u64::from).min(4096));
    let weights: Vec<u64> = state.transcript.iter().map(|m| view::weight(m, policy)).collect();
    let kept_from = |cut: usize| weights.get(cut..).map_or(0, |w| w.iter().sum::<u64>());
    let target = bytes_for(ctx, upstream, budget.low_water);
    let upto = points.iter().copied().find(|&cut| overhead + summary_bytes + kept_from(cut) <= target).unwrap_or(last);
    let turns_replaced =
        state.transcript.get(from..upto).map_or(0, |p| p.iter().filter(|m| m.role == Role::Assistant).count());
    Some(Job {
        from,
        upto,
        tokens_before: est,
        turns_replaced: u32::try_from(turns_replaced).unwrap_or(u32::MAX),
        overhead,
    })
}

/// The compaction request: the instruction as its system prompt and one
/// user message holding the previous summary and the replaced messages as
/// text, cut to fit the limit.
fn compaction_body(
    state: &RunState,
    policy: &ContextPolicy,
    style: Style,
    upstream: usize,
    job: &Job,
    budget: Option<&Budget>,
) -> Vec<u8> {
    let instruction = policy.instruction.as_deref().unwrap_or(DEFAULT_COMPACTION_INSTRUCTION);
    let room = budget.map_or(u64::MAX, |b| bytes_for(state.context.as_ref(), upstream, b.limit));
    let room = usize::try_from(room.saturating_sub(instruction.len() as u64 + 1024)).unwrap_or(usize::MAX).max(256);
    let previous = state.context.as_ref().and_then(|c| c.compactions.last()).map(|c| c.summary.as_str());
    let part = state.transcript.get(job.from..job.upto).unwrap_or_default();
    let text = view::render(previous, part, policy, room);
    encode(state, style, upstream, Some(instruction), &[Message::user(text)], &Map::new(), None)
}

fn exhausted(
    state: &RunState,
    policy: &ContextPolicy,
    upstream: usize,
    view: &[Message],
    est: u64,
    limit: u64,
) -> RunError {
    let offset = current_cut(state).map(|(_, upto)| upto);
    let ctx = state.context.as_ref();
    let mut items: Vec<ContextItem> = view
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let index = match offset {
                Some(_) if i == 0 => None,
                Some(upto) => Some(upto + i - 1),
                None => Some(i),
            };
            let what = match (index, m.tool_results().next(), m.role) {
                (None, _, _) => "summary".to_string(),
                (_, Some(r), _) => format!("tool result {} ({})", r.name, r.call_id),
                (_, None, Role::Assistant) => "assistant turn".to_string(),
                (_, None, Role::User) => "user text".to_string(),
            };
            ContextItem { index, what, tokens: estimate(ctx, upstream, view::weight(m, policy)) }
        })
        .collect();
    items.sort_by(|a, b| b.tokens.cmp(&a.tokens).then(a.index.cmp(&b.index)));
    items.truncate(3);
    RunError::ContextExhausted { estimate: est, limit, biggest: items }
}

/// Whether the request in flight (or about to be rebuilt) is a compaction's.
pub(crate) fn compacting(state: &RunState) -> bool {
    state.context.as_ref().is_some_and(|c| c.compacting.is_some())
}

/// A model turn was accepted: its reported prompt tokens calibrate the estimate.
pub(crate) fn on_turn(state: &mut RunState, turn: &TurnResponse) {
    if state.config.context.is_none() {
        return;
    }
    native::on_turn(state, turn);
    let upstream = state.upstream;
    let Some(ctx) = state.context.as_mut() else { return };
    if let Some((u, bytes, _)) = ctx.sent.take() {
        if turn.usage_reported && turn.usage.prompt_tokens > 0 && u == upstream {
            ctx.calibration = Some((u, bytes, turn.usage.prompt_tokens));
        }
    }
}

/// The compaction request was answered: record the summary and what it
/// replaces. The returned event goes to the host.
pub(crate) fn accept_summary(state: &mut RunState, mut turn: TurnResponse) -> StreamEvent {
    let upstream = state.upstream;
    if turn.usage.total_tokens == 0 {
        turn.usage.total_tokens = turn.usage.prompt_tokens + turn.usage.completion_tokens;
    }
    state.usage.add(turn.usage);
    let policy = state.config.context.clone().unwrap_or_default();
    let ctx = state.context.get_or_insert_with(Default::default);
    ctx.sent = None;
    let Some(job) = ctx.compacting.take() else {
        return StreamEvent::Usage { usage: turn.usage };
    };
    let mut summary = turn.text();
    if summary.trim().is_empty() {
        summary = "(the summary came back empty)".to_string();
    }
    let kept: u64 = state.transcript.get(job.upto..).map_or(0, |k| k.iter().map(|m| view::weight(m, &policy)).sum());
    let head = view::weight(&view::summary_message(&summary), &policy);
    let tokens_after = estimate(state.context.as_ref(), upstream, job.overhead + head + kept);
    let record = Compaction {
        turn: state.turns + 1,
        upto: job.upto,
        summary,
        tokens_before: job.tokens_before,
        tokens_after,
        turns_replaced: job.turns_replaced,
        usage: turn.usage,
        upstream,
    };
    let event = StreamEvent::Compaction {
        turn: record.turn,
        tokens_before: record.tokens_before,
        tokens_after: record.tokens_after,
        turns_replaced: record.turns_replaced,
        usage: record.usage,
    };
    state.context.get_or_insert_with(Default::default).compactions.push(record);
    event
}

/// A request was refused as too long. Learns the window (and the true
/// size) it names and says whether the run should build the request again
/// (then the budget compacts it) instead of failing: only when something
/// was learned that makes the next request smaller.
pub(crate) fn on_too_long(state: &mut RunState, err: &ProviderError) -> bool {
    let upstream = state.upstream;
    if state.config.context.is_none() {
        return false;
    }
    let Some(info) = window::too_long(err) else { return false };
    let ctx = state.context.get_or_insert_with(Default::default);
    let Some((u, bytes, est)) = ctx.sent.take() else { return false };
    if u != upstream {
        return false;
    }
    let mut learned_something = false;
    if let Some(n) = info.prompt.filter(|n| *n > est) {
        ctx.calibration = Some((u, bytes, n));
        learned_something = true;
    }
    // Without a window in the message, the refused size bounds it from above.
    let window = info.window.unwrap_or_else(|| info.prompt.unwrap_or(est).saturating_sub(1));
    if ctx.learned.get(&upstream).is_none_or(|w| window < *w) {
        ctx.learned.insert(upstream, window);
        learned_something = true;
    }
    learned_something
}

/// Invariants of a restored context state: every cut falls before an
/// assistant message of the transcript, in order.
pub(crate) fn check_state(ctx: &ContextState, transcript: &[Message]) -> Result<(), String> {
    let is_cut = |i: usize| transcript.get(i).is_some_and(|m| m.role == Role::Assistant);
    let mut last = 0;
    for c in &ctx.compactions {
        if c.upto <= last || !is_cut(c.upto) {
            return Err(format!("compaction before turn {} cuts the transcript at {}", c.turn, c.upto));
        }
        last = c.upto;
    }
    if let Some(job) = &ctx.compacting {
        if job.from != ctx.compactions.last().map_or(0, |c| c.upto) || job.upto <= job.from || !is_cut(job.upto) {
            return Err("the compaction under way does not follow the last one".into());
        }
    }
    Ok(())
}

impl Run {
    /// The compactions of this run, in order (empty without a context policy).
    pub fn compactions(&self) -> &[Compaction] {
        self.state.context.as_ref().map_or(&[], |c| &c.compactions)
    }

    /// The token counts upstreams made for this run's requests, in order
    /// (`ContextPolicy::count_margin`).
    pub fn token_counts(&self) -> &[TokenCount] {
        self.state.context.as_ref().map_or(&[], |c| &c.token_counts)
    }

    /// The compactions providers made on their side (OpenAI Responses
    /// server-side compaction), in order.
    pub fn provider_compactions(&self) -> &[ProviderCompaction] {
        self.state.context.as_ref().map_or(&[], |c| &c.provider_compactions)
    }

    /// The context window the budget uses for upstream `index` now, in
    /// tokens: the config's override, a learned one, or the built-in table's.
    pub fn context_window(&self, index: usize) -> Option<u64> {
        let policy = self.state.config.context.as_ref()?;
        let model = self.state.config.upstream_parts(index)?.2;
        budget(&self.state, policy, index, model).map(|b| b.window)
    }

    /// The messages the next model request carries: the transcript, or once
    /// compacted, the summary followed by the kept turns; tool results over
    /// their cap are cut. The transcript itself is never changed.
    pub fn model_view(&self) -> Vec<Message> {
        let policy = self.state.config.context.as_ref();
        let cut = current_cut(&self.state);
        view::build(&self.state.transcript, cut, policy).into_owned()
    }
}
