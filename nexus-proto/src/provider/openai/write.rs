//! The Chat Completions request body written straight to bytes: the same
//! bytes as `serde_json::to_vec(&encode_body(call))`, from borrowed views (see
//! [`crate::provider::body`]). Every rule lives in the encoder of
//! [`super`]; this file only mirrors its shapes, with each struct's fields in
//! key order.

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde::Serialize as DeriveSerialize;
use serde_json::Value;

use super::{arguments_from_input, is_refusal};
use crate::message::{Block, ImageSource, Message, Role, ToolCall};
use crate::provider::body::{Field, Fields, Joined, Seq, TextPart};
use crate::provider::ModelCall;
use crate::tool::ToolDecl;

/// The top-level keys of [`super::encode_body`].
pub(crate) fn fields<'a>(call: &ModelCall<'a>) -> Fields<'a, Part<'a>> {
    let mut f = Vec::with_capacity(6 + call.params.len());
    f.push(("model", Field::Str(call.model)));
    f.push(("messages", Field::Part(Part::Messages { system: call.system, messages: call.messages })));
    if !call.tools.is_empty() {
        f.push(("tools", Field::Part(Part::Tools(call.tools))));
    }
    if call.stream {
        f.push(("stream", Field::True));
        f.push(("stream_options", Field::Owned(serde_json::json!({ "include_usage": true }))));
    }
    if let Some(max) = call.max_tokens {
        f.push(("max_completion_tokens", Field::U32(max)));
    }
    if let Some(o) = call.output {
        f.push(("response_format", Field::Output(crate::output::wire::View::ChatResponseFormat(o))));
    }
    f
}

/// The conversation's keys.
pub(crate) enum Part<'a> {
    Messages { system: Option<&'a str>, messages: &'a [Message] },
    Tools(&'a [ToolDecl]),
}

impl Serialize for Part<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Part::Messages { system, messages } => {
                let mut seq = s.serialize_seq(None)?;
                if let Some(system) = system.filter(|s| !s.is_empty()) {
                    seq.serialize_element(&Plain { content: system, role: "system" })?;
                }
                for message in messages {
                    match message.role {
                        Role::User => {
                            for block in &message.content {
                                if let Block::ToolResult(r) = block {
                                    let m = ToolMessage { content: &r.output, role: "tool", tool_call_id: &r.call_id };
                                    seq.serialize_element(&m)?;
                                }
                            }
                            if let Some(user) = UserView::of(message) {
                                seq.serialize_element(&user)?;
                            }
                        }
                        Role::Assistant => seq.serialize_element(&AssistantView(message))?,
                    }
                }
                seq.end()
            }
            Part::Tools(tools) => s.collect_seq(tools.iter().map(|t| ToolView {
                function: FunctionDecl { description: &t.description, name: &t.name, parameters: &t.input_schema },
                kind: "function",
            })),
        }
    }
}

#[derive(DeriveSerialize)]
struct Plain<'a> {
    content: &'a str,
    role: &'static str,
}

#[derive(DeriveSerialize)]
struct ToolMessage<'a> {
    content: &'a str,
    role: &'static str,
    tool_call_id: &'a str,
}

/// The user message of a user turn (after its tool results), as `encode_user` builds it.
struct UserView<'a> {
    blocks: &'a [Block],
    /// How many text and image blocks the turn holds.
    others: usize,
}

impl<'a> UserView<'a> {
    /// `None` when the turn holds tool results and nothing else to send.
    fn of(message: &'a Message) -> Option<UserView<'a>> {
        let others = message.content.iter().filter(|b| is_user_part(b)).count();
        let had_results = message.content.iter().any(|b| matches!(b, Block::ToolResult(_)));
        (others > 0 || !had_results).then_some(UserView { blocks: &message.content, others })
    }
}

fn is_user_part(block: &Block) -> bool {
    matches!(block, Block::Text { .. } | Block::Image { .. })
}

impl Serialize for UserView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(2))?;
        let parts = self.blocks.iter().filter(|b| is_user_part(b));
        match (self.others, parts.clone().next()) {
            (0, _) => map.serialize_entry("content", "")?,
            (1, Some(Block::Text { text, .. })) => map.serialize_entry("content", text)?,
            _ => map.serialize_entry("content", &Seq(parts.map(UserPart)))?,
        }
        map.serialize_entry("role", "user")?;
        map.end()
    }
}

