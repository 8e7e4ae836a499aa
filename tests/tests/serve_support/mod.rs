//! What the gateway suites share: the keys, the scripted arguments, and the
//! upstream's own 429 body in each wire format.

// Each suite uses a part of what is here.
#![allow(dead_code)]

use nexus_drive::Style as ProtoStyle;
use nexus_tests::fake::Style;
use serde_json::json;

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
