//! Responses streams: `event: <type>` + `data: <json>`, no `[DONE]`; the
//! stream ends with `response.completed`, `response.incomplete` or
//! `response.failed`, and one that ends without any of them is truncated.
//!
//! Every item event carries `output_index`, and that is what state is keyed
//! by: some servers rotate `item_id` on every event of one item, others use
//! ids of their own shape. `sequence_number` is optional (2025-03 streams
//! have none) and not needed: SSE over one connection is ordered.
//!
//! The turn is made of each slot's `output_item.done` item (the complete one:
//! the reasoning item's `encrypted_content` there is the one to send back),
//! read by the same code as a whole body. A slot that never got its `.done`
//! is rebuilt from its `output_item.added` item and its deltas. The function
//! name is taken from `output_item.added` when a later event lacks it.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{failed, Ending, Item};
use crate::error::{DecodeError, RemoteError};
use crate::event::StreamEvent;
use crate::provider::{CallIds, Style, TurnResponse};
use crate::sse::SseEvent;

/// Incremental stream assembler: SSE events in, deltas out, one
/// [`TurnResponse`] at the end, equal to what [`super::decode_response`]
/// gives for the same response as one body.
#[derive(Debug, Clone, Default)]
pub struct Assembler {
    /// One per `output_index`, in order of first appearance.
    slots: Vec<Slot>,
    /// The model, from `response.created` until the terminal event says.
    model: Option<String>,
    /// The terminal event's reading, once it came.
    ending: Option<Ending>,
    /// The terminal response's `output`, used when no item event came at all.
    final_output: Vec<Value>,
    /// A delta has been appended.
    emitted: bool,
    /// An error event or `response.failed` ended the stream.
    failed: Option<RemoteError>,
}

/// One output item being assembled.
#[derive(Debug, Clone, Default)]
struct Slot {
    index: i64,
    /// The item of `output_item.added`.
    added: Option<Map<String, Value>>,
    /// The item of `output_item.done`.
    done: Option<Value>,
    /// `output_text` / `refusal` parts by `content_index`: (text, is refusal).
    parts: Vec<(i64, String, bool)>,
    /// Summary parts by `summary_index`.
    summary: Vec<(i64, String)>,
    /// `reasoning_text` parts by `content_index`.
    reasoning: Vec<(i64, String)>,
    arguments: String,
    /// `function_call_arguments.done` arrived with the whole text.
    arguments_done: Option<String>,
    /// The call id announced in `ToolCallStarted`.
    call_id: Option<String>,
}

