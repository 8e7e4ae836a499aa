//! The output rule's transitions, called from the run at four points: before
//! a request is built ([`prepare`]), when a turn ends without tool calls
//! ([`on_answer`]), when the model calls the output tool ([`on_output_call`])
//! and when a turn's tool results are complete ([`commit`]); plus the 400
//! that refuses the native field ([`native_refused`]) and the partial output
//! of a stream ([`OutputRule::observe`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::extract::{extract_json, partial_source, Extracted};
use super::{decide, lower, OutputError, OutputSpec, SchemaCheck, Strategy, StrategyRecord};
use crate::error::ProviderError;
use crate::event::StreamEvent;
use crate::message::{Block, Message, Role, ToolCall};
use crate::provider::{Stop, StopReason, Style};
use crate::run::{Outcome, RunState};
use crate::suspend::ToolResult;
use crate::tool::{ToolDecl, ToolSet};

/// The output rule's part of the run state (format 3 on).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OutputState {
    /// The strategy of each upstream used, in the order decided; the last
    /// record of an upstream is the one in force.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strategies: Vec<StrategyRecord>,
    /// Answers that failed validation so far.
    #[serde(default, skip_serializing_if = "crate::state::is_zero")]
    pub retries_used: u32,
    /// What the output tool settled, committed once every call of its turn
    /// is answered (never while a sibling is pending).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<Settled>,
    /// The validated final value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

/// An output tool call's verdict, waiting for its turn's other calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum Settled {
    /// A valid value.
    Value { value: Value },
    /// The run fails once the turn is complete.
    Failed { error: OutputError },
}

impl OutputState {
    /// The strategy in force on `upstream`, if one was decided.
    pub(crate) fn strategy_of(&self, upstream: usize) -> Option<Strategy> {
        self.strategies.iter().rev().find(|r| r.upstream == upstream).map(|r| r.strategy)
    }
}

/// The wire form of the native field for one style (see [`crate::ModelCall::output`]).
#[derive(Debug, Clone, PartialEq)]
pub struct OutputFormat {
    /// The output's name (OpenAI's `name`).
    pub name: String,
    /// Its description, when the spec has one (OpenAI's `description`).
    pub description: Option<String>,
    /// The schema lowered for the style ([`lower::for_style`]).
    pub schema: Value,
}

/// What the stream's partial output is read from.
#[derive(Debug, Clone, Default, PartialEq)]
enum Watch {
    #[default]
    Nothing,
    /// The answer text (native and prompted).
    Text,
    /// The arguments of the output tool's call (its id once it started).
    Call { name: String, id: Option<String> },
}

/// The rule's transient side: the compiled validator and what each request
/// is shaped with, made from the state when needed (never serialized).
#[derive(Default, Clone)]
pub(crate) struct OutputRule {
    check: Option<SchemaCheck>,
    /// The native field, lowered for a style.
    format: Option<(Style, std::sync::Arc<OutputFormat>)>,
    /// The user's tools plus the output tool (tool mode).
    tools: Option<ToolSet>,
    /// The system prompt with the schema (prompted mode).
    system: Option<String>,
    /// The strategy of the request being built.
    strategy: Option<Strategy>,
    watch: Watch,
    partial: String,
    last_partial: Option<Value>,
}

impl std::fmt::Debug for OutputRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutputRule").field("strategy", &self.strategy).finish_non_exhaustive()
    }
}

/// How a request is shaped for the output (borrowed from [`OutputRule`]).
pub(crate) struct Shape<'a> {
    pub format: Option<&'a OutputFormat>,
    pub tools: Option<&'a ToolSet>,
    pub system: Option<&'a str>,
}

