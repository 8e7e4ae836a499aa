//! Sub-agents through the machine: a tree of runs on different wire
//! formats, suspended deep inside, saved, restored and answered by path.

mod sim;
mod tree;

use nexus_proto::{
    Agents, Input, InputError, Message, Outcome, Output, Run, Status, StreamEvent, Style, Timestamp, ToolResult,
};
use sim::Stop;
use tree::{agent, call, config, delegate, script, tools, Tree};

fn results(run: &Run) -> Vec<(String, String, bool)> {
    run.tool_calls().into_iter().map(|c| (c.id, c.output, c.is_error)).collect()
}

fn suspended(stop: Stop) -> Vec<nexus_proto::Request> {
    match stop {
        Stop::Suspended(r) => r,
        Stop::Done(o) => panic!("expected a suspension, got {o:?}"),
    }
}

fn done(stop: Stop) {
    match stop {
        Stop::Done(Outcome::Done) => {}
        other => panic!("expected done, got {other:?}"),
    }
}

/// An OpenAI parent delegating to an Anthropic child whose tool asks first.
fn one_child() -> Tree {
    let cfg = config(Style::OpenAi, "").with_agent(agent("researcher", Style::Anthropic));
    let run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    Tree::new(
        run,
        vec![
            ("", Style::OpenAi, script(vec![vec![delegate("call_p1", "researcher", "check it")]], "parent done")),
            ("researcher", Style::Anthropic, script(vec![vec![call("toolu_c1", "approve")]], "child says ok")),
        ],
    )
}

