//! The OpenAI Responses API as a surface: a `POST /v1/responses` request
//! read into the neutral form ([`read_responses_request`]), and a decoded
//! turn written back as a Responses `response` object ([`turn_to_responses`])
//! or as the full SSE event sequence a Responses client expects
//! ([`turn_to_responses_events`]). With these a gateway can serve Responses
//! clients (Codex CLI, the Agents SDK) from any upstream style: read the
//! request, encode it with the upstream's [`Style`](crate::Style), decode
//! the answer into a [`TurnResponse`], write it back here.
//!
//! Stateless only, like the loop's Responses style: `previous_response_id`,
//! `conversation` and items referred to by id alone are refused with a 400
//! naming them, since nothing is stored between requests. Output items the
//! client sends back (reasoning with its encrypted content, messages with
//! their ids and phase, function calls with their item ids) are read by the
//! same code that decodes them from a Responses upstream, so a Responses
//! upstream gets them back verbatim, and another upstream never sees them.

use serde_json::{json, Map, Value};

use super::TranslateError;
use crate::message::{Block, ImageSource, Message, Role, ToolResultBlock};
use crate::provider::responses::{message_meta, own, reasoning_item, Item, KEY};
use crate::provider::{StopReason, TurnResponse};
use crate::tool::ToolDecl;

/// A Responses request in neutral form.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponsesRequest {
    /// `model`, as given.
    pub model: String,
    /// `instructions`, followed by any `system` / `developer` input messages
    /// (joined with a blank line).
    pub system: Option<String>,
    /// The conversation: consecutive output items make one assistant turn,
    /// consecutive inputs one user turn (tool results first).
    pub messages: Vec<Message>,
    /// The function tools.
    pub tools: Vec<ToolDecl>,
    /// Which tools asked for `strict` (in the order of `tools`).
    pub strict: Vec<bool>,
    /// `max_output_tokens`.
    pub max_tokens: Option<u32>,
    /// `stream`.
    pub stream: bool,
    /// What was left out, by name: hosted tools (`web_search`,
    /// `file_search`, `code_interpreter`, `computer_use_preview`, `mcp`, …),
    /// which only OpenAI's servers run, as `tools[i] (type)`, and the record
    /// of such tools' past runs in `input` as `input[i] (type)`.
    pub dropped: Vec<String>,
    /// Every other top-level setting, as given (`tool_choice`,
    /// `parallel_tool_calls`, `temperature`, `top_p`, `reasoning`, `text`,
    /// `store`, `include`, `metadata`, …): each upstream maps what it can and
    /// refuses the rest.
    pub settings: Map<String, Value>,
}

/// Reads a Responses request body. Malformed JSON, a stateful request or an
/// unknown input item is a 400 naming the field; hosted tools are left out
/// and named in [`ResponsesRequest::dropped`].
pub fn read_responses_request(body: &[u8]) -> Result<ResponsesRequest, TranslateError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid_json(format!("We could not parse the JSON body of your request: {e}")))?;
    let Value::Object(obj) = value else {
        return Err(TranslateError::not_an_object("the request body must be a JSON object"));
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(TranslateError::invalid("model", "Missing required parameter: 'model'.")),
    };
    for stateful in ["previous_response_id", "conversation"] {
        if obj.get(stateful).is_some_and(|v| !v.is_null()) {
            return Err(TranslateError {
                code: Some("unsupported_parameter".into()),
                ..TranslateError::invalid(
                    stateful,
                    format!("`{stateful}` is not supported: this server keeps no state; send the whole conversation in `input`"),
                )
            });
        }
    }
    let mut system: Vec<String> = Vec::new();
    let mut dropped = Vec::new();
    match obj.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => system.push(s.clone()),
        Some(_) => return Err(TranslateError::invalid("instructions", "`instructions` must be a string")),
    }
    let messages = match obj.get("input") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![Message::user(s.clone())],
        Some(Value::Array(items)) => read_input(items, &mut system, &mut dropped)?,
        Some(_) => return Err(TranslateError::invalid("input", "`input` must be a string or an array of items")),
    };
    let (tools, strict) = read_tools(obj.get("tools"), &mut dropped)?;
    let max_tokens = match obj.get("max_output_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| *n >= 1)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| TranslateError::invalid("max_output_tokens", "must be a positive integer"))?,
        ),
    };
    let stream = match obj.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(TranslateError::invalid("stream", "`stream` must be a boolean")),
    };
    let settings = obj
        .into_iter()
        .filter(|(k, v)| {
            !v.is_null()
                && !matches!(k.as_str(), "model" | "input" | "instructions" | "tools" | "max_output_tokens" | "stream")
        })
        .collect();
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    Ok(ResponsesRequest { model, system, messages, tools, strict, max_tokens, stream, dropped, settings })
}

