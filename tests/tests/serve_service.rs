//! `nexus serve` as a service, over loopback against the fake provider:
//! routes from a configuration file, client keys and their limits, h2c,
//! pipelining, upstream faults mid-stream, a client that leaves, health,
//! readiness and metrics. Every expectation comes from the fake's scripts,
//! the configuration, or the OpenAI error contract.

mod serve_support;
use serve_support::{metric, parse_answer, Answer};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nexus_drive::serve::{serve, ServeConfig, Server};
use nexus_tests::fake::{FakeProvider, Fault, FaultKind, Script, Scripts, Style, Turn};
use serde_json::{json, Value};
use smol::future::FutureExt;
use smol::io::{AsyncReadExt, AsyncWriteExt};

const UPSTREAM_KEY: &str = "sk-upstream-secret";
const TEAM_KEY: &str = "team-secret-key";
const OTHER_KEY: &str = "other-secret-key";
const TEXT: &str = "Hello from the fake";

fn env(var: &str) -> Option<String> {
    match var {
        "UPSTREAM_KEY" => Some(UPSTREAM_KEY.into()),
        "TEAM_KEY" => Some(TEAM_KEY.into()),
        "OTHER_KEY" => Some(OTHER_KEY.into()),
        _ => None,
    }
}

fn scripts() -> Scripts {
    let always = |kind: FaultKind| Fault::new(kind).times(100_000);
    let text = || Turn::text(TEXT).usage(11, 7);
    Scripts::new(UPSTREAM_KEY)
        .model("m-text", Script::new(vec![text()]))
        .model("m-slow", Script::new(vec![text().fault(always(FaultKind::Stall { ms: 1500 }))]))
        .model("m-reset", Script::new(vec![text().fault(always(FaultKind::ResetMidStream { after_events: 2 }))]))
        .model(
            "m-stall",
            Script::new(vec![text().fault(always(FaultKind::StallMidStream { after_events: 2, ms: 3000 }))]),
        )
        .model("m-storm", Script::new(vec![text().fault(always(FaultKind::StreamError { after_events: 2 }))]))
        .model(
            "m-529",
            Script::new(vec![text().fault(always(FaultKind::Status { status: 529, retry_after: None, body: None }))]),
        )
        .model(
            "m-pause",
            Script::new(vec![text().fault(always(FaultKind::StallMidStream { after_events: 2, ms: 1500 }))]),
        )
}

/// A gateway from a TOML configuration, the fake's URLs filled in.
fn start(fake: &FakeProvider, extra: &str) -> Server {
    let text = format!(
        r#"
listen = "127.0.0.1:0"
log_requests = false
[limits]
max_body_bytes = 4096
[timeouts]
upstream_read = 1.0
probe_interval = 0.2
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
headers = {{ "x-extra" = "from-config" }}
[[routes]]
model = "fast"
upstream = "oai"
upstream_model = "m-text"
[[routes]]
model = "claude-*"
upstreams = ["anth", "oai"]
upstream_model = "m-*"
[[routes]]
model = "m-*"
upstream = "anth"
[[keys]]
name = "team"
key_env = "TEAM_KEY"
max_concurrent = 1
[[keys]]
name = "other"
key_env = "OTHER_KEY"
{extra}
"#,
        anth = fake.base_url(Style::Anthropic),
        oai = fake.base_url(Style::OpenAi),
    );
    let config = ServeConfig::from_toml(&text, env).expect("the configuration reads");
    serve(config).expect("the gateway starts")
}

// ---------------------------------------------------------------- a raw HTTP/1.1 client on smol

