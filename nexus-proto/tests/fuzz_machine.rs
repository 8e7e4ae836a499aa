//! The run-machine, state and translation fuzz bodies under `cargo test`: on
//! the committed state fixtures, the wire corpus, their prefixes and
//! corruptions, and generated inputs. The bodies live in
//! `nexus_proto::fuzzing`; reading the inputs from disk stays here, outside
//! the sans-IO crate. Only built with `--features fuzzing`.
#![cfg(feature = "fuzzing")]

mod common;

use nexus_proto::fuzzing::{failover, machine, nested_answers, state, translate};
use nexus_proto::provider::Style;
use nexus_proto::translate::openai_request_bytes_to;
use nexus_proto::Run;
use proptest::prelude::*;

/// The committed state fixtures (`tests/fixtures/state`).
fn fixtures() -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/state");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("state fixtures at {}: {e}", dir.display()));
    let out: Vec<Vec<u8>> = entries.map(|e| std::fs::read(e.unwrap().path()).unwrap()).collect();
    assert!(!out.is_empty(), "no state fixtures in {}", dir.display());
    out
}

/// The recorded requests, responses and streams of the wire corpus.
fn corpus() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = [Style::Anthropic, Style::OpenAi, Style::Gemini]
        .into_iter()
        .flat_map(common::captures)
        .map(|(path, _)| std::fs::read(path).unwrap())
        .collect();
    let requests = common::shared_dir().join("wire-corpus/openai/requests");
    for entry in std::fs::read_dir(&requests).unwrap_or_else(|e| panic!("{}: {e}", requests.display())) {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "json") {
            out.push(std::fs::read(path).unwrap());
        }
    }
    out
}

const REQUEST: &str = r#"{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},
    "messages":[{"role":"system","content":"s"},{"role":"user","content":"weather?"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function",
    "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"Sunny"}],
    "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
    "properties":{"city":{"type":"string"}}}}}],"temperature":0.5}"#;

#[test]
fn state_body_on_fixtures_and_their_corruptions() {
    for bytes in fixtures() {
        assert!(Run::restore(&bytes).is_ok(), "a fixture does not restore");
        state(&bytes);
        // Every prefix is malformed JSON: an error, never a panic.
        for n in (0..bytes.len()).step_by(7) {
            state(&bytes[..n]);
        }
    }
}

#[test]
fn translate_body_on_the_corpus_and_its_prefixes() {
    let mut inputs = corpus();
    inputs.push(REQUEST.as_bytes().to_vec());
    for bytes in inputs {
        translate(&bytes);
        for n in (0..bytes.len()).step_by(bytes.len() / 16 + 1) {
            translate(&bytes[..n]);
        }
    }
}

#[test]
fn a_valid_request_translates() {
    for style in [Style::Anthropic, Style::Gemini] {
        let req = openai_request_bytes_to(style, REQUEST.as_bytes()).expect("translates");
        assert!(req.stream && req.include_usage);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn machine_body_on_random_scripts(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        machine(&data);
    }

    #[test]
    fn state_body_on_mutated_fixtures(at in any::<usize>(), byte in any::<u8>()) {
        for mut bytes in fixtures() {
            let i = at % bytes.len();
            bytes[i] = byte;
            state(&bytes);
        }
    }

    #[test]
    fn translate_body_on_mutated_requests(at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = REQUEST.as_bytes().to_vec();
        let i = at % bytes.len();
        bytes[i] = byte;
        translate(&bytes);
    }

    #[test]
    fn translate_body_on_random_bytes(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        translate(&data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn failover_body_on_generated_inputs(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        failover(&data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn nested_answers_body_on_generated_inputs(data in prop::collection::vec(any::<u8>(), 0..1024)) {
        nested_answers(&data);
    }
}
