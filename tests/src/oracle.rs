//! Runs the official-SDK oracles (`shared/oracles/*.py`) on bytes, so tests
//! can prove a response is what the real SDKs accept.
//!
//! The interpreter is `$NEXUS_ORACLE_PY`, else `/tmp/oracle-venv/bin/python`
//! (made by `shared/oracles/setup.sh`). When it is missing every runner
//! returns `None` after printing `skipped: …`, and the calling test returns.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use crate::fake::Style;

/// `shared/` next to the repository (override with `NEXUS_SHARED`).
pub fn shared_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("NEXUS_SHARED") {
        return PathBuf::from(dir);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// The oracle interpreter, if it exists.
pub fn python() -> Option<PathBuf> {
    let py = std::env::var_os("NEXUS_ORACLE_PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/oracle-venv/bin/python"));
    py.exists().then_some(py)
}

/// What one oracle run said.
#[derive(Debug, Clone, PartialEq)]
pub struct OracleRun {
    /// Exit status 0.
    pub ok: bool,
    /// The normalized summary (`{text, tool_calls, stop, usage, thinking, error}`) when `ok`.
    pub summary: Option<Value>,
    /// Standard output (the reasons, when not `ok`).
    pub stdout: String,
    /// Standard error (warnings such as `unknown field: …`).
    pub stderr: String,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn run(script: &str, style: Style, bytes: &[u8], ext: &str, extra: &[&str]) -> Option<OracleRun> {
    let Some(py) = python() else {
        println!("skipped: no oracle interpreter (set NEXUS_ORACLE_PY or run shared/oracles/setup.sh)");
        return None;
    };
    let script_path = shared_dir().join("oracles").join(script);
    if !script_path.exists() {
        println!("skipped: no oracle at {}", script_path.display());
        return None;
    }
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    let file = std::env::temp_dir().join(format!("nexus-oracle-{}-{n}.{ext}", std::process::id()));
    if let Err(e) = std::fs::write(&file, bytes) {
        return Some(OracleRun { ok: false, summary: None, stdout: String::new(), stderr: format!("cannot write {}: {e}", file.display()) });
    }
    let out = Command::new(&py).arg(&script_path).arg(style.name()).arg(&file).args(extra).output();
    let _ = std::fs::remove_file(&file);
    Some(match out {
        Ok(out) => {
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let ok = out.status.success();
            OracleRun {
                ok,
                summary: if ok { serde_json::from_str(&stdout).ok() } else { None },
                stdout,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            }
        }
        Err(e) => OracleRun { ok: false, summary: None, stdout: String::new(), stderr: format!("cannot run {}: {e}", py.display()) },
    })
}

/// `validate_response.py STYLE FILE`: a whole response body (success or error).
pub fn validate_response(style: Style, body: &[u8]) -> Option<OracleRun> {
    run("validate_response.py", style, body, "json", &[])
}

/// `parse_stream.py STYLE FILE [extra…]`: a raw SSE body as sent on the wire
/// (e.g. `&["--check-splits"]`).
pub fn parse_stream(style: Style, body: &[u8], extra: &[&str]) -> Option<OracleRun> {
    run("parse_stream.py", style, body, "sse", extra)
}

/// `validate_request.py STYLE FILE`: a request body.
pub fn validate_request(style: Style, body: &[u8]) -> Option<OracleRun> {
    run("validate_request.py", style, body, "json", &[])
}
