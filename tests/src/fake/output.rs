//! The structured-output fields of each API, checked as the real servers
//! check them: Chat `response_format`, Responses `text.format`, Anthropic
//! `output_config.format`, Gemini `generationConfig.responseMimeType` +
//! `responseJsonSchema`. A body that breaks a rule gets the provider's own
//! status and error text, so a client's fallback path meets what it would
//! meet in production.

use serde_json::{Map, Value};

use super::wire::Reject;
use super::{anthropic, gemini, openai, Style};

/// Checks the output field of `body`, if it has one.
pub fn check(style: Style, body: &Value, model: &str) -> Result<(), Reject> {
    match style {
        Style::OpenAi => match body.get("response_format") {
            None => Ok(()),
            Some(f) => check_chat(f),
        },
        Style::OpenAiResponses => match body.pointer("/text/format") {
            None => Ok(()),
            Some(f) => check_responses(f),
        },
        Style::Anthropic => match body.get("output_config") {
            None => Ok(()),
            Some(c) => check_anthropic(c),
        },
        Style::Gemini => match body.get("generationConfig") {
            None => Ok(()),
            Some(c) => check_gemini(c, body, model),
        },
    }
}

fn bad_openai(message: &str, param: &str) -> Reject {
    openai::error_full(400, message, "invalid_request_error", Some(param), None)
}

fn object(v: &Value) -> Option<&Map<String, Value>> {
    v.as_object()
}

/// Names OpenAI takes: `^[a-zA-Z0-9_-]{1,64}$`.
fn name_ok(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn check_chat(f: &Value) -> Result<(), Reject> {
    let f = object(f)
        .ok_or_else(|| bad_openai("Invalid type for 'response_format': expected an object.", "response_format"))?;
    match f.get("type").and_then(Value::as_str) {
        Some("text" | "json_object") => Ok(()),
        Some("json_schema") => {
            let js = f.get("json_schema").and_then(object).ok_or_else(|| {
                bad_openai("Missing required parameter: 'response_format.json_schema'.", "response_format.json_schema")
            })?;
            for k in js.keys() {
                if !["name", "description", "schema", "strict"].contains(&k.as_str()) {
                    return Err(bad_openai(
                        &format!("Unrecognized request argument supplied: response_format.json_schema.{k}"),
                        "response_format.json_schema",
                    ));
                }
            }
            check_named_schema(js, "response_format", "response_format.json_schema")
        }
        other => Err(bad_openai(
            &format!("Invalid value: {}. Supported values are: 'text', 'json_object', and 'json_schema'.", show(other)),
            "response_format.type",
        )),
    }
}

fn check_responses(f: &Value) -> Result<(), Reject> {
    let f =
        object(f).ok_or_else(|| bad_openai("Invalid type for 'text.format': expected an object.", "text.format"))?;
    match f.get("type").and_then(Value::as_str) {
        Some("text" | "json_object") => Ok(()),
        Some("json_schema") => {
            for k in f.keys() {
                if !["type", "name", "description", "schema", "strict"].contains(&k.as_str()) {
                    return Err(bad_openai(
                        &format!("Unknown parameter: 'text.format.{k}'."),
                        &format!("text.format.{k}"),
                    ));
                }
            }
            check_named_schema(f, "text.format", "text.format")
        }
        other => Err(bad_openai(
            &format!("Invalid value: {}. Supported values are: 'text', 'json_object', and 'json_schema'.", show(other)),
            "text.format.type",
        )),
    }
}

fn show(v: Option<&str>) -> String {
    v.map_or("null".to_string(), |s| format!("'{s}'"))
}

/// `name` and `schema` present, and the strict subset when `strict` is true.
fn check_named_schema(f: &Map<String, Value>, what: &str, param: &str) -> Result<(), Reject> {
    let name = f
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| bad_openai(&format!("Missing required parameter: '{param}.name'."), &format!("{param}.name")))?;
    if !name_ok(name) {
        return Err(bad_openai(
            &format!("Invalid '{param}.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."),
            &format!("{param}.name"),
        ));
    }
    let Some(schema) = f.get("schema") else { return Ok(()) };
    if f.get("strict") == Some(&Value::Bool(true)) {
        strict(schema, &mut Vec::new())
            .map_err(|why| bad_openai(&format!("Invalid schema for {what} '{name}': {why}"), what))?;
    }
    Ok(())
}

/// Python's repr of the context tuple, as OpenAI prints it.
fn context(path: &[String]) -> String {
    let parts: Vec<String> = path.iter().map(|p| format!("'{p}'")).collect();
    match parts.len() {
        0 => "()".to_string(),
        1 => format!("({},)", parts[0]),
        _ => format!("({})", parts.join(", ")),
    }
}

