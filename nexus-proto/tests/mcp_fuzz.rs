//! The MCP session's fuzz body (`nexus_proto::fuzzing::mcp`) under `cargo
//! test`: on generated scripts, so every invariant it checks runs in CI
//! without libFuzzer. Only built with `--features fuzzing`.
#![cfg(feature = "fuzzing")]

use nexus_proto::fuzzing::mcp;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_scripts_keep_the_invariants(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        mcp(&data);
    }
}

#[test]
fn the_empty_and_tiny_scripts_run() {
    mcp(&[]);
    for b in 0..=255u8 {
        mcp(&[b; 64]);
    }
}
