//! Every released state format version must keep loading: one fixture per
//! version (and shape) lives in tests/fixtures/state/. Set
//! `NEXUS_WRITE_STATE_FIXTURES=1` to (re)write the current version's fixture.

mod sim;

use nexus_proto::{Answer, Outcome, Run, Style, ToolDecl, ToolReply, ToolResult, FORMAT_VERSION};
use serde_json::{json, Map};
use sim::{Sim, Stop, Turn};

fn tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::new("approve", "suspends", json!({"type":"object"})),
        ToolDecl::relay("lookup", "relayed", json!({"type":"object"})),
    ]
}

fn script() -> Vec<Turn> {
    vec![
        Turn::calls(&[
            ("call_a", "approve", r#"{"x":1}"#),
            ("call_b", "lookup", r#"{"q": "b"}"#),
            ("call_c", "lookup", "{}"),
        ]),
        Turn::text("finished"),
    ]
}

fn tool(inv: &nexus_proto::ToolInvocation) -> ToolReply {
    match &inv.answer {
        None => ToolReply::Pending(nexus_proto::Request::new("approval", "approve?")),
        Some(_) => ToolReply::Done(ToolResult::ok("approved")),
    }
}

fn dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state")
}

#[test]
fn write_current_fixture_when_asked() {
    if std::env::var("NEXUS_WRITE_STATE_FIXTURES").is_err() {
        return;
    }
    // OpenAI Responses: the transcript holds a reasoning item (encrypted
    // content, id) and item ids that must survive into the follow-up request.
    for style in [Style::OpenAi, Style::OpenAiResponses] {
        let mut sim = Sim::new(style, false, tools(), script());
        let Stop::Suspended(_) = sim.drive(&mut tool) else { panic!() };
        let name = format!("v{FORMAT_VERSION}-{}-approval-and-relay.json", style.name());
        std::fs::write(dir().join(name), sim.run.snapshot()).unwrap();
    }
}

#[test]
fn every_released_state_version_loads_and_finishes() {
    let (mut seen, mut responses_seen) = (0, 0);
    for entry in std::fs::read_dir(dir()).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let run = Run::restore(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name.starts_with(&format!("v{FORMAT_VERSION}-")) {
            assert_eq!(run.snapshot(), bytes, "{name}: current-version state re-serializes byte-identically");
        }
        let reqs = run.outstanding();
        assert_eq!(reqs.len(), 2, "{name}: the approval and the relay request");
        let mut sim = Sim::from_run(run, script());
        for r in reqs {
            let mut data = Map::new();
            data.insert("output".into(), json!("relayed"));
            sim.answer(Answer::ok(r.id, Some(data))).unwrap();
        }
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done), "{name}");
        assert_eq!(sim.run.final_text(), "finished");
        if sim.style == Style::OpenAiResponses {
            // The restored run replays the first turn's reasoning item verbatim.
            let input = sim.sent.last().expect("a follow-up request")["input"].as_array().unwrap().clone();
            let reasoning: Vec<_> = input.iter().filter(|i| i["type"] == "reasoning").collect();
            assert_eq!(reasoning.len(), 1, "{name}");
            assert_eq!(reasoning[0]["encrypted_content"], sim::encrypted(0), "{name}");
            assert_eq!(reasoning[0]["summary"][0]["text"], "thinking 0", "{name}");
            responses_seen += 1;
        }
        seen += 1;
    }
    assert!(seen >= 2, "no state fixtures found");
    assert!(responses_seen >= 1, "no OpenAI Responses state fixture found");
}

#[test]
fn unknown_versions_and_garbage_are_typed_errors() {
    assert!(matches!(
        Run::restore(b"{\"format_version\":999}"),
        Err(nexus_proto::StateError::UnsupportedVersion { found: 999, .. })
    ));
    assert!(matches!(Run::restore(b"not json"), Err(nexus_proto::StateError::Corrupt(_))));
    assert!(matches!(Run::restore(b"{}"), Err(nexus_proto::StateError::Corrupt(_))));
    assert!(matches!(Run::restore(b"{\"format_version\":1}"), Err(nexus_proto::StateError::Corrupt(_))));
}
