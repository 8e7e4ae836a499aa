//! `nexus run --approve TOOL,...` end to end: the built binary against the
//! fake provider. A call of a tool named there suspends on an `approval`
//! request before it runs; `nexus resume` with `ok: true` runs it once, with
//! `ok: false` never runs it and gives the model the decline's reason.
#![cfg(feature = "cli")]

mod cli_support;

use cli_support::*;
use nexus_tests::fake::{Script, Scripts, Turn};
use serde_json::{json, Value};

const MODEL: &str = "m-approve";
/// Appends: a second run of the call would leave two lines.
const COMMAND: &str = r#"{"command":"echo made >> made.txt"}"#;

fn scripts() -> Scripts {
    Scripts::new(KEY).model(MODEL, Script::new(vec![Turn::default().call("bash", COMMAND), Turn::text("over")]))
}

/// Runs until the approval; the request it waits for.
fn suspend(dir: &std::path::Path, fake: &nexus_tests::fake::FakeProvider, style: &str) -> Value {
    let args = ["--builtins=bash", "--approve", "bash", "--state", "st.json", "--json", "make the file"];
    let result = run(run_cmd(dir, fake, style, MODEL, &args)).expect(3).json();
    assert_eq!(result["status"], "pending", "{style}: {result}");
    assert!(!dir.join("made.txt").exists(), "{style}: bash ran before the approval");
    let request = result["pending"][0].clone();
    assert_eq!(request["kind"], "approval", "{style}");
    assert_eq!(request["prompt"], format!("Allow bash to run with {COMMAND}?"), "{style}");
    assert_eq!(request["data"]["tool"], "bash", "{style}");
    request
}

fn resume(dir: &std::path::Path, style: &str, answer: Value) -> Value {
    let answers = write_json(dir, "answers.json", &answer);
    let mut cmd = nexus(dir, Some(style));
    cmd.args(["resume", "--state", "st.json", "--answer", &answers, "--approve", "bash", "--json"]);
    run(cmd).expect(0).json()
}

#[test]
fn an_approved_call_runs_once_and_a_declined_one_never_with_its_reason() {
    for style in ["anthropic", "openai", "gemini"] {
        let dir = scratch("approve-yes");
        let provider = fake(scripts());
        let request = suspend(&dir, &provider, style);
        let done = resume(&dir, style, json!({"id": request["id"], "ok": true}));
        assert_eq!(done["status"], "done", "{style}: {done}");
        assert_eq!(std::fs::read_to_string(dir.join("made.txt")).unwrap_or_default(), "made\n", "{style}: ran once");
        assert_eq!(done["toolCalls"][0]["isError"], false, "{style}: {done}");

        let dir = scratch("approve-no");
        let provider = fake(scripts());
        let request = suspend(&dir, &provider, style);
        let done = resume(&dir, style, json!({"id": request["id"], "ok": false, "reason": "not on this machine"}));
        assert_eq!(done["status"], "done", "{style}: {done}");
        assert!(!dir.join("made.txt").exists(), "{style}: a declined call ran");
        let output = done["toolCalls"][0]["output"].as_str().unwrap_or_default().to_string();
        assert_eq!(output, format!("declined: Allow bash to run with {COMMAND}? — reason: not on this machine"));
        let last = provider.requests_for(MODEL).last().cloned().expect("a request");
        assert!(
            String::from_utf8_lossy(&last.body).contains("reason: not on this machine"),
            "{style}: the model read it"
        );
    }
}

#[test]
fn approving_a_tool_the_run_does_not_have_is_a_usage_error() {
    let dir = scratch("approve-unknown");
    let provider = fake(scripts());
    let out = run(run_cmd(&dir, &provider, "openai", MODEL, &["--approve", "bash", "hello"])).expect(2);
    assert!(out.stderr.contains("no tool named \"bash\""), "{}", out.stderr);
    assert!(provider.requests().is_empty(), "nothing was sent");
}
