//! End to end against the fake provider: the model calls `read` and `grep`
//! in one turn, then `question`, which suspends the run; a fresh client
//! resumes the saved state with the user's answer.
#![cfg(all(feature = "builtins", feature = "blocking"))]

use std::fs;
use std::time::Duration;

use nexus_drive::blocking::Client;
use nexus_drive::builtins::Builtins;
use nexus_drive::{Answer, ClientBuilder, ClientConfig, Message, RunStatus};
use nexus_tests::fake::{ExpectFinal, FakeProvider, Script, Scripts, Style, Turn};
use serde_json::json;

const KEY: &str = "sk-builtins-e2e";

fn proto_style(s: Style) -> nexus_drive::Style {
    match s {
        Style::Anthropic => nexus_drive::Style::Anthropic,
        Style::OpenAi => nexus_drive::Style::OpenAi,
        Style::Gemini => nexus_drive::Style::Gemini,
        Style::OpenAiResponses => nexus_drive::Style::OpenAiResponses,
    }
}

fn config(fake: &FakeProvider, style: Style, builtins: &Builtins) -> ClientConfig {
    let mut b: ClientBuilder = ClientConfig::builder(proto_style(style), "m-builtins")
        .base_url(fake.base_url(style))
        .api_key(KEY)
        .seed(3)
        .retry_base_delay(Duration::from_millis(5));
    for tool in builtins.tools() {
        b = b.dyn_tool(tool);
    }
    b.build().unwrap()
}

#[test]
fn read_and_grep_in_parallel_then_a_question_that_suspends_and_resumes() {
    for style in Style::ALL {
        let ctx = format!("{style:?}");
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("nexus-builtins-e2e-{}-{style:?}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("src")).unwrap();
        fs::write(dir.join("notes.md"), "# Notes\nship it\n").unwrap();
        fs::write(dir.join("src/lib.rs"), "// TODO: colors\nfn main() {}\n").unwrap();

        let questions = r#"{"questions":[{"question":"Pick a color?","options":["red","green"]}]}"#;
        let fake = FakeProvider::start(
            Scripts::new(KEY).model(
                "m-builtins",
                Script::new(vec![
                    Turn::default().call("read", r#"{"path":"notes.md"}"#).call("grep", r#"{"pattern":"TODO"}"#),
                    Turn::default().call("question", questions),
                    Turn::text("red it is"),
                ])
                .expect_final(ExpectFinal {
                    // Plain substrings: Gemini carries results as JSON text, escaped.
                    tool_result_contains: vec![
                        "ship it".into(),
                        "src/lib.rs:1:// TODO: colors".into(),
                        "answer".into(),
                    ],
                    tool_results: Some(3),
                    messages: None,
                }),
            ),
        );
        let builtins = Builtins::new(&dir).select(Some("read,grep,question")).unwrap();

        let first = Client::new(config(&fake, style, &builtins));
        let r = first.run("what colour?").unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(r.status, RunStatus::Pending, "{ctx}");
        assert_eq!(r.pending.len(), 1, "{ctx}");
        let q = &r.pending[0];
        assert_eq!(q.kind, "question", "{ctx}");
        assert_eq!(q.prompt, "Pick a color? (options: red, green)", "{ctx}");
        let expected: serde_json::Value = serde_json::from_str(questions).unwrap();
        assert_eq!(q.data.as_ref().unwrap()["questions"], expected["questions"], "{ctx}");
        let state = r.suspended.clone().expect("a pending run carries its state").state;
        drop(first);

        // Another client, built afresh (as another process would), resumes the saved state.
        let fresh = Client::new(config(&fake, style, &builtins));
        let answer = Answer::ok(q.id.clone(), json!({"answer": "red"}).as_object().cloned());
        let done = fresh.resume(&state, vec![answer]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        assert_eq!(done.status, RunStatus::Done, "{ctx}");
        assert_eq!(done.text, "red it is", "{ctx}");
        let results: Vec<String> =
            done.messages.iter().flat_map(Message::tool_results).map(|b| b.output.clone()).collect();
        assert_eq!(
            results,
            ["     1\t# Notes\n     2\tship it\n", "src/lib.rs:1:// TODO: colors", r#"{"answer":"red"}"#],
            "{ctx}"
        );
        assert!(fake.failures().is_empty(), "{ctx}: {:?}", fake.failures());
        let _ = fs::remove_dir_all(&dir);
    }
}
