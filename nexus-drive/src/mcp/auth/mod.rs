//! MCP authorization: OAuth 2.1 for remote (Streamable HTTP) servers, as a
//! client, with the one step that needs a person as a
//! [`Request`] of kind `authorization`.
//!
//! When a server answers `401` (or `403 insufficient_scope`), the link hands
//! the response's `WWW-Authenticate` to the [`Authorizer`], which:
//!
//! 1. refreshes a stored token when it can (a person is asked only when that
//!    fails);
//! 2. otherwise discovers the protected-resource metadata (RFC 9728; the
//!    challenge's `resource_metadata`, else the well-known URLs) and the
//!    authorization server's metadata (RFC 8414 / OpenID, in path-insertion
//!    order; the 2025-03-26 defaults when a server has neither), checking
//!    that the resource names this server and the issuer is the one looked up;
//! 3. picks a client identity: pre-registered ([`OAuthClient`]), a Client ID
//!    Metadata Document URL, or dynamic registration (RFC 7591);
//! 4. builds the authorization URL (code + PKCE `S256` — a server that does
//!    not advertise `S256` is refused — `state`, RFC 8707 `resource`, the
//!    challenge's scopes or `scopes_supported`) and returns it as a
//!    `Request{kind:"authorization", url, data:{server, issuer, …}}`.
//!
//! The answer carries the redirect URL (`data.redirect_url`) or `code` and
//! `state`: [`Authorizer::complete`] checks `state` and `iss` (RFC 9207),
//! exchanges the code and keeps the tokens in the host's [`TokenStore`],
//! keyed by server and issuer. A [`Browser`] answers in-process (the CLI's
//! loopback listener); without one the request goes to the host, which keeps
//! the [`PendingAuthorization`] (the PKCE verifier and `state`) beside the
//! suspended run — never in it — and completes it in any process.
//!
//! Tokens, verifiers, secrets and codes appear in no error message and no
//! `Debug` output.

pub mod browser;
pub mod challenge;
pub mod config;
pub mod discovery;
pub mod flow;
pub mod seal;
pub mod store;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nexus_proto::{Answer, Request};
use serde_json::{json, Map, Value};

pub use browser::{FollowingBrowser, LoopbackBrowser};
pub use challenge::{parse_bearer, BearerChallenge};
pub use discovery::{AuthServerMetadata, ResourceMetadata};
pub use flow::PendingAuthorization;
pub use seal::{KeyRing, SealError, SealedTokenStore};
pub use store::{ClientCredentials, FileTokenStore, MemoryTokenStore, TokenAuthMethod, TokenRecord, TokenStore};

/// An authorization failure. Messages never carry a token, a code, a
/// verifier or a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The `WWW-Authenticate` header is malformed.
    #[error("{0}")]
    Challenge(String),
    /// Metadata could not be found or fetched.
    #[error("authorization discovery: {0}")]
    Discovery(String),
    /// Metadata was found and is unacceptable (wrong resource, wrong issuer, no PKCE S256).
    #[error("authorization metadata: {0}")]
    Metadata(String),
    /// No client identity could be had.
    #[error("client registration: {0}")]
    Registration(String),
    /// The redirect was refused (state, iss, an error from the server).
    #[error("authorization redirect: {0}")]
    Redirect(String),
    /// The token endpoint refused.
    #[error("token endpoint: {0}")]
    Token(String),
    /// The server kept asking for more scope.
    #[error("the server {server:?} still refuses after {attempts} step-up authorizations")]
    StepUpLimit {
        /// The server.
        server: String,
        /// How many were made.
        attempts: u32,
    },
    /// The server refused in a way authorization cannot fix.
    #[error("the server refused: {0}")]
    Forbidden(String),
    /// The person declined or the answer did not match a pending authorization.
    #[error("authorization: {0}")]
    Answer(String),
    /// The authorization was begun longer ago than pending logins last: its
    /// secrets are gone, and a new login is needed.
    #[error("the login for the MCP server {server:?} expired (logins are kept {minutes} minutes): start it again")]
    Expired {
        /// The server.
        server: String,
        /// How long pending logins are kept, in minutes.
        minutes: u64,
    },
    /// Local failures (randomness, the token store).
    #[error("authorization: {0}")]
    Flow(String),
}

/// How long a begun authorization waits for its answer by default.
pub const DEFAULT_PENDING_TTL: Duration = Duration::from_secs(15 * 60);

