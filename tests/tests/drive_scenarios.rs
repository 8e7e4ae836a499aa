//! End-to-end scenarios for both drivers against the fake provider.
//!
//! One list of scenarios; `both_drivers!` runs each through the blocking and
//! the async driver, and each scenario covers the three wire formats (and,
//! where it matters, streamed and whole responses). Expectations come from
//! the scripts the fake answers with and from the contract (call order,
//! suspension rules, retry budget), never from a previous run's output.

#[macro_use]
mod drive_support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use drive_support::*;
use nexus_drive::hooks::{BeforeTool, HookAbort};
use nexus_drive::{
    Answer, CancelToken, DriveError, DynTool, FileRunStore, Hooks, MemoryConversationStore, Request, RetryDecision,
    RunError, RunStatus, RunStore, StoreError, StreamEvent, ToolContext, ToolError, ToolOutcome, ToolReply, ToolResult,
};
use nexus_tests::fake::{FakeProvider, Fault, FaultKind, Scripts, Style, Turn};
use serde_json::{json, Value};

both_drivers!(
    parallel_tools_run_concurrently_and_results_keep_call_order,
    wait_for_resolves_every_suspension_of_a_turn_concurrently,
    durable_suspend_survives_a_file_and_a_fresh_client,
    relay_surfaces_all_parallel_calls_in_one_request_with_raw_arguments,
    retries_follow_retry_after_and_the_budget,
    classifier_can_fail_now_but_never_retries_more,
    cancel_aborts_the_request_in_flight_and_a_backoff,
    hooks_short_circuit_rewrite_and_abort,
    conversation_and_run_stores_round_trip,
    a_stored_run_is_resumed_once,
    tool_failures_become_error_results,
    a_timeout_is_kept_while_another_call_of_the_batch_runs,
    streaming_and_whole_responses_give_the_same_transcript,
    connections_are_kept_alive_across_turns,
    async_tools_run_in_both_drivers,
    a_resumed_run_goes_to_the_resuming_clients_endpoint,
    quick_tools_run_on_the_drivers_thread_and_slow_ones_side_by_side,
);

// ------------------------------------------------------------------ scenarios

