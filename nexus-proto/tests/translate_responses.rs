//! Translation with the OpenAI Responses API on either side: a Chat
//! Completions request sent to a Responses upstream and its answer back
//! (whole and streamed), and the pieces of a `/v1/responses` surface — a
//! Responses request read into the neutral form, a turn written back as a
//! Responses object and event stream — checked against the recorded corpus,
//! the decoder itself and the official SDK.

mod common;

use std::path::{Path, PathBuf};

use nexus_proto::provider::{decode_capture, ModelCall, Style};
use nexus_proto::translate::{
    openai_request_to, read_responses_request, response_to_openai, turn_to_responses, turn_to_responses_events,
    ResponseMeta, StreamTranslator,
};
use nexus_proto::{check_transcript, Block, SseDecoder, TurnResponse};
use serde_json::{json, Map, Value};

const STYLE: Style = Style::OpenAiResponses;

fn corpus(name: &str) -> PathBuf {
    common::shared_dir().join("wire-corpus/openai-responses").join(name)
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn meta() -> ResponseMeta {
    ResponseMeta { id: "resp_test1".into(), model: "gpt-5".into(), created_at: 1_700_000_000, ..Default::default() }
}

/// The turns of every recording that decodes to one.
fn corpus_turns() -> Vec<(String, TurnResponse)> {
    common::captures(STYLE)
        .into_iter()
        .filter_map(|(path, stream)| {
            let turn = decode_capture(STYLE, &read(&path), stream).ok()?;
            Some((path.file_name().unwrap().to_string_lossy().to_string(), turn))
        })
        .collect()
}

fn oracle(script: &str, args: &[&str], body: &[u8], name: &str) {
    let python = std::env::var("NEXUS_ORACLE_PY").unwrap_or_else(|_| "/tmp/oracle-venv/bin/python".into());
    if !Path::new(&python).exists() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI: the oracle interpreter {python} is missing");
        println!("skipped: oracle interpreter {python} not found (set NEXUS_ORACLE_PY)");
        return;
    }
    let file = std::env::temp_dir().join(format!("nexus-responses-translate-{}-{name}", std::process::id()));
    std::fs::write(&file, body).unwrap();
    let script = common::shared_dir().join("oracles").join(script);
    let out = std::process::Command::new(&python).arg(&script).args(args).arg(&file).output().unwrap();
    let _ = std::fs::remove_file(&file);
    assert!(
        out.status.success(),
        "{name}: the oracle refused it\n{}\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(body)
    );
}

// ---------------------------------------------------------------- Chat → Responses upstream

fn chat_request(stream: bool) -> Value {
    json!({
        "model": "gpt-5",
        "stream": stream,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "user", "content": "And tomorrow?"}
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                                  "additionalProperties": false}, "strict": true}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": false,
        "max_completion_tokens": 300,
        "temperature": 0.5,
        "reasoning_effort": "low",
        "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "strict": true,
                            "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}},
        "user": "u-1",
        "metadata": {"k": "v"}
    })
}

#[test]
fn a_chat_request_becomes_a_stateless_responses_request() {
    for stream in [false, true] {
        let t = openai_request_to(STYLE, &chat_request(stream)).unwrap();
        assert_eq!(t.url("https://api.openai.com/v1"), "https://api.openai.com/v1/responses");
        let body: Value = serde_json::from_slice(&t.body).unwrap();
        assert_eq!(body["instructions"], "Be brief.");
        assert_eq!(body["store"], false);
        assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(body["max_output_tokens"], 300);
        assert_eq!(body["tool_choice"], json!({"type": "function", "name": "get_weather"}));
        assert_eq!(body["parallel_tool_calls"], false);
        assert_eq!(body["reasoning"], json!({"effort": "low"}));
        assert_eq!(body["text"]["format"]["name"], "answer");
        assert_eq!(body["tools"][0]["strict"], true);
        assert_eq!((body["user"].clone(), body["metadata"].clone()), (json!("u-1"), json!({"k": "v"})));
        let kinds: Vec<&str> = body["input"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["message", "function_call", "function_call_output", "message"]);
        assert_eq!(body["input"][1]["arguments"], "{\"city\":\"Paris\"}", "raw arguments");
        assert_eq!(body.get("stream").is_some(), stream);
        oracle("validate_request.py", &["responses"], &t.body, &format!("chat_to_responses_{stream}.json"));
    }
    let stop = json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": ["END"]});
    let e = openai_request_to(STYLE, &stop).unwrap_err();
    assert_eq!((e.status, e.param.as_deref()), (400, Some("stop")));
}

