//! Whole runs through the machine against a scripted provider, on every
//! style, streamed and not.

mod sim;

use std::sync::Arc;

use nexus_proto::{
    Answer, Block, Input, Outcome, Output, Request, RunError, StreamEvent, Style, ToolDecl, ToolReply, ToolResult,
};
use serde_json::{json, Map, Value};
use sim::{echo, Sim, Stop, Turn};

const STYLES: [Style; 4] = [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses];

fn each(mut f: impl FnMut(Style, bool)) {
    for style in STYLES {
        for stream in [false, true] {
            f(style, stream);
        }
    }
}

fn tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::new("get_weather", "weather", json!({"type":"object","properties":{"city":{"type":"string"}}})),
        ToolDecl::new("add", "adds", json!({"type":"object"})),
        ToolDecl::new("login", "needs auth", json!({"type":"object"})),
        ToolDecl::relay("lookup", "relayed", json!({"type":"object"})),
    ]
}

/// Ids as each style's provider would send them (Gemini sends none: the core makes them up).
fn call(id: &str, name: &str, args: &str) -> (String, String, String) {
    (id.into(), name.into(), args.into())
}

fn script(turns: Vec<Vec<(String, String, String)>>, last: &str) -> Vec<Turn> {
    let mut s: Vec<Turn> = turns.into_iter().map(|calls| Turn { text: None, calls }).collect();
    s.push(Turn::text(last));
    s
}

fn results_of(sim: &Sim) -> Vec<(String, String, bool)> {
    let t = sim.run.transcript();
    let mut out = vec![];
    for m in t {
        for r in m.tool_results() {
            out.push((r.name.clone(), r.output.clone(), r.is_error));
        }
    }
    out
}

fn pending_login(inv: &nexus_proto::ToolInvocation) -> ToolReply {
    match &inv.answer {
        None => ToolReply::Pending(Request::new("authorization", "log in first")),
        Some(a) => ToolReply::Done(ToolResult::ok(format!(
            "logged in with {}",
            Value::Object(a.data.clone().unwrap_or_default())
        ))),
    }
}

fn tool(inv: &nexus_proto::ToolInvocation) -> ToolReply {
    if inv.name == "login" {
        pending_login(inv)
    } else {
        echo(inv)
    }
}

