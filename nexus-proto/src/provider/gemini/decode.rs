//! Reading Gemini responses: whole `GenerateContentResponse` bodies and the
//! SSE stream of them. Both paths feed every part through one [`Turn`]
//! builder, which is what makes a streamed turn equal to the same content
//! delivered as one body.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::error::{DecodeError, RemoteError};
use crate::event::StreamEvent;
use crate::message::{Block, ImageSource, ToolCall, Usage};
use crate::provider::wire::WireStr;
use crate::provider::{parse_arguments, serde_failure, CallIds, Stop, StopReason, Style, TurnResponse};
use crate::sse::SseEvent;

use super::{signature, STYLE_KEY};

/// One `GenerateContentResponse` (a whole body, or one SSE payload). Every
/// field is optional and unknown fields are ignored: Google adds fields often
/// (`responseId`, `safetyRatings`, `citationMetadata`, …) and none of them
/// changes what the turn says.
///
/// Strings that are copied anyway or rarely sent are owned; text, signatures
/// and the model name are borrowed from the payload (see [`WireStr`]), since
/// a stream repeats them in every chunk.
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireResponse<'a> {
    #[serde(borrow)]
    candidates: Option<Vec<WireCandidate<'a>>>,
    prompt_feedback: Option<WirePromptFeedback>,
    usage_metadata: Option<WireUsage>,
    #[serde(borrow)]
    model_version: Option<WireStr<'a>>,
    /// Present on error payloads (some servers answer 200 with one, and the
    /// stream carries them mid-way). Kept raw: only its presence matters here.
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireCandidate<'a> {
    #[serde(borrow)]
    content: Option<WireContent<'a>>,
    finish_reason: Option<String>,
    /// Omitted for candidate 0 (proto3 drops default values).
    index: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireContent<'a> {
    #[serde(borrow)]
    parts: Option<Vec<WirePart<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WirePart<'a> {
    #[serde(borrow)]
    text: Option<WireStr<'a>>,
    thought: Option<bool>,
    #[serde(borrow)]
    thought_signature: Option<WireStr<'a>>,
    #[serde(borrow)]
    function_call: Option<WireFunctionCall<'a>>,
    inline_data: Option<WireBlob>,
    file_data: Option<WireFileData>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireFunctionCall<'a> {
    id: Option<String>,
    name: Option<String>,
    /// Raw so the argument text reaches the transcript byte for byte.
    #[serde(borrow)]
    args: Option<&'a RawValue>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireBlob {
    mime_type: Option<String>,
    data: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireFileData {
    mime_type: Option<String>,
    file_uri: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WirePromptFeedback {
    block_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct WireUsage {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    total_token_count: Option<u64>,
}

impl WireUsage {
    /// `thoughtsTokenCount` is deliberately not added to completion tokens:
    /// `candidatesTokenCount` is what Google reports as the answer's size, and
    /// the total (which does include thoughts) is kept as the provider sent it.
    fn to_usage(&self) -> Usage {
        let prompt = self.prompt_token_count.unwrap_or(0);
        let completion = self.candidates_token_count.unwrap_or(0);
        Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: self.total_token_count.unwrap_or(prompt.saturating_add(completion)),
            ..Usage::default()
        }
    }
}

/// The typed error for an error payload. No status: either the HTTP status
/// was a success or the error arrived inside a stream, so retryability comes
/// from the error's kind alone.
fn payload_error(bytes: &[u8]) -> RemoteError {
    RemoteError::Provider(Style::Gemini.decode_error(None, None, bytes))
}

/// Maps a `finishReason`. Every value of the documented enum is listed so a
/// new one lands in `Other` visibly rather than by accident.
fn map_finish_reason(raw: &str, has_tool_calls: bool) -> StopReason {
    match raw {
        // Gemini has no separate tool-use reason: a turn with calls ends STOP.
        "STOP" if has_tool_calls => StopReason::ToolUse,
        "STOP" => StopReason::EndTurn,
        // CONTINUATION: the per-request output cap cut the answer short.
        "MAX_TOKENS" | "CONTINUATION" => StopReason::MaxTokens,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION"
        | "MODEL_ARMOR"
        | "ESCALATION"
        | "PUP_LIMITED_DISABLED" => StopReason::ContentFilter,
        // Malformed or unexpected calls carry nothing runnable; LANGUAGE is an
        // unsupported-language stop, not a policy filter; the rest say "other".
        "MALFORMED_FUNCTION_CALL"
        | "UNEXPECTED_TOOL_CALL"
        | "TOO_MANY_TOOL_CALLS"
        | "MISSING_THOUGHT_SIGNATURE"
        | "MALFORMED_RESPONSE"
        | "LANGUAGE"
        | "OTHER"
        | "IMAGE_OTHER"
        | "NO_IMAGE"
        | "FINISH_REASON_UNSPECIFIED" => StopReason::Other,
        _ => StopReason::Other,
    }
}

/// `{"gemini": {"thoughtSignature": sig}}`.
fn signature_data(sig: &str) -> Value {
    json!({ STYLE_KEY: { "thoughtSignature": sig } })
}

/// The turn being assembled, shared by the whole-body and streaming paths.
#[derive(Debug, Clone, Default)]
struct Turn {
    blocks: Vec<Block>,
    finish: Option<String>,
    block_reason: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
    saw_candidate: bool,
}

impl Turn {
    /// Takes in one response object; deltas go to `out` when streaming.
    fn absorb(&mut self, resp: WireResponse<'_>, ids: &mut CallIds, mut out: Option<&mut Vec<StreamEvent>>) {
        // Later payloads win: the last usage and model seen are the final ones.
        if let Some(usage) = &resp.usage_metadata {
            self.usage = Some(usage.to_usage());
        }
        if let Some(model) = resp.model_version.filter(|m| !m.is_empty()) {
            // Every chunk names the model; it is copied only when it changes.
            if self.model.as_deref() != Some(&*model) {
                self.model = Some(model.into_owned());
            }
        }
        if let Some(reason) = resp.prompt_feedback.and_then(|f| f.block_reason).filter(|r| !r.is_empty()) {
            self.block_reason = Some(reason);
        }
        // Only candidate 0 is the turn; with candidateCount > 1 the others are
        // alternatives the loop has no use for.
        let Some(candidate) = resp.candidates.into_iter().flatten().find(|c| c.index.unwrap_or(0) == 0) else {
            return;
        };
        self.saw_candidate = true;
        for part in candidate.content.and_then(|c| c.parts).into_iter().flatten() {
            self.part(part, ids, out.as_deref_mut());
        }
        if let Some(reason) = candidate.finish_reason.filter(|r| !r.is_empty()) {
            self.finish = Some(reason);
        }
    }

    fn part(&mut self, part: WirePart<'_>, ids: &mut CallIds, out: Option<&mut Vec<StreamEvent>>) {
        let thought = part.thought.unwrap_or(false);
        let sig = part.thought_signature.as_deref().filter(|s| !s.is_empty());
        if let Some(call) = part.function_call {
            self.call(call, sig, ids, out);
        } else if let Some(text) = part.text {
            self.text(text.0, thought, sig, out);
        } else if thought {
            // A thought that is not text (interim "thought images") has no
            // neutral block and is not part of the answer.
        } else if let Some(blob) = part.inline_data {
            // Only images have a neutral block; other inline media (audio) is
            // dropped. An image part's signature has no place in `Block::Image`.
            if let (Some(mime), Some(data)) = (blob.mime_type, blob.data) {
                if mime.starts_with("image/") {
                    self.blocks.push(Block::Image { media_type: mime, source: ImageSource::Base64 { data } });
                }
            }
        } else if let Some(file) = part.file_data {
            if let (Some(mime), Some(url)) = (file.mime_type, file.file_uri) {
                if mime.starts_with("image/") {
                    self.blocks.push(Block::Image { media_type: mime, source: ImageSource::Url { url } });
                }
            }
        } else if sig.is_some() {
            // A signature on a part with no data field we know: keep it on an
            // empty text part, the form Gemini itself uses for a bare signature.
            self.text(Cow::Borrowed(""), false, sig, out);
        }
        // Parts of other kinds (executableCode, codeExecutionResult) come only
        // from server-side tools the loop never declares.
    }

    /// Consecutive text parts form one text block (and consecutive thought
    /// parts one reasoning block), because a stream splits one part into many
    /// chunks. A signature attaches to the block it extends, unless that block
    /// already carries a different one: then the part starts a new block so
    /// neither signature is lost.
    ///
    /// The piece is borrowed from the payload where it has no escapes: it
    /// goes into the block first and is then moved (or copied, when
    /// borrowed) into the delta event.
    fn text(&mut self, text: Cow<'_, str>, thought: bool, sig: Option<&str>, out: Option<&mut Vec<StreamEvent>>) {
        self.extend_text(&text, thought, sig);
        if let (false, Some(out)) = (text.is_empty(), out) {
            let text = text.into_owned();
            out.push(if thought { StreamEvent::ReasoningDelta { text } } else { StreamEvent::TextDelta { text } });
        }
    }

    fn extend_text(&mut self, text: &str, thought: bool, sig: Option<&str>) {
        let open = match self.blocks.last_mut() {
            Some(Block::Text { text: t, provider_data }) if !thought => Some((t, provider_data)),
            Some(Block::Reasoning { text: t, provider_data, .. }) if thought => Some((t, provider_data)),
            _ => None,
        };
        if let Some((existing, data)) = open {
            let clash = match (sig, signature(data.as_ref())) {
                (Some(new), Some(old)) => new != old,
                _ => false,
            };
            if !clash {
                existing.push_str(text);
                if let Some(sig) = sig {
                    *data = Some(signature_data(sig));
                }
                return;
            }
        }
        // An empty part with no signature says nothing (Gemini sends them at
        // the end of streams); a block for it would be sent back as an empty
        // text part, which the API rejects.
        if text.is_empty() && sig.is_none() {
            return;
        }
        let provider_data = sig.map(signature_data);
        let text = text.to_owned();
        self.blocks.push(if thought {
            Block::Reasoning { text, signature: None, redacted: None, provider_data }
        } else {
            Block::Text { text, provider_data }
        });
    }

    fn call(
        &mut self,
        call: WireFunctionCall<'_>,
        sig: Option<&str>,
        ids: &mut CallIds,
        out: Option<&mut Vec<StreamEvent>>,
    ) {
        let arguments = call.args.map(|raw| raw.get().to_string()).unwrap_or_default();
        // The whole payload parsed, so the raw object always parses too; the
        // fallback only keeps a decode from failing on a value we cannot read.
        let input = parse_arguments(&arguments).unwrap_or(Value::Null);
        let mut data = Map::new();
        if let Some(sig) = sig {
            data.insert(STYLE_KEY.to_string(), json!({ "thoughtSignature": sig }));
        }
        // Gemini usually sends no id: one is generated so results can be
        // matched, and marked so the encoder does not send it back as if the
        // provider had issued it.
        let id = match call.id.filter(|id| !id.is_empty()) {
            Some(id) => id,
            None => {
                data.insert("nexus".to_string(), json!({ "generatedId": true }));
                ids.next_id()
            }
        };
        let name = call.name.unwrap_or_default();
        if let Some(out) = out {
            out.push(StreamEvent::ToolCallStarted { id: id.clone(), name: name.clone() });
            // Gemini sends each call whole: one fragment carries all of it.
            if !arguments.is_empty() {
                out.push(StreamEvent::ToolCallDelta { id: id.clone(), arguments: arguments.clone() });
            }
        }
        let provider_data = (!data.is_empty()).then_some(Value::Object(data));
        self.blocks.push(Block::ToolCall(ToolCall { id, name, input, arguments, provider_data }));
    }

    /// Whether the stream said it is over (a finish reason, or a blocked prompt).
    fn ended(&self) -> bool {
        self.finish.is_some() || self.block_reason.is_some()
    }

    /// The finished turn. `stream` decides what a missing finish reason means:
    /// a stream without one was cut off; a whole body without one is complete
    /// (it parsed) and is read as a natural end.
    fn into_response(self, stream: bool) -> Result<TurnResponse, RemoteError> {
        let has_calls = self.blocks.iter().any(|b| matches!(b, Block::ToolCall(_)));
        let stop = if let Some(raw) = self.finish {
            Stop { reason: map_finish_reason(&raw, has_calls), raw: Some(raw) }
        } else if let Some(raw) = self.block_reason {
            // The prompt itself was blocked: no candidate, nothing generated.
            Stop { reason: StopReason::ContentFilter, raw: Some(raw) }
        } else if stream {
            return Err(DecodeError::Truncated("the stream ended before any finishReason".into()).into());
        } else if !self.saw_candidate {
            return Err(DecodeError::Shape("no candidates, promptFeedback.blockReason or error".into()).into());
        } else {
            let reason = if has_calls { StopReason::ToolUse } else { StopReason::EndTurn };
            Stop { reason, raw: None }
        };
        Ok(TurnResponse {
            content: self.blocks,
            stop,
            usage: self.usage.unwrap_or_default(),
            usage_reported: self.usage.is_some(),
            model: self.model,
        })
    }
}

/// Decodes one whole body: a `GenerateContentResponse`, or a JSON array of
/// them (what `streamGenerateContent` returns without `alt=sse`).
///
/// # Errors
///
/// An error payload (`{"error": …}`, also inside an array) is
/// [`RemoteError::Provider`]; bytes that are not JSON are [`DecodeError::Json`];
/// JSON that is not a response with a candidate or a prompt block reason is
/// [`DecodeError::Shape`].
pub fn decode_response(body: &[u8], ids: &mut CallIds) -> Result<TurnResponse, RemoteError> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    let responses: Vec<WireResponse<'_>> = if first == Some(&b'[') {
        serde_json::from_slice(body).map_err(|e| serde_failure(e, body))?
    } else {
        vec![serde_json::from_slice(body).map_err(|e| serde_failure(e, body))?]
    };
    if responses.iter().any(|r| r.error.is_some()) {
        return Err(payload_error(body));
    }
    let mut turn = Turn::default();
    for resp in responses {
        turn.absorb(resp, ids, None);
    }
    turn.into_response(false)
}