/// `{type:"text"}` or `{type:"image_url"}`.
struct UserPart<'a>(&'a Block);

impl Serialize for UserPart<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Block::Image { media_type, source } => {
                let url = ImageUrl { url: DataUrl { media_type, source } };
                ImagePart { image_url: url, kind: "image_url" }.serialize(s)
            }
            Block::Text { text, .. } => TextPart { text, kind: "text" }.serialize(s),
            // Never reached: only text and image blocks are user parts.
            _ => s.serialize_none(),
        }
    }
}

#[derive(DeriveSerialize)]
struct ImagePart<'a> {
    image_url: ImageUrl<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(DeriveSerialize)]
struct ImageUrl<'a> {
    url: DataUrl<'a>,
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

/// `{content, refusal?, role, tool_calls?}`, as `encode_assistant` builds it.
struct AssistantView<'a>(&'a Message);

impl Serialize for AssistantView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let blocks = &self.0.content;
        let texts = |refusal: bool| {
            blocks.iter().filter_map(move |b| match b {
                Block::Text { text, provider_data } if is_refusal(provider_data.as_ref()) == refusal => {
                    Some(text.as_str())
                }
                _ => None,
            })
        };
        let calls = blocks.iter().filter_map(|b| match b {
            Block::ToolCall(call) => Some(call),
            _ => None,
        });
        let has_text = texts(false).next().is_some();
        let has_refusal = texts(true).next().is_some();
        let has_calls = calls.clone().next().is_some();
        let mut map = s.serialize_map(None)?;
        if has_text {
            map.serialize_entry("content", &Joined(texts(false)))?;
        } else if has_calls || has_refusal {
            map.serialize_entry("content", &())?;
        } else {
            map.serialize_entry("content", "")?;
        }
        if has_refusal {
            map.serialize_entry("refusal", &Joined(texts(true)))?;
        }
        map.serialize_entry("role", "assistant")?;
        if has_calls {
            map.serialize_entry("tool_calls", &Seq(calls.map(tool_call)))?;
        }
        map.end()
    }
}

#[derive(DeriveSerialize)]
struct ToolCallView<'a> {
    function: FunctionCall<'a>,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(DeriveSerialize)]
struct FunctionCall<'a> {
    arguments: Arguments<'a>,
    name: &'a str,
}

fn tool_call(call: &ToolCall) -> ToolCallView<'_> {
    ToolCallView {
        function: FunctionCall { arguments: Arguments(call), name: &call.name },
        id: &call.id,
        kind: "function",
    }
}

/// The argument text, or (for a call built with only `input`) the compact
/// JSON of `input`, which `Value`'s `Display` writes without a `String`.
struct Arguments<'a>(&'a ToolCall);

impl Serialize for Arguments<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let call = self.0;
        if arguments_from_input(call) {
            s.collect_str(&call.input)
        } else {
            s.serialize_str(&call.arguments)
        }
    }
}

#[derive(DeriveSerialize)]
struct ToolView<'a> {
    function: FunctionDecl<'a>,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(DeriveSerialize)]
struct FunctionDecl<'a> {
    description: &'a str,
    name: &'a str,
    parameters: &'a Value,
}

/// The `tools` part alone (what [`crate::tool::ToolSet`] keeps per style).
pub(crate) fn tools_part(tools: &[ToolDecl]) -> Part<'_> {
    Part::Tools(tools)
}