fn request_bytes(method: &str, path: &str, key: Option<&str>, body: &[u8], close: bool) -> Vec<u8> {
    let auth = key.map(|k| format!("Authorization: Bearer {k}\r\n")).unwrap_or_default();
    let conn = if close { "Connection: close\r\n" } else { "" };
    let mut out = format!(
        "{method} {path} HTTP/1.1\r\nHost: gw\r\n{auth}{conn}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// One request on its own connection.
async fn call(addr: SocketAddr, method: &str, path: &str, key: Option<&str>, body: impl AsRef<[u8]>) -> Answer {
    let body = body.as_ref();
    let mut s = smol::net::TcpStream::connect(addr).await.expect("connect to the gateway");
    s.write_all(&request_bytes(method, path, key, body, true)).await.expect("send");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw).await;
    let (answer, _) =
        parse_answer(&raw).unwrap_or_else(|| panic!("no whole response in {:?}", String::from_utf8_lossy(&raw)));
    answer
}

fn chat(model: &str, stream: bool) -> Vec<u8> {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream,
           "stream_options": if stream { json!({"include_usage": true}) } else { Value::Null }})
    .to_string()
    .into_bytes()
}

/// The text of an OpenAI chunk stream, whether it ended with `[DONE]`, and
/// the error object when one ended it.
fn read_stream(body: &str) -> (String, bool, Option<Value>) {
    let mut text = String::new();
    let (mut done, mut error) = (false, None);
    for data in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        assert!(!done && error.is_none(), "an event after the end: {data}\n{body}");
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("chunk ({e}): {data}"));
        if v.get("error").is_some() {
            error = Some(v["error"].clone());
            continue;
        }
        assert_eq!(v["object"], "chat.completion.chunk", "{data}");
        for c in v["choices"].as_array().unwrap() {
            text.push_str(c["delta"]["content"].as_str().unwrap_or_default());
        }
    }
    (text, done, error)
}

fn openai_error(a: &Answer) -> Value {
    let v = a.json();
    let e = &v["error"];
    assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    assert!(e["type"].as_str().is_some(), "{v}");
    e.clone()
}

fn metrics(addr: SocketAddr) -> String {
    let a = smol::block_on(call(addr, "GET", "/metrics", None, b""));
    assert_eq!(a.status, 200);
    assert!(a.header("content-type").unwrap().starts_with("text/plain"));
    a.text()
}

// ---------------------------------------------------------------- tests

#[test]
fn routes_send_each_model_to_its_upstream_under_its_upstream_name() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, "");
    let addr = server.local_addr();
    smol::block_on(async {
        // `fast` → the OpenAI upstream as m-text; `claude-text` → Anthropic as m-text.
        for (model, want_path) in [("fast", "/v1/chat/completions"), ("claude-text", "/v1/messages")] {
            fake.clear_requests();
            let a = call(addr, "POST", "/v1/chat/completions", Some(TEAM_KEY), &chat(model, false)).await;
            assert_eq!(a.status, 200, "{model}: {}", a.text());
            let v = a.json();
            assert_eq!(v["choices"][0]["message"]["content"], TEXT, "{model}");
            let reqs = fake.requests();
            assert_eq!(reqs.len(), 1, "{model}");
            assert_eq!(reqs[0].path(), want_path, "{model}");
            assert_eq!(reqs[0].model.as_deref(), Some("m-text"), "{model}");
            let extra = reqs[0].header("x-extra");
            assert_eq!(extra, (model == "fast").then_some("from-config"), "{model}: per-upstream headers");
        }
        // No route: 404 in the OpenAI shape, nothing sent upstream.
        fake.clear_requests();
        let a = call(addr, "POST", "/v1/chat/completions", Some(TEAM_KEY), &chat("gpt-nope", false)).await;
        assert_eq!(a.status, 404);
        let e = openai_error(&a);
        assert_eq!((e["code"].as_str(), e["param"].as_str()), (Some("model_not_found"), Some("model")));
        assert!(fake.requests().is_empty());
        // The model list names the exact routes.
        let a = call(addr, "GET", "/v1/models", Some(TEAM_KEY), b"").await;
        let ids: Vec<String> =
            a.json()["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect();
        assert_eq!(ids, vec!["fast"]);
    });
    server.shutdown();
}

