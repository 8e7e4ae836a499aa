//! The Messages streaming format: `message_start`, then per content block
//! `content_block_start` / `content_block_delta`* / `content_block_stop`, then
//! `message_delta` (stop reason, final usage) and `message_stop`, the end
//! marker. `ping` keeps the connection alive; `error` reports a failure
//! mid-stream.
//!
//! Deltas name their block by `index`. The assembler keeps blocks in the order
//! they started and maps each index to the block that started under it most
//! recently, so a reused index starts a new block instead of gluing two blocks
//! (two calls' arguments) together; a delta without an index goes to the block
//! that started last; a repeated `content_block_start` for a call id already
//! seen continues that call rather than duplicating it.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::{
    call_id, classify, excerpt, is_object_text, opaque, read_block, reasoning, redacted, stop, tool_call, usage,
    WireBlock, WireUsage,
};
use crate::error::{DecodeError, RemoteError};
use crate::event::StreamEvent;
use crate::message::Block;
use crate::provider::partial_json::parse_partial;
use crate::provider::wire::{MapOnly, WireStr};
use crate::provider::{parse_arguments, CallIds, Style, TurnResponse};
use crate::sse::SseEvent;

/// Incremental stream assembler: SSE events in, deltas out, one
/// [`TurnResponse`] at the end, equal to what [`super::decode_response`]
/// returns for the same message delivered as one body.
#[derive(Debug, Clone, Default)]
pub struct Assembler {
    /// Content blocks in the order they started.
    slots: Vec<Slot>,
    /// Wire index → the slot that most recently started under it.
    by_index: BTreeMap<u64, usize>,
    /// Call id → its slot, so a repeated start continues the same call.
    by_call_id: BTreeMap<String, usize>,
    /// The slot that started last (for deltas without an index).
    last: Option<usize>,
    model: Option<String>,
    stop_raw: Option<String>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    usage_seen: bool,
    /// `message_stop` arrived; everything after it is ignored.
    ended: bool,
    /// The stream failed (an `error` event or undecodable bytes); `finish` repeats it.
    failed: Option<RemoteError>,
    emitted: bool,
}

#[derive(Debug, Clone)]
enum Slot {
    Text(String),
    Reasoning {
        text: String,
        signature: String,
    },
    Redacted(String),
    Tool(ToolSlot),
    /// A block the transcript keeps verbatim; `json` collects `input_json_delta`
    /// pieces for the kinds that stream an `input` (`server_tool_use`, …).
    Opaque {
        block: Value,
        json: String,
    },
}

#[derive(Debug, Clone)]
struct ToolSlot {
    id: String,
    generated: bool,
    name: String,
    /// The concatenated `input_json_delta` pieces, exactly.
    arguments: String,
    /// The raw `input` of `content_block_start` (`{}` in practice).
    start_input: Option<String>,
    extras: Map<String, Value>,
    /// The block stopped: its arguments are final.
    closed: bool,
}

impl Assembler {
    /// Feeds one SSE event; appends the deltas it yields to `out`.
    ///
    /// Returns the provider's error for an `error` event, and a decode error
    /// for an event that cannot be read. Events after the end marker (or
    /// after a failure) are ignored.
    pub fn push(&mut self, event: &SseEvent, ids: &mut CallIds, out: &mut Vec<StreamEvent>) -> Result<(), RemoteError> {
        if self.ended || self.failed.is_some() {
            return Ok(());
        }
        let before = out.len();
        let result = self.apply(event, ids, out);
        self.emitted |= out.len() > before;
        if let Err(e) = &result {
            self.failed = Some(e.clone());
        }
        result
    }

