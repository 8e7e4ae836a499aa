//! The model view: what a request carries once compactions and tool-result
//! caps apply. The canonical transcript is never changed; the view is
//! derived from it and the recorded compactions every time.

use std::borrow::Cow;
use std::fmt::Write as _;

use crate::message::{Block, Message, Role};

use super::ContextPolicy;

/// The text that opens the summary message of a compacted view.
pub const SUMMARY_PREFIX: &str = "[Summary of the earlier part of this conversation]\n";

/// Cuts `text` to at most about `cap` bytes, keeping its head and tail with
/// a marker between them that says how much was left out. Texts within the
/// cap come back borrowed.
pub fn cap_text(text: &str, cap: usize) -> Cow<'_, str> {
    if text.len() <= cap {
        return Cow::Borrowed(text);
    }
    let head_end = floor_boundary(text, cap / 2);
    let tail_start = ceil_boundary(text, text.len() - (cap - cap / 2));
    let omitted = tail_start - head_end;
    let mut out = String::with_capacity(cap + 64);
    out.push_str(&text[..head_end]);
    let _ = write!(out, "\n[… {omitted} bytes omitted …]\n");
    out.push_str(&text[tail_start..]);
    Cow::Owned(out)
}

fn floor_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// `message` with every tool result over its cap cut (borrowed when none is).
pub fn capped<'m>(message: &'m Message, policy: &ContextPolicy) -> Cow<'m, Message> {
    let over = |b: &Block| match b {
        Block::ToolResult(r) => policy.cap_for(&r.name).is_some_and(|cap| r.output.len() > cap),
        _ => false,
    };
    if !message.content.iter().any(over) {
        return Cow::Borrowed(message);
    }
    let mut m = message.clone();
    for b in &mut m.content {
        if let Block::ToolResult(r) = b {
            if let Some(cap) = policy.cap_for(&r.name) {
                if let Cow::Owned(cut) = cap_text(&r.output, cap) {
                    r.output = cut;
                }
            }
        }
    }
    Cow::Owned(m)
}

/// The view of `transcript` after a compaction that replaced everything
/// before `cut` with `summary` (none: the whole transcript), caps applied.
/// Borrowed when nothing changes.
pub fn build<'t>(
    transcript: &'t [Message],
    summary: Option<(&str, usize)>,
    policy: Option<&ContextPolicy>,
) -> Cow<'t, [Message]> {
    let (kept, head) = match summary {
        Some((text, cut)) => (transcript.get(cut..).unwrap_or_default(), Some(summary_message(text))),
        None => (transcript, None),
    };
    let any_capped = policy.is_some_and(|p| kept.iter().any(|m| matches!(capped(m, p), Cow::Owned(_))));
    if head.is_none() && !any_capped {
        return Cow::Borrowed(transcript);
    }
    let mut out = Vec::with_capacity(kept.len() + 1);
    out.extend(head);
    for m in kept {
        out.push(match policy {
            Some(p) => capped(m, p).into_owned(),
            None => m.clone(),
        });
    }
    Cow::Owned(out)
}

/// The user message that stands for the compacted part.
pub fn summary_message(summary: &str) -> Message {
    Message::user(format!("{SUMMARY_PREFIX}{summary}"))
}

/// The size in bytes of one message as a request would carry it: its
/// neutral JSON, tool results capped. Used to weigh cut points; the gate
/// checks the real encoded body.
pub fn weight(message: &Message, policy: &ContextPolicy) -> u64 {
    let m = capped(message, policy);
    serde_json::to_vec(m.as_ref()).map_or(0, |v| v.len() as u64)
}

/// Where a compaction may cut: indexes of assistant messages after `from`
/// and up to the last assistant message (the turn being answered and its
/// results always stay). A cut before an assistant message keeps each call
/// with its results, since results follow their call.
pub fn cut_points(transcript: &[Message], from: usize) -> Vec<usize> {
    let last = transcript.iter().rposition(|m| m.role == Role::Assistant);
    let Some(last) = last else { return Vec::new() };
    (from + 1..=last).filter(|&i| transcript.get(i).is_some_and(|m| m.role == Role::Assistant)).collect()
}

/// The messages a compaction summarizes, as plain text the summarizing
/// model reads (no tool-call structure, so the request needs no tools and
/// can never be unbalanced): the previous summary, then each message.
/// Cut to `budget` bytes (head and tail kept) when longer.
pub fn render(previous: Option<&str>, part: &[Message], policy: &ContextPolicy, budget: usize) -> String {
    let mut out = String::new();
    if let Some(prev) = previous {
        let _ = write!(out, "<previous_summary>\n{prev}\n</previous_summary>\n");
    }
    out.push_str("<conversation>\n");
    for m in part {
        let who = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        for b in &m.content {
            match b {
                Block::Text { text, .. } if !text.is_empty() => {
                    let _ = writeln!(out, "[{who}] {text}");
                }
                Block::ToolCall(c) => {
                    let _ = writeln!(out, "[{who} calls {}] {}", c.name, c.arguments);
                }
                Block::ToolResult(r) => {
                    let output = match policy.cap_for(&r.name) {
                        Some(cap) => cap_text(&r.output, cap),
                        None => Cow::Borrowed(r.output.as_str()),
                    };
                    let status = if r.is_error { "error" } else { "result" };
                    let _ = writeln!(out, "[{} {status}] {output}", r.name);
                }
                Block::Image { media_type, .. } => {
                    let _ = writeln!(out, "[{who} image {media_type}]");
                }
                // Reasoning is the model's own scratch work: not part of what is kept.
                _ => {}
            }
        }
    }
    out.push_str("</conversation>");
    match cap_text(&out, budget) {
        Cow::Borrowed(_) => out,
        Cow::Owned(cut) => cut,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{ToolCall, ToolResultBlock};

    #[test]
    fn caps_keep_head_and_tail_on_char_boundaries() {
        let text = "é".repeat(1000);
        let cut = cap_text(&text, 101);
        assert!(cut.len() < 200, "{}", cut.len());
        assert!(cut.starts_with('é') && cut.ends_with('é'));
        assert!(cut.contains("bytes omitted"));
        assert!(matches!(cap_text("short", 10), Cow::Borrowed("short")));
    }

    #[test]
    fn cut_points_are_assistant_turns_up_to_the_last() {
        let call = ToolCall {
            id: "c".into(),
            name: "t".into(),
            input: serde_json::json!({}),
            arguments: "{}".into(),
            provider_data: None,
        };
        let result = ToolResultBlock { call_id: "c".into(), name: "t".into(), output: "x".into(), is_error: false };
        let t = vec![
            Message::user("go"),
            Message { role: Role::Assistant, content: vec![Block::ToolCall(call.clone())] },
            Message { role: Role::User, content: vec![Block::ToolResult(result.clone())] },
            Message { role: Role::Assistant, content: vec![Block::ToolCall(call)] },
            Message { role: Role::User, content: vec![Block::ToolResult(result)] },
        ];
        assert_eq!(cut_points(&t, 0), vec![1, 3]);
        assert_eq!(cut_points(&t, 1), vec![3]);
        assert_eq!(cut_points(&t, 3), Vec::<usize>::new());
    }
}
