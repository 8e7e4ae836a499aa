//! The Gemini surface's decoder: a `generateContent` body (the model and the
//! streaming choice come from the URL) → the neutral request, for any upstream.
//!
//! Lenient like the other surface decoders: unknown fields are left out and
//! named in [`SurfaceRequest::dropped`]; both the documented camelCase and the
//! snake_case spelling the Google SDKs also send are read. Function calls
//! without an id get one here, and a `functionResponse` without an id answers
//! the first unanswered call of its name in the turn before.

use serde_json::{Map, Value};

use super::request::{gemini_model, number, Choice, Format, Neutral, Settings};
use super::surface::{finish_request, Dropped, SurfaceRequest};
use super::{TranslateError, TranslatedRequest};
use crate::message::{Block, ImageSource, Message, Role, ToolCall, ToolResultBlock};
use crate::provider::Style;
use crate::tool::ToolDecl;

/// Translates a Gemini request for `model` (from the URL; `stream` is
/// `:streamGenerateContent`) for an upstream of `style`. For [`Style::Gemini`]
/// the body passes through untouched (thought signatures included).
pub fn gemini_request_to(
    style: Style,
    model: &str,
    stream: bool,
    body: &[u8],
) -> Result<SurfaceRequest, TranslateError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid_json(format!("Invalid JSON payload received. {e}")))?;
    let obj = value
        .as_object()
        .ok_or_else(|| TranslateError::not_an_object("Invalid JSON payload received. The body must be an object."))?;
    let model = gemini_model(model)?;
    if style == Style::Gemini {
        let upstream = TranslatedRequest { style, model, stream, include_usage: true, body: body.to_vec() };
        return Ok(SurfaceRequest { upstream, dropped: Vec::new() });
    }
    let mut d = Decoder { style, dropped: Dropped::default(), allowed: Vec::new() };
    let mut n = Neutral {
        settings: Settings { model, stream, include_usage: true, ..Settings::default() },
        ..Neutral::default()
    };
    for (key, value) in obj {
        if value.is_null() {
            continue;
        }
        match key.as_str() {
            "contents" => {}
            "systemInstruction" | "system_instruction" => n.system = Some(d.system(value)?),
            "tools" => (n.tools, n.strict) = d.tools(value)?,
            "toolConfig" | "tool_config" => d.tool_config(value, &mut n.settings)?,
            "generationConfig" | "generation_config" => d.generation_config(value, &mut n.settings)?,
            "cachedContent" | "cached_content" => {
                return Err(TranslateError::unsupported(key, style, "cached content lives at Gemini only"))
            }
            // Safety settings, labels, model armor and anything newer are hints.
            other => d.dropped.add(other),
        }
    }
    n.messages = d.contents(obj.get("contents"))?;
    // Several allowed names force a call among them: only all of the
    // declared functions has a counterpart (`any` / `required`).
    if !d.allowed.is_empty() && !n.tools.iter().all(|t| d.allowed.contains(&t.name)) {
        return Err(TranslateError::unsupported(
            "toolConfig.functionCallingConfig.allowedFunctionNames",
            style,
            "a call can be forced to one named function or to any declared one, not to a subset",
        ));
    }
    if let Some(Choice::Named(name)) = &n.settings.choice {
        if !n.tools.iter().any(|t| &t.name == name) {
            return Err(TranslateError::invalid(
                "toolConfig.functionCallingConfig.allowedFunctionNames",
                format!("{name:?} is not a declared function"),
            ));
        }
    }
    finish_request(style, n, d.dropped)
}

struct Decoder {
    style: Style,
    dropped: Dropped,
    /// `allowedFunctionNames` of an ANY choice naming several functions.
    allowed: Vec<String>,
}

/// `obj[camel]`, else `obj[snake]`.
fn field<'a>(obj: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    obj.get(camel).or_else(|| obj.get(snake)).filter(|v| !v.is_null())
}

