//! The Anthropic Messages surface's decoder: a `POST /v1/messages` body →
//! the neutral request, for any upstream (the field rules are tabled in SPEC.md).
//!
//! Decoding is lenient: a field this side does not know is never a reason to
//! refuse, because real clients send shapes newer than any type list
//! (adaptive thinking, `context_management`, system-role messages inside
//! `messages`). What changes the answer's meaning and has no counterpart
//! upstream is refused with a 400 naming it; advisory fields and hosted tools
//! are left out and named in [`SurfaceRequest::dropped`].

use std::collections::HashMap;
use std::fmt;

use serde_json::{Map, Value};

use super::conversation::{check_tool_name, image_block};
use super::request::{gemini_model, number, opt_bool, Choice, Format, Neutral, Settings};
use super::surface::{finish_request, Dropped, SurfaceRequest};
use super::{Field, Item, TranslateError, TranslatedRequest};
use crate::message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock};
use crate::provider::Style;
use crate::tool::ToolDecl;

/// Translates an Anthropic Messages request body for an upstream of `style`.
///
/// For [`Style::Anthropic`] the body passes through untouched (thinking
/// signatures, cache hints and betas included); only `model` and `stream`
/// are read. `beta_headers` are the request's `anthropic-beta` values: an
/// Anthropic upstream gets them, any other reports them dropped.
pub fn anthropic_request_to(
    style: Style,
    body: &[u8],
    beta_headers: &[&str],
) -> Result<SurfaceRequest, TranslateError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid_json(format!("The request body is not valid JSON: {e}")))?;
    let obj =
        value.as_object().ok_or_else(|| TranslateError::not_an_object("the request body must be a JSON object"))?;
    let model = match obj.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(TranslateError::invalid("model", "model: Field required")),
    };
    let stream = opt_bool(obj.get("stream"), "stream")?.unwrap_or(false);
    if style == Style::Anthropic {
        let upstream = TranslatedRequest { style, model, stream, include_usage: true, body: body.to_vec() };
        return Ok(SurfaceRequest { upstream, dropped: Vec::new() });
    }
    let mut dropped = Dropped::default();
    for beta in beta_headers.iter().flat_map(|h| h.split(',')).map(str::trim).filter(|b| !b.is_empty()) {
        dropped.add(format!("anthropic-beta: {beta}"));
    }
    let mut d = Decoder { style, dropped, names: HashMap::new() };
    let mut n = Neutral { settings: d.settings(obj, model, stream)?, ..Neutral::default() };
    if n.settings.model.is_empty() {
        return Err(TranslateError::invalid("model", "model: Field required"));
    }
    let (tools, strict) = d.tools(obj.get("tools"))?;
    n.tools = tools;
    n.strict = strict;
    let mut system = match obj.get("system") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => vec![d.system_text(v, "system")?],
    };
    n.messages = d.messages(obj.get("messages"), &mut system)?;
    system.retain(|s| !s.is_empty());
    n.system = (!system.is_empty()).then(|| system.join("\n\n"));
    if let Some(Choice::Named(name)) = &n.settings.choice {
        if !n.tools.iter().any(|t| &t.name == name) {
            return Err(TranslateError::invalid("tool_choice.name", format!("tool {name:?} is not in `tools`")));
        }
    }
    finish_request(style, n, d.dropped)
}

struct Decoder {
    style: Style,
    dropped: Dropped,
    /// Call id → tool name, for results.
    names: HashMap<String, String>,
}

