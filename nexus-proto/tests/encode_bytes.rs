//! `Style::write_body` writes the request body straight from the transcript;
//! it must give exactly the bytes of `serde_json::to_vec(&style.encode_body(call))`
//! for every style and every transcript, params and options included (for
//! Anthropic and Gemini, once read back: their call arguments keep the
//! model's key order). The
//! properties below generate transcripts full of the cases each encoder treats
//! specially and compare the two byte for byte.

use nexus_proto::output::OutputFormat;
use nexus_proto::provider::ModelCall;
use nexus_proto::tool::ToolKind;
use nexus_proto::{Block, ImageSource, Message, Role, Style, ToolCall, ToolDecl, ToolResultBlock};
use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

const STYLES: [Style; 4] = [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses];

/// Text that needs escaping: quotes, backslashes, control characters, NUL,
/// DEL, U+2028, non-ASCII and astral characters.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just(String::new()),
        3 => "[a-z \"\\\\/\n\r\t\u{0}\u{1}\u{1f}\u{7f}\u{2028}é€😀]{0,10}",
        1 => "\\PC{0,12}",
    ]
}

/// Object keys whose byte order differs from any "natural" order.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_string()),
        Just("A".to_string()),
        Just("_".to_string()),
        Just("$ref".to_string()),
        Just("type".to_string()),
        Just("text".to_string()),
        Just("é".to_string()),
        Just("additionalProperties".to_string()),
        Just("oneOf".to_string()),
        "[a-zA-Z_$é0-9]{1,6}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        text().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(key(), inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Value> {
    btree_map(key(), json_value(), 0..4).prop_map(|m| Value::Object(m.into_iter().collect()))
}

/// `provider_data`: nothing, junk, or any mix of what each encoder reads.
fn provider_data() -> impl Strategy<Value = Option<Value>> {
    let signature = prop_oneof![text().prop_map(Value::from), Just(json!("sig-Ab3+/=")), json_value()];
    let gemini = option::of(signature.prop_map(|s| json!({ "thoughtSignature": s })));
    let openai = option::of(prop_oneof![any::<bool>().prop_map(|r| json!({ "refusal": r })), json_value()]);
    let anthropic = option::of(prop_oneof![
        json_object().prop_map(|b| json!({ "block": b })),
        json_value().prop_map(|b| json!({ "block": b })),
        (json_value(), json_value()).prop_map(|(c, t)| json!({ "caller": c, "toolset_name": t })),
        json_object().prop_map(|c| json!({ "caller": c })),
        json_value(),
    ]);
    let nexus = option::of(any::<bool>().prop_map(|g| json!({ "generatedId": g })));
    prop_oneof![
        1 => Just(None),
        1 => json_value().prop_map(Some),
        4 => (gemini, openai, anthropic, nexus).prop_map(|(g, o, a, n)| {
            let mut m = Map::new();
            for (k, v) in [("gemini", g), ("openai", o), ("anthropic", a), ("nexus", n)] {
                if let Some(v) = v {
                    m.insert(k.to_string(), v);
                }
            }
            Some(Value::Object(m))
        }),
    ]
}

/// Call ids from a small pool, so results and calls meet (Gemini looks names
/// up by id and leaves generated ids out).
fn call_id() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), Just("c1".to_string()), Just("c2".to_string()), Just("call_0".to_string()), text()]
}

/// Argument text: empty, not JSON, cut off, an array, `null`, or an object
/// written compactly, pretty-printed or with duplicate keys.
fn arguments() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("   ".to_string()),
        Just("null".to_string()),
        Just("[1,2]".to_string()),
        Just("{\"a\":1,\"a\":2}".to_string()),
        Just("{\"b\": 1, \"a\": {\"z\": [1, 2.50, \"\\u00e9\"]}}".to_string()),
        Just("{\"city\": \"Par".to_string()),
        text(),
        (json_object(), any::<bool>()).prop_map(|(v, pretty)| if pretty {
            serde_json::to_string_pretty(&v).unwrap()
        } else {
            v.to_string()
        }),
    ]
}

fn image_source() -> impl Strategy<Value = ImageSource> {
    prop_oneof![
        text().prop_map(|data| ImageSource::Base64 { data }),
        text().prop_map(|url| ImageSource::Url { url }),
        Just(ImageSource::Url { url: "https://example.com/a.png".into() }),
        Just(ImageSource::Url { url: "data:image/png;base64,iVBOR w0K".into() }),
        Just(ImageSource::Url { url: "data:;base64,QQ==".into() }),
        Just(ImageSource::Url { url: "DATA:image/svg+xml,%3Csvg%3E%zz".into() }),
        Just(ImageSource::Url { url: "data:text/plain;charset=utf-8;base64,aGk=".into() }),
        Just(ImageSource::Url { url: "data:image/png;base64".into() }),
    ]
}

