//! Anthropic Messages (`POST /v1/messages`): auth, request checks, bodies,
//! SSE streams and error bodies, as the real API sends them.

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::http::Request;
use super::wire::{
    argument_fragments, neutral_stop, stable_id, to_json, to_pretty, word_pieces, Args, Ctx, Parsed, Reject,
};

/// The error `type` Anthropic uses for a status.
fn kind_for(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The message Anthropic sends with a status when nothing more specific applies.
fn message_for(status: u16) -> &'static str {
    match status {
        401 => "invalid x-api-key",
        403 => "Your API key does not have permission to use the specified resource.",
        404 => "Not found",
        413 => "Request exceeds the maximum allowed number of bytes.",
        429 => "Number of requests has exceeded your rate limit. Please try again later.",
        500 => "Internal server error",
        504 => "Request timed out",
        529 => "Overloaded",
        _ => "Internal server error",
    }
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    message: &'a str,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: ErrorDetail<'a>,
    request_id: String,
}

/// An error body: `{"type":"error","error":{"type","message"},"request_id"}`.
pub fn error(status: u16, message: &str) -> Reject {
    let body = ErrorBody {
        kind: "error",
        error: ErrorDetail { kind: kind_for(status), message },
        request_id: stable_id("req_011C", &[message, &status.to_string()], 20),
    };
    Reject { status, body: to_json(&body).into_bytes() }
}

/// The body Anthropic sends with an error status.
pub fn status_error(status: u16) -> Reject {
    error(status, message_for(status))
}

/// Checks the `x-api-key` header.
pub fn check_auth(req: &Request, key: &str) -> Result<(), Reject> {
    match req.header("x-api-key") {
        None => Err(error(401, "x-api-key header is required")),
        Some(k) if k != key => Err(error(401, "invalid x-api-key")),
        Some(_) => Ok(()),
    }
}

/// Reads and checks a Messages request body.
pub fn parse(req: &Request, body: &Value) -> Result<Parsed, Reject> {
    if req.header("anthropic-version").is_none() {
        return Err(error(400, "anthropic-version: header is required"));
    }
    let Some(obj) = body.as_object() else {
        return Err(error(400, "body: Input should be a valid dictionary"));
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) => m.clone(),
        Some(_) => return Err(error(400, "model: Input should be a valid string")),
        None => return Err(error(400, "model: Field required")),
    };
    match obj.get("max_tokens") {
        Some(v) if v.is_u64() => {}
        Some(_) => return Err(error(400, "max_tokens: Input should be a valid integer")),
        None => return Err(error(400, "max_tokens: Field required")),
    }
    let messages = match obj.get("messages") {
        Some(Value::Array(m)) => m,
        Some(_) => return Err(error(400, "messages: Input should be a valid list")),
        None => return Err(error(400, "messages: Field required")),
    };
    let stream = obj.get("stream").and_then(Value::as_bool).unwrap_or(false);
    Ok(Parsed {
        model,
        stream,
        include_usage: false,
        assistant_turns: messages.iter().filter(|m| role(m) == "assistant").count(),
        messages: messages.len(),
        tool_results: tool_result_texts(messages),
    })
}

fn role(m: &Value) -> &str {
    m.get("role").and_then(Value::as_str).unwrap_or("")
}

fn blocks(m: &Value) -> &[Value] {
    m.get("content").and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn block_type(b: &Value) -> &str {
    b.get("type").and_then(Value::as_str).unwrap_or("")
}

fn str_field<'a>(b: &'a Value, key: &str) -> &'a str {
    b.get(key).and_then(Value::as_str).unwrap_or("")
}

fn tool_result_texts(messages: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for m in messages.iter().filter(|m| role(m) == "user") {
        for b in blocks(m).iter().filter(|b| block_type(b) == "tool_result") {
            out.push(match b.get("content") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(parts)) => parts.iter().map(|p| str_field(p, "text")).collect(),
                _ => String::new(),
            });
        }
    }
    out
}

