#![no_main]
// Any bytes as a Gemini generateContent request to the gateway, for every upstream.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::gemini_request(data));
