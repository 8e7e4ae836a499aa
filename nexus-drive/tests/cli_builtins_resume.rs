//! `nexus run --builtins … --store` suspended in one process and resumed by
//! `nexus resume --store` in another, against the fake provider, on each
//! wire format and both stores (SQLite and the file store): the model calls
//! `read` and `grep` in one turn, then `question`, which suspends the run.
//! The built-in tools' results cross the process boundary in the store and
//! are never run again; a suspension is resumed once only.
#![cfg(feature = "cli")]

mod cli_support;

use std::path::{Path, PathBuf};

use cli_support::*;
use nexus_drive::stores::sqlite::SqliteStore;
use nexus_drive::stores::{wall_clock_ms, ClaimStore, DEFAULT_LEASE_MS};
use nexus_drive::{FileRunStore, Message, RunStore};
use nexus_tests::fake::{ExpectFinal, FakeProvider, Script, Scripts, Turn};
use serde_json::{json, Value};

const MODEL: &str = "m-builtins";
const QUESTIONS: &str = r#"{"questions":[{"question":"Pick a color?","options":["red","green"]}]}"#;
/// The answer to the question: none of its options, so finding it in a
/// request proves the answer reached the model, not an echo of the question.
const ANSWER: &str = "teal";
/// The tool result the answer becomes.
const ANSWER_OUT: &str = r#"{"answer":"teal"}"#;
/// What `read` and `grep` return for the files as the first process finds them.
const READ_OUT: &str = "     1\t# Notes\n     2\tship it on monday\n";
const GREP_OUT: &str = "src/lib.rs:1:// TODO: colors";

/// Which store a test keeps its run in.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Sqlite,
    Dir,
}

impl Kind {
    /// The `--store` value, relative to the scratch directory the commands run in.
    fn spec(self) -> &'static str {
        match self {
            Kind::Sqlite => "sqlite:runs.db",
            Kind::Dir => "dir:runs",
        }
    }

    /// The same store named another way: a plain path is the file store.
    fn other_spelling(self) -> &'static str {
        match self {
            Kind::Sqlite => "sqlite:./runs.db",
            Kind::Dir => "runs",
        }
    }
}

/// One test per style and store.
macro_rules! per_style_and_store {
    ($($name:ident),* $(,)?) => {$(
        mod $name {
            use super::Kind;
            #[test]
            fn anthropic_sqlite() {
                super::$name("anthropic", Kind::Sqlite);
            }
            #[test]
            fn openai_sqlite() {
                super::$name("openai", Kind::Sqlite);
            }
            #[test]
            fn gemini_sqlite() {
                super::$name("gemini", Kind::Sqlite);
            }
            #[test]
            fn anthropic_dir() {
                super::$name("anthropic", Kind::Dir);
            }
            #[test]
            fn openai_dir() {
                super::$name("openai", Kind::Dir);
            }
            #[test]
            fn gemini_dir() {
                super::$name("gemini", Kind::Dir);
            }
        }
    )*};
}

per_style_and_store!(
    read_and_grep_then_a_question_resumed_from_the_store_once,
    a_claimed_run_is_refused_until_its_claim_is_given_back,
);

