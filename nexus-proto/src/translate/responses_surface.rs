//! The OpenAI Responses surface (`POST /v1/responses`) for any upstream:
//! the request read by [`read_responses_request`] into the neutral request
//! with its settings mapped, and a neutral event stream re-emitted as the
//! full Responses event scaffolding, event by event.
//!
//! The stream writer opens one output item at a time: `output_item.added`,
//! then its part (`reasoning_summary_part.added` / `content_part.added`),
//! its deltas, its `.done` events and `output_item.done` before the next
//! item opens; `response.created` and `response.in_progress` come first and
//! `response.completed` (or `response.incomplete`) with the whole response
//! and usage last — or one `error` event, after which nothing follows.

use serde_json::{json, Value};

use super::request::{Choice, Format, Neutral, Settings};
use super::responses::{read_responses_request, turn_to_responses, ResponseMeta};
use super::surface::{finish_request, Dropped, Emitter, SurfaceRequest, SurfaceStream};
use super::{TranslateError, TranslatedRequest};
use crate::event::StreamEvent;
use crate::provider::{CallIds, StopReason, Style, TurnResponse};

/// Translates a Responses request body for an upstream of `style`. For
/// [`Style::OpenAiResponses`] the body passes through (after the stateless
/// checks), encrypted reasoning and item ids included.
pub fn responses_request_to(style: Style, body: &[u8]) -> Result<SurfaceRequest, TranslateError> {
    let r = read_responses_request(body)?;
    if style == Style::OpenAiResponses {
        let upstream =
            TranslatedRequest { style, model: r.model, stream: r.stream, include_usage: true, body: body.to_vec() };
        return Ok(SurfaceRequest { upstream, dropped: Vec::new() });
    }
    let mut dropped = Dropped::default();
    for what in &r.dropped {
        dropped.add(what.clone());
    }
    let mut s = Settings {
        model: r.model,
        stream: r.stream,
        include_usage: true,
        max_tokens: r.max_tokens,
        ..Settings::default()
    };
    if style == Style::Gemini {
        s.model = super::request::gemini_model(&s.model)?;
    }
    for (key, value) in &r.settings {
        let k = key.as_str();
        match k {
            "temperature" => s.temperature = Some(super::request::number(value, k)?),
            "top_p" => s.top_p = Some(super::request::number(value, k)?),
            "parallel_tool_calls" => s.parallel = value.as_bool(),
            "tool_choice" => s.choice = Some(choice(value)?),
            "text" => {
                if let Some(format) = value.get("format").filter(|f| !f.is_null()) {
                    s.format = Some(match format.get("type").and_then(Value::as_str) {
                        Some("text") => Format::Text,
                        Some("json_object") => Format::JsonObject,
                        Some("json_schema") => match format.get("schema") {
                            Some(schema @ Value::Object(_)) => Format::JsonSchema(schema.clone()),
                            _ => {
                                return Err(TranslateError::invalid("text.format.schema", "a JSON schema is required"))
                            }
                        },
                        _ => return Err(TranslateError::invalid("text.format.type", "unknown format type")),
                    });
                }
                if value.get("verbosity").is_some_and(|v| !v.is_null()) {
                    dropped.add("text.verbosity");
                }
            }
            "user" | "safety_identifier" if style == Style::OpenAi => {
                if let Some(u) = value.as_str() {
                    s.user = Some(("user", u.to_string()));
                }
            }
            "background" if value == &Value::Bool(true) => {
                return Err(TranslateError::unsupported(k, style, "background responses need stored state"))
            }
            "top_logprobs" if value.as_u64().is_some_and(|n| n > 0) => {
                return Err(TranslateError::unsupported(k, style, "the upstream gives no log probabilities"))
            }
            // Effort and summary hints, metadata, storage, caching, tiers, includes, truncation.
            _ => dropped.add(k),
        }
    }
    let n = Neutral {
        settings: s,
        system: r.system,
        messages: r.messages,
        tools: r.tools,
        strict: r.strict,
        ..Neutral::default()
    };
    if n.messages.is_empty() {
        return Err(TranslateError::invalid("input", "`input` must hold at least one item"));
    }
    finish_request(style, n, dropped)
}

