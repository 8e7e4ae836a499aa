//! The Responses request body written straight to bytes: the same bytes as
//! `serde_json::to_vec(&encode_body(call))`, from borrowed views (see
//! [`crate::provider::body`]). Every rule lives in [`super`] (which items an
//! assistant turn becomes, what a user turn holds); this file only mirrors
//! the shapes, with each struct's fields in key order.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde::Serialize as DeriveSerialize;
use serde_json::{Map, Value};

use super::{
    arguments_from_input, assistant_items, is_refusal, message_meta, message_status, own, user_parts, AssistantItem,
    INCLUDE,
};
use crate::message::{Block, ImageSource, Message, Role, ToolCall};
use crate::provider::body::{Field, Fields, Joined, Seq, TextPart};
use crate::provider::ModelCall;
use crate::tool::ToolDecl;

/// The top-level keys of [`super::encode_body`].
pub(crate) fn fields<'a>(call: &ModelCall<'a>) -> Fields<'a, Part<'a>> {
    let mut f = Vec::with_capacity(8 + call.params.len());
    f.push(("model", Field::Str(call.model)));
    f.push(("input", Field::Part(Part::Input(call.messages))));
    if let Some(system) = call.system.filter(|s| !s.is_empty()) {
        f.push(("instructions", Field::Str(system)));
    }
    if !call.tools.is_empty() {
        f.push(("tools", Field::Part(Part::Tools(call.tools))));
    }
    if call.stream {
        f.push(("stream", Field::True));
    }
    f.push(("store", Field::Owned(Value::Bool(false))));
    f.push(("include", Field::Part(Part::Include)));
    if let Some(max) = call.max_tokens {
        f.push(("max_output_tokens", Field::U32(max)));
    }
    if let Some(o) = call.output {
        f.push(("text", Field::Output(crate::output::wire::View::ResponsesText(o))));
    }
    f
}

/// The conversation's keys (and `include`, reserved too: written without
/// building its one-string array per request).
pub(crate) enum Part<'a> {
    Input(&'a [Message]),
    Tools(&'a [ToolDecl]),
    Include,
}

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Part::Input(messages) => {
                let mut seq = s.serialize_seq(None)?;
                for message in messages {
                    match message.role {
                        Role::User => {
                            for r in message.tool_results() {
                                let item =
                                    OutputItem { call_id: &r.call_id, output: &r.output, kind: "function_call_output" };
                                seq.serialize_element(&item)?;
                            }
                            if let Some(parts) = user_parts(message) {
                                let m =
                                    InputMessage { content: Seq(parts.map(UserPart)), role: "user", kind: "message" };
                                seq.serialize_element(&m)?;
                            }
                        }
                        Role::Assistant => {
                            for item in assistant_items(&message.content) {
                                seq.serialize_element(&ItemView(&item))?;
                            }
                        }
                    }
                }
                seq.end()
            }
            Part::Include => s.collect_seq([INCLUDE]),
            Part::Tools(tools) => s.collect_seq(tools.iter().map(|t| ToolView {
                description: &t.description,
                name: &t.name,
                parameters: &t.input_schema,
                strict: false,
                kind: "function",
            })),
        }
    }
}

#[derive(DeriveSerialize)]
struct OutputItem<'a> {
    call_id: &'a str,
    output: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(DeriveSerialize)]
struct InputMessage<C> {
    content: C,
    role: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// `{type:"input_text"}` or `{type:"input_image"}`.
struct UserPart<'a>(&'a Block);

impl Serialize for UserPart<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Block::Image { media_type, source } => {
                ImagePart { detail: "auto", image_url: DataUrl { media_type, source }, kind: "input_image" }
                    .serialize(s)
            }
            Block::Text { text, .. } => TextPart { text, kind: "input_text" }.serialize(s),
            // Never reached: only text and image blocks are user parts.
            _ => s.serialize_none(),
        }
    }
}

#[derive(DeriveSerialize)]
struct ImagePart<'a> {
    detail: &'static str,
    image_url: DataUrl<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// An image's URL: a data URL for inline bytes, written without building it.
