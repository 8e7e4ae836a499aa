//! The Anthropic codec against recorded provider traffic in the shared wire
//! corpus: every capture decodes to the oracle's expectation, chunking never
//! changes a streamed result, the deltas add up to the final turn, decoded
//! bodies encode back to the blocks they came from, and the encoder rebuilds
//! the recorded requests. The last section routes stream blocks in shapes the
//! recordings do not show (reused, omitted and repeated indexes).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use nexus_proto::provider::{decode_capture, decode_stream_chunks, ModelCall, Style, TurnResponse};
use nexus_proto::sse::SseDecoder;
use nexus_proto::{Block, CallIds, Message, Role, StreamEvent, ToolDecl, ToolResultBlock};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const STYLE: Style = Style::Anthropic;

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn corpus_file(name: &str) -> PathBuf {
    common::shared_dir().join("wire-corpus").join("anthropic").join(name)
}

/// The `.sse` captures with their bytes and one-chunk decode, loaded once.
fn streams() -> &'static Vec<(PathBuf, Vec<u8>, TurnResponse)> {
    static STREAMS: OnceLock<Vec<(PathBuf, Vec<u8>, TurnResponse)>> = OnceLock::new();
    STREAMS.get_or_init(|| {
        let out: Vec<_> = common::captures(STYLE)
            .into_iter()
            .filter(|(_, stream)| *stream)
            .map(|(path, _)| {
                let bytes = read(&path);
                let turn = decode_capture(STYLE, &bytes, true).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                (path, bytes, turn)
            })
            .collect();
        assert!(!out.is_empty(), "no anthropic stream captures");
        out
    })
}

/// Decodes `bytes` split at the given (sorted, in-range) cut points.
fn decode_cut(bytes: &[u8], cuts: &[usize]) -> TurnResponse {
    let mut chunks = Vec::with_capacity(cuts.len() + 1);
    let mut start = 0;
    for &cut in cuts {
        chunks.push(&bytes[start..cut]);
        start = cut;
    }
    chunks.push(&bytes[start..]);
    decode_stream_chunks(STYLE, chunks, &mut CallIds::new("call_")).expect("chunked decode")
}

#[test]
fn every_capture_decodes_to_its_expectation() {
    let captures = common::captures(STYLE);
    // Every expectation in the folder has its capture among those checked.
    let dir = common::shared_dir().join("wire-corpus").join("anthropic");
    let expectations = std::fs::read_dir(&dir)
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".expected.json"))
        .count();
    assert_eq!(captures.len(), expectations, "captures in {}", dir.display());
    for (path, stream) in captures {
        let got = common::summarize(STYLE, &read(&path), stream);
        common::assert_matches(&path, &got, &common::expected(&path));
    }
}

#[test]
fn every_stream_survives_a_split_at_every_byte() {
    for (path, bytes, whole) in streams() {
        for cut in 0..=bytes.len() {
            let got = decode_cut(bytes, &[cut]);
            assert_eq!(&got, whole, "{} split at byte {cut}", path.display());
        }
    }
}

