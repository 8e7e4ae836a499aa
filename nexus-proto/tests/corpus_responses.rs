//! The OpenAI Responses wire corpus: every recorded response decodes to the
//! summary the official SDK produced for it, chunking never changes a
//! streamed turn, reasoning items keep the encrypted content of
//! `output_item.done`, a decoded turn replayed as the next request gives back
//! the items the API was sent in the recorded follow-up, and every body the
//! encoder writes passes the official SDK's `ResponseCreateParams`.

mod common;

use std::path::{Path, PathBuf};

use nexus_proto::provider::{decode_capture, decode_stream_chunks, ModelCall, Style};
use nexus_proto::{
    check_transcript, Block, CallIds, ImageSource, Message, Role, ToolCall, ToolDecl, ToolResultBlock, TurnResponse,
};
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const STYLE: Style = Style::OpenAiResponses;

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn corpus(name: &str) -> PathBuf {
    common::shared_dir().join("wire-corpus/openai-responses").join(name)
}

fn streams() -> Vec<(PathBuf, Vec<u8>)> {
    common::captures(STYLE).into_iter().filter(|(_, s)| *s).map(|(p, _)| (p.clone(), read(&p))).collect()
}

/// Streams that end in a turn (not in a provider error).
fn turn_streams() -> Vec<(PathBuf, Vec<u8>)> {
    streams().into_iter().filter(|(_, b)| decode_capture(STYLE, b, true).is_ok()).collect()
}