impl OutputRule {
    /// The shape [`prepare`] made for the request being built.
    pub(crate) fn shape(&self) -> Shape<'_> {
        match self.strategy {
            Some(Strategy::Native) => {
                Shape { format: self.format.as_ref().map(|(_, f)| &**f), tools: None, system: None }
            }
            Some(Strategy::Tool) => Shape { format: None, tools: self.tools.as_ref(), system: None },
            Some(Strategy::Prompted) => Shape { format: None, tools: None, system: self.system.as_deref() },
            None => Shape { format: None, tools: None, system: None },
        }
    }

    /// A rule holding the validator compiled when the run's config was validated.
    pub(crate) fn with_check(check: Option<SchemaCheck>) -> OutputRule {
        OutputRule { check, ..OutputRule::default() }
    }

    fn check(&mut self, spec: &OutputSpec) -> &SchemaCheck {
        // The spec was checked when the run was made or restored; compiled
        // here only for a child run read back from its parent's ledger.
        self.check.get_or_insert_with(|| {
            SchemaCheck::compile(&spec.schema)
                .unwrap_or_else(|_| SchemaCheck::compile(&Value::Bool(true)).expect("true"))
        })
    }

    /// Reads the stream deltas of one chunk; the partial output when it grew.
    /// Partial values are never validated.
    pub(crate) fn observe(&mut self, deltas: &[StreamEvent]) -> Option<StreamEvent> {
        if self.watch == Watch::Nothing {
            return None;
        }
        let before = self.partial.len();
        for d in deltas {
            match (d, &mut self.watch) {
                (StreamEvent::TextDelta { text }, Watch::Text) => self.partial.push_str(text),
                (StreamEvent::ToolCallStarted { id, name }, Watch::Call { name: want, id: seen })
                    if name == want && seen.is_none() =>
                {
                    *seen = Some(id.clone())
                }
                (StreamEvent::ToolCallDelta { id, arguments }, Watch::Call { id: Some(seen), .. }) if id == seen => {
                    self.partial.push_str(arguments)
                }
                _ => {}
            }
        }
        if self.partial.len() == before {
            return None;
        }
        let value = crate::provider::parse_partial_json(partial_source(&self.partial)?)?;
        if self.last_partial.as_ref() == Some(&value) {
            return None;
        }
        self.last_partial = Some(value.clone());
        Some(StreamEvent::OutputPartial { value })
    }
}

/// Before a request is built: the current upstream's strategy (decided and
/// recorded when it has none yet) and the request's shape made ready in
/// `rule`. `None` when the run has no output spec.
pub(crate) fn prepare(
    state: &mut RunState,
    rule: &mut OutputRule,
    events: &mut std::collections::VecDeque<StreamEvent>,
) {
    rule.strategy = None;
    rule.watch = Watch::Nothing;
    rule.partial.clear();
    rule.last_partial = None;
    let (Some(spec), Some(out)) = (state.config.output.as_ref(), state.output.as_mut()) else { return };
    let upstream = state.upstream;
    let (style, _, model) = state.config.parts_of(upstream);
    let strategy = match out.strategy_of(upstream) {
        Some(s) => s,
        None => {
            let (strategy, reason) = decide(spec, style, model);
            let record = StrategyRecord { upstream, strategy, turn: state.turns + 1, reason: reason.to_string() };
            events.push_back(StreamEvent::OutputStrategy { upstream, strategy, reason: record.reason.clone() });
            out.strategies.push(record);
            strategy
        }
    };
    rule.strategy = Some(strategy);
    match strategy {
        Strategy::Native => {
            if rule.format.as_ref().is_none_or(|(s, _)| *s != style) {
                rule.format = Some((style, spec.format_for(style)));
            }
            rule.watch = Watch::Text;
        }
        Strategy::Tool => {
            let stale = rule.tools.as_ref().is_none_or(|t| t.len() != state.tools.len() + 1);
            if stale {
                let mut all = state.tools.to_vec();
                all.push(output_tool(spec));
                rule.tools = Some(all.into());
            }
            rule.watch = Watch::Call { name: spec.name.clone(), id: None };
        }
        Strategy::Prompted => {
            if rule.system.is_none() {
                rule.system = Some(prompted_system(state.config.system.as_deref(), spec));
            }
            rule.watch = Watch::Text;
        }
    }
}

/// The synthetic output tool: the output schema as its arguments.
fn output_tool(spec: &OutputSpec) -> ToolDecl {
    let description = spec.description.clone().unwrap_or_else(|| {
        "Give the final answer: call this once, when the task is done, with the answer as the arguments.".into()
    });
    ToolDecl::new(&spec.name, description, spec.schema.clone())
}

