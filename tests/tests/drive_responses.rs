//! OpenAI Responses through both drivers against the fake: a multi-turn run
//! with reasoning and parallel calls, streamed and not. Every request the
//! drivers send is stateless (`store: false`, the reasoning's encrypted
//! content asked for, the whole conversation in `input`, no
//! `previous_response_id`), echoes each earlier turn's reasoning item with
//! the encrypted content the fake sent, in order, and passes the official
//! SDK's `ResponseCreateParams` (through the oracle).

#[macro_use]
mod drive_support;

use drive_support::{builder, ok_tool, Drv};
use nexus_drive::RunStatus;
use nexus_tests::fake::{FakeProvider, Script, Scripts, Style, Turn};
use nexus_tests::oracle;
use serde_json::Value;

const S: Style = Style::OpenAiResponses;
const SIG_0: &str = "gAAAAB-first-turn-reasoning";
const SIG_1: &str = "gAAAAB-second-turn-reasoning";

fn scripts() -> Scripts {
    let turns = vec![
        Turn::default()
            .thinking("Two lookups at once.", SIG_0)
            .with_text("Looking up both.")
            .call_with_id("call_a", "lookup", r#"{"q": "a"}"#)
            .call_with_id("call_b", "lookup", r#"{"q":"b"}"#),
        Turn::default().thinking("One more.", SIG_1).call_with_id("call_c", "lookup", r#"{"q":"c"}"#),
        Turn::text("a, b and c are known."),
    ];
    Scripts::new(drive_support::KEY).model("m-reason", Script::new(turns))
}

fn stateless_reasoning_runs_replay_every_item(d: Drv) {
    for stream in [false, true] {
        let ctx = format!("{d:?} stream={stream}");
        let fake = FakeProvider::start(scripts());
        let b = builder(&fake, S, "m-reason", stream)
            .system("Use the tool.")
            .dyn_tool(ok_tool("lookup", |a, _| format!("known {}", a["q"].as_str().unwrap_or("?"))));
        let r =
            d.client(b.build().expect("config")).run("What are a, b and c?").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!((r.status, r.text.as_str(), r.turns), (RunStatus::Done, "a, b and c are known.", 3), "{ctx}");
        let bodies: Vec<Value> = fake.requests_for("m-reason").into_iter().filter_map(|q| q.json).collect();
        assert_eq!(bodies.len(), 3, "{ctx}");
        for (n, body) in bodies.iter().enumerate() {
            assert_eq!(body["store"], false, "{ctx}");
            assert_eq!(body["include"], serde_json::json!(["reasoning.encrypted_content"]), "{ctx}");
            assert!(body.get("previous_response_id").is_none(), "{ctx}");
            assert_eq!(body["instructions"], "Use the tool.", "{ctx}");
            let items = body["input"].as_array().expect("input");
            let encrypted: Vec<&str> = items
                .iter()
                .filter(|i| i["type"] == "reasoning")
                .map(|i| i["encrypted_content"].as_str().unwrap_or(""))
                .collect();
            assert_eq!(encrypted, [SIG_0, SIG_1][..n], "{ctx}: request {n} replays each reasoning item");
            let outputs = items.iter().filter(|i| i["type"] == "function_call_output").count();
            assert_eq!(outputs, [0, 2, 3][n], "{ctx}: one output per call");
            if let Some(run) = oracle::validate_request(S, body.to_string().as_bytes()) {
                assert!(run.ok, "{ctx}: request {n} refused by the SDK's types\n{}\n{body:#}", run.stdout);
            }
        }
        // The last request, in order: the prompt, turn 1's reasoning, text and
        // two calls, their outputs, turn 2's reasoning and call, its output.
        let kinds: Vec<&str> =
            bodies[2]["input"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap_or("")).collect();
        assert_eq!(
            kinds,
            [
                "message",
                "reasoning",
                "message",
                "function_call",
                "function_call",
                "function_call_output",
                "function_call_output",
                "reasoning",
                "function_call",
                "function_call_output"
            ],
            "{ctx}"
        );
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
    }
}

both_drivers!(stateless_reasoning_runs_replay_every_item);