fn block() -> impl Strategy<Value = Block> {
    prop_oneof![
        4 => (text(), provider_data()).prop_map(|(text, provider_data)| Block::Text { text, provider_data }),
        2 => (text(), option::of(text()), option::of(text()), provider_data()).prop_map(
            |(text, signature, redacted, provider_data)| Block::Reasoning { text, signature, redacted, provider_data }
        ),
        1 => (prop_oneof![Just("image/png".to_string()), text()], image_source())
            .prop_map(|(media_type, source)| Block::Image { media_type, source }),
        3 => (call_id(), text(), prop_oneof![json_object(), json_value(), Just(json!({}))], arguments(), provider_data())
            .prop_map(|(id, name, input, arguments, provider_data)| {
                Block::ToolCall(ToolCall { id, name, input, arguments, provider_data })
            }),
        // A call as a decoder makes it: `input` is the parsed arguments.
        2 => (call_id(), text(), json_object(), 0..3, provider_data()).prop_map(|(id, name, input, form, provider_data)| {
            let arguments = match form {
                0 => input.to_string(),
                1 => serde_json::to_string_pretty(&input).unwrap(),
                _ => String::new(),
            };
            Block::ToolCall(ToolCall { id, name, input, arguments, provider_data })
        }),
        3 => (call_id(), text(), text(), any::<bool>()).prop_map(|(call_id, name, output, is_error)| {
            Block::ToolResult(ToolResultBlock { call_id, name, output, is_error })
        }),
    ]
}

fn message() -> impl Strategy<Value = Message> {
    (prop_oneof![Just(Role::User), Just(Role::Assistant)], vec(block(), 0..5))
        .prop_map(|(role, content)| Message { role, content })
}

fn tool() -> impl Strategy<Value = ToolDecl> {
    let schema = prop_oneof![
        Just(json!({"type": "object", "properties": {}})),
        Just(json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false})),
        Just(json!({"type": "object", "properties": {"x": {"oneOf": [{"type": "string"}, {"$ref": "#/$defs/y"}]}}})),
        json_value(),
    ];
    (text(), text(), schema).prop_map(|(name, description, input_schema)| ToolDecl {
        name,
        description,
        input_schema,
        kind: ToolKind::Executed,
    })
}

/// Caller params: the keys each encoder writes itself (objects and not),
/// the reserved conversation keys, and others.
fn params() -> impl Strategy<Value = Map<String, Value>> {
    let key = prop_oneof![
        Just("model"),
        Just("max_tokens"),
        Just("max_completion_tokens"),
        Just("stream_options"),
        Just("generationConfig"),
        Just("response_format"),
        Just("text"),
        Just("output_config"),
        Just("messages"),
        Just("tools"),
        Just("stream"),
        Just("contents"),
        Just("system"),
        Just("systemInstruction"),
        Just("temperature"),
        Just("tool_choice"),
        Just("A"),
        Just("zz"),
        Just("_"),
    ];
    let value = prop_oneof![
        json_value(),
        json_object(),
        Just(json!({ "include_usage": false, "x": 1 })),
        Just(json!({ "maxOutputTokens": 7, "temperature": 0.5 })),
    ];
    prop_oneof![
        1 => Just(Map::new()),
        2 => btree_map(key, value, 0..5).prop_map(|m| m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
    ]
}

#[derive(Debug)]
struct Case {
    model: String,
    system: Option<String>,
    messages: Vec<Message>,
    tools: Vec<ToolDecl>,
    max_tokens: Option<u32>,
    stream: bool,
    params: Map<String, Value>,
    output: Option<OutputFormat>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop_oneof![Just("m-1".to_string()), text()],
        option::of(text()),
        vec(message(), 0..7),
        vec(tool(), 0..3),
        option::of(any::<u32>()),
        any::<bool>(),
        params(),
        option::of((text(), option::of(text()), json_object())),
    )
        .prop_map(|(model, system, messages, tools, max_tokens, stream, params, output)| Case {
            model,
            system,
            messages,
            tools,
            max_tokens,
            stream,
            params,
            output: output.map(|(name, description, schema)| OutputFormat { name, description, schema }),
        })
}

impl Case {
    fn call(&self) -> ModelCall<'_> {
        ModelCall {
            model: &self.model,
            system: self.system.as_deref(),
            messages: &self.messages,
            tools: &self.tools,
            max_tokens: self.max_tokens,
            stream: self.stream,
            params: &self.params,
            output: self.output.as_ref(),
        }
    }
}