fn choice(value: &Value) -> Result<Choice, TranslateError> {
    match value {
        Value::String(s) => match s.as_str() {
            "auto" => Ok(Choice::Auto),
            "required" => Ok(Choice::Required),
            "none" => Ok(Choice::None),
            _ => Err(TranslateError::invalid("tool_choice", format!("unknown tool_choice {s:?}"))),
        },
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => o
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(|n| Choice::Named(n.to_string()))
            .ok_or_else(|| TranslateError::invalid("tool_choice.name", "a function name is required")),
        _ => Err(TranslateError::invalid(
            "tool_choice",
            "only auto, required, none or a named function can be translated",
        )),
    }
}

/// The kind of the item that is open, and its index in `items`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Open {
    Reasoning,
    Message,
    Call(String),
}

/// The Responses SSE writer.
#[derive(Debug)]
pub struct ResponsesEmitter {
    meta: ResponseMeta,
    seq: u64,
    started: bool,
    /// Finished items, in output order (the open one is last while open).
    items: Vec<Value>,
    open: Option<Open>,
    /// Text of the open item's part so far.
    text: String,
    done: bool,
}

impl ResponsesEmitter {
    /// A writer reporting `meta` (item ids derive from its id).
    pub fn new(meta: ResponseMeta) -> ResponsesEmitter {
        ResponsesEmitter {
            meta,
            seq: 0,
            started: false,
            items: Vec::new(),
            open: None,
            text: String::new(),
            done: false,
        }
    }

    fn ev(&mut self, mut data: Value, out: &mut Vec<String>) {
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        let kind = data["type"].as_str().unwrap_or_default().to_string();
        out.push(format!("event: {kind}\ndata: {data}\n\n"));
    }

    fn response(&self, status: &str, output: Vec<Value>, usage: Value, incomplete: Value) -> Value {
        super::responses::response_object(&self.meta, status, incomplete, output, usage)
    }

    fn start(&mut self, out: &mut Vec<String>) {
        if self.started {
            return;
        }
        self.started = true;
        let pending = self.response("in_progress", Vec::new(), Value::Null, Value::Null);
        self.ev(json!({"type": "response.created", "response": pending}), out);
        self.ev(json!({"type": "response.in_progress", "response": pending}), out);
    }

    fn item_id(&self, prefix: &str) -> String {
        let token = self.meta.id.strip_prefix("resp_").unwrap_or(&self.meta.id);
        format!("{prefix}{token}_{}", self.items.len())
    }

