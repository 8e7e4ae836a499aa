//! Real agent clients run their own tool loops through `nexus serve`, each
//! against an upstream of another family (the fake provider server):
//!
//! * Claude Code (`claude -p`) over `/v1/messages`, its Bash tool;
//! * Codex CLI (`codex exec`) over `/v1/responses`, its `exec_command` tool;
//! * Gemini CLI (`gemini -p`) over `streamGenerateContent`, its
//!   `run_shell_command` tool;
//! * the OpenAI Agents SDK (`openai-agents`) with a function tool, through
//!   `/v1/responses` (whole and streamed) and `/v1/chat/completions`.
//!
//! The fake scripts a call of the client's own tool that reads a file whose
//! content only the file has; the client runs the tool, and the follow-up
//! must carry that content to the upstream as the call's result, then the
//! scripted final text must come out of the client.
//!
//! The clients are installed, pinned, by `.ci/agent-clients.sh`, which
//! prints the environment read here (`NEXUS_NODE_BIN`, `NEXUS_AGENTS_PYTHON`).
//! Outside CI a missing client skips its test with a note; in CI it fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use nexus_drive::serve::{serve, ServeConfig, Server};
use nexus_tests::fake::{FakeProvider, Script, Scripts, Style, Turn};
use serde_json::{json, Value};

mod serve_support;
use serve_support::{proto, CLIENT_TOKEN, UPSTREAM_KEY};

const FINAL: &str = "The note says plum.";
/// Seconds a client run may take before it is stopped.
const CLIENT_TIMEOUT: &str = "240";

/// A client binary from `$NEXUS_NODE_BIN` (or a Python from `$var`):
/// `None` outside CI when it is not installed.
fn client(var: &str, name: &str) -> Option<PathBuf> {
    let path = std::env::var_os(var).map(|dir| if name.is_empty() { dir.into() } else { Path::new(&dir).join(name) });
    match path {
        Some(p) if p.exists() => Some(p),
        _ => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI: {name:?} is missing; run `eval \"$(bash .ci/agent-clients.sh)\"` ({var})"
            );
            println!("skipped: {var}/{name} is not installed (eval \"$(bash .ci/agent-clients.sh)\")");
            None
        }
    }
}

/// A fresh directory holding `note.txt` with a secret only it knows, and an
/// empty home for the client's own settings.
struct Workspace {
    root: PathBuf,
    secret: String,
}

