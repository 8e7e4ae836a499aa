//! The exactly-once ledger of one turn's tool calls.
//!
//! Each call moves Requested → Started → Completed, or through a suspension:
//! Started → Pending → (answered) Requested → Started → Completed. Relay calls
//! wait as `Relay` until the turn's one `tool_call` request is answered. A
//! call found Started in a restored state is `InDoubt`: it may or may not
//! have run, so it is surfaced to the host, never silently re-run or dropped.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::InputError;
use crate::message::{ToolCall, ToolResultBlock};
use crate::suspend::{Answer, Request, ToolReply, ToolResult, KIND_IN_DOUBT, KIND_TOOL_CALL};

/// Where one call stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub(crate) enum CallState {
    /// To be handed to the driver (with the answer and the request it
    /// answers, when this is the retry of a suspension).
    Requested {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<Answer>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<Request>,
        /// Suspensions of this call answered so far.
        #[serde(default, skip_serializing_if = "crate::state::is_zero")]
        rounds: u32,
    },
    /// Handed to the driver; no reply yet.
    Started {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        answer: Option<Answer>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request: Option<Request>,
        #[serde(default, skip_serializing_if = "crate::state::is_zero")]
        rounds: u32,
    },
    /// The tool suspended on this request.
    Pending {
        request: Request,
        #[serde(default, skip_serializing_if = "crate::state::is_zero")]
        rounds: u32,
    },
    /// Declaration-only: waits for the turn's relay request to be answered.
    Relay,
    /// Restored while Started: the host must say what happened.
    InDoubt { request: Request },
    /// Done; the result is final.
    Completed { result: ToolResult },
    /// A sub-agent call: its child run, in progress (see `agent.rs`).
    Agent { agent: String, child: crate::agent::ChildRun },
}

/// How many times one call may suspend: a tool that still asks after this
/// many answered rounds gets the error result `unresolved: <prompt>`.
pub const MAX_SUSPENSION_ROUNDS: u32 = 16;

impl CallState {
    /// A call to run for the first time.
    pub(crate) fn requested() -> CallState {
        CallState::Requested { answer: None, request: None, rounds: 0 }
    }
}

/// One call in the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Entry {
    /// Shared with the turn's `ToolCallFinished` event (an `Arc` serializes
    /// as what it holds: the state's form is the call's own).
    pub call: Arc<ToolCall>,
    pub idempotency_key: String,
    #[serde(flatten)]
    pub state: CallState,
}

impl Entry {
    /// The call's entry, keyed `run/turn/call` so that a tool can tell a
    /// retry of a call from a new one.
    pub(crate) fn new(run_id: &str, turn: u32, call: Arc<ToolCall>, state: CallState) -> Entry {
        // Put together by hand: `format!` costs several times as much, per
        // call of every turn.
        let turn = turn.to_string();
        let idempotency_key = [run_id, "/", &turn, "/", &call.id].concat();
        Entry { call, idempotency_key, state }
    }
}

/// The tool calls of one model turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Batch {
    pub turn: u32,
    pub calls: Vec<Entry>,
    /// Id of the turn's relay request, when it has relay calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relay_request: Option<String>,
    /// Whether a `Suspended` output has been emitted for the current outstanding set.
    #[serde(default)]
    pub announced: bool,
}

/// A call handed to the driver to execute.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInvocation {
    /// The provider's call id.
    pub call_id: String,
    /// The tool to run.
    pub name: String,
    /// Parsed arguments.
    pub input: Value,
    /// Raw argument text as the provider sent it.
    pub arguments: String,
    /// Stable across retries and processes: `run_id/turn/call_id`. Tools with
    /// side effects can use it to make a re-run harmless.
    pub idempotency_key: String,
    /// Set when this is the retry of a suspended call: the host's answer.
    pub answer: Option<Answer>,
    /// Set with `answer`: the request it answers, exactly as the tool made it
    /// (so a tool can keep what it needs to go on in the request's `data`).
    pub request: Option<Request>,
}

/// A set of calls to run concurrently; feed each reply back by call id.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolBatch {
    /// The model turn these calls came from.
    pub turn: u32,
    /// The calls, in the order the model emitted them.
    pub calls: Vec<ToolInvocation>,
}

impl Batch {
    /// Moves every Requested call to Started and returns them as a batch.
    pub(crate) fn start_requested(&mut self) -> Option<ToolBatch> {
        let mut calls = Vec::new();
        for e in &mut self.calls {
            if let CallState::Requested { answer, request, rounds } = &mut e.state {
                let (answer, request, rounds) = (answer.take(), request.take(), *rounds);
                calls.push(ToolInvocation {
                    call_id: e.call.id.clone(),
                    name: e.call.name.clone(),
                    input: e.call.input.clone(),
                    arguments: e.call.arguments.clone(),
                    idempotency_key: e.idempotency_key.clone(),
                    answer: answer.clone(),
                    request: request.clone(),
                });
                e.state = CallState::Started { answer, request, rounds };
            }
        }
        (!calls.is_empty()).then_some(ToolBatch { turn: self.turn, calls })
    }

