//! The Messages request body written straight to bytes: the same bytes as
//! `serde_json::to_vec(&encode_body(call))`, from borrowed views (see
//! [`crate::provider::body`]). Every rule lives in [`super::encode`]; this
//! file only mirrors its shapes, with each struct's fields in key order.
//! A call's arguments keep the model's key order (`CallObject`), so
//! they are the one place the bytes may differ from the tree's (the JSON is
//! the same).

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde::Serialize as DeriveSerialize;
use serde_json::Value;

use super::encode::DEFAULT_MAX_TOKENS;
use super::encode::{call_object, inline_image, keeps_block, opaque_block, result_content, tool_use_extra};
use crate::message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock};
use crate::provider::body::{CallObject, Field, Fields, Seq};
use crate::provider::ModelCall;
use crate::tool::ToolDecl;

/// The top-level keys of [`super::encode_body`].
pub(crate) fn fields<'a>(call: &ModelCall<'a>) -> Fields<'a, Part<'a>> {
    let mut f = Vec::with_capacity(6 + call.params.len());
    f.push(("model", Field::Str(call.model)));
    f.push(("max_tokens", Field::U32(call.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS))));
    if let Some(system) = call.system.filter(|s| !s.is_empty()) {
        f.push(("system", Field::Str(system)));
    }
    f.push(("messages", Field::Part(Part::Messages(call.messages))));
    if !call.tools.is_empty() {
        f.push(("tools", Field::Part(Part::Tools(call.tools))));
    }
    if call.stream {
        f.push(("stream", Field::True));
    }
    if let Some(o) = call.output {
        f.push(("output_config", Field::Output(crate::output::wire::View::AnthropicOutputConfig(o))));
    }
    f
}

/// The conversation's keys.
pub(crate) enum Part<'a> {
    Messages(&'a [Message]),
    Tools(&'a [ToolDecl]),
}

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Part::Messages(messages) => {
                s.collect_seq(messages.iter().filter(|m| m.content.iter().any(keeps_block)).map(MessageView))
            }
            Part::Tools(tools) => s.collect_seq(tools.iter().map(|t| ToolView {
                description: &t.description,
                input_schema: &t.input_schema,
                name: &t.name,
            })),
        }
    }
}

/// `{content, role}` of a message that keeps at least one block.
struct MessageView<'a>(&'a Message);

impl Serialize for MessageView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let blocks = &self.0.content;
        let mut map = s.serialize_map(Some(2))?;
        match self.0.role {
            Role::User => {
                // Tool results first, the rest in order (as `encode_message` does).
                let is_result = |b: &&Block| matches!(b, Block::ToolResult(_));
                let results = blocks.iter().filter(is_result);
                let others = blocks.iter().filter(move |b| !is_result(b));
                map.serialize_entry("content", &Seq(results.chain(others).filter(|b| keeps_block(b)).map(BlockView)))?;
                map.serialize_entry("role", "user")?;
            }
            Role::Assistant => {
                map.serialize_entry("content", &Seq(blocks.iter().filter(|b| keeps_block(b)).map(BlockView)))?;
                map.serialize_entry("role", "assistant")?;
            }
        }
        map.end()
    }
}

/// One block that [`keeps_block`] keeps.
struct BlockView<'a>(&'a Block);

impl Serialize for BlockView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Block::Text { text, provider_data } => match opaque_block(provider_data.as_ref()) {
                Some(raw) => raw.serialize(s),
                None => Text { text, kind: "text" }.serialize(s),
            },
            Block::Reasoning { text, signature, redacted, .. } => match redacted {
                Some(data) => Redacted { data, kind: "redacted_thinking" }.serialize(s),
                None => {
                    Thinking { signature: signature.as_deref().unwrap_or_default(), thinking: text, kind: "thinking" }
                        .serialize(s)
                }
            },
            Block::Image { media_type, source } => image(media_type, source).serialize(s),
            Block::ToolCall(call) => tool_use(call).serialize(s),
            Block::ToolResult(result) => tool_result(result).serialize(s),
        }
    }
}

#[derive(DeriveSerialize)]
struct Text<'a> {
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(DeriveSerialize)]
struct Redacted<'a> {
    data: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(DeriveSerialize)]
struct Thinking<'a> {
    signature: &'a str,
    thinking: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(DeriveSerialize)]
struct Image<'a> {
    source: Source<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(DeriveSerialize)]
#[serde(untagged)]
enum Source<'a> {
    Base64 {
        data: &'a str,
        media_type: &'a str,
        #[serde(rename = "type")]
        kind: &'static str,
    },
    Url {
        #[serde(rename = "type")]
        kind: &'static str,
        url: &'a str,
    },
}

fn image<'a>(media_type: &'a str, source: &'a ImageSource) -> Image<'a> {
    let base64 = |media_type, data| Source::Base64 { data, media_type, kind: "base64" };
    let source = match source {
        ImageSource::Base64 { data } => base64(media_type, data),
        ImageSource::Url { url } => match inline_image(media_type, url) {
            Some((media_type, data)) => base64(media_type, data),
            None => Source::Url { kind: "url", url },
        },
    };
    Image { source, kind: "image" }
}

/// `tool_use`, with the extras of `TOOL_USE_EXTRAS` in their key places.
#[derive(DeriveSerialize)]
struct ToolUse<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    caller: Option<&'a Value>,
    id: &'a str,
    input: CallObject<'a>,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    toolset_name: Option<&'a Value>,
    #[serde(rename = "type")]
    kind: &'static str,
}

fn tool_use(call: &ToolCall) -> ToolUse<'_> {
    ToolUse {
        caller: tool_use_extra(call, "caller"),
        id: &call.id,
        input: call_object(call),
        name: &call.name,
        toolset_name: tool_use_extra(call, "toolset_name"),
        kind: "tool_use",
    }
}

#[derive(DeriveSerialize)]
struct ToolResult<'a> {
    content: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    is_error: Option<bool>,
    tool_use_id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

fn tool_result(result: &ToolResultBlock) -> ToolResult<'_> {
    ToolResult {
        content: result_content(result),
        is_error: result.is_error.then_some(true),
        tool_use_id: &result.call_id,
        kind: "tool_result",
    }
}

#[derive(DeriveSerialize)]
struct ToolView<'a> {
    description: &'a str,
    input_schema: &'a Value,
    name: &'a str,
}

/// The `tools` part alone (what [`crate::tool::ToolSet`] keeps per style).
pub(crate) fn tools_part(tools: &[ToolDecl]) -> Part<'_> {
    Part::Tools(tools)
}

#[cfg(test)]
mod tests {
    use super::super::TOOL_USE_EXTRAS;

    #[test]
    fn the_view_writes_every_tool_use_extra() {
        // `ToolUse` names the extras as fields; a new one needs a field there too.
        assert_eq!(TOOL_USE_EXTRAS, ["caller", "toolset_name"]);
    }
}
