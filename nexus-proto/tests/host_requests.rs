//! A run suspended before its first model call on requests the host settles
//! itself (`Run::await_host` / `Run::settle_host`): the step an MCP server's
//! authorization needs before its tools can be listed.

mod sim;

use nexus_proto::{Answer, InputError, Output, Request, Run, Status, Style, ToolDecl};
use serde_json::json;
use sim::{echo, Sim, Stop, Turn};

fn login(id: &str) -> Request {
    let mut r = Request::new("authorization", "authorize the server");
    r.id = id.into();
    r.url = Some("https://as.example/authorize?state=s".into());
    r
}

fn listed() -> Vec<ToolDecl> {
    vec![ToolDecl::new("notes__whoami", "who", json!({"type":"object"}))]
}

#[test]
fn a_run_waits_on_host_requests_across_a_snapshot_then_starts_with_the_tools_they_bring() {
    for style in [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses] {
        let script = vec![Turn::calls(&[("c1", "notes__whoami", "{}")]), Turn::text("done")];
        let mut sim = Sim::new(style, false, vec![], script);
        sim.run.await_host(vec![login("authorize-notes-1")]).unwrap();
        assert_eq!(sim.run.status(), Status::Pending);
        match sim.drive(&mut echo) {
            Stop::Suspended(reqs) => assert_eq!(reqs, vec![login("authorize-notes-1")]),
            other => panic!("{other:?}"),
        }
        assert!(sim.sent.is_empty(), "no model call before the host settles");

        // Another process: the snapshot is a suspended run like any other.
        let bytes = sim.run.snapshot();
        let mut run = Run::restore(&bytes).unwrap();
        assert_eq!(run.outstanding(), vec![login("authorize-notes-1")]);
        assert_eq!(run.snapshot(), bytes, "serialize → deserialize → serialize is byte-identical");
        // Answering it as an input is refused (the host acts on it), state unchanged.
        let fed = run.handle_input(sim.now, nexus_proto::Input::Answer(Answer::ok("authorize-notes-1", None)));
        assert_eq!(fed, Err(InputError::HostSettles("authorize-notes-1".into())));
        assert_eq!(
            run.settle_host("authorize-other", listed()),
            Err(InputError::UnknownAnswer("authorize-other".into()))
        );
        assert_eq!(run.snapshot(), bytes);
        // Still pending after a refusal, and no model call is asked for.
        assert_eq!(run.status(), Status::Pending);
        assert!(matches!(run.poll_output(), Output::Wait { .. }));

        run.settle_host("authorize-notes-1", listed()).unwrap();
        assert_eq!(run.status(), Status::Running);
        assert_eq!(run.tools(), listed().as_slice());
        let mut sim = Sim::from_run(run, sim.script.clone());
        match sim.drive(&mut echo) {
            Stop::Done(o) => assert_eq!(o, nexus_proto::Outcome::Done, "{style:?}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(sim.executed.len(), 1, "the listed tool ran once");
        assert_eq!(sim.sent.len(), 2);
        let first = sim.sent[0].to_string();
        assert!(first.contains("notes__whoami"), "the first model call declares the settled tools: {first}");
    }
}

#[test]
fn await_host_is_refused_once_the_run_has_moved_and_for_bad_ids() {
    let mut sim = Sim::new(Style::OpenAi, false, listed(), vec![Turn::text("hi")]);
    assert!(matches!(sim.run.await_host(vec![]), Err(InputError::Config(_))));
    assert!(matches!(sim.run.await_host(vec![login(""), login("a")]), Err(InputError::Config(_))));
    assert!(matches!(sim.run.await_host(vec![login("a"), login("a")]), Err(InputError::Config(_))));
    assert_eq!(sim.run.status(), Status::Running);
    // Settling a clashing tool name changes nothing.
    sim.run.await_host(vec![login("a"), login("b")]).unwrap();
    let waiting = sim.run.snapshot();
    assert!(matches!(sim.run.settle_host("a", listed()), Err(InputError::Config(_))));
    assert_eq!(sim.run.snapshot(), waiting);
    sim.run.settle_host("a", vec![]).unwrap();
    assert_eq!(sim.run.status(), Status::Pending, "b is still waiting");
    sim.run.settle_host("b", vec![]).unwrap();
    assert_eq!(sim.run.status(), Status::Running);
    assert!(matches!(sim.drive(&mut echo), Stop::Done(_)));
    assert!(matches!(sim.run.await_host(vec![login("c")]), Err(InputError::OutOfOrder(_))));
}
