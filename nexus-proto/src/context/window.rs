//! Context windows: the built-in table of current models, and what a
//! provider's "too long" error says about the window.

use crate::error::ProviderError;

/// Context windows (input plus output tokens) of current models, by model id
/// prefix; the longest matching prefix wins. Dated and suffixed ids
/// (`claude-sonnet-4-5-20250929`, `gpt-4o-2024-08-06`) match their family.
const WINDOWS: &[(&str, u64)] = &[
    // Anthropic: 200K for every current model (1M Sonnet is a beta a host opts into).
    ("claude-", 200_000),
    // OpenAI.
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("gpt-oss", 131_072),
    // Gemini.
    ("gemini-1.5-pro", 2_097_152),
    ("gemini-", 1_048_576),
];

/// The built-in context window of `model`, `None` for a model the table does
/// not know (the run then has no budget unless the config names one).
pub fn builtin_window(model: &str) -> Option<u64> {
    let model = model.rsplit('/').next().unwrap_or(model);
    WINDOWS
        .iter()
        .filter(|(prefix, _)| model.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, w)| *w)
}

/// What a provider's refusal of an over-long request says: the window, and
/// the size of the refused prompt when the message gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLong {
    /// The window the provider names (`M` of "N > M").
    pub window: Option<u64>,
    /// The refused prompt's size in the provider's tokens (`N`).
    pub prompt: Option<u64>,
}

/// Reads a provider's "too long" error, `None` when the error is another.
///
/// - Anthropic: `prompt is too long: 208310 tokens > 200000 maximum`
/// - OpenAI Chat: `This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens. …` (code `context_length_exceeded`)
/// - OpenAI Responses: `Your input exceeds the context window of this model. …` (code `context_length_exceeded`, no numbers)
/// - Gemini: `The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).`
pub(crate) fn too_long(err: &ProviderError) -> Option<TooLong> {
    if err.status != Some(400) && err.status != Some(413) {
        return None;
    }
    let m = err.message.as_str();
    if let Some(rest) = m.strip_prefix("prompt is too long: ") {
        let (n, rest) = leading_number(rest)?;
        let after = rest.split_once('>').map(|(_, r)| r.trim_start())?;
        let (w, _) = leading_number(after)?;
        return Some(TooLong { window: Some(w), prompt: Some(n) });
    }
    if let Some(rest) = m.split_once("maximum context length is ").map(|(_, r)| r) {
        let window = leading_number(rest).map(|(w, _)| w);
        let prompt = m.split_once("resulted in ").and_then(|(_, r)| leading_number(r)).map(|(n, _)| n);
        return Some(TooLong { window, prompt });
    }
    if let Some(rest) = m.split_once("The input token count (").map(|(_, r)| r) {
        let prompt = leading_number(rest).map(|(n, _)| n);
        let window = m.split_once("tokens allowed (").and_then(|(_, r)| leading_number(r)).map(|(w, _)| w);
        return Some(TooLong { window, prompt });
    }
    if err.kind == "context_length_exceeded" || err.body.contains("\"context_length_exceeded\"") {
        return Some(TooLong { window: None, prompt: None });
    }
    None
}

/// The decimal number at the start of `s` and the text after it.
fn leading_number(s: &str) -> Option<(u64, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n = s.get(..end)?.parse().ok()?;
    Some((n, &s[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(status: u16, kind: &str, message: &str) -> ProviderError {
        ProviderError {
            status: Some(status),
            kind: kind.into(),
            message: message.into(),
            body: String::new(),
            retryable: false,
            retry_after_ms: None,
        }
    }

    #[test]
    fn the_table_matches_families_by_longest_prefix() {
        assert_eq!(builtin_window("claude-sonnet-4-5-20250929"), Some(200_000));
        assert_eq!(builtin_window("gpt-4o-mini"), Some(128_000));
        assert_eq!(builtin_window("gpt-4.1-mini"), Some(1_047_576));
        assert_eq!(builtin_window("gpt-4"), Some(8_192));
        assert_eq!(builtin_window("models/gemini-2.5-pro"), Some(1_048_576));
        assert_eq!(builtin_window("gemini-1.5-pro-002"), Some(2_097_152));
        assert_eq!(builtin_window("my-local-model"), None);
    }

    #[test]
    fn each_providers_too_long_text_is_read() {
        let a = err(400, "invalid_request_error", "prompt is too long: 208310 tokens > 200000 maximum");
        assert_eq!(too_long(&a), Some(TooLong { window: Some(200_000), prompt: Some(208_310) }));
        let o = err(
            400,
            "context_length_exceeded",
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 8227 tokens. Please reduce the length of the messages.",
        );
        assert_eq!(too_long(&o), Some(TooLong { window: Some(8192), prompt: Some(8227) }));
        let g = err(
            400,
            "INVALID_ARGUMENT",
            "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
        );
        assert_eq!(too_long(&g), Some(TooLong { window: Some(1_048_576), prompt: Some(1_200_293) }));
        let r = err(
            400,
            "context_length_exceeded",
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
        );
        assert_eq!(too_long(&r), Some(TooLong { window: None, prompt: None }));
        assert_eq!(too_long(&err(400, "invalid_request_error", "max_tokens: Field required")), None);
        assert_eq!(too_long(&err(500, "api_error", "prompt is too long: 2 tokens > 1 maximum")), None);
        assert_eq!(too_long(&err(400, "x", "prompt is too long: lots")), None, "no number, no guess");
    }
}
