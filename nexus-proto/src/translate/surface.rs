//! What every gateway surface shares: the request a surface's decoder
//! hands over, the record of what was dropped on the way, the error shapes,
//! and the stream pipe that feeds an upstream's events to a surface's encoder.
//!
//! Each dialect has one decoder (its request → the neutral [`Neutral`]
//! request) and one encoder (a neutral [`TurnResponse`] or stream of
//! [`StreamEvent`]s → its response shapes); every upstream is written and
//! read by the provider modules. A pair of dialects never has code of its own.

use serde_json::{json, Value};

use super::request::{encode_neutral, Neutral};
use super::response::provider_id;
use super::{CompletionMeta, TranslateError, TranslatedRequest};
use crate::event::StreamEvent;
use crate::message::Usage;
use crate::message::{Block, Message, Role};
use crate::provider::{Assembler, CallIds, Style, TurnResponse};
use crate::sse::SseEvent;

/// The dialect a client speaks to the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Surface {
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    Chat,
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// Gemini (`/v1beta/models/{model}:generateContent`).
    Gemini,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
}

impl Surface {
    /// The upstream style of the same family: a request between the two
    /// passes through unchanged, opaque continuation data included.
    pub fn native_style(self) -> Style {
        match self {
            Surface::Chat => Style::OpenAi,
            Surface::Anthropic => Style::Anthropic,
            Surface::Gemini => Style::Gemini,
            Surface::Responses => Style::OpenAiResponses,
        }
    }

    /// This surface's error body for `e`, keeping its status and message.
    pub fn error_json(self, e: &TranslateError) -> Value {
        match self {
            Surface::Chat | Surface::Responses => e.to_json(),
            Surface::Anthropic => anthropic_error_json(e),
            Surface::Gemini => gemini_error_json(e),
        }
    }
}

/// A request that came in on a surface, ready to send upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurfaceRequest {
    /// The upstream call.
    pub upstream: TranslatedRequest,
    /// Advisory fields, headers and hosted tools the upstream has no place
    /// for and that were left out, by name, in request order. The gateway
    /// reports them in the `x-nexus-dropped` response header.
    pub dropped: Vec<String>,
}

/// The names of what a decoder left out (each once).
#[derive(Debug, Default)]
pub(super) struct Dropped(pub(super) Vec<String>);

impl Dropped {
    pub(super) fn add(&mut self, what: impl Into<String>) {
        let what = what.into();
        if !self.0.contains(&what) {
            self.0.push(what);
        }
    }
}

/// Encodes a decoded request for `style`, with what was dropped.
pub(super) fn finish_request(style: Style, mut n: Neutral, dropped: Dropped) -> Result<SurfaceRequest, TranslateError> {
    if style == Style::Gemini {
        placeholder_signatures(&mut n.messages);
    }
    Ok(SurfaceRequest { upstream: encode_neutral(style, &n)?, dropped: dropped.0 })
}

/// Gemini 3 refuses a function-call turn sent back without the thought
/// signature it issued; history that came from another dialect has none, and
/// Google documents a placeholder for it, on the first call of each model turn.
fn placeholder_signatures(messages: &mut [Message]) {
    for m in messages.iter_mut().filter(|m| m.role == Role::Assistant) {
        if let Some(Block::ToolCall(call)) = m.content.iter_mut().find(|b| matches!(b, Block::ToolCall(_))) {
            let has_own = call.provider_data.as_ref().and_then(|d| d.pointer("/gemini/thoughtSignature")).is_some();
            if !has_own {
                call.provider_data =
                    Some(json!({ "gemini": { "thoughtSignature": super::conversation::GEMINI_SKIP_SIGNATURE } }));
            }
        }
    }
}

/// An Anthropic error body: `{"type":"error","error":{"type","message"}}`.
pub fn anthropic_error_json(e: &TranslateError) -> Value {
    let kind = match e.status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    };
    let message = match &e.param {
        Some(p) if !p.is_empty() && !e.message.contains(p.as_str()) => format!("{p}: {}", e.message),
        _ => e.message.clone(),
    };
    json!({ "type": "error", "error": { "type": kind, "message": message } })
}

/// A Gemini (Google API) error body: `{"error":{"code","message","status"}}`.
pub fn gemini_error_json(e: &TranslateError) -> Value {
    let status = match e.status {
        400 | 413 | 422 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        405 => "UNIMPLEMENTED",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        503 | 529 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        500..=599 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    };
    let message = match &e.param {
        Some(p) if !p.is_empty() && !e.message.contains(p.as_str()) => format!("{p}: {}", e.message),
        _ => e.message.clone(),
    };
    json!({ "error": { "code": e.status, "message": message, "status": status } })
}

