//! Both drivers: sub-agents (SPEC §17) against the fake provider, each
//! agent on its own model and wire format, its tools served from its own
//! toolbox; a suspension inside a child pending at the top, resumed by a
//! fresh client from the state alone; two children of one turn with
//! `wait_for`.

#[macro_use]
mod drive_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use drive_support::*;
use nexus_drive::{
    AgentTool, Answer, ApprovalPolicy, DynTool, OutputMode, OutputSpec, Request, RunStatus, StreamEvent, ToolOutcome,
};
use nexus_tests::fake::{FakeProvider, Scripts, Style, Turn};
use serde_json::{json, Value};

both_drivers!(
    a_child_suspension_is_pending_at_the_top_and_a_fresh_client_resumes_it,
    two_children_in_one_turn_answered_in_process_both_finish,
    a_grandchild_is_served_from_its_own_tools,
    a_child_with_a_typed_output_answers_with_its_value,
    a_child_with_a_typed_output_in_tool_mode_answers_with_its_value,
    a_childs_own_tool_asks_for_approval_before_it_runs,
);

/// `approve`: asks first; counts the executions that completed.
fn approve(done: Arc<AtomicUsize>) -> DynTool {
    DynTool::new("approve", "asks first", json!({"type": "object"}), move |_, ctx| {
        if ctx.answer().is_some_and(|a| a.ok) {
            done.fetch_add(1, Ordering::SeqCst);
            return Ok(ToolOutcome::Done(Value::String("approved".into())));
        }
        Ok(ToolOutcome::Pending(Request::new("approval", format!("may {} go ahead?", ctx.call_id()))))
    })
}

fn researcher(fake: &FakeProvider, done: Arc<AtomicUsize>) -> AgentTool {
    AgentTool::new("researcher", "does what it is asked, carefully", proto_style(Style::Anthropic), "m-child")
        .base_url(fake.base_url(Style::Anthropic))
        .api_key(KEY)
        .system("You help.")
        .dyn_tool(approve(done))
}

