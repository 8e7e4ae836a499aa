//! A whole Anthropic Messages answer of the common shape written as a
//! `chat.completion` in one borrowed pass.
//!
//! The general path ([`super::response_to_openai_bytes`] through
//! `decode_turn`) reads an answer three times (the id keys, the message with
//! its blocks as raw text, then each block), copies every string into a
//! [`crate::provider::TurnResponse`] and parses each call's input into a
//! tree that a completion never writes. Most answers a gateway relays are
//! text and `tool_use` blocks with their ids; this reads those once, into
//! borrowed fields, and writes the same [`Completion`] from them.
//!
//! Anything else returns `None` and the caller takes the general path, whose
//! reading is the contract: thinking and server-tool blocks, a block with
//! any other key, a call without an id (its id is generated), an id that is
//! not a string, an error body, a repeated key, bytes that are not UTF-8.
//! Every field read here has the type the general reader gives it, so a
//! body accepted here is one the general path decodes, to the same
//! completion (the `paths` property test below, the translate fuzz target).

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::response::{CallOut, Completion, CompletionBytes, FunctionOut, UsageOut};
use super::{fingerprint, CompletionMeta};
use crate::provider::anthropic::{is_object_text, stop_reason, usage, WireUsage};
use crate::provider::wire::{MapOnly, WireStr};
use crate::provider::StopReason;

/// The top-level keys the general path reads (the message's, and the four
/// the completion id may come from), with the same types.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<WireStr<'a>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
    #[serde(default, borrow)]
    id: Option<WireStr<'a>>,
    #[serde(rename = "responseId", default)]
    _response_id: Option<IgnoredAny>,
    #[serde(rename = "message", default)]
    _message: Option<IgnoredAny>,
    #[serde(rename = "response", default)]
    _response: Option<IgnoredAny>,
    // Read for its type only: the completion reports the gateway's model name.
    #[serde(rename = "model", default, borrow)]
    _model: Option<WireStr<'a>>,
    #[serde(borrow)]
    content: Vec<MapOnly<Block<'a>>>,
    #[serde(default, borrow)]
    stop_reason: Option<WireStr<'a>>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

/// A `text` or `tool_use` block with no key but these.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Block<'a> {
    #[serde(rename = "type", borrow)]
    kind: WireStr<'a>,
    #[serde(default, borrow)]
    text: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    id: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    name: Option<WireStr<'a>>,
    #[serde(default, borrow)]
    input: Option<&'a RawValue>,
}