    /// Records a tool's reply. Returns the request when the call suspended.
    pub(crate) fn reply(&mut self, call_id: &str, reply: ToolReply) -> Result<Option<Request>, InputError> {
        let entry = self
            .calls
            .iter_mut()
            .find(|e| e.call.id == call_id && matches!(e.state, CallState::Started { .. }))
            .ok_or_else(|| InputError::UnknownToolCall(call_id.to_string()))?;
        let rounds = match &entry.state {
            CallState::Started { rounds, .. } => *rounds,
            _ => 0,
        };
        match reply {
            ToolReply::Done(result) => {
                entry.state = CallState::Completed { result };
                Ok(None)
            }
            ToolReply::Pending(request) if rounds >= MAX_SUSPENSION_ROUNDS => {
                // Asked too often: the run goes on with an error result.
                let result = ToolResult::error(format!("unresolved: {}", request.prompt));
                entry.state = CallState::Completed { result };
                Ok(None)
            }
            ToolReply::Pending(mut request) => {
                if request.id.is_empty() {
                    // Each round its own id: an answer to an earlier round never answers this one.
                    request.id = match rounds {
                        0 => format!("pnd_{}", entry.call.id),
                        n => format!("pnd_{}_{}", entry.call.id, n + 1),
                    };
                }
                entry.state = CallState::Pending { request: request.clone(), rounds };
                self.announced = false;
                Ok(Some(request))
            }
        }
    }

    /// Whether every call has left Requested/Started.
    pub(crate) fn settled(&self) -> bool {
        !self.calls.iter().any(|e| match &e.state {
            CallState::Requested { .. } | CallState::Started { .. } => true,
            CallState::Agent { child, .. } => !crate::agent::child_blocked(child),
            _ => false,
        })
    }

    /// Whether every call is Completed.
    pub(crate) fn complete(&self) -> bool {
        self.calls.iter().all(|e| matches!(e.state, CallState::Completed { .. }))
    }

    /// The outstanding requests, in call order: each pending or in-doubt call
    /// its own, and all relay calls together as ONE `tool_call` request placed
    /// at the first relay call.
    pub(crate) fn outstanding(&self) -> Vec<Request> {
        let mut out = Vec::new();
        let mut relay_done = false;
        for e in &self.calls {
            match &e.state {
                CallState::Pending { request, .. } | CallState::InDoubt { request } => out.push(request.clone()),
                CallState::Relay if !relay_done => {
                    relay_done = true;
                    out.push(self.relay_request());
                }
                _ => {}
            }
        }
        out
    }

    /// The calls waiting to be handed to the driver, in call order.
    pub(crate) fn requested_calls(&self) -> Vec<&ToolCall> {
        self.calls.iter().filter(|e| matches!(e.state, CallState::Requested { .. })).map(|e| &*e.call).collect()
    }

    fn relay_request(&self) -> Request {
        let relay: Vec<&Entry> = self.calls.iter().filter(|e| matches!(e.state, CallState::Relay)).collect();
        let calls: Vec<Value> = relay
            .iter()
            .map(|e| {
                json!({
                    "id": e.call.id,
                    "name": e.call.name,
                    "input": e.call.input,
                    "arguments": e.call.arguments,
                })
            })
            .collect();
        let names: Vec<&str> = relay.iter().map(|e| e.call.name.as_str()).collect();
        let mut data = Map::new();
        data.insert("calls".into(), Value::Array(calls));
        Request {
            id: self.relay_request.clone().unwrap_or_default(),
            kind: KIND_TOOL_CALL.into(),
            prompt: format!("relay tool call {} to the caller for execution", names.join(", ")),
            url: None,
            data: Some(data),
            expires_at: None,
        }
    }

    /// Applies an answer. Unknown ids are refused and nothing changes.
    pub(crate) fn answer(&mut self, answer: Answer) -> Result<(), InputError> {
        if self.relay_request.as_deref() == Some(answer.id.as_str())
            && self.calls.iter().any(|e| matches!(e.state, CallState::Relay))
        {
            self.answer_relay(&answer);
            self.announced = false;
            return Ok(());
        }
        let entry = self
            .calls
            .iter_mut()
            .find(|e| match &e.state {
                CallState::Pending { request, .. } | CallState::InDoubt { request } => request.id == answer.id,
                _ => false,
            })
            .ok_or_else(|| InputError::UnknownAnswer(answer.id.clone()))?;
        let (request, in_doubt, rounds) = match &entry.state {
            CallState::Pending { request, rounds } => (request.clone(), false, *rounds),
            CallState::InDoubt { request } => (request.clone(), true, 0),
            _ => unreachable!("matched above"),
        };
        let prompt = request.prompt.clone();
        entry.state = match (in_doubt, answer.ok) {
            (false, true) => CallState::Requested { answer: Some(answer), request: Some(request), rounds: rounds + 1 },
            (false, false) => CallState::Completed { result: declined(&answer, &prompt) },
            (true, true) => match supplied_result(answer.data.as_ref()) {
                Some(result) => CallState::Completed { result },
                None if answer.data.as_ref().and_then(|d| d.get("rerun")).and_then(Value::as_bool) == Some(true) => {
                    CallState::requested()
                }
                None => CallState::Completed {
                    result: ToolResult::error("in doubt: the host supplied neither a result nor a re-run"),
                },
            },
            (true, false) => CallState::Completed {
                result: ToolResult::error(format!(
                    "in doubt: {} may or may not have completed; it was not re-run",
                    entry.call.name
                )),
            },
        };
        self.announced = false;
        Ok(())
    }

