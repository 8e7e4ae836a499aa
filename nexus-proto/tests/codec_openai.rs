//! The OpenAI Chat Completions codec: request shape, decode/encode round
//! trips, stop reasons, errors, stream assembly and robustness.
//!
//! Expected bodies follow the Chat Completions API reference: messages
//! `{role:"system"|"user"|"assistant"|"tool", …}`, user content parts
//! `{type:"text"}` / `{type:"image_url", image_url:{url}}`, assistant
//! `tool_calls: [{id, type:"function", function:{name, arguments}}]`, tool
//! messages `{role:"tool", tool_call_id, content}`.

mod common;

use nexus_proto::provider::{openai, Assembler, ModelCall, Style};
use nexus_proto::{
    Block, CallIds, DecodeError, ImageSource, Message, RemoteError, Role, SseDecoder, StopReason, StreamEvent,
    ToolCall, ToolDecl, ToolResultBlock, TurnResponse,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const STYLE: Style = Style::OpenAi;

// ---------------------------------------------------------------- helpers

fn call<'a>(
    system: Option<&'a str>,
    messages: &'a [Message],
    tools: &'a [ToolDecl],
    stream: bool,
    max_tokens: Option<u32>,
    params: &'a Map<String, Value>,
) -> ModelCall<'a> {
    ModelCall { model: "gpt-4o", system, messages, tools, max_tokens, stream, params, output: None }
}

fn tool_call(id: &str, name: &str, arguments: &str) -> Block {
    Block::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        input: serde_json::from_str(arguments).unwrap_or(Value::Null),
        arguments: arguments.into(),
        provider_data: None,
    })
}

fn tool_result(call_id: &str, name: &str, output: &str, is_error: bool) -> Block {
    Block::ToolResult(ToolResultBlock { call_id: call_id.into(), name: name.into(), output: output.into(), is_error })
}

