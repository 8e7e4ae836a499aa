//! The run state machine's fuzz target bodies: [`machine`] drives one run
//! through an arbitrary script of inputs, [`state`] restores arbitrary bytes.

use std::collections::HashSet;

use arbitrary::Unstructured;
use serde_json::{json, Map, Value};

use crate::config::RunConfig;
use crate::error::{InputError, TransportErrorKind};
use crate::http::{ExchangeId, HttpRequest};
use crate::message::Message;
use crate::provider::Style;
use crate::run::{Input, Output, Run, Status};
use crate::suspend::{Answer, Request, ToolReply, ToolResult};
use crate::time::Timestamp;
use crate::tool::ToolDecl;

/// Drives one run through an arbitrary sequence of inputs chosen by `data`:
/// provider responses (well-formed turns in every style, streamed or whole,
/// truncated, error statuses, raw bytes, any chunking), tool replies (done and
/// pending), answers with right and wrong ids, timer fires, cancels, stale
/// exchanges, time going backwards, and snapshot/restore at any point.
///
/// A third of the runs keep a small context budget, so compactions, capped
/// results and `ContextExhausted` happen at any point of such a script.
///
/// Checks: no panic; `poll_output` always settles; no request of a budgeted
/// run goes out over its limit; every emitted request is
/// balanced on the wire (each tool call answered once in the next turn); a
/// refused input changes nothing; an answer to an outstanding request is
/// accepted; a run restored from a snapshot taken between inputs behaves
/// exactly like the original under the same inputs; no tool call is handed
/// out again once it completed or while it is still running; a run never
/// waits on nothing.
pub fn machine(data: &[u8]) {
    let mut u = Unstructured::new(data);
    // Running out of input ends the script early: not a failure.
    let _ = Driver::start(&mut u).and_then(|d| d.go(&mut u));
}

/// Restores a run from arbitrary bytes: a run or a [`crate::StateError`],
/// never a panic. A restored run answers every accessor, survives a few
/// polls and inputs, and its snapshot restores again to the same snapshot.
pub fn state(data: &[u8]) {
    let Ok(mut run) = Run::restore(data) else {
        return;
    };
    let first = run.snapshot();
    match Run::restore(&first) {
        // Restoring applies the restore rules (in-flight → re-send, running → in doubt) once;
        // a second restore has nothing left to apply.
        Ok(again) => assert_eq!(again.snapshot(), first, "restore is not idempotent"),
        Err(e) => panic!("a snapshot of a restored run does not restore: {e}"),
    }
    let _ = (run.status(), run.outstanding(), run.final_text(), run.tool_calls(), run.usage(), run.turns());
    let now = Timestamp(run.state.last_now.0.saturating_add(1));
    for input in [Input::Timeout, Input::Cancel] {
        for _ in 0..8 {
            if matches!(run.poll_output(), Output::Wait { .. } | Output::Done(_)) {
                break;
            }
        }
        let _ = run.handle_input(now, input);
    }
}

const MACHINE_TOOLS: [&str; 5] = ["exec", "ask", "relay", "nope", "final_result"];
const MACHINE_ARGS: [&str; 7] = ["{}", "{\"a\":1}", "", "{\"a\":", "[1,2]", "{\"x\":1.5e-7,\"s\":\"ü\"}", "null"];

fn machine_tools() -> Vec<ToolDecl> {
    let schema = json!({"type": "object"});
    vec![
        ToolDecl::new("exec", "runs", schema.clone()),
        ToolDecl::new("ask", "may suspend", schema.clone()),
        ToolDecl::relay("relay", "relayed to the caller", schema),
    ]
}

/// One scripted model turn: text, calls `(id, name, raw arguments)`, and the
/// provider's stop string when not the natural one.
pub(super) struct FakeTurn {
    pub(super) text: Option<&'static str>,
    pub(super) calls: Vec<(String, &'static str, &'static str)>,
    pub(super) stop: Option<&'static str>,
}

