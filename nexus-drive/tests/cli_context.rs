//! `nexus run` under a small context window: the built binary reads large
//! files with the built-in `read` tool against the fake provider, compacts
//! as it goes, reports the compactions with --json, and its cassette
//! replays byte for byte.

mod cli_support;

use cli_support::*;
use nexus_proto::context::DEFAULT_COMPACTION_INSTRUCTION;
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

fn a_long_read_loop_compacts_and_reports_it(style: &str) {
    let dir = scratch("context");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    for n in 0..FILES {
        let line = format!("fn f{n}_step() {{ let total = compute({n}) * 42; assert!(total >= 0); }}\n");
        let size = if n == 5 { 40_000 } else { 2_400 };
        std::fs::write(dir.join(format!("src/f{n}.rs")), line.repeat(size / line.len())).unwrap();
    }
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
