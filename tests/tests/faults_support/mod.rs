//! Shared by the fault-injection suite: child processes (the test binary
//! started again on its `worker::entry` test, told what to do by
//! environment variables), the workers themselves, and small helpers.
//!
//! The workers live in the test binary rather than in a binary target
//! because the drivers are a dev-dependency of this package: only test
//! targets can link them.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nexus_drive::{Answer, DriveError, DynTool, FileRunStore, Request, RunStore, StoreError, ToolOutcome};
use nexus_tests::fake::{FakeProvider, Style};
use serde_json::json;

use crate::drive_support::{builder_for_url, Drv};

/// The variable that turns the test binary into a worker, and names its job.
pub const WORKER_ENV: &str = "NEXUS_FAULT_WORKER";
/// Lines a worker prints for its parent start with this (libtest prints its own lines too).
pub const REPLY: &str = "@@ ";

// ------------------------------------------------------------------ parent side

/// A command that starts this test binary as a worker doing `job`.
pub fn worker(job: &str, env: &[(&str, String)]) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", "worker::entry", "--ignored", "--nocapture", "--test-threads=1", "-q"])
        .env(WORKER_ENV, job)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// What a worker needs to run a client of driver `d` against `fake`'s
/// endpoint for `style`, asking for `model`.
pub fn client_env(d: Drv, fake: &FakeProvider, style: Style, model: &str) -> Vec<(&'static str, String)> {
    vec![
        ("NEXUS_FW_DRV", drv_name(d).to_string()),
        ("NEXUS_FW_STYLE", style.name().to_string()),
        ("NEXUS_FW_BASE", fake.base_url(style)),
        ("NEXUS_FW_MODEL", model.to_string()),
    ]
}

/// The worker's replies (its `@@ ` lines, prefix removed), once it has exited.
pub fn replies(child: Child) -> (Vec<String>, String) {
    let out = child.wait_with_output().expect("the worker ran");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines = stdout.lines().filter_map(|l| l.strip_prefix(REPLY)).map(str::to_string).collect();
    (lines, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Reads a running worker's replies as they come, on a thread of its own, so
/// the parent can wait for one without blocking on the pipe.
pub struct Replies {
    rx: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Replies {
    pub fn of(child: &mut Child) -> Replies {
        let stdout = child.stdout.take().expect("a piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(reply) = line.strip_prefix(REPLY) {
                    if tx.send(reply.to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        Replies { rx, seen: Vec::new() }
    }

    /// Waits (up to `guard`, a hang guard) for a reply starting with `prefix`.
    pub fn wait_for(&mut self, prefix: &str, guard: Duration) -> Option<String> {
        let until = Instant::now() + guard;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return Some(line);
                    }
                }
                Err(_) => return None,
            }
        }
    }

    /// Every reply, once the worker's stdout has closed.
    pub fn drain(mut self) -> Vec<String> {
        self.seen.extend(self.rx.iter());
        self.seen
    }
}

/// A fresh directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "nexus-faults-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("a temp dir");
    dir
}

/// SplitMix64: reproducible "random" kill points from a fixed seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

pub fn drv_name(d: Drv) -> &'static str {
    match d {
        Drv::Blocking => "blocking",
        Drv::Async => "async",
    }
}

/// The driver [`drv_name`] named. An unknown name is a mistake in the
/// parent, never a reason to test some other driver.
fn drv_named(name: &str) -> Drv {
    [Drv::Blocking, Drv::Async]
        .into_iter()
        .find(|d| drv_name(*d) == name)
        .unwrap_or_else(|| panic!("worker: unknown driver {name:?}"))
}

/// The wire format named `name`; unknown names panic, like [`drv_named`].
fn style_named(name: &str) -> Style {
    Style::ALL.into_iter().find(|s| s.name() == name).unwrap_or_else(|| panic!("worker: unknown style {name:?}"))
}

/// A field of `/proc/self/status` in KiB (Linux), e.g. `VmHWM` (peak resident memory).
pub fn proc_status_kib(field: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()
}

// ------------------------------------------------------------------ worker side

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("worker: {name} is not set"))
}

fn reply(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{REPLY}{line}");
    let _ = out.flush();
}

/// What the worker entry test does: nothing unless started as a worker.
pub fn worker_main() {
    let Ok(job) = std::env::var(WORKER_ENV) else {
        return;
    };
    match job.as_str() {
        "save" => save_forever(),
        "resume" => resume_once(),
        "huge" => huge_once(),
        other => panic!("worker: unknown job {other:?}"),
    }
}

/// Saves the states of `NEXUS_FW_STATES` into the run store at `NEXUS_FW_DIR`
/// over and over, each save based on the version before it, so the record
/// of version `v` holds state `(v - 1) % n`. Runs until killed (or a hang
/// guard of a minute passes).
fn save_forever() {
    let dir = PathBuf::from(var("NEXUS_FW_DIR"));
    let id = var("NEXUS_FW_ID");
    let states = read_states(Path::new(&var("NEXUS_FW_STATES")));
    let store = FileRunStore::open(&dir).expect("worker: the store opens");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        let current = store.load(&id).expect("worker: the record loads").map(|r| r.version);
        let next = states[usize::try_from(current.unwrap_or(0)).unwrap_or(0) % states.len()].as_slice();
        let version = store.save(&id, next, current).expect("worker: the save succeeds");
        reply(&format!("saved {version}"));
    }
}

