//! The fake provider's HTTP behaviour, wire shapes (checked by the official
//! SDKs through the oracles), rejections, turn selection and lifecycle.

mod fake_support;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use fake_support::{auth_headers, body, call, call_target, call_with, sse_events, user, wrap, Client, End, KEY};
use nexus_tests::fake::{ExpectFinal, FakeProvider, Script, Scripts, Style, Turn};
use nexus_tests::oracle;
use serde_json::{json, Value};

const THINKING: &str = "Let me think about the weather in Paris.";
const SIGNATURE: &str = "EqQBCkYIBxgCKkBsaWduYXR1cmU=";
const TEXT: &str = "I'll check the weather — un instant, s'il vous plaît.";
const ARGS_1: &str = r#"{"city": "Paris", "units": "c"}"#;
const ARGS_2: &str = r#"{"a":2,"b":2}"#;

fn rich_turn() -> Turn {
    Turn::default()
        .thinking(THINKING, SIGNATURE)
        .with_text(TEXT)
        .call("get_weather", ARGS_1)
        .call_with_id("call_fixed_1", "add", ARGS_2)
        .usage(31, 17)
}

fn scripts() -> Scripts {
    Scripts::new(KEY)
        .model("m-rich", Script::new(vec![rich_turn(), Turn::text("It is 4°C in Paris. Grüße!").usage(50, 9)]))
        .model("m-ids", Script::new(vec![Turn::default().call("lookup", r#"{"q":"x"}"#).with_ids()]))
        .model("m-three", Script::new(vec![Turn::text("first"), Turn::text("second"), Turn::text("third")]))
        .model(
            "m-final",
            Script::new(vec![Turn::default().call("lookup", "{}"), Turn::text("done")]).expect_final(ExpectFinal {
                tool_result_contains: vec!["result 0".to_string()],
                tool_results: Some(1),
                messages: None,
            }),
        )
}

/// What the oracle summary of `rich_turn()` must be in `style`, from the script
/// and each provider's documented vocabulary.
fn assert_rich_summary(style: Style, s: &Value) {
    assert_eq!(s["text"], TEXT, "{style:?}: text");
    assert_eq!(s["usage"], json!({"input": 31, "output": 17}), "{style:?}: usage");
    let (stop, thinking) = match style {
        Style::Anthropic => ("tool_use", json!(THINKING)),
        // Chat Completions has no reasoning output.
        Style::OpenAi => ("tool_calls", Value::Null),
        // Gemini finishes function-call turns with STOP.
        Style::Gemini => ("STOP", json!(THINKING)),
        // Responses has no stop string; the oracle derives the neutral one.
        Style::OpenAiResponses => ("tool_use", json!(THINKING)),
    };
    assert_eq!(s["stop"], stop, "{style:?}: stop");
    assert_eq!(s["thinking"], thinking, "{style:?}: thinking");
    let calls = s["tool_calls"].as_array().expect("tool_calls");
    assert_eq!(calls.len(), 2, "{style:?}: two calls");
    assert_eq!(calls[0]["name"], "get_weather");
    assert_eq!(calls[0]["input"], json!({"city": "Paris", "units": "c"}));
    assert_eq!(calls[1]["name"], "add");
    assert_eq!(calls[1]["input"], json!({"a": 2, "b": 2}));
    match style {
        Style::Anthropic => {
            assert!(calls[0]["id"].as_str().is_some_and(|id| id.starts_with("toolu_") && id.len() > 10), "{calls:?}");
            assert_eq!(calls[1]["id"], "call_fixed_1");
        }
        Style::OpenAi | Style::OpenAiResponses => {
            assert!(calls[0]["id"].as_str().is_some_and(|id| id.starts_with("call_") && id.len() > 10), "{calls:?}");
            assert_eq!(calls[1]["id"], "call_fixed_1");
        }
        // Gemini sends calls without ids unless the turn says with_ids.
        Style::Gemini => assert!(calls.iter().all(|c| c["id"].is_null()), "{calls:?}"),
    }
}

fn no_unknown_fields(run: &oracle::OracleRun) {
    // Every recorded Responses object carries `store`, which the SDK's
    // `Response` model lacks (the oracle README lists it): the fake sends it as the API does.
    let unknown = run.stderr.lines().filter(|l| l.contains("unknown field") && !l.ends_with("unknown field: store"));
    assert_eq!(unknown.count(), 0, "fields the SDK does not know: {}", run.stderr);
}

#[test]
fn keep_alive_serves_three_requests_on_one_connection() {
    let fake = FakeProvider::start(scripts());
    let mut c = Client::connect(fake.addr());
    for (i, style) in Style::ALL.into_iter().enumerate() {
        let headers = auth_headers(style, Some(KEY));
        let refs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let b = body(style, "m-three", i % 3, false).to_string();
        let r = c.request("POST", &call_target(style, "m-three", false), &refs, b.as_bytes());
        assert_eq!(r.status, 200, "{style:?}: {}", r.text());
        assert_eq!(r.end, End::Complete);
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert!(r.header("connection").is_none(), "keep-alive is the HTTP/1.1 default");
    }
    let conns: Vec<u64> = fake.requests().iter().map(|r| r.connection).collect();
    assert_eq!(conns.len(), Style::ALL.len());
    assert!(conns.iter().all(|&c| c == conns[0]), "one connection: {conns:?}");
    let turns: Vec<Option<usize>> = fake.requests().iter().map(|r| r.turn).collect();
    assert_eq!(turns, vec![Some(0), Some(1), Some(2), Some(0)]);
}

#[test]
fn connection_close_is_honoured() {
    let fake = FakeProvider::start(scripts());
    let mut c = Client::connect(fake.addr());
    let b = body(Style::OpenAi, "m-three", 0, false).to_string();
    let r = c.request(
        "POST",
        "/v1/chat/completions",
        &[("Authorization", "Bearer test-key"), ("Connection", "close")],
        b.as_bytes(),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.is_closed(), "the server closes after answering");
}

#[test]
fn chunked_request_body_with_expect_continue() {
    let fake = FakeProvider::start(scripts());
    let mut c = Client::connect(fake.addr());
    let payload = body(Style::Anthropic, "m-three", 1, false).to_string();
    c.send_raw(
        format!(
            "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: {KEY}\r\nanthropic-version: 2023-06-01\r\n\
             Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
        )
        .as_bytes(),
    );
    let (status, _) = c.read_head().expect("interim response");
    assert_eq!(status, 100, "the server asks for the body");
    let bytes = payload.as_bytes();
    let (a, rest) = bytes.split_at(7);
    let (b, rest) = rest.split_at(rest.len() / 2);
    let mut raw = Vec::new();
    for part in [a, b, rest] {
        raw.extend_from_slice(format!("{:X};ext=1\r\n", part.len()).as_bytes());
        raw.extend_from_slice(part);
        raw.extend_from_slice(b"\r\n");
    }
    raw.extend_from_slice(b"0\r\nX-Trailer: t\r\n\r\n");
    c.send_raw(&raw);
    let r = c.read_response();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["content"][0]["text"], "second");
    let rec = fake.requests();
    assert_eq!(rec.len(), 1);
    assert!(rec[0].sent_continue);
    assert_eq!(rec[0].body, bytes, "the de-chunked body is recorded byte for byte");
    // The connection stays usable after a chunked request.
    let again = c.request("POST", "/v1/messages", &[("x-api-key", KEY), ("anthropic-version", "2023-06-01")], bytes);
    assert_eq!(again.status, 200);
}

#[test]
fn malformed_http_is_refused_with_400_and_close() {
    let fake = FakeProvider::start(scripts());
    let mut c = Client::connect(fake.addr());
    c.send_raw(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n");
    let r = c.read_response();
    assert_eq!(r.status, 400);
    assert!(c.is_closed());
    let mut c = Client::connect(fake.addr());
    c.send_raw(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    assert_eq!(c.read_response().status, 400, "bad chunk size");
}

#[test]
fn nonstreaming_bodies_pass_the_official_sdks() {
    let fake = FakeProvider::start(scripts());
    for style in Style::ALL {
        let r = call(&fake, style, "m-rich", 0, false);
        assert_eq!(r.status, 200, "{style:?}: {}", r.text());
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("content-length"), Some(r.body.len().to_string().as_str()));
        let Some(run) = oracle::validate_response(style, &r.body) else {
            return;
        };
        assert!(run.ok, "{style:?}: {}\n{}", run.stdout, r.text());
        no_unknown_fields(&run);
        assert_rich_summary(style, run.summary.as_ref().expect("summary"));
        // The scripted argument text is sent byte for byte.
        let v = r.json();
        let args_1 = match style {
            Style::Anthropic => v["content"][2]["input"].clone(),
            Style::OpenAi => {
                json!(v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"])
            }
            Style::Gemini => v["candidates"][0]["content"]["parts"][2]["functionCall"]["args"].clone(),
            // reasoning, message, then the calls.
            Style::OpenAiResponses => json!(v["output"][2]["arguments"]),
        };
        match style {
            Style::OpenAi | Style::OpenAiResponses => assert_eq!(args_1, ARGS_1),
            _ => assert!(r.text().contains(ARGS_1), "{style:?}: raw args in {}", r.text()),
        }
        assert!(!args_1.is_null());
    }
}

#[test]
fn nonstreaming_body_key_order_and_fields_follow_the_apis() {
    let fake = FakeProvider::start(scripts());
    let a = call(&fake, Style::Anthropic, "m-rich", 1, false).text();
    assert!(a.starts_with(r#"{"id":"msg_"#), "{a}");
    assert!(a.contains(r#""type":"message","role":"assistant","model":"m-rich","content":[{"type":"text""#), "{a}");
    assert!(a.contains(r#""stop_reason":"end_turn","stop_sequence":null"#), "{a}");
    let o = call(&fake, Style::OpenAi, "m-rich", 1, false).json();
    assert_eq!(o["object"], "chat.completion");
    assert_eq!(o["choices"][0]["finish_reason"], "stop");
    assert!(o["choices"][0]["message"].get("tool_calls").is_none(), "no tool_calls key without calls");
    assert_eq!(o["usage"]["total_tokens"], 59);
    let g = call(&fake, Style::Gemini, "m-rich", 1, false).json();
    assert_eq!(g["candidates"][0]["content"]["role"], "model");
    assert_eq!(g["usageMetadata"]["totalTokenCount"], 59);
    assert_eq!(g["modelVersion"], "m-rich");
}

fn assert_one_event_per_chunk(style: Style, chunks: &[Vec<u8>]) {
    let sep: &[u8] = if style == Style::Gemini { b"\r\n\r\n" } else { b"\n\n" };
    for chunk in chunks {
        assert!(
            chunk.ends_with(sep),
            "{style:?}: chunk ends with its blank line: {:?}",
            String::from_utf8_lossy(chunk)
        );
        let inner = &chunk[..chunk.len() - sep.len()];
        assert!(!inner.windows(sep.len()).any(|w| w == sep), "{style:?}: one event per chunk");
    }
}

#[test]
fn streams_pass_the_official_sdks_at_every_split() {
    let fake = FakeProvider::start(scripts());
    for style in Style::ALL {
        let r = call(&fake, style, "m-rich", 0, true);
        assert_eq!(r.status, 200, "{style:?}: {}", r.text());
        assert_eq!(r.end, End::Complete);
        assert_eq!(r.header("content-type"), Some("text/event-stream"));
        assert_eq!(r.header("transfer-encoding"), Some("chunked"));
        let chunks = r.chunks.as_ref().expect("chunked");
        assert!(chunks.len() > 8, "{style:?}: streamed in many events, got {}", chunks.len());
        assert_one_event_per_chunk(style, chunks);
        let Some(run) = oracle::parse_stream(style, &r.body, &["--check-splits"]) else {
            return;
        };
        assert!(run.ok, "{style:?}: {}\n{}", run.stdout, r.text());
        assert!(!run.stderr.contains("note:"), "{style:?}: {}", run.stderr);
        assert_rich_summary(style, run.summary.as_ref().expect("summary"));
    }
}

#[test]
fn anthropic_stream_has_the_real_event_sequence() {
    let fake = FakeProvider::start(scripts());
    let r = call(&fake, Style::Anthropic, "m-rich", 0, true);
    let events = sse_events(&r.body);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().expect("every event is named")).collect();
    assert_eq!(names[..3], ["message_start", "content_block_start", "ping"]);
    assert_eq!(names[names.len() - 2..], ["message_delta", "message_stop"]);
    for (name, data) in &events {
        let v: Value = serde_json::from_str(data).expect("JSON data");
        assert_eq!(v["type"], name.as_deref().unwrap_or(""), "event name matches data.type");
        assert!(data.starts_with(r#"{"type":"#), "type comes first: {data}");
    }
    let deltas: Vec<Value> = events
        .iter()
        .filter(|(n, _)| n.as_deref() == Some("content_block_delta"))
        .map(|(_, d)| serde_json::from_str::<Value>(d).expect("JSON")["delta"].clone())
        .collect();
    let kinds = |k: &str| deltas.iter().filter(|d| d["type"] == k).count();
    assert!(kinds("thinking_delta") >= 2);
    assert_eq!(kinds("signature_delta"), 1);
    assert!(kinds("text_delta") >= 2);
    let fragments: Vec<&str> = deltas
        .iter()
        .filter(|d| d["type"] == "input_json_delta")
        .map(|d| d["partial_json"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(fragments.concat(), format!("{ARGS_1}{ARGS_2}"), "argument text split, never re-encoded");
    assert!(fragments.iter().filter(|f| !f.is_empty()).count() >= 4, "several fragments per call: {fragments:?}");
}

#[test]
fn openai_stream_sends_usage_chunk_only_when_asked() {
    let fake = FakeProvider::start(scripts());
    for include in [true, false] {
        let mut b = body(Style::OpenAi, "m-rich", 0, true);
        if !include {
            b.as_object_mut().expect("object").remove("stream_options");
        }
        let r = call_with(&fake, Style::OpenAi, "m-rich", &b, true, Some(KEY));
        let events = sse_events(&r.body);
        assert!(events.iter().all(|(n, _)| n.is_none()), "Chat Completions streams carry no event names");
        assert_eq!(events.last().map(|(_, d)| d.as_str()), Some("[DONE]"));
        let chunks: Vec<Value> =
            events[..events.len() - 1].iter().map(|(_, d)| serde_json::from_str(d).expect("JSON")).collect();
        let usage_chunks: Vec<&Value> = chunks.iter().filter(|c| c["choices"] == json!([])).collect();
        assert_eq!(usage_chunks.len(), usize::from(include), "include_usage={include}");
        if include {
            assert_eq!(usage_chunks[0]["usage"]["prompt_tokens"], 31);
            assert!(chunks[..chunks.len() - 1].iter().all(|c| c["usage"].is_null()));
        } else {
            assert!(chunks.iter().all(|c| c.get("usage").is_none()));
        }
        let first_call = chunks.iter().find(|c| c["choices"][0]["delta"]["tool_calls"].is_array()).expect("a call");
        let tc = &first_call["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(
            (tc["index"].clone(), tc["function"]["name"].clone(), tc["function"]["arguments"].clone()),
            (json!(0), json!("get_weather"), json!(""))
        );
    }
}

#[test]
fn gemini_sends_call_ids_only_when_the_turn_says_so() {
    let fake = FakeProvider::start(scripts());
    for stream in [false, true] {
        let r = call(&fake, Style::Gemini, "m-ids", 0, stream);
        assert_eq!(r.status, 200);
        let run = if stream {
            oracle::parse_stream(Style::Gemini, &r.body, &[])
        } else {
            oracle::validate_response(Style::Gemini, &r.body)
        };
        let Some(run) = run else { return };
        assert!(run.ok, "{}", run.stdout);
        let id = &run.summary.as_ref().expect("summary")["tool_calls"][0]["id"];
        assert!(id.as_str().is_some_and(|s| s.starts_with("call_")), "{id}");
    }
    let r = call(&fake, Style::Gemini, "m-rich", 0, false);
    assert!(!r.text().contains("\"id\""), "no ids by default: {}", r.text());
}

#[test]
fn gemini_without_alt_sse_streams_one_json_array() {
    let fake = FakeProvider::start(scripts());
    let mut c = Client::connect(fake.addr());
    let b = body(Style::Gemini, "m-rich", 1, true).to_string();
    let r = c.request("POST", "/v1beta/models/m-rich:streamGenerateContent", &[("x-goog-api-key", KEY)], b.as_bytes());
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/json"));
    let arr = r.json();
    let items = arr.as_array().expect("an array of responses");
    assert!(items.len() > 1);
    let text: String =
        items.iter().filter_map(|i| i["candidates"][0]["content"]["parts"][0]["text"].as_str()).collect();
    assert_eq!(text, "It is 4°C in Paris. Grüße!");
}

#[test]
fn generated_ids_depend_on_the_request_alone() {
    let fake = FakeProvider::start(scripts());
    let other = FakeProvider::start(scripts());
    for style in [Style::Anthropic, Style::OpenAi] {
        let a = call(&fake, style, "m-rich", 0, false).json();
        let b = call(&other, style, "m-rich", 0, true);
        let id_a = match style {
            Style::Anthropic => a["content"][2]["id"].clone(),
            _ => a["choices"][0]["message"]["tool_calls"][0]["id"].clone(),
        };
        let id = id_a.as_str().expect("id");
        assert!(b.text().contains(id), "{style:?}: the same id from another server and framing");
    }
}

fn assert_error(style: Style, r: &fake_support::RawResponse, status: u16, kind: &str, message_part: &str) {
    assert_eq!(r.status, status, "{style:?}: {}", r.text());
    assert_eq!(r.header("content-type"), Some("application/json"));
    let v = r.json();
    let (got_kind, message) = match style {
        Style::Anthropic => {
            assert_eq!(v["type"], "error");
            (v["error"]["type"].clone(), v["error"]["message"].clone())
        }
        Style::OpenAi | Style::OpenAiResponses => (v["error"]["code"].clone(), v["error"]["message"].clone()),
        Style::Gemini => {
            assert_eq!(v["error"]["code"], status);
            (v["error"]["status"].clone(), v["error"]["message"].clone())
        }
    };
    if !kind.is_empty() {
        assert_eq!(got_kind, kind, "{style:?}: {v}");
    }
    let message = message.as_str().expect("message");
    assert!(message.contains(message_part), "{style:?}: {message:?} should contain {message_part:?}");
    if let Some(run) = oracle::validate_response(style, &r.body) {
        assert!(run.ok, "{style:?}: the SDK reads it as an error body: {}", run.stdout);
        assert!(run.summary.as_ref().is_some_and(|s| !s["error"].is_null()));
    }
}

#[test]
fn missing_or_wrong_keys_are_refused_like_the_apis() {
    let fake = FakeProvider::start(scripts());
    let b = |s| body(s, "m-rich", 0, false);
    let r = call_with(&fake, Style::Anthropic, "m-rich", &b(Style::Anthropic), false, None);
    assert_error(Style::Anthropic, &r, 401, "authentication_error", "x-api-key header is required");
    let r = call_with(&fake, Style::Anthropic, "m-rich", &b(Style::Anthropic), false, Some("nope"));
    assert_error(Style::Anthropic, &r, 401, "authentication_error", "invalid x-api-key");
    let r = call_with(&fake, Style::OpenAi, "m-rich", &b(Style::OpenAi), false, None);
    assert_error(Style::OpenAi, &r, 401, "", "You didn't provide an API key");
    let r = call_with(&fake, Style::OpenAi, "m-rich", &b(Style::OpenAi), false, Some("sk-wrong-key-123"));
    assert_error(Style::OpenAi, &r, 401, "invalid_api_key", "Incorrect API key provided: sk-");
    assert!(!r.text().contains("sk-wrong-key-123"), "the key is masked");
    let r = call_with(&fake, Style::Gemini, "m-rich", &b(Style::Gemini), false, Some("nope"));
    assert_error(Style::Gemini, &r, 400, "INVALID_ARGUMENT", "API key not valid");
    assert_eq!(r.json()["error"]["details"][0]["reason"], "API_KEY_INVALID");
    let r = call_with(&fake, Style::Gemini, "m-rich", &b(Style::Gemini), false, None);
    assert_error(Style::Gemini, &r, 403, "PERMISSION_DENIED", "unregistered callers");
    // Gemini also takes the key as ?key=.
    let mut c = Client::connect(fake.addr());
    let r = c.request(
        "POST",
        "/v1beta/models/m-rich:generateContent?key=test-key",
        &[],
        b(Style::Gemini).to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(fake.requests().iter().all(|r| r.turn.is_none() || r.status == Some(200)), "refused before any turn");
}

#[test]
fn unknown_models_are_404_with_the_provider_body() {
    let fake = FakeProvider::start(scripts());
    let r = call(&fake, Style::Anthropic, "nope-model", 0, false);
    assert_error(Style::Anthropic, &r, 404, "not_found_error", "model: nope-model");
    let r = call(&fake, Style::OpenAi, "nope-model", 0, false);
    assert_error(Style::OpenAi, &r, 404, "model_not_found", "The model `nope-model` does not exist");
    let r = call(&fake, Style::Gemini, "nope-model", 0, false);
    assert_error(Style::Gemini, &r, 404, "NOT_FOUND", "models/nope-model is not found for API version v1beta");
}

#[test]
fn malformed_json_and_missing_fields_are_400() {
    let fake = FakeProvider::start(scripts());
    for style in Style::ALL {
        let headers = auth_headers(style, Some(KEY));
        let refs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut c = Client::connect(fake.addr());
        let r = c.request("POST", &call_target(style, "m-rich", false), &refs, b"{\"model\": \"m-rich\", ");
        let part = match style {
            Style::Anthropic => "The request body is not valid JSON",
            Style::OpenAi | Style::OpenAiResponses => "We could not parse the JSON body of your request",
            Style::Gemini => "Invalid JSON payload received",
        };
        assert_error(style, &r, 400, "", part);
    }
    let mut no_max = body(Style::Anthropic, "m-rich", 0, false);
    no_max.as_object_mut().expect("object").remove("max_tokens");
    let r = call_with(&fake, Style::Anthropic, "m-rich", &no_max, false, Some(KEY));
    assert_error(Style::Anthropic, &r, 400, "invalid_request_error", "max_tokens: Field required");
    let mut c = Client::connect(fake.addr());
    let r = c.request(
        "POST",
        "/v1/messages",
        &[("x-api-key", KEY)],
        body(Style::Anthropic, "m-rich", 0, false).to_string().as_bytes(),
    );
    assert_error(Style::Anthropic, &r, 400, "invalid_request_error", "anthropic-version");
    let r = call_with(&fake, Style::OpenAi, "m-rich", &json!({"model": "m-rich"}), false, Some(KEY));
    assert_error(Style::OpenAi, &r, 400, "missing_required_parameter", "'messages'");
    let r = call_with(&fake, Style::Gemini, "m-rich", &json!({"contents": []}), false, Some(KEY));
    assert_error(Style::Gemini, &r, 400, "INVALID_ARGUMENT", "contents is not specified");
    let bad_opts =
        json!({"model": "m-rich", "stream_options": {"include_usage": true}, "messages": [user(Style::OpenAi, "x")]});
    let r = call_with(&fake, Style::OpenAi, "m-rich", &bad_opts, false, Some(KEY));
    assert_error(Style::OpenAi, &r, 400, "", "stream_options");
}

#[test]
fn unbalanced_transcripts_are_refused_like_the_apis() {
    let fake = FakeProvider::start(scripts());
    // Anthropic: a tool_use with no tool_result after it.
    let a = wrap(
        Style::Anthropic,
        "m-rich",
        vec![
            user(Style::Anthropic, "hi"),
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_A", "name": "f", "input": {}},
                                                    {"type": "tool_use", "id": "toolu_B", "name": "f", "input": {}}]}),
            json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_A", "content": "ok"}]}),
        ],
        false,
    );
    let r = call_with(&fake, Style::Anthropic, "m-rich", &a, false, Some(KEY));
    assert_error(
        Style::Anthropic,
        &r,
        400,
        "invalid_request_error",
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_B. \
         Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
    );
    // Anthropic mirror: a tool_result answering nothing.
    let a = wrap(
        Style::Anthropic,
        "m-rich",
        vec![json!({"role": "user", "content": [{"type": "text", "text": "hi"},
                                               {"type": "tool_result", "tool_use_id": "toolu_X", "content": "ok"}]})],
        false,
    );
    let r = call_with(&fake, Style::Anthropic, "m-rich", &a, false, Some(KEY));
    assert_error(
        Style::Anthropic,
        &r,
        400,
        "invalid_request_error",
        "messages.0.content.1: unexpected `tool_use_id` found in `tool_result` blocks: toolu_X.",
    );
    // OpenAI: a call with no tool message.
    let o = wrap(
        Style::OpenAi,
        "m-rich",
        vec![
            user(Style::OpenAi, "hi"),
            json!({"role": "assistant", "tool_calls": [{"id": "call_A", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
            user(Style::OpenAi, "and?"),
        ],
        false,
    );
    let r = call_with(&fake, Style::OpenAi, "m-rich", &o, false, Some(KEY));
    assert_error(
        Style::OpenAi,
        &r,
        400,
        "",
        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. \
         The following tool_call_ids did not have response messages: call_A",
    );
    assert_eq!(r.json()["error"]["param"], "messages.[1].role");
    // OpenAI mirror: a tool message with no call before it.
    let o = wrap(
        Style::OpenAi,
        "m-rich",
        vec![user(Style::OpenAi, "hi"), json!({"role": "tool", "tool_call_id": "call_Z", "content": "ok"})],
        false,
    );
    let r = call_with(&fake, Style::OpenAi, "m-rich", &o, false, Some(KEY));
    assert_error(
        Style::OpenAi,
        &r,
        400,
        "",
        "messages with role 'tool' must be a response to a preceeding message with 'tool_calls'",
    );
    assert_eq!(r.json()["error"]["param"], "messages.[1].role");
    // Gemini: two calls, one response.
    let g = wrap(
        Style::Gemini,
        "m-rich",
        vec![
            user(Style::Gemini, "hi"),
            json!({"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}, {"functionCall": {"name": "g", "args": {}}}]}),
            json!({"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"r": 1}}}]}),
        ],
        false,
    );
    let r = call_with(&fake, Style::Gemini, "m-rich", &g, false, Some(KEY));
    assert_error(
        Style::Gemini,
        &r,
        400,
        "INVALID_ARGUMENT",
        "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn.",
    );
    // A balanced transcript of the same shape is accepted (each builder's transcripts are).
    for style in Style::ALL {
        assert_eq!(call(&fake, style, "m-three", 2, false).status, 200, "{style:?}");
    }
}

#[test]
fn the_turn_comes_from_the_transcript_alone() {
    let fake = FakeProvider::start(scripts());
    for style in Style::ALL {
        for (turns, want) in [(0, "first"), (1, "second"), (2, "third"), (1, "second")] {
            let r = call(&fake, style, "m-three", turns, false);
            assert_eq!(r.status, 200, "{style:?}: {}", r.text());
            let v = r.json();
            let text = match style {
                Style::Anthropic => v["content"][0]["text"].clone(),
                Style::OpenAi => v["choices"][0]["message"]["content"].clone(),
                Style::OpenAiResponses => v["output"][0]["content"][0]["text"].clone(),
                Style::Gemini => v["candidates"][0]["content"]["parts"][0]["text"].clone(),
            };
            assert_eq!(text, want, "{style:?}: {turns} assistant messages");
        }
        let r = call(&fake, style, "m-three", 3, false);
        assert_error(style, &r, 400, "", "has 3 turn(s); this request asks for turn 3");
    }
    assert_eq!(fake.requests_for("m-three").len(), 5 * Style::ALL.len());
    assert_eq!(fake.attempts("m-three", 1), 2 * Style::ALL.len() as u32, "two requests per style for turn 1");
}

#[test]
fn expect_final_checks_the_last_request() {
    let fake = FakeProvider::start(scripts());
    for style in Style::ALL {
        let r = call(&fake, style, "m-final", 1, false);
        assert_eq!(r.status, 200, "{style:?}: the transcript has the result: {}", r.text());
    }
    assert!(fake.failures().is_empty());
    // A transcript whose one tool result lacks the expected text.
    let mut b = body(Style::OpenAi, "m-final", 1, false);
    b["messages"][2]["content"] = json!("something else");
    let r = call_with(&fake, Style::OpenAi, "m-final", &b, false, Some(KEY));
    assert_error(
        Style::OpenAi,
        &r,
        400,
        "",
        "expect_final failed for model m-final: no tool result contains \"result 0\"",
    );
    assert_eq!(fake.failures().len(), 1);
}

#[test]
fn models_are_listed_in_each_shape() {
    let fake = FakeProvider::start(scripts());
    let mut c = Client::connect(fake.addr());
    let r = c.request("GET", "/v1/models", &[("Authorization", "Bearer test-key")], b"");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["object"], "list");
    let ids: Vec<&str> = v["data"].as_array().expect("data").iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["m-final", "m-ids", "m-rich", "m-three"]);
    assert!(v["data"].as_array().expect("data").iter().all(|m| m["object"] == "model"));
    let r = c.request("GET", "/v1/models", &[("x-api-key", KEY)], b"");
    assert_eq!(r.json()["data"][0]["type"], "model");
    let r = c.request("GET", "/v1/models", &[("Authorization", "Bearer bad")], b"");
    assert_eq!(r.status, 401);
    let r = c.request("GET", "/v1/messages", &[("x-api-key", KEY)], b"");
    assert_eq!((r.status, r.header("allow")), (405, Some("POST")));
    let r = c.request("POST", "/v1/models", &[("Authorization", "Bearer test-key")], b"{}");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET")));
    let r = c.request("POST", "/v2/nothing", &[], b"{}");
    assert_eq!(r.status, 404);
}

#[test]
fn requests_are_recorded_as_received() {
    let fake = FakeProvider::start(scripts());
    let b = body(Style::Gemini, "m-three", 0, true);
    let r = call_with(&fake, Style::Gemini, "m-three", &b, true, Some(KEY));
    assert_eq!(r.status, 200);
    let rec = fake.requests_for("m-three");
    assert_eq!(rec.len(), 1);
    let rec = &rec[0];
    assert_eq!(rec.method, "POST");
    assert_eq!(rec.target, "/v1beta/models/m-three:streamGenerateContent?alt=sse");
    assert_eq!(rec.path(), "/v1beta/models/m-three:streamGenerateContent");
    assert_eq!(rec.header("X-GOOG-API-KEY"), Some(KEY));
    assert_eq!(rec.body, b.to_string().into_bytes());
    assert_eq!(rec.json.as_ref(), Some(&b));
    assert_eq!((rec.style, rec.turn, rec.attempt, rec.status), (Some(Style::Gemini), Some(0), Some(0), Some(200)));
    assert!(fake.requests_for("m-rich").is_empty());
    fake.clear_requests();
    assert!(fake.requests().is_empty());
}

#[test]
fn concurrent_conversations_share_one_server() {
    let fake = FakeProvider::start(scripts());
    std::thread::scope(|s| {
        for i in 0..12usize {
            let fake = &fake;
            s.spawn(move || {
                let style = Style::ALL[i % 3];
                for turns in 0..3 {
                    let r = call(fake, style, "m-three", turns, i % 2 == 0);
                    assert_eq!(r.status, 200);
                    assert_eq!(r.end, End::Complete);
                }
            });
        }
    });
    assert_eq!(fake.requests().len(), 36);
    let conns: std::collections::BTreeSet<u64> = fake.requests().iter().map(|r| r.connection).collect();
    assert_eq!(conns.len(), 36, "one connection per call");
}

#[test]
fn the_server_stops_when_dropped() {
    let fake = FakeProvider::start(scripts());
    let addr = fake.addr();
    let mut idle = Client::connect(addr);
    assert_eq!(call(&fake, Style::OpenAi, "m-three", 0, false).status, 200);
    let started = Instant::now();
    drop(fake);
    assert!(started.elapsed() < Duration::from_secs(3), "drop returns promptly: {:?}", started.elapsed());
    assert!(idle.is_closed(), "open keep-alive connections are closed");
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(), "nothing listens any more");
}

#[test]
fn scripts_round_trip_through_json() {
    let s = scripts();
    let text = serde_json::to_string(&s).expect("serialize");
    assert_eq!(Scripts::from_json(&text).expect("parse"), s);
    let from_file = Scripts::from_json(
        r#"{"models": {"m": {"turns": [
            {"text": "hi", "faults": [{"kind": "status", "status": 429, "times": 2, "retry_after": "1"},
                                     {"kind": "reset_mid_stream", "after_events": 3}]},
            {"tool_calls": [{"name": "f"}], "stop_reason": "max_tokens"}]}}}"#,
    )
    .expect("the documented shape parses");
    assert_eq!(from_file.api_key, "test-key", "the default key");
    let turn = &from_file.models["m"].turns[0];
    assert_eq!(turn.faults.len(), 2);
    assert_eq!(turn.faults[0].times, 2);
    assert_eq!(turn.usage.input, 10, "default usage");
    assert_eq!(from_file.models["m"].turns[1].tool_calls[0].arguments, "{}");
    assert!(Scripts::from_json(r#"{"models": {"m": {"turns": [{"txt": "typo"}]}}}"#).is_err(), "typos fail loudly");
}

#[test]
fn the_binary_serves_a_scripts_file() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-fake-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("scripts.json");
    std::fs::write(&file, serde_json::to_string(&scripts()).expect("json")).expect("write scripts");
    let log = dir.join("requests.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-provider"))
        .args(["--scripts", file.to_str().expect("utf-8 path"), "--api-key", "bin-key", "--exit-after", "60"])
        .args(["--requests", log.to_str().expect("utf-8 path")])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fake-provider");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("addr line");
    let v: Value = serde_json::from_str(&line).expect("JSON addr line");
    let addr: std::net::SocketAddr = v["addr"].as_str().expect("addr").parse().expect("socket address");
    assert!(addr.ip().is_loopback());
    let mut c = Client::connect(addr);
    let b = body(Style::OpenAi, "m-three", 2, false).to_string();
    let r = c.request("POST", "/v1/chat/completions", &[("Authorization", "Bearer bin-key")], b.as_bytes());
    // The log is appended to every few milliseconds: wait for the line.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let logged = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.ends_with('\n') || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let killed = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    killed.expect("kill fake-provider");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["choices"][0]["message"]["content"], "third");
    let line: Value = serde_json::from_str(logged.trim_end()).expect("one JSON line per request");
    assert_eq!(
        (line["method"].as_str(), line["target"].as_str(), line["body"].as_str()),
        (Some("POST"), Some("/v1/chat/completions"), Some(b.as_str())),
        "{logged}"
    );
    assert_eq!(line["connection"], 0);
}

/// OpenAI Responses refuses, with its own texts (the reasoning one is in the
/// recorded corpus): a function_call without its output, an output without
/// its call, a reasoning item without the item that followed it or without
/// `summary`, and items referred to by id while nothing is stored.
#[test]
fn responses_replays_are_refused_like_the_api() {
    let fake = FakeProvider::start(scripts());
    let s = Style::OpenAiResponses;
    let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAAA"});
    let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup", "arguments": "{}"});
    let output = json!({"type": "function_call_output", "call_id": "call_1", "output": "ok"});
    let message = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                         "content": [{"type": "output_text", "text": "hm", "annotations": []}]});
    let no_id = json!({"role": "assistant", "content": "hm"});
    let mut no_summary = reasoning.clone();
    no_summary.as_object_mut().unwrap().remove("summary");
    let cases: Vec<(Vec<Value>, u16, &str)> = vec![
        (vec![user(s, "hi"), call.clone()], 400, "No tool output found for function call call_1."),
        (vec![user(s, "hi"), output.clone()], 400, "No tool call found for function call output with call_id call_1."),
        (
            vec![user(s, "hi"), reasoning.clone(), no_id, user(s, "more")],
            400,
            "Item 'rs_1' of type 'reasoning' was provided without its required following item.",
        ),
        (vec![user(s, "hi"), reasoning.clone()], 400, "without its required following item"),
        (
            vec![user(s, "hi"), no_summary, message.clone(), user(s, "more")],
            400,
            "Missing required parameter: 'input[1].summary'.",
        ),
        (
            vec![user(s, "hi"), json!({"type": "item_reference", "id": "rs_1"})],
            404,
            "Items are not persisted when `store` is set to false.",
        ),
    ];
    for (items, status, text) in cases {
        let body = wrap(s, "m-rich", items, false);
        let r = call_with(&fake, s, "m-rich", &body, false, Some(KEY));
        assert_error(s, &r, status, "", text);
    }
    // The same items, whole and in order, are accepted.
    let ok = wrap(s, "m-rich", vec![user(s, "hi"), reasoning, message, call, output], false);
    assert_eq!(call_with(&fake, s, "m-rich", &ok, false, Some(KEY)).status, 200);
}

#[test]
fn a_context_limit_refuses_over_long_requests_with_each_providers_text_and_reports_counts() {
    let limit = 300;
    let fake = FakeProvider::start(Scripts::new(KEY).model(
        "m-window",
        Script::new(vec![Turn::text("fits")]).context_limit(limit).summarize_on("Summarize the conversation"),
    ));
    for style in Style::ALL {
        let small = wrap(style, "m-window", vec![user(style, "hello")], false);
        let r = call_with(&fake, style, "m-window", &small, false, Some(KEY));
        assert_eq!(r.status, 200, "{style:?}: {}", r.text());
        let v = r.json();
        let input = match style {
            Style::Anthropic => v["usage"]["input_tokens"].clone(),
            Style::OpenAi => v["usage"]["prompt_tokens"].clone(),
            Style::OpenAiResponses => v["usage"]["input_tokens"].clone(),
            Style::Gemini => v["usageMetadata"]["promptTokenCount"].clone(),
        };
        assert_eq!(input, json!(nexus_tests::fake::fake_token_count(&small)), "{style:?}: the count is reported");

        let big = wrap(style, "m-window", vec![user(style, &"word ".repeat(400))], false);
        let n = nexus_tests::fake::fake_token_count(&big);
        assert!(n > limit);
        let r = call_with(&fake, style, "m-window", &big, false, Some(KEY));
        let (kind, text) = match style {
            Style::Anthropic => ("invalid_request_error", format!("prompt is too long: {n} tokens > {limit} maximum")),
            Style::OpenAi => (
                "context_length_exceeded",
                format!(
                    "This model's maximum context length is {limit} tokens. However, your messages resulted in {n} \
                     tokens. Please reduce the length of the messages."
                ),
            ),
            Style::OpenAiResponses => (
                "context_length_exceeded",
                "Your input exceeds the context window of this model. Please adjust your input and try again."
                    .to_string(),
            ),
            Style::Gemini => (
                "INVALID_ARGUMENT",
                format!("The input token count ({n}) exceeds the maximum number of tokens allowed ({limit})."),
            ),
        };
        assert_error(style, &r, 400, kind, &text);
    }
    // A request whose system prompt asks for a summary gets one, not a scripted turn.
    let mut anthropic = wrap(Style::Anthropic, "m-window", vec![user(Style::Anthropic, "old turns")], false);
    anthropic["system"] = json!("Summarize the conversation below.");
    let r = call_with(&fake, Style::Anthropic, "m-window", &anthropic, false, Some(KEY));
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["content"][0]["text"].as_str().unwrap().starts_with("Summary 1:"), "{}", r.text());
}

#[test]
fn token_counters_answer_in_each_apis_shape_and_refuse_what_it_refuses() {
    let fake = FakeProvider::start(scripts());
    let post = |style: Style, target: &str, body: &Value| {
        let headers = auth_headers(style, Some(KEY));
        let refs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        Client::connect(fake.addr()).request("POST", target, &refs, body.to_string().as_bytes())
    };
    let anthropic = json!({"model": "m-rich", "messages": [user(Style::Anthropic, "hi")], "system": "Be brief."});
    let responses = json!({"model": "m-rich", "input": "hi", "instructions": "Be brief."});
    let gemini = json!({"contents": [user(Style::Gemini, "hi")]});
    let wrapped =
        json!({"generateContentRequest": {"model": "models/m-rich", "contents": [user(Style::Gemini, "hi")]}});
    let gemini_target = "/v1beta/models/m-rich:countTokens";
    let cases: Vec<(Style, &str, &Value, String)> = vec![
        (Style::Anthropic, "/v1/messages/count_tokens", &anthropic, format!(r#"{{"input_tokens":{}}}"#, 0)),
        (
            Style::OpenAiResponses,
            "/v1/responses/input_tokens",
            &responses,
            "{\n  \"object\": \"response.input_tokens\",\n  \"input_tokens\": 0\n}".into(),
        ),
        (
            Style::Gemini,
            gemini_target,
            &gemini,
            "{\n  \"totalTokens\": 0,\n  \"promptTokensDetails\": [\n    {\n      \"modality\": \"TEXT\",\n      \"tokenCount\": 0\n    }\n  ]\n}".into(),
        ),
        (
            Style::Gemini,
            gemini_target,
            &wrapped,
            "{\n  \"totalTokens\": 0,\n  \"promptTokensDetails\": [\n    {\n      \"modality\": \"TEXT\",\n      \"tokenCount\": 0\n    }\n  ]\n}".into(),
        ),
    ];
    for (style, target, body, shape) in cases {
        let r = post(style, target, body);
        assert_eq!(r.status, 200, "{style:?}: {}", r.text());
        let n = nexus_tests::fake::fake_token_count(body);
        assert_eq!(r.text(), shape.replace(": 0", &format!(": {n}")).replace(":0", &format!(":{n}")), "{style:?}");
    }
    // What each counter refuses, in its own error shape.
    let mut with_max = anthropic.clone();
    with_max["max_tokens"] = json!(64);
    assert_error(
        Style::Anthropic,
        &post(Style::Anthropic, "/v1/messages/count_tokens", &with_max),
        400,
        "invalid_request_error",
        "max_tokens: Extra inputs are not permitted",
    );
    let mut streamed = responses.clone();
    streamed["stream"] = json!(true);
    let r = post(Style::OpenAiResponses, "/v1/responses/input_tokens", &streamed);
    assert_error(Style::OpenAiResponses, &r, 400, "unknown_parameter", "Unknown parameter: 'stream'.");
    assert_eq!(r.json()["error"]["param"], "stream");
    let both = json!({"contents": [], "generateContentRequest": {"model": "models/m-rich", "contents": []}});
    assert_error(Style::Gemini, &post(Style::Gemini, gemini_target, &both), 400, "INVALID_ARGUMENT", "exclusive");
    let nothing = json!({});
    assert_error(Style::Gemini, &post(Style::Gemini, gemini_target, &nothing), 400, "INVALID_ARGUMENT", "contents");
    let no_model = json!({"generateContentRequest": {"contents": []}});
    assert_error(Style::Gemini, &post(Style::Gemini, gemini_target, &no_model), 400, "INVALID_ARGUMENT", "model");
    let wrong_key = Client::connect(fake.addr()).request(
        "POST",
        "/v1/responses/input_tokens",
        &[("Authorization", "Bearer nope")],
        responses.to_string().as_bytes(),
    );
    assert_eq!(wrong_key.status, 401);
}

#[test]
fn responses_server_compaction_is_checked_issued_and_verified_like_the_api() {
    let fake = FakeProvider::start(scripts());
    let s = Style::OpenAiResponses;
    let with = |cm: Value, items: Vec<Value>| {
        let mut body = wrap(s, "m-rich", items, false);
        body["context_management"] = cm;
        body
    };
    let long = user(s, &"word ".repeat(400));
    // Malformed settings are refused by name.
    for (cm, param) in [
        (json!({"type": "compaction"}), "context_management"),
        (json!([{"type": "truncate"}]), "context_management[0].type"),
        (json!([{"type": "compaction", "compact_threshold": -1}]), "context_management[0].compact_threshold"),
    ] {
        let r = call_with(&fake, s, "m-rich", &with(cm, vec![user(s, "hi")]), false, Some(KEY));
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(r.json()["error"]["param"], param);
    }
    // Under the threshold: no compaction; over it: a compaction item first, whole and streamed.
    let cm = json!([{"type": "compaction", "compact_threshold": 200}]);
    let r = call_with(&fake, s, "m-rich", &with(cm.clone(), vec![user(s, "hi")]), false, Some(KEY));
    assert!(r.json()["output"].as_array().unwrap().iter().all(|i| i["type"] != "compaction"));
    let r = call_with(&fake, s, "m-rich", &with(cm.clone(), vec![long.clone()]), false, Some(KEY));
    assert_eq!(r.status, 200, "{}", r.text());
    let item = r.json()["output"][0].clone();
    assert_eq!(item["type"], "compaction", "{item}");
    assert!(item["encrypted_content"].as_str().is_some_and(|e| !e.is_empty()));
    if let Some(run) = oracle::validate_response(s, &r.body) {
        assert!(run.ok, "the SDK reads the compaction item: {}", run.stdout);
    }
    let mut streamed = with(cm.clone(), vec![long.clone()]);
    streamed["stream"] = json!(true);
    let r = call_with(&fake, s, "m-rich", &streamed, true, Some(KEY));
    let kinds: Vec<String> = sse_events(&r.body).into_iter().filter_map(|(k, _)| k).collect();
    assert!(kinds.iter().any(|k| k == "response.compaction.compacting"), "{kinds:?}");

    // Sent back in its input form it is accepted, and the input before it no
    // longer counts; a forged or decorated one is refused.
    let answer = json!({"role": "user", "content": "go on"});
    let r = call_with(
        &fake,
        s,
        "m-rich",
        &with(cm.clone(), vec![long.clone(), item.clone(), answer.clone()]),
        false,
        Some(KEY),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["output"].as_array().unwrap().iter().all(|i| i["type"] != "compaction"), "pruned before it");
    let mut forged = item.clone();
    forged["encrypted_content"] = json!("gAAAAAforged");
    let r =
        call_with(&fake, s, "m-rich", &with(cm.clone(), vec![user(s, "hi"), forged, answer.clone()]), false, Some(KEY));
    assert_error(s, &r, 400, "invalid_encrypted_content", "could not be verified");
    let mut decorated = item;
    decorated["created_by"] = json!("server");
    let r = call_with(&fake, s, "m-rich", &with(cm, vec![user(s, "hi"), decorated, answer]), false, Some(KEY));
    assert_error(s, &r, 400, "unknown_parameter", "Unknown parameter: 'input[1].created_by'.");
}
