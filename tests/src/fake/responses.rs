//! OpenAI Responses (`POST /v1/responses`): request checks, response
//! objects, SSE streams (`event: <type>` + `data:`, no `[DONE]`) and error
//! bodies. Auth and error bodies are Chat Completions'.
//!
//! The checks are the 400s the API answers a stateless replay with (texts
//! from the recorded corpus and the API's documented messages): a
//! `function_call` without its `function_call_output` and the reverse, a
//! reasoning item without the item that followed it, a reasoning item
//! without `summary`, and any item referred to by id alone while `store` is
//! false (nothing is persisted, so the API answers 404).
//!
//! Server-side compaction: a request with `context_management: [{type:
//! "compaction", compact_threshold}]` whose input after its last
//! `compaction` item (the API drops what came before) counts more than the
//! threshold is answered with a `compaction` item first. A compaction item
//! sent back must be one this server issued (its `encrypted_content` is
//! derived from its id) and carry only the input fields.

use serde_json::{json, Value};

use super::openai::{error, error_full};
use super::wire::{argument_fragments, now_secs, stable_id, to_json, to_pretty, Ctx, Parsed, Reject};

fn kind(item: &Value) -> &str {
    item.get("type").and_then(Value::as_str).unwrap_or("message")
}

fn is_output_item(item: &Value) -> bool {
    match kind(item) {
        "reasoning" | "function_call" | "compaction" => true,
        "message" => item.get("role").and_then(Value::as_str) == Some("assistant"),
        _ => false,
    }
}

fn str_of<'a>(item: &'a Value, key: &str) -> &'a str {
    item.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The `input` items (a string input is one user message).
fn items(body: &Value) -> Vec<Value> {
    match body.get("input") {
        Some(Value::Array(items)) => items.clone(),
        Some(Value::String(s)) => vec![json!({"role": "user", "content": s})],
        _ => Vec::new(),
    }
}

/// Reads and checks a Responses request body.
pub fn parse(body: &Value) -> Result<Parsed, Reject> {
    let Some(obj) = body.as_object() else {
        return Err(super::openai::malformed_request());
    };
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => {
            return Err(error_full(
                400,
                "Missing required parameter: 'model'.",
                "invalid_request_error",
                Some("model"),
                Some("missing_required_parameter"),
            ))
        }
    };
    if obj.contains_key("previous_response_id") && obj.contains_key("conversation") {
        return Err(error_full(
            400,
            "Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' or 'conversation'.",
            "invalid_request_error",
            None,
            Some("mutually_exclusive_parameters"),
        ));
    }
    let stream = obj.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if obj.get("stream_options").is_some_and(|v| !v.is_null()) && !stream {
        return Err(error_full(
            400,
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
            "invalid_request_error",
            Some("stream_options"),
            None,
        ));
    }
    let items = items(body);
    // A model turn is a run of output items between inputs.
    let assistant_turns = items
        .iter()
        .enumerate()
        .filter(|(i, it)| is_output_item(it) && (*i == 0 || !is_output_item(&items[i - 1])))
        .count();
    let tool_results = items
        .iter()
        .filter(|it| kind(it) == "function_call_output")
        .map(|it| match it.get("output") {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        })
        .collect();
    // Messages as Chat Completions counts them: each input item, and each
    // model turn (a run of output items) as one assistant message.
    let messages = items.len()
        - items
            .iter()
            .enumerate()
            .filter(|(i, it)| is_output_item(it) && *i > 0 && is_output_item(&items[i - 1]))
            .count();
    Ok(Parsed { model, stream, include_usage: false, assistant_turns, messages, tool_results })
}

/// The opaque content of compaction item `id` of `model`.
fn encrypted_for(model: &str, id: &str) -> String {
    format!("gAAAAAcmp{}", stable_id("", &[model, id, "compaction"], 48))
}

