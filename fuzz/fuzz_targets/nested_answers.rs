#![no_main]
// A saved run tree fed answers by path (wrong, duplicate, for finished
// children), tool replies, responses and restores: typed errors, nothing changed.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::nested_answers(data));
