#![no_main]
// Any bytes as an OpenAI Responses request to the gateway, for every upstream.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::responses_request(data));