/// The tool_use/tool_result pairing rules the API enforces with a 400.
pub fn check_balance(body: &Value) -> Result<(), Reject> {
    let messages = body.get("messages").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    for (i, m) in messages.iter().enumerate() {
        for (k, b) in blocks(m).iter().enumerate() {
            // Only thinking the API signed can come back.
            if block_type(b) == "thinking" && str_field(b, "signature").is_empty() {
                return Err(error(400, &format!("messages.{i}.content.{k}.thinking.signature: Field required")));
            }
        }
        if role(m) == "user" {
            let prev_ids: Vec<&str> = match i.checked_sub(1).and_then(|p| messages.get(p)) {
                Some(p) if role(p) == "assistant" => {
                    blocks(p).iter().filter(|b| block_type(b) == "tool_use").map(|b| str_field(b, "id")).collect()
                }
                _ => Vec::new(),
            };
            for (k, b) in blocks(m).iter().enumerate() {
                let id = str_field(b, "tool_use_id");
                if block_type(b) == "tool_result" && !prev_ids.contains(&id) {
                    return Err(error(
                        400,
                        &format!(
                            "messages.{i}.content.{k}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. \
                             Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                        ),
                    ));
                }
            }
        }
        if role(m) == "assistant" {
            let answered: Vec<&str> = match messages.get(i + 1) {
                Some(n) if role(n) == "user" => blocks(n)
                    .iter()
                    .filter(|b| block_type(b) == "tool_result")
                    .map(|b| str_field(b, "tool_use_id"))
                    .collect(),
                _ => Vec::new(),
            };
            let missing: Vec<&str> = blocks(m)
                .iter()
                .filter(|b| block_type(b) == "tool_use")
                .map(|b| str_field(b, "id"))
                .filter(|id| !answered.contains(id))
                .collect();
            // A trailing assistant message with tool_use is a prefill; the API
            // still refuses it, since nothing could answer the calls.
            if !missing.is_empty() {
                return Err(error(
                    400,
                    &format!(
                        "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. \
                         Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                        missing.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Thinking { thinking: &'a str, signature: &'a str },
    Text { text: String },
    ToolUse { id: String, name: &'a str, input: Args },
}

#[derive(Serialize)]
struct Usage {
    input_tokens: u64,
    cache_creation_input_tokens: u64,
    cache_read_input_tokens: u64,
    output_tokens: u64,
    service_tier: &'static str,
}

#[derive(Serialize)]
struct Message<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<Block<'a>>,
    stop_reason: Option<String>,
    stop_sequence: Option<String>,
    usage: Usage,
}

fn stop_reason(ctx: &Ctx<'_>) -> String {
    match &ctx.turn.stop_reason {
        Some(r) => neutral_stop(r).map_or_else(|| r.clone(), |s| s[0].to_string()),
        None if !ctx.turn.tool_calls.is_empty() => "tool_use".to_string(),
        None => "end_turn".to_string(),
    }
}

fn usage(ctx: &Ctx<'_>, output: u64) -> Usage {
    Usage {
        input_tokens: ctx.turn.usage.input,
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: 0,
        output_tokens: output,
        service_tier: "standard",
    }
}

fn message<'a>(ctx: &Ctx<'a>, content: Vec<Block<'a>>, done: bool) -> Message<'a> {
    Message {
        id: ctx.answer_id("msg_01"),
        kind: "message",
        role: "assistant",
        model: ctx.model,
        content,
        stop_reason: done.then(|| stop_reason(ctx)),
        stop_sequence: None,
        // message_start reports one output token so far, as the API does.
        usage: usage(ctx, if done { ctx.turn.usage.output } else { 1 }),
    }
}

/// The whole (non-streaming) response body.
pub fn body(ctx: &Ctx<'_>) -> Vec<u8> {
    let mut content = Vec::new();
    if let Some(t) = &ctx.turn.thinking {
        content.push(Block::Thinking { thinking: &t.text, signature: &t.signature });
    }
    if let Some(text) = ctx.text() {
        content.push(Block::Text { text: text.into_owned() });
    }
    for (i, call) in ctx.turn.tool_calls.iter().enumerate() {
        content.push(Block::ToolUse { id: ctx.call_id(i, "toolu_01"), name: &call.name, input: Args::of(call) });
    }
    to_json(&message(ctx, content, true)).into_bytes()
}

fn event(name: &str, data: &str) -> Vec<u8> {
    format!("event: {name}\ndata: {data}\n\n").into_bytes()
}

/// The first block of a content block, as `content_block_start` carries it.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock<'a> {
    Thinking { thinking: &'static str, signature: &'static str },
    Text { text: &'static str },
    ToolUse { id: String, name: &'a str, input: Map<String, Value> },
}

/// A `content_block_delta` payload (`thinking_delta`, `signature_delta`, …).
#[derive(Serialize)]
#[serde(tag = "type")]
enum Delta {
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: String },
    #[serde(rename = "signature_delta")]
    Signature { signature: String },
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
}

#[derive(Serialize)]
struct StopDelta {
    stop_reason: String,
    stop_sequence: Option<String>,
}

#[derive(Serialize)]
struct OutputUsage {
    output_tokens: u64,
}

/// Stream events; serde writes the `type` tag first, as the API does.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event<'a> {
    MessageStart { message: Message<'a> },
    ContentBlockStart { index: usize, content_block: StartBlock<'a> },
    ContentBlockDelta { index: usize, delta: Delta },
    ContentBlockStop { index: usize },
    MessageDelta { delta: StopDelta, usage: OutputUsage },
    MessageStop,
}

impl Event<'_> {
    fn name(&self) -> &'static str {
        match self {
            Event::MessageStart { .. } => "message_start",
            Event::ContentBlockStart { .. } => "content_block_start",
            Event::ContentBlockDelta { .. } => "content_block_delta",
            Event::ContentBlockStop { .. } => "content_block_stop",
            Event::MessageDelta { .. } => "message_delta",
            Event::MessageStop => "message_stop",
        }
    }

    fn sse(&self) -> Vec<u8> {
        event(self.name(), &to_json(self))
    }
}

const PING: &str = r#"{"type": "ping"}"#;

/// The SSE events of a streamed answer, each one whole (`event:` + `data:` + blank line).
pub fn events(ctx: &Ctx<'_>) -> Vec<Vec<u8>> {
    let mut blocks: Vec<(StartBlock<'_>, Vec<Delta>)> = Vec::new();
    if let Some(t) = &ctx.turn.thinking {
        let mut deltas: Vec<Delta> =
            word_pieces(&t.text).into_iter().map(|thinking| Delta::Thinking { thinking }).collect();
        deltas.push(Delta::Signature { signature: t.signature.clone() });
        blocks.push((StartBlock::Thinking { thinking: "", signature: "" }, deltas));
    }
    if ctx.text().is_some() {
        let deltas = ctx.text_pieces().into_iter().map(|text| Delta::Text { text }).collect();
        blocks.push((StartBlock::Text { text: "" }, deltas));
    }
    for (i, call) in ctx.turn.tool_calls.iter().enumerate() {
        // Like the API: an empty fragment first, then the JSON text in pieces.
        let mut deltas = vec![Delta::InputJson { partial_json: String::new() }];
        deltas.extend(
            argument_fragments(&call.arguments).into_iter().map(|partial_json| Delta::InputJson { partial_json }),
        );
        let start = StartBlock::ToolUse { id: ctx.call_id(i, "toolu_01"), name: &call.name, input: Map::new() };
        blocks.push((start, deltas));
    }

    let mut out = vec![Event::MessageStart { message: message(ctx, Vec::new(), false) }.sse()];
    if blocks.is_empty() {
        out.push(event("ping", PING));
    }
    for (index, (start, deltas)) in blocks.into_iter().enumerate() {
        out.push(Event::ContentBlockStart { index, content_block: start }.sse());
        if index == 0 {
            // The API sends one ping right after the first block starts.
            out.push(event("ping", PING));
        }
        out.extend(deltas.into_iter().map(|delta| Event::ContentBlockDelta { index, delta }.sse()));
        out.push(Event::ContentBlockStop { index }.sse());
    }
    out.push(
        Event::MessageDelta {
            delta: StopDelta { stop_reason: stop_reason(ctx), stop_sequence: None },
            usage: OutputUsage { output_tokens: ctx.turn.usage.output },
        }
        .sse(),
    );
    out.push(Event::MessageStop.sse());
    out
}

/// The in-stream error event the API sends when it is overloaded mid-answer.
pub fn stream_error_event() -> Vec<u8> {
    event("error", r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#)
}

/// An event whose data is cut off in the middle of its JSON.
pub fn malformed_event() -> Vec<u8> {
    event("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_del"#)
}

/// A 200 body that is not JSON.
pub fn malformed_body() -> Vec<u8> {
    br#"{"id":"msg_01","type":"message","role":"assistant","content":[{"type":"text","text":"cut off"#.to_vec()
}

/// `GET /v1/models` in Anthropic's shape.
pub fn model_list(models: &[&str]) -> Vec<u8> {
    let data: Vec<Value> = models
        .iter()
        .map(|m| json!({"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}))
        .collect();
    to_pretty(&json!({
        "data": data,
        "has_more": false,
        "first_id": models.first(),
        "last_id": models.last(),
    }))
}
