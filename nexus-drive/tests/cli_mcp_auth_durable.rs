//! The durable path of MCP authorization, across two processes: `nexus run
//! --store` against an OAuth-protected server (tests/mcp/servers/oauth.py)
//! suspends before its first model call on the `authorization` request and
//! exits 3; the state kept holds the URL but no PKCE verifier and no token;
//! a redirect with a wrong `state` is refused with a typed error and leaves
//! the run as it was; `nexus resume --answer ID=REDIRECT_URL` in another
//! process exchanges the code, lists the server's tools and finishes the run,
//! the tool having run once.
#![cfg(feature = "cli")]

mod cli_support;
mod mcp_support;

use std::path::Path;

use cli_support::*;
use nexus_drive::mcp::auth::TokenStore;
use nexus_tests::fake::{Script, Scripts, Turn};
use serde_json::{json, Value};

const MODEL: &str = "m-mcp-auth-durable";

fn scripts() -> Scripts {
    Scripts::new(KEY)
        .model(MODEL, Script::new(vec![Turn::default().call("notes__whoami", "{}"), Turn::text("Checked.")]))
}

/// Every file under `dir`, recursively, as text.
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push((p.display().to_string(), String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned()));
        }
    }
    out
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn run_suspends_on_the_authorization_and_resume_in_another_process_completes_it() {
    let Some(py) = mcp_support::python() else { return };
    let server = mcp_support::http_server(&py, "oauth.py", &[], &[]);
    let url = &server.url;
    let dir = scratch("mcp-oauth-durable");
    let cfg = write_json(&dir, "mcp.json", &json!({"mcpServers": {"notes": {"type": "http", "url": url}}}));
    let secrets = scratch("mcp-oauth-durable-secrets");
    let tokens = secrets.join("tokens.json");
    let pending_file = secrets.join("tokens.pending.json");
    let runs = dir.join("runs");
    let store = format!("dir:{}", runs.display());
    let f = fake(scripts());

    // Process 1: suspends before any model call, exit 3, the URL in the request.
    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--store", &store, "--json", "who am I?"]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens);
    let first = run(cmd).expect(3);
    let out = first.json();
    let run_id = out["runId"].as_str().unwrap().to_string();
    let request = &out["pending"][0];
    assert_eq!(out["pending"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(request["kind"], "authorization", "{out}");
    assert_eq!(request["data"]["server"], "notes");
    let auth_url = request["url"].as_str().unwrap().to_string();
    let origin = url.trim_end_matches("/mcp");
    assert!(auth_url.starts_with(&format!("{origin}/authorize?")), "{auth_url}");
    for part in ["response_type=code", "code_challenge_method=S256", "code_challenge=", "state=", "resource="] {
        assert!(auth_url.contains(part), "{part} missing from {auth_url}");
    }
    let request_id = request["id"].as_str().unwrap().to_string();
    assert!(first.stderr.contains("needs a person's authorization"), "{}", first.stderr);
    assert!(f.requests().is_empty(), "no model call before the authorization");
    assert!(!tokens.exists(), "no token before the person's step");

    // The verifier waits in the private pending file, nowhere in the run.
    assert_eq!(mode(&pending_file), 0o600);
    let (sealed, raw) = opened_tokens(&tokens);
    let verifier = sealed.get_pending(&request_id).unwrap().unwrap().verifier;
    assert!(verifier.len() >= 43);
    assert!(!raw.contains(&verifier), "the verifier is sealed at rest");
    let kept = files(&runs);
    assert!(!kept.is_empty());
    for (path, text) in &kept {
        assert!(!text.contains(&verifier), "the PKCE verifier is in {path}");
        assert!(!text.contains("access_token") && !text.contains("refresh_token"), "{path}: {text}");
    }
    let listed = run({
        let mut c = nexus(&dir, None);
        c.args(["runs", "--store", &store, "--json"]).env("NEXUS_MCP_TOKENS", &tokens);
        c
    })
    .expect(0);
    assert!(listed.stdout.contains(&run_id) && listed.stdout.contains("authorization"), "{}", listed.stdout);
    // The pending login is listed with its expiry, 15 minutes after it began.
    let login = &listed.json()[0]["logins"][0];
    assert_eq!(login["id"], request_id.as_str(), "{}", listed.stdout);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let at = login["expiresAt"].as_u64().unwrap_or_default();
    assert!(at > now + 14 * 60 && at <= now + 15 * 60, "{login}");
    assert_eq!(login["expired"], false);
    let text = run({
        let mut c = nexus(&dir, None);
        c.args(["runs", "--store", &store]).env("NEXUS_MCP_TOKENS", &tokens);
        c
    })
    .expect(0);
    assert!(text.stdout.contains("(login expires in 15 min)"), "{}", text.stdout);

    // The scripted browser: the authorization server approves at once and
    // redirects to the redirect URI (nobody needs to listen there).
    let agent: ureq::Agent = ureq::Agent::config_builder().max_redirects(0).http_status_as_error(false).build().into();
    let resp = agent.get(&auth_url).call().unwrap();
    let redirect = resp.headers().get("location").unwrap().to_str().unwrap().to_string();
    assert!(redirect.starts_with("http://127.0.0.1:8976/callback?") && redirect.contains("code="), "{redirect}");

    let resume = |answer: &str| {
        let mut c = nexus(&dir, Some("openai"));
        c.args(["resume", "--store", &store, "--run", &run_id, "--mcp", &cfg, "--json", "--answer", answer]);
        c.env("NEXUS_MCP_TOKENS", &tokens);
        run(c)
    };

    // A wrong state: a typed error, the run and its pending authorization unchanged, no token asked for.
    // The .run file's first line counts claims; the state is the rest.
    let state_of = |files: Vec<(String, String)>| -> Vec<String> {
        files
            .into_iter()
            .filter(|(p, _)| p.ends_with(".run"))
            .map(|(_, t)| t.split_once('\n').unwrap().1.to_string())
            .collect()
    };
    let before = state_of(files(&runs));
    assert_eq!(before.len(), 1);
    let forged = redirect.replace("state=", "state=forged");
    let bad = resume(&format!("{request_id}={forged}")).expect(1);
    assert!(bad.stderr.contains("authorization redirect") && bad.stderr.contains("state"), "{}", bad.stderr);
    assert!(bad.stderr.contains("still suspended"), "{}", bad.stderr);
    assert_eq!(state_of(files(&runs)), before, "the refused answer changed the stored run");
    assert!(!tokens.exists(), "a token was requested for a forged redirect");
    assert!(f.requests().is_empty());
    assert_eq!(opened_tokens(&tokens).0.get_pending(&request_id).unwrap().unwrap().verifier, verifier);

    // Process 2: the right redirect completes the login and the run.
    let done = resume(&format!("{request_id}={redirect}")).expect(0);
    let result = done.json();
    assert_eq!(result["status"], "done", "{result}");
    let calls = result["toolCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "the tool ran once: {result}");
    assert_eq!(calls[0]["name"], "notes__whoami");
    assert!(calls[0]["output"].as_str().unwrap().contains("an authorized client"), "{result}");
    let sent = f.requests();
    assert_eq!(sent.len(), 2, "two model calls");
    assert!(String::from_utf8_lossy(&sent[0].body).contains("notes__whoami"), "the first call declares the tool");
    assert_eq!(mode(&tokens), 0o600);
    let (sealed, raw) = opened_tokens(&tokens);
    let token = sealed.get("notes", origin).unwrap().unwrap().access_token;
    assert!(!raw.contains(&token), "the token is sealed at rest");
    let left: Value = serde_json::from_slice(&std::fs::read(&pending_file).unwrap()).unwrap();
    assert!(left.get(&request_id).is_none(), "the completed authorization is forgotten");

    // No artifact carries the token or the verifier; the finished run is gone from the store.
    let mut artifacts = vec![first.stdout, first.stderr, bad.stdout, bad.stderr, done.stdout, done.stderr];
    artifacts.extend(files(&dir).into_iter().map(|(_, t)| t));
    for a in &artifacts {
        assert!(!a.contains(&token) && !a.contains(&verifier), "a secret leaked into {a:?}");
    }
    let again = resume(&format!("{request_id}={redirect}"));
    assert_eq!(again.code, 5, "the finished run is no longer waiting: {}", again.stderr);
}

#[test]
fn a_state_file_run_resumes_from_code_and_state_and_the_next_run_reuses_the_token() {
    let Some(py) = mcp_support::python() else { return };
    let server = mcp_support::http_server(&py, "oauth.py", &[], &[]);
    let url = &server.url;
    let dir = scratch("mcp-oauth-state-file");
    let cfg = write_json(&dir, "mcp.json", &json!({"mcpServers": {"notes": {"type": "http", "url": url}}}));
    let tokens = scratch("mcp-oauth-state-file-secrets").join("tokens.json");
    let state = dir.join("state.json");
    let f = fake(scripts());

    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--state", &state.to_string_lossy(), "who?"]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens);
    let first = run(cmd).expect(3);
    assert!(first.stderr.contains("nexus resume --state"), "{}", first.stderr);
    let kept: Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(kept["phase"], "starting", "{kept}");
    let request = &kept["requests"][0];
    let (sealed, raw) = opened_tokens(&tokens);
    let verifier = sealed.get_pending(request["id"].as_str().unwrap()).unwrap().unwrap().verifier;
    assert!(!kept.to_string().contains(&verifier) && !raw.contains(&verifier));

    // The answer as a file, with the redirect's parameters instead of its URL.
    let agent: ureq::Agent = ureq::Agent::config_builder().max_redirects(0).http_status_as_error(false).build().into();
    let resp = agent.get(request["url"].as_str().unwrap()).call().unwrap();
    let location = resp.headers().get("location").unwrap().to_str().unwrap().to_string();
    let query = location.split_once('?').unwrap().1;
    let params: serde_json::Map<String, Value> = form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), Value::String(v.into_owned())))
        .collect();
    assert!(params.contains_key("code") && params.contains_key("state"), "{params:?}");
    let answers = write_json(&dir, "answers.json", &json!({"id": request["id"], "ok": true, "data": params}));
    let mut cmd = nexus(&dir, Some("openai"));
    cmd.args(["resume", "--state", &state.to_string_lossy(), "--mcp", &cfg, "--json", "--answer", &answers]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens);
    let done = run(cmd).expect(0);
    assert_eq!(done.json()["toolCalls"].as_array().unwrap().len(), 1, "{}", done.stdout);
    assert!(!state.exists(), "the finished run's state file is removed");

    // A kept run with the token stored asks nobody and does not suspend.
    let f = fake(scripts());
    let store = format!("dir:{}", dir.join("runs").display());
    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--store", &store, "--json", "again"]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens);
    let again = run(cmd).expect(0);
    assert!(!again.stderr.contains("authorization"), "{}", again.stderr);
    assert!(again.json()["toolCalls"][0]["output"].as_str().unwrap().contains("an authorized client"));
}

