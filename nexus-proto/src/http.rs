//! HTTP as data: the machine describes the request; the driver sends it and
//! feeds back the response head, body chunks and end.

use serde::{Deserialize, Serialize};

/// Identifies one HTTP exchange, so a late response to an abandoned request
/// (after a retry or a cancel) is recognised and ignored instead of corrupting the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ExchangeId(pub u64);

/// A request for the driver to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// Echo this in every response input.
    pub exchange: ExchangeId,
    /// `POST` (or `GET`).
    pub method: &'static str,
    /// Full URL.
    pub url: String,
    /// Header names and values, in order (auth included when a key was given; see
    /// [`crate::Run::set_api_key`]).
    pub headers: Vec<(String, String)>,
    /// The JSON body.
    pub body: Vec<u8>,
    /// The response will be an SSE stream: read it incrementally.
    pub streaming: bool,
}

impl HttpRequest {
    /// The value of the first header named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Header names whose values are secrets: never logged, recorded or stored.
pub const SECRET_HEADERS: &[&str] = &["authorization", "x-api-key", "x-goog-api-key", "api-key", "proxy-authorization"];

/// Whether a header's value must be redacted wherever it is written down.
pub fn is_secret_header(name: &str) -> bool {
    SECRET_HEADERS.iter().any(|s| s.eq_ignore_ascii_case(name))
}
