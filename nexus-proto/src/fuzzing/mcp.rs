//! The MCP session's fuzz body: one session under an arbitrary script of
//! server messages (well-formed answers to what it sent, server requests,
//! notifications, raw bytes), transport signals and host inputs, in any order.

use std::collections::{BTreeMap, BTreeSet};

use arbitrary::Unstructured;
use serde_json::{json, Value};

use crate::mcp::{
    jsonrpc, CallRequest, Era, HandleError, Input, Message, Output, RequestId, Resume, Session, SessionConfig,
    TransportKind,
};
use crate::suspend::{Answer, Request};
use crate::time::Timestamp;

const KEYS: [&str; 3] = ["c1", "c2", "c3"];
const TOOLS: [&str; 3] = ["echo", "ask", "gone"];

/// Drives one session through an arbitrary script. Checks: no panic; a
/// refused input changes nothing; every request id the session sends is
/// new; a server request is answered at most once while it is open, and
/// never one that was not asked; a `requestState` only ever travels in a
/// retry of the call it was given for; a call gets at most one final
/// outcome (result or suspension) per start; a `tools/call` goes out only
/// when the host started the call or its server asked for a retry
/// (`input_required`) — never again on its own after its stream was lost —
/// and only a legacy session reattaches a lost stream; `poll_output` always
/// settles.
pub fn mcp(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = Fuzz::start(&mut u).and_then(|mut f| f.go(&mut u));
}

struct Fuzz {
    s: Session,
    now: u64,
    /// Our request ids sent, with their method and call.
    sent: BTreeMap<i64, (String, Option<String>)>,
    /// Server request ids the session accepted and has not answered.
    open_server: BTreeSet<String>,
    next_server_id: i64,
    /// requestState → the call it was handed out for.
    states: BTreeMap<String, String>,
    next_state: u32,
    /// Calls started and not yet finished or suspended.
    active: BTreeSet<String>,
    suspended: Vec<(String, String, Request)>,
    live: Vec<String>,
    /// Per call: how many `tools/call` sends the inputs so far allow.
    may_send: BTreeMap<String, u32>,
    /// Per call: the id of its latest `tools/call`.
    latest: BTreeMap<String, i64>,
}

impl Fuzz {
    fn start(u: &mut Unstructured<'_>) -> arbitrary::Result<Fuzz> {
        let transport = if u.arbitrary()? { TransportKind::Http } else { TransportKind::Stdio };
        let mut cfg = SessionConfig::new("srv", transport);
        cfg.era = match u.int_in_range(0..=2)? {
            0 => None,
            1 => Some(Era::Legacy),
            _ => Some(Era::Modern),
        };
        cfg.elicitation = u.arbitrary()?;
        cfg.max_message_bytes = u.int_in_range(16..=4096)?;
        cfg.max_list_pages = u.int_in_range(1..=4)?;
        cfg.max_input_rounds = u.int_in_range(1..=4)?;
        let s = Session::new(cfg).unwrap_or_else(|e| panic!("a valid config was refused: {e}"));
        Ok(Fuzz {
            s,
            now: 0,
            sent: BTreeMap::new(),
            open_server: BTreeSet::new(),
            next_server_id: 1,
            states: BTreeMap::new(),
            next_state: 0,
            active: BTreeSet::new(),
            suspended: Vec::new(),
            live: Vec::new(),
            may_send: BTreeMap::new(),
            latest: BTreeMap::new(),
        })
    }

    fn go(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
        for _ in 0..64 {
            if u.is_empty() {
                break;
            }
            self.step(u)?;
            self.drain();
        }
        Ok(())
    }

    fn feed(&mut self, input: Input<'_>) -> Result<(), HandleError> {
        let before = format!("{:?}", self.s);
        let r = self.s.handle_input(Timestamp(self.now), input);
        if r.is_err() {
            assert_eq!(before, format!("{:?}", self.s), "a refused input changed the session");
        }
        r
    }

