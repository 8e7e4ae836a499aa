//! The store contract, one scenario per function, for any backend.

use std::sync::{Arc, Barrier};

use nexus_drive::stores::{wall_clock_ms, AnswerStatus, Checkpoints, Lease, RunFilter};
use nexus_drive::{Answer, ConversationStore, DriveError, Message, RunStatus, RunStore, StoreError};
use serde_json::json;

use super::*;

const ONE_CALL: &[&str] = &[r#"{"n":1}"#];
const TWO_CALLS: &[&str] = &[r#"{"n":1}"#, r#"{"n":2}"#];

/// Conversations, the plain run store contract, and inserted runs.
pub fn round_trips(db: &Db) {
    let store = db.open();
    let conv: &dyn ConversationStore = &*store;
    assert_eq!(conv.get("c").unwrap(), None);
    let msgs = vec![Message::user("hi"), Message::assistant("hello")];
    conv.save("c", &msgs).unwrap();
    assert_eq!(conv.get("c").unwrap(), Some(msgs.clone()));
    let more = vec![Message::user("hi"), Message::assistant("hello"), Message::user("again")];
    conv.save("c", &more).unwrap();
    assert_eq!(conv.get("c").unwrap(), Some(more));
    assert!(conv.delete("c").unwrap());
    assert!(!conv.delete("c").unwrap());
    assert_eq!(conv.get("c").unwrap(), None);
    assert!(matches!(conv.save("", &msgs), Err(StoreError::InvalidId(_))));

    // The plain RunStore contract (the drivers' `resume_stored` uses it):
    // compare-and-swap on versions, one claim at a time, any bytes kept.
    let runs: &dyn RunStore = &*store;
    assert_eq!(runs.load("r/1").unwrap(), None);
    assert_eq!(runs.save("r/1", b"s1", None).unwrap(), 1);
    assert!(matches!(runs.save("r/1", b"x", None), Err(StoreError::Conflict { expected: None, found: Some(1), .. })));
    assert_eq!(runs.save("r/1", b"s2", Some(1)).unwrap(), 2);
    assert!(matches!(
        runs.save("r/1", b"x", Some(1)),
        Err(StoreError::Conflict { expected: Some(1), found: Some(2), .. })
    ));
    let claimed = runs.claim("r/1").unwrap();
    assert_eq!((claimed.state.as_slice(), claimed.version, claimed.claimed), (&b"s2"[..], 3, true));
    assert!(runs.load("r/1").unwrap().unwrap().claimed);
    assert_eq!(runs.claim("r/1"), Err(StoreError::Claimed("r/1".into())));
    assert_eq!(runs.save("r/1", b"s3", Some(3)).unwrap(), 4);
    let rec = runs.load("r/1").unwrap().unwrap();
    assert_eq!((rec.state.as_slice(), rec.version, rec.claimed), (&b"s3"[..], 4, false));
    assert!(matches!(runs.delete("r/1", 3), Err(StoreError::Conflict { .. })));
    runs.delete("r/1", 4).unwrap();
    assert_eq!(runs.load("r/1").unwrap(), None);
    assert_eq!(runs.claim("r/1"), Err(StoreError::NotFound("r/1".into())));
    assert!(matches!(runs.save("", b"x", None), Err(StoreError::InvalidId(_))));

    // A real suspended run: stored byte for byte, listed with what it waits for.
    let fake = fake_with(&[("m-rt", TWO_CALLS, "all charged")]);
    let dir = temp_dir("rt");
    let s = suspend(&base_url(&fake), "m-rt", 1, ExecLog::new(&dir, "exec"));
    assert_eq!(store.insert_run(&s, Some("conv"), 1_000).unwrap(), 1);
    assert_eq!(runs.load(&s.run_id).unwrap().unwrap().state, s.state);
    assert!(matches!(
        store.insert_run(&s, None, 1_000),
        Err(StoreError::Conflict { expected: None, found: Some(1), .. })
    ));
    let listed = store.list_runs(&RunFilter::new(), 1_000).unwrap();
    assert_eq!(listed.len(), 1);
    let info = &listed[0];
    assert_eq!(info.run_id, s.run_id);
    assert_eq!(info.pending, s.pending, "the store lists what the run waits for");
    assert_eq!(info.kinds(), ["approval"]);
    assert_eq!((info.created_ms, info.updated_ms, info.claims, info.failures), (1_000, 1_000, 0, 0));
    assert_eq!(info.conversation_id.as_deref(), Some("conv"));
    assert!(!info.is_claimed(1_000) && info.answered.is_empty());

    // A state that does not restore is refused, and nothing is stored.
    let mut bad = s.clone();
    bad.run_id = "bad".into();
    bad.state = b"{\"format_version\": 1, \"nonsense\": true}".to_vec();
    assert!(matches!(store.insert_run(&bad, None, 1_000), Err(StoreError::Corrupt { .. })));
    assert_eq!(runs.load("bad").unwrap(), None);
    let _ = fs::remove_dir_all(dir);
}

/// One holder at a time; writes under a stale claim are refused.
pub fn claim_conflicts(db: &Db) {
    let store = db.open();
    let fake = fake_with(&[("m-cc", ONE_CALL, "done")]);
    let dir = temp_dir("cc");
    let s = suspend(&base_url(&fake), "m-cc", 2, ExecLog::new(&dir, "exec"));
    store.insert_run(&s, None, 1_000).unwrap();
    let answer = Answer::ok(s.pending[0].id.clone(), None);
    assert_eq!(store.record_answer(&s.run_id, &answer, 1_000).unwrap(), AnswerStatus::Recorded);

    let c1 = store.claim_run(&s.run_id, 1_000, 500).unwrap();
    assert_eq!((c1.lease.version, c1.lease.claimed_until, c1.claims), (2, 1_500, 1));
    assert_eq!(c1.state, s.state);
    assert_eq!(c1.answers, vec![answer.clone()]);
    assert_eq!(store.claim_run(&s.run_id, 1_200, 500), Err(StoreError::Claimed(s.run_id.clone())));
    assert_eq!(store.claim_ready(1_200, 500).unwrap(), None, "a held run is not offered");
    assert_eq!(store.claim_run("nope", 1_200, 500), Err(StoreError::NotFound("nope".into())));

    // Given back unchanged, with the failure counted.
    assert_eq!(store.release_claim(&c1.lease, Some("provider down"), 1_300).unwrap(), 3);
    let info = &store.list_runs(&RunFilter::new(), 1_300).unwrap()[0];
    assert_eq!((info.failures, info.last_error.as_deref()), (1, Some("provider down")));
    assert!(!info.is_claimed(1_300));
    assert_eq!(info.answered, vec![answer.id.clone()], "a release keeps the answers");
    // The old claim can no longer write.
    assert_eq!(
        store.release_claim(&c1.lease, None, 1_300),
        Err(StoreError::Conflict { id: s.run_id.clone(), expected: Some(2), found: Some(3) })
    );
    let mut stale = c1.lease.clone();
    assert!(matches!(
        store.save_progress(&mut stale, &s.state, 1_300, 500),
        Err(StoreError::Conflict { expected: Some(2), found: Some(3), .. })
    ));
    assert_eq!(stale, c1.lease, "a refused save leaves the lease as it was");

    // Ready again: offered once, to one claimer.
    let c2 = store.claim_ready(1_400, 500).unwrap().unwrap();
    assert_eq!((c2.lease.run_id.as_str(), c2.lease.version, c2.claims), (s.run_id.as_str(), 4, 2));
    assert_eq!(store.claim_ready(1_400, 500).unwrap(), None);
    assert_eq!(store.suspend_claimed(&c2.lease, &c2.state, 1_450).unwrap(), 5);
    let info = &store.list_runs(&RunFilter::new(), 1_450).unwrap()[0];
    assert_eq!((info.failures, info.last_error.as_deref()), (0, None), "a clean suspend resets the count");

    // Eight connections race for one claim: exactly one wins.
    let barrier = Arc::new(Barrier::new(8));
    let wins: Vec<bool> = (0..8)
        .map(|_| {
            let (db, id, b) = (db.clone(), s.run_id.clone(), barrier.clone());
            std::thread::spawn(move || {
                let store = db.open();
                b.wait();
                match store.claim_run(&id, 2_000, 500) {
                    Ok(_) => true,
                    Err(StoreError::Claimed(_)) => false,
                    Err(e) => panic!("claim failed: {e}"),
                }
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert_eq!(wins.iter().filter(|w| **w).count(), 1, "{wins:?}");
    let _ = fs::remove_dir_all(dir);
}

/// `claim_ready` stops offering a run that keeps failing; it can still be claimed by id.
pub fn failing_runs_are_set_aside(db: &Db) {
    let db = Db { max_failures: Some(2), ..db.clone() };
    let store = db.open();
    let fake = fake_with(&[("m-fail", ONE_CALL, "done")]);
    let dir = temp_dir("fail");
    let s = suspend(&base_url(&fake), "m-fail", 3, ExecLog::new(&dir, "exec"));
    store.insert_run(&s, None, 0).unwrap();
    store.record_answer(&s.run_id, &Answer::ok(s.pending[0].id.clone(), None), 0).unwrap();
    for t in [10, 20] {
        let c = store.claim_ready(t, 5).unwrap().expect("offered while under the limit");
        store.release_claim(&c.lease, Some("boom"), t).unwrap();
    }
    assert_eq!(store.claim_ready(30, 5).unwrap(), None);
    let c = store.claim_run(&s.run_id, 30, 5).unwrap();
    assert_eq!(c.claims, 3);
    let _ = fs::remove_dir_all(dir);
}

/// A claim runs out at `claimed_until`; the next claimer fences the old one out.
pub fn lease_expiry(db: &Db) {
    let store = db.open();
    let fake = fake_with(&[("m-lease", TWO_CALLS, "done")]);
    let dir = temp_dir("lease");
    let s = suspend(&base_url(&fake), "m-lease", 4, ExecLog::new(&dir, "exec"));
    store.insert_run(&s, None, 0).unwrap();
    for r in &s.pending {
        store.record_answer(&s.run_id, &Answer::ok(r.id.clone(), None), 0).unwrap();
    }
    const T: u64 = 1_000_000;
    let c1 = store.claim_run(&s.run_id, T, 1_000).unwrap();
    assert_eq!(store.claim_run(&s.run_id, T + 999, 1_000), Err(StoreError::Claimed(s.run_id.clone())));
    let listed = store.list_runs(&RunFilter::new().claimed(true), T + 999).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].claimed_until, Some(T + 1_000));
    assert!(store.list_runs(&RunFilter::new().claimed(true), T + 1_000).unwrap().is_empty());

    // The worker died: at the lease's end the run is claimable again, answers intact.
    let c2 = store.claim_run(&s.run_id, T + 1_000, 1_000).unwrap();
    assert_eq!((c2.lease.version, c2.claims), (c1.lease.version + 1, 2));
    assert_eq!(c2.answers.len(), 2);
    // The first worker, back from the dead, cannot write any more.
    let mut old = c1.lease.clone();
    let fenced =
        StoreError::Conflict { id: s.run_id.clone(), expected: Some(c1.lease.version), found: Some(c2.lease.version) };
    assert_eq!(store.save_progress(&mut old, &s.state, T + 1_001, 1_000), Err(fenced.clone()));
    assert_eq!(store.suspend_claimed(&c1.lease, &s.state, T + 1_001), Err(fenced.clone()));
    assert_eq!(store.finish_claimed(&c1.lease, None, T + 1_001), Err(fenced.clone()));
    assert_eq!(store.release_claim(&c1.lease, None, T + 1_001), Err(fenced));

    // A progress save extends the lease from its own `now`.
    let mut lease = c2.lease.clone();
    store.save_progress(&mut lease, &c2.state, T + 1_500, 1_000).unwrap();
    assert_eq!((lease.version, lease.claimed_until), (c2.lease.version + 1, T + 2_500));
    assert_eq!(store.claim_run(&s.run_id, T + 2_000, 1_000), Err(StoreError::Claimed(s.run_id.clone())));
    let c3 = store.claim_run(&s.run_id, T + 2_500, 1_000).unwrap();
    assert_eq!(c3.claims, 3);
    let _ = fs::remove_dir_all(dir);
}

/// A claim renewed without a state write (SPEC §20.2): the lease moves on,
/// the version does not; a renewal after the claim was lost or released is
/// refused. Then a resume whose tool outlives two leases keeps its claim
/// through the checkpoints' heartbeat: every claim tried meanwhile is refused.
pub fn heartbeat_keeps_the_claim(db: &Db) {
    let store = db.open();
    let fake = fake_with(&[("m-beat", ONE_CALL, "charged slowly")]);
    let url = base_url(&fake);
    let dir = temp_dir("beat");
    let s = suspend(&url, "m-beat", 6, ExecLog::new(&dir, "exec"));
    store.insert_run(&s, None, 0).unwrap();

    const T: u64 = 1_000_000;
    let c1 = store.claim_run(&s.run_id, T, 1_000).unwrap();
    let mut lease = c1.lease.clone();
    store.renew_claim(&mut lease, T + 900, 1_000).unwrap();
    assert_eq!((lease.version, lease.claimed_until), (c1.lease.version, T + 1_900));
    assert_eq!(store.claim_run(&s.run_id, T + 1_500, 1_000), Err(StoreError::Claimed(s.run_id.clone())));
    let c2 = store.claim_run(&s.run_id, T + 1_900, 1_000).unwrap();
    let fenced =
        StoreError::Conflict { id: s.run_id.clone(), expected: Some(c1.lease.version), found: Some(c2.lease.version) };
    assert_eq!(store.renew_claim(&mut lease, T + 1_901, 1_000), Err(fenced));
    let released = store.release_claim(&c2.lease, None, T + 2_000).unwrap();
    let mut after_release = c2.lease.clone();
    assert!(store.renew_claim(&mut after_release, T + 2_001, 1_000).is_err(), "a released claim is not renewed");
    let mut stale = Lease { version: released, ..c2.lease.clone() };
    assert!(store.renew_claim(&mut stale, T + 2_001, 1_000).is_err(), "nor is a run nobody holds");

    // The slow resume: a lease of 300 ms, a tool taking 900 ms, a second
    // worker trying to claim all along.
    const LEASE_MS: u64 = 300;
    let rival = db.open();
    let run_id = s.run_id.clone();
    let refused = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (seen_refused, seen_taken) = (refused.clone(), taken.clone());
    let slow = DynTool::new("charge", "Charges slowly", json!({"type": "object"}), move |_, _| {
        let end = std::time::Instant::now() + std::time::Duration::from_millis(3 * LEASE_MS);
        while std::time::Instant::now() < end {
            match rival.claim_run(&run_id, wall_clock_ms(), LEASE_MS) {
                Err(StoreError::Claimed(_)) => seen_refused.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                _ => seen_taken.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            };
            std::thread::sleep(std::time::Duration::from_millis(40));
        }
        Ok(ToolOutcome::Done(json!("charged 1")))
    });
    let ck = Arc::new(Checkpoints::new(store.clone()).with_lease_ms(LEASE_MS));
    let worker = client_with_tool(&url, "m-beat", 6, slow, ck.clone());
    store.record_answer(&s.run_id, &Answer::ok(s.pending[0].id.clone(), None), wall_clock_ms()).unwrap();
    let claim = ck.claim(&s.run_id).unwrap();
    let r = ck.resume(&worker, claim).unwrap();
    assert_eq!((r.status, r.text.as_str()), (RunStatus::Done, "charged slowly"));
    assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 0, "a rival claimed the run mid-resume");
    assert!(refused.load(std::sync::atomic::Ordering::SeqCst) >= 15, "the rival kept trying");
    assert!(store.list_runs(&RunFilter::new(), wall_clock_ms()).unwrap().is_empty(), "finished and removed");
    let _ = fs::remove_dir_all(dir);
}

/// A renewal that finds the claim lost stops the resume before its next
/// side effect: the tool's result is never sent to the model, nothing more
/// is written, and the resume ends with the store's conflict.
pub fn a_lost_claim_stops_the_resume(db: &Db) {
    let store = db.open();
    let fake = fake_with(&[("m-lost", ONE_CALL, "never said")]);
    let url = base_url(&fake);
    let dir = temp_dir("lost");
    let s = suspend(&url, "m-lost", 7, ExecLog::new(&dir, "exec"));
    store.insert_run(&s, None, 0).unwrap();
    store.record_answer(&s.run_id, &Answer::ok(s.pending[0].id.clone(), None), wall_clock_ms()).unwrap();
    const LEASE_MS: u64 = 300;
    let rival = db.open();
    let run_id = s.run_id.clone();
    // The tool stalls; meanwhile another worker, whose clock runs far ahead,
    // takes the run as if the lease had run out.
    let slow = DynTool::new("charge", "Charges slowly", json!({"type": "object"}), move |_, ctx| {
        let rival_claim = rival.claim_run(&run_id, wall_clock_ms() + 60_000, 60_000);
        assert!(rival_claim.is_ok(), "{rival_claim:?}");
        let end = std::time::Instant::now() + std::time::Duration::from_millis(2 * LEASE_MS);
        while std::time::Instant::now() < end && !ctx.is_cancelled() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(ToolOutcome::Done(json!("charged 1")))
    });
    let ck = Arc::new(Checkpoints::new(store.clone()).with_lease_ms(LEASE_MS));
    let worker = client_with_tool(&url, "m-lost", 7, slow, ck.clone());
    let sent_before = fake.requests_for("m-lost").len();
    let claim = ck.claim(&s.run_id).unwrap();
    let e = ck.resume(&worker, claim).unwrap_err();
    assert!(matches!(&e, DriveError::Store(StoreError::Conflict { .. })), "{e:?}");
    assert_eq!(fake.requests_for("m-lost").len(), sent_before, "no model call after the claim was lost");
    let info = &store.list_runs(&RunFilter::new(), wall_clock_ms()).unwrap()[0];
    assert!(info.is_claimed(wall_clock_ms()), "the rival holds it, untouched by the lost resume");
    let _ = fs::remove_dir_all(dir);
}

/// A client of the fake at `url` with `tool` as its only tool, resuming through `ck`.
fn client_with_tool(
    url: &str,
    model: &str,
    seed: u64,
    tool: nexus_drive::DynTool,
    ck: Arc<dyn nexus_drive::cassette::Tap>,
) -> nexus_drive::blocking::Client {
    let config = nexus_drive::ClientConfig::builder(nexus_drive::Style::OpenAi, model)
        .base_url(url)
        .api_key(KEY)
        .seed(seed)
        .dyn_tool(tool)
        .tap(ck)
        .build()
        .unwrap();
    nexus_drive::blocking::Client::new(config)
}

/// A web handler records answers before any worker claims; workers resume
/// with them, partially, then wholly; finishing saves the conversation.
pub fn answers_before_claim(db: &Db) {
    let store = db.open();
    let fake = fake_with(&[("m-ans", TWO_CALLS, "all charged")]);
    let url = base_url(&fake);
    let dir = temp_dir("ans");
    let log = ExecLog::new(&dir, "exec");
    let s = suspend(&url, "m-ans", 5, log.clone());
    store.insert_run(&s, Some("conv-1"), 100).unwrap();
    let (r1, r2) = (s.pending[0].id.clone(), s.pending[1].id.clone());

    let a1 = Answer::ok(r1.clone(), data(json!({"by": "ann"})));
    assert_eq!(store.record_answer("no-such-run", &a1, 110), Err(StoreError::NotFound("no-such-run".into())));
    assert_eq!(store.record_answer(&s.run_id, &Answer::ok("nope", None), 110).unwrap(), AnswerStatus::NotPending);
    assert_eq!(store.record_answer(&s.run_id, &a1, 110).unwrap(), AnswerStatus::Recorded);
    let second = Answer::declined(r1.clone(), "declined");
    assert_eq!(store.record_answer(&s.run_id, &second, 111).unwrap(), AnswerStatus::Duplicate);
    let info = &store.list_runs(&RunFilter::new(), 120).unwrap()[0];
    assert_eq!(info.answered, vec![r1.clone()]);

    // A worker picks it up: it has one answer of two.
    let ck = Arc::new(Checkpoints::new(store.clone()).with_lease_ms(60_000).with_clock(|| 200));
    let worker = client(&url, "m-ans", 99, log.clone(), Some(ck.clone()));
    let claim = ck.claim_ready().unwrap().expect("an answered run is ready");
    assert_eq!(claim.answers, vec![a1.clone()], "the first answer stands");
    let r = ck.resume(&worker, claim).unwrap();
    assert_eq!(r.status, RunStatus::Pending);
    assert_eq!(r.pending.iter().map(|p| p.id.clone()).collect::<Vec<_>>(), vec![r2.clone()]);
    assert_eq!(log.lines(), vec![format!("{}/1/{}", s.run_id, call_of(&r1))]);
    let info = &store.list_runs(&RunFilter::new(), 200).unwrap()[0];
    assert_eq!(info.pending.len(), 1);
    assert!(info.answered.is_empty(), "the used answer is gone");
    assert!(!info.is_claimed(200));
    assert_eq!(store.record_answer(&s.run_id, &a1, 210).unwrap(), AnswerStatus::NotPending);
    assert_eq!(ck.claim_ready().unwrap(), None, "nothing to do until the next answer");

    store.record_answer(&s.run_id, &Answer::ok(r2.clone(), None), 300).unwrap();
    let claim = ck.claim_ready().unwrap().unwrap();
    let r = ck.resume(&worker, claim).unwrap();
    assert_eq!((r.status, r.text.as_str()), (RunStatus::Done, "all charged"));
    assert_eq!(outputs(&r), ["charged 1", "charged 2"]);
    assert_eq!(log.lines().len(), 2, "each call ran once");
    assert!(store.list_runs(&RunFilter::new(), 400).unwrap().is_empty());
    assert_eq!(store.load(&s.run_id).unwrap(), None);
    let saved = ConversationStore::get(&*store, "conv-1").unwrap().expect("the transcript is saved");
    assert_eq!(saved, r.messages);
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
    let _ = fs::remove_dir_all(dir);
}

/// The fake's call id behind a `pnd_<call id>` request id.
fn call_of(request_id: &str) -> &str {
    request_id.strip_prefix("pnd_").unwrap_or(request_id)
}

// 2029-06-01, 2030-01-01 and 2031-01-01 at 00:00 UTC (`date -u -d 2029-06-01 +%s`).
const JUNE_2029: u64 = 1_874_966_400_000;
const JAN_2030: u64 = 1_893_456_000_000;
const DEC_31_2029: u64 = 1_893_369_600_000;

/// Listing by kind, age, expiry, conversation and claim, oldest first.
pub fn listing(db: &Db) {
    let store = db.open();
    let fake = fake_with(&[
        ("m-l1", &[r#"{"n":1,"kind":"approval","expires":"2030-01-01T00:00:00Z"}"#], "1"),
        ("m-l2", &[r#"{"n":2,"kind":"input"}"#], "2"),
        (
            "m-l3",
            &[
                r#"{"n":3,"kind":"approval","expires":"2031-01-01T00:00:00Z"}"#,
                r#"{"n":4,"kind":"input","expires":"2029-06-01T00:00:00+00:00"}"#,
            ],
            "3",
        ),
        ("m-l4", &[r#"{"n":5,"kind":"approval","expires":"not a date"}"#], "4"),
    ]);
    let url = base_url(&fake);
    let dir = temp_dir("list");
    let log = ExecLog::new(&dir, "exec");
    let r1 = suspend(&url, "m-l1", 11, log.clone());
    let r2 = suspend(&url, "m-l2", 12, log.clone());
    let r3 = suspend(&url, "m-l3", 13, log.clone());
    let r4 = suspend(&url, "m-l4", 14, log.clone());
    store.insert_run(&r1, Some("A"), 1_000).unwrap();
    store.insert_run(&r2, Some("B"), 2_000).unwrap();
    store.insert_run(&r3, Some("A"), 3_000).unwrap();
    store.insert_run(&r4, None, 4_000).unwrap();
    let ids = |f: RunFilter, now: u64| -> Vec<String> {
        store.list_runs(&f, now).unwrap().into_iter().map(|i| i.run_id).collect()
    };
    let id = |s: &nexus_drive::SuspendedRun| s.run_id.clone();

    assert_eq!(ids(RunFilter::new(), 5_000), [id(&r1), id(&r2), id(&r3), id(&r4)]);
    assert_eq!(ids(RunFilter::new().kind("approval"), 5_000), [id(&r1), id(&r3), id(&r4)]);
    assert_eq!(ids(RunFilter::new().kind("input"), 5_000), [id(&r2), id(&r3)]);
    assert!(ids(RunFilter::new().kind("question"), 5_000).is_empty());
    // Age: stored at least 2.5 s before 5.0 s, i.e. at or before 2.5 s.
    assert_eq!(ids(RunFilter::new().older_than(5_000, 2_500), 5_000), [id(&r1), id(&r2)]);
    // Expiry: the earliest expiresAt of each run's requests; offsets count.
    assert_eq!(ids(RunFilter::new().expiring_by(DEC_31_2029), 5_000), [id(&r3)]);
    assert_eq!(ids(RunFilter::new().expiring_by(JAN_2030), 5_000), [id(&r1), id(&r3)]);
    assert_eq!(ids(RunFilter::new().expiring_by(JUNE_2029 - 1), 5_000), Vec::<String>::new());
    assert_eq!(ids(RunFilter::new().conversation("A"), 5_000), [id(&r1), id(&r3)]);
    assert_eq!(ids(RunFilter::new().limit(2), 5_000), [id(&r1), id(&r2)]);
    assert_eq!(ids(RunFilter::new().kind("approval").conversation("A").limit(1), 5_000), [id(&r1)]);

    let all = store.list_runs(&RunFilter::new(), 5_000).unwrap();
    assert_eq!(all[0].expires_ms, Some(JAN_2030));
    assert_eq!(all[1].expires_ms, None);
    assert_eq!(all[2].expires_ms, Some(JUNE_2029));
    assert_eq!(all[2].kinds(), ["approval", "input"]);
    assert_eq!(all[3].expires_ms, None, "an unreadable expiresAt is not an expiry");

    // Claims, judged at the `now` given.
    store.claim_run(&r2.run_id, 6_000, 100).unwrap();
    assert_eq!(ids(RunFilter::new().claimed(true), 6_050), [id(&r2)]);
    assert_eq!(ids(RunFilter::new().claimed(false), 6_050), [id(&r1), id(&r3), id(&r4)]);
    assert!(ids(RunFilter::new().claimed(true), 6_100).is_empty());
    let _ = fs::remove_dir_all(dir);
}

/// Deleting a conversation removes its transcript, its runs and their answers.
pub fn delete_cascade(db: &Db) {
    let store = db.open();
    let fake = fake_with(&[("m-del", TWO_CALLS, "done")]);
    let url = base_url(&fake);
    let dir = temp_dir("del");
    let log = ExecLog::new(&dir, "exec");
    let a = suspend(&url, "m-del", 21, log.clone());
    let b = suspend(&url, "m-del", 22, log.clone());
    let other = suspend(&url, "m-del", 23, log.clone());
    ConversationStore::save(&*store, "c1", &[Message::user("hi"), Message::assistant("hello")]).unwrap();
    store.insert_run(&a, Some("c1"), 10).unwrap();
    store.insert_run(&b, Some("c1"), 10).unwrap();
    store.insert_run(&other, Some("c2"), 10).unwrap();
    for s in [&a, &b, &other] {
        store.record_answer(&s.run_id, &Answer::ok(s.pending[0].id.clone(), None), 20).unwrap();
    }
    let held = store.claim_run(&b.run_id, 30, 10_000).unwrap();

    let d = store.delete_conversation("c1").unwrap();
    assert_eq!((d.conversation, d.runs), (true, 2));
    assert_eq!(ConversationStore::get(&*store, "c1").unwrap(), None);
    assert_eq!(store.load(&a.run_id).unwrap(), None);
    assert!(store.list_runs(&RunFilter::new().conversation("c1"), 40).unwrap().is_empty());
    // The worker holding a deleted run finds it gone.
    assert!(matches!(store.suspend_claimed(&held.lease, &b.state, 40), Err(StoreError::Conflict { found: None, .. })));
    assert_eq!(
        store.record_answer(&a.run_id, &Answer::ok(a.pending[1].id.clone(), None), 40),
        Err(StoreError::NotFound(a.run_id.clone()))
    );
    // The other conversation is untouched.
    let left = store.list_runs(&RunFilter::new(), 40).unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!((left[0].run_id.as_str(), left[0].answered.len()), (other.run_id.as_str(), 1));

    // Its answers went too: the same run stored again starts with none.
    store.insert_run(&a, Some("c1"), 50).unwrap();
    assert!(store.claim_run(&a.run_id, 50, 10).unwrap().answers.is_empty());

    // The plain ConversationStore::delete cascades as well; it reports a
    // conversation that had only runs (a pending transcript is never saved).
    assert!(ConversationStore::delete(&*store, "c2").unwrap());
    assert_eq!(store.load(&other.run_id).unwrap(), None);
    assert!(!ConversationStore::delete(&*store, "c2").unwrap());
    let _ = fs::remove_dir_all(dir);
}

/// The async driver resumes through the same checkpoints; a client that
/// lacks them is refused before anything runs, and the claim given back.
pub fn async_resume_and_a_client_without_checkpoints(db: &Db) {
    let store = db.open();
    let fake = fake_with(&[("m-async", ONE_CALL, "async done")]);
    let url = base_url(&fake);
    let dir = temp_dir("async");
    let log = ExecLog::new(&dir, "exec");
    let s = suspend(&url, "m-async", 41, log.clone());
    store.insert_run(&s, None, 10).unwrap();
    store.record_answer(&s.run_id, &Answer::ok(s.pending[0].id.clone(), None), 10).unwrap();
    let ck = Arc::new(Checkpoints::new(store.clone()).with_clock(|| 20));

    let plain = client(&url, "m-async", 0, log.clone(), None);
    let claim = ck.claim_ready().unwrap().unwrap();
    let version = claim.lease.version;
    assert!(matches!(ck.resume(&plain, claim), Err(DriveError::Config(_))));
    assert!(log.lines().is_empty(), "nothing ran");
    let info = &store.list_runs(&RunFilter::new(), 20).unwrap()[0];
    assert!(!info.is_claimed(20));
    assert_eq!((info.version, info.failures, info.answered.len()), (version + 1, 0, 1));

    let cfg = config(&url, "m-async", 0, log.clone(), Some(ck.clone()), false);
    let async_client = nexus_drive::asynchronous::AsyncClient::new(cfg);
    let claim = ck.claim_ready().unwrap().unwrap();
    let r = smol::block_on(ck.resume_async(&async_client, claim)).unwrap();
    assert_eq!((r.status, r.text.as_str()), (RunStatus::Done, "async done"));
    assert_eq!(log.lines().len(), 1);
    assert!(store.list_runs(&RunFilter::new(), 20).unwrap().is_empty());
    let _ = fs::remove_dir_all(dir);
}
