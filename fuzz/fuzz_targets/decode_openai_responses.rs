#![no_main]
// Any bytes as a whole OpenAI Responses body (and as an error body): a typed result, never a panic.
use nexus_proto::{fuzzing::decode_response, Style};
libfuzzer_sys::fuzz_target!(|data: &[u8]| decode_response(Style::OpenAiResponses, data));