    /// The assembled turn; [`DecodeError::Truncated`] when `message_stop`
    /// never came; the stream's own error when it failed.
    pub fn finish(&mut self) -> Result<TurnResponse, RemoteError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if !self.ended {
            return Err(DecodeError::Truncated(format!(
                "the stream ended before message_stop ({} content block(s) started)",
                self.slots.len()
            ))
            .into());
        }
        let content = self.slots.iter().map(Slot::to_block).collect();
        let usage_reported = self.usage_seen;
        let usage = if usage_reported { usage(self.input_tokens, self.output_tokens) } else { Default::default() };
        Ok(TurnResponse {
            content,
            stop: stop(self.stop_raw.clone()),
            usage,
            usage_reported,
            model: self.model.clone(),
        })
    }

    /// Whether any delta has been appended.
    pub fn emitted_anything(&self) -> bool {
        self.emitted
    }

    fn apply(&mut self, event: &SseEvent, ids: &mut CallIds, out: &mut Vec<StreamEvent>) -> Result<(), RemoteError> {
        if event.event.as_deref() == Some("error") {
            return Err(Style::Anthropic.decode_error(None, None, event.data.as_bytes()).into());
        }
        if event.data.trim().is_empty() {
            return Ok(()); // nothing to read: a keep-alive
        }
        // One pass reads the event with its delta (strings borrowed from the
        // payload). When that fails, the delta is read again on its own,
        // since only some delta shapes are errors (see `delta`): the second
        // pass keeps the delta raw and decides.
        let ev: WireEvent<'_, Delta<'_>> =
            match serde_json::from_str::<WireEvent<'_, MapOnly<AnyDelta<'_>>>>(&event.data) {
                Ok(ev) => ev.map_delta(|d| Delta::Read(d.0)),
                Err(_) => serde_json::from_str::<WireEvent<'_, &RawValue>>(&event.data)
                    .map_err(|e| crate::provider::serde_failure(e, event.data.as_bytes()))?
                    .map_delta(Delta::Raw),
            };
        if !is_object_text(event.data.as_bytes()) {
            return Err(DecodeError::Shape(format!("event data is not a JSON object: {}", excerpt(&event.data))).into());
        }
        // The payload names its own type; the `event:` line is only a fallback.
        let kind = ev.kind.as_deref().or(event.event.as_deref()).unwrap_or("");
        match kind {
            "message_start" => {
                if let Some(msg) = ev.message {
                    if msg.model.is_some() {
                        self.model = msg.model;
                    }
                    if msg.stop_reason.is_some() {
                        self.stop_raw = msg.stop_reason;
                    }
                    self.take_usage(msg.usage);
                }
            }
            "content_block_start" => {
                let raw = ev
                    .content_block
                    .ok_or_else(|| DecodeError::Shape("content_block_start without a content_block".into()))?;
                self.start_block(ev.index, raw, ids, out)?;
            }
            "content_block_delta" => {
                let delta = ev.delta.ok_or_else(|| DecodeError::Shape("content_block_delta without a delta".into()))?;
                let fields = match delta {
                    Delta::Read(any) => any.block_fields(),
                    Delta::Raw(raw) => match block_delta(raw)? {
                        Some(fields) => fields,
                        None => return Ok(()),
                    },
                };
                self.delta(ev.index, fields, out)?;
            }
            "content_block_stop" => {
                let slot = match ev.index {
                    Some(i) => self.by_index.get(&i).copied(),
                    None => self.last,
                };
                // A stop for a block that never started closes nothing.
                if let Some(slot) = slot.and_then(|s| self.slots.get_mut(s)) {
                    slot.close(out);
                }
            }
            "message_delta" => {
                let stop_reason = match ev.delta {
                    None => None,
                    Some(Delta::Read(any)) => any.stop_reason,
                    Some(Delta::Raw(raw)) => {
                        if !is_object_text(raw.get().as_bytes()) {
                            return Err(DecodeError::Shape("message_delta.delta is not an object".into()).into());
                        }
                        serde_json::from_str::<WireMessageDelta<'_>>(raw.get()).map_err(classify)?.stop_reason
                    }
                };
                if let Some(reason) = stop_reason {
                    self.stop_raw = Some(reason.into_owned());
                }
                self.take_usage(ev.usage);
            }
            "message_stop" => {
                // Blocks left open (the output cap can end a message inside a
                // block) are final now.
                for slot in &mut self.slots {
                    slot.close(out);
                }
                self.ended = true;
            }
            "error" => return Err(Style::Anthropic.decode_error(None, None, event.data.as_bytes()).into()),
            // `ping`, and event types added after this was written.
            _ => {}
        }
        Ok(())
    }

    /// `usage` arrives in `message_start` and again, cumulatively, in
    /// `message_delta`: each count is the newest value given, never a sum.
    fn take_usage(&mut self, u: Option<WireUsage>) {
        if let Some(u) = u {
            self.usage_seen = true;
            if u.input_tokens.is_some() {
                self.input_tokens = u.input_tokens;
            }
            if u.output_tokens.is_some() {
                self.output_tokens = u.output_tokens;
            }
        }
    }

    fn start_block(
        &mut self,
        index: Option<u64>,
        raw: &RawValue,
        ids: &mut CallIds,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), RemoteError> {
        let slot = match read_block(raw)? {
            WireBlock::Text(text) => {
                if !text.is_empty() {
                    out.push(StreamEvent::TextDelta { text: text.clone() });
                }
                self.add(Slot::Text(text))
            }
            WireBlock::Thinking { text, signature } => {
                if !text.is_empty() {
                    out.push(StreamEvent::ReasoningDelta { text: text.clone() });
                }
                self.add(Slot::Reasoning { text, signature })
            }
            WireBlock::Redacted(data) => self.add(Slot::Redacted(data)),
            WireBlock::ToolUse { id, name, input, extras } => {
                let known = id.as_deref().and_then(|id| self.by_call_id.get(id)).copied();
                match known {
                    Some(slot) => slot,
                    None => {
                        let (id, generated) = call_id(id, ids);
                        out.push(StreamEvent::ToolCallStarted { id: id.clone(), name: name.clone() });
                        let slot = self.add(Slot::Tool(ToolSlot {
                            id: id.clone(),
                            generated,
                            name,
                            arguments: String::new(),
                            start_input: input.map(|raw| raw.get().to_string()),
                            extras,
                            closed: false,
                        }));
                        self.by_call_id.insert(id, slot);
                        slot
                    }
                }
            }
            WireBlock::Opaque(block) => self.add(Slot::Opaque { block, json: String::new() }),
        };
        if let Some(i) = index {
            self.by_index.insert(i, slot);
        }
        self.last = Some(slot);
        Ok(())
    }

    fn add(&mut self, slot: Slot) -> usize {
        self.slots.push(slot);
        self.slots.len() - 1
    }

    fn delta(
        &mut self,
        index: Option<u64>,
        delta: WireDelta<'_>,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), RemoteError> {
        let WireDelta { kind, text, thinking, signature, partial_json } = delta;
        let kind = match kind.as_deref() {
            Some(k) if READ_DELTAS.contains(&k) => k,
            // `citations_delta` (citations are not kept) and later additions.
            _ => return Ok(()),
        };
        let target = match index {
            Some(i) => self.by_index.get(&i).copied(),
            None => self.last,
        };
        let Some(slot) = target.and_then(|s| self.slots.get_mut(s)) else {
            let at = index.map_or_else(|| "without an index".to_string(), |i| format!("for block {i}"));
            return Err(DecodeError::Shape(format!("{kind} {at}, which never started")).into());
        };
        // The piece is borrowed from the payload where it has no escapes:
        // appended to the block, then moved (or copied, when borrowed) into
        // the delta event.
        let piece = match kind {
            "text_delta" => text,
            "thinking_delta" => thinking,
            "signature_delta" => signature,
            _ => partial_json,
        };
        let piece = piece.map_or(Cow::Borrowed(""), |w| w.0);
        match (kind, slot) {
            ("text_delta", Slot::Text(text)) => {
                text.push_str(&piece);
                if !piece.is_empty() {
                    out.push(StreamEvent::TextDelta { text: piece.into_owned() });
                }
            }
            ("thinking_delta", Slot::Reasoning { text, .. }) => {
                text.push_str(&piece);
                if !piece.is_empty() {
                    out.push(StreamEvent::ReasoningDelta { text: piece.into_owned() });
                }
            }
            ("signature_delta", Slot::Reasoning { signature, .. }) => signature.push_str(&piece),
            ("input_json_delta", Slot::Tool(call)) => {
                // A stopped call's arguments are final; a late piece must not change them.
                if !call.closed && !piece.is_empty() {
                    call.arguments.push_str(&piece);
                    out.push(StreamEvent::ToolCallDelta { id: call.id.clone(), arguments: piece.into_owned() });
                }
            }
            ("input_json_delta", Slot::Opaque { json, .. }) => json.push_str(&piece),
            (kind, slot) => {
                return Err(DecodeError::Shape(format!("{kind} for a {} block", slot.kind_name())).into());
            }
        }
        Ok(())
    }
}