/// The wall clock in unix seconds.
fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl From<store::StoreError> for AuthError {
    fn from(e: store::StoreError) -> Self {
        AuthError::Flow(e.to_string())
    }
}

/// A client registered ahead of time with a server's authorization server
/// (from the configuration).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OAuthClient {
    /// The client id.
    pub client_id: String,
    /// The secret, for a confidential client.
    pub client_secret: Option<String>,
    /// How to authenticate at the token endpoint (chosen from what the
    /// server supports when `None`).
    pub auth_method: Option<TokenAuthMethod>,
    /// The scopes to ask for instead of the discovered ones.
    pub scope: Option<String>,
}

impl fmt::Debug for OAuthClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OAuthClient")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "<redacted>"))
            .field("auth_method", &self.auth_method)
            .field("scope", &self.scope)
            .finish()
    }
}

/// Takes a person through an authorization request in this process.
pub trait Browser: Send + Sync {
    /// The redirect URI the authorization server sends the person back to.
    fn redirect_uri(&self) -> String;
    /// Sends the person to `request.url` and returns the redirect URL they
    /// came back with.
    fn authorize(&self, request: &Request) -> Result<String, String>;
}

/// What to do after a refusal.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Step {
    /// A (new) token is in the store: send the request again.
    Retry,
    /// A person must authorize: the host answers this request, then calls
    /// [`Authorizer::complete`].
    Person(Request),
}

/// How many step-up authorizations one server gets before it is refused.
pub const DEFAULT_MAX_STEP_UPS: u32 = 2;
/// An access token this close to its expiry is refreshed before use.
const EXPIRY_MARGIN_SECS: u64 = 30;
const MAX_METADATA_BYTES: u64 = 1024 * 1024;

/// The OAuth client of every HTTP MCP server of a source.
pub struct Authorizer {
    agent: ureq::Agent,
    store: Arc<dyn TokenStore>,
    clients: BTreeMap<String, OAuthClient>,
    client_metadata_url: Option<String>,
    client_name: String,
    redirect_uri: String,
    browser: Option<Arc<dyn Browser>>,
    max_step_ups: u32,
    pending_ttl_s: u64,
    state: Mutex<Inner>,
    /// Held while the browser takes a person through an authorization.
    browser_turn: Mutex<()>,
}

#[derive(Default)]
struct Inner {
    pending: HashMap<String, PendingAuthorization>,
    /// The person's requests still open, by id.
    requests: HashMap<String, Request>,
    /// The issuer each server was last authorized at.
    issuers: HashMap<String, String>,
    step_ups: HashMap<String, u32>,
    /// The open authorization request of each server.
    open: HashMap<String, String>,
    /// The scopes last asked for, per server.
    scopes: HashMap<String, String>,
    /// Digests of access tokens got by refreshing: one refused again means
    /// the refresh token no longer helps.
    refreshed: HashSet<String>,
}

impl fmt::Debug for Authorizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Authorizer")
            .field("store", &self.store)
            .field("clients", &self.clients)
            .field("redirect_uri", &self.redirect_uri)
            .field("browser", &self.browser.is_some())
            .finish_non_exhaustive()
    }
}

impl Authorizer {
    /// An authorizer keeping tokens in `store`, with no browser (every
    /// person's step is returned as a [`Step::Person`] request).
    pub fn new(store: Arc<dyn TokenStore>) -> Authorizer {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_global(Some(Duration::from_secs(30)))
            .build();
        Authorizer {
            agent: ureq::Agent::new_with_config(config),
            store,
            clients: BTreeMap::new(),
            client_metadata_url: None,
            client_name: "nexus".into(),
            redirect_uri: "http://127.0.0.1:8976/callback".into(),
            browser: None,
            max_step_ups: DEFAULT_MAX_STEP_UPS,
            pending_ttl_s: DEFAULT_PENDING_TTL.as_secs(),
            state: Mutex::new(Inner::default()),
            browser_turn: Mutex::new(()),
        }
    }

    /// Answers the person's step in this process with `browser` (its
    /// redirect URI is used).
    pub fn with_browser(mut self, browser: Arc<dyn Browser>) -> Authorizer {
        self.redirect_uri = browser.redirect_uri();
        self.browser = Some(browser);
        self
    }

