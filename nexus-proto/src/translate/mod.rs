//! Single-turn translation between OpenAI Chat Completions and the other
//! wire formats, for callers who speak OpenAI function calling and want
//! Anthropic, Gemini or the OpenAI Responses API behind it.
//!
//! The caller owns the conversation and runs its own tools: one OpenAI
//! request in, exactly one provider request out, the provider's answer back
//! in OpenAI shapes. Nothing is executed and no state is kept between calls.
//!
//! * [`openai_request_to`] (and [`openai_request_bytes_to`]): an OpenAI
//!   request body → the provider request ([`TranslatedRequest`]). The body is
//!   read into the neutral transcript and encoded by the same provider
//!   modules the loop uses; only the settings a transcript does not carry
//!   (`tool_choice`, `temperature`, stop sequences, …) are added on top.
//! * [`response_to_openai`]: a whole provider response → a `chat.completion`.
//! * [`StreamTranslator`]: a provider SSE stream → `chat.completion.chunk`
//!   SSE lines, ending in `data: [DONE]`.
//! * [`error_to_openai`]: a provider error response → an OpenAI error object
//!   with the provider's own message and a matching status.
//! * For a `/v1/responses` surface: [`read_responses_request`] reads an
//!   OpenAI Responses request into the neutral form, and
//!   [`turn_to_responses`] / [`turn_to_responses_events`] write a decoded
//!   turn back as a Responses object or event stream.
//!
//! What the target cannot express is refused with a 400-style
//! [`TranslateError`] naming the parameter, never dropped: a request that
//! translates is a request whose every setting reaches the provider. OpenAI
//! → OpenAI passes the body through untouched.
//!
//! ## How each OpenAI request field lands
//!
//! | OpenAI | Anthropic | Gemini | OpenAI Responses |
//! | --- | --- | --- | --- |
//! | `system` / `developer` messages | `system` (joined, blank line between) | `systemInstruction` | `instructions` |
//! | consecutive `tool` messages | one user turn of `tool_result` blocks | one user turn of `functionResponse` parts (names recovered from the calls) | `function_call_output` items, one per call |
//! | assistant `tool_calls` | `tool_use` blocks (arguments parsed) | `functionCall` parts | `function_call` items (raw `arguments`) |
//! | `image_url` parts | `image` blocks (data URLs inline, http(s) by URL) | `inlineData` / `fileData` | `input_image` parts (`detail: auto`) |
//! | `tool_choice` auto / required / none / named | `{type: auto / any / none / tool}` | `functionCallingConfig.mode` AUTO / ANY / NONE / ANY + `allowedFunctionNames` | `tool_choice` `auto` / `required` / `none` / `{type: function, name}` |
//! | `parallel_tool_calls: false` | `disable_parallel_tool_use` | refused (no counterpart) | `parallel_tool_calls: false` |
//! | `function.strict: true` | tool `strict` | mode `VALIDATED` instead of `AUTO` | tool `strict: true` (otherwise `false`) |
//! | `max_completion_tokens` / `max_tokens` | `max_tokens` (4096 when unset: the API requires one) | `maxOutputTokens` | `max_output_tokens` |
//! | `temperature`, `top_p`, `stop` | `temperature` (0…1), `top_p`, `stop_sequences` | `temperature`, `topP`, `stopSequences` | `temperature`, `top_p`; `stop` refused |
//! | `response_format` json_schema / json_object | `output_config.format` / refused | `responseJsonSchema` / `responseMimeType` | `text.format` json_schema (name, strict kept) / json_object |
//! | `reasoning_effort` | `output_config.effort` | `thinkingConfig.thinkingLevel` | `reasoning.effort` |
//! | `seed`, `presence_penalty`, `frequency_penalty` | refused unless neutral | `seed`, `presencePenalty`, `frequencyPenalty` | refused unless neutral |
//! | `user` / `safety_identifier` | `metadata.user_id` | refused | `user` / `safety_identifier` |
//! | `metadata`, `service_tier`, `prompt_cache_key`, `prompt_cache_retention`, `store`, `verbosity` | refused | refused | the same (`verbosity` as `text.verbosity`) |
//!
//! A field set to `null`, or to the value that means "not set" (`n: 1`,
//! `logprobs: false`, zero penalties, `store: false`, …), is accepted
//! everywhere: dropping it changes nothing. Any other field the target has no
//! place for is a 400 naming it. Three things are deliberately not errors:
//! an image part's `detail` (a cost hint; the image itself reaches the
//! model), `stream_options.include_obfuscation` (it concerns the stream this
//! side writes, which carries no padding), and assistant `annotations` /
//! `reasoning_content` echoed back from an earlier answer (output-only data
//! no provider takes back unsigned).
//!
//! `temperature` and `top_p` reach Anthropic as given: the newest models
//! refuse them, older ones take them, and that is the provider's call to
//! make (its 400 comes back through [`error_to_openai`] with its message).
//! Assistant tool calls reach Gemini with the caller's ids (Gemini accepts
//! ids it did not issue) and, on the first call of each model turn, Google's
//! documented placeholder thought signature, since the real one cannot
//! travel through an OpenAI client.

