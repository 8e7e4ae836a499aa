//! Fault injection: each scripted fault does what it says, for the attempts
//! it covers, and the turn then answers normally.

mod fake_support;

use std::time::{Duration, Instant};

use fake_support::{call, sse_events, End, KEY};
use nexus_tests::fake::{FakeProvider, Fault, FaultKind, Script, Scripts, Style, Turn};
use nexus_tests::oracle;
use serde_json::Value;

fn fake_with(turn: Turn) -> FakeProvider {
    FakeProvider::start(Scripts::new(KEY).model("m", Script::new(vec![turn])))
}

fn text_turn() -> Turn {
    Turn::text("The quick brown fox jumps over the lazy dog.").usage(12, 8)
}

/// Two calls made within one wall-clock second. A response carries the
/// second it was made in (OpenAI's `created`, the Responses API's
/// `created_at`), so two responses compare byte for byte only when made in
/// the same second; a pair that straddles a tick is made again.
fn in_one_second<T>(mut pair: impl FnMut() -> (T, T)) -> (T, T) {
    let second =
        || std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    loop {
        let before = second();
        let made = pair();
        if second() == before {
            return made;
        }
    }
}

fn fault(kind: FaultKind) -> Fault {
    Fault::new(kind)
}

#[test]
fn status_faults_repeat_then_the_turn_succeeds() {
    for (style, status, kind) in [
        (Style::Anthropic, 429, "rate_limit_error"),
        (Style::Anthropic, 529, "overloaded_error"),
        (Style::OpenAi, 429, "rate_limit_exceeded"),
        (Style::OpenAi, 503, "server_error"),
        (Style::OpenAiResponses, 429, "rate_limit_exceeded"),
        (Style::OpenAiResponses, 503, "server_error"),
        (Style::Gemini, 429, "RESOURCE_EXHAUSTED"),
        (Style::Gemini, 503, "UNAVAILABLE"),
    ] {
        let fake = fake_with(text_turn().fault(Fault::status_retry_after(status, "2").times(2)));
        for attempt in 0..2 {
            let r = call(&fake, style, "m", 0, attempt == 1);
            assert_eq!(r.status, status, "{style:?} attempt {attempt}");
            assert_eq!(r.header("retry-after"), Some("2"));
            assert_eq!(r.header("content-type"), Some("application/json"), "errors are JSON even for stream requests");
            let v = r.json();
            let got = match style {
                Style::Anthropic => v["error"]["type"].clone(),
                Style::OpenAi | Style::OpenAiResponses => {
                    v["error"]["code"].as_str().map_or(v["error"]["type"].clone(), Value::from)
                }
                Style::Gemini => v["error"]["status"].clone(),
            };
            assert_eq!(got, kind, "{style:?} {status}: {v}");
            if attempt == 0 {
                if let Some(run) = oracle::validate_response(style, &r.body) {
                    assert!(run.ok, "{}", run.stdout);
                    assert!(!run.summary.as_ref().expect("summary")["error"].is_null());
                }
            }
        }
        let r = call(&fake, style, "m", 0, false);
        assert_eq!(r.status, 200, "{style:?}: the third attempt is answered");
        assert_eq!(fake.attempts("m", 0), 3);
        let statuses: Vec<Option<u16>> = fake.requests().iter().map(|r| r.status).collect();
        assert_eq!(statuses, vec![Some(status), Some(status), Some(200)]);
    }
}

#[test]
fn status_fault_without_retry_after_and_with_a_custom_body() {
    let custom = r#"{"type":"error","error":{"type":"api_error","message":"custom"}}"#;
    let fake = fake_with(text_turn().fault(Fault::status(500)).fault(Fault::new(FaultKind::Status {
        status: 502,
        retry_after: None,
        body: Some(custom.to_string()),
    })));
    let r = call(&fake, Style::Anthropic, "m", 0, false);
    assert_eq!(r.status, 500);
    assert!(r.header("retry-after").is_none());
    assert_eq!(r.json()["error"]["type"], "api_error");
    let r = call(&fake, Style::Anthropic, "m", 0, false);
    assert_eq!((r.status, r.text()), (502, custom.to_string()));
    assert_eq!(call(&fake, Style::Anthropic, "m", 0, false).status, 200);
}

