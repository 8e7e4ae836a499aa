//! The openai wire format. (Stub: encode/decode are filled in by the codec work.)

use serde_json::{json, Value};

use crate::error::{DecodeError, RemoteError};
use crate::event::StreamEvent;
use crate::provider::{CallIds, ModelCall, TurnResponse};
use crate::sse::SseEvent;

/// The URL of one model call.
pub fn endpoint(base_url: &str) -> String {
    format!("{}/chat/completions", base_url.trim_end_matches('/'))
}

/// The request body.
pub fn encode_body(call: &ModelCall<'_>) -> Value {
    json!({ "model": call.model })
}

/// Decodes one whole success body.
pub fn decode_response(_body: &[u8], _ids: &mut CallIds) -> Result<TurnResponse, RemoteError> {
    Err(DecodeError::Shape("not implemented".into()).into())
}

/// (type, message) from an error body.
pub fn error_details(body: &[u8]) -> Option<(String, String)> {
    crate::provider::generic_error_details(body, &["type", "status", "code"])
}

/// Incremental stream assembler.
#[derive(Debug, Clone, Default)]
pub struct Assembler {
    emitted: bool,
}

impl Assembler {
    /// Feeds one SSE event.
    pub fn push(&mut self, _event: &SseEvent, _ids: &mut CallIds, _out: &mut Vec<StreamEvent>) -> Result<(), RemoteError> {
        Ok(())
    }

    /// The assembled turn, or a truncation error.
    pub fn finish(&mut self) -> Result<TurnResponse, RemoteError> {
        Err(DecodeError::Truncated("not implemented".into()).into())
    }

    /// Whether any delta was emitted.
    pub fn emitted_anything(&self) -> bool {
        self.emitted
    }
}
