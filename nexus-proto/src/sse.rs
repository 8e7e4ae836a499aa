//! Incremental Server-Sent Events decoder, per the WHATWG event-stream rules:
//! LF, CRLF and CR line ends; `:` comment lines; multi-line `data:`; `event:`
//! and `id:` fields; a leading BOM; a final event without its blank line at EOF.
//! Chunks may split anywhere, including inside a line ending or a UTF-8 character.
//!
//! One deliberate departure from the standard: WHATWG discards an event that
//! the stream ends in the middle of, but several provider proxies close the
//! connection right after the last `data:` line, so [`SseDecoder::finish`]
//! dispatches it. Whether the turn is complete is the assembler's call (each
//! provider has its own end marker), not the framing's.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field (`None` means the default type, `message`).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The stream's last event ID when this event was dispatched: the value of
    /// the most recent `id:` field, which WHATWG keeps across events until
    /// another `id:` replaces it. `None` when none came or an empty `id:` reset it.
    pub id: Option<String>,
}

/// Feeds bytes in, gets events out. Keeps only the unfinished line and the
/// unfinished event between calls, so memory does not grow with the stream.
#[derive(Debug, Clone, Default)]
pub struct SseDecoder {
    /// Bytes of the line not yet ended. Kept as bytes, not text, because a
    /// chunk may end inside a UTF-8 character; a line is decoded once whole.
    line: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF in the next one belongs to that line end.
    after_cr: bool,
    /// Whether the stream start has been checked for a BOM.
    bom_checked: bool,
    /// Bytes held back while deciding whether the stream starts with a BOM
    /// (always a strict prefix of the BOM while `bom_checked` is false).
    head: Vec<u8>,
    event: Option<String>,
    data: String,
    /// Whether a `data` field came since the last dispatch. Needed apart from
    /// `data` because `data:` with an empty value still makes an event.
    has_data: bool,
    id: Option<String>,
    /// The last valid `retry:` value (milliseconds).
    retry: Option<u64>,
}

const BOM: &[u8] = &[0xEF, 0xBB, 0xBF];

/// The position of the first CR or LF. Eight bytes at a time: data lines are
/// long (a whole JSON payload), and a byte-at-a-time search with an early
/// exit is not vectorized.
fn find_line_end(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    const LF: u64 = u64::from_ne_bytes([b'\n'; 8]);
    const CR: u64 = u64::from_ne_bytes([b'\r'; 8]);
    // Whether any byte of `x` is zero (the classic bit trick; exact for "any").
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS != 0;
    let mut chunks = bytes.chunks_exact(8);
    let mut at = 0;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_ne_bytes(word);
        if has_zero(x ^ LF) || has_zero(x ^ CR) {
            break;
        }
        at += 8;
    }
    bytes.get(at..)?.iter().position(|&b| b == b'\n' || b == b'\r').map(|p| at + p)
}

impl SseDecoder {
    /// A decoder at the start of a stream.
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Feeds a chunk; appends every event completed by it to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        if self.bom_checked {
            self.feed_lines(chunk, out);
            return;
        }
        self.head.extend_from_slice(chunk);
        let n = self.head.len().min(BOM.len());
        if self.head.get(..n) != BOM.get(..n) {
            self.bom_checked = true;
        } else if self.head.len() >= BOM.len() {
            self.bom_checked = true;
            self.head.drain(..BOM.len());
        } else {
            return; // a BOM prefix so far: wait for more
        }
        let head = std::mem::take(&mut self.head);
        self.feed_lines(&head, out);
    }

    fn feed_lines(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) {
        let mut rest = bytes;
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if let Some(tail) = rest.strip_prefix(b"\n") {
                rest = tail;
            }
        }
        while let Some(pos) = find_line_end(rest) {
            let (text, tail) = rest.split_at(pos);
            if self.line.is_empty() {
                // The whole line is in this chunk: read it in place.
                self.line_ended(text, out);
            } else {
                self.line.extend_from_slice(text);
                self.end_line(out);
            }
            // `tail` starts with the CR or LF found above.
            rest = match tail {
                [b'\r', b'\n', after @ ..] => after,
                [b'\r'] => {
                    // The LF of a CRLF may be the first byte of the next chunk.
                    self.after_cr = true;
                    &[]
                }
                [_, after @ ..] => after,
                [] => &[],
            };
        }
        self.line.extend_from_slice(rest);
    }

    /// The reconnection time the stream asked for with its last valid
    /// `retry:` field, in milliseconds (reconnecting is the driver's business).
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// The stream's last event ID so far (the most recent `id:` field, even
    /// on an event that carried no data, such as a priming event): what a
    /// reconnect sends as `Last-Event-ID`.
    pub fn last_event_id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The stream ended: dispatches a final event that had no blank line after
    /// it. The decoder is then back at the start of a new stream.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        // Held-back bytes are a strict BOM prefix: as text they are one U+FFFD,
        // an unterminated line whose field name matches nothing, so they are
        // dropped without effect.
        if !self.line.is_empty() {
            self.end_line(out);
        }
        self.dispatch(out);
        *self = SseDecoder::default();
    }

    /// Ends the line held in `self.line`.
    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        let line = std::mem::take(&mut self.line);
        self.line_ended(&line, out);
        // Keep the allocation for the next line.
        self.line = line;
        self.line.clear();
    }

    /// Interprets one whole line (without its line end).
    fn line_ended(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        // CR and LF never occur inside a UTF-8 sequence, so decoding per line
        // gives the same text as decoding the whole stream at once. Valid
        // UTF-8 (every provider's) is borrowed, not copied, and checked with
        // `from_utf8`, which is several times faster than the lossy decoder.
        let lossy;
        let text = match std::str::from_utf8(line) {
            Ok(text) => text,
            Err(_) => {
                lossy = String::from_utf8_lossy(line);
                &*lossy
            }
        };
        let (field, value) = match text.split_once(':') {
            Some(("", _)) => ("", ""), // a comment
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // WHATWG ignores an id holding NUL; an empty one resets the last event ID.
            "id" if !value.contains('\0') => self.id = (!value.is_empty()).then(|| value.to_string()),
            // WHATWG: only ASCII digits set the reconnection time; anything else is ignored.
            "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                self.retry = value.parse().ok().or(Some(u64::MAX));
            }
            _ => {} // comments and unknown fields
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        if !self.has_data {
            // WHATWG: an event with no data is not dispatched; its type is reset.
            self.event = None;
            return;
        }
        out.push(SseEvent {
            event: self.event.take().filter(|e| !e.is_empty()),
            data: std::mem::take(&mut self.data),
            id: self.id.clone(),
        });
        self.has_data = false;
    }
}
