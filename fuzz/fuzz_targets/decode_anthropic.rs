#![no_main]
// Any bytes as a whole Anthropic response body (and as an error body): a typed result, never a panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::decode_response(nexus_proto::Style::Anthropic, data));
