//! The spans of one run, opened and closed from the driver's shared pump
//! (`engine.rs`) for the blocking and async drivers alike. Every span is
//! started under a context held here (the run's, never a thread-local), so
//! tool calls that run concurrently all stay children of their run.

use std::collections::HashMap;
use std::time::{Instant, SystemTime};

use nexus_proto::{HttpRequest, Request, Run, RunError, StopReason, StreamEvent, Style, ToolReply, Usage};
use opentelemetry::trace::{Link, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, KeyValue, StringValue, Value};
use serde_json::Value as Json;

use super::names as n;
use super::{content, Telemetry};
use crate::config::ClientConfig;
use crate::error::DriveError;

/// A run's spans; nothing at all when the client has no telemetry.
pub(crate) struct RunSpans(Option<Box<Live>>);

struct Live {
    tel: Telemetry,
    run: Context,
    /// The model call of each run of the tree, by agent path (empty for
    /// the top run): a run has one call at a time, its children theirs
    /// alongside.
    chats: HashMap<String, Chat>,
    tools: HashMap<String, Context>,
    /// The sub-agents' runs by agent path: each an `invoke_agent {name}`
    /// span under its delegating run's, the parent of its own tool calls.
    agents: HashMap<String, Context>,
}

/// The model call in flight: one span across its retries and failovers.
struct Chat {
    cx: Context,
    started: Instant,
    attempt_started: Instant,
    first_chunk: Option<f64>,
    streaming: bool,
    usage_before: Usage,
    messages_before: usize,
    /// Attributes every measurement of this call carries.
    metric_attrs: Vec<KeyValue>,
    /// Why the last attempt failed, reported if no later one succeeds.
    error: Option<String>,
    /// When the answer's last byte came: the span ends then, once the
    /// machine has said why the turn stopped (its `TurnFinished`, which
    /// follows the response's end).
    answered: Option<SystemTime>,
    /// The answer, kept for `gen_ai.output.messages` (content capture only).
    answer: Vec<nexus_proto::Message>,
    /// The model of the upstream the last attempt went to.
    model: String,
    /// Whether the top run made the call (not a sub-agent): its transcript
    /// is the call's content.
    top: bool,
    /// Why the turn stopped (its `TurnFinished`).
    stop: Option<StopReason>,
}

/// The conventions' provider name of a wire format.
pub(crate) fn provider_name(style: Style) -> &'static str {
    match style {
        Style::Anthropic => "anthropic",
        Style::Gemini => "gcp.gemini",
        Style::OpenAi | Style::OpenAiResponses => "openai",
    }
}

/// `host` and `port` of a URL (the port defaulted by its scheme).
/// A `chat` span's opening attributes, for a run's model call and a gateway
/// attempt alike: first those its measurements are labelled with
/// (operation, provider, request model, server), then the span's own
/// (whether it streams and, in the default shape, the deprecated
/// `gen_ai.system`). Returns both lists.
pub(crate) fn chat_attributes(
    style: Style,
    model: &str,
    url: &str,
    stream: bool,
    latest: bool,
) -> (Vec<KeyValue>, Vec<KeyValue>) {
    let provider = provider_name(style);
    let mut measured = vec![
        KeyValue::new(n::OPERATION_NAME, n::OP_CHAT),
        KeyValue::new(n::PROVIDER_NAME, provider),
        KeyValue::new(n::REQUEST_MODEL, model.to_string()),
    ];
    if let Some((host, port)) = server(url) {
        measured.push(KeyValue::new(n::SERVER_ADDRESS, host));
        measured.push(KeyValue::new(n::SERVER_PORT, port));
    }
    let mut span = measured.clone();
    span.push(KeyValue::new(n::REQUEST_STREAM, stream));
    if !latest {
        span.push(KeyValue::new(n::SYSTEM, provider));
    }
    (measured, span)
}

pub(crate) fn server(url: &str) -> Option<(String, i64)> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let default = if scheme.eq_ignore_ascii_case("https") { 443 } else { 80 };
    if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = after.strip_prefix(':').and_then(|p| p.parse().ok()).unwrap_or(default);
        return Some((host.to_string(), port));
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => Some((host.to_string(), port.parse().unwrap_or(default))),
        None => Some((authority.to_string(), default)),
    }
}

