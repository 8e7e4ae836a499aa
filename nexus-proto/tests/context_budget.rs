//! The context budget in memory: long tool loops under a small window
//! compact as recorded steps, never send an over-long request, keep every
//! view balanced, and survive a snapshot in the middle.

mod sim;

use nexus_proto::context::{ContextPolicy, DEFAULT_COMPACTION_INSTRUCTION, SUMMARY_PREFIX};
use nexus_proto::{
    check_transcript, Input, Message, Outcome, Output, Role, Run, RunConfig, RunError, StreamEvent, Style, Timestamp,
    ToolDecl, ToolReply, ToolResult,
};
use proptest::prelude::*;
use serde_json::{json, Value};
use sim::{wire_n, Turn};

const NOW: Timestamp = Timestamp(1_000);

fn tools() -> Vec<ToolDecl> {
    vec![ToolDecl::new("read_file", "Reads a file", json!({"type":"object","properties":{"path":{"type":"string"}}}))]
}

fn policy(window: u64) -> ContextPolicy {
    let mut p = ContextPolicy::default();
    p.windows.insert(0, window);
    p.margin_tokens = 100;
    p.max_tool_result_bytes = Some(4096);
    p
}

fn config(style: Style, stream: bool, window: u64) -> RunConfig {
    let mut c = sim::config(style, stream);
    c.max_tokens = Some(200);
    c.max_turns = 100;
    c.context = Some(policy(window));
    c
}

fn is_compaction(body: &[u8]) -> bool {
    let needle = &DEFAULT_COMPACTION_INSTRUCTION[..40];
    String::from_utf8_lossy(body).contains(needle)
}

/// A file of `n` bytes whose text names it.
fn file(path: &str, n: usize) -> String {
    let line = format!("// {path}: fn step() {{ let x = compute(42); assert!(x > 0); }}\n");
    let mut s = line.repeat(n / line.len() + 1);
    s.truncate(n);
    s
}

