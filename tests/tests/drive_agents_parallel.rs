//! Both drivers: parallel sub-agents (SPEC §17). Two agent calls of one
//! turn call their models at once, each on a connection of its own: the
//! fake provider holds both answers until both requests have arrived, so a
//! driver that sent them one after another would never get either. Results
//! come back in call order whichever child finishes first; a suspended
//! child beside a completing one, a cancel with both calls in flight, and a
//! recorded cassette all hold.

#[macro_use]
mod drive_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use drive_support::*;
use nexus_drive::cassette::{replay, Cassette, Quiet, Recorder, ReplayEnd};
use nexus_drive::{AgentTool, Answer, CancelToken, DriveError, DynTool, Hooks, Request, RunStatus, ToolOutcome};
use nexus_tests::fake::{FakeProvider, Fault, FaultKind, Script, Scripts, Style, Turn};
use serde_json::{json, Value};

both_drivers!(
    two_childrens_model_calls_are_in_flight_at_once_and_results_keep_call_order,
    a_suspended_child_beside_a_completing_one_is_pending_and_resumes,
    a_cancel_with_two_calls_in_flight_ends_the_run,
    a_parallel_children_run_replays_from_its_cassette,
    a_resume_refuses_a_childs_call_this_client_cannot_run,
    a_childs_head_timeout_is_its_own,
);

/// The two children's models; the fake holds their first requests until both arrived.
const ALPHA: &str = "m-alpha";
const BETA: &str = "m-beta";

