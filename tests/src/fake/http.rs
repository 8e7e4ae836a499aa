//! A small, strict HTTP/1.1 server side: request heads, Content-Length and
//! chunked request bodies, `Expect: 100-continue`, keep-alive, and response
//! writing with Content-Length or chunked framing.
//!
//! Reads poll with a short socket timeout so a connection thread notices the
//! server's shutdown flag within a few tens of milliseconds, whatever the
//! client does.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest request head accepted (request line + headers).
const MAX_HEAD: usize = 64 * 1024;
/// Largest request body accepted.
pub const MAX_BODY: usize = 32 * 1024 * 1024;
/// How often a blocked read wakes up to look at the shutdown flag.
const POLL: Duration = Duration::from_millis(25);
/// A keep-alive connection with no new request for this long is closed.
const IDLE: Duration = Duration::from_secs(30);
/// A request that started arriving must be complete within this.
const REQUEST_DEADLINE: Duration = Duration::from_secs(15);

/// One parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request target as sent: path plus query.
    pub target: String,
    /// Whether the request line said `HTTP/1.1` (otherwise `HTTP/1.0`).
    pub http11: bool,
    /// Header names (as sent) and values (trimmed), in order.
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    /// Whether a `100 Continue` interim response was sent before the body.
    pub sent_continue: bool,
}

impl Request {
    /// The first header named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The path part of the target.
    pub fn path(&self) -> &str {
        self.target.split_once('?').map_or(self.target.as_str(), |(p, _)| p)
    }

    /// The value of query parameter `key`, percent-decoded.
    pub fn query_param(&self, key: &str) -> Option<String> {
        let (_, query) = self.target.split_once('?')?;
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k) == key).then(|| percent_decode(v))
        })
    }

    /// Whether the client asked to close the connection after this exchange.
    pub fn wants_close(&self) -> bool {
        let tokens = self.header("connection").unwrap_or("").to_ascii_lowercase();
        let has = |t: &str| tokens.split(',').any(|x| x.trim() == t);
        if self.http11 {
            has("close")
        } else {
            !has("keep-alive")
        }
    }
}

