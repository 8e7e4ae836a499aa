//! `nexus serve` end to end: the official `openai` Python SDK talks to the
//! gateway, the gateway talks to the fake provider in each wire format.
//! Expectations come from the fake's scripts (texts, tool names, argument
//! bytes, token counts, the upstream's error message) and from the OpenAI
//! contract, never from an earlier run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use nexus_drive::serve::{serve, ServeConfig, Server};
use nexus_drive::Style as ProtoStyle;
use nexus_tests::fake::{FakeProvider, Fault, FaultKind, Script, Scripts, Style, Turn};
use nexus_tests::oracle::python;
use serde_json::{json, Value};

mod serve_support;
use serve_support::{proto, rate_limit_body, ADD, CLIENT_TOKEN, SLOW_DOWN, UPSTREAM_KEY, WEATHER};

fn scripts(style: Style) -> Scripts {
    let busy = Fault::new(FaultKind::Status {
        status: 429,
        retry_after: Some("7".into()),
        body: Some(rate_limit_body(style)),
    })
    .times(1000);
    let slow = Fault::new(FaultKind::Stall { ms: 1500 }).times(1000);
    Scripts::new(UPSTREAM_KEY)
        .model("m-text", Script::new(vec![Turn::text("Hello from the fake").usage(11, 7)]))
        .model(
            "m-tools",
            Script::new(vec![
                Turn::default().call("get_weather", WEATHER).call("add", ADD).usage(20, 9),
                Turn::text("Sunny in Paris, and 2 + 2 = 4.").usage(40, 12),
            ]),
        )
        .model("m-busy", Script::new(vec![Turn::text("never").fault(busy)]))
        .model("m-slow", Script::new(vec![Turn::text("finally").fault(slow)]))
}

fn start(fake: &FakeProvider, style: Style, tune: impl FnOnce(&mut ServeConfig)) -> Server {
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap(), proto(style))
        .upstream_base_url(fake.base_url(style))
        .api_key(UPSTREAM_KEY);
    config.client_token = Some(CLIENT_TOKEN.to_string());
    if style == Style::Gemini {
        // The Gemini fake has no model list; the gateway lists what it is told.
        config.models = vec!["m-busy".into(), "m-slow".into(), "m-text".into(), "m-tools".into()];
    }
    tune(&mut config);
    serve(config).expect("the gateway starts")
}

// ---------------------------------------------------------------- the openai SDK

/// Drives the gateway with the `openai` package; prints one JSON object.
const CLIENT: &str = r#"
import json, sys
import openai

cfg = json.loads(sys.argv[1])
client = openai.OpenAI(base_url=cfg["base_url"], api_key=cfg["token"], max_retries=0, timeout=30)
out = {}
hi = [{"role": "user", "content": "hi"}]

r = client.chat.completions.create(model="m-text", messages=hi)
c = r.choices[0]
out["text"] = {"object": r.object, "role": c.message.role, "content": c.message.content, "finish": c.finish_reason,
               "usage": [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens]}

parts, finish, usage, ids = [], None, None, set()
for chunk in client.chat.completions.create(model="m-text", messages=hi, stream=True, stream_options={"include_usage": True}):
    ids.add(chunk.id)
    if chunk.usage:
        usage = [chunk.usage.prompt_tokens, chunk.usage.completion_tokens, chunk.usage.total_tokens]
    for ch in chunk.choices:
        parts.append(ch.delta.content or "")
        finish = ch.finish_reason or finish
out["text_stream"] = {"content": "".join(parts), "finish": finish, "usage": usage, "ids": len(ids)}

tools = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "Adds a and b",
     "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}},
]
ask = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "Weather in Paris, and 2+2?"}]

def calls_of(message):
    return [{"id": t.id, "type": t.type, "name": t.function.name, "arguments": t.function.arguments}
            for t in (message.tool_calls or [])]

r = client.chat.completions.create(model="m-tools", messages=ask, tools=tools)
m = r.choices[0].message
out["tools"] = {"calls": calls_of(m), "finish": r.choices[0].finish_reason, "content": m.content}

# The SDK's stream helper parses arguments, which it only does for strict tools.
strict = [{"type": "function", "function": dict(t["function"], strict=True)} for t in tools]
for t in strict:
    t["function"]["parameters"] = dict(t["function"]["parameters"], additionalProperties=False,
                                       required=sorted(t["function"]["parameters"]["properties"]))