fn a_child_suspension_is_pending_at_the_top_and_a_fresh_client_resumes_it(d: Drv) {
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model(
                "m-parent",
                script(vec![
                    Turn::default().call("researcher", r#"{"prompt": "get it approved"}"#),
                    Turn::text("parent done"),
                ]),
            )
            .model("m-child", script(vec![Turn::default().call("approve", "{}"), Turn::text("child says approved")])),
    );
    let done = Arc::new(AtomicUsize::new(0));
    let cfg =
        || builder(&fake, Style::OpenAi, "m-parent", false).agent(researcher(&fake, done.clone())).build().unwrap();

    let r = d.client(cfg()).run("delegate it").unwrap();
    assert_eq!(r.status, RunStatus::Pending);
    assert_eq!(r.pending.len(), 1, "{:?}", r.pending);
    let id = r.pending[0].id.clone();
    let (call, rest) = id.split_once('/').expect("a qualified id");
    assert!(rest.starts_with("pnd_"), "{id}");
    assert_eq!(r.agents.len(), 1);
    assert_eq!((r.agents[0].path.as_str(), r.agents[0].name.as_str()), (call, "researcher"));
    assert_eq!(r.agents[0].status, "pending");
    assert_eq!(done.load(Ordering::SeqCst), 0);
    let state = r.suspended.expect("a pending result carries its state").state;
    assert!(!String::from_utf8_lossy(&state).contains(KEY), "a key in the state");

    // A fresh client: the state alone carries the tree.
    let r = d.client(cfg()).resume(&state, vec![Answer::ok(&id, None)]).unwrap();
    assert_eq!(r.status, RunStatus::Done, "{r:?}");
    assert_eq!(r.text, "parent done");
    assert_eq!(outputs(&r), vec!["child says approved".to_string()]);
    assert_eq!(done.load(Ordering::SeqCst), 1, "the child's tool completed exactly once");
    assert_eq!((r.agents[0].turns, r.agents[0].status.as_str()), (2, "done"));
    assert!(r.agents[0].usage.total_tokens > 0);
    // Each agent spoke its own wire format to its own model.
    assert_eq!(fake.requests_for("m-child").len(), 2);
    assert!(fake.requests_for("m-child").iter().all(|q| q.path().ends_with("/v1/messages")));
    assert!(fake.requests_for("m-parent").iter().all(|q| q.path().ends_with("/chat/completions")));
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

fn two_children_in_one_turn_answered_in_process_both_finish(d: Drv) {
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model(
                "m-parent",
                script(vec![
                    Turn::default()
                        .call("researcher", r#"{"prompt": "ask"}"#)
                        .call("quick", r#"{"prompt": "meet at the gate"}"#),
                    Turn::text("both back"),
                ]),
            )
            .model("m-child", script(vec![Turn::default().call("approve", "{}"), Turn::text("researcher done")]))
            .model("m-quick", script(vec![Turn::default().call("meet", "{}"), Turn::text("quick done")])),
    );
    let done = Arc::new(AtomicUsize::new(0));
    let meet = ok_tool("meet", |_, _| "met".into());
    let approve_gated = approve(done.clone());
    let researcher = AgentTool::new("researcher", "asks", proto_style(Style::Anthropic), "m-child")
        .base_url(fake.base_url(Style::Anthropic))
        .dyn_tool(approve_gated);
    let quick = AgentTool::new("quick", "meets", proto_style(Style::Gemini), "m-quick")
        .base_url(fake.base_url(Style::Gemini))
        .api_key(KEY)
        .dyn_tool(meet);
    let owners = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = owners.clone();
    let (b, events) =
        Events::record(builder(&fake, Style::Anthropic, "m-parent", false).agent(researcher).agent(quick).wait_for(
            move |r: Request| {
                seen.lock().unwrap().push(r.id.clone());
                Answer::ok(r.id, None)
            },
        ));
    let r = d.client(b.build().unwrap()).run("split it").unwrap();
    assert_eq!(r.status, RunStatus::Done, "{r:?}");
    assert_eq!(outputs(&r), vec!["researcher done".to_string(), "quick done".to_string()], "results in call order");
    assert_eq!(done.load(Ordering::SeqCst), 1);
    let owners = owners.lock().unwrap().clone();
    assert_eq!(owners.len(), 1, "{owners:?}");
    assert!(owners[0].split('/').nth(1).is_some_and(|s| s.starts_with("pnd_")), "{owners:?}");
    let mut agents: Vec<(String, u32)> = r.agents.iter().map(|a| (a.name.clone(), a.turns)).collect();
    agents.sort();
    assert_eq!(agents, vec![("quick".to_string(), 2), ("researcher".to_string(), 2)]);
    // Events name their agent; the top run's are unwrapped.
    let events = events.recorded();
    assert!(events.iter().any(|e| !e.agent_path().is_empty()
        && matches!(e.inner(), StreamEvent::TextDelta { text } if text.contains("quick"))));
    assert!(shown_text(&events).contains("both back"));
    let met = events.iter().any(|e| {
        matches!(e.inner(), StreamEvent::ToolResult { name, result, .. } if name == "meet" && result.output == "met")
    });
    assert!(met, "the quick child's own tool ran");
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

fn a_grandchild_is_served_from_its_own_tools(d: Drv) {
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model(
                "m-top",
                script(vec![Turn::default().call("middle", r#"{"prompt": "go down"}"#), Turn::text("top done")]),
            )
            .model(
                "m-mid",
                script(vec![Turn::default().call("deep", r#"{"prompt": "measure"}"#), Turn::text("mid done")]),
            )
            .model("m-deep", script(vec![Turn::default().call("measure", "{}"), Turn::text("deep says 42")])),
    );
    // Only the grandchild has `measure`: a call served from another toolbox would be "Unknown tool".
    let deep = AgentTool::new("deep", "measures", proto_style(Style::OpenAiResponses), "m-deep")
        .base_url(fake.base_url(Style::OpenAiResponses))
        .api_key(KEY)
        .dyn_tool(ok_tool("measure", |_, ctx| format!("42 (for {})", ctx.call_id())));
    let middle = AgentTool::new("middle", "delegates", proto_style(Style::Gemini), "m-mid")
        .base_url(fake.base_url(Style::Gemini))
        .api_key(KEY)
        .agent(deep);
    let r = d.client(builder(&fake, Style::OpenAi, "m-top", false).agent(middle).build().unwrap()).run("go").unwrap();
    assert_eq!(r.status, RunStatus::Done, "{r:?}");
    assert_eq!(outputs(&r), vec!["mid done".to_string()]);
    let deep = r.agents.iter().find(|a| a.name == "deep").expect("the grandchild is reported");
    assert_eq!(deep.path.matches('/').count(), 1, "{}", deep.path);
    assert_eq!((deep.turns, deep.status.as_str()), (2, "done"));
    let body = fake.requests_for("m-deep").last().and_then(|q| q.json.clone()).unwrap_or(Value::Null);
    assert!(body.to_string().contains("42 (for "), "the grandchild's tool result reached its model: {body}");
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

/// A tool of the child's own (the parent has none of that name) that needs
/// approval: its call suspends on a standard `approval` request before it
/// runs, runs once on approve, and the parent finishes.
fn a_childs_own_tool_asks_for_approval_before_it_runs(d: Drv) {
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model(
                "m-parent",
                script(vec![Turn::default().call("clerk", r#"{"prompt": "file it"}"#), Turn::text("filed")]),
            )
            .model("m-clerk", script(vec![Turn::default().call("file", "{}"), Turn::text("clerk filed it")])),
    );
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let file = DynTool::new("file", "files the paper", json!({"type": "object"}), move |_, _| {
        counted.fetch_add(1, Ordering::SeqCst);
        Ok(ToolOutcome::Done(Value::String("filed".into())))
    })
    .needs_approval(ApprovalPolicy::Always);
    let clerk = AgentTool::new("clerk", "files things", proto_style(Style::Anthropic), "m-clerk")
        .base_url(fake.base_url(Style::Anthropic))
        .api_key(KEY)
        .dyn_tool(file);
    let client = d.client(builder(&fake, Style::OpenAi, "m-parent", false).agent(clerk).build().unwrap());
    let r = client.run("delegate").unwrap_or_else(|e| panic!("{d:?}: {e}"));
    assert_eq!(r.status, RunStatus::Pending, "{d:?}: the child's tool asks first: {r:?}");
    assert_eq!(r.pending.len(), 1, "{d:?}: {:?}", r.pending);
    assert_eq!(r.pending[0].kind, "approval", "{d:?}");
    assert!(r.pending[0].id.contains('/'), "{d:?}: owned by the child: {}", r.pending[0].id);
    assert_eq!(runs.load(Ordering::SeqCst), 0, "{d:?}: nothing ran before the approval");
    let state = r.suspended.expect("a pending result carries its state").state;
    let r = client.resume(&state, vec![Answer::ok(&r.pending[0].id, None)]).unwrap();
    assert_eq!((r.status, r.text.as_str()), (RunStatus::Done, "filed"), "{d:?}: {r:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{d:?}: ran once, after the approval");
    assert!(fake.failures().is_empty(), "{d:?}: {:?}", fake.failures());
}

/// A child whose config asks for a typed output (native): its invalid
/// first answer is retried inside the child, and the delegating call's
/// result is the validated value.
fn a_child_with_a_typed_output_answers_with_its_value(d: Drv) {
    typed_child(d, OutputMode::Native, vec![Turn::text(r#"{"verdict":"maybe"}"#), Turn::text(r#"{"verdict":"yes"}"#)]);
}

/// The same in tool mode: the value arrives as the output tool's
/// arguments, and the child's last text is empty; the parent still gets
/// the validated value.
fn a_child_with_a_typed_output_in_tool_mode_answers_with_its_value(d: Drv) {
    typed_child(
        d,
        OutputMode::Tool,
        vec![
            Turn::default().call("final_result", r#"{"verdict":"maybe"}"#),
            Turn::default().call("final_result", r#"{"verdict":"yes"}"#),
        ],
    );
}

fn typed_child(d: Drv, mode: OutputMode, child_turns: Vec<Turn>) {
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model(
                "m-parent",
                script(vec![Turn::default().call("judge", r#"{"prompt": "is it fine?"}"#), Turn::text("judged")]),
            )
            .model("claude-sonnet-4-5", script(child_turns)),
    );
    let mut config = nexus_proto::RunConfig::new(proto_style(Style::Anthropic), "claude-sonnet-4-5");
    let schema = json!({
        "type": "object",
        "properties": {"verdict": {"type": "string", "enum": ["yes", "no"]}},
        "required": ["verdict"],
    });
    config.output = Some(OutputSpec::new(schema).with_mode(mode));
    let judge =
        AgentTool::from_config("judge", "judges", config).base_url(fake.base_url(Style::Anthropic)).api_key(KEY);
    let r = d.client(builder(&fake, Style::OpenAi, "m-parent", false).agent(judge).build().unwrap()).run("judge it");
    let r = r.unwrap_or_else(|e| panic!("{d:?}: {e}"));
    assert_eq!((r.status, r.text.as_str()), (RunStatus::Done, "judged"), "{r:?}");
    let output: Value = serde_json::from_str(&outputs(&r)[0]).unwrap_or_else(|e| panic!("{d:?}: {e}: {r:?}"));
    assert_eq!(output, json!({"verdict": "yes"}), "{d:?}: the child's validated value, after its retry");
    assert_eq!(r.agents[0].turns, 2, "{d:?}");
    let child = fake.requests_for("claude-sonnet-4-5");
    assert_eq!(child.len(), 2, "{d:?}");
    let carried = |b: &Value| match mode {
        OutputMode::Tool => b["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "final_result")),
        _ => b["output_config"]["format"]["schema"].is_object(),
    };
    assert!(child.iter().all(|q| q.json.as_ref().is_some_and(carried)), "{d:?}: {mode:?} on every child request");
    assert!(fake.failures().is_empty(), "{d:?}: {:?}", fake.failures());
}