/// Decodes `%XX` escapes (and `+` as a space, as forms do); bad escapes stay as they are.
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes.get(i) {
            Some(b'%') => {
                let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            Some(b'+') => out.push(b' '),
            Some(&b) => out.push(b),
            None => break,
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why no request came out of the connection.
#[derive(Debug)]
pub enum ReadError {
    /// The client closed (or went idle) between requests: nothing to answer.
    Closed,
    /// The server is shutting down.
    Shutdown,
    /// The request is malformed: answer this status and close.
    Bad(u16, &'static str),
    /// The socket failed mid-request.
    Io,
}

/// The server end of one connection, with its read buffer.
pub struct Conn {
    /// The socket (also used directly for writing).
    pub stream: TcpStream,
    buf: Vec<u8>,
    shutdown: Arc<AtomicBool>,
}

impl Conn {
    /// Wraps an accepted socket.
    pub fn new(stream: TcpStream, shutdown: Arc<AtomicBool>) -> io::Result<Conn> {
        stream.set_read_timeout(Some(POLL))?;
        stream.set_write_timeout(Some(Duration::from_secs(10)))?;
        // Each SSE event is written as its own chunk and must leave at once.
        stream.set_nodelay(true)?;
        Ok(Conn { stream, buf: Vec::new(), shutdown })
    }

    /// Whether the server is shutting down.
    pub fn shutting_down(&self) -> bool {
        self.shutdown.load(Ordering::SeqCst)
    }

    /// Reads more bytes into the buffer. `Ok(false)` at end of stream.
    fn fill(&mut self, deadline: Instant) -> Result<bool, ReadError> {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            if self.shutting_down() {
                return Err(ReadError::Shutdown);
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
                    return Ok(true);
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                    if Instant::now() >= deadline {
                        return Err(ReadError::Closed);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(ReadError::Io),
            }
        }
    }

    /// Reads the next request (waiting up to the idle timeout for it to start).
    pub fn read_request(&mut self) -> Result<Request, ReadError> {
        let idle_deadline = Instant::now() + IDLE;
        while self.buf.is_empty() {
            if !self.fill(idle_deadline)? {
                return Err(ReadError::Closed);
            }
        }
        let deadline = Instant::now() + REQUEST_DEADLINE;
        let head_end = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                break end;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(ReadError::Bad(431, "request head too large"));
            }
            if !self.fill(deadline)? {
                return Err(ReadError::Closed);
            }
        };
        if head_end > MAX_HEAD {
            return Err(ReadError::Bad(431, "request head too large"));
        }
        let head = String::from_utf8_lossy(self.buf.get(..head_end).unwrap_or_default()).into_owned();
        self.buf.drain(..head_end + 4);
        let mut req = parse_head(&head)?;
        let framing = body_framing(&req)?;
        let expects_continue =
            req.header("expect").is_some_and(|v| v.trim().eq_ignore_ascii_case("100-continue")) && req.http11;
        let needs_body = !matches!(framing, Framing::None | Framing::Length(0));
        if expects_continue && needs_body && self.buf.is_empty() {
            self.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").map_err(|_| ReadError::Io)?;
            req.sent_continue = true;
        }
        req.body = match framing {
            Framing::None => Vec::new(),
            Framing::Length(n) => self.read_exact_body(n, deadline)?,
            Framing::Chunked => self.read_chunked_body(deadline)?,
        };
        Ok(req)
    }

    fn read_exact_body(&mut self, n: usize, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        while self.buf.len() < n {
            if !self.fill(deadline)? {
                return Err(ReadError::Closed);
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    fn read_line(&mut self, deadline: Instant) -> Result<String, ReadError> {
        loop {
            if let Some(end) = find(&self.buf, b"\r\n") {
                let line = String::from_utf8_lossy(self.buf.get(..end).unwrap_or_default()).into_owned();
                self.buf.drain(..end + 2);
                return Ok(line);
            }
            if self.buf.len() > MAX_HEAD {
                return Err(ReadError::Bad(400, "chunk line too long"));
            }
            if !self.fill(deadline)? {
                return Err(ReadError::Closed);
            }
        }
    }

    fn read_chunked_body(&mut self, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        let mut body = Vec::new();
        loop {
            let line = self.read_line(deadline)?;
            let size_text = line.split(';').next().unwrap_or("").trim();
            if size_text.is_empty() || size_text.len() > 15 || !size_text.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ReadError::Bad(400, "bad chunk size"));
            }
            let size = usize::from_str_radix(size_text, 16).map_err(|_| ReadError::Bad(400, "bad chunk size"))?;
            if size == 0 {
                // Trailer fields, up to the empty line.
                while !self.read_line(deadline)?.is_empty() {}
                return Ok(body);
            }
            if body.len() + size > MAX_BODY {
                return Err(ReadError::Bad(413, "request body too large"));
            }
            let data = self.read_exact_body(size + 2, deadline)?;
            if data.get(size..) != Some(b"\r\n".as_slice()) {
                return Err(ReadError::Bad(400, "chunk not followed by CRLF"));
            }
            body.extend_from_slice(data.get(..size).unwrap_or_default());
        }
    }
}

enum Framing {
    None,
    Length(usize),
    Chunked,
}

fn body_framing(req: &Request) -> Result<Framing, ReadError> {
    if let Some(te) = req.header("transfer-encoding") {
        // RFC 9112 §6.3: chunked must be the final coding, and it wins over Content-Length.
        let last = te.rsplit(',').next().unwrap_or("").trim();
        if !last.eq_ignore_ascii_case("chunked") {
            return Err(ReadError::Bad(400, "unsupported transfer-encoding"));
        }
        return Ok(Framing::Chunked);
    }
    let mut length: Option<usize> = None;
    for (k, v) in &req.headers {
        if !k.eq_ignore_ascii_case("content-length") {
            continue;
        }
        let v = v.trim();
        if v.is_empty() || v.len() > 15 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ReadError::Bad(400, "bad content-length"));
        }
        let n: usize = v.parse().map_err(|_| ReadError::Bad(400, "bad content-length"))?;
        if length.is_some_and(|l| l != n) {
            return Err(ReadError::Bad(400, "conflicting content-length"));
        }
        length = Some(n);
    }
    match length {
        Some(n) if n > MAX_BODY => Err(ReadError::Bad(413, "request body too large")),
        Some(n) => Ok(Framing::Length(n)),
        None => Ok(Framing::None),
    }
}