fn whole(path: &Path, bytes: &[u8]) -> TurnResponse {
    decode_capture(STYLE, bytes, true).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn chunked(bytes: &[u8], cuts: &[usize]) -> TurnResponse {
    let mut pieces = Vec::with_capacity(cuts.len() + 1);
    let mut at = 0;
    for &cut in cuts {
        pieces.push(&bytes[at..cut]);
        at = cut;
    }
    pieces.push(&bytes[at..]);
    decode_stream_chunks(STYLE, pieces, &mut CallIds::new("call_")).unwrap_or_else(|e| panic!("cuts {cuts:?}: {e}"))
}

#[test]
fn every_capture_matches_its_expectation() {
    let captures = common::captures(STYLE);
    assert!(captures.len() >= 16, "expected the whole openai-responses corpus, found {}", captures.len());
    for (path, stream) in captures {
        let got = common::summarize(STYLE, &read(&path), stream);
        common::assert_matches(&path, &got, &common::expected(&path));
    }
}

#[test]
fn errors_keep_the_provider_kind_message_and_body() {
    // The nested in-stream `error` event comes first and is the error.
    let bytes = read(&corpus("vai_error_event_then_failed_stream.sse"));
    let Err(nexus_proto::RemoteError::Provider(p)) = decode_capture(STYLE, &bytes, true) else { panic!("an error") };
    assert_eq!((p.status, p.kind.as_str(), p.retryable), (None, "insufficient_quota", false));
    assert!(p.body.starts_with(r#"{"type":"error","sequence_number":2,"error":{"#), "{}", p.body);
    // Without the error event, `response.failed` alone says it.
    let text = String::from_utf8(bytes).unwrap();
    let without: String =
        text.split("\n\n").filter(|e| !e.starts_with("event: error")).collect::<Vec<_>>().join("\n\n");
    let Err(nexus_proto::RemoteError::Provider(p)) = decode_capture(STYLE, without.as_bytes(), true) else { panic!() };
    assert_eq!(p.kind, "insufficient_quota");
    assert!(p.message.starts_with("You exceeded your current quota"), "{}", p.message);
    // The flat shape the SDK types describe.
    let flat = "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"boom\",\"param\":null,\"sequence_number\":1}\n\n";
    let Err(nexus_proto::RemoteError::Provider(p)) = decode_capture(STYLE, flat.as_bytes(), true) else { panic!() };
    assert_eq!((p.kind.as_str(), p.message.as_str(), p.retryable), ("server_error", "boom", true));
    // A whole `failed` response.
    let failed = json!({"id": "resp_1", "object": "response", "status": "failed", "output": [],
        "error": {"code": "server_error", "message": "went wrong"}});
    let Err(nexus_proto::RemoteError::Provider(p)) = decode_capture(STYLE, failed.to_string().as_bytes(), false) else {
        panic!()
    };
    assert_eq!((p.kind.as_str(), p.message.as_str()), ("server_error", "went wrong"));
}

#[test]
fn a_stream_without_its_terminal_event_is_truncated() {
    for (path, bytes) in turn_streams() {
        let text = String::from_utf8(bytes).unwrap();
        let cut = text.rfind("event: response.completed").unwrap_or_else(|| panic!("{}", path.display()));
        let err = decode_capture(STYLE, &text.as_bytes()[..cut], true).unwrap_err();
        assert!(
            matches!(err, nexus_proto::RemoteError::Decode(nexus_proto::DecodeError::Truncated(_))),
            "{}: {err}",
            path.display()
        );
    }
}

#[test]
fn incomplete_responses_map_to_their_stop() {
    for (reason, stop, raw) in [
        ("max_output_tokens", nexus_proto::StopReason::MaxTokens, "max_tokens"),
        ("content_filter", nexus_proto::StopReason::ContentFilter, "content_filter"),
    ] {
        let body = json!({"id": "resp_1", "object": "response", "status": "incomplete",
            "incomplete_details": {"reason": reason}, "output": [
                {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"},
                {"id": "msg_1", "type": "message", "role": "assistant", "status": "incomplete",
                 "content": [{"type": "output_text", "text": "cut", "annotations": []}]}],
            "usage": {"input_tokens": 3, "input_tokens_details": {"cached_tokens": 1},
                      "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 8}, "total_tokens": 12}});
        let turn = decode_capture(STYLE, body.to_string().as_bytes(), false).unwrap();
        assert_eq!((turn.stop.reason, turn.stop.raw.as_deref()), (stop, Some(raw)));
        let u = turn.usage;
        assert_eq!((u.prompt_tokens, u.completion_tokens, u.total_tokens), (3, 9, 12));
        assert_eq!((u.cached_tokens, u.reasoning_tokens), (1, 8), "the parts of the counts");
        assert_eq!(turn.text(), "cut");
    }
}

#[test]
fn unknown_items_and_events_are_ignored() {
    let body = json!({"id": "resp_1", "object": "response", "status": "completed", "output": [
        {"id": "ws_1", "type": "web_search_call", "status": "completed"},
        {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "hi", "annotations": []}, {"type": "new_part_kind"}]}]});
    let turn = decode_capture(STYLE, body.to_string().as_bytes(), false).unwrap();
    assert_eq!((turn.text().as_str(), turn.content.len()), ("hi", 1));
    let stream = "event: response.queued\ndata: {\"type\":\"response.queued\"}\n\n\
        event: response.something_new\ndata: {\"type\":\"response.something_new\",\"output_index\":0}\n\n\
        event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"output\":[]}}\n\n";
    let turn = decode_capture(STYLE, stream.as_bytes(), true).unwrap();
    assert!(turn.content.is_empty());
}

/// Copilot rotates item ids on every event of one item: state keyed by
/// `output_index` is not disturbed.
#[test]
fn rotating_item_ids_do_not_split_items() {
    let (path, bytes) =
        turn_streams().into_iter().find(|(p, _)| p.to_string_lossy().contains("args_done_no_name")).unwrap();
    let want = whole(&path, &bytes);
    let mut n = 0;
    let rotated: String = String::from_utf8(bytes)
        .unwrap()
        .lines()
        .map(|l| match l.strip_prefix("data: ") {
            Some(d) => {
                let mut v: Value = serde_json::from_str(d).unwrap();
                n += 1;
                if v.get("item_id").is_some() {
                    v["item_id"] = json!(format!("rotated_{n}"));
                }
                if let Some(item) = v.get_mut("item") {
                    item["id"] = json!(format!("rotated_{n}"));
                }
                format!("data: {v}")
            }
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let got = decode_capture(STYLE, rotated.as_bytes(), true).unwrap();
    assert_eq!(got.summary(), want.summary());
}

#[test]
fn reasoning_keeps_the_encrypted_content_of_output_item_done() {
    let mut checked = 0;
    for (path, bytes) in turn_streams() {
        let text = String::from_utf8(bytes.clone()).unwrap();
        let done: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str::<Value>(d).unwrap())
            .filter(|v| v["type"] == "response.output_item.done" && v["item"]["type"] == "reasoning")
            .map(|v| v["item"].clone())
            .collect();
        let turn = whole(&path, &bytes);
        let kept: Vec<Value> = turn
            .content
            .iter()
            .filter_map(|b| match b {
                Block::Reasoning { provider_data, .. } => {
                    provider_data.as_ref().map(|d| d["openai-responses"]["item"].clone())
                }
                _ => None,
            })
            .collect();
        assert_eq!(kept, done, "{}: the reasoning items of output_item.done, verbatim", path.display());
        checked += kept.len();
    }
    assert!(checked >= 3, "reasoning items in the corpus: {checked}");
}

#[test]
fn every_stream_keeps_raw_arguments() {
    for (path, bytes) in turn_streams() {
        for call in whole(&path, &bytes).tool_calls() {
            let reparsed: Value = serde_json::from_str(&call.arguments).unwrap();
            assert_eq!(reparsed, call.input, "{}: {}", path.display(), call.id);
            assert!(
                String::from_utf8_lossy(&bytes).contains(&serde_json::to_string(&call.arguments).unwrap()[1..]),
                "{}: the argument text as sent",
                path.display()
            );
        }
    }
}

#[test]
fn two_chunks_split_at_every_byte_boundary_give_the_same_turn() {
    for (path, bytes) in turn_streams().into_iter().filter(|(_, b)| b.len() <= 8 * 1024) {
        let want = whole(&path, &bytes);
        for cut in 0..=bytes.len() {
            assert!(chunked(&bytes, &[cut]) == want, "{}: split at byte {cut} changed the turn", path.display());
        }
    }
}

#[test]
fn one_byte_at_a_time_gives_the_same_turn() {
    for (path, bytes) in turn_streams() {
        let want = whole(&path, &bytes);
        let got = decode_stream_chunks(STYLE, bytes.chunks(1), &mut CallIds::new("call_")).unwrap();
        assert_eq!(got, want, "{}", path.display());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_chunkings_give_the_same_turn(file in 0usize..64, raw_cuts in proptest::collection::vec(any::<u32>(), 0..40)) {
        let all = turn_streams();
        let (path, bytes) = &all[file % all.len()];
        let mut cuts: Vec<usize> = raw_cuts.iter().map(|c| *c as usize % (bytes.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert!(chunked(bytes, &cuts) == whole(path, bytes), "{}: cuts {:?}", path.display(), cuts);
    }
}

// ---------------------------------------------------------------- requests

/// What the loop holds after a recorded response: the user's prompt, the
/// decoded turn, and the tool results in the recorded follow-up.
fn follow_up(response: &str, request: &Value) -> (Vec<Message>, Vec<Value>) {
    let turn = decode_capture(STYLE, &read(&corpus(response)), false).unwrap();
    let input = request["input"].as_array().unwrap().clone();
    let prompt = input[0]["content"].as_str().unwrap();
    let results: Vec<Block> = input
        .iter()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| {
            Block::ToolResult(ToolResultBlock {
                call_id: i["call_id"].as_str().unwrap().into(),
                name: String::new(),
                output: i["output"].as_str().unwrap().into(),
                is_error: false,
            })
        })
        .collect();
    let messages = vec![
        Message::user(prompt),
        Message { role: Role::Assistant, content: turn.content },
        Message { role: Role::User, content: results },
    ];
    (messages, input)
}

/// A recorded follow-up echoes the previous turn's items; the encoder, fed
/// the decoded turn, echoes the same ones in the same order (`status` on a
/// function call, which the recording left out, is the only addition).
#[test]
fn a_decoded_turn_is_echoed_as_the_recorded_follow_up_sent_it() {
    let pairs = [
        (
            "pai_reasoning_tool_call.json",
            "pai_test_openai_responses_test_openai_responses_thinking_with_tool_calls_1.json",
        ),
        ("pai_phase_commentary_tool_call.json", "pai_test_openai_responses_test_openai_responses_phase_live_1.json"),
    ];
    for (response, request) in pairs {
        let recorded: Value = serde_json::from_slice(&read(&corpus(&format!("requests/{request}")))).unwrap();
        let (messages, input) = follow_up(response, &recorded);
        check_transcript(STYLE, &messages).unwrap();
        let params = Map::new();
        let call = ModelCall {
            model: recorded["model"].as_str().unwrap(),
            system: recorded["instructions"].as_str(),
            messages: &messages,
            tools: &[],
            max_tokens: None,
            stream: false,
            params: &params,
            output: None,
        };
        let body = STYLE.encode_body(&call);
        assert_eq!(body["store"], false);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert!(body.get("previous_response_id").is_none());
        let got = body["input"].as_array().unwrap();
        assert_eq!(got.len(), input.len(), "{request}: {body:#}");
        assert_eq!(
            got[0],
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": input[0]["content"]}]})
        );
        for (g, w) in got.iter().zip(&input).skip(1) {
            let mut g = g.clone();
            if g["type"] == "function_call" {
                g.as_object_mut().unwrap().remove("status");
            }
            assert_eq!(&g, w, "{request}: an item differs");
        }
    }
}

// ---------------------------------------------------------------- oracle

fn tool_call(id: &str, name: &str, arguments: &str, data: Option<Value>) -> Block {
    Block::ToolCall(ToolCall {
        id: id.into(),
        name: name.into(),
        input: serde_json::from_str(arguments).unwrap(),
        arguments: arguments.into(),
        provider_data: data,
    })
}

fn tool_result(call_id: &str, output: &str, is_error: bool) -> Block {
    Block::ToolResult(ToolResultBlock { call_id: call_id.into(), name: String::new(), output: output.into(), is_error })
}

/// Bodies the encoder writes for representative transcripts: plain, with
/// tools streamed, a round of parallel calls with reasoning, a history that
/// came from other styles (their opaque data is not sent), and every
/// recorded turn of the corpus replayed.
fn oracle_bodies() -> Vec<(String, Vec<u8>)> {
    let tools = [
        ToolDecl::new(
            "get_weather",
            "Current weather.",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        ),
        ToolDecl::new("add", "Adds.", json!({"type": "object", "properties": {"a": {"type": "number"}}})),
    ];
    let reasoning = Block::Reasoning {
        text: "two tools".into(),
        signature: None,
        redacted: None,
        provider_data: Some(json!({"openai-responses": {"item": {"id": "rs_1", "type": "reasoning", "summary": [
            {"type": "summary_text", "text": "two tools"}], "encrypted_content": "gAAAA-1"}}})),
    };
    let own = |id: &str| Some(json!({"openai-responses": {"id": id, "status": "completed"}}));
    let round = vec![
        Message::user("Weather in Paris, and 2+2?"),
        Message {
            role: Role::Assistant,
            content: vec![
                reasoning,
                Block::Text {
                    text: "Checking.".into(),
                    provider_data: Some(
                        json!({"openai-responses": {"id": "msg_1", "status": "completed", "phase": "commentary"}}),
                    ),
                },
                tool_call("call_w", "get_weather", "{\"city\":\"Paris\"}", own("fc_1")),
                tool_call("call_a", "add", "{\"a\":2}", own("fc_2")),
            ],
        },
        Message {
            role: Role::User,
            content: vec![tool_result("call_w", "sunny", false), tool_result("call_a", "no b", true)],
        },
        Message::assistant("Sunny; and 4."),
        Message {
            role: Role::User,
            content: vec![
                Block::text("And this?"),
                Block::Image {
                    media_type: "image/png".into(),
                    source: ImageSource::Base64 { data: "iVBORw0KGgo=".into() },
                },
                Block::Image {
                    media_type: "image/jpeg".into(),
                    source: ImageSource::Url { url: "https://example.com/a.jpg".into() },
                },
            ],
        },
    ];
    // Reasoning and blocks from Anthropic and Gemini, and a Chat refusal.
    let foreign = vec![
        Message::user("hi"),
        Message {
            role: Role::Assistant,
            content: vec![
                Block::Reasoning {
                    text: "hmm".into(),
                    signature: Some("sig".into()),
                    redacted: None,
                    provider_data: None,
                },
                Block::Text {
                    text: String::new(),
                    provider_data: Some(json!({"anthropic": {"block": {"type": "server_tool_use"}}})),
                },
                Block::Text { text: "no".into(), provider_data: Some(json!({"openai": {"refusal": true}})) },
                tool_call("toolu_1", "get_weather", "{}", Some(json!({"gemini": {"thoughtSignature": "c2ln"}}))),
            ],
        },
        Message { role: Role::User, content: vec![tool_result("toolu_1", "ok", false), Block::text("go on")] },
    ];
    let simple = vec![Message::user("Hello")];
    let params = Map::new();
    let mut choice = Map::new();
    choice.insert("tool_choice".into(), json!("required"));
    choice.insert("parallel_tool_calls".into(), json!(false));
    choice.insert("reasoning".into(), json!({"effort": "low", "summary": "auto"}));
    let call = |system,
                messages: &'static [Message],
                tools: &'static [ToolDecl],
                stream,
                max,
                params: &'static Map<String, Value>| {
        ModelCall { model: "gpt-5", system, messages, tools, max_tokens: max, stream, params, output: None }
    };
    let leak = |v: Vec<Message>| -> &'static [Message] { Box::leak(v.into_boxed_slice()) };
    let tools: &'static [ToolDecl] = Box::leak(Box::new(tools));
    let params: &'static Map<String, Value> = Box::leak(Box::new(params));
    let choice: &'static Map<String, Value> = Box::leak(Box::new(choice));
    let mut out = vec![
        ("simple".to_string(), call(None, leak(simple.clone()), &[], false, None, params)),
        ("tools_stream".to_string(), call(Some("Be brief."), leak(simple), tools, true, Some(256), choice)),
        ("round".to_string(), call(Some("Use tools."), leak(round.clone()), tools, false, Some(1024), params)),
        ("round_stream".to_string(), call(None, leak(round), tools, true, None, choice)),
        ("foreign".to_string(), call(None, leak(foreign), tools, false, None, params)),
    ];
    for (path, stream) in common::captures(STYLE) {
        let Ok(turn) = decode_capture(STYLE, &read(&path), stream) else { continue };
        let results: Vec<Block> = turn.tool_calls().map(|c| tool_result(&c.id, "done", false)).collect();
        let mut messages = vec![Message::user("go"), Message { role: Role::Assistant, content: turn.content.clone() }];
        messages.push(if results.is_empty() {
            Message::user("thanks")
        } else {
            Message { role: Role::User, content: results }
        });
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        out.push((name, call(None, leak(messages), tools, stream, None, params)));
    }
    out.into_iter()
        .map(|(name, c)| {
            let bytes = STYLE.body_bytes(&c);
            assert_eq!(bytes, serde_json::to_vec(&STYLE.encode_body(&c)).unwrap(), "{name}: write_body = encode_body");
            check_transcript(STYLE, c.messages).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, bytes)
        })
        .collect()
}

#[test]
fn foreign_opaque_data_never_reaches_the_wire() {
    let bodies = oracle_bodies();
    let (_, foreign) = bodies.iter().find(|(n, _)| n == "foreign").unwrap();
    let text = String::from_utf8_lossy(foreign);
    for secret in ["sig", "server_tool_use", "c2ln", "hmm", "refusal"] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    assert!(text.contains(r#"{"content":"no","role":"assistant","type":"message"}"#), "{text}");
}

#[test]
fn oracle_accepts_every_encoded_body() {
    let python = std::env::var("NEXUS_ORACLE_PY").unwrap_or_else(|_| "/tmp/oracle-venv/bin/python".into());
    if !Path::new(&python).exists() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI: the oracle interpreter {python} is missing");
        println!("skipped: oracle interpreter {python} not found (set NEXUS_ORACLE_PY)");
        return;
    }
    let script = common::shared_dir().join("oracles/validate_request.py");
    let dir = std::env::temp_dir().join(format!("nexus-responses-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bodies = oracle_bodies();
    assert!(bodies.len() >= 15, "{} bodies", bodies.len());
    for (name, body) in bodies {
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, &body).unwrap();
        let out = std::process::Command::new(&python).arg(&script).arg("responses").arg(&file).output().unwrap();
        assert!(
            out.status.success(),
            "{name}: oracle rejected the body\n{}\n{}\nbody: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&body)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The pre-send gate holds a reasoning item to the item that followed it:
/// followed by an item of the same response it passes; followed by text that
/// lost its id (a rewritten history) it is refused before anything is sent;
/// last in its turn it passes and is not sent (nothing can follow it).
#[test]
fn the_gate_keeps_reasoning_with_its_following_item() {
    let reasoning = Block::Reasoning {
        text: "r".into(),
        signature: None,
        redacted: None,
        provider_data: Some(json!({"openai-responses": {"item": {"id": "rs_1", "type": "reasoning", "summary": []}}})),
    };
    let own_text = Block::Text { text: "t".into(), provider_data: Some(json!({"openai-responses": {"id": "msg_1"}})) };
    let turn = |content: Vec<Block>| {
        vec![Message::user("hi"), Message { role: Role::Assistant, content }, Message::user("more")]
    };
    check_transcript(STYLE, &turn(vec![reasoning.clone(), own_text])).unwrap();
    let err = check_transcript(STYLE, &turn(vec![reasoning.clone(), Block::text("t")])).unwrap_err();
    assert!(err.to_string().contains("rs_1"), "{err}");
    // Other styles do not hold it to that.
    check_transcript(Style::Anthropic, &turn(vec![reasoning.clone(), Block::text("t")])).unwrap();
    let last = turn(vec![Block::text("t"), reasoning]);
    check_transcript(STYLE, &last).unwrap();
    let params = Map::new();
    let call = ModelCall {
        model: "m",
        system: None,
        messages: &last,
        tools: &[],
        max_tokens: None,
        stream: false,
        params: &params,
        output: None,
    };
    let body = STYLE.encode_body(&call);
    assert!(body["input"].as_array().unwrap().iter().all(|i| i["type"] != "reasoning"), "{body}");
}