    /// Closes the open item with its `.done` events.
    fn close(&mut self, out: &mut Vec<String>) {
        let Some(open) = self.open.take() else { return };
        let index = self.items.len() - 1;
        let text = std::mem::take(&mut self.text);
        let mut item = self.items[index].clone();
        let base = json!({"item_id": item["id"], "output_index": index});
        match open {
            Open::Reasoning => {
                let part = json!({"type": "summary_text", "text": text});
                self.ev(
                    with(
                        &base,
                        json!({"type": "response.reasoning_summary_text.done", "summary_index": 0, "text": text}),
                    ),
                    out,
                );
                self.ev(
                    with(
                        &base,
                        json!({"type": "response.reasoning_summary_part.done", "summary_index": 0, "part": part}),
                    ),
                    out,
                );
                item["summary"] = json!([part]);
            }
            Open::Message => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                self.ev(
                    with(
                        &base,
                        json!({"type": "response.output_text.done", "content_index": 0, "text": text, "logprobs": []}),
                    ),
                    out,
                );
                self.ev(
                    with(&base, json!({"type": "response.content_part.done", "content_index": 0, "part": part})),
                    out,
                );
                item["content"] = json!([part]);
                item["status"] = json!("completed");
            }
            Open::Call(_) => {
                let arguments = if text.is_empty() { "{}".to_string() } else { text };
                self.ev(with(&base, json!({"type": "response.function_call_arguments.done", "arguments": arguments, "name": item["name"]})), out);
                item["arguments"] = json!(arguments);
                item["status"] = json!("completed");
            }
        }
        self.items[index] = item.clone();
        self.ev(json!({"type": "response.output_item.done", "output_index": index, "item": item}), out);
    }

    /// Opens a new item of `kind` (closing the open one).
    fn open(&mut self, kind: Open, item: Value, out: &mut Vec<String>) {
        self.start(out);
        self.close(out);
        let index = self.items.len();
        self.items.push(item.clone());
        self.open = Some(kind.clone());
        self.ev(json!({"type": "response.output_item.added", "output_index": index, "item": item}), out);
        let base = json!({"item_id": item["id"], "output_index": index});
        match kind {
            Open::Reasoning => self.ev(with(&base, json!({"type": "response.reasoning_summary_part.added", "summary_index": 0, "part": {"type": "summary_text", "text": ""}})), out),
            Open::Message => self.ev(with(&base, json!({"type": "response.content_part.added", "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})), out),
            Open::Call(_) => {}
        }
    }
}

impl Emitter for ResponsesEmitter {
    fn event(&mut self, event: &StreamEvent, out: &mut Vec<String>) -> Result<(), TranslateError> {
        if self.done {
            return Ok(());
        }
        match event {
            StreamEvent::TextDelta { text } if !text.is_empty() => {
                if self.open != Some(Open::Message) {
                    let id = self.item_id("msg_");
                    let item = json!({"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []});
                    self.open(Open::Message, item, out);
                }
                self.text.push_str(text);
                let index = self.items.len() - 1;
                let base = json!({"item_id": self.items[index]["id"], "output_index": index});
                self.ev(with(&base, json!({"type": "response.output_text.delta", "content_index": 0, "delta": text, "logprobs": []})), out);
            }
            StreamEvent::ReasoningDelta { text } if !text.is_empty() => {
                if self.open != Some(Open::Reasoning) {
                    let id = self.item_id("rs_");
                    self.open(Open::Reasoning, json!({"id": id, "type": "reasoning", "summary": []}), out);
                }
                self.text.push_str(text);
                let index = self.items.len() - 1;
                let base = json!({"item_id": self.items[index]["id"], "output_index": index});
                self.ev(
                    with(
                        &base,
                        json!({"type": "response.reasoning_summary_text.delta", "summary_index": 0, "delta": text}),
                    ),
                    out,
                );
            }
            StreamEvent::ToolCallStarted { id, name } => {
                let item_id = self.item_id("fc_");
                let item = json!({"id": item_id, "type": "function_call", "status": "in_progress", "call_id": id, "name": name, "arguments": ""});
                self.open(Open::Call(id.clone()), item, out);
            }
            StreamEvent::ToolCallDelta { id, arguments } if !arguments.is_empty() => {
                if self.open.as_ref() != Some(&Open::Call(id.clone())) {
                    // A closed item cannot take them (interleaving upstreams
                    // are put in order before this writer sees their calls).
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
                self.text.push_str(arguments);
                let index = self.items.len() - 1;
                let base = json!({"item_id": self.items[index]["id"], "output_index": index});
                self.ev(
                    with(&base, json!({"type": "response.function_call_arguments.delta", "delta": arguments})),
                    out,
                );
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
        // Status and usage as a whole response would say them.
        let whole = turn_to_responses(turn, &self.meta);
        let (status, terminal) = match turn.stop.reason {
            StopReason::MaxTokens | StopReason::ContentFilter => ("incomplete", "response.incomplete"),
            _ => ("completed", "response.completed"),
        };
        let response =
            self.response(status, self.items.clone(), whole["usage"].clone(), whole["incomplete_details"].clone());
        self.ev(json!({"type": terminal, "response": response}), out);
    }

    fn fail(&mut self, error: &TranslateError, out: &mut Vec<String>) {
        if self.done {
            return;
        }
        self.done = true;
        let code = error.code.clone().unwrap_or_else(|| error.kind.clone());
        self.ev(json!({"type": "error", "code": code, "message": error.message, "param": error.param}), out);
    }
}

fn with(base: &Value, extra: Value) -> Value {
    let mut v = base.clone();
    if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), extra) {
        obj.extend(extra);
    }
    v
}

/// An upstream stream re-emitted as Responses SSE.
pub type ResponsesStream = SurfaceStream<ResponsesEmitter>;

impl ResponsesStream {
    /// A stream for an upstream of `style` (not Responses: that one passes through).
    pub fn new(style: Style, meta: ResponseMeta) -> ResponsesStream {
        let token = meta.id.strip_prefix("resp_").unwrap_or(&meta.id).to_string();
        let cm = super::CompletionMeta { id: meta.id.clone(), model: meta.model.clone(), created: meta.created_at };
        SurfaceStream::with(style, cm, CallIds::new(format!("call_{token}_")), ResponsesEmitter::new(meta))
    }
}

/// A whole upstream success body of `style` → a Responses `response`.
pub fn response_to_responses(style: Style, body: &[u8], meta: &ResponseMeta) -> Result<Value, TranslateError> {
    let token = meta.id.strip_prefix("resp_").unwrap_or(&meta.id);
    let mut ids = CallIds::new(format!("call_{token}_"));
    let turn = style.decode_response(body, &mut ids).map_err(|e| super::remote_error_to_openai(&e))?;
    Ok(turn_to_responses(&turn, meta))
}
