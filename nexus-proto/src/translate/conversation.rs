//! The conversation half of a request: `tools` and `messages` read into
//! [`ToolDecl`]s and the neutral transcript, with the rules of the
//! translation (see the table in [`super::request`]).

use std::collections::HashMap;
use std::fmt;

use serde_json::{json, Map, Value};

use super::request::{opt_bool, opt_str, unknown};
use super::{Field, Item, TranslateError};
use crate::message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock};
use crate::provider::Style;
use crate::tool::{sanitize_name, ToolDecl};

/// Gemini 3 refuses a function-call turn sent back without the thought
/// signature it issued, and an OpenAI client has nowhere to keep one. Google
/// documents this value for calls whose signature is not available (history
/// built elsewhere); it goes on the first call of each model turn, where
/// Gemini puts its own.
pub(super) const GEMINI_SKIP_SIGNATURE: &str = "skip_thought_signature_validator";

// ---------------------------------------------------------------- tools

/// The declared tools, and which of them asked for `strict`. The tools are
/// taken, not borrowed: each schema, name and description moves into its
/// declaration instead of being copied.
pub(super) fn read_tools(style: Style, tools: Option<Value>) -> Result<(Vec<ToolDecl>, Vec<bool>), TranslateError> {
    let items = match tools {
        None | Some(Value::Null) => return Ok((Vec::new(), Vec::new())),
        Some(Value::Array(items)) => items,
        Some(_) => return Err(TranslateError::invalid("tools", "`tools` must be an array")),
    };
    let mut decls: Vec<ToolDecl> = Vec::with_capacity(items.len());
    let mut strict = Vec::with_capacity(items.len());
    for (i, tool) in items.into_iter().enumerate() {
        let at = Item("tools", i);
        let kind = tool.get("type").and_then(Value::as_str);
        if kind != Some("function") {
            return Err(TranslateError::unsupported(
                format!("{at}.type"),
                style,
                format!("only `function` tools can be translated, not {kind:?}"),
            ));
        }
        let function = if let Value::Object(mut tool) = tool { tool.remove("function") } else { None };
        let Some(Value::Object(mut f)) = function else {
            return Err(TranslateError::invalid(format!("{at}.function"), "a function object is required"));
        };
        let name = match f.remove("name") {
            Some(Value::String(name)) => name,
            _ => String::new(),
        };
        check_tool_name(style, &name, Field(at, "function.name"))?;
        if decls.iter().any(|d| d.name == name) {
            return Err(TranslateError::invalid(
                format!("{at}.function.name"),
                format!("tool name {name:?} is declared twice"),
            ));
        }
        let description = match f.remove("description") {
            Some(Value::String(description)) => description,
            other => {
                opt_str(other.as_ref(), Field(at, "function.description"))?;
                String::new()
            }
        };
        let schema = match f.remove("parameters") {
            None | Some(Value::Null) => Value::Null,
            Some(v @ Value::Object(_)) => v,
            Some(_) => {
                return Err(TranslateError::invalid(
                    format!("{at}.function.parameters"),
                    "must be a JSON schema object",
                ))
            }
        };
        strict.push(opt_bool(f.get("strict"), Field(at, "function.strict"))?.unwrap_or(false));
        decls.push(ToolDecl::new(&name, description, schema));
    }
    Ok((decls, strict))
}

