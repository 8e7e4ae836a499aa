//! A planned response and how it is written: whole bodies with
//! Content-Length, streams as one chunk per event, and the ways a faulty
//! provider cuts either short.

use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use super::http::{write_chunk, write_full, write_head, write_last_chunk};
use super::script::Recorded;

/// Chunk sizes a recorded stream is cut into, used in turn. Starting at one
/// byte and growing, the cuts fall inside events, `\r\n` pairs and UTF-8
/// sequences alike; being fixed, a failure replays with the same cuts.
const RECORDED_CHUNK_SIZES: [usize; 12] = [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233];

/// Where a whole-body response stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FullCut {
    /// Sent entirely.
    None,
    /// Only the head, then the connection closes.
    AfterHeaders,
    /// The head and half the body, then the connection closes.
    Half,
}

/// Where a chunked response stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamCut {
    /// Every piece, then the terminating chunk.
    None,
    /// This many pieces, then the connection closes (no terminating chunk).
    AfterPieces(usize),
    /// Every piece, then the connection closes without the terminating chunk.
    NoTerminator,
}

/// The body of a planned response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// One body with Content-Length.
    Full {
        /// `content-type` value.
        content_type: &'static str,
        /// The bytes.
        bytes: Vec<u8>,
        /// Where it stops.
        cut: FullCut,
    },
    /// A chunked body, one chunk per piece (one SSE event each).
    Chunked {
        /// `content-type` value.
        content_type: &'static str,
        /// The pieces.
        pieces: Vec<Vec<u8>>,
        /// Where it stops.
        cut: StreamCut,
    },
    /// Nothing at all: the connection closes before the status line.
    ResetBeforeHeaders,
}

/// A planned response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// Extra headers (`retry-after`, request ids).
    pub headers: Vec<(String, String)>,
    /// What follows the head.
    pub body: Body,
    /// Wait this long before writing anything.
    pub stall_ms: u64,
    /// In a chunked body: after this many pieces, wait this many milliseconds.
    pub pause: Option<(usize, u64)>,
    /// Close the connection after the response, without having said so.
    pub hang_up: bool,
}

impl Reply {
    /// A JSON body with this status.
    pub fn json(status: u16, bytes: Vec<u8>) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: Body::Full { content_type: "application/json", bytes, cut: FullCut::None },
            stall_ms: 0,
            pause: None,
            hang_up: false,
        }
    }

    /// An SSE stream, one chunk per event.
    pub fn stream(pieces: Vec<Vec<u8>>) -> Reply {
        Reply {
            status: 200,
            headers: vec![("cache-control".to_string(), "no-cache".to_string())],
            body: Body::Chunked { content_type: "text/event-stream", pieces, cut: StreamCut::None },
            stall_ms: 0,
            pause: None,
            hang_up: false,
        }
    }

    /// A recorded answer, sent as recorded: a whole body with its status, or
    /// a stream cut into chunks of `RECORDED_CHUNK_SIZES`.
    pub fn recorded(recorded: &Recorded) -> Reply {
        if !recorded.stream {
            return Reply::json(recorded.status, recorded.body.clone());
        }
        let mut pieces = Vec::new();
        let mut rest = recorded.body.as_slice();
        for size in RECORDED_CHUNK_SIZES.iter().cycle() {
            if rest.is_empty() {
                break;
            }
            let (piece, tail) = rest.split_at((*size).min(rest.len()));
            pieces.push(piece.to_vec());
            rest = tail;
        }
        Reply { status: recorded.status, ..Reply::stream(pieces) }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Reply {
        self.headers.push((name.to_string(), value.into()));
        self
    }

    /// The status as sent, or `None` when no status line is written.
    pub fn sent_status(&self) -> Option<u16> {
        (self.body != Body::ResetBeforeHeaders).then_some(self.status)
    }

    /// Whether the connection ends after this response whatever the client asked.
    pub fn closes(&self) -> bool {
        match &self.body {
            Body::Full { cut, .. } => *cut != FullCut::None,
            Body::Chunked { cut, .. } => *cut != StreamCut::None,
            Body::ResetBeforeHeaders => true,
        }
    }
}

