//! The gateway surfaces' fuzz bodies: each surface's request decoder on
//! arbitrary bytes, and each surface's stream writer on arbitrary upstream
//! event sequences of every style (raw bytes as SSE, and event sequences
//! built from the bytes so that plausible events arrive in any order).
//!
//! The stream invariant is the one clients enforce: whatever the upstream
//! sends, the client's stream is well formed and terminated — Anthropic
//! blocks started before their deltas with contiguous indexes, closed before
//! the next opens, every delta of its block's kind, `message_stop` (or one
//! `error` event) last; Gemini chunks with one finish reason, on the last
//! chunk (or one error chunk, last).

use serde_json::{json, Value};

use crate::provider::Style;
use crate::sse::SseEvent;
use crate::translate::{
    anthropic_request_to, gemini_request_to, responses_request_to, AnthropicStream, CompletionMeta, GeminiStream,
    ResponseMeta, ResponsesStream,
};

const STYLES: [Style; 4] = [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses];

/// `data` as an Anthropic Messages request for every upstream: a request
/// or a 4xx error naming what is wrong, the same every time; the native
/// upstream gets the bytes unchanged; a translated body is a JSON object.
pub fn anthropic_request(data: &[u8]) {
    for style in STYLES {
        let first = anthropic_request_to(style, data, &["b-1"]);
        assert_eq!(first, anthropic_request_to(style, data, &["b-1"]), "not deterministic");
        check_request(style, Style::Anthropic, data, first.map(|r| (r.upstream.body, r.upstream.style)));
    }
}

/// `data` as a Gemini `generateContent` body for every upstream, streamed
/// and not; the same checks as [`anthropic_request`].
pub fn gemini_request(data: &[u8]) {
    for style in STYLES {
        for stream in [false, true] {
            let first = gemini_request_to(style, "m-1", stream, data);
            assert_eq!(first, gemini_request_to(style, "m-1", stream, data), "not deterministic");
            if let Ok(r) = &first {
                assert_eq!(r.upstream.stream, stream);
            }
            check_request(style, Style::Gemini, data, first.map(|r| (r.upstream.body, r.upstream.style)));
        }
    }
}

/// `data` as a Responses request for every upstream; the same checks as
/// [`anthropic_request`] (the native upstream gets the bytes unchanged).
pub fn responses_request(data: &[u8]) {
    for style in STYLES {
        let first = responses_request_to(style, data);
        assert_eq!(first, responses_request_to(style, data), "not deterministic");
        check_request(style, Style::OpenAiResponses, data, first.map(|r| (r.upstream.body, r.upstream.style)));
    }
}

/// [`anthropic_stream`] for the Responses surface.
pub fn responses_stream(data: &[u8]) {
    surface_stream(data, |style, events| check_responses(&responses_lines(style, events)), responses_lines);
}

/// The client's SSE text for an upstream stream of `style`.
pub fn responses_lines(style: Style, events: &[SseEvent]) -> Vec<String> {
    let meta = ResponseMeta { id: "resp_fz".into(), model: "m".into(), created_at: 0, ..Default::default() };
    let mut t = ResponsesStream::new(style, meta);
    let mut out: Vec<String> = events.iter().flat_map(|ev| t.push(ev)).collect();
    out.extend(t.finish());
    assert!(t.finish().is_empty(), "finish yielded twice");
    out
}

