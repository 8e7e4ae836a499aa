//! The gateway surfaces' fuzz bodies under `cargo test`: the Anthropic and
//! Gemini request decoders on real recorded requests, their prefixes and
//! random bytes; the surface stream writers on the recorded streams of every
//! style and on generated upstream event sequences. The bodies live in
//! `nexus_proto::fuzzing`. Only built with `--features fuzzing`.
#![cfg(feature = "fuzzing")]

mod common;

use nexus_proto::fuzzing::{
    anthropic_lines, anthropic_request, anthropic_stream, built_events, check_anthropic, check_gemini, check_responses,
    gemini_lines, gemini_request, gemini_stream, responses_lines, responses_request, responses_stream,
};
use nexus_proto::provider::Style;
use nexus_proto::translate::{anthropic_request_to, gemini_request_to, responses_request_to};
use nexus_proto::SseEvent;
use proptest::prelude::*;
use serde_json::Value;

const STYLES: [Style; 4] = [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses];

/// The recorded request bodies of `dir` (`anthropic`, `gemini`).
fn recorded_requests(dir: &str) -> Vec<Vec<u8>> {
    let path = common::shared_dir().join("wire-corpus").join(dir).join("requests");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|x| x == "json") {
            out.push(std::fs::read(p).unwrap());
        }
    }
    assert!(!out.is_empty(), "no recorded requests in {}", path.display());
    out
}

#[test]
fn recorded_anthropic_requests_translate_for_every_upstream() {
    for body in recorded_requests("anthropic") {
        for style in STYLES {
            let r = anthropic_request_to(style, &body, &[]).unwrap_or_else(|e| {
                panic!("{}: {e}\n{}", style.name(), String::from_utf8_lossy(&body));
            });
            if style != Style::Anthropic {
                // The recorded turns carry signed thinking: it cannot travel, and is named.
                let v: Value = serde_json::from_slice(&body).unwrap();
                if v["messages"].to_string().contains(r#""type":"thinking""#) {
                    assert!(!r.dropped.is_empty(), "{}: thinking left out silently", style.name());
                }
            }
        }
        anthropic_request(&body);
        for n in (0..body.len()).step_by(11) {
            anthropic_request(&body[..n]);
        }
    }
}

#[test]
fn recorded_gemini_requests_translate_for_every_upstream() {
    for body in recorded_requests("gemini") {
        for style in STYLES {
            gemini_request_to(style, "gemini-2.5-flash", false, &body).unwrap_or_else(|e| {
                panic!("{}: {e}\n{}", style.name(), String::from_utf8_lossy(&body));
            });
        }
        gemini_request(&body);
        for n in (0..body.len()).step_by(11) {
            gemini_request(&body[..n]);
        }
    }
}

#[test]
fn recorded_responses_requests_translate_for_every_upstream() {
    for body in recorded_requests("openai-responses") {
        for style in STYLES {
            responses_request_to(style, &body).unwrap_or_else(|e| {
                panic!("{}: {e}\n{}", style.name(), String::from_utf8_lossy(&body));
            });
        }
        responses_request(&body);
        for n in (0..body.len()).step_by(11) {
            responses_request(&body[..n]);
        }
    }
}

