//! Chat Completions streams: `chat.completion.chunk` events, `data: [DONE]` at the end.
//!
//! Tool calls arrive in pieces: `{index, id?, type?, function:{name?, arguments?}}`,
//! the id and name once, the arguments in fragments. OpenAI routes pieces by
//! `index`, but compatible servers repeat, omit or reuse indexes, so pieces
//! are routed by id first and index second:
//!
//! * a piece whose id belongs to a known call goes to that call (a server that
//!   repeats the id and name in every piece does not duplicate the call);
//! * a piece with a new id starts a new call, even at an index another call
//!   holds (servers that number every call 0), unless the call at that index
//!   has neither id nor arguments yet (the id came after the name);
//! * a piece without id goes to the call currently at its index, or, without
//!   index, to the call the previous piece went to; a different name there
//!   starts a new call.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{
    decode_failure, pick_reasoning, provider_error, raw_arguments, Content, Parts, RawCall, WireFunction, WireUsage,
};
use crate::error::{DecodeError, RemoteError};
use crate::event::StreamEvent;
use crate::message::Usage;
use crate::provider::wire::{LenientStr, WireStr};
use crate::provider::{CallIds, TurnResponse};
use crate::sse::SseEvent;

/// Incremental stream assembler: SSE events in, deltas out, one
/// [`TurnResponse`] at the end, equal to what [`super::decode_response`]
/// gives for the same turn as one body.
#[derive(Debug, Clone, Default)]
pub struct Assembler {
    /// Text, reasoning, refusal, stop, usage and model so far (calls live in `calls`).
    parts: Parts,
    /// Tool calls in order of first appearance.
    calls: Vec<StreamCall>,
    /// Which call each wire index currently points at.
    by_index: Vec<(i64, usize)>,
    /// The call the previous piece went to.
    last: Option<usize>,
    /// `data: [DONE]` arrived; later events are ignored.
    done: bool,
    /// A delta has been appended.
    emitted: bool,
    /// An in-stream error ended the stream.
    failed: Option<RemoteError>,
}

/// One tool call being assembled.
#[derive(Debug, Clone, Default)]
struct StreamCall {
    id: Option<String>,
    generated: bool,
    name: String,
    arguments: String,
    /// `ToolCallStarted` has been emitted.
    started: bool,
}

impl StreamCall {
    fn is_empty(&self) -> bool {
        self.id.is_none() && self.name.is_empty() && self.arguments.is_empty()
    }
}