use std::fmt;

use serde_json::{json, Value};

use crate::provider::Style;

mod anthropic_answer;
mod anthropic_in;
mod anthropic_out;
mod chat_borrowed;
mod conversation;
mod gemini_in;
mod gemini_out;
mod request;
mod response;
mod responses;
mod responses_surface;
mod stream;
mod surface;

pub use anthropic_in::anthropic_request_to;
pub use anthropic_out::{response_to_anthropic, turn_to_anthropic, AnthropicEmitter, AnthropicStream};
pub use gemini_in::gemini_request_to;
pub use gemini_out::{response_to_gemini, turn_to_gemini, GeminiEmitter, GeminiStream};
pub use request::{openai_request_bytes_to, openai_request_to};
pub use response::{
    error_to_openai, remote_error_to_openai, response_to_openai, response_to_openai_bytes, response_to_openai_with,
    turn_to_openai, turn_to_openai_bytes, CompletionBytes,
};
pub use responses::{
    read_responses_request, response_echo, turn_to_responses, turn_to_responses_events, ResponseMeta, ResponsesRequest,
    PROVIDER_DATA_KEY as RESPONSES_KEY,
};
pub use responses_surface::{response_to_responses, responses_request_to, ResponsesEmitter, ResponsesStream};
pub use stream::StreamTranslator;
pub use surface::{anthropic_error_json, gemini_error_json, Emitter, Surface, SurfaceRequest, SurfaceStream};

/// A request that failed to translate, or a provider failure, as an OpenAI
/// error: `{"error": {"message", "type", "param", "code"}}` with its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslateError {
    /// The HTTP status to answer with (400 for requests that cannot be translated).
    pub status: u16,
    /// What went wrong, for a human. For provider errors, the provider's own message.
    pub message: String,
    /// The OpenAI error type (`invalid_request_error`, `authentication_error`, `server_error`, …).
    pub kind: String,
    /// The request parameter at fault (`messages[2].content[0]`, `temperature`), when one is.
    pub param: Option<String>,
    /// A machine-readable code (`unsupported_parameter`, or the provider's own error type).
    pub code: Option<String>,
}

impl TranslateError {
    /// A 400 `invalid_request_error` about `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> TranslateError {
        TranslateError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error".to_string(),
            param: Some(param.into()),
            code: None,
        }
    }

    /// A 400 for a body that is not JSON (`code: invalid_json`), in the
    /// words of the dialect that was asked.
    pub fn invalid_json(message: impl Into<String>) -> TranslateError {
        TranslateError { code: Some("invalid_json".to_string()), param: None, ..TranslateError::invalid("", message) }
    }

    /// A 400 for a JSON body that is not an object.
    pub fn not_an_object(message: impl Into<String>) -> TranslateError {
        TranslateError { param: None, ..TranslateError::invalid("", message) }
    }

    /// A 400 for a setting the target provider has no way to express.
    pub fn unsupported(param: impl Into<String>, target: Style, why: impl fmt::Display) -> TranslateError {
        let param = param.into();
        TranslateError {
            message: format!("`{param}` cannot be translated for the {} upstream: {why}", target.name()),
            code: Some("unsupported_parameter".to_string()),
            ..TranslateError::invalid(param, String::new())
        }
    }

    /// The OpenAI error body: `{"error": {"message", "type", "param", "code"}}`.
    pub fn to_json(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        })
    }
}

impl fmt::Display for TranslateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}", self.message, self.status)?;
        if let Some(param) = &self.param {
            write!(f, ", param {param}")?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for TranslateError {}

/// `param[index]` in a request, written out only when an error names it:
/// a request that reads cleanly formats no path.
#[derive(Clone, Copy)]
pub(super) struct Item<P>(pub(super) P, pub(super) usize);

impl<P: fmt::Display> fmt::Display for Item<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[{}]", self.0, self.1)
    }
}