#[test]
fn a_child_suspension_surfaces_at_the_top_and_resumes_after_a_restore() {
    let mut t = one_child();
    let reqs = suspended(t.drive());
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert_eq!(reqs[0].id, "call_p1/pnd_toolu_c1");
    assert_eq!(reqs[0].kind, "approval");
    assert_eq!(t.run.request_owner(&reqs[0].id).as_deref(), Some("call_p1"));
    assert_eq!(t.run.status(), Status::Pending);
    assert_eq!(t.run.outstanding(), reqs);
    // The child's pending event carries the id to answer and the agent path.
    assert!(t.events.iter().any(|e| e.agent_path() == "call_p1"
        && matches!(e.inner(), StreamEvent::Pending { request } if request.id == reqs[0].id)));

    // Another process: the state alone carries the tree.
    let state = t.run.snapshot();
    let text = String::from_utf8(state.clone()).unwrap();
    assert!(text.contains(r#""state":"agent","agent":"researcher","child":{"format_version":3"#), "{text}");
    t.run = Run::restore(&state).unwrap();
    assert_eq!(t.run.outstanding(), reqs, "the same requests, owned by the same agent, after the restore");
    t.answer(&reqs[0].id).unwrap();
    // The answered call is the child's to hand out: a host checks it can run it.
    assert!(t.run.calls_to_run().is_empty());
    let next: Vec<(String, String)> = t.run.agent_calls_to_run().into_iter().map(|c| (c.id, c.name)).collect();
    assert_eq!(next, vec![("call_p1/toolu_c1".to_string(), "approve".to_string())]);
    assert_eq!(t.run.agent_run("call_p1").map(Run::turns), Some(1), "the child's own turns");
    assert!(t.run.agent_run("call_p1/nope").is_none() && t.run.agent_run("nope").is_none());
    assert_eq!(t.run.agent_run("").map(Run::id), Some(t.run.id()));
    done(t.drive());

    assert_eq!(t.run.final_text(), "parent done");
    assert_eq!(results(&t.run), vec![("call_p1".to_string(), "child says ok".to_string(), false)]);
    // The approval ran twice (asked, then answered) and completed once.
    assert_eq!(t.executed, vec![("call_p1/toolu_c1".to_string(), false), ("call_p1/toolu_c1".to_string(), true)]);
    assert_eq!(t.completed, vec!["call_p1/toolu_c1".to_string()]);
    let reports = t.run.agent_reports();
    assert_eq!(reports.len(), 1);
    assert_eq!((reports[0].path.as_str(), reports[0].name.as_str(), reports[0].turns), ("call_p1", "researcher", 2));
    assert_eq!(reports[0].status, "done");
    assert_eq!(t.run.usage().total_tokens, 30, "the parent's own two calls");
    assert_eq!(t.run.tree_usage().total_tokens, 60, "with the child's two");
    // The child spoke Anthropic, the parent OpenAI.
    assert!(t.sent.iter().any(|(root, body)| root.ends_with("/researcher") && body["max_tokens"].is_number()));
    assert!(t.sent.iter().any(|(root, body)| !root.ends_with("/researcher") && body["messages"][0]["role"] == "user"));
}

#[test]
fn events_of_a_child_carry_its_path_and_the_top_runs_none() {
    let mut t = one_child();
    let reqs = suspended(t.drive());
    t.answer(&reqs[0].id).unwrap();
    done(t.drive());
    let child_text = sim::shown_text(t.events.iter().filter(|e| e.agent_path() == "call_p1").map(|e| e.inner()));
    assert_eq!(child_text, "child says ok");
    let top_text = sim::shown_text(&t.events);
    assert_eq!(top_text, "parent done");
    // The delegating call's result event carries the child's answer.
    assert!(t.events.iter().any(|e| matches!(e, StreamEvent::ToolResult { call_id, result, .. }
        if call_id == "call_p1" && result.output == "child says ok")));
    let json = serde_json::to_value(t.events.iter().find(|e| !e.agent_path().is_empty()).unwrap()).unwrap();
    assert_eq!(json["type"], "agent");
    assert_eq!(json["agent"], "call_p1");
}

#[test]
fn two_children_in_one_turn_one_suspends_while_the_other_and_a_sibling_tool_complete() {
    let cfg = config(Style::Anthropic, "")
        .with_agent(agent("asker", Style::OpenAi))
        .with_agent(agent("doer", Style::OpenAiResponses));
    let run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    let mut t = Tree::new(
        run,
        vec![
            (
                "",
                Style::Anthropic,
                script(
                    vec![vec![
                        delegate("toolu_a", "asker", "ask"),
                        delegate("toolu_b", "doer", "do"),
                        call("toolu_e", "echo"),
                    ]],
                    "both back",
                ),
            ),
            ("asker", Style::OpenAi, script(vec![vec![call("call_x", "approve")]], "asked and approved")),
            ("doer", Style::OpenAiResponses, script(vec![vec![call("call_y", "echo")]], "did it")),
        ],
    );
    let reqs = suspended(t.drive());
    assert_eq!(reqs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), vec!["toolu_a/pnd_call_x"]);
    // The sibling child finished while the other waits; nothing is reported done for the waiting one.
    let reports = t.run.agent_reports();
    let status: Vec<(&str, &str)> = reports.iter().map(|r| (r.path.as_str(), r.status.as_str())).collect();
    assert_eq!(status, vec![("toolu_b", "done"), ("toolu_a", "pending")]);
    assert!(t.completed.contains(&"toolu_e".to_string()) && t.completed.contains(&"toolu_b/call_y".to_string()));

    t.reload();
    t.answer("toolu_a/pnd_call_x").unwrap();
    done(t.drive());
    assert_eq!(
        results(&t.run),
        vec![
            ("toolu_a".into(), "asked and approved".into(), false),
            ("toolu_b".into(), "did it".into(), false),
            ("toolu_e".into(), "echo ran".into(), false),
        ],
        "results in call order"
    );
    let mut completed = t.completed.clone();
    completed.sort();
    assert_eq!(completed, vec!["toolu_a/call_x", "toolu_b/call_y", "toolu_e"], "each tool completed once");
}

/// OpenAI → Anthropic → Gemini, the grandchild asking.
fn grandchild() -> Tree {
    let researcher = agent("researcher", Style::Anthropic);
    let researcher =
        nexus_proto::AgentSpec { config: researcher.config.with_agent(agent("deep", Style::Gemini)), ..researcher };
    let cfg = config(Style::OpenAi, "").with_agent(researcher);
    let run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    Tree::new(
        run,
        vec![
            ("", Style::OpenAi, script(vec![vec![delegate("call_p1", "researcher", "go deep")]], "top done")),
            (
                "researcher",
                Style::Anthropic,
                script(vec![vec![delegate("toolu_r1", "deep", "ask")]], "researcher done"),
            ),
            ("deep", Style::Gemini, script(vec![vec![call("ignored", "approve")]], "deep done")),
        ],
    )
}

#[test]
fn a_grandchild_suspension_routes_by_its_whole_path() {
    let mut t = grandchild();
    let reqs = suspended(t.drive());
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    assert!(reqs[0].id.starts_with("call_p1/toolu_r1/pnd_"), "{}", reqs[0].id);
    assert_eq!(t.run.request_owner(&reqs[0].id).as_deref(), Some("call_p1/toolu_r1"));
    assert!(t.events.iter().any(|e| e.agent_path() == "call_p1/toolu_r1"));
    t.reload();
    t.answer(&reqs[0].id).unwrap();
    done(t.drive());
    assert_eq!(t.run.final_text(), "top done");
    assert_eq!(results(&t.run)[0].1, "researcher done");
    let paths: Vec<(String, u32)> = t.run.agent_reports().into_iter().map(|r| (r.path, r.turns)).collect();
    assert_eq!(paths, vec![("call_p1/toolu_r1".to_string(), 2), ("call_p1".to_string(), 2)]);
    assert_eq!(t.completed.len(), 1);
}

#[test]
fn delegation_past_the_depth_limit_is_an_error_result() {
    let mut t = grandchild();
    let mut cfg = t.run.config().clone();
    cfg.agents = Some(Agents { max_depth: 1, ..cfg.agents.clone().unwrap() });
    t.run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    done(t.drive());
    let deep = t.events.iter().find_map(|e| match e.inner() {
        StreamEvent::ToolResult { call_id, result, .. } if call_id == "toolu_r1" => Some(result.clone()),
        _ => None,
    });
    let deep = deep.expect("the researcher's delegation got a result");
    assert!(deep.is_error && deep.output.contains("depth limit (1)"), "{deep:?}");
    assert!(t.sent.iter().all(|(root, _)| !root.ends_with("/deep")), "the grandchild never ran");
}

#[test]
fn a_child_that_hits_its_turn_limit_gives_an_error_result_not_an_empty_answer() {
    let mut spec = agent("researcher", Style::Anthropic);
    spec.config.max_turns = 1;
    let cfg = config(Style::OpenAi, "").with_agent(spec);
    let run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    let mut t = Tree::new(
        run,
        vec![
            ("", Style::OpenAi, script(vec![vec![delegate("call_p1", "researcher", "loop")]], "parent done")),
            ("researcher", Style::Anthropic, script(vec![vec![call("toolu_1", "echo")]], "never reached")),
        ],
    );
    done(t.drive());
    let (_, output, is_error) = results(&t.run).remove(0);
    assert!(is_error, "{output}");
    assert!(output.contains("did not finish") && output.contains("maxTurns"), "{output}");
    assert_eq!(t.run.agent_reports()[0].status, "incomplete");
}

#[test]
fn answers_to_wrong_paths_finished_children_or_twice_are_refused_and_change_nothing() {
    let mut t = one_child();
    let reqs = suspended(t.drive());
    let before = t.run.snapshot();
    for bad in ["call_p1/pnd_nope", "call_zz/pnd_toolu_c1", "pnd_toolu_c1", "call_p1", "call_p1/", "/x"] {
        let err = t.answer(bad).unwrap_err();
        assert!(matches!(&err, InputError::UnknownAnswer(id) if id == bad), "{bad}: {err:?}");
        assert_eq!(t.run.snapshot(), before, "{bad}");
    }
    let err = t
        .run
        .handle_input(t.now, Input::ToolReply { call_id: "call_p1/toolu_c1".into(), reply: done_reply() })
        .unwrap_err();
    assert!(matches!(&err, InputError::UnknownToolCall(id) if id == "call_p1/toolu_c1"), "{err:?}");
    // Time going backwards is refused for the child's answer too.
    let err = t.run.handle_input(Timestamp(1), Input::Answer(nexus_proto::Answer::ok(&reqs[0].id, None)));
    assert!(matches!(err, Err(InputError::TimeWentBackwards { .. })));
    assert_eq!(t.run.snapshot(), before);

    t.answer(&reqs[0].id).unwrap();
    assert!(matches!(t.answer(&reqs[0].id), Err(InputError::UnknownAnswer(_))), "a second answer");
    done(t.drive());
    assert!(matches!(t.answer(&reqs[0].id), Err(InputError::Finished)));
}

fn done_reply() -> nexus_proto::ToolReply {
    nexus_proto::ToolReply::Done(ToolResult::ok("x"))
}

#[test]
fn a_child_tool_running_at_the_snapshot_comes_back_in_doubt_and_is_not_rerun() {
    let mut t = one_child();
    // Drive until the child's tool batch is handed out, then save without replying.
    let inv = loop {
        match t.run.poll_output() {
            Output::Send(req) => t.serve(&req),
            Output::RunTools(b) => break b.calls[0].clone(),
            Output::Event(_) => {}
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(inv.call_id, "call_p1/toolu_c1");
    t.reload();
    let reqs = suspended(t.drive());
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].id, "call_p1/doubt_toolu_c1");
    assert_eq!(reqs[0].kind, "in_doubt");
    let mut data = serde_json::Map::new();
    data.insert("output".into(), "it had run".into());
    t.run.handle_input(t.now, Input::Answer(nexus_proto::Answer::ok(&reqs[0].id, Some(data)))).unwrap();
    done(t.drive());
    assert!(t.executed.is_empty(), "nothing re-ran: {:?}", t.executed);
}

#[test]
fn cancel_reaches_the_children_and_their_late_responses_are_refused() {
    let mut t = one_child();
    let req = loop {
        match t.run.poll_output() {
            Output::Send(req) if req.url.contains("/researcher") => break req,
            Output::Send(req) => t.serve(&req),
            Output::Event(_) => {}
            other => panic!("{other:?}"),
        }
    };
    t.run.handle_input(t.now, Input::Cancel).unwrap();
    assert!(matches!(t.run.poll_output(), Output::Done(Outcome::Failed { .. })));
    let head = Input::ResponseHead { exchange: req.exchange, status: 200, headers: vec![] };
    assert!(t.run.handle_input(t.now, head).is_err());
}

#[test]
fn model_calls_of_parallel_children_overlap_only_when_the_driver_takes_them() {
    for (slots, overlapping) in [(1, false), (4, true)] {
        let cfg = config(Style::OpenAi, "")
            .with_agent(agent("one", Style::Anthropic))
            .with_agent(agent("two", Style::Gemini));
        let mut run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
        run.set_concurrent_exchanges(slots);
        let mut t = Tree::new(
            run,
            vec![
                (
                    "",
                    Style::OpenAi,
                    script(vec![vec![delegate("call_1", "one", "a"), delegate("call_2", "two", "b")]], "top"),
                ),
                ("one", Style::Anthropic, script(vec![], "one done")),
                ("two", Style::Gemini, script(vec![], "two done")),
            ],
        );
        let first = loop {
            match t.run.poll_output() {
                Output::Send(req) if req.url.contains("/one") => break req,
                Output::Send(req) => t.serve(&req),
                Output::Event(_) => {}
                other => panic!("{other:?}"),
            }
        };
        let next = loop {
            match t.run.poll_output() {
                Output::Event(_) => {}
                other => break other,
            }
        };
        match next {
            Output::Send(second) => {
                assert!(overlapping, "a second call while one is in flight");
                assert_eq!(t.run.concurrent_exchanges(), slots);
                // Each call is its own child's: a driver reads its numbers there.
                for (req, path) in [(&first, "call_1"), (&second, "call_2")] {
                    let (owner, _) = t.run.exchange_owner(req.exchange).unwrap();
                    assert_eq!(owner, path);
                    assert_eq!(t.run.agent_run(&owner).map(Run::turns), Some(0));
                }
                assert!(second.url.contains("/two"));
                assert_ne!(second.exchange, first.exchange, "exchange ids are unique across the tree");
                t.serve(&second);
            }
            Output::Wait { .. } => assert!(!overlapping, "the second child should have sent"),
            other => panic!("{other:?}"),
        }
        t.serve(&first);
        done(t.drive());
        assert_eq!(
            results(&t.run),
            vec![("call_1".into(), "one done".into(), false), ("call_2".into(), "two done".into(), false)]
        );
    }
}

#[test]
fn keys_reach_children_in_memory_and_never_the_state() {
    let mut same_root = agent("near", Style::OpenAi);
    same_root.config.base_url = tree::root("");
    let cfg = config(Style::OpenAi, "").with_agent(same_root).with_agent(agent("far", Style::Anthropic));
    let mut run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    run.set_api_key("sk-parent-secret");
    run.set_agent_api_key("far", "sk-far-secret");
    let mut t = Tree::new(
        run,
        vec![
            (
                "",
                Style::OpenAi,
                script(vec![vec![delegate("call_1", "near", "a"), delegate("call_2", "far", "b")]], "top"),
            ),
            ("far", Style::Anthropic, script(vec![], "far done")),
        ],
    );
    let mut auth = Vec::new();
    loop {
        match t.run.poll_output() {
            Output::Send(req) => {
                let key = req.header("authorization").or(req.header("x-api-key")).unwrap_or_default().to_string();
                auth.push((req.url.clone(), key));
                let snapshot = String::from_utf8(t.run.snapshot()).unwrap();
                assert!(!snapshot.contains("secret"), "a key in the state");
                t.serve(&req);
            }
            Output::Done(_) => break,
            Output::RunTools(b) => b.calls.iter().for_each(|c| t.reply(c)),
            _ => {}
        }
    }
    assert!(auth.iter().any(|(u, k)| u.contains("/far") && k == "sk-far-secret"), "{auth:?}");
    let near: Vec<_> = auth.iter().filter(|(u, _)| !u.contains("/far")).collect();
    assert!(near.len() >= 3 && near.iter().all(|(_, k)| k == "Bearer sk-parent-secret"), "{auth:?}");
}

#[test]
fn an_answer_for_a_child_past_the_deadline_fails_the_run_and_stops_the_child() {
    let mut cfg = config(Style::OpenAi, "").with_agent(agent("researcher", Style::Anthropic));
    cfg.deadline = Some(Timestamp(5_000));
    let run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    let mut t = Tree::new(
        run,
        vec![
            ("", Style::OpenAi, script(vec![vec![delegate("call_p1", "researcher", "check it")]], "parent done")),
            ("researcher", Style::Anthropic, script(vec![vec![call("toolu_c1", "approve")]], "child says ok")),
        ],
    );
    let reqs = suspended(t.drive());
    assert_eq!(reqs[0].id, "call_p1/pnd_toolu_c1");
    let ran = t.executed.len();
    t.now = Timestamp(5_000);
    t.answer(&reqs[0].id).unwrap();
    assert_eq!(t.run.status(), Status::Failed);
    assert_eq!(t.run.outcome(), Some(&Outcome::Failed { error: nexus_proto::RunError::DeadlineExceeded }));
    assert!(t.run.outstanding().is_empty(), "the child was stopped with its parent");
    assert!(matches!(t.run.poll_output(), Output::Done(_)));
    assert_eq!(t.executed.len(), ran, "the answered tool did not run");
}
