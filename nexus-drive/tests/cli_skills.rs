//! `nexus tools --skills` and `nexus run/resume --skills`: the built binary
//! on the public fixture skills and the example's skills, and against the
//! fake provider across two processes.

mod cli_support;

use std::path::{Path, PathBuf};

use cli_support::*;
use nexus_tests::fake::{Script, Scripts, Turn};
use serde_json::{json, Value};

fn public_skills() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skills/anthropic")
}

fn example_skills() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/skills")
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn tools_lists_the_skills_and_the_skill_tool() {
    let dir = scratch("skills-tools");
    let (public, examples) = (s(&public_skills()), s(&example_skills()));
    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--skills", &public, "--skills", &examples, "--builtins=read", "--style", "anthropic"]);
    let out = run(&mut cmd).expect(0);
    let v = out.json();
    let names: Vec<&str> = v["skills"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["changelog-writer", "internal-comms", "mcp-builder", "slack-gif-creator", "sql-review", "webapp-testing"]
    );
    assert_eq!(v["skipped"], json!([]));
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let mcp = &v["skills"][2];
    assert_eq!(mcp["license"], "Complete terms in LICENSE.txt");
    assert!(mcp["files"].as_array().unwrap().contains(&json!("scripts/connections.py")), "{mcp}");
    assert!(mcp["path"].as_str().unwrap().ends_with("mcp-builder/SKILL.md"));
    let changelog = &v["skills"][0];
    assert_eq!(changelog["metadata"], json!({"author": "nexus", "version": "1.0"}));
    assert!(changelog["compatibility"].as_str().unwrap().starts_with("Needs the read tool"));

    // The declarations: `read`, then `skill`, its name an enum of the skills.
    let tools = v["tools"].as_array().unwrap();
    assert_eq!(tools.iter().map(|t| t["name"].as_str().unwrap()).collect::<Vec<_>>(), ["read", "skill"]);
    assert_eq!(tools[1]["input_schema"]["properties"]["name"]["enum"], json!(names));
    assert_eq!(tools[1]["input_schema"]["required"], json!(["name"]));

    let catalog = v["catalog"]["text"].as_str().unwrap();
    assert_eq!(catalog.matches("<skill>").count(), 6);
    assert_eq!(v["catalog"]["namesOnly"], json!([]));

    // A small budget: the later skills by name only, and the host is told.
    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--skills", &examples, "--skills-budget", "660"]);
    let out = run(&mut cmd).expect(0);
    let v = out.json();
    assert_eq!(v["catalog"]["namesOnly"], json!(["sql-review"]), "{}", v["catalog"]["text"]);
    assert!(v["catalog"]["text"].as_str().unwrap().len() <= 660);
    assert!(out.stderr.contains("1 listed by name only (sql-review)"), "{}", out.stderr);
    // Without a style: the three shapes under `tools`.
    assert!(v["tools"]["openai"].is_array() && v["tools"]["gemini"].is_array(), "{v}");
}

#[test]
fn broken_skills_are_warned_about_and_the_rest_listed() {
    let dir = scratch("skills-broken");
    let skills = dir.join("skills");
    for (folder, text) in [
        ("fine", "---\nname: fine\ndescription: Works.\n---\nBody.\n"),
        ("Nope", "---\nname: Nope\ndescription: d\n---\n"),
        ("bare", "no front matter\n"),
    ] {
        std::fs::create_dir_all(skills.join(folder)).unwrap();
        std::fs::write(skills.join(folder).join("SKILL.md"), text).unwrap();
    }
    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--skills", &s(&skills), "--style", "openai"]);
    let out = run(&mut cmd).expect(0);
    let v = out.json();
    assert_eq!(v["skills"].as_array().unwrap().len(), 1);
    assert_eq!(v["skills"][0]["name"], "fine");
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{v}");
    assert_eq!(skipped[0]["field"], "name");
    assert!(skipped[0]["path"].as_str().unwrap().ends_with("Nope/SKILL.md"));
    assert_eq!(skipped[1]["field"], Value::Null);
    assert!(out.stderr.contains("nexus: skipped skill: ") && out.stderr.contains("field `name`"), "{}", out.stderr);

    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--skills", "no-such-dir"]);
    let out = run(&mut cmd).expect(2);
    assert!(out.stderr.contains("--skills no-such-dir: not a directory"), "{}", out.stderr);
}