#[test]
fn keys_are_checked_and_each_key_has_its_own_concurrency_limit() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, "");
    let addr = server.local_addr();
    smol::block_on(async {
        let ok = chat("m-text", false);
        for key in [None, Some("not-a-key"), Some(&TEAM_KEY[..5])] {
            let a = call(addr, "POST", "/v1/chat/completions", key, &ok).await;
            assert_eq!(a.status, 401, "{key:?}");
            assert_eq!(openai_error(&a)["type"], "authentication_error");
            assert!(!a.text().contains(TEAM_KEY) && !a.text().contains(UPSTREAM_KEY));
        }
        // The Anthropic and Gemini places for a key are accepted too.
        for header in ["x-api-key", "x-goog-api-key"] {
            let mut s = smol::net::TcpStream::connect(addr).await.unwrap();
            let head = format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n{header}: {OTHER_KEY}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
                ok.len()
            );
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(&ok).await.unwrap();
            let mut raw = Vec::new();
            let _ = s.read_to_end(&mut raw).await;
            assert_eq!(parse_answer(&raw).unwrap().0.status, 200, "{header}");
        }

        // `team` may have one request in flight: a second gets 429 with
        // Retry-After while the first is held by a slow upstream; `other` is
        // not limited by `team`'s load.
        let slow = smol::spawn(call(addr, "POST", "/v1/chat/completions", Some(TEAM_KEY), chat("m-slow", true)));
        smol::Timer::after(Duration::from_millis(300)).await;
        let a = call(addr, "POST", "/v1/chat/completions", Some(TEAM_KEY), &ok).await;
        assert_eq!(a.status, 429, "{}", a.text());
        assert_eq!(a.header("retry-after"), Some("1"));
        assert_eq!(openai_error(&a)["code"], "rate_limit_exceeded");
        let a = call(addr, "POST", "/v1/chat/completions", Some(OTHER_KEY), &ok).await;
        assert_eq!(a.status, 200);
        let slow = slow.await;
        assert_eq!(slow.status, 200);
        assert_eq!(read_stream(&slow.text()), (TEXT.to_string(), true, None));
        // The slot is free again once the stream has ended.
        let a = call(addr, "POST", "/v1/chat/completions", Some(TEAM_KEY), &ok).await;
        assert_eq!(a.status, 200, "{}", a.text());

        // Bodies over the limit: 413 from the declared length, before reading it.
        let big = json!({"model": "m-text", "messages": [{"role": "user", "content": "x".repeat(5000)}]}).to_string();
        let a = call(addr, "POST", "/v1/chat/completions", Some(TEAM_KEY), big.as_bytes()).await;
        assert_eq!(a.status, 413);
        assert_eq!(openai_error(&a)["code"], "request_too_large");
    });
    // Keys never reach the metrics.
    let text = metrics(addr);
    for secret in [TEAM_KEY, OTHER_KEY, UPSTREAM_KEY] {
        assert!(!text.contains(secret), "a key in the metrics");
    }
    assert!(
        metric(
            &text,
            r#"nexus_gateway_requests_total{surface="openai.chat",upstream="",model="",status="401",outcome="complete"}"#
        ) >= 3.0,
        "{text}"
    );
    server.shutdown();
}

#[test]
fn pipelined_requests_are_answered_in_order_on_one_connection() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, "");
    let addr = server.local_addr();
    smol::block_on(async {
        let mut s = smol::net::TcpStream::connect(addr).await.unwrap();
        let mut all = Vec::new();
        all.extend(request_bytes("POST", "/v1/chat/completions", Some(TEAM_KEY), &chat("claude-text", false), false));
        all.extend(request_bytes("GET", "/health", None, b"", false));
        all.extend(request_bytes("POST", "/v1/chat/completions", Some(TEAM_KEY), &chat("fast", true), true));
        s.write_all(&all).await.unwrap();
        let mut raw = Vec::new();
        let _ = s.read_to_end(&mut raw).await;
        let (first, n1) = parse_answer(&raw).expect("first");
        let (second, n2) = parse_answer(&raw[n1..]).expect("second");
        let (third, _) = parse_answer(&raw[n1 + n2..]).expect("third");
        assert_eq!(first.json()["choices"][0]["message"]["content"], TEXT);
        assert_eq!(second.json()["status"], "ok");
        assert_eq!(read_stream(&third.text()), (TEXT.to_string(), true, None));
    });
    server.shutdown();
}