#[test]
fn responses_answers_come_back_as_chat_completions_whole_and_streamed() {
    for (path, stream) in common::captures(STYLE) {
        let bytes = read(&path);
        let want = decode_capture(STYLE, &bytes, stream);
        let name = path.display();
        let got = if stream {
            let mut t = StreamTranslator::new(STYLE, "m", true);
            let mut events = Vec::new();
            let mut d = SseDecoder::new();
            d.feed(&bytes, &mut events);
            d.finish(&mut events);
            let mut lines: Vec<String> = events.iter().flat_map(|e| t.push(e)).collect();
            lines.extend(t.finish());
            let chunks: Vec<Value> = lines
                .iter()
                .map(|l| l.strip_prefix("data: ").unwrap().trim_end())
                .filter(|d| *d != "[DONE]")
                .map(|d| serde_json::from_str(d).unwrap())
                .collect();
            match &want {
                Err(_) => {
                    assert!(chunks.last().unwrap().get("error").is_some(), "{name}: ends on an error line");
                    continue;
                }
                Ok(_) => assert_eq!(lines.last().map(String::as_str), Some("data: [DONE]\n\n"), "{name}"),
            }
            let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
            let calls: Vec<String> = chunks
                .iter()
                .flat_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array().cloned().unwrap_or_default())
                .filter_map(|c| c["id"].as_str().map(str::to_string))
                .collect();
            (text, calls)
        } else {
            match (response_to_openai(STYLE, &bytes, "m"), &want) {
                (Err(e), Err(_)) => {
                    assert!(e.status >= 400, "{name}");
                    continue;
                }
                (Ok(v), Ok(_)) => {
                    let m = &v["choices"][0]["message"];
                    let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
                    (
                        m["content"].as_str().unwrap_or("").to_string(),
                        calls.iter().map(|c| c["id"].as_str().unwrap().to_string()).collect(),
                    )
                }
                (got, want) => panic!("{name}: {got:?} vs {want:?}"),
            }
        };
        let want = want.unwrap();
        assert_eq!(got.0, want.text(), "{name}: text");
        assert_eq!(got.1, want.tool_calls().map(|c| c.id.clone()).collect::<Vec<_>>(), "{name}: call ids");
    }
}

// ---------------------------------------------------------------- the /v1/responses surface pieces

