//! What the gateway suites share: the keys, the scripted arguments, the
//! upstream's own 429 body in each wire format, and a raw HTTP/1.1 answer
//! as a client reads it.

// Each suite uses a part of what is here.
#![allow(dead_code)]

pub mod redis;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use nexus_drive::Style as ProtoStyle;
use nexus_tests::fake::Style;
use serde_json::{json, Value};

pub const UPSTREAM_KEY: &str = "sk-upstream-secret";
pub const CLIENT_TOKEN: &str = "client-secret-token";
pub const SLOW_DOWN: &str = "slow down, said the upstream";
pub const WEATHER: &str = r#"{"city": "Paris"}"#;
pub const ADD: &str = r#"{"a":2,"b":2}"#;

/// The library's style for the fake's (both go by the same names).
pub fn proto(style: Style) -> ProtoStyle {
    ProtoStyle::parse(style.name()).expect("the fake and the library name their styles alike")
}

/// The provider's own error body for a 429 carrying [`SLOW_DOWN`].
pub fn rate_limit_body(style: Style) -> String {
    match style {
        Style::Anthropic => json!({"type": "error", "error": {"type": "rate_limit_error", "message": SLOW_DOWN}}),
        Style::OpenAi | Style::OpenAiResponses => {
            json!({"error": {"message": SLOW_DOWN, "type": "requests", "param": null, "code": "rate_limit_exceeded"}})
        }
        Style::Gemini => json!({"error": {"code": 429, "message": SLOW_DOWN, "status": "RESOURCE_EXHAUSTED"}}),
    }
    .to_string()
}

/// One HTTP/1.1 response as read off the socket (header names lowercased).
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    /// The JSON of every `data:` line of an event stream.
    pub fn events(&self) -> Vec<Value> {
        self.text()
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter(|d| *d != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("event ({e}): {d}")))
            .collect()
    }
}

/// Parses one response off the front of `raw` (chunked or with a length);
/// returns it and the bytes it took, or `None` until it is all there.
pub fn parse_answer(raw: &[u8]) -> Option<(Answer, usize)> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut at = end + 4;
    let mut body = Vec::new();
    if headers.iter().any(|(k, v)| k == "transfer-encoding" && v.contains("chunked")) {
        loop {
            let i = raw[at..].windows(2).position(|w| w == b"\r\n")?;
            let size = usize::from_str_radix(std::str::from_utf8(&raw[at..at + i]).ok()?.trim(), 16).ok()?;
            at += i + 2;
            if size == 0 {
                at += 2;
                break;
            }
            body.extend_from_slice(raw.get(at..at + size)?);
            at += size + 2;
        }
    } else {
        let n: usize = headers.iter().find(|(k, _)| k == "content-length").and_then(|(_, v)| v.parse().ok())?;
        body.extend_from_slice(raw.get(at..at + n)?);
        at += n;
    }
    Some((Answer { status, headers, body }, at))
}

/// The value of the metric line that starts with `series` (0 when absent).
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok())).unwrap_or(0.0)
}

/// One request on its own connection (`Connection: close`), read to the end.
pub fn call(addr: SocketAddr, method: &str, path: &str, extra: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut s = TcpStream::connect(addr).expect("connect to the gateway");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: gw\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    parse_answer(&raw)
        .map(|(a, _)| a)
        .unwrap_or_else(|| panic!("no whole response in {:?}", String::from_utf8_lossy(&raw)))
}
