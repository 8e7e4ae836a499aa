//! Many workers over one store: the concurrency test (runs resumed in
//! parallel, answers arriving out of order) and the kill test (a worker
//! killed with SIGKILL in the middle of a tool).
//!
//! A worker process is this test binary run again with [`WORKER_ENV`] set
//! to a [`WorkerSpec`]; its `worker_entry` test (ignored otherwise) calls
//! [`worker_main`].

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nexus_drive::stores::{wall_clock_ms, AnswerStatus, Checkpoints, RunFilter};
use nexus_drive::{Answer, RunStatus};
use serde_json::json;

use super::*;

/// The variable a worker process reads its [`WorkerSpec`] from.
pub const WORKER_ENV: &str = "NEXUS_STORE_WORKER";

/// What one worker does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerSpec {
    /// `drain`: resume ready runs until none is left; `hang`: claim `run_id`
    /// and resume it with a tool that never returns.
    pub mode: String,
    pub db: Db,
    pub base_url: String,
    pub model: String,
    pub dir: PathBuf,
    pub worker: usize,
    pub lease_ms: u64,
    pub run_id: Option<String>,
    /// A drain worker gives up (and fails) after this long.
    pub deadline_s: u64,
}

/// The worker process's body; returns at once when [`WORKER_ENV`] is unset.
pub fn worker_main() {
    let Ok(text) = std::env::var(WORKER_ENV) else {
        return;
    };
    let spec: WorkerSpec = serde_json::from_str(&text).unwrap();
    match spec.mode.as_str() {
        "drain" => {
            drain(&spec);
        }
        "hang" => hang(&spec),
        other => panic!("unknown worker mode {other}"),
    }
}

/// Resumes ready runs until the store holds none. Every finished run is
/// written to `done-N` as `run_id outputs…`; every tool execution to `exec-N`.
/// Returns how many resumes it made.
pub fn drain(spec: &WorkerSpec) -> usize {
    let store = spec.db.open();
    let ck = Arc::new(Checkpoints::new(store.clone()).with_lease_ms(spec.lease_ms));
    let log = ExecLog::new(&spec.dir, &format!("exec-{}", spec.worker));
    let done = ExecLog::new(&spec.dir, &format!("done-{}", spec.worker));
    let worker = client(&spec.base_url, &spec.model, spec.worker as u64, log, Some(ck.clone()));
    let end = Instant::now() + Duration::from_secs(spec.deadline_s);
    let mut resumes = 0;
    // Idle polls back off (up to 20 ms) so idle workers leave the CPU to busy ones.
    let mut idle = Duration::from_millis(1);
    loop {
        assert!(Instant::now() < end, "worker {} ran out of time", spec.worker);
        match ck.claim_ready().unwrap_or_else(|e| panic!("worker {}: claim: {e}", spec.worker)) {
            Some(claim) => {
                let id = claim.lease.run_id.clone();
                let r =
                    ck.resume(&worker, claim).unwrap_or_else(|e| panic!("worker {}: resume of {id}: {e}", spec.worker));
                match r.status {
                    RunStatus::Done => done.record(&format!("{id} {}", outputs(&r).join("|"))),
                    RunStatus::Pending => {}
                    RunStatus::Incomplete => panic!("{id} stopped incomplete: {r:?}"),
                }
                resumes += 1;
                idle = Duration::from_millis(1);
            }
            None => {
                let left = store
                    .list_runs(&RunFilter::new().limit(1), wall_clock_ms())
                    .unwrap_or_else(|e| panic!("worker {}: list: {e}", spec.worker));
                if left.is_empty() {
                    return resumes;
                }
                std::thread::sleep(idle);
                idle = (idle * 2).min(Duration::from_millis(20));
            }
        }
    }
}

fn hang(spec: &WorkerSpec) {
    let store = spec.db.open();
    let ck = Arc::new(Checkpoints::new(store).with_lease_ms(spec.lease_ms));
    let log = ExecLog::new(&spec.dir, &format!("exec-{}", spec.worker));
    let worker = client_hanging(&spec.base_url, &spec.model, 0, log, Some(ck.clone()), true);
    let id = spec.run_id.clone().unwrap();
    let claim = ck.claim(&id).unwrap();
    let r = ck.resume(&worker, claim);
    panic!("the tool should have hung, the resume gave {r:?}");
}