#[test]
fn every_stream_survives_one_byte_at_a_time() {
    for (path, bytes, whole) in streams() {
        let got = decode_stream_chunks(STYLE, bytes.chunks(1), &mut CallIds::new("call_")).expect("byte-wise decode");
        assert_eq!(&got, whole, "{} fed one byte at a time", path.display());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_stream_survives_random_chunking(pick in any::<prop::sample::Index>(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..40)) {
        let (path, bytes, whole) = &streams()[pick.index(streams().len())];
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let got = decode_cut(bytes, &cuts);
        prop_assert_eq!(&got, whole, "{} cut at {:?}", path.display(), cuts);
    }
}

/// Drives the SSE decoder and the assembler by hand to see the deltas.
fn deltas_of(bytes: &[u8]) -> (Vec<StreamEvent>, TurnResponse) {
    let mut sse = SseDecoder::new();
    let mut asm = STYLE.assembler();
    let mut ids = CallIds::new("call_");
    let (mut events, mut deltas) = (Vec::new(), Vec::new());
    sse.feed(bytes, &mut events);
    sse.finish(&mut events);
    for ev in &events {
        asm.push(ev, &mut ids, &mut deltas).expect("push");
    }
    assert_eq!(asm.emitted_anything(), !deltas.is_empty());
    (deltas, asm.finish().expect("finish"))
}

/// What a host sees while streaming adds up to what the turn holds: text and
/// reasoning deltas concatenate to the blocks, each call is announced once
/// (before its arguments) and its argument pieces concatenate to its raw
/// arguments exactly. No event the machine emits itself appears.
#[test]
fn stream_deltas_add_up_to_the_turn() {
    for (path, bytes, whole) in streams() {
        let (deltas, turn) = deltas_of(bytes);
        assert_eq!(&turn, whole, "{}", path.display());
        let (mut text, mut reasoning) = (String::new(), String::new());
        let mut started: Vec<(String, String)> = Vec::new();
        let mut args: BTreeMap<String, String> = BTreeMap::new();
        for d in &deltas {
            match d {
                StreamEvent::TextDelta { text: t } => text.push_str(t),
                StreamEvent::ReasoningDelta { text: t } => reasoning.push_str(t),
                StreamEvent::ToolCallStarted { id, name } => {
                    assert!(!started.iter().any(|(i, _)| i == id), "{}: {id} announced twice", path.display());
                    started.push((id.clone(), name.clone()));
                }
                StreamEvent::ToolCallDelta { id, arguments } => {
                    assert!(started.iter().any(|(i, _)| i == id), "{}: delta before start for {id}", path.display());
                    args.entry(id.clone()).or_default().push_str(arguments);
                }
                other => panic!("{}: the assembler must not emit {other:?}", path.display()),
            }
        }
        assert_eq!(text, turn.text(), "{}", path.display());
        let want_reasoning: String = turn
            .content
            .iter()
            .filter_map(|b| match b {
                Block::Reasoning { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reasoning, want_reasoning, "{}", path.display());
        let calls: Vec<_> = turn.tool_calls().collect();
        assert_eq!(
            started,
            calls.iter().map(|c| (c.id.clone(), c.name.clone())).collect::<Vec<_>>(),
            "{}",
            path.display()
        );
        for call in calls {
            assert_eq!(args.get(&call.id).map(String::as_str), Some(call.arguments.as_str()), "{}", path.display());
        }
    }
}

/// The tool-use streams carry the arguments as the concatenation of their
/// `input_json_delta` pieces; read straight from the capture here.
#[test]
fn streamed_arguments_are_the_exact_concatenated_pieces() {
    for (path, bytes, turn) in streams() {
        let text = String::from_utf8_lossy(bytes);
        let mut pieces: BTreeMap<u64, String> = BTreeMap::new();
        let mut tool_index: BTreeMap<u64, String> = BTreeMap::new();
        for line in text.lines() {
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            let v: Value = serde_json::from_str(data).unwrap();
            let index = v["index"].as_u64();
            if v["type"] == "content_block_start" && v["content_block"]["type"] == "tool_use" {
                tool_index.insert(index.unwrap(), v["content_block"]["id"].as_str().unwrap().to_string());
            }
            if v["delta"]["type"] == "input_json_delta" {
                pieces.entry(index.unwrap()).or_default().push_str(v["delta"]["partial_json"].as_str().unwrap());
            }
        }
        for (index, id) in tool_index {
            let call = turn.tool_calls().find(|c| c.id == id).expect("call decoded");
            let raw = pieces.get(&index).cloned().unwrap_or_default();
            // No piece at all: the start event's `{}` stands for the arguments.
            let want = if raw.is_empty() { "{}".to_string() } else { raw };
            assert_eq!(call.arguments, want, "{}: {id}", path.display());
        }
    }
}

/// The output cap cut this call's JSON short: the decode still succeeds, the
/// raw text is kept as sent, and the input is the recoverable prefix (the
/// oracle's expectation is the SDK's partial-mode parse).
#[test]
fn arguments_cut_by_max_tokens_keep_raw_text_and_partial_input() {
    let path = corpus_file("sdk_max_tokens_in_tool_json_stream.sse");
    let turn = decode_capture(STYLE, &read(&path), true).unwrap();
    let call = turn.tool_calls().next().unwrap();
    assert!(serde_json::from_str::<Value>(&call.arguments).is_err());
    assert!(call.arguments.ends_with("\n\"Filing taxes"), "raw arguments kept: {:?}", call.arguments);
    assert_eq!(call.input, common::expected(&path)["tool_calls"][0]["input"]);
    assert_eq!(turn.stop.reason, nexus_proto::StopReason::MaxTokens);
}

/// For every whole body: the non-streamed tool arguments are the exact bytes of `input`.
#[test]
fn body_arguments_are_the_exact_input_bytes() {
    let path = corpus_file("pai_parallel_tool_calls_4.json");
    let turn = decode_capture(STYLE, &read(&path), false).unwrap();
    let args: Vec<&str> = turn.tool_calls().map(|c| c.arguments.as_str()).collect();
    assert_eq!(args, [r#"{"name":"Alice"}"#, r#"{"name":"Bob"}"#, r#"{"name":"Charlie"}"#, r#"{"name":"Daisy"}"#]);
    let path = corpus_file("vai_tool_no_args.json");
    let turn = decode_capture(STYLE, &read(&path), false).unwrap();
    assert_eq!(turn.tool_calls().next().unwrap().arguments, "{}");
}

fn encode(
    messages: &[Message],
    tools: &[ToolDecl],
    system: Option<&str>,
    stream: bool,
    params: &Map<String, Value>,
    model: &str,
) -> Value {
    STYLE.encode_body(&ModelCall { model, system, messages, tools, max_tokens: None, stream, params, output: None })
}

/// Every whole body decodes to blocks that encode back to its own `content`
/// (what a follow-up request must echo), key for key.
#[test]
fn decoded_bodies_encode_back_to_their_content() {
    for (path, stream) in common::captures(STYLE) {
        if stream {
            continue;
        }
        let bytes = read(&path);
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        let turn = decode_capture(STYLE, &bytes, false).unwrap();
        let messages = [Message::user("q"), Message { role: Role::Assistant, content: turn.content }];
        let encoded = encode(&messages, &[], None, false, &Map::new(), "m");
        let want = &body["content"];
        let got = encoded["messages"].get(1).map_or(json!([]), |m| m["content"].clone());
        if want.as_array().is_some_and(Vec::is_empty) {
            // Nothing to echo: the empty assistant turn is left out.
            assert_eq!(encoded["messages"].as_array().unwrap().len(), 1, "{}", path.display());
        } else {
            assert_eq!(&got, want, "{}", path.display());
        }
    }
}

/// Drops the keys a recorded request sets to their documented defaults
/// (`stream: false`, `is_error: false`), which the encoder leaves out.
fn without_defaults(mut v: Value) -> Value {
    if let Some(obj) = v.as_object_mut() {
        if obj.get("stream") == Some(&Value::Bool(false)) {
            obj.remove("stream");
        }
        if obj.get("type").and_then(Value::as_str) == Some("tool_result")
            && obj.get("is_error") == Some(&Value::Bool(false))
        {
            obj.remove("is_error");
        }
        for value in obj.values_mut() {
            *value = without_defaults(value.take());
        }
    } else if let Some(items) = v.as_array_mut() {
        for item in items {
            *item = without_defaults(item.take());
        }
    }
    v
}

fn request(name: &str) -> Value {
    let path = corpus_file(&format!("requests/{name}.json"));
    let want = std::fs::read_to_string(path.with_extension("expected.txt")).unwrap();
    assert_eq!(want.trim(), "valid", "{name} is a request the API accepted");
    serde_json::from_slice(&read(&path)).unwrap()
}

/// Caller params as the recorded request set them (the keys the transcript does not own).
fn params_of(recorded: &Value, keys: &[&str]) -> Map<String, Value> {
    keys.iter().filter_map(|k| recorded.get(*k).map(|v| (k.to_string(), v.clone()))).collect()
}

fn decoded_turn(name: &str) -> Message {
    let turn = decode_capture(STYLE, &read(&corpus_file(name)), false).unwrap();
    Message { role: Role::Assistant, content: turn.content }
}

fn text_of(recorded: &Value, message: usize) -> String {
    recorded["messages"][message]["content"][0]["text"].as_str().unwrap().to_string()
}

#[test]
fn encoder_rebuilds_the_recorded_streaming_thinking_request() {
    let recorded = request("pai_test_anthropic_test_anthropic_model_thinking_part_stream_0");
    let messages = [Message::user(text_of(&recorded, 0))];
    let params = params_of(&recorded, &["thinking"]);
    let got = encode(&messages, &[], None, true, &params, recorded["model"].as_str().unwrap());
    assert_eq!(got, without_defaults(recorded));
}

#[test]
fn encoder_rebuilds_the_recorded_thinking_tool_round() {
    let recorded = request("pai_test_anthropic_test_anthropic_tool_with_thinking_1");
    let assistant = decoded_turn("pai_tool_with_thinking.json");
    let call = assistant.tool_calls().next().unwrap().clone();
    let messages = [
        Message::user(text_of(&recorded, 0)),
        assistant,
        Message {
            role: Role::User,
            content: vec![Block::ToolResult(ToolResultBlock {
                call_id: call.id,
                name: call.name,
                output: "Mexico".into(),
                is_error: false,
            })],
        },
    ];
    let decl = &recorded["tools"][0];
    let tools = [ToolDecl::new(decl["name"].as_str().unwrap(), "", decl["input_schema"].clone())];
    let params = params_of(&recorded, &["thinking", "tool_choice"]);
    let got = encode(&messages, &tools, None, false, &params, recorded["model"].as_str().unwrap());
    assert_eq!(got, without_defaults(recorded));
}

#[test]
fn encoder_rebuilds_the_recorded_parallel_tool_results() {
    let recorded = request("pai_test_anthropic_test_multiple_parallel_tool_calls_1");
    let assistant = decoded_turn("pai_parallel_tool_calls_4.json");
    let outputs = [
        "alice is bob's wife",
        "bob is alice's husband",
        "charlie is alice's son",
        "daisy is bob's daughter and charlie's younger sister",
    ];
    let results = assistant
        .tool_calls()
        .zip(outputs)
        .map(|(call, output)| {
            Block::ToolResult(ToolResultBlock {
                call_id: call.id.clone(),
                name: call.name.clone(),
                output: output.into(),
                is_error: false,
            })
        })
        .collect();
    let messages = [Message::user(text_of(&recorded, 0)), assistant, Message { role: Role::User, content: results }];
    let decl = &recorded["tools"][0];
    let tools = [ToolDecl::new(
        decl["name"].as_str().unwrap(),
        decl["description"].as_str().unwrap(),
        decl["input_schema"].clone(),
    )];
    let params = params_of(&recorded, &["tool_choice"]);
    let system = recorded["system"].as_str();
    let got = encode(&messages, &tools, system, false, &params, recorded["model"].as_str().unwrap());
    assert_eq!(got, without_defaults(recorded));
}

// ---------------------------------------------------------------------------
// Block routing beyond what the recordings show: the shapes proxies and
// compatible servers produce (reused, omitted and repeated indexes,
// interleaved parallel calls, calls without arguments, broken arguments).

fn message_start() -> Value {
    json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"usage":{"input_tokens":10,"output_tokens":1}}})
}

fn message_end(stop: &str) -> [Value; 2] {
    [
        json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":{"output_tokens":20}}),
        json!({"type":"message_stop"}),
    ]
}

/// SSE framing as the API sends it: `event: <type>` then `data: <json>`.
fn sse(events: &[Value]) -> Vec<u8> {
    let mut out = String::new();
    for ev in events {
        out.push_str(&format!("event: {}\ndata: {}\n\n", ev["type"].as_str().unwrap_or("message"), ev));
    }
    out.into_bytes()
}

fn decode_stream(bytes: &[u8]) -> Result<TurnResponse, nexus_proto::RemoteError> {
    decode_stream_chunks(STYLE, std::iter::once(bytes), &mut CallIds::new("call_"))
}

fn tool_start(index: Option<u64>, id: &str, name: &str) -> Value {
    let mut v =
        json!({"type":"content_block_start","content_block":{"type":"tool_use","id":id,"name":name,"input":{}}});
    if let Some(i) = index {
        v["index"] = json!(i);
    }
    v
}

fn args_delta(index: Option<u64>, piece: &str) -> Value {
    let mut v = json!({"type":"content_block_delta","delta":{"type":"input_json_delta","partial_json":piece}});
    if let Some(i) = index {
        v["index"] = json!(i);
    }
    v
}

fn stop_block(index: u64) -> Value {
    json!({"type":"content_block_stop","index":index})
}

fn calls_of(events: Vec<Value>) -> Vec<(String, String, String)> {
    let mut all = vec![message_start()];
    all.extend(events);
    all.extend(message_end("tool_use"));
    let turn = decode_stream(&sse(&all)).expect("decodes");
    turn.tool_calls().map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone())).collect()
}

