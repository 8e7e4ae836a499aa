//! The Gemini codec on hand-built inputs: request bodies against the documented
//! `generateContent` format, decode → encode round trips of provider data, the
//! finish-reason table, error bodies and stream failures, and arbitrary bytes.

mod common;

use std::path::PathBuf;
use std::process::Command;

use nexus_proto::provider::{decode_stream_chunks, ModelCall, Style, TurnResponse};
use nexus_proto::{
    Block, CallIds, DecodeError, ImageSource, Message, RemoteError, Role, SseDecoder, SseEvent, StopReason,
    StreamEvent, ToolCall, ToolDecl, ToolResultBlock,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

// Signatures and image data are base64 on the wire (the API's `bytes` fields).
const SIG_R: &str = "UkVBU09OSU5HLVNJRw==";
const SIG_A: &str = "Q0FMTC1BLVNJRw==";
const SIG_END: &str = "RU5ELVNJRw==";
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

fn gemini_data(sig: &str) -> Option<Value> {
    Some(json!({"gemini": {"thoughtSignature": sig}}))
}

fn generated() -> Option<Value> {
    Some(json!({"nexus": {"generatedId": true}}))
}

fn call(id: &str, name: &str, input: Value, provider_data: Option<Value>) -> Block {
    Block::ToolCall(ToolCall { id: id.into(), name: name.into(), arguments: input.to_string(), input, provider_data })
}

fn result(call_id: &str, name: &str, output: &str, is_error: bool) -> Block {
    Block::ToolResult(ToolResultBlock { call_id: call_id.into(), name: name.into(), output: output.into(), is_error })
}

fn tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::new(
            "get_weather",
            "Current weather in a city.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        ),
        ToolDecl::new(
            "add",
            "Adds two numbers.",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
        ),
    ]
}