with client.chat.completions.stream(model="m-tools", messages=ask, tools=strict) as s:
    final = s.get_final_completion()
out["tools_stream"] = {"calls": calls_of(final.choices[0].message), "finish": final.choices[0].finish_reason}

results = {"get_weather": "sunny-22C", "add": "4"}
follow = ask + [m] + [{"role": "tool", "tool_call_id": t.id, "content": results[t.function.name]} for t in m.tool_calls]
r = client.chat.completions.create(model="m-tools", messages=follow, tools=tools)
out["follow_up"] = {"content": r.choices[0].message.content, "finish": r.choices[0].finish_reason,
                    "calls": calls_of(r.choices[0].message)}
parts = []
for chunk in client.chat.completions.create(model="m-tools", messages=follow, tools=tools, stream=True):
    for ch in chunk.choices:
        parts.append(ch.delta.content or "")
out["follow_up_stream"] = "".join(parts)

def failure(fn):
    try:
        fn()
        return None
    except openai.APIStatusError as e:
        return {"class": type(e).__name__, "status": e.status_code, "message": e.message,
                "param": getattr(e, "param", None), "retry_after": e.response.headers.get("retry-after")}

out["busy"] = failure(lambda: client.chat.completions.create(model="m-busy", messages=hi))
def busy_stream():
    for _ in client.chat.completions.create(model="m-busy", messages=hi, stream=True):
        pass
out["busy_stream"] = failure(busy_stream)
if cfg["translated"]:
    out["bad"] = failure(lambda: client.chat.completions.create(model="m-text", messages=hi, n=2))
out["models"] = sorted(x.id for x in client.models.list())
wrong = openai.OpenAI(base_url=cfg["base_url"], api_key="not-the-token", max_retries=0)
out["wrong_token"] = failure(lambda: wrong.chat.completions.create(model="m-text", messages=hi))
print(json.dumps(out))
"#;