fn triple(id: &str, name: &str, args: &str) -> (String, String, String) {
    (id.into(), name.into(), args.into())
}

/// Same-name parallel calls whose pieces interleave stay apart.
#[test]
fn interleaved_parallel_calls_stay_apart() {
    let got = calls_of(vec![
        tool_start(Some(0), "toolu_a", "get_weather"),
        tool_start(Some(1), "toolu_b", "get_weather"),
        args_delta(Some(0), ""),
        args_delta(Some(1), r#"{"city":"#),
        args_delta(Some(0), r#"{"city":"#),
        args_delta(Some(1), r#""Rome"}"#),
        args_delta(Some(0), r#""Paris"}"#),
        stop_block(1),
        stop_block(0),
    ]);
    assert_eq!(
        got,
        [
            triple("toolu_a", "get_weather", r#"{"city":"Paris"}"#),
            triple("toolu_b", "get_weather", r#"{"city":"Rome"}"#)
        ]
    );
}

/// A reused index starts a new block: the second call's pieces never join the first's.
#[test]
fn a_reused_index_starts_a_new_call() {
    let got = calls_of(vec![
        tool_start(Some(0), "toolu_a", "f"),
        args_delta(Some(0), r#"{"n":1}"#),
        stop_block(0),
        tool_start(Some(0), "toolu_b", "f"),
        args_delta(Some(0), r#"{"n":2}"#),
        stop_block(0),
    ]);
    assert_eq!(got, [triple("toolu_a", "f", r#"{"n":1}"#), triple("toolu_b", "f", r#"{"n":2}"#)]);
}

/// Without indexes, pieces belong to the block that started last.
#[test]
fn omitted_indexes_route_to_the_latest_block() {
    let got = calls_of(vec![
        tool_start(None, "toolu_a", "f"),
        args_delta(None, r#"{"n":"#),
        args_delta(None, "1}"),
        tool_start(None, "toolu_b", "g"),
        args_delta(None, r#"{"m":2}"#),
    ]);
    assert_eq!(got, [triple("toolu_a", "f", r#"{"n":1}"#), triple("toolu_b", "g", r#"{"m":2}"#)]);
}

/// A repeated start for a known call id continues that call: announced once, not duplicated.
#[test]
fn a_repeated_start_continues_the_same_call() {
    let mut events: Vec<Value> = vec![
        message_start(),
        tool_start(Some(0), "toolu_a", "f"),
        args_delta(Some(0), r#"{"n""#),
        tool_start(Some(0), "toolu_a", "f"),
        args_delta(Some(0), ":1}"),
        stop_block(0),
    ];
    events.extend(message_end("tool_use"));
    let (deltas, turn) = deltas_of(&sse(&events));
    let calls: Vec<_> = turn.tool_calls().collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].arguments, r#"{"n":1}"#);
    let started = deltas.iter().filter(|d| matches!(d, StreamEvent::ToolCallStarted { .. })).count();
    assert_eq!(started, 1);
}

/// Empty pieces are no deltas; a call without any piece gets `{}` (the
/// whole-body form) as its one delta, so the deltas still add up.
#[test]
fn calls_without_arguments_get_the_empty_object() {
    let mut events =
        vec![message_start(), tool_start(Some(0), "toolu_a", "ping"), args_delta(Some(0), ""), stop_block(0)];
    events.extend(message_end("tool_use"));
    let (deltas, turn) = deltas_of(&sse(&events));
    assert_eq!(
        deltas,
        [
            StreamEvent::ToolCallStarted { id: "toolu_a".into(), name: "ping".into() },
            StreamEvent::ToolCallDelta { id: "toolu_a".into(), arguments: "{}".into() },
        ]
    );
    let call = turn.tool_calls().next().unwrap();
    assert_eq!((call.arguments.as_str(), &call.input), ("{}", &json!({})));
}

/// Arguments that are not JSON are kept as sent, with `input` the part
/// that can be recovered, or null; the decode itself succeeds.
#[test]
fn unparseable_arguments_do_not_fail_the_decode() {
    let got =
        calls_of(vec![tool_start(Some(0), "toolu_a", "f"), args_delta(Some(0), r#"{"a": 1, "b": "unterminated"#)]);
    assert_eq!(got[0].2, r#"{"a": 1, "b": "unterminated"#);
    let mut all =
        vec![message_start(), tool_start(Some(0), "toolu_a", "f"), args_delta(Some(0), r#"{"a": 1, "b": "cut"#)];
    all.extend(message_end("max_tokens"));
    let turn = decode_stream(&sse(&all)).unwrap();
    assert_eq!(turn.tool_calls().next().unwrap().input, json!({"a": 1}));

    let mut all = vec![message_start(), tool_start(Some(0), "toolu_a", "f"), args_delta(Some(0), "not json at all")];
    all.extend(message_end("tool_use"));
    let turn = decode_stream(&sse(&all)).unwrap();
    let call = turn.tool_calls().next().unwrap();
    assert_eq!((call.arguments.as_str(), &call.input), ("not json at all", &Value::Null));
}

/// A tool_use without an id gets a generated one, marked as such, the same
/// way in both forms.
#[test]
fn missing_call_ids_are_generated() {
    let body = r#"{"type":"message","content":[{"type":"tool_use","name":"f","input":{}}],"stop_reason":"tool_use"}"#;
    let whole = STYLE.decode_response(body.as_bytes(), &mut CallIds::new("call_")).unwrap();
    let call = whole.tool_calls().next().unwrap();
    assert_eq!(call.id, "call_0");
    assert_eq!(call.provider_data, Some(json!({"nexus": {"generatedId": true}})));
    let events = [
        json!({"type":"message_start","message":{"content":[]}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","name":"f","input":{}}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"tool_use"}}),
        json!({"type":"message_stop"}),
    ];
    assert_eq!(decode_stream(&sse(&events)).unwrap(), whole);
}