#[test]
fn parallel_calls_run_in_one_batch_and_results_keep_call_order() {
    each(|style, stream| {
        let mut sim = Sim::new(
            style,
            stream,
            tools(),
            script(
                vec![vec![call("c1", "get_weather", r#"{"city":"Paris"}"#), call("c2", "add", r#"{"a":2,"b":2}"#)]],
                "The weather in Paris is Sunny.",
            ),
        );
        let stop = sim.drive(&mut tool);
        assert_eq!(stop, Stop::Done(Outcome::Done), "{style:?} stream={stream}");
        let res = results_of(&sim);
        assert_eq!(res.len(), 2);
        assert!(res[0].1.starts_with("get_weather:"), "{res:?}");
        assert!(res[1].1.starts_with("add:"), "{res:?}");
        assert_eq!(sim.executed.len(), 2);
        assert_eq!(sim.run.final_text(), "The weather in Paris is Sunny.");
        assert_eq!(sim.run.turns(), 2);
        assert_eq!(sim.run.usage().prompt_tokens, 20);
        assert_eq!(sim.run.tool_calls().len(), 2);
    });
}

#[test]
fn wait_for_resolves_a_suspension_in_process() {
    each(|style, stream| {
        let mut sim = Sim::new(style, stream, tools(), script(vec![vec![call("c1", "login", "{}")]], "done"));
        let Stop::Suspended(reqs) = sim.drive(&mut tool) else { panic!("expected suspension") };
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].kind, "authorization");
        let mut data = Map::new();
        data.insert("token".into(), json!("t"));
        sim.answer(Answer::ok(reqs[0].id.clone(), Some(data))).unwrap();
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
        let res = results_of(&sim);
        assert_eq!(res[0].1, r#"logged in with {"token":"t"}"#);
        // executed twice: the first run suspended, the retry carried the answer
        assert_eq!(sim.executed.len(), 2);
        assert!(sim.executed[1].1.is_some());
    });
}

#[test]
fn durable_halt_resumes_from_a_snapshot() {
    each(|style, stream| {
        let mut sim = Sim::new(style, stream, tools(), script(vec![vec![call("c1", "login", "{}")]], "done"));
        let Stop::Suspended(reqs) = sim.drive(&mut tool) else { panic!() };
        let bytes = sim.run.snapshot();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.contains(&format!("\"format_version\":{}", nexus_proto::FORMAT_VERSION)));
        sim.run = nexus_proto::Run::restore(&bytes).unwrap();
        // serialize → deserialize → serialize is byte-identical
        assert_eq!(sim.run.snapshot(), bytes);
        assert_eq!(sim.run.outstanding(), reqs);
        sim.answer(Answer::ok(reqs[0].id.clone(), None)).unwrap();
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
    });
}

#[test]
fn a_stream_cut_after_its_last_event_lost_only_the_blank_line_completes() {
    // The connection drops after the provider's last `data:` line but before
    // the blank line that would dispatch it: a clean end accepts such a
    // stream, so a transport error there must accept it too.
    for style in STYLES {
        let mut sim = Sim::new(style, true, tools(), vec![Turn::text("all of it")]);
        let Output::Send(req) = sim.run.poll_output() else { panic!("{style:?}: no request") };
        let bytes = sim::wire(style, &Turn::text("all of it"), true);
        let cut =
            bytes.strip_suffix(b"\r\n\r\n").or_else(|| bytes.strip_suffix(b"\n\n")).expect("ends with a blank line");
        let head = Input::ResponseHead {
            exchange: req.exchange,
            status: 200,
            headers: vec![("content-type".into(), "text/event-stream".into())],
        };
        sim.run.handle_input(sim.now, head).unwrap();
        sim.run.handle_input(sim.now, Input::ResponseBody { exchange: req.exchange, chunk: cut }).unwrap();
        let lost = Input::TransportError {
            exchange: req.exchange,
            kind: nexus_proto::TransportErrorKind::Io,
            message: "connection reset".into(),
        };
        sim.run.handle_input(sim.now, lost).unwrap();
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done), "{style:?}");
        assert_eq!(sim.run.final_text(), "all of it", "{style:?}");
        assert_eq!(sim.sent.len(), 0, "{style:?}: the turn was retried instead of completed");
    }
}

#[test]
fn a_restored_run_can_be_pointed_at_a_new_endpoint() {
    each(|style, stream| {
        let mut sim = Sim::new(style, stream, tools(), script(vec![vec![call("c1", "login", "{}")]], "done"));
        let Stop::Suspended(reqs) = sim.drive(&mut tool) else { panic!() };
        let mut run = nexus_proto::Run::restore(&sim.run.snapshot()).unwrap();
        run.set_base_url("http://10.9.8.7:4000/api");
        // The new root is part of the run from now on, restores included.
        let run = nexus_proto::Run::restore(&run.snapshot()).unwrap();
        assert_eq!(run.config().base_url, "http://10.9.8.7:4000/api");
        sim.run = run;
        sim.answer(Answer::ok(reqs[0].id.clone(), None)).unwrap();
        let url = loop {
            match sim.run.poll_output() {
                nexus_proto::Output::Send(req) => break req.url,
                nexus_proto::Output::RunTools(batch) => {
                    for inv in &batch.calls {
                        let reply = tool(inv);
                        let input = nexus_proto::Input::ToolReply { call_id: inv.call_id.clone(), reply };
                        sim.run.handle_input(sim.now, input).unwrap();
                    }
                }
                nexus_proto::Output::Event(_) => {}
                other => panic!("{style:?}: no request after the answer: {other:?}"),
            }
        };
        assert!(url.starts_with("http://10.9.8.7:4000/api/"), "{style:?}: {url}");
    });
}

