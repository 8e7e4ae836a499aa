//! `nexus run` under a small context window: the built binary reads large
//! files with the built-in `read` tool against the fake provider, compacts
//! as it goes, reports the compactions with --json, and its cassette
//! replays byte for byte; a compacted run suspended on a question resumes
//! in another process with its compactions and finishes under the budget.

mod cli_support;

use cli_support::*;
use nexus_proto::context::{DEFAULT_COMPACTION_INSTRUCTION, SUMMARY_PREFIX};
use nexus_tests::fake::{fake_token_count, Script, Scripts, Turn};
use serde_json::Value;

const LIMIT: u64 = 9_000;
const FILES: usize = 24;

fn script(style: &str) -> Script {
    let mut turns: Vec<Turn> = (0..FILES)
        .map(|n| {
            let t = Turn::default().call("read", format!(r#"{{"path":"src/f{n}.rs"}}"#));
            if style == "gemini" {
                t.with_ids()
            } else {
                t
            }
        })
        .collect();
    turns.push(Turn::text("every file read"));
    Script::new(turns).context_limit(LIMIT).summarize_on(&DEFAULT_COMPACTION_INSTRUCTION[..48])
}

/// Writes `src/{prefix}{n}.rs` for `n` below `count`, `size(n)` bytes each
/// of lines naming the file.
fn sources(dir: &std::path::Path, prefix: &str, count: usize, size: impl Fn(usize) -> usize) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    for n in 0..count {
        let line = format!("fn {prefix}{n}_step() {{ let total = compute({n}) * 42; assert!(total >= 0); }}\n");
        std::fs::write(dir.join(format!("src/{prefix}{n}.rs")), line.repeat(size(n) / line.len())).unwrap();
    }
}

fn a_long_read_loop_compacts_and_reports_it(style: &str) {
    let dir = scratch("context");
    sources(&dir, "f", FILES, |n| if n == 5 { 40_000 } else { 2_400 });
    let model = "m-cli-context";
    let fake = fake(Scripts::new(KEY).model(model, script(style)));
    let out = run(run_cmd(
        &dir,
        &fake,
        style,
        model,
        &[
            "--builtins=read",
            "--root",
            ".",
            "--max-turns",
            "30",
            "--context-window",
            "9000",
            "--compact-at",
            "0.8",
            "--max-tool-result-bytes",
            "6000",
            "--record",
            "c.jsonl",
            "--json",
            "read every file",
        ],
    ))
    .expect(0)
    .json();
    assert_eq!(out["status"], "done", "{style}: {out}");
    assert_eq!(out["text"], "every file read");
    let compactions = out["compactions"].as_array().cloned().unwrap_or_default();
    assert!(compactions.len() >= 2, "{style}: {out}");
    for c in &compactions {
        let n = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("{style}: {k} in {c}"));
        assert!(n("turn") >= 1 && n("turnsReplaced") >= 1, "{c}");
        assert!(n("tokensAfter") < n("tokensBefore"), "{c}");
    }
    for r in fake.requests_for(model) {
        assert_eq!(r.status, Some(200), "{style}: a request was refused");
        assert!(r.json.as_ref().map(fake_token_count).unwrap_or_default() <= LIMIT);
    }
    let out = run(nexus(&dir, None).args(["replay", "c.jsonl", "--json"])).expect(0).json();
    assert_eq!(out["status"], "done", "{style}: the cassette replays: {out}");
    assert_eq!(out["compactions"].as_array().map(Vec::len), Some(compactions.len()));
    let before = fake.requests().len();
    run(nexus(&dir, None).args(["replay", "c.jsonl"])).expect(0);
    assert_eq!(fake.requests().len(), before, "replays send nothing");
    let _: Value = out;
}

#[test]
fn anthropic() {
    a_long_read_loop_compacts_and_reports_it("anthropic");
}

#[test]
fn openai() {
    a_long_read_loop_compacts_and_reports_it("openai");
}

