//! `nexus tools`: declarations in each provider's own shape (the shapes of
//! the providers' API references, as SPEC.md §7 lists them).

mod cli_support;

use cli_support::*;
use serde_json::{json, Value};

fn tools(args: &[&str]) -> Value {
    let dir = scratch("tools");
    let relay = write_json(
        &dir,
        "relay.json",
        &json!([{"name": "lookup", "description": "Looks up a word.", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]),
    );
    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--relay", &relay]).args(args);
    run(&mut cmd).expect(0).json()
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"q": {"type": "string"}}})
}

#[test]
fn anthropic_shape() {
    let with_builtins = tools(&["--style", "anthropic", "--builtins=question"]);
    assert_eq!(with_builtins[0]["name"], "question");
    assert_eq!(with_builtins[0]["input_schema"]["additionalProperties"], false, "built-in schemas are closed");
    let v = tools(&["--style", "anthropic"]);
    assert_eq!(v, json!([{"name": "lookup", "description": "Looks up a word.", "input_schema": schema()}]));
}

#[test]
fn openai_shape() {
    let v = tools(&["--style", "openai"]);
    assert_eq!(
        v,
        json!([{"type": "function", "function": {"name": "lookup", "description": "Looks up a word.", "parameters": schema()}}])
    );
}

#[test]
fn gemini_wraps_every_declaration_in_one_element() {
    let v = tools(&["--style", "gemini", "--builtins=question,todowrite"]);
    let list = v.as_array().cloned().unwrap_or_default();
    assert_eq!(list.len(), 1, "one tools element: {v}");
    let decls = list[0]["functionDeclarations"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = decls.iter().filter_map(|d| d["name"].as_str()).collect();
    assert_eq!(names, ["question", "todowrite", "lookup"], "built-ins first, then relay tools");
    assert_eq!(decls[2], json!({"name": "lookup", "description": "Looks up a word.", "parameters": schema()}));
}

#[test]
fn without_a_style_all_three_are_shown() {
    let v = tools(&[]);
    for style in STYLES {
        assert!(v[style].is_array(), "{style}: {v}");
    }
    assert_eq!(v["openai"][0]["function"]["name"], "lookup");
}

#[test]
fn a_bad_relay_file_is_a_usage_error() {
    let dir = scratch("tools-bad");
    std::fs::write(dir.join("bad.json"), br#"[{"nom": "x"}]"#).unwrap_or_default();
    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--relay", "bad.json"]);
    let out = run(&mut cmd).expect(2);
    assert!(out.stderr.contains("bad.json"), "{}", out.stderr);
}