#[test]
fn h2c_multiplexes_whole_and_streamed_answers_on_one_connection() {
    use http_body_util::{BodyExt, Full};
    use smol_hyper::rt::{FuturesIo, SmolExecutor, SmolTimer};

    let fake = FakeProvider::start(scripts());
    let server = start(&fake, "");
    let addr = server.local_addr();
    let ex = Arc::new(smol::Executor::new());
    smol::block_on(ex.run(async {
        let io = FuturesIo::new(smol::net::TcpStream::connect(addr).await.unwrap());
        let (sender, conn) = hyper::client::conn::http2::Builder::new(SmolExecutor::new(ex.clone()))
            .timer(SmolTimer::new())
            .handshake::<_, Full<bytes::Bytes>>(io)
            .await
            .expect("an h2c handshake");
        let conn = ex.spawn(conn);
        let mut tasks = Vec::new();
        for i in 0..12 {
            let mut sender = sender.clone();
            let stream = i % 2 == 0;
            tasks.push(ex.spawn(async move {
                let req = hyper::Request::post(format!("http://{addr}/v1/chat/completions"))
                    .header("authorization", format!("Bearer {OTHER_KEY}"))
                    .header("content-type", "application/json")
                    .body(Full::new(bytes::Bytes::from(chat("claude-text", stream))))
                    .unwrap();
                let resp = sender.send_request(req).await.expect("an h2 response");
                assert_eq!(resp.version(), hyper::Version::HTTP_2);
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await.expect("the body").to_bytes();
                (stream, status, String::from_utf8(body.to_vec()).unwrap())
            }));
        }
        for t in tasks {
            let (stream, status, body) = t.await;
            assert_eq!(status, 200, "{body}");
            if stream {
                assert_eq!(read_stream(&body), (TEXT.to_string(), true, None));
            } else {
                let v: Value = serde_json::from_str(&body).unwrap();
                assert_eq!(v["choices"][0]["message"]["content"], TEXT);
            }
        }
        // The last sender gone, the client closes the connection.
        drop(sender);
        conn.await.expect("the h2 connection closes cleanly");
    }));
    server.shutdown();
}

/// An upstream that resets, stalls or errors mid-stream, or refuses with 529:
/// every client of the batch gets a well-formed OpenAI error, nothing after it.
#[test]
fn upstream_faults_mid_stream_give_every_client_an_openai_error() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, "");
    let addr = server.local_addr();
    const CLIENTS: usize = 16;
    for (model, status, code) in [
        ("m-reset", 200, "upstream_error"),
        ("m-stall", 200, "upstream_timeout"),
        ("m-storm", 200, "overloaded_error"),
        ("m-529", 503, "overloaded_error"),
    ] {
        let answers = smol::block_on(async {
            let tasks: Vec<_> = (0..CLIENTS)
                .map(|_| smol::spawn(call(addr, "POST", "/v1/chat/completions", Some(OTHER_KEY), chat(model, true))))
                .collect();
            let mut out = Vec::new();
            for t in tasks {
                out.push(t.await);
            }
            out
        });
        for a in answers {
            assert_eq!(a.status, status, "{model}: {}", a.text());
            let e = if status == 200 {
                let (_, done, error) = read_stream(&a.text());
                assert!(!done, "{model}: a failed stream must not end with [DONE]");
                error.unwrap_or_else(|| panic!("{model}: no error event in {}", a.text()))
            } else {
                openai_error(&a)
            };
            assert_eq!(e["code"], code, "{model}: {e}");
            assert!(e["message"].as_str().is_some_and(|m| !m.is_empty()), "{model}: {e}");
        }
    }
    let text = metrics(addr);
    assert!(
        metric(&text, r#"nexus_gateway_upstream_errors_total{upstream="anth",kind="stalled"}"#) >= CLIENTS as f64,
        "{text}"
    );
    assert!(
        metric(&text, r#"nexus_gateway_upstream_errors_total{upstream="anth",kind="stream_cut"}"#) >= CLIENTS as f64,
        "{text}"
    );
    server.shutdown();
}

#[test]
fn a_client_that_leaves_mid_stream_cancels_the_upstream_request() {
    let fake = FakeProvider::start(scripts());
    // The upstream pauses 1.5 s mid-stream; the gateway would wait up to 10 s.
    let server = server_with_read_timeout(&fake, 10.0);
    let addr2 = server.local_addr();
    smol::block_on(async {
        let mut s = smol::net::TcpStream::connect(addr2).await.unwrap();
        // A keep-alive connection (as SDK clients keep theirs).
        s.write_all(&request_bytes("POST", "/v1/chat/completions", Some(OTHER_KEY), &chat("m-pause", true), false))
            .await
            .unwrap();
        // Read the response head (the upstream has begun and paused), then leave.
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&raw).contains("\r\n\r\n") {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "the stream ended early: {}", String::from_utf8_lossy(&raw));
            raw.extend_from_slice(&buf[..n]);
        }
        drop(s);
    });
    // The gateway dropped its upstream connection: the fake's next write fails.
    let deadline = Instant::now() + Duration::from_secs(10);
    while fake.replies_cut_by_client() == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(fake.replies_cut_by_client(), 1, "the upstream request was not cancelled");
    // And the request is counted as the client's departure, nothing left in flight.
    let mut text = metrics(addr2);
    let deadline = Instant::now() + Duration::from_secs(5);
    while metric(&text, "nexus_gateway_in_flight") > 1.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        text = metrics(addr2);
    }
    // The metrics request itself is in flight while it is rendered.
    assert_eq!(metric(&text, "nexus_gateway_in_flight"), 1.0, "{text}");
    assert_eq!(
        metric(
            &text,
            r#"nexus_gateway_requests_total{surface="openai.chat",upstream="anth",model="m-pause",status="200",outcome="client_gone"}"#
        ),
        1.0,
        "{text}"
    );
    server.shutdown();
}