/// A short, low-cardinality name of what failed: an HTTP status, the
/// provider's error kind, or the failure's category. Never its message.
pub(crate) fn error_type(err: &DriveError) -> String {
    match err {
        DriveError::Run(RunError::Provider(p)) => match p.status {
            Some(s) => s.to_string(),
            None if !p.kind.is_empty() => p.kind.clone(),
            None => "provider_error".into(),
        },
        DriveError::Run(RunError::Transport { kind, .. }) => format!("transport_{kind:?}").to_ascii_lowercase(),
        DriveError::Run(RunError::Decode(_)) => "decode_error".into(),
        DriveError::Run(RunError::Cancelled) => "cancelled".into(),
        DriveError::Run(RunError::DeadlineExceeded) => "deadline_exceeded".into(),
        DriveError::Run(RunError::Aborted { .. }) => "aborted".into(),
        DriveError::Run(RunError::ContextExhausted { .. }) => "context_exhausted".into(),
        DriveError::Run(RunError::Output(_)) => "output_invalid".into(),
        DriveError::Run(_) => "run_error".into(),
        DriveError::Hook(_) => "hook_abort".into(),
        DriveError::MissingTool { .. } => "missing_tool".into(),
        DriveError::Store(_) => "store_error".into(),
        _ => "_OTHER".into(),
    }
}

fn strings(items: impl IntoIterator<Item = String>) -> Value {
    Value::Array(opentelemetry::Array::String(items.into_iter().map(StringValue::from).collect()))
}

impl RunSpans {
    /// Opens the run's span: under the host's context when it gave one,
    /// else under the trace a resumed state carries; linked to the
    /// suspended segment when there is one.
    pub(crate) fn begin(cfg: &ClientConfig, run: &Run, state: Option<&[u8]>) -> RunSpans {
        let Some(tel) = &cfg.telemetry else {
            return RunSpans(None);
        };
        let stored = state.and_then(super::stored_context);
        let parent = tel.parent.clone().or_else(|| stored.clone()).unwrap_or_default();
        let config = run.config();
        let provider = provider_name(config.style);
        let mut attrs = vec![
            KeyValue::new(n::OPERATION_NAME, n::OP_INVOKE_AGENT),
            KeyValue::new(n::PROVIDER_NAME, provider),
            KeyValue::new(n::REQUEST_MODEL, config.model.clone()),
            KeyValue::new(n::CONVERSATION_ID, run.id().to_string()),
            KeyValue::new(n::AGENT_ID, run.id().to_string()),
        ];
        if !tel.latest {
            attrs.push(KeyValue::new(n::SYSTEM, provider));
        }
        let name = match &tel.agent_name {
            Some(agent) => {
                attrs.push(KeyValue::new(n::AGENT_NAME, agent.clone()));
                format!("{} {agent}", n::OP_INVOKE_AGENT)
            }
            None => n::OP_INVOKE_AGENT.to_string(),
        };
        if tel.capture {
            if let Some(system) = &config.system {
                attrs.push(KeyValue::new(n::SYSTEM_INSTRUCTIONS, content::system_instructions(system)));
            }
            if !run.tools().is_empty() {
                attrs.push(KeyValue::new(n::TOOL_DEFINITIONS, content::tool_definitions(run.tools())));
            }
        }
        let mut builder = tel.tracer.span_builder(name).with_kind(SpanKind::Internal).with_attributes(attrs);
        let linked = stored.as_ref().map(|cx| cx.span().span_context().clone());
        if let Some(sc) = &linked {
            builder = builder.with_links(vec![Link::with_context(sc.clone())]);
        }
        let span = tel.tracer.build_with_context(builder, &parent);
        let run_cx = parent.with_span(span);
        if let Some(sc) = linked {
            let event = if tel.latest { n::EVENT_RESUMED_LATEST } else { n::EVENT_RESUMED };
            let (traceparent, _) = super::inject(&sc);
            run_cx.span().add_event(event, vec![KeyValue::new("nexus.resumed_from", traceparent)]);
        }
        RunSpans(Some(Box::new(Live {
            tel: tel.clone(),
            run: run_cx,
            chats: HashMap::new(),
            tools: HashMap::new(),
            agents: HashMap::new(),
        })))
    }

