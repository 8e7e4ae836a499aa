//! The OpenAI Responses wire format (`POST {base}/responses`), used
//! statelessly: every request carries `store: false` and
//! `include: ["reasoning.encrypted_content"]`, and the whole conversation is
//! replayed in `input` each turn. Nothing is ever referenced by id alone and
//! `previous_response_id` is never sent, so a run can move between processes,
//! servers and API keys (and to OpenRouter, which is stateless-only).
//!
//! How the neutral transcript maps onto it:
//!
//! * `reasoning` output items ⇄ [`Block::Reasoning`] whose text is the
//!   summary (or, without one, the `reasoning_text` content). The item itself
//!   (id, `summary`, the `encrypted_content` of `output_item.done`) rides in
//!   `provider_data` as `{"openai-responses": {"item": <the item>}}` and is
//!   echoed back verbatim, in its place.
//! * `message` output items ⇄ one [`Block::Text`] per content part, with
//!   `{"openai-responses": {"id", "status", "phase"?, "annotations"?, "refusal"?}}`;
//!   consecutive blocks of one message id are sent back as that one message.
//! * `function_call` items ⇄ [`Block::ToolCall`] (`call_id` is the id, the raw
//!   `arguments` text is kept) with `{"openai-responses": {"id", "status"?}}`.
//! * Tool results → one `function_call_output` per call, same `call_id`.
//! * `compaction` items (server-side compaction, `context_management`) ⇄ an
//!   empty [`Block::Text`] with `{"openai-responses": {"compaction": <the
//!   item>}}`, sent back in its place as `{encrypted_content, id, type}`
//!   (the input form of the item). Every other style leaves it out: only
//!   OpenAI can read it.
//!
//! Data under another style's key is never read, and data under this key is
//! never read by another style, so opaque reasoning never leaks elsewhere;
//! reasoning that came from another provider has no form here and is left
//! out. A reasoning item is only valid followed by the item the model produced
//! after it: one left last in its turn (a turn cut by the output cap) is left
//! out, and one followed by an item that no longer carries its id (a rewritten
//! history) is refused by the pre-send gate.
//!
//! A whole body and a stream decode through the same item reader, so the
//! stream [`Assembler`] produces exactly what [`decode_response`] produces for
//! the same response sent as one body.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{DecodeError, RemoteError};
use crate::message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock, Usage};
use crate::provider::openai::TokenDetails;
use crate::provider::partial_json::parse_partial;
use crate::provider::wire::Strict;
use crate::provider::{parse_arguments, ModelCall, Stop, StopReason, Style, TurnResponse};

mod read;
mod stream;
mod write;

use read::WireResponse;
pub use stream::Assembler;
pub(crate) use write::{fields as body_fields, tools_part};

/// This style's key in `provider_data`.
pub const KEY: &str = "openai-responses";

/// What every request asks to be included: the reasoning items' encrypted
/// content, without which a stateless replay loses the model's reasoning.
pub const INCLUDE: &str = "reasoning.encrypted_content";

/// The URL of one model call (`…/v1` is part of the base URL, as for Chat Completions).
pub fn endpoint(base_url: &str) -> String {
    [base_url.trim_end_matches('/'), "/responses"].concat()
}

// ---------------------------------------------------------------- encoding

/// The request body:
/// `{model, input, instructions?, tools?, stream?, store: false, include, max_output_tokens?}`.
///
/// `tool_choice` and `parallel_tool_calls` are left to the API's defaults
/// (`auto`, `true`), which are what the loop wants; a caller who needs others
/// passes them in the params. Tools are declared non-strict, as in the other
/// styles (the Responses API would otherwise default to strict schemas).
pub fn encode_body(call: &ModelCall<'_>) -> Value {
    let mut body = Map::new();
    body.insert("model".into(), Value::String(call.model.to_string()));
    body.insert("input".into(), Value::Array(encode_input(call.messages)));
    if let Some(system) = call.system.filter(|s| !s.is_empty()) {
        body.insert("instructions".into(), Value::String(system.to_string()));
    }
    if !call.tools.is_empty() {
        let tools = call
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.input_schema,
                    "strict": false,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if call.stream {
        body.insert("stream".into(), Value::Bool(true));
    }
    body.insert("store".into(), Value::Bool(false));
    body.insert("include".into(), json!([INCLUDE]));
    if let Some(max) = call.max_tokens {
        body.insert("max_output_tokens".into(), Value::from(max));
    }
    if let Some(o) = call.output {
        body.insert("text".into(), crate::output::wire::responses_text(o));
    }
    Value::Object(body)
}

/// The `input` items of the whole transcript, in order.
pub fn encode_input(messages: &[Message]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len() * 2);
    for message in messages {
        match message.role {
            Role::User => {
                for result in message.tool_results() {
                    out.push(encode_output(result));
                }
                if let Some(parts) = user_parts(message) {
                    let content: Vec<Value> = parts.filter_map(encode_user_part).collect();
                    out.push(json!({ "type": "message", "role": "user", "content": content }));
                }
            }
            Role::Assistant => {
                for item in assistant_items(&message.content) {
                    out.push(encode_assistant_item(&item));
                }
            }
        }
    }
    out
}