    fn step(&mut self, u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
        match u.int_in_range(0..=16)? {
            16 => {
                let id = self.pick_sent(u)?;
                let last_event_id = match u.int_in_range(0..=2)? {
                    0 => None,
                    1 => Some(String::new()),
                    _ => Some(format!("ev-{}", u.int_in_range(0..=9)?)),
                };
                // Whatever comes of it, the call is not sent again unless asked (checked on transmit).
                let _ = self.feed(Input::StreamLost { id: RequestId::Num(id), last_event_id });
            }
            0 | 1 => {
                let call = u.choose(&KEYS)?.to_string();
                let tool = u.choose(&TOOLS)?.to_string();
                let ok = self.feed(Input::Call(CallRequest {
                    call: call.clone(),
                    tool,
                    arguments: json!({"x": 1}),
                    resume: None,
                }));
                if ok.is_ok() {
                    *self.may_send.entry(call.clone()).or_default() += 1;
                    self.active.insert(call);
                }
            }
            2 => {
                if !self.suspended.is_empty() {
                    let i = u.choose_index(self.suspended.len())?;
                    let (call, tool, request) = self.suspended.remove(i);
                    let answer = self.answer_for(u, &request.id)?;
                    let r = self.feed(Input::Call(CallRequest {
                        call: call.clone(),
                        tool,
                        arguments: json!({"x": 1}),
                        resume: Some(Resume { request, answer }),
                    }));
                    if r.is_ok() {
                        *self.may_send.entry(call.clone()).or_default() += 1;
                        self.active.insert(call);
                    }
                }
            }
            3 => {
                let _ = self.feed(Input::ListTools);
            }
            4 => {
                let call = u.choose(&KEYS)?.to_string();
                if self.feed(Input::Cancel { call: call.clone() }).is_ok() {
                    assert!(self.active.contains(&call), "a cancel for a call not active was accepted");
                }
            }
            5 => {
                let id = if !self.live.is_empty() && u.arbitrary()? {
                    let i = u.choose_index(self.live.len())?;
                    self.live.remove(i)
                } else {
                    "elicit_nope".to_string()
                };
                let answer = self.answer_for(u, &id)?;
                let _ = self.feed(Input::Answer(answer));
            }
            6 => {
                self.now += u.int_in_range(0..=120_000)?;
                let _ = self.feed(Input::Timeout);
            }
            7 => {
                let _ = self.feed(Input::Closed { reason: "gone".into() });
                self.open_server.clear();
            }
            8 => {
                let _ = self.feed(Input::SessionExpired);
                self.open_server.clear();
            }
            9 => {
                let id = self.pick_sent(u)?;
                let _ =
                    self.feed(Input::Refused { id: RequestId::Num(id), status: *u.choose(&[400u16, 404, 405, 500])? });
            }
            10 => {
                let bytes: Vec<u8> = u.arbitrary()?;
                let _ = self.feed(Input::Received { message: &bytes, stream_of: None });
            }
            11 => {
                let id = self.next_server_id;
                self.next_server_id += 1;
                let method =
                    *u.choose(&["ping", "elicitation/create", "sampling/createMessage", "roots/list", "x/y"])?;
                let params = json!({"message": "Name?", "requestedSchema": {"type": "object", "properties": {"n": {"type": "string", "default": "d"}}}});
                let msg = jsonrpc::request(&RequestId::Num(id), method, Some(&params));
                let stream_of = if u.arbitrary()? { Some(RequestId::Num(self.pick_sent(u)?)) } else { None };
                if self.feed(Input::Received { message: &msg, stream_of }).is_ok() {
                    self.open_server.insert(RequestId::Num(id).to_string());
                }
            }
            12 => {
                let note = match u.int_in_range(0..=3)? {
                    0 => jsonrpc::notification("notifications/tools/list_changed", None),
                    1 => jsonrpc::notification(
                        "notifications/progress",
                        Some(&json!({"progressToken": self.pick_sent(u)?, "progress": 1})),
                    ),
                    2 => jsonrpc::notification(
                        "notifications/cancelled",
                        Some(&json!({"requestId": u.int_in_range(0..=self.next_server_id)?})),
                    ),
                    _ => jsonrpc::notification("notifications/message", Some(&json!({"level": "info", "data": "x"}))),
                };
                let _ = self.feed(Input::Received { message: &note, stream_of: None });
            }
            _ => {
                let id = self.pick_sent(u)?;
                let (method, call) = self.sent.get(&id).cloned().unwrap_or_default();
                let body = self.answer_to(u, id, &method, call.as_deref())?;
                let _ = self.feed(Input::Received { message: &body, stream_of: None });
            }
        }
        Ok(())
    }

