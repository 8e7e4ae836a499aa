//! Runs every example offline (against its scripted provider) and checks
//! what it prints.
//!
//! The examples are built once, by the same cargo with the same features as
//! this test (so the build is usually a no-op: `cargo test` has just built
//! them), then run directly. `examples/tokio-driver` is a project of its own
//! and is built into a directory of its own under the target directory.
//!
//! Expected values come from the scripts inside the examples (what the
//! scripted model says and calls), from what the examples' tools return
//! for those calls, and from SPEC.md (relay request ids, `declined:`
//! results, raw relay arguments).

// The examples need both drivers.
#![cfg(all(feature = "blocking", feature = "async"))]

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

const STYLES: [&str; 4] = ["openai", "anthropic", "gemini", "openai-responses"];

/// The examples this file runs (overhead has a harness of its own: BENCHMARKS.md).
const TESTED: [&str; 11] = [
    "quickstart",
    "quickstart_async",
    "approval",
    "durable_web_handler",
    "relay_proxy",
    "streaming",
    "skills",
    "mcp_tools",
    "typed_output",
    "support_agent",
    "subagents",
];

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The target directory this test was built in (`<target>/<profile>/deps/<exe>`).
fn target_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.parent()?.to_path_buf())
}

/// The features this test was built with beyond the defaults, so the
/// examples are built the same way (and the build is a no-op).
fn features() -> Vec<&'static str> {
    let mut on = Vec::new();
    if cfg!(feature = "schemars") {
        on.push("schemars");
    }
    if cfg!(feature = "sqlite") {
        on.push("sqlite");
    }
    if cfg!(feature = "postgres") {
        on.push("postgres");
    }
    on
}

/// Builds the examples once; their executables by name.
fn examples() -> &'static HashMap<String, PathBuf> {
    static BUILT: OnceLock<HashMap<String, PathBuf>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "--message-format=json", "--manifest-path"])
            .arg(manifest_dir().join("Cargo.toml"))
            .arg("--features")
            .arg(features().join(","));
        for name in TESTED {
            cmd.args(["--example", name]);
        }
        // `cargo test` builds the examples with the test profile: the same
        // profile finds them fresh.
        cmd.args(["--profile", if cfg!(debug_assertions) { "test" } else { "release" }]);
        if let Some(dir) = target_dir() {
            cmd.arg("--target-dir").arg(dir);
        }
        let out = cmd.stderr(Stdio::inherit()).output().expect("cargo runs");
        assert!(out.status.success(), "building the examples failed");
        let mut exes = HashMap::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(msg) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            let is_example = msg["target"]["kind"].as_array().is_some_and(|k| k.iter().any(|k| k == "example"));
            if let (true, Some(name), Some(exe)) =
                (is_example, msg["target"]["name"].as_str(), msg["executable"].as_str())
            {
                exes.insert(name.to_string(), PathBuf::from(exe));
            }
        }
        exes
    })
}

/// Runs an example offline, whatever keys the environment holds.
fn run_example(name: &str, style: &str, args: &[&str], stdin: &[u8]) -> Output {
    let exe = examples().get(name).unwrap_or_else(|| panic!("example {name} was not built"));
    run(Command::new(exe).args(args), style, stdin)
}