/// The text and image blocks of a user turn, which become one user message,
/// or `None` when the turn holds tool results and nothing else.
pub(super) fn user_parts(message: &Message) -> Option<impl Iterator<Item = &Block> + Clone> {
    let parts = message.content.iter().filter(|b| matches!(b, Block::Text { .. } | Block::Image { .. }));
    let had_results = message.content.iter().any(|b| matches!(b, Block::ToolResult(_)));
    (parts.clone().next().is_some() || !had_results).then_some(parts)
}

/// `{type:"input_text"}` or `{type:"input_image"}`.
fn encode_user_part(block: &Block) -> Option<Value> {
    match block {
        Block::Text { text, .. } => Some(json!({ "type": "input_text", "text": text })),
        Block::Image { media_type, source } => Some(json!({
            "type": "input_image",
            "image_url": image_url(media_type, source),
            "detail": "auto",
        })),
        _ => None,
    }
}

/// An inline image travels as a data URL.
fn image_url(media_type: &str, source: &ImageSource) -> String {
    match source {
        ImageSource::Base64 { data } => format!("data:{media_type};base64,{data}"),
        ImageSource::Url { url } => url.clone(),
    }
}

/// `{type:"function_call_output", call_id, output}`. The wire has no error
/// flag: an error result is sent as its text, which says what went wrong.
fn encode_output(result: &ToolResultBlock) -> Value {
    json!({ "type": "function_call_output", "call_id": result.call_id, "output": result.output })
}

