#![no_main]
// The run state machine under an arbitrary script of inputs: no panic, balanced requests, restore-equivalence, exactly-once.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::machine(data));
