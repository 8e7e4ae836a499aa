//! `nexus decode` over the recorded wire corpus, and over garbage.

mod cli_support;

use std::path::{Path, PathBuf};

use cli_support::*;
use serde_json::Value;

/// `shared/` next to the repository (override with `NEXUS_SHARED`).
fn shared_dir() -> PathBuf {
    match std::env::var("NEXUS_SHARED") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared"),
    }
}

/// Every capture of a style: `(path, is_stream)`, requests and expectations excluded.
fn captures(style: &str) -> Vec<(PathBuf, bool)> {
    let dir = shared_dir().join("wire-corpus").join(style);
    let mut out: Vec<(PathBuf, bool)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("wire corpus at {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy().into_owned();
            if name.ends_with(".expected.json") {
                None
            } else if name.ends_with(".sse") {
                Some((p, true))
            } else if name.ends_with(".json") {
                Some((p, false))
            } else {
                None
            }
        })
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no captures in {}", dir.display());
    out
}

fn expected(path: &Path) -> Value {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = name.rsplit_once('.').map_or(name.as_str(), |(s, _)| s);
    let exp = path.with_file_name(format!("{stem}.expected.json"));
    serde_json::from_slice(&std::fs::read(&exp).unwrap_or_else(|e| panic!("{}: {e}", exp.display())))
        .unwrap_or(Value::Null)
}

fn decode(style: &str, stream: bool, file: &Path) -> Out {
    let dir = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut cmd = nexus(&dir, None);
    cmd.args(["decode", "--style", style]);
    if stream {
        cmd.arg("--stream");
    }
    cmd.arg(file);
    run(&mut cmd)
}

#[test]
fn every_corpus_capture_decodes_to_its_expectation() {
    let mut checked = 0;
    for style in STYLES {
        for (path, stream) in captures(style) {
            let want = expected(&path);
            let provider_error = want["error"]["type"].is_string() && want["stop"].is_null();
            let out = decode(style, stream, &path).expect(if provider_error { 1 } else { 0 });
            let got = out.json();
            for key in ["text", "tool_calls", "stop", "usage"] {
                assert_eq!(got[key], want[key], "{}: {key}\n got: {got}\nwant: {want}", path.display());
            }
            if provider_error {
                assert_eq!(got["error"]["type"], want["error"]["type"], "{}", path.display());
                assert!(out.stderr.contains(want["error"]["type"].as_str().unwrap_or("")), "{}", out.stderr);
            }
            checked += 1;
        }
    }
    eprintln!("{checked} captures decoded");
}

/// Cut captures, non-JSON, binary noise and wrong-style inputs: a decoder
/// may refuse them (exit 1, one line on stderr) but never panic.
#[test]
fn garbage_exits_1_without_panicking() {
    let dir = scratch("garbage");
    let mut inputs: Vec<(String, Vec<u8>)> = vec![
        ("empty".into(), Vec::new()),
        ("brace".into(), b"{".to_vec()),
        ("null".into(), b"null".to_vec()),
        ("array".into(), b"[1,2,3]".to_vec()),
        ("binary".into(), (0u8..=255).rev().collect()),
        ("half-event".into(), b"data: {\"type\": \"message_start\"".to_vec()),
        ("done-only".into(), b"data: [DONE]\n\n".to_vec()),
    ];
    for style in STYLES {
        for (path, _) in captures(style) {
            let bytes = std::fs::read(&path).unwrap_or_default();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            inputs.push((format!("cut-{style}-{name}"), bytes.get(..bytes.len() / 2).unwrap_or_default().to_vec()));
        }
    }
    let mut refused = 0;
    for (name, bytes) in &inputs {
        let file = dir.join(name);
        std::fs::write(&file, bytes).unwrap_or_default();
        for style in STYLES {
            for stream in [false, true] {
                let out = decode(style, stream, &file);
                assert!(
                    out.code == 0 || out.code == 1,
                    "{name} ({style}, stream {stream}): exit {}\n{}",
                    out.code,
                    out.stderr
                );
                assert!(!out.stderr.contains("panicked"), "{name}: {}", out.stderr);
                if out.code == 1 {
                    refused += 1;
                    assert_eq!(out.stderr.trim().lines().count(), 1, "one line: {}", out.stderr);
                    assert!(out.stderr.starts_with("nexus: "), "{}", out.stderr);
                }
            }
        }
    }
    assert!(refused > inputs.len(), "most of these are refused ({refused})");
    let out = decode("openai", false, &dir.join("does-not-exist.json")).expect(1);
    assert!(out.stderr.contains("does-not-exist.json"), "{}", out.stderr);
}

#[test]
fn a_stream_given_as_a_body_gets_a_hint() {
    let (path, _) = captures("openai").into_iter().find(|(_, s)| *s).unwrap_or_else(|| panic!("an openai stream"));
    let out = decode("openai", false, &path).expect(1);
    assert!(out.stderr.contains("--stream"), "{}", out.stderr);
}
