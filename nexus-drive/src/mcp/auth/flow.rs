//! The authorization code flow's pieces: PKCE, `state`, the authorization
//! URL, the redirect's checks, and the token endpoint's requests.

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::store::{ClientCredentials, TokenAuthMethod};
use super::AuthError;

/// 32 random bytes, base64url without padding (43 characters: a valid PKCE
/// verifier and an unguessable `state`).
pub fn random_secret() -> Result<String, AuthError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| AuthError::Flow(format!("no randomness from the system: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// RFC 7636 `S256`: base64url(SHA-256(verifier)).
pub fn s256_challenge(verifier: &str) -> String {
    let digest = sha2::Sha256::digest(verifier.as_bytes());
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_slice())
}

/// What the host keeps, secretly, beside a suspended run while a person
/// authorizes: everything needed to finish the flow in any process. It holds
/// the PKCE verifier and `state`: never put it in the run.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingAuthorization {
    /// The server (its config key).
    pub server: String,
    /// The authorization server's issuer.
    pub issuer: String,
    /// The RFC 8707 resource.
    pub resource: String,
    /// Where the code is exchanged.
    pub token_endpoint: String,
    /// Who is asking.
    pub client: ClientCredentials,
    /// The redirect URI the authorization request named.
    pub redirect_uri: String,
    /// The PKCE verifier.
    pub verifier: String,
    /// The `state` the redirect must carry back.
    pub state: String,
    /// The scopes asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// RFC 9207: the server said its redirects carry `iss`.
    pub iss_required: bool,
    /// When the authorization was begun, in unix seconds (none in records
    /// written before pending logins expired: those never expire).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
}

impl PendingAuthorization {
    /// Whether it is older than `ttl_s` at `now` (unix seconds).
    pub fn expired(&self, now: u64, ttl_s: u64) -> bool {
        self.created_at.is_some_and(|t| now.saturating_sub(t) > ttl_s)
    }
}

impl std::fmt::Debug for PendingAuthorization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingAuthorization")
            .field("server", &self.server)
            .field("issuer", &self.issuer)
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

/// The authorization URL for a pending authorization.
pub fn authorization_url(endpoint: &str, pending: &PendingAuthorization) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("response_type", "code")
        .append_pair("client_id", &pending.client.client_id)
        .append_pair("redirect_uri", &pending.redirect_uri)
        .append_pair("code_challenge", &s256_challenge(&pending.verifier))
        .append_pair("code_challenge_method", "S256")
        .append_pair("state", &pending.state);
    if let Some(scope) = &pending.scope {
        q.append_pair("scope", scope);
    }
    q.append_pair("resource", &pending.resource);
    let sep = if endpoint.contains('?') { '&' } else { '?' };
    format!("{endpoint}{sep}{}", q.finish())
}

/// The query parameters of a redirect URL (or of a bare query string).
pub fn redirect_params(redirect: &str) -> Vec<(String, String)> {
    let without_fragment = redirect.split('#').next().unwrap_or_default();
    let query = match without_fragment.split_once('?') {
        Some((_, q)) => q,
        None if !without_fragment.contains("://") => without_fragment,
        None => "",
    };
    form_urlencoded::parse(query.as_bytes()).into_owned().collect()
}

/// Checks a redirect against its pending authorization and returns the
/// code: the `state` must match, an `error` is the server's refusal, and
/// `iss` (RFC 9207) must equal the issuer whenever it is present, and be
/// present when the server advertised it.
pub fn check_redirect(pending: &PendingAuthorization, params: &[(String, String)]) -> Result<String, AuthError> {
    let get = |n: &str| params.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    if let Some(error) = get("error") {
        let desc = get("error_description").map(|d| format!(": {d}")).unwrap_or_default();
        return Err(AuthError::Redirect(format!("the authorization server refused ({error}{desc})")));
    }
    match get("state") {
        Some(s) if s == pending.state => {}
        Some(_) => {
            return Err(AuthError::Redirect("the redirect's state does not match the one sent; refusing it".into()))
        }
        None => return Err(AuthError::Redirect("the redirect carries no state; refusing it".into())),
    }
    match get("iss") {
        Some(iss) if iss != pending.issuer => {
            return Err(AuthError::Redirect(format!(
                "the redirect's iss {iss:?} is not the authorization server {:?}; refusing it",
                pending.issuer
            )))
        }
        None if pending.iss_required => {
            return Err(AuthError::Redirect(
                "the authorization server promised an iss parameter and the redirect has none; refusing it".into(),
            ))
        }
        _ => {}
    }
    match get("code") {
        Some(code) if !code.is_empty() => Ok(code.to_string()),
        _ => Err(AuthError::Redirect("the redirect carries no code".into())),
    }
}

/// A successful token response (RFC 6749 §5.1).
#[derive(Deserialize)]
pub struct TokenResponse {
    /// The token.
    pub access_token: String,
    /// Must be `Bearer` (case-insensitive).
    #[serde(default)]
    pub token_type: Option<String>,
    /// Lifetime in seconds.
    #[serde(default)]
    pub expires_in: Option<u64>,
    /// A refresh token.
    #[serde(default)]
    pub refresh_token: Option<String>,
    /// The scopes granted.
    #[serde(default)]
    pub scope: Option<String>,
}