#[test]
fn reset_before_headers_sends_nothing() {
    for style in Style::ALL {
        let fake = fake_with(text_turn().fault(fault(FaultKind::ResetBeforeHeaders)));
        let r = call(&fake, style, "m", 0, false);
        assert_eq!(r.end, End::EofBeforeHead, "{style:?}");
        assert_eq!(fake.requests()[0].status, None, "recorded as unanswered");
        assert_eq!(call(&fake, style, "m", 0, false).status, 200, "{style:?}: the next attempt is answered");
    }
}

#[test]
fn reset_after_headers_sends_only_the_head() {
    for stream in [false, true] {
        let fake = fake_with(text_turn().fault(fault(FaultKind::ResetAfterHeaders)));
        let r = call(&fake, Style::OpenAi, "m", 0, stream);
        assert_eq!(r.status, 200);
        assert_eq!(r.end, End::EofInBody, "stream={stream}");
        assert!(r.body.is_empty());
        if stream {
            assert_eq!(r.header("content-type"), Some("text/event-stream"));
        } else {
            assert!(r.header("content-length").is_some_and(|n| n != "0"), "a length that never arrives");
        }
    }
}

#[test]
fn reset_mid_stream_cuts_after_k_events() {
    for style in Style::ALL {
        let (r, whole) = in_one_second(|| {
            let fake = fake_with(text_turn().fault(fault(FaultKind::ResetMidStream { after_events: 3 })));
            (call(&fake, style, "m", 0, true), call(&fake, style, "m", 0, true))
        });
        assert_eq!(r.status, 200);
        assert_eq!(r.end, End::EofInBody, "{style:?}: no terminating chunk");
        assert_eq!(r.chunks.as_ref().map(Vec::len), Some(3), "{style:?}: exactly three events");
        assert!(whole.chunks.as_ref().is_some_and(|c| c.len() > 3 && c[..3] == r.chunks.as_ref().expect("chunks")[..]));
    }
    // Without a stream: half the body, then the close.
    let fake = fake_with(text_turn().fault(fault(FaultKind::ResetMidStream { after_events: 1 })));
    let r = call(&fake, Style::Anthropic, "m", 0, false);
    let full: usize = r.header("content-length").and_then(|n| n.parse().ok()).expect("length");
    assert_eq!((r.end, r.body.len()), (End::EofInBody, full / 2));
}

#[test]
fn truncated_chunked_bodies_lack_only_the_terminator() {
    for style in Style::ALL {
        let (cut, whole) = in_one_second(|| {
            let fake = fake_with(text_turn().fault(fault(FaultKind::TruncatedChunked)));
            (call(&fake, style, "m", 0, true), call(&fake, style, "m", 0, true))
        });
        assert_eq!(cut.end, End::EofInBody, "{style:?}");
        assert_eq!(whole.end, End::Complete);
        assert_eq!(cut.chunks, whole.chunks, "{style:?}: every event arrived");
    }
    let fake = fake_with(text_turn().fault(fault(FaultKind::TruncatedChunked)));
    let cut = call(&fake, Style::Gemini, "m", 0, false);
    assert_eq!(cut.header("transfer-encoding"), Some("chunked"), "a whole body is sent chunked for this fault");
    assert_eq!(cut.end, End::EofInBody);
    let whole = call(&fake, Style::Gemini, "m", 0, false);
    assert_eq!(cut.body, whole.body, "all of it but the end marker");
}