/// Sleeps `ms`, waking early when the server shuts down.
fn stall(ms: u64, shutdown: &AtomicBool) {
    let until = Instant::now() + Duration::from_millis(ms);
    while Instant::now() < until && !shutdown.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(5).min(until.saturating_duration_since(Instant::now())));
    }
}

/// Writes the reply. Returns whether the connection may carry another request.
pub fn write(
    stream: &mut TcpStream,
    reply: &Reply,
    http11: bool,
    client_close: bool,
    shutdown: &AtomicBool,
) -> io::Result<bool> {
    if reply.stall_ms > 0 {
        stall(reply.stall_ms, shutdown);
        if shutdown.load(Ordering::SeqCst) {
            return Ok(false);
        }
    }
    let close = client_close || reply.closes();
    match &reply.body {
        Body::ResetBeforeHeaders => {}
        Body::Full { content_type, bytes, cut } => match cut {
            FullCut::None => write_full(stream, reply.status, content_type, &reply.headers, close, bytes)?,
            FullCut::AfterHeaders | FullCut::Half => {
                let mut headers = vec![
                    ("content-type".to_string(), content_type.to_string()),
                    ("content-length".to_string(), bytes.len().to_string()),
                ];
                headers.extend_from_slice(&reply.headers);
                write_head(stream, reply.status, &headers)?;
                if *cut == FullCut::Half {
                    stream.write_all(bytes.get(..bytes.len() / 2).unwrap_or_default())?;
                }
                stream.flush()?;
            }
        },
        Body::Chunked { content_type, pieces, cut } => {
            let mut headers = vec![("content-type".to_string(), content_type.to_string())];
            headers.extend_from_slice(&reply.headers);
            if http11 {
                headers.push(("transfer-encoding".to_string(), "chunked".to_string()));
            }
            // HTTP/1.0 has no chunked coding: the body then ends with the connection.
            if close || !http11 {
                headers.push(("connection".to_string(), "close".to_string()));
            }
            write_head(stream, reply.status, &headers)?;
            stream.flush()?;
            let count = match cut {
                StreamCut::AfterPieces(k) => (*k).min(pieces.len()),
                _ => pieces.len(),
            };
            for (i, piece) in pieces.iter().take(count).enumerate() {
                if let Some((after, ms)) = reply.pause {
                    if i == after {
                        stall(ms, shutdown);
                    }
                }
                if shutdown.load(Ordering::SeqCst) {
                    return Ok(false);
                }
                if http11 {
                    write_chunk(stream, piece)?;
                } else {
                    stream.write_all(piece)?;
                    stream.flush()?;
                }
            }
            if http11 && *cut == StreamCut::None {
                write_last_chunk(stream)?;
            }
            if !http11 {
                return Ok(false);
            }
        }
    }
    if close || reply.hang_up {
        let _ = stream.shutdown(Shutdown::Both);
        return Ok(false);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_stream_is_cut_into_varied_chunks_that_add_up_to_it() {
        let body: Vec<u8> = "data: {\"é\":1}\r\n\r\n".repeat(40).into_bytes();
        let reply = Reply::recorded(&Recorded { status: 200, stream: true, body: body.clone() });
        let Body::Chunked { content_type, pieces, cut } = &reply.body else { panic!("chunked: {reply:?}") };
        assert_eq!((*content_type, *cut, reply.status), ("text/event-stream", StreamCut::None, 200));
        assert_eq!(pieces.concat(), body);
        let sizes: Vec<usize> = pieces.iter().map(Vec::len).collect();
        assert_eq!(sizes[..RECORDED_CHUNK_SIZES.len()], RECORDED_CHUNK_SIZES);
        assert!(sizes.iter().all(|&n| n > 0), "an empty chunk would end the body");
    }

    #[test]
    fn a_recorded_body_keeps_its_status_and_bytes() {
        let body = br#"{"error":{"code":400}}"#.to_vec();
        let reply = Reply::recorded(&Recorded { status: 400, stream: false, body: body.clone() });
        assert_eq!(reply.status, 400);
        assert_eq!(reply.body, Body::Full { content_type: "application/json", bytes: body, cut: FullCut::None });
    }
}
