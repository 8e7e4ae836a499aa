//! `nexus serve` failover, over loopback against the fake provider: a route
//! lists several upstreams, and a request its first upstream cannot answer
//! (overloaded, cut or stalled before its first byte, timed out) is answered
//! by the next, in the client's own dialect, re-translated for the next
//! upstream's wire format and model. Circuit breakers skip an upstream that
//! keeps failing and let a probe through after the cooldown. Expectations
//! come from the fake's scripts and request log, the configuration, and
//! each dialect's wire contract.

mod serve_support;
use serve_support::{call, metric, Answer};

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use nexus_drive::serve::{serve, ServeConfig, Server};
use nexus_tests::fake::{FakeProvider, Fault, FaultKind, Script, Scripts, Style, Turn};
use serde_json::{json, Value};

const UPSTREAM_KEY: &str = "sk-upstream-secret";
const TEXT: &str = "Hello from the fake";

fn scripts() -> Scripts {
    let always = |kind: FaultKind| Fault::new(kind).times(100_000);
    let text = || Turn::text(TEXT).usage(11, 7);
    let status = |status: u16| always(FaultKind::Status { status, retry_after: None, body: None });
    Scripts::new(UPSTREAM_KEY)
        .model("m-text", Script::new(vec![text()]))
        .model("m-529", Script::new(vec![text().fault(status(529))]))
        .model("m-503", Script::new(vec![text().fault(status(503))]))
        .model("m-400", Script::new(vec![text().fault(status(400))]))
        .model("m-cut-early", Script::new(vec![text().fault(always(FaultKind::ResetAfterHeaders))]))
        .model("m-storm-early", Script::new(vec![text().fault(always(FaultKind::StreamError { after_events: 0 }))]))
        .model("m-cut-late", Script::new(vec![text().fault(always(FaultKind::ResetMidStream { after_events: 2 }))]))
        .model(
            "m-stall-early",
            Script::new(vec![text().fault(always(FaultKind::StallMidStream { after_events: 0, ms: 4000 }))]),
        )
        .model("m-slow-head", Script::new(vec![text().fault(always(FaultKind::Stall { ms: 4000 }))]))
        // Overloaded twice, then well again.
        .model(
            "m-flaky",
            Script::new(vec![
                text().fault(Fault::new(FaultKind::Status { status: 529, retry_after: None, body: None }).times(2))
            ]),
        )
}

/// A gateway whose routes put a failing upstream first; `breaker` is the
/// `[breaker]` table.
fn start(fake: &FakeProvider, breaker: &str) -> Server {
    let text = format!(
        r#"
listen = "127.0.0.1:0"
log_requests = false
[timeouts]
upstream_read = 1.0
probe_interval = 0.2
[breaker]
{breaker}
[[upstreams]]
name = "anth"
style = "anthropic"
base_url = "{anth}"
api_key_env = "UPSTREAM_KEY"
[[upstreams]]
name = "oai"
style = "openai"
base_url = "{oai}"
api_key_env = "UPSTREAM_KEY"
[[upstreams]]
name = "gem"
style = "gemini"
base_url = "{gem}"
api_key_env = "UPSTREAM_KEY"
[[routes]]
model = "overloaded-anth"
upstreams = [{{ name = "anth", model = "m-529" }}, {{ name = "oai", model = "m-text" }}]
[[routes]]
model = "unavailable-oai"
upstreams = [{{ name = "oai", model = "m-503" }}, {{ name = "gem", model = "m-text" }}]
[[routes]]
model = "cut-*"
upstreams = [{{ name = "anth", model = "m-cut-*" }}, {{ name = "oai", model = "m-text" }}]
[[routes]]
model = "storm-early"
upstreams = [{{ name = "anth", model = "m-storm-early" }}, {{ name = "oai", model = "m-text" }}]
[[routes]]
model = "storm-alone"
upstream = "anth"
upstream_model = "m-storm-early"
[[routes]]
model = "stall-early"
upstreams = [{{ name = "anth", model = "m-stall-early" }}, {{ name = "gem", model = "m-text" }}]
[[routes]]
model = "slow-head"
upstreams = [{{ name = "anth", model = "m-slow-head" }}, {{ name = "oai", model = "m-text" }}]
head_timeout = 0.5
[[routes]]
model = "bad-request"
upstreams = [{{ name = "anth", model = "m-400" }}, {{ name = "oai", model = "m-text" }}]
[[routes]]
model = "all-down"
upstreams = [{{ name = "anth", model = "m-529" }}, {{ name = "oai", model = "m-529" }}]
[[routes]]
model = "no-failover"
upstreams = [{{ name = "anth", model = "m-529" }}, {{ name = "oai", model = "m-text" }}]
max_failovers = 0
[[routes]]
model = "flaky"
upstreams = [{{ name = "anth", model = "m-flaky" }}, {{ name = "gem", model = "m-text" }}]
"#,
        anth = fake.base_url(Style::Anthropic),
        oai = fake.base_url(Style::OpenAi),
        gem = fake.base_url(Style::Gemini),
    );
    let env = |v: &str| (v == "UPSTREAM_KEY").then(|| UPSTREAM_KEY.to_string());
    let config = ServeConfig::from_toml(&text, env).expect("the configuration reads");
    serve(config).expect("the gateway starts")
}