/// One input item an assistant turn becomes.
pub(super) enum AssistantItem<'a> {
    /// A reasoning item of ours, verbatim.
    Reasoning(&'a Value),
    /// A compaction item of ours (sent as [`compaction_input`] writes it).
    Compaction(&'a Value),
    /// Consecutive text blocks of one message of ours.
    Message { meta: &'a Map<String, Value>, parts: &'a [Block] },
    /// Text without a message of ours behind it (another style's, or written
    /// by the host): an assistant message without id.
    Plain(&'a str),
    /// A function call.
    Call(&'a ToolCall),
}

/// The input items of an assistant turn, in order (see the module docs for
/// what is left out).
pub(super) fn assistant_items(blocks: &[Block]) -> Vec<AssistantItem<'_>> {
    let mut out = Vec::with_capacity(blocks.len());
    let mut i = 0;
    while i < blocks.len() {
        match &blocks[i] {
            Block::Reasoning { provider_data, .. } => {
                if let Some(item) = reasoning_item(provider_data.as_ref()) {
                    // Sent only with the item that followed it.
                    if i + 1 < blocks.len() {
                        out.push(AssistantItem::Reasoning(item));
                    }
                }
            }
            Block::Text { provider_data, .. } if compaction_item(provider_data.as_ref()).is_some() => {
                if let Some(item) = compaction_item(provider_data.as_ref()) {
                    out.push(AssistantItem::Compaction(item));
                }
            }
            Block::Text { text, provider_data } => match message_meta(provider_data.as_ref()) {
                Some(meta) => {
                    let id = meta.get("id");
                    let mut end = i + 1;
                    while let Some(Block::Text { provider_data, .. }) = blocks.get(end) {
                        match message_meta(provider_data.as_ref()) {
                            Some(next) if next.get("id") == id => end += 1,
                            _ => break,
                        }
                    }
                    out.push(AssistantItem::Message { meta, parts: &blocks[i..end] });
                    i = end;
                    continue;
                }
                // An empty text carries nothing (another style's opaque block).
                None if text.is_empty() => {}
                None => out.push(AssistantItem::Plain(text)),
            },
            Block::ToolCall(call) => out.push(AssistantItem::Call(call)),
            // An image the model produced elsewhere has no assistant form
            // here; a result in an assistant turn is a malformed transcript.
            Block::Image { .. } | Block::ToolResult(_) => {}
        }
        i += 1;
    }
    out
}

fn encode_assistant_item(item: &AssistantItem<'_>) -> Value {
    match item {
        AssistantItem::Reasoning(item) => (*item).clone(),
        AssistantItem::Compaction(item) => Value::Object(compaction_input(item)),
        AssistantItem::Message { meta, parts } => {
            let content: Vec<Value> = parts
                .iter()
                .filter_map(|b| match b {
                    Block::Text { text, provider_data } => Some(match message_meta(provider_data.as_ref()) {
                        Some(m) if is_refusal(m) => json!({ "type": "refusal", "refusal": text }),
                        m => json!({
                            "type": "output_text",
                            "text": text,
                            "annotations": m.and_then(|m| m.get("annotations")).cloned().unwrap_or(json!([])),
                        }),
                    }),
                    _ => None,
                })
                .collect();
            let mut m = Map::new();
            m.insert("type".into(), Value::String("message".into()));
            m.insert("role".into(), Value::String("assistant".into()));
            m.insert("id".into(), meta.get("id").cloned().unwrap_or(Value::Null));
            m.insert("status".into(), Value::String(message_status(meta).to_string()));
            if let Some(phase) = meta.get("phase") {
                m.insert("phase".into(), phase.clone());
            }
            m.insert("content".into(), Value::Array(content));
            Value::Object(m)
        }
        AssistantItem::Plain(text) => json!({ "type": "message", "role": "assistant", "content": text }),
        AssistantItem::Call(call) => {
            let mut m = Map::new();
            m.insert("type".into(), Value::String("function_call".into()));
            m.insert("call_id".into(), Value::String(call.id.clone()));
            m.insert("name".into(), Value::String(call.name.clone()));
            let arguments = if arguments_from_input(call) { call.input.to_string() } else { call.arguments.clone() };
            m.insert("arguments".into(), Value::String(arguments));
            if let Some(own) = own(call.provider_data.as_ref()) {
                for key in ["id", "status"] {
                    if let Some(v) = own.get(key).filter(|v| v.is_string()) {
                        m.insert(key.into(), v.clone());
                    }
                }
            }
            Value::Object(m)
        }
    }
}

/// Whether a call's `arguments` go out as the JSON of its `input` (a call
/// built in code may carry only `input`).
pub(super) fn arguments_from_input(call: &ToolCall) -> bool {
    call.arguments.is_empty() && call.input.as_object().is_some_and(|o| !o.is_empty())
}

/// This style's part of a `provider_data` value.
pub(crate) fn own(provider_data: Option<&Value>) -> Option<&Map<String, Value>> {
    provider_data?.get(KEY)?.as_object()
}

/// The verbatim reasoning item a block carries.
pub(crate) fn reasoning_item(provider_data: Option<&Value>) -> Option<&Value> {
    own(provider_data)?.get("item").filter(|v| v.is_object())
}

/// The compaction item an (empty) text block carries.
pub(crate) fn compaction_item(provider_data: Option<&Value>) -> Option<&Value> {
    own(provider_data)?.get("compaction").filter(|v| v.is_object())
}

/// A compaction item as input: the fields the API takes back
/// (`encrypted_content`, `id`, `type`); what it adds on output
/// (`created_by`, …) is not sent.
pub(crate) fn compaction_input(item: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    for key in ["encrypted_content", "id", "type"] {
        if let Some(v) = item.get(key).filter(|v| v.is_string()) {
            m.insert(key.into(), v.clone());
        }
    }
    m
}

/// The message a text block came from (it has a string id).
pub(crate) fn message_meta(provider_data: Option<&Value>) -> Option<&Map<String, Value>> {
    own(provider_data).filter(|m| m.get("id").is_some_and(Value::is_string))
}

/// Whether a block is an output item of this style (so a reasoning item
/// before it is followed by its own item).
pub(crate) fn is_own_item(block: &Block) -> bool {
    match block {
        Block::Reasoning { provider_data, .. } => reasoning_item(provider_data.as_ref()).is_some(),
        Block::Text { provider_data, .. } => {
            message_meta(provider_data.as_ref()).is_some() || compaction_item(provider_data.as_ref()).is_some()
        }
        Block::ToolCall(call) => {
            own(call.provider_data.as_ref()).is_some_and(|m| m.get("id").is_some_and(Value::is_string))
        }
        _ => false,
    }
}

pub(super) fn is_refusal(meta: &Map<String, Value>) -> bool {
    meta.get("refusal").and_then(Value::as_bool).unwrap_or(false)
}

pub(super) fn message_status(meta: &Map<String, Value>) -> &str {
    meta.get("status").and_then(Value::as_str).unwrap_or("completed")
}

// ---------------------------------------------------------------- decoding

/// Decodes one whole success body (a `response` object).
///
/// An error body (`{"error": {…}}`, sometimes sent with a 200) and a
/// response whose `status` is `failed` are a [`RemoteError::Provider`].
pub fn decode_response(body: &[u8], _ids: &mut crate::provider::CallIds) -> Result<TurnResponse, RemoteError> {
    // A response echoes its request's instructions, tools and settings: it
    // is read narrowly (see `read`), nothing of it built but the turn. What
    // that reading does not take as a plain success (not an object, an
    // `output` that is not an array of objects, a failed status, anything
    // that does not parse) goes the whole-value way, which words every error.
    decode_narrow(body).map_or_else(|| decode_whole(body), Ok)
}

/// [`decode_response`] of a success body, read narrowly; `None` for
/// anything else.
fn decode_narrow(body: &[u8]) -> Option<TurnResponse> {
    let Strict(mut response) = serde_json::from_slice::<Strict<WireResponse<'_>>>(body).ok()?;
    if response.failed() {
        return None;
    }
    let wire = response.output.take()?.0?;
    // Reasoning items go back verbatim: those alone are built, from their raw text.
    let mut raw = None;
    let items = read::read_items(wire, |index| {
        let raw = raw.get_or_insert_with(|| read::raw_output(body)).as_ref()?;
        serde_json::from_str(raw.get(index)?.get()).ok()
    })?;
    let items = items.into_iter().collect::<Option<Vec<Item>>>()?;
    Some(response.ending().into_turn(items))
}

/// [`decode_response`] from the whole body as a JSON value.
fn decode_whole(body: &[u8]) -> Result<TurnResponse, RemoteError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| super::serde_failure(e, body))?;
    let Value::Object(mut obj) = value else {
        return Err(DecodeError::Shape("the response is not a JSON object".into()).into());
    };
    let has_output = obj.contains_key("output");
    if !has_output && obj.get("error").is_some_and(|e| !e.is_null()) {
        return Err(RemoteError::Provider(Style::OpenAiResponses.decode_error(None, None, body)));
    }
    if obj.get("status").and_then(Value::as_str) == Some("failed") {
        return Err(failed(&obj, body));
    }
    let Some(Value::Array(output)) = obj.remove("output") else {
        return Err(DecodeError::Shape("no `output` array in the response".into()).into());
    };
    let mut items = Vec::with_capacity(output.len());
    for item in output {
        items.push(Item::read(item)?);
    }
    Ok(Ending::read(&obj).into_turn(items))
}