struct Driver {
    style: Style,
    run: Run,
    /// A run restored from a snapshot taken between inputs, fed the same
    /// inputs since: it must behave exactly like `run`.
    shadow: Option<Run>,
    now: u64,
    /// The exchange of the last `Send` (and whether it streams) until its response is fed.
    open: Option<(ExchangeId, bool)>,
    /// How many exchanges were sent (stale ids are drawn below it).
    sent: u64,
    /// Calls handed out and not replied to.
    running: Vec<String>,
    /// Calls whose `Done` reply was accepted.
    done: HashSet<String>,
    wait_until: Option<Timestamp>,
    next_id: u32,
    finished: bool,
    /// With a context budget: no request may estimate over this many tokens.
    limit: Option<u64>,
    /// The open exchange is a token count: the count an honest counter
    /// answers (never below what the counted request will weigh).
    count: Option<u64>,
}

type Step = arbitrary::Result<()>;

impl Driver {
    fn start(u: &mut Unstructured<'_>) -> arbitrary::Result<Driver> {
        let style: Style = u.arbitrary()?;
        let mut config = RunConfig::new(style, "m");
        config.base_url = "http://127.0.0.1:1".into();
        config.stream = u.arbitrary()?;
        config.max_turns = u.int_in_range(1..=6)?;
        config.retry.retries = u.int_in_range(0..=2)?;
        config.retry.base_delay_ms = u.int_in_range(0..=1000)?;
        config.seed = u.arbitrary()?;
        if u.ratio(1, 4)? {
            config.deadline = Some(Timestamp(u.int_in_range(1..=100_000)?));
        }
        if u.ratio(1, 8)? {
            config.max_body_bytes = u.int_in_range(0..=512)?;
        }
        if u.ratio(1, 3)? {
            // Typed output in any mode: the model may call `final_result`
            // (beside other calls, with good or bad arguments) or answer text.
            let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]});
            let mut spec = crate::output::OutputSpec::new(schema).with_mode(u.arbitrary()?);
            spec.retries = u.int_in_range(0..=2)?;
            config.output = Some(spec);
        }
        // A third of the runs keep a small context budget: tool results of
        // any size force compactions (or ContextExhausted) at any point.
        let mut limit = None;
        if u.ratio(1, 3)? {
            let mut policy = crate::context::ContextPolicy::default();
            let window = u.int_in_range(600..=4_000)?;
            policy.windows.insert(0, window);
            policy.margin_tokens = 20;
            if u.arbitrary()? {
                policy.max_tool_result_bytes = Some(u.int_in_range(64..=4_096)?);
            }
            if u.ratio(1, 3)? {
                // Near the trigger the upstream's counter is asked first.
                policy.count_margin = Some(f64::from(u.int_in_range(1..=10u8)?) / 10.0);
            }
            if u.ratio(1, 4)? {
                policy.responses_compaction =
                    Some(crate::context::ResponsesCompaction { compact_threshold: u.int_in_range(1..=4_000)? });
            }
            config.max_tokens = Some(50);
            config.context = Some(policy);
            limit = Some(window - 70);
        }
        let mut run = match Run::new(config, machine_tools(), vec![Message::user("go")]) {
            Ok(run) => run,
            Err(e) => panic!("a valid config was refused: {e}"),
        };
        // Some runs start suspended on host requests (SPEC §4 rule 7).
        let host = u.int_in_range(0..=3)?;
        if host > 0 && host < 3 {
            let requests = (0..host)
                .map(|i| {
                    let mut r = Request::new("authorization", "log in");
                    r.id = format!("host_{i}");
                    r
                })
                .collect();
            if let Err(e) = run.await_host(requests) {
                panic!("a fresh run refused await_host: {e}");
            }
        }
        Ok(Driver {
            style,
            run,
            shadow: None,
            now: 0,
            open: None,
            sent: 0,
            running: Vec::new(),
            done: HashSet::new(),
            wait_until: None,
            next_id: 0,
            finished: false,
            limit,
            count: None,
        })
    }

    fn go(mut self, u: &mut Unstructured<'_>) -> Step {
        for _ in 0..64 {
            self.poll();
            if u.is_empty() {
                break;
            }
            if self.limit.is_some() && !self.running.is_empty() && u.ratio(2, 3)? {
                // Budgeted runs get their tools answered more often, so turns pile up.
                self.reply(u)?;
                continue;
            }
            match u.int_in_range(0..=15)? {
                0..=4 => self.respond(u)?,
                5 => self.transport_error(u)?,
                6..=8 => self.reply(u)?,
                9 | 10 => self.answer(u)?,
                11 | 12 => self.timer(u)?,
                13 | 14 => self.snapshot(u)?,
                _ => self.misuse(u)?,
            }
        }
        Ok(())
    }

    /// Feeds one input to the run (and the shadow): a refused input must leave the run as it was.
    fn apply(&mut self, now: u64, input: Input<'_>) -> Result<(), InputError> {
        let before = self.run.snapshot();
        let got = self.run.handle_input(Timestamp(now), input.clone());
        if let Some(shadow) = &mut self.shadow {
            assert_eq!(shadow.handle_input(Timestamp(now), input), got, "the restored run took an input differently");
        }
        if let Err(e) = &got {
            assert_eq!(self.run.snapshot(), before, "a refused input ({e}) changed the run");
        }
        got
    }

    /// Polls until the run waits or ends, checking every output.
    fn poll(&mut self) {
        for _ in 0..256 {
            let out = self.run.poll_output();
            if let Some(shadow) = &mut self.shadow {
                assert_eq!(shadow.poll_output(), out, "the restored run gave a different output");
            }
            match out {
                Output::Send(req) if is_count(&req.url) => {
                    // A count request is not a model call: the limit and the
                    // transcript rules are the counted request's, checked when it goes.
                    assert!(self.limit.is_some(), "a token count without a context budget");
                    assert!(!req.streaming, "a token count is never streamed");
                    assert!(serde_json::from_slice::<Value>(&req.body).is_ok_and(|v| v.is_object()));
                    // Over what the request itself will weigh (it holds a few fields more).
                    self.count = Some((req.body.len() as u64 + 256).div_ceil(4));
                    self.open = Some((req.exchange, false));
                    self.sent = self.sent.max(req.exchange.0);
                }
                Output::Send(req) => {
                    self.count = None;
                    check_request(self.style, &req);
                    if let Some(limit) = self.limit {
                        let tokens = (req.body.len() as u64).div_ceil(4);
                        assert!(tokens <= limit, "a request of ~{tokens} tokens went out over the {limit} limit");
                    }
                    self.open = Some((req.exchange, req.streaming));
                    self.sent = self.sent.max(req.exchange.0);
                }
                Output::RunTools(batch) => {
                    for call in batch.calls {
                        let id = call.call_id;
                        assert!(!self.done.contains(&id), "call {id} handed out again after it completed");
                        assert!(!has_result(self.run.transcript(), &id), "call {id} handed out again after its result");
                        assert!(!self.running.contains(&id), "call {id} handed out twice while running");
                        self.running.push(id);
                    }
                }
                Output::Suspended(requests) => {
                    assert!(!requests.is_empty(), "suspended on no request");
                    let ids: HashSet<&str> = requests.iter().map(|r| r.id.as_str()).collect();
                    assert_eq!(ids.len(), requests.len(), "outstanding requests share an id: {requests:?}");
                }
                Output::Event(_) => {}
                Output::Wait { until } => {
                    self.wait_until = until;
                    let idle = self.open.is_none() && self.running.is_empty() && self.run.outstanding().is_empty();
                    assert!(
                        !(until.is_none() && idle && self.run.status() == Status::Running),
                        "the run waits with nothing in flight, running or outstanding"
                    );
                    return;
                }
                Output::Done(_) => {
                    self.finished = true;
                    return;
                }
            }
        }
        panic!("poll_output did not settle in 256 outputs");
    }

    fn respond(&mut self, u: &mut Unstructured<'_>) -> Step {
        let (exchange, streaming, count) = match self.open {
            Some((exchange, streaming)) if !u.ratio(1, 16)? => {
                self.open = None; // answered (or failed) below either way
                (exchange, streaming, self.count.take())
            }
            _ => (ExchangeId(u.int_in_range(0..=self.sent + 1)?), u.arbitrary()?, None),
        };
        let status = *u.choose(&[200u16, 200, 200, 200, 200, 400, 429, 500, 529])?;
        let mut headers = Vec::new();
        if u.arbitrary()? {
            let ct = if streaming { "text/event-stream" } else { "application/json" };
            headers.push(("Content-Type".to_string(), ct.to_string()));
        }
        if status != 200 && u.arbitrary()? {
            headers.push(("retry-after".to_string(), u.choose(&["0", "1", "soon"])?.to_string()));
        }
        let body = match u.int_in_range(0..=9)? {
            0 => {
                let n = u.int_in_range(0..=256)?;
                u.bytes(n.min(u.len()))?.to_vec()
            }
            _ if status == 200 && count.is_some() => {
                let field = if self.style == Style::Gemini { "totalTokens" } else { "input_tokens" };
                json!({ field: count }).to_string().into_bytes()
            }
            _ if status == 200 => {
                let turn = self.turn(u)?;
                let mut bytes = wire(self.style, &turn, streaming);
                if u.ratio(1, 8)? {
                    bytes.truncate(u.int_in_range(0..=bytes.len())?);
                }
                bytes
            }
            _ => error_body(self.style),
        };
        if self.apply(self.now, Input::ResponseHead { exchange, status, headers }).is_err() {
            return Ok(());
        }
        let cut_short = u.ratio(1, 10)?;
        let mut rest = body.as_slice();
        while !rest.is_empty() {
            let n = if u.is_empty() || u.ratio(1, 4)? { rest.len() } else { u.int_in_range(1..=rest.len().min(48))? };
            let (chunk, tail) = rest.split_at(n);
            if self.apply(self.now, Input::ResponseBody { exchange, chunk }).is_err() {
                return Ok(()); // the exchange already failed (body over the limit)
            }
            rest = tail;
            if cut_short && u.arbitrary()? {
                break;
            }
        }
        let end = if cut_short {
            Input::TransportError { exchange, kind: TransportErrorKind::Io, message: "reset".into() }
        } else {
            Input::ResponseEnd { exchange }
        };
        let _ = self.apply(self.now, end);
        Ok(())
    }

    fn transport_error(&mut self, u: &mut Unstructured<'_>) -> Step {
        let Some((exchange, _)) = self.open.take() else {
            return Ok(());
        };
        let kind: TransportErrorKind = u.arbitrary()?;
        let _ = self.apply(self.now, Input::TransportError { exchange, kind, message: "failed".into() });
        Ok(())
    }

    fn reply(&mut self, u: &mut Unstructured<'_>) -> Step {
        let call_id = if !self.running.is_empty() && !u.ratio(1, 10)? {
            u.choose(&self.running)?.clone()
        } else {
            u.choose(&["c0", "c1", "nope"])?.to_string()
        };
        let pending = u.ratio(1, 3)?;
        let reply = if pending {
            let mut request = Request::new("approval", "ok?");
            if u.arbitrary()? {
                self.next_id += 1;
                request.id = format!("req{}", self.next_id);
            }
            ToolReply::Pending(request)
        } else {
            // Under a context budget most results are large: they are what forces compactions.
            let large = if self.limit.is_some() { !u.ratio(1, 4)? } else { u.ratio(1, 4)? };
            let size = if large { u.int_in_range(1_000..=20_000)? } else { 1 };
            ToolReply::Done(ToolResult { output: "r".repeat(size), is_error: u.arbitrary()?, metadata: None })
        };
        let running = self.running.contains(&call_id) && !self.finished;
        let got = self.apply(self.now, Input::ToolReply { call_id: call_id.clone(), reply });
        assert_eq!(got.is_ok(), running, "reply to {call_id}: {got:?}");
        if got.is_ok() {
            self.running.retain(|c| *c != call_id);
            if !pending {
                self.done.insert(call_id);
            }
        }
        Ok(())
    }

    /// Settles a host request (or a bogus id), maybe with a tool whose name
    /// clashes: a refusal leaves the run as it was.
    fn settle(&mut self, u: &mut Unstructured<'_>) -> Step {
        let host: Vec<String> = self.run.host_requests().iter().map(|r| r.id.clone()).collect();
        let id = match host.is_empty() || u.ratio(1, 6)? {
            true => u.choose(&["host_9", "pnd_c0", "host_0"])?.to_string(),
            false => u.choose(&host)?.clone(),
        };
        let tools = match u.int_in_range(0..=2)? {
            0 => Vec::new(),
            1 => vec![ToolDecl::new("late", "added by the host", json!({"type": "object"}))],
            _ => vec![ToolDecl::new("exec", "a clash", json!({"type": "object"}))],
        };
        let clash = self.run.tools().iter().any(|t| tools.iter().any(|n| n.name == t.name));
        let before = self.run.snapshot();
        let got = self.run.settle_host(&id, tools.clone());
        if let Some(shadow) = &mut self.shadow {
            assert_eq!(shadow.settle_host(&id, tools), got, "the restored run settled differently");
        }
        match &got {
            Ok(()) => assert!(host.contains(&id) && !clash, "settled {id} with {host:?}"),
            Err(e) => assert_eq!(self.run.snapshot(), before, "a refused settle ({e}) changed the run"),
        }
        Ok(())
    }

    fn answer(&mut self, u: &mut Unstructured<'_>) -> Step {
        if !self.run.host_requests().is_empty() && u.ratio(2, 3)? {
            return self.settle(u);
        }
        let outstanding = self.run.outstanding();
        let answer = match outstanding.is_empty() || u.ratio(1, 8)? {
            true => Answer::ok(u.choose(&["bogus", "pnd_c0", "relay_c0", "doubt_c0", "req1"])?.to_string(), None),
            false => {
                let r = u.choose(&outstanding)?;
                if u.ratio(1, 4)? {
                    Answer::declined(r.id.clone(), u.choose(&["declined", "expired", "cancelled"])?.to_string())
                } else {
                    Answer::ok(r.id.clone(), Some(answer_data(u, r)?))
                }
            }
        };
        // Host requests are settled by the host, never answered as inputs.
        let hosted = self.run.host_requests().iter().any(|r| r.id == answer.id);
        let known = outstanding.iter().any(|r| r.id == answer.id) && !self.finished && !hosted;
        let id = answer.id.clone();
        let got = self.apply(self.now, Input::Answer(answer));
        assert_eq!(got.is_ok(), known, "answer {id} to {outstanding:?}: {got:?}");
        Ok(())
    }

    fn timer(&mut self, u: &mut Unstructured<'_>) -> Step {
        self.now = match self.wait_until {
            Some(t) if u.arbitrary()? => self.now.max(t.0),
            _ => self.now + u.int_in_range(0..=5_000)?,
        };
        let _ = self.apply(self.now, Input::Timeout);
        Ok(())
    }

    /// Takes a snapshot and restores it: either carries on with the restored
    /// run (a process restart), or, between inputs, keeps it as a shadow that
    /// must then behave exactly like the original.
    fn snapshot(&mut self, u: &mut Unstructured<'_>) -> Step {
        let bytes = self.run.snapshot();
        let restored = match Run::restore(&bytes) {
            Ok(run) => run,
            Err(e) => panic!("a snapshot does not restore: {e}"),
        };
        let quiet = self.open.is_none() && self.running.is_empty();
        if quiet {
            assert_eq!(restored.snapshot(), bytes, "snapshot → restore → snapshot is not byte-identical");
        }
        if quiet && u.arbitrary()? {
            self.shadow = Some(restored);
        } else {
            // Restarted: a request in flight will be sent again and running calls come back in doubt.
            self.run = restored;
            self.shadow = None;
            self.open = None;
            self.count = None;
            self.running.clear();
        }
        Ok(())
    }

    /// Inputs a correct driver never gives: each must be refused, or (cancel) end the run.
    fn misuse(&mut self, u: &mut Unstructured<'_>) -> Step {
        match u.int_in_range(0..=3)? {
            0 => {
                let got = self.apply(self.now, Input::Cancel);
                assert_eq!(got.is_ok(), !self.finished, "cancel: {got:?}");
            }
            1 if self.now > 0 => {
                let got = self.apply(self.now - 1, Input::Timeout);
                assert!(got.is_err(), "time went backwards unnoticed");
            }
            2 => {
                if let Some((exchange, _)) = self.open {
                    let got = self.apply(self.now, Input::ResponseBody { exchange, chunk: b"{}" });
                    assert!(got.is_err(), "a body before the response head was taken");
                }
            }
            _ => {
                let got = self.apply(self.now, Input::ResponseEnd { exchange: ExchangeId(u64::MAX) });
                assert!(got.is_err(), "an end for an exchange never sent was taken");
            }
        }
        Ok(())
    }

    fn turn(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<FakeTurn> {
        let text = if u.arbitrary()? { Some(*u.choose(&["hi", "", "ünï ☃", "a\nb"])?) } else { None };
        let mut calls = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            self.next_id += 1;
            calls.push((format!("c{}", self.next_id), *u.choose(&MACHINE_TOOLS)?, *u.choose(&MACHINE_ARGS)?));
        }
        let stop = if u.ratio(1, 8)? { Some(*u.choose(&["max_tokens", "pause_turn", "refusal"])?) } else { None };
        Ok(FakeTurn { text, calls, stop })
    }
}

