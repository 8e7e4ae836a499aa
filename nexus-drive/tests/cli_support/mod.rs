//! What the CLI tests share: running the built `nexus` binary in a scratch
//! directory with a controlled environment, next to a fake provider.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use nexus_tests::fake::{FakeProvider, Scripts};
use serde_json::Value;

/// The key the fake accepts: distinctive, so a leak into a file is easy to find.
pub const KEY: &str = "sk-nexus-cli-test-4f7Qz9";

/// The four styles, as the CLI names them.
pub const STYLES: [&str; 4] = ["anthropic", "openai", "gemini", "openai-responses"];

/// The fake's name for a style.
pub fn fake_style(style: &str) -> nexus_tests::fake::Style {
    match style {
        "anthropic" => nexus_tests::fake::Style::Anthropic,
        "openai" => nexus_tests::fake::Style::OpenAi,
        "openai-responses" => nexus_tests::fake::Style::OpenAiResponses,
        _ => nexus_tests::fake::Style::Gemini,
    }
}

/// The variable the CLI reads the key from by default.
pub fn key_var(style: &str) -> &'static str {
    match style {
        "anthropic" => "ANTHROPIC_API_KEY",
        "openai" | "openai-responses" => "OPENAI_API_KEY",
        _ => "GEMINI_API_KEY",
    }
}

/// What a finished command gave.
#[derive(Debug)]
pub struct Out {
    /// The exit code (`-1` when killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Out {
    /// Stdout parsed as one JSON value (the last line, for JSON-lines output).
    pub fn json(&self) -> Value {
        let text = self.stdout.trim();
        serde_json::from_str(text)
            .or_else(|_| serde_json::from_str(text.lines().last().unwrap_or("")))
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}\nstderr:\n{}", self.stdout, self.stderr))
    }

    /// Panics with the whole output unless the exit code is `code`.
    pub fn expect(self, code: i32) -> Out {
        assert_eq!(self.code, code, "exit code\nstdout:\n{}\nstderr:\n{}", self.stdout, self.stderr);
        assert!(!self.stderr.contains("panicked"), "the binary panicked:\n{}", self.stderr);
        self
    }
}

/// A scratch directory of its own.
pub fn scratch(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "nexus-cli-{}-{name}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
    dir
}

/// A `nexus` command in `dir` with no provider key in its environment but
/// the one for `style` (when given), set to [`KEY`].
pub fn nexus(dir: &Path, style: Option<&str>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nexus"));
    cmd.current_dir(dir).stdin(Stdio::null());
    for s in STYLES {
        cmd.env_remove(key_var(s));
    }
    if let Some(s) = style {
        cmd.env(key_var(s), KEY);
    }
    cmd
}

/// Runs a command to completion.
pub fn run(mut cmd: impl std::borrow::BorrowMut<Command>) -> Out {
    let cmd = cmd.borrow_mut();
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A fake provider accepting [`KEY`] with these scripts.
pub fn fake(scripts: Scripts) -> FakeProvider {
    FakeProvider::start(scripts)
}

/// `nexus run --style S --base-url URL --model M` plus `args`.
pub fn run_cmd(dir: &Path, fake: &FakeProvider, style: &str, model: &str, args: &[&str]) -> Command {
    let mut cmd = nexus(dir, Some(style));
    cmd.args(["run", "--style", style, "--base-url", &fake.base_url(fake_style(style)), "--model", model]);
    cmd.args(args);
    cmd
}

/// Writes a JSON value to `dir/name` and returns the path as a string.
pub fn write_json(dir: &Path, name: &str, v: &Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(v).unwrap_or_default()).unwrap_or_else(|e| panic!("{e}"));
    path.to_string_lossy().into_owned()
}

/// The tool-result turns of a request body, each as the list of its
/// results' text (output and id or name), read with the provider's own
/// shapes: Anthropic `tool_result` blocks of a user message; OpenAI
/// consecutive `tool` messages; Gemini `functionResponse` parts of a content.
pub fn result_turns(style: &str, body: &Value) -> Vec<Vec<String>> {
    let empty = Vec::new();
    let mut turns = Vec::new();
    match style {
        "anthropic" => {
            for m in body["messages"].as_array().unwrap_or(&empty) {
                let blocks: Vec<String> = m["content"]
                    .as_array()
                    .unwrap_or(&empty)
                    .iter()
                    .filter(|b| b["type"] == "tool_result")
                    .map(|b| b.to_string())
                    .collect();
                if !blocks.is_empty() {
                    turns.push(blocks);
                }
            }
        }
        "openai" => {
            let mut current: Vec<String> = Vec::new();
            for m in body["messages"].as_array().unwrap_or(&empty) {
                if m["role"] == "tool" {
                    current.push(m.to_string());
                } else if !current.is_empty() {
                    turns.push(std::mem::take(&mut current));
                }
            }
            if !current.is_empty() {
                turns.push(current);
            }
        }
        "openai-responses" => {
            // A run of function_call_output items is one result turn.
            let mut current: Vec<String> = Vec::new();
            for item in body["input"].as_array().unwrap_or(&empty) {
                if item["type"] == "function_call_output" {
                    current.push(item.to_string());
                } else if !current.is_empty() {
                    turns.push(std::mem::take(&mut current));
                }
            }
            if !current.is_empty() {
                turns.push(current);
            }
        }
        _ => {
            for c in body["contents"].as_array().unwrap_or(&empty) {
                let parts: Vec<String> = c["parts"]
                    .as_array()
                    .unwrap_or(&empty)
                    .iter()
                    .filter(|p| p.get("functionResponse").is_some())
                    .map(|p| p.to_string())
                    .collect();
                if !parts.is_empty() {
                    turns.push(parts);
                }
            }
        }
    }
    turns
}

/// Files in `dir` whose names start with a dot (temporary files a write left behind).
pub fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// The CLI's MCP token file at `tokens`, opened with the key file the CLI
/// made beside it on first use (SPEC §20), and what the two files hold as
/// written (for scanning: no secret may be in it).
pub fn opened_tokens(tokens: &Path) -> (nexus_drive::mcp::auth::SealedTokenStore, String) {
    use nexus_drive::mcp::auth::{FileTokenStore, KeyRing, SealedTokenStore};
    let key_file = tokens.with_extension("key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&key_file).expect("the key file beside the tokens").permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", key_file.display());
    }
    let keys = KeyRing::from_file(&key_file).expect("the key file reads");
    let store = SealedTokenStore::new(std::sync::Arc::new(FileTokenStore::new(tokens)), keys, "test");
    let mut raw = std::fs::read_to_string(tokens).unwrap_or_default();
    raw.push_str(&std::fs::read_to_string(tokens.with_extension("pending.json")).unwrap_or_default());
    (store, raw)
}
