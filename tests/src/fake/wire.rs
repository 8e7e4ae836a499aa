//! What the three wire formats share: what one answer contains, stable
//! ids, how text is cut into stream pieces, and the reject type.

use std::borrow::Cow;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::value::RawValue;

use super::script::{ToolCallSpec, Turn};

/// A request the provider refuses: the status and the provider-shaped body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// HTTP status.
    pub status: u16,
    /// The JSON error body.
    pub body: Vec<u8>,
}

/// What the request says, once a style has read it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Parsed {
    /// The model asked for.
    pub model: String,
    /// Whether an SSE stream was asked for.
    pub stream: bool,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
    /// Assistant (`model`) messages in the transcript: the turn index.
    pub assistant_turns: usize,
    /// Messages (Gemini: contents; Responses: input items, a model turn counting once) in the transcript.
    pub messages: usize,
    /// The text of every tool result in the transcript, in order.
    pub tool_results: Vec<String>,
}

/// Everything needed to render one scripted answer.
#[derive(Debug, Clone, Copy)]
pub struct Ctx<'a> {
    /// The model name (echoed in the body).
    pub model: &'a str,
    /// Which turn of the script this is.
    pub turn_index: usize,
    /// The turn.
    pub turn: &'a Turn,
    /// A huge-body fault: the text is this many bytes of filler instead.
    pub huge: Option<usize>,
    /// OpenAI: send the usage-only chunk and `usage: null` on the others.
    pub include_usage: bool,
    /// OpenAI Responses: the request crossed its `compact_threshold`, so the
    /// answer starts with a `compaction` item.
    pub compaction: bool,
}

impl Ctx<'_> {
    /// The visible text to send, if any.
    pub fn text(&self) -> Option<Cow<'_, str>> {
        match self.huge {
            Some(n) => Some(Cow::Owned(filler(n))),
            None => self.turn.text.as_deref().map(Cow::Borrowed),
        }
    }

    /// Stream pieces of the visible text.
    pub fn text_pieces(&self) -> Vec<String> {
        match (self.huge, self.text()) {
            (Some(_), Some(t)) => fixed_pieces(&t, 16 * 1024),
            (None, Some(t)) => word_pieces(&t),
            _ => Vec::new(),
        }
    }

    /// The id of call `index`: the scripted one, or a stable generated one.
    pub fn call_id(&self, index: usize, prefix: &str) -> String {
        match self.turn.tool_calls.get(index).and_then(|c| c.id.clone()) {
            Some(id) => id,
            None => stable_id(prefix, &[self.model, &self.turn_index.to_string(), &index.to_string()], 24),
        }
    }

    /// A stable per-answer id (`msg_…`, `chatcmpl-…`).
    pub fn answer_id(&self, prefix: &str) -> String {
        stable_id(prefix, &[self.model, &self.turn_index.to_string(), "answer"], 24)
    }
}