/// Data for an `ok` answer to `r`: relay results (some, all, or the
/// one-call shorthand), an in-doubt resolution, or plain data.
fn answer_data(u: &mut Unstructured<'_>, r: &Request) -> arbitrary::Result<Map<String, Value>> {
    let mut data = Map::new();
    match r.kind.as_str() {
        crate::suspend::KIND_TOOL_CALL => {
            let calls =
                r.data.as_ref().and_then(|d| d.get("calls")).and_then(Value::as_array).cloned().unwrap_or_default();
            if u.ratio(1, 4)? {
                data.insert("output".into(), json!("short"));
            } else {
                let mut results = Vec::new();
                for c in &calls {
                    if u.ratio(3, 4)? {
                        results
                            .push(json!({"id": c.get("id"), "output": "relayed", "isError": u.arbitrary::<bool>()?}));
                    }
                }
                data.insert("results".into(), Value::Array(results));
            }
        }
        crate::suspend::KIND_IN_DOUBT => match u.int_in_range(0..=2)? {
            0 => {
                data.insert("output".into(), json!("it ran"));
            }
            1 => {
                data.insert("rerun".into(), json!(true));
            }
            _ => {}
        },
        _ => {
            data.insert("token".into(), json!("t"));
        }
    }
    Ok(data)
}

