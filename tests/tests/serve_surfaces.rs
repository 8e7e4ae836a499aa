//! `nexus serve`'s Anthropic Messages and Gemini surfaces end to end: the
//! official `anthropic` and `google-genai` Python SDKs talk to the gateway,
//! the gateway talks to the fake provider in each wire format. Expectations
//! come from the fake's scripts (texts, tool names, arguments, token
//! counts, the upstream's error message) and from each dialect's contract.

use std::net::SocketAddr;
use std::process::Command;

use nexus_drive::serve::{serve, ServeConfig, Server};
use nexus_tests::fake::{fake_token_count, FakeProvider, Fault, FaultKind, Script, Scripts, Style, Turn};
use nexus_tests::oracle::python;
use serde_json::{json, Value};

mod serve_support;
use serve_support::{proto, rate_limit_body, ADD, CLIENT_TOKEN, SLOW_DOWN, UPSTREAM_KEY, WEATHER};

const FINAL: &str = "Sunny in Paris, and 2 + 2 = 4.";

fn scripts(style: Style) -> Scripts {
    let busy = Fault::new(FaultKind::Status {
        status: 429,
        retry_after: Some("7".into()),
        body: Some(rate_limit_body(style)),
    })
    .times(1000);
    Scripts::new(UPSTREAM_KEY)
        .model("m-text", Script::new(vec![Turn::text("Hello from the fake").usage(11, 7)]))
        .model(
            "m-tools",
            Script::new(vec![
                Turn::default().call("get_weather", WEATHER).call("add", ADD).usage(20, 9),
                Turn::text(FINAL).usage(40, 12),
            ]),
        )
        .model("m-busy", Script::new(vec![Turn::text("never").fault(busy)]))
}

fn start(fake: &FakeProvider, style: Style) -> Server {
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap(), proto(style))
        .upstream_base_url(fake.base_url(style))
        .api_key(UPSTREAM_KEY);
    config.client_token = Some(CLIENT_TOKEN.to_string());
    if style == Style::Gemini {
        config.models = vec!["m-busy".into(), "m-text".into(), "m-tools".into()];
    }
    serve(config).expect("the gateway starts")
}

/// Runs one SDK script with `cfg`; `None` (outside CI) when the oracle interpreter is missing.
fn run(script: &str, cfg: Value) -> Option<Value> {
    let Some(py) = python() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI: the SDK scenarios need the oracle venv (NEXUS_ORACLE_PY)"
        );
        println!("skipped: the SDK scenarios need the oracle interpreter");
        return None;
    };
    let out = Command::new(py).arg("-c").arg(script).arg(cfg.to_string()).output().expect("run the SDK client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the SDK client failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    Some(serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("client output ({e}): {stdout}")))
}