/// The form and headers of a token request, with the client's
/// authentication applied.
pub fn token_request(client: &ClientCredentials, mut form: Vec<(&str, String)>) -> (String, Vec<(String, String)>) {
    let mut headers = Vec::new();
    match (client.auth_method, &client.client_secret) {
        (TokenAuthMethod::ClientSecretBasic, Some(secret)) => {
            // RFC 6749 §2.3.1: both parts form-urlencoded before Basic.
            let enc = |s: &str| form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
            let pair = format!("{}:{}", enc(&client.client_id), enc(secret));
            let b64 = base64::engine::general_purpose::STANDARD.encode(pair);
            headers.push(("authorization".to_string(), format!("Basic {b64}")));
        }
        (TokenAuthMethod::ClientSecretPost, Some(secret)) => {
            form.push(("client_id", client.client_id.clone()));
            form.push(("client_secret", secret.clone()));
        }
        _ => form.push(("client_id", client.client_id.clone())),
    }
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in &form {
        s.append_pair(k, v);
    }
    (s.finish(), headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending() -> PendingAuthorization {
        PendingAuthorization {
            server: "s".into(),
            issuer: "https://as.example.com".into(),
            resource: "https://mcp.example.com/mcp".into(),
            token_endpoint: "https://as.example.com/token".into(),
            client: ClientCredentials {
                client_id: "cid".into(),
                client_secret: None,
                auth_method: TokenAuthMethod::None,
            },
            redirect_uri: "http://127.0.0.1:5/callback".into(),
            verifier: "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk".into(),
            state: "st".into(),
            scope: Some("a b".into()),
            iss_required: false,
            created_at: None,
        }
    }

    #[test]
    fn s256_matches_rfc7636_appendix_b() {
        assert_eq!(
            s256_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
            "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
        );
        let a = random_secret().unwrap();
        assert_eq!(a.len(), 43);
        assert_ne!(a, random_secret().unwrap());
    }

    #[test]
    fn the_authorization_url_carries_pkce_state_scope_and_resource() {
        let url = authorization_url("https://as.example.com/authorize?tenant=1", &pending());
        let params = redirect_params(&url);
        let get = |n: &str| params.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        assert_eq!(get("tenant").as_deref(), Some("1"));
        assert_eq!(get("code_challenge_method").as_deref(), Some("S256"));
        assert_eq!(get("code_challenge").as_deref(), Some("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"));
        assert_eq!(get("resource").as_deref(), Some("https://mcp.example.com/mcp"));
        assert_eq!(get("scope").as_deref(), Some("a b"));
        assert_eq!(get("state").as_deref(), Some("st"));
        assert!(!url.contains(&pending().verifier));
    }

    #[test]
    fn redirects_are_checked() {
        let p = pending();
        let ok = redirect_params("http://127.0.0.1:5/callback?code=c1&state=st");
        assert_eq!(check_redirect(&p, &ok).unwrap(), "c1");
        let bad_state = redirect_params("http://127.0.0.1:5/callback?code=c1&state=other");
        assert!(check_redirect(&p, &bad_state).unwrap_err().to_string().contains("state"));
        let bad_iss =
            redirect_params("http://127.0.0.1:5/callback?code=c1&state=st&iss=https%3A%2F%2Fas.example.com%2F");
        assert!(check_redirect(&p, &bad_iss).unwrap_err().to_string().contains("iss"));
        let good_iss = redirect_params("?code=c1&state=st&iss=https%3A%2F%2Fas.example.com");
        assert!(check_redirect(&p, &good_iss).is_ok());
        let mut strict = p.clone();
        strict.iss_required = true;
        assert!(check_redirect(&strict, &ok).is_err());
        let refused = redirect_params("http://x/cb?error=access_denied&state=st");
        assert!(check_redirect(&p, &refused).unwrap_err().to_string().contains("access_denied"));
    }

    #[test]
    fn client_authentication_methods() {
        let mut c = ClientCredentials {
            client_id: "id:1".into(),
            client_secret: Some("s&2".into()),
            auth_method: TokenAuthMethod::ClientSecretBasic,
        };
        let (body, headers) = token_request(&c, vec![("grant_type", "x".into())]);
        assert_eq!(body, "grant_type=x");
        assert_eq!(headers[0].1, format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("id%3A1:s%262")));
        c.auth_method = TokenAuthMethod::ClientSecretPost;
        let (body, headers) = token_request(&c, vec![("grant_type", "x".into())]);
        assert_eq!(body, "grant_type=x&client_id=id%3A1&client_secret=s%262");
        assert!(headers.is_empty());
        c.auth_method = TokenAuthMethod::None;
        c.client_secret = None;
        assert_eq!(token_request(&c, vec![]).0, "client_id=id%3A1");
    }
}