/// `nexus run --skills` activates a skill and suspends on a relay call;
/// `nexus resume --skills` (another process) reads the skill's reference.
#[test]
fn run_and_resume_with_skills_across_processes() {
    for style in STYLES {
        let dir = scratch("skills-run");
        let examples = s(&example_skills());
        let checklist = std::fs::canonicalize(example_skills().join("sql-review/references/checklist.md")).unwrap();
        let mut relay_turn = Turn::default().call_with_id("c_ask", "ask", r#"{"q":"which database?"}"#);
        if style == "gemini" {
            relay_turn = relay_turn.with_ids();
        }
        let fake = fake(Scripts::new(KEY).model(
            "skills-model",
            Script::new(vec![
                Turn::default().call("skill", r#"{"name":"sql-review"}"#),
                relay_turn,
                Turn::default().call("read", json!({"path": checklist}).to_string()),
                Turn::text("Bind the id as a parameter."),
            ]),
        ));
        let relay = write_json(&dir, "relay.json", &json!([{"name": "ask", "description": "asks the user"}]));
        let args = ["--skills", &examples, "--builtins=read", "--relay", &relay, "--state", "st.json", "--json"];
        let mut cmd = run_cmd(&dir, &fake, style, "skills-model", &args);
        cmd.arg("review my query");
        let first = run(cmd).expect(3).json();
        assert_eq!(first["status"], "pending", "{style}");

        let answers = write_json(
            &dir,
            "answers.json",
            &json!({"id": "relay_c_ask", "ok": true, "data": {"results": [{"id": "c_ask", "output": "postgres"}]}}),
        );
        // The run uses skills: resuming without them is refused, nothing changes.
        let mut bare = nexus(&dir, Some(style));
        bare.args(["resume", "--state", "st.json", "--answer", &answers]);
        let out = run(bare).expect(2);
        assert!(out.stderr.contains("give its --skills DIR again"), "{style}: {}", out.stderr);
        assert!(dir.join("st.json").exists());

        let mut resume = nexus(&dir, Some(style));
        resume.args(["resume", "--state", "st.json", "--answer", &answers, "--skills", &examples, "--json"]);
        let done = run(resume).expect(0).json();
        assert_eq!(done["status"], "done", "{style}: {done}");
        assert_eq!(done["text"], "Bind the id as a parameter.");
        let read = &done["toolCalls"][2];
        assert_eq!(read["name"], "read");
        assert_eq!(read["isError"], false, "{style}: {read}");
        assert!(read["output"].as_str().unwrap().contains("Every join has a condition"), "{style}: {read}");
        for (turn, req) in fake.requests_for("skills-model").iter().enumerate() {
            let body = String::from_utf8_lossy(&req.body);
            assert_eq!(body.matches("<available_skills>").count(), 1, "{style} turn {turn}");
            assert_eq!(body.contains("item by item and report only the items"), turn >= 1, "{style} turn {turn}");
        }
        assert!(fake.failures().is_empty(), "{style}: {:?}", fake.failures());
    }
}

/// Without --json, the activation is noted on stderr; stdout is the answer.
#[test]
fn a_plain_run_notes_the_activation_on_stderr() {
    let dir = scratch("skills-plain");
    let fake = fake(Scripts::new(KEY).model(
        "plain-model",
        Script::new(vec![Turn::default().call("skill", r#"{"name":"sql-review"}"#), Turn::text("Reviewed.")]),
    ));
    let examples = s(&example_skills());
    let out = run(run_cmd(&dir, &fake, "openai", "plain-model", &["--skills", &examples, "review this"])).expect(0);
    assert_eq!(out.stdout.trim(), "Reviewed.");
    assert!(out.stderr.contains("nexus: skill sql-review loaded"), "{}", out.stderr);
    // No `read` built-in in this run: the skill's result says its files cannot be opened.
    let second = fake.requests_for("plain-model").pop().unwrap();
    assert!(String::from_utf8_lossy(&second.body).contains("There is no `read` tool in this run"));

    // With --stream --json the activation is one of the event lines, after the skill's result.
    fake.clear_requests();
    let args = ["--skills", &examples, "--stream", "--json", "review this"];
    let out = run(run_cmd(&dir, &fake, "openai", "plain-model", &args)).expect(0);
    let events: Vec<Value> = out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let at = |kind: &str| events.iter().position(|e| e["type"] == kind).unwrap_or_else(|| panic!("{kind}: {events:?}"));
    let activated = &events[at("skill_activated")];
    assert_eq!(activated["name"], "sql-review");
    assert!(at("tool_result") < at("skill_activated"));
    assert_eq!(events[at("tool_result")]["call_id"], activated["call_id"]);
}
