//! Discovery: where the protected-resource metadata (RFC 9728) and the
//! authorization server metadata (RFC 8414, OpenID Connect Discovery) are,
//! in the order the MCP authorization spec gives, and what makes a document
//! acceptable.
//!
//! The orders are pure functions so they can be checked without a network;
//! [`super::Authorizer`] fetches them.

use serde::Deserialize;

use super::AuthError;

/// RFC 9728 protected-resource metadata (the fields MCP uses; others ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ResourceMetadata {
    /// The resource identifier: must cover the server's URL.
    pub resource: String,
    /// Issuer identifiers of the authorization servers.
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    /// Scopes the resource understands.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
}

/// RFC 8414 authorization server metadata (the fields used; others ignored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct AuthServerMetadata {
    /// Must equal the issuer the document was looked up for, byte for byte.
    pub issuer: String,
    /// Where the person is sent.
    pub authorization_endpoint: String,
    /// Where codes and refresh tokens are exchanged.
    pub token_endpoint: String,
    /// RFC 7591 dynamic client registration.
    #[serde(default)]
    pub registration_endpoint: Option<String>,
    /// Scopes the server issues.
    #[serde(default)]
    pub scopes_supported: Option<Vec<String>>,
    /// PKCE methods: `S256` must be among them.
    #[serde(default)]
    pub code_challenge_methods_supported: Option<Vec<String>>,
    /// `client_secret_basic`, `client_secret_post`, `none`, …
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    /// Client ID Metadata Documents: a client id may be an `https` URL.
    #[serde(default)]
    pub client_id_metadata_document_supported: Option<bool>,
    /// RFC 9207: the redirect carries `iss`.
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: Option<bool>,
    /// Grant types, for `refresh_token`.
    #[serde(default)]
    pub grant_types_supported: Option<Vec<String>>,
}

impl AuthServerMetadata {
    /// The 2025-03-26 defaults when a server publishes no metadata: the
    /// endpoints at fixed paths of the server's origin.
    pub fn defaults_for(origin: &str) -> AuthServerMetadata {
        AuthServerMetadata {
            issuer: origin.to_string(),
            authorization_endpoint: format!("{origin}/authorize"),
            token_endpoint: format!("{origin}/token"),
            registration_endpoint: Some(format!("{origin}/register")),
            // That revision makes PKCE S256 mandatory for every server.
            code_challenge_methods_supported: Some(vec!["S256".into()]),
            ..AuthServerMetadata::default()
        }
    }

    /// Refuses a server that does not advertise PKCE `S256`.
    pub fn require_s256(&self) -> Result<(), AuthError> {
        match &self.code_challenge_methods_supported {
            Some(m) if m.iter().any(|m| m == "S256") => Ok(()),
            Some(m) => Err(AuthError::Metadata(format!(
                "the authorization server {} does not support PKCE S256 (it lists {m:?}); refusing to authorize",
                self.issuer
            ))),
            None => Err(AuthError::Metadata(format!(
                "the authorization server {} does not advertise code_challenge_methods_supported; refusing to authorize without PKCE S256",
                self.issuer
            ))),
        }
    }
}

/// `scheme://authority` and the path (without a trailing `/`) of a URL.
pub fn split_url(url: &str) -> Result<(String, String), AuthError> {
    let uri: ureq::http::Uri = url.parse().map_err(|e| AuthError::Discovery(format!("{url:?} is not a URL: {e}")))?;
    let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) else {
        return Err(AuthError::Discovery(format!("{url:?} is not an absolute URL")));
    };
    if scheme != "https" && scheme != "http" {
        return Err(AuthError::Discovery(format!("{url:?} is not an http(s) URL")));
    }
    let path = uri.path().trim_end_matches('/').to_string();
    Ok((format!("{}://{}", scheme.to_ascii_lowercase(), authority.as_str().to_ascii_lowercase()), path))
}

/// Where to look for the protected-resource metadata: the challenge's
/// `resource_metadata` when given, else the path-specific well-known URL and
/// then the root one (RFC 9728 §3.1, MCP 2025-11-25 "Protected Resource
/// Metadata Discovery").
pub fn resource_metadata_urls(server_url: &str, from_challenge: Option<&str>) -> Result<Vec<String>, AuthError> {
    if let Some(url) = from_challenge {
        split_url(url)?;
        return Ok(vec![url.to_string()]);
    }
    let (origin, path) = split_url(server_url)?;
    let mut out = Vec::new();
    if !path.is_empty() {
        out.push(format!("{origin}/.well-known/oauth-protected-resource{path}"));
    }
    out.push(format!("{origin}/.well-known/oauth-protected-resource"));
    Ok(out)
}

/// Where to look for an issuer's metadata, in the spec's order: OAuth with
/// path insertion, OpenID with path insertion, OpenID with the path appended
/// (for an issuer without a path: OAuth, then OpenID).
pub fn auth_server_metadata_urls(issuer: &str) -> Result<Vec<String>, AuthError> {
    let (origin, path) = split_url(issuer)?;
    Ok(if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    })
}

/// RFC 9728 §3.3 / RFC 8707: the metadata's `resource` must name this
/// server: the same origin, and a path that is the server's or a parent of it.
pub fn check_resource(meta: &ResourceMetadata, server_url: &str) -> Result<(), AuthError> {
    let (origin, path) = split_url(server_url)?;
    let (r_origin, r_path) = split_url(&meta.resource).map_err(|_| {
        AuthError::Metadata(format!("the protected-resource metadata names a malformed resource {:?}", meta.resource))
    })?;
    let covers = r_origin == origin && (r_path.is_empty() || path == r_path || path.starts_with(&format!("{r_path}/")));
    if !covers {
        return Err(AuthError::Metadata(format!(
            "the protected-resource metadata is for {:?}, not for the server {server_url:?}; refusing it",
            meta.resource
        )));
    }
    if meta.authorization_servers.is_empty() {
        return Err(AuthError::Metadata("the protected-resource metadata names no authorization server".into()));
    }
    Ok(())
}

