//! The Anthropic codec on its own: request bodies against the documented
//! Messages format (and the official SDK's request types, through the
//! oracle), provider data round trips, the stop-reason table, error bodies,
//! streams that end early or report errors, block-index handling, and
//! malformed input that must become a typed error, never a panic.

mod common;

use std::path::PathBuf;
use std::process::Command;

use nexus_proto::provider::{anthropic, decode_stream_chunks, ModelCall, Style, TurnResponse};
use nexus_proto::sse::SseEvent;
use nexus_proto::{
    Block, CallIds, DecodeError, ImageSource, Message, ProviderError, RemoteError, Role, StopReason, StreamEvent,
    ToolCall, ToolDecl, ToolResultBlock,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const STYLE: Style = Style::Anthropic;

// ---------------------------------------------------------------- helpers

fn call(model: &str, messages: &[Message], tools: &[ToolDecl], stream: bool) -> Value {
    STYLE.encode_body(&ModelCall {
        model,
        system: None,
        messages,
        tools,
        max_tokens: None,
        stream,
        params: &Map::new(),
        output: None,
    })
}

fn tool_call(id: &str, name: &str, arguments: &str) -> Block {
    Block::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        input: serde_json::from_str(arguments).unwrap_or(json!({})),
        arguments: arguments.into(),
        provider_data: None,
    })
}

fn result(id: &str, name: &str, output: &str, is_error: bool) -> Block {
    Block::ToolResult(ToolResultBlock { call_id: id.into(), name: name.into(), output: output.into(), is_error })
}

fn user(content: Vec<Block>) -> Message {
    Message { role: Role::User, content }
}

fn assistant(content: Vec<Block>) -> Message {
    Message { role: Role::Assistant, content }
}

fn decode_body(body: &str) -> Result<TurnResponse, RemoteError> {
    STYLE.decode_response(body.as_bytes(), &mut CallIds::new("call_"))
}

/// SSE framing as the API sends it: `event: <type>` then `data: <json>`.
fn sse(events: &[Value]) -> Vec<u8> {
    let mut out = String::new();
    for ev in events {
        out.push_str(&format!("event: {}\ndata: {}\n\n", ev["type"].as_str().unwrap_or("message"), ev));
    }
    out.into_bytes()
}

fn decode_stream(bytes: &[u8]) -> Result<TurnResponse, RemoteError> {
    decode_stream_chunks(STYLE, std::iter::once(bytes), &mut CallIds::new("call_"))
}

/// What pushing a list of events one by one gave.
struct Ran {
    deltas: Vec<StreamEvent>,
    /// Each push's result, in order.
    pushes: Vec<Result<(), RemoteError>>,
    finished: Result<TurnResponse, RemoteError>,
    emitted: bool,
}

fn run_events(events: &[SseEvent]) -> Ran {
    let mut asm = STYLE.assembler();
    let mut ids = CallIds::new("call_");
    let mut deltas = Vec::new();
    let pushes = events.iter().map(|e| asm.push(e, &mut ids, &mut deltas)).collect();
    let emitted = asm.emitted_anything();
    Ran { deltas, pushes, finished: asm.finish(), emitted }
}

fn data_event(v: Value) -> SseEvent {
    SseEvent { event: v["type"].as_str().map(str::to_string), data: v.to_string(), id: None }
}

fn message_start() -> Value {
    json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}})
}

fn message_end(stop: &str) -> [Value; 2] {
    [
        json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":{"output_tokens":20}}),
        json!({"type":"message_stop"}),
    ]
}

// ---------------------------------------------------------------- encoding

fn reasoning(text: &str, signature: Option<&str>, redacted: Option<&str>) -> Block {
    Block::Reasoning {
        text: text.into(),
        signature: signature.map(Into::into),
        redacted: redacted.map(Into::into),
        provider_data: None,
    }
}

fn image(media_type: &str, source: ImageSource) -> Block {
    Block::Image { media_type: media_type.into(), source }
}