#[test]
fn stream_bodies_on_the_recorded_streams() {
    for style in STYLES {
        for (path, stream) in common::captures(style) {
            if !stream {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            anthropic_stream(&bytes);
            gemini_stream(&bytes);
            responses_stream(&bytes);
            // A recorded stream cut anywhere still ends well formed.
            for n in (0..bytes.len()).step_by(bytes.len() / 16 + 1) {
                anthropic_stream(&bytes[..n]);
                gemini_stream(&bytes[..n]);
                responses_stream(&bytes[..n]);
            }
        }
    }
}

fn ev(data: &str) -> SseEvent {
    SseEvent { event: None, data: data.to_string(), id: None }
}

/// Two parallel calls streamed by an OpenAI upstream, their arguments in
/// pieces: two `tool_use` blocks, indexes 0 and 1, each with its own pieces.
#[test]
fn parallel_openai_calls_become_two_anthropic_blocks_in_order() {
    let chunk = |delta: &str, finish: &str| {
        format!(
            r#"{{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish}}}]}}"#
        )
    };
    let events = [
        chunk(r#"{"role":"assistant","content":"Let me check."}"#, "null"),
        chunk(
            r#"{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}"#,
            "null",
        ),
        chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}"#, "null"),
        chunk(r#"{"tool_calls":[{"index":0,"function":{"arguments":" \"Paris\"}"}}]}"#, "null"),
        chunk(
            r#"{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"add","arguments":"{\"a\":2,"}}]}"#,
            "null",
        ),
        chunk(r#"{"tool_calls":[{"index":1,"function":{"arguments":"\"b\":2}"}}]}"#, "null"),
        chunk("{}", r#""tool_calls""#),
        "[DONE]".to_string(),
    ];
    let events: Vec<SseEvent> = events.iter().map(|e| ev(e)).collect();
    let lines = anthropic_lines(Style::OpenAi, &events);
    check_anthropic(&lines);
    let parsed: Vec<Value> =
        lines.iter().map(|l| serde_json::from_str(l.split_once("\ndata: ").unwrap().1.trim()).unwrap()).collect();
    let starts: Vec<(u64, String)> = parsed
        .iter()
        .filter(|v| v["type"] == "content_block_start")
        .map(|v| (v["index"].as_u64().unwrap(), v["content_block"]["type"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(starts, [(0, "text".into()), (1, "tool_use".into()), (2, "tool_use".into())]);
    let args = |index: u64| -> String {
        parsed
            .iter()
            .filter(|v| v["type"] == "content_block_delta" && v["index"] == index)
            .map(|v| v["delta"]["partial_json"].as_str().unwrap_or_default())
            .collect()
    };
    assert_eq!(args(1), r#"{"city": "Paris"}"#);
    assert_eq!(args(2), r#"{"a":2,"b":2}"#);
    let stop = parsed.iter().find(|v| v["type"] == "message_delta").unwrap();
    assert_eq!(stop["delta"]["stop_reason"], "tool_use");

    // The same upstream stream on the Gemini surface: two whole calls in the last chunk.
    let lines = gemini_lines(Style::OpenAi, &events);
    check_gemini(&lines);
    let last: Value = serde_json::from_str(lines.last().unwrap().trim().strip_prefix("data: ").unwrap()).unwrap();
    let calls: Vec<(&str, &Value)> = last["candidates"][0]["content"]["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["functionCall"]["name"].as_str().unwrap(), &p["functionCall"]["args"]))
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!((calls[0].0, calls[0].1["city"].as_str()), ("get_weather", Some("Paris")));
    assert_eq!((calls[1].0, calls[1].1["b"].as_u64()), ("add", Some(2)));
}

/// A Chat Completions upstream may interleave the argument pieces of
/// parallel calls (index 0, 1, 0, 1). The Anthropic and Responses streams
/// still frame each call whole, in the order the calls started, every piece
/// in its own call's block or item.
#[test]
fn interleaved_call_arguments_come_out_whole_and_in_order() {
    let tc = |index: u32, extra: &str| {
        format!(
            r#"{{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{{"index":0,"delta":{{"tool_calls":[{{"index":{index}{extra}}}]}},"finish_reason":null}}]}}"#
        )
    };
    let events = [
        tc(0, r#","id":"a","type":"function","function":{"name":"get_weather","arguments":"{\"city\":"}"#),
        tc(1, r#","id":"b","type":"function","function":{"name":"add","arguments":"{\"a\":2,"}"#),
        tc(0, r#","function":{"arguments":" \"Paris\"}"}"#),
        tc(1, r#","function":{"arguments":"\"b\":2}"}"#),
        r#"{"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#.to_string(),
        "[DONE]".to_string(),
    ];
    let events: Vec<SseEvent> = events.iter().map(|e| ev(e)).collect();

    let lines = anthropic_lines(Style::OpenAi, &events);
    check_anthropic(&lines);
    let parsed: Vec<Value> =
        lines.iter().map(|l| serde_json::from_str(l.split_once("\ndata: ").unwrap().1.trim()).unwrap()).collect();
    assert!(parsed.iter().all(|v| v["type"] != "error"), "{lines:?}");
    let starts: Vec<(u64, &str)> = parsed
        .iter()
        .filter(|v| v["type"] == "content_block_start")
        .map(|v| (v["index"].as_u64().unwrap(), v["content_block"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(starts, [(0, "get_weather"), (1, "add")]);
    let args = |index: u64| -> String {
        parsed
            .iter()
            .filter(|v| v["type"] == "content_block_delta" && v["index"] == index)
            .map(|v| v["delta"]["partial_json"].as_str().unwrap_or_default())
            .collect()
    };
    assert_eq!(args(0), r#"{"city": "Paris"}"#);
    assert_eq!(args(1), r#"{"a":2,"b":2}"#);
    assert_eq!(parsed.iter().find(|v| v["type"] == "message_delta").unwrap()["delta"]["stop_reason"], "tool_use");

    let lines = responses_lines(Style::OpenAi, &events);
    check_responses(&lines);
    let parsed: Vec<Value> =
        lines.iter().map(|l| serde_json::from_str(l.split_once("\ndata: ").unwrap().1.trim()).unwrap()).collect();
    assert!(parsed.iter().all(|v| v["type"] != "error"), "{lines:?}");
    let done: Vec<(&str, &str)> = parsed
        .iter()
        .filter(|v| v["type"] == "response.function_call_arguments.done")
        .map(|v| (v["name"].as_str().unwrap(), v["arguments"].as_str().unwrap()))
        .collect();
    assert_eq!(done, [("get_weather", r#"{"city": "Paris"}"#), ("add", r#"{"a":2,"b":2}"#)]);
    let completed = parsed.last().unwrap();
    assert_eq!(completed["type"], "response.completed");
    let output = completed["response"]["output"].as_array().unwrap();
    assert_eq!(output.len(), 2);
    assert_eq!(output[1]["arguments"], r#"{"a":2,"b":2}"#);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn request_bodies_on_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        anthropic_request(&data);
        gemini_request(&data);
        responses_request(&data);
    }

    #[test]
    fn stream_bodies_on_random_event_sequences(data in proptest::collection::vec(any::<u8>(), 0..96)) {
        anthropic_stream(&data);
        gemini_stream(&data);
        responses_stream(&data);
        for style in STYLES {
            let events = built_events(style, &data);
            check_anthropic(&anthropic_lines(style, &events));
            check_gemini(&gemini_lines(style, &events));
            check_responses(&responses_lines(style, &events));
        }
    }
}