impl Assembler {
    /// Feeds one SSE event; appends the deltas it yields to `out`.
    pub fn push(&mut self, event: &SseEvent, ids: &mut CallIds, out: &mut Vec<StreamEvent>) -> Result<(), RemoteError> {
        if self.done {
            return Ok(());
        }
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let data = event.data.trim();
        if data == "[DONE]" {
            self.end(ids, out);
            return Ok(());
        }
        // OpenAI sends no `event:` lines; some compatible servers mark errors so.
        if event.event.as_deref() == Some("error") {
            return Err(self.fail(provider_error(data.as_bytes())));
        }
        if data.is_empty() {
            return Ok(());
        }
        let chunk: Chunk<'_> = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => return Err(self.fail(decode_failure(e, data.as_bytes()))),
        };
        if chunk.error.is_some() {
            return Err(self.fail(provider_error(data.as_bytes())));
        }
        if self.parts.model.is_none() {
            self.parts.model = chunk.model.0.filter(|m| !m.is_empty()).map(WireStr::into_owned);
        }
        if let Some(usage) = chunk.usage {
            // Servers that repeat usage send running totals: the last one counts.
            self.parts.usage = Some(Usage::from(usage));
        }
        for choice in chunk.choices.unwrap_or_default() {
            // Only choice 0 makes the turn (`n > 1` streams interleave the others).
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                self.apply(delta, ids, out)?;
            }
            if let Some(reason) = choice.finish_reason {
                self.parts.finish = Some(reason);
            }
        }
        Ok(())
    }

    /// The assembled turn, or [`DecodeError::Truncated`] when `data: [DONE]` never came.
    pub fn finish(&mut self) -> Result<TurnResponse, RemoteError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if !self.done {
            return Err(DecodeError::Truncated("the stream ended before `data: [DONE]`".into()).into());
        }
        let mut parts = self.parts.clone();
        parts.calls = self
            .calls
            .iter()
            .filter(|c| !c.is_empty())
            .map(|c| RawCall {
                id: c.id.clone().unwrap_or_default(),
                generated: c.generated,
                name: c.name.clone(),
                arguments: c.arguments.clone(),
            })
            .collect();
        Ok(parts.into_turn())
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

    fn apply(&mut self, delta: Delta<'_>, ids: &mut CallIds, out: &mut Vec<StreamEvent>) -> Result<(), RemoteError> {
        if let Some(text) = pick_reasoning(delta.reasoning_content, delta.reasoning) {
            self.parts.reasoning.push_str(&text);
            self.emit(out, StreamEvent::ReasoningDelta { text });
        }
        if let Some(Content(text)) = delta.content.filter(|c| !c.0.is_empty()) {
            self.parts.text.push_str(&text);
            self.emit(out, StreamEvent::TextDelta { text });
        }
        if let Some(text) = delta.refusal.filter(|r| !r.is_empty()) {
            // A refusal is shown like text; the turn keeps it in its own block.
            self.parts.refusal.push_str(&text);
            self.emit(out, StreamEvent::TextDelta { text });
        }
        for piece in delta.tool_calls.unwrap_or_default() {
            self.tool_piece(piece, ids, out)?;
        }
        Ok(())
    }

    fn tool_piece(
        &mut self,
        piece: DeltaCall<'_>,
        ids: &mut CallIds,
        out: &mut Vec<StreamEvent>,
    ) -> Result<(), RemoteError> {
        let id = piece.id.filter(|s| !s.is_empty());
        let (name, fragment) = match piece.function {
            Some(f) => (f.name.filter(|s| !s.is_empty()), raw_arguments(f.arguments)?),
            None => (None, String::new()),
        };
        let pos = self.route(piece.index, id.as_deref(), name.as_deref());
        let Some(call) = self.calls.get_mut(pos) else {
            return Ok(());
        };
        if call.id.is_none() {
            call.id = id;
        }
        if call.name.is_empty() {
            if let Some(name) = name {
                call.name = name;
            }
        }
        call.arguments.push_str(&fragment);
        if call.started {
            if !fragment.is_empty() {
                let id = call.id.clone().unwrap_or_default();
                self.emit(out, StreamEvent::ToolCallDelta { id, arguments: fragment });
            }
            return Ok(());
        }
        // Announce once the name is known and the id is too, or once there
        // are arguments to show (a server that sends no id never will).
        if !call.name.is_empty() && (call.id.is_some() || !call.arguments.is_empty()) {
            self.start(pos, ids, out);
        }
        Ok(())
    }

    /// Emits `ToolCallStarted` (and the arguments gathered so far) for a call,
    /// generating its id when the server sent none.
    fn start(&mut self, pos: usize, ids: &mut CallIds, out: &mut Vec<StreamEvent>) {
        let Some(call) = self.calls.get_mut(pos) else {
            return;
        };
        let id = match &call.id {
            Some(id) => id.clone(),
            None => {
                let id = ids.next_id();
                call.id = Some(id.clone());
                call.generated = true;
                id
            }
        };
        call.started = true;
        let name = call.name.clone();
        let arguments = call.arguments.clone();
        self.emit(out, StreamEvent::ToolCallStarted { id: id.clone(), name });
        if !arguments.is_empty() {
            self.emit(out, StreamEvent::ToolCallDelta { id, arguments });
        }
    }

    /// The call a piece belongs to (see the module docs), creating it when new.
    fn route(&mut self, index: Option<i64>, id: Option<&str>, name: Option<&str>) -> usize {
        let current = match index {
            Some(i) => self.by_index.iter().find(|(k, _)| *k == i).map(|(_, pos)| *pos),
            None => self.last,
        };
        let pos = match id {
            Some(id) => match self.calls.iter().position(|c| !c.generated && c.id.as_deref() == Some(id)) {
                Some(pos) => Some(pos),
                None => current.filter(|&pos| {
                    self.calls.get(pos).is_some_and(|c| {
                        c.id.is_none()
                            && c.arguments.is_empty()
                            && (c.name.is_empty() || name.is_none_or(|n| n == c.name))
                    })
                }),
            },
            None => current.filter(|&pos| {
                self.calls.get(pos).is_some_and(|c| c.name.is_empty() || name.is_none_or(|n| n == c.name))
            }),
        };
        let pos = pos.unwrap_or_else(|| {
            self.calls.push(StreamCall::default());
            self.calls.len() - 1
        });
        if let Some(i) = index {
            match self.by_index.iter_mut().find(|(k, _)| *k == i) {
                Some(entry) => entry.1 = pos,
                None => self.by_index.push((i, pos)),
            }
        }
        self.last = Some(pos);
        pos
    }

    /// `data: [DONE]`: every call gets its id (generated in call order when
    /// the server sent none, as the body decoder does) and its announcement.
    fn end(&mut self, ids: &mut CallIds, out: &mut Vec<StreamEvent>) {
        self.done = true;
        for pos in 0..self.calls.len() {
            let Some(call) = self.calls.get_mut(pos) else {
                continue;
            };
            if call.started || call.is_empty() {
                continue;
            }
            if call.name.is_empty() {
                if call.id.is_none() {
                    call.id = Some(ids.next_id());
                    call.generated = true;
                }
            } else {
                self.start(pos, ids, out);
            }
        }
    }
}

/// One `chat.completion.chunk` (or an error payload).
#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<ChunkChoice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    /// Borrowed: every chunk repeats it, and only the first is kept.
    #[serde(default, borrow)]
    model: LenientStr<'a>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ChunkChoice<'a> {
    #[serde(default)]
    index: Option<i64>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default, borrow)]
    reasoning_content: Option<LenientStr<'a>>,
    #[serde(default, borrow)]
    reasoning: Option<LenientStr<'a>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<DeltaCall<'a>>>,
}

#[derive(Deserialize)]
struct DeltaCall<'a> {
    #[serde(default)]
    index: Option<i64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default, borrow)]
    function: Option<WireFunction<'a>>,
}
