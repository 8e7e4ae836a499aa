//! Translation throughput: a 50-message OpenAI conversation with tools to
//! Anthropic and Gemini requests, and provider responses back to OpenAI.

mod harness;
#[path = "../tests/sim/mod.rs"]
mod sim;

use harness::{measure, micros, samples};
use nexus_proto::translate::{openai_request_to, response_to_openai};
use nexus_proto::Style;
use serde_json::{json, Value};
use sim::{wire, Turn};

/// A system prompt and 50 messages: rounds of user → assistant tool calls → two tool results → assistant text.
fn conversation() -> Value {
    let mut messages = vec![json!({"role": "system", "content": "You are a helpful assistant."})];
    // 50 messages after the system prompt: 9 full rounds of 5, a tenth that
    // ends on its tool results, then the new user turn.
    for i in 0..10 {
        messages.push(json!({"role": "user", "content": format!("Question {i}: what is the weather in Paris, and what is 2 + {i}?")}));
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": format!("call_{i}_a"), "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": format!("call_{i}_b"), "type": "function", "function": {"name": "add", "arguments": format!("{{\"a\":2,\"b\":{i}}}")}}
        ]}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}_a"), "content": "Sunny, 22C"}));
        messages.push(json!({"role": "tool", "tool_call_id": format!("call_{i}_b"), "content": format!("{}", 2 + i)}));
        if i < 9 {
            messages
                .push(json!({"role": "assistant", "content": format!("It is sunny and 22C; 2 + {i} = {}.", 2 + i)}));
        }
    }
    messages.push(json!({"role": "user", "content": "Thanks! And tomorrow?"}));
    json!({
        "model": "some-model",
        "messages": messages,
        "tools": [
            {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "add", "description": "Adds", "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}
        ],
        "tool_choice": "auto",
        "max_tokens": 1024
    })
}

fn main() {
    let s = samples(25);
    let request = conversation();
    println!("## Translation (an OpenAI conversation of 50 messages + system with 2 tools; a 2-call response back)\n");
    println!("| direction | median (p95) | per second |");
    println!("|---|---|---|");
    for style in [Style::Anthropic, Style::Gemini] {
        let t = openai_request_to(style, &request).expect("translates");
        std::hint::black_box(t);
        let st = measure(s, 50, || {
            std::hint::black_box(openai_request_to(style, &request).unwrap());
        });
        println!(
            "| OpenAI request → {} | {:.1} µs ({:.1}) | {:.0} |",
            style.name(),
            micros(st.median),
            micros(st.p95),
            1.0 / st.median.as_secs_f64()
        );
        let body = wire(
            style,
            &Turn::calls(&[
                ("toolu_1", "get_weather", "{\"city\":\"Paris\"}"),
                ("toolu_2", "add", "{\"a\":2,\"b\":2}"),
            ]),
            false,
        );
        response_to_openai(style, &body, "some-model").expect("translates back");
        let st = measure(s, 200, || {
            std::hint::black_box(response_to_openai(style, &body, "some-model").unwrap());
        });
        println!(
            "| {} response → OpenAI | {:.1} µs ({:.1}) | {:.0} |",
            style.name(),
            micros(st.median),
            micros(st.p95),
            1.0 / st.median.as_secs_f64()
        );
    }
}