fn parse_head(head: &str) -> Result<Request, ReadError> {
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(ReadError::Bad(400, "malformed request line"));
    };
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ => return Err(ReadError::Bad(505, "unsupported HTTP version")),
    };
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) || !target.starts_with('/') {
        return Err(ReadError::Bad(400, "malformed request line"));
    }
    let mut headers = Vec::new();
    for line in lines {
        if line.starts_with(' ') || line.starts_with('\t') {
            return Err(ReadError::Bad(400, "obsolete header folding"));
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(ReadError::Bad(400, "malformed header line"));
        };
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
            return Err(ReadError::Bad(400, "malformed header name"));
        }
        headers.push((name.to_string(), value.trim_matches([' ', '\t']).to_string()));
    }
    if http11 && !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        return Err(ReadError::Bad(400, "missing Host header"));
    }
    Ok(Request {
        method: method.to_string(),
        target: target.to_string(),
        http11,
        headers,
        body: Vec::new(),
        sent_continue: false,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The standard reason phrase of a status.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        529 => "Site Overloaded",
        _ => "Unknown",
    }
}

/// Writes a status line and headers (the blank line included).
pub fn write_head(w: &mut impl Write, status: u16, headers: &[(String, String)]) -> io::Result<()> {
    let mut head = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (k, v) in headers {
        head.push_str(k);
        head.push_str(": ");
        head.push_str(v);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    w.write_all(head.as_bytes())
}

/// Writes a whole response with a Content-Length body.
pub fn write_full(
    w: &mut impl Write,
    status: u16,
    content_type: &str,
    extra: &[(String, String)],
    close: bool,
    body: &[u8],
) -> io::Result<()> {
    let mut headers = vec![
        ("content-type".to_string(), content_type.to_string()),
        ("content-length".to_string(), body.len().to_string()),
    ];
    headers.extend_from_slice(extra);
    if close {
        headers.push(("connection".to_string(), "close".to_string()));
    }
    let mut out = Vec::with_capacity(body.len() + 256);
    write_head(&mut out, status, &headers)?;
    out.extend_from_slice(body);
    w.write_all(&out)?;
    w.flush()
}

/// Writes one chunk of a chunked body and flushes it, so it leaves as it is.
pub fn write_chunk(w: &mut impl Write, data: &[u8]) -> io::Result<()> {
    if data.is_empty() {
        // An empty chunk would read as the end of the body.
        return Ok(());
    }
    let mut out = format!("{:x}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    w.write_all(&out)?;
    w.flush()
}

/// Ends a chunked body (no trailers).
pub fn write_last_chunk(w: &mut impl Write) -> io::Result<()> {
    w.write_all(b"0\r\n\r\n")?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percent_decoding_handles_escapes_and_bad_ones() {
        assert_eq!(percent_decode("gemini%2D2.5%3Aflash"), "gemini-2.5:flash");
        assert_eq!(percent_decode("a+b"), "a b");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz"), "%zz");
    }

    #[test]
    fn head_parsing_refuses_what_rfc_9112_forbids() {
        assert!(matches!(parse_head("GET / HTTP/1.1"), Err(ReadError::Bad(400, _))), "no Host");
        assert!(matches!(parse_head("GET / HTTP/2.0\r\nHost: x"), Err(ReadError::Bad(505, _))));
        assert!(matches!(parse_head("GET / HTTP/1.1\r\nHost: x\r\n folded"), Err(ReadError::Bad(400, _))));
        assert!(matches!(parse_head("GET  / HTTP/1.1\r\nHost: x"), Err(ReadError::Bad(400, _))));
        let req = parse_head("POST /v1/x?a=1&key=k%20y HTTP/1.0\r\nContent-Length:  3 ").ok();
        let req = req.as_ref();
        assert_eq!(req.map(|r| r.path()), Some("/v1/x"));
        assert_eq!(req.and_then(|r| r.query_param("key")), Some("k y".to_string()));
        assert_eq!(req.and_then(|r| r.header("content-length")), Some("3"));
        assert_eq!(req.map(|r| r.wants_close()), Some(true), "HTTP/1.0 closes by default");
    }
}
