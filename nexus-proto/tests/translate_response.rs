//! Provider responses translated to OpenAI: every real capture in the wire
//! corpus (whole bodies and SSE streams, Anthropic and Gemini) becomes a
//! `chat.completion` or a chunk stream that says what the corpus
//! expectation says — text, every tool call with its id, name and input,
//! usage, thinking — with the finish reason the contract maps the provider's
//! stop to; the official `openai` SDK reads each one back to the same
//! summary; errors keep the provider's message and status.

mod common;
mod translate_support;

use std::path::{Path, PathBuf};

use nexus_proto::provider::{decode_stream_chunks, CallIds};
use nexus_proto::translate::{
    error_to_openai, response_to_openai, response_to_openai_bytes, response_to_openai_with, turn_to_openai,
    CompletionMeta, StreamTranslator,
};
use nexus_proto::{SseDecoder, SseEvent, Style};
use serde_json::{json, Value};
use translate_support::{assemble, oracle, oracle_batch, Assembled, Job};

/// The OpenAI finish reason the contract gives a provider stop: any tool
/// call ⇒ `tool_calls`; an output cap ⇒ `length`; a filter or refusal ⇒
/// `content_filter`; any other end ⇒ `stop`.
fn expected_finish(raw_stop: Option<&str>, has_calls: bool) -> &'static str {
    if has_calls {
        return "tool_calls";
    }
    match raw_stop {
        Some("max_tokens" | "MAX_TOKENS") => "length",
        Some("refusal" | "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII") => "content_filter",
        _ => "stop",
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Corpus captures of both translated styles, with whether each is a stream.
fn captures() -> Vec<(Style, PathBuf, bool)> {
    let mut out = Vec::new();
    for style in [Style::Anthropic, Style::Gemini] {
        for (path, stream) in common::captures(style) {
            out.push((style, path, stream));
        }
    }
    out
}

/// Whether the expectation is an error capture (no turn at all).
fn is_error_capture(want: &Value) -> bool {
    want["error"]["type"].is_string() && want["stop"].is_null()
}

/// Translates a captured stream, feeding the SSE decoder `piece`-byte chunks.
fn translate_stream(style: Style, bytes: &[u8], piece: usize, meta: Option<CompletionMeta>) -> Vec<String> {
    let mut t = match meta {
        Some(meta) => StreamTranslator::with_meta(style, meta, true),
        None => StreamTranslator::new(style, "gpt-compat", true),
    };
    let mut decoder = SseDecoder::new();
    let mut events: Vec<SseEvent> = Vec::new();
    let mut lines = Vec::new();
    for chunk in bytes.chunks(piece.max(1)) {
        decoder.feed(chunk, &mut events);
        for ev in events.drain(..) {
            lines.extend(t.push(&ev));
        }
    }
    decoder.finish(&mut events);
    for ev in events.drain(..) {
        lines.extend(t.push(&ev));
    }
    lines.extend(t.finish());
    lines
}

/// Checks a translated completion (as read back from chunks or a body)
/// against the capture's expectation.
fn check_against_expectation(path: &Path, got: &Assembled, want: &Value) {
    let name = path.display();
    assert_eq!(got.text, want["text"].as_str().unwrap(), "{name}: text");
    let want_calls = want["tool_calls"].as_array().unwrap();
    assert_eq!(got.calls.len(), want_calls.len(), "{name}: every tool call, none dropped");
    let bad_arguments = want["error"]["type"] == "invalid_tool_arguments";
    for (i, ((id, call_name, arguments), w)) in got.calls.iter().zip(want_calls).enumerate() {
        match w["id"].as_str() {
            Some(want_id) => assert_eq!(id, want_id, "{name}: call {i} id"),
            // The provider sent none: a generated id, unique within the turn.
            None => {
                assert!(id.starts_with("call_"), "{name}: generated id {id:?}");
                assert_eq!(got.calls.iter().filter(|c| &c.0 == id).count(), 1, "{name}: id {id} repeats");
            }
        }
        assert_eq!(call_name, w["name"].as_str().unwrap(), "{name}: call {i} name");
        if bad_arguments {
            // Cut short by the output cap: the raw text as the provider sent
            // it, which is not JSON (the SDK's partial parse is the expectation).
            assert!(serde_json::from_str::<Value>(arguments).is_err(), "{name}: {arguments}");
        } else {
            let input: Value =
                serde_json::from_str(arguments).unwrap_or_else(|e| panic!("{name}: arguments {arguments:?}: {e}"));
            assert_eq!(input, w["input"], "{name}: call {i} input");
        }
    }
    let want_finish = expected_finish(want["stop"].as_str(), !want_calls.is_empty());
    assert_eq!(got.finish.as_deref(), Some(want_finish), "{name}: finish_reason for stop {}", want["stop"]);
    if want["usage"]["input"].is_u64() {
        let usage = got.usage.as_ref().unwrap_or_else(|| panic!("{name}: usage missing"));
        assert_eq!(usage["prompt_tokens"], want["usage"]["input"], "{name}: prompt tokens");
        assert_eq!(usage["completion_tokens"], want["usage"]["output"], "{name}: completion tokens");
    }
    match want["thinking"].as_str() {
        Some(thinking) if !thinking.is_empty() => {
            assert_eq!(got.reasoning, thinking, "{name}: thinking")
        }
        _ => {}
    }
}

/// A `chat.completion` read the same way as a chunk stream, for one checker.
fn completion_as_assembled(v: &Value) -> Assembled {
    let choice = &v["choices"][0];
    let message = &choice["message"];
    Assembled {
        text: message["content"].as_str().unwrap_or_default().to_string(),
        reasoning: message["reasoning_content"].as_str().unwrap_or_default().to_string(),
        calls: message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                assert_eq!(c["type"], "function");
                (
                    c["id"].as_str().unwrap().to_string(),
                    c["function"]["name"].as_str().unwrap().to_string(),
                    c["function"]["arguments"].as_str().expect("arguments is a JSON string").to_string(),
                )
            })
            .collect(),
        finish: choice["finish_reason"].as_str().map(str::to_string),
        usage: v.get("usage").cloned(),
        error: None,
        done: true,
        role: message["role"].as_str().map(str::to_string),
    }
}

