//! The Anthropic Messages surface's encoder: a neutral turn → a `message`
//! object, and a neutral event stream → Messages SSE.
//!
//! The stream writer is a state machine over one open content block. It
//! keeps the discipline Anthropic clients enforce: `message_start` first;
//! each block opened with `content_block_start` before any delta, its index
//! one more than the last, closed with `content_block_stop` before the next
//! opens; never a stop for an index that was not started; then
//! `message_delta` and `message_stop` — or one `error` event, after which
//! nothing follows.

use serde_json::{json, Value};

use super::surface::{id_body, meta_with_id, named_event, Emitter, SurfaceStream};
use super::{remote_error_to_openai, CompletionMeta, TranslateError};
use crate::event::StreamEvent;
use crate::message::Block;
use crate::provider::{CallIds, StopReason, Style, TurnResponse};

/// A whole upstream success body of `style` → an Anthropic `message`.
/// For [`Style::Anthropic`] the body is returned as it came.
pub fn response_to_anthropic(style: Style, body: &[u8], meta: &CompletionMeta) -> Result<Value, TranslateError> {
    if style == Style::Anthropic {
        return serde_json::from_slice(body).map_err(|e| remote_error_to_openai(&crate::DecodeError::from(e).into()));
    }
    let meta = meta_with_id(meta, "msg_", body);
    let mut ids = CallIds::new(format!("toolu_{}_", id_body(&meta.id)));
    let turn = style.decode_response(body, &mut ids).map_err(|e| remote_error_to_openai(&e))?;
    Ok(turn_to_anthropic(&turn, &meta))
}

/// A decoded turn as an Anthropic `message`: blocks in the upstream's order
/// (reasoning as `thinking` with the signature the upstream gave, else empty).
pub fn turn_to_anthropic(turn: &TurnResponse, meta: &CompletionMeta) -> Value {
    let mut content = Vec::with_capacity(turn.content.len());
    for block in &turn.content {
        match block {
            Block::Text { text, .. } if !text.is_empty() => content.push(json!({ "type": "text", "text": text })),
            Block::Reasoning { text, signature, redacted, .. } => match redacted {
                Some(data) => content.push(json!({ "type": "redacted_thinking", "data": data })),
                None => content.push(json!({
                    "type": "thinking",
                    "thinking": text,
                    "signature": signature.as_deref().unwrap_or_default(),
                })),
            },
            Block::ToolCall(call) => {
                content.push(json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": call.input }))
            }
            _ => {}
        }
    }
    let has_calls = turn.tool_calls().next().is_some();
    json!({
        "id": meta.id,
        "type": "message",
        "role": "assistant",
        "model": meta.model,
        "content": content,
        "stop_reason": stop_reason(turn.stop.reason, has_calls),
        "stop_sequence": null,
        "usage": usage(turn),
    })
}

fn usage(turn: &TurnResponse) -> Value {
    json!({ "input_tokens": turn.usage.prompt_tokens, "output_tokens": turn.usage.completion_tokens })
}

/// The Anthropic `stop_reason` for a neutral stop.
pub fn stop_reason(stop: StopReason, has_tool_calls: bool) -> &'static str {
    if has_tool_calls {
        return "tool_use";
    }
    match stop {
        StopReason::MaxTokens => "max_tokens",
        StopReason::StopSequence => "stop_sequence",
        StopReason::Refusal | StopReason::ContentFilter => "refusal",
        StopReason::PauseTurn => "pause_turn",
        _ => "end_turn",
    }
}

/// The kind of the block that is open.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Open {
    Text,
    Thinking,
    /// A tool_use block, by call id.
    Tool(String),
}

/// The Messages SSE writer (see the module docs for its discipline).
#[derive(Debug)]
pub struct AnthropicEmitter {
    meta: CompletionMeta,
    started: bool,
    /// Blocks started so far (the next index).
    blocks: usize,
    open: Option<Open>,
    saw_call: bool,
    done: bool,
}

impl AnthropicEmitter {
    /// A writer reporting `meta` (its id is the message id).
    pub fn new(meta: CompletionMeta) -> AnthropicEmitter {
        AnthropicEmitter { meta, started: false, blocks: 0, open: None, saw_call: false, done: false }
    }

    fn start(&mut self, out: &mut Vec<String>) {
        if self.started {
            return;
        }
        self.started = true;
        let message = json!({
            "id": self.meta.id,
            "type": "message",
            "role": "assistant",
            "model": self.meta.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": { "input_tokens": 0, "output_tokens": 0 },
        });
        out.push(named_event("message_start", &json!({ "type": "message_start", "message": message })));
    }