/// A conversation with every block kind: images three ways, reasoning with a
/// Gemini signature (and an Anthropic one that must not leak), parallel calls
/// with a provider id, generated ids and same-name calls, results including an
/// error and an empty output, and a bare signature on an empty text block.
fn full_transcript() -> Vec<Message> {
    vec![
        Message {
            role: Role::User,
            content: vec![
                Block::text("Weather in Paris and Rome, and 2+2? Also look at these."),
                Block::Image { media_type: "image/png".into(), source: ImageSource::Base64 { data: PNG.into() } },
                Block::Image {
                    media_type: "image/jpeg".into(),
                    source: ImageSource::Url { url: "https://example.com/cat.jpg".into() },
                },
                Block::Image {
                    media_type: "image/png".into(),
                    source: ImageSource::Url { url: format!("data:image/png;base64,{PNG}") },
                },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![
                Block::Reasoning {
                    text: "Two cities, one sum.".into(),
                    signature: Some("anthropic-signature".into()),
                    redacted: None,
                    provider_data: Some(json!({"gemini": {"thoughtSignature": SIG_R}, "anthropic": {"x": 1}})),
                },
                // Anthropic redacted reasoning: nothing Gemini can take.
                Block::Reasoning {
                    text: String::new(),
                    signature: None,
                    redacted: Some("opaque".into()),
                    provider_data: None,
                },
                Block::Text { text: "Checking.".into(), provider_data: Some(json!({"anthropic": {"y": 2}})) },
                call("fc_paris", "get_weather", json!({"city": "Paris"}), gemini_data(SIG_A)),
                call("call_0", "get_weather", json!({"city": "Rome"}), generated()),
                call("call_1", "add", json!({"a": 2, "b": 2}), generated()),
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                result("fc_paris", "get_weather", "18C, clear", false),
                result("call_0", "get_weather", "upstream timeout", true),
            ],
        },
        // A second user turn holding the last result: merged with the one above.
        Message { role: Role::User, content: vec![result("call_1", "add", "", false)] },
        Message {
            role: Role::Assistant,
            content: vec![
                Block::text("Paris 18C; Rome unknown; 2+2=4."),
                Block::Text { text: String::new(), provider_data: gemini_data(SIG_END) },
            ],
        },
        Message { role: Role::User, content: vec![] },
        Message::user("Thanks."),
    ]
}

fn encode(
    messages: &[Message],
    system: Option<&str>,
    tools: &[ToolDecl],
    max_tokens: Option<u32>,
    stream: bool,
) -> Value {
    let params = Map::new();
    let call = ModelCall {
        model: "gemini-2.5-flash",
        system,
        messages,
        tools,
        max_tokens,
        stream,
        params: &params,
        output: None,
    };
    Style::Gemini.encode_body(&call)
}

#[test]
fn full_transcript_encodes_to_the_documented_body() {
    let body = encode(&full_transcript(), Some("Be brief."), &tools(), Some(256), false);
    // Written from the REST reference: Content{role, parts[]}, Part with one
    // data field (+ thought, thoughtSignature), FunctionCall{name, args, id?},
    // FunctionResponse{name, response, id?}, Blob{mimeType, data},
    // FileData{mimeType, fileUri}, Tool{functionDeclarations[]}.
    let want = json!({
        "contents": [
            {"role": "user", "parts": [
                {"text": "Weather in Paris and Rome, and 2+2? Also look at these."},
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
                {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
            ]},
            {"role": "model", "parts": [
                {"text": "Two cities, one sum.", "thought": true, "thoughtSignature": SIG_R},
                {"text": "Checking."},
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}, "id": "fc_paris"}, "thoughtSignature": SIG_A},
                {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
                {"functionCall": {"name": "add", "args": {"a": 2, "b": 2}}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": "18C, clear"}, "id": "fc_paris"}},
                {"functionResponse": {"name": "get_weather", "response": {"error": "upstream timeout"}}},
                {"functionResponse": {"name": "add", "response": {"output": ""}}},
            ]},
            {"role": "model", "parts": [
                {"text": "Paris 18C; Rome unknown; 2+2=4."},
                {"text": "", "thoughtSignature": SIG_END},
            ]},
            {"role": "user", "parts": [{"text": "Thanks."}]},
        ],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "tools": [{"functionDeclarations": [
            {"name": "get_weather", "description": "Current weather in a city.",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
            {"name": "add", "description": "Adds two numbers.",
             "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
        ]}],
        "generationConfig": {"maxOutputTokens": 256},
    });
    assert_eq!(body, want);
}

#[test]
fn optional_sections_are_left_out() {
    let messages = vec![Message::user("hi")];
    for system in [None, Some("")] {
        let body = encode(&messages, system, &[], None, true);
        assert_eq!(body, json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}), "system {system:?}");
    }
    let body = encode(&messages, None, &tools(), None, false);
    assert!(body.get("model").is_none(), "the model belongs in the URL");
    assert_eq!(body["tools"].as_array().map(Vec::len), Some(1), "one Tool wraps every declaration");
}

#[test]
fn caller_params_merge_but_cannot_replace_the_conversation() {
    let messages = vec![Message::user("hi")];
    let mut params = Map::new();
    params
        .insert("safetySettings".into(), json!([{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]));
    params.insert("contents".into(), json!([]));
    let call = ModelCall {
        model: "m",
        system: None,
        messages: &messages,
        tools: &[],
        max_tokens: None,
        stream: false,
        params: &params,
        output: None,
    };
    let body = Style::Gemini.encode_body(&call);
    assert_eq!(body["contents"][0]["parts"][0]["text"], "hi");
    assert_eq!(body["safetySettings"][0]["threshold"], "BLOCK_NONE");
}

#[test]
fn endpoint_puts_model_and_stream_mode_in_the_url() {
    let base = Style::Gemini.default_base_url();
    assert_eq!(
        Style::Gemini.endpoint(base, "gemini-2.5-flash", false),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent"
    );
    assert_eq!(
        Style::Gemini.endpoint("http://localhost:8080/v1beta/", "g", true),
        "http://localhost:8080/v1beta/models/g:streamGenerateContent?alt=sse"
    );
}

// ----- decode → encode -----

fn decode(body: &Value) -> TurnResponse {
    Style::Gemini.decode_response(body.to_string().as_bytes(), &mut CallIds::new("call_")).expect("decodes")
}

#[test]
fn provider_data_round_trips_to_the_same_parts() {
    // Parts as a Gemini 3 model sends them: a signed thought, text, a signed
    // call without id, a call with an id, and a bare signature at the end.
    let parts = json!([
        {"text": "Plan the calls.", "thought": true, "thoughtSignature": SIG_R},
        {"text": "On it."},
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": SIG_A},
        {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}, "id": "given-7"}},
        {"text": "", "thoughtSignature": SIG_END},
    ]);
    let turn = decode(&json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}));
    assert_eq!(turn.stop.reason, StopReason::ToolUse);
    assert_eq!(turn.stop.raw.as_deref(), Some("STOP"));

    match &turn.content[0] {
        Block::Reasoning { text, signature, provider_data, .. } => {
            assert_eq!(text, "Plan the calls.");
            assert_eq!(signature, &None, "the Anthropic field stays empty");
            assert_eq!(provider_data, &gemini_data(SIG_R));
        }
        other => panic!("{other:?}"),
    }
    let calls: Vec<&ToolCall> = turn.tool_calls().collect();
    assert_eq!(calls[0].id, "call_0");
    assert_eq!(
        calls[0].provider_data,
        Some(json!({"gemini": {"thoughtSignature": SIG_A}, "nexus": {"generatedId": true}}))
    );
    assert_eq!(calls[1].id, "given-7");
    assert_eq!(calls[1].provider_data, None);
    assert_eq!(turn.content.len(), 5, "the bare signature is a block of its own");

    let messages = vec![Message::user("go"), Message { role: Role::Assistant, content: turn.content.clone() }];
    let body = encode(&messages, None, &tools(), None, false);
    assert_eq!(body["contents"][1], json!({"role": "model", "parts": parts}));

    // The results: no id for the generated one, the provider's id echoed.
    let mut messages = messages;
    messages.push(Message {
        role: Role::User,
        content: vec![result("call_0", "get_weather", "18C", false), result("given-7", "get_weather", "21C", false)],
    });
    let body = encode(&messages, None, &tools(), None, false);
    assert_eq!(
        body["contents"][2]["parts"],
        json!([
            {"functionResponse": {"name": "get_weather", "response": {"output": "18C"}}},
            {"functionResponse": {"name": "get_weather", "response": {"output": "21C"}, "id": "given-7"}},
        ])
    );
}