/// The oracle summary of a translated completion compared with the capture's
/// expectation (ids the provider did not send are generated, so only the
/// recorded ones are compared).
fn check_oracle_summary(path: &Path, summary: &Value, want: &Value) {
    let name = path.display();
    assert_eq!(summary["text"], want["text"], "{name}: oracle text");
    let (got_calls, want_calls) = (summary["tool_calls"].as_array().unwrap(), want["tool_calls"].as_array().unwrap());
    assert_eq!(got_calls.len(), want_calls.len(), "{name}: oracle tool calls");
    for (g, w) in got_calls.iter().zip(want_calls) {
        assert_eq!(g["name"], w["name"], "{name}");
        if w["id"].is_string() {
            assert_eq!(g["id"], w["id"], "{name}");
        }
        if want["error"]["type"] != "invalid_tool_arguments" {
            assert_eq!(g["input"], w["input"], "{name}");
        }
    }
    if want["error"]["type"] == "invalid_tool_arguments" {
        assert_eq!(summary["error"]["type"], "invalid_tool_arguments", "{name}: the SDK sees the cut arguments too");
    }
    let finish = expected_finish(want["stop"].as_str(), !want_calls.is_empty());
    assert_eq!(summary["stop"], finish, "{name}: oracle finish_reason");
    if want["usage"]["input"].is_u64() {
        assert_eq!(summary["usage"], want["usage"], "{name}: oracle usage");
    }
}

// ---------------------------------------------------------------- whole bodies

#[test]
fn corpus_bodies_become_completions_that_say_what_the_capture_says() {
    let mut checked = 0;
    for (style, path, stream) in captures() {
        if stream {
            continue;
        }
        let want = common::expected(&path);
        let bytes = read(&path);
        let result = response_to_openai(style, &bytes, "gpt-compat");
        if is_error_capture(&want) {
            let e = result.expect_err("an error capture");
            assert_eq!(
                e.message,
                want["error"]["message"].as_str().unwrap(),
                "{}: the upstream message is kept",
                path.display()
            );
            assert_eq!(e.code.as_deref(), want["error"]["type"].as_str(), "{}", path.display());
            continue;
        }
        let completion = result.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(completion["object"], "chat.completion");
        assert_eq!(completion["model"], "gpt-compat");
        assert!(completion["id"].as_str().unwrap().starts_with("chatcmpl-"));
        let message = &completion["choices"][0]["message"];
        assert_eq!(message["role"], "assistant");
        if message.get("tool_calls").is_some() && want["text"] == "" {
            assert!(message["content"].is_null(), "{}: content is null beside tool calls", path.display());
        }
        check_against_expectation(&path, &completion_as_assembled(&completion), &want);
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} bodies checked");
}