/// A conversation with every block kind: images, signed, redacted and
/// unsigned reasoning, parallel calls (one without arguments), and results
/// that are plain, an error without output and empty, after a text.
fn sample_transcript() -> [Message; 3] {
    [
        user(vec![
            Block::text("Weather in Paris and Rome? Map attached."),
            image("image/png", ImageSource::Base64 { data: "iVBORw0KGgo=".into() }),
            image("image/jpeg", ImageSource::Url { url: "https://example.com/map.jpg".into() }),
        ]),
        assistant(vec![
            reasoning("Two cities.", Some("sig-1"), None),
            reasoning("", None, Some("opaque-data")),
            // Unsigned reasoning (another provider's) has no place on this wire.
            reasoning("unsigned", None, None),
            Block::text("Checking both."),
            tool_call("toolu_1", "get_weather", r#"{"city":"Paris"}"#),
            tool_call("toolu_2", "get_weather", r#"{"city": "Rome", "units": ["C"]}"#),
            tool_call("toolu_3", "get_time", ""),
        ]),
        user(vec![
            Block::text("Quickly, please."),
            result("toolu_1", "get_weather", "18C, cloudy", false),
            result("toolu_2", "get_weather", "", true),
            result("toolu_3", "get_time", "", false),
        ]),
    ]
}

fn sample_tools() -> [ToolDecl; 2] {
    let schema = json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]});
    [ToolDecl::new("get_weather", "Weather for a city", schema), ToolDecl::relay("get.time", "The time", Value::Null)]
}

/// A transcript with every block kind encodes to the Messages format as the
/// API reference documents it: user content blocks `text` / `image` (base64
/// and url sources) / `tool_result` (results first in their turn), assistant
/// blocks `thinking` (with its signature) / `redacted_thinking` / `text` /
/// `tool_use` (input an object).
#[test]
fn transcript_encodes_to_the_documented_shape() {
    let (messages, tools) = (sample_transcript(), sample_tools());
    let body = call("claude-sonnet-4-5", &messages, &tools, false);
    let want = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Weather in Paris and Rome? Map attached."},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/map.jpg"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Two cities.", "signature": "sig-1"},
                {"type": "redacted_thinking", "data": "opaque-data"},
                {"type": "text", "text": "Checking both."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome", "units": ["C"]}},
                {"type": "tool_use", "id": "toolu_3", "name": "get_time", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C, cloudy"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "(the tool failed without output)", "is_error": true},
                {"type": "tool_result", "tool_use_id": "toolu_3", "content": "(no output)"},
                {"type": "text", "text": "Quickly, please."},
            ]},
        ],
        "tools": [
            {"name": "get_weather", "description": "Weather for a city",
             "input_schema": {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},
            {"name": "get_time", "description": "The time", "input_schema": {"type":"object","properties":{}}},
        ],
    });
    assert_eq!(body, want);
}

#[test]
fn optional_keys_appear_only_when_set() {
    let messages = [Message::user("hi")];
    let plain = call("m", &messages, &[], false);
    let keys: Vec<&str> = plain.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["max_tokens", "messages", "model"], "no tools, no stream, no system");
    assert_eq!(plain["max_tokens"], 4096);

    let params = Map::new();
    let full = STYLE.encode_body(&ModelCall {
        model: "m",
        system: Some("Be brief."),
        messages: &messages,
        tools: &[ToolDecl::new("t", "d", Value::Null)],
        max_tokens: Some(100),
        stream: true,
        params: &params,
        output: None,
    });
    assert_eq!(full["system"], "Be brief.");
    assert_eq!(full["max_tokens"], 100);
    assert_eq!(full["stream"], true);
    assert_eq!(full["tools"].as_array().unwrap().len(), 1);
}

/// The API rejects empty text blocks and messages without content; neither is sent.
#[test]
fn empty_text_and_empty_turns_are_not_sent() {
    let messages = [Message::user("q"), Message::assistant(""), Message::user("again")];
    let body = call("m", &messages, &[], false);
    assert_eq!(
        body["messages"],
        json!([
            {"role":"user","content":[{"type":"text","text":"q"}]},
            {"role":"user","content":[{"type":"text","text":"again"}]},
        ])
    );
}

#[test]
fn data_url_images_are_sent_inline() {
    let messages = [user(vec![Block::Image {
        media_type: "image/png".into(),
        source: ImageSource::Url { url: "data:image/webp;base64,UklGRg==".into() },
    }])];
    let body = call("m", &messages, &[], false);
    assert_eq!(
        body["messages"][0]["content"][0],
        json!({"type":"image","source":{"type":"base64","media_type":"image/webp","data":"UklGRg=="}})
    );
}

