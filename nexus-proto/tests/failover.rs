//! Failover between upstreams, in memory: a run over an ordered list of
//! upstreams, a scripted provider per upstream that fails on cue, a virtual
//! clock and shared circuit breakers. Every request is checked against the
//! wire rules of the upstream it goes to.

mod sim;

use std::collections::{HashMap, VecDeque};

use nexus_proto::{
    Answer, BreakerPolicy, Breakers, CircuitState, Input, InputError, Message, Outcome, Output, Run, RunConfig,
    RunError, StreamEvent, Style, Timestamp, ToolBatch, ToolDecl, ToolInvocation, ToolReply, ToolResult,
    TransportErrorKind, Upstream,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use sim::{model_turns, wire, Turn};

const STYLES: [Style; 4] = [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses];
const GEMINI_SIG: &str = "c2lnLWdlbWluaQ==";

/// How one attempt at an upstream fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// The connection is reset before any response byte.
    Reset,
    /// 503 with the provider's error body.
    Unavailable,
    /// 529 (429 for OpenAI and Gemini, which have no 529) with a long `Retry-After`.
    LongRetryAfter,
    /// No response head at all: the head timeout fires.
    Stall,
    /// 400: the request is at fault.
    BadRequest,
    /// A 200 stream that shows text, then the connection resets.
    CutAfterText,
}

fn error_body(style: Style, status: u16) -> Vec<u8> {
    let v = match style {
        Style::Anthropic => {
            let kind = match status {
                400 => "invalid_request_error",
                529 => "overloaded_error",
                _ => "api_error",
            };
            json!({"type":"error","error":{"type":kind,"message":format!("status {status}")}})
        }
        Style::OpenAi | Style::OpenAiResponses => {
            json!({"error":{"message":format!("status {status}"),"type":"server_error","param":null,"code":null}})
        }
        Style::Gemini => json!({"error":{"code":status,"message":format!("status {status}"),"status":"UNAVAILABLE"}}),
    };
    serde_json::to_vec(&v).unwrap()
}

