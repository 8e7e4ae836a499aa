#![no_main]
// Any bytes as an upstream stream of every style (raw SSE, and plausible events in any order)
// re-emitted on the Responses surface: the full item scaffolding, always terminated.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::responses_stream(data));
