//! Request encoding: `Style::write_body` (bytes straight from the transcript)
//! against `serde_json::to_vec(&style.encode_body(call))` (a `Value` tree,
//! serialized, then dropped), on the request of a short tool-calling run and
//! on a long conversation. The two are timed in alternating pairs and the
//! ratio is the median of the per-pair ratios.

mod harness;

use harness::{micros, paired, samples};
use nexus_proto::provider::ModelCall;
use nexus_proto::{Block, Message, Role, Style, ToolCall, ToolDecl, ToolResultBlock};
use serde_json::{json, Map, Value};

fn tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::new(
            "get_weather",
            "Current weather for a city",
            json!({"type": "object", "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string", "enum": ["c", "f"]}}, "required": ["city"]}),
        ),
        ToolDecl::new(
            "add",
            "Adds two numbers",
            json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        ),
    ]
}

/// One round: a question, an assistant turn with two calls, their results,
/// and (unless it is the last round) the answer.
fn round(i: usize, answer: bool, out: &mut Vec<Message>) {
    out.push(Message::user(format!("Question {i}: what is the weather in Paris, and what is 2 + {i}?")));
    let call = |id: String, name: &str, args: String| {
        Block::ToolCall(ToolCall {
            id,
            name: name.into(),
            input: serde_json::from_str(&args).unwrap(),
            arguments: args,
            provider_data: None,
        })
    };
    out.push(Message {
        role: Role::Assistant,
        content: vec![
            Block::text("Let me check both."),
            call(format!("call_{i}_a"), "get_weather", r#"{"city":"Paris","unit":"c"}"#.into()),
            call(format!("call_{i}_b"), "add", format!(r#"{{"a":2,"b":{i}}}"#)),
        ],
    });
    let result = |id: String, name: &str, output: String| {
        Block::ToolResult(ToolResultBlock { call_id: id, name: name.into(), output, is_error: false })
    };
    out.push(Message {
        role: Role::User,
        content: vec![
            result(format!("call_{i}_a"), "get_weather", "Sunny, 22°C, light wind from the \"west\"".into()),
            result(format!("call_{i}_b"), "add", format!("{}", 2 + i)),
        ],
    });
    if answer {
        out.push(Message::assistant(format!("It is sunny and 22°C in Paris; 2 + {i} = {}.", 2 + i)));
    }
}

/// `rounds` rounds; the request is the one after the last round's results.
fn transcript(rounds: usize) -> Vec<Message> {
    let mut out = Vec::new();
    for i in 0..rounds {
        round(i, i + 1 < rounds, &mut out);
    }
    out
}

fn main() {
    let s = samples(31);
    let tools = tools();
    let params = Map::new();
    println!("## Request encoding (`write_body` against `to_vec(encode_body)`)\n");
    println!(
        "Each sample times both back to back (order alternating); the ratio column is the median of the {s} \
         per-pair ratios.\n"
    );
    println!("| style | request | body | write_body median (p95) | to_vec(encode_body) median (p95) | ratio (Value time / write_body time) |");
    println!("|---|---|---|---|---|---|");
    for (label, rounds, inner) in [("2 turns, 2 calls", 1, 2000), ("10 rounds, 39 messages", 10, 200)] {
        let messages = transcript(rounds);
        for style in [Style::Anthropic, Style::OpenAi, Style::Gemini] {
            let call = ModelCall {
                model: "some-model",
                system: Some("You are a helpful assistant."),
                messages: &messages,
                tools: &tools,
                max_tokens: Some(1024),
                stream: true,
                params: &params,
                output: None,
            };
            let want = serde_json::to_vec(&style.encode_body(&call)).unwrap();
            assert_eq!(style.body_bytes(&call), want, "the two paths differ");
            let (ours, theirs, ratio) = paired(
                s,
                inner,
                || {
                    std::hint::black_box(style.body_bytes(std::hint::black_box(&call)));
                },
                || {
                    let body: Value = style.encode_body(std::hint::black_box(&call));
                    std::hint::black_box(serde_json::to_vec(&body).unwrap_or_default());
                },
            );
            println!(
                "| {} | {label} | {:.1} KB | {:.2} µs ({:.2}) | {:.2} µs ({:.2}) | {:.2} |",
                style.name(),
                want.len() as f64 / 1e3,
                micros(ours.median),
                micros(ours.p95),
                micros(theirs.median),
                micros(theirs.p95),
                ratio,
            );
        }
    }
}
