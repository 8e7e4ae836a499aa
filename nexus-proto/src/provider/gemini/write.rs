//! The `generateContent` request body written straight to bytes: the same
//! bytes as `serde_json::to_vec(&encode_body(call))`, from borrowed views (see
//! [`crate::provider::body`]). Every rule lives in [`super::encode`]; this
//! file only mirrors its shapes, with each struct's fields in key order.
//! A call's arguments keep the model's key order (`CallObject`), so
//! they are the one place the bytes may differ from the tree's (the JSON is
//! the same).

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde::Serialize as DeriveSerialize;

use super::encode::{call_args, keeps_block, parse_data_url, CallIndex};
use super::signature;
use crate::message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock};
use crate::provider::body::{CallObject, Field, Fields, Seq};
use crate::provider::ModelCall;
use crate::tool::ToolDecl;

/// The top-level keys of [`super::encode_body`].
pub(crate) fn fields<'a>(call: &ModelCall<'a>) -> Fields<'a, Part<'a>> {
    let mut f = Vec::with_capacity(4 + call.params.len());
    f.push(("contents", Field::Part(Part::Contents(call.messages))));
    if let Some(system) = call.system.filter(|s| !s.is_empty()) {
        f.push(("systemInstruction", Field::Part(Part::System(system))));
    }
    if !call.tools.is_empty() {
        f.push(("tools", Field::Part(Part::Tools(call.tools))));
    }
    if let Some(config) = super::encode::generation_config(call) {
        f.push(("generationConfig", Field::Owned(config)));
    }
    f
}

/// The conversation's keys.
pub(crate) enum Part<'a> {
    Contents(&'a [Message]),
    System(&'a str),
    Tools(&'a [ToolDecl]),
}

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Part::Contents(messages) => contents(messages, s),
            Part::System(text) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("parts", &[TextPart { text, thought: None, thought_signature: None }])?;
                map.end()
            }
            Part::Tools(tools) => {
                let declarations = Seq(tools.iter().map(Declaration));
                let mut seq = s.serialize_seq(Some(1))?;
                seq.serialize_element(&FunctionDeclarations { function_declarations: declarations })?;
                seq.end()
            }
        }
    }
}

/// One `Content` per run of same-role messages that have parts, as
/// `encode_contents` groups them (messages without parts do not break a run).
fn contents<S: Serializer>(messages: &[Message], s: S) -> Result<S::Ok, S::Error> {
    let index = CallIndex::new(messages);
    let has_parts = |m: &Message| m.content.iter().any(keeps_block);
    let mut seq = s.serialize_seq(None)?;
    let mut i = 0;
    while let Some(first) = messages.get(i) {
        if !has_parts(first) {
            i += 1;
            continue;
        }
        // The run goes up to the next message with parts of the other role.
        // Messages without parts at its end add no part to it, and the next
        // run skips them as well, so they may go either way.
        let mut end = i + 1;
        while messages.get(end).is_some_and(|m| m.role == first.role || !has_parts(m)) {
            end += 1;
        }
        let run = messages.get(i..end).unwrap_or_default();
        seq.serialize_element(&ContentView { run, role: first.role, index: &index })?;
        i = end;
    }
    seq.end()
}

/// `{parts, role}` for a run of messages.
struct ContentView<'a> {
    run: &'a [Message],
    role: Role,
    index: &'a CallIndex<'a>,
}

impl Serialize for ContentView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let index = self.index;
        let parts = self.run.iter().flat_map(|m| &m.content).filter(|b| keeps_block(b)).map(|b| PartView(b, index));
        let mut map = s.serialize_map(Some(2))?;
        map.serialize_entry("parts", &Seq(parts))?;
        map.serialize_entry(
            "role",
            match self.role {
                Role::User => "user",
                Role::Assistant => "model",
            },
        )?;
        map.end()
    }
}

/// One part of a block [`keeps_block`] keeps.
struct PartView<'a>(&'a Block, &'a CallIndex<'a>);

impl Serialize for PartView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Block::Text { text, provider_data } => {
                TextPart { text, thought: None, thought_signature: signature(provider_data.as_ref()) }.serialize(s)
            }
            Block::Reasoning { text, provider_data, .. } => {
                TextPart { text, thought: Some(true), thought_signature: signature(provider_data.as_ref()) }
                    .serialize(s)
            }
            Block::Image { media_type, source } => image(media_type, source, s),
            Block::ToolCall(call) => function_call(call, self.1).serialize(s),
            Block::ToolResult(result) => function_response(result, self.1).serialize(s),
        }
    }
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct TextPart<'a> {
    text: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

fn image<S: Serializer>(media_type: &str, source: &ImageSource, s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(1))?;
    match source {
        ImageSource::Base64 { data } => map.serialize_entry("inlineData", &Blob { data, mime_type: media_type })?,
        ImageSource::Url { url } => match parse_data_url(url) {
            Some((mime, data)) => map.serialize_entry(
                "inlineData",
                &Blob { data: &data, mime_type: mime.as_deref().unwrap_or(media_type) },
            )?,
            None => map.serialize_entry("fileData", &FileData { file_uri: url, mime_type: media_type })?,
        },
    }
    map.end()
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct Blob<'a> {
    data: &'a str,
    mime_type: &'a str,
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct FileData<'a> {
    file_uri: &'a str,
    mime_type: &'a str,
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct FunctionCallPart<'a> {
    function_call: FunctionCall<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

#[derive(DeriveSerialize)]
struct FunctionCall<'a> {
    args: CallObject<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    name: &'a str,
}

fn function_call<'a>(call: &'a ToolCall, index: &CallIndex<'_>) -> FunctionCallPart<'a> {
    FunctionCallPart {
        function_call: FunctionCall {
            args: CallObject::new(&call.arguments, call_args(call)),
            id: index.sent_id(&call.id),
            name: &call.name,
        },
        thought_signature: signature(call.provider_data.as_ref()),
    }
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct FunctionResponsePart<'a> {
    function_response: FunctionResponse<'a>,
}

#[derive(DeriveSerialize)]
struct FunctionResponse<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    name: &'a str,
    response: Response<'a>,
}

/// `{"output": text}`, or `{"error": text}` for an error result.
struct Response<'a>(&'a ToolResultBlock);

impl Serialize for Response<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(1))?;
        map.serialize_entry(if self.0.is_error { "error" } else { "output" }, &self.0.output)?;
        map.end()
    }
}

fn function_response<'a>(result: &'a ToolResultBlock, index: &CallIndex<'a>) -> FunctionResponsePart<'a> {
    let (id, name) = (index.sent_id(&result.call_id), index.result_name(result));
    FunctionResponsePart { function_response: FunctionResponse { id, name, response: Response(result) } }
}

#[derive(DeriveSerialize)]
#[serde(rename_all = "camelCase")]
struct FunctionDeclarations<I> {
    function_declarations: I,
}

/// One declaration, under `parameters` or `parametersJsonSchema` as
/// [`ToolDecl::to_gemini`] chooses.
struct Declaration<'a>(&'a ToolDecl);

impl Serialize for Declaration<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let t = self.0;
        let mut map = s.serialize_map(Some(3))?;
        map.serialize_entry("description", &t.description)?;
        map.serialize_entry("name", &t.name)?;
        map.serialize_entry(t.gemini_parameters_key(), &t.input_schema)?;
        map.end()
    }
}

/// The `tools` part alone (what [`crate::tool::ToolSet`] keeps per style).
pub(crate) fn tools_part(tools: &[ToolDecl]) -> Part<'_> {
    Part::Tools(tools)
}