#[test]
fn a_declined_authorization_lets_the_run_go_on_without_the_servers_tools() {
    let Some(py) = mcp_support::python() else { return };
    let server = mcp_support::http_server(&py, "oauth.py", &[], &[]);
    let url = &server.url;
    let dir = scratch("mcp-oauth-declined");
    let cfg = write_json(&dir, "mcp.json", &json!({"mcpServers": {"notes": {"type": "http", "url": url}}}));
    let tokens = scratch("mcp-oauth-declined-secrets").join("tokens.json");
    let state = dir.join("state.json").to_string_lossy().into_owned();
    let f = fake(Scripts::new(KEY).model(MODEL, Script::new(vec![Turn::text("Without notes, then.")])));
    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--state", &state, "--json", "who?"]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens);
    let first = run(cmd).expect(3);
    let id = first.json()["pending"][0]["id"].as_str().unwrap().to_string();
    let answers = write_json(&dir, "no.json", &json!({"id": id, "ok": false, "reason": "declined"}));
    let mut cmd = nexus(&dir, Some("openai"));
    cmd.args(["resume", "--state", &state, "--mcp", &cfg, "--json", "--answer", &answers]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens);
    let done = run(cmd).expect(0);
    assert!(done.stderr.contains("\"notes\" was not authorized"), "{}", done.stderr);
    assert_eq!(done.json()["text"], "Without notes, then.");
    let sent = f.requests();
    assert_eq!(sent.len(), 1);
    assert!(
        !String::from_utf8_lossy(&sent[0].body).contains("notes__whoami"),
        "a declined server's tools are not declared"
    );
    let pending: Value =
        serde_json::from_slice(&std::fs::read(tokens.with_extension("pending.json")).unwrap()).unwrap();
    assert!(pending.get(&id).is_none(), "the declined authorization's secrets are forgotten");
    assert!(!tokens.exists());
}

