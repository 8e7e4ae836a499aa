//! Stream decoding throughput: SSE decoder + provider assembler on a large
//! capture, against `serde_json::from_slice` over the same event payloads
//! (the floor any JSON-over-SSE decoder pays). The two are timed in
//! alternating pairs and the ratio is the median of the per-pair ratios.

mod harness;

use harness::{mb_per_s, micros, paired, samples};
use nexus_proto::provider::{decode_stream_chunks, CallIds, Style};
use nexus_proto::{SseDecoder, SseEvent};
use serde_json::{json, Value};

/// A large capture in each provider's framing: `n` text deltas, then a tool
/// call whose arguments arrive in `n / 4` fragments.
fn capture(style: Style, n: usize) -> Vec<u8> {
    let word = "lorem ipsum dolor sit amet, ";
    let mut out = String::new();
    match style {
        Style::Anthropic => {
            let mut ev = |name: &str, data: Value| out += &format!("event: {name}\ndata: {data}\n\n");
            ev(
                "message_start",
                json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}),
            );
            ev(
                "content_block_start",
                json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            );
            for _ in 0..n {
                ev(
                    "content_block_delta",
                    json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":word}}),
                );
            }
            ev("content_block_stop", json!({"type":"content_block_stop","index":0}));
            ev(
                "content_block_start",
                json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"write","input":{}}}),
            );
            ev(
                "content_block_delta",
                json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"text\": \""}}),
            );
            for _ in 0..n / 4 {
                ev(
                    "content_block_delta",
                    json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":word}}),
                );
            }
            ev(
                "content_block_delta",
                json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"}"}}),
            );
            ev("content_block_stop", json!({"type":"content_block_stop","index":1}));
            ev(
                "message_delta",
                json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":n}}),
            );
            ev("message_stop", json!({"type":"message_stop"}));
        }
        Style::OpenAi => {
            let chunk = |delta: Value, finish: Value| json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
            out += &format!("data: {}\n\n", chunk(json!({"role":"assistant","content":""}), Value::Null));
            for _ in 0..n {
                out += &format!("data: {}\n\n", chunk(json!({"content":word}), Value::Null));
            }
            out += &format!(
                "data: {}\n\n",
                chunk(
                    json!({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"write","arguments":"{\"text\": \""}}]}),
                    Value::Null
                )
            );
            for _ in 0..n / 4 {
                out += &format!(
                    "data: {}\n\n",
                    chunk(json!({"tool_calls":[{"index":0,"function":{"arguments":word}}]}), Value::Null)
                );
            }
            out += &format!(
                "data: {}\n\n",
                chunk(json!({"tool_calls":[{"index":0,"function":{"arguments":"\"}"}}]}), Value::Null)
            );
            out += &format!("data: {}\n\n", chunk(json!({}), json!("tool_calls")));
            out += &format!(
                "data: {}\n\n",
                json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":n,"total_tokens":n+1}})
            );
            out += "data: [DONE]\n\n";
        }
        Style::OpenAiResponses => {
            let mut ev = |data: Value| out += &format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap());
            ev(
                json!({"type":"response.created","response":{"id":"resp_1","object":"response","status":"in_progress","model":"m","output":[]}}),
            );
            ev(
                json!({"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","status":"in_progress","content":[]}}),
            );
            for _ in 0..n {
                ev(
                    json!({"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":word}),
                );
            }
            let text = word.repeat(n);
            ev(
                json!({"type":"response.output_item.done","output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":text,"annotations":[]}]}}),
            );
            ev(
                json!({"type":"response.output_item.added","output_index":1,"item":{"id":"fc_1","type":"function_call","call_id":"call_1","name":"write","arguments":""}}),
            );
            ev(
                json!({"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"{\"text\": \""}),
            );
            for _ in 0..n / 4 {
                ev(
                    json!({"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":word}),
                );
            }
            ev(
                json!({"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":1,"delta":"\"}"}),
            );
            let args = format!("{{\"text\": \"{}\"}}", word.repeat(n / 4));
            ev(
                json!({"type":"response.output_item.done","output_index":1,"item":{"id":"fc_1","type":"function_call","status":"completed","call_id":"call_1","name":"write","arguments":args}}),
            );
            ev(
                json!({"type":"response.completed","response":{"id":"resp_1","object":"response","status":"completed","model":"m","output":[],"usage":{"input_tokens":1,"output_tokens":n,"total_tokens":n+1}}}),
            );
        }
        Style::Gemini => {
            for i in 0..n {
                let mut ev = json!({"candidates":[{"content":{"role":"model","parts":[{"text":word}]},"index":0}],"modelVersion":"m"});
                if i == n - 1 {
                    ev["candidates"][0]["content"]["parts"] = json!([{"text": word}, {"functionCall": {"name": "write", "args": {"text": word.repeat(n / 4)}}}]);
                    ev["candidates"][0]["finishReason"] = json!("STOP");
                    ev["usageMetadata"] = json!({"promptTokenCount":1,"candidatesTokenCount":n,"totalTokenCount":n+1});
                }
                out += &format!("data: {ev}\r\n\r\n");
            }
        }
    }
    out.into_bytes()
}

fn main() {
    let n = 20_000;
    let s = samples(21);
    println!(
        "## Stream decoding ({n} text deltas + a tool call in {} argument fragments; fed in 16 KiB chunks)\n",
        n / 4
    );
    println!(
        "Each sample times one decode of ours and one `serde_json::from_slice` of the same payloads back to back; \
         the ratio column is the median of the {s} per-pair ratios.\n"
    );
    println!("| provider | capture | nexus median (p95) | MB/s | serde_json::from_slice of the payloads, median | ratio (serde time / nexus time), median of pairs |");
    println!("|---|---|---|---|---|---|");
    for style in [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses] {
        let bytes = capture(style, n);
        // The payloads alone, pre-split, for the floor.
        let mut events: Vec<SseEvent> = Vec::new();
        let mut dec = SseDecoder::new();
        dec.feed(&bytes, &mut events);
        dec.finish(&mut events);
        let payloads: Vec<&[u8]> =
            events.iter().map(|e| e.data.as_bytes()).filter(|d| d.first() == Some(&b'{')).collect();
        let turn =
            decode_stream_chunks(style, bytes.chunks(16 * 1024), &mut CallIds::new("c")).expect("capture decodes");
        assert!(turn.text().len() > n * 10);
        let (ours, floor, ratio) = paired(
            s,
            1,
            || {
                let t = decode_stream_chunks(style, bytes.chunks(16 * 1024), &mut CallIds::new("c")).unwrap();
                std::hint::black_box(t);
            },
            || {
                for p in &payloads {
                    let v: Value = serde_json::from_slice(p).unwrap();
                    std::hint::black_box(v);
                }
            },
        );
        println!(
            "| {} | {:.1} MB | {:.1} ms ({:.1}) | {:.0} | {:.1} ms | {:.2} |",
            style.name(),
            bytes.len() as f64 / 1e6,
            micros(ours.median) / 1000.0,
            micros(ours.p95) / 1000.0,
            mb_per_s(bytes.len(), ours.median),
            micros(floor.median) / 1000.0,
            ratio,
        );
    }
}
