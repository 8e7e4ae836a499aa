//! `nexus run --mcp` against an OAuth-protected server (the Python `mcp`
//! test server tests/mcp/servers/oauth.py): the first run prints the
//! authorization URL and takes the redirect on its loopback port (a scripted
//! browser follows the URL), then the tool call completes; the second run
//! reuses the stored token (0600 file) without asking. Neither the state
//! file nor the output carries a token.
#![cfg(feature = "cli")]

mod cli_support;
mod mcp_support;

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use cli_support::*;
use nexus_drive::mcp::auth::TokenStore;
use nexus_tests::fake::{Script, Scripts, Turn};
use serde_json::json;

const MODEL: &str = "m-mcp-auth";

fn scripts() -> Scripts {
    Scripts::new(KEY)
        .model(MODEL, Script::new(vec![Turn::default().call("notes__whoami", "{}"), Turn::text("Checked.")]))
}

#[test]
fn run_authorizes_on_loopback_then_reuses_the_stored_token() {
    let Some(py) = mcp_support::python() else { return };
    let server = mcp_support::http_server(&py, "oauth.py", &[], &[]);
    let url = server.url.clone();
    let dir = scratch("mcp-oauth");
    let cfg = write_json(&dir, "mcp.json", &json!({"mcpServers": {"notes": {"type": "http", "url": url}}}));
    let tokens = dir.join("tokens.json");

    // First run: the URL on stderr, the redirect on the loopback port.
    let f = fake(scripts());
    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--json", "who am I?"]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut proc = cmd.spawn().unwrap();
    let mut stderr = BufReader::new(proc.stderr.take().unwrap());
    let mut seen = String::new();
    let auth_url = loop {
        let mut l = String::new();
        assert!(stderr.read_line(&mut l).unwrap() > 0, "nexus printed no authorization URL:\n{seen}");
        seen.push_str(&l);
        if let Some(u) = l.trim().strip_prefix("http").filter(|u| u.contains("/authorize?")) {
            break format!("http{u}");
        }
    };
    assert!(seen.contains("\"notes\" needs authorization"), "{seen}");
    let agent: ureq::Agent = ureq::Agent::config_builder().max_redirects(0).http_status_as_error(false).build().into();
    let resp = agent.get(&auth_url).call().unwrap();
    let location = resp.headers().get("location").unwrap().to_str().unwrap().to_string();
    assert!(location.starts_with("http://127.0.0.1:") && location.contains("/callback?"), "{location}");
    assert_eq!(agent.get(&location).call().unwrap().status().as_u16(), 200);
    let out = proc.wait_with_output().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(!rest.contains("left out"), "{rest}");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
    let done: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(done["toolCalls"][0]["output"].as_str().unwrap().contains("an authorized client"), "{done}");
    // Sealed under a key made on first use beside the tokens, and said so.
    let issuer = url.trim_end_matches("/mcp");
    let (sealed, raw) = opened_tokens(&tokens);
    let token = sealed.get("notes", issuer).unwrap().unwrap().access_token;
    assert!(!raw.contains(&token), "the token is sealed at rest");
    assert!(format!("{seen}{rest}").contains("tokens.key"), "the new key's place is said: {seen}{rest}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777, 0o600);
    }

    // Second run: the stored token; nobody is asked.
    let f = fake(scripts());
    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--json", "again"]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens);
    let second = run(cmd).expect(0);
    assert!(!second.stderr.contains("needs authorization"), "{}", second.stderr);
    assert!(second.json()["toolCalls"][0]["output"].as_str().unwrap().contains("an authorized client"));

    // No artifact of either run carries the token.
    let mut artifacts = vec![String::from_utf8_lossy(&out.stdout).into_owned(), seen, second.stdout, second.stderr];
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        if entry.path() != tokens {
            artifacts.push(std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    for a in artifacts {
        assert!(!a.contains(&token), "the access token leaked into {a:?}");
    }
}

#[test]
fn a_token_key_that_does_not_parse_is_a_usage_error_naming_it() {
    let dir = scratch("mcp-oauth-bad-key");
    // Nothing listens there: the key is read before any server is reached.
    let cfg = write_json(
        &dir,
        "mcp.json",
        &json!({"mcpServers": {"notes": {"type": "http", "url": "http://127.0.0.1:9/mcp"}}}),
    );
    let tokens = dir.join("tokens.json");
    let mut cmd = nexus(&dir, None);
    cmd.args(["tools", "--mcp", &cfg]).env("NEXUS_MCP_TOKENS", &tokens).env("NEXUS_TOKEN_KEY", "not-a-key");
    let out = run(cmd).expect(2);
    assert!(out.stderr.contains("NEXUS_TOKEN_KEY") && out.stderr.contains("tokens.json"), "{}", out.stderr);
    assert!(!out.stderr.contains("not-a-key"), "the value is not echoed: {}", out.stderr);
    assert!(!tokens.with_extension("key").exists(), "no key file is made when a key is given");
}