/// A breaker that never opens in these tests (each request fails over afresh).
const NO_BREAKER: &str = "failures = 1000";

// ---------------------------------------------------------------- the four client dialects

#[derive(Debug, Clone, Copy, PartialEq)]
enum Client {
    Chat,
    Messages,
    Gemini,
    Responses,
}

const CLIENTS: [Client; 4] = [Client::Chat, Client::Messages, Client::Gemini, Client::Responses];

/// One model call as each client sends it.
fn ask(addr: SocketAddr, client: Client, model: &str, stream: bool) -> Answer {
    let hi = "hi";
    match client {
        Client::Chat => {
            let body = json!({"model": model, "messages": [{"role": "user", "content": hi}], "stream": stream});
            call(addr, "POST", "/v1/chat/completions", &[], body.to_string().as_bytes())
        }
        Client::Messages => {
            let body = json!({"model": model, "max_tokens": 256, "messages": [{"role": "user", "content": hi}],
                              "stream": stream});
            call(addr, "POST", "/v1/messages", &[("anthropic-version", "2023-06-01")], body.to_string().as_bytes())
        }
        Client::Gemini => {
            let body = json!({"contents": [{"role": "user", "parts": [{"text": hi}]}]});
            let path = if stream {
                format!("/v1beta/models/{model}:streamGenerateContent?alt=sse")
            } else {
                format!("/v1beta/models/{model}:generateContent")
            };
            call(addr, "POST", &path, &[], body.to_string().as_bytes())
        }
        Client::Responses => {
            let body = json!({"model": model, "input": hi, "stream": stream});
            call(addr, "POST", "/v1/responses", &[], body.to_string().as_bytes())
        }
    }
}

/// The answer's text, read the way `client` reads its own dialect; panics
/// on an answer of another shape.
fn text_of(client: Client, a: &Answer, stream: bool) -> String {
    let strs = |v: &Value, at: &str| v.pointer(at).and_then(Value::as_str).unwrap_or_default().to_string();
    if !stream {
        let v = a.json();
        return match client {
            Client::Chat => {
                assert_eq!(v["object"], "chat.completion", "{v}");
                strs(&v, "/choices/0/message/content")
            }
            Client::Messages => {
                assert_eq!((v["type"].as_str(), v["role"].as_str()), (Some("message"), Some("assistant")), "{v}");
                strs(&v, "/content/0/text")
            }
            Client::Gemini => strs(&v, "/candidates/0/content/parts/0/text"),
            Client::Responses => {
                assert_eq!((v["object"].as_str(), v["status"].as_str()), (Some("response"), Some("completed")), "{v}");
                let out = v["output"].as_array().expect("output");
                let msg = out.iter().find(|o| o["type"] == "message").expect("a message item");
                strs(msg, "/content/0/text")
            }
        };
    }
    assert!(a.header("content-type").is_some_and(|t| t.starts_with("text/event-stream")), "{:?}", a.headers);
    let events = a.events();
    assert!(error_event(client, &events).is_none(), "{}", a.text());
    let mut text = String::new();
    for e in &events {
        match client {
            Client::Chat => {
                assert_eq!(e["object"], "chat.completion.chunk", "{e}");
                text.push_str(&strs(e, "/choices/0/delta/content"));
            }
            Client::Messages if e["type"] == "content_block_delta" => text.push_str(&strs(e, "/delta/text")),
            Client::Gemini => text.push_str(&strs(e, "/candidates/0/content/parts/0/text")),
            Client::Responses if e["type"] == "response.output_text.delta" => text.push_str(&strs(e, "/delta")),
            _ => {}
        }
    }
    match client {
        Client::Chat => assert!(a.text().trim_end().ends_with("data: [DONE]"), "{}", a.text()),
        Client::Messages => assert_eq!(events.last().map(|e| e["type"].clone()), Some(json!("message_stop"))),
        Client::Responses => assert_eq!(events.last().map(|e| e["type"].clone()), Some(json!("response.completed"))),
        Client::Gemini => {}
    }
    text
}