/// Gemini answers with its thought signature on the first call, as Gemini 3 does.
fn provider_wire(style: Style, turn: &Turn, stream: bool) -> Vec<u8> {
    let bytes = wire(style, turn, stream);
    if style != Style::Gemini || turn.calls.is_empty() {
        return bytes;
    }
    let text = String::from_utf8(bytes).unwrap();
    text.replacen(r#"{"functionCall""#, &format!(r#"{{"thoughtSignature":"{GEMINI_SIG}","functionCall""#), 1)
        .into_bytes()
}

/// The wire rules of each format that a cross-format transcript can break.
fn check_wire(style: Style, body: &Value) -> Result<(), String> {
    let text = body.to_string();
    if style != Style::OpenAiResponses && (text.contains(&sim::encrypted(0)) || text.contains("thinking 0")) {
        return Err("a Responses reasoning item sent to another provider".into());
    }
    match style {
        Style::OpenAiResponses => {
            if text.contains(GEMINI_SIG) {
                return Err("a Gemini signature sent to OpenAI Responses".into());
            }
            let items = body["input"].as_array().ok_or("no input")?;
            let mut open: Vec<&str> = Vec::new();
            for (i, it) in items.iter().enumerate() {
                match it["type"].as_str() {
                    Some("function_call") => open.push(it["call_id"].as_str().unwrap_or("")),
                    Some("function_call_output") => {
                        let id = it["call_id"].as_str().unwrap_or("");
                        let Some(pos) = open.iter().position(|o| *o == id) else {
                            return Err(format!("input[{i}]: an output for {id:?} answers no call"));
                        };
                        open.remove(pos);
                    }
                    Some("reasoning") if it["encrypted_content"].as_str().is_none_or(str::is_empty) => {
                        return Err(format!("input[{i}]: a reasoning item without its encrypted content"));
                    }
                    _ => {}
                }
            }
            if !open.is_empty() {
                return Err(format!("calls without outputs: {open:?}"));
            }
        }
        Style::Gemini => {
            for (i, c) in body["contents"].as_array().ok_or("no contents")?.iter().enumerate() {
                let parts = c["parts"].as_array().ok_or("no parts")?;
                if parts.is_empty() {
                    return Err(format!("contents[{i}] has no parts"));
                }
                if c["role"] == "model" {
                    if let Some(first) = parts.iter().find(|p| p.get("functionCall").is_some()) {
                        if first.get("thoughtSignature").and_then(Value::as_str).is_none_or(str::is_empty) {
                            return Err(format!("contents[{i}]: a function call turn without a thought signature"));
                        }
                    }
                }
                let calls = parts.iter().filter(|p| p.get("functionCall").is_some()).count();
                if calls > 0 {
                    let next = body["contents"].get(i + 1).and_then(|n| n["parts"].as_array());
                    let answers = next.map_or(0, |p| p.iter().filter(|p| p.get("functionResponse").is_some()).count());
                    if answers != calls {
                        return Err(format!("contents[{i}]: {calls} calls, {answers} responses"));
                    }
                }
            }
        }
        Style::Anthropic => {
            if text.contains(GEMINI_SIG) {
                return Err("a Gemini signature sent to Anthropic".into());
            }
            let msgs = body["messages"].as_array().ok_or("no messages")?;
            for (i, m) in msgs.iter().enumerate() {
                let blocks = m["content"].as_array().cloned().unwrap_or_default();
                for b in &blocks {
                    if b["type"] == "thinking" && b["signature"].as_str().is_none_or(str::is_empty) {
                        return Err(format!("messages[{i}]: unsigned thinking"));
                    }
                    if b["type"] == "tool_use" {
                        let id = b["id"].as_str().unwrap_or("");
                        if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                            return Err(format!("messages[{i}]: tool_use id {id:?} breaks ^[a-zA-Z0-9_-]+$"));
                        }
                    }
                }
                let ids = |m: &Value, ty: &str, key: &str| -> Vec<String> {
                    m["content"]
                        .as_array()
                        .map(|c| {
                            c.iter().filter(|b| b["type"] == ty).map(|b| b[key].as_str().unwrap_or("").into()).collect()
                        })
                        .unwrap_or_default()
                };
                let mut uses = ids(m, "tool_use", "id");
                if !uses.is_empty() {
                    let mut results = msgs.get(i + 1).map(|n| ids(n, "tool_result", "tool_use_id")).unwrap_or_default();
                    uses.sort();
                    results.sort();
                    if uses != results {
                        return Err(format!("messages[{i}]: calls {uses:?}, results {results:?}"));
                    }
                }
            }
        }
        Style::OpenAi => {
            if text.contains(GEMINI_SIG) {
                return Err("a Gemini signature sent to OpenAI".into());
            }
            let msgs = body["messages"].as_array().ok_or("no messages")?;
            let mut i = 0;
            while i < msgs.len() {
                if let Some(calls) = msgs[i]["tool_calls"].as_array() {
                    let mut want: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap_or("")).collect();
                    let mut j = i + 1;
                    let mut got = vec![];
                    while j < msgs.len() && msgs[j]["role"] == "tool" {
                        got.push(msgs[j]["tool_call_id"].as_str().unwrap_or(""));
                        j += 1;
                    }
                    want.sort();
                    got.sort();
                    if want != got || want.iter().any(|id| id.is_empty()) {
                        return Err(format!("messages[{i}]: calls {want:?}, results {got:?}"));
                    }
                    i = j;
                } else {
                    if msgs[i]["role"] == "tool" {
                        return Err(format!("messages[{i}]: an orphan tool message"));
                    }
                    i += 1;
                }
            }
        }
    }
    Ok(())
}

fn tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::new("exec", "runs", json!({"type":"object"})),
        ToolDecl::new("approve", "suspends", json!({"type":"object"})),
        ToolDecl::relay("relay", "relayed", json!({"type":"object"})),
    ]
}

fn tool(inv: &ToolInvocation) -> ToolReply {
    match (inv.name.as_str(), &inv.answer) {
        ("approve", None) => ToolReply::Pending(nexus_proto::Request::new("approval", "approve?")),
        _ => ToolReply::Done(ToolResult::ok(format!("{}={}", inv.name, inv.input))),
    }
}

fn config(styles: &[Style], stream: bool) -> RunConfig {
    let mut c = sim::config(styles[0], stream);
    c.model = "model-0".into();
    c.retry.base_delay_ms = 100;
    c.failover.head_timeout_ms = Some(5_000);
    for (i, s) in styles.iter().enumerate().skip(1) {
        c.fallbacks.push(Upstream {
            style: *s,
            base_url: format!("http://127.0.0.1:{i}"),
            model: format!("model-{i}"),
        });
    }
    c
}