/// Names are checked, not sanitized: a renamed tool would come back to the
/// caller under a name it never declared.
pub(super) fn check_tool_name(style: Style, name: &str, param: impl fmt::Display) -> Result<(), TranslateError> {
    if name.is_empty() || name.len() > 64 || sanitize_name(name) != name {
        return Err(TranslateError::invalid(
            param.to_string(),
            format!("tool name {name:?} must match ^[a-zA-Z0-9_-]{{1,64}}$"),
        ));
    }
    if style == Style::Gemini && !name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return Err(TranslateError::unsupported(
            param.to_string(),
            style,
            "function names must start with a letter or `_` there",
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------- messages

/// Keys each role may carry (others that are not `null` are refused).
fn allowed_keys(role: &str) -> &'static [&'static str] {
    match role {
        "system" | "developer" => &["role", "content"],
        "user" => &["role", "content"],
        "assistant" => &["role", "content", "refusal", "tool_calls", "annotations", "reasoning_content", "reasoning"],
        "tool" => &["role", "content", "tool_call_id"],
        _ => &[],
    }
}

/// The conversation: the hoisted system prompt and the neutral transcript.
/// Both Chat readers (this module's tree reader and the borrowed one in
/// [`super::chat_borrowed`]) build it with the same calls.
#[derive(Default)]
pub(super) struct Transcript {
    pub(super) system: Vec<String>,
    pub(super) messages: Vec<Message>,
    /// Call id → tool name, for results (Gemini matches results by name).
    pub(super) names: HashMap<String, String>,
}

impl Transcript {
    /// Adds blocks to the conversation; consecutive messages of one role
    /// form one turn (so a run of `tool` messages is one user turn of results).
    pub(super) fn push(&mut self, role: Role, blocks: Vec<Block>) {
        match self.messages.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => self.messages.push(Message { role, content: blocks }),
        }
    }

    /// The `j`th tool call of an assistant message as its block, its name
    /// kept for the results that answer it. On Gemini the first call of a
    /// turn carries the documented placeholder signature.
    pub(super) fn call(&mut self, style: Style, j: usize, mut call: ToolCall) -> Block {
        if style == Style::Gemini && j == 0 {
            call.provider_data = Some(json!({ "gemini": { "thoughtSignature": GEMINI_SKIP_SIGNATURE } }));
        }
        self.names.insert(call.id.clone(), call.name.clone());
        Block::ToolCall(call)
    }

    /// The system prompts joined by a blank line (`None` without any), and the messages.
    pub(super) fn finish(self) -> (Option<String>, Vec<Message>) {
        ((!self.system.is_empty()).then(|| self.system.join("\n\n")), self.messages)
    }
}

/// A call's argument text and the input it parses to: none is `{}`, text
/// that is only whitespace is kept as sent and reads as an empty object.
/// The caller refuses an input that is not an object.
pub(super) fn call_arguments(raw: Option<String>) -> Result<(String, Value), serde_json::Error> {
    match raw {
        None => Ok(("{}".to_string(), Value::Object(Map::new()))),
        Some(raw) if raw.trim().is_empty() => Ok((raw, Value::Object(Map::new()))),
        Some(raw) => serde_json::from_str(&raw).map(|input| (raw, input)),
    }
}

pub(super) fn read_messages(
    style: Style,
    messages: Option<&Value>,
) -> Result<(Option<String>, Vec<Message>), TranslateError> {
    let items = match messages {
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(Value::Array(_)) => return Err(TranslateError::invalid("messages", "`messages` must not be empty")),
        _ => return Err(TranslateError::invalid("messages", "`messages` must be an array")),
    };
    let mut t = Transcript::default();
    for (i, m) in items.iter().enumerate() {
        let at = Item("messages", i);
        let obj =
            m.as_object().ok_or_else(|| TranslateError::invalid(at.to_string(), "a message must be an object"))?;
        let role = obj.get("role").and_then(Value::as_str).unwrap_or_default();
        let allowed = allowed_keys(role);
        if allowed.is_empty() {
            let why = if role == "function" { "the legacy `function` role" } else { "an unknown role" };
            return Err(TranslateError::invalid(
                format!("{at}.role"),
                format!("{role:?} is {why}; use `tool` messages"),
            ));
        }
        for (key, value) in obj {
            if !value.is_null() && !allowed.contains(&key.as_str()) {
                return Err(if matches!(key.as_str(), "name" | "audio" | "function_call") {
                    TranslateError::unsupported(format!("{at}.{key}"), style, "the upstream message has no such field")
                } else {
                    unknown(&format!("{at}.{key}"))
                });
            }
        }
        let content = obj.get("content").unwrap_or(&Value::Null);
        match role {
            "system" | "developer" => {
                let text = text_only(content, Field(at, "content"), style)?;
                if !text.is_empty() {
                    t.system.push(text);
                }
            }
            "user" => {
                let blocks = user_content(style, content, Field(at, "content"))?;
                if blocks.iter().all(|b| matches!(b, Block::Text { text, .. } if text.is_empty())) {
                    return Err(TranslateError::unsupported(
                        format!("{at}.content"),
                        style,
                        "a user message must not be empty",
                    ));
                }
                t.push(Role::User, blocks);
            }
            "assistant" => {
                let blocks = assistant_content(style, obj, at, &mut t)?;
                t.push(Role::Assistant, blocks);
            }
            _ => {
                let id =
                    obj.get("tool_call_id").and_then(Value::as_str).filter(|s| !s.is_empty()).ok_or_else(|| {
                        TranslateError::invalid(format!("{at}.tool_call_id"), "a tool message needs its tool_call_id")
                    })?;
                let name = t.names.get(id).cloned().ok_or_else(|| {
                    TranslateError::invalid(
                        format!("{at}.tool_call_id"),
                        format!("tool_call_id {id:?} answers no tool call of an earlier assistant message"),
                    )
                })?;
                let output = text_only(content, Field(at, "content"), style)?;
                let result = ToolResultBlock { call_id: id.to_string(), name, output, is_error: false };
                t.push(Role::User, vec![Block::ToolResult(result)]);
            }
        }
    }
    Ok(t.finish())
}

/// Content that may only be text: a string, `null`, or text parts (joined).
fn text_only(content: &Value, param: impl fmt::Display, style: Style) -> Result<String, TranslateError> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                match part_text(part) {
                    Some(t) => text.push_str(t),
                    None => {
                        return Err(TranslateError::unsupported(
                            format!("{param}[{j}]"),
                            style,
                            "only text parts can be carried here",
                        ))
                    }
                }
            }
            Ok(text)
        }
        _ => Err(TranslateError::invalid(param.to_string(), "content must be a string or an array of parts")),
    }
}

