//! The SSE decoder against the WHATWG event-stream rules
//! (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation),
//! the real provider streams of the wire corpus, and generated streams under
//! every chunking.

mod common;

use nexus_proto::provider::Style;
use nexus_proto::{SseDecoder, SseEvent};
use proptest::prelude::*;

/// Feeds the chunks to a fresh decoder, then finishes it.
fn decode_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    for c in chunks {
        decoder.feed(c, &mut out);
    }
    decoder.finish(&mut out);
    out
}

fn decode(bytes: &[u8]) -> Vec<SseEvent> {
    decode_chunks(&[bytes])
}

/// Events completed by feeding alone, before `finish`.
fn fed_only(bytes: &[u8]) -> Vec<SseEvent> {
    let mut out = Vec::new();
    SseDecoder::new().feed(bytes, &mut out);
    out
}

/// A default-type event without id.
fn msg(data: &str) -> SseEvent {
    SseEvent { event: None, data: data.to_string(), id: None }
}

fn named(event: &str, data: &str) -> SseEvent {
    SseEvent { event: Some(event.to_string()), data: data.to_string(), id: None }
}

fn with_id(data: &str, id: &str) -> SseEvent {
    SseEvent { event: None, data: data.to_string(), id: Some(id.to_string()) }
}

/// Decodes `bytes` whole, under every two-way split, every three-way split
/// (when short), and one byte at a time, asserting they all give `want`.
fn assert_all_chunkings(bytes: &[u8], want: &[SseEvent]) {
    assert_eq!(decode(bytes), want, "whole: {:?}", String::from_utf8_lossy(bytes));
    for i in 0..=bytes.len() {
        let (a, b) = bytes.split_at(i);
        assert_eq!(decode_chunks(&[a, b]), want, "split at {i}: {:?}", String::from_utf8_lossy(bytes));
    }
    if bytes.len() <= 64 {
        for i in 0..=bytes.len() {
            for j in i..=bytes.len() {
                let chunks = [&bytes[..i], &bytes[i..j], &bytes[j..]];
                assert_eq!(decode_chunks(&chunks), want, "split at {i},{j}: {:?}", String::from_utf8_lossy(bytes));
            }
        }
    }
    let bytes_one: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(decode_chunks(&bytes_one), want, "byte by byte: {:?}", String::from_utf8_lossy(bytes));
}

// ----- line ends ---------------------------------------------------------------

#[test]
fn lf_line_ends() {
    assert_all_chunkings(b"data: a\n\ndata: b\n\n", &[msg("a"), msg("b")]);
}

#[test]
fn crlf_line_ends() {
    assert_all_chunkings(b"data: a\r\n\r\ndata: b\r\n\r\n", &[msg("a"), msg("b")]);
}

#[test]
fn cr_line_ends() {
    assert_all_chunkings(b"data: a\r\rdata: b\r\r", &[msg("a"), msg("b")]);
}

#[test]
fn mixed_line_ends() {
    // Each line end style once in each position: CR LF, LF CR, CRLF LF, CR CRLF.
    assert_all_chunkings(
        b"data: a\rdata: b\n\ndata: c\n\rdata: d\r\n\ndata: e\r\r\n",
        &[msg("a\nb"), msg("c"), msg("d"), msg("e")],
    );
}

#[test]
fn crlf_is_one_line_end_not_two() {
    // Were CR and LF two line ends, the LF would make a blank line and dispatch "a" alone.
    assert_all_chunkings(b"data: a\r\ndata: b\r\n\r\n", &[msg("a\nb")]);
}

#[test]
fn lf_cr_is_two_line_ends() {
    // LF then CR is not a pair: the CR ends an empty line, which dispatches.
    assert_all_chunkings(b"data: a\n\rdata: b\n\r", &[msg("a"), msg("b")]);
}

// ----- fields ------------------------------------------------------------------

#[test]
fn comment_lines_are_ignored() {
    assert_all_chunkings(b": keep-alive\n\ndata: x\n: between data lines\ndata: y\n\n:\n\n", &[msg("x\ny")]);
}

#[test]
fn a_comment_alone_dispatches_nothing() {
    assert_eq!(decode(b": ping\n\n: ping\n\n"), vec![]);
}

#[test]
fn multi_line_data_is_joined_with_lf() {
    assert_all_chunkings(b"data: a\ndata: b\ndata: c\n\n", &[msg("a\nb\nc")]);
    // An empty data line is still a line: the spec appends its value and an LF.
    assert_eq!(decode(b"data: a\ndata:\ndata: b\n\n"), vec![msg("a\n\nb")]);
    assert_eq!(decode(b"data: a\ndata:\n\n"), vec![msg("a\n")]);
}

