//! OAuth for `--mcp` HTTP servers: tokens in a 0600 file
//! (`$NEXUS_MCP_TOKENS`, else `~/.config/nexus/mcp-tokens.json`), keyed by
//! server and issuer; a person's authorization is taken in this process: the
//! URL is printed on stderr and the redirect is awaited on a loopback port
//! (`http://127.0.0.1:PORT/callback`, `$NEXUS_MCP_REDIRECT_PORT` or any free
//! one). Pre-registered clients come from the files' `"oauth"` blocks.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexus_drive::mcp::auth::config::oauth_clients;
use nexus_drive::mcp::auth::{Authorizer, FileTokenStore, LoopbackBrowser, OAuthClient};
use nexus_drive::mcp::{McpOptions, ServerConfig, Transport};

use crate::Fail;

static CLIENTS: Mutex<Vec<(String, OAuthClient)>> = Mutex::new(Vec::new());

/// Reads the `oauth` blocks of one `--mcp` file.
pub fn note_config(path: &str, text: &str) -> Result<(), Fail> {
    let clients = oauth_clients(text, &|k| std::env::var(k).ok()).map_err(|e| Fail::usage(format!("{path}: {e}")))?;
    CLIENTS.lock().unwrap_or_else(|e| e.into_inner()).extend(clients);
    Ok(())
}

/// The options for starting `configs`: an authorizer when any is an HTTP server.
pub fn options(configs: &[ServerConfig]) -> McpOptions {
    let mut options = McpOptions::default();
    if !configs.iter().any(|c| matches!(c.transport, Transport::Http { .. })) {
        return options;
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
            return options;
        }
    };
    let mut auth = Authorizer::new(Arc::new(FileTokenStore::new(token_file()))).with_browser(Arc::new(browser));
    for (server, client) in CLIENTS.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        auth = auth.with_client(server.clone(), client.clone());
    }
    options.driver.auth = Some(Arc::new(auth));
    options
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
