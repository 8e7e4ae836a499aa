//! Shared helpers for the wire-corpus tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use nexus_proto::provider::{decode_capture, Style};
use serde_json::Value;

/// `shared/` next to the repository (override with `NEXUS_SHARED`).
pub fn shared_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("NEXUS_SHARED") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// The captures of one style: `(path, is_stream)`, sorted, requests excluded.
pub fn captures(style: Style) -> Vec<(PathBuf, bool)> {
    let dir = shared_dir().join("wire-corpus").join(style.name());
    let mut out = Vec::new();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("wire corpus at {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".expected.json") || path.is_dir() {
            continue;
        }
        if name.ends_with(".sse") {
            out.push((path, true));
        } else if name.ends_with(".json") {
            out.push((path, false));
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no captures found in {}", dir.display());
    out
}

/// The expectation next to a capture.
pub fn expected(path: &Path) -> Value {
    let stem = path.file_name().unwrap().to_string_lossy();
    let stem = stem.rsplit_once('.').unwrap().0;
    let exp = path.with_file_name(format!("{stem}.expected.json"));
    serde_json::from_slice(&std::fs::read(&exp).unwrap()).unwrap()
}

/// Decodes a capture the way the loop does and returns the corpus summary
/// (`{text, tool_calls, stop, usage, thinking, error}`), with `error` filled
/// from a provider error (body or in-stream event).
pub fn summarize(style: Style, bytes: &[u8], stream: bool) -> Value {
    match decode_capture(style, bytes, stream) {
        Ok(turn) => {
            let mut s = turn.summary();
            s["error"] = Value::Null;
            s
        }
        Err(nexus_proto::RemoteError::Provider(p)) => serde_json::json!({
            "text": "", "tool_calls": [], "stop": null,
            "usage": {"input": null, "output": null}, "thinking": null,
            "error": {"type": p.kind, "message": p.message},
        }),
        Err(e) => serde_json::json!({"decode_error": e.to_string()}),
    }
}

/// Compares the fields both sides have: text, tool_calls, stop, usage, thinking.
pub fn assert_matches(path: &Path, got: &Value, want: &Value) {
    let mut keys = vec!["text", "tool_calls", "stop", "usage", "thinking"];
    if want["error"]["type"].is_string() && want["stop"].is_null() {
        keys.push("error");
    }
    for key in keys {
        let (g, w) = if key == "error" { (&got[key]["type"], &want[key]["type"]) } else { (&got[key], &want[key]) };
        assert_eq!(g, w, "{}: field {key}\n got: {got}\nwant: {want}", path.display());
    }
}
