//! Agent Skills end to end, on both drivers and the three wire formats: the
//! scripted model sees the catalog, activates one skill, reads one of its
//! references and answers. The request bodies the fake received show what
//! the model was given at each turn: the catalog once, in the system prompt;
//! a skill's instructions only after its activation; nothing of the skill it
//! never activated. A run suspended after an activation and resumed by a
//! fresh client still reads the skill's files.

#[macro_use]
mod drive_support;

use std::path::{Path, PathBuf};

use drive_support::*;
use nexus_drive::builtins::Builtins;
use nexus_drive::skills::{activations, Skills};
use nexus_drive::{Answer, DynTool, Request, RunStatus, StreamEvent, ToolOutcome};
use nexus_tests::fake::{FakeProvider, RecordedRequest, Scripts, Turn};
use serde_json::json;

both_drivers!(
    a_skill_is_seen_in_the_catalog_activated_and_its_reference_read,
    a_resumed_run_reads_the_skill_it_activated
);

/// The example's two skills: `changelog-writer` and `sql-review`.
fn skills_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../nexus-drive/examples/skills")
}

fn skills() -> Skills {
    let found = Skills::discover([skills_dir()]);
    assert!(found.errors.is_empty(), "{:?}", found.errors);
    found.skills
}

fn workspace(name: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nexus-drive-skills-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

// What each piece of text proves when found in a request body.
const CATALOG: &str = "<available_skills>";
const SQL_DESCRIPTION: &str = "Reviews SQL queries for correctness, performance and injection risks.";
const CHANGELOG_DESCRIPTION: &str = "Drafts CHANGELOG entries in the Keep a Changelog format";
const SQL_BODY: &str = "item by item and report only the items";
const SQL_REFERENCE: &str = "Every join has a condition; no accidental cross join.";
const CHANGELOG_BODY: &str = "Sort each change into exactly one section";
const CHANGELOG_REFERENCE: &str = "Sections, in this order";

fn body(r: &RecordedRequest) -> String {
    String::from_utf8_lossy(&r.body).into_owned()
}

fn a_skill_is_seen_in_the_catalog_activated_and_its_reference_read(d: Drv) {
    let skills = skills();
    let sql_dir = skills.get("sql-review").unwrap().dir().to_path_buf();
    let checklist = sql_dir.join("references/checklist.md").display().to_string();
    let other = skills.get("changelog-writer").unwrap().dir().join("references/format.md").display().to_string();
    let root = workspace(&format!("{d:?}"));
    for style in STYLES {
        for stream in [false, true] {
            let ctx = format!("{d:?} {style:?} stream={stream}");
            let fake = FakeProvider::start(Scripts::new(KEY).model(
                "m-skills",
                script(vec![
                    // Reading before the activation is refused.
                    Turn::default().call("read", json!({"path": checklist}).to_string()),
                    Turn::default().call("skill", r#"{"name":"sql-review"}"#),
                    Turn::default()
                        .call("read", json!({"path": checklist}).to_string())
                        .call("read", json!({"path": other}).to_string()),
                    Turn::text("Use a bound parameter for the user id."),
                ]),
            ));
            let b = builder(&fake, style, "m-skills", stream)
                .system("You review code.")
                .skills(skills.clone())
                .dyn_tool(Builtins::new(&root).only(["read"]).unwrap().tools().remove(0));
            let client = d.client(b.build().unwrap());
            let (events, end) = client.stream("Why is SELECT * FROM users WHERE id = '$id' bad?");
            let r = end.unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(r.status, RunStatus::Done, "{ctx}");
            assert_eq!(r.text, "Use a bound parameter for the user id.", "{ctx}");

            let calls = &r.tool_calls;
            assert_eq!(calls.len(), 4, "{ctx}");
            assert!(calls[0].is_error && calls[0].output.contains("outside the workspace root"), "{ctx}: {calls:?}");
            assert!(!calls[1].is_error && calls[1].output.contains(SQL_BODY), "{ctx}");
            assert!(calls[1].output.contains("<file>references/checklist.md</file>"), "{ctx}");
            assert!(!calls[2].is_error && calls[2].output.contains(SQL_REFERENCE), "{ctx}: {:?}", calls[2]);
            // Activating one skill grants its folder only.
            assert!(calls[3].is_error && calls[3].output.contains("outside the workspace root"), "{ctx}");

            // The activation is shown once, right after the call's result.
            let activated: Vec<usize> = events
                .iter()
                .enumerate()
                .filter(|(_, e)| matches!(e, StreamEvent::SkillActivated { .. }))
                .map(|(i, _)| i)
                .collect();
            assert_eq!(activated.len(), 1, "{ctx}: {events:?}");
            let StreamEvent::SkillActivated { call_id, name } = &events[activated[0]] else { unreachable!() };
            assert_eq!(name, "sql-review", "{ctx}");
            assert!(
                matches!(&events[activated[0] - 1], StreamEvent::ToolResult { call_id: c, name, .. } if c == call_id && name == "skill"),
                "{ctx}: {:?}",
                &events[activated[0] - 1]
            );

            let requests = fake.requests_for("m-skills");
            assert_eq!(requests.len(), 4, "{ctx}");
            for (turn, req) in requests.iter().enumerate() {
                let text = body(req);
                let system = match style {
                    nexus_tests::fake::Style::Anthropic => req.json.as_ref().unwrap()["system"].to_string(),
                    nexus_tests::fake::Style::Gemini => req.json.as_ref().unwrap()["systemInstruction"].to_string(),
                    nexus_tests::fake::Style::OpenAi => req.json.as_ref().unwrap()["messages"][0].to_string(),
                    nexus_tests::fake::Style::OpenAiResponses => req.json.as_ref().unwrap()["instructions"].to_string(),
                };
                assert_eq!(text.matches(CATALOG).count(), 1, "{ctx} turn {turn}: the catalog once");
                assert!(system.contains(CATALOG), "{ctx} turn {turn}: the catalog is in the system prompt");
                assert!(system.contains("You review code."), "{ctx} turn {turn}");
                assert_eq!(text.matches(SQL_DESCRIPTION).count(), 1, "{ctx} turn {turn}");
                assert_eq!(text.matches(CHANGELOG_DESCRIPTION).count(), 1, "{ctx} turn {turn}");
                // The instructions only after the activation (turn index 1 sent it).
                assert_eq!(text.contains(SQL_BODY), turn >= 2, "{ctx} turn {turn}");
                assert_eq!(text.contains(SQL_REFERENCE), turn >= 3, "{ctx} turn {turn}");
                // Nothing of the skill never activated, beyond its catalog line.
                assert!(!text.contains(CHANGELOG_BODY) && !text.contains(CHANGELOG_REFERENCE), "{ctx} turn {turn}");
            }
            assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}

fn a_resumed_run_reads_the_skill_it_activated(d: Drv) {
    let skills = skills();
    let checklist = skills.get("sql-review").unwrap().dir().join("references/checklist.md").display().to_string();
    let root = workspace(&format!("resume-{d:?}"));
    let approve = || {
        DynTool::new("approve", "asks a human", json!({"type": "object"}), |_, ctx| match ctx.answer() {
            None => Ok(ToolOutcome::Pending(Request::new("approval", "go on?"))),
            Some(_) => Ok(ToolOutcome::Done(json!("approved"))),
        })
    };
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(Scripts::new(KEY).model(
            "m-skills-resume",
            script(vec![
                Turn::default().call("skill", r#"{"name":"sql-review"}"#),
                Turn::default().call("approve", "{}"),
                Turn::default().call("read", json!({"path": checklist}).to_string()),
                Turn::text("done"),
            ]),
        ));
        let client = |fake: &FakeProvider| {
            let b = builder(fake, style, "m-skills-resume", false)
                .skills(skills.clone())
                .dyn_tool(Builtins::new(&root).only(["read"]).unwrap().tools().remove(0))
                .dyn_tool(approve());
            d.client(b.build().unwrap())
        };
        let first = client(&fake).run("review my query").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(first.status, RunStatus::Pending, "{ctx}");
        let suspended = first.suspended.unwrap();
        let state: serde_json::Value = serde_json::from_slice(&suspended.state).unwrap();
        let transcript: Vec<nexus_drive::Message> = serde_json::from_value(state["transcript"].clone()).unwrap();
        let loaded: Vec<String> = activations(&transcript).into_iter().map(|a| a.name).collect();
        // The activation's turn completed before the suspension: the state's
        // transcript records it.
        assert_eq!(loaded, ["sql-review"], "{ctx}");

        let (fresh_builder, events) = Events::record(
            builder(&fake, style, "m-skills-resume", false)
                .skills(skills.clone())
                .dyn_tool(Builtins::new(&root).only(["read"]).unwrap().tools().remove(0))
                .dyn_tool(approve()),
        );
        let fresh = d.client(fresh_builder.build().unwrap());
        let answer = Answer::ok(suspended.pending[0].id.clone(), None);
        let done = fresh.resume(&suspended.state, vec![answer]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.status, RunStatus::Done, "{ctx}");
        let loaded: Vec<String> = activations(&done.messages).into_iter().map(|a| a.name).collect();
        assert_eq!(loaded, ["sql-review"], "{ctx}");
        let read = done.tool_calls.iter().find(|c| c.name == "read").unwrap();
        assert!(!read.is_error && read.output.contains(SQL_REFERENCE), "{ctx}: {read:?}");
        // No second activation event: the resumed run did not activate anything.
        assert!(!events.recorded().iter().any(|e| matches!(e, StreamEvent::SkillActivated { .. })), "{ctx}");
        for (turn, req) in fake.requests_for("m-skills-resume").iter().enumerate() {
            assert_eq!(body(req).matches(CATALOG).count(), 1, "{ctx} turn {turn}: the catalog once after resume");
        }
    }
    let _ = std::fs::remove_dir_all(&root);
}