/// The Responses scaffolding: `response.created` first; each item added
/// (contiguous output indexes) before its part, deltas and `.done` events,
/// done before the next is added; sequence numbers from 0 without gaps; a
/// terminal `response.completed` / `response.incomplete`, or one `error`, last.
pub fn check_responses(lines: &[String]) {
    let mut open: Option<(u64, String)> = None;
    let mut items = 0u64;
    let mut ended = false;
    for (n, line) in lines.iter().enumerate() {
        assert!(!ended, "events after the end: {lines:?}");
        let (name, data) = line
            .strip_prefix("event: ")
            .and_then(|l| l.strip_suffix("\n\n"))
            .and_then(|l| l.split_once("\ndata: "))
            .unwrap_or_else(|| panic!("not one named SSE event: {line:?}"));
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("not JSON ({e}): {data}"));
        assert_eq!(v["type"], name, "event name and type differ");
        assert_eq!(v["sequence_number"], n as u64, "sequence numbers are not contiguous");
        if n == 0 {
            assert!(name == "response.created" || name == "error", "the first event is {name}");
        }
        let index = v["output_index"].as_u64();
        match name {
            "error" | "response.completed" | "response.incomplete" => {
                assert!(open.is_none() || name == "error", "{name} with an item open");
                ended = true;
            }
            "response.created" | "response.in_progress" => {}
            "response.output_item.added" => {
                assert!(open.is_none(), "an item added while another is open");
                assert_eq!(index, Some(items), "output indexes are not contiguous");
                open = Some((items, v["item"]["type"].as_str().unwrap_or_default().to_string()));
                items += 1;
            }
            "response.output_item.done" => {
                let (at, _) = open.take().expect("a done item that was never added");
                assert_eq!(index, Some(at));
            }
            _ => {
                let (at, kind) = open.as_ref().expect("an item event outside an item");
                assert_eq!(index, Some(*at), "an event for an item that is not open: {name}");
                let ok = match kind.as_str() {
                    "message" => {
                        name.starts_with("response.output_text.") || name.starts_with("response.content_part.")
                    }
                    "reasoning" => name.starts_with("response.reasoning_summary"),
                    "function_call" => name.starts_with("response.function_call_arguments."),
                    _ => false,
                };
                assert!(ok, "{name} inside a {kind} item");
            }
        }
    }
    assert!(ended, "the stream is not terminated: {lines:?}");
}

fn check_request(
    style: Style,
    native: Style,
    data: &[u8],
    result: Result<(Vec<u8>, Style), crate::translate::TranslateError>,
) {
    match result {
        Ok((body, got)) => {
            assert_eq!(got, style);
            if style == native {
                assert_eq!(body, data, "pass-through changed the bytes");
            } else {
                let v: Value = serde_json::from_slice(&body).expect("a translated body is JSON");
                assert!(v.is_object(), "a translated body is an object");
            }
        }
        Err(e) => {
            assert!((400..500).contains(&e.status), "a request error is a 4xx, not {}", e.status);
            assert!(!e.message.is_empty(), "an error without a message");
        }
    }
}

/// `data` as an upstream stream of every style, re-emitted on the Anthropic
/// surface: raw bytes as SSE (whole and chunked, which must agree), and as a
/// sequence of plausible upstream events in any order.
pub fn anthropic_stream(data: &[u8]) {
    surface_stream(data, |style, events| check_anthropic(&anthropic_lines(style, events)), anthropic_lines);
}

/// [`anthropic_stream`] for the Gemini surface.
pub fn gemini_stream(data: &[u8]) {
    surface_stream(data, |style, events| check_gemini(&gemini_lines(style, events)), gemini_lines);
}

fn surface_stream(data: &[u8], check: impl Fn(Style, &[SseEvent]), lines: impl Fn(Style, &[SseEvent]) -> Vec<String>) {
    let mut rng = super::rng_for(data);
    let raw = super::decode_sse(&[data]);
    let chunked = super::decode_sse(&super::chunk(data, &mut rng));
    for style in STYLES {
        check(style, &raw);
        // Plausible events from the first bytes (a long input adds nothing but time).
        check(style, &built_events(style, data.get(..512).unwrap_or(data)));
        assert_eq!(lines(style, &raw), lines(style, &chunked), "chunking changed the stream");
    }
}

fn meta() -> CompletionMeta {
    CompletionMeta { id: "msg_fz".into(), model: "m".into(), created: 0 }
}

/// The client's SSE text for an upstream stream of `style`.
pub fn anthropic_lines(style: Style, events: &[SseEvent]) -> Vec<String> {
    let mut t = AnthropicStream::new(style, meta());
    let mut out: Vec<String> = events.iter().flat_map(|ev| t.push(ev)).collect();
    out.extend(t.finish());
    assert!(t.finish().is_empty(), "finish yielded twice");
    out
}

/// The client's SSE text for an upstream stream of `style`.
pub fn gemini_lines(style: Style, events: &[SseEvent]) -> Vec<String> {
    let mut t = GeminiStream::new(style, meta());
    let mut out: Vec<String> = events.iter().flat_map(|ev| t.push(ev)).collect();
    out.extend(t.finish());
    assert!(t.finish().is_empty(), "finish yielded twice");
    out
}

