//! OAuth for `--mcp` HTTP servers: tokens in a 0600 file
//! (`$NEXUS_MCP_TOKENS`, else `~/.config/nexus/mcp-tokens.json`), keyed by
//! server and issuer, their secrets sealed (SPEC §20) under the key ring in
//! `$NEXUS_TOKEN_KEY`, else in the key file `$NEXUS_TOKEN_KEY_FILE`, else in
//! the file beside the tokens (`mcp-tokens.key`, 0600), made on first use.
//! Pre-registered clients come from the files' `"oauth"` blocks.
//!
//! In-process (no `--state`/`--store`), a person's authorization is taken
//! here: the URL is printed on stderr and the redirect is awaited on a
//! loopback port (`http://127.0.0.1:PORT/callback`,
//! `$NEXUS_MCP_REDIRECT_PORT` or any free one). Durable (`--state` or
//! `--store`), nothing waits: a server whose tool listing needs a person
//! makes the run suspend before its first model call on the authorization
//! request ([`nexus_proto::Run::await_host`]); its PKCE verifier and `state`
//! wait in the token store (`…pending.json`, 0600), and `nexus resume
//! --answer ID=REDIRECT_URL` completes it in any process ([`settle`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexus_drive::mcp::auth::config::oauth_clients;
use nexus_drive::mcp::auth::seal::KEY_ENV;
use nexus_drive::mcp::auth::{
    AuthError, Authorizer, FileTokenStore, KeyRing, LoopbackBrowser, OAuthClient, SealedTokenStore, TokenStore,
    DEFAULT_PENDING_TTL,
};
use nexus_drive::mcp::{McpOptions, McpTools, ServerConfig, Transport};
use nexus_proto::{Answer, Request, Run};
use serde_json::Value;

use crate::Fail;

static CLIENTS: Mutex<Vec<(String, OAuthClient)>> = Mutex::new(Vec::new());

/// The redirect URI a durable run's authorization names (the person copies
/// the URL the browser lands on; nothing needs to listen there):
/// `$NEXUS_MCP_REDIRECT_URI`, else `http://127.0.0.1:8976/callback`.
const DEFAULT_REDIRECT_URI: &str = "http://127.0.0.1:8976/callback";

/// Reads the `oauth` blocks of one `--mcp` file.
pub fn note_config(path: &str, text: &str) -> Result<(), Fail> {
    let clients = oauth_clients(text, &|k| std::env::var(k).ok()).map_err(|e| Fail::usage(format!("{path}: {e}")))?;
    CLIENTS.lock().unwrap_or_else(|e| e.into_inner()).extend(clients);
    Ok(())
}

/// The options for starting `configs`: an authorizer when any is an HTTP
/// server — answering in this process on a loopback listener, or, when
/// `durable`, leaving the person's step to the host (the run suspends).
pub fn options(configs: &[ServerConfig], durable: bool) -> Result<McpOptions, Fail> {
    let mut options = McpOptions::default();
    if !configs.iter().any(|c| matches!(c.transport, Transport::Http { .. })) {
        return Ok(options);
    }
    if durable {
        options.driver.auth = Some(Arc::new(durable_authorizer()?));
        return Ok(options);
    }
    let port = std::env::var("NEXUS_MCP_REDIRECT_PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(0);
    let browser = match LoopbackBrowser::bind(port, Duration::from_secs(300), |request| {
        let server = request.data.as_ref().and_then(|d| d.get("server")).and_then(|s| s.as_str()).unwrap_or("?");
        eprintln!(
            "nexus: MCP server {server:?} needs authorization; open this URL in a browser:\n\n  {}\n",
            request.url.as_deref().unwrap_or_default()
        );
    }) {
        Ok(b) => b,
        Err(e) => {
            eprintln!(
                "nexus: no loopback port for MCP authorization redirects ({e}); HTTP servers get static headers only"
            );
            return Ok(options);
        }
    };
    let auth =
        with_clients(Authorizer::new(token_store()?).with_browser(Arc::new(browser))).with_pending_ttl(login_ttl()?);
    options.driver.auth = Some(Arc::new(auth));
    Ok(options)
}

/// An authorizer with no browser: a person's step becomes a request the
/// host answers (its secrets kept in the token store meanwhile).
fn durable_authorizer() -> Result<Authorizer, Fail> {
    let redirect = std::env::var("NEXUS_MCP_REDIRECT_URI").unwrap_or_else(|_| DEFAULT_REDIRECT_URI.to_string());
    Ok(with_clients(Authorizer::new(token_store()?).with_redirect_uri(redirect)).with_pending_ttl(login_ttl()?))
}

/// The variable that sets how long a begun MCP login waits for its answer.
pub const LOGIN_TTL_ENV: &str = "NEXUS_MCP_LOGIN_TTL";

/// How long a begun login is kept (SPEC §20.3): `$NEXUS_MCP_LOGIN_TTL` as
/// seconds, or a number with `s`, `m` or `h`; else 15 minutes.
pub fn login_ttl() -> Result<Duration, Fail> {
    match std::env::var(LOGIN_TTL_ENV) {
        Ok(text) if !text.trim().is_empty() => parse_ttl(&text).ok_or_else(|| {
            Fail::usage(format!(
                "{LOGIN_TTL_ENV}={text:?}: not a duration (seconds, or a number with s, m or h, at least 1s)"
            ))
        }),
        _ => Ok(DEFAULT_PENDING_TTL),
    }
}

fn parse_ttl(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let scale = match unit.trim() {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => return None,
    };
    let secs = number.parse::<u64>().ok()?.checked_mul(scale)?;
    (secs > 0).then(|| Duration::from_secs(secs))
}

/// The token file, its secrets sealed under the key ring of
/// `$NEXUS_TOKEN_KEY`, else of the key file (`$NEXUS_TOKEN_KEY_FILE`, else
/// the tokens' path with `.key`), made with a random key when missing.
fn token_store() -> Result<Arc<dyn TokenStore>, Fail> {
    let path = token_file();
    let label = path.display().to_string();
    let keys = match std::env::var(KEY_ENV) {
        Ok(text) if !text.trim().is_empty() => KeyRing::parse(&text)
            .map_err(|e| Fail::usage(format!("{KEY_ENV} (the key of the token store {label}): {e}")))?,
        _ => {
            let key_path = std::env::var_os("NEXUS_TOKEN_KEY_FILE")
                .map(PathBuf::from)
                .unwrap_or_else(|| path.with_extension("key"));
            let (keys, made) = KeyRing::load_or_create(&key_path)
                .map_err(|e| Fail::usage(format!("the key of the token store {label}: {e}")))?;
            if made {
                eprintln!(
                    "nexus: the MCP token store {label} is sealed with a new key in {} (0600): keep the two together; \
                     without the key the tokens cannot be read (set {KEY_ENV} to supply your own)",
                    key_path.display()
                );
            }
            keys
        }
    };
    Ok(Arc::new(SealedTokenStore::new(Arc::new(FileTokenStore::new(&path)), keys, label)))
}

fn with_clients(mut auth: Authorizer) -> Authorizer {
    for (server, client) in CLIENTS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        auth = auth.with_client(server.clone(), client.clone());
    }
    auth
}

