//! `nexus run` / `nexus resume` end to end: the built binary against the
//! fake provider, on each wire format, across separate processes.

mod cli_support;

use cli_support::*;
use nexus_tests::fake::{ExpectFinal, Script, Scripts, Turn};
use serde_json::{json, Value};

/// One test per style.
macro_rules! per_style {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            #[test]
            fn anthropic() {
                super::$name("anthropic");
            }
            #[test]
            fn openai() {
                super::$name("openai");
            }
            #[test]
            fn gemini() {
                super::$name("gemini");
            }
            #[test]
            fn openai_responses() {
                super::$name("openai-responses");
            }
        }
    )*};
}

per_style!(
    relay_calls_suspend_and_resume_in_another_process,
    relay_round_trip_streamed,
    partial_answers_keep_the_run_pending,
    a_mismatched_answer_changes_nothing,
    record_then_replay_round_trips,
);

const ALPHA_ARGS: &str = r#"{"q": "alpha"}"#;
const BETA_ARGS: &str = r#"{"q":"beta","limit":2}"#;

/// Turn 0: two parallel `lookup` calls with fixed ids (the raw argument text
/// differs in spacing on purpose); turn 1: the final text, once both results
/// are in the transcript.
fn relay_scripts(style: &str, model: &str) -> Scripts {
    let mut calls = Turn::text("Looking both up.")
        .call_with_id("c_alpha", "lookup", ALPHA_ARGS)
        .call_with_id("c_beta", "lookup", BETA_ARGS);
    if style == "gemini" {
        calls = calls.with_ids();
    }
    let expect = ExpectFinal {
        tool_result_contains: vec!["A-ONE".into(), "B-TWO".into()],
        tool_results: Some(2),
        messages: None,
    };
    Scripts::new(KEY)
        .model(model, Script::new(vec![calls, Turn::text("Alpha is A-ONE and beta is B-TWO.")]).expect_final(expect))
}

