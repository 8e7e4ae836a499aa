//! `nexus serve`'s translated streams and requests over loopback HTTP,
//! checked on the bytes: parallel calls whose argument pieces a Chat
//! Completions upstream interleaves come out whole and in order on the
//! Anthropic and Responses surfaces; translated streams count their tokens
//! in `/metrics` as whole answers do; hosted Responses tools the upstream
//! cannot run are left out and named in `x-nexus-dropped`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use nexus_drive::serve::{serve, ServeConfig, Server};
use nexus_tests::fake::{FakeProvider, Script, Scripts, Style, Turn};
use serde_json::{json, Value};

mod serve_support;
use serve_support::{proto, ADD, CLIENT_TOKEN, UPSTREAM_KEY, WEATHER};

const FINAL: &str = "Sunny in Paris, and 2 + 2 = 4.";

fn scripts() -> Scripts {
    let calls = || Turn::default().call("get_weather", WEATHER).call("add", ADD).usage(20, 9);
    Scripts::new(UPSTREAM_KEY)
        .model("m-interleaved", Script::new(vec![calls().interleaved()]))
        .model("m-tools", Script::new(vec![calls(), Turn::text(FINAL).usage(40, 12)]))
        .model("m-text", Script::new(vec![Turn::text(FINAL).usage(11, 7)]))
}

fn start(fake: &FakeProvider, style: Style) -> Server {
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap(), proto(style))
        .upstream_base_url(fake.base_url(style))
        .api_key(UPSTREAM_KEY);
    config.client_token = Some(CLIENT_TOKEN.to_string());
    serve(config).expect("the gateway starts")
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The `data:` of each SSE event, parsed.
    fn events(&self) -> Vec<Value> {
        self.body
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("event ({e}): {d}")))
            .collect()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body ({e}): {}", self.body))
    }
}

/// One HTTP/1.1 request on its own connection, the client token sent both
/// ways the SDKs send keys.
fn http(addr: SocketAddr, method: &str, path: &str, body: &Value) -> Answer {
    let body = if body.is_null() { String::new() } else { body.to_string() };
    let mut s = TcpStream::connect(addr).expect("connect to the gateway");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer {CLIENT_TOKEN}\r\nx-api-key: {CLIENT_TOKEN}\r\n\
         anthropic-version: 2023-06-01\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).and_then(|_| s.write_all(body.as_bytes())).expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read the answer");
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("a response head");
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("a status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut rest = &raw[end + 4..];
    let mut body = Vec::new();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
        loop {
            let i = rest.windows(2).position(|w| w == b"\r\n").expect("a chunk size");
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..i]).unwrap().trim(), 16).unwrap();
            if size == 0 {
                break;
            }
            body.extend_from_slice(&rest[i + 2..i + 2 + size]);
            rest = &rest[i + 4 + size..];
        }
    } else {
        body.extend_from_slice(rest);
    }
    Answer { status, headers, body: String::from_utf8(body).expect("a UTF-8 body") }
}

fn metrics(addr: SocketAddr) -> String {
    let a = http(addr, "GET", "/metrics", &Value::Null);
    assert_eq!(a.status, 200);
    a.body
}