impl Decoder {
    fn system(&mut self, value: &Value) -> Result<String, TranslateError> {
        let parts = value
            .get("parts")
            .and_then(Value::as_array)
            .ok_or_else(|| TranslateError::invalid("systemInstruction.parts", "systemInstruction needs text parts"))?;
        let mut text = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let t = p.get("text").and_then(Value::as_str).ok_or_else(|| {
                TranslateError::unsupported(format!("systemInstruction.parts[{i}]"), self.style, "only text parts")
            })?;
            text.push(t);
        }
        Ok(text.join("\n\n"))
    }

    fn tools(&mut self, value: &Value) -> Result<(Vec<ToolDecl>, Vec<bool>), TranslateError> {
        let items = value.as_array().ok_or_else(|| TranslateError::invalid("tools", "must be an array"))?;
        let mut decls: Vec<ToolDecl> = Vec::new();
        for (i, tool) in items.iter().enumerate() {
            let Some(obj) = tool.as_object() else {
                return Err(TranslateError::invalid(format!("tools[{i}]"), "must be an object"));
            };
            for (key, v) in obj {
                if key != "functionDeclarations" && key != "function_declarations" {
                    // Google Search, code execution, URL context: they run at Google only.
                    if !v.is_null() {
                        self.dropped.add(format!("tools[{i}].{key}"));
                    }
                    continue;
                }
                let fns = v.as_array().ok_or_else(|| {
                    TranslateError::invalid(format!("tools[{i}].functionDeclarations"), "must be an array")
                })?;
                for (j, f) in fns.iter().enumerate() {
                    let at = super::Item(super::Field(super::Item("tools", i), "functionDeclarations"), j);
                    let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
                    super::conversation::check_tool_name(self.style, name, super::Field(at, "name"))?;
                    if decls.iter().any(|d| d.name == name) {
                        return Err(TranslateError::invalid(
                            format!("{at}.name"),
                            format!("{name:?} is declared twice"),
                        ));
                    }
                    let description = f.get("description").and_then(Value::as_str).unwrap_or_default();
                    let schema = match (
                        field(f, "parametersJsonSchema", "parameters_json_schema"),
                        f.get("parameters").filter(|v| !v.is_null()),
                    ) {
                        (Some(s), _) => s.clone(),
                        (None, Some(s)) => openapi_to_json_schema(s),
                        (None, None) => Value::Null,
                    };
                    if field(f, "response", "response").is_some() || field(f, "responseJsonSchema", "").is_some() {
                        self.dropped.add(format!("{at}.response"));
                    }
                    decls.push(ToolDecl::new(name, description, schema));
                }
            }
        }
        let strict = vec![false; decls.len()];
        Ok((decls, strict))
    }

    fn tool_config(&mut self, value: &Value, s: &mut Settings) -> Result<(), TranslateError> {
        let Some(config) = field(value, "functionCallingConfig", "function_calling_config") else {
            if value.as_object().is_some_and(|o| !o.is_empty()) {
                self.dropped.add("toolConfig.retrievalConfig");
            }
            return Ok(());
        };
        let names: Vec<&str> = field(config, "allowedFunctionNames", "allowed_function_names")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mode = config.get("mode").and_then(Value::as_str).unwrap_or("AUTO");
        s.choice = Some(match (mode, names.as_slice()) {
            ("ANY", [one]) => Choice::Named((*one).to_string()),
            ("ANY", []) => Choice::Required,
            // Checked against the declared tools once they are read.
            ("ANY", _) => {
                self.allowed = names.iter().map(|n| n.to_string()).collect();
                Choice::Required
            }
            ("NONE", _) => Choice::None,
            ("AUTO" | "VALIDATED" | "MODE_UNSPECIFIED", _) => Choice::Auto,
            (other, _) => {
                return Err(TranslateError::invalid(
                    "toolConfig.functionCallingConfig.mode",
                    format!("unknown mode {other:?}"),
                ))
            }
        });
        Ok(())
    }

    fn generation_config(&mut self, value: &Value, s: &mut Settings) -> Result<(), TranslateError> {
        let Some(config) = value.as_object() else {
            return Err(TranslateError::invalid("generationConfig", "must be an object"));
        };
        let style = self.style;
        let mut mime = None;
        for (key, v) in config {
            if v.is_null() {
                continue;
            }
            let at = format!("generationConfig.{key}");
            match key.as_str() {
                "temperature" => s.temperature = Some(number(v, &at)?),
                "topP" | "top_p" => s.top_p = Some(number(v, &at)?),
                "topK" | "top_k" if matches!(style, Style::OpenAi | Style::OpenAiResponses) => self.dropped.add(at),
                "topK" | "top_k" => s.top_k = Some(number(v, &at)?),
                "seed" if matches!(style, Style::Anthropic | Style::OpenAiResponses) => self.dropped.add(at),
                "seed" => s.seed = Some(number(v, &at)?),
                "presencePenalty" | "presence_penalty" | "frequencyPenalty" | "frequency_penalty"
                    if matches!(style, Style::Anthropic | Style::OpenAiResponses) =>
                {
                    if v.as_f64() != Some(0.0) {
                        return Err(TranslateError::unsupported(at, style, "the upstream API has no penalties"));
                    }
                }
                "presencePenalty" | "presence_penalty" => s.presence_penalty = Some(number(v, &at)?),
                "frequencyPenalty" | "frequency_penalty" => s.frequency_penalty = Some(number(v, &at)?),
                "maxOutputTokens" | "max_output_tokens" => {
                    let n = v
                        .as_u64()
                        .filter(|n| *n >= 1)
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or_else(|| TranslateError::invalid(&at, "must be a positive integer"))?;
                    s.max_tokens = Some(n);
                }
                "stopSequences" | "stop_sequences" => {
                    let items = v.as_array().ok_or_else(|| TranslateError::invalid(&at, "must be an array"))?;
                    s.stop = items.iter().filter_map(Value::as_str).map(str::to_string).collect();
                }
                "candidateCount" | "candidate_count" => {
                    if v.as_u64() != Some(1) {
                        return Err(TranslateError::unsupported(at, style, "one call returns one candidate"));
                    }
                }
                "responseMimeType" | "response_mime_type" => mime = v.as_str(),
                "responseJsonSchema" | "response_json_schema" | "_responseJsonSchema" => {
                    s.format = Some(Format::JsonSchema(v.clone()))
                }
                "responseSchema" | "response_schema" => s.format = Some(Format::JsonSchema(openapi_to_json_schema(v))),
                "responseModalities" | "response_modalities" => {
                    let text_only = v.as_array().is_some_and(|a| a.iter().all(|m| m.as_str() == Some("TEXT")));
                    if !text_only {
                        return Err(TranslateError::unsupported(at, style, "only text answers can be translated"));
                    }
                }
                "responseLogprobs" | "response_logprobs" if v == &Value::Bool(false) => {}
                "responseLogprobs" | "response_logprobs" | "logprobs" | "speechConfig" | "speech_config" => {
                    return Err(TranslateError::unsupported(at, style, "the upstream has no such output"));
                }
                "thinkingConfig" | "thinking_config" => {
                    let budget = field(v, "thinkingBudget", "thinking_budget").and_then(Value::as_u64);
                    match budget {
                        // Anthropic's smallest budget is 1024; 0 means "no thinking".
                        Some(b) if style == Style::Anthropic && b >= 1024 => {
                            s.thinking_budget = Some(u32::try_from(b).unwrap_or(u32::MAX));
                        }
                        Some(0) => {}
                        _ => self.dropped.add("generationConfig.thinkingConfig"),
                    }
                }
                // Media resolution, routing and other hints.
                _ => self.dropped.add(at),
            }
        }
        match mime {
            None | Some("text/plain") => {}
            Some("application/json") => {
                if s.format.is_none() {
                    s.format = Some(Format::JsonObject);
                }
            }
            Some(other) => {
                return Err(TranslateError::unsupported(
                    "generationConfig.responseMimeType",
                    style,
                    format!("{other:?} answers have no counterpart"),
                ))
            }
        }
        if s.format.is_some() && mime != Some("application/json") {
            return Err(TranslateError::invalid(
                "generationConfig.responseMimeType",
                "a response schema needs responseMimeType application/json",
            ));
        }
        Ok(())
    }

    fn contents(&mut self, contents: Option<&Value>) -> Result<Vec<Message>, TranslateError> {
        let items = match contents {
            Some(Value::Array(items)) if !items.is_empty() => items,
            _ => return Err(TranslateError::invalid("contents", "contents is not specified")),
        };
        let mut out: Vec<Message> = Vec::with_capacity(items.len());
        // Calls of the last model turn not answered yet: (id, name).
        let mut open: Vec<(String, String)> = Vec::new();
        for (i, c) in items.iter().enumerate() {
            let at = format!("contents[{i}]");
            let role = match c.get("role").and_then(Value::as_str) {
                Some("model") => Role::Assistant,
                // `function` is the older role of function responses.
                None | Some("user" | "function" | "tool") => Role::User,
                Some(other) => {
                    return Err(TranslateError::invalid(format!("{at}.role"), format!("unknown role {other:?}")))
                }
            };
            let parts = c
                .get("parts")
                .and_then(Value::as_array)
                .ok_or_else(|| TranslateError::invalid(format!("{at}.parts"), "parts must be an array"))?;
            if role == Role::Assistant {
                open.clear();
            }
            let mut blocks = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                let at = format!("{at}.parts[{j}]");
                if field(p, "thoughtSignature", "thought_signature").is_some() {
                    self.dropped.add("thoughtSignature");
                }
                if let Some(call) = field(p, "functionCall", "function_call") {
                    if role != Role::Assistant {
                        return Err(TranslateError::invalid(at, "functionCall parts belong to model turns"));
                    }
                    let name = call.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).ok_or_else(|| {
                        TranslateError::invalid(format!("{at}.functionCall.name"), "a function name is required")
                    })?;
                    let id = match call.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                        Some(id) => id.to_string(),
                        None => format!("call_{i}_{j}"),
                    };
                    let input = match call.get("args") {
                        Some(v @ Value::Object(_)) => v.clone(),
                        None | Some(Value::Null) => Value::Object(Map::new()),
                        Some(_) => {
                            return Err(TranslateError::invalid(format!("{at}.functionCall.args"), "must be an object"))
                        }
                    };
                    open.push((id.clone(), name.to_string()));
                    blocks.push(Block::ToolCall(ToolCall {
                        id,
                        name: name.to_string(),
                        arguments: input.to_string(),
                        input,
                        provider_data: None,
                    }));
                } else if let Some(resp) = field(p, "functionResponse", "function_response") {
                    let name = resp.get("name").and_then(Value::as_str).unwrap_or_default();
                    let given = resp.get("id").and_then(Value::as_str).filter(|s| !s.is_empty());
                    let slot = match given {
                        Some(id) => open.iter().position(|(c, _)| c == id),
                        None => open.iter().position(|(_, n)| n == name),
                    }
                    .ok_or_else(|| {
                        TranslateError::invalid(
                            format!("{at}.functionResponse"),
                            format!("functionResponse {name:?} answers no open functionCall of the turn before"),
                        )
                    })?;
                    let (id, call_name) = open.remove(slot);
                    let (output, is_error) = response_text(resp.get("response").unwrap_or(&Value::Null));
                    blocks.push(Block::ToolResult(ToolResultBlock { call_id: id, name: call_name, output, is_error }));
                } else if let Some(text) = p.get("text").and_then(Value::as_str) {
                    if p.get("thought").and_then(Value::as_bool) == Some(true) {
                        // Thoughts go back only to the model that had them, with its signature.
                        self.dropped.add("thought parts");
                    } else {
                        blocks.push(Block::text(text));
                    }
                } else if let Some(data) = field(p, "inlineData", "inline_data") {
                    let mime = field(data, "mimeType", "mime_type").and_then(Value::as_str).unwrap_or_default();
                    let bytes = data.get("data").and_then(Value::as_str).unwrap_or_default();
                    if !mime.starts_with("image/") {
                        return Err(TranslateError::unsupported(at, self.style, "only image data can be carried"));
                    }
                    blocks.push(Block::Image {
                        media_type: mime.to_string(),
                        source: ImageSource::Base64 { data: bytes.to_string() },
                    });
                } else if let Some(file) = field(p, "fileData", "file_data") {
                    let mime = field(file, "mimeType", "mime_type").and_then(Value::as_str).unwrap_or_default();
                    let uri = field(file, "fileUri", "file_uri").and_then(Value::as_str).unwrap_or_default();
                    let web = uri.starts_with("https://") || uri.starts_with("http://");
                    if !mime.starts_with("image/") || !web {
                        return Err(TranslateError::unsupported(
                            at,
                            self.style,
                            "only images at http(s) URLs can be carried (Files API uploads live at Gemini)",
                        ));
                    }
                    blocks.push(Block::Image {
                        media_type: mime.to_string(),
                        source: ImageSource::Url { url: uri.to_string() },
                    });
                } else if field(p, "thoughtSignature", "thought_signature").is_some() {
                    // A part that only carries a signature.
                } else {
                    return Err(TranslateError::unsupported(at, self.style, "this part kind has no counterpart"));
                }
            }
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
}