fn run(cmd: &mut Command, style: &str, stdin: &[u8]) -> Output {
    cmd.env("NEXUS_OFFLINE", "1")
        .env("NEXUS_STYLE", style)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("GEMINI_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("the example starts");
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin).expect("stdin is written");
    }
    child.wait_with_output().expect("the example runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The run succeeded; its output.
fn ok(out: Output, what: &str) -> String {
    let text = stdout(&out);
    assert!(
        out.status.success(),
        "{what} failed: {}\nstdout:\n{text}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn assert_has(text: &str, needle: &str, what: &str) {
    assert!(text.contains(needle), "{what}: expected {needle:?} in:\n{text}");
}

#[test]
fn every_example_is_tested() {
    let mut found: Vec<String> = std::fs::read_dir(manifest_dir().join("examples"))
        .expect("examples/ is readable")
        .filter_map(|e| {
            let path = e.ok()?.path();
            let stem = path.file_stem()?.to_str()?.to_string();
            (path.extension()? == "rs").then_some(stem)
        })
        // overhead has a harness of its own; mcp_conformance is driven by the
        // MCP conformance suite (.ci/mcp-conformance.sh).
        .filter(|name| name != "overhead" && name != "mcp_conformance")
        .collect();
    found.sort();
    let mut tested: Vec<String> = TESTED.iter().map(|s| s.to_string()).collect();
    tested.sort();
    assert_eq!(found, tested, "a new example needs its test here");
}

/// The example's own MCP server ran the tool the model called by its
/// exposed name, and its text and structured content reached the model.
#[test]
fn mcp_tools() {
    for style in STYLES {
        let what = format!("mcp_tools ({style})");
        let text = ok(run_example("mcp_tools", style, &[], b""), &what);
        for line in [
            "tool weather__forecast (weather/forecast): Today's forecast for a city.",
            r#"result of weather__forecast: Lisbon: 21°C, sunny | {"celsius":21,"city":"Lisbon","sky":"sunny"}"#,
            "status: Done, turns: 2",
            "answer: Lisbon: 21°C and sunny.",
        ] {
            assert_has(&text, line, &what);
        }
        // The server's stderr stays with the host, never on the terminal.
        let out = run_example("mcp_tools", style, &[], b"");
        assert!(!String::from_utf8_lossy(&out.stderr).contains("forecast asked for"), "{what}: stderr leaked");
    }
}

/// The two quickstarts: both tools ran on the model's arguments, their
/// results reached the model (the script refuses the final request
/// otherwise), and the scripted answer came back.
fn check_quickstart(text: &str, what: &str) {
    for line in [
        "  [tool] get_weather(Paris) -> 18°C, sunny",
        "  [tool] add(2, 2) -> 4",
        r#"call get_weather {"city":"Paris"} -> ok: {"city":"Paris","celsius":18,"sky":"sunny"}"#,
        r#"call add {"a":2,"b":2} -> ok: 4"#,
        "status: Done, turns: 2,",
        "answer: It is 18°C and sunny in Paris, and 2 + 2 = 4.",
    ] {
        assert_has(text, line, what);
    }
}

#[test]
fn quickstart() {
    for style in STYLES {
        let what = format!("quickstart ({style})");
        let text = ok(run_example("quickstart", style, &[], b""), &what);
        check_quickstart(&text, &what);
        // The schemas the model is given, hand-written or derived: both
        // name the required arguments.
        assert_has(&text, r#"tool add: {"#, &what);
        assert_has(&text, r#""required":["a","b"]"#, &what);
        assert_has(&text, r#""required":["city"]"#, &what);
        if cfg!(feature = "schemars") {
            // Derived from the Args types: integers carry their format.
            assert_has(&text, r#""format":"int64""#, &what);
        }
    }
}

#[test]
fn typed_output_ends_in_the_validated_value_in_every_style() {
    for style in STYLES {
        let what = format!("typed_output {style}");
        let text = ok(run_example("typed_output", style, &[], b""), &what);
        // Gemini models before 3 cannot take a schema with tools: the output tool.
        let strategy = if style == "gemini" { "tool" } else { "native" };
        assert_has(&text, &format!("strategy for this upstream: {strategy} (model table)"), &what);
        assert_has(&text, &format!("upstream 0 used {strategy} from turn 1"), &what);
        assert_has(&text, "[tool] get_weather(Paris)", &what);
        assert_has(&text, "turns: 3", &what);
        assert_has(&text, "typed: Paris at 18.5 °C: take an umbrella", &what);
    }
}

#[test]
fn quickstart_async() {
    for style in STYLES {
        let what = format!("quickstart_async ({style})");
        let text = ok(run_example("quickstart_async", style, &[], b""), &what);
        check_quickstart(&text, &what);
        assert_has(&text, "tools ran concurrently: true", &what);
    }
}

#[test]
fn approval_approved_runs_the_tool_once() {
    let text = ok(run_example("approval", "openai", &[], b"y\n"), "approval (y)");
    assert_has(&text, "Send $40 to Sam? [y/N] approved", "approval (y)");
    assert_eq!(text.matches("[tool] transfer executed: $40 to Sam").count(), 1, "{text}");
    assert_has(&text, "result of transfer (ok): sent $40 to Sam", "approval (y)");
    assert_has(&text, "status: Done, turns: 2", "approval (y)");
}

#[test]
fn approval_declined_never_runs_the_tool() {
    for style in STYLES {
        let what = format!("approval (no answer, {style})");
        // End of input: nobody approved.
        let text = ok(run_example("approval", style, &[], b""), &what);
        assert_has(&text, "Send $40 to Sam? [y/N] declined", &what);
        assert!(!text.contains("transfer executed"), "{what}: {text}");
        // SPEC §4: a declined request becomes the error result `declined: <prompt>`.
        assert_has(&text, "result of transfer (error): declined: Send $40 to Sam?", &what);
        assert_has(&text, "status: Done, turns: 2", &what);
    }
}

/// The newcomer's program: #[tool] functions, the refund's approval asked
/// before it runs (in-process, and stored in SQLite then answered by a
/// second process), struct outputs in field order, the text streamed.
#[test]
fn support_agent_approves_declines_and_resumes_in_a_second_process() {
    let refund_args = ["\"order_id\"", "\"amount_cents\"", "\"reason\""];
    let order = r#"result of order_status (ok): {"order_id":"A-1001","status":"delivered","total_cents":4000,"currency":"EUR"}"#;
    let refunded = r#"result of refund (ok): {"order_id":"A-1001","refunded_cents":4000,"reference":"R-A-1001"}"#;
    let answer = "I have looked into order A-1001; the refund's outcome is above.";
    for style in STYLES {
        let what = format!("support_agent ask y ({style})");
        let text = ok(run_example("support_agent", style, &["ask"], b"y\n"), &what);
        for line in [order, "approved", "  [refund] 4000 cents on A-1001 (arrived damaged)", refunded, answer] {
            assert_has(&text, line, &what);
        }
        assert_has(&text, "status: Done, turns: 3", &what);
        // The approval names the call as the model made it, arguments in its order.
        let asked = text.lines().find(|l| l.starts_with("approval needed: Allow refund to run with {")).expect("asked");
        let at: Vec<usize> = refund_args.iter().map(|k| asked.find(k).expect("argument shown")).collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{what}: {asked}");

        let what = format!("support_agent ask declined ({style})");
        let text = ok(run_example("support_agent", style, &["ask"], b"n not after 30 days\n"), &what);
        assert!(!text.contains("[refund]"), "{what}: a declined refund ran");
        assert_has(&text, "result of refund (error): declined: Allow refund to run with", &what);
        assert_has(&text, "? — reason: not after 30 days", &what);

        let what = format!("support_agent stored ({style})");
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("nexus-support-agent-test-{}-{style}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let db = dir.join("runs.db");
        let text = ok(run_example("support_agent", style, &["stored", db.to_str().expect("UTF-8"), "y"], b""), &what);
        let _ = std::fs::remove_dir_all(&dir);
        let (first, second) = text.split_once("[second process]").unwrap_or_else(|| panic!("{what}: {text}"));
        assert_has(first, order, &what);
        assert_has(first, "status: Pending, turns: 2", &what);
        assert!(!first.contains("[refund]"), "{what}: refunded before the approval");
        assert_has(second, "waits for approval: Allow refund to run with", &what);
        for line in ["  [refund] 4000 cents on A-1001 (arrived damaged)", refunded, answer, "status: Done, turns: 3"] {
            assert_has(second, line, &what);
        }
        assert_has(second, "[second process] still stored: false", &what);
    }
}

/// The JSON body of the response line `< STATUS {…}`.
fn response(text: &str, status: u16) -> Value {
    let prefix = format!("< {status} ");
    let body = text
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {status} response in:\n{text}"));
    serde_json::from_str(body).expect("the response body is JSON")
}

#[test]
fn durable_web_handler_resumes_in_a_second_process() {
    for style in STYLES {
        let what = format!("durable_web_handler ({style})");
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("nexus-examples-test-{}-{style}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = dir.to_str().expect("UTF-8 temp dir");

        // Request 1 suspends and stores the run.
        let prompt = "Book a table for two at Le Petit Zinc, 20:00.";
        let text = ok(run_example("durable_web_handler", style, &["chat", d, prompt], b""), &what);
        assert!(!text.contains("[tool] booking"), "{what}: booked early");
        let pending = response(&text, 202);
        assert_eq!(pending["status"], "pending", "{what}");
        let run_id = pending["runId"].as_str().expect("runId").to_string();
        let request = &pending["pending"][0];
        assert_eq!(request["kind"], "approval", "{what}");
        assert_eq!(request["prompt"], "Book Le Petit Zinc at 20:00 for 2?", "{what}");
        let stored = std::fs::read_dir(&dir).expect("the store dir exists").count();
        assert!(stored > 0, "{what}: nothing stored");

        // An answer to no outstanding request is refused; the run stays stored.
        let wrong = r#"{"id":"pnd_nothing","ok":true}"#;
        let out = run_example("durable_web_handler", style, &["answer", d, &run_id, wrong], b"");
        assert!(!out.status.success(), "{what}: a wrong answer was accepted");
        assert!(response(&stdout(&out), 400)["error"].is_string(), "{what}");

        // Request 2, in a new process: approve; the tool runs once, the run ends.
        let answer = serde_json::json!({"id": request["id"], "ok": true}).to_string();
        let text = ok(run_example("durable_web_handler", style, &["answer", d, &run_id, &answer], b""), &what);
        assert_eq!(text.matches("[tool] booking Le Petit Zinc at 20:00 for 2").count(), 1, "{text}");
        let done = response(&text, 200);
        assert_eq!(done["status"], "done", "{what}");
        assert_eq!(
            done["text"], "Your table for two at Le Petit Zinc is booked for 20:00 (confirmation LPZ-2000).",
            "{what}"
        );
        assert_eq!(
            done["toolCalls"][0]["output"], "booked Le Petit Zinc at 20:00 for 2: confirmation LPZ-2000",
            "{what}"
        );

        // The finished run left the store: the same answer again finds nothing.
        let out = run_example("durable_web_handler", style, &["answer", d, &run_id, &answer], b"");
        assert!(!out.status.success(), "{what}: answered twice");
        let again = stdout(&out);
        assert!(response(&again, 404)["error"].is_string(), "{what}");
        assert!(!again.contains("[tool] booking"), "{what}: booked twice");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn durable_web_handler_plays_both_requests_by_itself() {
    let text = ok(run_example("durable_web_handler", "openai", &[], b""), "durable_web_handler");
    assert_eq!(response(&text, 202)["status"], "pending");
    assert_eq!(response(&text, 200)["status"], "done");
    assert_eq!(text.matches("[tool] booking").count(), 1, "{text}");
}

#[test]
fn relay_proxy_surfaces_every_parallel_call() {
    for style in STYLES {
        let what = format!("relay_proxy ({style})");
        let text = ok(run_example("relay_proxy", style, &[], b""), &what);
        let calls: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("  {"))
            .map(|l| serde_json::from_str(&format!("{{{l}")).expect("a call is JSON"))
            .collect();
        // Every call of the turn, in order; `arguments` byte for byte as the
        // provider sent them (SPEC §4).
        let expected = [
            ("get_weather", r#"{"city": "Paris"}"#, "Paris"),
            ("get_weather", r#"{"city":"Tokyo"}"#, "Tokyo"),
            ("local_time", r#"{ "city": "Tokyo" }"#, "Tokyo"),
        ];
        assert_eq!(calls.len(), expected.len(), "{what}: {text}");
        for (call, (name, arguments, city)) in calls.iter().zip(expected) {
            assert_eq!(call["name"], name, "{what}");
            assert_eq!(call["arguments"], arguments, "{what}");
            assert_eq!(call["input"]["city"], city, "{what}");
            assert!(call["id"].as_str().is_some_and(|id| !id.is_empty()), "{what}");
        }
        // One request for the whole turn, named after its first call (SPEC §4).
        let first_id = calls[0]["id"].as_str().unwrap_or_default();
        assert_has(&text, &format!("relay request relay_{first_id} (3 calls)"), &what);
        assert_has(&text, "status: Done, turns: 2, relayed calls: 3", &what);
        assert_has(&text, "answer: Paris: 18°C and sunny. Tokyo: 24°C and humid, where it is 03:00.", &what);
    }
}

const STREAMED_FINAL: &str = "Paris is sunny today, around 18°C with a light breeze from the west. \
                              A fine afternoon for a walk along the Seine; take a jacket for the evening.";

#[test]
fn streaming_prints_the_text_as_it_comes() {
    for style in STYLES {
        let what = format!("streaming ({style})");
        let text = ok(run_example("streaming", style, &[], b""), &what);
        let expected = format!(
            "[turn 1]\nLet me look that up.\n[tool call get_weather {{\"city\":\"Paris\"}}]\n\
             [tool result get_weather: Paris: 18°C, sunny, light west wind]\n[turn 2]\n{STREAMED_FINAL}\n---\n"
        );
        assert!(text.starts_with(&expected), "{what}:\n{text}");
        // The final text alone is far longer than one piece of the stream.
        let deltas: usize = text
            .split("text deltas: ")
            .nth(1)
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{what}: no delta count in {text}"));
        assert!(deltas > 2, "{what}: {deltas} deltas");
        assert_has(&text, "status: Done, turns: 2,", &what);
    }
}

/// The skills example: the catalog of its two skills, one activated (the
/// event, then the instructions as its result), its reference read through
/// the granted folder, and the scripted answer.
#[test]
fn skills_activates_one_skill_and_reads_its_reference() {
    for style in STYLES {
        let what = format!("skills ({style})");
        let text = ok(run_example("skills", style, &[], b""), &what);
        for line in [
            "skills: changelog-writer, sql-review",
            "catalog: 2 described, 0 by name only",
            "changelog-writer files: references/format.md, scripts/check.sh",
            "[skill ok] <skill_content name=\"changelog-writer\">",
            "[skill activated] changelog-writer",
            "[read ok]      1\t# Keep a Changelog: sections",
            "status: Done, turns: 3",
            "answer:\n## [1.3.0] - 2026-12-03\n### Added\n- Load Agent Skills on demand",
        ] {
            assert_has(&text, line, &what);
        }
        // The result comes first, then the activation it shows.
        let result = text.find("[skill ok]").unwrap_or(usize::MAX);
        let activated = text.find("[skill activated]").unwrap_or(0);
        assert!(result < activated, "{what}:\n{text}");
    }
}

#[test]
fn tokio_driver_drives_the_machine_by_hand() {
    let project = manifest_dir().join("../examples/tokio-driver");
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["run", "--quiet", "--locked", "--manifest-path"]).arg(project.join("Cargo.toml"));
    // A directory of its own: another workspace, another lock file.
    if let Some(dir) = target_dir() {
        cmd.arg("--target-dir").arg(dir.join("tokio-driver"));
    }
    for style in STYLES {
        let what = format!("tokio-driver ({style})");
        let text = ok(run(&mut cmd, style, b""), &what);
        for line in [
            "Checking.\n",
            r#"[tool call get_weather {"city":"Paris"}]"#,
            r#"[tool call multiply {"a":17,"b":23}]"#,
            "[tool result get_weather: Paris: 18°C, sunny]",
            "[tool result multiply: 391]",
            "outcome: Done, turns: 2,",
            "answer: Paris is at 18°C and sunny, and 17 × 23 = 391.",
        ] {
            assert_has(&text, line, &what);
        }
    }
}

#[test]
fn subagents_delegate_to_two_children_on_other_wire_formats() {
    for style in ["openai", "anthropic"] {
        let what = format!("subagents ({style})");
        let text = ok(run_example("subagents", style, &[], b""), &what);
        assert_has(&text, "[researcher's tool] lookup", &what);
        assert_has(&text, "pnd_", &what);
        assert_has(&text, "(Book 2 tickets for \"Saturday\"?)", &what);
        assert_has(&text, "[booker's tool] booked 2 tickets", &what);
        assert_has(&text, "agent booker answered: Booked 2 tickets for Saturday.", &what);
        assert_has(&text, "agent researcher answered: Open Tuesday to Sunday, 10:00-18:00.", &what);
        assert_has(&text, "status: Done, turns: 2", &what);
        assert_has(&text, "answer: The museum is open", &what);
        assert_eq!(text.matches("[booker's tool] booked").count(), 1, "{what}: the booking ran once");
    }
}