/// The text of a `{type:"text", text}` part.
fn part_text(part: &Value) -> Option<&str> {
    (part.get("type").and_then(Value::as_str) == Some("text")).then(|| part.get("text").and_then(Value::as_str))?
}

fn user_content(style: Style, content: &Value, param: impl fmt::Display + Copy) -> Result<Vec<Block>, TranslateError> {
    match content {
        Value::String(s) => Ok(vec![Block::text(s.as_str())]),
        Value::Array(parts) => {
            let mut blocks = Vec::with_capacity(parts.len());
            for (j, part) in parts.iter().enumerate() {
                let at = Item(param, j);
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = part_text(part)
                            .ok_or_else(|| TranslateError::invalid(format!("{at}.text"), "must be a string"))?;
                        blocks.push(Block::text(text));
                    }
                    Some("image_url") => {
                        let url = part.pointer("/image_url/url").and_then(Value::as_str).ok_or_else(|| {
                            TranslateError::invalid(format!("{at}.image_url.url"), "an image URL is required")
                        })?;
                        blocks.push(image_block(style, url, Field(at, "image_url.url"))?);
                    }
                    other => {
                        return Err(TranslateError::unsupported(
                            at.to_string(),
                            style,
                            format!("content part type {other:?} has no counterpart (text and image_url do)"),
                        ))
                    }
                }
            }
            Ok(blocks)
        }
        _ => Err(TranslateError::invalid(param.to_string(), "user content must be a string or an array of parts")),
    }
}

/// An `image_url` as an image block: data URLs become inline base64, http(s)
/// URLs stay URLs.
pub(super) fn image_block(style: Style, url: &str, param: impl fmt::Display) -> Result<Block, TranslateError> {
    let is_data = url.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("data:"));
    if is_data {
        let (head, data) = url
            .get(5..)
            .and_then(|rest| rest.split_once(','))
            .ok_or_else(|| TranslateError::invalid(param.to_string(), "a data URL needs a `,` before its data"))?;
        let mut params = head.split(';');
        let media_type = params.next().unwrap_or_default().trim().to_ascii_lowercase();
        if !params.any(|p| p.trim().eq_ignore_ascii_case("base64")) || !media_type.starts_with("image/") {
            return Err(TranslateError::invalid(
                param.to_string(),
                "image data URLs must be `data:image/<type>;base64,<data>`",
            ));
        }
        if style == Style::Anthropic && !ANTHROPIC_IMAGE_TYPES.contains(&media_type.as_str()) {
            return Err(TranslateError::unsupported(
                param.to_string(),
                style,
                format!("{media_type} images are not accepted (jpeg, png, gif, webp are)"),
            ));
        }
        return Ok(Block::Image { media_type, source: ImageSource::Base64 { data: data.to_string() } });
    }
    let scheme_ok =
        ["http://", "https://"].iter().any(|s| url.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s)));
    if !scheme_ok {
        return Err(TranslateError::invalid(param.to_string(), "an image URL must be http(s) or a base64 data URL"));
    }
    let media_type = match (guess_image_type(url), style) {
        (Some(t), _) => t,
        // The URL source there has no media type field: the fetch tells.
        (None, Style::Anthropic) => "image/jpeg",
        (None, _) => {
            return Err(TranslateError::unsupported(
                param.to_string(),
                style,
                "an image URL must end in .png, .jpg, .jpeg, .gif, .webp, .heic or .heif (the type is required); send others as data URLs",
            ))
        }
    };
    Ok(Block::Image { media_type: media_type.to_string(), source: ImageSource::Url { url: url.to_string() } })
}