impl Assembler {
    /// Feeds one SSE event; appends the deltas it yields to `out`.
    pub fn push(
        &mut self,
        event: &SseEvent,
        _ids: &mut CallIds,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), RemoteError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if self.ending.is_some() {
            return Ok(());
        }
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let payload: Payload<'_> = match serde_json::from_str(data) {
            Ok(p) => p,
            Err(e) => {
                if event.event.as_deref() == Some("error") {
                    return Err(self.fail(Style::OpenAiResponses.decode_error(None, None, data.as_bytes()).into()));
                }
                return Err(self.fail(crate::provider::serde_failure(e, data.as_bytes()).into()));
            }
        };
        let kind = payload.kind.as_deref().or(event.event.as_deref()).unwrap_or_default();
        match kind {
            "error" => {
                return Err(self.fail(Style::OpenAiResponses.decode_error(None, None, data.as_bytes()).into()));
            }
            "response.failed" => {
                let response = payload.response.unwrap_or_default();
                return Err(self.fail(failed(&response, data.as_bytes())));
            }
            "response.completed" | "response.incomplete" => {
                let mut response = payload.response.unwrap_or_default();
                if let Some(Value::Array(output)) = response.remove("output") {
                    self.final_output = output;
                }
                let mut ending = Ending::read(&response);
                if ending.model.is_none() {
                    ending.model = self.model.take();
                }
                self.ending = Some(ending);
            }
            "response.created" | "response.in_progress" | "response.queued" => {
                if let Some(model) = payload.response.as_ref().and_then(|r| r.get("model")).and_then(Value::as_str) {
                    if !model.is_empty() {
                        self.model = Some(model.to_string());
                    }
                }
            }
            "response.output_item.added" => {
                let Some(Value::Object(item)) = payload.item else { return Ok(()) };
                let pos = self.slot(payload.output_index);
                let slot = &mut self.slots[pos];
                let is_call = item.get("type").and_then(Value::as_str) == Some("function_call");
                if is_call && slot.call_id.is_none() {
                    let id = item.get("call_id").and_then(Value::as_str).unwrap_or_default().to_string();
                    let name = item.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
                    slot.call_id = Some(id.clone());
                    // Argument pieces that came before the item are shown now.
                    let pending = slot.arguments.clone();
                    slot.added = Some(item);
                    self.emit(out, StreamEvent::ToolCallStarted { id: id.clone(), name });
                    if !pending.is_empty() {
                        self.emit(out, StreamEvent::ToolCallDelta { id, arguments: pending });
                    }
                } else {
                    slot.added = Some(item);
                }
            }
            "response.output_item.done" => {
                let Some(item @ Value::Object(_)) = payload.item else { return Ok(()) };
                let pos = self.slot(payload.output_index);
                self.slots[pos].done = Some(item);
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let Some(delta) = payload.delta.filter(|d| !d.is_empty()) else { return Ok(()) };
                let refusal = kind == "response.refusal.delta";
                let pos = self.slot(payload.output_index);
                let at = payload.content_index.unwrap_or(0);
                let parts = &mut self.slots[pos].parts;
                match parts.iter_mut().find(|(i, _, _)| *i == at) {
                    Some((_, text, _)) => text.push_str(&delta),
                    None => parts.push((at, delta.clone(), refusal)),
                }
                self.emit(out, StreamEvent::TextDelta { text: delta });
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let Some(delta) = payload.delta.filter(|d| !d.is_empty()) else { return Ok(()) };
                let pos = self.slot(payload.output_index);
                let slot = &mut self.slots[pos];
                let (parts, at) = if kind == "response.reasoning_text.delta" {
                    (&mut slot.reasoning, payload.content_index.unwrap_or(0))
                } else {
                    (&mut slot.summary, payload.summary_index.unwrap_or(0))
                };
                match parts.iter_mut().find(|(i, _)| *i == at) {
                    Some((_, text)) => text.push_str(&delta),
                    None => parts.push((at, delta.clone())),
                }
                self.emit(out, StreamEvent::ReasoningDelta { text: delta });
            }
            "response.function_call_arguments.delta" => {
                let Some(delta) = payload.delta.filter(|d| !d.is_empty()) else { return Ok(()) };
                let pos = self.slot(payload.output_index);
                let slot = &mut self.slots[pos];
                slot.arguments.push_str(&delta);
                if let Some(id) = slot.call_id.clone() {
                    self.emit(out, StreamEvent::ToolCallDelta { id, arguments: delta });
                }
            }
            "response.function_call_arguments.done" => {
                let pos = self.slot(payload.output_index);
                if let Some(arguments) = payload.arguments {
                    self.slots[pos].arguments_done = Some(arguments);
                }
            }
            // Everything else (part boundaries, `.done` echoes of text already
            // streamed, annotations, hosted-tool progress, events added later)
            // adds nothing the items do not carry.
            _ => {}
        }
        Ok(())
    }

    /// The assembled turn, or [`DecodeError::Truncated`] when no terminal
    /// event (`response.completed` / `.incomplete` / `.failed`) came.
    pub fn finish(&mut self) -> Result<TurnResponse, RemoteError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let Some(ending) = self.ending.clone() else {
            return Err(DecodeError::Truncated("the stream ended before `response.completed`".into()).into());
        };
        let mut slots: Vec<&Slot> = self.slots.iter().collect();
        slots.sort_by_key(|s| s.index);
        let values: Vec<Value> = if slots.is_empty() {
            self.final_output.clone()
        } else {
            slots.into_iter().filter_map(Slot::item).collect()
        };
        let mut items = Vec::with_capacity(values.len());
        for value in values {
            items.push(Item::read(value)?);
        }
        Ok(ending.into_turn(items))
    }

    /// Whether any delta has been appended.
    pub fn emitted_anything(&self) -> bool {
        self.emitted
    }

    fn fail(&mut self, err: RemoteError) -> RemoteError {
        self.failed = Some(err.clone());
        err
    }

    fn emit(&mut self, out: &mut Vec<StreamEvent>, event: StreamEvent) {
        self.emitted = true;
        out.push(event);
    }

    /// The slot of an `output_index` (a missing index is 0), made when new.
    fn slot(&mut self, index: Option<i64>) -> usize {
        let index = index.unwrap_or(0);
        match self.slots.iter().position(|s| s.index == index) {
            Some(pos) => pos,
            None => {
                self.slots.push(Slot { index, ..Slot::default() });
                self.slots.len() - 1
            }
        }
    }
}

