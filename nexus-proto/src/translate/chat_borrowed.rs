//! The common Chat Completions request read without a `Value` tree.
//!
//! Nearly every translated request has one shape: messages whose content
//! is a string (or `null`), assistant tool calls with string arguments, and
//! function tools. Building that body as a tree (a `String` for every key and
//! value, a map for every object) and then copying it into the transcript was
//! about a quarter of a translated request's work. Here the body is read into
//! borrowed structs of exactly that shape, and the transcript is built from
//! them; the settings (everything but `messages` and `tools`) still go
//! through the one settings reader, as a map.
//!
//! The rule that keeps the contract in one place: this reader never decides
//! that a request is wrong. Anything outside the shape it knows (a content
//! array, an unknown key, a duplicate key, a name the target refuses, an
//! answer to an unknown call, malformed JSON) makes it give up, and the
//! caller reads the body as a tree ([`super::conversation`]), whose errors
//! and readings are the contract. What it does accept, it reads exactly as
//! that reader would: the property tests and the fuzz target hold the two
//! paths to the same result, byte for byte and error for error.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::conversation::{call_arguments, check_tool_name, Transcript};
use super::request::{encode_neutral, read_settings, Neutral};
use super::{Field, Item, TranslateError, TranslatedRequest};
use crate::message::{Block, Role, ToolCall, ToolResultBlock};
use crate::provider::wire::WireStr;
use crate::provider::Style;
use crate::tool::ToolDecl;

/// The body: the conversation typed, the settings as a map.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(borrow)]
    messages: Option<Vec<Message<'a>>>,
    #[serde(borrow)]
    tools: Option<Vec<Tool<'a>>>,
    #[serde(flatten)]
    settings: Map<String, Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Message<'a> {
    role: &'a str,
    #[serde(borrow)]
    content: Option<WireStr<'a>>,
    #[serde(borrow)]
    tool_calls: Option<Vec<Call<'a>>>,
    #[serde(borrow)]
    tool_call_id: Option<WireStr<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call<'a> {
    #[serde(borrow)]
    id: WireStr<'a>,
    #[serde(rename = "type", borrow)]
    kind: Option<WireStr<'a>>,
    #[serde(borrow)]
    function: CallFunction<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallFunction<'a> {
    #[serde(borrow)]
    name: WireStr<'a>,
    #[serde(borrow)]
    arguments: Option<WireStr<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Tool<'a> {
    #[serde(rename = "type", borrow)]
    kind: WireStr<'a>,
    #[serde(borrow)]
    function: ToolFunction<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolFunction<'a> {
    #[serde(borrow)]
    name: WireStr<'a>,
    #[serde(borrow)]
    description: Option<WireStr<'a>>,
    parameters: Option<Value>,
    strict: Option<bool>,
}

/// `body` translated for `style`, or `None` when it is not of the common
/// shape (the caller then reads it as a tree). An error here is one the tree
/// reader gives for the same body: the settings reader's, or the encoder's.
pub(super) fn translate(style: Style, body: &[u8]) -> Option<Result<TranslatedRequest, TranslateError>> {
    let text = std::str::from_utf8(body).ok()?;
    let body: Body = serde_json::from_str(text).ok()?;
    // The tree reader reads the settings first: their errors come first.
    let settings = match read_settings(style, &body.settings) {
        Ok(settings) => settings,
        Err(e) => return Some(Err(e)),
    };
    let (tools, strict) = read_tools(style, body.tools.unwrap_or_default())?;
    let (system, messages) = read_messages(style, body.messages?)?;
    let json_schema = body.settings.get("response_format").and_then(|f| f.get("json_schema")).cloned();
    Some(encode_neutral(style, &Neutral { settings, system, messages, tools, strict, json_schema }))
}

fn read_tools(style: Style, items: Vec<Tool>) -> Option<(Vec<ToolDecl>, Vec<bool>)> {
    let mut decls: Vec<ToolDecl> = Vec::with_capacity(items.len());
    let mut strict = Vec::with_capacity(items.len());
    for (i, tool) in items.into_iter().enumerate() {
        let f = tool.function;
        if &*tool.kind != "function"
            || check_tool_name(style, &f.name, Field(Item("tools", i), "function.name")).is_err()
            || decls.iter().any(|d| d.name == *f.name)
        {
            return None;
        }
        let schema = match f.parameters {
            None => Value::Null,
            Some(v @ Value::Object(_)) => v,
            Some(_) => return None,
        };
        strict.push(f.strict.unwrap_or(false));
        decls.push(ToolDecl::new(&f.name, f.description.map(WireStr::into_owned).unwrap_or_default(), schema));
    }
    Some((decls, strict))
}