/// A recorded follow-up request, read into the neutral form and encoded for
/// a Responses upstream again, gives back the items it was sent with.
#[test]
fn recorded_requests_read_and_encode_back_to_their_items() {
    for name in [
        "pai_test_openai_responses_test_openai_responses_thinking_with_tool_calls_1.json",
        "pai_test_openai_responses_test_openai_responses_phase_live_1.json",
        "pai_test_openai_responses_test_openai_responses_model_retry_1.json",
    ] {
        let bytes = read(&corpus(&format!("requests/{name}")));
        let recorded: Value = serde_json::from_slice(&bytes).unwrap();
        let req = read_responses_request(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(req.model, recorded["model"]);
        assert_eq!(req.system.as_deref(), recorded["instructions"].as_str());
        assert_eq!(req.settings.get("tool_choice"), recorded.get("tool_choice"));
        check_transcript(STYLE, &req.messages).unwrap_or_else(|e| panic!("{name}: {e}"));
        let params = Map::new();
        let call = ModelCall {
            model: &req.model,
            system: req.system.as_deref(),
            messages: &req.messages,
            tools: &req.tools,
            max_tokens: req.max_tokens,
            stream: req.stream,
            params: &params,
            output: None,
        };
        let body = STYLE.encode_body(&call);
        let got = body["input"].as_array().unwrap();
        // An empty assistant message says nothing and is not sent again.
        let want: Vec<&Value> = recorded["input"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["role"] != "assistant" || i["content"] != "")
            .collect();
        assert_eq!(got.len(), want.len(), "{name}: {body:#}");
        for (g, w) in got.iter().zip(want).skip(1) {
            let mut g = g.clone();
            // An assistant message without an id of its own is sent in the short form.
            if w["type"] == "function_call" && w.get("status").is_none() {
                g.as_object_mut().unwrap().remove("status");
            }
            if w.get("type").is_none() && w["role"] == "assistant" {
                assert_eq!(g["content"], w["content"], "{name}");
                continue;
            }
            assert_eq!(&g, w, "{name}: an item differs");
        }
    }
}

#[test]
fn stateful_and_unsupported_requests_are_refused_by_name() {
    let base = json!({"model": "m", "input": "hi"});
    let with = |k: &str, v: Value| {
        let mut b = base.clone();
        b[k] = v;
        serde_json::to_vec(&b).unwrap()
    };
    for (body, param) in [
        (with("previous_response_id", json!("resp_1")), "previous_response_id"),
        (with("conversation", json!("conv_1")), "conversation"),
        (with("input", json!([{"type": "item_reference", "id": "rs_1"}])), "input[0]"),
        (with("tools", json!([{"name": "f"}])), "tools[0].type"),
        (with("input", json!([{"type": "custom_tool_call_output", "call_id": "c", "output": "x"}])), "input[0].type"),
        (b"{\"input\": \"x\"}".to_vec(), "model"),
    ] {
        let e = read_responses_request(&body).unwrap_err();
        assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{e}");
    }
    let r = read_responses_request(&with("previous_response_id", Value::Null)).unwrap();
    assert_eq!(r.messages.len(), 1);
    // Hosted tools and the record of their runs are left out and named.
    let body = json!({"model": "m", "tools": [
        {"type": "web_search"},
        {"type": "function", "name": "f", "parameters": {"type": "object"}},
        {"type": "code_interpreter", "container": {"type": "auto"}},
    ], "input": [
        {"role": "user", "content": "hi"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
    ]});
    let r = read_responses_request(&serde_json::to_vec(&body).unwrap()).unwrap();
    assert_eq!(r.tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(), ["f"]);
    assert_eq!(r.dropped, ["input[1] (web_search_call)", "tools[0] (web_search)", "tools[2] (code_interpreter)"]);
}

/// Every corpus turn written as a Responses object reads back (with the
/// decoder the loop uses) to the same turn, ids, phase and encrypted content
/// included; written as an event stream it assembles to it too.
#[test]
fn corpus_turns_round_trip_through_the_surface_writers() {
    let turns = corpus_turns();
    assert!(turns.len() >= 10);
    for (name, turn) in &turns {
        let object = turn_to_responses(turn, &meta());
        let back = decode_capture(STYLE, object.to_string().as_bytes(), false).unwrap();
        assert_eq!(back.content, turn.content, "{name}: whole");
        assert_eq!((back.stop.clone(), back.usage), (turn.stop.clone(), turn.usage), "{name}");
        let sse: String = turn_to_responses_events(turn, &meta()).concat();
        let back = decode_capture(STYLE, sse.as_bytes(), true).unwrap();
        assert_eq!(back.content, turn.content, "{name}: streamed");
    }
    // The official SDK reads both forms.
    let (_, rich) = turns.iter().find(|(n, _)| n == "pai_phase_commentary_tool_call.json").unwrap();
    oracle(
        "validate_response.py",
        &["responses"],
        turn_to_responses(rich, &meta()).to_string().as_bytes(),
        "object.json",
    );
    let sse = turn_to_responses_events(rich, &meta()).concat();
    oracle("parse_stream.py", &["responses"], sse.as_bytes(), "events.sse");
}

/// A turn from another provider (no Responses data) still makes a valid
/// object: generated item ids, reasoning as its summary, no encrypted content.
#[test]
fn foreign_turns_get_generated_ids_and_no_opaque_data() {
    let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[
        {"type":"thinking","thinking":"hmm","signature":"SIG"},{"type":"text","text":"Let me check."},
        {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}],
        "stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":7}}"#;
    let turn = decode_capture(Style::Anthropic, body, false).unwrap();
    let object = turn_to_responses(&turn, &meta());
    let text = object.to_string();
    assert!(!text.contains("SIG"), "a signature leaked: {text}");
    let kinds: Vec<&str> = object["output"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["reasoning", "message", "function_call"]);
    assert_eq!(object["output"][2]["call_id"], "toolu_1");
    assert!(object["output"].as_array().unwrap().iter().all(|i| i["id"].as_str().is_some_and(|s| s.contains("test1"))));
    assert_eq!(object["usage"]["total_tokens"], 12);
    let back = decode_capture(STYLE, text.as_bytes(), false).unwrap();
    assert_eq!(back.text(), "Let me check.");
    assert!(matches!(&back.content[0], Block::Reasoning { text, .. } if text == "hmm"));
    oracle("validate_response.py", &["responses"], text.as_bytes(), "foreign.json");
}
