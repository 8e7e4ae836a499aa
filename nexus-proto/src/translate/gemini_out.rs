//! The Gemini surface's encoder: a neutral turn → a `GenerateContentResponse`,
//! and a neutral event stream → `streamGenerateContent?alt=sse` chunks.
//!
//! Text and thoughts stream as they come, one chunk per piece. Gemini sends
//! a function call as one whole part, so calls go out in the last chunk, with
//! the finish reason and usage, once their arguments are complete (arguments
//! of parallel calls may arrive interleaved; they are assembled first).

use serde_json::{json, Map, Value};

use super::surface::{data_event, id_body, meta_with_id, Emitter, SurfaceStream};
use super::{remote_error_to_openai, CompletionMeta, TranslateError};
use crate::event::StreamEvent;
use crate::message::{Block, ToolCall};
use crate::provider::{CallIds, StopReason, Style, TurnResponse};

/// A whole upstream success body of `style` → a Gemini response.
/// For [`Style::Gemini`] the body is returned as it came.
pub fn response_to_gemini(style: Style, body: &[u8], meta: &CompletionMeta) -> Result<Value, TranslateError> {
    if style == Style::Gemini {
        return serde_json::from_slice(body).map_err(|e| remote_error_to_openai(&crate::DecodeError::from(e).into()));
    }
    let meta = meta_with_id(meta, "resp_", body);
    let mut ids = CallIds::new(format!("call_{}_", id_body(&meta.id)));
    let turn = style.decode_response(body, &mut ids).map_err(|e| remote_error_to_openai(&e))?;
    Ok(turn_to_gemini(&turn, &meta))
}

/// A decoded turn as a Gemini response: parts in the upstream's order
/// (reasoning as `thought` parts), finish reason and usage.
pub fn turn_to_gemini(turn: &TurnResponse, meta: &CompletionMeta) -> Value {
    let mut parts = Vec::with_capacity(turn.content.len());
    for block in &turn.content {
        match block {
            Block::Text { text, .. } if !text.is_empty() => parts.push(json!({ "text": text })),
            Block::Reasoning { text, .. } if !text.is_empty() => parts.push(json!({ "text": text, "thought": true })),
            Block::ToolCall(call) => parts.push(call_part(call)),
            _ => {}
        }
    }
    chunk(meta, parts, Some(finish_reason(turn.stop.reason)), Some(turn))
}

fn call_part(call: &ToolCall) -> Value {
    let args = if call.input.is_object() { call.input.clone() } else { Value::Object(Map::new()) };
    json!({ "functionCall": { "id": call.id, "name": call.name, "args": args } })
}

/// The Gemini `finishReason` for a neutral stop (a function-call turn is `STOP` there).
pub fn finish_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::MaxTokens => "MAX_TOKENS",
        StopReason::ContentFilter | StopReason::Refusal => "SAFETY",
        _ => "STOP",
    }
}

fn chunk(meta: &CompletionMeta, parts: Vec<Value>, finish: Option<&str>, usage: Option<&TurnResponse>) -> Value {
    let mut candidate = Map::new();
    candidate.insert("content".into(), json!({ "role": "model", "parts": parts }));
    if let Some(f) = finish {
        candidate.insert("finishReason".into(), json!(f));
    }
    candidate.insert("index".into(), json!(0));
    let mut out = Map::new();
    out.insert("candidates".into(), json!([candidate]));
    if let Some(turn) = usage {
        let u = &turn.usage;
        out.insert(
            "usageMetadata".into(),
            json!({
                "promptTokenCount": u.prompt_tokens,
                "candidatesTokenCount": u.completion_tokens,
                "totalTokenCount": u.total_tokens,
            }),
        );
    }
    out.insert("modelVersion".into(), json!(meta.model));
    out.insert("responseId".into(), json!(meta.id));
    Value::Object(out)
}

/// The `streamGenerateContent?alt=sse` writer.
#[derive(Debug)]
pub struct GeminiEmitter {
    meta: CompletionMeta,
    done: bool,
}

impl GeminiEmitter {
    /// A writer reporting `meta` (its id is the response id).
    pub fn new(meta: CompletionMeta) -> GeminiEmitter {
        GeminiEmitter { meta, done: false }
    }
}

impl Emitter for GeminiEmitter {
    fn event(&mut self, event: &StreamEvent, out: &mut Vec<String>) -> Result<(), TranslateError> {
        if self.done {
            return Ok(());
        }
        let part = match event {
            StreamEvent::TextDelta { text } if !text.is_empty() => json!({ "text": text }),
            StreamEvent::ReasoningDelta { text } if !text.is_empty() => json!({ "text": text, "thought": true }),
            // Calls are sent whole, from the assembled turn.
            _ => return Ok(()),
        };
        out.push(data_event(&chunk(&self.meta, vec![part], None, None)));
        Ok(())
    }

    fn finish(&mut self, turn: &TurnResponse, out: &mut Vec<String>) {
        if self.done {
            return;
        }
        self.done = true;
        let parts: Vec<Value> = turn.tool_calls().map(call_part).collect();
        out.push(data_event(&chunk(&self.meta, parts, Some(finish_reason(turn.stop.reason)), Some(turn))));
    }

    fn fail(&mut self, error: &TranslateError, out: &mut Vec<String>) {
        if self.done {
            return;
        }
        self.done = true;
        out.push(data_event(&super::surface::gemini_error_json(error)));
    }
}

/// An upstream stream re-emitted as Gemini SSE.
pub type GeminiStream = SurfaceStream<GeminiEmitter>;

impl GeminiStream {
    /// A stream for an upstream of `style` (not Gemini: that one passes
    /// through). `meta.id` is the response id; empty derives one.
    pub fn new(style: Style, meta: CompletionMeta) -> GeminiStream {
        let meta = if meta.id.is_empty() { CompletionMeta { id: "resp_gateway".into(), ..meta } } else { meta };
        let ids = CallIds::new(format!("call_{}_", id_body(&meta.id)));
        SurfaceStream::with(style, meta.clone(), ids, GeminiEmitter::new(meta))
    }
}