#[test]
fn a_result_without_a_name_takes_its_calls_name() {
    let messages = vec![
        Message::user("go"),
        Message { role: Role::Assistant, content: vec![call("c1", "add", json!({}), None)] },
        Message { role: Role::User, content: vec![result("c1", "", "4", false)] },
    ];
    let body = encode(&messages, None, &[], None, false);
    assert_eq!(body["contents"][2]["parts"][0]["functionResponse"]["name"], "add");
}

#[test]
fn calls_whose_arguments_never_parsed_send_an_object() {
    let bad = Block::ToolCall(ToolCall {
        id: "c1".into(),
        name: "add".into(),
        input: Value::Null,
        arguments: "{\"a\": 2,".into(),
        provider_data: None,
    });
    let from_text = Block::ToolCall(ToolCall {
        id: "c2".into(),
        name: "add".into(),
        input: Value::Null,
        arguments: "{\"a\": 2}".into(),
        provider_data: None,
    });
    let messages = vec![Message::user("go"), Message { role: Role::Assistant, content: vec![bad, from_text] }];
    let body = encode(&messages, None, &[], None, false);
    assert_eq!(body["contents"][1]["parts"][0]["functionCall"]["args"], json!({}));
    assert_eq!(body["contents"][1]["parts"][1]["functionCall"]["args"], json!({"a": 2}));
}

#[test]
fn decoded_arguments_keep_the_raw_bytes() {
    let body = br#"{"candidates":[{"content":{"parts":[
        {"functionCall":{"name":"a","args":{ "x" : 1.50, "y":[ ] }}},
        {"functionCall":{"name":"b"}},
        {"functionCall":{"name":"c","args":null}}
    ]},"finishReason":"STOP"}]}"#;
    let turn = Style::Gemini.decode_response(body, &mut CallIds::new("g")).expect("decodes");
    let calls: Vec<&ToolCall> = turn.tool_calls().collect();
    assert_eq!(calls[0].arguments, r#"{ "x" : 1.50, "y":[ ] }"#);
    assert_eq!(calls[0].input, json!({"x": 1.5, "y": []}));
    for c in &calls[1..] {
        assert_eq!(c.arguments, "", "no args sent");
        assert_eq!(c.input, json!({}), "missing args read as an empty object");
    }
    assert_eq!(calls.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(), ["g0", "g1", "g2"]);
}

// ----- finish reasons -----