/// The completion for `body`, or `None` when the general path must read it.
pub(super) fn completion(body: &[u8], meta: &CompletionMeta) -> Option<CompletionBytes> {
    let text = std::str::from_utf8(body).ok()?;
    if !is_object_text(body) {
        return None;
    }
    let message: Message<'_> = serde_json::from_str(text).ok()?;
    if message.error.is_some() || message.kind.as_deref() == Some("error") {
        return None;
    }
    let provider_id = message.id.as_deref()?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for MapOnly(block) in &message.content {
        match &*block.kind {
            "text" => content.push_str(block.text.as_deref().unwrap_or_default()),
            "tool_use" => {
                // A call without an id gets a generated one: the general path's.
                let id = block.id.as_deref().filter(|id| !id.is_empty())?;
                // The exact text of `input`; none (or `null`) is "no arguments".
                let arguments = block.input.map(RawValue::get).filter(|raw| *raw != "null");
                tool_calls.push(CallOut {
                    id,
                    kind: "function",
                    function: FunctionOut {
                        name: block.name.as_deref().unwrap_or_default(),
                        arguments: arguments.unwrap_or("{}"),
                    },
                });
            }
            _ => return None,
        }
    }
    let id = if meta.id.is_empty() {
        let token = super::response::clean_id(provider_id).unwrap_or_else(|| format!("{:016x}", fingerprint(body)));
        Cow::Owned(format!("chatcmpl-{token}"))
    } else {
        Cow::Borrowed(meta.id.as_str())
    };
    let stop = message.stop_reason.as_deref().map_or(StopReason::Other, stop_reason);
    let used = message.usage.map(|u| usage(u.input_tokens, u.output_tokens));
    let completion = Completion::assemble(
        &id,
        meta,
        content,
        String::new(),
        tool_calls,
        stop,
        used.as_ref().map(UsageOut::of_usage),
    );
    let mut out = Vec::with_capacity(512);
    // Plain structs of strings and numbers into a Vec cannot fail.
    serde_json::to_writer(&mut out, &completion).ok()?;
    Some(CompletionBytes { body: out, usage: used })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> CompletionMeta {
        CompletionMeta { id: String::new(), model: "gpt-4o".into(), created: 7 }
    }

    #[test]
    fn text_and_calls_with_ids_take_this_path() {
        let body = br#"{"id":"msg_01","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":20,"output_tokens":8,"cache_read_input_tokens":0}}"#;
        let out = completion(body, &meta()).expect("the common shape");
        let v: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
        assert_eq!(v["id"], "chatcmpl-msg_01");
        assert_eq!(v["choices"][0]["message"]["content"], "Let me check.");
        assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], r#"{"city":"Paris"}"#);
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(v["usage"]["total_tokens"], 28);
        assert_eq!(out.usage.map(|u| u.prompt_tokens), Some(20));
    }

    #[test]
    fn near_misses_go_to_the_general_path() {
        let misses: &[&[u8]] = &[
            // thinking, a server tool block, a key the block reader does not know
            br#"{"id":"m","content":[{"type":"thinking","thinking":"t","signature":"s"}]}"#,
            br#"{"id":"m","content":[{"type":"server_tool_use","id":"s","name":"web_search","input":{}}]}"#,
            br#"{"id":"m","content":[{"type":"text","text":"a","citations":[]}]}"#,
            // a call whose id is generated, an id that is not a string
            br#"{"id":"m","content":[{"type":"tool_use","name":"f","input":{}}]}"#,
            br#"{"id":7,"content":[]}"#,
            br#"{"content":[]}"#,
            // errors, arrays, repeated keys, bytes that are not UTF-8
            br#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#,
            br#"["m",[]]"#,
            br#"{"id":"m","content":[["text","a"]]}"#,
            br#"{"id":"m","id":"n","content":[]}"#,
            br#"{"id":"m","content":[{"type":"text","text":"a","text":"b"}]}"#,
            b"{\"id\":\"m\",\"content\":[{\"type\":\"text\",\"text\":\"\xff\"}]}",
            br#"{"id":"m","content":[],"model":5}"#,
        ];
        for body in misses {
            assert!(completion(body, &meta()).is_none(), "{}", String::from_utf8_lossy(body));
        }
    }

    mod paths {
        //! Answers drawn from a grammar of the common shape and its near
        //! misses: wherever this path answers, the general path gives the
        //! same completion; it answers for most of the common shape.
        use proptest::prelude::*;
        use serde_json::{json, Map, Value};

        use super::super::completion;
        use crate::translate::{response_to_openai_bytes, response_to_openai_with, CompletionMeta};
        use crate::Style;

        /// One of `usual` nine times in ten, else one of `odd` (`None`: the key left out).
        fn pick(usual: Vec<Option<Value>>, odd: Vec<Option<Value>>) -> impl Strategy<Value = Option<Value>> {
            prop_oneof![9 => proptest::sample::select(usual), 1 => proptest::sample::select(odd)]
        }

        fn put(map: &mut Map<String, Value>, key: &str, value: Option<Value>) {
            if let Some(v) = value {
                map.insert(key.into(), v);
            }
        }

        fn block() -> impl Strategy<Value = Value> {
            let text = pick(
                vec![Some(json!("Let me check.")), Some(json!("with \"quotes\",\na newline and é")), Some(json!(""))],
                vec![None, Some(Value::Null), Some(json!(5))],
            );
            let id = pick(
                vec![Some(json!("toolu_01")), Some(json!("toolu_02")), Some(json!("t\"3"))],
                vec![None, Some(json!("")), Some(Value::Null), Some(json!(4))],
            );
            let name = pick(vec![Some(json!("get_weather")), Some(json!("add"))], vec![None, Some(json!(""))]);
            let input = pick(
                vec![Some(json!({"city": "Paris"})), Some(json!({"a": 2, "b": 2})), Some(json!({}))],
                vec![None, Some(Value::Null), Some(json!([1])), Some(json!("text"))],
            );
            let kind = prop_oneof![
                12 => proptest::sample::select(vec!["text", "tool_use"]),
                1 => proptest::sample::select(vec!["thinking", "redacted_thinking", "server_tool_use", "new_kind"]),
            ];
            (kind, text, id, name, input, any::<u8>()).prop_map(|(kind, text, id, name, input, extra)| {
                let mut b = Map::new();
                b.insert("type".into(), json!(kind));
                if kind == "text" || extra % 16 == 1 {
                    put(&mut b, "text", text);
                }
                if kind != "text" || extra % 16 == 2 {
                    put(&mut b, "id", id);
                    put(&mut b, "name", name);
                    put(&mut b, "input", input);
                }
                match extra % 32 {
                    3 => drop(b.insert("citations".into(), json!([]))),
                    4 => drop(b.insert("caller".into(), json!({"type": "direct"}))),
                    5 => drop(b.insert("thinking".into(), json!("t"))),
                    6 => return json!(["text", "as an array"]),
                    7 => drop(b.remove("type")),
                    _ => {}
                }
                Value::Object(b)
            })
        }

        fn body() -> impl Strategy<Value = Vec<u8>> {
            let id = pick(
                vec![Some(json!("msg_01XFDUDYJgAACzvnptvVoYEL")), Some(json!("msg/01 x"))],
                vec![None, Some(Value::Null), Some(json!("")), Some(json!("/// ")), Some(json!(9))],
            );
            let kind = pick(vec![Some(json!("message")), None], vec![Some(json!("error")), Some(json!(1))]);
            let model = pick(vec![Some(json!("claude-sonnet-4-5")), None], vec![Some(Value::Null), Some(json!(3))]);
            let content = prop_oneof![
                12 => proptest::collection::vec(block(), 0..4).prop_map(|b| Some(Value::Array(b))),
                1 => proptest::sample::select(vec![None, Some(Value::Null), Some(json!({"type": "text"}))]),
            ];
            let stop = pick(
                vec![
                    Some(json!("end_turn")),
                    Some(json!("tool_use")),
                    Some(json!("max_tokens")),
                    Some(json!("refusal")),
                    Some(json!("stop_sequence")),
                ],
                vec![None, Some(Value::Null), Some(json!("new_reason")), Some(json!(2))],
            );
            let usage = pick(
                vec![
                    Some(json!({"input_tokens": 20, "output_tokens": 8})),
                    Some(json!({"input_tokens": 20, "output_tokens": 8, "cache_read_input_tokens": 3})),
                    None,
                ],
                vec![Some(Value::Null), Some(json!({"input_tokens": -1})), Some(json!([20, 8])), Some(json!({}))],
            );
            (id, kind, model, content, stop, usage, any::<u8>()).prop_map(
                |(id, kind, model, content, stop, usage, extra)| {
                    let mut m = Map::new();
                    put(&mut m, "id", id);
                    put(&mut m, "type", kind);
                    m.insert("role".into(), json!("assistant"));
                    put(&mut m, "model", model);
                    put(&mut m, "content", content);
                    put(&mut m, "stop_reason", stop);
                    m.insert("stop_sequence".into(), Value::Null);
                    put(&mut m, "usage", usage);
                    match extra % 16 {
                        1 => drop(m.insert("error".into(), json!({"type": "api_error", "message": "x"}))),
                        2 => drop(m.insert("responseId".into(), json!("r1"))),
                        3 => drop(m.insert("container".into(), Value::Null)),
                        _ => {}
                    }
                    let text = serde_json::to_string(&Value::Object(m)).unwrap();
                    match extra % 16 {
                        // A repeated key, which no map can hold.
                        4 => text.replacen('{', r#"{"id":"first","#, 1).into_bytes(),
                        5 => text.replacen('{', r#"{"usage":null,"#, 1).into_bytes(),
                        6 => format!("  {text}\n").into_bytes(),
                        7 => format!("[{text}]").into_bytes(),
                        _ => text.into_bytes(),
                    }
                },
            )
        }

        fn meta(given_id: bool) -> CompletionMeta {
            let id = if given_id { "chatcmpl-given".to_string() } else { String::new() };
            CompletionMeta { id, model: "gpt-4o".into(), created: 1_700_000_000 }
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
            #[test]
            fn this_path_answers_as_the_general_path(body in body(), given_id in any::<bool>()) {
                let meta = meta(given_id);
                let general = response_to_openai_with(Style::Anthropic, &body, &meta);
                if let Some(fast) = completion(&body, &meta) {
                    let general = general.clone().expect("a body this path reads, the general path reads");
                    let fast_value: Value = serde_json::from_slice(&fast.body).unwrap();
                    prop_assert_eq!(&fast_value, &general);
                    prop_assert_eq!(fast.usage.map(|u| u.total_tokens), general["usage"]["total_tokens"].as_u64());
                }
                // And what the gateway calls, whichever path it takes.
                match (response_to_openai_bytes(Style::Anthropic, &body, &meta), general) {
                    (Ok(bytes), Ok(general)) => {
                        let v: Value = serde_json::from_slice(&bytes.body).unwrap();
                        prop_assert_eq!(v, general);
                    }
                    (Err(a), Err(b)) => prop_assert_eq!(a, b),
                    (a, b) => prop_assert!(false, "bytes {:?}, general {:?}", a.map(|c| c.body), b),
                }
            }
        }

        /// The grammar reaches this path for most of its common shape, and
        /// the general path for the rest.
        #[test]
        fn both_paths_are_reached() {
            use proptest::strategy::ValueTree;
            use proptest::test_runner::TestRunner;
            let mut runner = TestRunner::deterministic();
            let (mut fast, mut general) = (0, 0);
            for _ in 0..1000 {
                let body = body().new_tree(&mut runner).unwrap().current();
                match completion(&body, &meta(false)) {
                    Some(_) => fast += 1,
                    None => general += 1,
                }
            }
            assert!(fast > 200 && general > 200, "fast {fast}, general {general}");
        }
    }
}
