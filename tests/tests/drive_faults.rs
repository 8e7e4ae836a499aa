//! Fault injection end to end: both drivers against the fake provider
//! misbehaving on purpose (connections cut at every stage, stalls, overload
//! storms, broken JSON, oversize bodies), tools that panic or hang, and
//! processes killed while writing a run store or racing for one run.
//!
//! `both_drivers!` runs each case through the blocking and the async
//! driver; each case covers the three wire formats, streamed and whole
//! responses where that changes the bytes. Expectations come from the
//! contract (SPEC §3.6 retries and §3.7 deadline, the run store's claim
//! rules) and from the scripts, never from a previous run's output.
//!
//! The crash and race cases start this test binary again as worker
//! processes (`worker::entry`, driven by environment variables; see
//! `faults_support`).
//!
//! Some cases each once exposed a driver or core bug and stay as
//! regression tests: a reset on a kept-alive connection, a stream missing
//! only its chunked terminator, the excerpt a decode error keeps, and the
//! body limit applied to streamed answers.

#[macro_use]
mod drive_support;
mod faults_support;

use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use drive_support::*;
use faults_support::*;
use nexus_drive::{DriveError, DynTool, FileRunStore, RunError, RunStatus, RunStore, StoreError, ToolOutcome};
use nexus_tests::fake::{ExpectFinal, FakeProvider, Fault, FaultKind, Script, Scripts, Style, Turn};
use serde_json::{json, Value};

both_drivers!(
    transport_faults_before_any_output_are_retried_and_the_run_completes,
    transport_faults_beyond_the_budget_end_in_a_typed_transport_error,
    a_reset_on_a_kept_alive_connection_is_one_attempt,
    an_https_url_to_a_plain_http_server_fails_in_the_tls_handshake,
    a_pooled_connection_the_server_closed_is_not_used,
    a_stream_cut_after_visible_text_is_not_retried,
    a_stream_missing_only_its_chunked_terminator_completes,
    a_stalled_server_or_a_long_backoff_meets_the_run_deadline,
    overload_storms_within_the_budget_complete_with_one_request_per_attempt,
    overload_storms_beyond_the_budget_keep_the_provider_status_and_body,
    in_stream_overload_errors_before_any_output_are_retried,
    malformed_json_with_status_200_is_a_decode_error_and_not_retried,
    a_decode_error_keeps_an_excerpt_of_the_body,
    a_body_over_the_limit_is_refused_without_buffering_it,
    tool_panics_and_timeouts_become_error_results_and_never_rerun,
    two_processes_resuming_one_run_have_one_winner,
);

/// The worker processes' entry point (see `faults_support::worker_main`).
mod worker {
    #[test]
    #[ignore = "entry point of the worker processes that the crash and race tests start"]
    fn entry() {
        super::faults_support::worker_main();
    }
}

// ------------------------------------------------------------------ helpers

const FIRST: &str = "Counting now.";
const FINAL: &str = "All counted, nothing twice.";