/// A `functionResponse.response` as result text: a lone `output` / `result`
/// string is that string, an `error` object marks an error, anything else is
/// its JSON text.
fn response_text(response: &Value) -> (String, bool) {
    if let Some(obj) = response.as_object() {
        if obj.len() == 1 {
            for key in ["output", "result", "content"] {
                if let Some(s) = obj.get(key).and_then(Value::as_str) {
                    return (s.to_string(), false);
                }
            }
            if let Some(e) = obj.get("error") {
                return (e.as_str().map_or_else(|| e.to_string(), str::to_string), true);
            }
        }
    }
    (response.to_string(), false)
}

/// Gemini's OpenAPI-style schema (`type: "OBJECT"`, `nullable`) as JSON Schema.
pub(super) fn openapi_to_json_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(obj) => {
            let mut out = Map::new();
            let nullable = obj.get("nullable").and_then(Value::as_bool) == Some(true);
            for (k, v) in obj {
                match k.as_str() {
                    "nullable" | "propertyOrdering" | "property_ordering" => {}
                    "type" => {
                        let t = v.as_str().map(str::to_ascii_lowercase).map_or_else(|| v.clone(), Value::String);
                        let t = match (nullable, t) {
                            (true, Value::String(t)) => Value::Array(vec![Value::String(t), Value::from("null")]),
                            (_, t) => t,
                        };
                        out.insert(k.clone(), t);
                    }
                    "properties" => {
                        let props = v
                            .as_object()
                            .map(|p| p.iter().map(|(name, s)| (name.clone(), openapi_to_json_schema(s))).collect())
                            .unwrap_or_default();
                        out.insert(k.clone(), Value::Object(props));
                    }
                    "items" | "anyOf" | "any_of" => {
                        let key = if k == "any_of" { "anyOf" } else { k.as_str() };
                        out.insert(key.to_string(), openapi_to_json_schema(v));
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(openapi_to_json_schema).collect()),
        other => other.clone(),
    }
}
