//! `nexus run --output-schema`: the validated value on stdout (pretty JSON,
//! or `output`/`outputMode` with --json), a bad schema as a usage error, and
//! `nexus resume` keeping the spec from the state.

mod cli_support;

use cli_support::*;
use nexus_tests::fake::{Script, Scripts, Turn};
use serde_json::{json, Value};

const STYLES: [&str; 4] = ["anthropic", "openai", "gemini", "openai-responses"];

fn schema(dir: &std::path::Path) -> String {
    write_json(
        dir,
        "schema.json",
        &json!({"type": "object", "properties": {"verdict": {"type": "string", "enum": ["pass", "fail"]},
            "reasons": {"type": "array", "items": {"type": "string"}}}, "required": ["verdict"]}),
    )
}

/// A model of the style that takes a schema with tools.
fn model(style: &str) -> &'static str {
    match style {
        "anthropic" => "claude-sonnet-4-5",
        "gemini" => "gemini-3-pro-preview",
        _ => "gpt-5",
    }
}

#[test]
fn the_value_is_printed_pretty_and_with_json_as_output() {
    for style in STYLES {
        let dir = scratch("output-pretty");
        let turns = vec![Turn::text("pass"), Turn::text(r#"{"verdict":"pass","reasons":["tests green"]}"#)];
        let fake = fake(Scripts::new(KEY).model(model(style), Script::new(turns)));
        let schema = schema(&dir);
        let out = run(run_cmd(&dir, &fake, style, model(style), &["--output-schema", &schema, "review it"])).expect(0);
        let printed: Value =
            serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{style}: {e}: {}", out.stdout));
        assert_eq!(printed, json!({"verdict": "pass", "reasons": ["tests green"]}), "{style}");
        assert!(out.stdout.contains("\n  \"reasons\""), "{style}: pretty: {}", out.stdout);

        let fake = fake_again(style);
        let args = ["--output-schema", &schema, "--output-mode", "prompted", "--json", "review it"];
        let result = run(run_cmd(&dir, &fake, style, model(style), &args)).expect(0).json();
        assert_eq!(result["output"], json!({"verdict": "fail"}), "{style}");
        assert_eq!(result["outputMode"], "prompted", "{style}");
        assert_eq!(result["outputStrategies"][0]["reason"], "mode", "{style}");
    }
}

fn fake_again(style: &str) -> nexus_tests::fake::FakeProvider {
    let turns = vec![Turn::text("Verdict:\n```json\n{\"verdict\":\"fail\"}\n```")];
    fake(Scripts::new(KEY).model(model(style), Script::new(turns)))
}

#[test]
fn an_invalid_schema_is_a_usage_error() {
    let dir = scratch("output-bad");
    let fake = fake(Scripts::new(KEY));
    for (name, content) in [
        ("array.json", json!({"type": "array"})),
        ("bad.json", json!({"type": "object", "properties": {"a": {"type": 7}}})),
    ] {
        let path = write_json(&dir, name, &content);
        let out = run(run_cmd(&dir, &fake, "openai", "gpt-5", &["--output-schema", &path, "hi"])).expect(2);
        assert!(out.stderr.contains("--output-schema"), "{}", out.stderr);
    }
    std::fs::write(dir.join("not.json"), "{").unwrap();
    let out = run(run_cmd(&dir, &fake, "openai", "gpt-5", &["--output-schema", "not.json", "hi"])).expect(2);
    assert!(out.stderr.contains("not JSON"), "{}", out.stderr);
    let out = run(run_cmd(&dir, &fake, "openai", "gpt-5", &["--output-mode", "tool", "hi"])).expect(2);
    assert!(out.stderr.contains("--output-schema"), "--output-mode needs a schema: {}", out.stderr);
    assert!(fake.requests().is_empty(), "no model call");
}

#[test]
fn resume_keeps_the_spec_from_the_state() {
    for style in STYLES {
        let dir = scratch("output-resume");
        let mut turn = Turn::default().call_with_id("c_look", "lookup", r#"{"q":"x"}"#).call_with_id(
            "c_out",
            "final_result",
            r#"{"verdict":"pass"}"#,
        );
        if style == "gemini" {
            turn = turn.with_ids().thinking("look", "c2lnbmVk");
        }
        let fake = fake(Scripts::new(KEY).model(model(style), Script::new(vec![turn])));
        let relay = write_json(
            &dir,
            "relay.json",
            &json!([{"name": "lookup", "description": "Looks up.", "input_schema": {"type": "object"}}]),
        );
        let schema = schema(&dir);
        let args = [
            "--relay",
            &relay,
            "--output-schema",
            &schema,
            "--output-mode",
            "tool",
            "--state",
            "st.json",
            "--json",
            "go",
        ];
        let first = run(run_cmd(&dir, &fake, style, model(style), &args)).expect(3).json();
        assert_eq!(first["status"], "pending", "{style}");
        assert!(first.get("output").is_none(), "{style}: nothing commits while the relay is pending");
        let id = first["pending"][0]["id"].as_str().unwrap().to_string();
        let answers = write_json(
            &dir,
            "answers.json",
            &json!({"id": id, "ok": true, "data": {"results": [{"id": "c_look", "output": "found"}]}}),
        );
        let mut resume = nexus(&dir, Some(style));
        resume.args(["resume", "--state", "st.json", "--answer", &answers]);
        let out = run(&mut resume).expect(0);
        let printed: Value =
            serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{style}: {e}: {}", out.stdout));
        assert_eq!(printed, json!({"verdict": "pass"}), "{style}");
        assert_eq!(fake.requests().len(), 1, "{style}: the output was given before the suspension");
    }
}
