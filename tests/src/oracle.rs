//! Runs the official-SDK oracles (`shared/oracles/*.py`) on bytes, so tests
//! can prove a response is what the real SDKs accept.
//!
//! The interpreter is `$NEXUS_ORACLE_PY`, else `/tmp/oracle-venv/bin/python`
//! (made by `shared/oracles/setup.sh`). When it is missing every runner
//! returns `None` after printing `skipped: …`, and the calling test returns.
//!
//! Importing the three SDKs takes seconds, so one Python worker per test
//! process runs every check (the scripts' own `main`, output captured); if it
//! cannot start or dies, each check runs the script as its own process.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use serde_json::{json, Value};

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
        return Some(OracleRun {
            ok: false,
            summary: None,
            stdout: String::new(),
            stderr: format!("cannot write {}: {e}", file.display()),
        });
    }
    if let Some(run) = via_worker(&py, script, style, &file, extra) {
        let _ = std::fs::remove_file(&file);
        return Some(run);
    }
    let out = Command::new(&py).arg(&script_path).arg(style.oracle_name()).arg(&file).args(extra).output();
    let _ = std::fs::remove_file(&file);
    Some(match out {
        Ok(out) => finish(
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ),
        Err(e) => OracleRun {
            ok: false,
            summary: None,
            stdout: String::new(),
            stderr: format!("cannot run {}: {e}", py.display()),
        },
    })
}

fn finish(ok: bool, stdout: String, stderr: String) -> OracleRun {
    OracleRun { ok, summary: if ok { serde_json::from_str(&stdout).ok() } else { None }, stdout, stderr }
}

/// The worker: reads one JSON job per line, runs the named script's `main`
/// with its output captured, answers one JSON line on the real stdout.
const WORKER: &str = r#"
import contextlib, importlib, io, json, sys
sys.path.insert(0, sys.argv[1])
channel = sys.__stdout__
for line in sys.stdin:
    job = json.loads(line)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = importlib.import_module(job["script"]).main([job["style"], job["file"]] + job["extra"])
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException as e:
            print(f"oracle crashed: {e!r}")
            rc = 3
    channel.write(json.dumps({"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}) + "\n")
    channel.flush()
"#;

struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

static WORKER_CELL: OnceLock<Mutex<Option<Worker>>> = OnceLock::new();

fn start_worker(py: &Path) -> Option<Worker> {
    let mut child = Command::new(py)
        .arg("-c")
        .arg(WORKER)
        .arg(shared_dir().join("oracles"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let stdin = child.stdin.take()?;
    let stdout = BufReader::new(child.stdout.take()?);
    Some(Worker { child, stdin, stdout })
}

fn via_worker(py: &Path, script: &str, style: Style, file: &Path, extra: &[&str]) -> Option<OracleRun> {
    let cell = WORKER_CELL.get_or_init(|| Mutex::new(start_worker(py)));
    let mut guard = cell.lock().unwrap_or_else(|e| e.into_inner());
    let worker = guard.as_mut()?;
    let job = json!({
        "script": script.trim_end_matches(".py"),
        "style": style.oracle_name(),
        "file": file.to_string_lossy(),
        "extra": extra,
    });
    let answer = (|| {
        writeln!(worker.stdin, "{job}").ok()?;
        worker.stdin.flush().ok()?;
        let mut line = String::new();
        worker.stdout.read_line(&mut line).ok().filter(|&n| n > 0)?;
        serde_json::from_str::<Value>(&line).ok()
    })();
    let Some(answer) = answer else {
        // The worker is gone: drop it (killing it) and run scripts one by one from now on.
        *guard = None;
        return None;
    };
    let text = |k: &str| answer.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    Some(finish(answer.get("rc").and_then(Value::as_i64) == Some(0), text("stdout"), text("stderr")))
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
