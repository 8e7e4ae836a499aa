//! Request bodies written straight to bytes.
//!
//! [`Style::encode_body`](super::Style::encode_body) builds a
//! [`serde_json::Value`] tree, which copies every string of the transcript and
//! every tool schema into it, only for the tree to be serialized and dropped.
//! The writers here serialize from borrowed views of the transcript instead
//! and produce the same bytes `serde_json::to_vec` produces for that tree,
//! except in one place: a call's arguments on a wire that takes them as an
//! object keep the model's key order ([`CallObject`]).
//!
//! Matching those bytes takes two rules. serde_json (built without
//! `preserve_order`) keeps object keys in a `BTreeMap`, so every object is
//! written with its keys in byte order: the view structs declare their fields
//! in that order, and the top-level keys are sorted here. And caller params
//! are merged the way `encode_body` merges them: conversation keys are
//! skipped, a caller key replaces ours, and when both are objects the caller's
//! inner keys are inserted into ours.

use std::borrow::Cow;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::RESERVED_PARAMS;

/// The value of one top-level body key.
pub(crate) enum Field<'a, P> {
    /// A string of ours (`model`, Anthropic's `system`).
    Str(&'a str),
    /// A count of ours (`max_tokens`).
    U32(u32),
    /// `true` (`stream`).
    True,
    /// A small object of ours that caller params may merge into
    /// (`stream_options`, `generationConfig`).
    Owned(Value),
    /// A caller param.
    Param(&'a Value),
    /// A part of the conversation: the style's own writer.
    Part(P),
    /// JSON written before, as it stands (the tools, see [`crate::tool::ToolSet`]).
    Raw(&'a RawValue),
    /// The typed-output field, written from its format (a caller param
    /// merging into it makes it [`Field::Owned`] first).
    Output(crate::output::wire::View<'a>),
}

impl<P: Serialize> Serialize for Field<'_, P> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Field::Str(v) => s.serialize_str(v),
            // `Value::from(u32)` is an unsigned number: the same digits.
            Field::U32(v) => s.serialize_u32(*v),
            Field::True => s.serialize_bool(true),
            Field::Owned(v) => v.serialize(s),
            Field::Param(v) => v.serialize(s),
            Field::Part(p) => p.serialize(s),
            Field::Raw(v) => v.serialize(s),
            Field::Output(v) => v.serialize(s),
        }
    }
}

/// The top-level keys of a body, before caller params are merged in.
pub(crate) type Fields<'a, P> = Vec<(&'a str, Field<'a, P>)>;

/// Merges `params` into `fields` and appends the body to `out`.
///
/// A param never lands on a conversation part: every key whose value is a
/// [`Field::Part`] is in [`RESERVED_PARAMS`], and reserved keys are skipped
/// first (a test holds the styles to this). Were one to land there, a caller
/// object would replace the part where `encode_body` merges into it.
///
/// `tools`, when given, is the style's encoding of the call's tools, written
/// in place of the `tools` part: the same bytes, made once.
pub(crate) fn write<'a, P: Serialize>(
    mut fields: Fields<'a, P>,
    params: &'a Map<String, Value>,
    tools: Option<&'a RawValue>,
    out: &mut Vec<u8>,
) {
    if let Some(raw) = tools {
        if let Some((_, field)) = fields.iter_mut().find(|(name, _)| *name == "tools") {
            *field = Field::Raw(raw);
        }
    }
    for (key, theirs) in params {
        if RESERVED_PARAMS.contains(&key.as_str()) {
            continue;
        }
        if let Some((_, field)) = fields.iter_mut().find(|(name, _)| *name == key.as_str()) {
            if let (Field::Output(view), true) = (&*field, theirs.is_object()) {
                // Merged into as `encode_body` merges into its tree.
                *field = Field::Owned(view.to_value());
            }
        }
        match (fields.iter_mut().find(|(name, _)| *name == key.as_str()), theirs) {
            (None, _) => fields.push((key.as_str(), Field::Param(theirs))),
            (Some((_, Field::Owned(Value::Object(ours)))), Value::Object(theirs)) => {
                for (k, v) in theirs {
                    ours.insert(k.clone(), v.clone());
                }
            }
            (Some((_, ours)), _) => {
                debug_assert!(!matches!(ours, Field::Part(_)), "param `{key}` lands on a conversation part");
                *ours = Field::Param(theirs);
            }
        }
    }
    fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let start = out.len();
    let mut ser = serde_json::Serializer::new(&mut *out);
    let result = (|| {
        let mut map = ser.serialize_map(Some(fields.len()))?;
        for (key, value) in &fields {
            map.serialize_entry(key, value)?;
        }
        map.end()
    })();
    if result.is_err() {
        // Writing to a Vec cannot fail and no view returns an error; should
        // one ever, the body is empty, as `to_vec(..).unwrap_or_default()` gives.
        out.truncate(start);
    }
}

/// A JSON string made of several pieces, written without joining them first.
/// serde_json escapes what a `Display` writes piece by piece, and escaping
/// works per character, so the bytes equal those of the joined string.
pub(crate) struct Joined<I>(pub I);