#[test]
fn two_suspensions_surface_at_once_and_completed_results_are_kept() {
    each(|style, stream| {
        let mut sim = Sim::new(
            style,
            stream,
            tools(),
            script(
                vec![vec![call("c1", "login", "{}"), call("c2", "add", "{}"), call("c3", "login", "{\"x\":1}")]],
                "ok",
            ),
        );
        let Stop::Suspended(reqs) = sim.drive(&mut tool) else { panic!() };
        assert_eq!(reqs.len(), 2, "{style:?}: every suspension surfaces");
        assert_ne!(reqs[0].id, reqs[1].id);
        sim.reload();
        // partial answer: still pending on the other
        sim.answer(Answer::ok(reqs[1].id.clone(), None)).unwrap();
        let Stop::Suspended(rest) = sim.drive(&mut tool) else { panic!() };
        assert_eq!(rest, vec![reqs[0].clone()]);
        sim.reload();
        // A reason a person wrote reaches the model after the prompt (SPEC §4 rule 4).
        sim.answer(Answer::declined(reqs[0].id.clone(), "not from this account")).unwrap();
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
        let res = results_of(&sim);
        assert_eq!(res[0], ("login".into(), "declined: log in first — reason: not from this account".into(), true));
        assert!(res[1].1.starts_with("add:"));
        assert!(res[2].1.starts_with("logged in"));
        // `add` ran exactly once, across two restores
        let adds = sim
            .executed
            .iter()
            .filter(|(id, _)| sim.run.tool_calls().iter().any(|c| &c.id == id && c.name == "add"))
            .count();
        assert_eq!(adds, 1);
    });
}

fn relay_answer(req: &Request, outputs: &[(&str, &str, bool)]) -> Answer {
    let results: Vec<Value> = outputs.iter().map(|(id, o, e)| json!({"id": id, "output": o, "isError": e})).collect();
    let mut data = Map::new();
    data.insert("results".into(), Value::Array(results));
    Answer::ok(req.id.clone(), Some(data))
}

fn relay_ids(req: &Request) -> Vec<String> {
    req.data.as_ref().unwrap()["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn three_relay_calls_ride_one_request_in_order_and_resume_fills_every_slot() {
    each(|style, stream| {
        let raw = r#"{"q": "a"}"#;
        let mut sim = Sim::new(
            style,
            stream,
            tools(),
            script(
                vec![vec![
                    call("r1", "lookup", raw),
                    call("r2", "lookup", r#"{"q":"b"}"#),
                    call("r3", "lookup", r#"{"q":"c"}"#),
                ]],
                "fin",
            ),
        );
        let Stop::Suspended(reqs) = sim.drive(&mut tool) else { panic!() };
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].kind, "tool_call");
        let calls = reqs[0].data.as_ref().unwrap()["calls"].as_array().unwrap().clone();
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0]["input"], json!({"q":"a"}));
        assert_eq!(calls[2]["input"], json!({"q":"c"}));
        if style != Style::Anthropic && style != Style::Gemini {
            // OpenAI sends a string: the raw text is kept byte for byte.
            assert_eq!(calls[0]["arguments"], json!(raw));
        }
        assert!(sim.executed.is_empty(), "nothing runs locally for relay tools");
        let ids = relay_ids(&reqs[0]);
        sim.reload();
        sim.answer(relay_answer(&reqs[0], &[(&ids[2], "C", false), (&ids[0], "A", false), (&ids[1], "B", true)]))
            .unwrap();
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
        let res = results_of(&sim);
        assert_eq!(res.iter().map(|r| r.1.as_str()).collect::<Vec<_>>(), vec!["A", "B", "C"]);
        assert!(res[1].2);
    });
}