/// `param.key` in a request, written out only when an error names it.
#[derive(Clone, Copy)]
pub(super) struct Field<P>(pub(super) P, pub(super) &'static str);

impl<P: fmt::Display> fmt::Display for Field<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.0, self.1)
    }
}

/// One translated provider request: what to send, and how to read the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TranslatedRequest {
    /// The wire format of the upstream.
    pub style: Style,
    /// The model, as the caller named it (Gemini: without a `models/` prefix).
    pub model: String,
    /// The caller asked for a stream: the answer is SSE, read it with a [`StreamTranslator`].
    pub stream: bool,
    /// The caller asked for a final usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The JSON body to POST.
    pub body: Vec<u8>,
}

impl TranslatedRequest {
    /// The full URL of the call under `base_url` (the style's API root, e.g.
    /// `https://api.anthropic.com` or `https://generativelanguage.googleapis.com/v1beta`).
    pub fn url(&self, base_url: &str) -> String {
        self.style.endpoint(base_url, &self.model, self.stream)
    }

    /// The request headers: content type, API version, and the auth header when a key is given.
    pub fn headers(&self, api_key: Option<&str>) -> Vec<(String, String)> {
        let mut headers = self.style.base_headers();
        if self.stream {
            headers.push(("accept".to_string(), "text/event-stream".to_string()));
        }
        if let Some(key) = api_key.filter(|k| !k.is_empty()) {
            headers.push(self.style.auth_header(key));
        }
        headers
    }

    /// A [`StreamTranslator`] for this request's answer, when it streams.
    pub fn stream_translator(&self, meta: CompletionMeta) -> StreamTranslator {
        StreamTranslator::with_meta(self.style, meta, self.include_usage)
    }
}

/// What an OpenAI completion says about itself: its id, the model, and when
/// it was made. The core reads no clock, so the caller supplies `created`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionMeta {
    /// `chatcmpl-…`; also the seed of generated tool-call ids, so make it
    /// unique per response (ids must not repeat within a conversation).
    /// Empty: derived from the provider's response.
    pub id: String,
    /// The model name reported to the client.
    pub model: String,
    /// Unix seconds.
    pub created: u64,
}

impl CompletionMeta {
    /// Meta for `model`, the id derived from the provider's response, `created` 0.
    pub fn new(model: impl Into<String>) -> CompletionMeta {
        CompletionMeta { id: String::new(), model: model.into(), created: 0 }
    }
}

/// The OpenAI `finish_reason` for a turn: any tool call makes it
/// `tool_calls`; otherwise the output cap is `length`, a provider filter
/// or refusal `content_filter`, and every other end `stop`.
pub fn finish_reason(stop: crate::provider::StopReason, has_tool_calls: bool) -> &'static str {
    use crate::provider::StopReason;
    if has_tool_calls {
        return "tool_calls";
    }
    match stop {
        StopReason::MaxTokens => "length",
        StopReason::ContentFilter | StopReason::Refusal => "content_filter",
        _ => "stop",
    }
}

/// FNV-1a, 64-bit: a stable, dependency-free fingerprint used to derive ids
/// from response bytes when the caller gave none (no randomness in the core).
pub(crate) fn fingerprint(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The id body of a completion id (`chatcmpl-abc` → `abc`), for deriving call ids.
pub(crate) fn id_token(completion_id: &str) -> &str {
    completion_id.strip_prefix("chatcmpl-").unwrap_or(completion_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::StopReason;

    #[test]
    fn finish_reason_prefers_tool_calls() {
        assert_eq!(finish_reason(StopReason::MaxTokens, true), "tool_calls");
        assert_eq!(finish_reason(StopReason::EndTurn, true), "tool_calls");
        assert_eq!(finish_reason(StopReason::MaxTokens, false), "length");
        assert_eq!(finish_reason(StopReason::ContentFilter, false), "content_filter");
        assert_eq!(finish_reason(StopReason::Refusal, false), "content_filter");
        assert_eq!(finish_reason(StopReason::StopSequence, false), "stop");
        assert_eq!(finish_reason(StopReason::EndTurn, false), "stop");
    }

    #[test]
    fn fnv1a_matches_the_published_vectors() {
        // From the FNV reference test suite (64-bit FNV-1a).
        assert_eq!(fingerprint(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fingerprint(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fingerprint(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn error_body_has_the_openai_shape() {
        let e = TranslateError::invalid("messages[0].role", "bad role");
        let v = e.to_json();
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["param"], "messages[0].role");
        assert_eq!(v["error"]["message"], "bad role");
        assert!(v["error"]["code"].is_null());
    }
}
