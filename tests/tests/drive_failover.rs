//! Failover end to end: both drivers against two fake providers, the first
//! failing on purpose (resets, a 503 storm, a 529/429 with a long
//! `Retry-After`, a stall), for every ordered pair of wire formats. The
//! second upstream continues from a transcript the first one wrote
//! (thinking, signatures, call ids) and must accept every request under its
//! strict checks. Expectations come from the contract (SPEC §3.8), never
//! from a previous run's output.

#[macro_use]
mod drive_support;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use drive_support::*;
use nexus_drive::cassette::{replay, Cassette, Quiet, Recorder, ReplayEnd, Tap};
use nexus_drive::{
    BreakerPolicy, DriveError, FailoverPolicy, Metric, RunError, RunStatus, StreamEvent, Upstream, UpstreamTurn,
};
use nexus_tests::fake::{ExpectFinal, FakeProvider, Fault, FaultKind, Script, Scripts, Style, Turn};

both_drivers!(
    every_pair_of_formats_fails_over_on_every_upstream_fault,
    a_request_error_never_fails_over,
    a_failure_after_text_reached_the_host_ends_the_run,
    an_open_circuit_sends_later_runs_straight_to_the_next_upstream,
);

const FIRST: &str = "Counting now.";
const FINAL: &str = "All counted, nothing twice.";
const PRIMARY_KEY: &str = "sk-primary-key";
const BACKUP_KEY: &str = "sk-backup-key";

/// Gemini 3 names: the fake then requires a thought signature on every
/// function-call turn, as the API does.
fn model(style: Style, role: &str) -> String {
    match style {
        Style::Gemini => format!("gemini-3-{role}"),
        _ => format!("{}-{role}", style.name()),
    }
}

/// Turn 0 thinks (signed), says `FIRST` and calls `count`; turn 1 says
/// `FINAL` and must see the one result. `turn1` faults hit the primary.
fn script(style: Style, turn1: &[Fault]) -> Script {
    let t0 = Turn::default()
        .thinking("Let me count carefully.", "c2lnbmVkLXRoaW5raW5n")
        .with_text(FIRST)
        .call("count", r#"{"n":1}"#);
    let mut t1 = Turn::text(FINAL);
    t1.faults = turn1.to_vec();
    Script::new(vec![t0, t1]).expect_final(ExpectFinal {
        tool_result_contains: vec!["counted 1".into()],
        tool_results: Some(1),
        // prompt, the call turn, its result (the Responses fake counts input
        // items its own way: its tool-result count is checked instead).
        messages: (style != Style::OpenAiResponses).then_some(3),
    })
}

struct Pair {
    primary: FakeProvider,
    backup: FakeProvider,
    a: Style,
    b: Style,
}

impl Pair {
    fn start(a: Style, b: Style, turn1: &[Fault]) -> Pair {
        let primary = FakeProvider::start(Scripts::new(PRIMARY_KEY).model(model(a, "primary"), script(a, turn1)));
        let backup = FakeProvider::start(Scripts::new(BACKUP_KEY).model(model(b, "backup"), script(b, &[])));
        Pair { primary, backup, a, b }
    }

    fn backup_upstream(&self) -> Upstream {
        Upstream { style: proto_style(self.b), base_url: self.backup.base_url(self.b), model: model(self.b, "backup") }
    }

    fn builder(&self, stream: bool, retries: u32) -> nexus_drive::ClientBuilder {
        builder(&self.primary, self.a, &model(self.a, "primary"), stream)
            .api_key(PRIMARY_KEY)
            .retries(retries)
            .fallback_key(self.backup_upstream(), BACKUP_KEY)
            .failover_policy(FailoverPolicy {
                head_timeout_ms: Some(400),
                retry_after_bound_ms: 5_000,
                ..FailoverPolicy::default()
            })
    }
}

fn count_tool(b: nexus_drive::ClientBuilder) -> (nexus_drive::ClientBuilder, Arc<std::sync::atomic::AtomicUsize>) {
    let runs = counter();
    let c = runs.clone();
    (b.dyn_tool(ok_tool("count", move |_, _| format!("counted {}", c.fetch_add(1, Ordering::SeqCst) + 1))), runs)
}

fn failovers_of(events: &[StreamEvent]) -> Vec<(u32, usize, usize)> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Failover { turn, from, to, .. } => Some((*turn, *from, *to)),
            _ => None,
        })
        .collect()
}