/// The error of a `failed` response: `response.error = {code, message}`;
/// `raw` is what arrived (the body or the event), kept as the error body.
pub(super) fn failed(response: &Map<String, Value>, raw: &[u8]) -> RemoteError {
    let err = response.get("error").and_then(Value::as_object);
    let kind = err
        .and_then(|e| ["code", "type"].iter().find_map(|k| e.get(*k).and_then(Value::as_str)))
        .filter(|s| !s.is_empty())
        .unwrap_or("response_failed");
    let message = err.and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or("the response failed");
    RemoteError::Provider(super::provider_error(None, Some((kind.to_string(), message.to_string())), None, raw))
}

/// (type, message) from an error body: `{"error":{"message","type","param","code"}}`
/// (as Chat Completions sends it), or an in-stream `error` event, nested
/// (`{"type":"error","error":{…}}`, what the API sends) or flat
/// (`{"type":"error","code","message","param"}`, what the SDK types say).
pub fn error_details(body: &[u8]) -> Option<(String, String)> {
    let v: Value = serde_json::from_slice(body).ok()?;
    if v.get("type").and_then(Value::as_str) == Some("error") && !v.get("error").is_some_and(Value::is_object) {
        let kind = ["code", "type"]
            .iter()
            .filter_map(|k| v.get(*k).and_then(Value::as_str))
            .find(|s| !s.is_empty() && *s != "error")
            .unwrap_or("error");
        let message = v.get("message").and_then(Value::as_str).unwrap_or_default();
        return Some((kind.to_string(), message.to_string()));
    }
    super::openai::error_details(body)
}

/// How a response ended: its status, why it is incomplete, usage and model.
#[derive(Debug, Clone, Default)]
pub(super) struct Ending {
    status: Option<String>,
    incomplete_reason: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
}

impl Ending {
    pub(super) fn read(response: &Map<String, Value>) -> Ending {
        let str_of = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        Ending {
            status: str_of(response.get("status")),
            incomplete_reason: str_of(response.get("incomplete_details").and_then(|d| d.get("reason"))),
            usage: response
                .get("usage")
                .filter(|u| u.is_object())
                .and_then(|u| WireUsage::deserialize(u).ok())
                .map(Usage::from),
            model: str_of(response.get("model")).filter(|m| !m.is_empty()),
        }
    }

    /// The turn made of `items` (in output order) ending so.
    pub(super) fn into_turn(self, items: Vec<Item>) -> TurnResponse {
        let mut content = Vec::with_capacity(items.len());
        let mut has_calls = false;
        for item in items {
            has_calls |= matches!(item, Item::Call { .. });
            item.into_blocks(&mut content);
        }
        let (reason, raw) = match (self.status.as_deref(), self.incomplete_reason.as_deref()) {
            (Some("incomplete"), Some("max_output_tokens")) => (StopReason::MaxTokens, "max_tokens".to_string()),
            (Some("incomplete"), Some("content_filter")) => (StopReason::ContentFilter, "content_filter".to_string()),
            (Some("incomplete"), other) => (StopReason::Other, other.unwrap_or("incomplete").to_string()),
            // `completed`, or a server that sends no status.
            (Some("completed") | None, _) if has_calls => (StopReason::ToolUse, "tool_use".to_string()),
            (Some("completed") | None, _) => (StopReason::EndTurn, "end_turn".to_string()),
            (Some(other), _) => (StopReason::Other, other.to_string()),
        };
        TurnResponse {
            content,
            stop: Stop { reason, raw: Some(raw) },
            usage: self.usage.unwrap_or_default(),
            usage_reported: self.usage.is_some(),
            model: self.model,
        }
    }
}

/// One output item, read.
#[derive(Debug, Clone)]
pub(crate) enum Item {
    /// Kept whole: it goes back verbatim.
    Reasoning {
        text: String,
        item: Value,
    },
    Message {
        meta: Map<String, Value>,
        parts: Vec<(String, Option<Value>, bool)>,
    },
    Call {
        call_id: String,
        name: String,
        arguments: String,
        meta: Map<String, Value>,
    },
    /// A server-side compaction's opaque item, kept whole.
    Compaction(Value),
    /// Hosted-tool calls, custom tools and kinds added later: not ours to run
    /// and not needed back (a stateless request cannot refer to them).
    Other,
}