/// Starts this test binary as a worker process.
fn spawn(spec: &WorkerSpec) -> Child {
    let exe = std::env::current_exe().unwrap();
    let stderr = File::create(spec.dir.join(format!("stderr-{}", spec.worker))).unwrap();
    Command::new(exe)
        .args(["worker_entry", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(WORKER_ENV, serde_json::to_string(spec).unwrap())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap()
}

fn stderr_of(spec: &WorkerSpec) -> String {
    std::fs::read_to_string(spec.dir.join(format!("stderr-{}", spec.worker))).unwrap_or_default()
}

/// Waits for every child; kills them all and fails past `deadline`.
fn wait_all(children: &mut [(Child, WorkerSpec)], deadline: Instant) {
    for i in 0..children.len() {
        loop {
            let (child, spec) = &mut children[i];
            match child.try_wait().unwrap() {
                Some(status) => {
                    assert!(status.success(), "worker {} failed ({status}):\n{}", spec.worker, stderr_of(spec));
                    break;
                }
                None if Instant::now() > deadline => {
                    for (c, _) in children.iter_mut() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    panic!("workers did not finish in time");
                }
                None => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// How many runs the concurrency test suspends (`NEXUS_STORE_RUNS`, default 1000).
pub fn run_count() -> u64 {
    std::env::var("NEXUS_STORE_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000)
}

/// `NEXUS_STORE_RUNS` runs (default 1,000), each waiting on two approvals;
/// 4 workers (processes, or threads each with its own connection) resume
/// them while the answers arrive in a shuffled order, every 7th run's
/// second one a refusal. Every run must finish exactly once with the
/// results its answers call for, every approved call must run exactly once,
/// and a refused one never.
pub fn concurrency(db: &Db, processes: bool) {
    let n = run_count();
    let started = Instant::now();
    let fake = fake_with(&[("m-conc", &[r#"{"n":1}"#, r#"{"n":2}"#], "all charged")]);
    let url = base_url(&fake);
    let dir = temp_dir("conc");
    let store = db.open();
    let setup_log = ExecLog::new(&dir, "exec-setup");
    let mut requests = Vec::new();
    let mut expected_done = BTreeMap::new();
    let mut expected_exec = BTreeSet::new();
    // Suspending is the slow part of the setup (a client per run, for distinct
    // run ids): four threads share it.
    let suspended: Vec<SuspendedRun> = std::thread::scope(|scope| {
        let parts: Vec<_> = (0..4u64)
            .map(|t| {
                let (url, log) = (&url, &setup_log);
                scope.spawn(move || {
                    (0..n)
                        .filter(|i| i % 4 == t)
                        .map(|i| suspend(url, "m-conc", 1_000 + i, log.clone()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<SuspendedRun> = parts.into_iter().flat_map(|p| p.join().unwrap()).collect();
        all.sort_by_key(|s| s.run_id.clone());
        all
    });
    for (i, s) in suspended.iter().enumerate() {
        store.insert_run(s, None, wall_clock_ms()).unwrap();
        assert_eq!(s.pending.len(), 2);
        let refuse_second = i % 7 == 0;
        for (k, r) in s.pending.iter().enumerate() {
            let ok = !(refuse_second && k == 1);
            if ok {
                expected_exec.insert(format!("{}/1/{}", s.run_id, r.id.trim_start_matches("pnd_")));
            }
            requests.push((s.run_id.clone(), r.id.clone(), ok));
        }
        let second = if refuse_second { "declined: charge 2?" } else { "charged 2" };
        expected_done.insert(s.run_id.clone(), format!("charged 1|{second}"));
    }
    assert_eq!(expected_done.len() as u64, n, "every run has its own id");
    assert!(setup_log.lines().is_empty(), "nothing runs before its approval");
    let setup = started.elapsed();

    let specs: Vec<WorkerSpec> = (0..4)
        .map(|w| WorkerSpec {
            mode: "drain".into(),
            db: db.clone(),
            base_url: url.clone(),
            model: "m-conc".into(),
            dir: dir.clone(),
            worker: w,
            lease_ms: 60_000,
            run_id: None,
            deadline_s: 300,
        })
        .collect();
    let mut children = Vec::new();
    let mut threads = Vec::new();
    for spec in &specs {
        if processes {
            children.push((spawn(spec), spec.clone()));
        } else {
            let spec = spec.clone();
            threads.push(std::thread::spawn(move || drain(&spec)));
        }
    }

    // The answers arrive while the workers run, in no particular order.
    Rng(0x5eed_f0a1).shuffle(&mut requests);
    for (i, (run, req, ok)) in requests.iter().enumerate() {
        let answer = if *ok {
            Answer::ok(req.clone(), data(json!({"approvedBy": format!("web-{i}")})))
        } else {
            Answer::declined(req.clone(), "declined")
        };
        assert_eq!(store.record_answer(run, &answer, wall_clock_ms()).unwrap(), AnswerStatus::Recorded);
        if i % 64 == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let answered = started.elapsed();

    let resumes: usize = if processes {
        wait_all(&mut children, Instant::now() + Duration::from_secs(320));
        0
    } else {
        threads.into_iter().map(|t| t.join().unwrap()).sum()
    };
    let total = started.elapsed();

    let mut done = BTreeMap::new();
    let mut exec = Vec::new();
    for w in 0..4 {
        for line in read_lines(&dir.join(format!("done-{w}"))) {
            let (id, outs) = line.split_once(' ').unwrap();
            assert!(done.insert(id.to_string(), outs.to_string()).is_none(), "{id} finished twice");
        }
        exec.extend(read_lines(&dir.join(format!("exec-{w}"))));
    }
    assert_eq!(done.len(), expected_done.len(), "every run finished");
    assert_eq!(done, expected_done, "each run's results are its answers'");
    let unique: BTreeSet<String> = exec.iter().cloned().collect();
    assert_eq!(unique.len(), exec.len(), "a tool ran twice");
    assert_eq!(unique, expected_exec, "exactly the approved calls ran");
    assert!(store.list_runs(&RunFilter::new(), wall_clock_ms()).unwrap().is_empty());
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
    println!(
        "{} {n} runs, 4 {}: setup {setup:?}, answers in by {answered:?}, all done in {total:?}{}",
        db.kind,
        if processes { "processes" } else { "threads" },
        if processes { String::new() } else { format!(", {resumes} resumes") }
    );
    let _ = fs::remove_dir_all(dir);
}

/// A worker is killed (SIGKILL) while its tool runs. Its progress save has
/// the call started, so the store already lists the run as waiting on an
/// `in_doubt` request; once the lease passes another worker claims it, the
/// call is surfaced (not run again), and the host's answer finishes the run.
pub fn kill_mid_resume(db: &Db) {
    let fake = fake_with(&[("m-kill", &[r#"{"n":1}"#], "charged once")]);
    let url = base_url(&fake);
    let dir = temp_dir("kill");
    let store = db.open();
    let s = suspend(&url, "m-kill", 31, ExecLog::new(&dir, "exec-setup"));
    store.insert_run(&s, None, wall_clock_ms()).unwrap();
    let approval = Answer::ok(s.pending[0].id.clone(), None);
    assert_eq!(store.record_answer(&s.run_id, &approval, wall_clock_ms()).unwrap(), AnswerStatus::Recorded);
    let key = format!("{}/1/{}", s.run_id, s.pending[0].id.trim_start_matches("pnd_"));

    let spec = WorkerSpec {
        mode: "hang".into(),
        db: db.clone(),
        base_url: url.clone(),
        model: "m-kill".into(),
        dir: dir.clone(),
        worker: 0,
        lease_ms: 30_000,
        run_id: Some(s.run_id.clone()),
        deadline_s: 60,
    };
    let mut child = spawn(&spec);
    let victim = ExecLog::new(&dir, "exec-0");
    let until = Instant::now() + Duration::from_secs(60);
    while victim.lines().is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the worker exited ({status}) before its tool ran:\n{}", stderr_of(&spec));
        }
        assert!(Instant::now() < until, "the worker's tool never started:\n{}", stderr_of(&spec));
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL: no destructor, no rollback, nothing flushed
    child.wait().unwrap();
    assert_eq!(victim.lines(), vec![key.clone()]);

    // What the dead worker left: claimed, and waiting on an in-doubt call.
    let now = wall_clock_ms();
    let listed = store.list_runs(&RunFilter::new(), now).unwrap();
    assert_eq!(listed.len(), 1);
    let info = &listed[0];
    assert!(info.is_claimed(now), "the lease outlives the worker");
    assert_eq!(info.kinds(), ["in_doubt"]);
    assert!(info.answered.is_empty(), "the approval was used");
    let lease_end = info.claimed_until.unwrap();
    assert_eq!(store.claim_run(&s.run_id, lease_end - 1, 1_000), Err(StoreError::Claimed(s.run_id.clone())));

    // After the lease: claimed again, and the call is surfaced, not re-run.
    let ck = Arc::new(Checkpoints::new(store.clone()).with_lease_ms(10_000).with_clock(move || lease_end));
    let local = ExecLog::new(&dir, "exec-survivor");
    let worker = client(&url, "m-kill", 0, local.clone(), Some(ck.clone()));
    let claim = ck.claim(&s.run_id).unwrap();
    assert_eq!((claim.claims, claim.answers.len()), (2, 0));
    let r = ck.resume(&worker, claim).unwrap();
    assert_eq!(r.status, RunStatus::Pending);
    assert_eq!(r.pending.len(), 1);
    let doubt = &r.pending[0];
    assert_eq!(doubt.kind, "in_doubt");
    let d = doubt.data.as_ref().unwrap();
    assert_eq!((d["name"].as_str(), d["idempotencyKey"].as_str()), (Some("charge"), Some(key.as_str())));
    assert!(local.lines().is_empty(), "the in-doubt call was not run again");

    // The host checks its ledger: the charge went through. It says so.
    let confirmed = Answer::ok(doubt.id.clone(), data(json!({"output": "charged 1 (confirmed)"})));
    assert_eq!(store.record_answer(&s.run_id, &confirmed, lease_end).unwrap(), AnswerStatus::Recorded);
    let claim = ck.claim_ready().unwrap().expect("the answered run is ready");
    let r = ck.resume(&worker, claim).unwrap();
    assert_eq!((r.status, r.text.as_str()), (RunStatus::Done, "charged once"));
    assert_eq!(outputs(&r), ["charged 1 (confirmed)"]);
    assert!(local.lines().is_empty());
    assert_eq!(victim.lines(), vec![key], "the tool ran once in all");
    assert!(store.list_runs(&RunFilter::new(), lease_end).unwrap().is_empty());
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
    let _ = fs::remove_dir_all(dir);
}