fn read_messages(style: Style, items: Vec<Message>) -> Option<(Option<String>, Vec<crate::message::Message>)> {
    if items.is_empty() {
        return None;
    }
    let mut t = Transcript::default();
    for m in items {
        match m.role {
            "system" | "developer" if m.tool_calls.is_none() && m.tool_call_id.is_none() => {
                if let Some(text) = m.content.filter(|text| !text.is_empty()) {
                    t.system.push(text.into_owned());
                }
            }
            "user" if m.tool_calls.is_none() && m.tool_call_id.is_none() => {
                let text = m.content.filter(|text| !text.is_empty())?;
                t.push(Role::User, vec![Block::text(text.into_owned())]);
            }
            "assistant" if m.tool_call_id.is_none() => {
                let mut blocks = Vec::new();
                if let Some(text) = m.content {
                    blocks.push(Block::text(text.into_owned()));
                }
                for (j, call) in m.tool_calls.unwrap_or_default().into_iter().enumerate() {
                    blocks.push(t.call(style, j, tool_call(call)?));
                }
                t.push(Role::Assistant, blocks);
            }
            "tool" if m.tool_calls.is_none() => {
                let id = m.tool_call_id.filter(|id| !id.is_empty())?;
                let name = t.names.get(&*id)?.clone();
                let output = m.content.map(WireStr::into_owned).unwrap_or_default();
                let result = ToolResultBlock { call_id: id.into_owned(), name, output, is_error: false };
                t.push(Role::User, vec![Block::ToolResult(result)]);
            }
            _ => return None,
        }
    }
    Some(t.finish())
}

/// One assistant tool call; the argument text is kept exactly as sent.
fn tool_call(call: Call) -> Option<ToolCall> {
    if call.kind.as_ref().is_some_and(|kind| &**kind != "function")
        || call.id.is_empty()
        || call.function.name.is_empty()
    {
        return None;
    }
    let (arguments, input) = call_arguments(call.function.arguments.map(WireStr::into_owned)).ok()?;
    if !input.is_object() {
        return None;
    }
    Some(ToolCall {
        id: call.id.into_owned(),
        name: call.function.name.into_owned(),
        input,
        arguments,
        provider_data: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shapes this reader exists for are read here, not handed on.
    #[test]
    fn the_common_shape_is_read_without_a_tree() {
        let body = br#"{"model":"m","messages":[
            {"role":"system","content":"Be brief."},
            {"role":"user","content":"Weather in Paris?"},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"Sunny"}],
            "tools":[{"type":"function","function":{"name":"get_weather","description":"d","parameters":{"type":"object"}}}],
            "stream":true,"stream_options":{"include_usage":true},"max_tokens":100}"#;
        for style in [Style::Anthropic, Style::Gemini, Style::OpenAiResponses] {
            assert!(translate(style, body).is_some_and(|r| r.is_ok()), "{style:?}");
        }
    }

    /// What it does not know, it leaves to the tree reader, which gives the
    /// error (or reads the part this reader does not).
    #[test]
    fn anything_else_is_handed_on() {
        let others: &[&[u8]] = &[
            br#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"hi","name":"ann"}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":""}]}"#,
            br#"{"model":"m","messages":[{"role":"tool","tool_call_id":"nope","content":"x"}]}"#,
            br#"{"model":"m","messages":[]}"#,
            br#"{"model":"m"}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"a"}],"messages":[{"role":"user","content":"b"}]}"#,
            br#"{"model":"m","messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"a b"}}]}"#,
            br#"{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"[1]"}}]}]}"#,
            b"[1]",
            b"{",
        ];
        for body in others {
            assert!(translate(Style::Anthropic, body).is_none(), "{}", String::from_utf8_lossy(body));
        }
    }
}
