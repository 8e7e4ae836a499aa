//! `bash`: exit codes, output caps, the working directory, the scrubbed
//! environment, and a runaway command killed at its timeout with its children.
#![cfg(all(feature = "builtins", unix))]

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nexus_drive::builtins::Builtins;
use nexus_drive::{ToolContext, ToolOutcome, ToolResult};
use serde_json::{json, Value};

fn scratch(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "nexus-builtins-bash-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("root/sub")).unwrap();
    dir
}

fn bash(b: &Builtins, args: Value) -> ToolResult {
    match b.call("bash", args, &ToolContext::new("c1", "bash")) {
        Ok(ToolOutcome::Result(r)) => r,
        Ok(ToolOutcome::Done(v)) => ToolResult::ok(v.as_str().unwrap_or_default()),
        Ok(ToolOutcome::Pending(r)) => panic!("unexpected suspension: {r:?}"),
        Err(e) => ToolResult::error(e.message()),
    }
}

fn only_bash(dir: &std::path::Path) -> Builtins {
    Builtins::new(dir.join("root")).only(["bash"]).unwrap()
}

#[test]
fn output_and_exit_codes() {
    let dir = scratch("exit");
    let b = only_bash(&dir);

    let r = bash(&b, json!({"command": "echo out; echo err >&2"}));
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.output, "out\nerr");
    assert_eq!(r.metadata.as_ref().unwrap()["exitCode"], 0);

    let r = bash(&b, json!({"command": "echo partial; exit 3"}));
    assert!(r.is_error);
    assert_eq!(r.output, "partial\n[exit code 3]");
    assert_eq!(r.metadata.as_ref().unwrap()["exitCode"], 3);

    let r = bash(&b, json!({"command": "true"}));
    assert!(!r.is_error);
    assert_eq!(r.output, "(no output)");

    let r = bash(&b, json!({"command": "  "}));
    assert!(r.is_error && r.output.contains("command is required"), "{r:?}");
}

#[test]
fn runs_in_the_root_or_a_workdir_inside_it() {
    let dir = scratch("workdir");
    let b = only_bash(&dir);
    let root = fs::canonicalize(dir.join("root")).unwrap();

    let r = bash(&b, json!({"command": "pwd -P"}));
    assert_eq!(r.output, root.to_string_lossy());
    let r = bash(&b, json!({"command": "pwd -P", "workdir": "sub"}));
    assert_eq!(r.output, root.join("sub").to_string_lossy());
    let r = bash(&b, json!({"command": "pwd", "workdir": "missing"}));
    assert!(r.is_error && r.output.contains("not a directory"), "{r:?}");
    let r = bash(&b, json!({"command": "pwd", "workdir": "/"}));
    assert!(r.is_error && r.output.contains("outside the workspace root"), "{r:?}");
}

#[test]
fn long_output_keeps_head_and_tail_with_a_note() {
    let dir = scratch("cap");
    let b = only_bash(&dir).output_cap(1000);
    let r = bash(&b, json!({"command": "for i in $(seq 1 2000); do echo line$i; done"}));
    assert!(!r.is_error, "{r:?}");
    assert!(r.output.starts_with("line1\nline2\n"), "{}", r.output);
    assert!(r.output.ends_with("line1999\nline2000"), "{}", r.output);
    assert!(r.output.contains("[output cut: "), "{}", r.output);
    assert!(r.output.len() < 1100, "{} bytes", r.output.len());
    assert_eq!(r.metadata.as_ref().unwrap()["truncated"], true);
}

#[test]
fn provider_keys_and_host_listed_variables_are_scrubbed() {
    // Set in this test binary's own environment; the child would inherit them.
    std::env::set_var("OPENAI_API_KEY", "sk-should-not-leak");
    std::env::set_var("ANTHROPIC_API_KEY", "sk-ant-should-not-leak");
    std::env::set_var("NEXUS_TEST_HOST_SECRET", "host-secret");
    std::env::set_var("NEXUS_TEST_VISIBLE", "visible");
    let dir = scratch("env");
    let b = only_bash(&dir).scrub_env("NEXUS_TEST_HOST_SECRET");
    let r = bash(
        &b,
        json!({"command": "echo \"[$OPENAI_API_KEY][$ANTHROPIC_API_KEY][$NEXUS_TEST_HOST_SECRET][$NEXUS_TEST_VISIBLE]\""}),
    );
    assert_eq!(r.output, "[][][][visible]");
}

fn alive(pid: u32) -> bool {
    // A process that was killed may linger a moment as a zombie until its new
    // parent reaps it: that is dead too.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'),
        Err(_) => false,
    }
}

#[test]
fn a_runaway_command_is_killed_at_its_timeout_with_its_children() {
    let dir = scratch("runaway");
    let b = only_bash(&dir);
    let pidfile = dir.join("root/child.pid");
    let started = Instant::now();
    let r = bash(&b, json!({"command": "sleep 1000 & echo $! > child.pid; sleep 1000", "timeout": 500}));
    let took = started.elapsed();
    assert!(r.is_error, "{r:?}");
    assert!(r.output.contains("[timed out after 500 ms"), "{}", r.output);
    assert_eq!(r.metadata.as_ref().unwrap()["timedOut"], true);
    assert!(took < Duration::from_secs(10), "the call returned after {took:?}");

    let child: u32 = fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(child) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(child), "the background child {child} survived the timeout");
}

#[test]
fn background_jobs_do_not_outlive_a_command_that_exits() {
    let dir = scratch("leftover");
    let b = only_bash(&dir);
    let started = Instant::now();
    let r = bash(&b, json!({"command": "sleep 1000 & echo $! > child.pid; echo started"}));
    assert!(!r.is_error, "{r:?}");
    assert_eq!(r.output, "started");
    assert!(started.elapsed() < Duration::from_secs(10), "waited for the background job");
    let child: u32 = fs::read_to_string(dir.join("root/child.pid")).unwrap().trim().parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(child) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(child), "the background job {child} outlived its command");
}

#[test]
fn the_model_cannot_ask_for_more_than_the_host_maximum() {
    let dir = scratch("maxtimeout");
    let b = only_bash(&dir).bash_max_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let r = bash(&b, json!({"command": "sleep 30", "timeout": 3_600_000}));
    assert!(r.is_error && r.output.contains("[timed out after 300 ms"), "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
}
