//! The pre-send gate: every request the machine emits is checked here first,
//! so an unbalanced transcript becomes a typed error instead of a provider 400.

use std::collections::HashSet;

use crate::error::GateError;
use crate::message::{Block, Message, Role};
use crate::provider::{responses, Style};

/// Checks that `messages` is a transcript the provider will accept:
/// every tool call is answered by exactly one result in the very next turn
/// (a user turn), no result answers a call that was not made in the turn
/// before it, call ids are unique within their turn and names non-empty, the transcript does not
/// end on unanswered calls, (Anthropic) reasoning precedes tool calls, and
/// (OpenAI Responses) a reasoning item is followed by the very item the
/// model produced after it, as the API requires: an item that lost its id
/// (a rewritten history) cannot stand in for it. A reasoning item last in its
/// turn is left out by the encoder, so it is no error here.
pub fn check(style: Style, messages: &[Message]) -> Result<(), GateError> {
    if messages.is_empty() {
        return Err(GateError("the transcript is empty".into()));
    }
    let mut open: Vec<(&str, &str)> = Vec::new(); // (id, name) awaiting results
    for (i, msg) in messages.iter().enumerate() {
        let results: Vec<_> = msg.tool_results().collect();
        if !open.is_empty() {
            if msg.role != Role::User {
                return Err(GateError(format!("messages[{i}]: tool calls of messages[{}] have no results", i - 1)));
            }
            for (id, name) in &open {
                let matching: Vec<_> = results.iter().filter(|r| r.call_id == *id).collect();
                match matching.len() {
                    0 => return Err(GateError(format!("messages[{i}]: no result for tool call {id:?}"))),
                    1 if matching[0].name != *name && style == Style::Gemini => {
                        return Err(GateError(format!(
                            "messages[{i}]: result for {id:?} names {:?}, the call named {name:?}",
                            matching[0].name
                        )))
                    }
                    1 => {}
                    _ => return Err(GateError(format!("messages[{i}]: more than one result for tool call {id:?}"))),
                }
            }
        }
        for r in &results {
            if !open.iter().any(|(id, _)| *id == r.call_id) {
                return Err(GateError(format!(
                    "messages[{i}]: result for {:?} answers no tool call of the turn before",
                    r.call_id
                )));
            }
        }
        open.clear();
        if msg.role == Role::Assistant {
            // Ids must be unique within a turn (results are matched by id);
            // some OpenAI-compatible servers reuse ids across turns, which
            // every provider accepts.
            let mut seen_ids: HashSet<&str> = HashSet::new();
            let mut saw_call = false;
            for (j, block) in msg.content.iter().enumerate() {
                match block {
                    Block::ToolCall(call) => {
                        if call.name.is_empty() {
                            return Err(GateError(format!("messages[{i}]: tool call {:?} has an empty name", call.id)));
                        }
                        if call.id.is_empty() || !seen_ids.insert(call.id.as_str()) {
                            return Err(GateError(format!(
                                "messages[{i}]: tool call id {:?} is empty or repeated within the turn",
                                call.id
                            )));
                        }
                        open.push((call.id.as_str(), call.name.as_str()));
                        saw_call = true;
                    }
                    Block::Reasoning { .. } if saw_call && style == Style::Anthropic => {
                        return Err(GateError(format!("messages[{i}]: thinking after a tool call")));
                    }
                    Block::Reasoning { provider_data, .. }
                        if style == Style::OpenAiResponses
                            && responses::reasoning_item(provider_data.as_ref()).is_some()
                            && msg.content.get(j + 1).is_some_and(|next| !responses::is_own_item(next)) =>
                    {
                        return Err(GateError(format!(
                            "messages[{i}]: reasoning item {} is not followed by the item that came after it",
                            responses::reasoning_item(provider_data.as_ref())
                                .and_then(|item| item.get("id"))
                                .map(|id| id.to_string())
                                .unwrap_or_default()
                        )));
                    }
                    Block::ToolResult(_) => {
                        return Err(GateError(format!("messages[{i}]: a tool result in an assistant turn")));
                    }
                    _ => {}
                }
            }
        }
    }
    if !open.is_empty() {
        return Err(GateError("the transcript ends on tool calls without results".into()));
    }
    if messages.last().map(|m| m.role) != Some(Role::User) {
        return Err(GateError("the transcript must end on a user turn".into()));
    }
    Ok(())
}