impl Workspace {
    fn new(tag: &str) -> Workspace {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("nexus-agent-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("work")).unwrap();
        std::fs::create_dir_all(root.join("home")).unwrap();
        let secret = format!("plum-{}-{n}", std::process::id());
        std::fs::write(root.join("work/note.txt"), format!("the secret is {secret}\n")).unwrap();
        Workspace { root, secret }
    }

    fn work(&self) -> PathBuf {
        self.root.join("work")
    }

    fn home(&self) -> PathBuf {
        self.root.join("home")
    }

    /// The client, run in the work directory with only the environment given
    /// (plus PATH with Node first), stdin closed, under a time limit.
    fn run(&self, program: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
        let node_dir = std::env::var("NEXUS_NODE_BIN").unwrap_or_default();
        let path = format!("{node_dir}:{}", std::env::var("PATH").unwrap_or_default());
        let mut cmd = Command::new("timeout");
        cmd.arg(CLIENT_TIMEOUT)
            .arg(program)
            .args(args)
            .current_dir(self.work())
            .env_clear()
            .env("PATH", path)
            .env("HOME", self.home())
            .env("TMPDIR", std::env::temp_dir())
            .env("TERM", "dumb")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap_or_else(|e| panic!("run {}: {e}", program.display()));
        if !out.status.success() {
            panic!(
                "{} failed ({}):\nstdout:\n{}\nstderr:\n{}",
                program.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        out
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// The fake: `model` calls `tool` with `arguments`, then says [`FINAL`];
/// every other model named answers text only.
fn fake(model: &str, tool: &str, arguments: Value, others: &[&str]) -> FakeProvider {
    fake_with(model, Turn::default().call(tool, arguments.to_string()), others)
}

/// The fake: `model` answers `calls` first, then says [`FINAL`].
fn fake_with(model: &str, calls: Turn, others: &[&str]) -> FakeProvider {
    let mut scripts =
        Scripts::new(UPSTREAM_KEY).model(model, Script::new(vec![calls.usage(30, 8), Turn::text(FINAL).usage(60, 6)]));
    for other in others {
        scripts = scripts.model(*other, Script::new(vec![Turn::text("ok").usage(5, 1)]));
    }
    FakeProvider::start(scripts)
}

fn gateway(fake: &FakeProvider, upstream: Style) -> Server {
    let mut config = ServeConfig::new("127.0.0.1:0".parse().unwrap(), proto(upstream))
        .upstream_base_url(fake.base_url(upstream))
        .api_key(UPSTREAM_KEY);
    config.client_token = Some(CLIENT_TOKEN.to_string());
    serve(config).expect("the gateway starts")
}

/// The texts of the tool results in one upstream request body of `style`.
fn tool_results(style: Style, body: &Value) -> Vec<String> {
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let mut out = Vec::new();
    match style {
        Style::Anthropic => {
            for m in body["messages"].as_array().into_iter().flatten() {
                for b in m["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "tool_result") {
                    out.push(text(&b["content"]));
                }
            }
        }
        Style::OpenAi => {
            for m in body["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == "tool") {
                out.push(text(&m["content"]));
            }
        }
        Style::OpenAiResponses => {
            for i in body["input"].as_array().into_iter().flatten().filter(|i| i["type"] == "function_call_output") {
                out.push(text(&i["output"]));
            }
        }
        Style::Gemini => {
            for c in body["contents"].as_array().into_iter().flatten() {
                for p in c["parts"].as_array().into_iter().flatten().filter(|p| p.get("functionResponse").is_some()) {
                    out.push(text(&p["functionResponse"]["response"]));
                }
            }
        }
    }
    out
}

/// The upstream saw the scripted call's result: the file's secret, in a
/// tool result of its own wire format, in the request answered by the final
/// text; no request failed the fake's checks; the client's key never went up.
fn check_round_trip(fake: &FakeProvider, upstream: Style, model: &str, secret: &str) {
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
    let bodies: Vec<Value> = fake.requests_for(model).into_iter().filter_map(|r| r.json).collect();
    assert!(bodies.len() >= 2, "the call and its follow-up went upstream: {bodies:?}");
    let carried: Vec<&Value> =
        bodies.iter().filter(|b| tool_results(upstream, b).iter().any(|r| r.contains(secret))).collect();
    assert!(!carried.is_empty(), "no upstream request carried the tool's result {secret:?}: {bodies:#?}");
    for r in fake.requests() {
        for (k, v) in &r.headers {
            assert!(!v.contains(CLIENT_TOKEN), "the client token reached the upstream in {k}");
        }
    }
}

// ---------------------------------------------------------------- CLIs

fn claude_code(upstream: Style) {
    let bash = json!({"command": "cat note.txt", "description": "Show the note"});
    claude_code_with(upstream, Turn::default().call("Bash", bash.to_string()), 1);
}

fn claude_code_with(upstream: Style, calls: Turn, n_calls: usize) {
    let Some(claude) = client("NEXUS_NODE_BIN", "claude") else { return };
    let fake = fake_with("m-claude", calls, &["m-fast"]);
    let server = gateway(&fake, upstream);
    let ws = Workspace::new("claude");
    let out = ws.run(
        &claude,
        &["-p", "What does note.txt say?", "--output-format", "json", "--allowedTools", "Bash(cat:*)", "Bash(wc:*)"],
        &[
            ("ANTHROPIC_BASE_URL", format!("http://{}", server.local_addr())),
            ("ANTHROPIC_API_KEY", CLIENT_TOKEN.to_string()),
            ("ANTHROPIC_MODEL", "m-claude".into()),
            ("ANTHROPIC_SMALL_FAST_MODEL", "m-fast".into()),
            ("ANTHROPIC_DEFAULT_HAIKU_MODEL", "m-fast".into()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("DISABLE_TELEMETRY", "1".into()),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("claude's JSON ({e}): {stdout}"));
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(result["result"], FINAL, "{result}");
    // One model call with the calls, one with their results (Claude Code
    // counts each parallel call's message as a turn of its own).
    assert_eq!(result["num_turns"], 1 + n_calls, "{result}");
    assert_eq!(fake.requests_for("m-claude").len(), 2);
    assert_eq!(result["permission_denials"], json!([]), "{result}");
    check_round_trip(&fake, upstream, "m-claude", &ws.secret);
    let follow_up = fake.requests_for("m-claude").into_iter().filter_map(|r| r.json).next_back().unwrap();
    assert_eq!(tool_results(upstream, &follow_up).len(), n_calls, "{follow_up}");
    server.shutdown();
}

#[test]
fn claude_code_runs_its_bash_tool_through_the_gateway_to_openai_chat() {
    claude_code(Style::OpenAi);
}

#[test]
fn claude_code_runs_its_bash_tool_through_the_gateway_to_gemini() {
    claude_code(Style::Gemini);
}

#[test]
fn claude_code_runs_its_bash_tool_through_the_gateway_to_an_openai_responses_upstream() {
    claude_code(Style::OpenAiResponses);
}

/// Two parallel calls whose argument pieces the Chat upstream interleaves:
/// Claude Code gets two whole tool_use blocks, runs both, and answers both.
#[test]
fn claude_code_runs_two_interleaved_parallel_calls_through_the_gateway_to_openai_chat() {
    let cat = json!({"command": "cat note.txt", "description": "Show the note"});
    let wc = json!({"command": "wc -c note.txt", "description": "Count the note's bytes"});
    let calls = Turn::default().call("Bash", cat.to_string()).call("Bash", wc.to_string()).interleaved();
    claude_code_with(Style::OpenAi, calls, 2);
}

fn codex(upstream: Style) {
    let Some(codex) = client("NEXUS_NODE_BIN", "codex") else { return };
    let fake = fake("m-codex", "exec_command", json!({"cmd": "cat note.txt"}), &[]);
    let server = gateway(&fake, upstream);
    let ws = Workspace::new("codex");
    let codex_home = ws.home().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    let config = format!(
        "model = \"m-codex\"\nmodel_provider = \"nexus\"\n\n[model_providers.nexus]\nname = \"nexus\"\n\
         base_url = \"http://{}/v1\"\nenv_key = \"NEXUS_CLIENT_KEY\"\nwire_api = \"responses\"\n",
        server.local_addr()
    );
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    let out = ws.run(
        &codex,
        &["exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "What does note.txt say?"],
        &[("CODEX_HOME", codex_home.display().to_string()), ("NEXUS_CLIENT_KEY", CLIENT_TOKEN.to_string())],
    );
    // `codex exec` prints the last message alone on stdout; the transcript goes to stderr.
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), FINAL);
    let transcript = String::from_utf8_lossy(&out.stderr);
    assert!(transcript.contains(&ws.secret), "codex ran its own tool: {transcript}");
    check_round_trip(&fake, upstream, "m-codex", &ws.secret);
    server.shutdown();
}

#[test]
fn codex_runs_its_exec_tool_through_the_gateway_to_anthropic() {
    codex(Style::Anthropic);
}

#[test]
fn codex_runs_its_exec_tool_through_the_gateway_to_openai_chat() {
    codex(Style::OpenAi);
}

#[test]
fn codex_runs_its_exec_tool_through_the_gateway_to_gemini() {
    codex(Style::Gemini);
}

fn gemini_cli(upstream: Style) {
    let Some(gemini) = client("NEXUS_NODE_BIN", "gemini") else { return };
    let fake =
        fake("m-gemini", "run_shell_command", json!({"command": "cat note.txt", "description": "Show the note"}), &[]);
    let server = gateway(&fake, upstream);
    let ws = Workspace::new("gemini");
    // API-key auth, and the work directory trusted (else tools need approval).
    let settings = json!({"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}}});
    std::fs::create_dir_all(ws.home().join(".gemini")).unwrap();
    std::fs::write(ws.home().join(".gemini/settings.json"), settings.to_string()).unwrap();
    let out = ws.run(
        &gemini,
        &["-p", "What does note.txt say?", "-m", "m-gemini", "--approval-mode", "yolo"],
        &[
            ("GOOGLE_GEMINI_BASE_URL", format!("http://{}", server.local_addr())),
            ("GEMINI_API_KEY", CLIENT_TOKEN.to_string()),
        ],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), FINAL);
    check_round_trip(&fake, upstream, "m-gemini", &ws.secret);
    server.shutdown();
}

#[test]
fn gemini_cli_runs_its_shell_tool_through_the_gateway_to_anthropic() {
    gemini_cli(Style::Anthropic);
}

#[test]
fn gemini_cli_runs_its_shell_tool_through_the_gateway_to_openai_chat() {
    gemini_cli(Style::OpenAi);
}

#[test]
fn gemini_cli_runs_its_shell_tool_through_the_gateway_to_an_openai_responses_upstream() {
    gemini_cli(Style::OpenAiResponses);
}

// ---------------------------------------------------------------- Agents SDK

/// An Agent with one function tool that reads the note, run through the
/// gateway with the model class given (`responses` or `chat`), whole or
/// streamed. Prints `{"final": …, "tool_ran": n}`.
const AGENT: &str = r#"
import asyncio, json, sys
from openai import AsyncOpenAI
from agents import (Agent, Runner, function_tool, set_tracing_disabled,
                    OpenAIResponsesModel, OpenAIChatCompletionsModel)

cfg = json.loads(sys.argv[1])
set_tracing_disabled(True)
ran = []

@function_tool
def read_note(name: str) -> str:
    """Reads a note from the work directory."""
    ran.append(name)
    with open(cfg["dir"] + "/" + name) as f:
        return f.read()

client = AsyncOpenAI(base_url=cfg["base_url"], api_key=cfg["key"], max_retries=0)
cls = OpenAIResponsesModel if cfg["api"] == "responses" else OpenAIChatCompletionsModel
agent = Agent(name="notes", instructions="Answer from the notes.", tools=[read_note],
              model=cls(model=cfg["model"], openai_client=client))

async def main():
    if cfg["stream"]:
        result = Runner.run_streamed(agent, "What does note.txt say?")
        kinds = set()
        async for ev in result.stream_events():
            kinds.add(ev.type)
        out = result.final_output
    else:
        result = await Runner.run(agent, "What does note.txt say?")
        out = result.final_output
    print(json.dumps({"final": out, "tool_ran": ran}))

asyncio.run(main())
"#;

fn agents_sdk(api: &str, stream: bool, upstream: Style) {
    let Some(py) = client("NEXUS_AGENTS_PYTHON", "") else { return };
    let fake = fake("m-agent", "read_note", json!({"name": "note.txt"}), &[]);
    let server = gateway(&fake, upstream);
    let ws = Workspace::new("agents");
    let cfg = json!({
        "base_url": format!("http://{}/v1", server.local_addr()),
        "key": CLIENT_TOKEN,
        "model": "m-agent",
        "api": api,
        "stream": stream,
        "dir": ws.work(),
    });
    let out = ws.run(&py, &["-c", AGENT, &cfg.to_string()], &[("OPENAI_AGENTS_DISABLE_TRACING", "1".into())]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let result: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("agent output ({e}): {stdout}"));
    assert_eq!(result, json!({"final": FINAL, "tool_ran": ["note.txt"]}));
    check_round_trip(&fake, upstream, "m-agent", &ws.secret);
    server.shutdown();
}

#[test]
fn an_openai_agent_runs_its_function_tool_through_the_responses_surface_to_anthropic() {
    agents_sdk("responses", false, Style::Anthropic);
}

#[test]
fn an_openai_agent_streams_its_function_tool_through_the_responses_surface_to_gemini() {
    agents_sdk("responses", true, Style::Gemini);
}

#[test]
fn an_openai_agent_runs_its_function_tool_through_the_chat_surface_to_anthropic() {
    agents_sdk("chat", false, Style::Anthropic);
}

#[test]
fn an_openai_agent_streams_its_function_tool_through_the_chat_surface_to_an_openai_responses_upstream() {
    agents_sdk("chat", true, Style::OpenAiResponses);
}

// ---------------------------------------------------------------- OpenResponses schema

/// `/v1/responses` answers, whole and streamed, validated by the
/// OpenResponses schema's own models (`tests/openresponses/check_schema.py`,
/// PyPI `openresponses-types`): a tool round trip through the gateway to an
/// upstream of another wire format.
fn openresponses_schema(upstream: Style) {
    let Some(py) = client("NEXUS_AGENTS_PYTHON", "") else { return };
    let fake = fake("m-schema", "read_note", json!({"name": "note.txt"}), &[]);
    let server = gateway(&fake, upstream);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/openresponses/check_schema.py");
    let base = format!("http://{}", server.local_addr());
    let out = std::process::Command::new(&py)
        .args([script, &base, CLIENT_TOKEN, "m-schema"])
        .output()
        .expect("run the schema check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{upstream:?}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("summary ({e}): {stdout}"));
    assert_eq!(summary["checked"], json!(["whole", "streamed"]), "{summary}");
    // Both turns of both modes reached the upstream.
    assert_eq!(fake.requests().len(), 4, "{upstream:?}");
    server.shutdown();
}

#[test]
fn responses_answers_translated_from_anthropic_pass_the_openresponses_schema() {
    openresponses_schema(Style::Anthropic);
}

#[test]
fn responses_answers_translated_from_openai_chat_pass_the_openresponses_schema() {
    openresponses_schema(Style::OpenAi);
}

#[test]
fn responses_answers_translated_from_gemini_pass_the_openresponses_schema() {
    openresponses_schema(Style::Gemini);
}