fn prompted_system(system: Option<&str>, spec: &OutputSpec) -> String {
    let mut s = String::new();
    if let Some(system) = system.filter(|s| !s.is_empty()) {
        s.push_str(system);
        s.push_str("\n\n");
    }
    s.push_str("When the task is done, give the final answer as one JSON value that matches this JSON Schema");
    if let Some(d) = &spec.description {
        s.push_str(" (");
        s.push_str(d);
        s.push(')');
    }
    s.push_str(", in a ```json fenced block, and nothing else:\n");
    s.push_str(&spec.schema.to_string());
    s
}

/// What a turn without tool calls leads to.
pub(crate) enum Next {
    /// The run ends so.
    Finish(Outcome),
    /// A retry message was added: the next model call follows.
    Retry,
}

/// A turn ended without tool calls (`answered`: it had content, now the
/// transcript's last message). Without an output spec the run is done; with
/// one the answer is taken, validated, and committed, retried or failed.
pub(crate) fn on_answer(state: &mut RunState, rule: &mut OutputRule, stop: &Stop, answered: bool) -> Next {
    let (Some(spec), Some(out)) = (state.config.output.as_ref(), state.output.as_mut()) else {
        return Next::Finish(Outcome::Done);
    };
    let last = state.transcript.last().filter(|m| answered && m.role == Role::Assistant);
    let (text, refusal) = last.map(answer_text).unwrap_or_default();
    if let Some(message) = refusal.or_else(|| refused_by_stop(stop)) {
        return fail(OutputError::Refused { message });
    }
    let strategy = out.strategy_of(state.upstream).unwrap_or(Strategy::Native);
    let style = state.config.parts_of(state.upstream).0;
    let errors = if strategy == Strategy::Tool {
        vec![format!("no call of the `{}` tool: plain text is not the final answer here", spec.name)]
    } else {
        match extract_json(&text) {
            Extracted::Value(mut value) => {
                if strategy == Strategy::Native && matches!(style, Style::OpenAi | Style::OpenAiResponses) {
                    lower::undo_nullable(&mut value, &spec.schema);
                }
                let errors = rule.check(spec).errors(&value);
                if errors.is_empty() {
                    out.value = Some(value);
                    return Next::Finish(Outcome::Done);
                }
                errors
            }
            Extracted::Missing(_) if stop.reason == StopReason::MaxTokens => {
                return fail(OutputError::Truncated { raw: text });
            }
            Extracted::Missing(why) => vec![why],
        }
    };
    if out.retries_used >= spec.retries {
        return fail(OutputError::Invalid { attempts: out.retries_used + 1, raw: text, errors });
    }
    out.retries_used += 1;
    let ask = match strategy {
        Strategy::Tool => format!(
            "Plain text is not accepted as the final answer. Call the `{}` tool with the answer as its arguments.",
            spec.name
        ),
        _ => format!(
            "The answer did not match the required JSON Schema: {}. Answer again with only the corrected JSON value.",
            errors.join("; ")
        ),
    };
    state.transcript.push(Message::user(ask));
    Next::Retry
}

fn fail(error: OutputError) -> Next {
    Next::Finish(Outcome::Failed { error: crate::error::RunError::Output(error) })
}

/// The answer's text (refusal parts left out) and its refusal, if any.
fn answer_text(message: &Message) -> (String, Option<String>) {
    let (mut text, mut refusal) = (String::new(), None::<String>);
    for block in &message.content {
        if let Block::Text { text: t, provider_data } = block {
            if provider_data.as_ref().is_some_and(is_refusal_mark) {
                refusal.get_or_insert_with(String::new).push_str(t);
            } else {
                text.push_str(t);
            }
        }
    }
    (text, refusal)
}

/// OpenAI's refusal marker, `{"openai": {"refusal": true}}` (Chat) or
/// `{"openai-responses": {"refusal": true}}`.
fn is_refusal_mark(data: &Value) -> bool {
    ["openai", "openai-responses"].iter().any(|k| data.pointer(&format!("/{k}/refusal")) == Some(&Value::Bool(true)))
}

fn refused_by_stop(stop: &Stop) -> Option<String> {
    matches!(stop.reason, StopReason::Refusal | StopReason::ContentFilter)
        .then(|| stop.raw.clone().unwrap_or_else(|| "refusal".into()))
}