    /// How long a begun authorization waits for its answer (default
    /// [`DEFAULT_PENDING_TTL`], 15 minutes, the order of an authorization
    /// code's lifetime): older pending logins are swept from the store and
    /// an answer to one is [`AuthError::Expired`].
    pub fn with_pending_ttl(mut self, ttl: Duration) -> Authorizer {
        self.pending_ttl_s = ttl.as_secs();
        self
    }

    /// The redirect URI registered for (and sent with) authorization
    /// requests answered by the host.
    pub fn with_redirect_uri(mut self, uri: impl Into<String>) -> Authorizer {
        self.redirect_uri = uri.into();
        self
    }

    /// A pre-registered client for `server`.
    pub fn with_client(mut self, server: impl Into<String>, client: OAuthClient) -> Authorizer {
        self.clients.insert(server.into(), client);
        self
    }

    /// The `https` URL of this client's Client ID Metadata Document, used as
    /// its client id where the authorization server supports that.
    pub fn with_client_metadata_url(mut self, url: impl Into<String>) -> Authorizer {
        self.client_metadata_url = Some(url.into());
        self
    }

    /// How many step-up authorizations a server gets.
    pub fn with_max_step_ups(mut self, n: u32) -> Authorizer {
        self.max_step_ups = n;
        self
    }