/// Turn `n` of a `turns`-turn task: read `src/f{n}.rs`, then (last) report.
fn read_turn(n: usize, turns: usize) -> Turn {
    if n + 1 < turns {
        let id = format!("call_{n}");
        let args = format!(r#"{{"path":"src/f{n}.rs"}}"#);
        Turn::calls(&[(id.as_str(), "read_file", args.as_str())])
    } else {
        Turn::text("all files read")
    }
}

/// What happened in one driven run.
#[derive(Default)]
struct Log {
    main_bodies: Vec<Vec<u8>>,
    compaction_bodies: Vec<Vec<u8>>,
    events: Vec<StreamEvent>,
}

/// Drives `run` against a scripted model of `turns` turns that each read
/// one file of `size(turn)` bytes, then answers. The model's turn is counted
/// here (a compacted request holds fewer assistant turns than were made).
/// Stops once `stop_after` main requests were answered and their tools run,
/// when given (to snapshot there, before the next request is built).
fn drive(
    run: &mut Run,
    turns: usize,
    next: &mut usize,
    size: &dyn Fn(usize) -> usize,
    log: &mut Log,
    stop_after: Option<usize>,
) -> Option<Outcome> {
    for _ in 0..100_000 {
        // A run that failed over speaks its current upstream's format.
        let style = run.upstream().style;
        match run.poll_output() {
            Output::Send(req) => {
                let (turn, n) = if is_compaction(&req.body) {
                    log.compaction_bodies.push(req.body.clone());
                    let k = log.compaction_bodies.len();
                    (Turn::text(&format!("Summary {k}: files were read, the work goes on.")), 1000 + k)
                } else {
                    log.main_bodies.push(req.body.clone());
                    let n = *next;
                    *next += 1;
                    (read_turn(n, turns), n)
                };
                let bytes = wire_n(style, &turn, req.streaming, n);
                let ct = if req.streaming { "text/event-stream" } else { "application/json" };
                let ex = req.exchange;
                let head = Input::ResponseHead {
                    exchange: ex,
                    status: 200,
                    headers: vec![("content-type".into(), ct.into())],
                };
                run.handle_input(NOW, head).unwrap();
                run.handle_input(NOW, Input::ResponseBody { exchange: ex, chunk: &bytes }).unwrap();
                run.handle_input(NOW, Input::ResponseEnd { exchange: ex }).unwrap();
            }
            Output::RunTools(batch) => {
                for inv in batch.calls {
                    // The path names the turn (Gemini sends no call ids of its own).
                    let path = inv.input["path"].as_str().unwrap_or("?").to_string();
                    let n: usize = path.trim_start_matches("src/f").trim_end_matches(".rs").parse().unwrap_or(0);
                    let reply = ToolReply::Done(ToolResult::ok(file(&path, size(n))));
                    run.handle_input(NOW, Input::ToolReply { call_id: inv.call_id, reply }).unwrap();
                }
                if stop_after.is_some_and(|n| log.main_bodies.len() >= n) {
                    return None;
                }
            }
            Output::Event(e) => log.events.push(e),
            Output::Suspended(r) => panic!("no suspension expected: {r:?}"),
            Output::Wait { until } => panic!("nothing to wait for: {until:?}"),
            Output::Done(o) => return Some(o),
        }
    }
    panic!("no progress")
}

/// The gate's check on `messages` as the request before the final answer
/// carried them (a finished run's transcript ends on that answer).
fn balanced(style: Style, messages: &[Message]) -> Result<(), String> {
    let upto = match messages.last() {
        Some(m) if m.role == Role::Assistant => messages.len() - 1,
        _ => messages.len(),
    };
    check_transcript(style, &messages[..upto]).map_err(|e| e.to_string())
}

#[test]
fn a_long_coding_run_compacts_under_a_small_window_on_every_style() {
    for style in [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses] {
        for stream in [false, true] {
            let window = 6_000;
            let mut run =
                Run::new(config(style, stream, window), tools(), vec![Message::user("Read every file.")]).unwrap();
            let (mut log, mut next) = (Log::default(), 0);
            let size = |n: usize| if n == 7 { 40_000 } else { 2_500 };
            let outcome = drive(&mut run, 40, &mut next, &size, &mut log, None);
            assert_eq!(outcome, Some(Outcome::Done), "{style:?} stream={stream}");
            let limit = window - 200 - 100;
            for body in &log.main_bodies {
                assert!((body.len() as u64).div_ceil(4) <= limit, "{style:?}: a request of {} bytes", body.len());
            }
            for body in &log.compaction_bodies {
                assert!((body.len() as u64).div_ceil(4) <= limit, "{style:?}: a compaction of {} bytes", body.len());
            }
            let compactions = run.compactions().to_vec();
            assert!(compactions.len() >= 2, "{style:?}: {} compactions", compactions.len());
            assert_eq!(log.compaction_bodies.len(), compactions.len());
            let events: Vec<_> = log.events.iter().filter(|e| matches!(e, StreamEvent::Compaction { .. })).collect();
            assert_eq!(events.len(), compactions.len());
            for c in &compactions {
                assert!(c.tokens_after < c.tokens_before, "{c:?}");
                assert!(c.turns_replaced >= 1);
                assert_eq!(run.transcript()[c.upto].role, Role::Assistant, "cuts fall before an assistant turn");
            }
            // Compaction requests never stream and count in the run's usage.
            let summary_usage: u64 = compactions.iter().map(|c| c.usage.total_tokens).sum();
            assert!(summary_usage > 0 && run.usage().total_tokens > summary_usage);
            // The canonical transcript is whole: every result, uncut.
            let results: Vec<_> = run.transcript().iter().flat_map(|m| m.tool_results()).collect();
            assert_eq!(results.len(), 39);
            assert_eq!(results[7].output.len(), 40_000, "the full result stays in the transcript");
            balanced(style, run.transcript()).unwrap();
            balanced(style, &run.model_view()).unwrap();
            let view = run.model_view();
            assert!(view[0].text().starts_with(SUMMARY_PREFIX));
            // The capped result shows its marker in the request that carried it.
            let carried = log.main_bodies.iter().any(|b| String::from_utf8_lossy(b).contains("bytes omitted"));
            assert!(carried, "{style:?}: the 40 KB result went out capped");
            assert_eq!(run.tool_calls().len(), 39);
        }
    }
}

#[test]
fn a_compacted_run_snapshots_and_resumes_to_the_same_requests() {
    for style in [Style::Anthropic, Style::Gemini, Style::OpenAiResponses] {
        let size = |_: usize| 2_500;
        let mk = || Run::new(config(style, false, 6_000), tools(), vec![Message::user("Read every file.")]).unwrap();
        let mut whole = mk();
        let (mut log_whole, mut n1) = (Log::default(), 0);
        assert_eq!(drive(&mut whole, 30, &mut n1, &size, &mut log_whole, None), Some(Outcome::Done));

        let mut first = mk();
        let (mut log, mut n2) = (Log::default(), 0);
        assert_eq!(drive(&mut first, 30, &mut n2, &size, &mut log, Some(17)), None);
        assert!(!first.compactions().is_empty(), "{style:?}: compacted before the snapshot");
        let bytes = first.snapshot();
        let mut resumed = Run::restore(&bytes).unwrap();
        assert!(Run::restore(&bytes).unwrap().snapshot() == bytes, "the state round-trips byte for byte");
        assert_eq!(drive(&mut resumed, 30, &mut n2, &size, &mut log, None), Some(Outcome::Done));
        let text = |b: &[Vec<u8>]| b.iter().map(|x| String::from_utf8_lossy(x).into_owned()).collect::<Vec<_>>();
        assert!(
            text(&log.main_bodies) == text(&log_whole.main_bodies),
            "{style:?}: the resumed run sends the same bytes"
        );
        assert!(text(&log.compaction_bodies) == text(&log_whole.compaction_bodies));
        assert_eq!(resumed.compactions(), whole.compactions());
        assert_eq!(resumed.transcript(), whole.transcript());
    }
}

#[test]
fn one_message_bigger_than_the_window_is_context_exhausted_and_nothing_is_sent() {
    let mut cfg = config(Style::Anthropic, false, 2_000);
    cfg.context.as_mut().unwrap().max_tool_result_bytes = None;
    let huge = "x".repeat(40_000);
    let mut run = Run::new(cfg, tools(), vec![Message::user(huge)]).unwrap();
    loop {
        match run.poll_output() {
            Output::Event(_) => {}
            Output::Done(Outcome::Failed { error: RunError::ContextExhausted { estimate, limit, biggest } }) => {
                assert!(estimate > limit);
                assert_eq!(biggest[0].index, Some(0));
                assert_eq!(biggest[0].what, "user text");
                assert!(biggest[0].tokens >= 10_000);
                break;
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_too_long_refusal_teaches_the_window_and_the_run_compacts_instead_of_failing() {
    let mut cfg = config(Style::Anthropic, false, 6_000);
    cfg.context.as_mut().unwrap().windows.clear(); // the table says 200K for claude-
    cfg.model = "claude-sonnet-4-5".into();
    let mut run = Run::new(cfg, tools(), vec![Message::user("Read every file.")]).unwrap();
    assert_eq!(run.context_window(0), Some(200_000));
    let (mut log, mut next) = (Log::default(), 0);
    // Three turns of 2.5 KB results, then the provider refuses the fourth request.
    assert_eq!(drive(&mut run, 30, &mut next, &|_| 2_500, &mut log, Some(3)), None);
    let req = loop {
        match run.poll_output() {
            Output::Send(req) => break req,
            Output::Event(_) => {}
            other => panic!("{other:?}"),
        }
    };
    let body = br#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 2600 tokens > 2500 maximum"},"request_id":"req_1"}"#;
    let ex = req.exchange;
    let head = Input::ResponseHead {
        exchange: ex,
        status: 400,
        headers: vec![("content-type".into(), "application/json".into())],
    };
    run.handle_input(NOW, head).unwrap();
    run.handle_input(NOW, Input::ResponseBody { exchange: ex, chunk: body }).unwrap();
    run.handle_input(NOW, Input::ResponseEnd { exchange: ex }).unwrap();
    assert_eq!(run.context_window(0), Some(2_500), "learned and recorded");
    let state: Value = serde_json::from_slice(&run.snapshot()).unwrap();
    assert_eq!(state["context"]["learned"]["0"], 2_500);
    let next_req = loop {
        match run.poll_output() {
            Output::Send(req) => break req,
            Output::Event(_) => {}
            other => panic!("{other:?}"),
        }
    };
    assert!(is_compaction(&next_req.body), "the run compacts instead of failing");
}

#[test]
fn runs_without_a_policy_send_the_transcript_as_before() {
    let mut with = config(Style::OpenAi, false, 1_000_000);
    with.context.as_mut().unwrap().max_tool_result_bytes = None;
    let mut without = with.clone();
    without.context = None;
    let bodies = |cfg: RunConfig| {
        let mut run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
        let (mut log, mut next) = (Log::default(), 0);
        drive(&mut run, 5, &mut next, &|_| 10_000, &mut log, None);
        (log.main_bodies, run.snapshot())
    };
    let (a, state_a) = bodies(with);
    let (b, state_b) = bodies(without);
    assert!(a == b, "a budget far from its limit changes no byte of a request");
    let state_b: Value = serde_json::from_slice(&state_b).unwrap();
    assert!(state_b.get("context").is_none() && state_b["config"].get("context").is_none());
    let state_a: Value = serde_json::from_slice(&state_a).unwrap();
    assert!(state_a["config"]["context"]["windows"]["0"] == 1_000_000);
}

#[test]
fn anthropic_context_editing_is_sent_with_its_beta_header_when_asked() {
    let mut cfg = config(Style::Anthropic, false, 100_000);
    cfg.context.as_mut().unwrap().anthropic_clear_tool_uses =
        Some(nexus_proto::ClearToolUses { trigger_tokens: 30_000, keep_tool_uses: 3, clear_at_least: Some(5_000) });
    let mut run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
    let req = loop {
        match run.poll_output() {
            Output::Send(req) => break req,
            Output::Event(_) => {}
            other => panic!("{other:?}"),
        }
    };
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(
        body["context_management"],
        json!({"edits": [{"type": "clear_tool_uses_20250919",
            "trigger": {"type": "input_tokens", "value": 30_000},
            "keep": {"type": "tool_uses", "value": 3},
            "clear_at_least": {"type": "input_tokens", "value": 5_000}}]})
    );
    let beta = req.headers.iter().find(|(k, _)| k == "anthropic-beta").map(|(_, v)| v.as_str());
    assert_eq!(beta, Some("context-management-2025-06-27"));
}

/// The next request the run sends (events skipped).
fn next_send(run: &mut Run) -> nexus_proto::HttpRequest {
    loop {
        match run.poll_output() {
            Output::Send(req) => return req,
            Output::Event(_) => {}
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn responses_server_compaction_is_asked_kept_recorded_and_sent_back_after_a_restore() {
    for stream in [false, true] {
        let mut cfg = config(Style::OpenAiResponses, stream, 100_000);
        cfg.context.as_mut().unwrap().responses_compaction =
            Some(nexus_proto::ResponsesCompaction { compact_threshold: 2_000 });
        let mut run = Run::new(cfg, tools(), vec![Message::user("go")]).unwrap();
        let req = next_send(&mut run);
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        assert_eq!(body["context_management"], json!([{"type": "compaction", "compact_threshold": 2_000}]));

        // The API compacted: its opaque item comes first, then the call.
        let compaction = json!({"id": "cmp_1", "type": "compaction", "encrypted_content": "gAAAAA-opaque==",
                                "created_by": "server"});
        let call = json!({"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1",
                          "name": "read_file", "arguments": "{\"path\":\"a.rs\"}"});
        let usage = json!({"input_tokens": 2_100, "output_tokens": 9, "total_tokens": 2_109});
        let whole = json!({"id": "resp_1", "object": "response", "status": "completed", "model": "m",
                           "output": [compaction, call], "usage": usage});
        let bytes = if stream {
            let mut sse = String::new();
            let mut ev =
                |data: Value| sse.push_str(&format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap()));
            ev(
                json!({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
            );
            ev(
                json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": compaction}),
            );
            ev(
                json!({"type": "response.compaction.compacting", "sequence_number": 2, "output_index": 0, "item_id": "cmp_1"}),
            );
            ev(
                json!({"type": "response.output_item.done", "sequence_number": 3, "output_index": 0, "item": compaction}),
            );
            ev(json!({"type": "response.output_item.added", "sequence_number": 4, "output_index": 1, "item": call}));
            ev(json!({"type": "response.output_item.done", "sequence_number": 5, "output_index": 1, "item": call}));
            ev(json!({"type": "response.completed", "sequence_number": 6, "response": whole}));
            sse.into_bytes()
        } else {
            whole.to_string().into_bytes()
        };
        let ct = if stream { "text/event-stream" } else { "application/json" };
        let ex = req.exchange;
        let head = Input::ResponseHead { exchange: ex, status: 200, headers: vec![("content-type".into(), ct.into())] };
        run.handle_input(NOW, head).unwrap();
        run.handle_input(NOW, Input::ResponseBody { exchange: ex, chunk: &bytes }).unwrap();
        run.handle_input(NOW, Input::ResponseEnd { exchange: ex }).unwrap();
        let batch = loop {
            match run.poll_output() {
                Output::RunTools(batch) => break batch,
                Output::Event(_) => {}
                other => panic!("stream={stream}: {other:?}"),
            }
        };
        assert_eq!(batch.calls.len(), 1, "stream={stream}: the call still runs");
        let call_id = batch.calls[0].call_id.clone();
        run.handle_input(NOW, Input::ToolReply { call_id, reply: ToolReply::Done(ToolResult::ok("fn a() {}")) })
            .unwrap();
        assert_eq!(run.provider_compactions().len(), 1, "stream={stream}");
        assert_eq!(run.provider_compactions()[0].turn, 1);
        assert_eq!(run.provider_compactions()[0].id, "cmp_1");

        // Recorded in the state; a restored run sends the item back in its place.
        let state = run.snapshot();
        let v: Value = serde_json::from_slice(&state).unwrap();
        assert_eq!(
            v["context"]["providerCompactions"],
            json!([{"turn": 1, "upstream": 0, "style": "openai-responses", "id": "cmp_1"}])
        );
        if !stream {
            // The committed fixture of this state (a run with a provider's compaction on record).
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/state/v3-openai-responses-server-compaction-context.json");
            if std::env::var("NEXUS_WRITE_STATE_FIXTURES").is_ok() {
                std::fs::write(&path, &state).unwrap();
            }
            let stored = std::fs::read(&path).unwrap();
            assert!(stored == state, "this build writes the fixture");
        }
        let mut restored = Run::restore(&state).unwrap();
        assert!(restored.snapshot() == state, "round trip");
        let body: Value = serde_json::from_slice(&next_send(&mut restored).body).unwrap();
        let kinds: Vec<&str> = body["input"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["message", "compaction", "function_call", "function_call_output"], "stream={stream}");
        assert_eq!(
            body["input"][1],
            json!({"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAAA-opaque=="}),
            "stream={stream}: the input form, without what the API adds on output"
        );
        assert_eq!(body["context_management"][0]["compact_threshold"], 2_000);
    }
}

/// Drives a read loop of `turns` turns of 2 KB results where every token
/// count is answered by `counter` (status, body); returns the count
/// requests' URLs and bodies, the compactions, and the outcome.
fn drive_counted(
    style: Style,
    turns: usize,
    counter: &dyn Fn() -> (u16, String),
) -> (Vec<(String, Value)>, usize, Outcome, Run) {
    let mut cfg = config(style, false, 6_000);
    cfg.context.as_mut().unwrap().count_margin = Some(0.5);
    let mut run = Run::new(cfg, tools(), vec![Message::user("Read every file.")]).unwrap();
    let (mut counts, mut compactions, mut next) = (Vec::new(), 0, 0);
    for _ in 0..10_000 {
        match run.poll_output() {
            Output::Send(req) => {
                let (status, bytes) = if req.url.contains("count_tokens") || req.url.contains("countTokens") {
                    counts.push((req.url.clone(), serde_json::from_slice(&req.body).unwrap()));
                    let (status, body) = counter();
                    (status, body.into_bytes())
                } else if is_compaction(&req.body) {
                    compactions += 1;
                    (200, wire_n(style, &Turn::text("Summary: files were read."), false, 1000 + compactions))
                } else {
                    let n = next;
                    next += 1;
                    (200, wire_n(style, &read_turn(n, turns), false, n))
                };
                let ex = req.exchange;
                if status == 0 {
                    // The connection to the counter failed.
                    let kind = nexus_proto::TransportErrorKind::Io;
                    run.handle_input(NOW, Input::TransportError { exchange: ex, kind, message: "reset".into() })
                        .unwrap();
                    continue;
                }
                let head = Input::ResponseHead {
                    exchange: ex,
                    status,
                    headers: vec![("content-type".into(), "application/json".into())],
                };
                run.handle_input(NOW, head).unwrap();
                run.handle_input(NOW, Input::ResponseBody { exchange: ex, chunk: &bytes }).unwrap();
                run.handle_input(NOW, Input::ResponseEnd { exchange: ex }).unwrap();
            }
            Output::RunTools(batch) => {
                for inv in batch.calls {
                    let path = inv.input["path"].as_str().unwrap_or("?").to_string();
                    let reply = ToolReply::Done(ToolResult::ok(file(&path, 2_000)));
                    run.handle_input(NOW, Input::ToolReply { call_id: inv.call_id, reply }).unwrap();
                }
            }
            Output::Event(_) => {}
            Output::Done(o) => return (counts, compactions, o, run),
            other => panic!("{other:?}"),
        }
    }
    panic!("no progress")
}

#[test]
fn a_token_count_near_the_trigger_decides_instead_of_the_estimate() {
    // Without counting, this loop compacts.
    let (_, baseline, outcome, _) = drive_counted(Style::Anthropic, 12, &|| (200, String::new()));
    assert_eq!(outcome, Outcome::Done);
    assert!(baseline >= 1, "the estimate alone compacts");

    // A counter that says the requests are small: no compaction at all.
    let (counts, compactions, outcome, run) =
        drive_counted(Style::Anthropic, 12, &|| (200, r#"{"input_tokens":100}"#.to_string()));
    assert_eq!(outcome, Outcome::Done);
    assert!(!counts.is_empty(), "counted near the trigger");
    assert_eq!(compactions, 0, "the count, not the estimate, decided");
    for (url, body) in &counts {
        assert_eq!(url, "http://127.0.0.1:1/v1/messages/count_tokens");
        assert!(body.get("max_tokens").is_none() && body["messages"].is_array(), "{body}");
    }
    assert_eq!(run.token_counts().len(), counts.len());
    assert!(run.token_counts().iter().all(|c| c.tokens == Some(100) && c.estimate > 100));
    let state: Value = serde_json::from_slice(&run.snapshot()).unwrap();
    assert_eq!(state["context"]["tokenCounts"].as_array().map(Vec::len), Some(counts.len()));

    // A counter that says they are huge: a compaction right after the first count.
    let (counts, compactions, outcome, _) =
        drive_counted(Style::Anthropic, 12, &|| (200, r#"{"input_tokens":5800}"#.to_string()));
    assert!(matches!(outcome, Outcome::Done | Outcome::Failed { .. }));
    assert!(compactions >= 1 && !counts.is_empty());

    // A counter that fails: the estimate stands, the run goes on as without one.
    let refusal = r#"{"type":"error","error":{"type":"api_error","message":"down"}}"#;
    let (counts, compactions, outcome, run) = drive_counted(Style::Anthropic, 12, &|| (500, refusal.to_string()));
    assert_eq!(outcome, Outcome::Done);
    assert!(!counts.is_empty());
    assert_eq!(compactions, baseline);
    assert!(run.token_counts().iter().all(|c| c.tokens.is_none()));
    // Nor does one it cannot reach: no retry, no failover, no failure.
    let (counts, compactions, outcome, run) = drive_counted(Style::Anthropic, 12, &|| (0, String::new()));
    assert_eq!(outcome, Outcome::Done);
    assert_eq!(compactions, baseline);
    assert_eq!(run.token_counts().len(), counts.len(), "one try per count");
    assert!(run.failovers().is_empty());

    // Gemini asks :countTokens with a generateContentRequest; Chat Completions has no counter.
    let (counts, _, _, _) = drive_counted(Style::Gemini, 12, &|| (200, r#"{"totalTokens":100}"#.to_string()));
    assert!(counts.iter().all(|(url, body)| url.ends_with(":countTokens")
        && body["generateContentRequest"]["model"].as_str().is_some_and(|m| m.starts_with("models/"))));
    assert!(!counts.is_empty());
    let (counts, compactions, outcome, _) = drive_counted(Style::OpenAi, 12, &|| panic!("no counter"));
    assert!(counts.is_empty() && compactions >= 1 && outcome == Outcome::Done);
}

/// Drives one turn whose model requests all fail with a 500 while every
/// token count is answered, restarting the process (snapshot → restore) once
/// while the first model request is in flight. Returns how many model
/// requests and counts went out, the `turn_started` events, and the outcome.
fn drive_failing_upstream_with_counts(retries: u32) -> (usize, usize, usize, Outcome) {
    let mut cfg = config(Style::Anthropic, false, 6_000);
    cfg.retry.retries = retries;
    // Every request within twice the trigger is counted first: each retry too.
    cfg.context.as_mut().unwrap().count_margin = Some(1.0);
    let mut run = Run::new(cfg, tools(), vec![Message::user("Read every file.")]).unwrap();
    let (mut sends, mut counts, mut started, mut now, mut restarted) = (0, 0, 0, NOW, false);
    let mut open = None;
    for _ in 0..1_000 {
        match run.poll_output() {
            Output::Send(req) => {
                let count = req.url.ends_with("/count_tokens");
                if count {
                    counts += 1;
                } else {
                    sends += 1;
                }
                open = Some((req.exchange, count));
            }
            Output::Event(StreamEvent::TurnStarted { .. }) => started += 1,
            Output::Event(_) => {}
            Output::Wait { until: None } => {
                let (ex, count) = open.take().expect("a run waits on its request");
                if !count && !restarted {
                    // The process ends with the request in flight; another one takes over.
                    restarted = true;
                    run = Run::restore(&run.snapshot()).unwrap();
                    continue;
                }
                let (status, body) = match count {
                    true => (200, r#"{"input_tokens":120}"#),
                    false => (500, r#"{"type":"error","error":{"type":"api_error","message":"down"}}"#),
                };
                let head = Input::ResponseHead {
                    exchange: ex,
                    status,
                    headers: vec![("content-type".into(), "application/json".into())],
                };
                run.handle_input(now, head).unwrap();
                run.handle_input(now, Input::ResponseBody { exchange: ex, chunk: body.as_bytes() }).unwrap();
                run.handle_input(now, Input::ResponseEnd { exchange: ex }).unwrap();
            }
            Output::Wait { until: Some(t) } => {
                now = Timestamp(now.0.max(t.0));
                run.handle_input(now, Input::Timeout).unwrap();
            }
            Output::Done(o) => return (sends, counts, started, o),
            other => panic!("{other:?}"),
        }
    }
    panic!("no end after 1,000 outputs: a count gave the retries back")
}

#[test]
fn a_count_between_retries_gives_no_retry_back_and_a_turn_is_announced_once() {
    for retries in [0, 1, 3] {
        let (sends, counts, started, outcome) = drive_failing_upstream_with_counts(retries);
        assert!(matches!(outcome, Outcome::Failed { .. }), "{outcome:?}");
        // The first request, sent again after the restart, then one per retry.
        assert_eq!(sends, retries as usize + 2, "retries: {retries}");
        assert_eq!(counts, sends, "each request built was counted first");
        assert_eq!(started, 1, "turn 1 announced once, across retries and the restart");
    }
}

#[test]
fn bad_policies_are_refused() {
    let mut cfg = config(Style::OpenAi, false, 1_000);
    cfg.context.as_mut().unwrap().compact_at = 1.5;
    assert!(Run::new(cfg.clone(), tools(), vec![Message::user("go")]).is_err());
    cfg.context.as_mut().unwrap().compact_at = 0.4;
    assert!(Run::new(cfg, tools(), vec![Message::user("go")]).is_err(), "low water above the trigger");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Random result sizes and windows: every request the run sends is
    /// balanced, starts at a turn boundary (the summary, or the first
    /// message), keeps the turn being answered, and fits the limit — or
    /// the run ends with ContextExhausted, never an over-long request.
    #[test]
    fn every_view_is_balanced_and_under_budget_or_exhausted(
        style in prop_oneof![Just(Style::Anthropic), Just(Style::OpenAi), Just(Style::Gemini), Just(Style::OpenAiResponses)],
        sizes in proptest::collection::vec(0usize..12_000, 3..14),
        window in 1_500u64..8_000,
        cap in proptest::option::of(256usize..6_000),
    ) {
        let mut cfg = config(style, false, window);
        cfg.context.as_mut().unwrap().max_tool_result_bytes = cap;
        let mut run = Run::new(cfg, tools(), vec![Message::user("Read every file.")]).unwrap();
        let limit = window - 300;
        let turns = sizes.len() + 1;
        let mut next = 0;
        let mut sent = 0;
        let outcome = loop {
            let mut log = Log::default();
            let before = run.transcript().len();
            let out = drive(&mut run, turns, &mut next, &|n| sizes.get(n).copied().unwrap_or(10), &mut log, Some(1));
            for body in log.main_bodies.iter().chain(&log.compaction_bodies) {
                prop_assert!((body.len() as u64).div_ceil(4) <= limit, "a request of {} bytes over {limit}", body.len());
            }
            let view = run.model_view();
            prop_assert!(balanced(style, &view).is_ok(), "{:?}", balanced(style, &view));
            if let Some(c) = run.compactions().last() {
                prop_assert!(view[0].text().starts_with(SUMMARY_PREFIX));
                prop_assert_eq!(run.transcript()[c.upto].role, Role::Assistant);
                prop_assert_eq!(view.len(), run.transcript().len() - c.upto + 1);
            } else {
                prop_assert_eq!(view.len(), run.transcript().len());
            }
            // The turn being answered (the last assistant turn and its results) is in the view.
            if let Some(last) = run.transcript().iter().rposition(|m| m.role == Role::Assistant) {
                let kept = run.transcript().len() - last;
                prop_assert!(view.len() > kept || run.compactions().is_empty());
                prop_assert_eq!(&view[view.len() - kept].role, &Role::Assistant);
            }
            sent += log.main_bodies.len();
            if let Some(o) = out { break o; }
            prop_assert!(run.transcript().len() >= before);
            prop_assert!(sent < 1_000);
        };
        match outcome {
            Outcome::Done => prop_assert_eq!(run.tool_calls().len(), sizes.len()),
            Outcome::Failed { error: RunError::ContextExhausted { estimate, limit: l, biggest } } => {
                prop_assert!(estimate > l);
                prop_assert!(!biggest.is_empty());
            }
            other => prop_assert!(false, "unexpected outcome {:?}", other),
        }
    }
}

fn fixture_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state/v3-anthropic-compacted-context.json")
}

/// A run 12 turns into a 30-turn coding task under a 6 000-token window:
/// compacted, between a tool batch and the next request.
fn compacted_run() -> (Run, Log, usize) {
    let mut run =
        Run::new(config(Style::Anthropic, false, 6_000), tools(), vec![Message::user("Read every file.")]).unwrap();
    let (mut log, mut next) = (Log::default(), 0);
    assert_eq!(drive(&mut run, 30, &mut next, &|_| 2_500, &mut log, Some(12)), None);
    (run, log, next)
}

#[test]
fn the_compacted_state_fixture_loads_and_finishes() {
    let (run, _, next) = compacted_run();
    if std::env::var("NEXUS_WRITE_STATE_FIXTURES").is_ok() {
        std::fs::write(fixture_path(), run.snapshot()).unwrap();
    }
    let stored = std::fs::read(fixture_path()).unwrap();
    assert!(
        String::from_utf8_lossy(&stored) == String::from_utf8_lossy(&run.snapshot()),
        "this build writes the fixture"
    );
    let mut restored = Run::restore(&stored).unwrap();
    assert!(restored.snapshot() == stored, "round trip");
    assert!(!restored.compactions().is_empty());
    let compactions = restored.compactions().to_vec();
    let (mut log, mut n) = (Log::default(), next);
    assert_eq!(drive(&mut restored, 30, &mut n, &|_| 2_500, &mut log, None), Some(Outcome::Done));
    assert_eq!(&restored.compactions()[..compactions.len()], &compactions[..], "recorded compactions are kept");
    assert_eq!(restored.tool_calls().len(), 29);
}

/// The summary is portable: a compacted Anthropic run that fails over to an
/// OpenAI upstream carries the same summary and kept turns there, re-encoded.
#[test]
fn failover_after_a_compaction_keeps_the_summary_on_the_other_style() {
    let mut cfg = config(Style::Anthropic, false, 6_000);
    cfg.retry.retries = 0;
    cfg.fallbacks.push(nexus_proto::Upstream {
        style: Style::OpenAi,
        base_url: "http://127.0.0.1:2/v1".into(),
        model: "fallback-model".into(),
    });
    cfg.context.as_mut().unwrap().windows.insert(1, 6_000);
    let mut run = Run::new(cfg, tools(), vec![Message::user("Read every file.")]).unwrap();
    let (mut log, mut next) = (Log::default(), 0);
    assert_eq!(drive(&mut run, 30, &mut next, &|_| 2_500, &mut log, Some(12)), None);
    let summary = run.compactions().last().expect("compacted on the primary").summary.clone();
    let req = loop {
        match run.poll_output() {
            Output::Send(req) if !is_compaction(&req.body) => break req,
            Output::Event(_) => {}
            other => panic!("{other:?}"),
        }
    };
    let overloaded = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let ex = req.exchange;
    let head = Input::ResponseHead {
        exchange: ex,
        status: 529,
        headers: vec![("content-type".into(), "application/json".into())],
    };
    run.handle_input(NOW, head).unwrap();
    run.handle_input(NOW, Input::ResponseBody { exchange: ex, chunk: overloaded }).unwrap();
    run.handle_input(NOW, Input::ResponseEnd { exchange: ex }).unwrap();
    assert_eq!(run.upstream_index(), 1, "failed over");
    let before = log.main_bodies.len();
    assert_eq!(drive(&mut run, 30, &mut next, &|_| 2_500, &mut log, None), Some(Outcome::Done));
    let first: Value = serde_json::from_slice(&log.main_bodies[before]).unwrap();
    assert_eq!(first["model"], "fallback-model");
    let opening = first["messages"][0]["content"].as_str().unwrap_or_default().to_string();
    assert!(opening.starts_with(SUMMARY_PREFIX) && opening.ends_with(&summary), "{opening}");
    for body in &log.main_bodies[before..] {
        assert!((body.len() as u64).div_ceil(4) <= 6_000 - 300);
    }
    balanced(Style::OpenAi, &run.model_view()).unwrap();
    assert_eq!(run.tool_calls().len(), 29);
}