fn weather_tool() -> ToolDecl {
    ToolDecl::new(
        "get_weather",
        "Current weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    )
}

fn decode(body: &Value) -> Result<TurnResponse, RemoteError> {
    openai::decode_response(body.to_string().as_bytes(), &mut CallIds::new("gen_"))
}

/// SSE bytes for the given chunk payloads, ended by `data: [DONE]` when `done`.
fn sse(chunks: &[Value], done: bool) -> Vec<u8> {
    let mut out = String::new();
    for c in chunks {
        out.push_str(&format!("data: {c}\n\n"));
    }
    if done {
        out.push_str("data: [DONE]\n\n");
    }
    out.into_bytes()
}

/// Feeds bytes through the SSE decoder and the assembler, keeping the deltas.
fn run_stream(bytes: &[u8]) -> (Result<TurnResponse, RemoteError>, Vec<StreamEvent>) {
    let mut decoder = SseDecoder::new();
    let mut assembler = STYLE.assembler();
    let mut ids = CallIds::new("gen_");
    let mut events = Vec::new();
    let mut deltas = Vec::new();
    decoder.feed(bytes, &mut events);
    decoder.finish(&mut events);
    for ev in &events {
        if let Err(e) = assembler.push(ev, &mut ids, &mut deltas) {
            return (Err(e), deltas);
        }
    }
    (assembler.finish(), deltas)
}

fn chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"object": "chat.completion.chunk", "model": "gpt-4o", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

fn usage_chunk(prompt: u64, completion: u64) -> Value {
    json!({"object": "chat.completion.chunk", "model": "gpt-4o", "choices": [],
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
}

/// Each started call is announced once, and its fragments concatenate to its arguments.
fn assert_deltas_consistent(turn: &TurnResponse, deltas: &[StreamEvent]) {
    for c in turn.tool_calls() {
        let started = deltas
            .iter()
            .filter(|d| matches!(d, StreamEvent::ToolCallStarted { id, name } if *id == c.id && *name == c.name))
            .count();
        assert_eq!(started, 1, "call {} announced {started} times: {deltas:?}", c.id);
        let joined: String = deltas
            .iter()
            .filter_map(|d| match d {
                StreamEvent::ToolCallDelta { id, arguments } if *id == c.id => Some(arguments.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(joined, c.arguments, "fragments of {}", c.id);
    }
    let empty = deltas.iter().any(|d| match d {
        StreamEvent::ToolCallDelta { arguments: t, .. }
        | StreamEvent::TextDelta { text: t }
        | StreamEvent::ReasoningDelta { text: t } => t.is_empty(),
        _ => false,
    });
    assert!(!empty, "empty delta emitted: {deltas:?}");
}

// ---------------------------------------------------------------- encoding

#[test]
fn full_transcript_encodes_to_the_documented_shape() {
    let messages = vec![
        Message::user("What is the weather in Paris and Rome?"),
        Message {
            role: Role::Assistant,
            content: vec![
                Block::Reasoning {
                    text: "Two cities, two calls.".into(),
                    signature: Some("sig-abc".into()),
                    redacted: None,
                    provider_data: None,
                },
                Block::text("Checking both."),
                tool_call("call_1", "get_weather", "{\"city\": \"Paris\"}"),
                tool_call("call_2", "get_weather", "{\"city\":\"Rome\"}"),
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                tool_result("call_1", "get_weather", "sunny, 21C", false),
                tool_result("call_2", "get_weather", "", true),
                Block::text("Also, what is in these pictures?"),
                Block::Image {
                    media_type: "image/png".into(),
                    source: ImageSource::Base64 { data: "iVBORw0KGgo=".into() },
                },
                Block::Image {
                    media_type: "image/jpeg".into(),
                    source: ImageSource::Url { url: "https://example.com/cat.jpg".into() },
                },
            ],
        },
    ];
    let tools = [weather_tool()];
    let params = Map::new();
    let body = STYLE.encode_body(&call(Some("Be brief."), &messages, &tools, true, Some(512), &params));
    let want = json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the weather in Paris and Rome?"},
            // Reasoning has no request field in Chat Completions: dropped.
            {"role": "assistant", "content": "Checking both.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}},
            ]},
            // Tool results first, one message each, in order; no error flag on the wire.
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
            {"role": "tool", "tool_call_id": "call_2", "content": ""},
            {"role": "user", "content": [
                {"type": "text", "text": "Also, what is in these pictures?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ]},
        ],
        "tools": [{"type": "function", "function": {
            "name": "get_weather",
            "description": "Current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }}],
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_completion_tokens": 512,
    });
    assert_eq!(body, want);
}

#[test]
fn optional_keys_are_omitted_when_unused() {
    let messages = vec![Message::user("hi")];
    let params = Map::new();
    let body = STYLE.encode_body(&call(None, &messages, &[], false, None, &params));
    assert_eq!(body, json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}));
}

#[test]
fn caller_params_are_merged_but_cannot_replace_the_conversation() {
    let messages = vec![Message::user("hi")];
    let mut params = Map::new();
    params.insert("tool_choice".into(), json!("required"));
    params.insert("temperature".into(), json!(0.2));
    params.insert("messages".into(), json!([]));
    let tools = [weather_tool()];
    let body = STYLE.encode_body(&call(None, &messages, &tools, false, None, &params));
    assert_eq!(body["tool_choice"], "required");
    assert_eq!(body["temperature"], 0.2);
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(1));
}

#[test]
fn assistant_content_is_null_only_beside_tool_calls() {
    let messages = vec![
        Message::user("go"),
        Message { role: Role::Assistant, content: vec![tool_call("c1", "get_weather", "{}")] },
        Message { role: Role::User, content: vec![tool_result("c1", "get_weather", "ok", false)] },
        Message {
            role: Role::Assistant,
            content: vec![Block::Reasoning { text: "hm".into(), signature: None, redacted: None, provider_data: None }],
        },
    ];
    let params = Map::new();
    let body = STYLE.encode_body(&call(None, &messages, &[], false, None, &params));
    let m = body["messages"].as_array().unwrap();
    assert_eq!(m.len(), 4, "a results-only user turn adds no user message: {body}");
    assert_eq!(m[1]["content"], Value::Null);
    assert_eq!(m[2], json!({"role": "tool", "tool_call_id": "c1", "content": "ok"}));
    // Without text or calls the API still wants a content string.
    assert_eq!(m[3], json!({"role": "assistant", "content": ""}));
}

#[test]
fn other_providers_data_is_never_sent() {
    let messages = vec![Message {
        role: Role::Assistant,
        content: vec![
            Block::Text { text: "a".into(), provider_data: Some(json!({"anthropic": {"refusal": true}})) },
            Block::Text { text: "b".into(), provider_data: Some(json!({"gemini": {"thoughtSignature": "xyz"}})) },
            Block::ToolCall(ToolCall {
                id: "c".into(),
                name: "f".into(),
                input: json!({}),
                arguments: "{}".into(),
                provider_data: Some(json!({"gemini": {"thoughtSignature": "xyz"}})),
            }),
        ],
    }];
    let params = Map::new();
    let body = STYLE.encode_body(&call(None, &messages, &[], false, None, &params));
    assert_eq!(
        body["messages"][0],
        json!({"role": "assistant", "content": "ab", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]})
    );
}

// ---------------------------------------------------------------- round trips

#[test]
fn decoded_turn_encodes_back_to_the_same_assistant_message() {
    // Arguments with unusual spacing and escapes: they must come back byte for byte.
    let args_a = "{ \"path\" : \"a\\\\b.txt\",\n \"n\": 1.50 }";
    let args_b = "{\"q\":\"caf\\u00e9\"}";
    let response = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Working on it.", "refusal": null,
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "read", "arguments": args_a}},
                {"id": "call_b", "type": "function", "function": {"name": "search", "arguments": args_b}},
            ]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    });
    let turn = decode(&response).unwrap();
    let messages = vec![Message::user("go"), Message { role: Role::Assistant, content: turn.content.clone() }];
    let params = Map::new();
    let body = STYLE.encode_body(&call(None, &messages, &[], false, None, &params));
    let mut want = response["choices"][0]["message"].clone();
    want.as_object_mut().unwrap().remove("refusal");
    assert_eq!(body["messages"][1], want);
}

