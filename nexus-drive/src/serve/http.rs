//! The little HTTP/1.1 the gateway needs: reading requests (with
//! `Content-Length` or chunked bodies, size-limited, keep-alive) off a
//! socket, and writing whole or chunked responses.
//!
//! The socket has a short read timeout, so a connection waiting for its next
//! request notices a shutdown within that time and closes instead of
//! holding the server open.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often a blocked read wakes up to look at the shutdown flag.
pub(crate) const POLL: Duration = Duration::from_millis(200);

/// The request head may not exceed this (request line and headers).
const MAX_HEAD: usize = 32 * 1024;
const MAX_HEADERS: usize = 100;

/// One request as read.
#[derive(Debug)]
pub(crate) struct Request {
    pub(crate) method: String,
    /// Path plus query.
    pub(crate) target: String,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
    /// HTTP/1.0, or `Connection: close`: answer and close.
    pub(crate) close: bool,
}

impl Request {
    /// The first header named `name` (ASCII case-insensitive).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The path without the query.
    pub(crate) fn path(&self) -> &str {
        self.target.split_once('?').map_or(self.target.as_str(), |(p, _)| p)
    }
}

/// Why no request could be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The peer closed, the connection idled out, or the server is shutting
    /// down between requests: close quietly.
    Closed,
    /// The body is over the limit (answer 413, then close).
    TooLarge(usize),
    /// Not HTTP/1.1 we can read (answer 400, then close).
    Malformed(String),
    /// The socket failed.
    Io,
}

/// Limits of one connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) max_body: usize,
    /// How long a keep-alive connection may wait for its next request.
    pub(crate) idle: Duration,
    /// How long one request may take to arrive once it has started.
    pub(crate) request: Duration,
}

/// A client connection: the socket and the bytes read past the last request.
pub(crate) struct Conn {
    pub(crate) stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    pub(crate) fn new(stream: TcpStream) -> io::Result<Conn> {
        stream.set_read_timeout(Some(POLL))?;
        stream.set_nodelay(true)?;
        Ok(Conn { stream, buf: Vec::with_capacity(8 * 1024) })
    }

    /// Reads more bytes into the buffer. `Ok(false)`: nothing arrived within
    /// the poll interval. EOF is [`ReadError::Closed`].
    fn fill(&mut self) -> Result<bool, ReadError> {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(ReadError::Closed),
            Ok(n) => {
                self.buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
                Ok(true)
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(false),
            Err(_) => Err(ReadError::Io),
        }
    }

