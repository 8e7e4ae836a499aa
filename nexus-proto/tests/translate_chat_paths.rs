//! A Chat Completions body translates to the same request, or is refused
//! with the same error, whether it arrives as bytes (where the common shape
//! is read without a tree) or as a `Value` (always read as a tree). The
//! bodies are drawn from a grammar that mixes the common shape with every
//! near miss the borrowed reader must hand on: content arrays, unknown and
//! duplicate keys, nulls, escapes, empty ids, unanswered results, tools the
//! target refuses, bad arguments and bad settings.

use nexus_proto::translate::{openai_request_bytes_to, openai_request_to};
use nexus_proto::Style;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const TRANSLATED: [Style; 3] = [Style::Anthropic, Style::Gemini, Style::OpenAiResponses];

/// `Some(value)` for a key that is present, `None` for one left out: one of
/// `usual` nine times in ten, else one of `odd`, so that most bodies are of
/// the common shape and a good share of them miss it by one field.
fn pick(usual: Vec<Option<Value>>, odd: Vec<Option<Value>>) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![9 => proptest::sample::select(usual), 1 => proptest::sample::select(odd)]
}

fn text() -> impl Strategy<Value = Option<Value>> {
    pick(
        vec![
            Some(json!("What's the weather in Paris?")),
            Some(json!("with \"quotes\",\na newline and é")),
            Some(Value::Null),
        ],
        vec![None, Some(json!("")), Some(json!([{"type": "text", "text": "a part"}])), Some(json!(5))],
    )
}

fn call() -> impl Strategy<Value = Value> {
    (
        pick(
            vec![Some(json!("c1")), Some(json!("c2")), Some(json!("c\"3"))],
            vec![Some(json!("")), None, Some(json!(7))],
        ),
        pick(vec![Some(json!("function")), None], vec![Some(Value::Null), Some(json!("custom"))]),
        pick(vec![Some(json!("get_weather")), Some(json!("add"))], vec![Some(json!("")), None]),
        pick(
            vec![Some(json!("{\"city\": \"Paris\"}")), Some(json!("{\"a\":2,\"b\":2}")), None, Some(json!(""))],
            vec![Some(Value::Null), Some(json!(" ")), Some(json!("[1]")), Some(json!("{bad")), Some(json!({"a": 1}))],
        ),
        any::<u8>(),
    )
        .prop_map(|(id, kind, name, arguments, extra)| {
            let mut function = Map::new();
            put(&mut function, "name", name);
            put(&mut function, "arguments", arguments);
            let mut call = Map::new();
            put(&mut call, "id", id);
            put(&mut call, "type", kind);
            call.insert("function".into(), Value::Object(function));
            if extra % 8 == 0 {
                call.insert("index".into(), json!(0));
            }
            Value::Object(call)
        })
}

fn message() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            20 => proptest::sample::select(vec!["system", "developer", "user", "assistant", "tool"]),
            1 => proptest::sample::select(vec!["function", "bogus"]),
        ],
        text(),
        prop_oneof![
            4 => Just(None),
            1 => Just(Some(Value::Null)),
            1 => Just(Some(json!([]))),
            4 => proptest::collection::vec(call(), 1..3).prop_map(|calls| Some(Value::Array(calls))),
        ],
        pick(
            vec![None, Some(json!("c1")), Some(json!("c2"))],
            vec![Some(Value::Null), Some(json!("")), Some(json!("zz"))],
        ),
        any::<u8>(),
    )
        .prop_map(|(role, content, tool_calls, tool_call_id, extra)| {
            // Ids only where they belong, mostly: a tool message answers, others do not.
            let tool_call_id = if role == "tool" || extra % 5 == 0 { tool_call_id } else { None };
            let tool_calls = if role == "assistant" || extra % 7 == 0 { tool_calls } else { None };
            let mut m = Map::new();
            m.insert("role".into(), json!(role));
            put(&mut m, "content", content);
            put(&mut m, "tool_calls", tool_calls);
            put(&mut m, "tool_call_id", tool_call_id);
            match extra % 16 {
                0 => drop(m.insert("name".into(), json!("ann"))),
                1 => drop(m.insert("refusal".into(), Value::Null)),
                2 => drop(m.insert("annotations".into(), json!([]))),
                _ => {}
            }
            Value::Object(m)
        })
}