#[test]
fn gemini() {
    a_long_read_loop_compacts_and_reports_it("gemini");
}

#[test]
fn openai_responses() {
    a_long_read_loop_compacts_and_reports_it("openai-responses");
}

/// The first value under `key` anywhere in `v`.
fn find<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    match v {
        Value::Object(o) => o.get(key).or_else(|| o.values().find_map(|x| find(x, key))),
        Value::Array(a) => a.iter().find_map(|x| find(x, key)),
        _ => None,
    }
}

/// Reads files until the run has compacted, asks the user a question (the
/// run suspends: exit 3, state on disk), and is answered by `nexus resume`
/// in another process, which reads on and finishes under the same budget.
fn a_compacted_run_suspends_and_resumes_in_another_process(style: &str) {
    const BEFORE: usize = 10;
    const AFTER: usize = 4;
    let dir = scratch("context-resume");
    sources(&dir, "g", BEFORE + AFTER, |_| 2_400);
    let ids = |t: Turn| if style == "gemini" { t.with_ids() } else { t };
    let read = |n: usize| ids(Turn::default().call("read", format!(r#"{{"path":"src/g{n}.rs"}}"#)));
    let ask = r#"{"questions":[{"question":"Read the tests too?"}]}"#;
    let mut turns: Vec<Turn> = (0..BEFORE).map(read).collect();
    turns.push(ids(Turn::default().call_with_id("q_more", "question", ask)));
    turns.extend((BEFORE..BEFORE + AFTER).map(read));
    turns.push(Turn::text("read before and after asking"));
    let script = Script::new(turns).context_limit(LIMIT).summarize_on(&DEFAULT_COMPACTION_INSTRUCTION[..48]);
    let model = "m-cli-context-resume";
    let fake = fake(Scripts::new(KEY).model(model, script));
    let budget = ["--context-window", "9000", "--max-tool-result-bytes", "6000"];
    let mut args = vec!["--builtins=read,question", "--root", ".", "--max-turns", "30", "--state", "st.json"];
    args.extend(budget);
    args.extend(["--json", "read the sources"]);
    let out = run(run_cmd(&dir, &fake, style, model, &args)).expect(3).json();
    assert_eq!(out["status"], "pending", "{style}: {out}");
    assert_eq!(out["pending"][0]["id"], "pnd_q_more", "{style}: {out}");
    let first = out["compactions"].as_array().cloned().unwrap_or_default();
    assert!(!first.is_empty(), "{style}: compacted before suspending: {out}");

    // The compactions are in the state, summaries and cuts included.
    let state: Value = serde_json::from_slice(&std::fs::read(dir.join("st.json")).unwrap()).unwrap();
    let recorded = find(&state, "compactions").and_then(Value::as_array).cloned().unwrap_or_default();
    assert_eq!(recorded.len(), first.len(), "{style}: {state}");
    let summary = recorded.last().and_then(|c| c["summary"].as_str()).unwrap_or_default().to_string();
    assert!(!summary.is_empty(), "{style}: the summary is recorded");
    let sent_before = fake.requests_for(model).len();

    let answer =
        write_json(&dir, "a.json", &serde_json::json!({"id": "pnd_q_more", "ok": true, "data": {"answer": "yes"}}));
    let mut resume = nexus(&dir, Some(style));
    resume.args(["resume", "--state", "st.json", "--answer", &answer, "--json"]);
    let done = run(&mut resume).expect(0).json();
    assert_eq!(done["status"], "done", "{style}: {done}");
    assert_eq!(done["text"], "read before and after asking");
    let all = done["compactions"].as_array().cloned().unwrap_or_default();
    assert!(all.len() >= first.len(), "{style}: {done}");
    assert_eq!(all[..first.len()], first[..], "{style}: the first process's compactions survive the resume");

    // Every request, before and after, was under the limit and accepted (the
    // fake refuses an unbalanced transcript); the resumed ones carry the model
    // view: the summary, not the first file read.
    let requests = fake.requests_for(model);
    for r in &requests {
        assert_eq!(r.status, Some(200), "{style}: a request was refused: {}", r.target);
        assert!(r.json.as_ref().map(fake_token_count).unwrap_or_default() <= LIMIT, "{style}");
    }
    let resumed = &requests[sent_before..];
    assert!(resumed.len() > AFTER, "{style}: the resumed process made the remaining turns");
    let first_turn = resumed[0].json.as_ref().map(Value::to_string).unwrap_or_default();
    assert!(first_turn.contains(SUMMARY_PREFIX.trim_end()), "{style}: the view after resuming starts with a summary");
    assert!(first_turn.contains(&serde_json::to_string(&summary).unwrap()[1..summary.len() / 2]), "{style}");
    assert!(!first_turn.contains("fn g0_step"), "{style}: the first read is compacted away in the view");
    assert!(first_turn.contains("answer") && first_turn.contains("yes"), "{style}: the answer is the last result");
    assert!(fake.failures().is_empty(), "{style}: {:?}", fake.failures());
    assert!(!dir.join("st.json").exists(), "{style}: the finished run's state file is removed");
}

#[test]
fn anthropic_suspends_and_resumes_compacted() {
    a_compacted_run_suspends_and_resumes_in_another_process("anthropic");
}

#[test]
fn openai_suspends_and_resumes_compacted() {
    a_compacted_run_suspends_and_resumes_in_another_process("openai");
}

#[test]
fn gemini_suspends_and_resumes_compacted() {
    a_compacted_run_suspends_and_resumes_in_another_process("gemini");
}

#[test]
fn openai_responses_suspends_and_resumes_compacted() {
    a_compacted_run_suspends_and_resumes_in_another_process("openai-responses");
}

/// `--count-margin` asks the upstream's counter near the compaction point
/// and `--json` lists the counts; `--responses-compact-at` asks a Responses
/// upstream to compact server-side and `--json` lists its compactions.
#[test]
fn counts_and_server_compactions_are_asked_and_reported() {
    for (style, flag, value, key) in [
        ("anthropic", "--count-margin", "0.3", "tokenCounts"),
        ("gemini", "--count-margin", "0.3", "tokenCounts"),
        ("openai-responses", "--responses-compact-at", "1500", "providerCompactions"),
    ] {
        let dir = scratch("context-native");
        sources(&dir, "f", FILES, |_| 2_400);
        let model = "m-cli-native";
        let fake = fake(Scripts::new(KEY).model(model, script(style)));
        let args = [
            "--builtins=read",
            "--root=.",
            "--max-turns=30",
            "--context-window=9000",
            "--max-tool-result-bytes=6000",
            flag,
            value,
            "--json",
            "read every file",
        ];
        let out = run(run_cmd(&dir, &fake, style, model, &args)).expect(0).json();
        assert_eq!(out["text"], "every file read", "{style}: {out}");
        let listed = out[key].as_array().cloned().unwrap_or_default();
        assert!(!listed.is_empty(), "{style}: {key} in {out}");
        let asked = fake
            .requests()
            .iter()
            .filter(|r| r.path().ends_with("/count_tokens") || r.path().ends_with(":countTokens"))
            .count();
        if key == "tokenCounts" {
            assert_eq!(asked, listed.len(), "{style}: one counter request per count");
            assert!(listed.iter().all(|c| c["tokens"].as_u64().is_some()), "{style}: {out}");
        } else {
            assert_eq!(asked, 0);
            let sent_back = fake
                .requests_for(model)
                .iter()
                .filter_map(|r| r.json.clone())
                .any(|b| b["input"].as_array().is_some_and(|i| i.iter().any(|it| it["type"] == "compaction")));
            assert!(sent_back, "{style}: the compaction items went back");
        }
        for r in fake.requests_for(model) {
            assert_eq!(r.status, Some(200), "{style}: a request was refused");
        }
    }
}