/// The `content_block_delta` types that carry content the transcript keeps.
const READ_DELTAS: &[&str] = &["text_delta", "thinking_delta", "signature_delta", "input_json_delta"];

impl Slot {
    fn kind_name(&self) -> &'static str {
        match self {
            Slot::Text(_) => "text",
            Slot::Reasoning { .. } => "thinking",
            Slot::Redacted(_) => "redacted_thinking",
            Slot::Tool(_) => "tool_use",
            Slot::Opaque { .. } => "server",
        }
    }

    /// The block stopped (or the message did). Idempotent.
    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        match self {
            Slot::Tool(call) if !call.closed => {
                call.closed = true;
                if call.arguments.is_empty() {
                    // No piece came: the call has no arguments. The start
                    // event's own `input` (`{}`) stands for them — exactly the
                    // text a whole body carries for the same call — and is
                    // sent as the call's one delta so the deltas still add up
                    // to the final arguments.
                    call.arguments = call.start_input.take().unwrap_or_else(|| "{}".to_string());
                    out.push(StreamEvent::ToolCallDelta { id: call.id.clone(), arguments: call.arguments.clone() });
                }
            }
            Slot::Opaque { block, json } if !json.is_empty() => {
                let text = std::mem::take(json);
                let input = parse_arguments(&text).ok().or_else(|| parse_partial(&text));
                if let (Some(input), Value::Object(obj)) = (input, block) {
                    obj.insert("input".to_string(), input);
                }
            }
            _ => {}
        }
    }

    fn to_block(&self) -> Block {
        match self {
            Slot::Text(text) => Block::Text { text: text.clone(), provider_data: None },
            Slot::Reasoning { text, signature } => reasoning(text.clone(), signature.clone()),
            Slot::Redacted(data) => redacted(data.clone()),
            Slot::Tool(call) => Block::ToolCall(tool_call(
                call.id.clone(),
                call.generated,
                call.name.clone(),
                call.arguments.clone(),
                call.extras.clone(),
            )),
            Slot::Opaque { block, .. } => opaque(block.clone()),
        }
    }
}