/// Turn 0 says `FIRST` and calls `count`; turn 1 says `FINAL`. Each turn
/// gets its faults. The last request must carry the one tool result (else
/// the fake answers 400 instead of the scripted turn or fault).
fn counting_script(turn0: &[Fault], turn1: &[Fault]) -> Script {
    let mut t0 = Turn::default().with_text(FIRST).call("count", r#"{"n":1}"#);
    t0.faults = turn0.to_vec();
    let mut t1 = Turn::text(FINAL);
    t1.faults = turn1.to_vec();
    Script::new(vec![t0, t1]).expect_final(ExpectFinal {
        tool_result_contains: vec!["counted 1".into()],
        tool_results: Some(1),
        // prompt, the call, its result
        messages: Some(3),
    })
}

/// A client with the counting tool and an event sink.
fn counting_client(
    d: Drv,
    fake: &FakeProvider,
    style: Style,
    model: &str,
    stream: bool,
    retries: u32,
) -> (Cl, Arc<AtomicUsize>, Events) {
    let runs = counter();
    let c = runs.clone();
    let (b, events) = Events::record(builder(fake, style, model, stream));
    let cfg = b
        .retries(retries)
        .dyn_tool(ok_tool("count", move |_, _| format!("counted {}", c.fetch_add(1, Ordering::SeqCst) + 1)))
        .build()
        .unwrap();
    (d.client(cfg), runs, events)
}

/// The bodies the fake received for one turn of `model`, in order.
fn bodies(fake: &FakeProvider, model: &str, turn: usize) -> Vec<Vec<u8>> {
    fake.requests_for(model).into_iter().filter(|r| r.turn == Some(turn)).map(|r| r.body).collect()
}

/// The first request for turn 1 of `model` went out on the connection that
/// carried turn 0's last request: the kept-alive connection was reused, so
/// a fault on it hit a reused connection, not a fresh one.
fn assert_turn_1_reused_the_connection(fake: &FakeProvider, model: &str, ctx: &str) {
    let requests = fake.requests_for(model);
    let last_of_0 = requests.iter().rev().find(|r| r.turn == Some(0)).expect("a request for turn 0");
    let first_of_1 = requests.iter().find(|r| r.turn == Some(1)).expect("a request for turn 1");
    assert_eq!(
        first_of_1.connection, last_of_0.connection,
        "{ctx}: turn 1 went out on connection {} instead of turn 0's kept-alive {}",
        first_of_1.connection, last_of_0.connection
    );
}

/// Every attempt at a turn resent the same request: no piece of a failed
/// attempt (a partial assistant message) leaked into the transcript.
fn assert_same_requests(fake: &FakeProvider, model: &str, turn: usize, n: usize, ctx: &str) {
    let sent = bodies(fake, model, turn);
    assert_eq!(sent.len(), n, "{ctx}: requests for turn {turn}");
    assert!(sent.windows(2).all(|w| w[0] == w[1]), "{ctx}: a retry of turn {turn} sent a different request");
}

/// `RunError::Transport` of kind `io` (the kind type is the core's; its
/// debug name is the stable part the drivers promise here).
fn is_io_transport(e: &DriveError) -> bool {
    matches!(e, DriveError::Run(RunError::Transport { kind, message }) if format!("{kind:?}") == "Io" && !message.is_empty())
}

/// The transcript of the same script without faults: what every recovered run must end with.
fn clean_transcript(d: Drv, style: Style, model: &str, stream: bool) -> Vec<nexus_drive::Message> {
    let fake = FakeProvider::start(Scripts::new(KEY).model(model, counting_script(&[], &[])));
    let (client, _, _) = counting_client(d, &fake, style, model, stream, 0);
    client.run("count once").unwrap_or_else(|e| panic!("{d:?} {style:?}: a clean run failed: {e}")).messages
}

/// A connection failure that happens before the host saw any model output.
struct Cut {
    what: &'static str,
    kind: FaultKind,
    /// Whether it may hit a kept-alive connection (turn 1 reuses turn 0's).
    /// A reset before any response byte is only injected on fresh
    /// connections here: on a reused one it is the subject of
    /// `a_reset_on_a_kept_alive_connection_is_one_attempt`.
    on_reused: bool,
}

fn cuts_before_output(style: Style, stream: bool) -> Vec<Cut> {
    let cut = |what, kind, on_reused| Cut { what, kind, on_reused };
    let mut cuts = vec![
        cut("reset before headers", FaultKind::ResetBeforeHeaders, false),
        cut("reset after headers", FaultKind::ResetAfterHeaders, true),
    ];
    if stream {
        // Anthropic's `message_start` and OpenAI's role chunk carry no
        // visible delta; Gemini's first event already holds text.
        if style != Style::Gemini {
            cuts.push(cut("cut before any visible delta", FaultKind::ResetMidStream { after_events: 1 }, true));
        }
    } else {
        cuts.push(cut("half the body, then a reset", FaultKind::ResetMidStream { after_events: 1 }, true));
        cuts.push(cut("chunked body without its last chunk", FaultKind::TruncatedChunked, true));
    }
    cuts
}

// ------------------------------------------------------------------ 1. transport faults

/// SPEC §3.6: `connect`/`io` transport errors are retried; so is a stream
/// cut before its end marker as long as it has shown nothing.
fn transport_faults_before_any_output_are_retried_and_the_run_completes(d: Drv) {
    for style in STYLES {
        for stream in [false, true] {
            let model = "m-cut";
            let reference = clean_transcript(d, style, model, stream);
            for Cut { what, kind, on_reused } in cuts_before_output(style, stream) {
                let ctx = format!("{d:?} {style:?} stream={stream} {what}");
                // Each turn fails once: the first before the tool runs, the second after.
                let fault = Fault::new(kind);
                let first = std::slice::from_ref(&fault);
                let later = if on_reused { first } else { &[] };
                let fake = FakeProvider::start(Scripts::new(KEY).model(model, counting_script(first, later)));
                let (client, runs, events) = counting_client(d, &fake, style, model, stream, 2);
                let r = client.run("count once").unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert_eq!((r.status, r.text.as_str()), (RunStatus::Done, FINAL), "{ctx}");
                assert_eq!(runs.load(Ordering::SeqCst), 1, "{ctx}: the tool ran once");
                assert_eq!(r.messages, reference, "{ctx}: the transcript of a run without faults");
                let second = 1 + usize::from(on_reused);
                assert_eq!((fake.attempts(model, 0), fake.attempts(model, 1)), (2, second as u32), "{ctx}");
                assert_same_requests(&fake, model, 0, 2, &ctx);
                assert_same_requests(&fake, model, 1, second, &ctx);
                if on_reused {
                    assert_turn_1_reused_the_connection(&fake, model, &ctx);
                }
                let retries = retries_of(&events.recorded());
                assert_eq!(retries.len(), 1 + usize::from(on_reused), "{ctx}: {retries:?}");
                assert!(retries.iter().all(|r| r.0 == 1 && r.2.starts_with("transport error")), "{ctx}: {retries:?}");
                assert_eq!(shown_text(&events.recorded()), format!("{FIRST}{FINAL}"), "{ctx}: nothing shown twice");
                assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
            }
        }
    }
}

/// With the budget spent, the transport failure itself comes back, typed;
/// the tool of the turn before never runs again and no attempt added to
/// the transcript.
fn transport_faults_beyond_the_budget_end_in_a_typed_transport_error(d: Drv) {
    for style in STYLES {
        for stream in [false, true] {
            for Cut { what, kind, on_reused } in cuts_before_output(style, stream) {
                let ctx = format!("{d:?} {style:?} stream={stream} {what}");
                let model = "m-down";
                // One attempt plus two retries, every one cut: at the
                // second turn, after the tool ran (on the connection kept
                // alive from the first), unless the cut is only injected on
                // fresh connections; then at the first.
                let turn = usize::from(on_reused);
                let faults = [Fault::new(kind).times(3)];
                let script = if on_reused { counting_script(&[], &faults) } else { counting_script(&faults, &[]) };
                let fake = FakeProvider::start(Scripts::new(KEY).model(model, script));
                let (client, runs, events) = counting_client(d, &fake, style, model, stream, 2);
                let err = run_error(client.run("count once"));
                assert!(is_io_transport(&err), "{ctx}: {err:?}");
                assert!(err.to_string().starts_with("transport error"), "{ctx}: {err}");
                assert_eq!(runs.load(Ordering::SeqCst), turn, "{ctx}: the tool never ran again");
                assert_eq!(fake.attempts(model, turn), 3, "{ctx}");
                if on_reused {
                    assert_turn_1_reused_the_connection(&fake, model, &ctx);
                }
                // What the fake saw is the budget: no attempt outside the machine's count.
                assert_same_requests(&fake, model, turn, 3, &ctx);
                assert_eq!(retries_of(&events.recorded()).len(), 2, "{ctx}");
                assert_eq!(turns_finished(&events.recorded()).len(), turn, "{ctx}: the failed turn never finished");
                assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
            }
        }
    }
}

/// The server closes a kept-alive connection after answering, without
/// saying so (its idle timeout). The next request must not be written into
/// it: it goes out once, on a new connection, and costs no attempt of the
/// retry budget.
fn a_pooled_connection_the_server_closed_is_not_used(d: Drv) {
    for style in STYLES {
        for stream in [false, true] {
            let ctx = format!("{d:?} {style:?} stream={stream}");
            let model = "m-idle";
            let hang_up = [Fault::new(FaultKind::CloseWhenIdle)];
            let fake = FakeProvider::start(Scripts::new(KEY).model(model, counting_script(&hang_up, &[])));
            // The tool runs between the two requests, once the server has
            // closed the connection the first one came on.
            let closed = fake.closed_connections();
            let (b, events) = Events::record(builder(&fake, style, model, stream));
            let cfg = b
                .retries(0)
                .dyn_tool(ok_tool("count", move |_, _| {
                    while closed.load(Ordering::SeqCst) == 0 {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    "counted 1".to_string()
                }))
                .build()
                .unwrap();
            let r = d.client(cfg).run("count once").unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!((r.status, r.text.as_str()), (RunStatus::Done, FINAL), "{ctx}");
            assert_eq!((fake.attempts(model, 0), fake.attempts(model, 1)), (1, 1), "{ctx}");
            assert!(retries_of(&events.recorded()).is_empty(), "{ctx}");
            let conns: Vec<u64> = fake.requests().iter().map(|r| r.connection).collect();
            assert_eq!(conns.len(), 2, "{ctx}");
            assert_ne!(conns[0], conns[1], "{ctx}: the second request went on a new connection");
        }
    }
}

/// An `https` base URL leads to a TLS handshake; a server answering it in
/// plain HTTP (as servers answer bytes they cannot parse: a 400, then
/// close) fails the handshake, which is a connect error (the request was
/// never sent), not a hang or an I/O error after sending.
fn an_https_url_to_a_plain_http_server_fails_in_the_tls_handshake(d: Drv) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        let mut hello = [0u8; 5];
        sock.read_exact(&mut hello).unwrap();
        sock.write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").unwrap();
        hello
    });
    let url = format!("https://127.0.0.1:{port}/v1");
    let cfg = builder_for_url(&url, Style::OpenAi, "m-tls", false).retries(0).build().unwrap();
    let err = run_error(d.client(cfg).run("count once"));
    let DriveError::Run(RunError::Transport { kind, message }) = &err else { panic!("{d:?}: {err:?}") };
    assert_eq!(format!("{kind:?}"), "Connect", "{d:?}: {message}");
    assert!(message.contains("TLS handshake"), "{d:?}: {message}");
    // What reached the server was a TLS record (a handshake, 0x16), not a request.
    assert_eq!(server.join().unwrap()[0], 0x16, "{d:?}");
}