/// A run over several upstreams and the providers behind them.
struct Multi {
    run: Run,
    script: Vec<Turn>,
    now: Timestamp,
    /// Failures by (upstream, model turns in the request), consumed in order.
    failures: HashMap<(usize, usize), VecDeque<Failure>>,
    breakers: Option<Breakers>,
    /// (upstream, body) of every request.
    sent: Vec<(usize, Value)>,
    executed: Vec<(String, Option<Answer>)>,
    events: Vec<StreamEvent>,
    reload_bits: VecDeque<bool>,
}

#[derive(Debug, Clone, PartialEq)]
enum Stop {
    Suspended(Vec<nexus_proto::Request>),
    Done(Outcome),
}

impl Multi {
    fn new(cfg: RunConfig, script: Vec<Turn>) -> Multi {
        let mut run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
        set_keys(&mut run);
        Multi {
            run,
            script,
            now: Timestamp(1_000),
            failures: HashMap::new(),
            breakers: None,
            sent: vec![],
            executed: vec![],
            events: vec![],
            reload_bits: VecDeque::new(),
        }
    }

    fn fail(mut self, upstream: usize, turn: usize, failures: &[Failure]) -> Multi {
        self.failures.entry((upstream, turn)).or_default().extend(failures);
        self
    }

    fn reload(&mut self) {
        self.sync();
        let bytes = self.run.snapshot();
        self.run = Run::restore(&bytes).unwrap();
        set_keys(&mut self.run);
        assert_eq!(self.run.snapshot(), bytes, "a restored run re-serializes byte for byte");
    }

    fn sync(&mut self) {
        if let Some(b) = &mut self.breakers {
            self.run.sync_circuits(self.now, b);
        }
    }

    fn feed(&mut self, input: Input<'_>) {
        self.run.handle_input(self.now, input).unwrap();
    }

    /// Answers one request as upstream `index` would; returns whether the
    /// exchange finished (a stall leaves it in flight).
    fn serve(&mut self, req: &nexus_proto::HttpRequest) -> bool {
        let index = self.run.upstream_index();
        let up = self.run.config().upstream(index).unwrap();
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(req.url, up.style.endpoint(&up.base_url, &up.model, req.streaming), "sent to its upstream");
        let auth = up.style.auth_header(&format!("key-{index}"));
        assert_eq!(req.header(&auth.0), Some(auth.1.as_str()), "the key of upstream {index}");
        if let Some(b) = &self.breakers {
            assert!(b.allows(&up.circuit_key(), self.now), "routed to upstream {index} while its circuit is open");
        }
        if let Err(e) = check_wire(up.style, &body) {
            panic!("a request the {} upstream would refuse: {e}\n{body}", up.style.name());
        }
        let n = model_turns(up.style, &body);
        self.sent.push((index, body));
        let ex = req.exchange;
        // Sent now: starts the head timer.
        self.feed(Input::Timeout);
        let failure = self.failures.get_mut(&(index, n)).and_then(VecDeque::pop_front);
        let json_ct = vec![("content-type".to_string(), "application/json".to_string())];
        let status = |status: u16, extra: Option<(&str, &str)>| {
            let mut h = json_ct.clone();
            if let Some((k, v)) = extra {
                h.push((k.into(), v.into()));
            }
            Input::ResponseHead { exchange: ex, status, headers: h }
        };
        match failure {
            Some(Failure::Reset) => {
                self.feed(Input::TransportError { exchange: ex, kind: TransportErrorKind::Io, message: "reset".into() })
            }
            Some(Failure::Unavailable) => {
                self.feed(status(503, None));
                self.feed(Input::ResponseBody { exchange: ex, chunk: &error_body(up.style, 503) });
                self.feed(Input::ResponseEnd { exchange: ex });
            }
            Some(Failure::LongRetryAfter) => {
                let code = if up.style == Style::Anthropic { 529 } else { 429 };
                self.feed(status(code, Some(("retry-after", "120"))));
                self.feed(Input::ResponseBody { exchange: ex, chunk: &error_body(up.style, code) });
                self.feed(Input::ResponseEnd { exchange: ex });
            }
            Some(Failure::BadRequest) => {
                self.feed(status(400, None));
                self.feed(Input::ResponseBody { exchange: ex, chunk: &error_body(up.style, 400) });
                self.feed(Input::ResponseEnd { exchange: ex });
            }
            Some(Failure::Stall) => return false,
            Some(Failure::CutAfterText) => {
                let turn = Turn::text("partial answer that the host already showed");
                let bytes = match up.style {
                    // Gemini streams a short turn as one event: cut after a first one instead.
                    Style::Gemini => {
                        let first = json!({"candidates":[{"content":{"role":"model","parts":[{"text":"partial "}]},"index":0}]});
                        format!("data: {first}\r\n\r\ndata: {{\"candi").into_bytes()
                    }
                    _ => provider_wire(up.style, &turn, true),
                };
                let ct = vec![("content-type".to_string(), "text/event-stream".to_string())];
                self.feed(Input::ResponseHead { exchange: ex, status: 200, headers: ct });
                let cut = if up.style == Style::Gemini { bytes.len() } else { bytes.len() * 2 / 3 };
                self.feed(Input::ResponseBody { exchange: ex, chunk: &bytes[..cut] });
                self.feed(Input::TransportError {
                    exchange: ex,
                    kind: TransportErrorKind::Io,
                    message: "reset".into(),
                });
            }
            None => {
                let turn = self.script.get(n).cloned().unwrap_or_else(|| Turn::text("(script exhausted)"));
                let bytes = provider_wire(up.style, &turn, req.streaming);
                let ct = if req.streaming { "text/event-stream" } else { "application/json" };
                let h = vec![("content-type".to_string(), ct.to_string())];
                self.feed(Input::ResponseHead { exchange: ex, status: 200, headers: h });
                for piece in bytes.chunks(11) {
                    self.feed(Input::ResponseBody { exchange: ex, chunk: piece });
                }
                self.feed(Input::ResponseEnd { exchange: ex });
            }
        }
        true
    }

