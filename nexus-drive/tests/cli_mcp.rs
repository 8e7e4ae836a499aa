//! `nexus run --mcp`, `nexus resume --mcp` and `nexus tools --mcp` against
//! the Python `mcp` test server: a question the server asks suspends the
//! run (exit 3), and a second process answers it with `nexus resume`.
#![cfg(feature = "cli")]

mod cli_support;
mod mcp_support;

use std::path::Path;

use cli_support::*;
use nexus_tests::fake::{Script, Scripts, Turn};
use serde_json::{json, Value};

const MODEL: &str = "m-mcp-cli";

fn config(dir: &Path, py: &str, protocol: &str) -> String {
    write_json(
        dir,
        "mcp.json",
        &json!({"mcpServers": {"kitchen": {
            "command": py,
            "args": [mcp_support::server("kitchen.py"), "stdio"],
            "protocol": protocol,
            "env": {"FIXTURE_TOKEN": "${NEXUS_TEST_MCP_TOKEN}"}
        }}}),
    )
}

fn scripts() -> Scripts {
    Scripts::new(KEY).model(
        MODEL,
        Script::new(vec![Turn::default().call("kitchen__book", r#"{"city": "Lima"}"#), Turn::text("Booked.")]),
    )
}

/// `nexus run --mcp` suspends on the server's question; `nexus resume` in a
/// second process answers it. Returns the resumed run's JSON.
fn suspend_and_resume(protocol: &str) -> Option<(Value, Value)> {
    let py = mcp_support::python()?;
    let dir = scratch(&format!("mcp-{protocol}"));
    let cfg = config(&dir, &py, protocol);
    let f = fake(scripts());
    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--json", "book a table"]);
    cmd.env("NEXUS_TEST_MCP_TOKEN", "tok-secret-123");
    let first = run(cmd).expect(3);
    let pending = first.json();
    let req = pending["pending"][0].clone();
    assert_eq!(req["kind"], "input", "{pending}");
    assert_eq!(req["prompt"], "Book a table in Lima?");
    assert_eq!(req["data"]["server"], "kitchen");
    let state = std::fs::read_to_string(dir.join("nexus-state.json")).unwrap();
    assert!(!state.contains("tok-secret-123"), "an expanded value reached the state file");

    // Without the servers, resume says what it needs and changes nothing.
    let answers =
        write_json(&dir, "answers.json", &json!({"id": req["id"], "ok": true, "data": {"confirm": true, "seats": 3}}));
    let mut cmd = nexus(&dir, Some("openai"));
    cmd.args(["resume", "--state", "nexus-state.json", "--answer", &answers]);
    let refused = run(cmd).expect(2);
    assert!(refused.stderr.contains("kitchen__book") && refused.stderr.contains("--mcp"), "{}", refused.stderr);
    assert!(dir.join("nexus-state.json").exists());

    let mut cmd = nexus(&dir, Some("openai"));
    cmd.env("NEXUS_TEST_MCP_TOKEN", "tok-secret-123");
    cmd.args(["resume", "--state", "nexus-state.json", "--answer", &answers, "--mcp", &cfg, "--json"]);
    let done = run(cmd).expect(0).json();
    Some((pending, done))
}

#[test]
fn modern_elicitation_across_two_processes_completes_the_call() {
    let Some((_, done)) = suspend_and_resume("modern") else { return };
    let call = &done["toolCalls"][0];
    assert_eq!(call["name"], "kitchen__book");
    assert!(call["output"].as_str().unwrap().starts_with("booked 3 in Lima (none)"), "{done}");
    assert_eq!(done["text"], "Booked.");
}

#[test]
fn legacy_elicitation_across_two_processes_is_in_doubt_and_not_rerun() {
    let Some((pending, done)) = suspend_and_resume("legacy") else { return };
    assert_eq!(pending["pending"][0]["data"]["live"], true, "{pending}");
    let call = &done["toolCalls"][0];
    assert_eq!(call["isError"], true, "{done}");
    assert!(call["output"].as_str().unwrap().contains("not re-run"), "{done}");
}

#[test]
fn a_tool_that_changed_since_the_run_began_stops_the_resume_unless_accepted() {
    let Some(py) = mcp_support::python() else { return };
    let dir = scratch("mcp-drift");
    let cfg = config(&dir, &py, "modern");
    let f = fake(scripts());
    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--json", "book a table"]);
    cmd.env("NEXUS_TEST_MCP_TOKEN", "t");
    let req = run(cmd).expect(3).json()["pending"][0].clone();
    let answers =
        write_json(&dir, "answers.json", &json!({"id": req["id"], "ok": true, "data": {"confirm": true, "seats": 2}}));
    // The server now tells the model something else about `book`.
    let changed = write_json(
        &dir,
        "mcp-changed.json",
        &json!({"mcpServers": {"kitchen": {
            "command": py,
            "args": [mcp_support::server("kitchen.py"), "stdio"],
            "protocol": "modern",
            "env": {"KITCHEN_BOOK_DESCRIPTION": "Cancels every booking."}
        }}}),
    );
    let resume = |extra: &[&str]| {
        let mut cmd = nexus(&dir, Some("openai"));
        cmd.args(["resume", "--state", "nexus-state.json", "--answer", &answers, "--mcp", &changed, "--json"]);
        cmd.args(extra);
        run(cmd)
    };
    let refused = resume(&[]);
    assert_ne!(refused.code, 0);
    assert!(refused.stderr.contains("kitchen__book changed"), "{}", refused.stderr);
    assert!(refused.stderr.contains("--accept-tool-changes"), "{}", refused.stderr);
    assert!(dir.join("nexus-state.json").exists(), "the refused resume kept the state");
    let done = resume(&["--accept-tool-changes"]);
    assert!(done.stderr.contains("kitchen__book changed"), "the accepted change is still reported: {}", done.stderr);
    let done = done.expect(0).json();
    assert!(done["toolCalls"][0]["output"].as_str().unwrap().starts_with("booked 2 in Lima"), "{done}");
}

#[test]
fn tools_lists_mcp_tools_and_leaves_out_a_broken_server() {
    let Some(py) = mcp_support::python() else { return };
    let dir = scratch("mcp-tools");
    let cfg = write_json(
        &dir,
        "mcp.json",
        &json!({"mcpServers": {
            "kitchen": {"command": py, "args": [mcp_support::server("kitchen.py"), "stdio"], "allow": ["echo", "add"]},
            "ghost": {"command": "/nonexistent/mcp-server"}
        }}),
    );
    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--mcp", &cfg]);
    let out = run(cmd).expect(1);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{}", out.stdout);
    assert!(lines[0].starts_with("kitchen__echo\tkitchen/echo\tEchoes its text."), "{}", out.stdout);
    assert!(out.stderr.contains("\"ghost\" could not be started"), "{}", out.stderr);

    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--mcp", &cfg, "--json", "--style", "anthropic"]);
    let json = run(cmd).expect(1).json();
    assert_eq!(json[0]["name"], "kitchen__echo");
    assert_eq!(json[1]["input_schema"]["required"], json!(["a", "b"]));

    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--mcp", &cfg, "--mcp", &cfg]);
    assert!(run(cmd).expect(2).stderr.contains("configured twice"));
}
