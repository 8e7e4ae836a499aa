//! Bodies of the fuzz targets in `fuzz/`. Each takes arbitrary bytes and
//! checks its invariants by panicking, so libFuzzer reports a broken
//! invariant as a crash. They are plain functions so that tests can run them
//! on the wire corpus and on generated inputs without libFuzzer.
//!
//! The byte-stream targets take the whole input as the body: anything else
//! they need (a split point, chunk sizes, an HTTP status) is derived from a
//! hash of it, so the fuzzer spends no input bytes on parameters. The run
//! state machine's targets, [`machine()`] and [`state()`], read a script of
//! inputs through `arbitrary` instead. Either way a crash reproduces from its
//! input file alone.

use serde_json::{Map, Value};

use crate::message::{Block, Message, Role, ToolResultBlock};
use crate::provider::{decode_stream_chunks, CallIds, ModelCall, Style, TurnResponse};
use crate::rng::SplitMix64;
use crate::sse::{SseDecoder, SseEvent};

mod agents;
mod failover;
mod machine;
mod mcp;
mod output;
mod surfaces;
mod translate;

pub use agents::nested_answers;
pub use failover::failover;
pub use machine::{machine, state};
pub use mcp::mcp;
pub use output::output;
pub use surfaces::{
    anthropic_lines, anthropic_request, anthropic_stream, built_events, check_anthropic, check_gemini, check_responses,
    gemini_lines, gemini_request, gemini_stream, responses_lines, responses_request, responses_stream,
};
pub use translate::translate;

/// Decodes `data` as an SSE stream whole, split in two at a data-derived
/// point, in data-derived chunks, and one byte at a time; every way must give
/// the events of [`reference_sse`], and every event must be well formed.
pub fn sse(data: &[u8]) {
    let whole = decode_sse(&[data]);
    for ev in &whole {
        check_event(ev);
    }
    assert_eq!(whole, reference_sse(data), "incremental decoder disagrees with the reference");

    let mut rng = rng_for(data);
    let (a, b) = data.split_at(below(&mut rng, data.len() + 1));
    assert_eq!(decode_sse(&[a, b]), whole, "split at {}", a.len());

    let chunks = chunk(data, &mut rng);
    assert_eq!(decode_sse(&chunks), whole, "chunk sizes {:?}", chunks.iter().map(|c| c.len()).collect::<Vec<_>>());

    let bytes: Vec<&[u8]> = data.chunks(1).collect();
    assert_eq!(decode_sse(&bytes), whole, "byte by byte");
}

/// Decodes `data` as a whole response body of `style`: any bytes give `Ok`
/// or a typed error, never a panic, and the same answer every time; an `Ok`
/// turn survives serialization and re-encoding into every style. The same
/// bytes read as an error body give a [`crate::ProviderError`] that keeps at
/// most 64 KiB of them.
pub fn decode_response(style: Style, data: &[u8]) {
    let first = style.decode_response(data, &mut CallIds::new("fz_"));
    let again = style.decode_response(data, &mut CallIds::new("fz_"));
    assert_eq!(first, again, "decoding is not deterministic");
    if let Ok(turn) = &first {
        check_turn(turn);
    }

    let mut rng = rng_for(data);
    let status = 400 + below(&mut rng, 200) as u16;
    let retry_after = String::from_utf8_lossy(data.get(..below(&mut rng, 12).min(data.len())).unwrap_or_default());
    let err = style.decode_error(Some(status), Some(&retry_after), data);
    assert_eq!(err.status, Some(status));
    // The body is lossy UTF-8 of at most 64 KiB of input: each input byte becomes at most one char.
    assert!(err.body.chars().count() <= 64 * 1024, "error body not capped");
    if let Some(ms) = err.retry_after_ms {
        assert!(ms <= 2_147_483_647_000, "Retry-After beyond delay-seconds range");
    }
    let streamed = style.decode_error(None, None, data);
    assert_eq!(streamed.status, None);
}

