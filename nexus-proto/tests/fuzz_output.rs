//! The typed output's fuzz body (`nexus_proto::fuzzing::output`) under
//! `cargo test`: on answers as models write them, their prefixes, and
//! generated inputs. Only built with `--features fuzzing`.
#![cfg(feature = "fuzzing")]

use nexus_proto::fuzzing::output;
use proptest::prelude::*;

const SEEDS: &[&str] = &[
    r#"{"city":"Paris","celsius":18}"#,
    "Here it is:\n```json\n{\"a\": [1, 2, {\"b\": null}]}\n```\nDone.",
    "```\n{\"a\":1}\n```",
    "The value is {\"a\": \"}\"} and more {\"b\": 2}",
    "```json\nnot json\n```\n{\"x\": true}",
    "{\"a\":",
    "",
    "no json at all",
    r#"{"type":"object","properties":{"a":{"type":"string"}},"required":[]}{"a":null}"#,
    r##"{"anyOf":[{"$ref":"#"}],"properties":{"a":{"$ref":"#/$defs/x"}}}{"a":[null,{"b":null}]}"##,
    // A string value holding fences: found bare, never expected back from inside a fence.
    "\"```x````\"",
];

/// Found by the fuzzer: a JSON string holding backtick fences, around bytes
/// that are not UTF-8.
#[test]
fn a_value_holding_fences_and_invalid_utf8() {
    output(b"\"\xbf```\xbf````\"");
}

#[test]
fn seeds_and_their_prefixes() {
    for seed in SEEDS {
        for end in 0..=seed.len() {
            if seed.is_char_boundary(end) {
                output(&seed.as_bytes()[..end]);
            }
        }
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes(data in proptest::collection::vec(any::<u8>(), 0..256)) {
        output(&data);
    }

    #[test]
    fn json_like_text(text in "[{}\\[\\]\":,a-c0-9 `\\n]{0,80}") {
        output(text.as_bytes());
    }
}