impl<'a, I: Iterator<Item = &'a str> + Clone> std::fmt::Display for Joined<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for piece in self.0.clone() {
            f.write_str(piece)?;
        }
        Ok(())
    }
}

impl<'a, I: Iterator<Item = &'a str> + Clone> Serialize for Joined<I> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// Serializes a sequence from an iterator (cloned, since `serialize` takes `&self`).
pub(crate) struct Seq<I>(pub I);

impl<I> Serialize for Seq<I>
where
    I: Iterator + Clone,
    I::Item: Serialize,
{
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.clone())
    }
}

/// Whether `text` is exactly serde_json's compact encoding of `value`. Then
/// parsing `text` gives `value` back and re-encoding it gives `text` again
/// (numbers round-trip: serde_json is built with `float_roundtrip`), so a
/// writer may serialize `value` in place of parsing `text`. Compares while
/// serializing, without a buffer.
pub(crate) fn is_encoding_of(text: &str, value: &Value) -> bool {
    /// Matches written bytes against what is left of `text`.
    struct Prefix<'a> {
        rest: &'a [u8],
        differs: bool,
    }
    impl std::io::Write for Prefix<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            // A mismatch is recorded, not returned: an error would allocate.
            match self.rest.strip_prefix(buf) {
                Some(rest) if !self.differs => self.rest = rest,
                _ => self.differs = true,
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut w = Prefix { rest: text.as_bytes(), differs: false };
    serde_json::to_writer(&mut w, value).is_ok() && !w.differs && w.rest.is_empty()
}

/// A text content part, `{"text", "type"}`: Chat Completions writes it as
/// `text`, Responses as `input_text`.
#[derive(serde::Serialize)]
pub(crate) struct TextPart<'a> {
    pub(crate) text: &'a str,
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
}

/// A call's object arguments as a writer puts them on a wire that takes an
/// object (Anthropic `input`, Gemini `args`): the model's own text when it
/// says what the chosen value says, so its keys keep the order the model
/// wrote them in; otherwise the chosen value (key order then byte order).
pub(crate) enum CallObject<'a> {
    /// The raw arguments, compact.
    Ordered(Cow<'a, str>),
    /// The value `encode_body` writes.
    Value(Cow<'a, Value>),
}

impl<'a> CallObject<'a> {
    /// `chosen` is the object the style's rules pick for the call (its
    /// `encode_body` writes it); `arguments` the call's raw text.
    pub(crate) fn new(arguments: &'a str, chosen: Cow<'a, Value>) -> CallObject<'a> {
        if !chosen.is_object() || !arguments.trim_start().starts_with('{') {
            return CallObject::Value(chosen);
        }
        // The common case, nothing to parse: the text already is the
        // compact, byte-ordered encoding (one key, or keys the model sent sorted).
        if is_encoding_of(arguments, &chosen) {
            return CallObject::Ordered(Cow::Borrowed(arguments));
        }
        match serde_json::from_str::<Value>(arguments) {
            Ok(parsed) if parsed == *chosen => CallObject::Ordered(compact(arguments)),
            _ => CallObject::Value(chosen),
        }
    }
}

impl Serialize for CallObject<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            // Valid JSON (it parsed above), so it goes out as it stands.
            CallObject::Ordered(text) => match serde_json::from_str::<&RawValue>(text) {
                Ok(raw) => raw.serialize(s),
                Err(e) => Err(serde::ser::Error::custom(e)),
            },
            CallObject::Value(v) => v.serialize(s),
        }
    }
}