/// What a gateway writes straight to bytes is the tree's completion, key
/// for key, in OpenAI's key order, and the usage it notes is the one the
/// completion reports.
#[test]
fn corpus_bodies_written_as_bytes_are_the_trees_completion() {
    let mut checked = 0;
    for style in [Style::Anthropic, Style::Gemini, Style::OpenAiResponses] {
        for (path, stream) in common::captures(style) {
            if stream {
                continue;
            }
            let bytes = read(&path);
            let meta = CompletionMeta { id: String::new(), model: "gpt-compat".into(), created: 1_700_000_000 };
            match (response_to_openai_bytes(style, &bytes, &meta), response_to_openai_with(style, &bytes, &meta)) {
                (Ok(written), Ok(tree)) => {
                    let text = std::str::from_utf8(&written.body).unwrap();
                    let parsed: Value = serde_json::from_str(text).unwrap();
                    assert_eq!(parsed, tree, "{}", path.display());
                    let order: Vec<usize> = ["\"id\"", "\"object\"", "\"created\"", "\"model\"", "\"choices\""]
                        .iter()
                        .map(|k| text.find(k).unwrap_or_else(|| panic!("{}: no {k}", path.display())))
                        .collect();
                    assert!(order.windows(2).all(|w| w[0] < w[1]), "{}: keys out of order: {text}", path.display());
                    match written.usage {
                        Some(u) => {
                            assert_eq!(tree["usage"]["prompt_tokens"], u.prompt_tokens, "{}", path.display());
                            assert_eq!(tree["usage"]["completion_tokens"], u.completion_tokens, "{}", path.display());
                        }
                        None => assert!(tree.get("usage").is_none(), "{}", path.display()),
                    }
                    checked += 1;
                }
                (Err(a), Err(b)) => assert_eq!(a, b, "{}", path.display()),
                (a, b) => panic!("{}: bytes {:?}, tree {:?}", path.display(), a.err(), b.err()),
            }
        }
    }
    assert!(checked >= 15, "only {checked} bodies compared");
}

#[test]
fn corpus_completions_pass_the_openai_sdk() {
    let jobs: Vec<_> = captures().into_iter().filter(|(_, _, stream)| !stream).collect();
    let runs: Vec<Job<'_>> = jobs
        .iter()
        .map(|(style, path, _)| {
            let bytes = match response_to_openai(*style, &read(path), "gpt-compat") {
                Ok(v) => serde_json::to_vec(&v).unwrap(),
                Err(e) => serde_json::to_vec(&e.to_json()).unwrap(),
            };
            Job { script: "validate_response.py", style: "openai", bytes, args: vec![] }
        })
        .collect();
    let Some(verdicts) = oracle_batch(&runs) else {
        return;
    };
    for ((_, path, _), v) in jobs.iter().zip(&verdicts) {
        assert!(v.ok, "{}: the openai SDK refused the translation:\n{}\n{}", path.display(), v.stdout, v.stderr);
        // The one field the SDK's model does not declare is the reasoning text.
        for line in v.stderr.lines().filter(|l| l.contains("unknown field")) {
            assert!(line.contains("reasoning_content"), "{}: {line}", path.display());
        }
        let want = common::expected(path);
        let summary = v.summary();
        if is_error_capture(&want) {
            assert_eq!(summary["error"]["message"], want["error"]["message"], "{}", path.display());
        } else {
            check_oracle_summary(path, &summary, &want);
        }
    }
}

// ---------------------------------------------------------------- streams

#[test]
fn corpus_streams_become_chunk_streams_that_say_what_the_capture_says() {
    let mut checked = 0;
    for (style, path, stream) in captures() {
        if !stream {
            continue;
        }
        let want = common::expected(&path);
        let bytes = read(&path);
        let whole = translate_stream(style, &bytes, bytes.len(), None);
        // Chunking of the upstream bytes never changes the translation.
        for piece in [1, 7, 64] {
            assert_eq!(translate_stream(style, &bytes, piece, None), whole, "{}: {piece}-byte pieces", path.display());
        }
        let got = assemble(&whole);
        if is_error_capture(&want) {
            let err = got.error.unwrap_or_else(|| panic!("{}: no error chunk", path.display()));
            assert_eq!(err["message"], want["error"]["message"]);
            assert!(!got.done, "{}: [DONE] after an error", path.display());
            continue;
        }
        assert!(got.done, "{}: the stream ends with [DONE]", path.display());
        assert_eq!(got.role.as_deref(), Some("assistant"));
        check_against_expectation(&path, &got, &want);
        // The stream says what the whole-body translation of the same turn says.
        // (`chatcmpl-x` makes generated call ids `call_x_<n>`.)
        let turn = decode_stream_chunks(style, [bytes.as_slice()], &mut CallIds::new("call_x_")).unwrap();
        let meta = CompletionMeta { id: "chatcmpl-x".into(), model: "m".into(), created: 1 };
        let mut as_body = completion_as_assembled(&turn_to_openai(&turn, &meta));
        let streamed = assemble(&translate_stream(style, &bytes, bytes.len(), Some(meta)));
        as_body.role = streamed.role.clone();
        assert_eq!(streamed, as_body, "{}", path.display());
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} streams checked");
}