/// The error event a stream ended with, in the client's dialect.
fn error_event(client: Client, events: &[Value]) -> Option<Value> {
    events.iter().find_map(|e| match client {
        Client::Messages | Client::Responses if e["type"] == "error" => Some(e.clone()),
        Client::Responses if e["type"] == "response.failed" => Some(e.clone()),
        Client::Chat | Client::Gemini if e.get("error").is_some() => Some(e["error"].clone()),
        _ => None,
    })
}

fn metrics(addr: SocketAddr) -> String {
    let a = call(addr, "GET", "/metrics", &[], b"");
    assert_eq!(a.status, 200);
    a.text()
}

fn circuit(addr: SocketAddr, upstream: &str) -> String {
    let ready = call(addr, "GET", "/ready", &[], b"").json();
    ready["upstreams"][upstream]["circuit"].as_str().unwrap_or_else(|| panic!("no circuit in {ready}")).to_string()
}

// ---------------------------------------------------------------- tests

#[test]
fn every_dialect_is_answered_by_the_next_upstream_while_the_first_is_overloaded() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, NO_BREAKER);
    let addr = server.local_addr();
    let mut expected = [0.0, 0.0];
    for client in CLIENTS {
        for stream in [false, true] {
            // Anthropic overloaded (529) → OpenAI; OpenAI unavailable (503) → Gemini.
            for (i, (model, second)) in [("overloaded-anth", "oai"), ("unavailable-oai", "gem")].into_iter().enumerate()
            {
                fake.clear_requests();
                let a = ask(addr, client, model, stream);
                let at = format!("{client:?} {model} stream={stream}");
                assert_eq!(a.status, 200, "{at}: {}", a.text());
                assert_eq!(text_of(client, &a, stream), TEXT, "{at}");
                assert_eq!(a.header("x-nexus-upstream"), Some(second), "{at}");
                // One refused request at the first upstream, then one answered at the second,
                // each in its own wire format, with its own model.
                let reqs = fake.requests();
                let seen: Vec<_> = reqs.iter().map(|r| (r.style, r.model.clone(), r.status)).collect();
                let (s1, s2, failed) = if i == 0 {
                    (Style::Anthropic, Style::OpenAi, ("m-529", 529))
                } else {
                    (Style::OpenAi, Style::Gemini, ("m-503", 503))
                };
                assert_eq!(
                    seen,
                    vec![
                        (Some(s1), Some(failed.0.to_string()), Some(failed.1)),
                        (Some(s2), Some("m-text".to_string()), Some(200))
                    ],
                    "{at}"
                );
                expected[i] += 1.0;
            }
        }
    }
    let text = metrics(addr);
    let anth = metric(&text, r#"nexus_gateway_failovers_total{from="anth",to="oai",reason="status_529"}"#);
    let oai = metric(&text, r#"nexus_gateway_failovers_total{from="oai",to="gem",reason="status_503"}"#);
    assert_eq!([anth, oai], expected, "{text}");
    // The header names configured upstreams only: never a URL or a key.
    assert!(!text.contains(UPSTREAM_KEY));
    server.shutdown();
}

#[test]
fn a_stream_that_fails_before_its_first_byte_fails_over_and_one_that_fails_after_does_not() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, NO_BREAKER);
    let addr = server.local_addr();
    for client in CLIENTS {
        // Cut right after the response head, silent past the read timeout, or an
        // overloaded error as the first event: nothing has reached the client, the
        // next upstream answers.
        for (model, failing, next) in [
            ("cut-early", "m-cut-early", "oai"),
            ("stall-early", "m-stall-early", "gem"),
            ("storm-early", "m-storm-early", "oai"),
        ] {
            fake.clear_requests();
            let a = ask(addr, client, model, true);
            assert_eq!(a.status, 200, "{client:?} {model}");
            assert_eq!(text_of(client, &a, true), TEXT, "{client:?} {model}");
            assert_eq!(a.header("x-nexus-upstream"), Some(next), "{client:?} {model}");
            assert_eq!(fake.requests_for(failing).len(), 1, "{client:?} {model}");
            assert_eq!(fake.requests_for("m-text").len(), 1, "{client:?} {model}");
        }
        // Cut after two events: the client has the answer's beginning, so it gets its
        // dialect's error event and no other upstream is asked.
        fake.clear_requests();
        let a = ask(addr, client, "cut-late", true);
        assert_eq!(a.status, 200, "{client:?}");
        assert_eq!(a.header("x-nexus-upstream"), Some("anth"), "{client:?}");
        let events = a.events();
        assert!(!events.is_empty(), "{client:?}: {}", a.text());
        assert!(error_event(client, &events).is_some(), "{client:?}: no error event in {}", a.text());
        assert_eq!(fake.requests_for("m-cut-late").len(), 1, "{client:?}");
        assert!(fake.requests_for("m-text").is_empty(), "{client:?}: failed over after the first byte");
    }
    // Not streamed: no head within the route's head timeout moves on too.
    fake.clear_requests();
    let a = ask(addr, Client::Chat, "slow-head", false);
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(text_of(Client::Chat, &a, false), TEXT);
    assert_eq!(a.header("x-nexus-upstream"), Some("oai"));
    let text = metrics(addr);
    assert_eq!(metric(&text, r#"nexus_gateway_failovers_total{from="anth",to="oai",reason="timeout"}"#), 1.0, "{text}");
    assert_eq!(metric(&text, r#"nexus_gateway_failovers_total{from="anth",to="oai",reason="stream_cut"}"#), 4.0);
    assert_eq!(metric(&text, r#"nexus_gateway_failovers_total{from="anth",to="gem",reason="stalled"}"#), 4.0);
    assert_eq!(metric(&text, r#"nexus_gateway_failovers_total{from="anth",to="oai",reason="stream_error"}"#), 4.0);
    server.shutdown();
}

#[test]
fn request_errors_are_not_failed_over_and_the_last_upstreams_refusal_is_the_answer() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, NO_BREAKER);
    let addr = server.local_addr();
    for client in CLIENTS {
        // A 400 is the request's fault: another upstream would refuse it too.
        fake.clear_requests();
        let a = ask(addr, client, "bad-request", false);
        assert_eq!(a.status, 400, "{client:?}: {}", a.text());
        assert!(a.json().get("error").is_some() || a.json()["type"] == "error", "{client:?}: {}", a.text());
        assert_eq!(a.header("x-nexus-upstream"), Some("anth"), "{client:?}");
        assert_eq!(fake.requests_for("m-400").len(), 1, "{client:?}");
        assert!(fake.requests_for("m-text").is_empty(), "{client:?}: a 400 was failed over");
    }
    // Both upstreams overloaded: each is asked once, the last one's error is the answer.
    fake.clear_requests();
    let a = ask(addr, Client::Chat, "all-down", false);
    assert_eq!(a.status, 529, "{}", a.text());
    assert!(a.json()["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{}", a.text());
    assert_eq!(a.header("x-nexus-upstream"), Some("oai"));
    let styles: Vec<_> = fake.requests().iter().map(|r| r.style).collect();
    assert_eq!(styles, vec![Some(Style::Anthropic), Some(Style::OpenAi)]);
    // A route that allows no failover returns the first upstream's refusal.
    fake.clear_requests();
    let a = ask(addr, Client::Messages, "no-failover", false);
    assert_eq!(a.status, 529, "{}", a.text());
    assert_eq!(a.json()["error"]["type"], "overloaded_error", "{}", a.text());
    assert_eq!(a.header("x-nexus-upstream"), Some("anth"));
    assert!(fake.requests_for("m-text").is_empty());
    // A stream that opens with the provider's error and has no upstream after it: the
    // client gets that error as its own dialect's error event.
    for client in CLIENTS {
        let a = ask(addr, client, "storm-alone", true);
        assert_eq!(a.status, 200, "{client:?}");
        assert_eq!(a.header("x-nexus-upstream"), Some("anth"), "{client:?}");
        assert!(error_event(client, &a.events()).is_some(), "{client:?}: no error event in {}", a.text());
    }
    let text = metrics(addr);
    assert!(!text.contains(r#"reason="status_400""#), "{text}");
    server.shutdown();
}

#[test]
fn the_breaker_skips_a_failing_upstream_and_a_probe_after_the_cooldown_closes_it() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, "failures = 2\nwindow = 60\ncooldown = 1.0");
    let addr = server.local_addr();
    assert_eq!(circuit(addr, "anth"), "closed");
    // Two 529s from the first upstream: each request is answered by Gemini, and the
    // second failure opens the circuit.
    for n in 1..=2 {
        let a = ask(addr, Client::Chat, "flaky", false);
        assert_eq!(a.status, 200, "{}", a.text());
        assert_eq!(a.header("x-nexus-upstream"), Some("gem"));
        assert_eq!(fake.requests_for("m-flaky").len(), n);
    }
    assert_eq!(circuit(addr, "anth"), "open");
    let text = metrics(addr);
    assert_eq!(metric(&text, r#"nexus_gateway_upstream_circuit{upstream="anth"}"#), 2.0, "{text}");
    assert_eq!(metric(&text, r#"nexus_gateway_upstream_circuit{upstream="gem"}"#), 0.0, "{text}");
    assert!(text.contains("# TYPE nexus_gateway_upstream_circuit gauge"), "{text}");
    // Open: the first upstream is not even asked.
    for client in CLIENTS {
        let a = ask(addr, client, "flaky", true);
        assert_eq!(a.status, 200, "{client:?}");
        assert_eq!(text_of(client, &a, true), TEXT, "{client:?}");
        assert_eq!(a.header("x-nexus-upstream"), Some("gem"), "{client:?}");
    }
    assert_eq!(fake.requests_for("m-flaky").len(), 2, "an open circuit was tried");
    let ready = call(addr, "GET", "/ready", &[], b"");
    assert_eq!(ready.status, 503, "{}", ready.text());
    let text = metrics(addr);
    assert_eq!(metric(&text, r#"nexus_gateway_failovers_total{from="anth",to="gem",reason="circuit_open"}"#), 4.0);
    // After the cooldown the circuit is half-open: the next request probes the first
    // upstream, which is well again, and the circuit closes.
    let deadline = Instant::now() + Duration::from_secs(20);
    while circuit(addr, "anth") != "half_open" {
        assert!(Instant::now() < deadline, "the circuit never turned half-open");
        std::thread::sleep(Duration::from_millis(100));
    }
    let a = ask(addr, Client::Messages, "flaky", false);
    assert_eq!(a.status, 200, "{}", a.text());
    assert_eq!(text_of(Client::Messages, &a, false), TEXT);
    assert_eq!(a.header("x-nexus-upstream"), Some("anth"));
    assert_eq!(fake.requests_for("m-flaky").len(), 3);
    assert_eq!(circuit(addr, "anth"), "closed");
    assert_eq!(metric(&metrics(addr), r#"nexus_gateway_upstream_circuit{upstream="anth"}"#), 0.0);
    server.shutdown();
}