/// The documented FinishReason values and what each means neutrally.
const FINISH_TABLE: &[(&str, StopReason)] = &[
    ("STOP", StopReason::EndTurn),
    ("MAX_TOKENS", StopReason::MaxTokens),
    ("CONTINUATION", StopReason::MaxTokens),
    ("SAFETY", StopReason::ContentFilter),
    ("RECITATION", StopReason::ContentFilter),
    ("BLOCKLIST", StopReason::ContentFilter),
    ("PROHIBITED_CONTENT", StopReason::ContentFilter),
    ("SPII", StopReason::ContentFilter),
    ("IMAGE_SAFETY", StopReason::ContentFilter),
    ("IMAGE_PROHIBITED_CONTENT", StopReason::ContentFilter),
    ("IMAGE_RECITATION", StopReason::ContentFilter),
    ("MODEL_ARMOR", StopReason::ContentFilter),
    ("ESCALATION", StopReason::ContentFilter),
    ("PUP_LIMITED_DISABLED", StopReason::ContentFilter),
    ("LANGUAGE", StopReason::Other),
    ("OTHER", StopReason::Other),
    ("IMAGE_OTHER", StopReason::Other),
    ("NO_IMAGE", StopReason::Other),
    ("MALFORMED_FUNCTION_CALL", StopReason::Other),
    ("UNEXPECTED_TOOL_CALL", StopReason::Other),
    ("TOO_MANY_TOOL_CALLS", StopReason::Other),
    ("MISSING_THOUGHT_SIGNATURE", StopReason::Other),
    ("MALFORMED_RESPONSE", StopReason::Other),
    ("FINISH_REASON_UNSPECIFIED", StopReason::Other),
    ("SOMETHING_NEW_2031", StopReason::Other),
];

fn stream_of(payloads: &[Value]) -> Result<TurnResponse, RemoteError> {
    let sse: String = payloads.iter().map(|p| format!("data: {p}\r\n\r\n")).collect();
    decode_stream_chunks(Style::Gemini, [sse.as_bytes()], &mut CallIds::new("call_"))
}

#[test]
fn every_finish_reason_maps_and_keeps_its_raw_value() {
    for (raw, want) in FINISH_TABLE {
        let body = json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": raw}]});
        for turn in [decode(&body), stream_of(std::slice::from_ref(&body)).expect("stream decodes")] {
            assert_eq!(turn.stop.reason, *want, "{raw}");
            assert_eq!(turn.stop.raw.as_deref(), Some(*raw));
        }
    }
}

#[test]
fn stop_with_calls_is_tool_use_but_other_reasons_stay() {
    let with_call = |reason: &str| json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": {}}}]}, "finishReason": reason}]});
    assert_eq!(decode(&with_call("STOP")).stop.reason, StopReason::ToolUse);
    assert_eq!(decode(&with_call("MAX_TOKENS")).stop.reason, StopReason::MaxTokens);
    assert_eq!(decode(&with_call("MALFORMED_FUNCTION_CALL")).stop.reason, StopReason::Other);
}

#[test]
fn a_blocked_prompt_is_a_content_filter_stop() {
    let body = json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": {"promptTokenCount": 4, "totalTokenCount": 4}});
    for turn in [decode(&body), stream_of(std::slice::from_ref(&body)).expect("stream decodes")] {
        assert_eq!(turn.stop.reason, StopReason::ContentFilter);
        assert_eq!(turn.stop.raw.as_deref(), Some("PROHIBITED_CONTENT"));
        assert!(turn.content.is_empty());
        assert!(turn.usage_reported);
        assert_eq!(turn.usage.prompt_tokens, 4);
    }
}

#[test]
fn usage_reads_prompt_candidates_and_total() {
    let body = json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 515, "thoughtsTokenCount": 500},
        "modelVersion": "gemini-2.5-pro"});
    let turn = decode(&body);
    assert!(turn.usage_reported);
    // Thought tokens stay out of completion; the provider's total is kept.
    assert_eq!((turn.usage.prompt_tokens, turn.usage.completion_tokens, turn.usage.total_tokens), (10, 5, 515));
    assert_eq!(turn.model.as_deref(), Some("gemini-2.5-pro"));

    let body = json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4}});
    assert_eq!(decode(&body).usage.total_tokens, 7, "no total: prompt + completion");

    let body = json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}]});
    let turn = decode(&body);
    assert!(!turn.usage_reported);
    assert_eq!(turn.usage, Default::default());
}

// ----- errors -----