/// A connection kept alive from the turn before is reset after the request
/// went out and before any response byte. The server may have acted on
/// that request, so it is one attempt of the budget (SPEC §3.6: retries are
/// the core's), not a silent resend.
fn a_reset_on_a_kept_alive_connection_is_one_attempt(d: Drv) {
    for style in STYLES {
        for stream in [false, true] {
            let ctx = format!("{d:?} {style:?} stream={stream}");
            let model = "m-stale";
            let reset = Fault::new(FaultKind::ResetBeforeHeaders);
            let fake = FakeProvider::start(
                Scripts::new(KEY)
                    .model(model, counting_script(&[], std::slice::from_ref(&reset)))
                    .model("m-stale-twice", counting_script(&[], &[reset.times(2)])),
            );
            // No retries: the reset ends the run.
            let (client, runs, _) = counting_client(d, &fake, style, model, stream, 0);
            let outcome = client.run("count once");
            assert_eq!(bodies(&fake, model, 1).len(), 1, "{ctx}: requests for the second turn");
            assert_turn_1_reused_the_connection(&fake, model, &ctx);
            let err = run_error(outcome);
            assert!(is_io_transport(&err), "{ctx}: {err:?}");
            assert_eq!(runs.load(Ordering::SeqCst), 1, "{ctx}");
            // One retry: two attempts, both reset.
            let (client, _, events) = counting_client(d, &fake, style, "m-stale-twice", stream, 1);
            let outcome = client.run("count once");
            assert_eq!(bodies(&fake, "m-stale-twice", 1).len(), 2, "{ctx}: requests for the second turn");
            assert_turn_1_reused_the_connection(&fake, "m-stale-twice", &ctx);
            assert!(is_io_transport(&run_error(outcome)), "{ctx}");
            assert_eq!(retries_of(&events.recorded()).len(), 1, "{ctx}");
        }
    }
}

/// SPEC §3.6: a stream that already showed text is never retried (a retry
/// could say something else); the run fails on the cut, typed.
fn a_stream_cut_after_visible_text_is_not_retried(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        // Events up to the first text delta: Anthropic message_start,
        // content_block_start, ping; OpenAI the role chunk; Gemini none; and the delta.
        let after_events = match style {
            Style::Anthropic => 4,
            Style::OpenAi => 2,
            Style::Gemini => 1,
            // created, in_progress, the message's output_item.added and
            // content_part.added, then the first delta.
            Style::OpenAiResponses => 5,
        };
        let model = "m-mid";
        let cut = Fault::new(FaultKind::ResetMidStream { after_events });
        let fake = FakeProvider::start(Scripts::new(KEY).model(model, counting_script(&[], &[cut])));
        let (client, runs, events) = counting_client(d, &fake, style, model, true, 2);
        let err = run_error(client.run("count once"));
        assert!(is_io_transport(&err), "{ctx}: {err:?}");
        assert_eq!(fake.attempts(model, 1), 1, "{ctx}: not retried");
        let shown = shown_text(&events.recorded());
        let partial = shown.strip_prefix(FIRST).unwrap_or_else(|| panic!("{ctx}: shown {shown:?}"));
        assert!(!partial.is_empty() && FINAL.starts_with(partial) && partial != FINAL, "{ctx}: shown {partial:?}");
        assert_eq!(turns_finished(&events.recorded()), [1], "{ctx}: the cut turn never finished");
        assert!(retries_of(&events.recorded()).is_empty(), "{ctx}");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{ctx}");
    }
}