/// OpenAI's strict-mode subset: every object closed, every property required.
fn strict(schema: &Value, path: &mut Vec<String>) -> Result<(), String> {
    let Some(s) = object(schema) else { return Ok(()) };
    let is_object = match s.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(ts)) => ts.iter().any(|t| t == "object"),
        _ => s.contains_key("properties"),
    };
    if is_object {
        if s.get("additionalProperties") != Some(&Value::Bool(false)) {
            return Err(format!(
                "In context={}, 'additionalProperties' is required to be supplied and to be false.",
                context(path)
            ));
        }
        let props = s.get("properties").and_then(object).cloned().unwrap_or_default();
        let required: Vec<&str> =
            s.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
        if let Some(missing) = props.keys().find(|k| !required.contains(&k.as_str())) {
            return Err(format!(
                "In context={}, 'required' is required to be supplied and to be an array including every key in properties. Missing '{missing}'.",
                context(path)
            ));
        }
        for (k, sub) in &props {
            path.extend(["properties".to_string(), k.clone()]);
            strict(sub, path)?;
            path.truncate(path.len() - 2);
        }
    }
    for key in ["items"] {
        if let Some(sub) = s.get(key) {
            path.push(key.to_string());
            strict(sub, path)?;
            path.pop();
        }
    }
    for key in ["anyOf", "$defs"] {
        let subs: Vec<(String, &Value)> = match s.get(key) {
            Some(Value::Array(a)) => a.iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect(),
            Some(Value::Object(o)) => o.iter().map(|(k, v)| (k.clone(), v)).collect(),
            _ => continue,
        };
        for (k, sub) in subs {
            path.extend([key.to_string(), k]);
            strict(sub, path)?;
            path.truncate(path.len() - 2);
        }
    }
    Ok(())
}

fn check_anthropic(c: &Value) -> Result<(), Reject> {
    let bad = |m: &str| anthropic::error(400, m);
    let c = object(c).ok_or_else(|| bad("output_config: Input should be a valid dictionary"))?;
    for k in c.keys() {
        if !["format", "effort"].contains(&k.as_str()) {
            return Err(bad(&format!("output_config.{k}: Extra inputs are not permitted")));
        }
    }
    let Some(format) = c.get("format") else { return Ok(()) };
    let format = object(format).ok_or_else(|| bad("output_config.format: Input should be a valid dictionary"))?;
    if format.get("type").and_then(Value::as_str) != Some("json_schema") {
        return Err(bad("output_config.format.type: Input should be 'json_schema'"));
    }
    for k in format.keys() {
        if !["type", "schema"].contains(&k.as_str()) {
            return Err(bad(&format!("output_config.format.{k}: Extra inputs are not permitted")));
        }
    }
    let schema = format.get("schema").ok_or_else(|| bad("output_config.format.schema: Field required"))?;
    anthropic_subset(schema).map_err(|why| bad(&format!("output_config.format.schema: {why}")))
}

/// Anthropic's structured-output subset: closed objects, no numeric or
/// length constraints.
fn anthropic_subset(schema: &Value) -> Result<(), String> {
    let Some(s) = object(schema) else { return Ok(()) };
    for k in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minLength", "maxLength"] {
        if s.contains_key(k) {
            return Err(format!("The '{k}' keyword is not supported"));
        }
    }
    let is_object = s.get("type") == Some(&Value::from("object")) || s.contains_key("properties");
    if is_object && s.get("additionalProperties") != Some(&Value::Bool(false)) {
        return Err("For 'object' type, 'additionalProperties' must be explicitly set to false".into());
    }
    for (k, v) in s {
        match (k.as_str(), v) {
            ("properties" | "$defs", Value::Object(o)) => o.values().try_for_each(anthropic_subset)?,
            ("items", sub) => anthropic_subset(sub)?,
            ("anyOf" | "allOf", Value::Array(a)) => a.iter().try_for_each(anthropic_subset)?,
            _ => {}
        }
    }
    Ok(())
}

fn check_gemini(c: &Value, body: &Value, model: &str) -> Result<(), Reject> {
    let bad = |m: &str| gemini::error(400, m);
    let mime = c.get("responseMimeType").and_then(Value::as_str);
    let has_schema = c.get("responseJsonSchema").is_some() || c.get("responseSchema").is_some();
    if c.get("responseJsonSchema").is_some() && c.get("responseSchema").is_some() {
        return Err(bad("responseSchema and responseJsonSchema cannot both be set."));
    }
    if has_schema && mime != Some("application/json") && mime != Some("text/x.enum") {
        return Err(bad(
            "* GenerateContentRequest.generation_config.response_mime_type: response_mime_type must be one of \
             ['application/json', 'text/x.enum'] when response_schema is set.\n",
        ));
    }
    let has_tools = body.get("tools").and_then(Value::as_array).is_some_and(|t| !t.is_empty());
    if mime == Some("application/json") && has_tools && !model.starts_with("gemini-3") {
        return Err(bad("Function calling with a response mime type: 'application/json' is unsupported"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn strict_mode_errors_read_as_openai_writes_them() {
        let open = json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
        assert_eq!(
            strict(&open, &mut Vec::new()).unwrap_err(),
            "In context=(), 'additionalProperties' is required to be supplied and to be false."
        );
        let nested = json!({"type": "object", "additionalProperties": false, "required": ["o"], "properties": {
            "o": {"type": "object", "additionalProperties": false, "properties": {"x": {}, "y": {}}, "required": ["x"]}}});
        assert_eq!(
            strict(&nested, &mut Vec::new()).unwrap_err(),
            "In context=('properties', 'o'), 'required' is required to be supplied and to be an array including every key in properties. Missing 'y'."
        );
    }
}
