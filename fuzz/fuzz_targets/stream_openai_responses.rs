#![no_main]
// Any bytes as an OpenAI Responses SSE body: a typed result, never a panic, the same under any chunking.
use nexus_proto::{fuzzing::decode_stream, Style};
libfuzzer_sys::fuzz_target!(|data: &[u8]| decode_stream(Style::OpenAiResponses, data));
