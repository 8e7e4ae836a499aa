#![no_main]
// Any bytes as an upstream stream of every style (raw SSE, and plausible events in any order)
// re-emitted on the Gemini surface: one finish reason, on the last chunk, or an error last.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::gemini_stream(data));
