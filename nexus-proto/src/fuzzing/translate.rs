//! The translation fuzz target's body: [`translate`] reads arbitrary bytes as
//! an OpenAI request to translate, and as a provider response and stream to
//! translate back.

use serde_json::Value;

use crate::provider::Style;
use crate::sse::SseEvent;
use crate::translate::{
    openai_request_bytes_to, openai_request_to, response_to_openai, response_to_openai_bytes, response_to_openai_with,
    CompletionMeta, StreamTranslator,
};

/// Translates `data` both ways, in every direction the gateway uses:
///
/// - as an OpenAI Chat Completions request body into Anthropic and Gemini:
///   (and OpenAI Responses): a request or a typed 4xx error, the same every time; a translated body
///   is a JSON object; an OpenAI pass-through forwards the bytes unchanged; read from bytes
///   (where the common shape is read without a tree) it is what the same JSON gives as a `Value`;
/// - as an Anthropic or Gemini response body back into a completion: an
///   object with one choice, or a typed error; written as bytes (where an
///   Anthropic answer of the common shape is read in one borrowed pass) it
///   is the completion the decoded turn gives;
/// - as an Anthropic or Gemini SSE stream back into OpenAI chunks, whole and
///   in data-derived chunks: every line is `data: <json>` or `data: [DONE]`,
///   nothing follows `[DONE]` or an error line, and chunking changes nothing.
pub fn translate(data: &[u8]) {
    let tree: Option<Value> = serde_json::from_slice(data).ok();
    for style in [Style::Anthropic, Style::Gemini, Style::OpenAi, Style::OpenAiResponses] {
        let first = openai_request_bytes_to(style, data);
        assert_eq!(first, openai_request_bytes_to(style, data), "request translation is not deterministic");
        if let (Some(tree), true) = (&tree, style != Style::OpenAi) {
            assert_eq!(first, openai_request_to(style, tree), "{}: bytes and tree translate differently", style.name());
        }
        match first {
            Ok(req) if style == Style::OpenAi => assert_eq!(req.body, data, "pass-through changed the bytes"),
            Ok(req) => {
                let body: Value = serde_json::from_slice(&req.body)
                    .unwrap_or_else(|e| panic!("{} body is not JSON: {e}", style.name()));
                assert!(body.is_object(), "{} body is not an object", style.name());
                assert!(!req.model.is_empty(), "a translated request without a model");
                let _ = (req.url("http://h"), req.headers(Some("k")));
            }
            Err(e) => {
                assert!((400..600).contains(&e.status), "status {} out of range", e.status);
                assert!(e.to_json()["error"]["message"].is_string(), "error without a message");
            }
        }
    }

    for style in [Style::Anthropic, Style::Gemini, Style::OpenAiResponses] {
        match response_to_openai(style, data, "m") {
            Ok(v) => assert_eq!(v["choices"].as_array().map(Vec::len), Some(1), "completion without one choice"),
            Err(e) => assert!((400..600).contains(&e.status), "status {} out of range", e.status),
        }
        let meta = CompletionMeta::new("m");
        match (response_to_openai_bytes(style, data, &meta), response_to_openai_with(style, data, &meta)) {
            (Ok(bytes), Ok(tree)) => {
                let written: Value = serde_json::from_slice(&bytes.body).expect("a completion is JSON");
                assert_eq!(written, tree, "{}: bytes and turn give different completions", style.name());
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "{}: bytes and turn fail differently", style.name()),
            (a, b) => panic!("{}: bytes {:?}, turn {:?}", style.name(), a.map(|c| c.body), b),
        }

        let events = super::decode_sse(&[data]);
        let whole = stream_lines(style, &events);
        check_lines(&whole);
        let mut rng = super::rng_for(data);
        let chunked = super::decode_sse(&super::chunk(data, &mut rng));
        assert_eq!(stream_lines(style, &chunked), whole, "chunking changed the translated stream");
    }
}

fn stream_lines(style: Style, events: &[SseEvent]) -> Vec<String> {
    let mut t = StreamTranslator::new(style, "m", true);
    let mut out: Vec<String> = events.iter().flat_map(|ev| t.push(ev)).collect();
    out.extend(t.finish());
    assert!(t.finish().is_empty(), "finish yielded twice");
    out
}

/// Each line is one SSE `data:` event holding JSON or `[DONE]`; the stream
/// stops at `[DONE]` or at its first error line.
fn check_lines(lines: &[String]) {
    for (i, line) in lines.iter().enumerate() {
        let payload = line
            .strip_prefix("data: ")
            .and_then(|l| l.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("not one SSE data event: {line:?}"));
        let last = i + 1 == lines.len();
        if payload == "[DONE]" {
            assert!(last, "lines after [DONE]");
            continue;
        }
        let v: Value = serde_json::from_str(payload).unwrap_or_else(|e| panic!("chunk is not JSON ({e}): {payload}"));
        if v.get("error").is_some() {
            assert!(last, "lines after an error line");
        }
    }
}
