//! The Gemini codec against recorded provider traffic in the shared wire
//! corpus: every capture decodes to the oracle's expectation, chunking never
//! changes a streamed result, a stream equals the same content sent as one
//! body, and the encoder reproduces the recorded requests.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use nexus_proto::provider::{decode_capture, decode_stream_chunks, ModelCall, Style, TurnResponse};
use nexus_proto::sse::SseDecoder;
use nexus_proto::{Block, CallIds, Message, Role, ToolCall, ToolDecl, ToolResultBlock};
use proptest::prelude::*;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

fn read(path: &PathBuf) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The `.sse` captures with their bytes and whole-body decode, loaded once.
fn streams() -> &'static Vec<(PathBuf, Vec<u8>, TurnResponse)> {
    static STREAMS: OnceLock<Vec<(PathBuf, Vec<u8>, TurnResponse)>> = OnceLock::new();
    STREAMS.get_or_init(|| {
        common::captures(Style::Gemini)
            .into_iter()
            .filter(|(_, stream)| *stream)
            .map(|(path, _)| {
                let bytes = read(&path);
                let turn =
                    decode_capture(Style::Gemini, &bytes, true).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                (path, bytes, turn)
            })
            .collect()
    })
}

fn decode_chunks(bytes: &[u8], cuts: &[usize]) -> TurnResponse {
    let mut chunks = Vec::new();
    let mut start = 0;
    for &cut in cuts {
        chunks.push(&bytes[start..cut]);
        start = cut;
    }
    chunks.push(&bytes[start..]);
    decode_stream_chunks(Style::Gemini, chunks, &mut CallIds::new("call_")).expect("chunked decode")
}

#[test]
fn every_capture_matches_its_expectation() {
    let captures = common::captures(Style::Gemini);
    assert!(captures.iter().any(|(_, s)| *s) && captures.iter().any(|(_, s)| !*s));
    for (path, stream) in captures {
        let got = common::summarize(Style::Gemini, &read(&path), stream);
        common::assert_matches(&path, &got, &common::expected(&path));
    }
}

#[test]
fn every_two_chunk_split_gives_the_same_turn() {
    // Tens of thousands of full decodes: spread over the available cores.
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (path, bytes, whole) in streams() {
        std::thread::scope(|scope| {
            for worker in 0..workers {
                scope.spawn(move || {
                    for cut in (worker..=bytes.len()).step_by(workers) {
                        let got = decode_chunks(bytes, &[cut]);
                        assert_eq!(&got, whole, "{} split at byte {cut}", path.display());
                    }
                });
            }
        });
    }
}

#[test]
fn one_byte_at_a_time_gives_the_same_turn() {
    for (path, bytes, whole) in streams() {
        let chunks = bytes.chunks(1);
        let got = decode_stream_chunks(Style::Gemini, chunks, &mut CallIds::new("call_")).expect("bytewise decode");
        assert_eq!(&got, whole, "{}", path.display());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn random_chunkings_give_the_same_turn(pick in any::<prop::sample::Index>(), raw_cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24)) {
        let all = streams();
        let (path, bytes, whole) = &all[pick.index(all.len())];
        let mut cuts: Vec<usize> = raw_cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        let got = decode_chunks(bytes, &cuts);
        prop_assert_eq!(&got, whole, "{} cut at {:?}", path.display(), cuts);
    }
}

// ----- a stream equals the same content delivered as one body -----

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    #[serde(default)]
    candidates: Vec<Candidate>,
    usage_metadata: Option<Box<RawValue>>,
    model_version: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate {
    content: Option<Content>,
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    parts: Vec<Box<RawValue>>,
}