fn parallel_tools_run_concurrently_and_results_keep_call_order(d: Drv) {
    for style in STYLES {
        for stream in [false, true] {
            let ctx = format!("{d:?} {style:?} stream={stream}");
            let fake = FakeProvider::start(
                Scripts::new(KEY).model(
                    "m-par",
                    script(vec![
                        Turn::default()
                            .with_text("checking")
                            .call("slow", r#"{"n":1}"#)
                            .call("quick", r#"{"n":2}"#)
                            .call("quick", r#"{"n":3}"#),
                        Turn::text("all done"),
                    ])
                    .expect_final(expect_results(3, &["slow 1", "quick 2", "quick 3"])),
                ),
            );
            let gate = Gate::new(3);
            let (g1, g2) = (gate.clone(), gate.clone());
            let cfg =
                builder(&fake, style, "m-par", stream)
                    .dyn_tool(ok_tool("slow", move |a, _| {
                        let together = g1.pass();
                        // Finishes last, so call order and finish order differ.
                        std::thread::sleep(Duration::from_millis(60));
                        if together {
                            format!("slow {}", a["n"])
                        } else {
                            "ran alone".into()
                        }
                    }))
                    .dyn_tool(ok_tool("quick", move |a, _| {
                        if g2.pass() {
                            format!("quick {}", a["n"])
                        } else {
                            "ran alone".into()
                        }
                    }))
                    .build()
                    .unwrap();
            let r = d.client(cfg).run("go").unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(r.status, RunStatus::Done, "{ctx}");
            assert_eq!(r.text, "all done", "{ctx}");
            assert_eq!(outputs(&r), ["slow 1", "quick 2", "quick 3"], "{ctx}");
            assert_eq!(transcript_results(&r), ["slow 1", "quick 2", "quick 3"], "{ctx}");
            assert_eq!(r.turns, 2, "{ctx}");
            assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
        }
    }
}

/// A tool whose calls keep finishing within microseconds earns running on
/// the driver's own thread (no hand-off); once a call of it is slow, its
/// calls run side by side again. Where each call ran is read from thread
/// ids and the gate, never from timings.
fn quick_tools_run_on_the_drivers_thread_and_slow_ones_side_by_side(d: Drv) {
    let fake = FakeProvider::start(Scripts::new(KEY).model(
        "m-pace",
        script(vec![Turn::default().call("work", r#"{"n":1}"#).call("work", r#"{"n":2}"#), Turn::text("done")]),
    ));
    let slow = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate: Arc<Mutex<Arc<Gate>>> = Arc::new(Mutex::new(Gate::new(2)));
    let threads: Arc<Mutex<Vec<std::thread::ThreadId>>> = Arc::default();
    let (s, g, t) = (slow.clone(), gate.clone(), threads.clone());
    let cfg = builder(&fake, Style::OpenAi, "m-pace", false)
        .dyn_tool(ok_tool("work", move |a, _| {
            t.lock().unwrap().push(std::thread::current().id());
            if !s.load(Ordering::SeqCst) {
                return format!("quick {}", a["n"]);
            }
            // Slow for certain (well over the quick bound), and proof of
            // running beside the batch's other call.
            std::thread::sleep(Duration::from_millis(2));
            let gate = g.lock().unwrap().clone();
            if gate.pass() {
                format!("together {}", a["n"])
            } else {
                "ran alone".into()
            }
        }))
        .build()
        .unwrap();
    let client = d.client(cfg);
    let here = std::thread::current().id();
    let run = || {
        threads.lock().unwrap().clear();
        let r = client.run("go").unwrap_or_else(|e| panic!("{d:?}: {e}"));
        assert_eq!((r.status, r.text.as_str(), r.turns), (RunStatus::Done, "done", 2), "{d:?}");
        (outputs(&r), std::mem::take(&mut *threads.lock().unwrap()))
    };
    // Quick calls earn running where the driver is. A call preempted on a
    // busy machine can take longer than the quick bound and cost the tool
    // its trust for a while, so this looks for it over many runs: three runs
    // in a row with both calls on this thread.
    let mut inline_runs = 0;
    for _ in 0..500 {
        let (out, ran_on) = run();
        assert_eq!(out, ["quick 1", "quick 2"], "{d:?}");
        inline_runs = if ran_on == [here, here] { inline_runs + 1 } else { 0 };
        if inline_runs == 3 {
            break;
        }
    }
    assert_eq!(inline_runs, 3, "{d:?}: calls of a tool that stays quick run where the driver is");

    // The tool turns slow. Still trusted as quick, its next batch may run on
    // the driver's thread, one call after the other (the bounded cost of
    // being wrong once): each call then waits at the gate for its sibling
    // and the first gives up. Had a preempted call cost the tool its trust
    // already, the batch runs side by side.
    slow.store(true, Ordering::SeqCst);
    *gate.lock().unwrap() = Gate::with_wait(2, Duration::from_secs(2));
    let (out, ran_on) = run();
    if ran_on == [here, here] {
        assert_eq!(out[0], "ran alone", "{d:?}");
    } else {
        assert_eq!(out, ["together 1", "together 2"], "{d:?}: {ran_on:?}");
    }
    // From then on its calls run side by side.
    for _ in 0..3 {
        *gate.lock().unwrap() = Gate::new(2);
        let (out, ran_on) = run();
        assert_eq!(out, ["together 1", "together 2"], "{d:?}");
        assert_ne!(ran_on[0], ran_on[1], "{d:?}: {ran_on:?}");
    }
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

fn wait_for_resolves_every_suspension_of_a_turn_concurrently(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY).model(
                "m-wait",
                script(vec![
                    Turn::default().call("balance", r#"{"account":"a"}"#).call("balance", r#"{"account":"b"}"#),
                    Turn::text("balances shown"),
                ])
                .expect_final(expect_results(2, &["ann/a: 42", "ann/b: 42"])),
            ),
        );
        let asked: Arc<Mutex<Vec<Request>>> = Arc::default();
        let seen = asked.clone();
        let gate = Gate::new(2);
        let cfg = builder(&fake, style, "m-wait", false)
            .dyn_tool(DynTool::new("balance", "reads a balance", json!({"type": "object"}), |args, ctx| {
                let account = args["account"].as_str().unwrap_or("?").to_string();
                match ctx.answer() {
                    None => {
                        let mut r = Request::new("authorization", format!("log in to read {account}"));
                        r.url = Some("https://bank.example/login".into());
                        Ok(ToolOutcome::Pending(r))
                    }
                    Some(a) => Ok(ToolOutcome::Done(json!(format!(
                        "{}/{account}: 42",
                        a.data.as_ref().unwrap()["user"].as_str().unwrap()
                    )))),
                }
            }))
            .wait_for(move |req| {
                seen.lock().unwrap().push(req.clone());
                // Both requests of the turn are out at once.
                let together = gate.pass();
                Answer::ok(req.id, data(json!({"user": if together { "ann" } else { "alone" }})))
            })
            .build()
            .unwrap();
        let r = d.client(cfg).run("show balances").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.status, RunStatus::Done, "{ctx}");
        assert_eq!(outputs(&r), ["ann/a: 42", "ann/b: 42"], "{ctx}");
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 2, "{ctx}");
        assert!(asked
            .iter()
            .all(|r| r.kind == "authorization" && r.url.as_deref() == Some("https://bank.example/login")));
        assert_ne!(asked[0].id, asked[1].id, "{ctx}");
    }
}

/// Counts executions of a tool.
fn durable_suspend_survives_a_file_and_a_fresh_client(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY).model(
                "m-durable",
                script(vec![
                    Turn::default()
                        .call("transfer", r#"{"amount":5}"#)
                        .call("add", r#"{"a":2,"b":2}"#)
                        .call("transfer", r#"{"amount":7}"#),
                    Turn::text("transfers done"),
                ])
                .expect_final(expect_results(3, &["sent 5", "4", "sent 7"])),
            ),
        );
        let (transfers, adds) = (counter(), counter());
        let first =
            d.client(transfer_tools(builder(&fake, style, "m-durable", false), &transfers, &adds).build().unwrap());
        let r = first.run("pay the bills").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.status, RunStatus::Pending, "{ctx}");
        // Every outstanding request of the turn surfaces at once.
        assert_eq!(r.pending.len(), 2, "{ctx}: {:?}", r.pending);
        assert!(r.pending.iter().all(|p| p.kind == "approval"), "{ctx}");
        assert_eq!(adds.load(Ordering::SeqCst), 1, "{ctx}");
        let suspended = r.suspended.clone().expect("a pending result carries its state");
        assert_eq!(suspended.pending, r.pending);
        let state_text = String::from_utf8(suspended.state.clone()).unwrap();
        assert!(!state_text.contains(KEY), "{ctx}: the API key reached the state");
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("nexus-drive-{}-{style:?}-{d:?}.state", std::process::id()));
        std::fs::write(&path, &suspended.state).unwrap();
        drop(first);

        let sent_before = fake.requests().len();
        let fresh =
            d.client(transfer_tools(builder(&fake, style, "m-durable", false), &transfers, &adds).build().unwrap());
        let state = std::fs::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        // An answer for no outstanding request: refused, nothing sent.
        let err = fresh.resume(&state, vec![Answer::ok("no-such-request", None)]).unwrap_err();
        assert!(matches!(err, DriveError::Input(_)), "{ctx}: {err:?}");
        assert_eq!(fake.requests().len(), sent_before, "{ctx}");

        // Answers for some requests: pending on the rest.
        let (a1, a2) = (r.pending[0].id.clone(), r.pending[1].id.clone());
        let half = fresh.resume(&state, vec![Answer::ok(a1.clone(), None)]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(half.status, RunStatus::Pending, "{ctx}");
        assert_eq!(half.pending.iter().map(|p| p.id.as_str()).collect::<Vec<_>>(), [a2.as_str()], "{ctx}");
        assert_eq!(fake.requests().len(), sent_before, "{ctx}: nothing is sent while still pending");
        let state2 = half.suspended.unwrap().state;
        // The first answer was used up: giving it again is refused.
        assert!(matches!(fresh.resume(&state2, vec![Answer::ok(a1, None)]), Err(DriveError::Input(_))), "{ctx}");

        let done = fresh.resume(&state2, vec![Answer::ok(a2, None)]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.status, RunStatus::Done, "{ctx}");
        assert_eq!(done.text, "transfers done", "{ctx}");
        assert_eq!(outputs(&done), ["sent 5", "4", "sent 7"], "{ctx}");
        // The completed call never ran again; each suspended call ran twice.
        assert_eq!(adds.load(Ordering::SeqCst), 1, "{ctx}");
        assert_eq!(transfers.load(Ordering::SeqCst), 4, "{ctx}");
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
    }
}

/// A stored run started against one endpoint and resumed by a client set up
/// for another (the deployment moved) talks to the new one.
fn a_resumed_run_goes_to_the_resuming_clients_endpoint(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let scripts = || {
            Scripts::new(KEY).model(
                "m-moved",
                script(vec![Turn::default().call("transfer", r#"{"amount":5}"#), Turn::text("moved and done")])
                    .expect_final(expect_results(1, &["sent 5"])),
            )
        };
        let (old, new) = (FakeProvider::start(scripts()), FakeProvider::start(scripts()));
        let (transfers, adds) = (counter(), counter());
        let first =
            d.client(transfer_tools(builder(&old, style, "m-moved", false), &transfers, &adds).build().unwrap());
        let r = first.run("pay").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.status, RunStatus::Pending, "{ctx}");
        let state = r.suspended.expect("pending").state;
        let old_requests = old.requests().len();
        drop(old);

        let moved =
            d.client(transfer_tools(builder(&new, style, "m-moved", false), &transfers, &adds).build().unwrap());
        let answer = Answer::ok(r.pending[0].id.clone(), None);
        let done = moved.resume(&state, vec![answer]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.status, RunStatus::Done, "{ctx}");
        assert_eq!(done.text, "moved and done", "{ctx}");
        assert_eq!(old_requests, 1, "{ctx}");
        assert_eq!(new.requests().len(), 1, "{ctx}: the continuation went to the new endpoint");
        assert!(new.failures().is_empty(), "{ctx}: {:?}", new.failures());
    }
}

fn relay_surfaces_all_parallel_calls_in_one_request_with_raw_arguments(d: Drv) {
    const RAW_A: &str = r#"{"q": "alpha",  "limit":3}"#;
    const RAW_B: &str = r#"{"q":"beta"}"#;
    for style in STYLES {
        for stream in [false, true] {
            let ctx = format!("{d:?} {style:?} stream={stream}");
            let fake = FakeProvider::start(
                Scripts::new(KEY).model(
                    "m-relay",
                    script(vec![Turn::default().call("lookup", RAW_A).call("lookup", RAW_B), Turn::text("relayed")])
                        .expect_final(expect_results(2, &["A-result", "B-result"])),
                ),
            );
            let cfg = builder(&fake, style, "m-relay", stream)
                .relay_tool("lookup", "looks things up on the caller's side", json!({"type": "object"}))
                .build()
                .unwrap();
            let client = d.client(cfg);
            let r = client.run("look up alpha and beta").unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(r.status, RunStatus::Pending, "{ctx}");
            assert_eq!(r.pending.len(), 1, "{ctx}: one request carries all relay calls");
            let req = &r.pending[0];
            assert_eq!(req.kind, "tool_call", "{ctx}");
            let calls = req.data.as_ref().unwrap()["calls"].as_array().unwrap().clone();
            assert_eq!(calls.len(), 2, "{ctx}");
            assert_eq!(calls[0]["name"], "lookup");
            assert_eq!(calls[0]["arguments"], RAW_A, "{ctx}: raw arguments, not a re-encoding");
            assert_eq!(calls[1]["arguments"], RAW_B, "{ctx}");
            assert_eq!(calls[0]["input"], json!({"q": "alpha", "limit": 3}), "{ctx}");
            assert_ne!(calls[0]["id"], calls[1]["id"], "{ctx}");
            let answer = Answer::ok(
                req.id.clone(),
                data(json!({"results": [
                    {"id": calls[0]["id"], "output": "A-result", "isError": false},
                    {"id": calls[1]["id"], "output": "B-result"},
                ]})),
            );
            let done =
                client.resume(&r.suspended.unwrap().state, vec![answer]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(done.status, RunStatus::Done, "{ctx}");
            assert_eq!(done.text, "relayed", "{ctx}");
            assert_eq!(outputs(&done), ["A-result", "B-result"], "{ctx}");
            assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
        }
    }
}

fn retries_follow_retry_after_and_the_budget(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model(
                    "m-flaky",
                    script(vec![Turn::text("recovered")
                        .fault(Fault::status_retry_after(429, "0"))
                        .fault(Fault::status_retry_after(503, "0"))]),
                )
                .model("m-down", script(vec![Turn::text("never").fault(Fault::status(503).times(5))]))
                .model("m-nope", script(vec![Turn::text("never").fault(Fault::status(400))])),
        );
        // Two retryable failures, two retries: the third attempt answers.
        let (b, events) = Events::record(builder(&fake, style, "m-flaky", false));
        let r = d.client(b.build().unwrap()).run("hello").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.text, "recovered", "{ctx}");
        assert_eq!(fake.attempts("m-flaky", 0), 3, "{ctx}");
        let retries: Vec<u64> = retries_of(&events.recorded()).iter().map(|r| r.1).collect();
        // Retry-After: 0 means retry now.
        assert_eq!(retries, [0, 0], "{ctx}");

        // One retry allowed: two attempts, then the provider's error.
        let cfg = builder(&fake, style, "m-down", false).retries(1).build().unwrap();
        let err = run_error(d.client(cfg).run("hello"));
        assert_eq!(err.status(), Some(503), "{ctx}: {err}");
        assert_eq!(fake.attempts("m-down", 0), 2, "{ctx}");

        // A 400 is never retried.
        let cfg = builder(&fake, style, "m-nope", false).build().unwrap();
        let err = run_error(d.client(cfg).run("hello"));
        assert_eq!(err.status(), Some(400), "{ctx}");
        assert!(matches!(&err, DriveError::Run(RunError::Provider(p)) if !p.message.is_empty()), "{ctx}: {err:?}");
        assert_eq!(fake.attempts("m-nope", 0), 1, "{ctx}");
    }
}

fn classifier_can_fail_now_but_never_retries_more(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model("m-429", script(vec![Turn::text("never").fault(Fault::status(429).times(5))]))
                .model("m-500", script(vec![Turn::text("never").fault(Fault::status(500).times(5))])),
        );
        // (status, attempt, will_retry) of each failure the classifier saw.
        type Seen = Vec<(Option<u16>, u32, bool)>;
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let log = seen.clone();
        let cfg = builder(&fake, style, "m-429", false)
            .retries(3)
            .classify_errors(move |f| {
                log.lock().unwrap().push((f.status, f.attempt, f.will_retry));
                if f.status == Some(429) {
                    RetryDecision::FailNow
                } else {
                    RetryDecision::Default
                }
            })
            .build()
            .unwrap();
        let client = d.client(cfg);
        let err = run_error(client.run("hello"));
        assert_eq!(err.status(), Some(429), "{ctx}: {err}");
        assert_eq!(fake.attempts("m-429", 0), 1, "{ctx}");
        assert_eq!(*seen.lock().unwrap(), [(Some(429), 0, true)], "{ctx}");

        // `Default` keeps the budget: 1 + 3 attempts, no more.
        let seen2: Arc<Mutex<usize>> = Arc::default();
        let log = seen2.clone();
        let cfg = builder(&fake, style, "m-500", false)
            .retries(3)
            .classify_errors(move |_| {
                *log.lock().unwrap() += 1;
                RetryDecision::Default
            })
            .build()
            .unwrap();
        let err = run_error(d.client(cfg).run("hello"));
        assert_eq!(err.status(), Some(500), "{ctx}");
        assert_eq!(fake.attempts("m-500", 0), 4, "{ctx}");
        assert_eq!(*seen2.lock().unwrap(), 4, "{ctx}: the classifier sees every failure");
    }
}

