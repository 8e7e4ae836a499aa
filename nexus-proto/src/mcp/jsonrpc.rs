//! JSON-RPC 2.0 framing: one message in, one typed [`Message`] out.
//!
//! The decoder is lenient where JSON-RPC allows it (unknown members are
//! ignored, `params` may be absent) and strict where a wrong guess would
//! corrupt the session: the `jsonrpc` member must be exactly `"2.0"`, a
//! message is an object (a batch array is refused: no MCP revision that
//! nexus speaks lets a server send one), and one message is at most the cap
//! the caller gives. Every refusal is a [`ProtocolError`]; nothing panics.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::error::ProtocolError;

/// A JSON-RPC request id. nexus sends integers; servers may use strings for
/// their own requests, and a response echoes whatever the request carried.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// A number (nexus's own requests are numbered 1, 2, 3, …).
    Num(i64),
    /// A string.
    Str(String),
}

impl std::fmt::Display for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestId::Num(n) => write!(f, "{n}"),
            RequestId::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// The `error` member of an error response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// The error code (`-32601` method not found, `-32602` invalid params, …).
    pub code: i64,
    /// The server's message.
    #[serde(default)]
    pub message: String,
    /// Extra data (`-32042`: `{elicitations:[…]}`, `-32022`: `{supported:[…]}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// One decoded JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: answer it with a response carrying the same id.
    Request {
        /// Its id.
        id: RequestId,
        /// The method.
        method: String,
        /// `params`, when present.
        params: Option<Value>,
    },
    /// A notification: no answer.
    Notification {
        /// The method.
        method: String,
        /// `params`, when present.
        params: Option<Value>,
    },
    /// A successful response.
    Response {
        /// The id of the request answered.
        id: RequestId,
        /// `result`.
        result: Value,
    },
    /// An error response (`id` is null when the peer could not read the request's id).
    Error {
        /// The id of the request answered, if any.
        id: Option<RequestId>,
        /// `error`.
        error: RpcError,
    },
}

/// Standard JSON-RPC and MCP error codes.
pub mod code {
    /// Invalid JSON was received.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON sent is not a valid request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// The method does not exist or is not available.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Invalid method parameters (MCP: also "unknown tool").
    pub const INVALID_PARAMS: i64 = -32602;
    /// Internal error.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// 2026-07-28: the request's `MCP-Protocol-Version` header and `_meta` disagree.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// 2026-07-28: a capability the server needs from the client was not declared.
    pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
    /// 2026-07-28: the requested protocol version is not supported (`data.supported`).
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// ≤2025-11-25: the call needs URL-mode elicitations first (`data.elicitations`).
    pub const URL_ELICITATION_REQUIRED: i64 = -32042;
}

/// Decodes one message of at most `max_bytes` bytes.
pub fn decode(bytes: &[u8], max_bytes: usize) -> Result<Message, ProtocolError> {
    if bytes.len() > max_bytes {
        return Err(ProtocolError::TooLarge { limit: max_bytes });
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ProtocolError::Json(e.to_string()))?;
    let obj = match value {
        Value::Object(obj) => obj,
        Value::Array(_) => return Err(ProtocolError::Batch),
        other => return Err(ProtocolError::Shape(format!("a message must be an object, not {}", kind_of(&other)))),
    };
    from_object(obj)
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn from_object(mut obj: Map<String, Value>) -> Result<Message, ProtocolError> {
    match obj.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        Some(other) => return Err(ProtocolError::Version(other.to_string())),
        None => return Err(ProtocolError::Version("(missing)".into())),
    }
    let id = match obj.remove("id") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(v) => Some(Some(id_from(v)?)),
    };
    if let Some(method) = obj.remove("method") {
        let Value::String(method) = method else {
            return Err(ProtocolError::Shape("`method` is not a string".into()));
        };
        let params = obj.remove("params");
        return Ok(match id {
            None => Message::Notification { method, params },
            Some(None) => return Err(ProtocolError::Shape("a request with a null id".into())),
            Some(Some(id)) => Message::Request { id, method, params },
        });
    }
    match (obj.remove("result"), obj.remove("error"), id) {
        (Some(_), Some(_), _) => Err(ProtocolError::Shape("a response with both `result` and `error`".into())),
        (Some(result), None, Some(Some(id))) => Ok(Message::Response { id, result }),
        (Some(_), None, _) => Err(ProtocolError::Shape("a result without an id".into())),
        (None, Some(error), id) => {
            let error: RpcError =
                serde_json::from_value(error).map_err(|e| ProtocolError::Shape(format!("`error`: {e}")))?;
            Ok(Message::Error { id: id.flatten(), error })
        }
        (None, None, _) => Err(ProtocolError::Shape("neither a request, a notification nor a response".into())),
    }
}

fn id_from(v: Value) -> Result<RequestId, ProtocolError> {
    match v {
        Value::String(s) => Ok(RequestId::Str(s)),
        Value::Number(n) => {
            n.as_i64().map(RequestId::Num).ok_or_else(|| ProtocolError::Shape(format!("id {n} is not an integer")))
        }
        other => Err(ProtocolError::Shape(format!("id is {}", kind_of(&other)))),
    }
}

/// The bytes of a request (no trailing newline).
pub fn request(id: &RequestId, method: &str, params: Option<&Value>) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), Value::from("2.0"));
    obj.insert("id".into(), id_value(id));
    obj.insert("method".into(), Value::from(method));
    if let Some(p) = params {
        obj.insert("params".into(), p.clone());
    }
    to_bytes(obj)
}

