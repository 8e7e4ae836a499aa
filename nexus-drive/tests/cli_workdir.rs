//! A suspended run keeps its root: `nexus run --builtins --root A` suspends
//! on a question, and `nexus resume` from another directory, without
//! `--root`, has its `read` served from A. A `--root` naming another
//! directory is refused (nothing sent, nothing changed) unless
//! `--move-root` is given; a kept root that is gone is a clear error. On a
//! state file, the file store and SQLite, against the fake provider.
#![cfg(feature = "cli")]

mod cli_support;

use std::path::{Path, PathBuf};

use cli_support::*;
use nexus_drive::workdir;
use nexus_tests::fake::{ExpectFinal, FakeProvider, Script, Scripts, Turn};
use serde_json::json;

const MODEL: &str = "m-workdir";
const STYLE: &str = "openai";
const QUESTIONS: &str = r#"{"questions":[{"question":"Which file?","options":["notes.md"]}]}"#;

/// Where the run is kept.
#[derive(Clone, Copy, Debug)]
enum Keep {
    StateFile,
    Dir,
    Sqlite,
}

const KEEPS: [Keep; 3] = [Keep::StateFile, Keep::Dir, Keep::Sqlite];

impl Keep {
    /// `nexus run`'s flags, with paths absolute (the commands run in different directories).
    fn run_flags(self, base: &Path) -> Vec<String> {
        match self {
            Keep::StateFile => vec!["--state".into(), base.join("state.json").display().to_string()],
            Keep::Dir => vec!["--store".into(), format!("dir:{}", base.join("runs").display())],
            Keep::Sqlite => vec!["--store".into(), format!("sqlite:{}", base.join("runs.db").display())],
        }
    }

    /// `nexus resume`'s flags for the run `id`.
    fn resume_flags(self, base: &Path, id: &str) -> Vec<String> {
        let mut flags = self.run_flags(base);
        if !matches!(self, Keep::StateFile) {
            flags.extend(["--run".into(), id.into()]);
        }
        flags
    }
}

/// Turn 0 asks a question (the run suspends); turn 1 reads `notes.md`; the
/// final turn needs the read's result to carry `expect`.
fn fake_for(expect: &str) -> FakeProvider {
    fake(
        Scripts::new(KEY).model(
            MODEL,
            Script::new(vec![
                Turn::default().call("question", QUESTIONS),
                Turn::default().call("read", r#"{"path":"notes.md"}"#),
                Turn::text("read it"),
            ])
            .expect_final(ExpectFinal {
                tool_result_contains: vec![expect.into()],
                tool_results: Some(2),
                messages: None,
            }),
        ),
    )
}

/// A base directory with `root` (its notes say `text`), and `elsewhere`, the
/// directory the resume runs in, with notes of its own.
fn layout(tag: &str, text: &str) -> (PathBuf, PathBuf, PathBuf) {
    let base = scratch(tag);
    let (root, elsewhere) = (base.join("root"), base.join("elsewhere"));
    for (dir, notes) in [(&root, text), (&elsewhere, "the wrong notes")] {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.join("notes.md"), notes).unwrap_or_else(|e| panic!("{e}"));
    }
    (base, root, elsewhere)
}

