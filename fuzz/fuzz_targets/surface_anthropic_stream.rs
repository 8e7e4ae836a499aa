#![no_main]
// Any bytes as an upstream stream of every style (raw SSE, and plausible events in any order)
// re-emitted on the Anthropic Messages surface: always in block order and terminated.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::anthropic_stream(data));