/// A surface's stream writer: neutral events in, the surface's SSE text out.
/// Implementations are state machines whose every output sequence is a
/// well-formed stream of their dialect.
pub trait Emitter {
    /// One neutral event of the turn; an error ends the stream (the
    /// surface cannot express what the upstream sent).
    fn event(&mut self, event: &StreamEvent, out: &mut Vec<String>) -> Result<(), TranslateError>;
    /// The turn is complete: close what is open and end the stream.
    fn finish(&mut self, turn: &TurnResponse, out: &mut Vec<String>);
    /// The stream failed: end it with the dialect's error event.
    fn fail(&mut self, error: &TranslateError, out: &mut Vec<String>);
}

/// An upstream stream of any style re-emitted on a surface, event by event.
/// Feed every upstream SSE event to [`push`](Self::push), then call
/// [`finish`](Self::finish) at the end of the upstream body (or
/// [`abort`](Self::abort) when reading it failed). Nothing is held back
/// beyond what the surface needs to frame an event (Gemini function calls
/// are whole parts, so a call's arguments are sent when the call is complete;
/// a Chat Completions upstream may interleave the argument pieces of parallel
/// calls, so there a call that starts while another streams is held until
/// the stream ends or text follows, then sent whole).
#[derive(Debug)]
pub struct SurfaceStream<E> {
    upstream: Style,
    assembler: Assembler,
    ids: CallIds,
    meta: CompletionMeta,
    emitter: E,
    order: CallOrder,
    finished: bool,
    failed: Option<TranslateError>,
    scratch: Vec<StreamEvent>,
    ordered: Vec<StreamEvent>,
    usage: Option<Usage>,
}

/// Keeps each call's events contiguous for writers that frame one call at a
/// time (an Anthropic `tool_use` block, a Responses `function_call` item).
///
/// Chat Completions streams address argument pieces by `tool_calls[].index`,
/// so an upstream may send call 0's pieces after call 1 has begun; a block
/// once closed cannot take them. Nothing in that wire says a call is
/// complete before the stream ends, so the first call streams live and every
/// call that starts while it is open is held, pieces appended in arrival
/// order, then released whole (start, then its arguments as one piece) at
/// the end of the stream or before text or reasoning that follows. Upstreams
/// whose wire frames calls one at a time (Anthropic, Responses, Gemini)
/// cannot interleave and pass straight through.
#[derive(Debug, Default)]
struct CallOrder {
    /// Whether the upstream's wire can interleave calls.
    hold: bool,
    /// Whether a call is streaming live.
    live: bool,
    /// Held calls in start order: id, name, arguments so far.
    held: Vec<(String, String, String)>,
}

impl CallOrder {
    fn route(&mut self, event: &StreamEvent, out: &mut Vec<StreamEvent>) {
        if !self.hold {
            out.push(event.clone());
            return;
        }
        match event {
            StreamEvent::ToolCallStarted { id, name } => {
                if self.live || !self.held.is_empty() {
                    self.held.push((id.clone(), name.clone(), String::new()));
                } else {
                    self.live = true;
                    out.push(event.clone());
                }
            }
            StreamEvent::ToolCallDelta { id, arguments } => {
                // The last held call of that id: a repeated id names the newest call.
                match self.held.iter_mut().rev().find(|(held, _, _)| held == id) {
                    Some((_, _, args)) => args.push_str(arguments),
                    None => out.push(event.clone()),
                }
            }
            StreamEvent::TextDelta { text } | StreamEvent::ReasoningDelta { text } if !text.is_empty() => {
                self.release(out);
                out.push(event.clone());
            }
            _ => out.push(event.clone()),
        }
    }

    /// Every held call, whole, in the order the calls started.
    fn release(&mut self, out: &mut Vec<StreamEvent>) {
        self.live = false;
        for (id, name, arguments) in self.held.drain(..) {
            out.push(StreamEvent::ToolCallStarted { id: id.clone(), name });
            if !arguments.is_empty() {
                out.push(StreamEvent::ToolCallDelta { id, arguments });
            }
        }
    }
}

impl<E: Emitter> SurfaceStream<E> {
    pub(super) fn with(upstream: Style, meta: CompletionMeta, ids: CallIds, emitter: E) -> SurfaceStream<E> {
        SurfaceStream {
            upstream,
            assembler: upstream.assembler(),
            ids,
            meta,
            emitter,
            order: CallOrder { hold: upstream == Style::OpenAi, ..CallOrder::default() },
            finished: false,
            failed: None,
            scratch: Vec::new(),
            ordered: Vec::new(),
            usage: None,
        }
    }