/// The model called a tool: when it is the output tool of a tool-mode
/// upstream, its synthetic result (the call is never run). The verdict is
/// settled in the state and committed by [`commit`] once the turn's other
/// calls are answered.
pub(crate) fn on_output_call(
    state: &mut RunState,
    rule: &mut OutputRule,
    call: &ToolCall,
    stop: &Stop,
) -> Option<ToolResult> {
    let (Some(spec), Some(out)) = (state.config.output.as_ref(), state.output.as_mut()) else { return None };
    if call.name != spec.name || out.strategy_of(state.upstream) != Some(Strategy::Tool) {
        return None;
    }
    if matches!(out.settled, Some(Settled::Value { .. })) {
        return Some(ToolResult::ok("Skipped: the final output was already given in this turn."));
    }
    let complete = call.arguments.trim().is_empty() || serde_json::from_str::<Value>(&call.arguments).is_ok();
    if !complete && stop.reason == StopReason::MaxTokens {
        out.settled = Some(Settled::Failed { error: OutputError::Truncated { raw: call.arguments.clone() } });
        return Some(ToolResult::error("The arguments were cut off at the token limit."));
    }
    let errors = if complete {
        rule.check(spec).errors(&call.input)
    } else {
        vec!["the arguments are not a complete JSON value".to_string()]
    };
    if errors.is_empty() {
        out.settled = Some(Settled::Value { value: call.input.clone() });
        return Some(ToolResult::ok("The final output was accepted."));
    }
    let message = format!(
        "The arguments did not match the output schema: {}. Call `{}` again with a corrected value.",
        errors.join("; "),
        spec.name
    );
    if out.retries_used >= spec.retries {
        let error = OutputError::Invalid { attempts: out.retries_used + 1, raw: call.arguments.clone(), errors };
        out.settled = Some(Settled::Failed { error });
    } else {
        out.retries_used += 1;
    }
    Some(ToolResult::error(message))
}

/// A turn's tool results are in the transcript: the output tool's verdict,
/// if any, ends the run now.
pub(crate) fn commit(state: &mut RunState) -> Option<Outcome> {
    let out = state.output.as_mut()?;
    match out.settled.take()? {
        Settled::Value { value } => {
            out.value = Some(value);
            Some(Outcome::Done)
        }
        Settled::Failed { error } => Some(Outcome::Failed { error: crate::error::RunError::Output(error) }),
    }
}

/// Field names that mark a 400 as the provider refusing the native output
/// field (the model cannot take a schema, or not with tools).
const NATIVE_FIELD_MARKS: &[&str] = &[
    "response_format",
    "json_schema",
    "text.format",
    "output_config",
    "output_format",
    "responsejsonschema",
    "response_json_schema",
    "responseschema",
    "response mime type",
    "responsemimetype",
    "structured output",
];

/// A model call failed with `error`: when it is a 400 refusing the native
/// output field, the current upstream moves to tool mode for the rest of the
/// run (recorded, and announced) and the turn is sent again. `true` then.
pub(crate) fn native_refused(
    state: &mut RunState,
    error: &ProviderError,
    events: &mut std::collections::VecDeque<StreamEvent>,
) -> bool {
    let upstream = state.upstream;
    let Some(out) = state.output.as_mut() else { return false };
    if error.status != Some(400) || out.strategy_of(upstream) != Some(Strategy::Native) {
        return false;
    }
    let text = format!("{} {}", error.message, error.body).to_ascii_lowercase();
    if !NATIVE_FIELD_MARKS.iter().any(|m| text.contains(m)) {
        return false;
    }
    let reason = format!("native refused: {}", error.message);
    events.push_back(StreamEvent::OutputStrategy { upstream, strategy: Strategy::Tool, reason: reason.clone() });
    out.strategies.push(StrategyRecord { upstream, strategy: Strategy::Tool, turn: state.turns + 1, reason });
    true
}

/// Refuses an output whose tool would shadow a declared tool (the spec
/// itself is checked with the config).
pub(crate) fn check_tools(spec: Option<&OutputSpec>, tools: &[ToolDecl]) -> Result<(), crate::InputError> {
    let Some(spec) = spec else { return Ok(()) };
    if tools.iter().any(|t| t.name == spec.name) {
        return Err(crate::InputError::Config(format!(
            "the output is named {:?}, as a declared tool is: the output tool would shadow it",
            spec.name
        )));
    }
    Ok(())
}
