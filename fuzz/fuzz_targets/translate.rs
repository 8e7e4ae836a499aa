#![no_main]
// Any bytes as an OpenAI request to translate, and as a provider response and stream to translate back.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::translate(data));