fn every_pair_of_formats_fails_over_on_every_upstream_fault(d: Drv) {
    let long_wait = |s: Style| {
        let status = if s == Style::Anthropic { 529 } else { 429 };
        vec![Fault::status_retry_after(status, "60")]
    };
    for a in STYLES {
        for b in STYLES.into_iter().filter(|b| *b != a) {
            let faults: [(&str, Vec<Fault>, u32); 4] = [
                ("reset", vec![Fault::new(FaultKind::ResetBeforeHeaders).times(3)], 3),
                ("503 storm", vec![Fault::status(503).times(3)], 3),
                ("long retry-after", long_wait(a), 1),
                ("stall", vec![Fault::new(FaultKind::Stall { ms: 3_000 })], 1),
            ];
            for (name, turn1, attempts) in faults {
                for stream in [false, true] {
                    let ctx = format!("{d:?} {} → {} ({name}, stream {stream})", a.name(), b.name());
                    let pair = Pair::start(a, b, &turn1);
                    let (bld, runs) = count_tool(pair.builder(stream, 2));
                    let (bld, events) = Events::record(bld);
                    let client = d.client(bld.build().unwrap());
                    let result = client.run("count once").unwrap_or_else(|e| panic!("{ctx}: {e}"));
                    assert_eq!(result.status, RunStatus::Done, "{ctx}");
                    assert_eq!(result.text, FINAL, "{ctx}");
                    assert!(pair.primary.failures().is_empty() && pair.backup.failures().is_empty(), "{ctx}");
                    assert_eq!(runs.load(Ordering::SeqCst), 1, "{ctx}: the tool ran once");
                    let primary_model = model(a, "primary");
                    assert_eq!(pair.primary.attempts(&primary_model, 1), attempts, "{ctx}: attempts at the primary");
                    let backup_requests = pair.backup.requests();
                    assert_eq!(backup_requests.len(), 1, "{ctx}: one request to the backup");
                    assert_eq!((backup_requests[0].turn, backup_requests[0].status), (Some(1), Some(200)), "{ctx}");
                    assert_eq!(failovers_of(&events.recorded()), vec![(2, 0, 1)], "{ctx}");
                    assert_eq!(
                        result.upstreams,
                        vec![
                            UpstreamTurn {
                                turn: 1,
                                style: proto_style(a),
                                base_url: pair.primary.base_url(a),
                                model: primary_model.clone(),
                            },
                            UpstreamTurn {
                                turn: 2,
                                style: proto_style(b),
                                base_url: pair.backup.base_url(b),
                                model: model(b, "backup"),
                            },
                        ],
                        "{ctx}"
                    );
                    assert_eq!(result.failovers.len(), 1, "{ctx}");
                    assert_eq!(result.failovers[0].to, pair.backup_upstream(), "{ctx}");
                    assert_eq!(result.failovers[0].turn, 2, "{ctx}");
                }
            }
        }
    }
}

fn a_request_error_never_fails_over(d: Drv) {
    for a in STYLES {
        let b = if a == Style::OpenAi { Style::Gemini } else { Style::OpenAi };
        let pair = Pair::start(a, b, &[Fault::status(400)]);
        let (bld, _) = count_tool(pair.builder(false, 2));
        let err = run_error(d.client(bld.build().unwrap()).run("count once"));
        let DriveError::Run(RunError::Provider(p)) = &err else { panic!("{a:?}: {err:?}") };
        assert_eq!(p.status, Some(400), "{a:?}");
        assert!(pair.backup.requests().is_empty(), "{a:?}: nothing went to the backup");
        assert_eq!(pair.primary.attempts(&model(a, "primary"), 1), 1, "{a:?}: a 400 is not retried");
    }
}

fn a_failure_after_text_reached_the_host_ends_the_run(d: Drv) {
    for a in STYLES {
        let b = if a == Style::Anthropic { Style::Gemini } else { Style::Anthropic };
        // Events before the first text delta: Anthropic message_start,
        // content_block_start, ping; OpenAI the role chunk; Gemini none.
        let after_events = match a {
            Style::Anthropic => 4,
            Style::OpenAi => 2,
            Style::Gemini => 1,
            // created, in_progress, the message's output_item.added and
            // content_part.added, then its first text delta.
            Style::OpenAiResponses => 5,
        };
        let pair = Pair::start(a, b, &[Fault::new(FaultKind::ResetMidStream { after_events })]);
        let (bld, _) = count_tool(pair.builder(true, 2));
        let client = d.client(bld.build().unwrap());
        let (events, end) = client.stream("count once");
        let err = match end {
            Ok(r) => panic!("{a:?}: expected a failure, got {:?} after {:?}", r.text, events),
            Err(e) => e,
        };
        let shown = shown_text(&events);
        let partial = shown.strip_prefix(FIRST).unwrap_or_else(|| panic!("{a:?}: shown {shown:?}"));
        assert!(!partial.is_empty() && FINAL.starts_with(partial), "{a:?}: part of turn 2 was shown: {partial:?}");
        assert_eq!(pair.primary.attempts(&model(a, "primary"), 1), 1, "{a:?}: not retried");
        assert!(
            matches!(&err, DriveError::Run(RunError::Transport { .. }) | DriveError::Run(RunError::Decode(_))),
            "{a:?}: {err:?}"
        );
        assert!(failovers_of(&events).is_empty(), "{a:?}");
        assert!(pair.backup.requests().is_empty(), "{a:?}: nothing went to the backup");
    }
}

