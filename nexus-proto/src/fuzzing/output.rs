//! The typed output's readers: a final answer's text (fenced or bare JSON),
//! an output tool's arguments, the partial output of a stream, and the
//! schema lowering with its undo.

use serde_json::Value;

use crate::output::lower::{for_style, undo_nullable};
use crate::output::{extract_json, Extracted};
use crate::provider::Style;

/// `data` as an answer's text and as the halves of a schema and a value:
/// extraction never panics, finds a value it is handed back (bare, fenced,
/// or inside a sentence), and agrees with serde on output tool arguments;
/// lowering and its undo never panic, and the undo only removes.
pub fn output(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let found = extract_json(&text);
    if let Extracted::Value(v) = &found {
        // What was found is a complete value: written out again, it is found again.
        let again = v.to_string();
        assert_eq!(extract_json(&again), Extracted::Value(v.clone()), "bare {again}");
        // A value whose text holds a fence of its own cannot be fenced
        // unambiguously (Markdown closes the block at its first ```).
        if !again.contains("```") {
            assert_eq!(extract_json(&format!("```json\n{again}\n```")), Extracted::Value(v.clone()), "fenced {again}");
        }
    }
    // Output tool arguments are exactly serde's reading of the text.
    if let Ok(v) = serde_json::from_str::<Value>(text.trim()) {
        assert_eq!(found, Extracted::Value(v), "a whole JSON text is its own value");
    }
    if let Some(src) = crate::output::extract::partial_source(&text) {
        let _ = crate::provider::parse_partial_json(src);
    }
    let mid = data.len() / 2;
    let (a, b) = data.split_at(mid);
    let (Ok(schema), Ok(value)) = (serde_json::from_slice::<Value>(a), serde_json::from_slice::<Value>(b)) else {
        return;
    };
    for style in [Style::OpenAi, Style::OpenAiResponses, Style::Anthropic, Style::Gemini] {
        let _ = for_style(style, &schema);
    }
    let mut undone = value.clone();
    undo_nullable(&mut undone, &schema);
    assert!(only_removed(&value, &undone), "undo changed more than nulls: {value} -> {undone}");
}

/// Whether `after` is `before` with some null object members removed.
fn only_removed(before: &Value, after: &Value) -> bool {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => {
            a.keys().all(|k| b.contains_key(k))
                && b.iter().all(|(k, bv)| match a.get(k) {
                    Some(av) => only_removed(bv, av),
                    None => bv.is_null(),
                })
        }
        (Value::Array(b), Value::Array(a)) => b.len() == a.len() && b.iter().zip(a).all(|(x, y)| only_removed(x, y)),
        (b, a) => a == b,
    }
}