    /// Reads the next request. Between requests the connection gives up when
    /// `stop` is set or it has idled too long; once a request has begun it
    /// gets `limits.request` to arrive whole.
    pub(crate) fn read_request(&mut self, limits: &Limits, stop: &AtomicBool) -> Result<Request, ReadError> {
        let waiting = Instant::now();
        let mut started: Option<Instant> = (!self.buf.is_empty()).then(Instant::now);
        let head_end = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                break end;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(ReadError::Malformed("request head too large".into()));
            }
            match started {
                None if stop.load(Ordering::SeqCst) || waiting.elapsed() > limits.idle => {
                    return Err(ReadError::Closed)
                }
                Some(t) if t.elapsed() > limits.request => {
                    return Err(ReadError::Malformed("request head not received in time".into()))
                }
                _ => {}
            }
            if self.fill()? && started.is_none() {
                started = Some(Instant::now());
            }
        };
        let started = started.unwrap_or_else(Instant::now);
        let head_bytes: Vec<u8> = self.buf.drain(..head_end + 4).collect();
        let head =
            std::str::from_utf8(&head_bytes).map_err(|_| ReadError::Malformed("request head is not UTF-8".into()))?;
        let mut lines = head.split("\r\n");
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split(' ');
        let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(m), Some(t), Some(v), None) if !m.is_empty() && t.starts_with('/') => (m, t, v),
            _ => return Err(ReadError::Malformed(format!("bad request line {request_line:?}"))),
        };
        if version != "HTTP/1.1" && version != "HTTP/1.0" {
            return Err(ReadError::Malformed(format!("unsupported version {version:?}")));
        }
        let mut headers = Vec::new();
        for line in lines.filter(|l| !l.is_empty()) {
            let (name, value) =
                line.split_once(':').ok_or_else(|| ReadError::Malformed(format!("bad header line {line:?}")))?;
            if name.is_empty() || name.contains(|c: char| c.is_ascii_whitespace()) {
                return Err(ReadError::Malformed(format!("bad header name {name:?}")));
            }
            headers.push((name.to_string(), value.trim().to_string()));
            if headers.len() > MAX_HEADERS {
                return Err(ReadError::Malformed("too many headers".into()));
            }
        }
        let mut req = Request {
            method: method.to_string(),
            target: target.to_string(),
            headers,
            body: Vec::new(),
            close: version == "HTTP/1.0",
        };
        let tokens: Vec<String> = req
            .header("connection")
            .map(|c| c.split(',').map(|t| t.trim().to_ascii_lowercase()).collect())
            .unwrap_or_default();
        if tokens.iter().any(|t| t == "close") {
            req.close = true;
        } else if tokens.iter().any(|t| t == "keep-alive") {
            req.close = false;
        }
        let chunked = req.header("transfer-encoding").is_some_and(|te| te.to_ascii_lowercase().contains("chunked"));
        let length = match req.header("content-length") {
            _ if chunked => None,
            None => Some(0),
            Some(v) => Some(v.parse::<usize>().map_err(|_| ReadError::Malformed(format!("bad content-length {v:?}")))?),
        };
        if let Some(n) = length {
            if n > limits.max_body {
                return Err(ReadError::TooLarge(limits.max_body));
            }
        }
        if req.header("expect").is_some_and(|e| e.eq_ignore_ascii_case("100-continue")) {
            self.stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").map_err(|_| ReadError::Io)?;
        }
        let deadline = started + limits.request;
        req.body = match length {
            Some(n) => self.read_exact_body(n, deadline)?,
            None => self.read_chunked(limits.max_body, deadline)?,
        };
        Ok(req)
    }

    fn need(&mut self, n: usize, deadline: Instant) -> Result<(), ReadError> {
        while self.buf.len() < n {
            if Instant::now() > deadline {
                return Err(ReadError::Malformed("request body not received in time".into()));
            }
            self.fill()?;
        }
        Ok(())
    }

    fn read_exact_body(&mut self, n: usize, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        self.need(n, deadline)?;
        Ok(self.buf.drain(..n).collect())
    }

    fn read_chunked(&mut self, max: usize, deadline: Instant) -> Result<Vec<u8>, ReadError> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = find(&self.buf, b"\r\n") {
                    break i;
                }
                if self.buf.len() > 1024 {
                    return Err(ReadError::Malformed("chunk size line too long".into()));
                }
                self.need(self.buf.len() + 1, deadline)?;
            };
            let line: Vec<u8> = self.buf.drain(..line_end + 2).collect();
            let text = String::from_utf8_lossy(line.get(..line_end).unwrap_or_default()).into_owned();
            let size_text = text.split(';').next().unwrap_or_default().trim();
            let size = usize::from_str_radix(size_text, 16)
                .map_err(|_| ReadError::Malformed(format!("bad chunk size {size_text:?}")))?;
            if size == 0 {
                // Trailers (ignored) end with an empty line.
                loop {
                    let end = loop {
                        if let Some(i) = find(&self.buf, b"\r\n") {
                            break i;
                        }
                        self.need(self.buf.len() + 1, deadline)?;
                    };
                    self.buf.drain(..end + 2);
                    if end == 0 {
                        return Ok(body);
                    }
                }
            }
            if body.len().saturating_add(size) > max {
                return Err(ReadError::TooLarge(max));
            }
            self.need(size + 2, deadline)?;
            body.extend(self.buf.drain(..size));
            self.buf.drain(..2);
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The reason phrase of the statuses the gateway sends.
fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Writes a whole response with a JSON (or other) body.
pub(crate) fn write_response(
    out: &mut impl Write,
    status: u16,
    content_type: &str,
    extra: &[(&str, String)],
    body: &[u8],
    close: bool,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: {}\r\n",
        reason(status),
        body.len(),
        if close { "close" } else { "keep-alive" }
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(body)?;
    out.flush()
}

