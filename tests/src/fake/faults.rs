//! Turning a scripted turn (and the fault for this attempt, if any) into a
//! planned reply in the request's wire format.

use super::reply::{Body, FullCut, Reply, StreamCut};
use super::script::{Fault, FaultKind};
use super::wire::{Ctx, Reject};
use super::{anthropic, gemini, openai, responses, Style};

/// The fault for attempt `attempt` (0-based): faults cover consecutive
/// attempts in order, `times` each; past them the turn answers normally.
pub fn select(faults: &[Fault], attempt: u32) -> Option<&FaultKind> {
    let mut start = 0u32;
    for fault in faults {
        let end = start.saturating_add(fault.times);
        if attempt < end {
            return Some(&fault.kind);
        }
        start = end;
    }
    None
}

/// How the answer is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One JSON body.
    Whole,
    /// SSE events.
    Sse,
    /// Gemini `streamGenerateContent` without `alt=sse`: one JSON array, streamed.
    JsonArray,
}

/// The error body a style sends with `status`.
pub fn status_reject(style: Style, status: u16, model: &str) -> Reject {
    match style {
        Style::Anthropic => anthropic::status_error(status),
        Style::OpenAi | Style::OpenAiResponses => openai::status_error(status, model),
        Style::Gemini => gemini::status_error(status),
    }
}

/// A reply carrying a reject body.
pub fn reject_reply(reject: Reject) -> Reply {
    Reply::json(reject.status, reject.body)
}

fn whole_body(style: Style, ctx: &Ctx<'_>) -> Vec<u8> {
    match style {
        Style::Anthropic => anthropic::body(ctx),
        Style::OpenAi => openai::body(ctx),
        Style::Gemini => gemini::body(ctx),
        Style::OpenAiResponses => responses::body(ctx),
    }
}

fn events(style: Style, ctx: &Ctx<'_>, framing: Framing) -> Vec<Vec<u8>> {
    match (style, framing) {
        (Style::Gemini, Framing::JsonArray) => gemini::array_pieces(ctx),
        (Style::Anthropic, _) => anthropic::events(ctx),
        (Style::OpenAi, _) => openai::events(ctx),
        (Style::Gemini, _) => gemini::events(ctx),
        (Style::OpenAiResponses, _) => responses::events(ctx),
    }
}

fn stream_error_event(style: Style) -> Vec<u8> {
    match style {
        Style::Anthropic => anthropic::stream_error_event(),
        Style::OpenAi => openai::stream_error_event(),
        Style::Gemini => gemini::stream_error_event(),
        Style::OpenAiResponses => responses::stream_error_event(),
    }
}

fn malformed_event(style: Style) -> Vec<u8> {
    match style {
        Style::Anthropic => anthropic::malformed_event(),
        Style::OpenAi => openai::malformed_event(),
        Style::Gemini => gemini::malformed_event(),
        Style::OpenAiResponses => responses::malformed_event(),
    }
}

fn malformed_body(style: Style) -> Vec<u8> {
    match style {
        Style::Anthropic => anthropic::malformed_body(),
        Style::OpenAi => openai::malformed_body(),
        Style::Gemini => gemini::malformed_body(),
        Style::OpenAiResponses => responses::malformed_body(),
    }
}

/// The status a style uses for "overloaded".
fn overloaded_status(style: Style) -> u16 {
    match style {
        Style::Anthropic => 529,
        Style::OpenAi | Style::Gemini | Style::OpenAiResponses => 503,
    }
}

fn normal(style: Style, ctx: &Ctx<'_>, framing: Framing) -> Reply {
    if let Some(recorded) = &ctx.turn.recorded {
        return Reply::recorded(recorded);
    }
    match framing {
        Framing::Whole => Reply::json(200, whole_body(style, ctx)),
        Framing::Sse => Reply::stream(events(style, ctx, framing)),
        Framing::JsonArray => {
            let mut r = Reply::stream(events(style, ctx, framing));
            if let Body::Chunked { content_type, .. } = &mut r.body {
                *content_type = "application/json";
            }
            r
        }
    }
}

fn with_stream_cut(mut reply: Reply, new_cut: StreamCut) -> Reply {
    if let Body::Chunked { cut, .. } = &mut reply.body {
        *cut = new_cut;
    }
    reply
}