/// `input` must be an object: raw arguments win when they are one, then the
/// parsed input, then `{}`.
#[test]
fn tool_use_input_is_always_an_object() {
    let cases = [
        (r#"{"a":1}"#, json!({"b":2}), json!({"a":1})),
        (r#"{"a": "cut"#, json!({"partial":true}), json!({"partial":true})),
        ("[1,2]", json!([1, 2]), json!({})),
        ("", json!({}), json!({})),
        ("null", Value::Null, json!({})),
    ];
    for (arguments, input, want) in cases {
        let block = Block::ToolCall(ToolCall {
            id: "t".into(),
            name: "n".into(),
            input,
            arguments: arguments.into(),
            provider_data: None,
        });
        let body = call("m", &[Message::user("q"), assistant(vec![block])], &[], false);
        assert_eq!(body["messages"][1]["content"][0]["input"], want, "arguments {arguments:?}");
    }
}

// ------------------------------------------------------- provider data round trip

/// Blocks the transcript has no variant for (server tool use and its result)
/// and `tool_use` keys it has no field for (`caller`) come back in the next
/// request exactly where they were, in order.
#[test]
fn provider_data_round_trips_through_the_transcript() {
    let content = json!([
        {"type":"text","text":"Searching."},
        {"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"weather paris"}},
        {"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","title":"T","url":"https://example.com","encrypted_content":"enc","page_age":null}]},
        {"type":"thinking","thinking":"Now the tool.","signature":"sig"},
        {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"},"caller":{"type":"direct"}},
    ]);
    let body = json!({"type":"message","model":"m","content":content,"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2}});
    let turn = decode_body(&body.to_string()).unwrap();
    assert_eq!(turn.text(), "Searching.", "server blocks add no text");
    assert_eq!(turn.tool_calls().count(), 1, "server tool use is not a client call");
    let call_block = turn.tool_calls().next().unwrap();
    assert_eq!(call_block.provider_data, Some(json!({"anthropic": {"caller": {"type": "direct"}}})));

    let messages = [Message::user("q"), assistant(turn.content)];
    let encoded = call("m", &messages, &[], false);
    assert_eq!(encoded["messages"][1]["content"], content);
}

/// Each encoder reads only its own key: another provider's data never reaches this wire.
#[test]
fn other_providers_data_is_not_sent() {
    let blocks = vec![
        Block::Text {
            text: "hello".into(),
            provider_data: Some(
                json!({"gemini": {"block": {"type": "server_tool_use", "id": "x"}}, "openai": {"k": 1}}),
            ),
        },
        Block::ToolCall(ToolCall {
            id: "toolu_1".into(),
            name: "f".into(),
            input: json!({}),
            arguments: "{}".into(),
            provider_data: Some(json!({"gemini": {"thoughtSignature": "abc"}, "anthropic": {"toolset_name": "set"}})),
        }),
    ];
    let encoded = call("m", &[Message::user("q"), assistant(blocks)], &[], false);
    assert_eq!(
        encoded["messages"][1]["content"],
        json!([
            {"type":"text","text":"hello"},
            {"type":"tool_use","id":"toolu_1","name":"f","input":{},"toolset_name":"set"},
        ])
    );
}

// ------------------------------------------------- streamed == whole body

/// One content block in both forms.
enum B<'a> {
    Text(&'a str),
    Thinking(&'a str, &'a str),
    Redacted(&'a str),
    /// id, name, the raw input text.
    Tool(&'a str, &'a str, &'a str),
    /// A server tool (streams its input like a client tool).
    Server(&'a str, &'a str, &'a str),
    /// A block that arrives whole in `content_block_start`.
    Whole(Value),
}

/// The whole body, written as text so raw tool inputs keep their exact bytes.
fn body_of(blocks: &[B], stop: &str) -> String {
    let parts: Vec<String> = blocks
        .iter()
        .map(|b| match b {
            B::Text(t) => json!({"type":"text","text":t}).to_string(),
            B::Thinking(t, s) => json!({"type":"thinking","thinking":t,"signature":s}).to_string(),
            B::Redacted(d) => json!({"type":"redacted_thinking","data":d}).to_string(),
            B::Tool(id, name, raw) => {
                format!(r#"{{"type":"tool_use","id":{},"name":{},"input":{raw}}}"#, json!(id), json!(name))
            }
            B::Server(id, name, raw) => {
                format!(r#"{{"type":"server_tool_use","id":{},"name":{},"input":{raw}}}"#, json!(id), json!(name))
            }
            B::Whole(v) => v.to_string(),
        })
        .collect();
    format!(
        r#"{{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[{}],"stop_reason":"{stop}","stop_sequence":null,"usage":{{"input_tokens":10,"output_tokens":20}}}}"#,
        parts.join(",")
    )
}

fn pieces(text: &str, size: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(size.max(1)).map(|c| c.iter().collect()).collect()
}

/// The same message as a stream, each delta `size` characters long.
fn stream_of(blocks: &[B], stop: &str, size: usize) -> Vec<u8> {
    let mut events = vec![message_start()];
    for (i, b) in blocks.iter().enumerate() {
        let (start, deltas): (Value, Vec<Value>) = match b {
            B::Text(t) => (
                json!({"type":"text","text":""}),
                pieces(t, size).into_iter().map(|p| json!({"type":"text_delta","text":p})).collect(),
            ),
            B::Thinking(t, s) => {
                let mut d: Vec<Value> =
                    pieces(t, size).into_iter().map(|p| json!({"type":"thinking_delta","thinking":p})).collect();
                d.push(json!({"type":"signature_delta","signature":s}));
                (json!({"type":"thinking","thinking":"","signature":""}), d)
            }
            B::Redacted(d) => (json!({"type":"redacted_thinking","data":d}), vec![]),
            B::Tool(id, name, raw) | B::Server(id, name, raw) => {
                let kind = if matches!(b, B::Tool(..)) { "tool_use" } else { "server_tool_use" };
                // As the API does: an empty first piece, then the text; none at all for `{}`.
                let mut d = vec![json!({"type":"input_json_delta","partial_json":""})];
                if *raw != "{}" {
                    d.extend(
                        pieces(raw, size).into_iter().map(|p| json!({"type":"input_json_delta","partial_json":p})),
                    );
                }
                (json!({"type":kind,"id":id,"name":name,"input":{}}), d)
            }
            B::Whole(v) => (v.clone(), vec![]),
        };
        events.push(json!({"type":"content_block_start","index":i,"content_block":start}));
        events.push(json!({"type":"ping"}));
        for delta in deltas {
            events.push(json!({"type":"content_block_delta","index":i,"delta":delta}));
        }
        events.push(json!({"type":"content_block_stop","index":i}));
    }
    events.extend(message_end(stop));
    sse(&events)
}

fn assert_stream_equals_body(blocks: &[B], stop: &str) {
    let whole = decode_body(&body_of(blocks, stop)).expect("body decodes");
    for size in [1, 3, 7, 10_000] {
        let streamed = decode_stream(&stream_of(blocks, stop, size)).expect("stream decodes");
        assert_eq!(streamed, whole, "delta size {size}");
    }
}

#[test]
fn streams_equal_whole_bodies() {
    assert_stream_equals_body(&[B::Text("Hello, wörld! ☃")], "end_turn");
    assert_stream_equals_body(
        &[
            B::Thinking("Let me think about \"this\".\n", "EqQBCkYIBxgC"),
            B::Redacted("EmwKAhgBEgy3"),
            B::Text("I'll call both."),
            B::Tool("toolu_a", "get_weather", r#"{"city": "Paris", "days": [1, 2]}"#),
            B::Tool("toolu_b", "get_weather", r#"{"city":"Rome"}"#),
            B::Tool("toolu_c", "list", "{}"),
        ],
        "tool_use",
    );
    assert_stream_equals_body(
        &[
            B::Server("srvtoolu_1", "web_search", r#"{"query": "nexus"}"#),
            B::Whole(json!({"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]})),
            B::Text("Found it."),
        ],
        "end_turn",
    );
    assert_stream_equals_body(&[], "refusal");
}

// ------------------------------------------------------------ stop reasons

/// Every `stop_reason` the API documents, and what the loop must make of it.
#[test]
fn every_documented_stop_reason_is_mapped() {
    let table = [
        ("end_turn", StopReason::EndTurn),
        ("tool_use", StopReason::ToolUse),
        ("max_tokens", StopReason::MaxTokens),
        ("stop_sequence", StopReason::StopSequence),
        ("pause_turn", StopReason::PauseTurn),
        ("refusal", StopReason::Refusal),
        // The context window filled while writing: output cut by a token limit.
        ("model_context_window_exceeded", StopReason::MaxTokens),
        ("some_future_reason", StopReason::Other),
    ];
    for (raw, want) in table {
        let whole = decode_body(&body_of(&[B::Text("x")], raw)).unwrap();
        assert_eq!((whole.stop.reason, whole.stop.raw.as_deref()), (want, Some(raw)), "body {raw}");
        let streamed = decode_stream(&stream_of(&[B::Text("x")], raw, 5)).unwrap();
        assert_eq!(streamed.stop, whole.stop, "stream {raw}");
    }
    let none = decode_body(r#"{"type":"message","content":[],"stop_reason":null}"#).unwrap();
    assert_eq!((none.stop.reason, none.stop.raw), (StopReason::Other, None));
}

// ----------------------------------------------------------------- usage

/// `message_delta` usage is cumulative: the newest value of each count wins,
/// and counts are never added across `message_start` and `message_delta`.
#[test]
fn stream_usage_is_counted_once_newest_wins() {
    let events = [
        json!({"type":"message_start","message":{"model":"m","content":[],"usage":{"input_tokens":92,"output_tokens":88}}}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":189}}),
        json!({"type":"message_stop"}),
    ];
    let turn = decode_stream(&sse(&events)).unwrap();
    assert!(turn.usage_reported);
    assert_eq!((turn.usage.prompt_tokens, turn.usage.completion_tokens, turn.usage.total_tokens), (92, 189, 281));

    let events = [
        json!({"type":"message_start","message":{"model":"m","content":[],"usage":{"input_tokens":43,"output_tokens":1}}}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":61,"output_tokens":2}}),
        json!({"type":"message_stop"}),
    ];
    let turn = decode_stream(&sse(&events)).unwrap();
    assert_eq!((turn.usage.prompt_tokens, turn.usage.completion_tokens), (61, 2));

    let events = [json!({"type":"message_start","message":{"content":[]}}), json!({"type":"message_stop"})];
    let turn = decode_stream(&sse(&events)).unwrap();
    assert!(!turn.usage_reported);
    let body = decode_body(r#"{"type":"message","content":[],"stop_reason":"end_turn"}"#).unwrap();
    assert!(!body.usage_reported);
}

// ------------------------------------------------------------------ errors

/// The error body of the Messages API: `{"type":"error","error":{"type","message"}}`.
#[test]
fn error_bodies_keep_type_message_status_and_body() {
    let body = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}"#;
    let err = STYLE.decode_error(Some(529), Some("3"), body);
    assert_eq!(err.status, Some(529));
    assert_eq!(err.kind, "overloaded_error");
    assert_eq!(err.message, "Overloaded");
    assert_eq!(err.body, String::from_utf8_lossy(body));
    assert!(err.retryable);
    assert_eq!(err.retry_after_ms, Some(3000));

    let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.tool_result: content cannot be empty if `is_error` is true"}}"#;
    let err = STYLE.decode_error(Some(400), None, body);
    assert_eq!((err.kind.as_str(), err.retryable), ("invalid_request_error", false));
    assert!(err.message.starts_with("messages.1.content.0.tool_result"));

    // Gateway shapes in front of the API.
    assert_eq!(
        anthropic::error_details(br#"{"error":"upstream timed out"}"#),
        Some(("error".into(), "upstream timed out".into()))
    );
    assert_eq!(
        anthropic::error_details(br#"{"error":{"code":"rate_limited","message":"slow down"}}"#),
        Some(("rate_limited".into(), "slow down".into()))
    );
    assert_eq!(anthropic::error_details(b"<html>502</html>"), None);
}

/// Some servers send an error body with status 200: it is the provider's
/// error, not a message and not a decode failure.
#[test]
fn error_body_with_success_status_is_a_provider_error() {
    for body in [
        r#"{"type":"error","error":{"type":"api_error","message":"Internal server error"}}"#,
        r#"{"error":{"type":"api_error","message":"Internal server error"}}"#,
        r#"[{"error":{"type":"api_error","message":"Internal server error"}}]"#,
    ] {
        match decode_body(body) {
            Err(RemoteError::Provider(p)) => {
                assert_eq!(
                    (p.status, p.kind.as_str(), p.message.as_str()),
                    (None, "api_error", "Internal server error")
                );
                assert!(p.retryable, "api_error is transient");
                assert_eq!(p.body, body);
            }
            other => panic!("{body}: {other:?}"),
        }
    }
}

/// An `error` event mid-stream ends the stream with the provider's error:
/// no status, the type and message kept, retryable by type.
#[test]
fn in_stream_error_is_a_provider_error() {
    let error = json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}});
    let events: Vec<SseEvent> = [
        message_start(),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}),
        error.clone(),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lo"}}),
    ]
    .into_iter()
    .map(data_event)
    .collect();
    let Ran { deltas, pushes, finished, emitted } = run_events(&events);
    let want = ProviderError {
        status: None,
        kind: "overloaded_error".into(),
        message: "Overloaded".into(),
        body: error.to_string(),
        retryable: true,
        retry_after_ms: None,
    };
    assert_eq!(pushes[3], Err(RemoteError::Provider(want.clone())));
    assert_eq!(pushes[4], Ok(()), "events after the failure are ignored");
    assert_eq!(finished, Err(RemoteError::Provider(want)));
    assert_eq!(deltas, [StreamEvent::TextDelta { text: "Hel".into() }]);
    assert!(emitted);

    // Before any delta, and a type that is not transient.
    let events = [data_event(json!({"type":"error","error":{"type":"invalid_request_error","message":"bad"}}))];
    let Ran { deltas, pushes, emitted, .. } = run_events(&events);
    assert!(deltas.is_empty() && !emitted);
    match &pushes[0] {
        Err(RemoteError::Provider(p)) => assert_eq!((p.kind.as_str(), p.retryable), ("invalid_request_error", false)),
        other => panic!("{other:?}"),
    }
    // The `event: error` line alone is enough, whatever the data says.
    let events = [SseEvent { event: Some("error".into()), data: "upstream reset".into(), id: None }];
    let Ran { pushes, .. } = run_events(&events);
    assert!(matches!(&pushes[0], Err(RemoteError::Provider(p)) if p.body == "upstream reset"));
}

/// A stream that stops at any event boundary before `message_stop` is
/// truncated, whatever it carried; cut anywhere else it is a decode error.
#[test]
fn streams_without_their_end_marker_are_truncated() {
    let path = common::shared_dir().join("wire-corpus/anthropic/sdk_tool_use_stream.sse");
    let bytes = std::fs::read(&path).unwrap();
    let end = String::from_utf8_lossy(&bytes).find("event: message_stop").unwrap();
    let mut boundaries = 0;
    for cut in 0..end {
        let got = decode_stream(&bytes[..cut]);
        if bytes[..cut].ends_with(b"\n\n") {
            boundaries += 1;
            assert!(matches!(got, Err(RemoteError::Decode(DecodeError::Truncated(_)))), "cut at {cut}: {got:?}");
        } else {
            assert!(matches!(got, Err(RemoteError::Decode(_))), "cut at {cut}: {got:?}");
        }
    }
    assert!(boundaries > 10);
    assert!(decode_stream(&bytes).is_ok());
}

/// After `message_stop` nothing changes the turn, not even an error event.
#[test]
fn events_after_the_end_marker_are_ignored() {
    let mut events = vec![
        message_start(),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"done"}}),
        json!({"type":"content_block_stop","index":0}),
    ];
    events.extend(message_end("end_turn"));
    let before = decode_stream(&sse(&events)).unwrap();
    events.push(json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" and more"}}));
    events.push(json!({"type":"error","error":{"type":"api_error","message":"late"}}));
    events.push(json!({"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":99}}));
    let after = decode_stream(&sse(&events)).unwrap();
    assert_eq!(after, before);
    assert_eq!(after.text(), "done");
}

// --------------------------------------------------------- malformed input

fn decode_error_kind(r: Result<TurnResponse, RemoteError>) -> &'static str {
    match r {
        Err(RemoteError::Decode(DecodeError::Json(_))) => "json",
        Err(RemoteError::Decode(DecodeError::Shape(_))) => "shape",
        Err(RemoteError::Decode(DecodeError::Truncated(_))) => "truncated",
        other => panic!("expected a decode error, got {other:?}"),
    }
}

#[test]
fn malformed_bodies_are_typed_errors() {
    let cases = [
        ("", "json"),
        ("{", "json"),
        ("not json", "json"),
        (r#"{"content":[]} trailing"#, "json"),
        ("[]", "shape"),
        (r#""message""#, "shape"),
        ("{}", "shape"),
        (r#"{"content":5}"#, "shape"),
        (r#"{"content":[5]}"#, "shape"),
        (r#"{"content":[{"text":"no type"}]}"#, "shape"),
        (r#"{"content":[{"type":"text","text":5}]}"#, "shape"),
        (r#"{"content":[{"type":"tool_use","id":"t","name":"f","input":{}}],"usage":{"input_tokens":-1}}"#, "shape"),
        (r#"{"content":[],"model":7}"#, "shape"),
        // serde would read these by position; neither is an object.
        (r#"["message", null, "m", [], "end_turn"]"#, "shape"),
        (r#"{"content":[["text", "hi"]]}"#, "shape"),
    ];
    for (body, want) in cases {
        assert_eq!(decode_error_kind(decode_body(body)), want, "{body}");
    }
    assert_eq!(decode_error_kind(STYLE.decode_response(b"{\"content\":[\xff]}", &mut CallIds::new("c"))), "json");
    // An unknown block type may use known field names with other types: kept, not an error.
    let turn =
        decode_body(r#"{"content":[{"type":"future_block","text":{"rich":true}}],"stop_reason":"end_turn"}"#).unwrap();
    assert_eq!(turn.content.len(), 1);
    assert_eq!(turn.text(), "");
}

#[test]
fn malformed_stream_events_are_typed_errors() {
    let start = message_start();
    let cases = [
        (vec![start.clone()], r#"{"type":"content_block_delta""#, "json"),
        (vec![start.clone()], "[]", "shape"),
        // The oracle's own bad stream: an index that is a string.
        (
            vec![start.clone()],
            r#"{"type":"content_block_start","index":"0","content_block":{"type":"text","text":""}}"#,
            "shape",
        ),
        (vec![start.clone()], r#"{"type":"content_block_start","index":0}"#, "shape"),
        (
            vec![start.clone()],
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}"#,
            "shape",
        ),
        (vec![start.clone()], r#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"x"}}"#, "shape"),
        (
            vec![
                start.clone(),
                json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            ],
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
            "shape",
        ),
        (
            vec![
                start.clone(),
                json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            ],
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":7}}"#,
            "shape",
        ),
        (vec![start.clone()], r#"{"type":"message_delta","delta":{"stop_reason":1}}"#, "shape"),
    ];
    for (before, bad, want) in cases {
        let mut events: Vec<SseEvent> = before.into_iter().map(data_event).collect();
        events.push(SseEvent { event: None, data: bad.into(), id: None });
        events.push(data_event(json!({"type":"message_stop"})));
        let Ran { pushes, finished, .. } = run_events(&events);
        let failed = pushes.iter().find_map(|p| p.clone().err()).unwrap_or_else(|| panic!("{bad}: no error"));
        assert_eq!(decode_error_kind(Err(failed.clone())), want, "{bad}");
        assert_eq!(finished, Err(failed), "finish repeats the failure");
    }
    // Unknown delta types (citations) and event types are skipped, not errors.
    let events: Vec<SseEvent> = [
        start,
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":"","citations":[]}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{"type":"char_location","text":1}}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}),
        json!({"type":"brand_new_event","text":[]}),
        json!({"type":"message_stop"}),
    ]
    .into_iter()
    .map(data_event)
    .collect();
    let Ran { pushes, finished, .. } = run_events(&events);
    assert!(pushes.iter().all(Result::is_ok), "{pushes:?}");
    assert_eq!(finished.unwrap().text(), "ok");
}

/// Feeds arbitrary bytes through the SSE decoder into the assembler.
fn stream_bytes(bytes: &[u8], split: usize) -> Result<TurnResponse, RemoteError> {
    let split = split.min(bytes.len());
    decode_stream_chunks(STYLE, [&bytes[..split], &bytes[split..]], &mut CallIds::new("c"))
}

fn corpus_streams() -> Vec<Vec<u8>> {
    common::captures(STYLE).into_iter().filter(|(_, s)| *s).map(|(p, _)| std::fs::read(p).unwrap()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_the_body_decoder(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = STYLE.decode_response(&bytes, &mut CallIds::new("c"));
    }

    #[test]
    fn arbitrary_json_never_panics_the_body_decoder(body in json_text()) {
        let _ = decode_body(&body);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_stream(bytes in prop::collection::vec(any::<u8>(), 0..512), split in any::<usize>()) {
        let _ = stream_bytes(&bytes, split);
    }

    /// Real streams with bytes changed: still never a panic, and an error is
    /// always a typed one (the result type admits nothing else).
    #[test]
    fn corrupted_corpus_streams_never_panic(pick in any::<prop::sample::Index>(), edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8), split in any::<usize>()) {
        let streams = corpus_streams();
        let mut bytes = streams[pick.index(streams.len())].clone();
        for (at, byte) in edits {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        let _ = stream_bytes(&bytes, split);
    }
}

/// JSON-ish text built from the format's own vocabulary, so the decoder's
/// deeper paths are reached more often than with raw bytes.
fn json_text() -> impl Strategy<Value = String> {
    let atoms = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"type\"",
        "\"content\"",
        "\"text\"",
        "\"tool_use\"",
        "\"input\"",
        "\"id\"",
        "\"name\"",
        "\"thinking\"",
        "\"signature\"",
        "\"redacted_thinking\"",
        "\"data\"",
        "\"usage\"",
        "\"input_tokens\"",
        "\"error\"",
        "\"stop_reason\"",
        "\"end_turn\"",
        "null",
        "1",
        "-1",
        "\"x\"",
        "{}",
        "[]",
        "true",
    ]);
    prop::collection::vec(atoms, 0..40).prop_map(|parts| parts.concat())
}

// ------------------------------------------------------------------ oracle

fn oracle_python() -> Option<PathBuf> {
    let py = std::env::var("NEXUS_ORACLE_PY").unwrap_or_else(|_| "/tmp/oracle-venv/bin/python".into());
    let py = PathBuf::from(py);
    py.exists().then_some(py)
}

/// Bodies the encoder produces are valid `MessageCreateParams` for the
/// official SDK (strict types, no unknown keys at any depth) and follow the
/// conversation rules the API enforces (tool_result answers, first in its turn).
#[test]
fn encoded_requests_pass_the_sdk_oracle() {
    let Some(py) = oracle_python() else {
        println!("skipped: oracle interpreter not found (set NEXUS_ORACLE_PY)");
        return;
    };
    let script = common::shared_dir().join("oracles").join("validate_request.py");
    let dir = std::env::temp_dir().join(format!("nexus-anthropic-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let (round, tools) = (sample_transcript(), sample_tools());
    // A decoded turn with server blocks and a caller, echoed back.
    let decoded = decode_body(
        &json!({"type":"message","content":[
            {"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}},
            {"type":"text","text":"Let me check.","citations":null},
            {"type":"tool_use","id":"toolu_9","name":"get_weather","input":{"city":"Oslo"},"caller":{"type":"direct"}},
        ],"stop_reason":"tool_use"})
        .to_string(),
    )
    .unwrap();
    let echoed = [
        Message::user("Search, then weather."),
        assistant(decoded.content),
        user(vec![result("toolu_9", "get_weather", "-2C", false)]),
    ];

    let bodies = [
        ("plain_stream", call("claude-sonnet-4-5", &[Message::user("Hello")], &[], true)),
        ("tool_round", call("claude-sonnet-4-5", &round, &tools, false)),
        ("tool_round_stream", call("claude-sonnet-4-5", &round, &tools, true)),
        ("server_blocks_echoed", call("claude-sonnet-4-5", &echoed, &tools, true)),
        (
            "system_and_cap",
            STYLE.encode_body(&ModelCall {
                model: "claude-haiku-4-5",
                system: Some("Be brief."),
                messages: &round,
                tools: &tools,
                max_tokens: Some(512),
                stream: false,
                params: &Map::new(),
                output: None,
            }),
        ),
    ];
    // The interpreter takes seconds to start: run the checks side by side.
    let running: Vec<_> = bodies
        .into_iter()
        .map(|(name, body)| {
            let file = dir.join(format!("{name}.json"));
            std::fs::write(&file, serde_json::to_vec_pretty(&body).unwrap()).unwrap();
            let child = Command::new(&py)
                .arg(&script)
                .arg("anthropic")
                .arg(&file)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("run the oracle");
            (name, body, child)
        })
        .collect();
    for (name, body, child) in running {
        let out = child.wait_with_output().expect("oracle output");
        assert!(
            out.status.success(),
            "{name}: oracle rejected the body (exit {:?})\nstdout: {}\nstderr: {}\nbody: {body:#}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The oracle does reject what the API rejects (so a pass above means something).
#[test]
fn the_oracle_rejects_a_misordered_tool_result_turn() {
    let Some(py) = oracle_python() else {
        println!("skipped: oracle interpreter not found (set NEXUS_ORACLE_PY)");
        return;
    };
    let script = common::shared_dir().join("oracles").join("validate_request.py");
    let mut body = call(
        "claude-sonnet-4-5",
        &[
            Message::user("q"),
            assistant(vec![tool_call("toolu_1", "f", "{}")]),
            user(vec![Block::text("x"), result("toolu_1", "f", "ok", false)]),
        ],
        &[ToolDecl::new("f", "", Value::Null)],
        false,
    );
    // Undo the encoder's reordering: text first, as a naive encoder would send it.
    let content = body["messages"][2]["content"].as_array_mut().unwrap();
    content.reverse();
    let file = std::env::temp_dir().join(format!("nexus-anthropic-misordered-{}.json", std::process::id()));
    std::fs::write(&file, body.to_string()).unwrap();
    let out = Command::new(&py).arg(&script).arg("anthropic").arg(&file).output().expect("run the oracle");
    let _ = std::fs::remove_file(&file);
    assert_eq!(out.status.code(), Some(1), "stdout: {}", String::from_utf8_lossy(&out.stdout));
}