/// Every event of the answer arrived, its end marker included (Anthropic
/// `message_stop`, OpenAI `[DONE]`, Gemini the `finishReason`); only the
/// chunked encoding's last chunk is missing. The answer is whole (SPEC §7
/// defines a stream's end by its marker) and was shown in full, so the run
/// goes on with it: a retry is not allowed after visible output, and
/// failing would throw away an answer the host already showed.
fn a_stream_missing_only_its_chunked_terminator_completes(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let model = "m-unterminated";
        let cut = Fault::new(FaultKind::TruncatedChunked);
        let fake = FakeProvider::start(Scripts::new(KEY).model(model, counting_script(&[], &[cut])));
        let (client, runs, events) = counting_client(d, &fake, style, model, true, 2);
        let outcome = client.run("count once");
        assert_eq!(shown_text(&events.recorded()), format!("{FIRST}{FINAL}"), "{ctx}: the whole answer was shown");
        let r = outcome.unwrap_or_else(|e| panic!("{ctx}: {e:?}"));
        assert_eq!((r.status, r.text.as_str()), (RunStatus::Done, FINAL), "{ctx}");
        assert_eq!((fake.attempts(model, 1), runs.load(Ordering::SeqCst)), (1, 1), "{ctx}");
    }
}

// ------------------------------------------------------------------ 2. deadline

/// Eight words: every style's stream has shown some of them after its first
/// six events (Gemini sends a chunk a word, the others open with one to four
/// events before the first text).
const PAUSED_TEXT: &str = "one two three four five six seven eight";

/// SPEC §3.7: the whole-run deadline ends a run stalled on the server (before
/// its answer, or in the middle of a stream after some events were read) or
/// parked in a long backoff, promptly and typed.
fn a_stalled_server_or_a_long_backoff_meets_the_run_deadline(d: Drv) {
    for style in STYLES {
        let overloaded = if style == Style::Anthropic { 529 } else { 503 };
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model(
                    "m-stall",
                    script(vec![Turn::text("too late").fault(Fault::new(FaultKind::Stall { ms: 30_000 }).times(9))]),
                )
                .model(
                    "m-later",
                    script(vec![Turn::text("too late").fault(Fault::status_retry_after(overloaded, "30").times(9))]),
                )
                .model(
                    "m-pause",
                    script(vec![Turn::text(PAUSED_TEXT)
                        .fault(Fault::new(FaultKind::StallMidStream { after_events: 6, ms: 30_000 }).times(9))]),
                ),
        );
        for (model, stream) in [("m-stall", false), ("m-stall", true), ("m-later", false), ("m-pause", true)] {
            let ctx = format!("{d:?} {style:?} {model} stream={stream}");
            let before = fake.attempts(model, 0);
            let (b, events) = Events::record(builder(&fake, style, model, stream));
            let cfg = b.retries(3).timeout(Duration::from_millis(500)).build().unwrap();
            let started = Instant::now();
            let err = run_error(d.client(cfg).run("hello"));
            assert!(matches!(err, DriveError::Run(RunError::DeadlineExceeded)), "{ctx}: {err:?}");
            if model == "m-pause" {
                // The deadline fell inside the body, after reads that showed text.
                let shown = shown_text(&events.recorded());
                assert!(!shown.is_empty() && PAUSED_TEXT.starts_with(&shown), "{ctx}: shown {shown:?}");
            }
            // Cut short, not waited out: a bound (not a measurement) far
            // below the 30 s the server or the backoff asked for.
            assert!(started.elapsed() < Duration::from_millis(2_500), "{ctx}: {:?}", started.elapsed());
            assert_eq!(fake.attempts(model, 0) - before, 1, "{ctx}: nothing was sent after the deadline");
        }
    }
}

// ------------------------------------------------------------------ 3. overload storms

/// The statuses each provider sends when it is overloaded or rate limited.
fn storm_statuses(style: Style) -> [u16; 2] {
    match style {
        Style::Anthropic => [529, 429],
        Style::OpenAi | Style::OpenAiResponses => [503, 429],
        Style::Gemini => [503, 429],
    }
}

/// `Retry-After` as sent: delay-seconds, absent, and an HTTP date (which
/// the contract ignores: backoff applies).
const RETRY_AFTERS: [Option<&str>; 3] = [Some("0"), None, Some("Wed, 21 Oct 2015 07:28:00 GMT")];

fn storm_fault(status: u16, retry_after: Option<&str>, body: Option<&str>, times: u32) -> Fault {
    Fault::new(FaultKind::Status {
        status,
        retry_after: retry_after.map(str::to_string),
        body: body.map(str::to_string),
    })
    .times(times)
}

fn overload_storms_within_the_budget_complete_with_one_request_per_attempt(d: Drv) {
    for style in STYLES {
        let mut scripts = Scripts::new(KEY);
        let mut cases = Vec::new();
        for status in storm_statuses(style) {
            for (i, ra) in RETRY_AFTERS.into_iter().enumerate() {
                for stream in [false, true] {
                    let model = format!("m-{status}-{i}-{stream}");
                    let turn = Turn::text("through the storm").fault(storm_fault(status, ra, None, 3));
                    scripts = scripts.model(model.clone(), script(vec![turn]));
                    cases.push((model, status, ra, stream));
                }
            }
        }
        let fake = FakeProvider::start(scripts);
        for (model, status, ra, stream) in cases {
            let ctx = format!("{d:?} {style:?} {status} retry-after={ra:?} stream={stream}");
            let (b, events) = Events::record(builder(&fake, style, &model, stream));
            let cfg = b.retries(3).build().unwrap();
            let r = d.client(cfg).run("hello").unwrap_or_else(|e| panic!("{ctx}: {e}"));
            assert_eq!(r.text, "through the storm", "{ctx}");
            assert_eq!(fake.attempts(&model, 0), 4, "{ctx}");
            let statuses: Vec<Option<u16>> = fake.requests_for(&model).iter().map(|r| r.status).collect();
            assert_eq!(statuses, [Some(status), Some(status), Some(status), Some(200)], "{ctx}");
            let delays: Vec<u64> = retries_of(&events.recorded()).iter().map(|r| r.1).collect();
            if ra == Some("0") {
                assert_eq!(delays, [0, 0, 0], "{ctx}: Retry-After 0 means at once");
            } else {
                // base·2ⁿ + jitter(0 … base·2ⁿ/2), base 5 ms.
                assert_eq!(delays.len(), 3, "{ctx}");
                for (n, delay) in delays.iter().enumerate() {
                    let exp = 5u64 << n;
                    assert!((exp..=exp + exp / 2).contains(delay), "{ctx}: retry {n} after {delay} ms");
                }
            }
        }
    }
}