    /// A model request is about to go out: the first attempt opens the
    /// call's span; a retry or failover goes on in the same one.
    pub(crate) fn send(&mut self, run: &Run, req: &HttpRequest, attempt: u32) {
        let Some(live) = self.0.as_deref_mut() else {
            return;
        };
        // A sub-agent's call goes to its own upstream, under its own span.
        let (path, upstream) = run.exchange_owner(req.exchange).unwrap_or_else(|| (String::new(), run.upstream()));
        if live.chats.get(&path).is_some_and(|c| c.answered.is_some()) {
            live.close_answered(&path);
        }
        if let Some(chat) = live.chats.get_mut(&path) {
            chat.attempt_started = Instant::now();
            chat.first_chunk = None;
            chat.model = upstream.model;
            chat.cx.span().set_attribute(KeyValue::new(n::ATTEMPT, i64::from(attempt)));
            return;
        }
        let (metric_attrs, mut attrs) =
            chat_attributes(upstream.style, &upstream.model, &req.url, req.streaming, live.tel.latest);
        attrs.push(KeyValue::new(n::CONVERSATION_ID, run.id().to_string()));
        let top = path.is_empty();
        if let Some(max) = run.config().max_tokens.filter(|_| top) {
            attrs.push(KeyValue::new(n::REQUEST_MAX_TOKENS, i64::from(max)));
        }
        if live.tel.capture && top {
            attrs.push(KeyValue::new(n::INPUT_MESSAGES, content::input_messages(run.transcript())));
        }
        let builder = live
            .tel
            .tracer
            .span_builder(format!("{} {}", n::OP_CHAT, upstream.model))
            .with_kind(SpanKind::Client)
            .with_attributes(attrs);
        let parent = if top { live.run.clone() } else { live.agent(run, &path) };
        let span = live.tel.tracer.build_with_context(builder, &parent);
        let now = Instant::now();
        let owner = run.agent_run(&path).unwrap_or(run);
        let chat = Chat {
            cx: parent.with_span(span),
            started: now,
            attempt_started: now,
            first_chunk: None,
            streaming: req.streaming,
            usage_before: owner.usage(),
            messages_before: run.transcript().len(),
            metric_attrs,
            error: None,
            answered: None,
            answer: Vec::new(),
            model: upstream.model,
            top,
            stop: None,
        };
        live.chats.insert(path, chat);
    }

    /// The first chunk of a successful response to the run at `path` arrived.
    pub(crate) fn first_chunk(&mut self, path: &str) {
        if let Some(chat) = self.0.as_deref_mut().and_then(|l| l.chats.get_mut(path)) {
            if chat.streaming && chat.first_chunk.is_none() {
                chat.first_chunk = Some(chat.attempt_started.elapsed().as_secs_f64());
            }
        }
    }

    /// A machine event: retries, failovers and compactions become span
    /// events; a turn's end gives the call its finish reason.
    pub(crate) fn event(&mut self, run: &Run, ev: &StreamEvent) {
        let Some(live) = self.0.as_deref_mut() else {
            return;
        };
        // A sub-agent's event: the agent's span opens with its first one.
        let (agent, inner) = match ev {
            StreamEvent::Agent { agent, event } => (Some(agent.as_str()), event.inner()),
            other => (None, other),
        };
        let scope = agent.map(|path| live.agent(run, path));
        let path = agent.unwrap_or_default();
        let chat = live.chats.get(path).map(|c| c.cx.clone());
        let target = chat.or_else(|| scope.clone()).unwrap_or(live.run.clone());
        match inner {
            // Each run calls one model at a time: its answered call is this turn's.
            StreamEvent::TurnFinished { stop, .. } => {
                if let Some(chat) = live.chats.get_mut(path) {
                    chat.stop = Some(*stop);
                }
                live.close_answered(path);
            }
            // A delegation ended: its agent's span ends.
            StreamEvent::ToolResult { call_id, .. } => match agent {
                Some(path) => live.end_agent(run, &format!("{path}{}{call_id}", nexus_proto::agent::PATH_SEPARATOR)),
                None => live.end_agent(run, call_id),
            },
            StreamEvent::Retrying { attempt, delay_ms, reason } => {
                let mut attrs = vec![
                    KeyValue::new(n::ATTEMPT, i64::from(*attempt)),
                    KeyValue::new("nexus.retry.delay_ms", i64::try_from(*delay_ms).unwrap_or(i64::MAX)),
                ];
                // The reason quotes the provider's error body: content.
                if live.tel.capture {
                    attrs.push(KeyValue::new("nexus.reason", reason.clone()));
                }
                target.span().add_event(n::EVENT_RETRY, attrs);
            }
            StreamEvent::Failover { from, to, reason, .. } => {
                // A sub-agent's upstreams are its own: named by their index.
                let name = |i: usize| match agent {
                    None => {
                        run.config().upstream(i).map(|u| format!("{} {}", u.style.name(), u.model)).unwrap_or_default()
                    }
                    Some(_) => format!("upstream {i}"),
                };
                let mut attrs =
                    vec![KeyValue::new(n::FAILOVER_FROM, name(*from)), KeyValue::new(n::FAILOVER_TO, name(*to))];
                if live.tel.capture {
                    attrs.push(KeyValue::new("nexus.reason", reason.clone()));
                }
                target.span().add_event(n::EVENT_FAILOVER, attrs);
            }
            StreamEvent::Compaction { tokens_before, tokens_after, turns_replaced, .. } => {
                scope.as_ref().unwrap_or(&live.run).span().add_event(
                    n::EVENT_COMPACTION,
                    vec![
                        KeyValue::new("nexus.compaction.tokens_before", i64::try_from(*tokens_before).unwrap_or(0)),
                        KeyValue::new("nexus.compaction.tokens_after", i64::try_from(*tokens_after).unwrap_or(0)),
                        KeyValue::new("nexus.compaction.turns_replaced", i64::from(*turns_replaced)),
                    ],
                );
            }
            _ => {}
        }
    }