    fn answer_for(&self, u: &mut Unstructured<'_>, id: &str) -> arbitrary::Result<Answer> {
        Ok(match u.int_in_range(0..=3)? {
            0 => Answer::declined(id, "cancelled"),
            1 => Answer::declined(id, "declined"),
            2 => Answer::ok(id, serde_json::from_value(json!({"n": "v"})).ok()),
            _ => Answer::ok(id, serde_json::from_value(json!({"responses": {"k1": {"n": "v"}}})).ok()),
        })
    }

    fn pick_sent(&self, u: &mut Unstructured<'_>) -> arbitrary::Result<i64> {
        let ids: Vec<i64> = self.sent.keys().copied().collect();
        if ids.is_empty() || u.ratio(1, 8)? {
            return u.int_in_range(0..=50);
        }
        Ok(*u.choose(&ids)?)
    }

    /// A server's answer to request `id` of `method`.
    fn answer_to(
        &mut self,
        u: &mut Unstructured<'_>,
        id: i64,
        method: &str,
        call: Option<&str>,
    ) -> arbitrary::Result<Vec<u8>> {
        let rid = RequestId::Num(id);
        if u.ratio(1, 6)? {
            let code = *u.choose(&[-32601i64, -32602, -32022, -32021, -32042, -32603])?;
            let supported = match u.int_in_range(0..=3)? {
                0 => json!(["2025-06-18"]),
                1 => json!(["2026-07-28"]),
                2 => json!(["1999-01-01"]),
                _ => json!("not a list"),
            };
            let data = json!({"supported": supported, "elicitations": [{"mode": "url", "url": "https://x.example/a", "message": "go", "elicitationId": "e1"}]});
            let v = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": "no", "data": data}});
            return Ok(serde_json::to_vec(&v).unwrap_or_default());
        }
        let result = match method {
            "server/discover" => {
                json!({"resultType": "complete", "supportedVersions": [*u.choose(&["2026-07-28", "2025-11-25", "1999-01-01"])?], "capabilities": {"tools": {"listChanged": true}}})
            }
            "initialize" => {
                json!({"protocolVersion": *u.choose(&["2025-11-25", "2024-11-05", "2030-01-01"])?, "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}})
            }
            "tools/list" => {
                let mut r = json!({"tools": [
                    {"name": "echo", "inputSchema": {"type": "object"}},
                    {"name": "ask", "inputSchema": {"type": "object", "properties": {"r": {"type": "string", "x-mcp-header": "R"}}}, "outputSchema": {"type": "object", "required": ["v"]}}
                ]});
                if u.arbitrary()? {
                    r["nextCursor"] = Value::from(*u.choose(&["a", "b"])?);
                }
                r
            }
            _ => match u.int_in_range(0..=4)? {
                0 => {
                    json!({"content": [{"type": "text", "text": "ok"}, {"type": "image", "data": "AAAA", "mimeType": "image/png"}], "structuredContent": {"v": 1}})
                }
                1 => json!({"content": [], "isError": true}),
                2 => json!({"resultType": "bogus"}),
                _ => {
                    if let Some(c) = call.filter(|c| self.latest.get(*c) == Some(&id) && self.active.contains(*c)) {
                        // The server asks for the call again.
                        *self.may_send.entry(c.to_string()).or_default() += 1;
                    }
                    self.next_state += 1;
                    let state = format!("st-{}", self.next_state);
                    if let Some(c) = call {
                        self.states.insert(state.clone(), c.to_string());
                    }
                    let mut r = json!({"resultType": "input_required", "requestState": state});
                    if u.arbitrary()? {
                        r["inputRequests"] = json!({"k1": {"method": "elicitation/create", "params": {"message": "Name?", "requestedSchema": {"type": "object", "properties": {"n": {"type": "string"}}}}}});
                    }
                    r
                }
            },
        };
        Ok(jsonrpc::response(&rid, result))
    }

    /// Polls until `Wait`, checking every output.
    fn drain(&mut self) {
        for _ in 0..10_000 {
            match self.s.poll_output() {
                Output::Wait { .. } => return,
                Output::Transmit(t) => self.check_transmit(t.message, t.id, t.call),
                Output::CallDone { call, .. } => {
                    assert!(self.active.remove(&call), "a result for call {call} which is not active");
                    self.may_send.remove(&call);
                }
                Output::CallSuspended { call, request } => {
                    assert!(self.active.remove(&call), "a suspension for call {call} which is not active");
                    self.may_send.remove(&call);
                    let tool = request
                        .data
                        .as_ref()
                        .and_then(|d| d.get("tool"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    self.suspended.push((call, tool, request));
                }
                Output::Elicit { request, .. } => self.live.push(request.id),
                Output::Reattach { id, last_event_id } => {
                    let RequestId::Num(n) = id else { panic!("reattach of a non-numeric id") };
                    assert!(self.sent.contains_key(&n), "reattach of request {n}, never sent");
                    assert!(!last_event_id.is_empty(), "reattach without an event id");
                    assert_ne!(
                        self.s.discovery().map(|d| d.era),
                        Some(Era::Modern),
                        "a modern session reattached a stream"
                    );
                }
                Output::Abandon { .. } | Output::ToolsListed { .. } | Output::ToolsFailed { .. } | Output::Event(_) => {
                }
            }
        }
        panic!("poll_output never settled");
    }

    fn check_transmit(&mut self, message: Vec<u8>, id: Option<RequestId>, call: Option<String>) {
        let msg =
            jsonrpc::decode(&message, usize::MAX).unwrap_or_else(|e| panic!("the session sent a bad message: {e}"));
        match msg {
            Message::Request { id: RequestId::Num(n), method, params } => {
                assert_eq!(id, Some(RequestId::Num(n)), "Transmit.id differs from the message's id");
                if method == "tools/call" {
                    let key = call.clone().unwrap_or_default();
                    let credit = self.may_send.entry(key.clone()).or_default();
                    assert!(*credit > 0, "tools/call for {key} sent again without being asked");
                    *credit -= 1;
                    self.latest.insert(key, n);
                }
                assert!(!self.sent.contains_key(&n), "request id {n} sent twice");
                if let Some(state) = params.as_ref().and_then(|p| p.get("requestState")).and_then(Value::as_str) {
                    assert_eq!(method, "tools/call", "a requestState in {method}");
                    assert_eq!(
                        self.states.get(state).map(String::as_str),
                        call.as_deref(),
                        "requestState {state} leaked into another call"
                    );
                }
                self.sent.insert(n, (method, call));
            }
            Message::Request { .. } => panic!("the session sent a request with a non-numeric id"),
            Message::Response { id, .. } | Message::Error { id: Some(id), .. } => {
                assert!(self.open_server.remove(&id.to_string()), "server request {id} answered twice or never asked");
            }
            Message::Error { id: None, .. } => panic!("an error response without an id"),
            Message::Notification { .. } => {}
        }
    }
}