/// A body the provider might send, with a message to recognise.
fn custom_error_body(style: Style, status: u16) -> String {
    match style {
        Style::Anthropic => {
            r#"{"type":"error","error":{"type":"overloaded_error","message":"storm custom message"}}"#.to_string()
        }
        Style::OpenAi | Style::OpenAiResponses => {
            r#"{"error":{"message":"storm custom message","type":"server_error","param":null,"code":null}}"#.to_string()
        }
        Style::Gemini => {
            format!(r#"{{"error":{{"code":{status},"message":"storm custom message","status":"UNAVAILABLE"}}}}"#)
        }
    }
}

/// The provider's error a run failed with (a macro: the error type is the core's).
macro_rules! provider_error {
    ($err:expr, $ctx:expr) => {
        match $err {
            DriveError::Run(RunError::Provider(p)) => p,
            other => panic!("{}: expected the provider's error, got {other:?}", $ctx),
        }
    };
}

fn overload_storms_beyond_the_budget_keep_the_provider_status_and_body(d: Drv) {
    for style in STYLES {
        for status in storm_statuses(style) {
            for stream in [false, true] {
                let ctx = format!("{d:?} {style:?} {status} stream={stream}");
                let custom = custom_error_body(style, status);
                let fake = FakeProvider::start(
                    Scripts::new(KEY)
                        .model("m-own", script(vec![Turn::text("never").fault(storm_fault(status, None, None, 9))]))
                        .model(
                            "m-custom",
                            script(vec![Turn::text("never").fault(storm_fault(status, None, Some(&custom), 9))]),
                        )
                        .model(
                            "m-after",
                            script(vec![Turn::text("never").fault(storm_fault(status, Some("7"), None, 9))]),
                        ),
                );
                // The provider's own error body, after 1 + 2 attempts.
                let cfg = builder(&fake, style, "m-own", stream).retries(2).build().unwrap();
                let err = run_error(d.client(cfg).run("hello"));
                assert_eq!(err.status(), Some(status), "{ctx}");
                let p = provider_error!(err, ctx);
                assert_eq!(p.status, Some(status), "{ctx}");
                assert!(p.retryable, "{ctx}");
                assert!(serde_json::from_str::<Value>(&p.body).is_ok_and(|v| v["error"].is_object()), "{ctx}: {p:?}");
                assert!(!p.message.is_empty() && p.body.contains(&p.message), "{ctx}: {p:?}");
                assert_eq!(fake.requests_for("m-own").len(), 3, "{ctx}: one request per attempt");

                // A body of our own comes back byte for byte, its message read from it.
                let cfg = builder(&fake, style, "m-custom", stream).retries(2).build().unwrap();
                let p = provider_error!(run_error(d.client(cfg).run("hello")), ctx);
                assert_eq!(
                    (p.status, p.body.as_str(), p.message.as_str()),
                    (Some(status), custom.as_str(), "storm custom message"),
                    "{ctx}"
                );
                assert_eq!(fake.requests_for("m-custom").len(), 3, "{ctx}");

                // With no retries left the provider's Retry-After is kept for the host.
                let cfg = builder(&fake, style, "m-after", stream).retries(0).build().unwrap();
                let p = provider_error!(run_error(d.client(cfg).run("hello")), ctx);
                assert_eq!((p.status, p.retry_after_ms), (Some(status), Some(7_000)), "{ctx}");
                assert_eq!(fake.requests_for("m-after").len(), 1, "{ctx}");
            }
        }
    }
}

/// SPEC §3.6: an in-stream error event of a transient type is retried when
/// nothing was shown yet; past the budget it is the provider's error,
/// without a status.
fn in_stream_overload_errors_before_any_output_are_retried(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let (after_events, kind) = match style {
            Style::Anthropic => (1, "overloaded_error"),
            Style::OpenAi => (1, "server_error"),
            Style::Gemini => (0, "UNAVAILABLE"),
            Style::OpenAiResponses => (1, "server_error"),
        };
        let fault = Fault::new(FaultKind::StreamError { after_events });
        let fake = FakeProvider::start(
            Scripts::new(KEY)
                .model("m-passes", counting_script(&[], &[fault.clone().times(2)]))
                .model("m-stays", counting_script(&[], &[fault.times(9)])),
        );
        let (client, runs, events) = counting_client(d, &fake, style, "m-passes", true, 2);
        let r = client.run("count once").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.text, FINAL, "{ctx}");
        assert_eq!((fake.attempts("m-passes", 1), runs.load(Ordering::SeqCst)), (3, 1), "{ctx}");
        assert_eq!(shown_text(&events.recorded()), format!("{FIRST}{FINAL}"), "{ctx}");
        // Two faulted attempts, two retries, each for the provider's error.
        let retries = retries_of(&events.recorded());
        assert_eq!(retries.len(), 2, "{ctx}: {retries:?}");
        assert!(retries.iter().all(|r| r.2.contains(kind)), "{ctx}: {retries:?}");

        let (client, runs, _) = counting_client(d, &fake, style, "m-stays", true, 1);
        let err = run_error(client.run("count once"));
        let p = provider_error!(err, ctx);
        assert_eq!((p.status, p.kind.as_str(), p.retryable), (None, kind, true), "{ctx}: {p:?}");
        assert!(p.body.contains(kind), "{ctx}: the event's data is kept: {p:?}");
        assert_eq!((fake.attempts("m-stays", 1), runs.load(Ordering::SeqCst)), (2, 1), "{ctx}");
    }
}

// ------------------------------------------------------------------ 4. malformed JSON

/// SPEC §3.6: malformed bodies are never retried; the run fails at once
/// with a decode error.
fn malformed_json_with_status_200_is_a_decode_error_and_not_retried(d: Drv) {
    for style in STYLES {
        for stream in [false, true] {
            let ctx = format!("{d:?} {style:?} stream={stream}");
            let fake = FakeProvider::start(
                Scripts::new(KEY)
                    .model("m-garbled", counting_script(&[], &[Fault::new(FaultKind::MalformedJson).times(9)])),
            );
            let (client, runs, events) = counting_client(d, &fake, style, "m-garbled", stream, 3);
            let err = run_error(client.run("count once"));
            assert!(matches!(&err, DriveError::Run(RunError::Decode(_))), "{ctx}: {err:?}");
            assert!(err.to_string().starts_with("malformed JSON"), "{ctx}: {err}");
            assert_eq!(fake.attempts("m-garbled", 1), 1, "{ctx}: not retried");
            assert!(retries_of(&events.recorded()).is_empty(), "{ctx}");
            assert_eq!(turns_finished(&events.recorded()), [1], "{ctx}");
            assert_eq!(runs.load(Ordering::SeqCst), 1, "{ctx}");
        }
    }
}