#[test]
fn single_call_shorthand_and_missing_relay_results() {
    each(|style, stream| {
        let mut sim = Sim::new(style, stream, tools(), script(vec![vec![call("r1", "lookup", "{}")]], "fin"));
        let Stop::Suspended(reqs) = sim.drive(&mut tool) else { panic!() };
        let mut data = Map::new();
        data.insert("output".into(), json!("short"));
        sim.answer(Answer::ok(reqs[0].id.clone(), Some(data))).unwrap();
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
        assert_eq!(results_of(&sim)[0].1, "short");

        let mut sim = Sim::new(
            style,
            stream,
            tools(),
            script(vec![vec![call("r1", "lookup", "{}"), call("r2", "lookup", "{}")]], "fin"),
        );
        let Stop::Suspended(reqs) = sim.drive(&mut tool) else { panic!() };
        let ids = relay_ids(&reqs[0]);
        sim.answer(relay_answer(&reqs[0], &[(&ids[0], "only one", false)])).unwrap();
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
        let res = results_of(&sim);
        assert_eq!(res[0].1, "only one");
        assert!(res[1].2 && res[1].1.starts_with("no result supplied"), "{res:?}");
    });
}

#[test]
fn a_mismatched_answer_is_rejected_and_changes_nothing() {
    each(|style, stream| {
        let mut sim = Sim::new(style, stream, tools(), script(vec![vec![call("r1", "lookup", "{}")]], "fin"));
        let Stop::Suspended(_) = sim.drive(&mut tool) else { panic!() };
        let before = sim.run.snapshot();
        let err = sim.answer(Answer::ok("nope", None)).unwrap_err();
        assert_eq!(err, nexus_proto::InputError::UnknownAnswer("nope".into()));
        assert_eq!(sim.run.snapshot(), before);
    });
}

#[test]
fn declined_relay_continues_and_real_tool_beside_it_runs_once() {
    each(|style, stream| {
        let mut sim = Sim::new(
            style,
            stream,
            tools(),
            script(
                vec![vec![call("c1", "add", "{}"), call("r1", "lookup", "{}")], vec![call("r2", "lookup", "{}")]],
                "fin",
            ),
        );
        let Stop::Suspended(reqs) = sim.drive(&mut tool) else { panic!() };
        assert_eq!(sim.executed.len(), 1, "the executed tool ran beside the relay call");
        sim.reload();
        sim.answer(Answer::declined(reqs[0].id.clone(), "declined")).unwrap();
        // relay again in a later turn
        let Stop::Suspended(reqs2) = sim.drive(&mut tool) else { panic!() };
        assert_eq!(reqs2[0].kind, "tool_call");
        assert_ne!(reqs2[0].id, reqs[0].id);
        let mut data = Map::new();
        data.insert("output".into(), json!("x"));
        sim.answer(Answer::ok(reqs2[0].id.clone(), Some(data))).unwrap();
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
        assert_eq!(sim.executed.len(), 1, "the completed tool never re-ran");
        let res = results_of(&sim);
        assert!(res[1].2 && res[1].1.starts_with("declined:"));
    });
}

#[test]
fn max_turns_ends_incomplete_and_unknown_tools_get_error_results() {
    each(|style, stream| {
        let turns = (0..5).map(|i| vec![call(&format!("c{i}"), "nosuch", "{}")]).collect();
        let mut sim = Sim::new(style, stream, tools(), script(turns, "never"));
        let mut cfg = sim.run.config().clone();
        cfg.max_turns = 2;
        sim.run = nexus_proto::Run::new(cfg, tools(), vec![nexus_proto::Message::user("go")]).unwrap();
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Incomplete { limit: "maxTurns".into() }));
        assert_eq!(sim.run.turns(), 2);
        assert_eq!(results_of(&sim)[0], ("nosuch".into(), "Unknown tool: nosuch".into(), true));
        assert!(sim.executed.is_empty());
    });
}