struct DataUrl<'a> {
    media_type: &'a str,
    source: &'a ImageSource,
}

impl Serialize for DataUrl<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.source {
            ImageSource::Base64 { data } => {
                s.collect_str(&Joined(["data:", self.media_type, ";base64,", data.as_str()].into_iter()))
            }
            ImageSource::Url { url } => s.serialize_str(url),
        }
    }
}

/// One item of an assistant turn.
struct ItemView<'a>(&'a AssistantItem<'a>);

impl Serialize for ItemView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            AssistantItem::Reasoning(item) => item.serialize(s),
            AssistantItem::Compaction(item) => super::compaction_input(item).serialize(s),
            AssistantItem::Message { meta, parts } => {
                let mut map = s.serialize_map(None)?;
                map.serialize_entry("content", &Seq(parts.iter().filter_map(OutputPart::of)))?;
                map.serialize_entry("id", meta.get("id").unwrap_or(&Value::Null))?;
                if let Some(phase) = meta.get("phase") {
                    map.serialize_entry("phase", phase)?;
                }
                map.serialize_entry("role", "assistant")?;
                map.serialize_entry("status", message_status(meta))?;
                map.serialize_entry("type", "message")?;
                map.end()
            }
            AssistantItem::Plain(text) => {
                InputMessage { content: *text, role: "assistant", kind: "message" }.serialize(s)
            }
            AssistantItem::Call(call) => CallView(call).serialize(s),
        }
    }
}

/// An `output_text` or `refusal` part of an echoed message.
enum OutputPart<'a> {
    Text { text: &'a str, annotations: Option<&'a Value> },
    Refusal(&'a str),
}

impl<'a> OutputPart<'a> {
    fn of(block: &'a Block) -> Option<OutputPart<'a>> {
        let Block::Text { text, provider_data } = block else { return None };
        let meta: Option<&Map<String, Value>> = message_meta(provider_data.as_ref());
        Some(match meta {
            Some(m) if is_refusal(m) => OutputPart::Refusal(text),
            m => OutputPart::Text { text, annotations: m.and_then(|m| m.get("annotations")) },
        })
    }
}

impl Serialize for OutputPart<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3))?;
        match self {
            OutputPart::Text { text, annotations } => {
                match annotations {
                    Some(a) => map.serialize_entry("annotations", a)?,
                    None => map.serialize_entry("annotations", &[(); 0])?,
                }
                map.serialize_entry("text", text)?;
                map.serialize_entry("type", "output_text")?;
            }
            OutputPart::Refusal(text) => {
                map.serialize_entry("refusal", text)?;
                map.serialize_entry("type", "refusal")?;
            }
        }
        map.end()
    }
}

/// `{arguments, call_id, id?, name, status?, type:"function_call"}`.
struct CallView<'a>(&'a ToolCall);

impl Serialize for CallView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let call = self.0;
        let own = own(call.provider_data.as_ref());
        let kept = |key: &str| own.and_then(|m| m.get(key)).filter(|v| v.is_string());
        let mut map = s.serialize_map(None)?;
        if arguments_from_input(call) {
            map.serialize_entry("arguments", &Display(&call.input))?;
        } else {
            map.serialize_entry("arguments", &call.arguments)?;
        }
        map.serialize_entry("call_id", &call.id)?;
        if let Some(id) = kept("id") {
            map.serialize_entry("id", id)?;
        }
        map.serialize_entry("name", &call.name)?;
        if let Some(status) = kept("status") {
            map.serialize_entry("status", status)?;
        }
        map.serialize_entry("type", "function_call")?;
        map.end()
    }
}

/// A value's compact JSON text as a JSON string, without a `String`.
struct Display<'a>(&'a Value);

impl Serialize for Display<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self.0)
    }
}

#[derive(DeriveSerialize)]
struct ToolView<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
    strict: bool,
    #[serde(rename = "type")]
    kind: &'static str,
}

/// The `tools` part alone (what [`crate::tool::ToolSet`] keeps per style).
pub(crate) fn tools_part(tools: &[ToolDecl]) -> Part<'_> {
    Part::Tools(tools)
}
