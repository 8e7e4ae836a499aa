#![no_main]
// Any bytes as an Anthropic Messages request to the gateway, for every upstream.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::anthropic_request(data));