fn cancel_aborts_the_request_in_flight_and_a_backoff(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model("m-hang", script(vec![Turn::text("never").fault(Fault::new(FaultKind::Stall { ms: 5_000 }))]))
                .model("m-later", script(vec![Turn::text("never").fault(Fault::status_retry_after(503, "30"))])),
        );
        for model in ["m-hang", "m-later"] {
            let token = CancelToken::new();
            let client = d.client(builder(&fake, style, model, false).build().unwrap()).with_cancel(token.clone());
            let trigger = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(150));
                token.cancel();
            });
            let started = Instant::now();
            let err = run_error(client.run("hello"));
            trigger.join().unwrap();
            assert!(err.is_cancelled(), "{ctx} {model}: {err:?}");
            assert!(started.elapsed() < Duration::from_millis(4_000), "{ctx} {model}");
            assert_eq!(fake.attempts(model, 0), 1, "{ctx} {model}: an abort is never retried");
        }
    }
}

fn hooks_short_circuit_rewrite_and_abort(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model(
                    "m-hooks",
                    script(vec![
                        Turn::default()
                            .call("danger", "{}")
                            .call("pay", r#"{"to":"bob"}"#)
                            .call("echo", r#"{"s":"hi"}"#),
                        Turn::text("hooked"),
                    ])
                    .expect_final(expect_results(3, &["blocked by policy", "paid bob", "HI"])),
                )
                .model(
                    "m-abort",
                    script(vec![Turn::default().call("echo", r#"{"s":"x"}"#), Turn::text("unreachable")]),
                ),
        );
        let (dangers, pays) = (counter(), counter());
        let (dc, pc) = (dangers.clone(), pays.clone());
        let metrics: Arc<Mutex<Vec<nexus_drive::Metric>>> = Arc::default();
        let msink = metrics.clone();
        let hooks = Hooks::new()
            .before_model(|req| {
                // Rewrite the body: the provider must see what the hook wrote.
                let mut body: Value = serde_json::from_slice(req.body).map_err(|e| HookAbort(e.to_string()))?;
                body["x_hooked_turn"] = json!(req.turn);
                *req.body = serde_json::to_vec(&body).map_err(|e| HookAbort(e.to_string()))?;
                Ok(())
            })
            .before_tool(|call| match call.name {
                "danger" => BeforeTool::Reply(ToolReply::Done(ToolResult::ok("blocked by policy"))),
                // A suspension in the tool's place; on the answer, the real tool runs.
                "pay" => BeforeTool::Reply(ToolReply::Pending(Request::new("approval", "pay bob?"))),
                "echo" => BeforeTool::Args(json!({"s": call.input["s"].as_str().unwrap_or("").to_string()})),
                _ => BeforeTool::Continue,
            })
            .after_tool(|call, result| {
                if call.name == "echo" {
                    result.output = result.output.to_uppercase();
                }
            });
        let cfg = builder(&fake, style, "m-hooks", false)
            .hooks(hooks)
            .dyn_tool(ok_tool("danger", move |_, _| {
                dc.fetch_add(1, Ordering::SeqCst);
                "ran anyway".into()
            }))
            .dyn_tool(DynTool::new("pay", "pays", json!({"type": "object"}), move |args, ctx| {
                pc.fetch_add(1, Ordering::SeqCst);
                let approved = ctx.answer().is_some_and(|a| a.ok);
                Ok(ToolOutcome::Done(json!(if approved {
                    format!("paid {}", args["to"].as_str().unwrap_or("?"))
                } else {
                    "unapproved".into()
                })))
            }))
            .dyn_tool(ok_tool("echo", |args, _| args["s"].as_str().unwrap_or("").to_string()))
            .wait_for(|req| Answer::ok(req.id, None))
            .on_metric(move |m| msink.lock().unwrap().push(m.clone()))
            .build()
            .unwrap();
        let r = d.client(cfg).run("do things").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.status, RunStatus::Done, "{ctx}");
        assert_eq!(outputs(&r), ["blocked by policy", "paid bob", "HI"], "{ctx}");
        assert_eq!(dangers.load(Ordering::SeqCst), 0, "{ctx}: a short-circuited tool never runs");
        assert_eq!(pays.load(Ordering::SeqCst), 1, "{ctx}: the real tool runs once, with the answer");
        let sent = fake.requests_for("m-hooks");
        assert_eq!(sent.len(), 2, "{ctx}");
        for (i, req) in sent.iter().enumerate() {
            assert_eq!(req.json.as_ref().unwrap()["x_hooked_turn"], json!(i + 1), "{ctx}");
        }
        // The suspension counts as pending, not as an error.
        let metrics = metrics.lock().unwrap();
        let pay: Vec<(bool, bool)> = metrics
            .iter()
            .filter_map(|m| match m {
                nexus_drive::Metric::Tool { name, is_error, pending, .. } if name == "pay" => {
                    Some((*is_error, *pending))
                }
                _ => None,
            })
            .collect();
        assert_eq!(pay, [(false, true), (false, false)], "{ctx}");
        assert!(metrics.iter().any(|m| matches!(m, nexus_drive::Metric::Run { status: "done", .. })), "{ctx}");

        // An aborting hook ends the run with its reason.
        let cfg = builder(&fake, style, "m-abort", false)
            .hooks(Hooks::new().after_model(|resp| {
                if resp.turn >= 1 {
                    Err(HookAbort("budget spent".into()))
                } else {
                    Ok(())
                }
            }))
            .dyn_tool(ok_tool("echo", |_, _| "x".into()))
            .build()
            .unwrap();
        let err = run_error(d.client(cfg).run("x"));
        assert_eq!(err, DriveError::Hook("budget spent".into()), "{ctx}");
        assert_eq!(fake.requests_for("m-abort").len(), 1, "{ctx}");
    }
}

fn conversation_and_run_stores_round_trip(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model("m-chat", script(vec![Turn::text("first answer"), Turn::text("second answer")]))
                .model(
                    "m-park",
                    script(vec![Turn::default().call("transfer", r#"{"amount":9}"#), Turn::text("parked and done")])
                        .expect_final(expect_results(1, &["sent 9"])),
                ),
        );
        let conversations = Arc::new(MemoryConversationStore::new());
        let cfg = builder(&fake, style, "m-chat", false).conversation_store(conversations.clone()).build().unwrap();
        let client = d.client(cfg);
        let one = client.ask("conv-1", "hello").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(one.text, "first answer", "{ctx}");
        // The second ask sends the first exchange along (the fake picks its
        // turn by the assistant messages it is sent).
        let two = client.ask("conv-1", "and again").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(two.text, "second answer", "{ctx}");
        use nexus_drive::ConversationStore;
        let stored = conversations.get("conv-1").unwrap().unwrap();
        assert_eq!(stored.len(), 4, "{ctx}");
        assert_eq!(stored, two.messages, "{ctx}");
        // Another id is another conversation.
        assert_eq!(client.ask("conv-2", "hello").unwrap().text, "first answer", "{ctx}");
        assert!(conversations.delete("conv-1").unwrap());

        // An ask that suspends saves nothing until it is resumed.
        let (t, a) = (counter(), counter());
        let cfg = transfer_tools(builder(&fake, style, "m-park", false), &t, &a)
            .conversation_store(conversations.clone())
            .build()
            .unwrap();
        let asker = d.client(cfg);
        let parked = asker.ask("conv-3", "pay").unwrap();
        assert_eq!(parked.status, RunStatus::Pending, "{ctx}");
        assert_eq!(conversations.get("conv-3").unwrap(), None, "{ctx}");
        let answer = Answer::ok(parked.pending[0].id.clone(), None);
        let state = parked.suspended.unwrap().state;
        let resumed = asker.resume_ask("conv-3", &state, vec![answer]).unwrap();
        assert_eq!(resumed.text, "parked and done", "{ctx}");
        // user prompt, the call, its result, the answer
        assert_eq!(resumed.messages.len(), 4, "{ctx}");
        assert_eq!(conversations.get("conv-3").unwrap(), Some(resumed.messages.clone()), "{ctx}");

        // A suspended run parked in a file store and finished by resume_stored.
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("nexus-drive-runs-{}-{style:?}-{d:?}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let runs = FileRunStore::open(&dir).unwrap();
        let (t, a) = (counter(), counter());
        let client = d.client(transfer_tools(builder(&fake, style, "m-park", false), &t, &a).build().unwrap());
        let r = client.run("pay").unwrap();
        let s = r.suspended.unwrap();
        assert_eq!(runs.save(&s.run_id, &s.state, None).unwrap(), 1);
        let answer = Answer::ok(s.pending[0].id.clone(), None);
        let done = client.resume_stored(&runs, &s.run_id, vec![answer]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.text, "parked and done", "{ctx}");
        assert_eq!(runs.load(&s.run_id).unwrap(), None, "{ctx}: a finished run leaves the store");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn a_stored_run_is_resumed_once(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model("m-once", script(vec![Turn::default().call("transfer", r#"{"amount":1}"#), Turn::text("once")])),
        );
        let (t, a) = (counter(), counter());
        let client = d.client(transfer_tools(builder(&fake, style, "m-once", false), &t, &a).build().unwrap());
        let s = client.run("pay").unwrap().suspended.unwrap();
        let runs = nexus_drive::MemoryRunStore::new();
        runs.save(&s.run_id, &s.state, None).unwrap();
        let answer = Answer::ok(s.pending[0].id.clone(), None);

        // A worker holds the claim: a second one is refused, nothing is sent.
        let claim = runs.claim(&s.run_id).unwrap();
        let sent = fake.requests().len();
        let err = client.resume_stored(&runs, &s.run_id, vec![answer.clone()]).unwrap_err();
        assert_eq!(err, DriveError::Store(StoreError::Claimed(s.run_id.clone())), "{ctx}");
        assert_eq!(fake.requests().len(), sent, "{ctx}");
        // The holder gives it back unchanged.
        runs.save(&s.run_id, &claim.state, Some(claim.version)).unwrap();

        // A wrong answer is refused and releases the claim, the run untouched.
        let err = client.resume_stored(&runs, &s.run_id, vec![Answer::ok("bogus", None)]).unwrap_err();
        assert!(matches!(err, DriveError::Input(_)), "{ctx}: {err:?}");
        let rec = runs.load(&s.run_id).unwrap().unwrap();
        assert!(!rec.claimed && rec.state == s.state, "{ctx}");

        let done =
            client.resume_stored(&runs, &s.run_id, vec![answer.clone()]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.text, "once", "{ctx}");
        // Resuming again finds nothing to resume.
        let again = client.resume_stored(&runs, &s.run_id, vec![answer]).unwrap_err();
        assert_eq!(again, DriveError::Store(StoreError::NotFound(s.run_id.clone())), "{ctx}");
        assert_eq!(t.load(Ordering::SeqCst), 2, "{ctx}: suspended once, run once with the answer");
    }
}

fn tool_failures_become_error_results(d: Drv) {
    #[derive(serde::Deserialize)]
    struct AddArgs {
        a: i64,
        b: i64,
    }
    struct TypedAdd;
    impl nexus_drive::Tool for TypedAdd {
        const NAME: &'static str = "typed_add";
        type Args = AddArgs;
        type Output = i64;
        fn description(&self) -> String {
            "adds".into()
        }
        fn input_schema(&self) -> Option<Value> {
            Some(json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}))
        }
        fn call(&self, args: AddArgs, _ctx: &ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
            Ok((args.a + args.b).into())
        }
    }
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY).model(
                "m-fail",
                script(vec![
                    Turn::default()
                        .call("boom", "{}")
                        .call("typed_add", r#"{"a":"x","b":1}"#)
                        .call("sleepy", "{}")
                        .call("nonexistent", "{}")
                        .call("typed_add", r#"{"a":40,"b":2}"#),
                    Turn::text("handled"),
                ])
                .expect_final(expect_results(5, &["kaboom", "42"])),
            ),
        );
        let cfg = builder(&fake, style, "m-fail", false)
            .dyn_tool(DynTool::new("boom", "panics", json!({"type": "object"}), |_, _| panic!("kaboom")))
            .tool(TypedAdd)
            .dyn_tool(
                DynTool::new("sleepy", "sleeps", json!({"type": "object"}), |_, _| {
                    std::thread::sleep(Duration::from_millis(1_500));
                    Ok(ToolOutcome::Done(json!("woke")))
                })
                .timeout(Duration::from_millis(100)),
            )
            .build()
            .unwrap();
        let r = d.client(cfg).run("break things").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.status, RunStatus::Done, "{ctx}");
        assert_eq!(r.text, "handled", "{ctx}");
        let calls = &r.tool_calls;
        assert_eq!(calls.len(), 5, "{ctx}");
        assert!(calls[0].is_error && calls[0].output.contains("kaboom"), "{ctx}: {:?}", calls[0]);
        assert!(
            calls[1].is_error && calls[1].output.starts_with("invalid arguments for typed_add"),
            "{ctx}: {:?}",
            calls[1]
        );
        assert!(calls[2].is_error && calls[2].output.contains("timed out"), "{ctx}: {:?}", calls[2]);
        assert!(calls[3].is_error && calls[3].output == "Unknown tool: nonexistent", "{ctx}: {:?}", calls[3]);
        assert!(!calls[4].is_error && calls[4].output == "42", "{ctx}: {:?}", calls[4]);
    }
}

/// A call with a timeout whose reply comes late must time out even while a
/// call of the same batch without one is still running: nothing may leave
/// the limit unwatched (say, by running that other call on the driver's own
/// thread) and then take the late reply as if it were on time.
fn a_timeout_is_kept_while_another_call_of_the_batch_runs(d: Drv) {
    let style = Style::OpenAi;
    let fake = FakeProvider::start(
        Scripts::new(KEY).model(
            "m-limit",
            script(vec![Turn::default().call("limited", "{}").call("unlimited", "{}"), Turn::text("handled")])
                .expect_final(expect_results(2, &["timed out", "finished"])),
        ),
    );
    let cfg = builder(&fake, style, "m-limit", false)
        .dyn_tool(
            ok_tool("limited", |_, _| {
                std::thread::sleep(Duration::from_millis(300));
                "came back late".into()
            })
            .timeout(Duration::from_millis(100)),
        )
        .dyn_tool(ok_tool("unlimited", |_, _| {
            std::thread::sleep(Duration::from_millis(900));
            "finished".into()
        }))
        .build()
        .unwrap();
    let r = d.client(cfg).run("go").unwrap_or_else(|e| panic!("{d:?}: {e}"));
    let results: Vec<(bool, &str)> = r.tool_calls.iter().map(|c| (c.is_error, c.output.as_str())).collect();
    assert_eq!(results, [(true, "tool limited timed out after 100 ms"), (false, "finished")], "{d:?}");
    assert!(fake.failures().is_empty(), "{d:?}: {:?}", fake.failures());
}

fn streaming_and_whole_responses_give_the_same_transcript(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let turns = || {
            script(vec![
                Turn::default()
                    .with_text("Let me add that — un instant.")
                    .call("add", r#"{"a":20,"b":22}"#)
                    .usage(30, 12),
                Turn::text("The sum is 42. Grüße!").usage(45, 8),
            ])
            .expect_final(expect_results(1, &["42"]))
        };
        // Two servers with one script: call ids derive from the model and turn,
        // so both runs see the same ids.
        let fake_whole = FakeProvider::start(Scripts::new(KEY).model("m-same", turns()));
        let fake_stream = FakeProvider::start(Scripts::new(KEY).model("m-same", turns()));
        let (t, a) = (counter(), counter());
        let whole = d
            .client(transfer_tools(builder(&fake_whole, style, "m-same", false), &t, &a).build().unwrap())
            .run("add 20 and 22")
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let streamed_client =
            d.client(transfer_tools(builder(&fake_stream, style, "m-same", true), &t, &a).build().unwrap());
        let (events, streamed) = streamed_client.stream("add 20 and 22");
        let streamed = streamed.unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(whole.status, RunStatus::Done, "{ctx}");
        assert_eq!(streamed.messages, whole.messages, "{ctx}: same transcript");
        assert_eq!(streamed.text, "The sum is 42. Grüße!", "{ctx}");
        assert_eq!((streamed.usage, streamed.turns), (whole.usage, whole.turns), "{ctx}");
        assert_eq!(whole.usage.prompt_tokens, 75, "{ctx}");
        assert_eq!(whole.usage.completion_tokens, 20, "{ctx}");
        assert_eq!(streamed.stop_reason, Some(nexus_drive::StopReason::EndTurn), "{ctx}");
        // The events tell the same story: the text pieces join to the turns' text.
        let text = shown_text(&events);
        assert_eq!(text, "Let me add that — un instant.The sum is 42. Grüße!", "{ctx}");
        let kinds: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::TurnStarted { .. } => Some("turn"),
                StreamEvent::ToolCallFinished { .. } => Some("call"),
                StreamEvent::ToolResult { .. } => Some("result"),
                StreamEvent::TurnFinished { .. } => Some("finished"),
                _ => None,
            })
            .collect();
        assert_eq!(kinds, ["turn", "call", "finished", "result", "turn", "finished"], "{ctx}");
    }
}

fn connections_are_kept_alive_across_turns(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(Scripts::new(KEY).model(
            "m-keep",
            script(vec![
                Turn::default().call("add", r#"{"a":1,"b":1}"#),
                Turn::default().call("add", r#"{"a":2,"b":2}"#),
                Turn::text("kept"),
            ]),
        ));
        let (t, a) = (counter(), counter());
        let client = d.client(transfer_tools(builder(&fake, style, "m-keep", false), &t, &a).build().unwrap());
        assert_eq!(client.run("go").unwrap().text, "kept", "{ctx}");
        let conns: Vec<u64> = fake.requests_for("m-keep").iter().map(|r| r.connection).collect();
        assert_eq!(conns.len(), 3, "{ctx}");
        assert!(conns.iter().all(|c| *c == conns[0]), "{ctx}: one connection for the whole run: {conns:?}");
    }
}

fn async_tools_run_in_both_drivers(d: Drv) {
    #[derive(serde::Deserialize)]
    struct Pair {
        a: i64,
        b: i64,
    }
    struct AsyncAdd;
    impl nexus_drive::AsyncTool for AsyncAdd {
        const NAME: &'static str = "async_add";
        type Args = Pair;
        type Output = i64;
        fn description(&self) -> String {
            "adds, after a while".into()
        }
        fn input_schema(&self) -> Option<Value> {
            Some(json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}))
        }
        async fn call(&self, args: Pair, ctx: ToolContext) -> Result<ToolOutcome<i64>, ToolError> {
            smol::Timer::after(Duration::from_millis(10)).await;
            assert!(ctx.idempotency_key().ends_with(ctx.call_id()));
            Ok((args.a + args.b).into())
        }
    }
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY).model(
                "m-async",
                script(vec![
                    Turn::default()
                        .call("async_add", r#"{"a":1,"b":2}"#)
                        .call("later", r#"{"word":"ok"}"#)
                        .call("async_add", r#"{"a":"one"}"#),
                    Turn::text("async done"),
                ])
                .expect_final(expect_results(3, &["later ok"])),
            ),
        );
        let cfg = builder(&fake, style, "m-async", false)
            .async_tool(AsyncAdd)
            .dyn_tool(DynTool::new_async(
                "later",
                "answers later",
                json!({"type": "object"}),
                |args, _ctx| async move {
                    smol::Timer::after(Duration::from_millis(10)).await;
                    Ok(ToolOutcome::Done(json!(format!("later {}", args["word"].as_str().unwrap_or("?")))))
                },
            ))
            .build()
            .unwrap();
        let r = d.client(cfg).run("add later").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.text, "async done", "{ctx}");
        assert_eq!(outputs(&r)[..2], ["3", "later ok"], "{ctx}");
        assert!(
            r.tool_calls[2].is_error && r.tool_calls[2].output.starts_with("invalid arguments for async_add"),
            "{ctx}: {:?}",
            r.tool_calls[2]
        );
    }
}