impl Item {
    /// Reads an output item; unknown kinds are [`Item::Other`], not errors.
    pub(crate) fn read(item: Value) -> Result<Item, RemoteError> {
        let Value::Object(mut obj) = item else {
            return Err(DecodeError::Shape("an output item is not an object".into()).into());
        };
        let kind = obj.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
        let id = obj.get("id").filter(|v| v.is_string()).cloned();
        Ok(match kind.as_str() {
            "reasoning" => {
                let text = reasoning_text(&obj);
                // The API refuses a replayed reasoning item without `summary`.
                if !obj.get("summary").is_some_and(Value::is_array) {
                    obj.insert("summary".into(), json!([]));
                }
                Item::Reasoning { text, item: Value::Object(obj) }
            }
            "message" => {
                let mut meta = Map::new();
                if let Some(id) = id {
                    meta.insert("id".into(), id);
                }
                for key in ["status", "phase"] {
                    if let Some(v) = obj.get(key).filter(|v| v.is_string()) {
                        meta.insert(key.into(), v.clone());
                    }
                }
                let mut parts = Vec::new();
                if let Some(Value::Array(content)) = obj.get_mut("content") {
                    for part in content.iter_mut() {
                        let Some(part) = part.as_object_mut() else { continue };
                        match part.get("type").and_then(Value::as_str) {
                            Some("output_text") => {
                                let text = part.get("text").and_then(Value::as_str).unwrap_or_default().to_string();
                                let annotations =
                                    part.remove("annotations").filter(|a| a.as_array().is_some_and(|a| !a.is_empty()));
                                parts.push((text, annotations, false));
                            }
                            Some("refusal") => {
                                let text = part.get("refusal").and_then(Value::as_str).unwrap_or_default().to_string();
                                parts.push((text, None, true));
                            }
                            _ => {}
                        }
                    }
                }
                Item::Message { meta, parts }
            }
            "function_call" => {
                let str_of = |k: &str| obj.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                let arguments = match obj.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    // Some compatible servers send an object: its JSON text.
                    Some(v @ Value::Object(_)) => v.to_string(),
                    _ => String::new(),
                };
                let mut meta = Map::new();
                if let Some(id) = id {
                    meta.insert("id".into(), id);
                }
                if let Some(v) = obj.get("status").filter(|v| v.is_string()) {
                    meta.insert("status".into(), v.clone());
                }
                Item::Call { call_id: str_of("call_id"), name: str_of("name"), arguments, meta }
            }
            "compaction" => Item::Compaction(Value::Object(obj)),
            _ => Item::Other,
        })
    }

    pub(crate) fn into_blocks(self, out: &mut Vec<Block>) {
        match self {
            Item::Reasoning { text, item } => {
                let mut own = Map::new();
                own.insert("item".into(), item);
                out.push(Block::Reasoning {
                    text,
                    signature: None,
                    redacted: None,
                    provider_data: Some(provider_data(own)),
                })
            }
            Item::Message { meta, parts } => {
                if parts.is_empty() {
                    // An empty message still takes its place after a reasoning item.
                    out.push(Block::Text { text: String::new(), provider_data: Some(provider_data(meta)) });
                    return;
                }
                let last = parts.len() - 1;
                let mut meta = Some(meta);
                for (i, (text, annotations, refusal)) in parts.into_iter().enumerate() {
                    // Each part has its own copy; the last takes the original.
                    let mut m =
                        if i == last { meta.take().unwrap_or_default() } else { meta.clone().unwrap_or_default() };
                    if let Some(a) = annotations {
                        m.insert("annotations".into(), a);
                    }
                    if refusal {
                        m.insert("refusal".into(), Value::Bool(true));
                    }
                    let provider_data = (!m.is_empty()).then(|| provider_data(m));
                    out.push(Block::Text { text, provider_data });
                }
            }
            Item::Call { call_id, name, arguments, meta } => {
                // Arguments that are not JSON do not fail the turn: the loop
                // answers such a call with an error result instead of running it.
                let input =
                    parse_arguments(&arguments).ok().or_else(|| parse_partial(&arguments)).unwrap_or(Value::Null);
                let provider_data = (!meta.is_empty()).then(|| provider_data(meta));
                out.push(Block::ToolCall(ToolCall { id: call_id, name, input, arguments, provider_data }));
            }
            Item::Compaction(item) => {
                let mut own = Map::new();
                own.insert("compaction".into(), item);
                out.push(Block::Text { text: String::new(), provider_data: Some(provider_data(own)) });
            }
            Item::Other => {}
        }
    }
}

/// `{"openai-responses": own}`, built in place (`json!` would copy `own`
/// through `to_value`).
fn provider_data(own: Map<String, Value>) -> Value {
    let mut data = Map::new();
    data.insert(KEY.into(), Value::Object(own));
    Value::Object(data)
}

/// The summary texts joined, or without any the `reasoning_text` content.
fn reasoning_text(item: &Map<String, Value>) -> String {
    let join = |key: &str, kind: &str| -> String {
        let mut s = String::new();
        for part in item.get(key).and_then(Value::as_array).into_iter().flatten() {
            if part.get("type").and_then(Value::as_str) == Some(kind) {
                s.push_str(part.get("text").and_then(Value::as_str).unwrap_or_default());
            }
        }
        s
    };
    let summary = join("summary", "summary_text");
    if summary.is_empty() {
        join("content", "reasoning_text")
    } else {
        summary
    }
}