fn with_full_cut(mut reply: Reply, new_cut: FullCut) -> Reply {
    if let Body::Full { cut, .. } = &mut reply.body {
        *cut = new_cut;
    }
    reply
}

/// The reply for one attempt at a turn.
pub fn answer(style: Style, ctx: &Ctx<'_>, framing: Framing, fault: Option<&FaultKind>) -> Reply {
    let streaming = framing != Framing::Whole;
    let Some(fault) = fault else {
        return normal(style, ctx, framing);
    };
    match fault {
        FaultKind::Status { status, retry_after, body } => {
            let reject = match body {
                Some(b) => Reject { status: *status, body: b.clone().into_bytes() },
                None => status_reject(style, *status, ctx.model),
            };
            let reply = reject_reply(reject);
            match retry_after {
                Some(v) => reply.header("retry-after", v.clone()),
                None => reply,
            }
        }
        FaultKind::ResetBeforeHeaders => {
            let mut r = normal(style, ctx, framing);
            r.body = Body::ResetBeforeHeaders;
            r
        }
        FaultKind::ResetAfterHeaders if streaming => {
            with_stream_cut(normal(style, ctx, framing), StreamCut::AfterPieces(0))
        }
        FaultKind::ResetAfterHeaders => with_full_cut(normal(style, ctx, framing), FullCut::AfterHeaders),
        FaultKind::ResetMidStream { after_events } if streaming => {
            with_stream_cut(normal(style, ctx, framing), StreamCut::AfterPieces(*after_events))
        }
        FaultKind::ResetMidStream { .. } => with_full_cut(normal(style, ctx, framing), FullCut::Half),
        FaultKind::TruncatedChunked if streaming => {
            with_stream_cut(normal(style, ctx, framing), StreamCut::NoTerminator)
        }
        FaultKind::TruncatedChunked => {
            // A whole body sent chunked (in two chunks) and never terminated.
            let body = whole_body(style, ctx);
            let (a, b) = body.split_at(body.len() / 2);
            let mut r = Reply::json(200, Vec::new());
            r.body = Body::Chunked {
                content_type: "application/json",
                pieces: vec![a.to_vec(), b.to_vec()],
                cut: StreamCut::NoTerminator,
            };
            r
        }
        FaultKind::Stall { ms } => {
            let mut r = normal(style, ctx, framing);
            r.stall_ms = *ms;
            r
        }
        FaultKind::CloseWhenIdle => {
            let mut r = normal(style, ctx, framing);
            r.hang_up = true;
            r
        }
        FaultKind::StallMidStream { after_events, ms } => {
            let mut r = normal(style, ctx, framing);
            if streaming {
                r.pause = Some((*after_events, *ms));
            } else {
                r.stall_ms = *ms;
            }
            r
        }
        FaultKind::MalformedJson if streaming => {
            let mut pieces = events(style, ctx, framing);
            pieces.truncate(1);
            pieces.push(malformed_event(style));
            let mut r = normal(style, ctx, framing);
            if let Body::Chunked { pieces: p, .. } = &mut r.body {
                *p = pieces;
            }
            r
        }
        FaultKind::MalformedJson => Reply::json(200, malformed_body(style)),
        FaultKind::HugeBody { bytes } => {
            let huge = Ctx { huge: Some(*bytes), ..*ctx };
            normal(style, &huge, framing)
        }
        FaultKind::StreamError { after_events } if streaming => {
            let mut pieces = events(style, ctx, framing);
            pieces.truncate(*after_events);
            pieces.push(stream_error_event(style));
            let mut r = normal(style, ctx, framing);
            if let Body::Chunked { pieces: p, .. } = &mut r.body {
                *p = pieces;
            }
            r
        }
        FaultKind::StreamError { .. } => reject_reply(status_reject(style, overloaded_status(style), ctx.model)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_cover_consecutive_attempts_in_order() {
        let faults = vec![Fault::status(429).times(2), Fault::new(FaultKind::ResetBeforeHeaders)];
        assert!(matches!(select(&faults, 0), Some(FaultKind::Status { status: 429, .. })));
        assert!(matches!(select(&faults, 1), Some(FaultKind::Status { status: 429, .. })));
        assert_eq!(select(&faults, 2), Some(&FaultKind::ResetBeforeHeaders));
        assert_eq!(select(&faults, 3), None);
        assert_eq!(select(&[], 0), None);
    }
}