    fn close(&mut self, out: &mut Vec<String>) {
        if self.open.take().is_some() {
            let index = self.blocks - 1;
            out.push(named_event("content_block_stop", &json!({ "type": "content_block_stop", "index": index })));
        }
    }

    /// Makes `kind` the open block, opening it (after closing another) when it is not.
    fn ensure(&mut self, kind: Open, block: Value, out: &mut Vec<String>) -> usize {
        self.start(out);
        if self.open.as_ref() != Some(&kind) {
            self.close(out);
            let index = self.blocks;
            self.blocks += 1;
            self.open = Some(kind);
            out.push(named_event(
                "content_block_start",
                &json!({ "type": "content_block_start", "index": index, "content_block": block }),
            ));
        }
        self.blocks - 1
    }

    fn delta(&self, index: usize, delta: Value) -> String {
        named_event("content_block_delta", &json!({ "type": "content_block_delta", "index": index, "delta": delta }))
    }
}

impl Emitter for AnthropicEmitter {
    fn event(&mut self, event: &StreamEvent, out: &mut Vec<String>) -> Result<(), TranslateError> {
        if self.done {
            return Ok(());
        }
        match event {
            StreamEvent::TextDelta { text } if !text.is_empty() => {
                let i = self.ensure(Open::Text, json!({ "type": "text", "text": "" }), out);
                out.push(self.delta(i, json!({ "type": "text_delta", "text": text })));
            }
            StreamEvent::ReasoningDelta { text } if !text.is_empty() => {
                let block = json!({ "type": "thinking", "thinking": "", "signature": "" });
                let i = self.ensure(Open::Thinking, block, out);
                out.push(self.delta(i, json!({ "type": "thinking_delta", "thinking": text })));
            }
            StreamEvent::ToolCallStarted { id, name } => {
                self.saw_call = true;
                // A new call always gets its own block, even under a repeated id.
                self.start(out);
                self.close(out);
                let block = json!({ "type": "tool_use", "id": id, "name": name, "input": {} });
                self.ensure(Open::Tool(id.clone()), block, out);
            }
            StreamEvent::ToolCallDelta { id, arguments } if !arguments.is_empty() => {
                if self.open.as_ref() == Some(&Open::Tool(id.clone())) {
                    let i = self.blocks - 1;
                    out.push(self.delta(i, json!({ "type": "input_json_delta", "partial_json": arguments })));
                } else {
                    // Arguments for a block already closed cannot be placed (the
                    // stream holds back calls an upstream may interleave, so
                    // this is a broken upstream): the stream would lose them,
                    // so it ends in an error instead.
                    return Err(TranslateError {
                        status: 502,
                        message: format!(
                            "the upstream interleaved the arguments of tool call {id:?} with another call"
                        ),
                        kind: "server_error".into(),
                        param: None,
                        code: Some("upstream_interleaved_calls".into()),
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }

    fn finish(&mut self, turn: &TurnResponse, out: &mut Vec<String>) {
        if self.done {
            return;
        }
        self.start(out);
        self.close(out);
        self.done = true;
        let has_calls = self.saw_call || turn.tool_calls().next().is_some();
        let delta = json!({
            "type": "message_delta",
            "delta": { "stop_reason": stop_reason(turn.stop.reason, has_calls), "stop_sequence": null },
            "usage": usage(turn),
        });
        out.push(named_event("message_delta", &delta));
        out.push(named_event("message_stop", &json!({ "type": "message_stop" })));
    }

    fn fail(&mut self, error: &TranslateError, out: &mut Vec<String>) {
        if self.done {
            return;
        }
        self.done = true;
        out.push(named_event("error", &super::surface::anthropic_error_json(error)));
    }
}

/// An upstream stream re-emitted as Anthropic Messages SSE.
pub type AnthropicStream = SurfaceStream<AnthropicEmitter>;

impl AnthropicStream {
    /// A stream for an upstream of `style` (not Anthropic: that one passes
    /// through). `meta.id` is the message id; empty derives one.
    pub fn new(style: Style, meta: CompletionMeta) -> AnthropicStream {
        let meta = if meta.id.is_empty() { CompletionMeta { id: "msg_gateway".into(), ..meta } } else { meta };
        let ids = CallIds::new(format!("toolu_{}_", id_body(&meta.id)));
        SurfaceStream::with(style, meta.clone(), ids, AnthropicEmitter::new(meta))
    }
}