    fn drive(&mut self) -> Stop {
        for _ in 0..10_000 {
            self.sync();
            match self.run.poll_output() {
                Output::Send(req) => {
                    if self.serve(&req) && self.reload_bits.pop_front().unwrap_or(false) {
                        self.reload();
                    }
                }
                Output::RunTools(ToolBatch { calls, .. }) => {
                    for inv in calls.iter().rev() {
                        self.executed.push((inv.call_id.clone(), inv.answer.clone()));
                        let reply = tool(inv);
                        self.feed(Input::ToolReply { call_id: inv.call_id.clone(), reply });
                    }
                }
                Output::Event(e) => self.events.push(e),
                Output::Suspended(reqs) => return Stop::Suspended(reqs),
                Output::Wait { until: Some(t) } => {
                    self.now = self.now.max(t);
                    self.feed(Input::Timeout);
                }
                Output::Wait { until: None } => panic!("waiting with nothing in flight"),
                Output::Done(o) => return Stop::Done(o),
            }
        }
        panic!("no progress");
    }

    /// Drives to the end, answering every suspension (relay calls get results).
    fn finish(&mut self) -> Outcome {
        for _ in 0..50 {
            match self.drive() {
                Stop::Done(o) => return o,
                Stop::Suspended(reqs) => {
                    for r in reqs {
                        let data = (r.kind == "tool_call").then(|| {
                            let mut d = Map::new();
                            d.insert("output".into(), json!("relayed"));
                            d
                        });
                        let data = match (&r.data, data) {
                            (Some(rd), Some(_)) => {
                                let results: Vec<Value> = rd["calls"]
                                    .as_array()
                                    .unwrap()
                                    .iter()
                                    .map(|c| json!({"id": c["id"], "output": "relayed", "isError": false}))
                                    .collect();
                                let mut d = Map::new();
                                d.insert("results".into(), Value::Array(results));
                                Some(d)
                            }
                            (_, d) => d,
                        };
                        if self.reload_bits.pop_front().unwrap_or(false) {
                            self.reload();
                        }
                        self.run.handle_input(self.now, Input::Answer(Answer::ok(r.id, data))).unwrap();
                    }
                }
            }
        }
        panic!("the run did not finish");
    }