/// Rebuilds a stream as the one body a non-streaming call would return: every
/// part in order (raw bytes kept), the last finish reason, the last usage and
/// model. Text is built by hand so argument bytes stay exactly as recorded.
fn as_one_body(sse: &[u8]) -> String {
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    decoder.feed(sse, &mut events);
    decoder.finish(&mut events);
    let mut parts: Vec<String> = Vec::new();
    let (mut finish, mut usage, mut model) = (None, None, None);
    for ev in events {
        let ev: Event = serde_json::from_str(&ev.data).expect("corpus payload");
        if let Some(c) = ev.candidates.into_iter().next() {
            parts.extend(c.content.into_iter().flat_map(|c| c.parts).map(|p| p.get().to_string()));
            finish = c.finish_reason.or(finish);
        }
        usage = ev.usage_metadata.map(|u| u.get().to_string()).or(usage);
        model = ev.model_version.or(model);
    }
    let mut candidate = format!(r#"{{"content":{{"role":"model","parts":[{}]}}"#, parts.join(","));
    if let Some(f) = finish {
        candidate.push_str(&format!(r#","finishReason":{}"#, Value::String(f)));
    }
    let mut body = format!(r#"{{"candidates":[{candidate}}}]"#);
    if let Some(u) = usage {
        body.push_str(&format!(r#","usageMetadata":{u}"#));
    }
    if let Some(m) = model {
        body.push_str(&format!(r#","modelVersion":{}"#, Value::String(m)));
    }
    body.push('}');
    body
}

#[test]
fn every_stream_equals_its_content_as_one_body() {
    for (path, bytes, streamed) in streams() {
        let body = as_one_body(bytes);
        let whole = Style::Gemini
            .decode_response(body.as_bytes(), &mut CallIds::new("call_"))
            .unwrap_or_else(|e| panic!("{}: {e}\n{body}", path.display()));
        assert_eq!(&whole, streamed, "{}", path.display());
    }
}

#[test]
fn streamed_tool_call_arguments_are_the_recorded_bytes() {
    // The recording sends `"args": {"country": "France"}` with a space after
    // the colon; the transcript must keep those bytes, not a re-encoding.
    let (_, _, turn) =
        streams().iter().find(|(p, _, _)| p.ends_with("pai_function_call_stream.sse")).expect("capture present");
    let call = turn.tool_calls().next().expect("one call");
    assert_eq!(call.arguments, r#"{"country": "France"}"#);
    assert_eq!(call.input, serde_json::json!({"country": "France"}));
}

// ----- recorded requests: the encoder produces the same bodies -----

/// A neutral transcript, tool list and system prompt read from a recorded
/// request body (test-side reading: the codec itself never decodes requests).
struct Recorded {
    system: Option<String>,
    messages: Vec<Message>,
    tools: Vec<ToolDecl>,
    params: Map<String, Value>,
}

fn read_request(body: &Value) -> Recorded {
    let mut messages = Vec::new();
    for content in body["contents"].as_array().expect("contents") {
        let role = if content["role"] == "model" { Role::Assistant } else { Role::User };
        let mut blocks = Vec::new();
        for part in content["parts"].as_array().expect("parts") {
            if let Some(text) = part["text"].as_str() {
                blocks.push(Block::text(text));
            } else if let Some(fc) = part.get("functionCall") {
                blocks.push(Block::ToolCall(ToolCall {
                    id: fc["id"].as_str().expect("recorded call id").to_string(),
                    name: fc["name"].as_str().expect("name").to_string(),
                    input: fc["args"].clone(),
                    arguments: fc["args"].to_string(),
                    provider_data: None,
                }));
            } else if let Some(fr) = part.get("functionResponse") {
                blocks.push(Block::ToolResult(ToolResultBlock {
                    call_id: fr["id"].as_str().expect("recorded response id").to_string(),
                    name: fr["name"].as_str().expect("name").to_string(),
                    output: fr["response"].to_string(),
                    is_error: false,
                }));
            } else {
                panic!("unexpected part {part}");
            }
        }
        messages.push(Message { role, content: blocks });
    }
    let system = body["systemInstruction"]["parts"]
        .as_array()
        .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect::<String>());
    let tools = body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["functionDeclarations"].as_array().cloned().unwrap_or_default())
        .map(|d| {
            ToolDecl::new(
                d["name"].as_str().expect("name"),
                d["description"].as_str().unwrap_or(""),
                d["parameters"].clone(),
            )
        })
        .collect();
    let mut params = Map::new();
    for key in ["generationConfig", "toolConfig"] {
        if let Some(v) = body.get(key) {
            params.insert(key.to_string(), v.clone());
        }
    }
    Recorded { system, messages, tools, params }
}

/// Drops what the two bodies may legitimately differ in: the tool result's
/// payload convention (`return_value` there, `output` here) and the optional
/// `role` on the system instruction.
fn normalize(mut body: Value) -> Value {
    if let Some(si) = body.get_mut("systemInstruction").and_then(Value::as_object_mut) {
        si.remove("role");
    }
    for content in body["contents"].as_array_mut().into_iter().flatten() {
        for part in content["parts"].as_array_mut().into_iter().flatten() {
            if let Some(fr) = part.get_mut("functionResponse").and_then(Value::as_object_mut) {
                fr.insert("response".into(), Value::Null);
            }
        }
    }
    body
}

pub fn recorded_requests() -> Vec<PathBuf> {
    let dir = common::shared_dir().join("wire-corpus/gemini/requests");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        // Only requests the oracle marked valid are real, accepted requests.
        .filter(|p| std::fs::read_to_string(p.with_extension("expected.txt")).is_ok_and(|s| s.trim() == "valid"))
        .collect();
    out.sort();
    out
}

#[test]
fn encoder_reproduces_every_recorded_request() {
    let requests = recorded_requests();
    assert!(!requests.is_empty());
    for path in requests {
        let recorded: Value = serde_json::from_slice(&read(&path)).expect("request JSON");
        let r = read_request(&recorded);
        let call = ModelCall {
            model: "gemini-2.0-flash",
            system: r.system.as_deref(),
            messages: &r.messages,
            tools: &r.tools,
            max_tokens: None,
            stream: path.to_string_lossy().contains("stream"),
            params: &r.params,
            output: None,
        };
        let ours = Style::Gemini.encode_body(&call);
        assert_eq!(normalize(ours.clone()), normalize(recorded.clone()), "{}", path.display());
        // The results themselves follow the documented output convention.
        for content in ours["contents"].as_array().expect("contents") {
            for part in content["parts"].as_array().expect("parts") {
                if let Some(fr) = part.get("functionResponse") {
                    assert!(fr["response"]["output"].is_string(), "{}: {fr}", path.display());
                }
            }
        }
    }
}