/// Anthropic's block discipline, and a terminated stream.
pub fn check_anthropic(lines: &[String]) {
    let mut started = false;
    let mut blocks = 0u64;
    let mut open: Option<String> = None;
    let mut ended = false;
    for line in lines {
        assert!(!ended, "events after the end: {lines:?}");
        let (name, data) = line
            .strip_prefix("event: ")
            .and_then(|l| l.strip_suffix("\n\n"))
            .and_then(|l| l.split_once("\ndata: "))
            .unwrap_or_else(|| panic!("not one named SSE event: {line:?}"));
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("not JSON ({e}): {data}"));
        assert_eq!(v["type"], name, "event name and type differ: {line}");
        if name == "error" {
            assert!(v["error"]["message"].is_string() && v["error"]["type"].is_string(), "{v}");
            ended = true;
            continue;
        }
        if name != "message_start" {
            assert!(started, "{name} before message_start");
        }
        match name {
            "message_start" => {
                assert!(!started, "two message_start events");
                started = true;
            }
            "content_block_start" => {
                assert!(open.is_none(), "a block opened while another is open");
                assert_eq!(v["index"], blocks, "block indexes are not contiguous");
                let kind = v["content_block"]["type"].as_str().expect("a block type").to_string();
                open = Some(kind);
                blocks += 1;
            }
            "content_block_delta" => {
                let kind = open.as_deref().expect("a delta with no open block");
                assert_eq!(v["index"], blocks - 1, "a delta for a block that is not open");
                let want = match kind {
                    "text" => "text_delta",
                    "thinking" => "thinking_delta",
                    "tool_use" => "input_json_delta",
                    other => panic!("unexpected block type {other}"),
                };
                assert_eq!(v["delta"]["type"], want, "a delta of another block's kind");
            }
            "content_block_stop" => {
                assert!(open.take().is_some(), "a stop for a block that is not open");
                assert_eq!(v["index"], blocks - 1, "a stop for another index");
            }
            "message_delta" => {
                assert!(open.is_none(), "message_delta with a block open");
                assert!(v["delta"]["stop_reason"].is_string(), "message_delta without a stop reason");
            }
            "message_stop" => ended = true,
            other => panic!("unknown event {other}"),
        }
    }
    assert!(ended, "the stream is not terminated: {lines:?}");
}

/// Gemini chunks: JSON `data:` events, one finish reason on the last chunk,
/// or an error chunk last.
pub fn check_gemini(lines: &[String]) {
    let last = lines.last().expect("a stream with no chunk at all");
    for (i, line) in lines.iter().enumerate() {
        let data = line
            .strip_prefix("data: ")
            .and_then(|l| l.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("not one SSE data event: {line:?}"));
        assert!(!data.contains('\n'), "a chunk over several lines: {data}");
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("not JSON ({e}): {data}"));
        let is_last = i + 1 == lines.len();
        if v.get("error").is_some() {
            assert!(is_last, "chunks after an error");
            assert!(v["error"]["code"].is_u64() && v["error"]["status"].is_string(), "{v}");
            continue;
        }
        let finish = &v["candidates"][0]["finishReason"];
        assert_eq!(finish.is_string(), is_last, "a finish reason on chunk {i} of {}", lines.len());
        assert!(v["candidates"][0]["content"]["parts"].is_array(), "{v}");
    }
    assert!(last.contains("finishReason") || last.contains("\"error\""), "the stream is not terminated");
}

/// A sequence of plausible upstream events of `style`, chosen and ordered by `data`.
pub fn built_events(style: Style, data: &[u8]) -> Vec<SseEvent> {
    data.chunks(2)
        .map(|pair| {
            let (a, b) = (pair[0], pair.get(1).copied().unwrap_or(0));
            let i = u64::from(b % 3);
            let (event, v) = match style {
                Style::Anthropic => anthropic_event(a, i),
                Style::OpenAi => (None, openai_chunk(a, i)),
                Style::Gemini => (None, gemini_chunk(a, i)),
                Style::OpenAiResponses => {
                    let v = responses_event(a, i);
                    (v["type"].as_str().map(str::to_string), v)
                }
            };
            let data = if v.is_null() { "[DONE]".to_string() } else { v.to_string() };
            SseEvent { event, data, id: None }
        })
        .collect()
}