/// Incremental stream assembler. Each SSE `data` payload is a whole
/// `GenerateContentResponse`; there is no end marker, so the stream counts as
/// complete once a finish reason (or a prompt block reason) has arrived.
/// Payloads after the finish reason are still read, since usage may come
/// last; the last finish reason, usage and model seen are the turn's.
#[derive(Debug, Clone, Default)]
pub struct Assembler {
    turn: Turn,
    emitted: bool,
    /// The first failure, returned again by every later call.
    failed: Option<RemoteError>,
}

impl Assembler {
    /// Feeds one SSE event; appends the text, reasoning and tool-call deltas it
    /// carries to `out`.
    ///
    /// # Errors
    ///
    /// An `{"error": …}` payload is [`RemoteError::Provider`] (no status;
    /// retryable when its status names a transient condition); a payload that
    /// is not a response is a [`RemoteError::Decode`]. The first failure is
    /// returned again by every later call.
    pub fn push(&mut self, event: &SseEvent, ids: &mut CallIds, out: &mut Vec<StreamEvent>) -> Result<(), RemoteError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(());
        }
        let result = match serde_json::from_str::<WireResponse<'_>>(data) {
            Err(e) => Err(RemoteError::Decode(serde_failure(e, data.as_bytes()))),
            Ok(resp) if resp.error.is_some() => Err(payload_error(data.as_bytes())),
            Ok(resp) => {
                let before = out.len();
                self.turn.absorb(resp, ids, Some(out));
                self.emitted |= out.len() > before;
                Ok(())
            }
        };
        if let Err(err) = &result {
            self.failed = Some(err.clone());
        }
        result
    }

    /// The assembled turn.
    ///
    /// # Errors
    ///
    /// [`DecodeError::Truncated`] when no finish reason ever arrived, or the
    /// failure an earlier [`push`](Self::push) returned.
    pub fn finish(&mut self) -> Result<TurnResponse, RemoteError> {
        if let Some(err) = &self.failed {
            return Err(err.clone());
        }
        if !self.turn.ended() {
            return Err(DecodeError::Truncated("the stream ended before any finishReason".into()).into());
        }
        std::mem::take(&mut self.turn).into_response(true)
    }

    /// Whether any delta has been appended.
    pub fn emitted_anything(&self) -> bool {
        self.emitted
    }
}
