//! Round trips: an OpenAI request carrying N parallel tool calls and their
//! results goes to Anthropic or Gemini; a provider response that makes calls
//! (built here by hand, with the argument text placed verbatim) comes back as
//! OpenAI. Every tool call id, name and argument byte survives both ways,
//! streamed or not, however the stream is cut.

mod common;
mod translate_support;

use std::collections::BTreeSet;

use nexus_proto::translate::{openai_request_to, response_to_openai, StreamTranslator};
use nexus_proto::{SseDecoder, Style};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{json, Map, Value};
use translate_support::{assemble, oracle_batch, Job};

const NAMES: &[&str] = &["get_weather", "add", "lookup-user", "_private", "x9"];

/// Any JSON value, nested a little, with strings that need escaping.
fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1.0e9f64..1.0e9).prop_map(Value::from),
        "[a-zé\"\\\\\n\t/😀 ]{0,10}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 20, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map("[a-z_é]{1,6}", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Argument text: a JSON object written compactly or pretty-printed, so the
/// bytes are not what a re-encoding would produce.
fn arb_arguments() -> impl Strategy<Value = String> {
    (btree_map("[a-zA-Z_é]{1,8}", arb_json(), 0..4), any::<bool>()).prop_map(|(m, pretty)| {
        let v = Value::Object(m.into_iter().collect::<Map<String, Value>>());
        if pretty {
            serde_json::to_string_pretty(&v).unwrap()
        } else {
            serde_json::to_string(&v).unwrap()
        }
    })
}

#[derive(Debug, Clone)]
struct Call {
    id: String,
    name: String,
    arguments: String,
}

/// 1–5 calls with unique ids; names may repeat (parallel calls of one tool).
fn arb_calls() -> impl Strategy<Value = Vec<Call>> {
    vec(("[a-zA-Z0-9]{4,12}", 0..NAMES.len(), arb_arguments()), 1..6).prop_map(|items| {
        let mut seen = BTreeSet::new();
        items
            .into_iter()
            .enumerate()
            .filter(|(_, (id, _, _))| seen.insert(id.clone()))
            .map(|(i, (id, name, arguments))| Call {
                id: format!("call_{i}_{id}"),
                name: NAMES[name].to_string(),
                arguments,
            })
            .collect()
    })
}

fn tools() -> Vec<Value> {
    NAMES
        .iter()
        .map(|n| json!({"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}))
        .collect()
}

/// A follow-up request: the calls (arguments as strings, or as objects for
/// odd positions) and one result per call, in reverse order.
fn follow_up(calls: &[Call], outputs: &[String]) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let arguments = if i % 2 == 1 {
                serde_json::from_str::<Value>(&c.arguments).unwrap()
            } else {
                Value::String(c.arguments.clone())
            };
            json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": arguments}})
        })
        .collect();
    let mut messages = vec![
        json!({"role": "user", "content": "go"}),
        json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
    ];
    for (c, out) in calls.iter().zip(outputs).rev() {
        messages.push(json!({"role": "tool", "tool_call_id": c.id, "content": out}));
    }
    json!({"model": "gemini-2.5-flash", "messages": messages, "tools": tools()})
}