    /// An exchange of the run at `path` ended. A 2xx response ends the
    /// call's span with what the model answered; a failure leaves it open
    /// for the retry.
    pub(crate) fn exchange_ended(&mut self, run: &Run, path: &str, ok: bool, status: Option<u16>) {
        let Some(live) = self.0.as_deref_mut() else {
            return;
        };
        let success = ok || status.is_some_and(|s| (200..300).contains(&s));
        if !success {
            if let Some(chat) = live.chats.get_mut(path) {
                chat.error = Some(status.map_or_else(|| "transport".to_string(), |s| s.to_string()));
            }
            return;
        }
        let Some(chat) = live.chats.get_mut(path).filter(|c| c.answered.is_none()) else {
            return;
        };
        chat.answered = Some(SystemTime::now());
        let span = chat.cx.span();
        // The run calls one model at a time: its usage grew by this call's.
        let usage = run.agent_run(path).unwrap_or(run).usage();
        let input = usage.prompt_tokens.saturating_sub(chat.usage_before.prompt_tokens);
        let output = usage.completion_tokens.saturating_sub(chat.usage_before.completion_tokens);
        let cached = usage.cached_tokens.saturating_sub(chat.usage_before.cached_tokens);
        let reasoning = usage.reasoning_tokens.saturating_sub(chat.usage_before.reasoning_tokens);
        let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let mut attrs = vec![
            KeyValue::new(n::RESPONSE_MODEL, chat.model.clone()),
            KeyValue::new(n::USAGE_INPUT_TOKENS, as_i64(input)),
            KeyValue::new(n::USAGE_OUTPUT_TOKENS, as_i64(output)),
        ];
        if cached > 0 {
            attrs.push(KeyValue::new(n::USAGE_CACHE_READ_INPUT_TOKENS, as_i64(cached)));
        }
        if reasoning > 0 {
            attrs.push(KeyValue::new(n::USAGE_REASONING_OUTPUT_TOKENS, as_i64(reasoning)));
        }
        if let Some(t) = chat.first_chunk {
            attrs.push(KeyValue::new(n::RESPONSE_TIME_TO_FIRST_CHUNK, t));
        }
        if live.tel.capture && chat.top {
            chat.answer = run.transcript().get(chat.messages_before..).unwrap_or_default().to_vec();
        }
        span.set_attributes(attrs);
        if let Some(m) = &live.tel.instruments {
            let mut labels = chat.metric_attrs.clone();
            labels.push(KeyValue::new(n::RESPONSE_MODEL, chat.model.clone()));
            m.duration.record(chat.started.elapsed().as_secs_f64(), &labels);
            if let Some(t) = chat.first_chunk {
                m.time_to_first_chunk.record(t, &labels);
            }
            if let Some(h) = &m.tokens {
                let typed = |kind: &'static str| {
                    let mut l = labels.clone();
                    l.push(KeyValue::new(n::TOKEN_TYPE, kind));
                    l
                };
                h.record(input, &typed("input"));
                h.record(output, &typed("output"));
            }
            if let Some((i, o)) = &m.tokens_split {
                i.record(input, &labels);
                o.record(output, &labels);
            }
        }
    }

    /// A tool call starts: its span opens under the run's. Returns the
    /// span's `traceparent`, for the tool to pass on.
    pub(crate) fn tool_started(&mut self, run: &Run, call_id: &str, name: &str, input: &Json) -> Option<String> {
        let live = self.0.as_deref_mut()?;
        let mcp =
            run.tools().iter().any(|d| d.name == name && d.kind != nexus_proto::ToolKind::Relay) && name.contains("__");
        let mut attrs = vec![
            KeyValue::new(n::OPERATION_NAME, n::OP_EXECUTE_TOOL),
            KeyValue::new(n::TOOL_NAME, name.to_string()),
            KeyValue::new(n::TOOL_CALL_ID, call_id.to_string()),
            KeyValue::new(n::TOOL_TYPE, if mcp { "extension" } else { "function" }),
            KeyValue::new(n::CONVERSATION_ID, run.id().to_string()),
        ];
        if live.tel.capture {
            attrs.push(KeyValue::new(n::TOOL_CALL_ARGUMENTS, input.to_string()));
        }
        // A sub-agent's call (its id qualified by the agent's path) is a
        // child of that agent's span.
        let parent = match call_id.rsplit_once(nexus_proto::agent::PATH_SEPARATOR) {
            Some((path, _)) => live.agent(run, path),
            None => live.run.clone(),
        };
        let builder = live
            .tel
            .tracer
            .span_builder(format!("{} {name}", n::OP_EXECUTE_TOOL))
            .with_kind(SpanKind::Internal)
            .with_attributes(attrs);
        let span = live.tel.tracer.build_with_context(builder, &parent);
        let cx = parent.with_span(span);
        let sc = cx.span().span_context().clone();
        live.tools.insert(call_id.to_string(), cx);
        sc.is_valid().then(|| super::inject(&sc).0)
    }

    /// A tool call ended (or suspended).
    pub(crate) fn tool_ended(&mut self, call_id: &str, reply: &ToolReply) {
        let Some(live) = self.0.as_deref_mut() else {
            return;
        };
        let Some(cx) = live.tools.remove(call_id) else {
            return;
        };
        let span = cx.span();
        match reply {
            ToolReply::Done(result) => {
                if result.is_error {
                    span.set_attribute(KeyValue::new(n::ERROR_TYPE, "tool_error"));
                    span.set_status(Status::error("tool_error"));
                }
                if live.tel.capture {
                    span.set_attribute(KeyValue::new(n::TOOL_CALL_RESULT, result.output.clone()));
                }
            }
            ToolReply::Pending(request) => {
                span.set_attribute(KeyValue::new("nexus.tool.pending", true));
                span.set_attribute(KeyValue::new("nexus.request.id", request.id.clone()));
            }
        }
        span.end();
    }

    /// The run suspended: its segment ends, and its trace context goes
    /// into the state's envelope for the run that resumes it.
    pub(crate) fn suspended(&mut self, requests: &[Request], state: Vec<u8>) -> Vec<u8> {
        let Some(live) = self.0.as_deref_mut() else {
            return state;
        };
        let event = if live.tel.latest { n::EVENT_PAUSED_LATEST } else { n::EVENT_SUSPENDED };
        let ids = strings(requests.iter().map(|r| r.id.clone()));
        live.run.span().add_event(event, vec![KeyValue::new(n::REQUEST_IDS, ids)]);
        let sc = live.run.span().span_context().clone();
        let state = super::attach(state, &sc);
        self.finished_with("pending", None, None);
        state
    }

    /// The run ended: every span still open closes, the run's last.
    pub(crate) fn finished(&mut self, run: &Run, status: &'static str, limit: Option<&str>, err: Option<&DriveError>) {
        if let Some(live) = self.0.as_deref_mut() {
            let usage = run.usage();
            live.run.span().set_attributes([
                KeyValue::new(n::USAGE_INPUT_TOKENS, i64::try_from(usage.prompt_tokens).unwrap_or(i64::MAX)),
                KeyValue::new(n::USAGE_OUTPUT_TOKENS, i64::try_from(usage.completion_tokens).unwrap_or(i64::MAX)),
            ]);
        }
        self.finished_with(status, limit, err);
    }

    fn finished_with(&mut self, status: &'static str, limit: Option<&str>, err: Option<&DriveError>) {
        let Some(mut live) = self.0.take() else {
            return;
        };
        let answered: Vec<String> =
            live.chats.iter().filter(|(_, c)| c.answered.is_some()).map(|(p, _)| p.clone()).collect();
        for path in answered {
            live.close_answered(&path);
        }
        let error = err.map(error_type);
        for chat in live.chats.values() {
            let span = chat.cx.span();
            if let Some(e) = chat.error.clone().or_else(|| error.clone()) {
                span.set_attribute(KeyValue::new(n::ERROR_TYPE, e.clone()));
                span.set_status(Status::error(e));
            }
            span.end();
            if let (Some(m), Some(e)) = (&live.tel.instruments, chat.error.clone().or_else(|| error.clone())) {
                let mut labels = chat.metric_attrs.clone();
                labels.push(KeyValue::new(n::ERROR_TYPE, e));
                m.duration.record(chat.started.elapsed().as_secs_f64(), &labels);
            }
        }
        for cx in live.tools.values().chain(live.agents.values()) {
            cx.span().end();
        }
        let span = live.run.span();
        span.set_attribute(KeyValue::new(n::RUN_STATUS, status));
        if let Some(limit) = limit {
            span.set_attribute(KeyValue::new(n::RUN_LIMIT, limit.to_string()));
        }
        if let (Some(e), Some(err)) = (error, err) {
            span.set_attribute(KeyValue::new(n::ERROR_TYPE, e.clone()));
            // The message may quote a provider's error body or a tool's
            // output: content, so only with capture on.
            span.set_status(Status::error(if live.tel.capture { err.to_string() } else { e }));
        }
        span.end();
    }
}