impl Slot {
    /// The slot's item: the `.done` one (with the name from `.added` when it
    /// lacks one), else rebuilt from `.added` and the deltas.
    fn item(&self) -> Option<Value> {
        let added_name =
            self.added.as_ref().and_then(|a| a.get("name")).filter(|n| n.as_str().is_some_and(|s| !s.is_empty()));
        if let Some(Value::Object(done)) = &self.done {
            let mut done = done.clone();
            if done.get("type").and_then(Value::as_str) == Some("function_call") {
                let has_name = done.get("name").and_then(Value::as_str).is_some_and(|s| !s.is_empty());
                if let (false, Some(name)) = (has_name, added_name) {
                    done.insert("name".into(), name.clone());
                }
            }
            return Some(Value::Object(done));
        }
        let mut item = self.added.clone()?;
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                let mut parts: Vec<&(i64, String, bool)> = self.parts.iter().collect();
                parts.sort_by_key(|p| p.0);
                let content = parts
                    .into_iter()
                    .map(|(_, text, refusal)| {
                        if *refusal {
                            serde_json::json!({ "type": "refusal", "refusal": text })
                        } else {
                            serde_json::json!({ "type": "output_text", "text": text, "annotations": [] })
                        }
                    })
                    .collect();
                item.insert("content".into(), Value::Array(content));
            }
            Some("reasoning") => {
                let joined = |parts: &[(i64, String)], kind: &str| -> Vec<Value> {
                    let mut parts: Vec<&(i64, String)> = parts.iter().collect();
                    parts.sort_by_key(|p| p.0);
                    parts.into_iter().map(|(_, text)| serde_json::json!({ "type": kind, "text": text })).collect()
                };
                item.insert("summary".into(), Value::Array(joined(&self.summary, "summary_text")));
                if !self.reasoning.is_empty() {
                    item.insert("content".into(), Value::Array(joined(&self.reasoning, "reasoning_text")));
                }
            }
            Some("function_call") => {
                let arguments = self.arguments_done.clone().unwrap_or_else(|| self.arguments.clone());
                item.insert("arguments".into(), Value::String(arguments));
            }
            _ => {}
        }
        Some(Value::Object(item))
    }
}

/// One event payload: the fields any event type uses, all optional.
#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(default, rename = "type")]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    response: Option<Map<String, Value>>,
    #[serde(default)]
    item: Option<Value>,
    #[serde(default)]
    output_index: Option<i64>,
    #[serde(default)]
    content_index: Option<i64>,
    #[serde(default)]
    summary_index: Option<i64>,
    #[serde(default)]
    delta: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}