fn run_client(addr: SocketAddr, translated: bool) -> Option<Value> {
    let py = python()?;
    let cfg = json!({"base_url": format!("http://{addr}/v1"), "token": CLIENT_TOKEN, "translated": translated});
    let out = Command::new(py).arg("-c").arg(CLIENT).arg(cfg.to_string()).output().expect("run the openai client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the openai client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("client output ({e}): {stdout}")))
}

fn sdk_scenario(style: Style) {
    let fake = FakeProvider::start(scripts(style));
    let server = start(&fake, style, |_| {});
    let Some(out) = run_client(server.local_addr(), style != Style::OpenAi) else {
        println!("skipped: the openai SDK scenario needs the oracle interpreter");
        return;
    };
    let name = style.name();

    // A text turn, whole and streamed.
    assert_eq!(
        out["text"],
        json!({"object": "chat.completion", "role": "assistant", "content": "Hello from the fake", "finish": "stop", "usage": [11, 7, 18]}),
        "{name}"
    );
    assert_eq!(out["text_stream"]["content"], "Hello from the fake", "{name}");
    assert_eq!(out["text_stream"]["finish"], "stop", "{name}");
    assert_eq!(out["text_stream"]["usage"], json!([11, 7, 18]), "{name}");
    assert_eq!(out["text_stream"]["ids"], 1, "{name}: one completion id across the chunks");

    // Two parallel calls, in order, with their exact argument bytes, whole and streamed.
    for key in ["tools", "tools_stream"] {
        let calls = out[key]["calls"].as_array().unwrap_or_else(|| panic!("{name} {key}: {}", out[key]));
        let got: Vec<(&str, &str, &str)> = calls
            .iter()
            .map(|c| (c["type"].as_str().unwrap(), c["name"].as_str().unwrap(), c["arguments"].as_str().unwrap()))
            .collect();
        assert_eq!(got, vec![("function", "get_weather", WEATHER), ("function", "add", ADD)], "{name} {key}");
        let ids: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
        assert!(ids.iter().all(|id| !id.is_empty()) && ids[0] != ids[1], "{name} {key}: ids {ids:?}");
        assert_eq!(out[key]["finish"], "tool_calls", "{name} {key}");
    }
    assert!(out["tools"]["content"].is_null(), "{name}: no text beside the calls");

    // The follow-up turn carrying both results gets the final answer.
    assert_eq!(out["follow_up"]["content"], "Sunny in Paris, and 2 + 2 = 4.", "{name}");
    assert_eq!(out["follow_up"]["finish"], "stop", "{name}");
    assert_eq!(out["follow_up"]["calls"], json!([]), "{name}");
    assert_eq!(out["follow_up_stream"], "Sunny in Paris, and 2 + 2 = 4.", "{name}");
    let ids: Vec<String> =
        out["tools"]["calls"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_string()).collect();
    check_follow_up_upstream(&fake, style, &ids);

    // The upstream's refusal, with its own message, status and Retry-After.
    for key in ["busy", "busy_stream"] {
        let e = &out[key];
        assert_eq!(e["class"], "RateLimitError", "{name} {key}: {e}");
        assert_eq!(e["status"], 429, "{name} {key}");
        assert!(e["message"].as_str().unwrap().contains(SLOW_DOWN), "{name} {key}: {e}");
        assert_eq!(e["retry_after"], "7", "{name} {key}");
    }
    if style != Style::OpenAi {
        let e = &out["bad"];
        assert_eq!(
            (e["class"].as_str(), e["status"].as_u64(), e["param"].as_str()),
            (Some("BadRequestError"), Some(400), Some("n")),
            "{name}: {e}"
        );
    }
    assert_eq!(out["models"], json!(["m-busy", "m-slow", "m-text", "m-tools"]), "{name}");
    assert_eq!(out["wrong_token"]["status"], 401, "{name}");

    // The client's token never went upstream; the upstream key always did.
    for r in fake.requests() {
        for (k, v) in &r.headers {
            assert!(!v.contains(CLIENT_TOKEN), "{name}: the client token reached the upstream in {k}");
        }
        let key = match style {
            Style::Anthropic => r.header("x-api-key").map(str::to_string),
            Style::OpenAi | Style::OpenAiResponses => r.header("authorization").map(str::to_string),
            Style::Gemini => r.header("x-goog-api-key").map(str::to_string),
        };
        let want = if matches!(style, Style::OpenAi | Style::OpenAiResponses) {
            format!("Bearer {UPSTREAM_KEY}")
        } else {
            UPSTREAM_KEY.to_string()
        };
        assert_eq!(key.as_deref(), Some(want.as_str()), "{name}: {}", r.target);
    }
    assert!(fake.failures().is_empty(), "{name}: {:?}", fake.failures());
    server.shutdown();
}

/// The upstream saw the follow-up as one results turn answering both calls,
/// under the ids the client was given.
fn check_follow_up_upstream(fake: &FakeProvider, style: Style, ids: &[String]) {
    let follow_ups: Vec<Value> = fake
        .requests_for("m-tools")
        .into_iter()
        .filter_map(|r| r.json)
        .filter(|j| j.to_string().contains("sunny-22C"))
        .collect();
    assert_eq!(follow_ups.len(), 2, "{}: the whole and the streamed follow-up", style.name());
    for body in follow_ups {
        let results: Vec<(String, String)> = match style {
            Style::Anthropic => {
                let turns = body["messages"].as_array().unwrap();
                assert_eq!(turns.len(), 3, "user, assistant, ONE user turn of results: {body}");
                turns[2]["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|b| (b["tool_use_id"].as_str().unwrap().into(), b["content"].as_str().unwrap().into()))
                    .collect()
            }
            Style::Gemini => {
                let turns = body["contents"].as_array().unwrap();
                assert_eq!(turns.len(), 3, "user, model, ONE user turn of results: {body}");
                turns[2]["parts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| {
                        let fr = &p["functionResponse"];
                        (fr["id"].as_str().unwrap().into(), fr["response"]["output"].as_str().unwrap().into())
                    })
                    .collect()
            }
            Style::OpenAiResponses => {
                let items = body["input"].as_array().unwrap();
                let kinds: Vec<&str> = items.iter().map(|i| i["type"].as_str().unwrap_or("message")).collect();
                assert_eq!(
                    kinds,
                    ["message", "function_call", "function_call", "function_call_output", "function_call_output"],
                    "user, the two calls, one output each: {body}"
                );
                items[3..]
                    .iter()
                    .map(|i| (i["call_id"].as_str().unwrap().into(), i["output"].as_str().unwrap().into()))
                    .collect()
            }
            Style::OpenAi => body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| (m["tool_call_id"].as_str().unwrap().into(), m["content"].as_str().unwrap().into()))
                .collect(),
        };
        let want = vec![(ids[0].clone(), "sunny-22C".to_string()), (ids[1].clone(), "4".to_string())];
        assert_eq!(results, want, "{}", style.name());
    }
}