/// A chunked response in progress (SSE).
pub(crate) struct Chunked<'a, W: Write> {
    out: &'a mut W,
}

impl<'a, W: Write> Chunked<'a, W> {
    /// Writes the head of a `200` event stream.
    pub(crate) fn start(out: &'a mut W, close: bool) -> io::Result<Chunked<'a, W>> {
        Chunked::start_with(out, close, &[])
    }

    /// [`start`](Self::start) with extra response headers.
    pub(crate) fn start_with(out: &'a mut W, close: bool, extra: &[(&str, String)]) -> io::Result<Chunked<'a, W>> {
        let mut head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\n\
             transfer-encoding: chunked\r\nconnection: {}\r\n",
            if close { "close" } else { "keep-alive" }
        );
        for (k, v) in extra {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        out.write_all(head.as_bytes())?;
        out.flush()?;
        Ok(Chunked { out })
    }

    /// Writes one chunk and flushes it to the client at once.
    pub(crate) fn send(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.out.write_all(format!("{:x}\r\n", data.len()).as_bytes())?;
        self.out.write_all(data)?;
        self.out.write_all(b"\r\n")?;
        self.out.flush()
    }

    /// Ends the body.
    pub(crate) fn end(self) -> io::Result<()> {
        self.out.write_all(b"0\r\n\r\n")?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn limits() -> Limits {
        Limits { max_body: 64, idle: Duration::from_secs(2), request: Duration::from_secs(2) }
    }

    /// A connected pair: the server side wrapped, the client side raw.
    fn pair() -> (Conn, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (Conn::new(server).unwrap(), client)
    }

    #[test]
    fn keep_alive_requests_with_both_body_framings() {
        let (mut conn, mut client) = pair();
        client
            .write_all(b"POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloPOST /b?x=1 HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nT: 1\r\n\r\n")
            .unwrap();
        let stop = AtomicBool::new(false);
        let a = conn.read_request(&limits(), &stop).unwrap();
        assert_eq!((a.method.as_str(), a.path(), a.body.as_slice(), a.close), ("POST", "/a", &b"hello"[..], false));
        let b = conn.read_request(&limits(), &stop).unwrap();
        assert_eq!((b.path(), b.body.as_slice()), ("/b", &b"abcde"[..]));
    }

    #[test]
    fn bodies_over_the_limit_are_refused_before_they_are_read() {
        let (mut conn, mut client) = pair();
        client.write_all(b"POST / HTTP/1.1\r\nContent-Length: 65\r\n\r\n").unwrap();
        assert!(matches!(conn.read_request(&limits(), &AtomicBool::new(false)), Err(ReadError::TooLarge(64))));
        let (mut conn, mut client) = pair();
        client.write_all(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n41\r\n").unwrap();
        client.write_all(&[b'x'; 0x41]).unwrap();
        assert!(matches!(conn.read_request(&limits(), &AtomicBool::new(false)), Err(ReadError::TooLarge(64))));
    }

    #[test]
    fn garbage_is_malformed_and_a_stop_closes_an_idle_connection() {
        let (mut conn, mut client) = pair();
        client.write_all(b"HELLO\r\n\r\n").unwrap();
        assert!(matches!(conn.read_request(&limits(), &AtomicBool::new(false)), Err(ReadError::Malformed(_))));
        let (mut conn, _client) = pair();
        assert!(matches!(conn.read_request(&limits(), &AtomicBool::new(true)), Err(ReadError::Closed)));
    }
}