fn read_tools(tools: Option<&Value>, dropped: &mut Vec<String>) -> Result<(Vec<ToolDecl>, Vec<bool>), TranslateError> {
    let items = match tools {
        None | Some(Value::Null) => return Ok((Vec::new(), Vec::new())),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(TranslateError::invalid("tools", "`tools` must be an array")),
    };
    let mut decls: Vec<ToolDecl> = Vec::with_capacity(items.len());
    let mut strict = Vec::with_capacity(items.len());
    for (i, tool) in items.iter().enumerate() {
        let at = format!("tools[{i}]");
        match tool.get("type").and_then(Value::as_str) {
            Some("function") => {}
            // Hosted tools run on OpenAI's servers; no other upstream has
            // them. Clients send them on every request, so they are dropped
            // and named rather than refused.
            Some(kind) => {
                dropped.push(format!("{at} ({kind})"));
                continue;
            }
            None => return Err(TranslateError::invalid(format!("{at}.type"), "a tool needs a `type`")),
        }
        let name = tool
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| TranslateError::invalid(format!("{at}.name"), "a function tool needs a name"))?;
        if decls.iter().any(|d| d.name == name) {
            return Err(TranslateError::invalid(format!("{at}.name"), format!("tool name {name:?} is declared twice")));
        }
        let description = tool.get("description").and_then(Value::as_str).unwrap_or_default();
        let schema = tool.get("parameters").cloned().unwrap_or(Value::Null);
        let decl = ToolDecl::new(name, description, schema);
        if decl.name != name {
            return Err(TranslateError::invalid(
                format!("{at}.name"),
                format!("tool name {name:?} has characters outside [a-zA-Z0-9_-]"),
            ));
        }
        decls.push(decl);
        // The Responses API's own default for function tools is strict.
        strict.push(tool.get("strict").and_then(Value::as_bool).unwrap_or(true));
    }
    Ok((decls, strict))
}