    /// The token store.
    pub fn store(&self) -> &Arc<dyn TokenStore> {
        &self.store
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stored record for `server` (at the issuer it was last authorized at).
    fn record(&self, server: &str) -> Option<(String, TokenRecord)> {
        let issuer = self.lock().issuers.get(server).cloned();
        let records = self.store.for_server(server).ok()?;
        match issuer {
            Some(i) => records.into_iter().find(|(k, _)| *k == i),
            None => records.into_iter().next(),
        }
    }

    /// The bearer token to send to `server` now, refreshing an expired one
    /// first. `None` when there is none (the server's `401` starts the flow).
    pub fn bearer(&self, server: &str) -> Option<String> {
        let (issuer, record) = self.record(server)?;
        let expired = record.expires_at.is_some_and(|t| t <= now_secs() + EXPIRY_MARGIN_SECS);
        if expired {
            if record.refresh_token.is_some() {
                if let Ok(fresh) = self.refresh(server, &issuer, &record) {
                    return Some(fresh.access_token);
                }
            }
            return None;
        }
        Some(record.access_token)
    }

    /// The server refused a request that carried `sent` (if any) with
    /// `status` and this `WWW-Authenticate`. Refreshes, or starts an
    /// authorization (answered by the browser when there is one).
    pub fn challenged(
        &self,
        server: &str,
        server_url: &str,
        status: u16,
        www_authenticate: Option<&str>,
        sent: Option<&str>,
    ) -> Result<Step, AuthError> {
        let challenge = match www_authenticate {
            Some(h) => parse_bearer(h)?,
            None => None,
        };
        if status == 403 {
            let insufficient = challenge.as_ref().and_then(|c| c.error.as_deref()) == Some("insufficient_scope");
            if !insufficient {
                return Err(AuthError::Forbidden(format!("HTTP 403 from {server:?} without insufficient_scope")));
            }
            let attempts = {
                let mut inner = self.lock();
                let n = inner.step_ups.entry(server.to_string()).or_insert(0);
                *n += 1;
                *n
            };
            if attempts > self.max_step_ups {
                return Err(AuthError::StepUpLimit { server: server.to_string(), attempts: attempts - 1 });
            }
        } else if let Some((issuer, record)) = self.record(server) {
            let failed_was_stored = sent == Some(record.access_token.as_str());
            let already_refreshed = self.lock().refreshed.contains(&digest(&record.access_token));
            if failed_was_stored && record.refresh_token.is_some() && !already_refreshed {
                if self.refresh(server, &issuer, &record).is_ok() {
                    return Ok(Step::Retry);
                }
            } else if !failed_was_stored && sent.is_some() {
                // Another thread stored a newer token meanwhile: try it.
                return Ok(Step::Retry);
            }
        }
        // One open authorization per server: a refusal while a person is
        // still on it is answered with the same request, not a second one.
        if status == 401 && self.browser.is_none() {
            let open = {
                let inner = self.lock();
                inner.open.get(server).and_then(|id| inner.requests.get(id)).cloned()
            };
            if let Some(request) = open {
                return Ok(Step::Person(request));
            }
        }
        let Some(browser) = self.browser.clone() else {
            return Ok(Step::Person(self.begin(server, server_url, challenge.as_ref())?));
        };
        // One person's step at a time: a refusal that waited for another
        // thread's authorization uses its token.
        let _one = self.browser_turn.lock().unwrap_or_else(|e| e.into_inner());
        if status == 401 {
            if let Some((_, record)) = self.record(server) {
                if sent != Some(record.access_token.as_str()) {
                    return Ok(Step::Retry);
                }
            }
        }
        let request = self.begin(server, server_url, challenge.as_ref())?;
        let redirect = browser.authorize(&request).map_err(AuthError::Answer)?;
        let mut data = Map::new();
        data.insert("redirect_url".into(), Value::String(redirect));
        self.complete(&Answer::ok(request.id.clone(), Some(data)))?;
        Ok(Step::Retry)
    }

    /// Discovers, registers when needed, and returns the person's
    /// authorization request (its secrets kept as a
    /// [`PendingAuthorization`] under the request's id).
    pub fn begin(
        &self,
        server: &str,
        server_url: &str,
        challenge: Option<&BearerChallenge>,
    ) -> Result<Request, AuthError> {
        let resource_meta = self.discover_resource(server_url, challenge)?;
        let (origin, _) = discovery::split_url(server_url)?;
        let (issuer, meta) = match &resource_meta {
            Some(prm) => {
                let issuer = prm.authorization_servers.first().cloned().unwrap_or_default();
                let meta = self.discover_auth_server(&issuer)?.ok_or_else(|| {
                    AuthError::Discovery(format!("no authorization server metadata found for {issuer:?}"))
                })?;
                (issuer, meta)
            }
            // 2025-03-26: the server's origin is the authorization server,
            // with fixed endpoints when it publishes no metadata.
            None => {
                let meta =
                    self.discover_auth_server(&origin)?.unwrap_or_else(|| AuthServerMetadata::defaults_for(&origin));
                (origin.clone(), meta)
            }
        };
        meta.require_s256()?;
        let resource = match &resource_meta {
            Some(prm) => prm.resource.clone(),
            None => canonical(server_url),
        };
        let configured = self.clients.get(server);
        let mut scope = configured.and_then(|c| c.scope.clone()).or_else(|| {
            discovery::choose_scope(challenge.and_then(|c| c.scope.as_deref()), resource_meta.as_ref(), &meta)
        });
        // Re-authorizing (step-up) asks for what was asked before as well (SEP-2350).
        if let Some(before) = self.lock().scopes.get(server).cloned() {
            scope = Some(union_scopes(&before, scope.as_deref().unwrap_or_default()));
        }
        let client = self.client_for(server, &issuer, &meta, scope.as_deref())?;
        let pending = PendingAuthorization {
            server: server.to_string(),
            issuer: issuer.clone(),
            resource: resource.clone(),
            token_endpoint: meta.token_endpoint.clone(),
            client,
            redirect_uri: self.redirect_uri.clone(),
            verifier: flow::random_secret()?,
            state: flow::random_secret()?,
            scope: scope.clone(),
            iss_required: meta.authorization_response_iss_parameter_supported == Some(true),
            created_at: Some(unix_now()),
        };
        let url = flow::authorization_url(&meta.authorization_endpoint, &pending);
        let id = format!("authorize-{server}-{}", &flow::random_secret()?[..12]);
        let mut data = Map::new();
        data.insert("server".into(), json!(server));
        data.insert("issuer".into(), json!(issuer));
        data.insert("resource".into(), json!(resource));
        data.insert("redirect_uri".into(), json!(self.redirect_uri));
        if let Some(s) = &scope {
            data.insert("scope".into(), json!(s));
        }
        let mut request = Request::new(
            "authorization",
            format!("Authorize access to the MCP server {server:?} at {issuer}, then give back the URL you are redirected to."),
        );
        request.id = id.clone();
        request.url = Some(url);
        request.data = Some(data);
        if self.browser.is_none() {
            // The host answers, maybe in another process: the secrets wait in
            // the token store, never in the request (nor the run holding it).
            self.sweep_pending()?;
            self.store.put_pending(&id, &pending)?;
        }
        let mut inner = self.lock();
        if let Some(s) = &scope {
            inner.scopes.insert(server.to_string(), s.clone());
        }
        inner.open.insert(server.to_string(), id.clone());
        inner.pending.insert(id.clone(), pending);
        inner.requests.insert(id, request.clone());
        Ok(request)
    }

    /// The secrets of the pending authorization `id`: this process's, else
    /// those the token store keeps for it (begun without a browser, maybe in
    /// another process). Never part of a run.
    pub fn pending(&self, id: &str) -> Option<PendingAuthorization> {
        if let Some(p) = self.lock().pending.get(id).cloned() {
            return Some(p);
        }
        self.store.get_pending(id).ok().flatten()
    }

    /// The authorization request open for `server` in this process (the one
    /// its last refusal asked a person for), if any.
    pub fn open_request(&self, server: &str) -> Option<Request> {
        let inner = self.lock();
        inner.open.get(server).and_then(|id| inner.requests.get(id)).cloned()
    }

    /// The open authorization request `id` (as [`Step::Person`] gave it).
    pub fn request(&self, id: &str) -> Option<Request> {
        self.lock().requests.get(id).cloned()
    }

    /// Forgets the pending authorization `id`, here and in the store.
    fn forget_pending(&self, id: &str) -> Result<(), AuthError> {
        self.store.remove_pending(id)?;
        let mut inner = self.lock();
        inner.pending.remove(id);
        inner.requests.remove(id);
        inner.open.retain(|_, open| open != id);
        Ok(())
    }

    /// Removes the store's pending logins begun more than the TTL ago.
    fn sweep_pending(&self) -> Result<(), AuthError> {
        self.store.sweep_pending(unix_now().saturating_sub(self.pending_ttl_s))?;
        Ok(())
    }

    /// Restores a pending authorization kept by the host (another process).
    pub fn restore_pending(&self, id: impl Into<String>, pending: PendingAuthorization) {
        self.lock().pending.insert(id.into(), pending);
    }

    /// Finishes the authorization `answer.id`: checks the redirect
    /// (`data.redirect_url`, or `data.code` + `data.state` [+ `data.iss`]),
    /// exchanges the code and stores the tokens. On a refused redirect the
    /// authorization stays pending (a right one may still come); no token is
    /// requested.
    pub fn complete(&self, answer: &Answer) -> Result<(), AuthError> {
        let Some(pending) = self.pending(&answer.id) else {
            return Err(AuthError::Answer(format!("no pending authorization has the id {:?}", answer.id)));
        };
        if pending.expired(unix_now(), self.pending_ttl_s) {
            self.forget_pending(&answer.id)?;
            self.sweep_pending()?;
            return Err(AuthError::Expired { server: pending.server, minutes: self.pending_ttl_s.div_ceil(60) });
        }
        if !answer.ok {
            self.forget_pending(&answer.id)?;
            let why = answer.reason.clone().unwrap_or_else(|| "declined".into());
            return Err(AuthError::Answer(format!("the authorization for {:?} was not given ({why})", pending.server)));
        }
        let data = answer.data.clone().unwrap_or_default();
        let text = |k: &str| data.get(k).and_then(Value::as_str).map(str::to_string);
        let params = match text("redirect_url").or_else(|| text("url")).or_else(|| text("redirect")) {
            Some(url) => flow::redirect_params(&url),
            None => ["code", "state", "iss", "error", "error_description"]
                .iter()
                .filter_map(|k| text(k).map(|v| (k.to_string(), v)))
                .collect(),
        };
        let code = flow::check_redirect(&pending, &params)?;
        let form = vec![
            ("grant_type", "authorization_code".to_string()),
            ("code", code),
            ("redirect_uri", pending.redirect_uri.clone()),
            ("code_verifier", pending.verifier.clone()),
            ("resource", pending.resource.clone()),
        ];
        let tokens = self.token_call(&pending.token_endpoint, &pending.client, form)?;
        let record = TokenRecord {
            access_token: tokens.access_token,
            refresh_token: tokens.refresh_token,
            expires_at: tokens.expires_in.map(|s| now_secs() + s),
            scope: tokens.scope.or(pending.scope.clone()),
            resource: pending.resource.clone(),
            token_endpoint: pending.token_endpoint.clone(),
            client: pending.client.clone(),
        };
        self.store.put(&pending.server, &pending.issuer, record)?;
        self.store.remove_pending(&answer.id)?;
        let mut inner = self.lock();
        inner.pending.remove(&answer.id);
        inner.requests.remove(&answer.id);
        inner.open.retain(|_, id| *id != answer.id);
        inner.issuers.insert(pending.server.clone(), pending.issuer.clone());
        Ok(())
    }

    fn refresh(&self, server: &str, issuer: &str, record: &TokenRecord) -> Result<TokenRecord, AuthError> {
        let Some(refresh_token) = record.refresh_token.clone() else {
            return Err(AuthError::Token("no refresh token".into()));
        };
        let form = vec![
            ("grant_type", "refresh_token".to_string()),
            ("refresh_token", refresh_token.clone()),
            ("resource", record.resource.clone()),
        ];
        let tokens = match self.token_call(&record.token_endpoint, &record.client, form) {
            Ok(t) => t,
            Err(e) => {
                // A refused refresh token is useless from now on.
                let mut stale = record.clone();
                stale.refresh_token = None;
                stale.expires_at = Some(0);
                self.store.put(server, issuer, stale)?;
                return Err(e);
            }
        };
        let fresh = TokenRecord {
            access_token: tokens.access_token,
            refresh_token: tokens.refresh_token.or(Some(refresh_token)),
            expires_at: tokens.expires_in.map(|s| now_secs() + s),
            scope: tokens.scope.or(record.scope.clone()),
            ..record.clone()
        };
        self.store.put(server, issuer, fresh.clone())?;
        let mut inner = self.lock();
        inner.refreshed.insert(digest(&fresh.access_token));
        inner.issuers.insert(server.to_string(), issuer.to_string());
        Ok(fresh)
    }

    fn discover_resource(
        &self,
        server_url: &str,
        challenge: Option<&BearerChallenge>,
    ) -> Result<Option<ResourceMetadata>, AuthError> {
        let named = challenge.and_then(|c| c.resource_metadata.as_deref());
        for url in discovery::resource_metadata_urls(server_url, named)? {
            if let Some(v) = self.get_json(&url)? {
                let meta: ResourceMetadata = serde_json::from_value(v).map_err(|e| {
                    AuthError::Metadata(format!("the protected-resource metadata at {url} is malformed: {e}"))
                })?;
                discovery::check_resource(&meta, server_url)?;
                return Ok(Some(meta));
            }
        }
        if let Some(url) = named {
            return Err(AuthError::Discovery(format!("the protected-resource metadata at {url} could not be fetched")));
        }
        Ok(None)
    }

    fn discover_auth_server(&self, issuer: &str) -> Result<Option<AuthServerMetadata>, AuthError> {
        for url in discovery::auth_server_metadata_urls(issuer)? {
            if let Some(v) = self.get_json(&url)? {
                let meta: AuthServerMetadata = serde_json::from_value(v).map_err(|e| {
                    AuthError::Metadata(format!("the authorization server metadata at {url} is malformed: {e}"))
                })?;
                discovery::check_issuer(&meta, issuer)?;
                return Ok(Some(meta));
            }
        }
        Ok(None)
    }

    fn client_for(
        &self,
        server: &str,
        issuer: &str,
        meta: &AuthServerMetadata,
        scope: Option<&str>,
    ) -> Result<ClientCredentials, AuthError> {
        if let Some(c) = self.clients.get(server) {
            let method = c.auth_method.unwrap_or_else(|| pick_method(meta, c.client_secret.is_some()));
            return Ok(ClientCredentials {
                client_id: c.client_id.clone(),
                client_secret: c.client_secret.clone(),
                auth_method: method,
            });
        }
        if let (Some(url), Some(true)) = (&self.client_metadata_url, meta.client_id_metadata_document_supported) {
            return Ok(ClientCredentials {
                client_id: url.clone(),
                client_secret: None,
                auth_method: TokenAuthMethod::None,
            });
        }
        // A client registered earlier with this issuer (same redirect URI) is reused.
        if let Ok(Some(record)) = self.store.get(server, issuer) {
            if record.token_endpoint == meta.token_endpoint {
                return Ok(record.client);
            }
        }
        let Some(endpoint) = &meta.registration_endpoint else {
            return Err(AuthError::Registration(format!(
                "no client is configured for {server:?} and {issuer} offers neither Client ID Metadata Documents nor dynamic registration"
            )));
        };
        let wanted = pick_method(meta, false);
        let method_name = method_name(wanted);
        let mut body = json!({
            "client_name": self.client_name,
            "redirect_uris": [self.redirect_uri],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": method_name,
            "application_type": application_type(&self.redirect_uri),
        });
        if let Some(s) = scope {
            body["scope"] = json!(s);
        }
        let req = ureq::http::Request::builder()
            .method("POST")
            .uri(endpoint.as_str())
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(body.to_string().into_bytes())
            .map_err(|e| AuthError::Registration(format!("bad registration request: {e}")))?;
        let resp = self.agent.run(req).map_err(|e| AuthError::Registration(format!("POST {endpoint}: {e}")))?;
        let status = resp.status().as_u16();
        let v = read_json(resp.into_body()).unwrap_or(Value::Null);
        if !(200..300).contains(&status) {
            return Err(AuthError::Registration(format!(
                "{endpoint} refused the registration ({status}{})",
                oauth_error(&v)
            )));
        }
        let client_id = v.get("client_id").and_then(Value::as_str).ok_or_else(|| {
            AuthError::Registration(format!("{endpoint} answered the registration without a client_id"))
        })?;
        let secret = v.get("client_secret").and_then(Value::as_str).map(str::to_string);
        let method = match v.get("token_endpoint_auth_method").and_then(Value::as_str) {
            Some("client_secret_basic") => TokenAuthMethod::ClientSecretBasic,
            Some("client_secret_post") => TokenAuthMethod::ClientSecretPost,
            Some("none") => TokenAuthMethod::None,
            _ if secret.is_some() => pick_method(meta, true),
            _ => TokenAuthMethod::None,
        };
        Ok(ClientCredentials { client_id: client_id.to_string(), client_secret: secret, auth_method: method })
    }

    fn token_call(
        &self,
        endpoint: &str,
        client: &ClientCredentials,
        form: Vec<(&str, String)>,
    ) -> Result<flow::TokenResponse, AuthError> {
        let (body, headers) = flow::token_request(client, form);
        let mut req = ureq::http::Request::builder()
            .method("POST")
            .uri(endpoint)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("accept", "application/json");
        for (k, v) in &headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let req = req.body(body.into_bytes()).map_err(|e| AuthError::Token(format!("bad token request: {e}")))?;
        // ureq's error names the URL only; the body stays here.
        let resp = self.agent.run(req).map_err(|e| AuthError::Token(format!("POST {endpoint}: {e}")))?;
        let status = resp.status().as_u16();
        let v = read_json(resp.into_body())
            .map_err(|e| AuthError::Token(format!("{endpoint} answered {status}, and {e}")))?;
        if !(200..300).contains(&status) {
            return Err(AuthError::Token(format!("{endpoint} refused ({status}{})", oauth_error(&v))));
        }
        let tokens: flow::TokenResponse = serde_json::from_value(v)
            .map_err(|_| AuthError::Token(format!("{endpoint} answered without an access_token")))?;
        if let Some(t) = &tokens.token_type {
            if !t.eq_ignore_ascii_case("bearer") {
                return Err(AuthError::Token(format!("{endpoint} issued a {t:?} token; only Bearer is supported")));
            }
        }
        Ok(tokens)
    }

    /// `Ok(None)` for any refusal (the next candidate is tried); an error
    /// only when the body of a `200` is not JSON.
    fn get_json(&self, url: &str) -> Result<Option<Value>, AuthError> {
        let req = ureq::http::Request::builder()
            .method("GET")
            .uri(url)
            .header("accept", "application/json")
            .header("mcp-protocol-version", "2025-11-25")
            .body(())
            .map_err(|e| AuthError::Discovery(format!("{url}: {e}")))?;
        let resp = match self.agent.run(req) {
            Ok(r) => r,
            Err(e) => return Err(AuthError::Discovery(format!("GET {url}: {e}"))),
        };
        if resp.status().as_u16() != 200 {
            return Ok(None);
        }
        read_json(resp.into_body()).map(Some).map_err(|e| AuthError::Metadata(format!("{url}: {e}")))
    }
}

fn pick_method(meta: &AuthServerMetadata, has_secret: bool) -> TokenAuthMethod {
    // RFC 8414: an absent list means client_secret_basic only.
    let supported =
        meta.token_endpoint_auth_methods_supported.clone().unwrap_or_else(|| vec!["client_secret_basic".into()]);
    let has = |m: &str| supported.iter().any(|s| s == m);
    if !has_secret {
        return TokenAuthMethod::None;
    }
    if has("client_secret_basic") {
        TokenAuthMethod::ClientSecretBasic
    } else if has("client_secret_post") {
        TokenAuthMethod::ClientSecretPost
    } else {
        TokenAuthMethod::None
    }
}

/// OpenID DCR `application_type` (SEP-837): `native` for a loopback or
/// private-scheme redirect, `web` for any other.
fn application_type(redirect_uri: &str) -> &'static str {
    match discovery::split_url(redirect_uri) {
        Ok((origin, _)) => {
            let host = origin.split("://").nth(1).unwrap_or_default();
            let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
            if matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
                "native"
            } else {
                "web"
            }
        }
        Err(_) => "native",
    }
}

