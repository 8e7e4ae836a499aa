#![no_main]
// Any bytes as an Anthropic SSE response body: a typed result, never a panic, the same under any chunking.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::decode_stream(nexus_proto::Style::Anthropic, data));
