//! `nexus resume --store sqlite:` keeps its claim while it runs (SPEC
//! §20.2): a resume whose tool (a `bash` sleep) outlives two leases holds the
//! run against every other resume, which exits 5 all along; a resume killed
//! with SIGKILL frees the run once its last renewal's lease has run out.
#![cfg(all(feature = "cli", unix))]

mod cli_support;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use cli_support::*;
use nexus_tests::fake::{Script, Scripts, Turn};
use serde_json::{json, Value};

const MODEL: &str = "m-claims";
const QUESTIONS: &str = r#"{"questions":[{"question":"Go?"}]}"#;
/// The lease the resumes take, in seconds.
const LEASE_S: u64 = 1;

/// Turn 0 asks a question (the run suspends); turn 1, once answered, runs
/// `bash`, which marks that it started and sleeps `sleep_s`; turn 2 ends.
fn scripts(sleep_s: u64) -> Scripts {
    let command = json!({"command": format!("touch started && sleep {sleep_s}"), "timeout": 60_000}).to_string();
    Scripts::new(KEY).model(
        MODEL,
        Script::new(vec![
            Turn::default().call("question", QUESTIONS),
            Turn::default().call("bash", &command),
            Turn::text("slept"),
        ]),
    )
}

/// Process 1 of each test: the run, suspended on the question in
/// `sqlite:runs.db`. Returns the run id and the answers file.
fn suspended(dir: &Path, fake: &nexus_tests::fake::FakeProvider) -> (String, String) {
    let root = dir.to_string_lossy().into_owned();
    let args = ["--builtins=bash,question", "--root", &root, "--store", "sqlite:runs.db", "--json", "go"];
    let out = run(run_cmd(dir, fake, "openai", MODEL, &args)).expect(3);
    let result = out.json();
    let run_id = result["runId"].as_str().unwrap_or_default().to_string();
    let question = result["pending"][0]["id"].as_str().unwrap_or_default().to_string();
    let answers = write_json(dir, "answers.json", &json!({"id": question, "ok": true, "data": {"answer": "yes"}}));
    (run_id, answers)
}

fn resume_cmd(dir: &Path, run_id: &str, answers: &str) -> std::process::Command {
    let mut cmd = nexus(dir, Some("openai"));
    let lease = LEASE_S.to_string();
    cmd.args(["resume", "--store", "sqlite:runs.db", "--run", run_id, "--answer", answers, "--json"]);
    cmd.args(["--lease", &lease, "--root"]).arg(dir);
    cmd
}

/// Starts a resume in the background and waits until its `bash` call runs.
fn resume_in_background(dir: &Path, run_id: &str, answers: &str) -> Child {
    let mut child = resume_cmd(dir, run_id, answers)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let until = Instant::now() + Duration::from_secs(30);
    while !dir.join("started").exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the resume ended ({status}) before its tool ran");
        }
        assert!(Instant::now() < until, "the resume's tool never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// `nexus runs --store sqlite:runs.db --json`.
fn listed(dir: &Path) -> Vec<Value> {
    let out = run(nexus(dir, None).args(["runs", "--store", "sqlite:runs.db", "--json"])).expect(0);
    out.json().as_array().cloned().unwrap_or_default()
}

#[test]
fn a_resume_longer_than_two_leases_keeps_its_claim() {
    let dir = scratch("claims-long");
    let sleep_s = 4 * LEASE_S;
    let fake = fake(scripts(sleep_s));
    let (run_id, answers) = suspended(&dir, &fake);
    let started = Instant::now();
    let first = resume_in_background(&dir, &run_id, &answers);

    // Every other resume is refused while the first one runs, well past its lease.
    let mut refusals = 0;
    while started.elapsed() < Duration::from_secs(sleep_s - 1) {
        let second = run(resume_cmd(&dir, &run_id, &answers));
        assert_eq!(second.code, 5, "a second resume got in after {:?}: {}", started.elapsed(), second.stderr);
        assert!(second.stderr.contains("claimed"), "{}", second.stderr);
        refusals += 1;
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(refusals >= 3, "the claim was tried all along ({refusals} times)");
    assert!(started.elapsed() > Duration::from_secs(2 * LEASE_S), "past two leases");

    let out = first.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let done: Value = serde_json::from_str(&stdout).unwrap_or_default();
    assert_eq!(done["text"], "slept", "{done}");
    assert!(listed(&dir).is_empty(), "the finished run left the store");
    assert_eq!(fake.requests_for(MODEL).len(), 3, "one model call per turn: the run went once");
}

#[test]
fn a_killed_resume_frees_the_run_after_its_lease() {
    let dir = scratch("claims-kill");
    let fake = fake(scripts(20));
    let (run_id, answers) = suspended(&dir, &fake);
    let mut first = resume_in_background(&dir, &run_id, &answers);
    first.kill().unwrap_or_else(|e| panic!("{e}")); // SIGKILL: no release, no last write
    let _ = first.wait();
    let killed = Instant::now();

    let runs = listed(&dir);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["claimed"], true, "the dead resume's claim outlives it for a while: {runs:?}");
    // Once its lease has run out (and nobody renews it), the run is free.
    let until = killed + Duration::from_secs(10 * LEASE_S);
    while listed(&dir)[0]["claimed"] == true {
        assert!(Instant::now() < until, "the dead resume's claim never ran out");
        std::thread::sleep(Duration::from_millis(100));
    }
    let runs = listed(&dir);
    assert_eq!(runs[0]["runId"], run_id.as_str());
    assert_eq!(runs[0]["pending"][0]["kind"], "question", "the run waits as it did: nothing was saved");
    // And another resume takes it: it gets as far as running the tool.
    std::fs::remove_file(dir.join("started")).unwrap_or_else(|e| panic!("{e}"));
    let mut second = resume_in_background(&dir, &run_id, &answers);
    second.kill().unwrap_or_else(|e| panic!("{e}"));
    let _ = second.wait();
}