/// Valid JSON text without the whitespace between its tokens. Streamed
/// arguments arrive in pieces that carry the model's spacing
/// (`{"city": "Paris"}`); a request writes them compact, as serde_json
/// writes everything else. Whitespace inside strings is kept: a string is
/// copied from its opening quote to its closing one, escapes included.
pub(crate) fn compact(text: &str) -> Cow<'_, str> {
    let is_space = |b: u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r');
    if !text.bytes().any(is_space) {
        return Cow::Borrowed(text);
    }
    let mut out = Vec::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in text.as_bytes() {
        if in_string {
            out.push(b);
            if escaped {
                escaped = false;
            } else if b == b'\\' {
                escaped = true;
            } else if b == b'"' {
                in_string = false;
            }
        } else if b == b'"' {
            in_string = true;
            out.push(b);
        } else if !is_space(b) {
            out.push(b);
        }
    }
    // Only ASCII whitespace outside strings was left out: still UTF-8.
    String::from_utf8(out).map_or(Cow::Borrowed(text), Cow::Owned)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::message::Message;
    use crate::provider::{anthropic, gemini, openai, responses, ModelCall};
    use crate::tool::ToolDecl;

    /// The keys of `fields` whose value is a conversation part.
    fn part_keys<P>(fields: Fields<'_, P>) -> Vec<&str> {
        fields.into_iter().filter(|(_, v)| matches!(v, Field::Part(_))).map(|(k, _)| k).collect()
    }

    #[test]
    fn every_conversation_key_is_reserved() {
        // Every optional key present, so every part a style can write shows.
        let messages = [Message::user("hi")];
        let tools = [ToolDecl::new("t", "a tool", json!({"type": "object"}))];
        let params = Map::new();
        let call = ModelCall {
            model: "m",
            system: Some("be brief"),
            messages: &messages,
            tools: &tools,
            max_tokens: Some(10),
            stream: true,
            params: &params,
            output: None,
        };
        let keys = [
            part_keys(anthropic::body_fields(&call)),
            part_keys(openai::body_fields(&call)),
            part_keys(gemini::body_fields(&call)),
            part_keys(responses::body_fields(&call)),
        ];
        let all: Vec<&str> = keys.concat();
        assert_eq!(
            all,
            [
                "messages",
                "tools",
                "messages",
                "tools",
                "contents",
                "systemInstruction",
                "tools",
                "input",
                "tools",
                "include"
            ]
        );
        for key in all {
            assert!(RESERVED_PARAMS.contains(&key), "`{key}` is a conversation part but not reserved");
        }
    }

    /// A body written with a [`ToolSet`](crate::tool::ToolSet)'s encoding of
    /// the tools is byte for byte the body written from the declarations,
    /// in every style, with and without caller params and streaming.
    #[test]
    fn cached_tool_encodings_write_the_same_bodies() {
        use crate::provider::Style;
        use crate::tool::ToolSet;
        let messages = [Message::user("hi \"there\"\n")];
        let tools: ToolSet = vec![
            ToolDecl::new(
                "get_weather",
                "Weather for a city: \"quoted\", unicode \u{e9}, control \u{1}.",
                json!({"type": "object", "properties": {"city": {"type": "string", "description": "a </city>"}},
                       "required": ["city"], "additionalProperties": false}),
            ),
            ToolDecl::new("add", "Add two integers.", json!({"type": "object", "properties": {
                "a": {"type": "integer", "minimum": -1.5e300}, "b": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}})),
            ToolDecl::new("bare", "", Value::Null),
        ]
        .into();
        let mut params = Map::new();
        params.insert("temperature".into(), json!(0.2));
        params.insert("tools".into(), json!(["a caller's tools never replace ours"]));
        let no_params = Map::new();
        for style in [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses] {
            for params in [&no_params, &params] {
                for stream in [false, true] {
                    let call = ModelCall {
                        model: "m",
                        system: Some("be brief"),
                        messages: &messages,
                        tools: &tools,
                        max_tokens: Some(64),
                        stream,
                        params,
                        output: None,
                    };
                    let plain = style.body_bytes(&call);
                    let mut cached = Vec::new();
                    style.write_body_with(&call, tools.encoded(style), &mut cached);
                    assert_eq!(
                        String::from_utf8_lossy(&cached),
                        String::from_utf8_lossy(&plain),
                        "{style:?} stream={stream}"
                    );
                    // The encoding is made once and reused.
                    let shared = tools.clone();
                    let (once, again) =
                        (tools.encoded(style).expect("encoded"), shared.encoded(style).expect("encoded"));
                    assert!(std::ptr::eq(once, again));
                }
            }
        }
    }

    #[test]
    fn compact_drops_only_the_space_between_tokens() {
        let cases = [
            (r#"{"city": "Paris"}"#, r#"{"city":"Paris"}"#),
            ("{\n  \"a b\" : [1, 2 ,\t3]\r\n}", r#"{"a b":[1,2,3]}"#),
            (r#"{"q": "say \"hi there\" \\", "n": null}"#, r#"{"q":"say \"hi there\" \\","n":null}"#),
            (r#"{"ü": " ⟨ ⟩ "}"#, r#"{"ü":" ⟨ ⟩ "}"#),
        ];
        for (text, want) in cases {
            let got = compact(text);
            assert_eq!(got, want, "{text}");
            let (a, b): (Value, Value) = (serde_json::from_str(text).unwrap(), serde_json::from_str(&got).unwrap());
            assert_eq!(a, b, "the same JSON: {text}");
        }
        assert!(matches!(compact(r#"{"a":1}"#), Cow::Borrowed(_)), "nothing to drop, nothing copied");
    }

    #[test]
    fn call_objects_keep_the_model_order_only_when_they_say_what_the_value_says() {
        let write =
            |args: &str, chosen: Value| serde_json::to_string(&CallObject::new(args, Cow::Owned(chosen))).unwrap();
        assert_eq!(write(r#"{"z": 1, "a": [2]}"#, json!({"a": [2], "z": 1})), r#"{"z":1,"a":[2]}"#);
        assert_eq!(write(r#"{"a":1}"#, json!({"a": 1})), r#"{"a":1}"#);
        // Arguments that differ from the chosen value, are not an object, or
        // do not parse: the value, in byte order.
        assert_eq!(write(r#"{"z":1,"a":3}"#, json!({"a": 2, "z": 1})), r#"{"a":2,"z":1}"#);
        assert_eq!(write("[1]", json!({"b": 1, "a": 1})), r#"{"a":1,"b":1}"#);
        assert_eq!(write(r#"{"z":1,"a""#, json!({"z": 1})), r#"{"z":1}"#);
        assert_eq!(write("", json!({})), "{}");
    }
}
