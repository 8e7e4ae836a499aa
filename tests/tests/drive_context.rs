//! The context budget end to end: both drivers against the fake provider
//! with a small context window that refuses over-long requests the way each
//! provider does.

#[macro_use]
mod drive_support;

use std::sync::Arc;

use drive_support::*;
use nexus_drive::cassette::{replay, Cassette, Quiet, Recorder, ReplayEnd};
use nexus_drive::{
    DriveError, DynTool, FailoverPolicy, Request, RunError, RunStatus, StreamEvent, ToolError, ToolOutcome, Upstream,
};
use nexus_proto::context::{DEFAULT_COMPACTION_INSTRUCTION, SUMMARY_PREFIX};
use nexus_proto::Role;
use nexus_tests::fake::{fake_token_count, FakeProvider, Fault, FaultKind, Script, Scripts, Style, Turn};
use nexus_tests::oracle;
use serde_json::{json, Value};

both_drivers!(
    a_sixty_turn_coding_run_compacts_under_a_small_window_on_every_style,
    a_compacted_run_suspends_and_resumes_in_a_fresh_client,
    an_over_long_request_is_refused_with_each_providers_text_and_the_window_is_learned,
    a_result_bigger_than_the_window_ends_the_run_with_context_exhausted_naming_it,
    responses_server_compaction_is_sent_back_and_a_failover_sees_the_portable_summary,
    near_the_trigger_the_upstreams_own_counter_decides,
);

/// The fake's window: requests over it are refused with a 400.
const LIMIT: u64 = 9_000;
const TURNS: usize = 60;

/// The summary instruction's start marks a compaction request for the fake.
fn marker() -> String {
    DEFAULT_COMPACTION_INSTRUCTION[..48].to_string()
}