/// The Messages API response making `calls`, the argument text placed as is.
fn anthropic_body(calls: &[Call]) -> String {
    let blocks: Vec<String> = calls
        .iter()
        .map(|c| {
            format!(r#"{{"type":"tool_use","id":{},"name":{},"input":{}}}"#, json!(c.id), json!(c.name), c.arguments)
        })
        .collect();
    format!(
        r#"{{"id":"msg_rt","type":"message","role":"assistant","model":"claude","content":[{}],"stop_reason":"tool_use","usage":{{"input_tokens":5,"output_tokens":9}}}}"#,
        blocks.join(",")
    )
}

/// The same turn as an Anthropic SSE stream, each call's argument text cut
/// into `input_json_delta` pieces at the given character positions.
fn anthropic_sse(calls: &[Call], cuts: &[usize]) -> String {
    let mut s = String::new();
    let mut event = |kind: &str, data: Value| s.push_str(&format!("event: {kind}\ndata: {data}\n\n"));
    event(
        "message_start",
        json!({"type": "message_start", "message": {"id": "msg_rt", "type": "message", "role": "assistant", "model": "claude", "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}}),
    );
    for (i, c) in calls.iter().enumerate() {
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": c.id, "name": c.name, "input": {}}}),
        );
        let chars: Vec<char> = c.arguments.chars().collect();
        let mut bounds: Vec<usize> = cuts.iter().map(|k| k % (chars.len() + 1)).collect();
        bounds.extend([0, chars.len()]);
        bounds.sort_unstable();
        bounds.dedup();
        for w in bounds.windows(2) {
            let piece: String = chars[w[0]..w[1]].iter().collect();
            event(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": piece}}),
            );
        }
        event("content_block_stop", json!({"type": "content_block_stop", "index": i}));
    }
    event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
    );
    event("message_stop", json!({"type": "message_stop"}));
    s
}

/// The generateContent response making `calls`; ids only when `with_ids`.
fn gemini_payload(calls: &[Call], with_ids: bool) -> String {
    let parts: Vec<String> = calls
        .iter()
        .map(|c| {
            let id = if with_ids { format!(r#","id":{}"#, json!(c.id)) } else { String::new() };
            format!(r#"{{"functionCall":{{"name":{},"args":{}{id}}}}}"#, json!(c.name), c.arguments)
        })
        .collect();
    format!(
        r#"{{"candidates":[{{"content":{{"role":"model","parts":[{}]}},"finishReason":"STOP","index":0}}],"usageMetadata":{{"promptTokenCount":5,"candidatesTokenCount":9,"totalTokenCount":14}},"responseId":"rt"}}"#,
        parts.join(",")
    )
}

/// One SSE event carrying `payload` (a pretty-printed argument object spans
/// lines, and each line of a payload is its own `data:` line), CRLF-framed as
/// Gemini frames its streams.
fn gemini_sse(payload: &str) -> String {
    let mut s: String = payload.split('\n').map(|line| format!("data: {line}\r\n")).collect();
    s.push_str("\r\n");
    s
}

/// Feeds SSE text through the decoder in `piece`-byte chunks and the translator.
fn translate_stream(style: Style, sse: &str, piece: usize) -> Vec<String> {
    let mut t = StreamTranslator::new(style, "m", true);
    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    let mut lines = Vec::new();
    for chunk in sse.as_bytes().chunks(piece.max(1)) {
        decoder.feed(chunk, &mut events);
        lines.extend(events.drain(..).flat_map(|e| t.push(&e)));
    }
    decoder.finish(&mut events);
    lines.extend(events.drain(..).flat_map(|e| t.push(&e)));
    lines.extend(t.finish());
    lines
}

/// (id, name, arguments) of a `chat.completion`'s tool calls.
fn completion_calls(v: &Value) -> Vec<(String, String, String)> {
    v["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |p: &str| c.pointer(p).and_then(Value::as_str).unwrap().to_string();
            (s("/id"), s("/function/name"), s("/function/arguments"))
        })
        .collect()
}

fn expected_calls(calls: &[Call]) -> Vec<(String, String, String)> {
    calls.iter().map(|c| (c.id.clone(), c.name.clone(), c.arguments.clone())).collect()
}

/// The translated request keeps every call (id, name, arguments as parsed)
/// and every result (id, output), in one user turn.
fn check_request(style: Style, req: &Value, calls: &[Call], outputs: &[String]) -> Result<(), TestCaseError> {
    let t = openai_request_to(style, req).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let body: Value = serde_json::from_slice(&t.body).unwrap();
    let (turns, call_key, result_key) = match style {
        Style::Anthropic => (body["messages"].clone(), "content", "content"),
        _ => (body["contents"].clone(), "parts", "parts"),
    };
    let turns = turns.as_array().unwrap();
    prop_assert_eq!(turns.len(), 3, "user, model, ONE results turn: {}", body);
    let got_calls: Vec<(String, String, Value)> = turns[1][call_key]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| match style {
            Style::Anthropic => {
                (b["id"].as_str().unwrap().into(), b["name"].as_str().unwrap().into(), b["input"].clone())
            }
            _ => {
                let fc = &b["functionCall"];
                (fc["id"].as_str().unwrap().into(), fc["name"].as_str().unwrap().into(), fc["args"].clone())
            }
        })
        .collect();
    let want_calls: Vec<(String, String, Value)> =
        calls.iter().map(|c| (c.id.clone(), c.name.clone(), serde_json::from_str(&c.arguments).unwrap())).collect();
    prop_assert_eq!(got_calls, want_calls);
    let got_results: Vec<(String, String)> = turns[2][result_key]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| match style {
            Style::Anthropic => (b["tool_use_id"].as_str().unwrap().into(), b["content"].as_str().unwrap().into()),
            _ => {
                let fr = &b["functionResponse"];
                let call = calls.iter().find(|c| fr["id"] == c.id.as_str()).unwrap();
                assert_eq!(fr["name"], call.name.as_str(), "a response is named after its call");
                (fr["id"].as_str().unwrap().into(), fr["response"]["output"].as_str().unwrap().into())
            }
        })
        .collect();
    let want_results: Vec<(String, String)> = calls
        .iter()
        .zip(outputs)
        .rev()
        .map(|(c, o)| {
            // An empty output reaches Anthropic as its explicit placeholder.
            let o = if o.is_empty() && style == Style::Anthropic { "(no output)".to_string() } else { o.clone() };
            (c.id.clone(), o)
        })
        .collect();
    prop_assert_eq!(got_results, want_results);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn anthropic_round_trip_keeps_ids_names_and_argument_bytes(
        calls in arb_calls(),
        outputs in vec("[a-z {}\"]{0,8}", 5),
        cuts in vec(0usize..64, 0..6),
        piece in 1usize..200,
    ) {
        check_request(Style::Anthropic, &follow_up(&calls, &outputs), &calls, &outputs)?;
        let v = response_to_openai(Style::Anthropic, anthropic_body(&calls).as_bytes(), "m").unwrap();
        prop_assert_eq!(completion_calls(&v), expected_calls(&calls));
        prop_assert_eq!(&v["choices"][0]["finish_reason"], "tool_calls");
        let got = assemble(&translate_stream(Style::Anthropic, &anthropic_sse(&calls, &cuts), piece));
        prop_assert!(got.done);
        prop_assert_eq!(got.calls, expected_calls(&calls));
        prop_assert_eq!(got.finish.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn gemini_round_trip_keeps_ids_names_and_argument_bytes(
        calls in arb_calls(),
        outputs in vec("[a-z {}\"]{0,8}", 5),
        with_ids in any::<bool>(),
        piece in 1usize..200,
    ) {
        check_request(Style::Gemini, &follow_up(&calls, &outputs), &calls, &outputs)?;
        let body = gemini_payload(&calls, with_ids);
        let v = response_to_openai(Style::Gemini, body.as_bytes(), "m").unwrap();
        let sse = gemini_sse(&body);
        let streamed = assemble(&translate_stream(Style::Gemini, &sse, piece));
        prop_assert!(streamed.done);
        let got = completion_calls(&v);
        prop_assert_eq!(&streamed.calls, &got, "streamed and whole answers agree");
        for ((id, name, arguments), c) in got.iter().zip(&calls) {
            prop_assert_eq!(name, &c.name);
            prop_assert_eq!(arguments, &c.arguments);
            if with_ids {
                prop_assert_eq!(id, &c.id);
            } else {
                prop_assert!(id.starts_with("call_"));
            }
        }
        prop_assert_eq!(got.len(), calls.len());
        let unique: BTreeSet<&String> = got.iter().map(|c| &c.0).collect();
        prop_assert_eq!(unique.len(), calls.len(), "ids are unique");
        // The answer's calls can be sent back: the next request translates and
        // names each result after its call even with generated ids.
        let back: Vec<Call> = got.iter().map(|(id, name, arguments)| Call { id: id.clone(), name: name.clone(), arguments: arguments.clone() }).collect();
        check_request(Style::Gemini, &follow_up(&back, &outputs), &back, &outputs)?;
    }
}

/// A fixed two-call turn, streamed from each provider, read by the official
/// `openai` SDK: both calls, in order, with their ids and exact arguments.
#[test]
fn parallel_calls_stream_through_the_openai_sdk() {
    let calls = vec![
        Call { id: "toolu_01A".into(), name: "get_weather".into(), arguments: "{\"city\": \"Paris\"}".into() },
        Call { id: "toolu_01B".into(), name: "add".into(), arguments: "{\"a\":2,\"b\":2}".into() },
    ];
    let anthropic = translate_stream(Style::Anthropic, &anthropic_sse(&calls, &[3, 9]), 11).concat();
    let gemini = translate_stream(Style::Gemini, &gemini_sse(&gemini_payload(&calls, true)), 11).concat();
    let runs = vec![
        Job { script: "parse_stream.py", style: "openai", bytes: anthropic.into_bytes(), args: vec!["--check-splits"] },
        Job { script: "parse_stream.py", style: "openai", bytes: gemini.into_bytes(), args: vec!["--check-splits"] },
    ];
    let Some(verdicts) = oracle_batch(&runs) else {
        return;
    };
    for v in verdicts {
        assert!(v.ok, "{}\n{}", v.stdout, v.stderr);
        let s = v.summary();
        assert_eq!(
            s["tool_calls"],
            json!([
                {"id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
                {"id": "toolu_01B", "name": "add", "input": {"a": 2, "b": 2}},
            ])
        );
        assert_eq!(s["stop"], "tool_calls");
        assert_eq!(s["usage"], json!({"input": 5, "output": 9}));
    }
}