    fn failover_events(&self) -> Vec<(usize, usize)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Failover { from, to, .. } => Some((*from, *to)),
                _ => None,
            })
            .collect()
    }
}

fn set_keys(run: &mut Run) {
    for i in 0..run.config().upstream_count() {
        run.set_upstream_api_key(i, format!("key-{i}"));
    }
}

fn call_then_text() -> Vec<Turn> {
    vec![Turn::calls(&[("call_1", "exec", r#"{"n":1}"#), ("call_2", "exec", r#"{"n":2}"#)]), Turn::text("all done")]
}

/// Every ordered pair of formats and every way of failing: the first
/// upstream answers turn 1 (two tool calls), then fails on turn 2; the run
/// completes on the second upstream from a transcript the first one wrote.
#[test]
fn every_pair_of_formats_fails_over_on_every_upstream_fault() {
    let faults: [(&str, Vec<Failure>, usize); 4] = [
        ("reset", vec![Failure::Reset; 3], 3),
        ("503 storm", vec![Failure::Unavailable; 3], 3),
        ("long retry-after", vec![Failure::LongRetryAfter], 1),
        ("stall", vec![Failure::Stall], 1),
    ];
    for a in STYLES {
        for b in STYLES.into_iter().filter(|b| *b != a) {
            for (name, failures, attempts) in &faults {
                for stream in [false, true] {
                    let label = format!("{} → {} ({name}, stream {stream})", a.name(), b.name());
                    let mut m = Multi::new(config(&[a, b], stream), call_then_text()).fail(0, 1, failures);
                    assert_eq!(m.finish(), Outcome::Done, "{label}");
                    assert_eq!(m.run.final_text(), "all done", "{label}");
                    assert_eq!(m.failover_events(), vec![(0, 1)], "{label}");
                    let to_first = m.sent.iter().filter(|(u, _)| *u == 0).count();
                    assert_eq!(to_first, 1 + attempts, "{label}: turn 1 plus the attempts at turn 2");
                    assert_eq!(m.sent.last().map(|(u, _)| *u), Some(1), "{label}");
                    let served: Vec<(u32, usize)> = m.run.served().iter().map(|s| (s.turn, s.upstream)).collect();
                    assert_eq!(served, vec![(1, 0), (2, 1)], "{label}");
                    assert_eq!(m.run.failovers()[0].turn, 2, "{label}");
                    assert_eq!(m.run.tool_calls().len(), 2, "{label}");
                    assert_eq!(m.executed.len(), 2, "{label}: no tool ran twice");
                    let retried = m.events.iter().any(|e| matches!(e, StreamEvent::Retrying { .. }));
                    assert_eq!(retried, *attempts > 1, "{label}: retries only where waiting can help");
                }
            }
        }
    }
}

#[test]
fn a_request_error_never_fails_over() {
    for a in STYLES {
        for b in STYLES {
            let mut m = Multi::new(config(&[a, b], false), call_then_text()).fail(0, 0, &[Failure::BadRequest]);
            let Outcome::Failed { error: RunError::Provider(p) } = m.finish() else { panic!("{a:?}") };
            assert_eq!(p.status, Some(400));
            assert!(m.failover_events().is_empty());
            assert!(m.sent.iter().all(|(u, _)| *u == 0));
        }
    }
}

#[test]
fn a_failure_after_text_reached_the_host_ends_the_run_without_failing_over() {
    for a in STYLES {
        let b = if a == Style::OpenAi { Style::Anthropic } else { Style::OpenAi };
        let mut m = Multi::new(config(&[a, b], true), call_then_text()).fail(0, 0, &[Failure::CutAfterText]);
        let outcome = m.finish();
        let shown = sim::shown_text(&m.events);
        assert!(!shown.is_empty(), "{a:?}: the host saw text");
        let Outcome::Failed { error: RunError::Transport { kind: TransportErrorKind::Io, .. } } = outcome else {
            panic!("{a:?}: {outcome:?}")
        };
        assert!(m.failover_events().is_empty(), "{a:?}");
        assert_eq!(m.sent.len(), 1, "{a:?}: nothing sent after visible output");
    }
}

#[test]
fn the_failover_cap_holds_and_a_single_upstream_behaves_as_before() {
    // Three upstreams all down, one failover allowed: two upstreams tried.
    let mut cfg = config(&[Style::OpenAi, Style::Anthropic, Style::Gemini], false);
    cfg.failover.max_failovers = 1;
    cfg.retry.retries = 0;
    let mut m = Multi::new(cfg, call_then_text()).fail(0, 0, &[Failure::Reset]).fail(1, 0, &[Failure::Reset]);
    assert!(matches!(m.finish(), Outcome::Failed { error: RunError::Transport { .. } }));
    assert_eq!(m.failover_events(), vec![(0, 1)]);
    // One upstream: a 503 storm retries and fails exactly as without failover.
    let mut m = Multi::new(config(&[Style::OpenAi], false), call_then_text()).fail(0, 0, &[Failure::Unavailable; 3]);
    assert!(matches!(m.finish(), Outcome::Failed { error: RunError::Provider(_) }));
    assert_eq!(m.sent.len(), 3);
    assert!(m.failover_events().is_empty());
}

#[test]
fn history_from_elsewhere_reaches_gemini_with_the_placeholder_signature() {
    let history = vec![
        Message::user("earlier"),
        Message {
            role: nexus_proto::Role::Assistant,
            content: vec![
                nexus_proto::Block::Reasoning {
                    text: "anthropic thinking".into(),
                    signature: Some("anthropic-sig".into()),
                    redacted: None,
                    provider_data: None,
                },
                nexus_proto::Block::ToolCall(nexus_proto::ToolCall {
                    id: "toolu_01".into(),
                    name: "exec".into(),
                    input: json!({}),
                    arguments: "{}".into(),
                    provider_data: None,
                }),
            ],
        },
        Message {
            role: nexus_proto::Role::User,
            content: vec![nexus_proto::Block::ToolResult(nexus_proto::ToolResultBlock {
                call_id: "toolu_01".into(),
                name: "exec".into(),
                output: "ok".into(),
                is_error: false,
            })],
        },
        Message::user("go"),
    ];
    for stream in [false, true] {
        let mut run = Run::new(config(&[Style::Gemini], stream), tools(), history.clone()).unwrap();
        let Output::Send(req) = run.poll_output().pipe_send(&mut run) else { panic!() };
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        check_wire(Style::Gemini, &body).unwrap();
        let text = body.to_string();
        assert!(text.contains(nexus_proto::provider::gemini::PLACEHOLDER_SIGNATURE), "{text}");
        assert!(!text.contains("anthropic thinking") && !text.contains("anthropic-sig"), "{text}");
    }
}

trait PipeSend {
    fn pipe_send(self, run: &mut Run) -> Output;
}

impl PipeSend for Output {
    /// Skips events up to the first non-event output.
    fn pipe_send(self, run: &mut Run) -> Output {
        let mut out = self;
        while let Output::Event(_) = out {
            out = run.poll_output();
        }
        out
    }
}

#[test]
fn an_open_circuit_routes_new_runs_past_its_upstream_until_the_cooldown_ends() {
    let policy = BreakerPolicy { failures: 2, window_ms: 10_000, cooldown_ms: 60_000 };
    let mut breakers = Breakers::new(policy);
    let mut cfg = config(&[Style::Anthropic, Style::Gemini], false);
    cfg.retry.retries = 1;
    // Run 1: the primary resets twice (a retry, then failover): its circuit opens.
    let mut m = Multi::new(cfg.clone(), call_then_text()).fail(0, 0, &[Failure::Reset, Failure::Reset]);
    m.breakers = Some(breakers.clone());
    assert_eq!(m.finish(), Outcome::Done);
    m.sync();
    breakers = m.breakers.take().unwrap();
    let primary = cfg.upstream(0).unwrap().circuit_key();
    let opened_at = m.now;
    assert_eq!(breakers.state(&primary, m.now), CircuitState::Open { until: opened_at.plus_ms(60_000) });
    // Run 2, during the cooldown: straight to the fallback, nothing sent to the primary.
    let mut m2 = Multi::new(cfg.clone(), call_then_text());
    m2.now = opened_at.plus_ms(1_000);
    m2.breakers = Some(breakers.clone());
    assert_eq!(m2.finish(), Outcome::Done);
    assert!(m2.sent.iter().all(|(u, _)| *u == 1));
    assert_eq!(m2.run.failovers()[0].reason, "circuit open");
    // Run 3, after the cooldown: half-open lets the primary answer, which closes it.
    let mut m3 = Multi::new(cfg.clone(), call_then_text());
    m3.now = opened_at.plus_ms(60_000);
    m3.breakers = m2.breakers.take();
    assert_eq!(m3.finish(), Outcome::Done);
    assert!(m3.sent.iter().all(|(u, _)| *u == 0));
    m3.sync();
    assert_eq!(m3.breakers.as_ref().unwrap().state(&primary, m3.now), CircuitState::Closed);
}

#[test]
fn a_run_whose_every_circuit_is_open_waits_for_the_first_cooldown() {
    let policy = BreakerPolicy { failures: 1, window_ms: 10_000, cooldown_ms: 30_000 };
    let cfg = config(&[Style::OpenAi, Style::Gemini], false);
    let mut breakers = Breakers::new(policy);
    breakers.record_failure(&cfg.upstream(0).unwrap().circuit_key(), Timestamp(1_000));
    breakers.record_failure(&cfg.upstream(1).unwrap().circuit_key(), Timestamp(2_000));
    let mut m = Multi::new(cfg, call_then_text());
    m.breakers = Some(breakers);
    assert_eq!(m.finish(), Outcome::Done);
    // The primary's cooldown ended first: it was tried half-open at that moment.
    assert!(m.sent.iter().all(|(u, _)| *u == 0));
    assert!(m.now >= Timestamp(31_000));
}

#[test]
fn a_circuit_view_set_by_hand_routes_like_the_breakers_that_made_it() {
    // What a replay does: no Breakers, the recorded view fed back.
    let cfg = config(&[Style::Anthropic, Style::OpenAi], false);
    let mut m = Multi::new(cfg.clone(), call_then_text());
    m.now = Timestamp(5_000);
    let refused = m.run.set_circuit_view(vec![Some(Timestamp(60_000))]);
    assert!(matches!(refused, Err(InputError::Config(_))), "{refused:?}");
    assert!(m.run.circuit_view().is_empty(), "a refused view changes nothing");
    m.run.set_circuit_view(vec![Some(Timestamp(60_000)), None]).unwrap();
    assert_eq!(m.run.circuit_view(), &[Some(Timestamp(60_000)), None]);
    assert_eq!(m.finish(), Outcome::Done);
    assert!(m.sent.iter().all(|(u, _)| *u == 1), "{:?}", m.sent.iter().map(|(u, _)| u).collect::<Vec<_>>());
    assert_eq!(m.run.failovers()[0].reason, "circuit open");
    // The same run with every circuit closed stays on the primary.
    let mut m = Multi::new(cfg, call_then_text());
    m.run.set_circuit_view(vec![None, None]).unwrap();
    assert_eq!(m.finish(), Outcome::Done);
    assert!(m.sent.iter().all(|(u, _)| *u == 0));
}

#[test]
fn breakers_open_on_failures_within_the_window_only() {
    let mut b = Breakers::new(BreakerPolicy { failures: 3, window_ms: 1_000, cooldown_ms: 5_000 });
    for t in [0, 600, 1_200, 1_800] {
        b.record_failure("k", Timestamp(t));
    }
    // 0 and 600 fell out of the window by 1800; 1200 and 1800 are two.
    assert_eq!(b.state("k", Timestamp(1_800)), CircuitState::Closed);
    b.record_failure("k", Timestamp(1_900));
    assert_eq!(b.state("k", Timestamp(1_900)), CircuitState::Open { until: Timestamp(6_900) });
    assert_eq!(b.state("k", Timestamp(6_900)), CircuitState::HalfOpen);
    // Half-open: one failure opens it again at once.
    b.record_failure("k", Timestamp(7_000));
    assert_eq!(b.state("k", Timestamp(7_000)), CircuitState::Open { until: Timestamp(12_000) });
    b.record_success("k", Timestamp(12_500));
    assert_eq!(b.state("k", Timestamp(12_500)), CircuitState::Closed);
}

// ---------------------------------------------------------------- properties

fn failure() -> impl Strategy<Value = Failure> {
    prop_oneof![
        4 => Just(Failure::Reset),
        4 => Just(Failure::Unavailable),
        2 => Just(Failure::LongRetryAfter),
        2 => Just(Failure::Stall),
        1 => Just(Failure::BadRequest),
    ]
}

fn style() -> impl Strategy<Value = Style> {
    prop_oneof![Just(Style::Anthropic), Just(Style::OpenAi), Just(Style::Gemini), Just(Style::OpenAiResponses)]
}

fn script_of(turns: &[Vec<u8>]) -> Vec<Turn> {
    let mut script: Vec<Turn> = turns
        .iter()
        .enumerate()
        .map(|(t, kinds)| Turn {
            text: None,
            calls: kinds
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    let name = ["exec", "approve", "relay"][usize::from(*k % 3)];
                    (format!("id_{t}_{i}"), name.to_string(), format!(r#"{{"t":{t},"i":{i}}}"#))
                })
                .collect(),
        })
        .collect();
    script.push(Turn::text("all done"));
    script
}

type Plan = Vec<((usize, usize), Vec<Failure>)>;

fn build(styles: &[Style], stream: bool, script: &[Turn], plan: &Plan, breaker: bool, reloads: &[bool]) -> Multi {
    let mut m = Multi::new(config(styles, stream), script.to_vec());
    for ((u, t), f) in plan {
        m = m.fail(*u % styles.len(), *t, f);
    }
    if breaker {
        m.breakers = Some(Breakers::new(BreakerPolicy { failures: 2, window_ms: 20_000, cooldown_ms: 15_000 }));
    }
    m.reload_bits = reloads.iter().copied().collect();
    m
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_failures_over_one_to_three_upstreams_keep_every_invariant(
        styles in prop::collection::vec(style(), 1..=3),
        stream in any::<bool>(),
        turns in prop::collection::vec(prop::collection::vec(0u8..3, 1..=3), 0..=3),
        plan in prop::collection::vec(((0usize..3, 0usize..4), prop::collection::vec(failure(), 1..=4)), 0..=5),
        breaker in any::<bool>(),
        reloads in prop::collection::vec(any::<bool>(), 0..24),
    ) {
        let script = script_of(&turns);
        // Every request is checked against its upstream's wire rules inside `serve`,
        // and every request under a breaker against its circuit.
        let mut a = build(&styles, stream, &script, &plan, breaker, &[]);
        let outcome_a = a.finish();
        let mut b = build(&styles, stream, &script, &plan, breaker, &reloads);
        let outcome_b = b.finish();
        // Restoring anywhere gives the uninterrupted run.
        prop_assert_eq!(&outcome_a, &outcome_b);
        prop_assert_eq!(a.run.transcript(), b.run.transcript());
        prop_assert_eq!(&a.sent, &b.sent);
        prop_assert_eq!(a.run.served(), b.run.served());
        prop_assert_eq!(a.run.failovers(), b.run.failovers());
        for m in [&a, &b] {
            // No completed tool call ran again.
            let mut plain: HashMap<&str, usize> = HashMap::new();
            for (id, ans) in &m.executed {
                if ans.is_none() {
                    *plain.entry(id).or_default() += 1;
                }
            }
            prop_assert!(plain.values().all(|n| *n == 1), "{:?}", m.executed);
            // Failovers stay within the cap and each names the upstream that served next.
            prop_assert!(m.run.failovers().len() <= m.run.config().failover.max_failovers as usize);
            for f in m.run.failovers() {
                prop_assert!(f.from != f.to && f.to < styles.len());
            }
            // A turn is served by an upstream the run actually sent to.
            for s in m.run.served() {
                prop_assert!(m.sent.iter().any(|(u, _)| *u == s.upstream));
            }
            if outcome_a == Outcome::Done {
                prop_assert_eq!(m.run.final_text(), "all done");
            }
        }
    }
}

/// A circuit's key is kept in stored breaker state: its text is fixed, and
/// the borrowed-parts form a gateway uses writes the same.
#[test]
fn a_circuit_key_is_style_base_url_and_model() {
    let up = Upstream::new(Style::Gemini, "gemini-2.5-flash").with_base_url("http://127.0.0.1:9/v1beta");
    assert_eq!(up.circuit_key(), "gemini http://127.0.0.1:9/v1beta gemini-2.5-flash");
    assert_eq!(Upstream::circuit_key_of(Style::Anthropic, "http://h", ""), "anthropic http://h ");
}
