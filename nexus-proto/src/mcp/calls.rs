//! `tools/call`: sending, timers, progress, cancellation, results, and user
//! input (2026 multi round-trip requests, legacy live elicitation, `-32042`).

use serde_json::{json, Map, Value};

use super::content::tool_result;
use super::elicit::{request_for, response_for, InputAsk};
use super::jsonrpc::{code, RequestId, RpcError};
use super::session::{LiveElicit, Purpose, Session};
use super::types::*;
use crate::suspend::{Answer, Request, ToolResult};
use crate::time::Timestamp;

/// One call in progress.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Call {
    pub tool: String,
    pub arguments: Value,
    /// The JSON-RPC id of the request out for it, once sent.
    pub id: Option<i64>,
    /// Queued until the session is up.
    pub waiting_for_link: bool,
    /// Input rounds answered so far.
    pub round: u32,
    pub input_responses: Option<Map<String, Value>>,
    pub request_state: Option<String>,
    /// Progress never extends the call past this.
    pub hard_deadline: Option<Timestamp>,
}

/// What a resumed call's request says it was.
enum Resumed {
    /// A 2026 `input_required`: answer its inputs, echo its state.
    Inputs { asks: Vec<InputAsk>, state: Option<String>, round: u32 },
    /// A `-32042`: the call again once the user went to the URL.
    Retry { round: u32 },
    /// A legacy live elicitation: it ended with its call and cannot be answered now.
    Live,
    /// Not one of this session's requests (another suspension of the host's).
    Foreign,
}

fn classify(request: &Request, server: &str, tool: &str) -> Resumed {
    let Some(data) = request.data.as_ref() else { return Resumed::Foreign };
    let s = |k: &str| data.get(k).and_then(Value::as_str);
    if s("server") != Some(server) || s("tool") != Some(tool) {
        return Resumed::Foreign;
    }
    let round = data.get("round").and_then(Value::as_u64).unwrap_or(1).min(u32::MAX as u64) as u32;
    if data.get("live").and_then(Value::as_bool) == Some(true) {
        return Resumed::Live;
    }
    if data.get("retry").and_then(Value::as_bool) == Some(true) {
        return Resumed::Retry { round };
    }
    match data.get("inputs").and_then(Value::as_array) {
        Some(inputs) => Resumed::Inputs {
            asks: inputs.iter().filter_map(InputAsk::from_json).collect(),
            state: s("requestState").map(str::to_string),
            round,
        },
        None => Resumed::Foreign,
    }
}

impl Session {
    pub(super) fn start_call(&mut self, now: Timestamp, req: CallRequest) {
        let mut call = Call {
            tool: req.tool,
            arguments: req.arguments,
            id: None,
            waiting_for_link: true,
            round: 0,
            input_responses: None,
            request_state: None,
            hard_deadline: None,
        };
        if let Some(resume) = req.resume {
            match classify(&resume.request, &self.cfg.server, &call.tool) {
                Resumed::Inputs { asks, state, round } => {
                    let single = asks.len() == 1;
                    let responses: Map<String, Value> = asks
                        .iter()
                        .filter_map(|a| response_for(a, &resume.answer, single).map(|r| (a.key.clone(), r)))
                        .collect();
                    call.input_responses = Some(responses);
                    call.request_state = state;
                    call.round = round;
                }
                Resumed::Retry { round } => {
                    if !resume.answer.ok {
                        let result = declined(&resume.answer, &resume.request.prompt);
                        self.out.push_back(Output::CallDone { call: req.call, result });
                        return;
                    }
                    call.round = round;
                }
                Resumed::Live => {
                    let result = ToolResult::error(format!(
                        "MCP server {}: the question it asked during {} ended with that call; the call was not re-run",
                        self.cfg.server, call.tool
                    ));
                    self.out.push_back(Output::CallDone { call: req.call, result });
                    return;
                }
                Resumed::Foreign => {}
            }
        }
        self.calls.insert(req.call, call);
        self.pump(now);
    }

    /// Sends the `tools/call` of a queued call with a fresh id.
    pub(super) fn send_call(&mut self, now: Timestamp, key: &str) {
        let Some(call) = self.calls.get(key) else { return };
        let mut params = Map::new();
        params.insert("name".into(), Value::from(call.tool.as_str()));
        params.insert("arguments".into(), call.arguments.clone());
        // The token is the request's own id: unique among active requests by construction.
        let mut meta = Map::new();
        meta.insert("progressToken".into(), Value::from(self.next_id));
        params.insert("_meta".into(), Value::Object(meta));
        if let Some(r) = &call.input_responses {
            params.insert("inputResponses".into(), Value::Object(r.clone()));
        }
        if let Some(s) = &call.request_state {
            params.insert("requestState".into(), Value::from(s.as_str()));
        }
        let timeout = self.cfg.call_timeout_ms;
        let hard = now.plus_ms(self.cfg.call_max_ms.max(timeout));
        let id = self.send_request(now, "tools/call", params, Purpose::Call(key.to_string()), timeout, Some(key), true);
        if let Some(call) = self.calls.get_mut(key) {
            call.id = Some(id);
            call.waiting_for_link = false;
            call.hard_deadline = Some(hard);
        }
    }