#[test]
fn error_bodies_keep_status_and_message() {
    let bytes =
        std::fs::read(common::shared_dir().join("wire-corpus/gemini/fb_error_api_key.json")).expect("corpus file");
    let wrapped = format!("[{}]", String::from_utf8_lossy(&bytes));
    for body in [bytes.clone(), wrapped.into_bytes()] {
        match Style::Gemini.decode_response(&body, &mut CallIds::default()) {
            Err(RemoteError::Provider(e)) => {
                assert_eq!(e.kind, "INVALID_ARGUMENT");
                assert_eq!(e.message, "API key not valid. Please pass a valid API key.");
                assert_eq!(e.status, None);
                assert!(!e.retryable);
                assert_eq!(e.body.as_bytes(), &body[..]);
            }
            other => panic!("{other:?}"),
        }
    }
    let quota = br#"{"error":{"code":429,"message":"Quota exceeded","status":"RESOURCE_EXHAUSTED"}}"#;
    let e = Style::Gemini.decode_error(Some(429), Some("7"), quota);
    assert_eq!((e.status, e.kind.as_str(), e.message.as_str()), (Some(429), "RESOURCE_EXHAUSTED", "Quota exceeded"));
    assert!(e.retryable);
    assert_eq!(e.retry_after_ms, Some(7000));
    // No status string: the numeric code names the error.
    let e = Style::Gemini.decode_error(Some(404), None, br#"{"error":{"code":404,"message":"no such model"}}"#);
    assert_eq!((e.kind.as_str(), e.message.as_str()), ("404", "no such model"));
    // Not JSON at all (a proxy's HTML page): the status names it.
    let e = Style::Gemini.decode_error(Some(502), None, b"<html>Bad Gateway</html>");
    assert_eq!(e.kind, "http_502");
    assert!(e.retryable);
}

#[test]
fn an_error_after_successful_array_elements_is_found() {
    let body = br#"[{"candidates":[{"content":{"parts":[{"text":"a"}]}}]},{"error":{"code":503,"message":"busy","status":"UNAVAILABLE"}}]"#;
    match Style::Gemini.decode_response(body, &mut CallIds::default()) {
        Err(RemoteError::Provider(e)) => {
            assert_eq!((e.kind.as_str(), e.message.as_str()), ("UNAVAILABLE", "busy"));
            assert!(e.retryable, "UNAVAILABLE is transient");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_array_body_is_one_turn() {
    let body = json!([
        {"candidates": [{"content": {"parts": [{"text": "Hel"}]}}]},
        {"candidates": [{"content": {"parts": [{"text": "lo"}]}, "finishReason": "STOP"}], "usageMetadata": {"promptTokenCount": 1, "candidatesTokenCount": 2}},
    ]);
    let turn = decode(&body);
    assert_eq!(turn.content, vec![Block::text("Hello")]);
    assert_eq!(turn.usage.completion_tokens, 2);
}

fn push_all(payloads: &[&str]) -> (nexus_proto::provider::Assembler, Vec<StreamEvent>, Result<(), RemoteError>) {
    let mut asm = Style::Gemini.assembler();
    let mut ids = CallIds::new("call_");
    let mut out = Vec::new();
    for p in payloads {
        let ev = SseEvent { event: None, data: (*p).to_string(), id: None };
        if let Err(e) = asm.push(&ev, &mut ids, &mut out) {
            return (asm, out, Err(e));
        }
    }
    (asm, out, Ok(()))
}

#[test]
fn a_stream_without_finish_reason_is_truncated() {
    let (mut asm, out, pushed) = push_all(&[
        r#"{"candidates":[{"content":{"parts":[{"text":"Hello"}],"role":"model"}}],"usageMetadata":{"promptTokenCount":3}}"#,
    ]);
    assert!(pushed.is_ok());
    assert_eq!(out, vec![StreamEvent::TextDelta { text: "Hello".into() }]);
    assert!(matches!(asm.finish(), Err(RemoteError::Decode(DecodeError::Truncated(_)))));
    let (mut empty, _, _) = push_all(&[]);
    assert!(matches!(empty.finish(), Err(RemoteError::Decode(DecodeError::Truncated(_)))));
}

#[test]
fn an_in_stream_error_is_a_provider_error() {
    for (status, retryable) in [("UNAVAILABLE", true), ("INTERNAL", true), ("INVALID_ARGUMENT", false)] {
        let error = format!(r#"{{"error":{{"code":500,"message":"went wrong","status":"{status}"}}}}"#);
        let (mut asm, out, pushed) = push_all(&[r#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}]}"#, &error]);
        assert!(asm.emitted_anything());
        assert_eq!(out.len(), 1);
        match pushed {
            Err(RemoteError::Provider(e)) => {
                assert_eq!(e.status, None);
                assert_eq!((e.kind.as_str(), e.message.as_str()), (status, "went wrong"));
                assert_eq!(e.retryable, retryable, "{status}");
                assert_eq!(e.body, error);
                // The failure sticks: finishing reports it, not a turn.
                assert_eq!(asm.finish(), Err(RemoteError::Provider(e)));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn malformed_bodies_are_typed_errors() {
    let json_errors: &[&[u8]] =
        &[b"", b"{", b"not json", b"{\"candidates\": [}", b"\xff\xfe{}", b"{\"candidates\":[]} trailing"];
    for body in json_errors {
        let got = Style::Gemini.decode_response(body, &mut CallIds::default());
        assert!(matches!(got, Err(RemoteError::Decode(DecodeError::Json(_)))), "{body:?}: {got:?}");
    }
    let shape_errors: &[&str] = &[
        "5",
        "\"text\"",
        "null",
        "{}",
        "[]",
        "[1, 2]",
        r#"{"candidates": 5}"#,
        r#"{"candidates": [{"content": {"parts": [{"text": 5}]}}]}"#,
        r#"{"candidates": [], "usageMetadata": {"promptTokenCount": -1}}"#,
        r#"{"usageMetadata": {"promptTokenCount": 1}}"#,
    ];
    for body in shape_errors {
        let got = Style::Gemini.decode_response(body.as_bytes(), &mut CallIds::default());
        assert!(matches!(got, Err(RemoteError::Decode(DecodeError::Shape(_)))), "{body}: {got:?}");
    }
    let (_, _, pushed) = push_all(&["{\"candidates\": ["]);
    assert!(matches!(pushed, Err(RemoteError::Decode(DecodeError::Json(_)))));
    let (_, _, pushed) = push_all(&["[5]"]);
    assert!(matches!(pushed, Err(RemoteError::Decode(DecodeError::Shape(_)))));
}

#[test]
fn a_whole_body_without_finish_reason_is_a_natural_end() {
    let turn = decode(&json!({"candidates": [{"content": {"parts": [{"text": "ok"}]}}]}));
    assert_eq!((turn.stop.reason, turn.stop.raw), (StopReason::EndTurn, None));
}

// ----- streaming deltas -----

#[test]
fn stream_deltas_follow_the_parts() {
    let payloads = [
        r#"{"usageMetadata":{"promptTokenCount":9}}"#,
        r#"{"candidates":[{"content":{"parts":[{"text":"Think","thought":true}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"text":"ing.","thought":true},{"text":"Calling "}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"text":"two."},{"functionCall":{"name":"f","args":{"q": 1}}}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{}}},{"functionCall":{"name":"g"}}]}}]}"#,
        r#"{"candidates":[{"content":{"parts":[{"functionCall":{"name":"f","args":{"q": 2},"id":"srv-1"}}]},"finishReason":"STOP"}]}"#,
    ];
    let mut asm = Style::Gemini.assembler();
    let mut ids = CallIds::new("call_");
    let mut out = Vec::new();
    let ev = |data: &str| SseEvent { event: None, data: data.into(), id: None };
    asm.push(&ev(payloads[0]), &mut ids, &mut out).expect("usage-only event");
    assert!(!asm.emitted_anything(), "usage is not a delta");
    for p in &payloads[1..] {
        asm.push(&ev(p), &mut ids, &mut out).expect("push");
    }
    assert!(asm.emitted_anything());
    let started = |id: &str, name: &str| StreamEvent::ToolCallStarted { id: id.into(), name: name.into() };
    let delta = |id: &str, a: &str| StreamEvent::ToolCallDelta { id: id.into(), arguments: a.into() };
    assert_eq!(
        out,
        vec![
            StreamEvent::ReasoningDelta { text: "Think".into() },
            StreamEvent::ReasoningDelta { text: "ing.".into() },
            StreamEvent::TextDelta { text: "Calling ".into() },
            StreamEvent::TextDelta { text: "two.".into() },
            started("call_0", "f"),
            delta("call_0", r#"{"q": 1}"#),
            started("call_1", "f"),
            delta("call_1", "{}"),
            started("call_2", "g"),
            started("srv-1", "f"),
            delta("srv-1", r#"{"q": 2}"#),
        ]
    );
    let turn = asm.finish().expect("finished");
    // Each call's fragments concatenate to its arguments, never glued together.
    for call in turn.tool_calls() {
        let joined: String = out
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallDelta { id, arguments } if *id == call.id => Some(arguments.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(joined, call.arguments, "{}", call.id);
    }
    assert_eq!(turn.content.len(), 6, "reasoning, text, four calls");
    assert_eq!(turn.text(), "Calling two.");
    assert_eq!(turn.stop.reason, StopReason::ToolUse);
    assert_eq!(turn.usage.prompt_tokens, 9);
}

#[test]
fn a_signature_that_differs_starts_a_new_block() {
    let body = json!({"candidates": [{"content": {"parts": [
        {"text": "a", "thoughtSignature": SIG_A},
        {"text": "b"},
        {"text": "c", "thoughtSignature": SIG_A},
        {"text": "d", "thoughtSignature": SIG_END},
        {"text": "", "thought": true},
        {"text": "e"},
    ]}, "finishReason": "STOP"}]});
    let turn = decode(&body);
    assert_eq!(
        turn.content,
        vec![
            Block::Text { text: "abc".into(), provider_data: gemini_data(SIG_A) },
            Block::Text { text: "de".into(), provider_data: gemini_data(SIG_END) },
        ],
        "the empty thought part carries nothing and separates nothing"
    );
}

#[test]
fn only_candidate_zero_is_the_turn() {
    let body = json!({"candidates": [
        {"index": 1, "content": {"parts": [{"text": "other"}]}, "finishReason": "MAX_TOKENS"},
        {"content": {"parts": [{"text": "first"}]}, "finishReason": "STOP"},
    ]});
    let turn = decode(&body);
    assert_eq!(turn.text(), "first");
    assert_eq!(turn.stop.raw.as_deref(), Some("STOP"));
}

#[test]
fn response_images_become_image_blocks() {
    let body = json!({"candidates": [{"content": {"parts": [
        {"text": "Here:"},
        {"inlineData": {"mimeType": "image/png", "data": PNG}},
        {"inlineData": {"mimeType": "audio/wav", "data": "AAAA"}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "gs://b/x.jpg"}},
    ]}, "finishReason": "STOP"}]});
    let turn = decode(&body);
    assert_eq!(
        turn.content,
        vec![
            Block::text("Here:"),
            Block::Image { media_type: "image/png".into(), source: ImageSource::Base64 { data: PNG.into() } },
            Block::Image { media_type: "image/jpeg".into(), source: ImageSource::Url { url: "gs://b/x.jpg".into() } },
        ]
    );
}

// ----- generated parts: a stream always equals the same parts as one body -----

#[derive(Debug, Clone)]
enum GenPart {
    Text(String, bool, Option<u8>),
    Call(String, Option<String>, String),
}

fn gen_part() -> impl Strategy<Value = GenPart> {
    let text = ("[a-z ]{0,6}", any::<bool>(), prop::option::of(0u8..3)).prop_map(|(t, th, s)| GenPart::Text(t, th, s));
    let args = prop::sample::select(vec!["{}", "{\"a\": 1}", "{ \"b\" : [1, 2] }", "{\"s\":\"x,y\"}"]);
    let call = (prop::sample::select(vec!["f", "g"]), prop::option::of("[a-z0-9]{1,4}"), args)
        .prop_map(|(n, id, a)| GenPart::Call(n.to_string(), id, a.to_string()));
    prop_oneof![3 => text, 1 => call]
}

fn part_json(p: &GenPart) -> String {
    match p {
        GenPart::Text(t, thought, sig) => {
            let mut s = format!("{{\"text\":{}", Value::String(t.clone()));
            if *thought {
                s.push_str(",\"thought\":true");
            }
            if let Some(n) = sig {
                s.push_str(&format!(",\"thoughtSignature\":\"U0lH{n}\""));
            }
            s.push('}');
            s
        }
        GenPart::Call(name, id, args) => {
            let id = id.as_ref().map(|i| format!(",\"id\":\"{i}\"")).unwrap_or_default();
            format!("{{\"functionCall\":{{\"name\":\"{name}\",\"args\":{args}{id}}}}}")
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn streamed_parts_equal_one_body(parts in prop::collection::vec(gen_part(), 0..12), groups in prop::collection::vec(1usize..4, 1..12)) {
        let texts: Vec<String> = parts.iter().map(part_json).collect();
        let body = format!(r#"{{"candidates":[{{"content":{{"parts":[{}]}},"finishReason":"STOP"}}]}}"#, texts.join(","));
        let whole = Style::Gemini.decode_response(body.as_bytes(), &mut CallIds::new("c")).expect("body decodes");
        // The same parts spread over events of 1–3 parts each.
        let mut sse = String::new();
        let mut rest = &texts[..];
        let mut sizes = groups.iter().cycle();
        while !rest.is_empty() {
            let n = (*sizes.next().unwrap_or(&1)).min(rest.len());
            sse.push_str(&format!("data: {{\"candidates\":[{{\"content\":{{\"parts\":[{}]}}}}]}}\n\n", rest[..n].join(",")));
            rest = &rest[n..];
        }
        sse.push_str("data: {\"candidates\":[{\"finishReason\":\"STOP\"}]}\n\n");
        let streamed = decode_stream_chunks(Style::Gemini, [sse.as_bytes()], &mut CallIds::new("c")).expect("stream decodes");
        prop_assert_eq!(&streamed, &whole);
        // And the transcript sends back what it got: every call with its args
        // and signature, text runs joined.
        let messages = vec![Message::user("q"), Message { role: Role::Assistant, content: whole.content.clone() }];
        let encoded = encode(&messages, None, &[], None, false);
        let calls_out = encoded["contents"][1]["parts"].as_array().map(|p| p.iter().filter(|x| x.get("functionCall").is_some()).count()).unwrap_or(0);
        prop_assert_eq!(calls_out, parts.iter().filter(|p| matches!(p, GenPart::Call(..))).count());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = Style::Gemini.decode_response(&bytes, &mut CallIds::default());
        let _ = decode_stream_chunks(Style::Gemini, bytes.chunks(7), &mut CallIds::default());
        let _ = Style::Gemini.decode_error(Some(400), None, &bytes);
    }

    #[test]
    fn arbitrary_json_never_panics(v in json_value()) {
        let text = v.to_string();
        let _ = Style::Gemini.decode_response(text.as_bytes(), &mut CallIds::default());
        let sse = format!("data: {text}\n\n");
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        decoder.feed(sse.as_bytes(), &mut events);
        let mut asm = Style::Gemini.assembler();
        let mut out = Vec::new();
        for ev in &events {
            let _ = asm.push(ev, &mut CallIds::default(), &mut out);
        }
        let _ = asm.finish();
    }
}

/// JSON built from Gemini's own vocabulary, so random values reach deep into
/// the response shape instead of failing at the first key.
fn json_value() -> impl Strategy<Value = Value> {
    let keys = prop::sample::select(vec![
        "candidates",
        "content",
        "parts",
        "text",
        "thought",
        "thoughtSignature",
        "functionCall",
        "args",
        "name",
        "id",
        "finishReason",
        "index",
        "usageMetadata",
        "promptTokenCount",
        "candidatesTokenCount",
        "totalTokenCount",
        "promptFeedback",
        "blockReason",
        "modelVersion",
        "error",
        "inlineData",
        "mimeType",
        "data",
        "fileData",
        "fileUri",
        "status",
        "message",
        "code",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        prop::sample::select(vec!["STOP", "MAX_TOKENS", "", "image/png", "U0lH", "x"]).prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(5, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..5)
                .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())),
        ]
    })
}

// ----- the official SDK's request validator -----

fn oracle_python() -> Option<PathBuf> {
    let py = PathBuf::from(std::env::var("NEXUS_ORACLE_PY").unwrap_or_else(|_| "/tmp/oracle-venv/bin/python".into()));
    py.exists().then_some(py)
}

#[test]
fn encoded_bodies_pass_the_sdk_request_validator() {
    let Some(py) = oracle_python() else {
        println!("skipped: oracle interpreter not found (set NEXUS_ORACLE_PY)");
        return;
    };
    let script = common::shared_dir().join("oracles/validate_request.py");
    // A decoded Gemini 3 call from the corpus, answered: its signature and
    // generated id must come back in a form the API accepts.
    let recorded =
        std::fs::read(common::shared_dir().join("wire-corpus/gemini/vai_tool_call_gemini3.json")).expect("corpus");
    let turn = Style::Gemini.decode_response(&recorded, &mut CallIds::new("call_")).expect("decodes");
    let call_id = turn.tool_calls().next().expect("a call").id.clone();
    let after_corpus = vec![
        Message::user("Weather in SF?"),
        Message { role: Role::Assistant, content: turn.content.clone() },
        Message { role: Role::User, content: vec![result(&call_id, "weather", "{\"temp\": 14}", false)] },
    ];
    let weather = vec![ToolDecl::new(
        "weather",
        "Weather.",
        json!({"type": "object", "properties": {"location": {"type": "string"}}}),
    )];
    let bodies = [
        ("text", encode(&[Message::user("Hello")], None, &[], None, false)),
        ("system_tools_max", encode(&[Message::user("Hello")], Some("Be brief."), &tools(), Some(100), false)),
        ("full_round_stream", encode(&full_transcript(), Some("Be brief."), &tools(), Some(256), true)),
        ("full_round", encode(&full_transcript(), None, &tools(), None, false)),
        ("corpus_call_answered", encode(&after_corpus, None, &weather, None, true)),
    ];
    let dir = std::env::temp_dir().join(format!("nexus-gemini-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    for (name, body) in bodies {
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, serde_json::to_vec_pretty(&body).expect("serializes")).expect("write");
        let run = Command::new(&py).arg(&script).arg("gemini").arg(&file).output().expect("run the validator");
        assert!(
            run.status.success(),
            "{name}: validator exit {:?}\n{}\n{}\nbody: {body}",
            run.status.code(),
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