/// Turn 0: `read` and `grep` in parallel; turn 1: `question`; turn 2: the
/// final text, which the fake gives only to a request carrying all three
/// results.
fn scripts() -> Scripts {
    Scripts::new(KEY).model(
        MODEL,
        Script::new(vec![
            Turn::default().call("read", r#"{"path":"notes.md"}"#).call("grep", r#"{"pattern":"TODO"}"#),
            Turn::default().call("question", QUESTIONS),
            Turn::text("teal it is"),
        ])
        .expect_final(ExpectFinal {
            // Plain substrings: Gemini carries results as JSON text, escaped.
            tool_result_contains: vec!["ship it on monday".into(), GREP_OUT.into(), ANSWER.into()],
            tool_results: Some(3),
            messages: None,
        }),
    )
}

/// A scratch directory with a tool root holding a note and a source file.
fn workspace(tag: &str) -> (PathBuf, PathBuf) {
    let dir = scratch(tag);
    let root = dir.join("root");
    std::fs::create_dir_all(root.join("src")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("notes.md"), "# Notes\nship it on monday\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("src/lib.rs"), "// TODO: colors\nfn main() {}\n").unwrap_or_else(|e| panic!("{e}"));
    (dir, root)
}

/// Process 1: the run, which suspends on the question. Returns the run id
/// and the pending requests. `json` picks the output form (both carry the id).
fn first_process(dir: &Path, root: &Path, fake: &FakeProvider, style: &str, kind: Kind, json: bool) -> (String, Value) {
    let root = root.to_string_lossy().into_owned();
    let mut args = vec!["--builtins=read,grep,question", "--root", &root, "--store", kind.spec()];
    if json {
        args.push("--json");
    }
    args.push("what colour?");
    let out = run(run_cmd(dir, fake, style, MODEL, &args)).expect(3);
    let (run_id, pending) = if json {
        let result = out.json();
        assert_eq!(result["status"], "pending");
        (result["runId"].as_str().unwrap_or_default().to_string(), result["pending"].clone())
    } else {
        // The run id on the first line, the pending requests (JSON) after it.
        let (id, rest) = out.stdout.split_once('\n').unwrap_or_default();
        (id.to_string(), serde_json::from_str(rest).unwrap_or_else(|e| panic!("{e}: {}", out.stdout)))
    };
    assert!(run_id.starts_with("run_"), "a run id: {run_id:?}\n{}", out.stdout);
    let expected_hint = format!("nexus resume --store {} --run {run_id}", kind.spec());
    assert!(out.stderr.contains(&expected_hint), "says how to continue: {}", out.stderr);
    assert!(!dir.join("nexus-state.json").exists(), "a stored run writes no state file");
    (run_id, pending)
}

/// `nexus runs --store S --json`.
fn listed(dir: &Path, spec: &str) -> Vec<Value> {
    let out = run(nexus(dir, None).args(["runs", "--store", spec, "--json"])).expect(0);
    out.json().as_array().cloned().unwrap_or_else(|| panic!("an array: {}", out.stdout))
}

/// `nexus resume --store S --run ID --answer FILE --root ROOT --json`.
fn resume(dir: &Path, style: &str, spec: &str, run_id: &str, answers: &str, root: &Path) -> Out {
    let mut cmd = nexus(dir, Some(style));
    cmd.args(["resume", "--store", spec, "--run", run_id, "--answer", answers, "--json", "--root"]).arg(root);
    run(&mut cmd)
}

/// The request body the fake received `n`th for the model.
fn request_body(fake: &FakeProvider, n: usize) -> Value {
    let requests = fake.requests_for(MODEL);
    let r = requests.get(n).unwrap_or_else(|| panic!("request {n} of {}", requests.len()));
    assert_eq!(r.status, Some(200), "request {n} was accepted");
    r.json.clone().unwrap_or(Value::Null)
}

fn read_and_grep_then_a_question_resumed_from_the_store_once(style: &str, kind: Kind) {
    let (dir, root) = workspace("builtins-resume");
    let fake = fake(scripts());
    let (run_id, pending) = first_process(&dir, &root, &fake, style, kind, matches!(kind, Kind::Sqlite));

    let list = pending.as_array().cloned().unwrap_or_default();
    assert_eq!(list.len(), 1, "one question: {pending}");
    assert_eq!(list[0]["kind"], "question");
    assert_eq!(list[0]["prompt"], "Pick a color? (options: red, green)");
    let questions: Value = serde_json::from_str(QUESTIONS).unwrap_or_default();
    assert_eq!(list[0]["data"]["questions"], questions["questions"]);
    let question_id = list[0]["id"].as_str().unwrap_or_default().to_string();

    // Turn 1 was asked for with both results, once each, in one result turn.
    assert_eq!(fake.requests_for(MODEL).len(), 2, "turn 0, then turn 1 with the results");
    let asked_for_question = request_body(&fake, 1);
    let first_results = result_turns(style, &asked_for_question);
    assert_eq!(first_results.len(), 1, "one result turn: {first_results:?}");
    assert_eq!(first_results[0].len(), 2, "read and grep ran in the same turn: {first_results:?}");
    let text = asked_for_question.to_string();
    assert_eq!(text.matches("ship it on monday").count(), 1, "the file's text, once: {text}");
    assert_eq!(text.matches(GREP_OUT).count(), 1, "the match, once: {text}");

    // The store lists the run and what it waits for.
    let runs = listed(&dir, kind.spec());
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["runId"], run_id.as_str());
    assert_eq!(runs[0]["claimed"], false);
    assert_eq!(runs[0]["pending"][0]["id"], question_id.as_str());

    // The files change before the resume: a `read` or `grep` run again would see it.
    std::fs::write(root.join("notes.md"), "# Notes\nship it on friday\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(root.join("src/lib.rs"), "// TODO: sizes\n").unwrap_or_else(|e| panic!("{e}"));

    // Process 2 answers the question; the run completes.
    let answers = write_json(&dir, "answers.json", &json!({"id": question_id, "ok": true, "data": {"answer": ANSWER}}));
    let done = resume(&dir, style, kind.other_spelling(), &run_id, &answers, &root).expect(0).json();
    assert_eq!(done["status"], "done");
    assert_eq!(done["text"], "teal it is");
    assert_eq!(done["runId"], run_id.as_str());
    let messages: Vec<Message> = serde_json::from_value(done["messages"].clone()).unwrap_or_default();
    let results: Vec<String> = messages.iter().flat_map(Message::tool_results).map(|b| b.output.clone()).collect();
    assert_eq!(
        results,
        [READ_OUT, GREP_OUT, ANSWER_OUT],
        "the transcript holds the real file contents and match, from before the files changed"
    );

    // The fake's final-turn checks held, and the resumed request carries the
    // first results exactly as they were sent before: not run again.
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
    assert_eq!(fake.requests_for(MODEL).len(), 3, "one request from the resume");
    let final_request = request_body(&fake, 2);
    let final_results = result_turns(style, &final_request);
    assert_eq!(final_results.len(), 2, "{final_results:?}");
    assert_eq!(final_results[0], first_results[0], "the same read and grep results, byte for byte");
    assert_eq!(final_results[1].len(), 1);
    assert!(final_results[1][0].contains(ANSWER), "{final_results:?}");
    assert!(
        !final_results[1][0].contains("red") && !final_results[1][0].contains("green"),
        "the answer, not the options: {final_results:?}"
    );
    let text = final_request.to_string();
    assert!(!text.contains("friday") && !text.contains("sizes"), "no tool ran again: {text}");
    assert!(listed(&dir, kind.spec()).is_empty(), "the finished run is gone from the store");

    // Process 3 resumes the same suspension again: refused, nothing sent.
    let again = resume(&dir, style, kind.spec(), &run_id, &answers, &root).expect(5);
    assert!(again.stderr.contains(&run_id) && again.stderr.contains("not waiting"), "{}", again.stderr);
    assert_eq!(again.stderr.trim().lines().count(), 1, "one line: {}", again.stderr);
    assert_eq!(fake.requests_for(MODEL).len(), 3, "nothing was sent");
}

/// Claims a stored run the way another resuming host would, and returns
/// what gives it back unchanged.
fn claim_elsewhere(dir: &Path, kind: Kind, run_id: &str) -> Box<dyn FnOnce()> {
    match kind {
        Kind::Sqlite => {
            let store = SqliteStore::open(dir.join("runs.db")).unwrap_or_else(|e| panic!("{e}"));
            let claim = store.claim_run(run_id, wall_clock_ms(), DEFAULT_LEASE_MS).unwrap_or_else(|e| panic!("{e}"));
            Box::new(move || {
                store.release_claim(&claim.lease, None, wall_clock_ms()).unwrap_or_else(|e| panic!("{e}"));
            })
        }
        Kind::Dir => {
            let store = FileRunStore::open(dir.join("runs")).unwrap_or_else(|e| panic!("{e}"));
            let record = store.claim(run_id).unwrap_or_else(|e| panic!("{e}"));
            let id = run_id.to_string();
            // The file store releases a claim with a write based on it.
            Box::new(move || {
                store.save(&id, &record.state, Some(record.version)).unwrap_or_else(|e| panic!("{e}"));
            })
        }
    }
}

fn a_claimed_run_is_refused_until_its_claim_is_given_back(style: &str, kind: Kind) {
    let (dir, root) = workspace("builtins-claimed");
    let fake = fake(scripts());
    let (run_id, pending) = first_process(&dir, &root, &fake, style, kind, matches!(kind, Kind::Dir));
    let question_id = pending[0]["id"].as_str().unwrap_or_default().to_string();

    // An answer for a request the run does not wait for: refused before the
    // claim, the store untouched.
    let wrong = write_json(&dir, "wrong.json", &json!({"id": "pnd_nope", "ok": true, "data": {"answer": "red"}}));
    let out = resume(&dir, style, kind.spec(), &run_id, &wrong, &root).expect(1);
    assert!(out.stderr.contains("pnd_nope") && out.stderr.contains(&question_id), "names both ids: {}", out.stderr);
    let runs = listed(&dir, kind.spec());
    assert_eq!((runs[0]["version"].as_u64(), runs[0]["claimed"].as_bool()), (Some(1), Some(false)), "{runs:?}");

    // Another resume holds the run: refused with exit 5, nothing sent.
    let give_back = claim_elsewhere(&dir, kind, &run_id);
    assert_eq!(listed(&dir, kind.spec())[0]["claimed"], true);
    let answers = write_json(&dir, "answers.json", &json!({"id": question_id, "ok": true, "data": {"answer": ANSWER}}));
    let out = resume(&dir, style, kind.spec(), &run_id, &answers, &root).expect(5);
    assert!(out.stderr.contains(&run_id) && out.stderr.contains("claimed"), "{}", out.stderr);
    assert_eq!(fake.requests_for(MODEL).len(), 2, "nothing was sent");

    // Given back, it resumes.
    give_back();
    let done = resume(&dir, style, kind.spec(), &run_id, &answers, &root).expect(0).json();
    assert_eq!(done["text"], "teal it is");
    assert!(fake.failures().is_empty(), "{:?}", fake.failures());
}

#[test]
fn store_mistakes_are_refused_before_anything_is_sent() {
    let dir = scratch("store-usage");
    let fake = fake(Scripts::new(KEY));
    let url = fake.base_url(fake_style("openai"));
    let answers = write_json(&dir, "a.json", &json!({"id": "x", "ok": true}));
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["run", "--base-url", &url, "--store", "redis:x", "hi"], 2, "unknown store scheme \"redis\""),
        (vec!["run", "--base-url", &url, "--store", "postgres://h/db", "hi"], 2, "unknown store scheme"),
        (vec!["run", "--base-url", &url, "--store", "sqlite:", "hi"], 2, "no path"),
        (vec!["run", "--base-url", &url, "--store", "dir:r", "--state", "s.json", "hi"], 2, "give one"),
        (vec!["run", "--base-url", &url, "--root", "no-such-dir", "hi"], 2, "no-such-dir"),
        (vec!["resume", "--store", "ftp:x", "--run", "r", "--answer", &answers], 2, "unknown store scheme"),
        (vec!["resume", "--store", "sqlite:r.db", "--answer", &answers], 2, "--run ID"),
        (vec!["resume", "--state", "s.json", "--run", "r", "--answer", &answers], 2, "--run"),
        (vec!["resume", "--store", "sqlite:missing.db", "--run", "r", "--answer", &answers], 1, "no store"),
        (vec!["runs", "--store", "gopher:x"], 2, "unknown store scheme"),
        (vec!["runs"], 2, "--store"),
    ];
    for (args, code, word) in cases {
        let mut cmd = nexus(&dir, Some("openai"));
        cmd.args(&args);
        let out = run(&mut cmd).expect(code);
        assert!(out.stderr.contains(word), "{args:?}: {}", out.stderr);
    }
    assert!(!dir.join("missing.db").exists(), "resuming from a missing store does not create one");
    assert!(fake.requests().is_empty(), "nothing reached the provider");
}
