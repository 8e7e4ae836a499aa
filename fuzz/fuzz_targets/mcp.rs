#![no_main]
// One MCP client session under arbitrary server messages, transport signals and host inputs in any order:
// no panic, refused inputs change nothing, no request id reused, no server request answered twice, no requestState leak.
libfuzzer_sys::fuzz_target!(|data: &[u8]| nexus_proto::fuzzing::mcp(data));