#[test]
fn stall_delays_the_answer() {
    let fake = fake_with(text_turn().fault(fault(FaultKind::Stall { ms: 400 })));
    let started = Instant::now();
    let r = call(&fake, Style::Gemini, "m", 0, true);
    assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
    assert_eq!((r.status, r.end), (200, End::Complete));
    let started = Instant::now();
    call(&fake, Style::Gemini, "m", 0, true);
    assert!(started.elapsed() < Duration::from_millis(400), "only the first attempt stalls");
}

#[test]
fn a_stalled_answer_does_not_delay_shutdown() {
    let fake = fake_with(text_turn().fault(fault(FaultKind::Stall { ms: 60_000 })));
    let addr = fake.addr();
    let client = std::thread::spawn(move || {
        let mut c = fake_support::Client::connect(addr);
        let b = fake_support::body(Style::OpenAi, "m", 0, false).to_string();
        c.request("POST", "/v1/chat/completions", &[("Authorization", "Bearer test-key")], b.as_bytes())
    });
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    drop(fake);
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    let r = client.join().expect("client thread");
    assert_eq!(r.end, End::EofBeforeHead, "the stalled request is dropped unanswered");
}

#[test]
fn malformed_json_with_status_200() {
    for style in Style::ALL {
        let fake = fake_with(text_turn().fault(fault(FaultKind::MalformedJson)).fault(fault(FaultKind::MalformedJson)));
        let r = call(&fake, style, "m", 0, false);
        assert_eq!((r.status, r.end), (200, End::Complete));
        assert!(serde_json::from_slice::<Value>(&r.body).is_err(), "{style:?}: not JSON");
        if let Some(run) = oracle::validate_response(style, &r.body) {
            assert!(!run.ok && run.stdout.contains("INVALID"), "{style:?}: the SDK refuses it: {}", run.stdout);
        }
        let s = call(&fake, style, "m", 0, true);
        assert_eq!((s.status, s.end), (200, End::Complete));
        let events = sse_events(&s.body);
        assert_eq!(events.len(), 2, "{style:?}: one good event, then the broken one");
        assert!(serde_json::from_str::<Value>(&events[0].1).is_ok());
        assert!(serde_json::from_str::<Value>(&events[1].1).is_err());
        if let Some(run) = oracle::parse_stream(style, &s.body, &[]) {
            assert!(
                !run.ok && run.stdout.contains("UNPARSEABLE"),
                "{style:?}: the SDK cannot parse the stream: {}",
                run.stdout
            );
        }
    }
}

#[test]
fn huge_bodies_are_valid_and_that_large() {
    const N: usize = 3 * 1024 * 1024 + 7;
    for style in Style::ALL {
        let fake = fake_with(text_turn().fault(fault(FaultKind::HugeBody { bytes: N })));
        let r = call(&fake, style, "m", 0, false);
        assert_eq!((r.status, r.end), (200, End::Complete));
        assert!(r.body.len() > N);
        let v = r.json();
        let text = match style {
            Style::Anthropic => v["content"][0]["text"].as_str().map(str::len),
            Style::OpenAi => v["choices"][0]["message"]["content"].as_str().map(str::len),
            Style::OpenAiResponses => v["output"][0]["content"][0]["text"].as_str().map(str::len),
            Style::Gemini => v["candidates"][0]["content"]["parts"][0]["text"].as_str().map(str::len),
        };
        assert_eq!(text, Some(N), "{style:?}");
    }
    let fake = fake_with(text_turn().fault(fault(FaultKind::HugeBody { bytes: N })));
    let s = call(&fake, Style::Anthropic, "m", 0, true);
    assert_eq!(s.end, End::Complete);
    let text: usize = sse_events(&s.body)
        .iter()
        .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v["delta"]["text"].as_str().map(str::len))
        .sum();
    assert_eq!(text, N, "streamed in pieces that add up");
}