/// The input items as turns.
fn read_input(
    items: &[Value],
    system: &mut Vec<String>,
    dropped: &mut Vec<String>,
) -> Result<Vec<Message>, TranslateError> {
    let mut messages: Vec<Message> = Vec::new();
    let mut names: Vec<(String, String)> = Vec::new(); // call_id → name, for results
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let Some(obj) = item.as_object() else {
            return Err(TranslateError::invalid(at, "an input item must be an object"));
        };
        let kind = obj.get("type").and_then(Value::as_str).unwrap_or("message");
        let role = obj.get("role").and_then(Value::as_str);
        let (turn_role, blocks) = match (kind, role) {
            ("message", Some("system" | "developer")) => {
                system.push(text_of(obj.get("content"), &at)?);
                continue;
            }
            ("message", Some("user")) => (Role::User, user_blocks(obj.get("content"), &at)?),
            ("message", Some("assistant")) if obj.get("content").is_some_and(Value::is_string) => {
                let text = obj.get("content").and_then(Value::as_str).unwrap_or_default();
                (Role::Assistant, vec![Block::text(text)])
            }
            ("reasoning" | "function_call", _) | ("message", Some("assistant")) => {
                if kind == "reasoning" {
                    // Its summary and encrypted content are OpenAI's own: no other family takes them.
                    dropped.push(format!("{at} (reasoning)"));
                }
                let item = Item::read(item.clone()).map_err(|e| TranslateError::invalid(at.clone(), e.to_string()))?;
                let mut blocks = Vec::new();
                item.into_blocks(&mut blocks);
                for b in &blocks {
                    if let Block::ToolCall(c) = b {
                        if c.id.is_empty() || c.name.is_empty() {
                            return Err(TranslateError::invalid(at, "a function_call needs `call_id` and `name`"));
                        }
                        names.push((c.id.clone(), c.name.clone()));
                    }
                }
                (Role::Assistant, blocks)
            }
            ("message", _) => {
                return Err(TranslateError::invalid(
                    format!("{at}.role"),
                    "a message's role must be `user`, `assistant`, `system` or `developer`",
                ))
            }
            ("function_call_output", _) => {
                let call_id =
                    obj.get("call_id").and_then(Value::as_str).filter(|s| !s.is_empty()).ok_or_else(|| {
                        TranslateError::invalid(format!("{at}.call_id"), "a function_call_output needs `call_id`")
                    })?;
                let output = match obj.get("output") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Array(_)) => text_of(Some(v), &format!("{at}.output"))?,
                    _ => {
                        return Err(TranslateError::invalid(
                            format!("{at}.output"),
                            "`output` must be a string or parts",
                        ))
                    }
                };
                let name = names.iter().rev().find(|(id, _)| id == call_id).map(|(_, n)| n.clone()).unwrap_or_default();
                let result = ToolResultBlock { call_id: call_id.to_string(), name, output, is_error: false };
                (Role::User, vec![Block::ToolResult(result)])
            }
            // The record of a hosted tool's run: the upstream can neither run
            // nor read it, and nothing the client executed is lost with it.
            (
                kind @ ("web_search_call"
                | "file_search_call"
                | "code_interpreter_call"
                | "image_generation_call"
                | "mcp_list_tools"
                | "mcp_call"
                | "mcp_approval_request"
                | "mcp_approval_response"),
                _,
            ) => {
                dropped.push(format!("{at} ({kind})"));
                continue;
            }
            ("item_reference", _) => {
                return Err(TranslateError::invalid(
                    at,
                    "items cannot be referred to by id: this server keeps no state; send the item itself",
                ))
            }
            (other, _) => {
                return Err(TranslateError {
                    code: Some("unsupported_parameter".into()),
                    ..TranslateError::invalid(
                        format!("{at}.type"),
                        format!("input items of type {other:?} are not supported"),
                    )
                })
            }
        };
        match messages.last_mut() {
            Some(last) if last.role == turn_role => {
                if turn_role == Role::User && matches!(blocks.first(), Some(Block::ToolResult(_))) {
                    // Results first in a user turn: the order every style sends them in.
                    let at = last.content.iter().take_while(|b| matches!(b, Block::ToolResult(_))).count();
                    last.content.splice(at..at, blocks);
                } else {
                    last.content.extend(blocks);
                }
            }
            _ => messages.push(Message { role: turn_role, content: blocks }),
        }
    }
    Ok(messages)
}

/// The text of a content value: a string, or its text parts joined.
fn text_of(content: Option<&Value>, at: &str) -> Result<String, TranslateError> {
    match content {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for (j, part) in parts.iter().enumerate() {
                match part.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text") => {
                        out.push_str(part.get("text").and_then(Value::as_str).unwrap_or_default())
                    }
                    other => {
                        return Err(TranslateError::invalid(
                            format!("{at}.content[{j}]"),
                            format!("a part of type {other:?} cannot go here"),
                        ))
                    }
                }
            }
            Ok(out)
        }
        _ => Err(TranslateError::invalid(format!("{at}.content"), "`content` must be a string or parts")),
    }
}

/// A user message's blocks: text and images.
fn user_blocks(content: Option<&Value>, at: &str) -> Result<Vec<Block>, TranslateError> {
    let parts = match content {
        Some(Value::String(s)) => return Ok(vec![Block::text(s.clone())]),
        Some(Value::Array(parts)) => parts,
        _ => return Err(TranslateError::invalid(format!("{at}.content"), "`content` must be a string or parts")),
    };
    let mut out = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let p = format!("{at}.content[{j}]");
        match part.get("type").and_then(Value::as_str) {
            Some("input_text") => out.push(Block::text(part.get("text").and_then(Value::as_str).unwrap_or_default())),
            Some("input_image") => {
                let url = part.get("image_url").and_then(Value::as_str).ok_or_else(|| {
                    TranslateError::invalid(
                        format!("{p}.image_url"),
                        "only images given by URL or data URL are supported",
                    )
                })?;
                out.push(image_block(url));
            }
            other => {
                return Err(TranslateError {
                    code: Some("unsupported_parameter".into()),
                    ..TranslateError::invalid(p, format!("user content parts of type {other:?} are not supported"))
                })
            }
        }
    }
    Ok(out)
}

