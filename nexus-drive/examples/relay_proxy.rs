//! Relay tools: a proxy that runs the model loop while its caller runs the tools.
//!
//! ```text
//! cargo run -p nexus-drive --example relay_proxy
//! ```
//!
//! The proxy declares the caller's tools as relay tools: the model sees
//! them like any other, but nothing runs in the proxy. When the model calls
//! them, the run suspends on ONE `tool_call` request holding every call of
//! the turn, parallel calls included, each as `{id, name, input, arguments}`
//! (`arguments` is the provider's raw text, byte for byte). The proxy ships
//! them to its caller, and feeds the caller's results back as the answer
//! `{"results": [{id, output, isError}]}`; the run goes on from there, in
//! this process or in any other (the suspended state is plain JSON).

mod support;

use nexus_drive::blocking::Client;
use nexus_drive::proto::suspend::{RelayCall, KIND_TOOL_CALL};
use nexus_drive::{Answer, DriveError, Request, RunResult};
use nexus_tests::fake::{ExpectFinal, Script, Turn};
use serde_json::{json, Map, Value};

/// The scripted model (offline): three parallel calls to the caller's two
/// tools, then the answer. The final request must carry every result the
/// caller gave.
fn script() -> Script {
    Script::new(vec![
        Turn::text("Checking both cities.")
            .call("get_weather", r#"{"city": "Paris"}"#)
            .call("get_weather", r#"{"city":"Tokyo"}"#)
            .call("local_time", r#"{ "city": "Tokyo" }"#),
        Turn::text("Paris: 18°C and sunny. Tokyo: 24°C and humid, where it is 03:00."),
    ])
    .expect_final(ExpectFinal {
        tool_result_contains: vec!["18°C".into(), "24°C".into(), "03:00".into()],
        tool_results: Some(3),
        messages: None,
    })
}

/// The caller's side: it owns the tools and runs them wherever it lives
/// (a browser, a desktop app, another service).
fn caller_runs(call: &RelayCall) -> (String, bool) {
    let city = call.input.get("city").and_then(Value::as_str).unwrap_or("");
    match (call.name.as_str(), city) {
        ("get_weather", "Paris") => ("18°C, sunny".into(), false),
        ("get_weather", "Tokyo") => ("24°C, humid".into(), false),
        ("local_time", "Tokyo") => ("03:00".into(), false),
        (name, city) => (format!("{name} knows nothing about {city:?}"), true),
    }
}

/// The calls of a `tool_call` request.
fn relay_calls(request: &Request) -> Vec<RelayCall> {
    request
        .data
        .as_ref()
        .and_then(|d| d.get("calls"))
        .and_then(|calls| serde_json::from_value(calls.clone()).ok())
        .unwrap_or_default()
}

/// What the proxy does with one suspension: ship the calls, collect the results.
fn relay(request: &Request) -> Answer {
    let calls = relay_calls(request);
    println!("relay request {} ({} calls) -> caller:", request.id, calls.len());
    let mut results = Vec::new();
    for call in &calls {
        println!("  {}", json!(call));
        let (output, is_error) = caller_runs(call);
        results.push(json!({"id": call.id, "output": output, "isError": is_error}));
    }
    println!("caller -> results: {}", json!(results));
    let mut data = Map::new();
    data.insert("results".into(), Value::Array(results));
    Answer::ok(request.id.clone(), Some(data))
}

fn main() -> Result<(), DriveError> {
    let provider = support::Provider::pick(script());
    let city = json!({
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    });
    let config = provider
        .builder()
        .system("Use the tools for weather and local time. Call them in parallel.")
        .relay_tool("get_weather", "The current weather in a city.", city.clone())
        .relay_tool("local_time", "The local time in a city.", city)
        .build()?;
    let client = Client::new(config);

    let mut result: RunResult = client.run("Weather in Paris and Tokyo, and the time in Tokyo?")?;
    // Each turn of relay calls is one round trip to the caller.
    while let Some(suspended) = result.suspended.take() {
        let mut answers = Vec::new();
        for request in &suspended.pending {
            if request.kind == KIND_TOOL_CALL {
                answers.push(relay(request));
            } else {
                answers.push(Answer::declined(request.id.clone(), "declined"));
            }
        }
        result = client.resume(&suspended.state, answers)?;
    }

    println!("status: {:?}, turns: {}, relayed calls: {}", result.status, result.turns, result.tool_calls.len());
    println!("answer: {}", result.text);
    Ok(())
}