fn method_name(m: TokenAuthMethod) -> &'static str {
    match m {
        TokenAuthMethod::ClientSecretBasic => "client_secret_basic",
        TokenAuthMethod::ClientSecretPost => "client_secret_post",
        TokenAuthMethod::None => "none",
    }
}

/// `a` then what of `b` is not in it.
fn union_scopes(a: &str, b: &str) -> String {
    let mut out: Vec<&str> = a.split_ascii_whitespace().collect();
    for s in b.split_ascii_whitespace() {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out.join(" ")
}

fn read_json(body: ureq::Body) -> Result<Value, String> {
    let mut bytes = Vec::new();
    body.into_reader()
        .take(MAX_METADATA_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("reading the body: {e}"))?;
    serde_json::from_slice(&bytes).map_err(|_| "the body is not JSON".to_string())
}

/// `error` and `error_description` of an OAuth error body (nothing else of
/// it: a body may echo what was sent).
fn oauth_error(v: &Value) -> String {
    let error = v.get("error").and_then(Value::as_str);
    let desc = v.get("error_description").and_then(Value::as_str);
    match (error, desc) {
        (Some(e), Some(d)) => format!(": {e}: {d}"),
        (Some(e), None) => format!(": {e}"),
        _ => String::new(),
    }
}

/// The canonical URI of a server (RFC 8707): no fragment, no trailing slash.
fn canonical(url: &str) -> String {
    url.split('#').next().unwrap_or_default().trim_end_matches('/').to_string()
}

fn digest(token: &str) -> String {
    flow::s256_challenge(token)
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod pending_expiry_tests {
    use super::*;

    fn pending(server: &str, created_at: u64) -> PendingAuthorization {
        PendingAuthorization {
            server: server.into(),
            issuer: "https://as".into(),
            resource: "https://mcp".into(),
            token_endpoint: "https://as/token".into(),
            client: ClientCredentials {
                client_id: "c".into(),
                client_secret: None,
                auth_method: TokenAuthMethod::None,
            },
            redirect_uri: "http://127.0.0.1:8976/callback".into(),
            verifier: "v".repeat(43),
            state: "s-1".into(),
            scope: None,
            iss_required: false,
            created_at: Some(created_at),
        }
    }

    fn redirect(id: &str) -> Answer {
        let mut data = Map::new();
        data.insert("redirect_url".into(), json!("http://127.0.0.1:8976/callback?code=c&state=wrong"));
        Answer::ok(id, Some(data))
    }

    #[test]
    fn an_expired_login_is_refused_forgotten_and_swept() {
        let store = Arc::new(MemoryTokenStore::new());
        let auth = Authorizer::new(store.clone()).with_pending_ttl(Duration::from_secs(60));
        let now = unix_now();
        store.put_pending("authorize-old-1", &pending("old", now - 120)).unwrap();
        store.put_pending("authorize-older-1", &pending("older", now - 600)).unwrap();
        store.put_pending("authorize-new-1", &pending("new", now)).unwrap();
        let e = auth.complete(&redirect("authorize-old-1")).unwrap_err();
        assert_eq!(e, AuthError::Expired { server: "old".into(), minutes: 1 });
        assert!(e.to_string().contains("start it again"), "{e}");
        assert_eq!(store.get_pending("authorize-old-1").unwrap(), None, "its secrets are gone");
        assert_eq!(store.get_pending("authorize-older-1").unwrap(), None, "swept on the same access");
        // A fresh one is judged on its redirect (here a wrong `state`) and kept.
        let e = auth.complete(&redirect("authorize-new-1")).unwrap_err();
        assert!(matches!(e, AuthError::Redirect(_)), "{e:?}");
        assert!(store.get_pending("authorize-new-1").unwrap().is_some());
    }
}