    pub(super) fn on_progress(&mut self, now: Timestamp, params: &Value) {
        let Some(token) = params.get("progressToken").and_then(Value::as_i64) else { return };
        let Some((key, call)) = self.calls.iter().find(|(_, c)| c.id == Some(token)) else { return };
        let key = key.clone();
        let limit = call.hard_deadline.unwrap_or(now);
        if let Some(o) = self.outstanding.get_mut(&token) {
            if o.deadline.is_some() {
                o.deadline = Some(now.plus_ms(self.cfg.call_timeout_ms).min(limit).max(now));
            }
        }
        self.out.push_back(Output::Event(Event::Progress {
            call: key,
            progress: params.get("progress").and_then(Value::as_f64).unwrap_or(0.0),
            total: params.get("total").and_then(Value::as_f64),
            message: params.get("message").and_then(Value::as_str).map(str::to_string),
        }));
    }

    pub(super) fn on_call_result(&mut self, now: Timestamp, key: &str, result: Value) {
        let Some(call) = self.calls.get(key) else { return };
        let server = self.cfg.server.clone();
        let tool = call.tool.clone();
        match result.get("resultType").and_then(Value::as_str) {
            // No resultType is a complete result (what every legacy server sends).
            None | Some("complete") => {
                let schema = self
                    .tools
                    .as_ref()
                    .and_then(|ts| ts.iter().find(|t| t.name == tool))
                    .and_then(|t| t.output_schema.clone());
                let r = tool_result(&server, &tool, &result, schema.as_ref());
                self.finish_call(key, r);
            }
            Some("input_required") => self.on_input_required(now, key, &result),
            Some("task") => self.finish_call_error(
                key,
                format!("MCP server {server}: {tool} answered with a task, which this client did not ask for"),
            ),
            Some(other) => self.finish_call_error(
                key,
                format!("MCP server {server}: {tool} answered with an unknown resultType {other:?}"),
            ),
        }
    }

    fn on_input_required(&mut self, now: Timestamp, key: &str, result: &Value) {
        let Some(call) = self.calls.get(key) else { return };
        let (server, tool, round) = (self.cfg.server.clone(), call.tool.clone(), call.round);
        if round >= self.cfg.max_input_rounds {
            return self.finish_call_error(
                key,
                format!(
                    "MCP server {server}: {tool} still asked for input after {round} rounds; the call was given up"
                ),
            );
        }
        let mut asks = Vec::new();
        let mut other = Vec::new();
        if let Some(requests) = result.get("inputRequests").and_then(Value::as_object) {
            for (k, r) in requests {
                match r.get("method").and_then(Value::as_str) {
                    Some("elicitation/create") if self.cfg.elicitation => {
                        asks.push(InputAsk::from_params(k.clone(), r.get("params").unwrap_or(&Value::Null)))
                    }
                    m => other.push(m.unwrap_or("(no method)").to_string()),
                }
            }
        }
        let state = result.get("requestState").and_then(Value::as_str).map(str::to_string);
        if asks.is_empty() && other.is_empty() {
            // Only a state: retry at once with it.
            if let Some(c) = self.calls.get_mut(key) {
                c.round += 1;
                c.input_responses = None;
                c.request_state = state;
                c.id = None;
            }
            return self.send_call(now, key);
        }
        if asks.is_empty() {
            return self.finish_call_error(
                key,
                format!(
                    "MCP server {server}: {tool} needs {} from the client, which it does not provide",
                    other.join(", ")
                ),
            );
        }
        let mut extra = Map::new();
        if let Some(s) = state {
            extra.insert("requestState".into(), Value::from(s));
        }
        extra.insert("round".into(), Value::from(round + 1));
        let request = request_for(&server, &tool, &asks, extra);
        self.calls.remove(key);
        self.out.push_back(Output::CallSuspended { call: key.to_string(), request });
    }

    pub(super) fn on_call_error(&mut self, _now: Timestamp, key: &str, error: RpcError) {
        let Some(call) = self.calls.get(key) else { return };
        let (server, tool, round) = (self.cfg.server.clone(), call.tool.clone(), call.round);
        if error.code == code::URL_ELICITATION_REQUIRED {
            let asks: Vec<InputAsk> = error
                .data
                .as_ref()
                .and_then(|d| d.get("elicitations"))
                .and_then(Value::as_array)
                .map(|es| {
                    es.iter()
                        .enumerate()
                        .map(|(i, e)| {
                            let k = e
                                .get("elicitationId")
                                .and_then(Value::as_str)
                                .map_or_else(|| i.to_string(), str::to_string);
                            InputAsk::from_params(k, e)
                        })
                        .collect()
                })
                .unwrap_or_default();
            if !asks.is_empty() && round < self.cfg.max_input_rounds {
                let mut extra = Map::new();
                extra.insert("retry".into(), Value::Bool(true));
                extra.insert("round".into(), Value::from(round + 1));
                let mut request = request_for(&server, &tool, &asks, extra);
                if request.prompt.is_empty() {
                    request.prompt = error.message.clone();
                }
                self.calls.remove(key);
                self.out.push_back(Output::CallSuspended { call: key.to_string(), request });
                return;
            }
        }
        self.finish_call_error(key, format!("{} (MCP server {server}, {tool}, error {})", error.message, error.code));
    }