/// A data URL becomes inline bytes; any other URL stays a URL.
fn image_block(url: &str) -> Block {
    if let Some(rest) = url.strip_prefix("data:") {
        if let Some((media_type, data)) = rest.split_once(";base64,") {
            return Block::Image {
                media_type: media_type.to_string(),
                source: ImageSource::Base64 { data: data.to_string() },
            };
        }
    }
    let lower = url.to_ascii_lowercase();
    let media_type = if lower.ends_with(".png") {
        "image/png"
    } else if lower.ends_with(".gif") {
        "image/gif"
    } else if lower.ends_with(".webp") {
        "image/webp"
    } else {
        "image/jpeg"
    };
    Block::Image { media_type: media_type.to_string(), source: ImageSource::Url { url: url.to_string() } }
}

// ---------------------------------------------------------------- answers

/// What a response object says about itself; the core reads no clock, so
/// the caller supplies `created_at`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResponseMeta {
    /// `resp_…`, unique per response: item ids are derived from it.
    pub id: String,
    /// The model name reported to the client.
    pub model: String,
    /// Unix seconds.
    pub created_at: u64,
    /// The request's settings as the response reports them back
    /// ([`response_echo`]); empty: the API's defaults.
    pub echo: Map<String, Value>,
}

/// The settings a response object reports back from its request — every
/// one of them, as the Responses API (and the OpenResponses schema, which
/// requires each field) does: the request's value, else the API's default.
/// Function tools are echoed with their `strict` flag; tools that were
/// dropped (hosted ones) are not. Server-side features the gateway does not
/// offer (`store`, `background`, `previous_response_id`) report their off
/// value. A body that is not a JSON object gives the defaults.
pub fn response_echo(request_body: &[u8]) -> Map<String, Value> {
    let request: Map<String, Value> = serde_json::from_slice(request_body).unwrap_or_default();
    let given = |key: &str| request.get(key).filter(|v| !v.is_null()).cloned();
    let tools: Vec<Value> = request
        .get("tools")
        .and_then(Value::as_array)
        .map(|tools| {
            tools
                .iter()
                .filter(|t| t.get("type").and_then(Value::as_str) == Some("function"))
                .map(|t| {
                    json!({
                        "type": "function",
                        "name": t.get("name").cloned().unwrap_or(Value::Null),
                        "description": t.get("description").cloned().unwrap_or(Value::Null),
                        "parameters": t.get("parameters").cloned().unwrap_or(Value::Null),
                        "strict": t.get("strict").cloned().unwrap_or(Value::Null),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let mut echo = Map::new();
    let mut put = |key: &str, default: Value| {
        echo.insert(key.to_string(), given(key).unwrap_or(default));
    };
    put("instructions", Value::Null);
    put("tool_choice", json!("auto"));
    put("parallel_tool_calls", json!(true));
    put("temperature", json!(1.0));
    put("top_p", json!(1.0));
    put("presence_penalty", json!(0.0));
    put("frequency_penalty", json!(0.0));
    put("top_logprobs", json!(0));
    put("max_output_tokens", Value::Null);
    put("max_tool_calls", Value::Null);
    put("truncation", json!("disabled"));
    put("text", json!({"format": {"type": "text"}}));
    put("reasoning", Value::Null);
    put("metadata", json!({}));
    put("safety_identifier", Value::Null);
    put("prompt_cache_key", Value::Null);
    put("service_tier", json!("default"));
    echo.insert("tools".into(), Value::Array(tools));
    echo.insert("store".into(), json!(false));
    echo.insert("background".into(), json!(false));
    echo.insert("previous_response_id".into(), Value::Null);
    echo
}

/// A decoded turn as a Responses `response` object: the output items in
/// order (reasoning, messages, function calls), `status` (`incomplete` with
/// its reason for an output cap or a filter) and usage. Items that came from
/// a Responses upstream keep their ids, phase and encrypted content; others
/// get ids derived from `meta.id`. Reasoning from another provider is
/// reported as its summary text, without encrypted content (its signature
/// cannot travel through this API).
pub fn turn_to_responses(turn: &TurnResponse, meta: &ResponseMeta) -> Value {
    let (status, incomplete) = match turn.stop.reason {
        StopReason::MaxTokens => ("incomplete", json!({"reason": "max_output_tokens"})),
        StopReason::ContentFilter => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    };
    response_object(meta, status, incomplete, output_items(turn, meta), usage(turn))
}

pub(super) fn response_object(
    meta: &ResponseMeta,
    status: &str,
    incomplete: Value,
    output: Vec<Value>,
    usage: Value,
) -> Value {
    let mut obj = if meta.echo.is_empty() { response_echo(b"") } else { meta.echo.clone() };
    // Answered from one upstream call: it completes the second it is written.
    let completed_at = if status == "completed" { json!(meta.created_at) } else { Value::Null };
    for (key, value) in [
        ("id", json!(meta.id)),
        ("object", json!("response")),
        ("created_at", json!(meta.created_at)),
        ("completed_at", completed_at),
        ("status", json!(status)),
        ("error", Value::Null),
        ("incomplete_details", incomplete),
        ("model", json!(meta.model)),
        ("output", Value::Array(output)),
        ("usage", usage),
    ] {
        obj.insert(key.to_string(), value);
    }
    Value::Object(obj)
}

fn usage(turn: &TurnResponse) -> Value {
    if !turn.usage_reported {
        return Value::Null;
    }
    json!({
        "input_tokens": turn.usage.prompt_tokens,
        "input_tokens_details": {"cached_tokens": turn.usage.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": turn.usage.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": turn.usage.reasoning_tokens},
        "total_tokens": turn.usage.total_tokens,
    })
}

/// The output items of a turn, complete.
fn output_items(turn: &TurnResponse, meta: &ResponseMeta) -> Vec<Value> {
    let token = meta.id.strip_prefix("resp_").unwrap_or(&meta.id);
    let id = |prefix: &str, n: usize| format!("{prefix}{token}_{n}");
    let mut out: Vec<Value> = Vec::new();
    let mut open_message: Option<(Option<String>, usize)> = None; // (id of ours, index in out)
    for (n, block) in turn.content.iter().enumerate() {
        match block {
            Block::Reasoning { text, provider_data, .. } => {
                open_message = None;
                out.push(match reasoning_item(provider_data.as_ref()) {
                    Some(item) => item.clone(),
                    None => json!({"id": id("rs_", n), "type": "reasoning",
                                   "summary": if text.is_empty() { json!([]) } else { json!([{"type": "summary_text", "text": text}]) }}),
                });
            }
            Block::Text { text, provider_data } => {
                let meta_of = message_meta(provider_data.as_ref());
                let own_id = meta_of.and_then(|m| m.get("id")).and_then(Value::as_str).map(str::to_string);
                let part = match meta_of {
                    Some(m) if m.get("refusal").and_then(Value::as_bool) == Some(true) => {
                        json!({"type": "refusal", "refusal": text})
                    }
                    m => json!({"type": "output_text", "text": text,
                                "annotations": m.and_then(|m| m.get("annotations")).cloned().unwrap_or(json!([]))}),
                };
                // Another style's empty opaque block has nothing to show.
                if text.is_empty() && meta_of.is_none() {
                    continue;
                }
                match &open_message {
                    Some((open_id, at)) if *open_id == own_id || own_id.is_none() && open_id.is_none() => {
                        if let Some(content) = out[*at]["content"].as_array_mut() {
                            content.push(part);
                        }
                    }
                    _ => {
                        let mut item = json!({"id": own_id.clone().unwrap_or_else(|| id("msg_", n)), "type": "message",
                            "status": "completed", "role": "assistant", "content": [part]});
                        if let Some(phase) = meta_of.and_then(|m| m.get("phase")) {
                            item["phase"] = phase.clone();
                        }
                        open_message = Some((own_id, out.len()));
                        out.push(item);
                    }
                }
            }
            Block::ToolCall(call) => {
                open_message = None;
                let item_id = own(call.provider_data.as_ref())
                    .and_then(|m| m.get("id"))
                    .and_then(Value::as_str)
                    .map_or_else(|| id("fc_", n), str::to_string);
                let arguments = if call.arguments.is_empty() { "{}" } else { call.arguments.as_str() };
                out.push(json!({"id": item_id, "type": "function_call", "status": "completed",
                                "call_id": call.id, "name": call.name, "arguments": arguments}));
            }
            Block::Image { .. } | Block::ToolResult(_) => {}
        }
    }
    out
}

/// A decoded turn as the SSE events of a streamed Responses answer, each a
/// complete `event: <type>\ndata: <json>\n\n`: `response.created`,
/// `response.in_progress`, then for every output item its
/// `output_item.added`, its part and delta events and its
/// `output_item.done`, and last `response.completed` (or
/// `response.incomplete`) with the whole response. This is the sequence
/// Responses clients check (deltas only inside an added item and part; a
/// terminal event with usage). `sequence_number` counts from 0.
pub fn turn_to_responses_events(turn: &TurnResponse, meta: &ResponseMeta) -> Vec<String> {
    let mut seq = 0u64;
    let mut out = Vec::new();
    let mut ev = |mut data: Value| {
        data["sequence_number"] = json!(seq);
        seq += 1;
        let kind = data["type"].as_str().unwrap_or_default().to_string();
        out.push(format!("event: {kind}\ndata: {data}\n\n"));
    };
    let pending = response_object(meta, "in_progress", Value::Null, Vec::new(), Value::Null);
    ev(json!({"type": "response.created", "response": pending}));
    ev(json!({"type": "response.in_progress", "response": pending}));
    let full = turn_to_responses(turn, meta);
    let items = full["output"].as_array().cloned().unwrap_or_default();
    for (index, item) in items.iter().enumerate() {
        let item_id = item["id"].clone();
        let mut added = item.clone();
        match item["type"].as_str() {
            Some("reasoning") => {
                added["summary"] = json!([]);
                ev(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                for (s, part) in item["summary"].as_array().into_iter().flatten().enumerate() {
                    let text = part["text"].clone();
                    let base = json!({"item_id": item_id, "output_index": index, "summary_index": s});
                    ev(with(
                        &base,
                        json!({"type": "response.reasoning_summary_part.added", "part": {"type": "summary_text", "text": ""}}),
                    ));
                    ev(with(&base, json!({"type": "response.reasoning_summary_text.delta", "delta": text})));
                    ev(with(&base, json!({"type": "response.reasoning_summary_text.done", "text": text})));
                    ev(with(&base, json!({"type": "response.reasoning_summary_part.done", "part": part})));
                }
            }
            Some("message") => {
                added["status"] = json!("in_progress");
                added["content"] = json!([]);
                ev(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                for (c, part) in item["content"].as_array().into_iter().flatten().enumerate() {
                    let base = json!({"item_id": item_id, "output_index": index, "content_index": c});
                    let refusal = part["type"] == "refusal";
                    let empty = if refusal {
                        json!({"type": "refusal", "refusal": ""})
                    } else {
                        json!({"type": "output_text", "text": "", "annotations": []})
                    };
                    ev(with(&base, json!({"type": "response.content_part.added", "part": empty})));
                    if refusal {
                        ev(with(&base, json!({"type": "response.refusal.delta", "delta": part["refusal"]})));
                        ev(with(&base, json!({"type": "response.refusal.done", "refusal": part["refusal"]})));
                    } else {
                        ev(with(
                            &base,
                            json!({"type": "response.output_text.delta", "delta": part["text"], "logprobs": []}),
                        ));
                        ev(with(
                            &base,
                            json!({"type": "response.output_text.done", "text": part["text"], "logprobs": []}),
                        ));
                    }
                    ev(with(&base, json!({"type": "response.content_part.done", "part": part})));
                }
            }
            _ => {
                added["status"] = json!("in_progress");
                added["arguments"] = json!("");
                ev(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                let base = json!({"item_id": item_id, "output_index": index});
                ev(with(&base, json!({"type": "response.function_call_arguments.delta", "delta": item["arguments"]})));
                ev(with(
                    &base,
                    json!({"type": "response.function_call_arguments.done", "arguments": item["arguments"],
                                      "name": item["name"]}),
                ));
            }
        }
        ev(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
    }
    let terminal = if full["status"] == "incomplete" { "response.incomplete" } else { "response.completed" };
    ev(json!({"type": terminal, "response": full}));
    out
}

/// `base`'s keys with `extra`'s added.
fn with(base: &Value, extra: Value) -> Value {
    let mut v = base.clone();
    if let (Some(obj), Value::Object(extra)) = (v.as_object_mut(), extra) {
        obj.extend(extra);
    }
    v
}

/// This style's key, for callers checking what a transcript carries.
pub const PROVIDER_DATA_KEY: &str = KEY;