/// The state files `0`, `1`, … of a directory, in order.
pub fn read_states(dir: &Path) -> Vec<Vec<u8>> {
    let mut found: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
    for entry in fs::read_dir(dir).expect("the state directory") {
        let entry = entry.expect("a state file");
        if let Some(n) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            found.insert(n, fs::read(entry.path()).expect("a readable state file"));
        }
    }
    assert!(!found.is_empty(), "no state files in {}", dir.display());
    found.into_values().collect()
}

/// The approval tool of the concurrent-resume test. Every invocation appends
/// one line to the count file (O_APPEND: lines from two processes never
/// overwrite each other). With the answer it holds until the other worker
/// has lost the race for the claim (the `lost` marker exists), so the two
/// resumes overlap for certain instead of by luck.
pub fn approval_tool(count_file: PathBuf, lost_marker: Option<PathBuf>, tag: String) -> DynTool {
    DynTool::new("transfer", "moves money", json!({"type": "object"}), move |args, ctx| {
        let mut f = OpenOptions::new().create(true).append(true).open(&count_file).expect("the count file opens");
        let approved = ctx.answer().map(|a| a.ok);
        writeln!(f, "{tag} {}", if approved.is_some() { "answered" } else { "asked" }).expect("the count is written");
        drop(f);
        match approved {
            None => Ok(ToolOutcome::Pending(Request::new("approval", format!("approve {}", args["amount"])))),
            Some(true) => {
                if let Some(marker) = &lost_marker {
                    let until = Instant::now() + Duration::from_secs(20);
                    while !marker.exists() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
                Ok(ToolOutcome::Done(json!(format!("sent {}", args["amount"]))))
            }
            Some(false) => Ok(ToolOutcome::Done(json!("not approved"))),
        }
    })
}

/// Resumes the stored run `NEXUS_FW_ID` once, with the answer
/// `NEXUS_FW_ANSWER`, against the fake at `NEXUS_FW_BASE`; replies `ok TEXT`
/// or `err DEBUG`. A worker refused because the run is claimed leaves the
/// `lost` marker for the winner.
fn resume_once() {
    let d = drv_named(&var("NEXUS_FW_DRV"));
    let style = style_named(&var("NEXUS_FW_STYLE"));
    let lost = PathBuf::from(var("NEXUS_FW_LOST"));
    let tool = approval_tool(PathBuf::from(var("NEXUS_FW_COUNT")), Some(lost.clone()), var("NEXUS_FW_TAG"));
    let cfg = builder_for_url(&var("NEXUS_FW_BASE"), style, &var("NEXUS_FW_MODEL"), false)
        .dyn_tool(tool)
        .build()
        .expect("worker: the config builds");
    let store = FileRunStore::open(var("NEXUS_FW_DIR")).expect("worker: the store opens");
    let id = var("NEXUS_FW_ID");
    let answer = Answer::ok(var("NEXUS_FW_ANSWER"), None);
    match d.client(cfg).resume_stored(&store, &id, vec![answer]) {
        Ok(r) => reply(&format!("ok {}", r.text)),
        Err(e) => {
            if matches!(e, DriveError::Store(StoreError::Claimed(_))) {
                let _ = fs::write(&lost, b"lost");
            }
            reply(&format!("err {e:?}"));
        }
    }
}

/// One run whose answer is larger than `NEXUS_FW_LIMIT`; replies how it
/// ended and the process's resident memory before and at its peak.
fn huge_once() {
    let d = drv_named(&var("NEXUS_FW_DRV"));
    let style = style_named(&var("NEXUS_FW_STYLE"));
    let limit: usize = var("NEXUS_FW_LIMIT").parse().expect("worker: a numeric limit");
    let stream = match var("NEXUS_FW_STREAM").as_str() {
        "0" => false,
        "1" => true,
        other => panic!("worker: NEXUS_FW_STREAM is {other:?}, not 0 or 1"),
    };
    let cfg = builder_for_url(&var("NEXUS_FW_BASE"), style, &var("NEXUS_FW_MODEL"), stream)
        .max_body_bytes(limit)
        .build()
        .expect("worker: the config builds");
    let client = d.client(cfg);
    // Unreadable figures fail the worker: a zero would pass the parent's
    // growth check without measuring anything.
    let kib = |field| proc_status_kib(field).unwrap_or_else(|| panic!("worker: no {field} in /proc/self/status"));
    let before = kib("VmRSS");
    match client.run("say a lot") {
        Ok(r) => reply(&format!("ok {}", r.text.len())),
        Err(e) => reply(&format!("err {e:?}")),
    }
    reply(&format!("memory {before} {}", kib("VmHWM")));
}

/// Reads a whole pipe (used for a worker's stderr in failure messages).
pub fn read_all(mut r: impl Read) -> String {
    let mut s = String::new();
    let _ = r.read_to_string(&mut s);
    s
}