impl Live {
    /// The span of the sub-agent at `path`, opened (under its delegating
    /// run's) the first time the agent is seen.
    fn agent(&mut self, run: &Run, path: &str) -> Context {
        if let Some(cx) = self.agents.get(path) {
            return cx.clone();
        }
        let parent = match path.rsplit_once(nexus_proto::agent::PATH_SEPARATOR) {
            Some((up, _)) => self.agent(run, up),
            None => self.run.clone(),
        };
        let name = run.agent_names(path).and_then(|names| names.last().cloned()).unwrap_or_default();
        let attrs = vec![
            KeyValue::new(n::OPERATION_NAME, n::OP_INVOKE_AGENT),
            KeyValue::new(n::AGENT_NAME, name.clone()),
            KeyValue::new(n::CONVERSATION_ID, run.id().to_string()),
            KeyValue::new(n::AGENT_PATH, path.to_string()),
        ];
        let builder = self
            .tel
            .tracer
            .span_builder(format!("{} {name}", n::OP_INVOKE_AGENT))
            .with_kind(SpanKind::Internal)
            .with_attributes(attrs);
        let span = self.tel.tracer.build_with_context(builder, &parent);
        let cx = parent.with_span(span);
        self.agents.insert(path.to_string(), cx.clone());
        cx
    }