#[test]
fn corpus_chunk_streams_pass_the_openai_sdk() {
    let jobs: Vec<_> = captures().into_iter().filter(|(_, _, stream)| *stream).collect();
    let runs: Vec<Job<'_>> = jobs
        .iter()
        .map(|(style, path, _)| {
            let bytes = translate_stream(*style, &read(path), 5, None).concat().into_bytes();
            Job { script: "parse_stream.py", style: "openai", bytes, args: vec![] }
        })
        .collect();
    let Some(verdicts) = oracle_batch(&runs) else {
        return;
    };
    for (((_, path, _), v), run) in jobs.iter().zip(&verdicts).zip(&runs) {
        assert!(
            v.ok,
            "{}: the openai SDK could not read the translated stream:\n{}\n{}\n{}",
            path.display(),
            v.stdout,
            v.stderr,
            String::from_utf8_lossy(&run.bytes)
        );
        let want = common::expected(path);
        let summary = v.summary();
        if is_error_capture(&want) {
            assert_eq!(summary["error"]["message"], want["error"]["message"], "{}", path.display());
        } else {
            check_oracle_summary(path, &summary, &want);
        }
    }
}

#[test]
fn a_mid_stream_error_becomes_an_error_chunk_and_nothing_after() {
    let sse = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"c\",\"content\":[],\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n",
        "event: error\n",
        "data: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"lo\"}}\n\n",
    );
    let lines = translate_stream(Style::Anthropic, sse.as_bytes(), 3, None);
    let got = assemble(&lines);
    assert_eq!(got.text, "Hel");
    let err = got.error.expect("an error chunk");
    // The upstream's words, with the status Anthropic's type stands for.
    assert_eq!(err["message"], "Overloaded");
    assert_eq!(err["type"], "server_error");
    assert_eq!(err["code"], "overloaded_error");
    assert!(!got.done);
    if let Some(v) = oracle("parse_stream.py", "openai", lines.concat().as_bytes(), &[]) {
        assert!(v.ok, "{}\n{}", v.stdout, v.stderr);
        let s = v.summary();
        assert_eq!(s["text"], "Hel");
        assert_eq!(s["error"]["message"], "Overloaded");
    }
}

#[test]
fn a_stream_cut_before_its_end_is_an_error_not_a_completion() {
    // Gemini's end is the finishReason; this stream never sends one.
    let sse = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"Hi\"}]},\"index\":0}],\"responseId\":\"r\"}\r\n\r\n";
    let got = assemble(&translate_stream(Style::Gemini, sse.as_bytes(), 4, None));
    assert_eq!(got.text, "Hi");
    assert_eq!(got.finish, None);
    assert_eq!(got.error.expect("an error chunk")["type"], "server_error");
    assert!(!got.done);
}

#[test]
fn usage_is_sent_only_when_asked_for() {
    let path = common::shared_dir().join("wire-corpus/anthropic/vai_text_stream.sse");
    let bytes = read(&path);
    let run = |include_usage: bool| {
        let mut t = StreamTranslator::new(Style::Anthropic, "m", include_usage);
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        decoder.feed(&bytes, &mut events);
        decoder.finish(&mut events);
        let mut lines: Vec<String> = events.iter().flat_map(|e| t.push(e)).collect();
        lines.extend(t.finish());
        lines
    };
    let with = run(true);
    let usage_chunk: Value = serde_json::from_str(with[with.len() - 2].strip_prefix("data: ").unwrap().trim()).unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert!(usage_chunk["usage"]["total_tokens"].is_u64());
    assert_eq!(with.last().unwrap(), "data: [DONE]\n\n");
    let without = run(false);
    assert_eq!(without.len(), with.len() - 1);
    assert!(assemble(&without).usage.is_none());
}

// ---------------------------------------------------------------- errors