/// Process 1, in `base`: suspends on the question. The run id (empty for a
/// state file) and the question's id.
fn suspend(base: &Path, root: &Path, fake: &FakeProvider, keep: Keep) -> (String, String) {
    let mut args = vec!["--builtins=read,question".to_string(), "--root".into(), root.display().to_string()];
    args.extend(keep.run_flags(base));
    args.extend(["--json".into(), "which notes?".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(run_cmd(base, fake, STYLE, MODEL, &args)).expect(3).json();
    let question = out["pending"][0]["id"].as_str().unwrap_or_default().to_string();
    (out["runId"].as_str().unwrap_or_default().to_string(), question)
}

/// Process 2, in `cwd`: answers the question, with `extra` flags.
fn resume(cwd: &Path, base: &Path, keep: Keep, id: &str, question: &str, extra: &[&str]) -> Out {
    let answers =
        write_json(base, "answers.json", &json!({"id": question, "ok": true, "data": {"answer": "notes.md"}}));
    let mut cmd = nexus(cwd, Some(STYLE));
    cmd.arg("resume").args(keep.resume_flags(base, id)).args(["--answer", &answers, "--json"]).args(extra);
    run(cmd)
}

#[test]
fn the_root_is_restored_on_a_resume_from_another_directory() {
    for keep in KEEPS {
        let (base, root, elsewhere) = layout("workdir-restored", "the kept notes");
        let fake = fake_for("the kept notes");
        let (id, question) = suspend(&base, &root, &fake, keep);
        if let Keep::StateFile = keep {
            let state = std::fs::read(base.join("state.json")).unwrap_or_default();
            let kept = workdir::read(&state).unwrap_or_else(|e| panic!("{e}"));
            let canonical = root.canonicalize().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(kept.map(|w| w.root), Some(canonical), "the state file's envelope holds the root");
        }
        let done = resume(&elsewhere, &base, keep, &id, &question, &[]).expect(0).json();
        assert_eq!(done["text"], "read it", "{keep:?}");
        assert!(fake.failures().is_empty(), "{keep:?}: the read was served from the kept root: {:?}", fake.failures());
        assert!(!done.to_string().contains("the wrong notes"), "{keep:?}: not from the current directory");
    }
}

#[test]
fn another_root_is_refused_unless_the_run_is_moved() {
    for keep in KEEPS {
        let (base, root, elsewhere) = layout("workdir-moved", "the old notes");
        std::fs::write(elsewhere.join("notes.md"), "the moved notes").unwrap_or_else(|e| panic!("{e}"));
        let fake = fake_for("the moved notes");
        let (id, question) = suspend(&base, &root, &fake, keep);
        let other = elsewhere.display().to_string();

        let refused = resume(&base, &base, keep, &id, &question, &["--root", &other]).expect(2);
        let kept = root.canonicalize().unwrap_or_else(|e| panic!("{e}")).display().to_string();
        assert!(
            refused.stderr.contains(&kept) && refused.stderr.contains(&other) && refused.stderr.contains("--move-root"),
            "{keep:?}: names both roots and the way on: {}",
            refused.stderr
        );
        assert_eq!(fake.requests_for(MODEL).len(), 1, "{keep:?}: nothing was sent");

        // The same root named again (another spelling of it) is no mismatch;
        // here it is given with --move-root to go on in the other directory.
        let done = resume(&base, &base, keep, &id, &question, &["--root", &other, "--move-root"]).expect(0);
        assert!(done.stderr.contains("moves from"), "{keep:?}: {}", done.stderr);
        assert_eq!(done.json()["text"], "read it");
        assert!(fake.failures().is_empty(), "{keep:?}: read from the new root: {:?}", fake.failures());
    }
}

#[test]
fn the_same_root_again_is_accepted_and_a_gone_root_is_a_clear_error() {
    for keep in KEEPS {
        let (base, root, elsewhere) = layout("workdir-gone", "the notes");
        let fake = fake_for("the notes");
        let (id, question) = suspend(&base, &root, &fake, keep);
        std::fs::rename(&root, base.join("renamed")).unwrap_or_else(|e| panic!("{e}"));
        let gone = resume(&elsewhere, &base, keep, &id, &question, &[]).expect(2);
        assert!(gone.stderr.contains("no longer exists") && gone.stderr.contains("--move-root"), "{}", gone.stderr);
        assert_eq!(fake.requests_for(MODEL).len(), 1, "{keep:?}: nothing was sent");

        std::fs::rename(base.join("renamed"), &root).unwrap_or_else(|e| panic!("{e}"));
        let same = format!("{}/.", root.display());
        let done = resume(&elsewhere, &base, keep, &id, &question, &["--root", &same]).expect(0).json();
        assert_eq!(done["text"], "read it");
        assert!(fake.failures().is_empty(), "{keep:?}: {:?}", fake.failures());
    }
}
