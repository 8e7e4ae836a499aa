//! Incremental Server-Sent Events decoder, per the WHATWG event-stream rules:
//! LF, CRLF and CR line ends; `:` comment lines; multi-line `data:`; `event:`
//! and `id:` fields; a leading BOM; a final event without its blank line at EOF.
//! Chunks may split anywhere, including inside a line ending or a UTF-8 character.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `event:` field (`None` means the default type, `message`).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The `id:` field, when one came with this event.
    pub id: Option<String>,
}

/// Feeds bytes in, gets events out. Keeps only the unfinished line between calls.
#[derive(Debug, Clone, Default)]
pub struct SseDecoder {
    line: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF in the next one belongs to that line end.
    after_cr: bool,
    /// Whether the stream start has been checked for a BOM.
    bom_checked: bool,
    /// Bytes held back while deciding whether the stream starts with a BOM.
    head: Vec<u8>,
    event: Option<String>,
    data: String,
    has_data: bool,
    id: Option<String>,
}

const BOM: &[u8] = &[0xEF, 0xBB, 0xBF];

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
        if self.head[..n] != BOM[..n] {
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
        if bytes.is_empty() {
            return;
        }
        let mut i = 0;
        if self.after_cr {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                i = 1;
            }
        }
        let mut start = i;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => {
                    self.line.extend_from_slice(&bytes[start..i]);
                    self.end_line(out);
                    i += 1;
                    start = i;
                }
                b'\r' => {
                    self.line.extend_from_slice(&bytes[start..i]);
                    self.end_line(out);
                    if i + 1 == bytes.len() {
                        self.after_cr = true;
                        i += 1;
                    } else if bytes[i + 1] == b'\n' {
                        i += 2;
                    } else {
                        i += 1;
                    }
                    start = i;
                }
                _ => i += 1,
            }
        }
        self.line.extend_from_slice(&bytes[start..]);
    }

    /// The stream ended: dispatches a final event that had no blank line after it.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        if !self.bom_checked {
            self.bom_checked = true;
            let head = std::mem::take(&mut self.head);
            if head.as_slice() != &BOM[..head.len()] {
                self.feed_lines(&head, out);
            }
        }
        if !self.line.is_empty() {
            self.end_line(out);
        }
        self.dispatch(out);
        self.after_cr = false;
    }

    fn end_line(&mut self, out: &mut Vec<SseEvent>) {
        if self.line.is_empty() {
            self.dispatch(out);
            return;
        }
        let line = std::mem::take(&mut self.line);
        let text = String::from_utf8_lossy(&line);
        let (field, value) = match text.find(':') {
            Some(0) => return, // comment
            Some(pos) => {
                let v = &text[pos + 1..];
                (&text[..pos], v.strip_prefix(' ').unwrap_or(v))
            }
            None => (&text[..], ""),
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
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            _ => {}
        }
        self.line = line;
        self.line.clear();
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