/// The client's token never went upstream; the upstream key always did.
fn check_upstream_auth(fake: &FakeProvider, style: Style) {
    for r in fake.requests() {
        for (k, v) in &r.headers {
            assert!(!v.contains(CLIENT_TOKEN), "{}: the client token reached the upstream in {k}", style.name());
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
        assert_eq!(key.as_deref(), Some(want.as_str()), "{}: {}", style.name(), r.target);
    }
    assert!(fake.failures().is_empty(), "{}: {:?}", style.name(), fake.failures());
}

/// The follow-up reached the upstream as one results turn answering both
/// calls under the ids the client was given.
fn check_follow_up_upstream(fake: &FakeProvider, style: Style, ids: &[String]) {
    let follow_ups: Vec<Value> = fake
        .requests_for("m-tools")
        .into_iter()
        .filter_map(|r| r.json)
        .filter(|j| j.to_string().contains("sunny-22C"))
        .collect();
    assert_eq!(follow_ups.len(), 2, "{}: the whole and the streamed follow-up", style.name());
    for body in follow_ups {
        let results: Vec<String> = match style {
            Style::Anthropic => {
                let turns = body["messages"].as_array().unwrap();
                assert_eq!(turns.len(), 3, "user, assistant, ONE user turn of results: {body}");
                turns[2]["content"].as_array().unwrap().iter().map(|b| b["tool_use_id"].to_string()).collect()
            }
            Style::Gemini => {
                let turns = body["contents"].as_array().unwrap();
                assert_eq!(turns.len(), 3, "user, model, ONE user turn of results: {body}");
                turns[2]["parts"].as_array().unwrap().iter().map(|p| p["functionResponse"]["id"].to_string()).collect()
            }
            Style::OpenAi => body["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| m["tool_call_id"].to_string())
                .collect(),
            Style::OpenAiResponses => body["input"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["type"] == "function_call_output")
                .map(|m| m["call_id"].to_string())
                .collect(),
        };
        let want: Vec<String> = ids.iter().map(|id| json!(id).to_string()).collect();
        assert_eq!(results, want, "{}: {body}", style.name());
    }
}

/// A count the SDK read: the upstream's own counter answered it (its
/// count of what it was sent), or, for Chat Completions, which has none,
/// the gateway's estimate, said to be one.
fn check_sdk_count(fake: &FakeProvider, style: Style, count: &Value, field: &str) {
    let name = style.name();
    let counted: Vec<_> = fake
        .requests()
        .into_iter()
        .filter(|r| r.target.contains("ount") || r.target.contains("input_tokens"))
        .collect();
    if style == Style::OpenAi {
        assert!(counted.is_empty(), "{name}: no counter upstream");
        assert_eq!(count["estimate"], "estimate", "{name}");
        assert!(count[field].as_u64().unwrap() > 3, "{name}: {count}");
        return;
    }
    assert_eq!(counted.len(), 1, "{name}");
    assert_eq!(count[field], fake_token_count(counted[0].json.as_ref().unwrap()), "{name}: {count}");
    assert!(count["estimate"].is_null(), "{name}");
}

// ---------------------------------------------------------------- the anthropic SDK

const ANTHROPIC_CLIENT: &str = r#"
import json, sys
import anthropic

cfg = json.loads(sys.argv[1])
c = anthropic.Anthropic(base_url=cfg["base_url"], api_key=cfg["token"], max_retries=0, timeout=30)
out = {}
hi = [{"role": "user", "content": "hi"}]

def message(m):
    return {"type": m.type, "role": m.role, "blocks": [b.type for b in m.content],
            "text": "".join(b.text for b in m.content if b.type == "text"), "stop": m.stop_reason,
            "usage": [m.usage.input_tokens, m.usage.output_tokens],
            "calls": [{"id": b.id, "name": b.name, "input": b.input} for b in m.content if b.type == "tool_use"]}

raw = c.messages.with_raw_response.create(model="m-text", max_tokens=256, messages=hi,
                                          metadata={"user_id": "u-1"})
out["text"] = message(raw.parse())
out["text_dropped"] = raw.headers.get("x-nexus-dropped")

with c.messages.stream(model="m-text", max_tokens=256, messages=hi) as s:
    kinds = [e.type for e in s]
    out["text_stream"] = message(s.get_final_message())
    out["text_stream_events"] = kinds

tools = [
    {"name": "get_weather", "description": "Weather in a city",
     "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
     "cache_control": {"type": "ephemeral"}},
    {"name": "add", "description": "Adds a and b",
     "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
]
system = [{"type": "text", "text": "Use the tools.", "cache_control": {"type": "ephemeral"}}]
ask = [{"role": "user", "content": "Weather in Paris, and 2+2?"}]
raw = c.messages.with_raw_response.create(model="m-tools", max_tokens=256, system=system, messages=ask, tools=tools)
m = raw.parse()
out["tools"] = message(m)
out["tools_dropped"] = raw.headers.get("x-nexus-dropped")
with c.messages.stream(model="m-tools", max_tokens=256, system=system, messages=ask, tools=tools) as s:
    out["tools_stream"] = message(s.get_final_message())

results = {"get_weather": "sunny-22C", "add": "4"}
follow = ask + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in m.content]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b.id, "content": results[b.name]}
                                             for b in m.content if b.type == "tool_use"]}]
out["follow_up"] = message(c.messages.create(model="m-tools", max_tokens=256, system=system, messages=follow,
                                             tools=tools))
with c.messages.stream(model="m-tools", max_tokens=256, system=system, messages=follow, tools=tools) as s:
    out["follow_up_stream"] = message(s.get_final_message())

