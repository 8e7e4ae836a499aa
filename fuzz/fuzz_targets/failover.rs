#![no_main]
// The circuit breakers against a model of them, and the failover policy's rules, under arbitrary outcomes.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::failover(data));