/// `n` bytes of readable filler.
fn filler(n: usize) -> String {
    const UNIT: &str = "lorem ipsum dolor sit amet ";
    let mut s = UNIT.repeat(n / UNIT.len() + 1);
    s.truncate(n);
    s
}

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// FNV-1a over the parts (separated), so ids depend on the request alone
/// and a conversation resumed in another process sees the same ids.
fn fnv(parts: &[&str], salt: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ salt;
    for part in parts {
        for b in part.bytes().chain(std::iter::once(0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// `prefix` + `len` base62 characters derived from `parts`.
pub fn stable_id(prefix: &str, parts: &[&str], len: usize) -> String {
    let mut out = String::from(prefix);
    let mut salt = 0u64;
    while out.len() < prefix.len() + len {
        let mut h = fnv(parts, salt);
        for _ in 0..10 {
            let digit = (h % 62) as usize;
            out.push(char::from(BASE62.get(digit).copied().unwrap_or(b'0')));
            h /= 62;
        }
        salt += 1;
    }
    out.truncate(prefix.len() + len);
    out
}

/// Cuts text into word-sized pieces (each ends after a space once it has a
/// few characters, or at 12 characters), never inside a UTF-8 character.
pub fn word_pieces(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        cur.push(c);
        let n = cur.chars().count();
        if (c == ' ' && n >= 4) || n >= 12 {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Cuts text into pieces of at most `size` bytes on character boundaries.
pub fn fixed_pieces(text: &str, size: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if cur.len() + c.len_utf8() > size && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Cuts tool-argument text into several fragments (about four, at least one
/// character each), the way providers stream partial JSON.
pub fn argument_fragments(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    let size = chars.len().div_ceil(4).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// A tool call's arguments for a body that carries them as a JSON object:
/// the scripted text verbatim when it is JSON, else the text as a string.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Args {
    /// Valid JSON, kept byte-exact.
    Raw(Box<RawValue>),
    /// Not JSON: sent as a string so the body stays valid.
    Text(String),
}

impl Args {
    /// Reads the scripted argument text (empty text is `{}`).
    pub fn of(call: &ToolCallSpec) -> Args {
        let text = if call.arguments.trim().is_empty() { "{}".to_string() } else { call.arguments.clone() };
        match RawValue::from_string(text.clone()) {
            Ok(raw) => Args::Raw(raw),
            Err(_) => Args::Text(text),
        }
    }
}

/// The neutral stop names a script may use.
pub fn neutral_stop(reason: &str) -> Option<[&'static str; 3]> {
    // [anthropic, openai, gemini]
    Some(match reason {
        "end_turn" => ["end_turn", "stop", "STOP"],
        "tool_use" => ["tool_use", "tool_calls", "STOP"],
        "max_tokens" => ["max_tokens", "length", "MAX_TOKENS"],
        "stop_sequence" => ["stop_sequence", "stop", "STOP"],
        "refusal" => ["refusal", "content_filter", "SAFETY"],
        "content_filter" => ["refusal", "content_filter", "SAFETY"],
        "pause_turn" => ["pause_turn", "stop", "STOP"],
        _ => return None,
    })
}

/// Seconds since the Unix epoch (OpenAI's `created`).
pub fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// JSON text of a value; serialization of these plain types cannot fail,
/// but an empty object keeps the server answering if it ever did.
pub fn to_json<T: Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_string())
}

/// Pretty JSON bytes (the providers' error bodies are indented).
pub fn to_pretty<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec_pretty(value).unwrap_or_else(|_| b"{}".to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_distinct() {
        let a = stable_id("toolu_01", &["m", "0", "0"], 22);
        assert_eq!(a, stable_id("toolu_01", &["m", "0", "0"], 22));
        assert_ne!(a, stable_id("toolu_01", &["m", "0", "1"], 22));
        assert_ne!(a, stable_id("toolu_01", &["m0", "", "0"], 22), "parts are separated");
        assert_eq!(a.len(), "toolu_01".len() + 22);
        assert!(a.bytes().skip(8).all(|b| b.is_ascii_alphanumeric()));
    }

    #[test]
    fn pieces_rejoin_to_the_text_and_respect_char_boundaries() {
        let text = "Grüße aus Köln — héllo wörld, ça va? 日本語のテキスト";
        assert_eq!(word_pieces(text).concat(), text);
        assert!(word_pieces(text).len() > 3);
        assert_eq!(fixed_pieces(text, 5).concat(), text);
        assert!(fixed_pieces(text, 5).iter().all(|p| p.len() <= 5));
        let args = r#"{"city":"Paris","units":"c"}"#;
        let frags = argument_fragments(args);
        assert_eq!(frags.concat(), args);
        assert!(frags.len() >= 3, "several fragments: {frags:?}");
        assert!(argument_fragments("").is_empty());
    }

    #[test]
    fn args_keep_json_text_verbatim() {
        let call = ToolCallSpec { name: "f".into(), arguments: r#"{"b": 1, "a": 2}"#.into(), id: None };
        assert_eq!(to_json(&Args::of(&call)), r#"{"b": 1, "a": 2}"#);
        let broken = ToolCallSpec { name: "f".into(), arguments: r#"{"b": "#.into(), id: None };
        assert_eq!(to_json(&Args::of(&broken)), r#""{\"b\": ""#);
    }
}