/// Asserts the two paths agree for every style, and that `write_body` appends.
/// Chat Completions and Responses agree byte for byte. Anthropic and Gemini
/// carry a call's arguments as an object that keeps the model's key order,
/// so there the bytes agree once both are read back (same JSON, and nothing
/// else differs: re-serialized, the written body is the tree's bytes).
fn assert_same_bytes(case: &Case) {
    let call = case.call();
    for style in STYLES {
        let want = serde_json::to_vec(&style.encode_body(&call)).unwrap();
        let mut got = b"prefix".to_vec();
        style.write_body(&call, &mut got);
        assert_eq!(&got[..6], b"prefix", "{style:?}: write_body must append");
        let got = got[6..].to_vec();
        let comparable = match style {
            Style::Anthropic | Style::Gemini => {
                let read: Value =
                    serde_json::from_slice(&got).unwrap_or_else(|e| panic!("{style:?}: invalid JSON: {e}"));
                serde_json::to_vec(&read).unwrap()
            }
            _ => got.clone(),
        };
        assert!(
            comparable == want,
            "{style:?}: bytes differ\n want: {}\n  got: {}",
            String::from_utf8_lossy(&want),
            String::from_utf8_lossy(&got),
        );
        assert_eq!(style.body_bytes(&call), got, "{style:?}: body_bytes");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn write_body_equals_the_serialized_value_body(case in case()) {
        assert_same_bytes(&case);
    }
}

/// A fixed conversation with one of everything, so a failure here names the
/// shape without shrinking.
#[test]
fn write_body_equals_the_serialized_value_body_for_a_full_conversation() {
    let call = |id: &str, name: &str, args: &str, data: Option<Value>| {
        Block::ToolCall(ToolCall {
            id: id.into(),
            name: name.into(),
            input: serde_json::from_str(args).unwrap_or(Value::Null),
            arguments: args.into(),
            provider_data: data,
        })
    };
    let result = |id: &str, name: &str, output: &str, is_error: bool| {
        Block::ToolResult(ToolResultBlock { call_id: id.into(), name: name.into(), output: output.into(), is_error })
    };
    let messages = vec![
        Message::user("What is the weather in \"Paris\"?\n\u{1}😀"),
        Message {
            role: Role::User,
            content: vec![
                Block::text("and this"),
                Block::Image { media_type: "image/png".into(), source: ImageSource::Base64 { data: "iVBOR".into() } },
                Block::Image {
                    media_type: "image/jpeg".into(),
                    source: ImageSource::Url { url: "https://x/y.jpg".into() },
                },
            ],
        },
        Message {
            role: Role::Assistant,
            content: vec![
                Block::Reasoning {
                    text: "thinking…".into(),
                    signature: Some("sig".into()),
                    redacted: None,
                    provider_data: Some(json!({"gemini": {"thoughtSignature": "g-sig"}})),
                },
                Block::Reasoning {
                    text: String::new(),
                    signature: None,
                    redacted: Some("opaque".into()),
                    provider_data: None,
                },
                Block::Text { text: "Let me look.".into(), provider_data: None },
                Block::Text { text: "I won't".into(), provider_data: Some(json!({"openai": {"refusal": true}})) },
                Block::Text {
                    text: String::new(),
                    provider_data: Some(
                        json!({"anthropic": {"block": {"type": "server_tool_use", "id": "s", "input": {}}}}),
                    ),
                },
                call(
                    "c1",
                    "get_weather",
                    "{\"city\": \"Paris\", \"b\": [1, 2.5]}",
                    Some(json!({"anthropic": {"caller": {"type": "direct"}}})),
                ),
                call(
                    "call_0",
                    "add",
                    "",
                    Some(json!({"nexus": {"generatedId": true}, "gemini": {"thoughtSignature": "s2"}})),
                ),
                call("c3", "broken", "{\"a\": ", None),
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                result("c1", "get_weather", "Sunny, 22°C", false),
                Block::text("thanks"),
                result("call_0", "", "", true),
                result("c3", "broken", "bad arguments", true),
            ],
        },
        Message { role: Role::Assistant, content: vec![] },
        Message { role: Role::User, content: vec![Block::text("")] },
        Message::assistant("It is sunny."),
    ];
    let tools = vec![
        ToolDecl::new(
            "get_weather",
            "Weather for a city",
            json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        ),
        ToolDecl::new("strict", "s", json!({"type": "object", "properties": {}, "additionalProperties": false})),
    ];
    let mut params = Map::new();
    params.insert("temperature".into(), json!(0.2));
    params.insert("generationConfig".into(), json!({"temperature": 0.2}));
    params.insert("stream_options".into(), json!({"include_obfuscation": false}));
    params.insert("max_tokens".into(), json!(100));
    params.insert("messages".into(), json!([]));
    for (system, max_tokens, stream, params) in [
        (Some("Be brief.\t\"ok\""), Some(512), true, params.clone()),
        (None, None, false, Map::new()),
        (Some(""), Some(0), true, Map::new()),
        (Some("sys"), None, false, params),
    ] {
        assert_same_bytes(&Case {
            model: "model-\u{e9}".into(),
            system: system.map(str::to_string),
            messages: messages.clone(),
            tools: tools.clone(),
            max_tokens,
            stream,
            params,
            output: max_tokens.map(|_| OutputFormat {
                name: "final_result".into(),
                description: system.map(str::to_string),
                schema: json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}}, "required": ["a"]}),
            }),
        });
    }
}
