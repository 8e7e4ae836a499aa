//! Helpers for the translation tests: running the official-SDK oracles on
//! bytes, and reading an OpenAI chunk stream back into one message.
#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

/// The oracle interpreter: `$NEXUS_ORACLE_PY`, else the default venv. `None`
/// (with a printed line, so a skipped check is visible) when it is missing.
pub fn python() -> Option<PathBuf> {
    let py = std::env::var_os("NEXUS_ORACLE_PY")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp/oracle-venv/bin/python"));
    if py.exists() {
        Some(py)
    } else {
        println!("skipped: no oracle interpreter at {} (set NEXUS_ORACLE_PY)", py.display());
        None
    }
}

/// What an oracle said: exit 0, stdout, stderr.
#[derive(Debug)]
pub struct Verdict {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

impl Verdict {
    /// The normalized summary an `ok` run prints.
    pub fn summary(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("oracle summary is not JSON ({e}): {}", self.stdout))
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// One oracle run to make: `shared/oracles/SCRIPT STYLE <file with bytes> ARGS…`.
pub struct Job<'a> {
    pub script: &'a str,
    pub style: &'a str,
    pub bytes: Vec<u8>,
    pub args: Vec<&'a str>,
}

/// Runs every job in ONE interpreter (the SDK imports dominate the cost of
/// a run), calling each script's own `main(argv)` with its output captured.
/// `None` when the interpreter is missing.
pub fn oracle_batch(jobs: &[Job<'_>]) -> Option<Vec<Verdict>> {
    const DRIVER: &str = r#"
import contextlib, importlib, io, json, sys
sys.path.insert(0, sys.argv[1])
for line in sys.stdin:
    job = json.loads(line)
    mod = importlib.import_module(job["script"][:-3])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = mod.main(job["argv"])
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 2
        except Exception as e:
            rc = 3
            print(f"oracle crashed: {e!r}", file=sys.stderr)
    print(json.dumps({"rc": rc, "stdout": out.getvalue(), "stderr": err.getvalue()}), flush=True)
"#;
    let py = python()?;
    let dir = super::common::shared_dir().join("oracles");
    if !dir.join("validate_request.py").exists() {
        println!("skipped: no oracles in {}", dir.display());
        return None;
    }
    let mut files = Vec::with_capacity(jobs.len());
    let mut input = String::new();
    for job in jobs {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let file = std::env::temp_dir().join(format!("nexus-translate-{}-{n}.txt", std::process::id()));
        std::fs::write(&file, &job.bytes).expect("write the oracle input");
        let mut argv = vec![job.style.to_string(), file.display().to_string()];
        argv.extend(job.args.iter().map(|a| a.to_string()));
        input.push_str(&serde_json::json!({ "script": job.script, "argv": argv }).to_string());
        input.push('\n');
        files.push(file);
    }
    let mut child = Command::new(&py)
        .arg("-c")
        .arg(DRIVER)
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the oracle interpreter");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().expect("run the oracles");
    writer.join().expect("writer").expect("write the jobs");
    for file in files {
        let _ = std::fs::remove_file(file);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let verdicts: Vec<Verdict> = stdout
        .lines()
        .map(|line| {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("oracle driver output ({e}): {line}"));
            Verdict {
                ok: v["rc"] == 0,
                stdout: v["stdout"].as_str().unwrap_or_default().to_string(),
                stderr: v["stderr"].as_str().unwrap_or_default().to_string(),
            }
        })
        .collect();
    assert_eq!(verdicts.len(), jobs.len(), "the oracle driver stopped early: {}", String::from_utf8_lossy(&out.stderr));
    Some(verdicts)
}

/// Runs `shared/oracles/SCRIPT STYLE FILE ARGS…` on `bytes`.
pub fn oracle(script: &str, style: &str, bytes: &[u8], args: &[&str]) -> Option<Verdict> {
    let job = Job { script, style, bytes: bytes.to_vec(), args: args.to_vec() };
    oracle_batch(std::slice::from_ref(&job)).and_then(|mut v| v.pop())
}

/// Asserts the oracle accepts a request body for `style`.
pub fn assert_valid_request(style: &str, body: &[u8], args: &[&str]) {
    if let Some(v) = oracle("validate_request.py", style, body, args) {
        assert!(
            v.ok,
            "the {style} oracle refused the translated request:\n{}\n{}\nbody: {}",
            v.stdout,
            v.stderr,
            String::from_utf8_lossy(body)
        );
    }
}

/// One OpenAI completion read back from its chunks, the way the SDK's
/// stream state assembles it: content and reasoning concatenated, tool calls
/// by index (id, type and name from their first delta), the last finish
/// reason, the usage chunk.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Assembled {
    pub text: String,
    pub reasoning: String,
    /// (id, name, arguments) by index.
    pub calls: Vec<(String, String, String)>,
    pub finish: Option<String>,
    pub usage: Option<Value>,
    pub error: Option<Value>,
    pub done: bool,
    pub role: Option<String>,
}

/// Reads `data:` lines written by the translator.
pub fn assemble(lines: &[String]) -> Assembled {
    let mut a = Assembled::default();
    for line in lines {
        let data = line
            .strip_prefix("data: ")
            .and_then(|l| l.strip_suffix("\n\n"))
            .unwrap_or_else(|| panic!("not one SSE data event: {line:?}"));
        assert!(!a.done, "a line after [DONE]: {line:?}");
        assert!(a.error.is_none(), "a line after an error: {line:?}");
        if data == "[DONE]" {
            a.done = true;
            continue;
        }
        let v: Value = serde_json::from_str(data).unwrap_or_else(|e| panic!("chunk is not JSON ({e}): {data}"));
        if let Some(err) = v.get("error") {
            a.error = Some(err.clone());
            continue;
        }
        assert_eq!(v["object"], "chat.completion.chunk", "{data}");
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            a.usage = Some(u.clone());
        }
        for choice in v["choices"].as_array().expect("choices") {
            let delta = &choice["delta"];
            if let Some(r) = delta["role"].as_str() {
                a.role = Some(r.to_string());
            }
            a.text.push_str(delta["content"].as_str().unwrap_or_default());
            a.reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
            for tc in delta["tool_calls"].as_array().into_iter().flatten() {
                let index = tc["index"].as_u64().expect("every tool-call delta has an index") as usize;
                if index == a.calls.len() {
                    let id = tc["id"].as_str().expect("the first delta of a call carries its id");
                    let name = tc["function"]["name"].as_str().expect("the first delta of a call carries its name");
                    assert_eq!(tc["type"], "function");
                    a.calls.push((id.to_string(), name.to_string(), String::new()));
                } else {
                    assert!(index < a.calls.len(), "tool-call index {index} skips ahead");
                    assert!(tc.get("id").is_none_or(Value::is_null), "a later delta repeats the id");
                }
                a.calls[index].2.push_str(tc["function"]["arguments"].as_str().unwrap_or_default());
            }
            if let Some(f) = choice["finish_reason"].as_str() {
                a.finish = Some(f.to_string());
            }
        }
    }
    a
}