    /// The sub-agent at `path` finished: its span ends with its usage and status.
    fn end_agent(&mut self, run: &Run, path: &str) {
        let Some(cx) = self.agents.remove(path) else {
            return;
        };
        let span = cx.span();
        if let Some(report) = run.agent_reports().into_iter().find(|r| r.path == path) {
            let as_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
            span.set_attributes([
                KeyValue::new(n::USAGE_INPUT_TOKENS, as_i64(report.usage.prompt_tokens)),
                KeyValue::new(n::USAGE_OUTPUT_TOKENS, as_i64(report.usage.completion_tokens)),
                KeyValue::new(n::RUN_STATUS, report.status),
            ]);
        }
        span.end();
    }

    /// Ends the answered call's span of the run at `path`, with why its turn stopped.
    fn close_answered(&mut self, path: &str) {
        if self.chats.get(path).is_none_or(|c| c.answered.is_none()) {
            return;
        }
        let Some(chat) = self.chats.remove(path) else {
            return;
        };
        let span = chat.cx.span();
        let reason = content::finish_reason(chat.stop);
        span.set_attribute(KeyValue::new(n::RESPONSE_FINISH_REASONS, strings([reason.to_string()])));
        if self.tel.capture && chat.top {
            span.set_attribute(KeyValue::new(n::OUTPUT_MESSAGES, content::output_messages(&chat.answer, chat.stop)));
        }
        span.end_with_timestamp(chat.answered.unwrap_or_else(SystemTime::now));
    }
}

impl Drop for RunSpans {
    /// A run dropped before it ended (its host stopped reading) still ends its spans.
    fn drop(&mut self) {
        self.finished_with("dropped", None, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_of_a_url() {
        assert_eq!(server("http://127.0.0.1:8080/v1/chat"), Some(("127.0.0.1".into(), 8080)));
        assert_eq!(server("https://api.openai.com/v1"), Some(("api.openai.com".into(), 443)));
        assert_eq!(server("http://[::1]:9/x"), Some(("::1".into(), 9)));
        assert_eq!(server("nope"), None);
    }
}