/// The sum of the token counters of one direction.
fn tokens(text: &str, direction: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with("nexus_gateway_tokens_total{") && l.contains(&format!("direction=\"{direction}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

fn tools_anthropic() -> Value {
    json!([
        {"name": "get_weather", "description": "weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
        {"name": "add", "description": "sum", "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}},
    ])
}

fn tools_responses() -> Value {
    json!([
        {"type": "function", "name": "get_weather", "description": "weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": false},
        {"type": "function", "name": "add", "description": "sum", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}, "strict": false},
    ])
}

/// The Anthropic stream's tool_use blocks: (index, name, arguments joined),
/// after checking the block discipline and that no error event came.
fn anthropic_calls(events: &[Value]) -> Vec<(u64, String, String)> {
    assert_eq!(events.first().map(|e| &e["type"]), Some(&json!("message_start")));
    assert_eq!(events.last().map(|e| &e["type"]), Some(&json!("message_stop")));
    let mut open: Option<u64> = None;
    let mut next = 0;
    let mut calls = Vec::new();
    for e in events {
        assert_ne!(e["type"], "error", "{events:?}");
        match e["type"].as_str().unwrap() {
            "content_block_start" => {
                assert_eq!((open, e["index"].as_u64()), (None, Some(next)), "{e}");
                open = Some(next);
                next += 1;
                if e["content_block"]["type"] == "tool_use" {
                    let name = e["content_block"]["name"].as_str().unwrap().to_string();
                    calls.push((e["index"].as_u64().unwrap(), name, String::new()));
                }
            }
            "content_block_delta" => {
                assert_eq!(open, e["index"].as_u64(), "{e}");
                if let Some(piece) = e["delta"]["partial_json"].as_str() {
                    calls.last_mut().unwrap().2.push_str(piece);
                }
            }
            "content_block_stop" => {
                assert_eq!(open, e["index"].as_u64(), "{e}");
                open = None;
            }
            _ => {}
        }
    }
    calls
}

#[test]
fn interleaved_parallel_call_arguments_come_out_whole_and_in_order() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, Style::OpenAi);
    let addr = server.local_addr();

    let body = json!({"model": "m-interleaved", "max_tokens": 256, "stream": true, "tools": tools_anthropic(),
                      "messages": [{"role": "user", "content": "weather in Paris, and 2+2?"}]});
    let a = http(addr, "POST", "/v1/messages", &body);
    assert_eq!(a.status, 200, "{}", a.body);
    let events = a.events();
    let calls = anthropic_calls(&events);
    assert_eq!(calls, [(0, "get_weather".into(), WEATHER.into()), (1, "add".into(), ADD.into())]);
    let stop = events.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(stop["delta"]["stop_reason"], "tool_use");

    let body = json!({"model": "m-interleaved", "stream": true, "tools": tools_responses(),
                      "input": "weather in Paris, and 2+2?"});
    let a = http(addr, "POST", "/v1/responses", &body);
    assert_eq!(a.status, 200, "{}", a.body);
    let events = a.events();
    assert!(events.iter().all(|e| e["type"] != "error"), "{}", a.body);
    let seq: Vec<u64> = events.iter().map(|e| e["sequence_number"].as_u64().unwrap()).collect();
    assert_eq!(seq, (0..events.len() as u64).collect::<Vec<_>>());
    // Each item's argument deltas arrive while it is the open item, and add up to its arguments.
    let mut open: Option<u64> = None;
    let mut args: Vec<String> = Vec::new();
    for e in &events {
        match e["type"].as_str().unwrap() {
            "response.output_item.added" => {
                assert_eq!(open, None, "{e}");
                open = e["output_index"].as_u64();
                args.push(String::new());
            }
            "response.function_call_arguments.delta" => {
                assert_eq!(open, e["output_index"].as_u64(), "{e}");
                args.last_mut().unwrap().push_str(e["delta"].as_str().unwrap());
            }
            "response.output_item.done" => {
                assert_eq!(open, e["output_index"].as_u64(), "{e}");
                assert_eq!(e["item"]["arguments"].as_str(), args.last().map(String::as_str), "{e}");
                open = None;
            }
            _ => {}
        }
    }
    assert_eq!(args, [WEATHER, ADD]);
    let done = events.last().unwrap();
    assert_eq!(done["type"], "response.completed");
    let output: Vec<(&str, &str)> = done["response"]["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["name"].as_str().unwrap(), i["arguments"].as_str().unwrap()))
        .collect();
    assert_eq!(output, [("get_weather", WEATHER), ("add", ADD)]);
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
    server.shutdown();
}

/// Tokens of translated streams are counted like those of whole answers.
#[test]
fn translated_streams_count_their_tokens_in_metrics() {
    let fake = FakeProvider::start(scripts());
    let server = start(&fake, Style::OpenAi);
    let addr = server.local_addr();
    let anthropic = json!({"model": "m-text", "max_tokens": 64, "stream": true,
                           "messages": [{"role": "user", "content": "hi"}]});
    let a = http(addr, "POST", "/v1/messages", &anthropic);
    assert_eq!(a.status, 200, "{}", a.body);
    assert_eq!(a.events().last().unwrap()["type"], "message_stop");
    let responses = json!({"model": "m-text", "stream": true, "input": "hi"});
    let a = http(addr, "POST", "/v1/responses", &responses);
    assert_eq!(a.events().last().unwrap()["type"], "response.completed", "{}", a.body);
    let gemini = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let a = http(addr, "POST", "/v1beta/models/m-text:streamGenerateContent?alt=sse", &gemini);
    assert_eq!(a.status, 200, "{}", a.body);
    let text = metrics(addr);
    // Three streamed answers of 11 in and 7 out each.
    assert_eq!((tokens(&text, "in"), tokens(&text, "out")), (33, 21), "{text}");
    // And a whole answer adds its own, as before.
    let whole = json!({"model": "m-text", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(http(addr, "POST", "/v1/messages", &whole).status, 200);
    let text = metrics(addr);
    assert_eq!((tokens(&text, "in"), tokens(&text, "out")), (44, 28), "{text}");
    server.shutdown();

    // A stream that passes through untranslated (same family) is counted too.
    let server = start(&fake, Style::Anthropic);
    let a = http(server.local_addr(), "POST", "/v1/messages", &anthropic);
    assert_eq!(a.events().last().unwrap()["type"], "message_stop", "{}", a.body);
    let text = metrics(server.local_addr());
    assert_eq!((tokens(&text, "in"), tokens(&text, "out")), (11, 7), "{text}");
    server.shutdown();
}

/// Hosted tools only OpenAI's servers run are left out, named in
/// `x-nexus-dropped`, and the function tools still make the round trip.
#[test]
fn hosted_responses_tools_are_dropped_and_named() {
    let fake = FakeProvider::start(scripts());
    for style in [Style::OpenAi, Style::Anthropic, Style::Gemini] {
        let server = start(&fake, style);
        let addr = server.local_addr();
        let mut tools =
            vec![json!({"type": "web_search"}), json!({"type": "file_search", "vector_store_ids": ["vs_1"]})];
        tools.extend(tools_responses().as_array().unwrap().iter().cloned());
        tools.push(json!({"type": "code_interpreter", "container": {"type": "auto"}}));
        let first = json!({"model": "m-tools", "tools": tools, "input": "weather in Paris, and 2+2?", "store": false});
        let a = http(addr, "POST", "/v1/responses", &first);
        assert_eq!(a.status, 200, "{}: {}", style.name(), a.body);
        let dropped = a.header("x-nexus-dropped").unwrap_or_default().to_string();
        for name in ["tools[0] (web_search)", "tools[1] (file_search)", "tools[4] (code_interpreter)", "store"] {
            assert!(dropped.contains(name), "{}: {name} not in {dropped:?}", style.name());
        }
        let output = a.json()["output"].as_array().unwrap().clone();
        let calls: Vec<&Value> = output.iter().filter(|i| i["type"] == "function_call").collect();
        assert_eq!(calls.len(), 2, "{}", a.body);

        // The follow-up, streamed, carries the record of a hosted search from elsewhere.
        let mut input = vec![
            json!({"role": "user", "content": "weather in Paris, and 2+2?"}),
            json!({"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "paris"}}),
        ];
        input.extend(output.iter().cloned());
        for (call, out) in calls.iter().zip(["sunny-22C", "4"]) {
            input.push(json!({"type": "function_call_output", "call_id": call["call_id"], "output": out}));
        }
        let follow = json!({"model": "m-tools", "tools": first["tools"], "input": input, "stream": true});
        let a = http(addr, "POST", "/v1/responses", &follow);
        assert_eq!(a.status, 200, "{}: {}", style.name(), a.body);
        assert!(a.header("x-nexus-dropped").unwrap_or_default().contains("input[1] (web_search_call)"));
        let done = a.events().last().unwrap().clone();
        assert_eq!(done["response"]["output"][0]["content"][0]["text"], FINAL, "{}", a.body);
        server.shutdown();
    }
    // No hosted tool reached an upstream; both results did.
    let bodies: Vec<Value> = fake.requests_for("m-tools").into_iter().filter_map(|r| r.json).collect();
    assert_eq!(bodies.len(), 6);
    for body in &bodies {
        let text = body.to_string();
        for hosted in ["web_search", "file_search", "code_interpreter", "ws_1"] {
            assert!(!text.contains(hosted), "{hosted} went upstream: {text}");
        }
    }
    assert_eq!(bodies.iter().filter(|b| b.to_string().contains("sunny-22C")).count(), 3);
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}
