#![no_main]
// Any bytes as a final answer's text (fenced or bare JSON), output tool
// arguments, and a schema and a value for the lowering and its undo.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::output(data));