fn anthropic_event(a: u8, i: u64) -> (Option<String>, Value) {
    let v = match a % 13 {
        0 => json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "m", "content": [], "stop_reason": null, "usage": {"input_tokens": 3, "output_tokens": 0}}}),
        1 => json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
        2 => json!({"type": "content_block_start", "index": i,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        3 => json!({"type": "content_block_start", "index": i,
            "content_block": {"type": "tool_use", "id": format!("t{i}"), "name": "f", "input": {}}}),
        4 => json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": "hi"}}),
        5 => json!({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        6 => json!({"type": "content_block_delta", "index": i,
            "delta": {"type": "input_json_delta", "partial_json": if i == 0 { "{\"a\":" } else { "1}" }}}),
        7 => json!({"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": "s"}}),
        8 => json!({"type": "content_block_stop", "index": i}),
        9 => json!({"type": "message_delta", "delta": {"stop_reason": if i == 0 { "tool_use" } else { "end_turn" }},
            "usage": {"output_tokens": 5}}),
        10 => json!({"type": "message_stop"}),
        11 => json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        _ => json!({"type": "ping"}),
    };
    (v["type"].as_str().map(str::to_string), v)
}

fn openai_chunk(a: u8, i: u64) -> Value {
    let choice = |delta: Value, finish: Value| {
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    match a % 9 {
        0 => choice(json!({"role": "assistant", "content": ""}), Value::Null),
        1 => choice(json!({"content": "hi"}), Value::Null),
        2 => choice(json!({"reasoning_content": "hm"}), Value::Null),
        3 => choice(
            json!({"tool_calls": [{"index": i, "id": format!("call_{i}"), "type": "function",
                   "function": {"name": "f", "arguments": ""}}]}),
            Value::Null,
        ),
        4 => choice(json!({"tool_calls": [{"index": i, "function": {"arguments": "{\"a\":1}"}}]}), Value::Null),
        5 => choice(json!({}), json!(if i == 0 { "tool_calls" } else { "stop" })),
        6 => json!({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
        7 => Value::Null,
        _ => json!({"error": {"message": "boom", "type": "server_error", "param": null, "code": null}}),
    }
}

fn gemini_chunk(a: u8, i: u64) -> Value {
    let parts = match a % 6 {
        0 => json!([{"text": "hi"}]),
        1 => json!([{"text": "hm", "thought": true}]),
        2 => json!([{"functionCall": {"name": format!("f{i}"), "args": {"a": i}}}]),
        3 => json!([{"text": "", "thoughtSignature": "c2ln"}]),
        4 => json!([]),
        _ => return json!({"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}),
    };
    let mut chunk = json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
                           "modelVersion": "m", "responseId": "r1"});
    if i == 2 {
        chunk["candidates"][0]["finishReason"] = json!("STOP");
        chunk["usageMetadata"] = json!({"promptTokenCount": 3, "candidatesTokenCount": 2, "totalTokenCount": 5});
    }
    chunk
}

fn responses_event(a: u8, i: u64) -> Value {
    let response = |status: &str| {
        json!({"id": "resp_1", "object": "response", "created_at": 0, "status": status, "model": "m", "output": [],
               "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}})
    };
    match a % 10 {
        0 => json!({"type": "response.created", "response": response("in_progress")}),
        1 => json!({"type": "response.output_item.added", "output_index": i,
            "item": {"type": "message", "id": format!("msg_{i}"), "role": "assistant", "status": "in_progress", "content": []}}),
        2 => json!({"type": "response.output_item.added", "output_index": i,
            "item": {"type": "function_call", "id": format!("fc_{i}"), "call_id": format!("call_{i}"), "name": "f",
                     "arguments": "", "status": "in_progress"}}),
        3 => json!({"type": "response.output_text.delta", "output_index": i, "content_index": 0,
            "item_id": format!("msg_{i}"), "delta": "hi"}),
        4 => json!({"type": "response.function_call_arguments.delta", "output_index": i,
            "item_id": format!("fc_{i}"), "delta": if i == 0 { "{\"a\":" } else { "1}" }}),
        5 => json!({"type": "response.output_item.added", "output_index": i,
            "item": {"type": "reasoning", "id": format!("rs_{i}"), "summary": []}}),
        6 => json!({"type": "response.reasoning_summary_text.delta", "output_index": i, "summary_index": 0,
            "item_id": format!("rs_{i}"), "delta": "hm"}),
        7 => json!({"type": "response.completed", "response": response("completed")}),
        8 => json!({"type": "response.incomplete", "response": response("incomplete")}),
        _ => json!({"type": "error", "error": {"type": "server_error", "message": "boom"}}),
    }
}