def failure(fn):
    try:
        fn()
        return None
    except anthropic.APIStatusError as e:
        body = e.body if isinstance(e.body, dict) else {}
        return {"class": type(e).__name__, "status": e.status_code, "message": e.message,
                "type": (body.get("error") or {}).get("type"), "retry_after": e.response.headers.get("retry-after")}

out["busy"] = failure(lambda: c.messages.create(model="m-busy", max_tokens=64, messages=hi))
def busy_stream():
    with c.messages.stream(model="m-busy", max_tokens=64, messages=hi) as s:
        s.get_final_message()
out["busy_stream"] = failure(busy_stream)
if cfg["translated"]:
    out["bad"] = failure(lambda: c.messages.create(model="m-tools", max_tokens=64, messages=ask, tools=tools,
                                                   tool_choice={"type": "tool", "name": "not_declared"}))

raw = c.messages.with_raw_response.count_tokens(model="m-text", messages=hi, system="Be brief.", tools=tools)
out["count"] = {"input_tokens": raw.parse().input_tokens, "estimate": raw.headers.get("x-nexus-token-count")}

raw = c.beta.messages.with_raw_response.create(model="m-text", max_tokens=64, messages=hi,
                                               betas=["context-management-2025-06-27"])
out["beta"] = {"text": "".join(b.text for b in raw.parse().content if b.type == "text"),
               "dropped": raw.headers.get("x-nexus-dropped")}
out["models"] = sorted(m.id for m in c.models.list())
wrong = anthropic.Anthropic(base_url=cfg["base_url"], api_key="not-the-token", max_retries=0)
out["wrong_token"] = failure(lambda: wrong.messages.create(model="m-text", max_tokens=64, messages=hi))
print(json.dumps(out))
"#;