/// `blocking::Client::with_config`: a run with other tools on the same
/// client's pool goes out over the connection the first run left open.
#[test]
fn a_client_with_another_config_shares_the_connection_pool() {
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model("m-shared", script(vec![Turn::default().call("echo", r#"{"word":"hi"}"#), Turn::text("shared")])),
    );
    let base = nexus_drive::blocking::Client::new(builder(&fake, Style::OpenAi, "m-shared", false).build().unwrap());
    let echo = DynTool::new("echo", "echoes", json!({"type": "object"}), |args, _ctx| {
        Ok(ToolOutcome::Done(args["word"].clone()))
    });
    let with_tool = base.with_config(builder(&fake, Style::OpenAi, "m-shared", false).dyn_tool(echo).build().unwrap());
    assert!(base.config().toolbox().is_empty());
    let r = with_tool.run("go").unwrap();
    assert_eq!((r.text.as_str(), r.tool_calls[0].output.as_str()), ("shared", "hi"));
    let again = base.with_config(base.config().clone()).run("go").unwrap();
    assert!(again.tool_calls[0].is_error, "the base config has no echo tool: {:?}", again.tool_calls);
    let conns: Vec<u64> = fake.requests_for("m-shared").iter().map(|r| r.connection).collect();
    assert_eq!(conns.len(), 4);
    assert!(conns.iter().all(|c| *c == conns[0]), "one connection for both clients: {conns:?}");
}