/// `ID=VALUE` for `--answer`: the answer to the authorization request `ID`,
/// VALUE the URL the browser was redirected to (or its query,
/// `code=…&state=…[&iss=…]`). `None` when `arg` is not of that form (then it
/// names an answers file).
pub fn answer_shorthand(arg: &str) -> Option<Answer> {
    if std::path::Path::new(arg).exists() {
        return None;
    }
    let (id, value) = arg.split_once('=')?;
    if id.is_empty() || id.contains(['/', '\\', '.']) || value.is_empty() {
        return None;
    }
    let mut data = serde_json::Map::new();
    data.insert("redirect_url".into(), Value::String(value.to_string()));
    Some(Answer::ok(id, Some(data)))
}

/// Settles the answers to `state`'s host requests (authorizations its tool
/// listing waits for): each redirect is checked (`state`, `iss`) and its code
/// exchanged, the tokens stored, the server's tools listed and added to the
/// run. Returns the new state and the answers left for the run itself.
/// Any failure (a wrong `state`, a refused exchange, a server that still
/// refuses) is an error and nothing of the run changes; the authorization
/// stays pending for a right answer.
pub fn settle(configs: &[ServerConfig], state: &[u8], answers: Vec<Answer>) -> Result<(Vec<u8>, Vec<Answer>), Fail> {
    let mut run = Run::restore(state).map_err(|e| Fail::runtime(format!("the saved run: {e}")))?;
    let (mine, rest): (Vec<Answer>, Vec<Answer>) =
        answers.into_iter().partition(|a| run.host_requests().iter().any(|r| r.id == a.id));
    if mine.is_empty() {
        return Ok((state.to_vec(), rest));
    }
    let auth = Arc::new(durable_authorizer()?);
    for answer in &mine {
        let server = run
            .host_requests()
            .iter()
            .find(|r| r.id == answer.id)
            .and_then(|r| r.data.as_ref())
            .and_then(|d| d.get("server"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let Some(cfg) = configs.iter().find(|c| c.name == server) else {
            return Err(Fail::usage(format!(
                "the run waits for the authorization of MCP server {server:?}: give its --mcp FILE again"
            )));
        };
        if !answer.ok {
            // Declined: its secrets are forgotten (complete reports the
            // refusal, which is the point) and the run goes on without it.
            let _ = auth.complete(answer);
            eprintln!("nexus: MCP server {server:?} was not authorized; the run goes on without its tools");
            run.settle_host(&answer.id, Vec::new()).map_err(|e| Fail::runtime(e.to_string()))?;
            continue;
        }
        match auth.complete(answer) {
            Ok(()) => {}
            // Its secrets are gone: no redirect can complete it any more.
            Err(e @ AuthError::Expired { .. }) => {
                return Err(Fail::runtime(format!(
                    "{e}; the run is still suspended on {id}: start the login again with nexus resume (the same \
                     --state or --store and --run, and --mcp) --login-again, which prints a new URL to open; or \
                     answer it with {{\"id\": \"{id}\", \"ok\": false}} to go on without the server's tools",
                    id = answer.id
                )))
            }
            Err(e) => {
                return Err(Fail::runtime(format!(
                    "MCP server {server:?}: {e}; the run is still suspended on {} and nothing was changed",
                    answer.id
                )))
            }
        }
        let mut options = McpOptions::default();
        options.driver.auth = Some(auth.clone());
        let listed = McpTools::start(std::slice::from_ref(cfg), &options);
        if let Some(e) = listed.errors().first() {
            return Err(Fail::runtime(format!(
                "MCP server {server:?} was authorized but its tools could not be listed: {e}; the run is still suspended"
            )));
        }
        run.settle_host(&answer.id, listed.decls())
            .map_err(|e| Fail::runtime(format!("MCP server {server:?}: {e}")))?;
    }
    Ok((run.snapshot(), rest))
}

/// Begins again every MCP login the run in `state` waits for (SPEC §20.3):
/// each server is asked anew, a fresh login (new URL, new PKCE verifier and
/// `state`, kept in the token store) takes the place of the old request, and
/// a server that lists its tools without one now (a token another run
/// stored) is settled at once. Returns the new state and the requests the run
/// now waits for. Nothing is written on an error.
pub fn restart(configs: &[ServerConfig], state: &[u8]) -> Result<(Vec<u8>, Vec<Request>), Fail> {
    let mut run = Run::restore(state).map_err(|e| Fail::runtime(format!("the saved run: {e}")))?;
    let waiting = run.host_requests().to_vec();
    if !waiting.iter().any(|r| r.kind == "authorization") {
        return Err(Fail::usage("the run waits for no MCP login: there is none to start again"));
    }
    let auth = Arc::new(durable_authorizer()?);
    // Every host request is settled, then the run waits again on the new
    // logins and on the others as they were (`await_host` starts afresh).
    let mut again = Vec::new();
    let mut settled = Vec::new();
    for r in &waiting {
        if r.kind != "authorization" {
            again.push(r.clone());
            settled.push((r.id.clone(), Vec::new()));
            continue;
        }
        let server = r.data.as_ref().and_then(|d| d.get("server")).and_then(Value::as_str).unwrap_or_default();
        let Some(cfg) = configs.iter().find(|c| c.name == server) else {
            return Err(Fail::usage(format!(
                "the run waits for the login of MCP server {server:?}: give its --mcp FILE again"
            )));
        };
        let mut options = McpOptions::default();
        options.driver.auth = Some(auth.clone());
        let listed = McpTools::start(std::slice::from_ref(cfg), &options);
        if listed.server(server).is_some() {
            eprintln!("nexus: MCP server {server:?} needs no login any more (a token is stored); its tools are added");
            settled.push((r.id.clone(), listed.decls()));
        } else if let Some(request) = auth.open_request(server) {
            eprintln!(
                "nexus: the login to MCP server {server:?} was started again: open this URL in a browser:\n\n  {}\n",
                request.url.as_deref().unwrap_or_default()
            );
            again.push(request);
            settled.push((r.id.clone(), Vec::new()));
        } else {
            let why: Vec<String> = listed.errors().iter().map(|e| e.to_string()).collect();
            return Err(Fail::runtime(format!(
                "MCP server {server:?}: no login could be started ({}); the run is still suspended as it was",
                why.join("; ")
            )));
        }
    }
    for (id, decls) in settled {
        run.settle_host(&id, decls).map_err(|e| Fail::runtime(format!("the saved run: {e}")))?;
    }
    if !again.is_empty() {
        run.await_host(again.clone()).map_err(|e| Fail::runtime(format!("the saved run: {e}")))?;
    }
    Ok((run.snapshot(), again))
}

/// When the pending login `id` expires (unix seconds), if the token store
/// holds it with its start (SPEC §20.3). Its start is not sealed: read
/// without the key (listing runs neither needs one nor makes one).
pub fn login_expiry(id: &str) -> Result<Option<u64>, Fail> {
    let pending = FileTokenStore::new(token_file()).get_pending(id).map_err(|e| Fail::runtime(e.to_string()))?;
    let ttl = login_ttl()?.as_secs();
    Ok(pending.and_then(|p| p.created_at).map(|t| t.saturating_add(ttl)))
}

fn token_file() -> PathBuf {
    if let Some(p) = std::env::var_os("NEXUS_MCP_TOKENS") {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    let dir = base.join("nexus");
    if std::fs::create_dir_all(&dir).is_ok() {
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        }
    }
    dir.join("mcp-tokens.json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_lifetimes() {
        assert_eq!(parse_ttl("90"), Some(Duration::from_secs(90)));
        assert_eq!(parse_ttl(" 30s "), Some(Duration::from_secs(30)));
        assert_eq!(parse_ttl("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_ttl("2h"), Some(Duration::from_secs(7200)));
        for bad in ["0", "0m", "m", "-5", "1.5m", "10d", "1 fortnight", "99999999999999999999h"] {
            assert_eq!(parse_ttl(bad), None, "{bad}");
        }
    }
}