#[test]
fn an_expired_login_is_started_again_and_the_run_resumes_after_it() {
    let Some(py) = mcp_support::python() else { return };
    let server = mcp_support::http_server(&py, "oauth.py", &[], &[]);
    let url = &server.url;
    let dir = scratch("mcp-oauth-expired");
    let cfg = write_json(&dir, "mcp.json", &json!({"mcpServers": {"notes": {"type": "http", "url": url}}}));
    let tokens = scratch("mcp-oauth-expired-secrets").join("tokens.json");
    let store = format!("dir:{}", dir.join("runs").display());
    let f = fake(scripts());
    let agent: ureq::Agent = ureq::Agent::config_builder().max_redirects(0).http_status_as_error(false).build().into();
    let approve = |auth_url: &str| -> String {
        let resp = agent.get(auth_url).call().unwrap();
        resp.headers().get("location").unwrap().to_str().unwrap().to_string()
    };
    // Logins last one second here (NEXUS_MCP_LOGIN_TTL); a value that is no duration is a usage error.
    let nexus_with = |style: Option<&str>, ttl: &str| {
        let mut c = nexus(&dir, style);
        c.env("NEXUS_MCP_TOKENS", &tokens).env("NEXUS_MCP_LOGIN_TTL", ttl);
        c
    };
    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--store", &store, "--json", "who?"]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens).env("NEXUS_MCP_LOGIN_TTL", "soon");
    let bad = run(cmd).expect(2);
    assert!(bad.stderr.contains("NEXUS_MCP_LOGIN_TTL"), "{}", bad.stderr);
    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--store", &store, "--json", "who?"]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens).env("NEXUS_MCP_LOGIN_TTL", "1s");
    let first = run(cmd).expect(3).json();
    let run_id = first["runId"].as_str().unwrap().to_string();
    let old_id = first["pending"][0]["id"].as_str().unwrap().to_string();
    let old_redirect = approve(first["pending"][0]["url"].as_str().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let listed = run(nexus_with(None, "1s").args(["runs", "--store", &store])).expect(0);
    assert!(listed.stdout.contains("(login expired)"), "{}", listed.stdout);

    // The answer comes too late: exit 1, the run still suspended, and the way on said.
    let resume = |extra: &[&str], ttl: &str| {
        let mut c = nexus_with(Some("openai"), ttl);
        c.args(["resume", "--store", &store, "--run", &run_id, "--mcp", &cfg, "--json"]).args(extra);
        run(c)
    };
    let late = resume(&["--answer", &format!("{old_id}={old_redirect}")], "1s").expect(1);
    assert!(late.stderr.contains("expired") && late.stderr.contains("--login-again"), "{}", late.stderr);
    assert!(late.stderr.contains("still suspended"), "{}", late.stderr);
    let runs = run(nexus_with(None, "1s").args(["runs", "--store", &store, "--json"])).expect(0).json();
    assert_eq!(runs[0]["pending"][0]["id"], old_id.as_str(), "the run waits as it did: {runs}");

    // The login started again: a new request and URL, the run still suspended (exit 3).
    let again = resume(&["--login-again"], "15m").expect(3);
    assert!(again.stderr.contains("started again"), "{}", again.stderr);
    let pending = again.json()["pending"].clone();
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{pending}");
    let new_id = pending[0]["id"].as_str().unwrap().to_string();
    assert_ne!(new_id, old_id);
    assert_eq!(pending[0]["kind"], "authorization");
    let runs = run(nexus_with(None, "15m").args(["runs", "--store", &store, "--json"])).expect(0).json();
    assert_eq!(runs[0]["pending"][0]["id"], new_id.as_str(), "{runs}");
    assert_eq!(runs[0]["logins"][0]["expired"], false, "{runs}");
    assert!(f.requests().is_empty(), "no model call yet");

    // The old redirect answers nothing any more; the new one completes the login and the run.
    resume(&["--answer", &format!("{old_id}={old_redirect}")], "15m").expect(1);
    let redirect = approve(pending[0]["url"].as_str().unwrap());
    let done = resume(&["--answer", &format!("{new_id}={redirect}")], "15m").expect(0).json();
    assert_eq!(done["status"], "done", "{done}");
    let calls = done["toolCalls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{done}");
    assert!(calls[0]["output"].as_str().unwrap().contains("an authorized client"), "{done}");
    assert_eq!(f.requests().len(), 2);
}

#[test]
fn a_state_file_run_gets_a_new_login_and_keeps_its_root() {
    let Some(py) = mcp_support::python() else { return };
    let server = mcp_support::http_server(&py, "oauth.py", &[], &[]);
    let dir = scratch("mcp-oauth-again-file");
    let cfg = write_json(&dir, "mcp.json", &json!({"mcpServers": {"notes": {"type": "http", "url": &server.url}}}));
    let tokens = scratch("mcp-oauth-again-file-secrets").join("tokens.json");
    let state = dir.join("state.json");
    let state_arg = state.to_string_lossy().into_owned();
    let f = fake(scripts());
    let mut cmd = run_cmd(&dir, &f, "openai", MODEL, &["--mcp", &cfg, "--state", &state_arg, "--json", "who?"]);
    cmd.env("NEXUS_MCP_TOKENS", &tokens);
    let old_id = run(cmd).expect(3).json()["pending"][0]["id"].as_str().unwrap().to_string();
    let resume = |extra: &[&str]| {
        let mut c = nexus(&dir, Some("openai"));
        c.args(["resume", "--state", &state_arg, "--json"]).args(extra).env("NEXUS_MCP_TOKENS", &tokens);
        run(c)
    };
    // Without the servers there is nobody to ask: a usage error, the file untouched.
    let before = std::fs::read(&state).unwrap();
    let no_mcp = resume(&["--login-again"]).expect(2);
    assert!(no_mcp.stderr.contains("--mcp"), "{}", no_mcp.stderr);
    assert_eq!(std::fs::read(&state).unwrap(), before);

    let again = resume(&["--mcp", &cfg, "--login-again"]).expect(3).json();
    let request = &again["pending"][0];
    let new_id = request["id"].as_str().unwrap().to_string();
    assert_ne!(new_id, old_id);
    let kept = std::fs::read(&state).unwrap();
    let waiting = nexus_proto::Run::restore(&kept).unwrap().host_requests().to_vec();
    assert_eq!(waiting.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [new_id.as_str()]);
    let root = nexus_drive::workdir::read(&kept).unwrap().map(|w| w.root);
    assert_eq!(root, Some(dir.canonicalize().unwrap()), "the root stays with the run");

    let agent: ureq::Agent = ureq::Agent::config_builder().max_redirects(0).http_status_as_error(false).build().into();
    let resp = agent.get(request["url"].as_str().unwrap()).call().unwrap();
    let redirect = resp.headers().get("location").unwrap().to_str().unwrap().to_string();
    let done = resume(&["--mcp", &cfg, "--answer", &format!("{new_id}={redirect}")]).expect(0).json();
    assert_eq!(done["toolCalls"].as_array().map(Vec::len), Some(1), "{done}");
    assert!(!state.exists());
}