/// The start of the malformed data each fake answer carries.
fn malformed_start(style: Style, stream: bool) -> &'static str {
    match (style, stream) {
        (Style::Anthropic, false) => r#"{"id":"msg_01","type":"message""#,
        (Style::Anthropic, true) => r#"{"type":"content_block_delta""#,
        (Style::OpenAi, _) => r#"{"id":"chatcmpl-x""#,
        (Style::Gemini, false) => r#"{"candidates":[{"content""#,
        (Style::Gemini, true) => r#"{"candidates": [{"content""#,
        (Style::OpenAiResponses, false) => r#"{"id":"resp_x","object":"response""#,
        (Style::OpenAiResponses, true) => r#"{"type":"response.output_text.delta""#,
    }
}

/// A decode error says what arrived: an excerpt of the offending body or
/// event, not only the parser's position in it.
fn a_decode_error_keeps_an_excerpt_of_the_body(d: Drv) {
    for style in STYLES {
        for stream in [false, true] {
            let ctx = format!("{d:?} {style:?} stream={stream}");
            let fake = FakeProvider::start(
                Scripts::new(KEY)
                    .model("m-garbled", script(vec![Turn::text("never").fault(Fault::new(FaultKind::MalformedJson))])),
            );
            let cfg = builder(&fake, style, "m-garbled", stream).build().unwrap();
            let err = run_error(d.client(cfg).run("hello"));
            let start = malformed_start(style, stream);
            assert!(err.to_string().contains(start), "{ctx}: {err} (the body starts with {start})");
        }
    }
}

// ------------------------------------------------------------------ 5. oversize bodies

/// A worker process runs against a 16 MiB answer with a 256 KiB limit, so
/// its peak memory shows whether the body was buffered (the fake, in this
/// process, does not blur the measure). The limit is "the response body
/// limit": a streamed answer counts as much as a whole one.
fn a_body_over_the_limit_is_refused_without_buffering_it(d: Drv) {
    const HUGE: usize = 16 * 1024 * 1024;
    const LIMIT: usize = 256 * 1024;
    for style in STYLES {
        for stream in [false, true] {
            let ctx = format!("{d:?} {style:?} stream={stream}");
            let fake = FakeProvider::start(Scripts::new(KEY).model(
                "m-huge",
                script(vec![Turn::text("huge").fault(Fault::new(FaultKind::HugeBody { bytes: HUGE }).times(9))]),
            ));
            let mut env = client_env(d, &fake, style, "m-huge");
            env.push(("NEXUS_FW_LIMIT", LIMIT.to_string()));
            env.push(("NEXUS_FW_STREAM", u8::from(stream).to_string()));
            let child = worker("huge", &env).spawn().expect("the worker starts");
            let (lines, stderr) = replies(child);
            assert_eq!(lines.len(), 2, "{ctx}: {lines:?} {stderr}");
            assert_eq!(lines[0], format!("err Run(Decode(TooLarge {{ limit: {LIMIT} }}))"), "{ctx}: {stderr}");
            let mem: Vec<u64> = lines[1].split(' ').skip(1).filter_map(|n| n.parse().ok()).collect();
            let [before, peak] = mem[..] else { panic!("{ctx}: {lines:?}") };
            assert!(before > 0 && peak >= before, "{ctx}: memory figures {before} and {peak} KiB");
            // Buffering the answer would add at least its 16 MiB; reading it in
            // pieces and stopping at the limit adds a few (buffers, threads).
            assert!(peak - before < 8 * 1024, "{ctx}: grew from {before} to {peak} KiB");
            assert_eq!(fake.attempts("m-huge", 0), 1, "{ctx}: a size limit is not retried");
        }
    }
}

// ------------------------------------------------------------------ 6. tools

/// Holds the tools that hang until the test lets them go, and counts them out.
#[derive(Default)]
struct Hold {
    released: Mutex<bool>,
    cv: Condvar,
    finished: AtomicUsize,
}

impl Hold {
    /// Blocks until released (a 20 s hang guard), then counts itself out.
    fn hang(&self) {
        let g = self.released.lock().unwrap();
        let _ = self.cv.wait_timeout_while(g, Duration::from_secs(20), |r| !*r).unwrap();
        self.finished.fetch_add(1, Ordering::SeqCst);
    }

    fn release(&self) {
        *self.released.lock().unwrap() = true;
        self.cv.notify_all();
    }