#[test]
fn refusal_round_trips_through_provider_data() {
    let response = json!({
        "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": null, "refusal": "I can't help with that."}}],
    });
    let turn = decode(&response).unwrap();
    assert_eq!(turn.stop.reason, StopReason::Refusal);
    assert_eq!(turn.stop.raw.as_deref(), Some("stop"));
    assert_eq!(
        turn.content,
        vec![Block::Text {
            text: "I can't help with that.".into(),
            provider_data: Some(json!({"openai": {"refusal": true}}))
        }]
    );
    let messages = vec![Message::user("x"), Message { role: Role::Assistant, content: turn.content }];
    let params = Map::new();
    let body = STYLE.encode_body(&call(None, &messages, &[], false, None, &params));
    assert_eq!(
        body["messages"][1],
        json!({"role": "assistant", "content": null, "refusal": "I can't help with that."})
    );
}

// ---------------------------------------------------------------- decoding

#[test]
fn stop_reasons_map_and_keep_the_raw_string() {
    let table = [
        ("stop", StopReason::EndTurn),
        ("length", StopReason::MaxTokens),
        ("tool_calls", StopReason::ToolUse),
        ("function_call", StopReason::ToolUse),
        ("content_filter", StopReason::ContentFilter),
        ("something_new", StopReason::Other),
    ];
    for (raw, want) in table {
        let body =
            json!({"choices": [{"index": 0, "finish_reason": raw, "message": {"role": "assistant", "content": "x"}}]});
        let turn = decode(&body).unwrap();
        assert_eq!((turn.stop.reason, turn.stop.raw.as_deref()), (want, Some(raw)), "body {raw}");
        let (streamed, _) = run_stream(&sse(&[chunk(json!({"content": "x"}), Some(raw))], true));
        assert_eq!(streamed.unwrap().stop, turn.stop, "stream {raw}");
    }
    let body = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]});
    let turn = decode(&body).unwrap();
    assert_eq!((turn.stop.reason, turn.stop.raw), (StopReason::Other, None));
}