fn has_result(transcript: &[Message], call_id: &str) -> bool {
    transcript.iter().any(|m| m.tool_results().any(|r| r.call_id == call_id))
}

/// Checks a request body on the wire, independently of the gate: each turn's
/// tool calls are answered, each exactly once, by the results of the very
/// next turn, and no result answers a call of any other turn.
/// Whether a request goes to a token counter instead of the model.
fn is_count(url: &str) -> bool {
    url.ends_with("/count_tokens") || url.ends_with(":countTokens") || url.ends_with("/input_tokens")
}

fn check_request(style: Style, req: &HttpRequest) {
    let body: Value = match serde_json::from_slice(&req.body) {
        Ok(v) => v,
        Err(e) => panic!("request body is not JSON: {e}"),
    };
    let strs = |v: Option<&Value>, key: &str| v.and_then(|x| x.get(key)).and_then(Value::as_str).map(str::to_string);
    // Per turn on the wire: (call keys, result keys). Gemini sends no call ids, so it is matched by name.
    let mut turns: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    let list = |key: &str| body.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
    match style {
        Style::Anthropic => {
            for m in list("messages") {
                let blocks = m.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
                let of = |ty: &str, key: &str| -> Vec<String> {
                    blocks
                        .iter()
                        .filter(|b| b.get("type") == Some(&json!(ty)))
                        .filter_map(|b| strs(Some(b), key))
                        .collect()
                };
                turns.push((of("tool_use", "id"), of("tool_result", "tool_use_id")));
            }
        }
        Style::OpenAi => {
            let mut prev_tool = false;
            for m in list("messages") {
                let is_tool = m.get("role") == Some(&json!("tool"));
                if is_tool {
                    let id = strs(Some(&m), "tool_call_id").unwrap_or_default();
                    match turns.last_mut() {
                        Some((_, results)) if prev_tool => results.push(id),
                        _ => turns.push((Vec::new(), vec![id])),
                    }
                } else {
                    let calls = m.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
                    turns.push((calls.iter().filter_map(|c| strs(Some(c), "id")).collect(), Vec::new()));
                }
                prev_tool = is_tool;
            }
        }
        Style::OpenAiResponses => {
            // A model turn is a run of output items; the outputs that follow it are its results.
            let mut prev_output = false;
            for item in list("input") {
                let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
                let is_output = matches!(kind, "reasoning" | "function_call")
                    || (kind == "message" && item.get("role") == Some(&json!("assistant")));
                // A new turn starts wherever the side changes (and at the start).
                if turns.is_empty() || is_output != prev_output {
                    turns.push((Vec::new(), Vec::new()));
                }
                if let Some((calls, results)) = turns.last_mut() {
                    match kind {
                        "function_call" => calls.extend(strs(Some(&item), "call_id")),
                        "function_call_output" => results.extend(strs(Some(&item), "call_id")),
                        _ => {}
                    }
                }
                prev_output = is_output;
            }
        }
        Style::Gemini => {
            for c in list("contents") {
                let parts = c.get("parts").and_then(Value::as_array).cloned().unwrap_or_default();
                let of = |key: &str| -> Vec<String> { parts.iter().filter_map(|p| strs(p.get(key), "name")).collect() };
                turns.push((of("functionCall"), of("functionResponse")));
            }
        }
    }
    assert!(!turns.is_empty(), "request without a conversation: {body}");
    for (i, (calls, results)) in turns.iter().enumerate() {
        let next = turns.get(i + 1).map(|t| sorted(&t.1)).unwrap_or_default();
        let prev = i.checked_sub(1).and_then(|p| turns.get(p)).map(|t| sorted(&t.0)).unwrap_or_default();
        if !calls.is_empty() {
            assert_eq!(sorted(calls), next, "calls of turn {i} not answered once each in the next turn: {body}");
        }
        if !results.is_empty() {
            assert_eq!(sorted(results), prev, "results of turn {i} do not answer the turn before: {body}");
        }
    }
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

/// An error body in the style's shape.
fn error_body(style: Style) -> Vec<u8> {
    let v = match style {
        Style::Anthropic => {
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
        }
        Style::OpenAi | Style::OpenAiResponses => {
            json!({"error": {"message": "busy", "type": "server_error", "code": null}})
        }
        Style::Gemini => {
            json!({"error": {"code": 503, "message": "busy", "status": "UNAVAILABLE"}})
        }
    };
    v.to_string().into_bytes()
}

/// The wire bytes of a scripted turn, whole or streamed, written from the
/// providers' documented shapes (not through the codecs under test).
pub(super) fn wire(style: Style, turn: &FakeTurn, stream: bool) -> Vec<u8> {
    let object = |raw: &str| match serde_json::from_str::<Value>(raw) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    };
    let has_calls = !turn.calls.is_empty();
    let mut out = String::new();
    match (style, stream) {
        (Style::Anthropic, false) => {
            let mut content: Vec<Value> = turn.text.iter().map(|t| json!({"type": "text", "text": t})).collect();
            for (id, name, args) in &turn.calls {
                content.push(json!({"type": "tool_use", "id": id, "name": name, "input": object(args)}));
            }
            let stop = turn.stop.unwrap_or(if has_calls { "tool_use" } else { "end_turn" });
            out = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": content,
                         "stop_reason": stop, "usage": {"input_tokens": 3, "output_tokens": 2}})
            .to_string();
        }
        (Style::Anthropic, true) => {
            let mut ev = |v: Value| {
                let name = v.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
                out.push_str(&format!("event: {name}\ndata: {v}\n\n"));
            };
            ev(json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                      "model": "m", "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}}));
            let mut index = 0;
            if let Some(t) = turn.text {
                ev(
                    json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
                );
                ev(json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}}));
                ev(json!({"type": "content_block_stop", "index": index}));
                index += 1;
            }
            for (id, name, args) in &turn.calls {
                ev(json!({"type": "content_block_start", "index": index,
                          "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}));
                let (a, b) = args.split_at(args.len() / 2);
                for piece in [a, b] {
                    ev(json!({"type": "content_block_delta", "index": index,
                              "delta": {"type": "input_json_delta", "partial_json": piece}}));
                }
                ev(json!({"type": "content_block_stop", "index": index}));
                index += 1;
            }
            let stop = turn.stop.unwrap_or(if has_calls { "tool_use" } else { "end_turn" });
            ev(json!({"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 2}}));
            ev(json!({"type": "message_stop"}));
        }
        (Style::OpenAi, false) => {
            let calls: Vec<Value> = turn
                .calls
                .iter()
                .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
                .collect();
            let mut message = json!({"role": "assistant", "content": turn.text});
            if has_calls {
                message["tool_calls"] = Value::Array(calls);
            }
            let finish = openai_finish(turn);
            out = json!({"id": "c", "object": "chat.completion", "model": "m",
                         "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
            .to_string();
        }
        (Style::OpenAi, true) => {
            let mut chunk = |delta: Value, finish: Value| {
                let v = json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
                               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
                out.push_str(&format!("data: {v}\n\n"));
            };
            chunk(json!({"role": "assistant", "content": turn.text}), Value::Null);
            for (i, (id, name, args)) in turn.calls.iter().enumerate() {
                let (a, b) = args.split_at(args.len() / 2);
                chunk(
                    json!({"tool_calls": [{"index": i, "id": id, "type": "function", "function": {"name": name, "arguments": a}}]}),
                    Value::Null,
                );
                chunk(json!({"tool_calls": [{"index": i, "function": {"arguments": b}}]}), Value::Null);
            }
            chunk(json!({}), json!(openai_finish(turn)));
            out.push_str("data: [DONE]\n\n");
        }
        (Style::OpenAiResponses, stream) => {
            let mut output: Vec<Value> = vec![json!({"id": "rs_1", "type": "reasoning", "summary": [],
                                                     "encrypted_content": "gAAAA"})];
            if let Some(t) = turn.text {
                output.push(json!({"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                                   "content": [{"type": "output_text", "text": t, "annotations": []}]}));
            }
            for (i, (id, name, args)) in turn.calls.iter().enumerate() {
                output.push(json!({"id": format!("fc_{i}"), "type": "function_call", "status": "completed",
                                   "call_id": id, "name": name, "arguments": args}));
            }
            let (status, reason) = match turn.stop {
                Some("max_tokens") => ("incomplete", json!({"reason": "max_output_tokens"})),
                Some(_) => ("incomplete", json!({"reason": "content_filter"})),
                None => ("completed", Value::Null),
            };
            let response = json!({"id": "resp_1", "object": "response", "status": status, "model": "m",
                                  "incomplete_details": reason, "output": output,
                                  "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}});
            if !stream {
                out = response.to_string();
            } else {
                let mut ev = |v: Value| {
                    let name = v.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
                    out.push_str(&format!("event: {name}\ndata: {v}\n\n"));
                };
                for (index, item) in output.iter().enumerate() {
                    ev(json!({"type": "response.output_item.added", "output_index": index, "item": item}));
                    if let Some(args) = item.get("arguments").and_then(Value::as_str) {
                        let (a, b) = args.split_at(args.len() / 2);
                        for piece in [a, b] {
                            ev(json!({"type": "response.function_call_arguments.delta", "output_index": index,
                                      "delta": piece}));
                        }
                    }
                    ev(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
                }
                let terminal = if status == "completed" { "response.completed" } else { "response.incomplete" };
                ev(json!({"type": terminal, "response": response}));
            }
        }
        (Style::Gemini, _) => {
            let mut parts: Vec<Value> = turn.text.iter().map(|t| json!({"text": t})).collect();
            for (_, name, args) in &turn.calls {
                parts.push(json!({"functionCall": {"name": name, "args": object(args)}}));
            }
            let finish = match turn.stop {
                Some("max_tokens") => "MAX_TOKENS",
                Some(_) => "SAFETY",
                None => "STOP",
            };
            let v = json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
                           "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5}});
            out = if stream { format!("data: {v}\r\n\r\n") } else { v.to_string() };
        }
    }
    out.into_bytes()
}

fn openai_finish(turn: &FakeTurn) -> &'static str {
    match turn.stop {
        Some("max_tokens") => "length",
        Some(_) => "content_filter",
        None if !turn.calls.is_empty() => "tool_calls",
        None => "stop",
    }
}