    /// The token counts of the completed turn, once the stream has finished
    /// without failing (for the gateway's metrics).
    pub fn usage(&self) -> Option<&Usage> {
        self.usage.as_ref()
    }

    /// The error the stream failed with, once it has.
    pub fn error(&self) -> Option<&TranslateError> {
        self.failed.as_ref()
    }

    /// The upstream's style.
    pub fn upstream(&self) -> Style {
        self.upstream
    }

    /// The response id the stream reports.
    pub fn response_id(&self) -> &str {
        &self.meta.id
    }

    /// Feeds one upstream SSE event; returns the surface's SSE text it yields.
    pub fn push(&mut self, event: &SseEvent) -> Vec<String> {
        let mut out = Vec::new();
        if self.finished || self.failed.is_some() {
            return out;
        }
        let result = self.assembler.push(event, &mut self.ids, &mut self.scratch);
        for ev in self.scratch.drain(..) {
            self.order.route(&ev, &mut self.ordered);
        }
        let emitted = self.emit(&mut out);
        if let Err(e) = emitted {
            self.fail(e, &mut out);
        } else if let Err(e) = result {
            self.fail(super::remote_error_to_openai(&e), &mut out);
        }
        out
    }

    /// The upstream body ended: the closing events, or the error event when
    /// the stream failed or ended before the upstream's end marker.
    pub fn finish(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if self.finished || self.failed.is_some() {
            return out;
        }
        self.finished = true;
        match self.assembler.finish() {
            Ok(turn) => {
                self.order.release(&mut self.ordered);
                if let Err(e) = self.emit(&mut out) {
                    self.fail(e, &mut out);
                    return out;
                }
                self.emitter.finish(&turn, &mut out);
                self.usage = Some(turn.usage);
            }
            Err(e) => self.fail(super::remote_error_to_openai(&e), &mut out),
        }
        out
    }

    /// Hands the ordered events to the writer; the first it cannot express ends the stream.
    fn emit(&mut self, out: &mut Vec<String>) -> Result<(), TranslateError> {
        let mut emitted = Ok(());
        for ev in &self.ordered {
            emitted = self.emitter.event(ev, out);
            if emitted.is_err() {
                break;
            }
        }
        self.ordered.clear();
        emitted
    }

    /// Reading the upstream failed: the error event ending the client's stream.
    pub fn abort(&mut self, error: TranslateError) -> Vec<String> {
        let mut out = Vec::new();
        if !self.finished && self.failed.is_none() {
            self.finished = true;
            self.fail(error, &mut out);
        }
        out
    }

    fn fail(&mut self, error: TranslateError, out: &mut Vec<String>) {
        self.emitter.fail(&error, out);
        self.failed = Some(error);
    }
}

/// The meta with an id: the caller's, else `prefix` + the upstream's own id
/// or a fingerprint of the body.
pub(super) fn meta_with_id(meta: &CompletionMeta, prefix: &str, body: &[u8]) -> CompletionMeta {
    if !meta.id.is_empty() {
        return meta.clone();
    }
    let token = provider_id(body).unwrap_or_else(|| format!("{:016x}", super::fingerprint(body)));
    CompletionMeta { id: format!("{prefix}{token}"), ..meta.clone() }
}

/// The token of an id after its prefix (`msg_abc` → `abc`), for deriving call ids.
pub(super) fn id_body(id: &str) -> &str {
    id.split_once('_').map_or(id, |(_, rest)| rest)
}

/// One SSE event with an `event:` line (the Anthropic SDK skips events without one).
pub(super) fn named_event(name: &str, data: &Value) -> String {
    let mut out = Vec::with_capacity(name.len() + 128);
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    finish_data(out, data)
}

/// One SSE event with only a `data:` line (Gemini, Chat Completions).
pub(super) fn data_event<T: serde::Serialize + ?Sized>(data: &T) -> String {
    finish_data(Vec::with_capacity(256), data)
}

/// `data: {json}` and the blank line, after `out`. The JSON is written
/// straight into the bytes: `format!` would pass it through `fmt`'s writer,
/// a call per token, for every event of every stream.
fn finish_data<T: serde::Serialize + ?Sized>(mut out: Vec<u8>, data: &T) -> String {
    out.extend_from_slice(b"data: ");
    // Writing a `Value`, or a struct of strings and numbers, into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut out, data);
    out.extend_from_slice(b"\n\n");
    String::from_utf8(out).unwrap_or_default()
}