#[test]
fn the_openai_sdk_through_the_gateway_to_anthropic() {
    sdk_scenario(Style::Anthropic);
}

#[test]
fn the_openai_sdk_through_the_gateway_to_gemini() {
    sdk_scenario(Style::Gemini);
}

#[test]
fn the_openai_sdk_through_the_gateway_to_an_openai_responses_upstream() {
    sdk_scenario(Style::OpenAiResponses);
}

#[test]
fn the_openai_sdk_through_the_gateway_to_an_openai_upstream() {
    sdk_scenario(Style::OpenAi);
}

// ---------------------------------------------------------------- raw HTTP

/// One request on its own connection; returns status, headers and the
/// (de-chunked) body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut s = TcpStream::connect(addr).expect("connect to the gateway");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: gw\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
        let mut out = Vec::new();
        let mut rest = body.as_slice();
        loop {
            let i = rest.windows(2).position(|w| w == b"\r\n").expect("a chunk size line");
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..i]).unwrap().trim(), 16).unwrap();
            rest = &rest[i + 2..];
            if size == 0 {
                break;
            }
            out.extend_from_slice(&rest[..size]);
            rest = &rest[size + 2..];
        }
        body = out;
    }
    (status, headers, body)
}

fn error_of(body: &[u8]) -> Value {
    let v: Value =
        serde_json::from_slice(body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(body)));
    assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{v}");
    v["error"].clone()
}