/// Decodes `data` as an SSE response body of `style` the way the loop does
/// ([`decode_stream_chunks`]): whole, split in two, and in data-derived
/// chunks. Chunking must change neither the result nor the generated call
/// ids; an `Ok` turn must pass the same checks as in [`decode_response`].
pub fn decode_stream(style: Style, data: &[u8]) {
    let mut ids = CallIds::new("fz_");
    let whole = decode_stream_chunks(style, [data], &mut ids);
    if let Ok(turn) = &whole {
        check_turn(turn);
    }

    let mut rng = rng_for(data);
    let (a, b) = data.split_at(below(&mut rng, data.len() + 1));
    let mut split_ids = CallIds::new("fz_");
    let split = decode_stream_chunks(style, [a, b], &mut split_ids);
    assert_eq!(split, whole, "split at {} changed the result", a.len());
    assert_eq!(split_ids, ids, "split at {} changed the generated ids", a.len());

    let chunks = chunk(data, &mut rng);
    let mut chunk_ids = CallIds::new("fz_");
    let chunked = decode_stream_chunks(style, chunks.iter().copied(), &mut chunk_ids);
    let sizes: Vec<usize> = chunks.iter().map(|c| c.len()).collect();
    assert_eq!(chunked, whole, "chunk sizes {sizes:?} changed the result");
    assert_eq!(chunk_ids, ids, "chunk sizes {sizes:?} changed the generated ids");
}