fn relay_file(dir: &std::path::Path) -> String {
    let decls = json!([{
        "name": "lookup",
        "description": "Looks a word up in the caller's index.",
        "input_schema": {"type": "object", "properties": {"q": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["q"]}
    }]);
    write_json(dir, "relay.json", &decls)
}

fn relay_answers(dir: &std::path::Path, request_id: &str) -> String {
    let answer = json!({"id": request_id, "ok": true, "data": {"results": [
        {"id": "c_alpha", "output": "A-ONE"},
        {"id": "c_beta", "output": "B-TWO", "isError": false}
    ]}});
    write_json(dir, "answers.json", &answer)
}

/// The suspended run's one `tool_call` request carries both calls, in order,
/// with the provider's ids and the raw argument text.
fn assert_relay_request(pending: &Value) {
    let list = pending.as_array().unwrap_or_else(|| panic!("pending is an array: {pending}"));
    assert_eq!(list.len(), 1, "one request for the whole turn: {pending}");
    let req = &list[0];
    assert_eq!(req["kind"], "tool_call");
    assert_eq!(req["id"], "relay_c_alpha", "named after the first relay call");
    let calls = req["data"]["calls"].as_array().unwrap_or_else(|| panic!("data.calls: {req}"));
    assert_eq!(calls.len(), 2, "{req}");
    assert_eq!(calls[0]["id"], "c_alpha");
    assert_eq!(calls[0]["name"], "lookup");
    assert_eq!(calls[0]["input"], json!({"q": "alpha"}));
    assert_eq!(calls[0]["arguments"], ALPHA_ARGS, "raw arguments, never re-encoded");
    assert_eq!(calls[1]["id"], "c_beta");
    assert_eq!(calls[1]["input"], json!({"q": "beta", "limit": 2}));
    assert_eq!(calls[1]["arguments"], BETA_ARGS);
}

/// The request that asked for the final turn held exactly one result turn,
/// with both results in it.
fn assert_one_balanced_result_turn(style: &str, fake: &nexus_tests::fake::FakeProvider, model: &str) {
    assert!(fake.failures().is_empty(), "the fake's final-turn checks: {:?}", fake.failures());
    let requests = fake.requests_for(model);
    let last = requests.last().unwrap_or_else(|| panic!("no request for {model}"));
    assert_eq!(last.status, Some(200), "the final request was accepted");
    let body = last.json.clone().unwrap_or(Value::Null);
    let turns = result_turns(style, &body);
    assert_eq!(turns.len(), 1, "one result turn: {turns:?}");
    assert_eq!(turns[0].len(), 2, "both results in it: {turns:?}");
    assert!(turns[0][0].contains("A-ONE") && turns[0][1].contains("B-TWO"), "in call order: {turns:?}");
}

fn relay_calls_suspend_and_resume_in_another_process(style: &str) {
    let dir = scratch("relay");
    let fake = fake(relay_scripts(style, "relay-model"));
    let relay = relay_file(&dir);

    let out = run(run_cmd(
        &dir,
        &fake,
        style,
        "relay-model",
        &["--relay", &relay, "--state", "st.json", "--json", "look up alpha and beta"],
    ))
    .expect(3);
    let result = out.json();
    assert_eq!(result["status"], "pending");
    assert_relay_request(&result["pending"]);
    assert!(out.stderr.contains("nexus resume"), "says how to continue: {}", out.stderr);
    let state = std::fs::read(dir.join("st.json")).unwrap_or_else(|e| panic!("state file: {e}"));
    assert!(!String::from_utf8_lossy(&state).contains(KEY), "the state never holds the API key");
    assert_eq!(fake.requests_for("relay-model").len(), 1);

    let answers = relay_answers(&dir, "relay_c_alpha");
    let mut resume = nexus(&dir, Some(style));
    resume.args(["resume", "--state", "st.json", "--answer", &answers, "--json"]);
    let done = run(&mut resume).expect(0).json();
    assert_eq!(done["status"], "done");
    assert_eq!(done["text"], "Alpha is A-ONE and beta is B-TWO.");
    assert_eq!(done["turns"], 2);
    let calls = done["toolCalls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.iter().map(|c| c["output"].clone()).collect::<Vec<_>>(), vec![json!("A-ONE"), json!("B-TWO")]);
    assert!(done["usage"]["totalTokens"].as_u64().unwrap_or(0) > 0, "usage is summed: {done}");
    assert_one_balanced_result_turn(style, &fake, "relay-model");
    assert!(!dir.join("st.json").exists(), "the finished run's state file is removed");
}

fn relay_round_trip_streamed(style: &str) {
    let dir = scratch("relay-stream");
    let fake = fake(relay_scripts(style, "stream-model"));
    let relay = relay_file(&dir);

    // Text as it arrives, the pending requests (JSON) after it.
    let out =
        run(run_cmd(&dir, &fake, style, "stream-model", &["--relay", &relay, "--stream", "look up alpha and beta"]))
            .expect(3);
    let (text, rest) = out.stdout.split_once('\n').unwrap_or_default();
    assert_eq!(text, "Looking both up.");
    let pending: Value = serde_json::from_str(rest).unwrap_or_else(|e| panic!("{e}: {rest}"));
    assert_relay_request(&pending);
    assert!(dir.join("nexus-state.json").exists(), "the default state file");
    let streamed = fake.requests_for("stream-model");
    let asked_stream = match style {
        "gemini" => streamed[0].target.contains(":streamGenerateContent"),
        _ => streamed[0].json.as_ref().is_some_and(|b| b["stream"] == true),
    };
    assert!(asked_stream, "--stream asks the provider for a stream");

    // Events as JSON lines, the result last.
    let answers = relay_answers(&dir, "relay_c_alpha");
    let mut resume = nexus(&dir, Some(style));
    resume.args(["resume", "--state", "nexus-state.json", "--answer", &answers, "--stream", "--json"]);
    let out = run(&mut resume).expect(0);
    let lines: Vec<Value> =
        out.stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect();
    let (last, events) = lines.split_last().unwrap_or_else(|| panic!("no output"));
    assert_eq!(last["status"], "done");
    assert!(events.iter().all(|e| e["type"].is_string()), "events first: {events:?}");
    let deltas: String =
        events.iter().filter(|e| e["type"] == "text_delta").filter_map(|e| e["text"].as_str()).collect();
    assert_eq!(deltas, "Alpha is A-ONE and beta is B-TWO.");
    let results: Vec<&Value> = events.iter().filter(|e| e["type"] == "tool_result").collect();
    assert_eq!(results.len(), 2, "{events:?}");
    assert_one_balanced_result_turn(style, &fake, "stream-model");
}

fn partial_answers_keep_the_run_pending(style: &str) {
    let dir = scratch("partial");
    let seat = r#"{"questions":[{"question":"Window or aisle?","options":["window","aisle"]}]}"#;
    let meal = r#"{"questions":[{"question":"Vegetarian meal?"}]}"#;
    let mut ask = Turn::default().call_with_id("q_seat", "question", seat).call_with_id("q_meal", "question", meal);
    if style == "gemini" {
        ask = ask.with_ids();
    }
    let expect = ExpectFinal {
        tool_result_contains: vec!["window".into(), "yes please".into()],
        tool_results: Some(2),
        messages: None,
    };
    let fake = fake(Scripts::new(KEY).model(
        "ask",
        Script::new(vec![ask, Turn::text("Booked: window seat, vegetarian meal.")]).expect_final(expect),
    ));

    let out = run(run_cmd(
        &dir,
        &fake,
        style,
        "ask",
        &["--builtins=question", "--state", "st.json", "--json", "book my flight"],
    ))
    .expect(3);
    let pending = out.json()["pending"].clone();
    let list = pending.as_array().cloned().unwrap_or_default();
    assert_eq!(list.len(), 2, "each suspended call has its own request: {pending}");
    assert_eq!(list[0]["kind"], "question");
    assert_eq!(list[0]["id"], "pnd_q_seat", "an empty id is stamped pnd_<call id>");
    assert_eq!(list[0]["prompt"], "Window or aisle? (options: window, aisle)");
    assert_eq!(list[1]["id"], "pnd_q_meal");
    assert_eq!(list[1]["prompt"], "Vegetarian meal?");
    let first_state = std::fs::read(dir.join("st.json")).unwrap_or_default();

    // Only the first answer: still pending on the second, state replaced.
    let a1 = write_json(&dir, "a1.json", &json!({"id": "pnd_q_seat", "ok": true, "data": {"answer": "window"}}));
    let mut resume = nexus(&dir, Some(style));
    resume.args(["resume", "--state", "st.json", "--answer", &a1, "--json"]);
    let out = run(&mut resume).expect(3).json();
    assert_eq!(out["status"], "pending");
    let rest = out["pending"].as_array().cloned().unwrap_or_default();
    assert_eq!(rest.len(), 1, "{out}");
    assert_eq!(rest[0]["id"], "pnd_q_meal");
    let second_state = std::fs::read(dir.join("st.json")).unwrap_or_default();
    assert_ne!(first_state, second_state, "the state file holds the answered call now");
    assert!(serde_json::from_slice::<Value>(&second_state).is_ok(), "and is whole");
    assert!(leftovers(&dir).is_empty(), "no temporary file left: {:?}", leftovers(&dir));
    assert_eq!(fake.requests_for("ask").len(), 1, "nothing is sent while a request is outstanding");

    // The second answer, as a one-element array: the run finishes.
    let a2 = write_json(&dir, "a2.json", &json!([{"id": "pnd_q_meal", "ok": true, "data": {"answer": "yes please"}}]));
    let mut resume = nexus(&dir, Some(style));
    resume.args(["resume", "--state", "st.json", "--answer", &a2, "--json"]);
    let done = run(&mut resume).expect(0).json();
    assert_eq!(done["text"], "Booked: window seat, vegetarian meal.");
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
    let body = fake.requests_for("ask").last().and_then(|r| r.json.clone()).unwrap_or(Value::Null);
    let turns = result_turns(style, &body);
    assert_eq!(turns.len(), 1, "{turns:?}");
    assert!(
        turns[0][0].contains("window") && turns[0][1].contains("yes please"),
        "answers reach the re-run tools: {turns:?}"
    );
}

fn a_mismatched_answer_changes_nothing(style: &str) {
    let dir = scratch("mismatch");
    let fake = fake(relay_scripts(style, "mm"));
    let relay = relay_file(&dir);
    run(run_cmd(&dir, &fake, style, "mm", &["--relay", &relay, "--state", "st.json", "x"])).expect(3);
    let before = std::fs::read(dir.join("st.json")).unwrap_or_default();

    let wrong = relay_answers(&dir, "relay_nope");
    let mut resume = nexus(&dir, Some(style));
    resume.args(["resume", "--state", "st.json", "--answer", &wrong]);
    let out = run(&mut resume).expect(1);
    assert!(
        out.stderr.contains("relay_nope") && out.stderr.contains("relay_c_alpha"),
        "names both ids: {}",
        out.stderr
    );
    assert_eq!(out.stderr.trim().lines().count(), 1, "one line: {}", out.stderr);
    assert_eq!(std::fs::read(dir.join("st.json")).unwrap_or_default(), before, "the state file is byte-identical");
    assert_eq!(fake.requests_for("mm").len(), 1, "nothing was sent");
}

fn record_then_replay_round_trips(style: &str) {
    let dir = scratch("record");
    let fake = fake(relay_scripts(style, "rec"));
    let relay = relay_file(&dir);
    // Streamed, so body chunks are recorded as they were read.
    run(run_cmd(
        &dir,
        &fake,
        style,
        "rec",
        &["--relay", &relay, "--stream", "--record", "c.jsonl", "look up alpha and beta"],
    ))
    .expect(3);
    let answers = relay_answers(&dir, "relay_c_alpha");
    let mut resume = nexus(&dir, Some(style));
    resume.args(["resume", "--state", "nexus-state.json", "--answer", &answers, "--record", "c.jsonl"]);
    run(&mut resume).expect(0);

    let cassette = std::fs::read_to_string(dir.join("c.jsonl")).unwrap_or_default();
    assert!(!cassette.contains(KEY), "the key is redacted at record time");
    let chunks: Vec<&str> = cassette.lines().filter(|l| l.contains(r#""type":"chunk""#)).collect();
    assert!(
        !chunks.is_empty() && chunks.iter().any(|c| c.contains("data:")),
        "the SSE body is recorded as read: {chunks:?}"
    );

    let mut replay = nexus(&dir, None);
    replay.args(["replay", "c.jsonl"]);
    let out = run(&mut replay).expect(0);
    assert!(out.stdout.contains("replay matches the recording"), "{}", out.stdout);
    let mut replay = nexus(&dir, None);
    replay.args(["replay", "c.jsonl", "--json"]);
    let out = run(&mut replay).expect(0).json();
    assert_eq!(out["status"], "done");
    assert_eq!(out["text"], "Alpha is A-ONE and beta is B-TWO.");
    assert_eq!(fake.requests_for("rec").len(), 2, "replays send nothing");

    // One changed byte in the first recorded request fails the replay and is named.
    let tampered: Vec<String> = cassette
        .lines()
        .map(|l| {
            if l.contains(r#""type":"request","exchange":1"#) {
                l.replacen("look up alpha", "look up alphx", 1)
            } else {
                l.to_string()
            }
        })
        .collect();
    assert_ne!(tampered.join("\n"), cassette.trim_end(), "the prompt is in the first request");
    std::fs::write(dir.join("t.jsonl"), tampered.join("\n")).unwrap_or_default();
    let mut replay = nexus(&dir, None);
    replay.args(["replay", "t.jsonl"]);
    let out = run(&mut replay).expect(1);
    assert!(out.stderr.contains("request 1") && out.stderr.contains("body differs at byte"), "{}", out.stderr);
}

#[test]
fn a_corrupt_state_file_is_refused_clearly() {
    let dir = scratch("corrupt");
    let answers = write_json(&dir, "a.json", &json!({"id": "x", "ok": true}));
    let cases: [(&str, &[u8], &str); 4] = [
        ("garbage.json", b"{not json", "corrupt"),
        ("truncated.json", br#"{"format_version":1,"runId":"run_1","config":{"style":"openai""#, "corrupt"),
        ("future.json", br#"{"format_version":99}"#, "unsupported"),
        ("binary.json", &[0xff, 0xfe, 0x00, 0x12], "corrupt"),
    ];
    for (name, bytes, word) in cases {
        std::fs::write(dir.join(name), bytes).unwrap_or_default();
        let mut cmd = nexus(&dir, Some("openai"));
        cmd.args(["resume", "--state", name, "--answer", &answers]);
        let out = run(&mut cmd).expect(1);
        assert!(out.stderr.contains(name) && out.stderr.contains(word), "{name}: {}", out.stderr);
        assert_eq!(std::fs::read(dir.join(name)).unwrap_or_default(), bytes, "{name} is left as it was");
    }
    let mut cmd = nexus(&dir, Some("openai"));
    cmd.args(["resume", "--state", "missing.json", "--answer", &answers]);
    let out = run(&mut cmd).expect(1);
    assert!(out.stderr.contains("missing.json"), "{}", out.stderr);
}

#[test]
fn the_turn_limit_exits_4() {
    let dir = scratch("limit");
    let todo = r#"{"todos":[{"id":"1","text":"pack","completed":false}]}"#;
    let fake = fake(
        Scripts::new(KEY)
            .model("lim", Script::new(vec![Turn::default().call("todowrite", todo), Turn::text("never asked for")])),
    );
    let out =
        run(run_cmd(&dir, &fake, "openai", "lim", &["--builtins=todowrite", "--max-turns", "1", "--json", "plan"]))
            .expect(4);
    let r = out.json();
    assert_eq!(r["status"], "incomplete");
    assert_eq!(r["limit"], "maxTurns");
    assert_eq!(r["toolCalls"][0]["output"], "[ ] pack", "the last turn's tools still ran");
}

#[test]
fn usage_and_config_errors_exit_2() {
    let dir = scratch("usage");
    let fake = fake(Scripts::new(KEY));
    let url = fake.base_url(fake_style("openai"));
    let bash = write_json(
        &dir,
        "bash.json",
        &json!([{"name": "bash", "description": "x", "input_schema": {"type": "object"}}]),
    );
    let cases: Vec<(Vec<&str>, Option<&str>, &str)> = vec![
        (vec!["run", "--base-url", &url], Some("openai"), "PROMPT"),
        (vec!["run", "--frobnicate", "hi"], Some("openai"), "--frobnicate"),
        (vec!["run", "--style", "cobol", "hi"], Some("openai"), "cobol"),
        (vec!["run", "--base-url", &url, "hi"], None, "OPENAI_API_KEY"),
        (vec!["run", "--max-turns", "0", "hi"], Some("openai"), "max-turns"),
        (vec!["run", "--relay", &bash, "hi"], Some("openai"), "collides with a built-in"),
        (vec!["run", "--builtins=teleport", "hi"], Some("openai"), "teleport"),
        (vec!["resume", "--state", "s.json"], Some("openai"), "--answer"),
        (vec!["decode", "x.json"], None, "--style"),
        (vec!["launch"], None, "launch"),
    ];
    for (args, style, word) in cases {
        let mut cmd = nexus(&dir, style);
        cmd.args(&args);
        let out = run(&mut cmd).expect(2);
        assert!(out.stderr.contains(word), "{args:?}: {}", out.stderr);
    }
    assert!(fake.requests().is_empty(), "nothing reached the provider");
}

#[test]
fn a_provider_error_exits_1_with_its_message() {
    let dir = scratch("provider-error");
    let fake = fake(Scripts::new("a-different-key").model("m", Script::new(vec![Turn::text("hi")])));
    let out = run(run_cmd(&dir, &fake, "anthropic", "m", &["hello"])).expect(1);
    let line = out.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("401") && line.contains("invalid x-api-key"),
        "the status and the provider's own message: {line}"
    );
    assert!(!dir.join("nexus-state.json").exists());
}

#[test]
fn a_resume_alone_can_be_recorded_and_replayed() {
    let style = "openai";
    let dir = scratch("record-resume");
    let fake = fake(relay_scripts(style, "rr"));
    let relay = relay_file(&dir);
    run(run_cmd(&dir, &fake, style, "rr", &["--relay", &relay, "x"])).expect(3);
    let answers = relay_answers(&dir, "relay_c_alpha");
    let mut resume = nexus(&dir, Some(style));
    resume.args(["resume", "--state", "nexus-state.json", "--answer", &answers, "--record", "r.jsonl"]);
    run(&mut resume).expect(0);
    let cassette = std::fs::read_to_string(dir.join("r.jsonl")).unwrap_or_default();
    assert!(cassette.lines().nth(1).is_some_and(|l| l.starts_with(r#"{"type":"resume""#)), "{cassette}");
    let out = run(nexus(&dir, None).args(["replay", "r.jsonl", "--json"])).expect(0).json();
    assert_eq!(out["status"], "done");
    assert_eq!(out["text"], "Alpha is A-ONE and beta is B-TWO.");
}
