//! Taking the output's JSON out of an answer.
//!
//! Native answers are the JSON itself; prompted answers are text that holds
//! it, fenced (```` ```json … ``` ````) or bare, often with a sentence around
//! it. The rule: the first fenced block that parses wins; else the whole
//! text when it parses; else the first `{` from which a complete value
//! parses (the rest of the text ignored). Nothing is repaired: a value that
//! does not parse is reported as such, and the model is asked again.

use serde_json::Value;

/// What [`extract_json`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Extracted {
    /// A complete JSON value.
    Value(Value),
    /// No JSON value in the text; the reason, for the retry message.
    Missing(String),
}

/// The JSON value an answer carries (see the module docs for the rule).
pub fn extract_json(text: &str) -> Extracted {
    for block in fenced_blocks(text) {
        if let Ok(v) = serde_json::from_str::<Value>(block) {
            return Extracted::Value(v);
        }
    }
    let trimmed = text.trim();
    match serde_json::from_str::<Value>(trimmed) {
        Ok(v) => return Extracted::Value(v),
        Err(e) if trimmed.starts_with('{') => return Extracted::Missing(format!("the answer is not valid JSON: {e}")),
        Err(_) => {}
    }
    for (at, _) in text.match_indices('{') {
        let mut values = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        if let Some(Ok(v)) = values.next() {
            return Extracted::Value(v);
        }
    }
    if trimmed.is_empty() {
        Extracted::Missing("the answer is empty".into())
    } else {
        Extracted::Missing("the answer holds no JSON object".into())
    }
}

/// The bodies of the ```` ``` ```` fenced blocks in `text`, in order (an
/// info string such as `json` is skipped; an unclosed fence runs to the end).
fn fenced_blocks(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        let open = rest.find("```")?;
        let after = &rest[open + 3..];
        let body_start = after.find('\n').map_or(after.len(), |n| n + 1);
        let body = &after[body_start..];
        let (inner, next) = match body.find("```") {
            Some(close) => (&body[..close], &body[close + 3..]),
            None => (body, ""),
        };
        rest = next;
        Some(inner)
    })
}

/// The text a partial value is read from while an answer streams: from the
/// first `{` on, inside a fence when the answer opened one. `None` before any `{`.
pub(crate) fn partial_source(text: &str) -> Option<&str> {
    let start = text.find('{')?;
    let tail = &text[start..];
    Some(match tail.find("```") {
        Some(end) => &tail[..end],
        None => tail,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn finds_fenced_bare_and_embedded_json() {
        assert_eq!(extract_json("{\"a\":1}"), Extracted::Value(json!({"a": 1})));
        assert_eq!(extract_json("  \n{\"a\":1}\n"), Extracted::Value(json!({"a": 1})));
        assert_eq!(extract_json("Here:\n```json\n{\"a\":2}\n```\nDone."), Extracted::Value(json!({"a": 2})));
        assert_eq!(extract_json("```\n{\"a\":3}\n```"), Extracted::Value(json!({"a": 3})));
        assert_eq!(extract_json("The answer is {\"a\":4} as asked."), Extracted::Value(json!({"a": 4})));
        assert_eq!(extract_json("```json\nnope\n```\n{\"a\":5}"), Extracted::Value(json!({"a": 5})));
        assert_eq!(extract_json("```json\n{\"a\":6}"), Extracted::Value(json!({"a": 6})), "an unclosed fence");
        assert!(matches!(extract_json("{\"a\":"), Extracted::Missing(m) if m.contains("not valid JSON")));
        assert!(matches!(extract_json("no json here"), Extracted::Missing(m) if m.contains("no JSON object")));
        assert!(matches!(extract_json(""), Extracted::Missing(m) if m.contains("empty")));
    }

    #[test]
    fn partial_source_starts_at_the_first_brace_and_stops_at_a_fence() {
        assert_eq!(partial_source("```json\n{\"a\": [1, 2"), Some("{\"a\": [1, 2"));
        assert_eq!(partial_source("{\"a\":1}\n```"), Some("{\"a\":1}\n"));
        assert_eq!(partial_source("thinking"), None);
    }
}