/// `usage`: input tokens include cached ones; output tokens include reasoning ones.
#[derive(Deserialize, Clone, Copy)]
pub(super) struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    input_tokens_details: Option<TokenDetails>,
    #[serde(default)]
    output_tokens_details: Option<TokenDetails>,
}

impl From<WireUsage> for Usage {
    fn from(u: WireUsage) -> Usage {
        let prompt = u.input_tokens.unwrap_or(0);
        let completion = u.output_tokens.unwrap_or(0);
        let total = u.total_tokens.filter(|t| *t > 0).unwrap_or(prompt.saturating_add(completion));
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: total,
            cached_tokens: u.input_tokens_details.and_then(|d| d.cached_tokens).unwrap_or(0),
            reasoning_tokens: u.output_tokens_details.and_then(|d| d.reasoning_tokens).unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod narrow_reading {
    use super::*;

    /// The narrow reading of a whole response and the whole-value one agree,
    /// on what each accepts and on every error.
    #[test]
    fn the_narrow_reading_decodes_exactly_as_the_whole_value() {
        let call = r#"{"type":"function_call","id":"fc_1","call_id":"call_1","name":"add","arguments":"{\"a\":2}","status":"completed"}"#;
        let text = r#"{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hi","annotations":[]}]}"#;
        let usage = r#"{"input_tokens":10,"output_tokens":3,"total_tokens":13}"#;
        let bodies = [
            format!(
                r#"{{"id":"resp_1","object":"response","status":"completed","model":"m","output":[{call}],"usage":{usage},"tools":[{{"type":"function","name":"add","parameters":{{}}}}],"instructions":"be brief"}}"#
            ),
            format!(r#"{{"status":"completed","output":[{text}]}}"#),
            format!(r#"{{"output":[{text}],"output":[{call}]}}"#),
            format!(
                r#"{{"status":"incomplete","incomplete_details":{{"reason":"max_output_tokens"}},"output":[{text}]}}"#
            ),
            r#"{"status":"failed","error":{"code":"server_error","message":"boom"},"output":[]}"#.to_string(),
            r#"{"error":{"message":"bad","type":"invalid_request_error"}}"#.to_string(),
            r#"{"error":{"message":"bad"},"output":null}"#.to_string(),
            r#"{"output":{"not":"an array"}}"#.to_string(),
            r#"{"output":[{"type":"mystery"}]}"#.to_string(),
            r#"{"model":"","usage":null,"output":[]}"#.to_string(),
            r#"[1,2]"#.to_string(),
            r#"{"output":[],"usage":{"input_tokens":"many"}}"#.to_string(),
            r#"{"output":["#.to_string(),
            String::new(),
        ];
        for body in &bodies {
            let narrow = decode_response(body.as_bytes(), &mut crate::provider::CallIds::default());
            let whole = decode_whole(body.as_bytes());
            assert_eq!(format!("{narrow:?}"), format!("{whole:?}"), "{body}");
        }
    }

    /// Every body is decoded (or refused) the same way by the narrow reading
    /// and the whole value, and every body the whole value accepts is taken
    /// by the narrow reading itself, not by its fallback.
    fn agree(body: &str) {
        let narrow = decode_response(body.as_bytes(), &mut crate::provider::CallIds::default());
        let whole = decode_whole(body.as_bytes());
        assert_eq!(format!("{narrow:?}"), format!("{whole:?}"), "{body}");
        if whole.is_ok() {
            assert!(decode_narrow(body.as_bytes()).is_some(), "fell back on {body}");
        }
    }

    /// Output items of every kind and shape, each in a plain envelope and
    /// next to one another.
    #[test]
    fn tricky_items_decode_exactly_as_the_whole_value() {
        let items = [
            // Escapes in every string read, in keys too.
            r#"{"type":"message","id":"msg_\"1\"","status":"completed","phase":"final_answer","content":[{"type":"output_text","text":"a\nb \u00e9 \ud83d\ude00 \"q\" \\","annotations":[]}]}"#,
            r#"{"t\u0079pe":"message","\u0069d":"m","content":[{"type":"output_text","te\u0078t":"esc key"}]}"#,
            r#"{"type":"function_call","id":"fc_\u0031","call_id":"call\t1","name":"a\u0064d","arguments":"{\"a\":\"\\u00e9\"}"}"#,
            // `arguments` as an object (its JSON text, keys sorted), and of other types.
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":{"b":[1,2.5,{"z":null}],"a":"x\u00e9"}}"#,
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":{}}"#,
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":null}"#,
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":[1,{"a":2}]}"#,
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":7}"#,
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":"not json {"}"#,
            r#"{"type":"function_call"}"#,
            r#"{"type":"function_call","id":5,"status":null,"call_id":9,"name":["x"],"arguments":true}"#,
            // Message parts of every kind and shape.
            r#"{"type":"message","id":"m","content":[{"type":"output_text","text":"a"},{"type":"refusal","refusal":"no"},{"type":"reasoning_text","text":"r"},{"type":"output_text"},5,null,"x",[1],{"type":"refusal","text":"t"},{"text":"untyped"}]}"#,
            r#"{"type":"message","id":"m","status":"incomplete","content":[{"type":"refusal","refusal":"I can't","annotations":[{"x":1}]}]}"#,
            r#"{"type":"message","id":"m","content":[{"type":"output_text","text":"t","annotations":[{"type":"url_citation","url":"https://e.com","title":"é","start_index":0,"end_index":1}]}]}"#,
            r#"{"type":"message","id":"m","content":[{"type":"output_text","text":"t","annotations":{"a":1}},{"type":"output_text","text":"u","annotations":null},{"type":"output_text","text":7,"annotations":"s"}]}"#,
            r#"{"type":"message","content":[]}"#,
            r#"{"type":"message","content":{"type":"output_text","text":"not an array"}}"#,
            r#"{"type":"message","content":null,"id":null,"phase":3}"#,
            r#"{"type":"message"}"#,
            // Reasoning, with and without summary, with reasoning text, encrypted.
            r#"{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"thought \u00e9"},{"type":"summary_text","text":" more"},{"type":"other","text":"x"}],"encrypted_content":"gAAA\/+=="}"#,
            r#"{"type":"reasoning","id":"rs_2"}"#,
            r#"{"type":"reasoning","summary":null,"content":[{"type":"reasoning_text","text":"raw"},{"type":"reasoning_text","text":5}]}"#,
            r#"{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"raw only"}],"encrypted_content":null}"#,
            r#"{"type":"reasoning","summary":{"type":"summary_text"},"status":"completed","big":[1e300,-0,0.1,{"a":[[]]}]}"#,
            // Duplicate keys: the last one counts, as in a `Value` map.
            r#"{"type":"function_call","type":"message","content":[{"type":"output_text","text":"first","text":"second"}],"content":[{"type":"output_text","text":"last"}]}"#,
            r#"{"type":"message","type":"function_call","name":"n1","name":"n2","call_id":"c","arguments":"{}","arguments":{"k":1}}"#,
            r#"{"type":"reasoning","summary":[],"summary":[{"type":"summary_text","text":"dup"}]}"#,
            // Unknown kinds and fields, null fields.
            r#"{"type":"web_search_call","id":"ws_1","status":"completed","action":{"query":"q"}}"#,
            r#"{"type":null}"#,
            r#"{"type":5,"content":[{"type":"output_text","text":"x"}]}"#,
            r#"{}"#,
            r#"{"type":"function_call","call_id":"c","name":"f","arguments":"{}","extra":{"deep":[[[["x"]]]],"n":-12,"f":1.5e-7,"u":"\u0000"}}"#,
        ];
        for item in items {
            agree(&format!(r#"{{"status":"completed","output":[{item}]}}"#));
            agree(&format!(r#"{{"output":[{item},{item}],"model":"m"}}"#));
            for other in items {
                agree(&format!(r#"{{"output":[{item},{other}]}}"#));
            }
        }
    }

    /// Envelope fields (status, incomplete details, usage, model, error,
    /// echoed request fields) of every shape, and bodies the narrow reading
    /// must refuse exactly as the whole value does.
    #[test]
    fn tricky_envelopes_decode_exactly_as_the_whole_value() {
        let msg = r#"{"type":"message","id":"m","content":[{"type":"output_text","text":"hi"}]}"#;
        let bodies = [
            format!(
                r#"{{"output":[{msg}],"status":null,"model":null,"usage":null,"incomplete_details":null,"error":null}}"#
            ),
            format!(r#"{{"output":[{msg}],"status":"incomplete","incomplete_details":{{"reason":"content_filter"}}}}"#),
            format!(
                r#"{{"output":[{msg}],"status":"incomplete","incomplete_details":{{"reason":"other","reason":"max_output_tokens"}}}}"#
            ),
            format!(r#"{{"output":[{msg}],"status":"incomplete","incomplete_details":"max_output_tokens"}}"#),
            format!(r#"{{"output":[{msg}],"status":"incomplete","incomplete_details":{{"reason":5}}}}"#),
            format!(r#"{{"output":[{msg}],"status":"incomplete"}}"#),
            format!(r#"{{"output":[{msg}],"status":"in_progress"}}"#),
            format!(r#"{{"output":[{msg}],"status":7}}"#),
            format!(
                r#"{{"output":[{msg}],"status":"completed","status":"failed","error":{{"code":"c","message":"m"}}}}"#
            ),
            format!(r#"{{"output":[{msg}],"status":"failed","status":"completed"}}"#),
            format!(r#"{{"status":"failed","output":[{msg}],"error":{{"type":"t"}}}}"#),
            format!(r#"{{"output":[{msg}],"model":"a","model":"b\u00e9"}}"#),
            format!(r#"{{"output":[{msg}],"model":{{"name":"m"}}}}"#),
            format!(r#"{{"output":[{msg}],"error":{{"message":"ignored with an output"}}}}"#),
            format!(r#"{{"output":null,"output":[{msg}]}}"#),
            format!(r#"{{"output":[{msg}],"output":null}}"#),
            format!(r#"{{"output":[{msg}],"output":"x"}}"#),
            format!(r#"{{"output":[{msg},7]}}"#),
            r#"{"output":[null]}"#.to_string(),
            format!(r#"[[{msg}]]"#),
            format!(r#"{{"output":[{msg}]}} trailing"#),
            format!(r#"{{"output":[{msg}],"tools":[{{"type":"function","parameters":{{"x":1e400}}}}]}}"#),
            format!(r#"{{"output":[{msg}],"instructions":"\ud800"}}"#),
            format!(
                r#"{{"output":[{msg}],"instructions":"ok \ud83d\ude00","metadata":{{}},"text":{{"format":{{"type":"text"}}}}}}"#
            ),
            r#"{"output":[{"type":"message","x":-1e400}]}"#.to_string(),
            r#"{"output":[{"type":"reasoning","x":1e400}]}"#.to_string(),
            r#"{"output":[{"type":"message","content":[{"type":"output_text","text":"\udc00"}]}]}"#.to_string(),
            r#"{"output":[],"error":{"message":"x"},"output":[]}"#.to_string(),
            r#"{"error":null}"#.to_string(),
            r#"{}"#.to_string(),
        ];
        for body in &bodies {
            agree(body);
        }
        // Usage of every shape: a field of the wrong type loses the usage, not the turn.
        let usages = [
            r#"{"input_tokens":10,"output_tokens":3,"total_tokens":13,"input_tokens_details":{"cached_tokens":4},"output_tokens_details":{"reasoning_tokens":2}}"#,
            r#"{"input_tokens":10,"output_tokens":3,"total_tokens":0}"#,
            r#"{"input_tokens":10,"input_tokens":11}"#,
            r#"{"input_tokens":null,"output_tokens":null,"total_tokens":null,"input_tokens_details":null}"#,
            r#"{"input_tokens":-1}"#,
            r#"{"input_tokens":1.0}"#,
            r#"{"input_tokens":-0}"#,
            r#"{"input_tokens":"10"}"#,
            r#"{"input_tokens":[10]}"#,
            r#"{"input_tokens":18446744073709551615,"output_tokens":1}"#,
            r#"{"input_tokens":18446744073709551616}"#,
            r#"{"input_tokens_details":{"cached_tokens":"many","reasoning_tokens":-3}}"#,
            r#"{"input_tokens_details":{"cached_tokens":1,"cached_tokens":2.0},"output_tokens_details":{"reasoning_tokens":{"a":1}}}"#,
            r#"{"input_tokens_details":[]}"#,
            r#"{"input_tokens_details":[5]}"#,
            r#"{"output_tokens_details":[5,6]}"#,
            r#"{"output_tokens_details":[5,6,7]}"#,
            r#"{"output_tokens_details":"x"}"#,
            r#"{"output_tokens_details":true}"#,
            r#"{"output_tokens_details":3}"#,
            r#"{"other":{"x":[1,2]},"input_tokens":5}"#,
            r#"{}"#,
            r#"[1,2,3]"#,
            r#""usage""#,
            r#"{"input_tokens":1e400}"#,
        ];
        for usage in usages {
            agree(&format!(r#"{{"output":[{msg}],"usage":{usage}}}"#));
            agree(&format!(r#"{{"usage":{{"input_tokens":1}},"output":[],"usage":{usage}}}"#));
        }
        // Nesting at and past the depth limit, in an item and in an echoed field.
        for depth in 120..=130 {
            let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            agree(&format!(r#"{{"output":[{{"type":"message","x":{deep}}}]}}"#));
            agree(&format!(r#"{{"output":[{{"type":"reasoning","x":{deep}}}]}}"#));
            agree(&format!(r#"{{"output":[{msg}],"tools":{deep}}}"#));
        }
    }

    /// A compaction item is read whole (body and stream alike), kept on its
    /// turn, and written back in its input form by both body writers; every
    /// other style leaves it out.
    #[test]
    fn a_compaction_item_goes_back_in_its_input_form_and_nowhere_else() {
        let item = json!({"id": "cmp_1", "type": "compaction", "encrypted_content": "gAAA==", "created_by": "s"});
        let call = json!({"id": "fc_1", "type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"});
        let body = json!({"status": "completed", "output": [item, call]}).to_string();
        let turn = decode_response(body.as_bytes(), &mut crate::provider::CallIds::default()).unwrap();
        assert_eq!(decode_whole(body.as_bytes()).unwrap().content, turn.content, "both readings agree");
        assert_eq!(turn.content.len(), 2);
        assert_eq!(
            compaction_item(match &turn.content[0] {
                Block::Text { provider_data, text } if text.is_empty() => provider_data.as_ref(),
                other => panic!("{other:?}"),
            }),
            Some(&item)
        );
        let messages =
            [Message::user("go"), Message { role: Role::Assistant, content: turn.content }, Message::user("more")];
        let no_params = Map::new();
        let call = ModelCall {
            model: "m",
            system: None,
            messages: &messages,
            tools: &[],
            max_tokens: None,
            stream: false,
            params: &no_params,
            output: None,
        };
        let v = encode_body(&call);
        assert_eq!(v["input"][1], json!({"encrypted_content": "gAAA==", "id": "cmp_1", "type": "compaction"}));
        assert_eq!(Style::OpenAiResponses.body_bytes(&call), serde_json::to_vec(&v).unwrap());
        for other in [Style::Anthropic, Style::OpenAi, Style::Gemini] {
            let text = String::from_utf8(other.body_bytes(&call)).unwrap();
            assert!(!text.contains("gAAA") && !text.contains("cmp_1"), "{other:?}: {text}");
        }
    }
}
