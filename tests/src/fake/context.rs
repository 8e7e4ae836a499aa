//! A model with a context window: requests over a scenario's limit are
//! refused with each provider's own "too long" 400, and a model that is
//! asked to summarize answers with a summary.
//!
//! A compacted conversation holds fewer assistant turns than were made, so
//! a script that summarizes finds its turn from the last tool call id of
//! the request instead: the id names the turn that made the call (ids are
//! derived from the model, the turn and the call's place).

use serde_json::Value;

use super::script::Script;
use super::wire::{Ctx, Reject};
use super::{anthropic, gemini, openai, Style};

/// The refusal of a request of `n` tokens over a window of `limit`, as the
/// provider words it.
pub fn too_long(style: Style, n: u64, limit: u64) -> Reject {
    match style {
        Style::Anthropic => anthropic::error(400, &format!("prompt is too long: {n} tokens > {limit} maximum")),
        Style::OpenAi => openai::error_full(
            400,
            &format!(
                "This model's maximum context length is {limit} tokens. However, your messages resulted in {n} \
                 tokens. Please reduce the length of the messages."
            ),
            "invalid_request_error",
            Some("messages"),
            Some("context_length_exceeded"),
        ),
        Style::OpenAiResponses => openai::error_full(
            400,
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
            "invalid_request_error",
            Some("input"),
            Some("context_length_exceeded"),
        ),
        Style::Gemini => gemini::error(
            400,
            &format!("The input token count ({n}) exceeds the maximum number of tokens allowed ({limit})."),
        ),
    }
}

/// The system prompt of a request: Anthropic `system`, the Chat
/// Completions system (or developer) message, Responses `instructions`,
/// Gemini `systemInstruction`.
pub fn system_text(style: Style, body: &Value) -> String {
    let texts = |v: &Value, key: &str| -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts.iter().filter_map(|p| p.get(key).and_then(Value::as_str)).collect(),
            _ => String::new(),
        }
    };
    match style {
        Style::Anthropic => body.get("system").map(|s| texts(s, "text")).unwrap_or_default(),
        Style::OpenAi => body
            .get("messages")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|m| matches!(m.get("role").and_then(Value::as_str), Some("system" | "developer")))
            .map(|m| m.get("content").map(|c| texts(c, "text")).unwrap_or_default())
            .collect(),
        Style::OpenAiResponses => body.get("instructions").and_then(Value::as_str).unwrap_or_default().to_string(),
        Style::Gemini => {
            body.get("systemInstruction").and_then(|s| s.get("parts")).map(|p| texts(p, "text")).unwrap_or_default()
        }
    }
}

/// The id of the last tool call in a request's transcript.
pub fn last_call_id(style: Style, body: &Value) -> Option<String> {
    let list = |key: &str| body.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
    let id = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    match style {
        Style::Anthropic => list("messages")
            .iter()
            .flat_map(|m| m.get("content").and_then(Value::as_array).cloned().unwrap_or_default())
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            .filter_map(|b| id(&b, "id"))
            .next_back(),
        Style::OpenAi => list("messages")
            .iter()
            .flat_map(|m| m.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default())
            .filter_map(|c| id(&c, "id"))
            .next_back(),
        Style::OpenAiResponses => list("input")
            .iter()
            .filter(|i| i.get("type").and_then(Value::as_str) == Some("function_call"))
            .filter_map(|i| id(i, "call_id"))
            .next_back(),
        Style::Gemini => list("contents")
            .iter()
            .flat_map(|c| c.get("parts").and_then(Value::as_array).cloned().unwrap_or_default())
            .filter_map(|p| p.get("functionCall").and_then(|f| id(f, "id")))
            .next_back(),
    }
}

/// The turn after the one that made call `id` (`None` when no turn of the
/// script made it).
pub fn turn_after_call(script: &Script, model: &str, style: Style, id: &str) -> Option<usize> {
    let prefix = if style == Style::Anthropic { "toolu_01" } else { "call_" };
    script.turns.iter().enumerate().find_map(|(t, turn)| {
        let ctx = Ctx { model, turn_index: t, turn, huge: None, include_usage: false, compaction: false };
        (0..turn.tool_calls.len()).any(|i| ctx.call_id(i, prefix) == id).then_some(t + 1)
    })
}