/// The threshold a request asks server-side compaction at (`None`: not
/// asked), with the API's 400 for a malformed `context_management`.
pub fn compact_threshold(body: &Value) -> Result<Option<u64>, Reject> {
    let entries = match body.get("context_management") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(entries)) => entries,
        Some(other) => {
            let got = if other.is_object() { "an object" } else { "a scalar" };
            return Err(error_full(
                400,
                &format!("Invalid type for 'context_management': expected an array, but got {got} instead."),
                "invalid_request_error",
                Some("context_management"),
                Some("invalid_type"),
            ));
        }
    };
    let mut threshold = None;
    for (i, entry) in entries.iter().enumerate() {
        let kind = entry.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind != "compaction" {
            return Err(error_full(
                400,
                &format!("Invalid value: '{kind}'. Supported values are: 'compaction'."),
                "invalid_request_error",
                Some(&format!("context_management[{i}].type")),
                Some("invalid_value"),
            ));
        }
        match entry.get("compact_threshold") {
            None | Some(Value::Null) => {}
            Some(v) => match v.as_u64().filter(|n| *n >= 1) {
                Some(n) => threshold = Some(n),
                None => {
                    return Err(error_full(
                        400,
                        &format!("Invalid 'context_management[{i}].compact_threshold': expected a positive integer."),
                        "invalid_request_error",
                        Some(&format!("context_management[{i}].compact_threshold")),
                        Some("invalid_value"),
                    ))
                }
            },
        }
    }
    // Without a threshold the API uses its own, far above what a test sends.
    Ok(Some(threshold.unwrap_or(u64::MAX)))
}

/// The fake's count of a request's input after its last compaction item
/// (what the API still renders), the rest of the body included.
pub fn tokens_since_compaction(body: &Value) -> u64 {
    let mut body = body.clone();
    if let Some(Value::Array(items)) = body.get_mut("input") {
        if let Some(last) = items.iter().rposition(|it| kind(it) == "compaction") {
            items.drain(..last);
        }
    }
    super::fake_token_count(&body)
}