    fn answer_relay(&mut self, answer: &Answer) {
        let relay_count = self.calls.iter().filter(|e| matches!(e.state, CallState::Relay)).count();
        let prompt = self.relay_request().prompt;
        let results = answer.data.as_ref().and_then(|d| d.get("results")).and_then(Value::as_array);
        for e in self.calls.iter_mut().filter(|e| matches!(e.state, CallState::Relay)) {
            let result = if !answer.ok {
                declined(answer, &prompt)
            } else if let Some(r) = results
                .and_then(|rs| rs.iter().find(|r| r.get("id").and_then(Value::as_str) == Some(e.call.id.as_str())))
            {
                result_from(r.as_object())
            } else if results.is_none()
                && relay_count == 1
                && answer.data.as_ref().is_some_and(|d| d.contains_key("output"))
            {
                result_from(answer.data.as_ref())
            } else {
                ToolResult::error(format!("no result supplied for relay call {} ({})", e.call.name, e.call.id))
            };
            e.state = CallState::Completed { result };
        }
    }

    /// Marks every Started call in doubt (used on restore).
    pub(crate) fn mark_in_doubt(&mut self) {
        for e in &mut self.calls {
            if matches!(e.state, CallState::Started { .. }) {
                let mut data = Map::new();
                data.insert("callId".into(), Value::String(e.call.id.clone()));
                data.insert("name".into(), Value::String(e.call.name.clone()));
                data.insert("input".into(), e.call.input.clone());
                data.insert("arguments".into(), Value::String(e.call.arguments.clone()));
                data.insert("idempotencyKey".into(), Value::String(e.idempotency_key.clone()));
                e.state = CallState::InDoubt {
                    request: Request {
                        id: format!("doubt_{}", e.call.id),
                        kind: KIND_IN_DOUBT.into(),
                        prompt: format!(
                            "tool {} was running when the run was saved and may or may not have completed: \
                             answer with data.output to supply its result, data.rerun=true to run it again, \
                             or ok=false to tell the model it did not run",
                            e.call.name
                        ),
                        url: None,
                        data: Some(data),
                        expires_at: None,
                    },
                };
                self.announced = false;
            }
        }
    }

    /// The result turn's blocks, in call order. Only valid when `complete()`.
    pub(crate) fn into_results(self) -> Vec<(ToolResultBlock, ToolResult)> {
        self.calls
            .into_iter()
            .filter_map(|e| match e.state {
                CallState::Completed { result } => {
                    // The call's event is usually gone by now: its strings move.
                    let (call_id, name) = match Arc::try_unwrap(e.call) {
                        Ok(call) => (call.id, call.name),
                        Err(shared) => (shared.id.clone(), shared.name.clone()),
                    };
                    let block =
                        ToolResultBlock { call_id, name, output: result.output.clone(), is_error: result.is_error };
                    Some((block, result))
                }
                _ => None,
            })
            .collect()
    }
}

/// The error result of an `ok: false` answer. The three standard reasons pick
/// the word; any other non-empty reason is what a person wrote, and the most
/// useful thing the model can read about why it may not go on, so it follows
/// the prompt verbatim.
fn declined(answer: &Answer, prompt: &str) -> ToolResult {
    match answer.reason.as_deref().map(str::trim) {
        Some("expired") => ToolResult::error(format!("expired: {prompt}")),
        Some("cancelled") => ToolResult::error(format!("cancelled: {prompt}")),
        None | Some("") | Some("declined") => ToolResult::error(format!("declined: {prompt}")),
        Some(reason) => ToolResult::error(format!("declined: {prompt} — reason: {reason}")),
    }
}

/// `{output, isError}` from an answer's data (relay results, in-doubt results).
fn result_from(data: Option<&Map<String, Value>>) -> ToolResult {
    let output = match data.and_then(|d| d.get("output")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let is_error = data.and_then(|d| d.get("isError")).and_then(Value::as_bool).unwrap_or(false);
    ToolResult { output, is_error, metadata: None }
}

fn supplied_result(data: Option<&Map<String, Value>>) -> Option<ToolResult> {
    data.filter(|d| d.contains_key("output")).map(|d| result_from(Some(d)))
}
