#![no_main]
// Any bytes as a SKILL.md: a checked skill or a problem naming the field, never a panic.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_drive::skills::fuzzing::skill_md(data));