impl Decoder {
    fn settings(&mut self, obj: &Map<String, Value>, model: String, stream: bool) -> Result<Settings, TranslateError> {
        let style = self.style;
        let mut s = Settings { model, stream, include_usage: true, ..Settings::default() };
        if style == Style::Gemini {
            s.model = gemini_model(&s.model)?;
        }
        for (key, value) in obj {
            let k = key.as_str();
            if value.is_null() {
                continue;
            }
            match k {
                "model" | "stream" | "messages" | "system" | "tools" => {}
                "max_tokens" => {
                    let n = value
                        .as_u64()
                        .filter(|n| *n >= 1)
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| TranslateError::invalid(k, "max_tokens: must be a positive integer"))?;
                    s.max_tokens = Some(n);
                }
                "temperature" => s.temperature = Some(number(value, k)?),
                "top_p" => s.top_p = Some(number(value, k)?),
                "top_k" if matches!(style, Style::OpenAi | Style::OpenAiResponses) => self.dropped.add(k),
                "top_k" => s.top_k = Some(number(value, k)?),
                "stop_sequences" => {
                    let items = value.as_array().ok_or_else(|| TranslateError::invalid(k, "must be an array"))?;
                    for (i, v) in items.iter().enumerate() {
                        let stop = v
                            .as_str()
                            .ok_or_else(|| TranslateError::invalid(format!("{k}[{i}]"), "must be a string"))?;
                        s.stop.push(stop.to_string());
                    }
                }
                "tool_choice" => self.tool_choice(value, &mut s)?,
                "thinking" => match value.get("type").and_then(Value::as_str) {
                    Some("enabled") => {
                        let budget = value.get("budget_tokens").and_then(Value::as_u64).ok_or_else(|| {
                            TranslateError::invalid("thinking.budget_tokens", "an integer budget is required")
                        })?;
                        if style == Style::Gemini {
                            s.thinking_budget = Some(u32::try_from(budget).unwrap_or(u32::MAX));
                        } else {
                            // Chat Completions takes no budget: reasoning models reason anyway.
                            self.dropped.add("thinking");
                        }
                    }
                    Some("disabled") => {}
                    // Adaptive (or any newer) thinking is the model's own call: a hint.
                    _ => self.dropped.add("thinking"),
                },
                "output_config" => self.output_config(value, &mut s)?,
                "metadata" => match value.get("user_id").and_then(Value::as_str) {
                    Some(user) if matches!(style, Style::OpenAi | Style::OpenAiResponses) => {
                        s.user = Some(("user", user.to_string()))
                    }
                    _ => self.dropped.add("metadata"),
                },
                "output_format" => s.format = Some(json_schema(value, k)?),
                "container" => {
                    return Err(TranslateError::unsupported(
                        k,
                        style,
                        "code-execution containers run only at Anthropic",
                    ))
                }
                // Advisory: service tiers, cache and context-management hints,
                // hosted MCP servers the upstream cannot reach, and anything newer.
                _ => self.dropped.add(k),
            }
        }
        Ok(s)
    }

    fn tool_choice(&mut self, value: &Value, s: &mut Settings) -> Result<(), TranslateError> {
        let kind = value.get("type").and_then(Value::as_str);
        s.choice = Some(match kind {
            Some("auto") => Choice::Auto,
            Some("any") => Choice::Required,
            Some("none") => Choice::None,
            Some("tool") => {
                let name = value
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| TranslateError::invalid("tool_choice.name", "a tool name is required"))?;
                Choice::Named(name.to_string())
            }
            _ => return Err(TranslateError::invalid("tool_choice.type", "must be auto, any, tool or none")),
        });
        if opt_bool(value.get("disable_parallel_tool_use"), "tool_choice.disable_parallel_tool_use")? == Some(true) {
            s.parallel = Some(false);
        }
        Ok(())
    }

    fn output_config(&mut self, value: &Value, s: &mut Settings) -> Result<(), TranslateError> {
        let Some(config) = value.as_object() else {
            return Err(TranslateError::invalid("output_config", "must be an object"));
        };
        for (k, v) in config {
            match k.as_str() {
                _ if v.is_null() => {}
                "format" => s.format = Some(json_schema(v, "output_config.format")?),
                // Effort is a hint: only the family that defined it takes it.
                "effort" => self.dropped.add("output_config.effort"),
                other => self.dropped.add(format!("output_config.{other}")),
            }
        }
        Ok(())
    }

    fn tools(&mut self, tools: Option<&Value>) -> Result<(Vec<ToolDecl>, Vec<bool>), TranslateError> {
        let items = match tools {
            None | Some(Value::Null) => return Ok((Vec::new(), Vec::new())),
            Some(Value::Array(items)) => items,
            Some(_) => return Err(TranslateError::invalid("tools", "`tools` must be an array")),
        };
        let (mut decls, mut strict) = (Vec::<ToolDecl>::new(), Vec::new());
        for (i, tool) in items.iter().enumerate() {
            let at = Item("tools", i);
            let kind = tool.get("type").and_then(Value::as_str);
            if !matches!(kind, None | Some("custom")) || tool.get("input_schema").is_none() {
                // A server tool (web search, code execution, …) runs at Anthropic only.
                self.dropped.add(format!("{at} ({})", kind.unwrap_or("no input_schema")));
                continue;
            }
            let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
            check_tool_name(self.style, name, Field(at, "name"))?;
            if decls.iter().any(|d| d.name == name) {
                return Err(TranslateError::invalid(format!("{at}.name"), format!("tool name {name:?} is not unique")));
            }
            if tool.get("cache_control").is_some_and(|c| !c.is_null()) {
                self.dropped.add("cache_control");
            }
            let description = tool.get("description").and_then(Value::as_str).unwrap_or_default();
            let schema = match tool.get("input_schema") {
                Some(v @ Value::Object(_)) => v.clone(),
                _ => return Err(TranslateError::invalid(format!("{at}.input_schema"), "must be a JSON schema object")),
            };
            strict.push(opt_bool(tool.get("strict"), Field(at, "strict"))?.unwrap_or(false));
            decls.push(ToolDecl::new(name, description, schema));
        }
        Ok((decls, strict))
    }

    /// A `system` value (string or text blocks) as text.
    fn system_text(&mut self, value: &Value, at: impl fmt::Display) -> Result<String, TranslateError> {
        match value {
            Value::String(s) => Ok(s.clone()),
            Value::Array(blocks) => {
                let mut text = Vec::new();
                for (j, b) in blocks.iter().enumerate() {
                    if b.get("cache_control").is_some_and(|c| !c.is_null()) {
                        self.dropped.add("cache_control");
                    }
                    match (b.get("type").and_then(Value::as_str), b.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => text.push(t.to_string()),
                        _ => {
                            return Err(TranslateError::invalid(
                                format!("{at}[{j}]"),
                                "system blocks must be text blocks",
                            ))
                        }
                    }
                }
                Ok(text.join("\n\n"))
            }
            _ => Err(TranslateError::invalid(at.to_string(), "must be a string or an array of text blocks")),
        }
    }

    fn messages(&mut self, messages: Option<&Value>, system: &mut Vec<String>) -> Result<Vec<Message>, TranslateError> {
        let items = match messages {
            Some(Value::Array(items)) if !items.is_empty() => items,
            Some(Value::Array(_)) => {
                return Err(TranslateError::invalid("messages", "at least one message is required"))
            }
            _ => return Err(TranslateError::invalid("messages", "messages: Field required")),
        };
        let mut out: Vec<Message> = Vec::with_capacity(items.len());
        for (i, m) in items.iter().enumerate() {
            let at = Item("messages", i);
            let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
            let content = m.get("content").unwrap_or(&Value::Null);
            let role = match role {
                "user" => Role::User,
                "assistant" => Role::Assistant,
                // Newer clients put system instructions inline; they join the system prompt.
                "system" | "developer" => {
                    system.push(self.system_text(content, Field(at, "content"))?);
                    continue;
                }
                other => {
                    return Err(TranslateError::invalid(format!("{at}.role"), format!("unknown role {other:?}")));
                }
            };
            let blocks = self.content(role, content, Field(at, "content"))?;
            if blocks.is_empty() {
                continue;
            }
            match out.last_mut() {
                Some(last) if last.role == role => last.content.extend(blocks),
                _ => out.push(Message { role, content: blocks }),
            }
        }
        Ok(out)
    }

    fn content(
        &mut self,
        role: Role,
        content: &Value,
        at: impl fmt::Display + Copy,
    ) -> Result<Vec<Block>, TranslateError> {
        let blocks = match content {
            Value::String(s) => return Ok(vec![Block::text(s.as_str())]),
            Value::Array(blocks) => blocks,
            _ => return Err(TranslateError::invalid(at.to_string(), "content must be a string or an array of blocks")),
        };
        let mut out = Vec::with_capacity(blocks.len());
        for (j, b) in blocks.iter().enumerate() {
            let at = Item(at, j);
            if b.get("cache_control").is_some_and(|c| !c.is_null()) {
                self.dropped.add("cache_control");
            }
            let kind = b.get("type").and_then(Value::as_str).unwrap_or_default();
            match (kind, role) {
                ("text", _) => {
                    let text = b
                        .get("text")
                        .and_then(Value::as_str)
                        .ok_or_else(|| TranslateError::invalid(format!("{at}.text"), "must be a string"))?;
                    out.push(Block::text(text));
                }
                ("image", _) => out.push(self.image(b, at)?),
                ("tool_use", Role::Assistant) => {
                    let id = str_field(b, "id", at)?;
                    let name = str_field(b, "name", at)?;
                    let input = match b.get("input") {
                        Some(v @ Value::Object(_)) => v.clone(),
                        None | Some(Value::Null) => Value::Object(Map::new()),
                        Some(_) => return Err(TranslateError::invalid(format!("{at}.input"), "must be an object")),
                    };
                    self.names.insert(id.to_string(), name.to_string());
                    out.push(Block::ToolCall(ToolCall {
                        id: id.to_string(),
                        name: name.to_string(),
                        arguments: input.to_string(),
                        input,
                        provider_data: None,
                    }));
                }
                ("tool_result", Role::User) => {
                    let id = str_field(b, "tool_use_id", at)?;
                    let name = self.names.get(id).cloned().ok_or_else(|| {
                        TranslateError::invalid(
                            format!("{at}.tool_use_id"),
                            format!("tool_use_id {id:?} answers no tool_use block of an earlier assistant message"),
                        )
                    })?;
                    let output = self.result_text(b.get("content").unwrap_or(&Value::Null), Field(at, "content"))?;
                    let is_error = opt_bool(b.get("is_error"), Field(at, "is_error"))?.unwrap_or(false);
                    out.push(Block::ToolResult(ToolResultBlock { call_id: id.to_string(), name, output, is_error }));
                }
                // Signed reasoning only means something to the model that signed it.
                ("thinking" | "redacted_thinking", Role::Assistant) => self.dropped.add("thinking blocks"),
                // Server tools ran at Anthropic; another upstream has no record of them.
                ("server_tool_use" | "web_search_tool_result" | "web_fetch_tool_result", Role::Assistant) => {
                    self.dropped.add(format!("{kind} blocks"))
                }
                _ => {
                    return Err(TranslateError::unsupported(
                        at.to_string(),
                        self.style,
                        format!("{kind:?} blocks in a {} message have no counterpart", role_name(role)),
                    ))
                }
            }
        }
        Ok(out)
    }

    fn image(&mut self, b: &Value, at: impl fmt::Display + Copy) -> Result<Block, TranslateError> {
        let source = b.get("source").unwrap_or(&Value::Null);
        match source.get("type").and_then(Value::as_str) {
            Some("base64") => {
                let media_type = str_field(source, "media_type", Field(at, "source"))?;
                let data = str_field(source, "data", Field(at, "source"))?;
                Ok(Block::Image {
                    media_type: media_type.to_string(),
                    source: ImageSource::Base64 { data: data.to_string() },
                })
            }
            Some("url") => {
                let url = str_field(source, "url", Field(at, "source"))?;
                image_block(self.style, url, Field(at, "source.url"))
            }
            _ => Err(TranslateError::unsupported(
                format!("{at}.source.type"),
                self.style,
                "only base64 and url image sources can be carried",
            )),
        }
    }

    /// A tool result's content as text (text blocks joined; other blocks refused).
    fn result_text(&mut self, content: &Value, at: impl fmt::Display) -> Result<String, TranslateError> {
        match content {
            Value::Null => Ok(String::new()),
            Value::String(s) => Ok(s.clone()),
            Value::Array(blocks) => {
                let mut text = String::new();
                for (j, b) in blocks.iter().enumerate() {
                    match (b.get("type").and_then(Value::as_str), b.get("text").and_then(Value::as_str)) {
                        (Some("text"), Some(t)) => text.push_str(t),
                        (kind, _) => {
                            return Err(TranslateError::unsupported(
                                format!("{at}[{j}]"),
                                self.style,
                                format!("tool results carry text only there, not {kind:?} blocks"),
                            ))
                        }
                    }
                }
                Ok(text)
            }
            _ => Err(TranslateError::invalid(at.to_string(), "must be a string or an array of blocks")),
        }
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
    }
}

fn str_field<'a>(v: &'a Value, key: &str, at: impl fmt::Display) -> Result<&'a str, TranslateError> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| TranslateError::invalid(format!("{at}.{key}"), format!("{key}: Field required")))
}

/// `{type: "json_schema", schema}` as a response format.
fn json_schema(value: &Value, at: &str) -> Result<Format, TranslateError> {
    match (value.get("type").and_then(Value::as_str), value.get("schema")) {
        (Some("json_schema"), Some(schema @ Value::Object(_))) => Ok(Format::JsonSchema(schema.clone())),
        _ => Err(TranslateError::invalid(at, "must be {\"type\": \"json_schema\", \"schema\": {…}}")),
    }
}