/// The parent's turns: both agents called in one turn, then its answer.
fn parent_script() -> Script {
    script(vec![
        Turn::default().call("alpha", r#"{"prompt": "look it up"}"#).call("beta", r#"{"prompt": "say hello"}"#),
        Turn::text("both back"),
    ])
}

/// `alpha` takes two turns (a tool call first), `beta` one: `beta` finishes
/// first, yet its result comes second.
fn fake(gate: usize) -> FakeProvider {
    FakeProvider::start(
        Scripts::new(KEY)
            .model("m-parent", parent_script())
            .model(ALPHA, script(vec![Turn::default().call("lookup", "{}"), Turn::text("alpha done")]))
            .model(BETA, script(vec![Turn::text("beta done")]))
            .gate(&[ALPHA, BETA], gate),
    )
}

fn alpha(fake: &FakeProvider, tool: DynTool) -> AgentTool {
    AgentTool::new("alpha", "looks things up", proto_style(Style::Anthropic), ALPHA)
        .base_url(fake.base_url(Style::Anthropic))
        .api_key(KEY)
        .dyn_tool(tool)
}

fn beta(fake: &FakeProvider) -> AgentTool {
    AgentTool::new("beta", "says hello", proto_style(Style::OpenAi), BETA)
        .base_url(fake.base_url(Style::OpenAi))
        .api_key(KEY)
}

fn lookup() -> DynTool {
    ok_tool("lookup", |_, _| "found".into())
}

/// `lookup` that asks first: pending until answered.
fn gated_lookup(done: Arc<AtomicUsize>) -> DynTool {
    DynTool::new("lookup", "asks first", json!({"type": "object"}), move |_, ctx| {
        if ctx.answer().is_some_and(|a| a.ok) {
            done.fetch_add(1, Ordering::SeqCst);
            return Ok(ToolOutcome::Done(Value::String("found".into())));
        }
        Ok(ToolOutcome::Pending(Request::new("approval", "may I look?")))
    })
}

fn two_childrens_model_calls_are_in_flight_at_once_and_results_keep_call_order(d: Drv) {
    let fake = fake(2);
    // The hook sees each request with its own run's turn number.
    let turns = Arc::new(Mutex::new(Vec::new()));
    let seen = turns.clone();
    let hooks = Hooks::new().before_model(move |req| {
        let body: Value = serde_json::from_slice(req.body).unwrap();
        let model = body["model"].as_str().unwrap_or_default().to_string();
        seen.lock().unwrap().push((model, req.turn));
        Ok(())
    });
    let cfg = builder(&fake, Style::OpenAi, "m-parent", false)
        .agent(alpha(&fake, lookup()))
        .agent(beta(&fake))
        .hooks(hooks)
        .build()
        .unwrap();
    let r = d.client(cfg).run("split it").unwrap();
    assert_eq!(r.status, RunStatus::Done, "{r:?}");
    assert_eq!(r.text, "both back");
    assert!(fake.failures().is_empty(), "both requests were in flight at once: {:?}", fake.failures());
    assert_eq!(fake.gate_arrived(), 2);
    assert_eq!(outputs(&r), vec!["alpha done".to_string(), "beta done".to_string()], "results in call order");
    // Each child's calls went on a connection of its own.
    let first = |m: &str| fake.requests_for(m)[0].connection;
    assert_ne!(first(ALPHA), first(BETA));
    let mut turns = turns.lock().unwrap().clone();
    turns.sort();
    let expected = [("m-alpha", 1), ("m-alpha", 2), ("m-beta", 1), ("m-parent", 1), ("m-parent", 2)];
    assert_eq!(turns, expected.map(|(m, t)| (m.to_string(), t)).to_vec(), "turns count per run");
}

fn a_suspended_child_beside_a_completing_one_is_pending_and_resumes(d: Drv) {
    let fake = fake(2);
    let done = Arc::new(AtomicUsize::new(0));
    // Both segments to one cassette, the second appended by the resuming process.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nexus-parallel-resume-{}-{d:?}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("parallel-resume.jsonl");
    let recorder = |append: bool| {
        let rec = if append { Recorder::append(&path) } else { Recorder::create(&path) };
        let rec = Arc::new(rec.unwrap());
        rec.set_api_key(KEY);
        rec
    };
    let cfg = |rec: &Arc<Recorder>| {
        builder(&fake, Style::OpenAi, "m-parent", false)
            .agent(alpha(&fake, gated_lookup(done.clone())))
            .agent(beta(&fake))
            .tap(rec.clone())
            .build()
            .unwrap()
    };
    let rec = recorder(false);
    let r = d.client(cfg(&rec)).run("split it").unwrap();
    rec.pending(&r.pending);
    rec.finish().unwrap();
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
    assert_eq!(r.status, RunStatus::Pending, "{r:?}");
    assert_eq!(r.pending.len(), 1, "{:?}", r.pending);
    let mut status: Vec<(String, String)> = r.agents.iter().map(|a| (a.name.clone(), a.status.clone())).collect();
    status.sort();
    assert_eq!(status, vec![("alpha".into(), "pending".into()), ("beta".into(), "done".into())]);
    let state = r.suspended.unwrap().state;
    let rec = recorder(true);
    rec.resume(&state);
    let r = d.client(cfg(&rec)).resume(&state, vec![Answer::ok(&r.pending[0].id, None)]).unwrap();
    rec.finish().unwrap();
    assert_eq!(r.status, RunStatus::Done, "{r:?}");
    assert_eq!(outputs(&r), vec!["alpha done".to_string(), "beta done".to_string()]);
    assert_eq!(done.load(Ordering::SeqCst), 1);
    assert_eq!(fake.requests_for(BETA).len(), 1, "the finished child is not asked again");
    // The resume line says how many calls the resumed tree may have in flight.
    let text = std::fs::read_to_string(&path).unwrap();
    let resume = text.lines().find(|l| l.contains(r#""type":"resume""#)).expect("a resume line");
    assert!(resume.contains(r#""exchanges":4"#), "{resume}");
    let replayed = replay(&Cassette::load(&path).unwrap(), &mut Quiet).unwrap_or_else(|e| panic!("replay: {e}"));
    assert!(matches!(replayed.end, ReplayEnd::Finished(_)), "{:?}", replayed.end);
    assert_eq!(replayed.run.final_text(), "both back");
    let _ = std::fs::remove_dir_all(&dir);
}

fn a_cancel_with_two_calls_in_flight_ends_the_run(d: Drv) {
    // A gate for three: the two children's requests are held until the cancel.
    let fake = fake(3);
    let token = CancelToken::new();
    let cfg = builder(&fake, Style::OpenAi, "m-parent", false)
        .agent(alpha(&fake, lookup()))
        .agent(beta(&fake))
        .build()
        .unwrap();
    let client = d.client(cfg).with_cancel(token.clone());
    let result = std::thread::scope(|s| {
        let run = s.spawn(|| client.run("split it"));
        // A driver that sent them one after another finishes (the gate gives up) instead.
        while fake.gate_arrived() < 2 && !run.is_finished() {
            std::thread::yield_now();
        }
        token.cancel();
        run.join().unwrap()
    });
    match result {
        Err(e) => assert!(e.is_cancelled(), "{e:?}"),
        Ok(r) => panic!("a cancelled run finished: {r:?}"),
    }
    fake.open_gate();
    assert_eq!(fake.gate_arrived(), 2, "both calls were in flight when the cancel came");
}

fn a_parallel_children_run_replays_from_its_cassette(d: Drv) {
    let fake = fake(2);
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-parallel-{}-{d:?}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("parallel.jsonl");
    let rec = Arc::new(Recorder::create(&path).unwrap());
    rec.set_api_key(KEY);
    let cfg = builder(&fake, Style::OpenAi, "m-parent", false)
        .agent(alpha(&fake, lookup()))
        .agent(beta(&fake))
        .tap(rec.clone())
        .build()
        .unwrap();
    let r = d.client(cfg).run("split it").unwrap();
    rec.finish().unwrap();
    assert_eq!(r.status, RunStatus::Done, "{r:?}");
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.lines().nth(1).is_some_and(|l| l.contains(r#""exchanges":4"#)), "the start line says how many");
    let cassette = Cassette::load(&path).unwrap();
    let replayed = replay(&cassette, &mut Quiet).unwrap_or_else(|e| panic!("replay: {e}"));
    assert!(matches!(replayed.end, ReplayEnd::Finished(_)), "{:?}", replayed.end);
    assert_eq!(replayed.requests, fake.requests().len(), "every request checked byte for byte");
    assert_eq!(replayed.run.final_text(), "both back");
    let _ = std::fs::remove_dir_all(&dir);
}

fn a_resume_refuses_a_childs_call_this_client_cannot_run(d: Drv) {
    let fake = fake(2);
    let done = Arc::new(AtomicUsize::new(0));
    let cfg = builder(&fake, Style::OpenAi, "m-parent", false)
        .agent(alpha(&fake, gated_lookup(done)))
        .agent(beta(&fake))
        .build()
        .unwrap();
    let r = d.client(cfg).run("split it").unwrap();
    assert_eq!(r.status, RunStatus::Pending, "{r:?}");
    let id = r.pending[0].id.clone();
    let state = r.suspended.unwrap().state;
    // A client whose `alpha` has no `lookup`: the approved call could not run.
    let bare = AgentTool::new("alpha", "looks things up", proto_style(Style::Anthropic), ALPHA)
        .base_url(fake.base_url(Style::Anthropic))
        .api_key(KEY);
    let cfg = builder(&fake, Style::OpenAi, "m-parent", false).agent(bare).agent(beta(&fake)).build().unwrap();
    let sent = fake.requests().len();
    match d.client(cfg).resume(&state, vec![Answer::ok(&id, None)]) {
        Err(DriveError::MissingTool { tool, call_id }) => {
            assert_eq!(tool, "lookup");
            assert!(call_id.contains('/'), "a child's call is named by its path: {call_id}");
        }
        other => panic!("expected MissingTool, got {other:?}"),
    }
    assert_eq!(fake.requests().len(), sent, "nothing was sent");
}

/// `alpha` allows 200 ms for a response head, the top run no limit: the
/// stalled answer fails `alpha`'s call (its result an error) while `beta`
/// and the top run finish. Read from the top run, the limit would be none
/// and the stalled answer would come through.
fn a_childs_head_timeout_is_its_own(d: Drv) {
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model("m-parent", parent_script())
            .model(ALPHA, script(vec![Turn::text("too late").fault(Fault::new(FaultKind::Stall { ms: 3_000 }))]))
            .model(BETA, script(vec![Turn::text("beta done")])),
    );
    let mut config = nexus_proto::RunConfig::new(proto_style(Style::Anthropic), ALPHA);
    config.base_url = fake.base_url(Style::Anthropic);
    config.failover.head_timeout_ms = Some(200);
    let alpha = AgentTool::from_config("alpha", "looks things up", config).api_key(KEY);
    let cfg = builder(&fake, Style::OpenAi, "m-parent", false).agent(alpha).agent(beta(&fake)).build().unwrap();
    let r = d.client(cfg).run("split it").unwrap();
    assert_eq!(r.status, RunStatus::Done, "{r:?}");
    assert_eq!(r.text, "both back");
    let out = outputs(&r);
    assert!(out[0].contains("agent alpha failed"), "{out:?}");
    assert_eq!(out[1], "beta done");
}
