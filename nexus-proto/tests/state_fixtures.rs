//! Every released state format version must keep loading: one fixture per
//! version (and shape) lives in tests/fixtures/state/. Set
//! `NEXUS_WRITE_STATE_FIXTURES=1` to (re)write the current version's fixture.

mod sim;
mod tree;

use nexus_proto::{
    Answer, Message, Outcome, Output, Run, ServedTurn, Style, ToolDecl, ToolReply, ToolResult, Upstream, FORMAT_VERSION,
};
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

/// A run whose OpenAI primary answered 503 (no retries) and whose first
/// turn the Anthropic fallback served: suspended on the approval and the relay.
fn failed_over_sim() -> Sim {
    let mut cfg = sim::config(Style::OpenAi, false);
    cfg.retry.retries = 0;
    cfg.fallbacks.push(Upstream {
        style: Style::Anthropic,
        base_url: "http://127.0.0.1:2".into(),
        model: "fallback-model".into(),
    });
    let run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    let mut sim = Sim::from_run(run, script());
    let req = loop {
        match sim.run.poll_output() {
            Output::Send(req) => break req,
            Output::Event(_) => {}
            other => panic!("{other:?}"),
        }
    };
    let body = br#"{"error":{"message":"The server is overloaded.","type":"server_error","param":null,"code":null}}"#;
    sim.feed_response(req.exchange, 503, "application/json", body);
    sim
}

#[test]
fn write_current_fixture_when_asked() {
    if std::env::var("NEXUS_WRITE_STATE_FIXTURES").is_err() {
        return;
    }
    let mut sim = failed_over_sim();
    let Stop::Suspended(_) = sim.drive(&mut tool) else { panic!() };
    std::fs::write(dir().join(format!("v{FORMAT_VERSION}-openai-failed-over-to-anthropic.json")), sim.run.snapshot())
        .unwrap();
}