/// One stream event's payload. Unknown fields are ignored. `D` is how the
/// delta is read: in the same pass (`MapOnly<AnyDelta>`) or kept raw.
#[derive(Deserialize)]
#[serde(bound(deserialize = "D: Deserialize<'de>"))]
struct WireEvent<'a, D> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<WireStr<'a>>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow)]
    content_block: Option<&'a RawValue>,
    #[serde(default)]
    delta: Option<D>,
    #[serde(default)]
    message: Option<WireStart>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

impl<'a, D> WireEvent<'a, D> {
    fn map_delta<E>(self, f: impl FnOnce(D) -> E) -> WireEvent<'a, E> {
        WireEvent {
            kind: self.kind,
            index: self.index,
            content_block: self.content_block,
            delta: self.delta.map(f),
            message: self.message,
            usage: self.usage,
        }
    }
}

/// An event's `delta`, read along with the event or kept raw.
enum Delta<'a> {
    Read(AnyDelta<'a>),
    Raw(&'a RawValue),
}

/// `message_start.message`: the message with no content yet.
#[derive(Deserialize)]
struct WireStart {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// The fields of both kinds of `delta` (`content_block_delta`'s and
/// `message_delta`'s), for the one-pass read. Reading succeeds only where
/// reading the raw delta as [`WireDelta`] or [`WireMessageDelta`] would:
/// it takes the same fields with the same types, and an object only.
#[derive(Deserialize)]
struct AnyDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    text: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    thinking: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    signature: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    partial_json: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    stop_reason: Option<WireStr<'a>>,
}

impl<'a> AnyDelta<'a> {
    fn block_fields(self) -> WireDelta<'a> {
        WireDelta {
            kind: self.kind,
            text: self.text,
            thinking: self.thinking,
            signature: self.signature,
            partial_json: self.partial_json,
        }
    }
}

/// `content_block_delta.delta`: each type carries its piece under its own name.
#[derive(Deserialize)]
struct WireDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    text: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    thinking: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    signature: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    partial_json: Option<WireStr<'a>>,
}

