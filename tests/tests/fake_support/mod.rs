//! A raw HTTP/1.1 client over `std::net::TcpStream` for testing the fake
//! provider, written independently of the server's code: it frames requests
//! itself and parses responses strictly (status line, headers,
//! Content-Length or chunked bodies, chunk by chunk).
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nexus_tests::fake::{FakeProvider, Style};
use serde_json::{json, Value};

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The body ended as its framing says (Content-Length met, or the `0` chunk and CRLF).
    Complete,
    /// The connection closed before any byte of a status line.
    EofBeforeHead,
    /// The connection closed inside the body (Content-Length not met, or no terminating chunk).
    EofInBody,
}

/// One parsed response.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    /// Each chunk's data when the body was chunked.
    pub chunks: Option<Vec<Vec<u8>>>,
    pub end: End,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One client connection.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
    eof: bool,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect to the fake provider");
        stream.set_read_timeout(Some(Duration::from_secs(20))).expect("read timeout");
        Client { stream, buf: Vec::new(), eof: false }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write request");
    }

    /// Sends a request with Host and Content-Length headers.
    pub fn send(&mut self, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) {
        let mut req = format!("{method} {target} HTTP/1.1\r\nHost: {}\r\n", self.stream.peer_addr().expect("peer"));
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        self.send_raw(&bytes);
    }

    pub fn request(&mut self, method: &str, target: &str, headers: &[(&str, &str)], body: &[u8]) -> RawResponse {
        self.send(method, target, headers, body);
        self.read_response()
    }

    /// Reads more bytes; false at EOF (a reset counts as EOF too).
    fn fill(&mut self) -> bool {
        if self.eof {
            return false;
        }
        let mut chunk = [0u8; 8192];
        match self.stream.read(&mut chunk) {
            Ok(0) => {
                self.eof = true;
                false
            }
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                self.eof = true;
                false
            }
            Err(e) => panic!("read from the fake provider: {e}"),
        }
    }

    fn take_line(&mut self) -> Option<String> {
        loop {
            if let Some(pos) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8(self.buf[..pos].to_vec()).expect("ASCII line");
                self.buf.drain(..pos + 2);
                return Some(line);
            }
            if !self.fill() {
                return None;
            }
        }
    }

    fn take_exact(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            if !self.fill() {
                return None;
            }
        }
        Some(self.buf.drain(..n).collect())
    }

    /// Whether the server closed the connection (reads until EOF or timeout).
    pub fn is_closed(&mut self) -> bool {
        !self.fill() && self.buf.is_empty()
    }

    /// Reads one interim or final response head: status and headers.
    pub fn read_head(&mut self) -> Option<(u16, Vec<(String, String)>)> {
        let status_line = self.take_line()?;
        let mut parts = status_line.splitn(3, ' ');
        assert_eq!(parts.next(), Some("HTTP/1.1"), "status line {status_line:?}");
        let status: u16 = parts.next().and_then(|s| s.parse().ok()).expect("status code");
        assert!(parts.next().is_some_and(|r| !r.is_empty()), "reason phrase in {status_line:?}");
        let mut headers = Vec::new();
        loop {
            let line = self.take_line().expect("headers end with an empty line");
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').expect("header has a colon");
            assert_eq!(k, k.trim(), "no whitespace around header names");
            headers.push((k.to_string(), v.trim().to_string()));
        }
        Some((status, headers))
    }

    /// Reads one final response (interim 1xx responses are skipped).
    pub fn read_response(&mut self) -> RawResponse {
        let (status, headers) = loop {
            match self.read_head() {
                None => {
                    return RawResponse {
                        status: 0,
                        headers: Vec::new(),
                        body: Vec::new(),
                        chunks: None,
                        end: End::EofBeforeHead,
                    }
                }
                Some((s, _)) if (100..200).contains(&s) => continue,
                Some(head) => break head,
            }
        };
        let find = |name: &str| headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
        let te = find("transfer-encoding");
        let cl = find("content-length");
        assert!(!(te.is_some() && cl.is_some()), "both Transfer-Encoding and Content-Length");
        if te.as_deref() == Some("chunked") {
            let mut chunks = Vec::new();
            let mut body = Vec::new();
            loop {
                let Some(line) = self.take_line() else {
                    return RawResponse { status, headers, body, chunks: Some(chunks), end: End::EofInBody };
                };
                assert!(!line.is_empty() && line.bytes().all(|b| b.is_ascii_hexdigit()), "chunk size line {line:?}");
                let size = usize::from_str_radix(&line, 16).expect("hex size");
                if size == 0 {
                    let trailer_end = self.take_line();
                    assert_eq!(trailer_end.as_deref(), Some(""), "the last chunk ends with CRLF");
                    return RawResponse { status, headers, body, chunks: Some(chunks), end: End::Complete };
                }
                let Some(data) = self.take_exact(size + 2) else {
                    return RawResponse { status, headers, body, chunks: Some(chunks), end: End::EofInBody };
                };
                assert_eq!(&data[size..], b"\r\n", "chunk data ends with CRLF");
                body.extend_from_slice(&data[..size]);
                chunks.push(data[..size].to_vec());
            }
        }
        let n: usize = cl.expect("a response without chunking has Content-Length").parse().expect("numeric length");
        let mut body = Vec::new();
        while body.len() < n {
            if self.buf.is_empty() && !self.fill() {
                return RawResponse { status, headers, body, chunks: None, end: End::EofInBody };
            }
            let take = (n - body.len()).min(self.buf.len());
            body.extend(self.buf.drain(..take));
        }
        RawResponse { status, headers, body, chunks: None, end: End::Complete }
    }
}