fn tool() -> impl Strategy<Value = Value> {
    (
        pick(vec![Some(json!("function"))], vec![Some(json!("web_search")), None]),
        pick(vec![Some(json!("get_weather")), Some(json!("add"))], vec![Some(json!("a b")), Some(json!("1abc")), None]),
        pick(
            vec![None, Some(json!("Get the weather.")), Some(json!("say \"hi\""))],
            vec![Some(Value::Null), Some(json!(5))],
        ),
        pick(
            vec![
                None,
                Some(json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})),
            ],
            vec![Some(Value::Null), Some(json!("x"))],
        ),
        pick(vec![None, Some(json!(true)), Some(json!(false))], vec![Some(Value::Null), Some(json!("yes"))]),
        any::<u8>(),
    )
        .prop_map(|(kind, name, description, parameters, strict, extra)| {
            let mut function = Map::new();
            put(&mut function, "name", name);
            put(&mut function, "description", description);
            put(&mut function, "parameters", parameters);
            put(&mut function, "strict", strict);
            if extra % 8 == 0 {
                function.insert("examples".into(), json!([]));
            }
            let mut tool = Map::new();
            put(&mut tool, "type", kind);
            tool.insert("function".into(), Value::Object(function));
            Value::Object(tool)
        })
}

/// A well-formed conversation: system and developer prompts, the user's
/// question, the model's calls and their results, its answer, and another
/// question.
fn conversation() -> impl Strategy<Value = Value> {
    let text = || proptest::sample::select(vec!["Paris?", "with \"quotes\",\na newline and é", ""]);
    let output = || proptest::sample::select(vec![Some("Sunny"), Some("4 \"units\""), Some(""), None]);
    let arguments = proptest::sample::select(vec![
        Some("{\"city\": \"Paris\"}"),
        Some("{\"a\":2,\"b\":2}"),
        Some(""),
        Some("  "),
        None,
    ]);
    (
        proptest::collection::vec((any::<bool>(), text()), 0..3),
        proptest::sample::select(vec!["What's the weather in Paris?", "say \"hi\"\n"]),
        proptest::collection::vec(
            (proptest::sample::select(vec!["get_weather", "add"]), arguments, any::<bool>()),
            0..3,
        ),
        proptest::option::of(text()),
        proptest::collection::vec(output(), 3),
        proptest::option::of(text()),
        any::<bool>(),
    )
        .prop_map(|(system, question, calls, said, outputs, answer, again)| {
            let mut messages = Vec::new();
            for (developer, text) in system {
                messages.push(json!({"role": if developer { "developer" } else { "system" }, "content": text}));
            }
            messages.push(json!({"role": "user", "content": question}));
            if !calls.is_empty() {
                let calls: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, (name, arguments, typed))| {
                        let mut function = json!({"name": name});
                        if let Some(a) = arguments {
                            function["arguments"] = json!(a);
                        }
                        let mut call = json!({"id": format!("c{i}"), "function": function});
                        if *typed {
                            call["type"] = json!("function");
                        }
                        call
                    })
                    .collect();
                messages.push(json!({"role": "assistant", "content": said, "tool_calls": calls}));
                for (i, out) in outputs.iter().take(calls.len()).enumerate() {
                    messages.push(json!({"role": "tool", "tool_call_id": format!("c{i}"), "content": out}));
                }
            }
            if let Some(text) = answer {
                messages.push(json!({"role": "assistant", "content": text}));
            }
            if again {
                messages.push(json!({"role": "user", "content": "And tomorrow?"}));
            }
            Value::Array(messages)
        })
}