/// Reads a raw `content_block_delta.delta`. `None`: a delta type this does
/// not read, which may use the read types' field names with other types.
fn block_delta(raw: &RawValue) -> Result<Option<WireDelta<'_>>, RemoteError> {
    if !is_object_text(raw.get().as_bytes()) {
        return Err(
            DecodeError::Shape(format!("content_block_delta.delta is not an object: {}", excerpt(raw.get()))).into()
        );
    }
    match serde_json::from_str::<WireDelta<'_>>(raw.get()) {
        Ok(d) => Ok(Some(d)),
        Err(e) => {
            // Only the delta types read here must have their fields right.
            let kind = serde_json::from_str::<super::KindOnly>(raw.get()).map_err(classify)?.kind;
            match kind.as_deref() {
                Some(k) if !READ_DELTAS.contains(&k) => Ok(None),
                _ => Err(classify(e).into()),
            }
        }
    }
}

/// `message_delta.delta`.
#[derive(Deserialize)]
struct WireMessageDelta<'a> {
    #[serde(default, borrow)]
    stop_reason: Option<WireStr<'a>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(payloads: &[&str]) -> (Vec<Result<(), RemoteError>>, Vec<StreamEvent>, Assembler) {
        let mut a = Assembler::default();
        let (mut ids, mut out) = (CallIds::new("c"), Vec::new());
        let pushes = payloads
            .iter()
            .map(|p| a.push(&SseEvent { event: None, data: (*p).into(), id: None }, &mut ids, &mut out))
            .collect();
        (pushes, out, a)
    }

    const START: &str = r#"{"type":"message_start","message":{"model":"m","usage":{"input_tokens":1}}}"#;
    const TEXT: &str = r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#;
    const STOP: &str = r#"{"type":"message_stop"}"#;

    fn shape(r: &Result<(), RemoteError>) -> String {
        match r {
            Err(RemoteError::Decode(DecodeError::Shape(m))) => m.clone(),
            other => panic!("expected a shape error, got {other:?}"),
        }
    }

    #[test]
    fn escaped_and_plain_pieces_read_alike() {
        let (pushes, out, mut a) = run(&[
            START,
            TEXT,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"plain "}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"q\"\n\u00e9\ud83d\ude00"}}"#,
            STOP,
        ]);
        assert!(pushes.iter().all(Result::is_ok), "{pushes:?}");
        assert_eq!(
            out,
            [StreamEvent::TextDelta { text: "plain ".into() }, StreamEvent::TextDelta { text: "q\"\né😀".into() }]
        );
        assert_eq!(a.finish().unwrap().text(), "plain q\"\né😀");
    }

    /// Deltas the one-pass read refuses go through the raw read, which
    /// decides as the assembler always has.
    #[test]
    fn deltas_the_one_pass_read_refuses_are_decided_by_the_raw_read() {
        let delta = |d: &str| format!(r#"{{"type":"content_block_delta","index":0,"delta":{d}}}"#);
        // Fields of the other delta kind with another type do not matter.
        let (pushes, _, mut a) = run(&[
            START,
            TEXT,
            &delta(r#"{"type":"text_delta","text":"a","stop_reason":5}"#),
            r#"{"type":"ping","delta":[1, 2]}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","text":5},"usage":{"output_tokens":2}}"#,
            STOP,
        ]);
        assert!(pushes.iter().all(Result::is_ok), "{pushes:?}");
        let turn = a.finish().unwrap();
        assert_eq!((turn.text().as_str(), turn.stop.raw.as_deref()), ("a", Some("end_turn")));
        // Positional (array) deltas are refused, not read by position.
        let (pushes, _, _) = run(&[START, TEXT, &delta(r#"["text_delta", "x"]"#)]);
        assert_eq!(shape(&pushes[2]), r#"content_block_delta.delta is not an object: ["text_delta", "x"]"#);
        let (pushes, _, _) = run(&[START, r#"{"type":"message_delta","delta":["end_turn"]}"#]);
        assert_eq!(shape(&pushes[1]), "message_delta.delta is not an object");
        // A read delta type with a duplicate field is an error; an unknown one is skipped.
        let (pushes, _, _) = run(&[START, TEXT, &delta(r#"{"type":"text_delta","text":"a","text":"b"}"#)]);
        assert!(shape(&pushes[2]).contains("duplicate field `text`"), "{pushes:?}");
        let (pushes, _, mut a) = run(&[START, TEXT, &delta(r#"{"type":"future_delta","text":"a","text":1}"#), STOP]);
        assert!(pushes.iter().all(Result::is_ok), "{pushes:?}");
        assert_eq!(a.finish().unwrap().text(), "");
    }
}
