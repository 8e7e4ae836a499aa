//! Best-effort parse of JSON text that was cut off.
//!
//! A stream can stop in the middle of a tool call's arguments (the output cap
//! hit while the model was writing them). The raw text is kept as it came, but
//! hosts and the loop still want to see what the model had written so far. The
//! rules follow the partial mode of the official Anthropic SDK's parser: every
//! value that was complete is kept, open arrays and objects are closed, and an
//! unfinished trailing scalar (a string, a literal, a number that is not yet a
//! valid number) is dropped together with its key.
//!
//! Only truncation is forgiven. Text that is wrong before its end (a bad
//! character, a missing `:`, a trailing comma followed by a closing bracket,
//! garbage after a complete value) is not a cut-off document, and yields `None`.

use serde_json::{Map, Value};

/// Nesting deeper than this is refused rather than risking the stack on
/// hostile input (the same limit `serde_json` applies).
const MAX_DEPTH: usize = 128;

/// Parses `raw` as a possibly truncated JSON document.
///
/// Returns the complete document when `raw` is valid JSON, the recoverable
/// prefix when `raw` is valid JSON cut off at its end, and `None` when nothing
/// can be recovered (empty text, a truncated top-level scalar, a syntax error).
pub(crate) fn parse_partial(raw: &str) -> Option<Value> {
    let mut p = Parser { src: raw, bytes: raw.as_bytes(), pos: 0 };
    p.skip_ws();
    match p.value(0) {
        Ok(Parsed::Complete(v)) => {
            p.skip_ws();
            (p.pos == p.bytes.len()).then_some(v)
        }
        Ok(Parsed::Truncated(v)) => v,
        Err(Invalid) => None,
    }
}

/// The outcome of reading one value.
enum Parsed {
    /// The value ended before the text did (or exactly at its end).
    Complete(Value),
    /// The text ended inside the value: a container closed early, or nothing
    /// for a scalar that was still being written.
    Truncated(Option<Value>),
}

/// The text is not a prefix of any JSON document.
struct Invalid;

struct Parser<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Parsed, Invalid> {
        if depth > MAX_DEPTH {
            return Err(Invalid);
        }
        match self.peek() {
            None => Ok(Parsed::Truncated(None)),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(match self.string()? {
                Some(s) => Parsed::Complete(Value::String(s)),
                None => Parsed::Truncated(None),
            }),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(Invalid),
        }
    }

    fn object(&mut self, depth: usize) -> Result<Parsed, Invalid> {
        self.pos += 1; // '{'
        let mut map = Map::new();
        let truncated = |map: Map<String, Value>| Ok(Parsed::Truncated(Some(Value::Object(map))));
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Parsed::Complete(Value::Object(map)));
        }
        loop {
            self.skip_ws();
            match self.peek() {
                None => return truncated(map),
                Some(b'"') => {}
                Some(_) => return Err(Invalid),
            }
            let Some(key) = self.string()? else {
                return truncated(map);
            };
            self.skip_ws();
            match self.peek() {
                None => return truncated(map),
                Some(b':') => self.pos += 1,
                Some(_) => return Err(Invalid),
            }
            self.skip_ws();
            match self.value(depth + 1)? {
                Parsed::Complete(v) => {
                    map.insert(key, v);
                }
                Parsed::Truncated(v) => {
                    if let Some(v) = v {
                        map.insert(key, v);
                    }
                    return truncated(map);
                }
            }
            self.skip_ws();
            match self.peek() {
                None => return truncated(map),
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Parsed::Complete(Value::Object(map)));
                }
                Some(_) => return Err(Invalid),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<Parsed, Invalid> {
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Parsed::Complete(Value::Array(items)));
        }
        loop {
            self.skip_ws();
            match self.value(depth + 1)? {
                Parsed::Complete(v) => items.push(v),
                Parsed::Truncated(v) => {
                    items.extend(v);
                    return Ok(Parsed::Truncated(Some(Value::Array(items))));
                }
            }
            self.skip_ws();
            match self.peek() {
                None => return Ok(Parsed::Truncated(Some(Value::Array(items)))),
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Parsed::Complete(Value::Array(items)));
                }
                Some(_) => return Err(Invalid),
            }
        }
    }

    /// A string starting at the current `"`: `Some` when it closed, `None` when
    /// the text ended inside it. Escapes are decoded by `serde_json` itself so
    /// the two parsers can never disagree about a complete string.
    fn string(&mut self) -> Result<Option<String>, Invalid> {
        let start = self.pos;
        let mut i = start + 1;
        loop {
            match self.bytes.get(i) {
                None => {
                    self.pos = self.bytes.len();
                    return Ok(None);
                }
                Some(b'"') => break,
                Some(b'\\') => i += 2,
                Some(_) => i += 1,
            }
        }
        let end = i + 1;
        let text = self.src.get(start..end).ok_or(Invalid)?;
        let s = serde_json::from_str::<String>(text).map_err(|_| Invalid)?;
        self.pos = end;
        Ok(Some(s))
    }

    fn literal(&mut self, word: &str, value: Value) -> Result<Parsed, Invalid> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        if rest.starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(Parsed::Complete(value))
        } else if word.as_bytes().starts_with(rest) {
            // The text ends inside the word (`tr`, `nul`).
            self.pos = self.bytes.len();
            Ok(Parsed::Truncated(None))
        } else {
            Err(Invalid)
        }
    }

    /// A number. At the very end of the text a number that does not parse yet
    /// (`-`, `1.`, `2e`) is an unfinished scalar, not an error.
    fn number(&mut self) -> Result<Parsed, Invalid> {
        let start = self.pos;
        let mut end = start;
        while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.bytes.get(end) {
            end += 1;
        }
        self.pos = end;
        let text = self.src.get(start..end).ok_or(Invalid)?;
        match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Number(_)) => Ok(Parsed::Complete(v)),
            _ if end == self.bytes.len() && is_number_prefix(text) => Ok(Parsed::Truncated(None)),
            _ => Err(Invalid),
        }
    }
}