/// Turn `n` of a coding task: read one file, then (last) report.
fn coding_script(style: Style, turns: usize) -> Script {
    let mut t: Vec<Turn> = (0..turns - 1)
        .map(|n| {
            let turn = Turn::default().call("read_file", format!(r#"{{"path":"src/f{n}.rs"}}"#));
            // Gemini sends no call ids unless asked; the fake finds the turn of a compacted request by them.
            if style == Style::Gemini {
                turn.with_ids()
            } else {
                turn
            }
        })
        .collect();
    t.push(Turn::text("all files read"));
    Script::new(t).context_limit(LIMIT).summarize_on(marker())
}

/// A file of `n` bytes whose lines name it.
fn file(path: &str, n: usize) -> String {
    let line = format!("// {path}: fn step() {{ let x = compute(42); assert!(x > 0); }}\n");
    let mut s = line.repeat(n / line.len() + 1);
    s.truncate(n);
    s
}

fn read_file() -> DynTool {
    ok_tool("read_file", |args, _| {
        let path = args["path"].as_str().unwrap_or("?");
        // Every tenth file is large: the cap keeps its head and tail in the requests.
        let big = path.trim_start_matches("src/f").trim_end_matches(".rs").parse::<usize>().is_ok_and(|n| n % 10 == 3);
        file(path, if big { 60_000 } else { 3_000 })
    })
}

/// The requests the fake answered for `model`, split into model turns and compactions.
fn split(fake: &FakeProvider, model: &str, style: Style) -> (Vec<Value>, Vec<Value>) {
    let reqs = fake.requests_for(model);
    let (mut turns, mut summaries) = (Vec::new(), Vec::new());
    for r in reqs {
        let body = r.json.expect("a JSON model call");
        assert_eq!(r.status, Some(200), "{style:?}: a request was refused: {}", String::from_utf8_lossy(&r.body));
        assert!(fake_token_count(&body) <= LIMIT);
        if body.to_string().contains(&marker()) {
            summaries.push(body);
        } else {
            turns.push(body);
        }
    }
    (turns, summaries)
}

fn a_sixty_turn_coding_run_compacts_under_a_small_window_on_every_style(d: Drv) {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-context-{}-{d:?}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for style in STYLES {
        let stream = matches!(d, Drv::Async);
        let ctx = format!("{d:?} {style:?} stream={stream}");
        let model = "m-context";
        let fake = FakeProvider::start(Scripts::new(KEY).model(model, coding_script(style, TURNS)));
        let path = dir.join(format!("{}.jsonl", style.name()));
        let rec = Arc::new(Recorder::create(&path).unwrap());
        rec.set_api_key(KEY);
        let (b, events) = Events::record(builder(&fake, style, model, stream));
        let cfg = b
            .max_turns(TURNS as u32 + 1)
            .max_tokens(256)
            .context_window(LIMIT)
            .max_tool_result_bytes(8_000)
            .dyn_tool(read_file())
            .tap(rec.clone())
            .build()
            .unwrap();
        let r = d.client(cfg).run("Read every file of the project.").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        rec.finish().unwrap();
        assert_eq!(r.status, RunStatus::Done, "{ctx}");
        assert_eq!(r.text, "all files read", "{ctx}");
        assert_eq!(r.turns as usize, TURNS, "{ctx}: compactions are not turns");
        assert_eq!(r.tool_calls.len(), TURNS - 1, "{ctx}");
        assert!(r.compactions.len() >= 2, "{ctx}: {} compactions", r.compactions.len());
        // No request went over the window, and each compaction was an ordinary model request.
        let (turns, summaries) = split(&fake, model, style);
        assert_eq!(turns.len(), TURNS, "{ctx}");
        assert_eq!(summaries.len(), r.compactions.len(), "{ctx}");
        for c in &r.compactions {
            assert!(c.tokens_after < c.tokens_before && c.turns_replaced > 0, "{ctx}: {c:?}");
            assert!(c.usage.prompt_tokens > 0, "{ctx}: the compaction's usage is reported");
        }
        let turn_usage: u64 = r.compactions.iter().map(|c| c.usage.total_tokens).sum();
        assert!(r.usage.total_tokens > turn_usage, "{ctx}: compaction usage is part of the run's");
        let shown = events.recorded();
        let compaction_events = shown.iter().filter(|e| matches!(e, StreamEvent::Compaction { .. })).count();
        assert_eq!(compaction_events, r.compactions.len(), "{ctx}");
        assert!(!shown_text(&shown).contains("Summary"), "{ctx}: a summary is not shown as the model's text");
        // The transcript is whole and balanced: every result, uncut.
        let results = transcript_results(&r);
        assert_eq!(results.len(), TURNS - 1, "{ctx}");
        assert_eq!(results[3].len(), 60_000, "{ctx}: the full result stays in the transcript");
        let upto = r.messages.len() - 1;
        assert_eq!(r.messages[upto].role, Role::Assistant);
        nexus_proto::check_transcript(proto_style(style), &r.messages[..upto]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        // The capped file went out with its marker, and later requests start with the summary.
        assert!(turns.iter().any(|b| b.to_string().contains("bytes omitted")), "{ctx}");
        assert!(turns.last().unwrap().to_string().contains("Summary of the earlier part"), "{ctx}");
        // The cassette replays byte for byte through the machine.
        let cassette = Cassette::load(&path).unwrap();
        let replayed = replay(&cassette, &mut Quiet).unwrap_or_else(|e| panic!("{ctx}: replay: {e}"));
        assert!(matches!(replayed.end, ReplayEnd::Finished(_)), "{ctx}: {:?}", replayed.end);
        let replayed_compactions: Vec<_> =
            replayed.run.compactions().iter().map(|c| (c.turn, c.tokens_before, c.tokens_after)).collect();
        let reported: Vec<_> = r.compactions.iter().map(|c| (c.turn, c.tokens_before, c.tokens_after)).collect();
        assert_eq!(replayed_compactions, reported, "{ctx}");
        assert_eq!(replayed.run.final_text(), "all files read", "{ctx}");
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Suspends on an approval at turn 40, after compactions, and finishes
/// from the stored bytes alone in a client that shares nothing with the first.
fn a_compacted_run_suspends_and_resumes_in_a_fresh_client(d: Drv) {
    for style in [Style::Anthropic, Style::OpenAiResponses, Style::Gemini, Style::OpenAi] {
        let ctx = format!("{d:?} {style:?}");
        let model = "m-context-suspend";
        let mut script = coding_script(style, 45);
        script.turns[40] = Turn::default().call("approve", r#"{"what":"refactor"}"#);
        if style == Style::Gemini {
            script.turns[40] = script.turns[40].clone().with_ids();
        }
        let fake = FakeProvider::start(Scripts::new(KEY).model(model, script));
        let mk = || {
            builder(&fake, style, model, false)
                .max_turns(50)
                .max_tokens(256)
                .context_window(LIMIT)
                .max_tool_result_bytes(8_000)
                .dyn_tool(read_file())
                .dyn_tool(DynTool::new("approve", "asks a person", json!({"type":"object"}), |_, c| match c.answer() {
                    None => Ok(ToolOutcome::Pending(Request::new("approval", "approve the refactor?"))),
                    Some(a) if a.ok => Ok(ToolOutcome::Done(json!("approved"))),
                    Some(_) => Err(ToolError::msg("refused")),
                }))
                .build()
                .unwrap()
        };
        let first = d.client(mk()).run("Read every file, then refactor.").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(first.status, RunStatus::Pending, "{ctx}");
        assert!(first.compactions.len() >= 2, "{ctx}: compacted before the suspension");
        let stored = first.suspended.expect("a stored run").state;
        let state: Value = serde_json::from_slice(&stored).unwrap();
        assert!(
            state["context"]["compactions"].as_array().is_some_and(|c| c.len() >= 2),
            "{ctx}: recorded in the state"
        );
        let answer = nexus_drive::Answer::ok(first.pending[0].id.clone(), None);
        let r = d.client(mk()).resume(&stored, vec![answer]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.status, RunStatus::Done, "{ctx}");
        assert_eq!(r.text, "all files read", "{ctx}");
        assert!(r.compactions.len() >= first.compactions.len(), "{ctx}");
        assert_eq!(&r.compactions[..first.compactions.len()], &first.compactions[..], "{ctx}: kept across the resume");
        assert!(r.tool_calls.iter().any(|c| c.name == "approve" && c.output == "approved"), "{ctx}");
        split(&fake, model, style);
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
    }
}

/// A run whose budget thinks the window is the table's 200K meets a model
/// with a far smaller one: the provider's 400 names the window (or bounds
/// it), the run records it, compacts and finishes.
fn an_over_long_request_is_refused_with_each_providers_text_and_the_window_is_learned(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let model = "gpt-4o"; // the built-in table says 128K
        let fake = FakeProvider::start(Scripts::new(KEY).model(model, coding_script(style, 12)));
        let cfg = builder(&fake, style, model, false)
            .max_turns(20)
            .max_tokens(256)
            .compact_at(0.8)
            .max_tool_result_bytes(8_000)
            .dyn_tool(read_file())
            .build()
            .unwrap();
        let r = d.client(cfg).run("Read every file.").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.status, RunStatus::Done, "{ctx}");
        let refused: Vec<_> = fake.requests_for(model).into_iter().filter(|q| q.status == Some(400)).collect();
        assert_eq!(refused.len(), 1, "{ctx}: one refusal teaches the window");
        let all = fake.requests_for(model);
        let refusal = all.iter().position(|q| q.status == Some(400)).unwrap();
        assert!(refusal > 0, "{ctx}: the first request fits");
        let refused = all[refusal].json.as_ref().map(fake_token_count).unwrap_or_default();
        assert!(refused > LIMIT, "{ctx}: the fake refused a request of {refused} tokens");
        assert!(!r.compactions.is_empty(), "{ctx}: compacted after the refusal");
        for q in &all[refusal + 1..] {
            assert_eq!(q.status, Some(200), "{ctx}: nothing is refused once the window is learned");
            assert!(q.json.as_ref().map(fake_token_count).unwrap_or_default() <= LIMIT, "{ctx}");
        }
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
    }
}

/// Without a cap, one 60 KB file cannot fit a 9 000-token window however
/// much is compacted: the run ends with `ContextExhausted` naming that
/// result, and no request over the window reaches the provider after it
/// taught the window.
fn a_result_bigger_than_the_window_ends_the_run_with_context_exhausted_naming_it(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let model = "gpt-4o";
        let fake = FakeProvider::start(Scripts::new(KEY).model(model, coding_script(style, 12)));
        let cfg = builder(&fake, style, model, false)
            .max_tokens(256)
            .compact_at(0.8)
            .dyn_tool(read_file())
            .max_turns(20)
            .build()
            .unwrap();
        let err = run_error(d.client(cfg).run("Read every file."));
        let DriveError::Run(RunError::ContextExhausted { estimate, limit, biggest }) = err else {
            panic!("{ctx}: {err:?}");
        };
        assert!(estimate > limit, "{ctx}");
        assert!(biggest[0].what.starts_with("tool result read_file"), "{ctx}: {biggest:?}");
        assert!(biggest[0].tokens >= 15_000, "{ctx}: {biggest:?}");
        let all = fake.requests_for(model);
        let refused: Vec<u64> = all
            .iter()
            .filter(|q| q.status == Some(400))
            .map(|q| q.json.as_ref().map(fake_token_count).unwrap_or_default())
            .collect();
        if style == Style::OpenAiResponses {
            // Its refusal names no window: each one bounds it below the refused size, so the
            // run may meet a second, smaller refusal before it knows enough.
            assert!((1..=2).contains(&refused.len()), "{ctx}: {refused:?}");
            assert!(refused.windows(2).all(|w| w[1] < w[0]), "{ctx}: {refused:?}");
        } else {
            assert_eq!(refused.len(), 1, "{ctx}: the refusal names the window; nothing more is sent");
        }
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
    }
}

/// A Responses upstream asked to compact server-side past 1 500 tokens
/// answers with opaque compaction items, which every later request to it
/// carries back (the fake verifies them); at turn `FAILOVER` it fails and an
/// Anthropic upstream takes over, seeing no compaction item but the
/// machine's own summary of the earlier turns.
fn responses_server_compaction_is_sent_back_and_a_failover_sees_the_portable_summary(d: Drv) {
    const TURNS: usize = 24;
    const FAILOVER: usize = 16;
    let stream = matches!(d, Drv::Async);
    let ctx = format!("{d:?} stream={stream}");
    let model = "m-server-compaction";
    // Fixed call ids: the fake finds the turn of a compacted request by
    // them, whichever style asks.
    let script = |faults: bool| {
        let mut turns: Vec<Turn> = (0..TURNS - 1)
            .map(|n| {
                Turn::default().call_with_id(format!("call_f{n}"), "read_file", format!(r#"{{"path":"src/f{n}.rs"}}"#))
            })
            .collect();
        turns.push(Turn::text("all files read"));
        if faults {
            let down = Fault::new(FaultKind::Status { status: 500, retry_after: None, body: None }).times(1_000);
            turns[FAILOVER] = turns[FAILOVER].clone().fault(down);
        }
        Script::new(turns).context_limit(LIMIT).summarize_on(marker())
    };
    let primary = FakeProvider::start(Scripts::new(KEY).model(model, script(true)));
    let backup = FakeProvider::start(Scripts::new(KEY).model(model, script(false)));
    let to = Upstream {
        style: proto_style(Style::Anthropic),
        base_url: backup.base_url(Style::Anthropic),
        model: model.to_string(),
    };
    let cfg = builder(&primary, Style::OpenAiResponses, model, stream)
        .retries(0)
        .fallback_key(to, KEY)
        .failover_policy(FailoverPolicy { retry_after_bound_ms: 5_000, ..FailoverPolicy::default() })
        .max_turns(TURNS as u32 + 1)
        .max_tokens(256)
        .context_window(LIMIT)
        .max_tool_result_bytes(8_000)
        .responses_compaction(1_500)
        .context_window_of(1, LIMIT)
        .dyn_tool(read_file())
        .build()
        .unwrap();
    let r = d.client(cfg).run("Read every file of the project.").unwrap_or_else(|e| panic!("{ctx}: {e}"));
    assert_eq!(r.status, RunStatus::Done, "{ctx}");
    assert_eq!(r.text, "all files read", "{ctx}");
    assert_eq!(r.failovers.len(), 1, "{ctx}: {:?}", r.failovers);
    let failed_over_at = r.failovers[0].turn;

    // To the Responses upstream: every turn asks for server-side compaction;
    // its items come back verbatim in their input form, and it accepted them.
    let answered: Vec<_> = primary.requests_for(model).into_iter().filter(|r| r.status != Some(500)).collect();
    let (summaries, turns): (Vec<Value>, Vec<Value>) =
        answered.into_iter().map(|r| r.json.unwrap()).partition(|b| b.to_string().contains(&marker()));
    assert!(!summaries.is_empty(), "{ctx}: the machine compacted before the failover");
    assert!(primary.requests_for(model).iter().all(|r| matches!(r.status, Some(200 | 500))), "{ctx}");
    let mut echoed = 0;
    for body in &turns {
        assert_eq!(body["context_management"], json!([{"type": "compaction", "compact_threshold": 1_500}]), "{ctx}");
        let items = body["input"].as_array().unwrap();
        for item in items.iter().filter(|i| i["type"] == "compaction") {
            echoed += 1;
            let keys: Vec<&str> = item.as_object().unwrap().keys().map(String::as_str).collect();
            assert_eq!(keys, ["encrypted_content", "id", "type"], "{ctx}: {item}");
        }
    }
    for body in &summaries {
        assert!(body.get("context_management").is_none(), "{ctx}: a summary request asks for no server compaction");
    }
    assert!(echoed > 0, "{ctx}: compaction items were sent back");
    assert!(!r.provider_compactions.is_empty(), "{ctx}: recorded");
    assert!(r.provider_compactions.iter().all(|c| c.turn < failed_over_at && c.id.starts_with("cmp_")), "{ctx}");
    let carrying = |b: &&Value| b["input"].as_array().is_some_and(|i| i.iter().any(|it| it["type"] == "compaction"));
    if let Some(run) = turns
        .iter()
        .find(carrying)
        .and_then(|b| oracle::validate_request(Style::OpenAiResponses, &serde_json::to_vec(b).unwrap()))
    {
        assert!(run.ok, "{ctx}: the SDK's types take the body: {}", run.stdout);
    }

    // The Anthropic upstream never sees the opaque item, and what stands for
    // the earlier turns there is the machine's summary.
    let (after, _) = split(&backup, model, Style::Anthropic);
    assert!(!after.is_empty(), "{ctx}");
    for body in &after {
        let text = body.to_string();
        assert!(!text.contains("gAAAAAcmp") && !text.contains("cmp_"), "{ctx}: {text}");
    }
    let first = after[0]["messages"][0]["content"].to_string();
    assert!(first.contains(SUMMARY_PREFIX.trim_end()), "{ctx}: the portable summary leads: {first}");
    assert!(primary.failures().is_empty() && backup.failures().is_empty(), "{ctx}");
}

/// With a count margin, requests near the trigger are counted by each
/// upstream's own counter first (an exchange like any other); the counts
/// the run goes by are the fake's counts of the bodies it was sent.
fn near_the_trigger_the_upstreams_own_counter_decides(d: Drv) {
    for style in [Style::Anthropic, Style::Gemini, Style::OpenAiResponses] {
        let stream = matches!(d, Drv::Async);
        let ctx = format!("{d:?} {style:?} stream={stream}");
        let model = "m-counted";
        let fake = FakeProvider::start(Scripts::new(KEY).model(model, coding_script(style, 20)));
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "nexus-counted-{}-{d:?}-{}.jsonl",
            std::process::id(),
            style.name()
        ));
        let rec = Arc::new(Recorder::create(&path).unwrap());
        rec.set_api_key(KEY);
        let cfg = builder(&fake, style, model, stream)
            .tap(rec.clone())
            .max_turns(21)
            .max_tokens(256)
            .context_window(LIMIT)
            .max_tool_result_bytes(8_000)
            .count_margin(0.3)
            .dyn_tool(read_file())
            .build()
            .unwrap();
        let r = d.client(cfg).run("Read every file of the project.").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        rec.finish().unwrap();
        assert_eq!(r.status, RunStatus::Done, "{ctx}");
        assert_eq!(r.text, "all files read", "{ctx}");
        // The counts are exchanges of the cassette: the run replays byte for byte with them.
        let replayed = replay(&Cassette::load(&path).unwrap(), &mut Quiet).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert!(matches!(replayed.end, ReplayEnd::Finished(_)), "{ctx}: {:?}", replayed.end);
        assert_eq!(replayed.run.token_counts(), &r.token_counts[..], "{ctx}");
        let _ = std::fs::remove_file(&path);
        let counter = match style {
            Style::Anthropic => "/v1/messages/count_tokens".to_string(),
            Style::OpenAiResponses => "/v1/responses/input_tokens".to_string(),
            _ => format!("/v1beta/models/{model}:countTokens"),
        };
        let counted: Vec<_> = fake.requests().into_iter().filter(|r| r.path() == counter).collect();
        assert!(!counted.is_empty(), "{ctx}: counted near the trigger");
        assert_eq!(counted.len(), r.token_counts.len(), "{ctx}");
        for (req, count) in counted.iter().zip(&r.token_counts) {
            assert_eq!(req.status, Some(200), "{ctx}: the counter took the request");
            assert!(!req.target.contains("alt=sse"), "{ctx}");
            assert_eq!(count.tokens, Some(fake_token_count(req.json.as_ref().unwrap())), "{ctx}");
        }
        // Every model call stayed under the window and was accepted.
        split(&fake, model, style);
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
    }
}
