//! `nexus run --fallback` / `nexus resume` end to end: the built binary
//! against two fake providers of different wire formats, the first refusing
//! with a long `Retry-After`; the run moves to the second, suspends there,
//! resumes in another process on the same upstream, reports its routing in
//! `--json`, and its cassette replays byte for byte.

mod cli_support;

use cli_support::*;
use nexus_tests::fake::{ExpectFinal, FakeProvider, Fault, Script, Scripts, Style, Turn};
use serde_json::{json, Value};

const BACKUP_KEY: &str = "sk-nexus-cli-backup-8Jw2";
const BACKUP_VAR: &str = "NEXUS_TEST_BACKUP_KEY";

fn relay_turns() -> Vec<Turn> {
    vec![
        Turn::text("Looking it up.").call_with_id("c_alpha", "lookup", r#"{"q": "alpha"}"#),
        Turn::text("Alpha is A-ONE."),
    ]
}

fn upstream(style: &str, base_url: &str, model: &str) -> Value {
    json!({"style": style, "baseUrl": base_url, "model": model})
}

#[test]
fn a_run_fails_over_suspends_resumes_on_its_fallback_and_replays() {
    let dir = scratch("failover");
    // The primary (OpenAI) is rate limited for a minute: over the 10 s bound, so no waiting.
    let mut refused = Turn::text("never");
    refused.faults = vec![Fault::status_retry_after(429, "60")];
    let primary = fake(Scripts::new(KEY).model("openai-primary", Script::new(vec![refused])));
    let expect = ExpectFinal { tool_result_contains: vec!["A-ONE".into()], tool_results: Some(1), messages: Some(3) };
    let backup = FakeProvider::start(
        Scripts::new(BACKUP_KEY).model("claude-backup", Script::new(relay_turns()).expect_final(expect)),
    );
    let backup_url = backup.base_url(Style::Anthropic);
    let fallback = format!("style=anthropic,base-url={backup_url},model=claude-backup,api-key-env={BACKUP_VAR}");
    let relay = write_json(
        &dir,
        "relay.json",
        &json!([{"name": "lookup", "description": "Looks a word up.", "input_schema": {"type": "object"}}]),
    );
    let mut cmd = run_cmd(
        &dir,
        &primary,
        "openai",
        "openai-primary",
        &["--fallback", &fallback, "--relay", &relay, "--record", "c.jsonl", "--json", "look up alpha"],
    );
    cmd.env(BACKUP_VAR, BACKUP_KEY);
    let out = run(cmd).expect(3).json();
    let primary_url = primary.base_url(Style::OpenAi);
    assert_eq!(out["status"], "pending");
    assert_eq!(
        out["upstreams"],
        json!([{"turn": 1, "style": "anthropic", "baseUrl": backup_url, "model": "claude-backup"}])
    );
    let failovers = out["failovers"].as_array().unwrap_or_else(|| panic!("failovers: {out}"));
    assert_eq!(failovers.len(), 1, "{out}");
    assert_eq!(failovers[0]["turn"], 1);
    assert_eq!(failovers[0]["from"], upstream("openai", &primary_url, "openai-primary"));
    assert_eq!(failovers[0]["to"], upstream("anthropic", &backup_url, "claude-backup"));
    assert!(failovers[0]["reason"].as_str().unwrap_or("").contains("429"), "{out}");
    assert_eq!(primary.requests().len(), 1, "a long Retry-After moves on at once");

    // The state keeps the list (without keys); resume finds the key again.
    let state = std::fs::read_to_string(dir.join("nexus-state.json")).unwrap_or_default();
    assert!(state.contains("claude-backup") && !state.contains(BACKUP_KEY) && !state.contains(KEY), "{state}");
    let answers = write_json(&dir, "a.json", &json!({"id": "relay_c_alpha", "ok": true, "data": {"output": "A-ONE"}}));
    let mut resume = nexus(&dir, Some("openai"));
    resume.args(["resume", "--state", "nexus-state.json", "--answer", &answers, "--json", "--record", "c.jsonl"]);
    resume.args(["--fallback", &fallback]).env(BACKUP_VAR, BACKUP_KEY);
    let out = run(resume).expect(0).json();
    assert_eq!(out["text"], "Alpha is A-ONE.");
    assert_eq!(
        out["upstreams"],
        json!([
            {"turn": 1, "style": "anthropic", "baseUrl": backup_url, "model": "claude-backup"},
            {"turn": 2, "style": "anthropic", "baseUrl": backup_url, "model": "claude-backup"}
        ])
    );
    assert_eq!(primary.requests().len(), 1, "the run stays on the upstream that served it");
    assert!(backup.failures().is_empty(), "{:?}", backup.failures());

    let cassette = std::fs::read_to_string(dir.join("c.jsonl")).unwrap_or_default();
    assert!(!cassette.contains(KEY) && !cassette.contains(BACKUP_KEY), "keys are redacted at record time");
    let mut replay = nexus(&dir, None);
    replay.args(["replay", "c.jsonl"]);
    let out = run(&mut replay).expect(0);
    assert!(out.stdout.contains("replay matches the recording"), "{}", out.stdout);
    assert_eq!(backup.requests().len(), 2, "replays send nothing");
}

#[test]
fn a_fallback_spec_is_checked() {
    let dir = scratch("failover-spec");
    let primary = fake(Scripts::new(KEY).model("m", Script::new(vec![Turn::text("hi")])));
    for (bad, says) in [
        ("base-url=http://x", "style= is required"),
        ("style=anthropic", "base-url= is required"),
        ("style=klingon,base-url=http://x", "unknown style"),
        ("style=anthropic,base-url=http://x,colour=red", "unknown key"),
        ("style=anthropic,base-url=http://x,api-key-env=NEXUS_TEST_SURELY_UNSET", "NEXUS_TEST_SURELY_UNSET"),
    ] {
        let out = run(run_cmd(&dir, &primary, "openai", "m", &["--fallback", bad, "hello"])).expect(2);
        assert!(out.stderr.contains(says), "{bad}: {}", out.stderr);
    }
    assert!(primary.requests().is_empty(), "nothing is sent on a usage error");
}

/// A cassette recorded before state format 2 (its stored states are of
/// version one) still replays: the replayed machine writes version 2, which
/// agrees with the recording on everything version one knew.
#[test]
fn a_cassette_recorded_before_announced_turn_still_replays() {
    let dir = scratch("pre-announced-cassette");
    let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/cassettes/demo-anthropic.jsonl");
    let text = std::fs::read_to_string(&demo).unwrap_or_else(|e| panic!("{}: {e}", demo.display()));
    assert!(text.contains(r#","announcedTurn":1}"#), "the demo's stored state records its announced turn");
    // What a build of format 3 wrote before the state recorded it.
    std::fs::write(dir.join("older.jsonl"), text.replace(r#","announcedTurn":1}"#, "}")).unwrap_or_default();
    let mut replay = nexus(&dir, None);
    replay.args(["replay", "older.jsonl"]);
    let out = run(&mut replay).expect(0);
    assert!(out.stdout.contains("replay matches the recording"), "{}", out.stdout);
    // A recorded value that differs still fails it.
    std::fs::write(dir.join("other.jsonl"), text.replace(r#","announcedTurn":1}"#, r#","announcedTurn":2}"#))
        .unwrap_or_default();
    let mut replay = nexus(&dir, None);
    replay.args(["replay", "other.jsonl"]);
    run(&mut replay).expect(1);
}

#[test]
fn a_cassette_with_format_1_states_still_replays() {
    let dir = scratch("format-1-cassette");
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cassettes/demo-openai-state-format-1.jsonl");
    let text = std::fs::read_to_string(&fixture).unwrap_or_else(|e| panic!("{}: {e}", fixture.display()));
    assert!(text.contains(r#""format_version":1,"#), "the fixture holds version-1 states");
    let mut replay = nexus(&dir, None);
    replay.arg("replay").arg(&fixture);
    let out = run(&mut replay).expect(0);
    assert!(out.stdout.contains("replay matches the recording"), "{}", out.stdout);
    // One changed byte in a stored state still fails it.
    let tampered = text.replacen(
        r#""format_version":1,"runId":"run_975835de1c9756ce""#,
        r#""format_version":1,"runId":"run_975835de1c9756cf""#,
        1,
    );
    assert_ne!(tampered, text);
    std::fs::write(dir.join("t.jsonl"), tampered).unwrap_or_default();
    let mut replay = nexus(&dir, None);
    replay.args(["replay", "t.jsonl"]);
    run(&mut replay).expect(1);
}