/// Whether more characters could still make `text` a JSON number
/// (`-`, `1.`, `2e+` can; `01`, `1.2.` cannot).
fn is_number_prefix(text: &str) -> bool {
    #[derive(Clone, Copy)]
    enum S {
        Start,
        Minus,
        Zero,
        Int,
        Dot,
        Frac,
        E,
        ESign,
        Exp,
    }
    let mut state = S::Start;
    for b in text.bytes() {
        state = match (state, b) {
            (S::Start, b'-') => S::Minus,
            (S::Start | S::Minus, b'0') => S::Zero,
            (S::Start | S::Minus, b'1'..=b'9') => S::Int,
            (S::Int, b'0'..=b'9') => S::Int,
            (S::Zero | S::Int, b'.') => S::Dot,
            (S::Dot | S::Frac, b'0'..=b'9') => S::Frac,
            (S::Zero | S::Int | S::Frac, b'e' | b'E') => S::E,
            (S::E, b'+' | b'-') => S::ESign,
            (S::E | S::ESign | S::Exp, b'0'..=b'9') => S::Exp,
            _ => return false,
        };
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Expectations are what the official Anthropic SDK's partial-mode parser
    /// (`jiter.from_json(..., partial_mode=True)`) returns for the same text.
    #[test]
    fn truncated_documents_keep_what_was_complete() {
        let cases: &[(&str, Value)] = &[
            (r#"{"a": "x"#, json!({})),
            (r#"{"a": 1"#, json!({"a": 1})),
            (r#"{"a": 12."#, json!({})),
            (r#"{"a": -"#, json!({})),
            (r#"{"a": tr"#, json!({})),
            (r#"{"a": true"#, json!({"a": true})),
            (r#"{"a": nul"#, json!({})),
            (r#"{"a":"#, json!({})),
            (r#"{"a""#, json!({})),
            (r#"{"a"#, json!({})),
            ("{", json!({})),
            ("[", json!([])),
            ("[1, 2", json!([1, 2])),
            ("[1, 2,", json!([1, 2])),
            (r#"{"a": [1, {"b": "c"#, json!({"a": [1, {}]})),
            (r#"{"a": 1e"#, json!({})),
            (r#"{"a": 1e5"#, json!({"a": 100000.0})),
            (r#"{"a": "x\"#, json!({})),
            (r#"{"a": "x\u00"#, json!({})),
            (r#"{"a": 1, "#, json!({"a": 1})),
            ("12", json!(12)),
            ("[tr", json!([])),
            (r#"{"a": ["#, json!({"a": []})),
            (r#"{"a": {"b": "#, json!({"a": {}})),
            (r#"{"a": 1.5"#, json!({"a": 1.5})),
            (r#"[1, "ab"#, json!([1])),
            (r#"{"k": "v", "k2"#, json!({"k": "v"})),
            (r#"{"a": "\ud83d"#, json!({})),
            ("[null, fals", json!([null])),
            (r#"{"a": 0"#, json!({"a": 0})),
            ("[-0.", json!([])),
            (r#"{"a": 2e+"#, json!({})),
        ];
        for (raw, want) in cases {
            assert_eq!(parse_partial(raw).as_ref(), Some(want), "input {raw:?}");
        }
    }

    #[test]
    fn complete_documents_parse_like_serde_json() {
        for raw in [r#"{"a": 1, "b": "x"}"#, r#"  [1, {"z": null}, "\u00e9"]  "#, "true", "-0.5e3", r#""s""#] {
            let want: Value = serde_json::from_str(raw).unwrap();
            assert_eq!(parse_partial(raw), Some(want), "input {raw:?}");
        }
    }

    /// Text that is wrong before its end is not a cut-off document. (Where the
    /// SDK's parser differs, it is noted: it ignores anything after the first
    /// complete value; here that is an error.)
    #[test]
    fn errors_before_the_end_recover_nothing() {
        for raw in [
            "",
            "  ",
            r#""abc"#, // a lone truncated string has no complete part
            "tru",
            "-",
            "x",
            "[1,]",
            r#"{"a": 1,}"#,
            r#"{"a" 1"#,
            r#"{"a": 01"#,
            "[1.2.", // SDK: [1.2]
            "[--",
            r#"{"a": 1} x"#,  // SDK: {"a": 1}
            r#"{"a": 1 "b""#, // SDK: {"a": 1}
            r#"{"a":"b"}}"#,  // SDK: {"a": "b"}
            r#"{"a": "\x"}"#,
            "{1: 2}",
        ] {
            assert_eq!(parse_partial(raw), None, "input {raw:?}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let deep = "[".repeat(100_000);
        assert_eq!(parse_partial(&deep), None);
        let ok = "[".repeat(MAX_DEPTH);
        assert!(parse_partial(&ok).is_some());
    }

    #[test]
    fn multibyte_text_is_cut_safely() {
        let full = r#"{"city": "Zürich", "note": "naïve façade"}"#;
        for end in 0..=full.len() {
            if let Some(prefix) = full.get(..end) {
                let _ = parse_partial(prefix); // must not panic at any cut
            }
        }
        // Cut inside the second string: only the first pair was complete.
        let cut = full.find(" façade").unwrap();
        assert_eq!(parse_partial(&full[..cut]), Some(json!({"city": "Zürich"})));
    }

    proptest::proptest! {
        /// Differential check against `serde_json`: whatever text parses there
        /// parses here to the same value, and every prefix of any text is
        /// handled without a panic.
        #[test]
        fn agrees_with_serde_json_and_never_panics(
            parts in proptest::collection::vec(proptest::sample::select(vec![
                "{", "}", "[", "]", ",", ":", " ", "\"k\"", "\"v\\n\"", "\"\\u00e9\"", "1", "-2.5e3", "0",
                "true", "false", "null", "\"", "\\",
            ]), 0..30)
        ) {
            let text = parts.concat();
            if let Ok(want) = serde_json::from_str::<Value>(&text) {
                proptest::prop_assert_eq!(parse_partial(&text), Some(want));
            }
            for end in 0..text.len() {
                let _ = parse_partial(&text[..end]);
            }
        }
    }
}