const ANTHROPIC_IMAGE_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];

/// The media type of an image URL from its path's extension.
fn guess_image_type(url: &str) -> Option<&'static str> {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let ext = path.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase())?;
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "heif" => "image/heif",
        _ => return None,
    })
}

fn assistant_content(
    style: Style,
    obj: &Map<String, Value>,
    at: impl fmt::Display + Copy,
    t: &mut Transcript,
) -> Result<Vec<Block>, TranslateError> {
    let mut blocks = Vec::new();
    match obj.get("content").unwrap_or(&Value::Null) {
        Value::Null => {}
        Value::String(s) => blocks.push(Block::text(s.as_str())),
        Value::Array(parts) => {
            for (j, part) in parts.iter().enumerate() {
                let text = match part.get("type").and_then(Value::as_str) {
                    Some("text") => part.get("text").and_then(Value::as_str),
                    // A refusal the model gave earlier is what it said.
                    Some("refusal") => part.get("refusal").and_then(Value::as_str),
                    _ => None,
                };
                let text = text.ok_or_else(|| {
                    TranslateError::unsupported(
                        format!("{at}.content[{j}]"),
                        style,
                        "assistant parts are text or refusal",
                    )
                })?;
                blocks.push(Block::text(text));
            }
        }
        _ => {
            return Err(TranslateError::invalid(format!("{at}.content"), "content must be a string, an array or null"))
        }
    }
    if let Some(refusal) = opt_str(obj.get("refusal"), Field(at, "refusal"))? {
        blocks.push(Block::text(refusal));
    }
    if let Some(annotations) = obj.get("annotations").filter(|v| !v.is_null()) {
        if !annotations.is_array() {
            return Err(TranslateError::invalid(format!("{at}.annotations"), "must be an array"));
        }
    }
    let calls = match obj.get("tool_calls") {
        None | Some(Value::Null) => return Ok(blocks),
        Some(Value::Array(calls)) => calls,
        Some(_) => return Err(TranslateError::invalid(format!("{at}.tool_calls"), "must be an array")),
    };
    for (j, call) in calls.iter().enumerate() {
        let call = tool_call(style, call, Item(Field(at, "tool_calls"), j))?;
        blocks.push(t.call(style, j, call));
    }
    Ok(blocks)
}

/// One assistant tool call. The argument text is kept exactly as the caller
/// sent it; arguments given as an object are accepted and written as JSON.
fn tool_call(style: Style, call: &Value, at: impl fmt::Display + Copy) -> Result<ToolCall, TranslateError> {
    let obj =
        call.as_object().ok_or_else(|| TranslateError::invalid(at.to_string(), "a tool call must be an object"))?;
    match obj.get("type").and_then(Value::as_str) {
        None | Some("function") => {}
        Some(other) => {
            return Err(TranslateError::unsupported(
                format!("{at}.type"),
                style,
                format!("{other:?} tool calls have no counterpart"),
            ))
        }
    }
    let id = obj
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| TranslateError::invalid(format!("{at}.id"), "a tool call needs an id"))?;
    let function = obj
        .get("function")
        .and_then(Value::as_object)
        .ok_or_else(|| TranslateError::invalid(format!("{at}.function"), "a function object is required"))?;
    let name = function
        .get("name")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| TranslateError::invalid(format!("{at}.function.name"), "a function name is required"))?;
    let param = Field(at, "function.arguments");
    let not_json = |e| TranslateError::invalid(param.to_string(), format!("the arguments are not valid JSON ({e})"));
    let (arguments, input) = match function.get("arguments") {
        None | Some(Value::Null) => call_arguments(None).map_err(not_json)?,
        Some(Value::String(raw)) => call_arguments(Some(raw.clone())).map_err(not_json)?,
        Some(v @ Value::Object(_)) => (v.to_string(), v.clone()),
        Some(_) => {
            return Err(TranslateError::invalid(param.to_string(), "arguments must be a JSON string or an object"))
        }
    };
    if !input.is_object() {
        return Err(TranslateError::unsupported(
            param.to_string(),
            style,
            "tool arguments must be a JSON object there",
        ));
    }
    Ok(ToolCall { id: id.to_string(), name: name.to_string(), input, arguments, provider_data: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_types_come_from_the_path_not_the_query() {
        assert_eq!(guess_image_type("https://x.test/a.PNG?sig=1.jpg"), Some("image/png"));
        assert_eq!(guess_image_type("https://x.test/a.jpeg#frag"), Some("image/jpeg"));
        assert_eq!(guess_image_type("https://x.test/image"), None);
    }
}