#[test]
fn retries_honour_retry_after_then_give_up() {
    each(|style, stream| {
        let mut sim = Sim::new(style, stream, tools(), vec![Turn::text("hi")]);
        let Output::Send(req) = sim.run.poll_output() else { panic!() };
        let ex = req.exchange;
        sim.run
            .handle_input(
                sim.now,
                Input::ResponseHead { exchange: ex, status: 429, headers: vec![("Retry-After".into(), "3".into())] },
            )
            .unwrap();
        sim.run
            .handle_input(
                sim.now,
                Input::ResponseBody {
                    exchange: ex,
                    chunk: br#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
                },
            )
            .unwrap();
        sim.run.handle_input(sim.now, Input::ResponseEnd { exchange: ex }).unwrap();
        let waited = loop {
            match sim.run.poll_output() {
                Output::Event(_) => {}
                Output::Wait { until } => break until,
                o => panic!("{o:?}"),
            }
        };
        assert_eq!(waited, Some(sim.now.plus_ms(3000)));
        // too early: nothing happens
        sim.run.handle_input(sim.now.plus_ms(10), Input::Timeout).unwrap();
        assert!(matches!(sim.run.poll_output(), Output::Wait { .. }));
        sim.now = sim.now.plus_ms(3000);
        sim.run.handle_input(sim.now, Input::Timeout).unwrap();
        // the retry goes through
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
        assert_eq!(sim.run.final_text(), "hi");
    });
}

#[test]
fn non_retryable_errors_keep_the_provider_message() {
    each(|style, stream| {
        let mut sim = Sim::new(style, stream, tools(), vec![Turn::text("hi")]);
        let Output::Send(req) = sim.run.poll_output() else { panic!() };
        let body = match style {
            Style::Anthropic => r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad thing"}}"#,
            Style::OpenAi | Style::OpenAiResponses => {
                r#"{"error":{"message":"bad thing","type":"invalid_request_error","param":null,"code":null}}"#
            }
            Style::Gemini => r#"{"error":{"code":400,"message":"bad thing","status":"INVALID_ARGUMENT"}}"#,
        };
        sim.feed_response(req.exchange, 400, "application/json", body.as_bytes());
        let Stop::Done(Outcome::Failed { error: RunError::Provider(p) }) = sim.drive(&mut tool) else { panic!() };
        assert_eq!(p.status, Some(400));
        assert_eq!(p.message, "bad thing");
        assert!(!p.retryable);
    });
}

#[test]
fn a_call_running_at_snapshot_time_comes_back_in_doubt() {
    each(|style, stream| {
        let mut sim = Sim::new(style, stream, tools(), script(vec![vec![call("c1", "add", "{}")]], "fin"));
        let key = loop {
            match sim.run.poll_output() {
                Output::Send(req) => sim.serve(&req),
                Output::RunTools(b) => break b.calls[0].idempotency_key.clone(),
                Output::Event(_) => {}
                o => panic!("{o:?}"),
            }
        };
        // the process dies here: the tool may or may not have run
        let mut run = nexus_proto::Run::restore(&sim.run.snapshot()).unwrap();
        let reqs = run.outstanding();
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].kind, "in_doubt");
        assert_eq!(reqs[0].data.as_ref().unwrap()["idempotencyKey"], json!(key));
        let mut data = Map::new();
        data.insert("rerun".into(), json!(true));
        run.handle_input(sim.now, Input::Answer(Answer::ok(reqs[0].id.clone(), Some(data)))).unwrap();
        sim.run = run;
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
        assert_eq!(sim.executed.len(), 1);
    });
}