pub const KEY: &str = "test-key";

/// Path and headers of a model call in `style`, with `key` (or none).
pub fn call_target(style: Style, model: &str, stream: bool) -> String {
    match style {
        Style::Anthropic => "/v1/messages".to_string(),
        Style::OpenAi => "/v1/chat/completions".to_string(),
        Style::OpenAiResponses => "/v1/responses".to_string(),
        Style::Gemini if stream => format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
        Style::Gemini => format!("/v1beta/models/{model}:generateContent"),
    }
}

pub fn auth_headers(style: Style, key: Option<&str>) -> Vec<(String, String)> {
    let mut h = vec![("Content-Type".to_string(), "application/json".to_string())];
    if style == Style::Anthropic {
        h.push(("anthropic-version".to_string(), "2023-06-01".to_string()));
    }
    if let Some(k) = key {
        h.push(match style {
            Style::Anthropic => ("x-api-key".to_string(), k.to_string()),
            Style::OpenAi | Style::OpenAiResponses => ("Authorization".to_string(), format!("Bearer {k}")),
            Style::Gemini => ("x-goog-api-key".to_string(), k.to_string()),
        });
    }
    h
}

/// A transcript whose `turns` earlier assistant turns each made one tool call
/// that was answered, ending with a user message: it asks for turn `turns`.
pub fn body(style: Style, model: &str, turns: usize, stream: bool) -> Value {
    let mut messages = vec![user(style, "hello")];
    for t in 0..turns {
        let id = format!("id_{t}");
        match style {
            Style::Anthropic => {
                messages.push(json!({"role": "assistant", "content": [
                    {"type": "tool_use", "id": id, "name": "lookup", "input": {"n": t}}]}));
                messages.push(json!({"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": id, "content": format!("result {t}")}]}));
            }
            Style::OpenAi => {
                messages.push(json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": "lookup", "arguments": format!("{{\"n\":{t}}}")}}]}));
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": format!("result {t}")}));
            }
            Style::OpenAiResponses => {
                messages.push(json!({"type": "function_call", "id": format!("fc_{t}"), "call_id": id,
                    "name": "lookup", "arguments": format!("{{\"n\":{t}}}")}));
                messages.push(json!({"type": "function_call_output", "call_id": id, "output": format!("result {t}")}));
            }
            Style::Gemini => {
                messages
                    .push(json!({"role": "model", "parts": [{"functionCall": {"name": "lookup", "args": {"n": t}}}]}));
                messages.push(json!({"role": "user", "parts": [
                    {"functionResponse": {"name": "lookup", "response": {"result": format!("result {t}")}}}]}));
            }
        }
    }
    wrap(style, model, messages, stream)
}

pub fn user(style: Style, text: &str) -> Value {
    match style {
        Style::Gemini => json!({"role": "user", "parts": [{"text": text}]}),
        _ => json!({"role": "user", "content": text}),
    }
}

/// A request body around `messages`.
pub fn wrap(style: Style, model: &str, messages: Vec<Value>, stream: bool) -> Value {
    match style {
        Style::Anthropic => {
            json!({"model": model, "max_tokens": 1024, "stream": stream, "messages": messages})
        }
        Style::OpenAi if stream => {
            json!({"model": model, "stream": true, "stream_options": {"include_usage": true}, "messages": messages})
        }
        Style::OpenAi => json!({"model": model, "messages": messages}),
        Style::OpenAiResponses => json!({"model": model, "input": messages, "stream": stream, "store": false}),
        Style::Gemini => json!({"contents": messages}),
    }
}

/// Sends `body` as a model call of `style` on a fresh connection.
pub fn call_with(
    fake: &FakeProvider,
    style: Style,
    model: &str,
    body: &Value,
    stream: bool,
    key: Option<&str>,
) -> RawResponse {
    let mut c = Client::connect(fake.addr());
    let headers = auth_headers(style, key);
    let refs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    c.request("POST", &call_target(style, model, stream), &refs, body.to_string().as_bytes())
}

/// A model call asking for turn `turns` with the valid key.
pub fn call(fake: &FakeProvider, style: Style, model: &str, turns: usize, stream: bool) -> RawResponse {
    call_with(fake, style, model, &body(style, model, turns, stream), stream, Some(KEY))
}

/// The SSE events in a body: (event name, data), split on blank lines (LF or CRLF).
pub fn sse_events(body: &[u8]) -> Vec<(Option<String>, String)> {
    let text = String::from_utf8(body.to_vec()).expect("UTF-8 stream").replace("\r\n", "\n");
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    name = Some(v.to_string());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data.push(v);
                } else {
                    panic!("unexpected SSE line {line:?}");
                }
            }
            (name, data.join("\n"))
        })
        .collect()
}
