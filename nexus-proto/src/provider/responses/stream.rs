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

use super::read::{read_items, WireItem, WireResponse};
use super::{failed, reasoning_text, Ending, Item};
use crate::error::{DecodeError, RemoteError};
use crate::event::StreamEvent;
use crate::provider::wire::{Object, Strict, WireStr};
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
    /// The terminal response's `output` (`None` for an item that is not an
    /// object), used when no item event came at all.
    final_output: Vec<Option<Item>>,
    /// A delta has been appended.
    emitted: bool,
    /// An error event or `response.failed` ended the stream.
    failed: Option<RemoteError>,
}

/// One output item being assembled.
#[derive(Debug, Clone, Default)]
struct Slot {
    index: i64,
    /// The data of the `output_item.added` event, read again only when it
    /// is needed (no `.done` came, or the `.done` call lacks its name): it
    /// is not built for the usual stream, where `.done` supersedes it.
    added: Option<String>,
    /// The item of `output_item.done`.
    done: Option<Item>,
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
                // Rare, and read whole: the error's code, type and message.
                let response = match whole(data).and_then(|mut v| v.get_mut("response").map(Value::take)) {
                    Some(Value::Object(response)) => response,
                    _ => Map::new(),
                };
                return Err(self.fail(failed(&response, data.as_bytes())));
            }
            "response.completed" | "response.incomplete" => {
                let mut response = payload.response.map(|r| r.0).unwrap_or_default();
                if self.slots.is_empty() {
                    if let Some(wire) = response.output.take().and_then(|o| o.0) {
                        // A reasoning item (kept verbatim) is taken from the whole event.
                        let mut event = None;
                        let value_of = |index: usize| {
                            let event = event.get_or_insert_with(|| whole(data)).as_mut()?;
                            Some(event.get_mut("response")?.get_mut("output")?.get_mut(index)?.take())
                        };
                        self.final_output = read_items(wire, value_of).unwrap_or_default();
                    }
                }
                let mut ending = response.ending();
                if ending.model.is_none() {
                    ending.model = self.model.take();
                }
                self.ending = Some(ending);
            }
            "response.created" | "response.in_progress" | "response.queued" => {
                if let Some(model) = payload.response.and_then(|r| r.0.model.0).filter(|m| !m.is_empty()) {
                    self.model = Some(model.into_owned());
                }
            }
            "response.output_item.added" => {
                let Some(Object(Some(wire))) = payload.item else { return Ok(()) };
                let pos = self.slot(payload.output_index);
                let slot = &mut self.slots[pos];
                slot.added = Some(data.to_string());
                if wire.is_call() && slot.call_id.is_none() {
                    let id = wire.call_id().to_string();
                    slot.call_id = Some(id.clone());
                    // Argument pieces that came before the item are shown now.
                    let pending = slot.arguments.clone();
                    self.emit(
                        out,
                        StreamEvent::ToolCallStarted { id: id.clone(), name: wire.name_or_empty().to_string() },
                    );
                    if !pending.is_empty() {
                        self.emit(out, StreamEvent::ToolCallDelta { id, arguments: pending });
                    }
                }
            }
            "response.output_item.done" => {
                let Some(Object(Some(wire))) = payload.item else { return Ok(()) };
                let Some(item) = item_of(wire, data) else { return Ok(()) };
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
                    None => parts.push((at, delta.to_string(), refusal)),
                }
                self.emit(out, StreamEvent::TextDelta { text: delta.into_owned() });
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
                    None => parts.push((at, delta.to_string())),
                }
                self.emit(out, StreamEvent::ReasoningDelta { text: delta.into_owned() });
            }
            "response.function_call_arguments.delta" => {
                let Some(delta) = payload.delta.filter(|d| !d.is_empty()) else { return Ok(()) };
                let pos = self.slot(payload.output_index);
                let slot = &mut self.slots[pos];
                slot.arguments.push_str(&delta);
                if let Some(id) = slot.call_id.clone() {
                    self.emit(out, StreamEvent::ToolCallDelta { id, arguments: delta.into_owned() });
                }
            }
            "response.function_call_arguments.done" => {
                let pos = self.slot(payload.output_index);
                if let Some(arguments) = payload.arguments {
                    self.slots[pos].arguments_done = Some(arguments.into_owned());
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
        let items: Vec<Item> = if self.slots.is_empty() {
            let items: Option<Vec<Item>> = self.final_output.iter().cloned().collect();
            items.ok_or_else(|| DecodeError::Shape("an output item is not an object".into()))?
        } else {
            let mut slots: Vec<&Slot> = self.slots.iter().collect();
            slots.sort_by_key(|s| s.index);
            slots.into_iter().filter_map(Slot::item).collect()
        };
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

/// An event's data as a whole value (already read narrowly, so it parses).
fn whole(data: &str) -> Option<Value> {
    serde_json::from_str(data).ok()
}

/// The item of an `output_item.*` event; a reasoning or compaction item,
/// which goes back verbatim, is read from the whole event.
fn item_of(wire: WireItem<'_>, data: &str) -> Option<Item> {
    if !wire.is_kept_whole() {
        return wire.into_item();
    }
    Item::read(whole(data)?.get_mut("item")?.take()).ok()
}

/// The item of a kept `output_item.added` event and its `name` when that is
/// a non-empty string (the event was read once already, so it reads again).
fn added_item(data: &str) -> Option<(Item, Option<String>)> {
    let payload: Payload<'_> = serde_json::from_str(data).ok()?;
    let Some(Object(Some(wire))) = payload.item else { return None };
    let name = wire.name().map(str::to_string);
    Some((item_of(wire, data)?, name))
}

impl Slot {
    /// The slot's item: the `.done` one (with the name from `.added` when it
    /// lacks one), else rebuilt from `.added` and the deltas.
    fn item(&self) -> Option<Item> {
        if let Some(done) = &self.done {
            let mut done = done.clone();
            if let Item::Call { name, .. } = &mut done {
                if name.is_empty() {
                    if let Some(added) = self.added.as_deref().and_then(added_item).and_then(|(_, name)| name) {
                        *name = added;
                    }
                }
            }
            return Some(done);
        }
        let (mut item, _) = added_item(self.added.as_deref()?)?;
        match &mut item {
            Item::Message { parts, .. } => {
                let mut deltas: Vec<&(i64, String, bool)> = self.parts.iter().collect();
                deltas.sort_by_key(|p| p.0);
                *parts = deltas.into_iter().map(|(_, text, refusal)| (text.clone(), None, *refusal)).collect();
            }
            Item::Reasoning { text, item: Value::Object(obj) } => {
                let joined = |parts: &[(i64, String)], kind: &str| -> Vec<Value> {
                    let mut parts: Vec<&(i64, String)> = parts.iter().collect();
                    parts.sort_by_key(|p| p.0);
                    parts.into_iter().map(|(_, text)| serde_json::json!({ "type": kind, "text": text })).collect()
                };
                obj.insert("summary".into(), Value::Array(joined(&self.summary, "summary_text")));
                if !self.reasoning.is_empty() {
                    obj.insert("content".into(), Value::Array(joined(&self.reasoning, "reasoning_text")));
                }
                *text = reasoning_text(obj);
            }
            Item::Call { arguments, .. } => {
                arguments.clone_from(self.arguments_done.as_ref().unwrap_or(&self.arguments));
            }
            Item::Reasoning { .. } | Item::Compaction(_) | Item::Other => {}
        }
        Some(item)
    }
}

/// One event payload: the fields any event type uses, all optional. The
/// `response` of the lifecycle events (which echoes the request) and the
/// items are read narrowly, never built.
#[derive(Deserialize)]
struct Payload<'a> {
    #[serde(default, rename = "type", borrow)]
    kind: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    response: Option<Strict<WireResponse<'a>>>,
    #[serde(default, borrow)]
    item: Option<Object<WireItem<'a>>>,
    #[serde(default)]
    output_index: Option<i64>,
    #[serde(default)]
    content_index: Option<i64>,
    #[serde(default)]
    summary_index: Option<i64>,
    #[serde(default, borrow)]
    delta: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    arguments: Option<WireStr<'a>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(data: String) -> SseEvent {
        SseEvent { event: None, data, id: None }
    }

    /// Items of every kind and shape streamed as `.added` + `.done` (and,
    /// with no item event, in the final response only) decode as the same
    /// response sent whole.
    #[test]
    fn streamed_items_decode_as_the_whole_body() {
        let items = [
            r#"{"type":"message","id":"m\"1","status":"completed","phase":"final_answer","content":[{"type":"output_text","text":"a\nb","annotations":[{"type":"url_citation","url":"u"}]},{"type":"refusal","refusal":"no"},7]}"#,
            r#"{"type":"function_call","id":"fc","call_id":"c","name":"f","arguments":{"b":1,"a":"\u00e9"}}"#,
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":"{\"x\":[1,2]}","status":null}"#,
            r#"{"type":"reasoning","id":"rs","summary":[{"type":"summary_text","text":"s"}],"encrypted_content":"e"}"#,
            r#"{"type":"reasoning","id":"rs","content":[{"type":"reasoning_text","text":"raw"}]}"#,
            r#"{"type":"message","type":"function_call","name":"n1","name":"n2","call_id":"c","arguments":"{}"}"#,
            r#"{"type":"web_search_call","id":"ws","action":{"query":"q"}}"#,
        ];
        for item in items {
            let response = format!(
                r#"{{"status":"completed","model":"gpt","output":[{item}],"usage":{{"input_tokens":3,"output_tokens":2}},"tools":[{{"type":"function","name":"f","parameters":{{}}}}]}}"#
            );
            let whole = super::super::decode_response(response.as_bytes(), &mut CallIds::default());
            let streams = [
                vec![
                    event(format!(r#"{{"type":"response.created","response":{response}}}"#)),
                    event(format!(r#"{{"type":"response.output_item.added","output_index":0,"item":{item}}}"#)),
                    event(format!(r#"{{"type":"response.output_item.done","output_index":0,"item":{item}}}"#)),
                    event(format!(r#"{{"type":"response.completed","response":{response}}}"#)),
                ],
                vec![event(format!(r#"{{"type":"response.completed","response":{response}}}"#))],
            ];
            for stream in streams {
                let mut assembler = Assembler::default();
                for e in &stream {
                    assembler.push(e, &mut CallIds::default(), &mut Vec::new()).unwrap();
                }
                assert_eq!(format!("{:?}", assembler.finish()), format!("{whole:?}"), "{item}");
            }
        }
    }
}
