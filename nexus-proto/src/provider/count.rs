//! The providers' token counters: Anthropic `POST /v1/messages/count_tokens`,
//! OpenAI Responses `POST /responses/input_tokens` and Gemini
//! `POST models/{model}:countTokens`. Chat Completions has none.
//!
//! A count is asked with a model call's own body, reduced to what each
//! counter takes, so what is counted is what would be sent.

use serde_json::{json, Value};

use super::Style;

/// What Anthropic's `count_tokens` takes (`MessageCountTokensParams`, the
/// beta fields included): anything else, `max_tokens` first, is a 400 there.
pub const ANTHROPIC_FIELDS: &[&str] = &[
    "messages",
    "model",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "output_config",
    "cache_control",
    "speed",
    "context_management",
    "mcp_servers",
];

/// What the Responses `input_tokens` endpoint takes (`InputTokenCountParams`):
/// no `stream`, `max_output_tokens`, `store`, `include` or sampling settings.
pub const RESPONSES_FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "truncation",
    "conversation",
    "previous_response_id",
    "personality",
];

/// The counter's URL for `style` at `base_url` (`None`: Chat Completions, which has none).
pub fn endpoint(style: Style, base_url: &str, model: &str) -> Option<String> {
    match style {
        Style::Anthropic => Some(format!("{}/count_tokens", super::anthropic::endpoint(base_url))),
        Style::OpenAiResponses => Some(format!("{}/input_tokens", super::responses::endpoint(base_url))),
        Style::Gemini => Some(format!("{}/models/{model}:countTokens", base_url.trim_end_matches('/'))),
        Style::OpenAi => None,
    }
}

/// The counter's body for a model call body of `style` (`None`: no counter,
/// or a body that is not a JSON object). Gemini's counter takes the call as
/// a `generateContentRequest` naming its model, without `generationConfig`
/// (the counter counts the prompt).
pub fn request_body(style: Style, body: &[u8], model: &str) -> Option<Vec<u8>> {
    let Ok(Value::Object(mut o)) = serde_json::from_slice::<Value>(body) else { return None };
    match style {
        Style::Anthropic => o.retain(|k, _| ANTHROPIC_FIELDS.contains(&k.as_str())),
        Style::OpenAiResponses => o.retain(|k, _| RESPONSES_FIELDS.contains(&k.as_str())),
        Style::Gemini => {
            o.insert("model".into(), json!(format!("models/{model}")));
            o.remove("generationConfig");
            return Some(json!({ "generateContentRequest": o }).to_string().into_bytes());
        }
        Style::OpenAi => return None,
    }
    Some(Value::Object(o).to_string().into_bytes())
}

/// The count in a counter's answer: Anthropic and Responses `input_tokens`,
/// Gemini `totalTokens`.
pub fn read(style: Style, body: &[u8]) -> Option<u64> {
    let field = if style == Style::Gemini { "totalTokens" } else { "input_tokens" };
    serde_json::from_slice::<Value>(body).ok()?.get(field)?.as_u64()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_counter_gets_only_its_fields_at_its_path() {
        let body = json!({"model": "m", "max_tokens": 5, "stream": true, "messages": [], "system": "s"});
        let kept: Value =
            serde_json::from_slice(&request_body(Style::Anthropic, body.to_string().as_bytes(), "m").unwrap()).unwrap();
        assert_eq!(kept, json!({"model": "m", "messages": [], "system": "s"}));
        let body = json!({"model": "m", "max_output_tokens": 5, "store": false, "input": [], "include": []});
        let kept: Value =
            serde_json::from_slice(&request_body(Style::OpenAiResponses, body.to_string().as_bytes(), "m").unwrap())
                .unwrap();
        assert_eq!(kept, json!({"model": "m", "input": []}));
        let body = json!({"contents": [], "generationConfig": {"maxOutputTokens": 5}});
        let kept: Value =
            serde_json::from_slice(&request_body(Style::Gemini, body.to_string().as_bytes(), "g").unwrap()).unwrap();
        assert_eq!(kept, json!({"generateContentRequest": {"contents": [], "model": "models/g"}}));
        assert!(request_body(Style::OpenAi, b"{}", "m").is_none());
        assert!(request_body(Style::Anthropic, b"[1]", "m").is_none());

        assert_eq!(endpoint(Style::Anthropic, "https://a/v1", "m").unwrap(), "https://a/v1/messages/count_tokens");
        assert_eq!(endpoint(Style::Anthropic, "https://a", "m").unwrap(), "https://a/v1/messages/count_tokens");
        assert_eq!(
            endpoint(Style::OpenAiResponses, "https://o/v1/", "m").unwrap(),
            "https://o/v1/responses/input_tokens"
        );
        assert_eq!(endpoint(Style::Gemini, "https://g/v1beta/", "x").unwrap(), "https://g/v1beta/models/x:countTokens");
        assert!(endpoint(Style::OpenAi, "https://o/v1", "m").is_none());

        assert_eq!(read(Style::Gemini, br#"{"totalTokens": 31, "promptTokensDetails": []}"#), Some(31));
        assert_eq!(read(Style::OpenAiResponses, br#"{"object":"response.input_tokens","input_tokens":7}"#), Some(7));
        assert_eq!(read(Style::Anthropic, br#"{"input_tokens":"7"}"#), None);
    }
}