fn anthropic_scenario(style: Style) {
    let fake = FakeProvider::start(scripts(style));
    let server = start(&fake, style);
    let translated = style != Style::Anthropic;
    let cfg =
        json!({"base_url": format!("http://{}", server.local_addr()), "token": CLIENT_TOKEN, "translated": translated});
    let Some(out) = run(ANTHROPIC_CLIENT, cfg) else { return };
    let name = style.name();

    for key in ["text", "text_stream"] {
        let m = &out[key];
        assert_eq!(
            (&m["type"], &m["role"], &m["text"], &m["stop"], &m["usage"]),
            (
                &json!("message"),
                &json!("assistant"),
                &json!("Hello from the fake"),
                &json!("end_turn"),
                &json!([11, 7])
            ),
            "{name} {key}: {m}"
        );
    }
    let kinds: Vec<&str> = out["text_stream_events"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"message_start"), "{name}: {kinds:?}");
    assert_eq!(kinds.last(), Some(&"message_stop"), "{name}: {kinds:?}");
    assert!(kinds.contains(&"content_block_start") && kinds.contains(&"content_block_stop"), "{name}: {kinds:?}");

    // Two parallel calls in order with their arguments, whole and streamed.
    for key in ["tools", "tools_stream"] {
        let m = &out[key];
        assert_eq!(m["stop"], "tool_use", "{name} {key}: {m}");
        let calls = m["calls"].as_array().unwrap();
        let got: Vec<(&str, Value)> = calls.iter().map(|c| (c["name"].as_str().unwrap(), c["input"].clone())).collect();
        let want = vec![
            ("get_weather", serde_json::from_str::<Value>(WEATHER).unwrap()),
            ("add", serde_json::from_str::<Value>(ADD).unwrap()),
        ];
        assert_eq!(got, want, "{name} {key}");
        assert!(calls[0]["id"] != calls[1]["id"] && calls[0]["id"].as_str().is_some_and(|s| !s.is_empty()));
    }
    for key in ["follow_up", "follow_up_stream"] {
        assert_eq!(out[key]["text"], FINAL, "{name} {key}: {}", out[key]);
        assert_eq!(out[key]["stop"], "end_turn", "{name} {key}");
    }
    let ids: Vec<String> =
        out["tools"]["calls"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_string()).collect();
    check_follow_up_upstream(&fake, style, &ids);

    // Errors keep the upstream's status and wording, in Anthropic's shape.
    for key in ["busy", "busy_stream"] {
        let e = &out[key];
        assert_eq!(
            (&e["class"], &e["status"], &e["type"]),
            (&json!("RateLimitError"), &json!(429), &json!("rate_limit_error")),
            "{name} {key}: {e}"
        );
        assert!(e["message"].as_str().unwrap().contains(SLOW_DOWN), "{name} {key}: {e}");
        assert_eq!(e["retry_after"], "7", "{name} {key}");
    }
    assert_eq!(out["wrong_token"]["status"], 401, "{name}");
    assert_eq!(out["wrong_token"]["type"], "authentication_error", "{name}");

    // What a translation cannot carry is named; what it cannot honour is refused.
    if translated {
        let bad = &out["bad"];
        assert_eq!((&bad["status"], &bad["type"]), (&json!(400), &json!("invalid_request_error")), "{name}: {bad}");
        assert!(bad["message"].as_str().unwrap().contains("tool_choice"), "{name}: {bad}");
        let dropped = out["tools_dropped"].as_str().unwrap_or_default();
        assert!(dropped.contains("cache_control"), "{name}: {dropped}");
        let beta = out["beta"]["dropped"].as_str().unwrap_or_default();
        assert!(beta.contains("anthropic-beta: context-management-2025-06-27"), "{name}: {beta}");
        // metadata.user_id maps to OpenAI's `user`; Gemini has no place for it.
        let text_dropped = out["text_dropped"].as_str().unwrap_or_default();
        assert_eq!(text_dropped.contains("metadata"), style == Style::Gemini, "{name}: {text_dropped}");
    } else {
        assert!(out["tools_dropped"].is_null() && out["beta"]["dropped"].is_null(), "{name}: nothing dropped");
        // Passed through: the cache hints and the beta reached Anthropic.
        let with_cache = fake.requests_for("m-tools").into_iter().filter_map(|r| r.json);
        assert!(with_cache.into_iter().all(|j| j.to_string().contains("cache_control")), "{name}");
        let betas: Vec<_> =
            fake.requests().into_iter().filter_map(|r| r.header("anthropic-beta").map(str::to_string)).collect();
        assert_eq!(betas, ["context-management-2025-06-27"], "{name}");
    }
    assert_eq!(out["beta"]["text"], "Hello from the fake", "{name}");

    // count_tokens: the upstream's own counter where it has one.
    check_sdk_count(&fake, style, &out["count"], "input_tokens");
    assert_eq!(out["models"], json!(["m-busy", "m-text", "m-tools"]), "{name}");
    check_upstream_auth(&fake, style);
    server.shutdown();
}

#[test]
fn the_anthropic_sdk_through_the_gateway_to_anthropic() {
    anthropic_scenario(Style::Anthropic);
}

#[test]
fn the_anthropic_sdk_through_the_gateway_to_an_openai_upstream() {
    anthropic_scenario(Style::OpenAi);
}

#[test]
fn the_anthropic_sdk_through_the_gateway_to_an_openai_responses_upstream() {
    anthropic_scenario(Style::OpenAiResponses);
}

#[test]
fn the_anthropic_sdk_through_the_gateway_to_gemini() {
    anthropic_scenario(Style::Gemini);
}

// ---------------------------------------------------------------- the google-genai SDK

const GEMINI_CLIENT: &str = r#"
import json, sys
from google import genai
from google.genai import types, errors

cfg = json.loads(sys.argv[1])
client = genai.Client(api_key=cfg["token"],
                      http_options=types.HttpOptions(base_url=cfg["base_url"], api_version="v1beta", timeout=30000))
out = {}

def summary(r):
    cand = r.candidates[0]
    parts = cand.content.parts or []
    u = r.usage_metadata
    return {"text": "".join(p.text for p in parts if p.text and not p.thought),
            "finish": cand.finish_reason.value if cand.finish_reason else None,
            "usage": [u.prompt_token_count, u.candidates_token_count] if u else None,
            "calls": [{"id": p.function_call.id, "name": p.function_call.name, "args": p.function_call.args}
                      for p in parts if p.function_call]}