/// RFC 8414 §3.3: the document's `issuer` must be the one looked up,
/// compared as strings (no normalization).
pub fn check_issuer(meta: &AuthServerMetadata, issuer: &str) -> Result<(), AuthError> {
    if meta.issuer != issuer {
        return Err(AuthError::Metadata(format!(
            "the authorization server metadata names the issuer {:?}, but it was looked up for {issuer:?}; refusing it",
            meta.issuer
        )));
    }
    Ok(())
}

/// The scopes to ask for: the challenge's, else the resource's
/// `scopes_supported`, else none (the parameter is then omitted); plus
/// `offline_access` when the authorization server offers it and refresh
/// tokens (so a person is not asked again when the access token expires).
pub fn choose_scope(
    challenge: Option<&str>,
    resource: Option<&ResourceMetadata>,
    server: &AuthServerMetadata,
) -> Option<String> {
    let mut scopes: Vec<String> = match challenge {
        Some(s) => s.split_ascii_whitespace().map(str::to_string).collect(),
        None => resource.and_then(|r| r.scopes_supported.clone()).unwrap_or_default(),
    };
    let offers_offline = server.scopes_supported.as_ref().is_some_and(|s| s.iter().any(|s| s == "offline_access"));
    let refreshes = server.grant_types_supported.as_ref().is_none_or(|g| g.iter().any(|g| g == "refresh_token"));
    if !scopes.is_empty() && offers_offline && refreshes && !scopes.iter().any(|s| s == "offline_access") {
        scopes.push("offline_access".into());
    }
    if scopes.is_empty() {
        None
    } else {
        Some(scopes.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probing_orders_follow_the_spec() {
        assert_eq!(
            resource_metadata_urls("https://mcp.example.com/public/mcp", None).unwrap(),
            [
                "https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp",
                "https://mcp.example.com/.well-known/oauth-protected-resource"
            ]
        );
        assert_eq!(
            resource_metadata_urls("https://mcp.example.com/mcp", Some("https://mcp.example.com/prm")).unwrap(),
            ["https://mcp.example.com/prm"]
        );
        assert_eq!(
            auth_server_metadata_urls("https://auth.example.com/tenant1").unwrap(),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server/tenant1",
                "https://auth.example.com/.well-known/openid-configuration/tenant1",
                "https://auth.example.com/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            auth_server_metadata_urls("https://auth.example.com").unwrap(),
            [
                "https://auth.example.com/.well-known/oauth-authorization-server",
                "https://auth.example.com/.well-known/openid-configuration"
            ]
        );
        assert!(resource_metadata_urls("mcp.example.com/mcp", None).is_err());
    }

    #[test]
    fn resource_and_issuer_are_checked() {
        let prm = |r: &str| ResourceMetadata {
            resource: r.into(),
            authorization_servers: vec!["https://as".into()],
            scopes_supported: None,
        };
        assert!(check_resource(&prm("https://mcp.example.com/mcp"), "https://mcp.example.com/mcp").is_ok());
        assert!(check_resource(&prm("https://mcp.example.com"), "https://mcp.example.com/mcp").is_ok());
        assert!(check_resource(&prm("https://evil.example.com/mcp"), "https://mcp.example.com/mcp").is_err());
        assert!(check_resource(&prm("https://mcp.example.com/other"), "https://mcp.example.com/mcp").is_err());
        assert!(check_resource(&prm("https://mcp.example.com/mc"), "https://mcp.example.com/mcp").is_err());
        let meta = AuthServerMetadata { issuer: "https://as.example.com".into(), ..Default::default() };
        assert!(check_issuer(&meta, "https://as.example.com").is_ok());
        assert!(check_issuer(&meta, "https://as.example.com/").is_err());
    }

    #[test]
    fn pkce_s256_is_required() {
        let mut m = AuthServerMetadata { issuer: "https://as".into(), ..Default::default() };
        assert!(m.require_s256().is_err());
        m.code_challenge_methods_supported = Some(vec!["plain".into()]);
        assert!(m.require_s256().unwrap_err().to_string().contains("S256"));
        m.code_challenge_methods_supported = Some(vec!["plain".into(), "S256".into()]);
        assert!(m.require_s256().is_ok());
    }

    #[test]
    fn scopes_come_from_the_challenge_then_the_resource() {
        let prm = ResourceMetadata {
            resource: "x".into(),
            authorization_servers: vec![],
            scopes_supported: Some(vec!["a".into(), "b".into()]),
        };
        let mut asm = AuthServerMetadata::default();
        assert_eq!(choose_scope(Some("c"), Some(&prm), &asm).as_deref(), Some("c"));
        assert_eq!(choose_scope(None, Some(&prm), &asm).as_deref(), Some("a b"));
        assert_eq!(choose_scope(None, None, &asm), None);
        asm.scopes_supported = Some(vec!["a".into(), "offline_access".into()]);
        assert_eq!(choose_scope(None, Some(&prm), &asm).as_deref(), Some("a b offline_access"));
        asm.grant_types_supported = Some(vec!["authorization_code".into()]);
        assert_eq!(choose_scope(None, Some(&prm), &asm).as_deref(), Some("a b"));
    }
}