#[test]
fn arguments_are_kept_raw_whatever_they_are() {
    // Cut off (the output cap hit mid-arguments): complete members are
    // recovered, the unfinished trailing string is dropped with its key.
    let cut = "{\"x\": 1, \"y\": \"ab";
    // Wrong before its end: nothing is recoverable.
    let broken = "{\"x\": 1,]";
    let body = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
    "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": cut}},
        {"id": "b", "type": "function", "function": {"name": "f", "arguments": broken}},
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": ""}},
        {"id": "d", "type": "function", "function": {"name": "f"}},
    ]}}]});
    let turn = decode(&body).unwrap();
    let got: Vec<_> = turn.tool_calls().map(|c| (c.arguments.as_str(), c.input.clone())).collect();
    assert_eq!(got, [(cut, json!({"x": 1})), (broken, Value::Null), ("", json!({})), ("", json!({}))]);
}

#[test]
fn object_valued_arguments_keep_their_exact_bytes() {
    // Some compatible servers send an object; its text is kept as written.
    let body = br#"{"choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","tool_calls":[
        {"id":"a","type":"function","function":{"name":"f","arguments":{ "b" : [1, 2.0],"a":"\u00e9" }}}]}}]}"#;
    let turn = openai::decode_response(body, &mut CallIds::new("gen_")).unwrap();
    let c = turn.tool_calls().next().unwrap();
    assert_eq!(c.arguments, r#"{ "b" : [1, 2.0],"a":"\u00e9" }"#);
    assert_eq!(c.input, json!({"b": [1, 2.0], "a": "é"}));
}

#[test]
fn reasoning_text_and_usage_decode() {
    let body = json!({"model": "deepseek-reasoner", "choices": [{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": "42", "reasoning_content": "think", "reasoning": "think"}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}});
    let turn = decode(&body).unwrap();
    assert_eq!(
        turn.content,
        vec![
            Block::Reasoning { text: "think".into(), signature: None, redacted: None, provider_data: None },
            Block::text("42"),
        ]
    );
    assert_eq!((turn.usage.prompt_tokens, turn.usage.completion_tokens, turn.usage.total_tokens), (3, 4, 7));
    assert!(turn.usage_reported);
    assert_eq!(turn.model.as_deref(), Some("deepseek-reasoner"));
    // OpenRouter / newer vLLM spell it `reasoning`.
    let body = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "a", "reasoning": "r"}}]});
    assert_eq!(
        decode(&body).unwrap().content[0],
        Block::Reasoning { text: "r".into(), signature: None, redacted: None, provider_data: None }
    );
}

#[test]
fn zero_choices_is_an_empty_turn_and_only_the_first_choice_counts() {
    let turn = decode(&json!({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 0}})).unwrap();
    assert!(turn.content.is_empty());
    assert_eq!(turn.usage.total_tokens, 1, "no total given: prompt + completion");
    let body = json!({"choices": [
        {"index": 1, "finish_reason": "length", "message": {"role": "assistant", "content": "second"}},
        {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "first"}},
    ]});
    let turn = decode(&body).unwrap();
    assert_eq!((turn.text().as_str(), turn.stop.raw.as_deref()), ("first", Some("stop")));
    assert!(!turn.usage_reported);
}

#[test]
fn missing_ids_are_generated_and_marked() {
    let body = json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
        "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}, {"id": "", "function": {"name": "g", "arguments": "{}"}}]}}]});
    let turn = decode(&body).unwrap();
    let ids: Vec<_> = turn.tool_calls().map(|c| c.id.clone()).collect();
    assert_eq!(ids, ["gen_0", "gen_1"]);
    assert_eq!(turn.summary()["tool_calls"][0]["id"], Value::Null, "a generated id is not the provider's");
}

// ---------------------------------------------------------------- errors

