#![no_main]
// Any bytes as a saved run state: a run or a typed error, never a panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::state(data));
