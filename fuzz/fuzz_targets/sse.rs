#![no_main]
// Any bytes as an SSE stream: no panic, chunking-proof, agrees with the reference decoder.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::sse(data));