/// The conversation rules the API enforces with a 400 (or a 404 for items it
/// was asked to look up).
pub fn check_balance(body: &Value, model: &str) -> Result<(), Reject> {
    let items = items(body);
    let stored = body.get("store").and_then(Value::as_bool).unwrap_or(true);
    for (i, item) in items.iter().enumerate() {
        let k = kind(item);
        if k == "item_reference" || (item.get("id").is_some() && item.as_object().is_some_and(|o| o.len() == 1)) {
            let id = str_of(item, "id");
            if !stored {
                return Err(error_full(
                    404,
                    &format!(
                        "Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try \
                         again with `store` set to true, or remove this item from your input."
                    ),
                    "invalid_request_error",
                    Some("input"),
                    None,
                ));
            }
            continue;
        }
        match k {
            "compaction" => {
                if let Some(extra) = item.as_object().and_then(|o| {
                    o.keys().find(|key| !matches!(key.as_str(), "type" | "id" | "encrypted_content")).cloned()
                }) {
                    return Err(error_full(
                        400,
                        &format!("Unknown parameter: 'input[{i}].{extra}'."),
                        "invalid_request_error",
                        Some(&format!("input[{i}].{extra}")),
                        Some("unknown_parameter"),
                    ));
                }
                let id = str_of(item, "id");
                if str_of(item, "encrypted_content") != encrypted_for(model, id) {
                    return Err(error_full(
                        400,
                        &format!("The encrypted content for item {id} could not be verified."),
                        "invalid_request_error",
                        Some("input"),
                        Some("invalid_encrypted_content"),
                    ));
                }
            }
            "reasoning" => {
                if !item.get("summary").is_some_and(Value::is_array) {
                    return Err(error_full(
                        400,
                        &format!("Missing required parameter: 'input[{i}].summary'."),
                        "invalid_request_error",
                        Some(&format!("input[{i}].summary")),
                        Some("missing_required_parameter"),
                    ));
                }
                let followed = items.get(i + 1).is_some_and(|next| {
                    matches!(kind(next), "message" | "function_call")
                        && is_output_item(next)
                        && next.get("id").and_then(Value::as_str).is_some_and(|id| !id.is_empty())
                });
                if !followed {
                    return Err(error_full(
                        400,
                        &format!(
                            "Item '{}' of type 'reasoning' was provided without its required following item.",
                            str_of(item, "id")
                        ),
                        "invalid_request_error",
                        Some("input"),
                        None,
                    ));
                }
            }
            "function_call" => {
                let id = str_of(item, "call_id");
                let answered = items[i + 1..]
                    .iter()
                    .any(|later| kind(later) == "function_call_output" && str_of(later, "call_id") == id);
                if !answered {
                    return Err(error(400, &format!("No tool output found for function call {id}.")));
                }
            }
            "function_call_output" => {
                let id = str_of(item, "call_id");
                let called = items[..i]
                    .iter()
                    .any(|earlier| kind(earlier) == "function_call" && str_of(earlier, "call_id") == id);
                if !called {
                    return Err(error(400, &format!("No tool call found for function call output with call_id {id}.")));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// `(status, incomplete reason)` of the answer.
fn status(ctx: &Ctx<'_>) -> (&'static str, Option<String>) {
    match ctx.turn.stop_reason.as_deref() {
        Some("max_tokens" | "max_output_tokens") => ("incomplete", Some("max_output_tokens".into())),
        Some("content_filter") => ("incomplete", Some("content_filter".into())),
        _ => ("completed", None),
    }
}

fn usage(ctx: &Ctx<'_>) -> Value {
    let u = ctx.turn.usage;
    json!({
        "input_tokens": u.input,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": u.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input + u.output,
    })
}

/// The output items of the answer, complete, in order.
fn output(ctx: &Ctx<'_>) -> Vec<Value> {
    let mut out = Vec::new();
    let id = |prefix: &str, n: usize| stable_id(prefix, &[ctx.model, &ctx.turn_index.to_string(), &n.to_string()], 40);
    if ctx.compaction {
        let cmp = id("cmp_", 99);
        out.push(json!({"id": cmp, "type": "compaction", "encrypted_content": encrypted_for(ctx.model, &cmp)}));
    }
    if let Some(thinking) = &ctx.turn.thinking {
        let encrypted =
            if thinking.signature.is_empty() { format!("gAAAAA{}", id("", 0)) } else { thinking.signature.clone() };
        let summary: Vec<Value> = if thinking.text.is_empty() {
            vec![]
        } else {
            vec![json!({"type": "summary_text", "text": thinking.text})]
        };
        out.push(json!({"id": id("rs_", 0), "type": "reasoning", "encrypted_content": encrypted, "summary": summary}));
    }
    if let Some(text) = ctx.text() {
        out.push(json!({
            "id": id("msg_", 1), "type": "message", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}],
        }));
    }
    for (i, call) in ctx.turn.tool_calls.iter().enumerate() {
        out.push(json!({
            "id": id("fc_", 2 + i), "type": "function_call", "status": "completed",
            "arguments": call.arguments, "call_id": ctx.call_id(i, "call_"), "name": call.name,
        }));
    }
    out
}

fn response(ctx: &Ctx<'_>, state: &str, output: Vec<Value>, usage: Value, incomplete: Option<String>) -> Value {
    json!({
        "id": ctx.answer_id("resp_"),
        "object": "response",
        "created_at": now_secs(),
        "status": state,
        "background": false,
        "error": null,
        "incomplete_details": incomplete.map(|r| json!({"reason": r})),
        "instructions": null,
        "max_output_tokens": null,
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "store": false,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "metadata": {},
    })
}

/// The whole (non-streaming) response object.
pub fn body(ctx: &Ctx<'_>) -> Vec<u8> {
    let (state, incomplete) = status(ctx);
    to_pretty(&response(ctx, state, output(ctx), usage(ctx), incomplete))
}

fn event(mut data: Value, seq: &mut u64) -> Vec<u8> {
    data["sequence_number"] = json!(*seq);
    *seq += 1;
    let kind = data["type"].as_str().unwrap_or("").to_string();
    format!("event: {kind}\ndata: {}\n\n", to_json(&data)).into_bytes()
}

/// The SSE events of a streamed answer: the whole scaffolding (`created`,
/// `in_progress`, each item's `added` / deltas / `done`) and a terminal event.
pub fn events(ctx: &Ctx<'_>) -> Vec<Vec<u8>> {
    let mut seq = 0;
    let mut out = Vec::new();
    out.push(event(
        json!({"type": "response.created", "response": response(ctx, "in_progress", vec![], Value::Null, None)}),
        &mut seq,
    ));
    out.push(event(
        json!({"type": "response.in_progress", "response": response(ctx, "in_progress", vec![], Value::Null, None)}),
        &mut seq,
    ));
    let items = output(ctx);
    for (index, item) in items.iter().enumerate() {
        let item_id = item["id"].clone();
        let mut added = item.clone();
        match kind(item) {
            "compaction" => {
                out.push(event(
                    json!({"type": "response.output_item.added", "output_index": index, "item": added}),
                    &mut seq,
                ));
                out.push(event(
                    json!({"type": "response.compaction.compacting", "item_id": item_id, "output_index": index}),
                    &mut seq,
                ));
            }
            "reasoning" => {
                added["summary"] = json!([]);
                out.push(event(
                    json!({"type": "response.output_item.added", "output_index": index, "item": added}),
                    &mut seq,
                ));
                if let Some(text) = item["summary"][0]["text"].as_str() {
                    let part = json!({"type": "summary_text", "text": ""});
                    out.push(event(
                        json!({"type": "response.reasoning_summary_part.added", "item_id": item_id,
                        "output_index": index, "summary_index": 0, "part": part}),
                        &mut seq,
                    ));
                    for piece in super::wire::word_pieces(text) {
                        out.push(event(
                            json!({"type": "response.reasoning_summary_text.delta", "item_id": item_id,
                            "output_index": index, "summary_index": 0, "delta": piece}),
                            &mut seq,
                        ));
                    }
                    out.push(event(
                        json!({"type": "response.reasoning_summary_text.done", "item_id": item_id,
                        "output_index": index, "summary_index": 0, "text": text}),
                        &mut seq,
                    ));
                    out.push(event(
                        json!({"type": "response.reasoning_summary_part.done", "item_id": item_id,
                        "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": text}}),
                        &mut seq,
                    ));
                }
            }
            "message" => {
                added["status"] = json!("in_progress");
                added["content"] = json!([]);
                out.push(event(
                    json!({"type": "response.output_item.added", "output_index": index, "item": added}),
                    &mut seq,
                ));
                let empty = json!({"type": "output_text", "annotations": [], "logprobs": [], "text": ""});
                out.push(event(
                    json!({"type": "response.content_part.added", "item_id": item_id, "output_index": index,
                    "content_index": 0, "part": empty}),
                    &mut seq,
                ));
                for piece in ctx.text_pieces() {
                    out.push(event(
                        json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": index,
                        "content_index": 0, "delta": piece, "logprobs": []}),
                        &mut seq,
                    ));
                }
                let text = item["content"][0]["text"].clone();
                out.push(event(
                    json!({"type": "response.output_text.done", "item_id": item_id, "output_index": index,
                    "content_index": 0, "text": text, "logprobs": []}),
                    &mut seq,
                ));
                out.push(event(
                    json!({"type": "response.content_part.done", "item_id": item_id, "output_index": index,
                    "content_index": 0, "part": item["content"][0]}),
                    &mut seq,
                ));
            }
            _ => {
                added["status"] = json!("in_progress");
                added["arguments"] = json!("");
                out.push(event(
                    json!({"type": "response.output_item.added", "output_index": index, "item": added}),
                    &mut seq,
                ));
                let arguments = item["arguments"].as_str().unwrap_or("");
                for frag in argument_fragments(arguments) {
                    out.push(event(
                        json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                        "output_index": index, "delta": frag}),
                        &mut seq,
                    ));
                }
                // As the API sends it since 2025-12: no `name` here.
                out.push(event(
                    json!({"type": "response.function_call_arguments.done", "item_id": item_id,
                    "output_index": index, "arguments": arguments}),
                    &mut seq,
                ));
            }
        }
        out.push(event(json!({"type": "response.output_item.done", "output_index": index, "item": item}), &mut seq));
    }
    let (state, incomplete) = status(ctx);
    let terminal = if state == "incomplete" { "response.incomplete" } else { "response.completed" };
    out.push(event(
        json!({"type": terminal, "response": response(ctx, state, items, usage(ctx), incomplete)}),
        &mut seq,
    ));
    out
}

/// The in-stream error as the API sends it: a nested `error` event, then `response.failed`.
pub fn stream_error_event() -> Vec<u8> {
    let message = "The server had an error while processing your request. Sorry about that!";
    let mut out = format!(
        "event: error\ndata: {}\n\n",
        json!({"type": "error", "sequence_number": 90, "error": {"type": "server_error", "code": "server_error", "message": message, "param": null}})
    )
    .into_bytes();
    let failed = json!({"type": "response.failed", "sequence_number": 91, "response": {"id": "resp_failed", "object": "response",
        "status": "failed", "error": {"code": "server_error", "message": message}, "incomplete_details": null, "output": [], "usage": null}});
    out.extend(format!("event: response.failed\ndata: {failed}\n\n").into_bytes());
    out
}

/// An event whose data is cut off in the middle of its JSON.
pub fn malformed_event() -> Vec<u8> {
    b"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"output_index\":0,\"delta\":\n\n".to_vec()
}

/// A 200 body that is not JSON.
pub fn malformed_body() -> Vec<u8> {
    br#"{"id":"resp_x","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"cut"#.to_vec()
}