#[test]
fn stream_errors_arrive_in_the_stream() {
    for (style, kind) in
        [(Style::Anthropic, "overloaded_error"), (Style::OpenAi, "server_error"), (Style::Gemini, "UNAVAILABLE")]
    {
        let fake = fake_with(text_turn().fault(fault(FaultKind::StreamError { after_events: 2 })));
        let r = call(&fake, style, "m", 0, true);
        assert_eq!((r.status, r.end), (200, End::Complete), "{style:?}: the stream ends cleanly after the error");
        let events = sse_events(&r.body);
        assert_eq!(events.len(), 3, "{style:?}");
        let last: Value = serde_json::from_str(&events[2].1).expect("JSON error event");
        if style == Style::Anthropic {
            assert_eq!(events[2].0.as_deref(), Some("error"));
            assert_eq!(last["type"], "error");
        }
        let got = match style {
            Style::Gemini => last["error"]["status"].clone(),
            _ => last["error"]["type"].clone(),
        };
        assert_eq!(got, kind, "{style:?}");
        if let Some(run) = oracle::parse_stream(style, &r.body, &[]) {
            assert!(run.ok, "{style:?}: {}", run.stdout);
            let err = &run.summary.as_ref().expect("summary")["error"];
            assert!(!err.is_null(), "{style:?}: the SDK reports the error event");
        }
    }
    // Without a stream the same fault is the overloaded status.
    for (style, status) in [(Style::Anthropic, 529), (Style::OpenAi, 503), (Style::Gemini, 503)] {
        let fake = fake_with(text_turn().fault(fault(FaultKind::StreamError { after_events: 0 })));
        assert_eq!(call(&fake, style, "m", 0, false).status, status, "{style:?}");
    }
}

#[test]
fn faults_are_counted_per_model_and_turn() {
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model("a", Script::new(vec![text_turn().fault(Fault::status(429)), text_turn().fault(Fault::status(503))]))
            .model("b", Script::new(vec![text_turn().fault(Fault::status(429))])),
    );
    assert_eq!(call(&fake, Style::OpenAi, "a", 0, false).status, 429);
    assert_eq!(call(&fake, Style::OpenAi, "b", 0, false).status, 429, "model b counts its own attempts");
    assert_eq!(call(&fake, Style::OpenAi, "a", 1, false).status, 503, "turn 1 counts its own attempts");
    assert_eq!(call(&fake, Style::OpenAi, "a", 0, false).status, 200);
    assert_eq!(call(&fake, Style::OpenAi, "a", 1, false).status, 200);
    assert_eq!(call(&fake, Style::Anthropic, "b", 0, false).status, 200, "attempts count across styles");
    let attempts: Vec<Option<u32>> = fake.requests().iter().map(|r| r.attempt).collect();
    assert_eq!(attempts, vec![Some(0), Some(0), Some(0), Some(1), Some(1), Some(1)]);
}

#[test]
fn stop_reason_overrides_map_neutral_names_and_pass_others() {
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model("neutral", Script::new(vec![text_turn().stop("max_tokens")]))
            .model("raw", Script::new(vec![text_turn().stop("RECITATION")])),
    );
    let want = [(Style::Anthropic, "max_tokens"), (Style::OpenAi, "length"), (Style::Gemini, "MAX_TOKENS")];
    for (style, stop) in want {
        for stream in [false, true] {
            let r = call(&fake, style, "neutral", 0, stream);
            let run = if stream {
                oracle::parse_stream(style, &r.body, &[])
            } else {
                oracle::validate_response(style, &r.body)
            };
            let Some(run) = run else { return };
            assert!(run.ok, "{style:?}: {}", run.stdout);
            assert_eq!(run.summary.as_ref().expect("summary")["stop"], stop, "{style:?} stream={stream}");
        }
    }
    let r = call(&fake, Style::Gemini, "raw", 0, false);
    assert_eq!(r.json()["candidates"][0]["finishReason"], "RECITATION");
}