fn server_with_read_timeout(fake: &FakeProvider, secs: f64) -> Server {
    let text = format!(
        r#"
listen = "127.0.0.1:0"
log_requests = false
[timeouts]
upstream_read = {secs}
[[upstreams]]
name = "anth"
style = "anthropic"
base_url = "{anth}"
api_key_env = "UPSTREAM_KEY"
[[keys]]
name = "other"
key_env = "OTHER_KEY"
"#,
        anth = fake.base_url(Style::Anthropic),
    );
    serve(ServeConfig::from_toml(&text, env).unwrap()).unwrap()
}

#[test]
fn health_readiness_and_metrics() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, "");
    let addr = server.local_addr();
    let a = smol::block_on(call(addr, "GET", "/health", None, b""));
    assert_eq!((a.status, a.json()["status"].as_str()), (200, Some("ok")));
    // Ready once every upstream has been probed.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ready = smol::block_on(call(addr, "GET", "/ready", None, b""));
    while ready.status != 200 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        ready = smol::block_on(call(addr, "GET", "/ready", None, b""));
    }
    assert_eq!(ready.status, 200, "{}", ready.text());
    assert_eq!(ready.json()["upstreams"]["anth"]["status"], "ok");

    smol::block_on(async {
        let a = call(addr, "POST", "/v1/chat/completions", Some(OTHER_KEY), &chat("claude-text", false)).await;
        assert_eq!(a.status, 200);
        let a = call(addr, "POST", "/v1/chat/completions", Some(OTHER_KEY), &chat("claude-text", true)).await;
        assert_eq!(read_stream(&a.text()).0, TEXT);
    });
    let text = metrics(addr);
    let series = r#"{surface="openai.chat",upstream="anth",model="claude-text""#;
    assert_eq!(
        metric(&text, &format!("nexus_gateway_requests_total{series},status=\"200\",outcome=\"complete\"}}")),
        2.0,
        "{text}"
    );
    assert_eq!(metric(&text, &format!("nexus_gateway_first_byte_seconds_count{series}}}")), 2.0, "{text}");
    assert_eq!(metric(&text, &format!("nexus_gateway_request_duration_seconds_count{series}}}")), 2.0, "{text}");
    // Both answers reported 11 in and 7 out.
    assert_eq!(
        metric(&text, r#"nexus_gateway_tokens_total{upstream="anth",model="claude-text",direction="in"}"#),
        22.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"nexus_gateway_tokens_total{upstream="anth",model="claude-text",direction="out"}"#),
        14.0,
        "{text}"
    );
    assert!(text.contains("# TYPE nexus_gateway_first_byte_seconds histogram"));
    server.shutdown();

    // An upstream nobody listens on: not ready, and /ready says which and why.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let text = format!(
        "listen = \"127.0.0.1:0\"\nlog_requests = false\n[timeouts]\nprobe_interval = 0.2\nupstream_connect = 1\n[[upstreams]]\nname = \"gone\"\nstyle = \"openai\"\nbase_url = \"http://{dead}/v1\"\n"
    );
    let server = serve(ServeConfig::from_toml(&text, env).unwrap()).unwrap();
    let addr = server.local_addr();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ready = smol::block_on(call(addr, "GET", "/ready", None, b""));
    while ready.json()["upstreams"]["gone"]["status"] != "unreachable" && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        ready = smol::block_on(call(addr, "GET", "/ready", None, b""));
    }
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert_eq!(ready.json()["upstreams"]["gone"]["status"], "unreachable", "{}", ready.text());
    server.shutdown();
}

