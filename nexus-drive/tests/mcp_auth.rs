//! MCP authorization end to end against an OAuth-protected server written
//! with the Python `mcp` package (tests/mcp/servers/oauth.py: the SDK's
//! authorization server with a provider that approves at once).
//!
//! The durable path: a first "process" is refused, gets the `authorization`
//! request and keeps the pending secrets beside (not in) what it saves; a
//! scripted browser follows the URL to the redirect; a second process
//! restores the secrets, completes the exchange and calls the tool; a third
//! reuses the stored token without asking; an expired token is refreshed.
//! Every artifact a run could leave is searched for the token and verifier.
#![cfg(feature = "mcp")]

mod mcp_support;

use std::io::BufRead;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use futures_lite::future::block_on;
use mcp_support::{python, server};
use nexus_drive::mcp::auth::{Authorizer, Browser, FileTokenStore, FollowingBrowser, PendingAuthorization, TokenStore};
use nexus_drive::mcp::{CallOutcome, DriverOptions, ServerConfig, ServerHandle};
use nexus_proto::mcp::CallRequest;
use nexus_proto::{Answer, Request};
use serde_json::{json, Map, Value};

const REDIRECT: &str = "http://127.0.0.1:9/callback";

struct OAuthServer {
    child: std::process::Child,
    base: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for OAuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl OAuthServer {
    fn start(py: &str) -> OAuthServer {
        OAuthServer::start_script(py, "oauth.py", &[])
    }

    fn start_script(py: &str, script: &str, args: &[&str]) -> OAuthServer {
        let mut child = std::process::Command::new(py)
            .arg(server(script))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the OAuth server");
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let port = first.trim().strip_prefix("PORT ").expect("PORT line").to_string();
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        OAuthServer { child, base: format!("http://127.0.0.1:{port}"), log }
    }

    fn issued(&self, kind: &str) -> usize {
        // The log is read by a thread: give it a moment to catch up.
        std::thread::sleep(std::time::Duration::from_millis(200));
        self.log.lock().unwrap().iter().filter(|l| *l == &format!("ISSUED {kind}")).count()
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-mcp-auth-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn authorizer(tokens: &PathBuf) -> Arc<Authorizer> {
    Arc::new(Authorizer::new(Arc::new(FileTokenStore::new(tokens))).with_redirect_uri(REDIRECT))
}

fn handle(url: &str, auth: &Arc<Authorizer>) -> ServerHandle {
    let options = DriverOptions { auth: Some(auth.clone()), ..DriverOptions::default() };
    ServerHandle::start(&ServerConfig::http("notes", url), &options).unwrap()
}

fn call_whoami(h: &ServerHandle) -> CallOutcome {
    let req = CallRequest { call: "c1".into(), tool: "whoami".into(), arguments: json!({}), resume: None };
    block_on(h.call(req)).unwrap()
}

fn param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| v.replace("%3A", ":").replace("%2F", "/"))
    })
}

