//! Content in the conventions' JSON shapes (`gen-ai-input-messages.json`,
//! `gen-ai-output-messages.json`, `gen-ai-system-instructions.json`): only
//! ever built when content capture is on.

use nexus_proto::{Block, ImageSource, Message, Role, StopReason, ToolDecl};
use serde_json::{json, Value};

/// One message as `{role, parts}`. A user turn that holds only tool
/// results is the conventions' `tool` role.
fn message(m: &Message) -> Value {
    let only_results = !m.content.is_empty() && m.content.iter().all(|b| matches!(b, Block::ToolResult(_)));
    let role = match (m.role, only_results) {
        (Role::Assistant, _) => "assistant",
        (Role::User, true) => "tool",
        (Role::User, false) => "user",
    };
    let parts: Vec<Value> = m
        .content
        .iter()
        .map(|b| match b {
            Block::Text { text, .. } => json!({"type": "text", "content": text}),
            Block::Reasoning { text, .. } => json!({"type": "reasoning", "content": text}),
            Block::Image { media_type, source: ImageSource::Base64 { data } } => {
                json!({"type": "blob", "modality": "image", "mime_type": media_type, "content": data})
            }
            Block::Image { media_type, source: ImageSource::Url { url } } => {
                json!({"type": "uri", "modality": "image", "mime_type": media_type, "uri": url})
            }
            Block::ToolCall(c) => json!({"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.input}),
            Block::ToolResult(r) => json!({"type": "tool_call_response", "id": r.call_id, "response": r.output}),
        })
        .collect();
    json!({"role": role, "parts": parts})
}

/// `gen_ai.input.messages`: what a model call was sent.
pub(crate) fn input_messages(transcript: &[Message]) -> String {
    Value::Array(transcript.iter().map(message).collect()).to_string()
}

/// `gen_ai.output.messages`: what the model answered, with why it stopped.
pub(crate) fn output_messages(answer: &[Message], stop: Option<StopReason>) -> String {
    let reason = finish_reason(stop);
    let out: Vec<Value> = answer
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .map(|m| {
            let mut v = message(m);
            v["finish_reason"] = reason.into();
            v
        })
        .collect();
    Value::Array(out).to_string()
}

/// `gen_ai.system_instructions`.
pub(crate) fn system_instructions(system: &str) -> String {
    json!([{"type": "text", "content": system}]).to_string()
}

/// `gen_ai.tool.definitions`.
pub(crate) fn tool_definitions(tools: &[ToolDecl]) -> String {
    let defs: Vec<Value> = tools
        .iter()
        .map(
            |t| json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.input_schema}),
        )
        .collect();
    Value::Array(defs).to_string()
}

/// The conventions' finish reason for a stop: `stop`, `tool_call`,
/// `length`, `content_filter`, else the machine's own name.
pub(crate) fn finish_reason(stop: Option<StopReason>) -> &'static str {
    match stop {
        Some(StopReason::EndTurn) | Some(StopReason::StopSequence) | None => "stop",
        Some(StopReason::ToolUse) => "tool_call",
        Some(StopReason::MaxTokens) => "length",
        Some(StopReason::ContentFilter) | Some(StopReason::Refusal) => "content_filter",
        Some(StopReason::PauseTurn) => "pause_turn",
        Some(_) => "other",
    }
}

#[cfg(test)]
mod tests {
    use nexus_proto::{ToolCall, ToolResultBlock};

    use super::*;

    #[test]
    fn messages_follow_the_conventions_shape() {
        let call = ToolCall {
            id: "c1".into(),
            name: "add".into(),
            input: json!({"a": 1}),
            arguments: "{\"a\":1}".into(),
            provider_data: None,
        };
        let result = ToolResultBlock { call_id: "c1".into(), name: "add".into(), output: "2".into(), is_error: false };
        let transcript = vec![
            Message::user("hi"),
            Message { role: Role::Assistant, content: vec![Block::ToolCall(call)] },
            Message { role: Role::User, content: vec![Block::ToolResult(result)] },
        ];
        let v: Value = serde_json::from_str(&input_messages(&transcript)).unwrap();
        assert_eq!(v[0], json!({"role": "user", "parts": [{"type": "text", "content": "hi"}]}));
        assert_eq!(v[1]["parts"][0], json!({"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1}}));
        assert_eq!(
            v[2],
            json!({"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "2"}]})
        );
        let out: Value =
            serde_json::from_str(&output_messages(&[Message::assistant("ok")], Some(StopReason::EndTurn))).unwrap();
        assert_eq!(
            out,
            json!([{"role": "assistant", "parts": [{"type": "text", "content": "ok"}], "finish_reason": "stop"}])
        );
    }
}
