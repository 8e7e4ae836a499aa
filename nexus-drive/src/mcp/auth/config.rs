//! Pre-registered OAuth clients in the `mcpServers` file: an `"oauth"`
//! object beside a server's `"url"`:
//!
//! ```json
//! {"mcpServers": {"notes": {"type": "http", "url": "https://notes.example/mcp",
//!   "oauth": {"clientId": "nexus-cli", "clientSecret": "${NOTES_SECRET}",
//!             "scope": "notes:read", "tokenEndpointAuthMethod": "client_secret_post"}}}}
//! ```
//!
//! `${VAR}` is expanded as in headers; the secret stays in this process.

use serde_json::Value;

use super::{OAuthClient, TokenAuthMethod};
use crate::mcp::config::expand;
use crate::mcp::McpError;

/// The `oauth` entries of an `mcpServers` file, by server name.
pub fn oauth_clients(
    text: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<(String, OAuthClient)>, McpError> {
    let root: Value = serde_json::from_str(text).map_err(|e| McpError::Config(format!("not JSON: {e}")))?;
    let mut out = Vec::new();
    let Some(servers) = root.get("mcpServers").and_then(Value::as_object) else { return Ok(out) };
    for (name, entry) in servers {
        let Some(oauth) = entry.get("oauth") else { continue };
        let bad = |what: &str| McpError::Config(format!("server {name:?}: oauth.{what}"));
        let Some(o) = oauth.as_object() else { return Err(bad("must be an object")) };
        let text = |k: &str| -> Result<Option<String>, McpError> {
            match o.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => expand(s, lookup).map(Some).map_err(|e| bad(&format!("{k}: {e}"))),
                Some(_) => Err(bad(&format!("{k} must be a string"))),
            }
        };
        let client_id = text("clientId")?.ok_or_else(|| bad("clientId is required"))?;
        let auth_method = match text("tokenEndpointAuthMethod")?.as_deref() {
            None => None,
            Some("client_secret_basic") => Some(TokenAuthMethod::ClientSecretBasic),
            Some("client_secret_post") => Some(TokenAuthMethod::ClientSecretPost),
            Some("none") => Some(TokenAuthMethod::None),
            Some(other) => return Err(bad(&format!("tokenEndpointAuthMethod {other:?} is not supported"))),
        };
        out.push((
            name.clone(),
            OAuthClient { client_id, client_secret: text("clientSecret")?, auth_method, scope: text("scope")? },
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oauth_blocks_are_read_and_expanded() {
        let text = r#"{"mcpServers": {
            "a": {"type": "http", "url": "https://a/mcp", "oauth": {"clientId": "cid", "clientSecret": "${S}", "tokenEndpointAuthMethod": "client_secret_post"}},
            "b": {"type": "http", "url": "https://b/mcp"}}}"#;
        let got = oauth_clients(text, &|k| (k == "S").then(|| "shh".to_string())).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "a");
        assert_eq!(got[0].1.client_secret.as_deref(), Some("shh"));
        assert_eq!(got[0].1.auth_method, Some(TokenAuthMethod::ClientSecretPost));
        assert!(!format!("{:?}", got[0].1).contains("shh"));
        let bad = r#"{"mcpServers": {"a": {"oauth": {"clientSecret": "x"}}}}"#;
        assert!(oauth_clients(bad, &|_| None).unwrap_err().to_string().contains("clientId"));
        let bad =
            r#"{"mcpServers": {"a": {"oauth": {"clientId": "x", "tokenEndpointAuthMethod": "private_key_jwt"}}}}"#;
        assert!(oauth_clients(bad, &|_| None).is_err());
    }
}
