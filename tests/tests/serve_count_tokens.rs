//! `nexus serve`'s token counters on every surface against every upstream
//! style: Anthropic `count_tokens`, Gemini `:countTokens` and Responses
//! `input_tokens`, each asked of the upstream in its own dialect (Chat
//! Completions has no counter: an estimate, said to be one). The fake
//! provider counts a quarter of the JSON it receives, so every count is
//! checked against the body the upstream was sent.

use nexus_drive::serve::{serve, ServeConfig, Server};
use nexus_tests::fake::{fake_token_count, FakeProvider, RecordedRequest, Script, Scripts, Style, Turn};
use serde_json::{json, Value};

mod serve_support;
use serve_support::{call, proto, Answer, CLIENT_TOKEN, UPSTREAM_KEY};

fn start(fake: &FakeProvider, style: Style, key: &str) -> Server {
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap(), proto(style))
        .upstream_base_url(fake.base_url(style))
        .api_key(key);
    config.client_token = Some(CLIENT_TOKEN.to_string());
    serve(config).expect("the gateway starts")
}

fn tools_anthropic() -> Value {
    json!([{"name": "add", "description": "Adds a and b",
            "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}])
}

/// One count on a surface: its name, the path, the client's headers and body.
type Count = (&'static str, String, Vec<(&'static str, &'static str)>, Value);

/// One count on each surface.
fn surfaces() -> Vec<Count> {
    let gemini_tools = json!([{"functionDeclarations": [{"name": "add", "description": "Adds a and b",
        "parametersJsonSchema": {"type": "object", "properties": {"a": {"type": "number"}}}}]}]);
    vec![
        (
            "anthropic",
            "/v1/messages/count_tokens".into(),
            vec![("x-api-key", CLIENT_TOKEN), ("anthropic-version", "2023-06-01")],
            json!({"model": "m-text", "system": "Be brief.", "tools": tools_anthropic(),
                   "messages": [{"role": "user", "content": "What is 2 + 2?"}]}),
        ),
        (
            "anthropic (beta)",
            "/v1/messages/count_tokens?beta=true".into(),
            vec![
                ("x-api-key", CLIENT_TOKEN),
                ("anthropic-version", "2023-06-01"),
                ("anthropic-beta", "token-counting-2024-11-01"),
            ],
            json!({"model": "m-text", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}),
        ),
        (
            "responses",
            "/v1/responses/input_tokens".into(),
            vec![("authorization", "Bearer client-secret-token")],
            json!({"model": "m-text", "instructions": "Be brief.", "input": "What is 2 + 2?",
                   "tools": [{"type": "function", "name": "add", "description": "Adds a and b", "strict": false,
                              "parameters": {"type": "object", "properties": {"a": {"type": "number"}}}}]}),
        ),
        (
            "gemini",
            "/v1beta/models/m-text:countTokens".into(),
            vec![("x-goog-api-key", CLIENT_TOKEN)],
            json!({"contents": [{"role": "user", "parts": [{"text": "What is 2 + 2?"}]}]}),
        ),
        (
            "gemini (generateContentRequest)",
            "/v1beta/models/m-text:countTokens".into(),
            vec![("x-goog-api-key", CLIENT_TOKEN)],
            json!({"generateContentRequest": {"model": "models/m-text",
                   "systemInstruction": {"parts": [{"text": "Be brief."}]}, "tools": gemini_tools,
                   "contents": [{"role": "user", "parts": [{"text": "What is 2 + 2?"}]}]}}),
        ),
    ]
}

/// The count in the surface's own shape.
fn count_of(surface: &str, a: &Answer) -> u64 {
    let v = a.json();
    let n = match surface {
        "anthropic" => v["input_tokens"].as_u64(),
        "responses" => {
            assert_eq!(v["object"], "response.input_tokens", "{surface}: {v}");
            v["input_tokens"].as_u64()
        }
        _ => v["totalTokens"].as_u64(),
    };
    n.unwrap_or_else(|| panic!("{surface}: no count in {v}"))
}

/// Where the upstream's counter lives and what it must have been sent.
fn check_upstream_count(style: Style, counted: &RecordedRequest) {
    let (path, forbidden): (&str, &[&str]) = match style {
        Style::Anthropic => ("/v1/messages/count_tokens", &["max_tokens", "stream", "temperature"]),
        Style::OpenAiResponses => ("/v1/responses/input_tokens", &["max_output_tokens", "stream", "store"]),
        _ => ("/v1beta/models/m-text:countTokens", &[]),
    };
    assert_eq!(counted.path(), path, "{style:?}");
    assert_eq!(counted.status, Some(200), "{style:?}: the counter took the request");
    let body = counted.json.as_ref().expect("a JSON body");
    for key in forbidden {
        assert!(body.get(key).is_none(), "{style:?}: {key} reached the counter: {body}");
    }
}

#[test]
fn every_surface_counts_with_every_upstreams_own_counter() {
    for style in Style::ALL {
        let fake = FakeProvider::start(Scripts::new(UPSTREAM_KEY).model("m-text", Script::new(vec![Turn::text("hi")])));
        let server = start(&fake, style, UPSTREAM_KEY);
        for (surface, path, headers, body) in surfaces() {
            fake.clear_requests();
            let sent = body.to_string();
            let a = call(server.local_addr(), "POST", &path, &headers, sent.as_bytes());
            let name = format!("{surface} → {}", style.name());
            assert_eq!(a.status, 200, "{name}: {}", a.text());
            let n = count_of(surface.split(' ').next().unwrap(), &a);
            let counted = fake.requests();
            if style == Style::OpenAi {
                assert!(counted.is_empty(), "{name}: Chat Completions has no counter");
                assert_eq!(a.header("x-nexus-token-count"), Some("estimate"), "{name}");
                assert!(n >= 10, "{name}: the estimate counts the system prompt and the tools too: {n}");
                continue;
            }
            assert_eq!(counted.len(), 1, "{name}: one count upstream, no model call");
            check_upstream_count(style, &counted[0]);
            assert_eq!(n, fake_token_count(counted[0].json.as_ref().unwrap()), "{name}");
            assert!(a.header("x-nexus-token-count").is_none(), "{name}: a real count");
            let native = matches!(
                (surface.split(' ').next().unwrap(), style),
                ("anthropic", Style::Anthropic) | ("responses", Style::OpenAiResponses) | ("gemini", Style::Gemini)
            );
            if native {
                // Same family: the body went as it came, the answer came back as sent.
                assert_eq!(counted[0].body, sent.as_bytes(), "{name}");
                assert_eq!(counted[0].target.ends_with("?beta=true"), path.ends_with("?beta=true"), "{name}");
                if path.ends_with("?beta=true") {
                    assert_eq!(counted[0].header("anthropic-beta"), Some("token-counting-2024-11-01"), "{name}");
                }
                if style == Style::Gemini {
                    assert_eq!(a.json()["promptTokensDetails"][0]["tokenCount"], n, "{name}");
                }
            } else {
                // Translated: what would be sent is what is counted, the system prompt included.
                let system = sent.contains("Be brief.") && surface != "gemini";
                assert!(!system || String::from_utf8_lossy(&counted[0].body).contains("Be brief."), "{name}");
            }
        }
        server.shutdown();
    }
}

#[test]
fn count_refusals_come_back_in_the_surfaces_shape() {
    // The upstream refuses the gateway's key: each surface words the 401 its own way.
    for style in [Style::Anthropic, Style::Gemini, Style::OpenAiResponses] {
        let fake = FakeProvider::start(Scripts::new(UPSTREAM_KEY).model("m-text", Script::new(vec![Turn::text("hi")])));
        let server = start(&fake, style, "not-the-upstream-key");
        for (surface, path, headers, body) in surfaces() {
            let a = call(server.local_addr(), "POST", &path, &headers, body.to_string().as_bytes());
            let name = format!("{surface} → {}", style.name());
            assert!(matches!(a.status, 400 | 401 | 403), "{name}: {} {}", a.status, a.text());
            let v = a.json();
            match surface.split(' ').next().unwrap() {
                "anthropic" => assert_eq!(v["type"], "error", "{name}: {v}"),
                "responses" => assert!(v["error"]["message"].is_string(), "{name}: {v}"),
                _ => assert!(v["error"]["status"].is_string() && v["error"]["code"].is_u64(), "{name}: {v}"),
            }
        }
        server.shutdown();
    }
    // What a surface cannot read is its own 400, and nothing goes upstream.
    let fake = FakeProvider::start(Scripts::new(UPSTREAM_KEY).model("m-text", Script::new(vec![Turn::text("hi")])));
    let server = start(&fake, Style::Anthropic, UPSTREAM_KEY);
    let gemini = [("x-goog-api-key", CLIENT_TOKEN)];
    let a = call(server.local_addr(), "POST", "/v1beta/models/m-text:countTokens", &gemini, b"{}");
    assert_eq!((a.status, &a.json()["error"]["status"]), (400, &json!("INVALID_ARGUMENT")), "{}", a.text());
    assert!(a.text().contains("contents"), "{}", a.text());
    let responses = [("authorization", "Bearer client-secret-token")];
    let a = call(server.local_addr(), "POST", "/v1/responses/input_tokens", &responses, br#"{"input":"hi"}"#);
    assert_eq!(a.status, 400, "{}", a.text());
    assert_eq!(a.json()["error"]["param"], "model", "{}", a.text());
    let a = call(server.local_addr(), "GET", "/v1/responses/input_tokens", &responses, b"");
    assert_eq!(a.status, 405, "{}", a.text());
    assert!(fake.requests().is_empty(), "nothing malformed went upstream");
    server.shutdown();
}