/// The bytes of a notification.
pub fn notification(method: &str, params: Option<&Value>) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), Value::from("2.0"));
    obj.insert("method".into(), Value::from(method));
    if let Some(p) = params {
        obj.insert("params".into(), p.clone());
    }
    to_bytes(obj)
}

/// The bytes of a success response.
pub fn response(id: &RequestId, result: Value) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), Value::from("2.0"));
    obj.insert("id".into(), id_value(id));
    obj.insert("result".into(), result);
    to_bytes(obj)
}

/// The bytes of an error response.
pub fn error_response(id: &RequestId, code: i64, message: &str) -> Vec<u8> {
    let mut obj = Map::new();
    obj.insert("jsonrpc".into(), Value::from("2.0"));
    obj.insert("id".into(), id_value(id));
    obj.insert("error".into(), serde_json::json!({"code": code, "message": message}));
    to_bytes(obj)
}

fn id_value(id: &RequestId) -> Value {
    match id {
        RequestId::Num(n) => Value::from(*n),
        RequestId::Str(s) => Value::from(s.as_str()),
    }
}

fn to_bytes(obj: Map<String, Value>) -> Vec<u8> {
    // A map of JSON values always serializes; serde_json escapes newlines
    // inside strings, so the bytes are one stdio line.
    serde_json::to_vec(&Value::Object(obj)).unwrap_or_default()
}

/// Splits a byte stream (stdio) into newline-delimited messages, holding at
/// most `max_bytes` of an unfinished line. Chunks may split anywhere.
#[derive(Debug, Clone)]
pub struct LineDecoder {
    line: Vec<u8>,
    max_bytes: usize,
    /// The current line went over the cap: skip to its end, then report it once.
    overflowed: bool,
}

impl LineDecoder {
    /// A decoder that refuses lines longer than `max_bytes`.
    pub fn new(max_bytes: usize) -> LineDecoder {
        LineDecoder { line: Vec::new(), max_bytes, overflowed: false }
    }

    /// Feeds a chunk; each complete line (without its `\n` or `\r\n`) goes to
    /// `out` as `Ok(bytes)`, an over-long one as `Err(TooLarge)`. Empty lines
    /// are skipped.
    pub fn feed(&mut self, mut chunk: &[u8], out: &mut Vec<Result<Vec<u8>, ProtocolError>>) {
        while !chunk.is_empty() {
            match chunk.iter().position(|&b| b == b'\n') {
                Some(pos) => {
                    self.push(&chunk[..pos]);
                    self.end_line(out);
                    chunk = &chunk[pos + 1..];
                }
                None => {
                    self.push(chunk);
                    chunk = &[];
                }
            }
        }
    }

    /// The stream ended: a last line without its newline is delivered.
    pub fn finish(&mut self, out: &mut Vec<Result<Vec<u8>, ProtocolError>>) {
        if !self.line.is_empty() || self.overflowed {
            self.end_line(out);
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.overflowed {
            return;
        }
        if self.line.len() + bytes.len() > self.max_bytes {
            self.overflowed = true;
            self.line = Vec::new();
        } else {
            self.line.extend_from_slice(bytes);
        }
    }

    fn end_line(&mut self, out: &mut Vec<Result<Vec<u8>, ProtocolError>>) {
        if std::mem::take(&mut self.overflowed) {
            out.push(Err(ProtocolError::TooLarge { limit: self.max_bytes }));
            return;
        }
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if !line.iter().all(u8::is_ascii_whitespace) {
            out.push(Ok(line));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_each_kind() {
        let m = decode(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#, 1024).unwrap();
        assert_eq!(m, Message::Response { id: RequestId::Num(1), result: serde_json::json!({}) });
        let m = decode(br#"{"jsonrpc":"2.0","id":"a","method":"ping"}"#, 1024).unwrap();
        assert!(matches!(m, Message::Request { id: RequestId::Str(_), .. }));
        let m = decode(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#, 1024).unwrap();
        assert!(matches!(m, Message::Notification { .. }));
        let m = decode(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"x"}}"#, 1024).unwrap();
        assert!(matches!(m, Message::Error { id: None, .. }));
    }

    #[test]
    fn refuses_what_it_must() {
        assert_eq!(decode(b"[]", 10), Err(ProtocolError::Batch));
        assert!(matches!(decode(br#"{"jsonrpc":"1.0","id":1,"result":{}}"#, 100), Err(ProtocolError::Version(_))));
        assert!(matches!(decode(b"{", 100), Err(ProtocolError::Json(_))));
        assert_eq!(decode(&[b' '; 11], 10), Err(ProtocolError::TooLarge { limit: 10 }));
        assert!(matches!(decode(br#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#, 100), Err(ProtocolError::Shape(_))));
    }

    #[test]
    fn lines_split_anywhere_and_are_capped() {
        let mut d = LineDecoder::new(8);
        let mut out = Vec::new();
        d.feed(b"{\"a\":1}\r\n\n{\"b\"", &mut out);
        d.feed(b":2}\n0123456789abc\nx", &mut out);
        d.finish(&mut out);
        assert_eq!(
            out,
            vec![
                Ok(b"{\"a\":1}".to_vec()),
                Ok(b"{\"b\":2}".to_vec()),
                Err(ProtocolError::TooLarge { limit: 8 }),
                Ok(b"x".to_vec())
            ]
        );
    }
}