#[test]
fn malformed_oversized_unauthorized_and_misrouted_requests_get_openai_errors() {
    let fake = FakeProvider::start(scripts(Style::Anthropic));
    let server = start(&fake, Style::Anthropic, |c| c.max_body_bytes = 2048);
    let addr = server.local_addr();
    let chat = "/v1/chat/completions";

    let (status, _, body) = http(addr, "POST", chat, Some(CLIENT_TOKEN), b"{\"model\": \"m-text\", ");
    assert_eq!(status, 400);
    let e = error_of(&body);
    assert_eq!((e["type"].as_str(), e["code"].as_str()), (Some("invalid_request_error"), Some("invalid_json")));

    let big = json!({"model": "m-text", "messages": [{"role": "user", "content": "x".repeat(4096)}]}).to_string();
    let (status, _, body) = http(addr, "POST", chat, Some(CLIENT_TOKEN), big.as_bytes());
    assert_eq!(status, 413);
    error_of(&body);

    let ok = json!({"model": "m-text", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let (status, _, body) = http(addr, "POST", chat, None, ok.as_bytes());
    assert_eq!(status, 401);
    assert_eq!(error_of(&body)["type"], "authentication_error");

    let (status, headers, body) = http(addr, "GET", chat, Some(CLIENT_TOKEN), b"");
    assert_eq!(status, 405);
    assert!(headers.contains(&("allow".to_string(), "POST".to_string())));
    error_of(&body);

    let (status, _, body) = http(addr, "POST", "/v1/embeddings", Some(CLIENT_TOKEN), ok.as_bytes());
    assert_eq!(status, 404);
    error_of(&body);

    // None of these reached the upstream.
    assert!(fake.requests().is_empty(), "{:?}", fake.requests().iter().map(|r| &r.target).collect::<Vec<_>>());

    // And the connection still serves a good request afterwards.
    let (status, _, body) = http(addr, "POST", chat, Some(CLIENT_TOKEN), ok.as_bytes());
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from the fake");
    server.shutdown();
}

#[test]
fn an_unreachable_upstream_is_a_bad_gateway() {
    // A port that was free a moment ago: nothing listens there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap(), ProtoStyle::Gemini)
        .upstream_base_url(format!("http://{dead}/v1beta"))
        .api_key(UPSTREAM_KEY);
    config.upstream_connect_timeout = Duration::from_secs(2);
    let server = serve(config).unwrap();
    let ok = json!({"model": "m-text", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let (status, _, body) = http(server.local_addr(), "POST", "/v1/chat/completions", None, ok.as_bytes());
    assert_eq!(status, 502);
    assert_eq!(error_of(&body)["type"], "server_error");
    server.shutdown();
}

/// The upstream closes a kept-alive connection after answering, without
/// saying so (its idle timeout). The gateway's next request must not be
/// written into it: it goes out once, on a new connection, and succeeds.
/// (The gateway's loop knows a close from its readiness edge, and probes
/// the socket only then.)
#[test]
fn a_pooled_upstream_connection_the_upstream_closed_is_not_used() {
    for style in [Style::Anthropic, Style::OpenAi] {
        let hang_up = Fault::new(FaultKind::CloseWhenIdle);
        let fake = FakeProvider::start(
            Scripts::new(UPSTREAM_KEY).model("m-idle", Script::new(vec![Turn::text("the answer").fault(hang_up)])),
        );
        let server = start(&fake, style, |_| {});
        let body = json!({"model": "m-idle", "messages": [{"role": "user", "content": "hi"}]}).to_string();
        let token = CLIENT_TOKEN;
        let first = http(server.local_addr(), "POST", "/v1/chat/completions", Some(token), body.as_bytes());
        assert_eq!(first.0, 200, "{style:?}: {}", String::from_utf8_lossy(&first.2));
        let closed = fake.closed_connections();
        let until = Instant::now() + Duration::from_secs(10);
        while closed.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            assert!(Instant::now() < until, "{style:?}: the fake never closed the connection");
            std::thread::sleep(Duration::from_millis(1));
        }
        // The same request: the fault has been spent, so the answer is plain.
        let second = http(server.local_addr(), "POST", "/v1/chat/completions", Some(token), body.as_bytes());
        assert_eq!(second.0, 200, "{style:?}: {}", String::from_utf8_lossy(&second.2));
        assert!(String::from_utf8_lossy(&second.2).contains("the answer"), "{style:?}");
        let conns: Vec<u64> = fake.requests().iter().map(|r| r.connection).collect();
        assert_eq!(conns.len(), 2, "{style:?}: one upstream request each, no failed attempt");
        assert_ne!(conns[0], conns[1], "{style:?}: the second request went on a new connection");
        server.shutdown();
    }
}

/// The text of an OpenAI chunk stream, and whether it ended with `[DONE]`.
fn stream_text(body: &str) -> (String, bool) {
    let mut text = String::new();
    let mut done = false;
    for data in body.lines().filter_map(|l| l.strip_prefix("data: ")) {
        assert!(!done, "an event after [DONE]: {data}");
        if data == "[DONE]" {
            done = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("chunk ({e}): {data}"));
        assert_eq!(v["object"], "chat.completion.chunk", "{data}");
        for c in v["choices"].as_array().unwrap() {
            text.push_str(c["delta"]["content"].as_str().unwrap_or_default());
        }
    }
    (text, done)
}

fn stream_request(model: &str) -> Vec<u8> {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": true}).to_string().into_bytes()
}

#[test]
fn streams_run_concurrently_and_a_shutdown_lets_them_finish() {
    let fake = FakeProvider::start(scripts(Style::Anthropic));
    let server = start(&fake, Style::Anthropic, |_| {});
    let addr = server.local_addr();
    let started = Instant::now();
    // A stream whose upstream stalls 1.5 s before answering.
    let slow = std::thread::spawn(move || {
        let (status, _, body) =
            http(addr, "POST", "/v1/chat/completions", Some(CLIENT_TOKEN), &stream_request("m-slow"));
        (status, String::from_utf8(body).unwrap(), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(200));
    // Meanwhile a second stream completes without waiting for the first.
    let (status, _, body) = http(addr, "POST", "/v1/chat/completions", Some(CLIENT_TOKEN), &stream_request("m-text"));
    let fast_done = started.elapsed();
    assert_eq!(status, 200);
    let fast = String::from_utf8(body).unwrap();
    assert_eq!(stream_text(&fast), ("Hello from the fake".to_string(), true), "{fast}");
    assert!(fast_done < Duration::from_millis(1300), "the second stream waited for the first ({fast_done:?})");
    assert!(!slow.is_finished(), "the slow stream cannot be done yet");

    // Shut down while the slow stream is in flight: it still completes.
    let handle = server.shutdown_handle();
    handle.shutdown();
    assert!(handle.is_shutting_down());
    let waited = std::thread::spawn(move || {
        server.wait();
        Instant::now()
    });
    let (status, body, slow_done) = slow.join().unwrap();
    assert_eq!(status, 200);
    assert_eq!(stream_text(&body), ("finally".to_string(), true), "{body}");
    assert!(slow_done >= Duration::from_millis(1500), "{slow_done:?}");
    let finished_at = waited.join().unwrap();
    assert!(
        finished_at.duration_since(started) >= Duration::from_millis(1500),
        "wait() returned before the stream could have finished"
    );
    // The listener is closed: new connections are refused.
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(), "still accepting after shutdown");
}