/// Well-formed tool declarations: either or both of the two tools.
fn declarations() -> impl Strategy<Value = Value> {
    let tool = |name: &'static str| {
        (
            any::<bool>(),
            proptest::sample::select(vec![None, Some("Get it."), Some("say \"hi\"")]),
            any::<bool>(),
            proptest::sample::select(vec![None, Some(true), Some(false)]),
        )
            .prop_map(move |(present, description, schema, strict)| {
                present.then(|| {
                    let mut function = json!({"name": name});
                    if let Some(d) = description {
                        function["description"] = json!(d);
                    }
                    if schema {
                        function["parameters"] =
                            json!({"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]});
                    }
                    if let Some(s) = strict {
                        function["strict"] = json!(s);
                    }
                    json!({"type": "function", "function": function})
                })
            })
    };
    (tool("get_weather"), tool("add")).prop_map(|(a, b)| Value::Array([a, b].into_iter().flatten().collect()))
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    (
        pick(
            vec![Some(json!("mock-model")), Some(json!("models/gemini-x"))],
            vec![Some(json!("")), None, Some(json!(5))],
        ),
        prop_oneof![
            12 => conversation().prop_map(Some),
            8 => proptest::collection::vec(message(), 1..7).prop_map(|m| Some(Value::Array(m))),
            1 => Just(Some(json!([]))),
            1 => Just(None),
            1 => Just(Some(Value::Null)),
        ],
        prop_oneof![
            3 => Just(None),
            1 => Just(Some(Value::Null)),
            1 => Just(Some(json!([]))),
            8 => declarations().prop_map(Some),
            5 => proptest::collection::vec(tool(), 1..3).prop_map(|t| Some(Value::Array(t))),
        ],
        (
            pick(vec![None, Some(json!(true)), Some(json!(false))], vec![Some(json!("x"))]),
            pick(vec![None, Some(json!({"include_usage": true}))], vec![Some(json!({"other": 1}))]),
            pick(vec![None, Some(json!(100))], vec![Some(json!(0)), Some(json!(-1))]),
            pick(vec![None, Some(json!(0.5)), Some(Value::Null)], vec![Some(json!(3))]),
            pick(
                vec![
                    None,
                    Some(json!("auto")),
                    Some(json!("required")),
                    Some(json!({"type": "function", "function": {"name": "add"}})),
                ],
                vec![Some(json!("sometimes"))],
            ),
            pick(
                vec![
                    None,
                    Some(json!({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}})),
                ],
                vec![Some(json!({"type": "json_schema"}))],
            ),
            pick(vec![None], vec![Some(json!(1)), Some(json!(2))]),
        ),
        any::<u8>(),
    )
        .prop_map(|(model, messages, tools, settings, layout)| {
            let (stream, stream_options, max_tokens, temperature, tool_choice, response_format, unknown) = settings;
            let mut b = Map::new();
            put(&mut b, "model", model);
            put(&mut b, "messages", messages);
            put(&mut b, "tools", tools);
            put(&mut b, "stream", stream);
            put(&mut b, "stream_options", stream_options);
            put(&mut b, "max_tokens", max_tokens);
            put(&mut b, "temperature", temperature);
            put(&mut b, "tool_choice", tool_choice);
            put(&mut b, "response_format", response_format);
            put(&mut b, "foo", unknown.clone().filter(|v| v == &json!(2)));
            put(&mut b, "n", unknown.filter(|v| v == &json!(1)));
            let text = if layout % 2 == 0 {
                serde_json::to_string(&Value::Object(b)).unwrap()
            } else {
                serde_json::to_string_pretty(&Value::Object(b)).unwrap()
            };
            // A repeated key: the tree keeps the last one.
            match layout % 23 {
                0 if text.len() > 2 => {
                    format!("{{\"messages\":[{{\"role\":\"user\",\"content\":\"first\"}}],{}", &text[1..])
                }
                1 if text.len() > 2 => format!("{{\"model\":\"first-model\",{}", &text[1..]),
                2 => text.replacen("\"role\":\"user\"", "\"role\":\"user\",\"role\":\"user\"", 1),
                _ => text,
            }
            .into_bytes()
        })
}

fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(v) = value {
        map.insert(key.into(), v);
    }
}

fn same_either_way(bytes: &[u8]) {
    let tree: Option<Value> = serde_json::from_slice(bytes).ok();
    for style in TRANSLATED {
        let from_bytes = openai_request_bytes_to(style, bytes);
        match &tree {
            Some(tree) => assert_eq!(
                from_bytes,
                openai_request_to(style, tree),
                "{style:?}: bytes and tree differ for {}",
                String::from_utf8_lossy(bytes)
            ),
            None => assert!(from_bytes.is_err(), "{style:?}: malformed JSON translated"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn bytes_and_tree_translate_alike(bytes in body()) {
        same_either_way(&bytes);
    }
}

/// The shared scenario's two turns, whole and streamed: the shape the
/// gateway sees most, translated alike for every target.
#[test]
fn the_common_turns_translate_alike() {
    let tools = json!([
        {"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a city.",
         "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "add", "description": "Add two integers.",
         "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}
    ]);
    let turn1 = json!([
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What's the weather in Paris and what is 2+2?"}
    ]);
    let mut turn2 = turn1.as_array().unwrap().clone();
    turn2.extend([
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_weather_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
            {"id": "call_add_1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 2}"}}]}),
        json!({"role": "tool", "tool_call_id": "call_weather_1", "content": "The weather in Paris is Sunny, 22C."}),
        json!({"role": "tool", "tool_call_id": "call_add_1", "content": "4"}),
    ]);
    for messages in [turn1, Value::Array(turn2)] {
        for stream in [false, true] {
            let mut body = json!({"model": "mock-model", "messages": messages, "tools": tools});
            if stream {
                body["stream"] = json!(true);
                body["stream_options"] = json!({"include_usage": true});
            }
            let bytes = serde_json::to_vec(&body).unwrap();
            same_either_way(&bytes);
            for style in TRANSLATED {
                assert!(openai_request_bytes_to(style, &bytes).is_ok(), "{style:?}");
            }
        }
    }
}