/// (upstream style, upstream status, upstream body, OpenAI status, OpenAI type, message kept).
type ErrorCase = (Style, u16, Vec<u8>, u16, &'static str, &'static str);

#[test]
fn provider_errors_keep_the_upstream_message_and_status() {
    let openai_err = read(&common::shared_dir().join("wire-corpus/openai/vai_error_body.json"));
    let cases: Vec<ErrorCase> = vec![
        (
            Style::Anthropic,
            400,
            br#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}"#
                .to_vec(),
            400,
            "invalid_request_error",
            "messages: roles must alternate",
        ),
        (
            Style::Anthropic,
            401,
            br#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#.to_vec(),
            401,
            "authentication_error",
            "invalid x-api-key",
        ),
        (
            Style::Anthropic,
            529,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#.to_vec(),
            503,
            "server_error",
            "Overloaded",
        ),
        (
            Style::Gemini,
            429,
            br#"{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED"}}"#.to_vec(),
            429,
            "rate_limit_error",
            "Resource has been exhausted",
        ),
        (
            Style::Gemini,
            400,
            read(&common::shared_dir().join("wire-corpus/gemini/fb_error_api_key.json")),
            400,
            "invalid_request_error",
            "API key not valid. Please pass a valid API key.",
        ),
        (Style::Gemini, 502, b"<html>Bad Gateway</html>".to_vec(), 502, "server_error", "<html>Bad Gateway</html>"),
        (Style::OpenAi, 400, openai_err.clone(), 400, "invalid_request_error", ""),
    ];
    let mut runs = Vec::new();
    for (style, status, body, want_status, want_type, want_message) in cases {
        let e = error_to_openai(style, status, &body);
        assert_eq!((e.status, e.kind.as_str()), (want_status, want_type), "{style:?} {status}");
        if !want_message.is_empty() {
            assert_eq!(e.message, want_message);
        }
        let v = e.to_json();
        assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        runs.push(Job {
            script: "validate_response.py",
            style: "openai",
            bytes: serde_json::to_vec(&v).unwrap(),
            args: vec![],
        });
    }
    for v in oracle_batch(&runs).unwrap_or_default() {
        assert!(v.ok, "{}\n{}", v.stdout, v.stderr);
        assert!(v.summary()["error"]["message"].is_string());
    }
    // OpenAI's own error keeps its own message.
    let original: Value = serde_json::from_slice(&openai_err).unwrap();
    assert_eq!(
        error_to_openai(Style::OpenAi, 400, &openai_err).message,
        original["error"]["message"].as_str().unwrap()
    );
}

#[test]
fn undecodable_success_bodies_are_a_bad_gateway() {
    for style in [Style::Anthropic, Style::Gemini] {
        let e = response_to_openai(style, b"{\"content\": 5", "m").unwrap_err();
        assert_eq!((e.status, e.kind.as_str()), (502, "server_error"), "{style:?}");
    }
}

#[test]
fn gemini_generated_ids_differ_between_responses() {
    let body = |rid: &str| {
        format!(
            r#"{{"candidates":[{{"content":{{"role":"model","parts":[{{"functionCall":{{"name":"f","args":{{}}}}}},{{"functionCall":{{"name":"f","args":{{}}}}}}]}},"finishReason":"STOP","index":0}}],"responseId":"{rid}"}}"#
        )
    };
    let ids = |v: &Value| -> Vec<String> {
        v["choices"][0]["message"]["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["id"].as_str().unwrap().to_string())
            .collect()
    };
    let a = ids(&response_to_openai(Style::Gemini, body("r1").as_bytes(), "m").unwrap());
    let b = ids(&response_to_openai(Style::Gemini, body("r2").as_bytes(), "m").unwrap());
    assert_eq!(a.len(), 2);
    assert_ne!(a[0], a[1]);
    assert!(a.iter().all(|id| !b.contains(id)), "{a:?} vs {b:?}: ids must not repeat within a conversation");
    // Without a response id the body's fingerprint keeps them apart.
    let strip = |s: String| s.replace(r#","responseId":"r1""#, "").replace(r#","responseId":"r2""#, "");
    let c = ids(&response_to_openai(Style::Gemini, strip(body("r1")).as_bytes(), "m").unwrap());
    let d =
        ids(&response_to_openai(Style::Gemini, strip(body("r1")).replace("\"f\"", "\"g\"").as_bytes(), "m").unwrap());
    assert!(c.iter().all(|id| !d.contains(id)), "{c:?} vs {d:?}");
}