    /// Waits until `n` hung tools have returned (a 10 s hang guard).
    fn wait_finished(&self, n: usize) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while self.finished.load(Ordering::SeqCst) < n {
            if Instant::now() > until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

/// A panic (blocking or async) and a timeout (the tool's own, and the
/// client-wide one) each become an error result the model receives; the run
/// completes, and the next turn's retry runs no tool again.
fn tool_panics_and_timeouts_become_error_results_and_never_rerun(d: Drv) {
    const GENEROUS: Duration = Duration::from_secs(30);
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let fake = FakeProvider::start(
            Scripts::new(KEY).model(
                "m-tools",
                script(vec![
                    Turn::default()
                        .call("boom", "{}")
                        .call("boom_async", "{}")
                        .call("stuck", "{}")
                        .call("lingering", "{}")
                        .call("count", r#"{"n":1}"#),
                    Turn::text("handled").fault(Fault::status_retry_after(503, "0")),
                ])
                .expect_final(ExpectFinal {
                    tool_result_contains: vec![
                        "panicked: kaboom".into(),
                        "panicked: async kaboom".into(),
                        "timed out".into(),
                        "counted 1".into(),
                    ],
                    tool_results: Some(5),
                    messages: None,
                }),
            ),
        );
        let hold = Arc::new(Hold::default());
        let calls: Arc<Mutex<Vec<&'static str>>> = Arc::default();
        let (h1, h2, c1, c2, c3, c4) =
            (hold.clone(), hold.clone(), calls.clone(), calls.clone(), calls.clone(), calls.clone());
        let runs = counter();
        let r2 = runs.clone();
        let cfg = builder(&fake, style, "m-tools", false)
            .tool_timeout(Duration::from_millis(150))
            // Only `lingering` lives under the client-wide 150 ms: the others get
            // time enough for a panic hook printing a backtrace on a loaded machine.
            .dyn_tool(
                DynTool::new("boom", "panics", json!({"type": "object"}), move |_, _| {
                    c1.lock().unwrap().push("boom");
                    panic!("kaboom")
                })
                .timeout(GENEROUS),
            )
            .dyn_tool(
                DynTool::new_async("boom_async", "panics later", json!({"type": "object"}), move |_, _| {
                    c2.lock().unwrap().push("boom_async");
                    async move {
                        smol::future::yield_now().await;
                        panic!("async kaboom")
                    }
                })
                .timeout(GENEROUS),
            )
            .dyn_tool(
                DynTool::new("stuck", "hangs", json!({"type": "object"}), move |_, _| {
                    c3.lock().unwrap().push("stuck");
                    h1.hang();
                    Ok(ToolOutcome::Done(json!("stuck came back")))
                })
                .timeout(Duration::from_millis(100)),
            )
            .dyn_tool(DynTool::new("lingering", "hangs too", json!({"type": "object"}), move |_, _| {
                c4.lock().unwrap().push("lingering");
                h2.hang();
                Ok(ToolOutcome::Done(json!("lingering came back")))
            }))
            .dyn_tool(
                ok_tool("count", move |_, _| format!("counted {}", r2.fetch_add(1, Ordering::SeqCst) + 1))
                    .timeout(GENEROUS),
            )
            .build()
            .unwrap();
        let r = d.client(cfg).run("break things").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!((r.status, r.text.as_str()), (RunStatus::Done, "handled"), "{ctx}");
        let results: Vec<(bool, String)> = r.tool_calls.iter().map(|c| (c.is_error, c.output.clone())).collect();
        assert_eq!(results.len(), 5, "{ctx}");
        assert_eq!(results[0], (true, "tool boom panicked: kaboom".to_string()), "{ctx}");
        assert_eq!(results[1], (true, "tool boom_async panicked: async kaboom".to_string()), "{ctx}");
        assert_eq!(results[2], (true, "tool stuck timed out after 100 ms".to_string()), "{ctx}");
        assert_eq!(results[3], (true, "tool lingering timed out after 150 ms".to_string()), "{ctx}");
        assert_eq!(results[4], (false, "counted 1".to_string()), "{ctx}");
        // The model saw the same results, flagged as errors.
        let sent: Vec<bool> = r.messages.iter().flat_map(|m| m.tool_results()).map(|b| b.is_error).collect();
        assert_eq!(sent, [true, true, true, true, false], "{ctx}");
        assert_eq!(fake.attempts("m-tools", 1), 2, "{ctx}: the last turn was retried once");

        // The hung tools come back late; nothing runs again and the result stands.
        hold.release();
        assert!(hold.wait_finished(2), "{ctx}: the hung tools never returned");
        let mut ran = calls.lock().unwrap().clone();
        ran.sort_unstable();
        assert_eq!(ran, ["boom", "boom_async", "lingering", "stuck"], "{ctx}: each tool ran once");
        assert_eq!(runs.load(Ordering::SeqCst), 1, "{ctx}");
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
    }
}

// ------------------------------------------------------------------ 7. killed writer

/// A fresh client of `style` whose `transfer` tool suspends on an approval.
fn parking_client(d: Drv, fake: &FakeProvider, style: Style) -> Cl {
    d.client(transfer_tools(builder(fake, style, "m-park", false), &counter(), &counter()).build().unwrap())
}

/// A suspended run whose prompt is padded to `pad` bytes, tagged `tag`.
fn suspended_state(d: Drv, fake: &FakeProvider, style: Style, tag: &str, pad: usize) -> Vec<u8> {
    let prompt = format!("{tag} {}", "x".repeat(pad));
    let r = parking_client(d, fake, style).run(&prompt).unwrap_or_else(|e| panic!("{d:?} {style:?}: {e}"));
    assert_eq!(r.status, RunStatus::Pending, "{d:?} {style:?}");
    r.suspended.expect("a pending run carries its state").state
}

/// The state restores on a fresh client of its style: pending on the approval, tagged as saved.
fn assert_restorable(d: Drv, fake: &FakeProvider, style: Style, state: &[u8], tag: &str, ctx: &str) {
    let sent = fake.requests().len();
    let r = parking_client(d, fake, style)
        .resume(state, vec![])
        .unwrap_or_else(|e| panic!("{ctx}: the state does not restore: {e}"));
    assert_eq!(r.status, RunStatus::Pending, "{ctx}");
    assert_eq!(r.pending.iter().map(|p| p.prompt.as_str()).collect::<Vec<_>>(), ["approve 5"], "{ctx}");
    assert!(r.messages[0].text().starts_with(tag), "{ctx}: not the state that was saved");
    assert_eq!(fake.requests().len(), sent, "{ctx}: restoring sent nothing");
}

fn temp_leftovers(dir: &std::path::Path) -> usize {
    fs::read_dir(dir)
        .map(|rd| rd.filter_map(Result::ok).filter(|e| e.file_name().to_string_lossy().contains(".tmp-")).count())
        .unwrap_or(0)
}

/// A worker saves large suspended states into a file run store in a loop
/// and is SIGKILLed at seeded random points. After each kill the record is
/// whole and consistent (the state its version says, of the save just
/// before the kill or of the one in progress), it restores, and a save
/// from here works whatever temp files the dead writer left behind.
///
/// The write under test is the store's own (`FileRunStore::save`, called
/// by the worker directly): both drivers reach it through that same code,
/// so the kill loop runs once. The drivers come in where the states are
/// made (half by each) and where each surviving record is restored (by both).
#[test]
fn a_killed_writer_never_leaves_a_torn_state() {
    const KILLS: u64 = 16;
    let park = || script(vec![Turn::default().call("transfer", r#"{"amount":5}"#), Turn::text("never")]);
    let fake = FakeProvider::start(Scripts::new(KEY).model("m-park", park()));
    // Two states per style, each a few hundred KiB: writes take long enough to be cut.
    let mut states: Vec<(Style, String, Vec<u8>)> = Vec::new();
    for style in STYLES {
        for g in 0..2 {
            let tag = format!("gen-{}-{g}", style.name());
            // One state of each style made by each driver.
            let d = [Drv::Blocking, Drv::Async][g];
            let state = suspended_state(d, &fake, style, &tag, 384 * 1024 + g * 1000);
            states.push((style, tag, state));
        }
    }
    let state_dir = temp_dir("states");
    for (i, (_, _, s)) in states.iter().enumerate() {
        fs::write(state_dir.join(i.to_string()), s).unwrap();
    }
    let store_dir = temp_dir("killed");
    let store = FileRunStore::open(&store_dir).unwrap();
    let id = "run/killed-writer";
    let of_version = |v: u64| &states[usize::try_from((v - 1) % states.len() as u64).unwrap()];
    let mut rng = Rng::new(0x5eed);
    for kill in 0..KILLS {
        let ctx = format!("kill {kill}");
        let mut child = worker(
            "save",
            &[
                ("NEXUS_FW_DIR", store_dir.display().to_string()),
                ("NEXUS_FW_STATES", state_dir.display().to_string()),
                ("NEXUS_FW_ID", id.to_string()),
            ],
        )
        .spawn()
        .expect("the worker starts");
        let mut replies = Replies::of(&mut child);
        if replies.wait_for("saved ", Duration::from_secs(30)).is_none() {
            let _ = child.kill();
            panic!("{ctx}: the worker never saved: {}", read_all(child.stderr.take().unwrap()));
        }
        // A seeded random point inside the next few saves.
        std::thread::sleep(Duration::from_millis(rng.below(40)));
        child.kill().expect("SIGKILL");
        child.wait().expect("the worker is reaped");
        let printed: Vec<u64> =
            replies.drain().iter().filter_map(|l| l.strip_prefix("saved ").and_then(|v| v.parse().ok())).collect();
        let last = *printed.iter().max().unwrap();

        let rec = store.load(id).unwrap_or_else(|e| panic!("{ctx}: the store no longer loads: {e}")).expect("a record");
        // The save reported last, or the one after it, which reached its rename before the kill.
        assert!(rec.version == last || rec.version == last + 1, "{ctx}: version {} after {last}", rec.version);
        assert!(!rec.claimed, "{ctx}");
        let (style, tag, state) = of_version(rec.version);
        assert!(rec.state == *state, "{ctx}: version {} does not hold its state", rec.version);
        for d in [Drv::Blocking, Drv::Async] {
            assert_restorable(d, &fake, *style, &rec.state, tag, &format!("{ctx} {d:?}"));
        }

        // Saving on top works, leftovers or not.
        let (_, _, next) = of_version(rec.version + 1);
        assert_eq!(store.save(id, next, Some(rec.version)), Ok(rec.version + 1), "{ctx}");
        assert_eq!(store.load(id).unwrap().map(|r| r.state == *next), Some(true), "{ctx}");
    }
    // Reported, not asserted: whether a kill lands inside a write is up to the scheduler.
    eprintln!("{} temp file(s) left by killed writers across {KILLS} kills", temp_leftovers(&store_dir));
    let _ = fs::remove_dir_all(&store_dir);
    let _ = fs::remove_dir_all(&state_dir);
}

// ------------------------------------------------------------------ 8. concurrent resume

/// Two worker processes resume one stored run with the same answer at the
/// same time: one wins the claim and finishes the run; the other is
/// refused with the store's `Claimed` error. The approved tool ran once
/// and the fake saw one continuation.
fn two_processes_resuming_one_run_have_one_winner(d: Drv) {
    for style in STYLES {
        let ctx = format!("{d:?} {style:?}");
        let model = "m-race";
        let fake = FakeProvider::start(
            Scripts::new(KEY).model(
                model,
                script(vec![Turn::default().call("transfer", r#"{"amount":5}"#), Turn::text("paid once")])
                    .expect_final(expect_results(1, &["sent 5"])),
            ),
        );
        let dir = temp_dir("race");
        let count_file = dir.join("count");
        let cfg = builder(&fake, style, model, false)
            .dyn_tool(approval_tool(count_file.clone(), None, "parent".into()))
            .build()
            .unwrap();
        let r = d.client(cfg).run("pay").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let s = r.suspended.expect("pending on the approval");
        let store_dir = dir.join("store");
        let store = FileRunStore::open(&store_dir).unwrap();
        assert_eq!(store.save(&s.run_id, &s.state, None), Ok(1), "{ctx}");

        let env = |tag: &str| {
            let mut env = client_env(d, &fake, style, model);
            env.extend([
                ("NEXUS_FW_DIR", store_dir.display().to_string()),
                ("NEXUS_FW_ID", s.run_id.clone()),
                ("NEXUS_FW_ANSWER", s.pending[0].id.clone()),
                ("NEXUS_FW_COUNT", count_file.display().to_string()),
                ("NEXUS_FW_LOST", dir.join("lost").display().to_string()),
                ("NEXUS_FW_TAG", tag.to_string()),
            ]);
            env
        };
        let a = worker("resume", &env("a")).spawn().expect("worker a starts");
        let b = worker("resume", &env("b")).spawn().expect("worker b starts");
        let (ra, ea) = replies(a);
        let (rb, eb) = replies(b);
        let mut outcomes = [ra.join("|"), rb.join("|")];
        outcomes.sort();
        let claimed = format!("err {:?}", DriveError::Store(StoreError::Claimed(s.run_id.clone())));
        assert_eq!(outcomes, [claimed, "ok paid once".to_string()], "{ctx}: {ea} {eb}");

        let mut lines: Vec<String> = fs::read_to_string(&count_file).unwrap().lines().map(str::to_string).collect();
        let winner = if ra.first().is_some_and(|l| l.starts_with("ok")) { "a" } else { "b" };
        let mut expected = vec!["parent asked".to_string(), format!("{winner} answered")];
        lines.sort();
        expected.sort();
        assert_eq!(lines, expected, "{ctx}: the tool ran once, in the winner");
        assert_eq!(bodies(&fake, model, 1).len(), 1, "{ctx}: one continuation request");
        assert_eq!(store.load(&s.run_id), Ok(None), "{ctx}: the finished run left the store");
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
        let _ = fs::remove_dir_all(&dir);
    }
}