#[test]
fn cancel_and_deadline_end_the_run() {
    let mut sim = Sim::new(Style::OpenAi, false, tools(), vec![Turn::text("hi")]);
    let Output::Send(_) = sim.run.poll_output() else { panic!() };
    sim.run.handle_input(sim.now, Input::Cancel).unwrap();
    assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Failed { error: RunError::Cancelled }));

    let mut sim = Sim::new(Style::OpenAi, false, tools(), vec![Turn::text("hi")]);
    let mut cfg = sim.run.config().clone();
    cfg.deadline = Some(sim.now.plus_ms(100));
    sim.run = nexus_proto::Run::new(cfg, tools(), vec![nexus_proto::Message::user("go")]).unwrap();
    let Output::Send(_) = sim.run.poll_output() else { panic!() };
    let until = loop {
        match sim.run.poll_output() {
            Output::Event(_) => {}
            Output::Wait { until } => break until,
            o => panic!("{o:?}"),
        }
    };
    assert_eq!(until, Some(sim.now.plus_ms(100)));
    sim.run.handle_input(sim.now.plus_ms(100), Input::Timeout).unwrap();
    assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Failed { error: RunError::DeadlineExceeded }));
}

#[test]
fn no_secret_enters_the_state() {
    let mut sim = Sim::new(Style::Anthropic, false, tools(), vec![Turn::text("hi")]);
    sim.run.set_api_key("sk-very-secret");
    sim.run.set_secret_header("Authorization", "Bearer other-secret");
    let Output::Send(req) = sim.run.poll_output() else { panic!() };
    assert_eq!(req.header("x-api-key"), Some("sk-very-secret"));
    let snap = String::from_utf8(sim.run.snapshot()).unwrap();
    assert!(!snap.contains("sk-very-secret") && !snap.contains("other-secret"));
    assert!(!format!("{:?}", sim.run).contains("sk-very-secret"));
    let mut cfg = sim.run.config().clone();
    cfg.headers.push(("x-api-key".into(), "k".into()));
    assert!(cfg.validate().is_err(), "a secret header in the serialized config is refused");
}

#[test]
fn streamed_and_whole_runs_end_with_the_same_transcript() {
    for style in STYLES {
        let s = script(
            vec![vec![call("c1", "get_weather", r#"{"city":"Paris"}"#), call("c2", "add", "{}")]],
            "final words here",
        );
        let mut a = Sim::new(style, false, tools(), s.clone());
        let mut b = Sim::new(style, true, tools(), s);
        b.chunk = 1;
        assert_eq!(a.drive(&mut tool), b.drive(&mut tool));
        assert_eq!(a.run.transcript(), b.run.transcript(), "{style:?}");
        assert_eq!(sim::shown_text(&a.events), sim::shown_text(&b.events));
        let _ = Block::text("");
    }
}

#[test]
fn a_finished_calls_event_shares_the_ledgers_copy_and_the_state_holds_the_call_as_is() {
    each(|style, stream| {
        let mut sim =
            Sim::new(style, stream, tools(), script(vec![vec![call("c1", "login", r#"{"user":"ada"}"#)]], "done"));
        let Stop::Suspended(reqs) = sim.drive(&mut tool) else { panic!("expected suspension") };
        let finished: Vec<_> = sim
            .events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallFinished { call } => Some(Arc::clone(call)),
                _ => None,
            })
            .collect();
        assert_eq!(finished.len(), 1, "{style:?}");
        // Held by the event kept here, the ledger of the suspended batch and `finished`.
        assert_eq!(Arc::strong_count(&finished[0]), 3, "{style:?}: the ledger keeps the event's call");
        // The state writes the shared call as the call itself.
        let state = String::from_utf8(sim.run.snapshot()).unwrap();
        let written = format!("\"call\":{}", serde_json::to_string(&*finished[0]).unwrap());
        assert!(state.contains(&written), "{style:?}: {state}");
        sim.answer(Answer::ok(reqs[0].id.clone(), None)).unwrap();
        assert_eq!(sim.drive(&mut tool), Stop::Done(Outcome::Done));
        // Its results recorded, the ledger has let go of it.
        assert_eq!(Arc::strong_count(&finished[0]), 2, "{style:?}");
    });
}