fn an_open_circuit_sends_later_runs_straight_to_the_next_upstream(d: Drv) {
    let (a, b) = (Style::Anthropic, Style::OpenAi);
    // The primary resets on every attempt at turn 0, for both runs.
    let primary_script =
        Script::new(vec![Turn::text("never").fault(Fault::new(FaultKind::ResetBeforeHeaders).times(10))]);
    let primary = FakeProvider::start(Scripts::new(PRIMARY_KEY).model(model(a, "primary"), primary_script));
    let backup =
        FakeProvider::start(Scripts::new(BACKUP_KEY).model(model(b, "backup"), Script::new(vec![Turn::text(FINAL)])));
    let backup_up = Upstream { style: proto_style(b), base_url: backup.base_url(b), model: model(b, "backup") };
    let metrics: Arc<Mutex<Vec<Metric>>> = Arc::default();
    let sink = metrics.clone();
    // Each run to a cassette of its own: the second's routing comes from the first's failures.
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-circuits-{}-{d:?}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cassette = |name: &str| {
        let rec = Recorder::create(&dir.join(name)).unwrap();
        rec.set_api_key(PRIMARY_KEY);
        rec.set_api_key(BACKUP_KEY);
        Arc::new(rec)
    };
    let recorder: Arc<Mutex<Arc<Recorder>>> = Arc::new(Mutex::new(cassette("first.jsonl")));
    let cfg = builder(&primary, a, &model(a, "primary"), false)
        .api_key(PRIMARY_KEY)
        .retries(1)
        .fallback_key(backup_up.clone(), BACKUP_KEY)
        .breaker_policy(BreakerPolicy { failures: 2, window_ms: 60_000, cooldown_ms: 600_000 })
        .on_metric(move |m| sink.lock().unwrap().push(m.clone()))
        .tap(Arc::new(Switch(recorder.clone())))
        .build()
        .unwrap();
    let client = d.client(cfg);
    let first = client.run("hello").unwrap();
    assert_eq!(first.text, FINAL);
    assert_eq!(primary.requests().len(), 2, "an attempt and a retry, then the failover");
    assert!(first.failovers[0].reason.contains("transport"), "{:?}", first.failovers);
    recorder.lock().unwrap().finish().unwrap();
    *recorder.lock().unwrap() = cassette("second.jsonl");
    // The circuit is open now: the next run never touches the primary.
    let second = client.run("hello again").unwrap();
    recorder.lock().unwrap().finish().unwrap();
    assert_eq!(second.text, FINAL);
    assert_eq!(primary.requests().len(), 2, "nothing more went to the open circuit");
    assert_eq!(second.failovers.len(), 1);
    assert_eq!(second.failovers[0].reason, "circuit open");
    assert_eq!(second.upstreams[0].base_url, backup.base_url(b));
    let failover_metrics = metrics.lock().unwrap().iter().filter(|m| matches!(m, Metric::Failover { .. })).count();
    assert_eq!(failover_metrics, 2, "one failover metric per failover");
    // Each cassette replays alone, in a process whose breakers never saw the
    // first run: the second routes past the primary because its cassette
    // says the circuit was open.
    for name in ["first.jsonl", "second.jsonl"] {
        let cassette = Cassette::load(&dir.join(name)).unwrap();
        let replayed = replay(&cassette, &mut Quiet).unwrap_or_else(|e| panic!("{d:?} {name}: {e}"));
        assert_eq!(replayed.runs, 1, "{name}");
        assert!(matches!(replayed.end, ReplayEnd::Finished(_)), "{name}: {:?}", replayed.end);
        assert_eq!(replayed.run.final_text(), FINAL, "{name}");
    }
    let second = std::fs::read_to_string(dir.join("second.jsonl")).unwrap();
    assert!(second.contains(r#""type":"circuits""#), "{second}");
    let to_primary =
        second.lines().filter(|l| l.contains(r#""type":"request""#) && l.contains(&primary.base_url(a))).count();
    assert_eq!(to_primary, 0, "the second run never went to the primary");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tap that writes to whichever recorder is current (one cassette per run).
struct Switch(Arc<Mutex<Arc<Recorder>>>);

impl Switch {
    fn current(&self) -> Arc<Recorder> {
        self.0.lock().unwrap().clone()
    }
}

impl Tap for Switch {
    fn started(&self, run: &nexus_proto::Run) {
        self.current().started(run)
    }
    fn input(&self, now: nexus_proto::Timestamp, input: &nexus_proto::Input<'_>) {
        self.current().input(now, input)
    }
    fn output(&self, run: &nexus_proto::Run, output: &nexus_proto::Output) {
        self.current().output(run, output)
    }
    fn circuits(&self, run: &nexus_proto::Run) {
        self.current().circuits(run)
    }
}