#[test]
fn error_bodies_keep_type_message_and_status() {
    let body =
        br#"{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
    let e = STYLE.decode_error(Some(429), Some("3"), body);
    assert_eq!((e.status, e.kind.as_str(), e.message.as_str()), (Some(429), "requests", "Rate limit reached"));
    assert!(e.retryable);
    assert_eq!(e.retry_after_ms, Some(3000));
    assert_eq!(e.body.as_bytes(), body);

    // `type` null: `code` names the error.
    let body = br#"{"error":{"message":"bad key","type":null,"param":null,"code":"invalid_api_key"}}"#;
    assert_eq!(openai::error_details(body), Some(("invalid_api_key".into(), "bad key".into())));
    // Gemini's compatible endpoint: an array, with `status`.
    let body = br#"[{"error":{"code":400,"message":"API key not valid","status":"INVALID_ARGUMENT"}}]"#;
    assert_eq!(openai::error_details(body), Some(("INVALID_ARGUMENT".into(), "API key not valid".into())));
    // vLLM: the error object at the top level.
    let body = br#"{"object":"error","message":"model not found","type":"NotFoundError","param":null,"code":404}"#;
    assert_eq!(openai::error_details(body), Some(("NotFoundError".into(), "model not found".into())));
    assert_eq!(openai::error_details(br#"{"error":"overloaded"}"#), Some(("error".into(), "overloaded".into())));
    assert_eq!(openai::error_details(br#"{"choices":[]}"#), None);
    assert_eq!(openai::error_details(b"<html>502</html>"), None);
}

#[test]
fn an_error_body_with_a_success_status_is_a_provider_error() {
    let body = br#"{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}"#;
    match openai::decode_response(body, &mut CallIds::default()) {
        Err(RemoteError::Provider(p)) => {
            assert_eq!(
                (p.kind.as_str(), p.message.as_str(), p.status),
                ("server_error", "The server had an error", None)
            );
            assert!(p.retryable, "server_error is transient");
        }
        other => panic!("{other:?}"),
    }
    let vllm = br#"{"object":"error","message":"bad","type":"BadRequestError","code":400}"#;
    assert!(matches!(openai::decode_response(vllm, &mut CallIds::default()), Err(RemoteError::Provider(_))));
    let wrapped = br#"[{"error":{"code":503,"message":"busy","status":"UNAVAILABLE"}}]"#;
    assert!(
        matches!(openai::decode_response(wrapped, &mut CallIds::default()), Err(RemoteError::Provider(p)) if p.kind == "UNAVAILABLE" && p.retryable)
    );
}

#[test]
fn malformed_bodies_are_typed_errors() {
    let json_err = |b: &[u8]| {
        matches!(openai::decode_response(b, &mut CallIds::default()), Err(RemoteError::Decode(DecodeError::Json(_))))
    };
    let shape_err = |b: &[u8]| {
        matches!(openai::decode_response(b, &mut CallIds::default()), Err(RemoteError::Decode(DecodeError::Shape(_))))
    };
    assert!(json_err(b""));
    assert!(json_err(b"{\"choices\": ["));
    assert!(json_err(b"\xff\xfe"));
    assert!(json_err(b"{\"choices\":[{\"message\":{\"content\":\"\xff\"}}]}"));
    assert!(shape_err(b"[1, 2]"));
    assert!(shape_err(b"{}"), "no choices: not a chat completion");
    assert!(shape_err(b"\"text\""));
    assert!(shape_err(br#"{"choices": "x"}"#));
    assert!(shape_err(br#"{"choices": [{"message": {"content": 5}}]}"#));
    assert!(shape_err(br#"{"choices": [{"message": {"tool_calls": {"id": "a"}}}]}"#));
}

// ---------------------------------------------------------------- streams

#[test]
fn a_stream_equals_the_same_turn_as_one_body() {
    let chunks = [
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"reasoning_content": "Let me "}), None),
        chunk(json!({"reasoning_content": "think."}), None),
        chunk(json!({"content": "Calling "}), None),
        chunk(json!({"content": "tools."}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
            None,
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\": "}}]}), None),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}),
            None,
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}), None),
        chunk(json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"city\":\"Rome\"}"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(20, 9),
    ];
    let (streamed, deltas) = run_stream(&sse(&chunks, true));
    let streamed = streamed.unwrap();
    let body = json!({"object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": "Calling tools.", "reasoning_content": "Let me think.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}},
        ]}}], "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29}});
    assert_eq!(streamed, decode(&body).unwrap());
    assert_deltas_consistent(&streamed, &deltas);
    let text: String = deltas
        .iter()
        .filter_map(|d| match d {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Calling tools.");
    assert!(!deltas.iter().any(|d| matches!(
        d,
        StreamEvent::ToolCallFinished { .. } | StreamEvent::Usage { .. } | StreamEvent::TurnFinished { .. }
    )));
}

#[test]
fn repeated_ids_and_names_do_not_duplicate_a_call() {
    let piece = |args: &str| json!({"tool_calls": [{"index": 0, "id": "call_x", "type": "function", "function": {"name": "f", "arguments": args}}]});
    let chunks = [
        chunk(piece("{\"a\""), None),
        chunk(piece(""), None),
        chunk(piece(":1}"), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let (turn, deltas) = run_stream(&sse(&chunks, true));
    let turn = turn.unwrap();
    let calls: Vec<_> = turn.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].id.as_str(), calls[0].name.as_str(), calls[0].arguments.as_str()),
        ("call_x", "f", "{\"a\":1}")
    );
    assert_deltas_consistent(&turn, &deltas);
}