#[test]
fn authorization_suspends_resumes_in_another_process_reuses_and_refreshes() {
    let Some(py) = python() else { return };
    let srv = OAuthServer::start(&py);
    let url = format!("{}/mcp", srv.base);
    let dir = temp_dir("durable");
    let tokens = dir.join("tokens.json");
    let mut artifacts: Vec<String> = Vec::new();

    // Process 1: refused; the person's step is a request, its secrets stay with the host.
    let (request, pending) = {
        let auth = authorizer(&tokens);
        let h = handle(&url, &auth);
        let listed = block_on(h.list_tools());
        let err = listed.expect_err("a server that demands authorization lists nothing yet");
        artifacts.push(err.to_string());
        let request: Request = h.authorization_request().expect("an authorization request");
        let outcome = call_whoami(&h);
        match &outcome {
            CallOutcome::Pending(r) => assert_eq!(r.id, request.id, "the call waits on the same authorization"),
            other => panic!("the call should wait for authorization: {other:?}"),
        }
        artifacts.extend(h.errors());
        artifacts.push(serde_json::to_string(&outcome_request(&outcome)).unwrap());
        let pending: PendingAuthorization = auth.pending(&request.id).expect("pending secrets");
        (request, pending)
    };
    assert_eq!(request.kind, "authorization");
    let auth_url = request.url.clone().unwrap();
    assert!(auth_url.starts_with(&format!("{}/authorize?", srv.base)), "{auth_url}");
    assert_eq!(param(&auth_url, "response_type").as_deref(), Some("code"));
    assert_eq!(param(&auth_url, "code_challenge_method").as_deref(), Some("S256"));
    assert_eq!(param(&auth_url, "resource"), Some(url.clone()));
    assert_eq!(param(&auth_url, "scope").as_deref(), Some("notes"));
    assert_eq!(param(&auth_url, "redirect_uri").as_deref(), Some(REDIRECT));
    assert!(param(&auth_url, "client_id").is_some_and(|c| !c.is_empty()));
    let data = request.data.clone().unwrap();
    assert_eq!(data["server"], "notes");
    assert_eq!(data["issuer"], json!(srv.base));
    artifacts.push(serde_json::to_string(&request).unwrap());
    // The host keeps the pending secrets in a file of its own.
    let pending_file = dir.join("pending.json");
    std::fs::write(&pending_file, serde_json::to_vec(&pending).unwrap()).unwrap();
    assert_eq!(srv.issued("code"), 0);

    // The person (a scripted browser) follows the URL to the redirect.
    let redirect = FollowingBrowser::new(REDIRECT).authorize(&request).unwrap();
    assert!(redirect.starts_with(REDIRECT), "{redirect}");

    // Process 2: a wrong state is refused before any token is asked for;
    // the right redirect completes it and the call goes through.
    {
        let auth = authorizer(&tokens);
        let kept: PendingAuthorization = serde_json::from_slice(&std::fs::read(&pending_file).unwrap()).unwrap();
        auth.restore_pending(request.id.clone(), kept);
        let forged = redirect.replace(&format!("state={}", pending.state), "state=forged");
        assert_ne!(forged, redirect);
        let err = auth.complete(&answer(&request.id, &forged)).unwrap_err();
        assert!(err.to_string().contains("state"), "{err}");
        artifacts.push(err.to_string());
        assert_eq!(srv.issued("code"), 0, "no token requested for a forged redirect");
        auth.complete(&answer(&request.id, &redirect)).unwrap();
        assert_eq!(srv.issued("code"), 1);
        let h = handle(&url, &auth);
        let tools = block_on(h.list_tools()).unwrap();
        assert!(tools.iter().any(|t| t.name == "whoami"));
        match call_whoami(&h) {
            CallOutcome::Done(r) => assert!(!r.is_error && r.output.contains("an authorized client"), "{r:?}"),
            other => panic!("{other:?}"),
        }
        artifacts.extend(h.errors());
    }
    let first = FileTokenStore::new(&tokens).for_server("notes").unwrap();
    assert_eq!(first.len(), 1);
    let (issuer, record) = first[0].clone();
    assert_eq!(issuer, srv.base);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&tokens).unwrap().permissions().mode() & 0o777, 0o600);
    }

    // Process 3: the stored token is used; nobody is asked, nothing issued.
    {
        let auth = authorizer(&tokens);
        let h = handle(&url, &auth);
        assert!(matches!(call_whoami(&h), CallOutcome::Done(r) if !r.is_error));
        assert!(h.authorization_request().is_none());
        assert_eq!(srv.issued("code"), 1);
        assert_eq!(srv.issued("refresh"), 0);
    }

    // Process 4: the access token has expired; it is refreshed, not re-asked.
    let mut expired = record.clone();
    expired.expires_at = Some(1);
    FileTokenStore::new(&tokens).put("notes", &issuer, expired).unwrap();
    {
        let auth = authorizer(&tokens);
        let h = handle(&url, &auth);
        assert!(matches!(call_whoami(&h), CallOutcome::Done(r) if !r.is_error));
        assert!(h.authorization_request().is_none());
        assert_eq!(srv.issued("refresh"), 1);
        assert_eq!(srv.issued("code"), 1);
        artifacts.extend(h.errors());
    }
    let refreshed = FileTokenStore::new(&tokens).get("notes", &issuer).unwrap().unwrap();
    assert_ne!(refreshed.access_token, record.access_token);

    // No artifact carries a token, a refresh token or the verifier.
    let secrets = [
        record.access_token.as_str(),
        record.refresh_token.as_deref().unwrap(),
        refreshed.access_token.as_str(),
        refreshed.refresh_token.as_deref().unwrap(),
        pending.verifier.as_str(),
    ];
    for a in &artifacts {
        for s in secrets {
            assert!(!a.contains(s), "a secret leaked into {a:?}");
        }
    }
    assert!(!auth_url.contains(&pending.verifier));
    let _ = std::fs::remove_dir_all(&dir);
}

fn answer(id: &str, redirect: &str) -> Answer {
    let mut data = Map::new();
    data.insert("redirect_url".into(), Value::String(redirect.to_string()));
    Answer::ok(id, Some(data))
}

fn outcome_request(o: &CallOutcome) -> Option<Request> {
    match o {
        CallOutcome::Pending(r) => Some(r.clone()),
        CallOutcome::Done(_) => None,
    }
}

/// Bad metadata and bad challenges are refused with a clear error before
/// anything is registered, authorized or exchanged.
#[test]
fn lying_authorization_servers_are_refused_before_any_token_is_requested() {
    let Some(py) = python() else { return };
    for (mode, says) in [
        ("pkce-lie", "S256"),
        ("wrong-resource", "not for the server"),
        ("wrong-issuer", "names the issuer"),
        ("malformed-challenge", "malformed WWW-Authenticate"),
    ] {
        let srv = OAuthServer::start_script(&py, "oauth_liar.py", &[mode]);
        let dir = temp_dir(mode);
        let auth = authorizer(&dir.join("tokens.json"));
        let h = handle(&format!("{}/mcp", srv.base), &auth);
        let err = block_on(h.list_tools()).expect_err(mode).to_string();
        let all = format!("{err} {:?}", h.errors());
        assert!(all.contains(says), "{mode}: {all}");
        assert!(h.authorization_request().is_none(), "{mode}: nobody is sent to a lying server");
        match call_whoami(&h) {
            CallOutcome::Done(r) => assert!(r.is_error, "{mode}: {r:?}"),
            other => panic!("{mode}: {other:?}"),
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let hits: Vec<String> = srv.log.lock().unwrap().iter().filter(|l| l.starts_with("HIT")).cloned().collect();
        assert!(hits.is_empty(), "{mode}: the client went on to {hits:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