/// A plain, whole-buffer SSE decoder written straight from the WHATWG
/// algorithm (decode the stream as UTF-8 minus one leading BOM, split lines on
/// CRLF, LF or CR, data buffer with a trailing LF per line), plus the one
/// departure [`SseDecoder::finish`] documents: the pending event is
/// dispatched at end of stream. The oracle the incremental decoder is held to.
pub fn reference_sse(data: &[u8]) -> Vec<SseEvent> {
    let body = data.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(data);
    let text = String::from_utf8_lossy(body);

    let mut lines: Vec<&str> = Vec::new();
    let mut rest: &str = &text;
    while let Some(pos) = rest.find(['\r', '\n']) {
        lines.push(&rest[..pos]);
        let after = &rest[pos..];
        rest = after.strip_prefix("\r\n").unwrap_or(&after[1..]);
    }
    if !rest.is_empty() {
        lines.push(rest); // a last line without its line end
    }

    let mut out = Vec::new();
    let mut data_buf = String::new();
    let mut event_type = String::new();
    let mut last_id = String::new();
    let mut dispatch = |data_buf: &mut String, event_type: &mut String, last_id: &str| {
        if data_buf.is_empty() {
            event_type.clear();
            return;
        }
        if data_buf.ends_with('\n') {
            data_buf.pop();
        }
        out.push(SseEvent {
            event: (!event_type.is_empty()).then(|| event_type.clone()),
            data: std::mem::take(data_buf),
            id: (!last_id.is_empty()).then(|| last_id.to_string()),
        });
        event_type.clear();
    };
    for line in lines {
        if line.is_empty() {
            dispatch(&mut data_buf, &mut event_type, &last_id);
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.find(':') {
            Some(pos) => {
                let value = &line[pos + 1..];
                (&line[..pos], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line, ""),
        };
        match field {
            "event" => event_type = value.to_string(),
            "data" => {
                data_buf.push_str(value);
                data_buf.push('\n');
            }
            "id" if !value.contains('\0') => last_id = value.to_string(),
            _ => {}
        }
    }
    dispatch(&mut data_buf, &mut event_type, &last_id);
    out
}

/// Feeds `chunks` to a fresh decoder and finishes it.
pub fn decode_sse(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    for c in chunks {
        decoder.feed(c, &mut out);
    }
    decoder.finish(&mut out);
    out
}

/// What holds for every dispatched event whatever the input: no line end
/// survives into a field (lines were split on them), names and ids are never
/// empty (empty means "none"), and an id never holds NUL.
fn check_event(ev: &SseEvent) {
    assert!(!ev.data.contains('\r'), "CR in data: {ev:?}");
    if let Some(name) = &ev.event {
        assert!(!name.is_empty() && !name.contains(['\r', '\n']), "bad event name: {ev:?}");
    }
    if let Some(id) = &ev.id {
        assert!(!id.is_empty() && !id.contains(['\r', '\n', '\0']), "bad id: {ev:?}");
    }
}

/// What must hold for any decoded turn: it can be summarized, it survives a
/// JSON round trip (the run state stores it), and a transcript holding it
/// encodes into every style's request body.
fn check_turn(turn: &TurnResponse) {
    let _ = turn.summary();

    let json = serde_json::to_vec(turn).unwrap_or_else(|e| panic!("turn does not serialize: {e}"));
    let back: TurnResponse = serde_json::from_slice(&json).unwrap_or_else(|e| panic!("turn does not deserialize: {e}"));
    // Exact, floats included: the crate enables serde_json's `float_roundtrip`,
    // which the byte-identical state format relies on.
    assert_eq!(&back, turn, "turn changed in a JSON round trip");

    // A transcript with this turn and a result for each of its calls, so it is balanced.
    let results: Vec<Block> = turn
        .tool_calls()
        .map(|c| {
            Block::ToolResult(ToolResultBlock {
                call_id: c.id.clone(),
                name: c.name.clone(),
                output: "ok".to_string(),
                is_error: false,
            })
        })
        .collect();
    let mut messages = vec![Message::user("hi"), Message { role: Role::Assistant, content: turn.content.clone() }];
    if !results.is_empty() {
        messages.push(Message { role: Role::User, content: results });
    }
    let params = Map::new();
    for style in [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses] {
        for stream in [false, true] {
            let call = ModelCall {
                model: "m",
                system: Some("s"),
                messages: &messages,
                tools: &[],
                max_tokens: None,
                stream,
                params: &params,
                output: None,
            };
            let body: Value = style.encode_body(&call);
            let bytes =
                serde_json::to_vec(&body).unwrap_or_else(|e| panic!("{} body does not serialize: {e}", style.name()));
            // The loop sends the direct writer's bytes: they must be the tree's,
            // exactly, but for the key order of call arguments that Anthropic
            // and Gemini carry as objects (the model's order, the same JSON).
            let written = style.body_bytes(&call);
            match style {
                Style::OpenAi | Style::OpenAiResponses => {
                    assert_eq!(written, bytes, "{} writer disagrees with encode_body", style.name())
                }
                Style::Anthropic | Style::Gemini => {
                    let parsed: Value = serde_json::from_slice(&written)
                        .unwrap_or_else(|e| panic!("{} writer wrote invalid JSON: {e}", style.name()));
                    assert_eq!(parsed, body, "{} writer disagrees with encode_body", style.name());
                }
            }
        }
    }
}

/// A generator seeded from the input (FNV-1a), so derived parameters are
/// reproducible from the input alone.
fn rng_for(data: &[u8]) -> SplitMix64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    SplitMix64::new(h)
}

fn below(rng: &mut SplitMix64, bound: usize) -> usize {
    // `bound` fits in u64 and the result is below it, so both casts are lossless.
    rng.below(bound as u64) as usize
}

/// Cuts `data` into chunks of mostly small, sometimes empty, sizes.
fn chunk<'a>(data: &'a [u8], rng: &mut SplitMix64) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let max = match below(rng, 8) {
            0 => 0, // an empty chunk: drivers may deliver them
            1 => 64,
            _ => 5,
        };
        let (c, tail) = rest.split_at(below(rng, max + 1).min(rest.len()));
        out.push(c);
        rest = tail;
    }
    out
}