#[test]
fn one_space_after_the_colon_is_dropped() {
    assert_eq!(decode(b"data:x\n\n"), vec![msg("x")]);
    assert_eq!(decode(b"data: x\n\n"), vec![msg("x")]);
    assert_eq!(decode(b"data:  x\n\n"), vec![msg(" x")], "only one space is removed");
    assert_eq!(decode(b"data:\tx\n\n"), vec![msg("\tx")], "a tab is not the space");
    assert_eq!(decode(b"data: x \n\n"), vec![msg("x ")], "trailing spaces stay");
}

#[test]
fn the_value_runs_from_the_first_colon() {
    assert_eq!(decode(b"data: {\"a\":1}\n\n"), vec![msg("{\"a\":1}")]);
    assert_eq!(decode(b"data::x\n\n"), vec![msg(":x")]);
}

#[test]
fn an_empty_data_field_makes_an_event_with_empty_data() {
    assert_eq!(decode(b"data:\n\n"), vec![msg("")]);
    assert_eq!(decode(b"data: \n\n"), vec![msg("")]);
}

#[test]
fn a_field_without_colon_has_an_empty_value() {
    assert_all_chunkings(b"data\n\n", &[msg("")]);
    assert_eq!(decode(b"data\ndata\n\n"), vec![msg("\n")]);
    // `event` alone sets the type to empty, which is the default type.
    assert_eq!(decode(b"event: x\nevent\ndata: d\n\n"), vec![msg("d")]);
}

#[test]
fn field_names_are_exact() {
    // Case matters, and a space before the colon is part of the name.
    assert_eq!(decode(b"Data: a\nDATA: b\ndata : c\nevent : e\n\n"), vec![]);
    assert_eq!(decode(b"datax: a\n\n"), vec![]);
}

#[test]
fn unknown_fields_and_retry_are_ignored() {
    assert_all_chunkings(b"retry: 1000\nfoo: bar\nbaz\ndata: x\n\n", &[msg("x")]);
}

#[test]
fn event_names_and_their_reset() {
    assert_all_chunkings(
        b"event: add\ndata: 1\n\ndata: 2\n\nevent: a\nevent: b\ndata: 3\n\n",
        &[named("add", "1"), msg("2"), named("b", "3")],
    );
}

#[test]
fn an_event_name_without_data_is_dropped_at_the_blank_line() {
    // The blank line dispatches nothing but still resets the type.
    assert_eq!(decode(b"event: ping\n\ndata: x\n\n"), vec![msg("x")]);
}

#[test]
fn an_empty_event_name_is_the_default_type() {
    assert_eq!(decode(b"event:\ndata: x\n\n"), vec![msg("x")]);
}

#[test]
fn id_is_the_last_event_id_and_persists() {
    assert_all_chunkings(
        b"id: 7\ndata: a\n\ndata: b\n\nid: 8\ndata: c\n\n",
        &[with_id("a", "7"), with_id("b", "7"), with_id("c", "8")],
    );
}

#[test]
fn id_without_data_still_sets_the_last_event_id() {
    // WHATWG sets the last event ID buffer when the field is read, whether or not an event follows.
    assert_eq!(decode(b"id: 3\n\ndata: x\n\n"), vec![with_id("x", "3")]);
}

#[test]
fn an_empty_id_resets_the_last_event_id() {
    assert_eq!(
        decode(b"id: 1\ndata: a\n\nid\ndata: b\n\nid: 2\ndata: c\n\nid:\ndata: d\n\n"),
        vec![with_id("a", "1"), msg("b"), with_id("c", "2"), msg("d")]
    );
}