    pub(super) fn on_live_elicitation(
        &mut self,
        _now: Timestamp,
        id: RequestId,
        params: &Value,
        stream_of: Option<RequestId>,
    ) {
        let call = match stream_of {
            Some(RequestId::Num(n)) => match self.outstanding.get(&n).map(|o| &o.purpose) {
                Some(Purpose::Call(k)) => Some(k.clone()),
                _ => None,
            },
            _ => None,
        }
        .or_else(|| {
            // On stdio a request carries no link to a call: it is that call's when only one runs.
            let mut running = self.calls.iter().filter(|(_, c)| c.id.is_some());
            match (running.next(), running.next()) {
                (Some((k, _)), None) => Some(k.clone()),
                _ => None,
            }
        });
        let tool = call.as_ref().and_then(|k| self.calls.get(k)).map(|c| c.tool.clone()).unwrap_or_default();
        let ask = InputAsk::from_params(id.to_string(), params);
        let mut extra = Map::new();
        extra.insert("live".into(), Value::Bool(true));
        let mut request = request_for(&self.cfg.server, &tool, std::slice::from_ref(&ask), extra);
        request.id = format!("elicit_{}_{}", self.cfg.server, self.next_id);
        self.next_id += 1;
        // The user may take a while: the call's timer waits for the answer.
        if let Some(rid) = call.as_ref().and_then(|k| self.calls.get(k)).and_then(|c| c.id) {
            if let Some(o) = self.outstanding.get_mut(&rid) {
                o.deadline = None;
            }
        }
        self.live.insert(
            request.id.clone(),
            LiveElicit { server_id: id, call: call.clone(), ask, request: request.clone() },
        );
        self.out.push_back(Output::Elicit { call, request });
    }

    pub(super) fn answer_live(&mut self, now: Timestamp, live: LiveElicit, answer: &Answer) {
        let result = response_for(&live.ask, answer, true).unwrap_or_else(|| json!({"action": "cancel"}));
        self.respond(&live.server_id, result);
        self.resume_timer(now, live.call.as_deref());
    }

    /// Restarts a call's timer once none of its live elicitations waits.
    pub(super) fn resume_timer(&mut self, now: Timestamp, call: Option<&str>) {
        let Some(key) = call else { return };
        if self.live.values().any(|l| l.call.as_deref() == Some(key)) {
            return;
        }
        let timeout = self.cfg.call_timeout_ms;
        let Some(c) = self.calls.get_mut(key) else { return };
        let deadline = now.plus_ms(timeout);
        c.hard_deadline = Some(c.hard_deadline.map_or(deadline, |h| h.max(deadline)));
        if let Some(o) = c.id.and_then(|id| self.outstanding.get_mut(&id)) {
            o.deadline = Some(deadline);
        }
    }

    pub(super) fn cancel_call(&mut self, _now: Timestamp, key: &str, reason: &str) {
        if let Some(id) = self.calls.get(key).and_then(|c| c.id) {
            if self.outstanding.contains_key(&id) {
                self.send_cancelled(id, reason);
            }
        }
        let server = self.cfg.server.clone();
        self.finish_call_error(key, format!("MCP server {server}: the call was cancelled ({reason})"));
    }

    pub(super) fn finish_call_error(&mut self, key: &str, message: String) {
        self.finish_call(key, ToolResult::error(message));
    }

    fn finish_call(&mut self, key: &str, result: ToolResult) {
        if self.calls.remove(key).is_none() {
            return;
        }
        let withdrawn: Vec<String> =
            self.live.iter().filter(|(_, l)| l.call.as_deref() == Some(key)).map(|(k, _)| k.clone()).collect();
        for k in withdrawn {
            if let Some(l) = self.live.remove(&k) {
                // Nobody will answer it now: tell the server the user did not.
                self.respond(&l.server_id, json!({"action": "cancel"}));
                self.out.push_back(Output::Event(Event::ElicitationWithdrawn { request: k }));
            }
        }
        self.out.push_back(Output::CallDone { call: key.to_string(), result });
    }
}

fn declined(answer: &Answer, prompt: &str) -> ToolResult {
    let word = if answer.reason.as_deref() == Some("cancelled") { "cancelled" } else { "declined" };
    ToolResult::error(format!("{word}: {prompt}"))
}