#[test]
fn a_new_id_at_a_reused_index_starts_a_new_call() {
    // A server that numbers every call 0; same tool name twice.
    let chunks = [
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{\"n\":"}}]}),
            None,
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}), None),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "f", "arguments": "{\"n\":"}}]}),
            None,
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "2}"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let (turn, deltas) = run_stream(&sse(&chunks, true));
    let turn = turn.unwrap();
    let got: Vec<_> = turn.tool_calls().map(|c| (c.id.as_str(), c.arguments.as_str())).collect();
    assert_eq!(got, [("a", "{\"n\":1}"), ("b", "{\"n\":2}")]);
    assert_deltas_consistent(&turn, &deltas);
}

#[test]
fn pieces_without_index_route_by_id_then_to_the_call_last_addressed() {
    // One call after the other, continuation pieces carrying neither id nor index.
    let chunks = [
        chunk(json!({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{"}}]}), None),
        chunk(json!({"tool_calls": [{"function": {"arguments": "}"}}]}), None),
        chunk(json!({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "["}}]}), None),
        chunk(json!({"tool_calls": [{"function": {"arguments": "]"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let (turn, deltas) = run_stream(&sse(&chunks, true));
    let turn = turn.unwrap();
    let got: Vec<_> = turn.tool_calls().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())).collect();
    assert_eq!(got, [("a", "f", "{}"), ("b", "g", "[]")]);
    assert_deltas_consistent(&turn, &deltas);

    // A piece that names an earlier call by id takes the id-less pieces after it.
    let chunks = [
        chunk(json!({"tool_calls": [{"id": "a", "function": {"name": "f", "arguments": "{\"x\":"}}]}), None),
        chunk(json!({"tool_calls": [{"id": "b", "function": {"name": "g", "arguments": "["}}]}), None),
        chunk(json!({"tool_calls": [{"id": "a", "function": {"arguments": "1"}}]}), None),
        chunk(json!({"tool_calls": [{"function": {"arguments": "}"}}]}), None),
        chunk(json!({"tool_calls": [{"id": "b", "function": {"arguments": "]"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let (turn, deltas) = run_stream(&sse(&chunks, true));
    let turn = turn.unwrap();
    let got: Vec<_> = turn.tool_calls().map(|c| (c.id.as_str(), c.input.clone())).collect();
    assert_eq!(got, [("a", json!({"x": 1})), ("b", json!([]))]);
    assert_deltas_consistent(&turn, &deltas);
}

#[test]
fn interleaved_same_name_calls_stay_apart() {
    let chunks = [
        chunk(
            json!({"tool_calls": [
            {"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}},
            {"index": 1, "id": "b", "function": {"name": "f", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "function": {"arguments": "{\"k\":"}}, {"index": 0, "function": {"arguments": "{\"k\":"}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "0}"}}, {"index": 1, "function": {"arguments": "1}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ];
    let (turn, deltas) = run_stream(&sse(&chunks, true));
    let turn = turn.unwrap();
    let got: Vec<_> = turn.tool_calls().map(|c| (c.id.as_str(), c.input.clone())).collect();
    assert_eq!(got, [("a", json!({"k": 0})), ("b", json!({"k": 1}))]);
    assert_deltas_consistent(&turn, &deltas);
}

#[test]
fn a_server_without_ids_gets_generated_ones_as_for_a_body() {
    let chunks = [
        chunk(json!({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}), None),
        chunk(json!({"tool_calls": [{"index": 1, "function": {"name": "g"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let (turn, deltas) = run_stream(&sse(&chunks, true));
    let turn = turn.unwrap();
    let body = json!({"model": "gpt-4o", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant",
        "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}, {"function": {"name": "g"}}]}}]});
    assert_eq!(turn, decode(&body).unwrap());
    assert_deltas_consistent(&turn, &deltas);
}

#[test]
fn an_id_after_the_name_joins_its_call() {
    let chunks = [
        chunk(json!({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}), None),
        chunk(json!({"tool_calls": [{"index": 0, "id": "late", "function": {"arguments": "{}"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
    ];
    let (turn, deltas) = run_stream(&sse(&chunks, true));
    let turn = turn.unwrap();
    let got: Vec<_> = turn.tool_calls().map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str())).collect();
    assert_eq!(got, [("late", "f", "{}")]);
    assert_deltas_consistent(&turn, &deltas);
}

#[test]
fn a_stream_without_done_is_truncated() {
    let chunks = [chunk(json!({"content": "partial"}), None), chunk(json!({}), Some("stop")), usage_chunk(1, 1)];
    let (turn, deltas) = run_stream(&sse(&chunks, false));
    assert!(matches!(turn, Err(RemoteError::Decode(DecodeError::Truncated(_)))), "{turn:?}");
    assert_eq!(deltas, [StreamEvent::TextDelta { text: "partial".into() }]);
    let (turn, _) = run_stream(b"");
    assert!(matches!(turn, Err(RemoteError::Decode(DecodeError::Truncated(_)))));
}

#[test]
fn an_error_event_mid_stream_is_a_provider_error() {
    let error = json!({"error": {"message": "The server had an error while processing your request.", "type": "server_error", "param": null, "code": null}});
    let chunks = [chunk(json!({"content": "Hel"}), None), error.clone(), chunk(json!({"content": "lo"}), None)];
    let (turn, deltas) = run_stream(&sse(&chunks, true));
    match turn {
        Err(RemoteError::Provider(p)) => {
            assert_eq!(p.status, None);
            assert_eq!(p.kind, "server_error");
            assert_eq!(p.message, "The server had an error while processing your request.");
            assert_eq!(p.body, error.to_string());
            assert!(p.retryable);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(deltas.len(), 1, "nothing after the error: {deltas:?}");

    let bad_request = json!({"error": {"message": "bad", "type": "invalid_request_error"}});
    let (turn, _) = run_stream(&sse(&[bad_request], false));
    assert!(matches!(turn, Err(RemoteError::Provider(p)) if p.kind == "invalid_request_error" && !p.retryable));

    let (turn, _) = run_stream(b"event: error\ndata: {\"message\":\"overloaded\",\"type\":\"overloaded_error\"}\n\n");
    assert!(matches!(turn, Err(RemoteError::Provider(_))), "{turn:?}");
}

#[test]
fn events_after_done_are_ignored() {
    let mut bytes = sse(&[chunk(json!({"content": "ok"}), Some("stop"))], true);
    bytes.extend_from_slice(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"}}]}\n\ndata: not json\n\n",
    );
    let (turn, deltas) = run_stream(&bytes);
    assert_eq!(turn.unwrap().text(), "ok");
    assert_eq!(deltas.len(), 1);
}

#[test]
fn other_choices_and_unknown_fields_are_ignored() {
    let chunks = [
        json!({"choices": [{"index": 1, "delta": {"content": "other"}, "finish_reason": null}], "obfuscation": "abc"}),
        json!({"choices": [{"index": 0, "delta": {"content": "mine", "annotations": []}, "finish_reason": null, "logprobs": null}], "obfuscation": "x", "usage": null}),
        json!({"choices": [{"index": 1, "delta": {}, "finish_reason": "length"}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ];
    let (turn, _) = run_stream(&sse(&chunks, true));
    let turn = turn.unwrap();
    assert_eq!((turn.text().as_str(), turn.stop.raw.as_deref()), ("mine", Some("stop")));
    assert!(!turn.usage_reported);
}

#[test]
fn emitted_anything_counts_visible_deltas_only() {
    let mut a = Assembler::OpenAi(openai::Assembler::default());
    let mut ids = CallIds::default();
    let mut out = Vec::new();
    let ev = |data: Value| nexus_proto::SseEvent { event: None, data: data.to_string(), id: None };
    a.push(&ev(chunk(json!({"role": "assistant", "content": ""}), None)), &mut ids, &mut out).unwrap();
    assert!(!a.emitted_anything() && out.is_empty());
    a.push(&ev(chunk(json!({"content": "x"}), None)), &mut ids, &mut out).unwrap();
    assert!(a.emitted_anything());
}

#[test]
fn malformed_stream_payloads_are_typed_errors() {
    let (turn, _) = run_stream(b"data: {\"choices\": [\n\n");
    assert!(matches!(turn, Err(RemoteError::Decode(DecodeError::Json(_)))), "{turn:?}");
    let (turn, _) = run_stream(b"data: {\"choices\": 7}\n\n");
    assert!(matches!(turn, Err(RemoteError::Decode(DecodeError::Shape(_)))), "{turn:?}");
}

// ---------------------------------------------------------------- robustness

fn corpus_stream_bytes() -> Vec<Vec<u8>> {
    common::captures(STYLE).into_iter().filter(|(_, s)| *s).map(|(p, _)| std::fs::read(p).unwrap()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = openai::decode_response(&bytes, &mut CallIds::default());
        let _ = run_stream(&bytes);
        let _ = openai::error_details(&bytes);
        let mut prefixed = b"data: ".to_vec();
        prefixed.extend_from_slice(&bytes);
        let _ = run_stream(&prefixed);
    }

    #[test]
    fn corrupted_corpus_streams_never_panic(file in 0usize..16, flips in proptest::collection::vec((any::<u32>(), any::<u8>()), 1..8), cut in any::<u32>()) {
        let all = corpus_stream_bytes();
        let mut bytes = all[file % all.len()].clone();
        for (at, byte) in flips {
            let i = at as usize % bytes.len();
            bytes[i] = byte;
        }
        bytes.truncate(cut as usize % (bytes.len() + 1));
        let (turn, deltas) = run_stream(&bytes);
        if let Ok(turn) = turn {
            assert_deltas_consistent(&turn, &deltas);
        }
    }

    #[test]
    fn arbitrary_json_values_never_panic(v in arb_json()) {
        let body = json!({"choices": [{"index": 0, "message": v.clone(), "finish_reason": v.clone()}], "usage": v.clone()});
        let _ = decode(&body);
        let _ = decode(&v);
        let chunk = json!({"choices": [{"index": 0, "delta": {"tool_calls": [v.clone()], "content": v.clone()}}]});
        let _ = run_stream(&sse(&[chunk, v], true));
    }
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        "[a-z_]{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::vec(
                (
                    prop_oneof![
                        Just("id".to_string()),
                        Just("index".to_string()),
                        Just("function".to_string()),
                        Just("name".to_string()),
                        Just("arguments".to_string()),
                        Just("content".to_string()),
                        Just("tool_calls".to_string()),
                        Just("error".to_string()),
                        "[a-z]{1,6}".prop_map(String::from)
                    ],
                    inner
                ),
                0..5
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}