#[test]
fn an_id_holding_nul_is_ignored() {
    assert_eq!(decode(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n"), vec![with_id("a", "1"), with_id("b", "1")]);
}

#[test]
fn an_event_with_no_data_is_not_dispatched() {
    assert_eq!(decode(b"event: x\nid: 1\nretry: 5\n\n"), vec![]);
    assert_eq!(decode(b"\n\n\r\n\r\r"), vec![]);
    assert_eq!(decode(b""), vec![]);
}

// ----- BOM -----------------------------------------------------------------------

#[test]
fn a_leading_bom_is_skipped() {
    assert_all_chunkings(b"\xEF\xBB\xBFdata: x\n\n", &[msg("x")]);
}

#[test]
fn a_leading_bom_split_across_chunks_is_skipped() {
    let want = vec![msg("x")];
    assert_eq!(decode_chunks(&[b"\xEF", b"\xBB", b"\xBFdata: x\n\n"]), want);
    assert_eq!(decode_chunks(&[b"\xEF", b"", b"\xBB\xBF", b"data: x\n\n"]), want);
    assert_eq!(decode_chunks(&[b"", b"\xEF\xBB", b"\xBF", b"data", b": x\n\n"]), want);
}

#[test]
fn only_one_bom_is_skipped() {
    // The second BOM decodes to U+FEFF, which makes the field name "\u{FEFF}data": unknown.
    assert_all_chunkings(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: x\n\ndata: y\n\n", &[msg("y")]);
}

#[test]
fn a_bom_later_in_the_stream_is_data() {
    assert_all_chunkings("data: \u{FEFF}x\n\n".as_bytes(), &[msg("\u{FEFF}x")]);
    // At the start of a later line it is part of the field name, so that line is ignored.
    assert_all_chunkings(b"data: a\n\n\xEF\xBB\xBFdata: b\n\ndata: c\n\n", &[msg("a"), msg("c")]);
}

#[test]
fn a_partial_bom_is_not_a_bom() {
    // EF BB is an incomplete UTF-8 sequence: one U+FFFD, here on a line of its own.
    assert_all_chunkings(b"\xEF\xBB\ndata: x\n\n", &[msg("x")]);
    // EF BB then a non-BF byte: the bytes are part of the first line's field name.
    assert_all_chunkings(b"\xEF\xBBdata: x\n\ndata: y\n\n", &[msg("y")]);
    assert_eq!(decode_chunks(&[b"\xEF", b"\xBB", b"x\n\ndata: y\n\n"]), vec![msg("y")]);
    // A stream that is nothing but a BOM prefix.
    assert_eq!(decode(b"\xEF\xBB"), vec![]);
    assert_eq!(decode(b"\xEF\xBB\xBF"), vec![]);
}

// ----- end of stream ------------------------------------------------------------------

#[test]
fn finish_dispatches_a_final_event_without_its_blank_line() {
    for bytes in [&b"data: x"[..], b"data: x\n", b"data: x\r", b"data: x\r\n"] {
        assert_all_chunkings(bytes, &[msg("x")]);
        assert_eq!(fed_only(bytes), vec![], "no event before finish: {bytes:?}");
    }
    assert_all_chunkings(
        b"event: e\nid: 1\ndata: x\ndata: y",
        &[SseEvent { event: Some("e".into()), data: "x\ny".into(), id: Some("1".into()) }],
    );
}

#[test]
fn finish_dispatches_nothing_when_no_data_is_pending() {
    assert_eq!(decode(b"data: x\n\n"), vec![msg("x")]);
    assert_eq!(decode(b"data: x\n\nevent: tail"), vec![msg("x")]);
    assert_eq!(decode(b"data: x\n\n: comment without line end"), vec![msg("x")]);
}

#[test]
fn events_come_out_as_soon_as_their_blank_line_arrives() {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    decoder.feed(b"data: a\n", &mut out);
    assert_eq!(out, vec![]);
    decoder.feed(b"\ndata: b", &mut out);
    assert_eq!(out, vec![msg("a")]);
    decoder.feed(b"\r", &mut out);
    assert_eq!(out, vec![msg("a")]);
    // A lone CR at the end of a chunk already ends the line; the next CR makes the blank line.
    decoder.feed(b"\r", &mut out);
    assert_eq!(out, vec![msg("a"), msg("b")]);
}

#[test]
fn finish_leaves_the_decoder_at_the_start_of_a_new_stream() {
    let mut decoder = SseDecoder::new();
    let mut out = Vec::new();
    decoder.feed(b"id: 1\nevent: e\ndata: a", &mut out);
    decoder.finish(&mut out);
    assert_eq!(out, vec![SseEvent { event: Some("e".into()), data: "a".into(), id: Some("1".into()) }]);
    out.clear();
    decoder.finish(&mut out);
    assert_eq!(out, vec![], "a second finish dispatches nothing again");
    // The new stream gets its BOM skipped and starts without an id or a pending CR.
    decoder.feed(b"\xEF\xBB\xBF\ndata: b\n\n", &mut out);
    decoder.finish(&mut out);
    assert_eq!(out, vec![msg("b")]);
}

// ----- chunk boundaries -------------------------------------------------------------------

#[test]
fn a_crlf_split_between_cr_and_lf_is_one_line_end() {
    let want = vec![msg("a\nb")];
    assert_eq!(decode_chunks(&[b"data: a\r", b"\ndata: b\r\n\r\n"]), want);
    // Empty chunks between the CR and the LF do not break the pair.
    assert_eq!(decode_chunks(&[b"data: a\r", b"", b"", b"\ndata: b\r\n\r\n"]), want);
    // CR at the end of a chunk followed by a non-LF byte is a line end on its own.
    assert_eq!(decode_chunks(&[b"data: a\r", b"data: b\r", b"\r"]), want);
}

#[test]
fn a_chunk_may_end_mid_utf8_character() {
    let text = "data: é€😀 ñ\n\n";
    assert_all_chunkings(text.as_bytes(), &[msg("é€😀 ñ")]);
    let name = "event: ✓\ndata: ü\nid: ☃\n\n";
    assert_all_chunkings(
        name.as_bytes(),
        &[SseEvent { event: Some("✓".into()), data: "ü".into(), id: Some("☃".into()) }],
    );
}

#[test]
fn invalid_utf8_becomes_replacement_characters() {
    assert_all_chunkings(b"data: a\xFFb\n\n", &[msg("a\u{FFFD}b")]);
    // A truncated sequence right before the line end: one U+FFFD for the maximal subpart.
    assert_all_chunkings(b"data: \xE2\x82\n\n", &[msg("\u{FFFD}")]);
}

// ----- the wire corpus ---------------------------------------------------------------------

/// Every split point of a small capture; for a large one (where that would
/// be quadratic) every point near a line end, where the decoder has state to
/// carry, plus a regular stride.
fn split_points(bytes: &[u8]) -> Vec<usize> {
    if bytes.len() <= 8 * 1024 {
        return (0..=bytes.len()).collect();
    }
    let mut points: Vec<usize> = (0..=bytes.len()).step_by(97).collect();
    for (i, b) in bytes.iter().enumerate() {
        if *b == b'\r' || *b == b'\n' {
            points.extend(i.saturating_sub(2)..=(i + 2).min(bytes.len()));
        }
    }
    points.push(bytes.len());
    points.sort_unstable();
    points.dedup();
    points
}

/// Every recorded provider stream decodes the same however it is chunked,
/// and every payload is what the provider documents: a JSON value, or
/// OpenAI's `[DONE]` terminator.
#[test]
fn corpus_streams_decode_the_same_under_any_chunking() {
    for style in [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses] {
        for (path, stream) in common::captures(style) {
            if !stream {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let events = decode(&bytes);
            assert!(!events.is_empty(), "{}: no events", path.display());
            for ev in &events {
                let ok = serde_json::from_str::<serde_json::Value>(&ev.data).is_ok()
                    || (style == Style::OpenAi && ev.data == "[DONE]");
                assert!(ok, "{}: payload is not JSON: {:?}", path.display(), ev.data);
            }
            if matches!(style, Style::Anthropic | Style::OpenAiResponses) {
                // Anthropic and Responses name every event after its payload's `type`.
                for ev in &events {
                    let v: serde_json::Value = serde_json::from_str(&ev.data).unwrap();
                    assert_eq!(ev.event.as_deref(), v["type"].as_str(), "{}", path.display());
                }
            }
            for i in split_points(&bytes) {
                let (a, b) = bytes.split_at(i);
                assert_eq!(decode_chunks(&[a, b]), events, "{}: split at {i}", path.display());
            }
            let one: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(decode_chunks(&one), events, "{}: byte by byte", path.display());
        }
    }
}

// ----- generated streams ---------------------------------------------------------------------

/// One piece of a generated stream.
#[derive(Debug, Clone)]
enum Item {
    /// An event with at least one data line.
    Event { name: Option<String>, id: Option<String>, data: Vec<String>, comment: Option<String> },
    /// An `id:` with no data: sets the last event ID, dispatches nothing.
    IdOnly(String),
    /// An `event:` with no data: dispatches nothing.
    NameOnly(String),
    /// A comment block.
    Comment(String),
}

/// How a line is written: which line end, and whether the space after the colon is used.
#[derive(Debug, Clone, Copy)]
struct LineStyle {
    line_end: u8,
    space: bool,
}

/// A value without line ends (names, ids and data are single lines on the wire).
fn value() -> impl Strategy<Value = String> {
    "[^\r\n]{0,12}"
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        6 => (
            proptest::option::of("[^\r\n]{1,8}"),
            proptest::option::of("[^\r\n\0]{1,8}"),
            proptest::collection::vec(value(), 1..4),
            proptest::option::of(value()),
        )
            .prop_map(|(name, id, data, comment)| Item::Event { name, id, data, comment }),
        1 => "[^\r\n\0]{1,8}".prop_map(Item::IdOnly),
        1 => "[^\r\n]{1,8}".prop_map(Item::NameOnly),
        1 => value().prop_map(Item::Comment),
    ]
}

/// Writes one line. `field: value`, with the optional space only where
/// leaving it out keeps the value (a value starting with a space needs it).
fn push_line(out: &mut Vec<u8>, prev_cr: &mut bool, field: &str, value: Option<&str>, style: LineStyle) {
    let start = out.len();
    match value {
        Some(v) => {
            out.extend_from_slice(field.as_bytes());
            out.push(b':');
            if style.space || v.starts_with(' ') {
                out.push(b' ');
            }
            out.extend_from_slice(v.as_bytes());
        }
        None => out.extend_from_slice(field.as_bytes()),
    }
    let empty = out.len() == start;
    // After a CR, an empty line ended by LF would read as the second half of a CRLF.
    let line_end = if *prev_cr && empty && style.line_end == 0 { 1 } else { style.line_end };
    match line_end {
        0 => out.push(b'\n'),
        1 => out.push(b'\r'),
        _ => out.extend_from_slice(b"\r\n"),
    }
    *prev_cr = line_end == 1;
}

/// Serializes the items with the given line styles (cycled), an optional BOM,
/// and optionally without the blank line after the last item. Returns the
/// bytes and the events the WHATWG rules say they carry.
fn serialize(items: &[Item], styles: &[LineStyle], bom: bool, final_blank: bool) -> (Vec<u8>, Vec<SseEvent>) {
    let mut out = Vec::new();
    if bom {
        out.extend_from_slice(b"\xEF\xBB\xBF");
    }
    let mut want = Vec::new();
    let mut last_id: Option<String> = None;
    let mut prev_cr = false;
    let mut n = 0;
    let mut next_style = || {
        n += 1;
        styles[n % styles.len()]
    };
    for (i, item) in items.iter().enumerate() {
        match item {
            Item::Event { name, id, data, comment } => {
                if let Some(c) = comment {
                    push_line(&mut out, &mut prev_cr, "", Some(c), next_style());
                }
                if let Some(id) = id {
                    push_line(&mut out, &mut prev_cr, "id", Some(id), next_style());
                    last_id = Some(id.clone());
                }
                if let Some(name) = name {
                    push_line(&mut out, &mut prev_cr, "event", Some(name), next_style());
                }
                for d in data {
                    push_line(&mut out, &mut prev_cr, "data", Some(d), next_style());
                }
                want.push(SseEvent { event: name.clone(), data: data.join("\n"), id: last_id.clone() });
            }
            Item::IdOnly(id) => {
                push_line(&mut out, &mut prev_cr, "id", Some(id), next_style());
                last_id = Some(id.clone());
            }
            Item::NameOnly(name) => push_line(&mut out, &mut prev_cr, "event", Some(name), next_style()),
            Item::Comment(c) => push_line(&mut out, &mut prev_cr, "", Some(c), next_style()),
        }
        if final_blank || i + 1 < items.len() {
            push_line(&mut out, &mut prev_cr, "", None, next_style());
        }
    }
    (out, want)
}

fn line_styles() -> impl Strategy<Value = Vec<LineStyle>> {
    proptest::collection::vec((0u8..3, any::<bool>()).prop_map(|(line_end, space)| LineStyle { line_end, space }), 1..6)
}

fn stream() -> impl Strategy<Value = (Vec<u8>, Vec<SseEvent>)> {
    (proptest::collection::vec(item(), 0..6), line_styles(), any::<bool>(), any::<bool>())
        .prop_map(|(items, styles, bom, final_blank)| serialize(&items, &styles, bom, final_blank))
}

/// Cuts `bytes` at the given (sorted, clamped) positions.
fn cut<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    points.sort_unstable();
    let mut out = Vec::new();
    let mut prev = 0;
    for p in points {
        out.push(&bytes[prev..p]);
        prev = p;
    }
    out.push(&bytes[prev..]);
    out
}

proptest! {
    #[test]
    fn generated_streams_decode_whole((bytes, want) in stream()) {
        prop_assert_eq!(decode(&bytes), want);
    }

    #[test]
    fn generated_streams_decode_under_every_two_way_split((bytes, want) in stream()) {
        for i in 0..=bytes.len() {
            let (a, b) = bytes.split_at(i);
            prop_assert_eq!(decode_chunks(&[a, b]), want.clone(), "split at {}", i);
        }
    }

    #[test]
    fn generated_streams_decode_under_random_chunkings(
        (bytes, want) in stream(),
        cuts in proptest::collection::vec(any::<usize>(), 0..24),
    ) {
        prop_assert_eq!(decode_chunks(&cut(&bytes, &cuts)), want);
    }

    #[test]
    fn generated_streams_decode_one_byte_at_a_time((bytes, want) in stream()) {
        let one: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(decode_chunks(&one), want);
    }

    /// Arbitrary bytes: chunking never changes the result.
    #[test]
    fn arbitrary_bytes_decode_the_same_under_any_chunking(
        bytes in proptest::collection::vec(
            prop_oneof![Just(b'\r'), Just(b'\n'), Just(b':'), Just(b' '), Just(0xEF), Just(0xBB), Just(0xBF), any::<u8>()],
            0..64,
        ),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let whole = decode(&bytes);
        prop_assert_eq!(decode_chunks(&cut(&bytes, &cuts)), whole.clone());
        let one: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(decode_chunks(&one), whole);
    }
}

// ----- the fuzz target bodies ----------------------------------------------------------------

/// The fuzz target bodies, run on the corpus and on inputs that once broke
/// an invariant. Only built with `--features fuzzing`.
#[cfg(feature = "fuzzing")]
mod fuzz_bodies {
    use super::*;
    use nexus_proto::fuzzing;

    /// Inputs that exercise the decoder's edge cases; each is checked against the reference.
    const EDGE_CASES: &[&[u8]] = &[
        b"",
        b"\r",
        b"\n",
        b"\r\n",
        b"\xEF",
        b"\xEF\xBB",
        b"\xEF\xBB\xBF",
        b"\xEF\xBB\xBF\xEF\xBB\xBF",
        b"\xEF\xBBx",
        b"data",
        b"data:",
        b"data\r",
        b"data\r\r",
        b"data: a\r\n\rdata: b",
        b"id: \x00\ndata\n",
        b"event\n:data\ndata",
        b"\xEF\xBB\xBF:\r\ndata: \xE2\x82",
    ];

    #[test]
    fn sse_body_on_edge_cases() {
        for bytes in EDGE_CASES {
            fuzzing::sse(bytes);
        }
    }

    #[test]
    fn reference_agrees_with_the_rules() {
        // The oracle itself, on cases whose answers the tests above state.
        assert_eq!(fuzzing::reference_sse(b"data: a\r\ndata: b\r\n\r\n"), vec![msg("a\nb")]);
        assert_eq!(
            fuzzing::reference_sse(b"\xEF\xBB\xBFid: 1\ndata\n\ndata:x"),
            vec![with_id("", "1"), with_id("x", "1")]
        );
        assert_eq!(fuzzing::reference_sse(b"event: e\n\ndata: y\n\n"), vec![msg("y")]);
    }

    #[test]
    fn bodies_on_the_corpus() {
        for style in [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses] {
            for (path, stream) in common::captures(style) {
                let bytes = std::fs::read(&path).unwrap();
                if stream {
                    fuzzing::sse(&bytes);
                    fuzzing::decode_stream(style, &bytes);
                    // A prefix is a truncated stream: an error, never a panic, and still chunking-proof.
                    fuzzing::decode_stream(style, &bytes[..bytes.len() / 2]);
                } else {
                    fuzzing::decode_response(style, &bytes);
                    fuzzing::decode_response(style, &bytes[..bytes.len() / 2]);
                }
            }
        }
    }

    proptest! {
        #[test]
        fn sse_body_on_arbitrary_bytes(
            bytes in proptest::collection::vec(
                prop_oneof![Just(b'\r'), Just(b'\n'), Just(b':'), Just(b' '), Just(0), Just(0xEF), Just(0xBB), Just(0xBF), any::<u8>()],
                0..96,
            ),
        ) {
            fuzzing::sse(&bytes);
        }

        #[test]
        fn sse_body_on_generated_streams((bytes, _want) in stream()) {
            fuzzing::sse(&bytes);
        }

        #[test]
        fn decode_bodies_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            for style in [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses] {
                fuzzing::decode_response(style, &bytes);
                fuzzing::decode_stream(style, &bytes);
            }
        }
    }
}