def streamed(chunks):
    text, finish, usage, calls = [], None, None, []
    for ch in chunks:
        s = summary(ch)
        text.append(s["text"])
        finish = s["finish"] or finish
        usage = s["usage"] or usage
        calls += s["calls"]
    return {"text": "".join(text), "finish": finish, "usage": usage, "calls": calls}

r = client.models.generate_content(model="m-text", contents="hi")
out["text"] = summary(r)
out["text_stream"] = streamed(client.models.generate_content_stream(model="m-text", contents="hi"))

decls = [
    types.FunctionDeclaration(name="get_weather", description="Weather in a city",
        parameters=types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")}, required=["city"])),
    types.FunctionDeclaration(name="add", description="Adds a and b",
        parameters_json_schema={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
]
config = types.GenerateContentConfig(
    system_instruction="Use the tools.",
    tools=[types.Tool(function_declarations=decls)],
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    safety_settings=[types.SafetySetting(category="HARM_CATEGORY_HARASSMENT", threshold="BLOCK_NONE")],
)
ask = [types.Content(role="user", parts=[types.Part(text="Weather in Paris, and 2+2?")])]
r = client.models.generate_content(model="m-tools", contents=ask, config=config)
out["tools"] = summary(r)
out["tools_stream"] = streamed(client.models.generate_content_stream(model="m-tools", contents=ask, config=config))

results = {"get_weather": "sunny-22C", "add": "4"}
follow = ask + [r.candidates[0].content, types.Content(role="user", parts=[
    types.Part(function_response=types.FunctionResponse(id=fc.id, name=fc.name, response={"output": results[fc.name]}))
    for fc in r.function_calls])]
out["follow_up"] = summary(client.models.generate_content(model="m-tools", contents=follow, config=config))
out["follow_up_stream"] = streamed(client.models.generate_content_stream(model="m-tools", contents=follow, config=config))

def failure(fn):
    try:
        fn()
        return None
    except errors.APIError as e:
        return {"class": type(e).__name__, "code": e.code, "status": e.status, "message": e.message}

out["busy"] = failure(lambda: client.models.generate_content(model="m-busy", contents="hi"))
out["busy_stream"] = failure(lambda: list(client.models.generate_content_stream(model="m-busy", contents="hi")))
if cfg["translated"]:
    out["bad"] = failure(lambda: client.models.generate_content(model="m-text", contents="hi",
        config=types.GenerateContentConfig(candidate_count=2)))
r = client.models.count_tokens(model="m-text", contents="What is 2 + 2?")
out["count"] = {"total_tokens": r.total_tokens,
                "estimate": (r.sdk_http_response.headers or {}).get("x-nexus-token-count")}
out["models"] = sorted(m.name for m in client.models.list())
wrong = genai.Client(api_key="not-the-token", http_options=types.HttpOptions(base_url=cfg["base_url"], api_version="v1beta"))
out["wrong_token"] = failure(lambda: wrong.models.generate_content(model="m-text", contents="hi"))
print(json.dumps(out))
"#;

fn gemini_scenario(style: Style) {
    let fake = FakeProvider::start(scripts(style));
    let server = start(&fake, style);
    let translated = style != Style::Gemini;
    let addr: SocketAddr = server.local_addr();
    let cfg = json!({"base_url": format!("http://{addr}"), "token": CLIENT_TOKEN, "translated": translated});
    let Some(out) = run(GEMINI_CLIENT, cfg) else { return };
    let name = style.name();

    for key in ["text", "text_stream"] {
        let s = &out[key];
        assert_eq!(
            (&s["text"], &s["finish"], &s["usage"]),
            (&json!("Hello from the fake"), &json!("STOP"), &json!([11, 7])),
            "{name} {key}: {s}"
        );
    }
    for key in ["tools", "tools_stream"] {
        let calls = out[key]["calls"].as_array().unwrap_or_else(|| panic!("{name} {key}: {}", out[key]));
        let got: Vec<(&str, Value)> = calls.iter().map(|c| (c["name"].as_str().unwrap(), c["args"].clone())).collect();
        let want = vec![
            ("get_weather", serde_json::from_str::<Value>(WEATHER).unwrap()),
            ("add", serde_json::from_str::<Value>(ADD).unwrap()),
        ];
        assert_eq!(got, want, "{name} {key}");
        assert_eq!(out[key]["finish"], "STOP", "{name} {key}");
    }
    for key in ["follow_up", "follow_up_stream"] {
        assert_eq!(out[key]["text"], FINAL, "{name} {key}: {}", out[key]);
    }
    if translated {
        // The ids the client saw are the ones the upstream was answered under.
        let ids: Vec<String> =
            out["tools"]["calls"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap().to_string()).collect();
        check_follow_up_upstream(&fake, style, &ids);
        let bad = &out["bad"];
        assert_eq!((&bad["code"], &bad["status"]), (&json!(400), &json!("INVALID_ARGUMENT")), "{name}: {bad}");
        assert!(bad["message"].as_str().unwrap().contains("candidateCount"), "{name}: {bad}");
    }
    for key in ["busy", "busy_stream"] {
        let e = &out[key];
        assert_eq!((&e["code"], &e["status"]), (&json!(429), &json!("RESOURCE_EXHAUSTED")), "{name} {key}: {e}");
        assert!(e["message"].as_str().unwrap().contains(SLOW_DOWN), "{name} {key}: {e}");
    }
    check_sdk_count(&fake, style, &out["count"], "total_tokens");
    assert_eq!(out["models"], json!(["models/m-busy", "models/m-text", "models/m-tools"]), "{name}");
    assert_eq!(out["wrong_token"]["code"], 401, "{name}: {}", out["wrong_token"]);
    check_upstream_auth(&fake, style);
    server.shutdown();
}

#[test]
fn the_gemini_sdk_through_the_gateway_to_gemini() {
    gemini_scenario(Style::Gemini);
}

#[test]
fn the_gemini_sdk_through_the_gateway_to_anthropic() {
    gemini_scenario(Style::Anthropic);
}

#[test]
fn the_gemini_sdk_through_the_gateway_to_an_openai_upstream() {
    gemini_scenario(Style::OpenAi);
}

#[test]
fn the_gemini_sdk_through_the_gateway_to_an_openai_responses_upstream() {
    gemini_scenario(Style::OpenAiResponses);
}

// ---------------------------------------------------------------- the openai SDK on /v1/responses

const RESPONSES_CLIENT: &str = r#"
import json, sys
import openai

cfg = json.loads(sys.argv[1])
c = openai.OpenAI(base_url=cfg["base_url"] + "/v1", api_key=cfg["token"], max_retries=0, timeout=30)
out = {}

def summary(r):
    return {"text": r.output_text, "status": r.status,
            "usage": [r.usage.input_tokens, r.usage.output_tokens] if r.usage else None,
            "calls": [{"call_id": o.call_id, "name": o.name, "arguments": o.arguments}
                      for o in r.output if o.type == "function_call"]}

out["text"] = summary(c.responses.create(model="m-text", input="hi"))
with c.responses.stream(model="m-text", input="hi") as s:
    kinds = [e.type for e in s]
    out["text_stream"] = summary(s.get_final_response())
    out["kinds"] = kinds

tools = [
    {"type": "function", "name": "get_weather", "description": "Weather in a city", "strict": False,
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
    {"type": "function", "name": "add", "description": "Adds a and b", "strict": False,
     "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}},
]
ask = [{"role": "user", "content": "Weather in Paris, and 2+2?"}]
r = c.responses.create(model="m-tools", input=ask, tools=tools, instructions="Use the tools.")
out["tools"] = summary(r)
with c.responses.stream(model="m-tools", input=ask, tools=tools, instructions="Use the tools.") as s:
    out["tools_stream"] = summary(s.get_final_response())

results = {"get_weather": "sunny-22C", "add": "4"}
follow = ask + [o.model_dump(exclude_none=True) for o in r.output] + [
    {"type": "function_call_output", "call_id": o.call_id, "output": results[o.name]}
    for o in r.output if o.type == "function_call"]
out["follow_up"] = summary(c.responses.create(model="m-tools", input=follow, tools=tools))
with c.responses.stream(model="m-tools", input=follow, tools=tools) as s:
    out["follow_up_stream"] = summary(s.get_final_response())

def failure(fn):
    try:
        fn()
        return None
    except openai.APIStatusError as e:
        return {"class": type(e).__name__, "status": e.status_code, "message": e.message,
                "param": getattr(e, "param", None)}

raw = c.responses.input_tokens.with_raw_response.count(model="m-text", input=ask, tools=tools,
                                                      instructions="Use the tools.")
out["count"] = {"input_tokens": raw.parse().input_tokens, "object": raw.parse().object,
                "estimate": raw.headers.get("x-nexus-token-count")}

out["busy"] = failure(lambda: c.responses.create(model="m-busy", input="hi"))
out["stateful"] = failure(lambda: c.responses.create(model="m-text", input="hi", previous_response_id="resp_1"))
print(json.dumps(out))
"#;

fn responses_scenario(style: Style) {
    let fake = FakeProvider::start(scripts(style));
    let server = start(&fake, style);
    let cfg = json!({"base_url": format!("http://{}", server.local_addr()), "token": CLIENT_TOKEN});
    let Some(out) = run(RESPONSES_CLIENT, cfg) else { return };
    let name = style.name();
    for key in ["text", "text_stream"] {
        let s = &out[key];
        assert_eq!(
            (&s["text"], &s["status"], &s["usage"]),
            (&json!("Hello from the fake"), &json!("completed"), &json!([11, 7])),
            "{name} {key}: {s}"
        );
    }
    // The scaffolding clients require, in order.
    let kinds: Vec<&str> = out["kinds"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap_or_else(|| panic!("{name}: no {k} in {kinds:?}"));
    assert_eq!(kinds.first(), Some(&"response.created"), "{name}: {kinds:?}");
    assert!(at("response.output_item.added") < at("response.content_part.added"), "{name}: {kinds:?}");
    assert!(at("response.content_part.added") < at("response.output_text.delta"), "{name}: {kinds:?}");
    assert!(at("response.output_text.done") < at("response.output_item.done"), "{name}: {kinds:?}");
    assert_eq!(kinds.last(), Some(&"response.completed"), "{name}: {kinds:?}");
    for key in ["tools", "tools_stream"] {
        let calls = out[key]["calls"].as_array().unwrap_or_else(|| panic!("{name} {key}: {}", out[key]));
        let got: Vec<(&str, Value)> = calls
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), serde_json::from_str(c["arguments"].as_str().unwrap()).unwrap()))
            .collect();
        let want = vec![
            ("get_weather", serde_json::from_str::<Value>(WEATHER).unwrap()),
            ("add", serde_json::from_str::<Value>(ADD).unwrap()),
        ];
        assert_eq!(got, want, "{name} {key}");
    }
    for key in ["follow_up", "follow_up_stream"] {
        assert_eq!(out[key]["text"], FINAL, "{name} {key}: {}", out[key]);
    }
    let ids: Vec<String> =
        out["tools"]["calls"].as_array().unwrap().iter().map(|c| c["call_id"].as_str().unwrap().to_string()).collect();
    check_follow_up_upstream(&fake, style, &ids);
    let e = &out["busy"];
    assert_eq!((&e["class"], &e["status"]), (&json!("RateLimitError"), &json!(429)), "{name}: {e}");
    assert!(e["message"].as_str().unwrap().contains(SLOW_DOWN), "{name}: {e}");
    let e = &out["stateful"];
    assert_eq!((&e["status"], &e["param"]), (&json!(400), &json!("previous_response_id")), "{name}: {e}");
    assert_eq!(out["count"]["object"], "response.input_tokens", "{name}");
    check_sdk_count(&fake, style, &out["count"], "input_tokens");
    check_upstream_auth(&fake, style);
    server.shutdown();
}

#[test]
fn the_openai_responses_sdk_through_the_gateway_to_anthropic() {
    responses_scenario(Style::Anthropic);
}

#[test]
fn the_openai_responses_sdk_through_the_gateway_to_gemini() {
    responses_scenario(Style::Gemini);
}

#[test]
fn the_openai_responses_sdk_through_the_gateway_to_an_openai_upstream() {
    responses_scenario(Style::OpenAi);
}

#[test]
fn the_openai_responses_sdk_through_the_gateway_to_a_responses_upstream() {
    responses_scenario(Style::OpenAiResponses);
}