#[test]
fn a_client_that_sends_half_a_head_is_disconnected() {
    let fake = FakeProvider::start(scripts());
    let text = format!(
        "listen = \"127.0.0.1:0\"\nlog_requests = false\n[timeouts]\nidle = 0.5\n[[upstreams]]\nname = \"a\"\nstyle = \"anthropic\"\nbase_url = \"{}\"\n",
        fake.base_url(Style::Anthropic)
    );
    let server = serve(ServeConfig::from_toml(&text, env).unwrap()).unwrap();
    let addr = server.local_addr();
    smol::block_on(async {
        let mut s = smol::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n").await.unwrap();
        let mut raw = Vec::new();
        let read = async { s.read_to_end(&mut raw).await.is_ok() }
            .or(async {
                smol::Timer::after(Duration::from_secs(10)).await;
                false
            })
            .await;
        assert!(read, "the connection was kept open");
    });
    server.shutdown();
}

#[test]
fn an_h2_client_resetting_its_stream_cancels_the_upstream_request() {
    use http_body_util::Full;
    use smol_hyper::rt::{FuturesIo, SmolExecutor, SmolTimer};

    let fake = FakeProvider::start(scripts());
    let server = server_with_read_timeout(&fake, 10.0);
    let addr = server.local_addr();
    let ex = Arc::new(smol::Executor::new());
    smol::block_on(ex.run(async {
        let io = FuturesIo::new(smol::net::TcpStream::connect(addr).await.unwrap());
        let (mut sender, conn) = hyper::client::conn::http2::Builder::new(SmolExecutor::new(ex.clone()))
            .timer(SmolTimer::new())
            .handshake::<_, Full<bytes::Bytes>>(io)
            .await
            .expect("an h2c handshake");
        let conn = ex.spawn(conn);
        let req = hyper::Request::post(format!("http://{addr}/v1/chat/completions"))
            .header("authorization", format!("Bearer {OTHER_KEY}"))
            .body(Full::new(bytes::Bytes::from(chat("m-pause", true))))
            .unwrap();
        let resp = sender.send_request(req).await.expect("an h2 response");
        assert_eq!(resp.status(), 200);
        // Dropping the body resets the stream; the connection stays open.
        drop(resp);
        let deadline = Instant::now() + Duration::from_secs(10);
        while fake.replies_cut_by_client() == 0 && Instant::now() < deadline {
            smol::Timer::after(Duration::from_millis(50)).await;
        }
        assert_eq!(fake.replies_cut_by_client(), 1, "the upstream request was not cancelled");
        assert!(!conn.is_finished(), "the connection should outlive the stream");
        drop(sender);
        conn.await.expect("the h2 connection closes cleanly");
    }));
    server.shutdown();
}