#[test]
fn the_current_fixture_is_what_this_build_writes() {
    let mut sim = failed_over_sim();
    let Stop::Suspended(_) = sim.drive(&mut tool) else { panic!() };
    let name = format!("v{FORMAT_VERSION}-openai-failed-over-to-anthropic.json");
    let stored = std::fs::read(dir().join(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(String::from_utf8(sim.run.snapshot()).unwrap(), String::from_utf8(stored).unwrap());
    assert_eq!(sim.run.upstream_index(), 1);
    assert_eq!(sim.run.failovers().len(), 1);
    assert_eq!(sim.run.served(), &[ServedTurn { turn: 1, upstream: 1 }]);
}

#[test]
fn a_version_1_state_migrates_to_the_primary_upstream() {
    let bytes = std::fs::read(dir().join("v1-openai-approval-and-relay.json")).unwrap();
    let run = Run::restore(&bytes).unwrap();
    assert_eq!(run.upstream_index(), 0);
    assert!(run.served().is_empty() && run.failovers().is_empty());
    assert_eq!(run.config().upstream_count(), 1);
    let again = String::from_utf8(run.snapshot()).unwrap();
    assert!(again.starts_with(&format!("{{\"format_version\":{FORMAT_VERSION},")), "{again}");
    // The migrated state is a current one: it round-trips byte for byte.
    assert_eq!(Run::restore(again.as_bytes()).unwrap().snapshot(), again.as_bytes());
}

#[test]
fn a_state_naming_an_unknown_upstream_is_inconsistent() {
    let bytes = std::fs::read(dir().join("v1-openai-approval-and-relay.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["format_version"] = json!(2);
    v["upstream"] = json!(1);
    let err = Run::restore(&serde_json::to_vec(&v).unwrap()).unwrap_err();
    assert!(matches!(err, nexus_proto::StateError::Inconsistent(_)), "{err:?}");
}

#[test]
fn every_released_state_version_loads_and_finishes() {
    let (mut seen, mut responses_seen) = (0, 0);
    for entry in std::fs::read_dir(dir()).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let restored = Run::restore(&bytes);
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !cfg!(feature = "json-schema") && name.contains("typed-output") {
            // Without the validator a run asking for typed output is refused.
            assert!(matches!(restored, Err(nexus_proto::StateError::Inconsistent(_))), "{name}: {restored:?}");
            continue;
        }
        let run = restored.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if name.starts_with(&format!("v{FORMAT_VERSION}-")) {
            assert_eq!(run.snapshot(), bytes, "{name}: current-version state re-serializes byte-identically");
        }
        if name.contains("typed-output") || name.contains("agent-tree") {
            // A shape of its own, checked by its own test below.
            continue;
        }
        if name.contains("-context") {
            // A context-budget run of its own shape: tests/context_budget.rs drives it.
            continue;
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
fn a_version_3_state_written_before_announced_turn_loads_and_announces_its_next_turn_once() {
    let name = format!("v{FORMAT_VERSION}-openai-failed-over-to-anthropic.json");
    let bytes = String::from_utf8(std::fs::read(dir().join(&name)).unwrap()).unwrap();
    let older = bytes.replace(r#","announcedTurn":1"#, "");
    assert_ne!(older, bytes, "{name}: turn 1 was announced");
    let run = Run::restore(older.as_bytes()).unwrap();
    assert_eq!(
        String::from_utf8(run.snapshot()).unwrap(),
        older,
        "a run that announced nothing writes no announcedTurn"
    );
    let reqs = run.outstanding();
    let mut sim = Sim::from_run(run, script());
    for r in reqs {
        let mut data = Map::new();
        data.insert("output".into(), json!("relayed"));
        sim.answer(Answer::ok(r.id, Some(data))).unwrap();
    }
    assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
    let started: Vec<u32> = sim
        .events
        .iter()
        .filter_map(|e| match e {
            nexus_proto::StreamEvent::TurnStarted { turn } => Some(*turn),
            _ => None,
        })
        .collect();
    assert_eq!(started, [2]);
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

/// A tool-mode typed-output run whose output tool was called beside an
/// approval that is still pending: the value is settled, not committed.
#[cfg(feature = "json-schema")]
fn typed_output_sim() -> Sim {
    let mut cfg = sim::config(Style::OpenAi, false);
    cfg.output = Some(
        nexus_proto::OutputSpec::new(json!({"type": "object", "properties": {"verdict": {"type": "string"}},
            "required": ["verdict"]}))
        .with_mode(nexus_proto::OutputMode::Tool),
    );
    let run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    let script = vec![Turn::calls(&[("call_a", "approve", "{}"), ("call_o", "final_result", r#"{"verdict":"ok"}"#)])];
    let mut sim = Sim::from_run(run, script);
    let Stop::Suspended(_) = sim.drive(&mut tool) else { panic!() };
    sim
}

#[cfg(feature = "json-schema")]
#[test]
fn the_typed_output_fixture_loads_and_commits_once_the_sibling_is_answered() {
    let name = format!("v{FORMAT_VERSION}-openai-typed-output-tool-pending.json");
    if std::env::var("NEXUS_WRITE_STATE_FIXTURES").is_ok() {
        std::fs::write(dir().join(&name), typed_output_sim().run.snapshot()).unwrap();
    }
    let stored = std::fs::read(dir().join("v3-openai-typed-output-tool-pending.json")).unwrap();
    if FORMAT_VERSION == 3 {
        assert_eq!(
            String::from_utf8(typed_output_sim().run.snapshot()).unwrap(),
            String::from_utf8(stored.clone()).unwrap()
        );
    }
    let run = Run::restore(&stored).unwrap();
    assert_eq!(run.output(), None);
    assert_eq!(run.output_strategies()[0].strategy, nexus_proto::Strategy::Tool);
    let reqs = run.outstanding();
    let mut sim = Sim::from_run(run, vec![]);
    sim.answer(Answer::ok(reqs[0].id.clone(), None)).unwrap();
    assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
    assert_eq!(sim.run.output(), Some(&json!({"verdict": "ok"})));
    assert!(sim.sent.is_empty(), "the output was settled before the snapshot: no model call");
}

#[test]
fn a_version_2_state_reads_as_a_run_without_typed_output() {
    let bytes = std::fs::read(dir().join("v2-openai-failed-over-to-anthropic.json")).unwrap();
    let run = Run::restore(&bytes).unwrap();
    assert!(run.config().output.is_none());
    assert!(run.output_strategies().is_empty() && run.output().is_none());
}

const TREE_FIXTURE: &str = "v3-agent-tree-suspended-in-a-grandchild.json";

/// OpenAI → Anthropic → Gemini: the grandchild waits for an approval while
/// a sibling agent of the child has already finished.
fn suspended_tree() -> tree::Tree {
    use tree::{agent, call, config, delegate, script, tools, Tree};
    let researcher = agent("researcher", Style::Anthropic);
    let researcher =
        nexus_proto::AgentSpec { config: researcher.config.with_agent(agent("deep", Style::Gemini)), ..researcher };
    let cfg = config(Style::OpenAi, "").with_agent(researcher).with_agent(agent("quick", Style::OpenAiResponses));
    let run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    let mut t = Tree::new(
        run,
        vec![
            (
                "",
                Style::OpenAi,
                script(
                    vec![vec![delegate("call_p1", "researcher", "go deep"), delegate("call_p2", "quick", "now")]],
                    "top done",
                ),
            ),
            (
                "researcher",
                Style::Anthropic,
                script(vec![vec![delegate("toolu_r1", "deep", "ask")]], "researcher done"),
            ),
            ("deep", Style::Gemini, script(vec![vec![call("ignored", "approve")]], "deep done")),
            ("quick", Style::OpenAiResponses, script(vec![vec![call("call_q", "echo")]], "quick done")),
        ],
    );
    let Stop::Suspended(reqs) = t.drive() else { panic!("the tree should suspend") };
    assert_eq!(reqs.len(), 1);
    t
}

#[test]
fn write_the_agent_tree_fixture_when_asked() {
    if std::env::var("NEXUS_WRITE_STATE_FIXTURES").is_err() {
        return;
    }
    std::fs::write(dir().join(TREE_FIXTURE), suspended_tree().run.snapshot()).unwrap();
}

#[test]
fn the_agent_tree_fixture_is_what_this_build_writes_and_finishes_after_an_answer_by_path() {
    let stored = std::fs::read(dir().join(TREE_FIXTURE)).unwrap_or_else(|e| panic!("{TREE_FIXTURE}: {e}"));
    assert_eq!(String::from_utf8(suspended_tree().run.snapshot()).unwrap(), String::from_utf8(stored.clone()).unwrap());
    let run = Run::restore(&stored).unwrap();
    assert_eq!(run.snapshot(), stored, "byte-identical round trip");
    let reqs = run.outstanding();
    assert_eq!(reqs.len(), 1);
    assert_eq!(run.request_owner(&reqs[0].id).as_deref(), Some("call_p1/toolu_r1"));
    let mut t = suspended_tree();
    t.run = run;
    t.executed.clear();
    t.answer(&reqs[0].id).unwrap();
    assert_eq!(t.drive(), Stop::Done(Outcome::Done));
    assert_eq!(t.run.final_text(), "top done");
    // Only the answered approval ran; the finished sibling's tool did not run again.
    assert_eq!(t.executed.len(), 1, "{:?}", t.executed);
    assert!(t.executed[0].1);
    let outputs: Vec<String> = t.run.tool_calls().into_iter().map(|c| c.output).collect();
    assert_eq!(outputs, vec!["researcher done".to_string(), "quick done".to_string()]);
}
