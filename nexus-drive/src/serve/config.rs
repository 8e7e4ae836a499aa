//! The gateway's configuration: [`ServeConfig`], built in code (the
//! one-upstream shortcut the CLI flags fill) or read from a TOML file
//! ([`ServeConfig::from_toml`]).
//!
//! ```toml
//! listen = "127.0.0.1:8080"
//! log_requests = true
//! models = ["fast", "smart"]          # what GET /v1/models lists (optional)
//!
//! [limits]
//! max_body_bytes = 16777216
//! max_header_bytes = 65536
//! max_connections = 16384
//!
//! [timeouts]                          # seconds
//! request = 30                        # a request head and body, once begun
//! upstream_connect = 10
//! upstream = 600                      # one whole upstream exchange
//! upstream_read = 120                 # silence on an upstream stream before it counts as stalled
//! shutdown_grace = 60
//!
//! [[upstreams]]
//! name = "anthropic"
//! style = "anthropic"                 # anthropic | openai | gemini
//! base_url = "https://api.anthropic.com"
//! api_key_env = "ANTHROPIC_API_KEY"   # the key is read from the environment, never the file
//! headers = { "anthropic-beta" = "prompt-caching-2024-07-31" }
//!
//! [[routes]]
//! model = "fast"                      # the name clients ask for; `*` matches any run of characters
//! upstreams = ["anthropic"]           # tried in this order by the failover policy
//! upstream_model = "claude-haiku-4-5" # optional; `*` here takes what `*` matched
//!
//! [[routes]]
//! model = "smart"                     # a fallback of another provider needs its own model name:
//! upstreams = [{ name = "anthropic", model = "claude-sonnet-4-5" }, { name = "openai", model = "gpt-4.1" }]
//! max_failovers = 4                   # moves to a later upstream in one request
//! retries = 0                         # retries at the same upstream before moving on
//! retry_after_bound = 10              # seconds: a longer Retry-After moves on at once
//! head_timeout = 30                   # seconds without a response head: move on (default: timeouts.upstream)
//! rpm = 1000                          # limits on the route, every key together (also tpm, daily_tokens, monthly_tokens)
//!
//! [breaker]                           # one circuit per upstream and model, shared by every route
//! failures = 5                        # failures within `window` that open it
//! window = 30                         # seconds
//! cooldown = 30                       # seconds open before one probe request is let through
//!
//! [[keys]]
//! name = "team-a"                     # what logs and metrics show
//! key_env = "TEAM_A_KEY"              # or sha256 = "…" (hex of the key's SHA-256)
//! max_concurrent = 8                  # requests in flight at once (this instance); more get 429
//! rpm = 600                           # requests per minute (all instances)
//! tpm = 200000                        # input + output tokens per minute
//! daily_tokens = 5000000              # token budget per UTC day
//! monthly_tokens = 100000000          # token budget per UTC month
//! [[keys.models]]                     # the key's own limits on some models
//! model = "gpt-4*"
//! rpm = 60
//!
//! keys_file = "keys.toml"             # more [[keys]] (sha256 only), read again on SIGHUP
//!
//! [[prices]]                          # USD per million tokens, for the cost counter
//! model = "gpt-4.1*"
//! input = 2.0
//! output = 8.0
//! cached_input = 0.5
//!
//! [telemetry]                         # traces (SPEC §22.5; feature `otel`); else OTEL_EXPORTER_OTLP_ENDPOINT
//! endpoint = "http://127.0.0.1:4318/v1/traces"   # the whole OTLP/HTTP traces URL
//! timeout = 10                        # seconds per export (default 10)
//! ```
//!
//! `[limits]` also takes `store = "redis://HOST:PORT/DB"` (counters,
//! budgets and circuit states shared by every instance), `on_store_failure`
//! (`"open"`, the default: count locally while the store is unreachable;
//! `"closed"`: refuse limited requests) and `window` (seconds the per-minute
//! limits are counted over, 60 by default).
//!
//! Unknown keys are errors (a typo must not silently change what the gateway
//! does); every error names the table and field it is about.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::keys::{keys_from_file, rate_limits, FileKey};
use super::limits::{LimitStoreConfig, ModelLimits, ModelPrice, RateLimits, StoreFailure};

use nexus_proto::{BreakerPolicy, FailoverPolicy, RetryPolicy, Style};
use serde::Deserialize;

/// How the gateway runs.
///
/// Two ways to fill it: [`ServeConfig::new`] with the one-upstream fields
/// (`upstream_style`, `upstream_base_url`, `api_key`, `client_token`) — the
/// CLI flags — or [`ServeConfig::from_toml`], which fills [`upstreams`](Self::upstreams),
/// [`routes`](Self::routes) and [`keys`](Self::keys). When `upstreams` is
/// empty the one-upstream fields make one upstream named `default` with a
/// route `*` to it, and `client_token` one key named `default`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where request spans go (`None`: none are recorded).
    #[cfg(feature = "otel")]
    pub telemetry: Option<crate::telemetry::Telemetry>,
    /// The address to listen on (port 0 picks a free one; see [`Server::local_addr`](super::Server::local_addr)).
    pub listen: SocketAddr,
    /// The upstream's wire format (one-upstream form).
    pub upstream_style: Style,
    /// The upstream's API root; `None` is the style's public API (one-upstream form).
    pub upstream_base_url: Option<String>,
    /// The upstream key (one-upstream form). Kept in memory only, never logged.
    pub api_key: Option<String>,
    /// Send the client's own bearer token upstream instead of the upstream's key.
    /// Off by default: a client's credentials stay with the gateway.
    pub forward_client_key: bool,
    /// When set, clients must present it (one-upstream form of [`keys`](Self::keys)).
    pub client_token: Option<String>,
    /// Models `GET /v1/models` lists; empty lists the routes' exact names, or asks the upstream.
    pub models: Vec<String>,
    /// Upstreams by name (from a configuration file).
    pub upstreams: Vec<UpstreamConfig>,
    /// Model routes, first match wins (from a configuration file).
    pub routes: Vec<RouteConfig>,
    /// Client keys (from a configuration file). Empty (and no `client_token`): no key needed.
    pub keys: Vec<ClientKeyConfig>,
    /// Request bodies larger than this are refused with 413.
    pub max_body_bytes: usize,
    /// A request head (request line and headers) larger than this is refused.
    pub max_header_bytes: usize,
    /// Upstream response bodies (non-streaming) larger than this fail with 502.
    pub max_upstream_body_bytes: usize,
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// How long connecting to the upstream may take.
    pub upstream_connect_timeout: Duration,
    /// How long one upstream exchange may take, body included (`None`: no limit).
    pub upstream_timeout: Option<Duration>,
    /// How long an upstream may stay silent before its response counts as stalled.
    pub upstream_read_timeout: Duration,
    /// Idle upstream connections kept for reuse (all upstreams together).
    pub upstream_max_idle: usize,
    /// How long an idle keep-alive connection is kept.
    pub idle_timeout: Duration,
    /// How long a request may take to arrive once it has begun; also how long a
    /// response write may stay blocked on a client that does not read.
    pub request_timeout: Duration,
    /// How long a shutdown waits for requests and streams in flight.
    pub shutdown_grace: Duration,
    /// How often `/ready` re-checks that each upstream can be reached.
    pub probe_interval: Duration,
    /// Event loops, one thread each (0: one per CPU; default 1). Connections
    /// never get their own thread: they are dealt to the loops in turn, and
    /// a connection's socket, timers and upstream exchange stay on its loop,
    /// so no wake-up crosses threads. One is the default because a gateway
    /// usually shares its machine with what it fronts; give it more when it
    /// has cores of its own.
    pub threads: usize,
    /// Write one JSON line per request to stderr (never a body, a header or a key).
    pub log_requests: bool,
    /// When an upstream's circuit opens and for how long. One circuit per
    /// upstream and model ([`nexus_proto::Upstream::circuit_key`]), shared by
    /// every route and request of the process.
    pub breaker: BreakerPolicy,
    /// A file of more client keys (`[[keys]]` with `sha256`), read at start
    /// and again on [`KeysHandle::reload`](super::KeysHandle::reload).
    pub keys_file: Option<PathBuf>,
    /// Where request and token limits are counted, and over what window.
    pub limit_store: LimitStoreConfig,
    /// Model prices for the per-key cost counter (first match wins).
    pub prices: Vec<ModelPrice>,
    /// Where to send traces, from the file's `[telemetry]` table; the
    /// `nexus` binary builds its exporter (SPEC §22.5).
    pub otlp: Option<OtlpExport>,
}

/// The `[telemetry]` table: an OTLP/HTTP traces endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpExport {
    /// The whole traces URL (`…/v1/traces`), used as given.
    pub endpoint: String,
    /// How long one export may take.
    pub timeout: Duration,
}

/// One upstream provider endpoint.
#[derive(Clone)]
pub struct UpstreamConfig {
    /// Its name in routes, logs and metric labels.
    pub name: String,
    /// Its wire format.
    pub style: Style,
    /// Its API root; `None` is the style's public API.
    pub base_url: Option<String>,
    /// Its key (read from the environment by [`ServeConfig::from_toml`]). Never logged.
    pub api_key: Option<String>,
    /// Extra headers sent with every request to it.
    pub headers: Vec<(String, String)>,
}

impl fmt::Debug for UpstreamConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamConfig")
            .field("name", &self.name)
            .field("style", &self.style)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("headers", &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>())
            .finish()
    }
}

/// A model route: a client model name (or pattern) to upstreams in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConfig {
    /// The client's model name; `*` matches any run of characters.
    pub model: String,
    /// Upstream names, in the order [`failover`](Self::failover) tries them.
    pub upstreams: Vec<String>,
    /// Per entry of [`upstreams`](Self::upstreams) (same order; missing or
    /// `None`: [`upstream_model`](Self::upstream_model)), the model name
    /// sent to that upstream — a fallback of another provider needs its own.
    /// A `*` in it is filled as in `upstream_model`.
    pub upstream_models: Vec<Option<String>>,
    /// The model name sent upstream; `None` sends the client's. A `*` in it
    /// is replaced by what the first `*` of [`model`](Self::model) matched.
    pub upstream_model: Option<String>,
    /// When a request moves on to the next upstream (the core's policy).
    pub failover: RouteFailover,
    /// Limits on every request the route takes, whatever its key.
    pub limits: RateLimits,
}

impl RouteConfig {
    /// A route from `model` to `upstreams`, in order, with the default policy.
    pub fn new(model: impl Into<String>, upstreams: Vec<String>) -> RouteConfig {
        RouteConfig {
            model: model.into(),
            upstreams,
            upstream_models: Vec::new(),
            upstream_model: None,
            failover: RouteFailover::default(),
            limits: RateLimits::default(),
        }
    }
}

/// A route's failover settings: [`FailoverPolicy`] (how many moves, the
/// `Retry-After` bound, the head timeout) and the retries at one upstream
/// before moving on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteFailover {
    /// Which failures move on, and how often.
    pub policy: FailoverPolicy,
    /// Retries at the same upstream before moving on. The gateway's default
    /// is none: its clients retry on their own, and a second upstream is
    /// the faster help.
    pub retry: RetryPolicy,
}

impl Default for RouteFailover {
    fn default() -> Self {
        RouteFailover { policy: FailoverPolicy::default(), retry: RetryPolicy { retries: 0, ..RetryPolicy::default() } }
    }
}

/// A named client key.
#[derive(Clone)]
pub struct ClientKeyConfig {
    /// What logs and metrics show for requests with this key.
    pub name: String,
    /// The secret the client presents (empty when only its hash is known). Never logged.
    pub key: String,
    /// The secret's SHA-256, for keys kept only as a hash.
    pub key_sha256: Option<[u8; 32]>,
    /// A disabled key is refused with 401 (and can be enabled again by a reload).
    pub disabled: bool,
    /// Requests in flight at once with this key in this process; more get 429 (`None`: no limit).
    pub max_concurrent: Option<usize>,
    /// Request and token limits and budgets over all the key's models.
    pub limits: RateLimits,
    /// Limits of the key on the models a pattern matches, counted apart.
    pub models: Vec<ModelLimits>,
}

impl ClientKeyConfig {
    /// A key named `name` with secret `key` and no limits.
    pub fn new(name: impl Into<String>, key: impl Into<String>) -> ClientKeyConfig {
        ClientKeyConfig {
            name: name.into(),
            key: key.into(),
            key_sha256: None,
            disabled: false,
            max_concurrent: None,
            limits: RateLimits::default(),
            models: Vec::new(),
        }
    }
}

impl fmt::Debug for ClientKeyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientKeyConfig")
            .field("name", &self.name)
            .field("key", &"<redacted>")
            .field("disabled", &self.disabled)
            .field("max_concurrent", &self.max_concurrent)
            .field("limits", &self.limits)
            .field("models", &self.models)
            .finish()
    }
}

impl ServeConfig {
    /// Defaults: the style's public API, no key, 16 MiB request bodies, 64 KiB
    /// request heads, 16,384 connections, 10 s to connect, 10 min per upstream
    /// exchange, 120 s of upstream silence, 60 s idle, 30 s to receive a
    /// request, 60 s shutdown grace, a probe every 15 s.
    pub fn new(listen: SocketAddr, upstream_style: Style) -> ServeConfig {
        ServeConfig {
            listen,
            upstream_style,
            upstream_base_url: None,
            api_key: None,
            forward_client_key: false,
            client_token: None,
            models: Vec::new(),
            upstreams: Vec::new(),
            routes: Vec::new(),
            keys: Vec::new(),
            max_body_bytes: 16 * 1024 * 1024,
            max_header_bytes: 64 * 1024,
            max_upstream_body_bytes: 64 * 1024 * 1024,
            max_connections: 16 * 1024,
            upstream_connect_timeout: Duration::from_secs(10),
            upstream_timeout: Some(Duration::from_secs(600)),
            upstream_read_timeout: Duration::from_secs(120),
            upstream_max_idle: 1024,
            idle_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(60),
            probe_interval: Duration::from_secs(15),
            threads: 1,
            log_requests: false,
            breaker: BreakerPolicy::default(),
            keys_file: None,
            limit_store: LimitStoreConfig::default(),
            prices: Vec::new(),
            otlp: None,
            #[cfg(feature = "otel")]
            telemetry: None,
        }
    }

    /// Traces every request: a SERVER span continuing the client's
    /// `traceparent`, a CLIENT `chat` span per upstream attempt, the
    /// context sent upstream (SPEC §22.5).
    #[cfg(feature = "otel")]
    pub fn telemetry(mut self, telemetry: crate::telemetry::Telemetry) -> ServeConfig {
        self.telemetry = Some(telemetry);
        self
    }

    /// Sets the upstream API root.
    pub fn upstream_base_url(mut self, url: impl Into<String>) -> ServeConfig {
        self.upstream_base_url = Some(url.into());
        self
    }

    /// Reads the upstream key from the environment variable `var` (left
    /// unset when the variable is missing or empty).
    pub fn api_key_from_env(mut self, var: &str) -> ServeConfig {
        self.api_key = std::env::var(var).ok().filter(|k| !k.is_empty());
        self
    }

    /// Sets the upstream key.
    pub fn api_key(mut self, key: impl Into<String>) -> ServeConfig {
        self.api_key = Some(key.into());
        self
    }

    /// Reads a configuration file's text. `env` looks up environment
    /// variables (`|v| std::env::var(v).ok()` in the CLI), so keys never sit
    /// in the file. A missing `listen` is `127.0.0.1:8080`.
    pub fn from_toml(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<ServeConfig, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| ConfigError(e.to_string().trim_end().to_string()))?;
        file.into_config(&env)
    }

    /// The upstreams, routes and keys in effect: the configured ones, or the
    /// one-upstream form's.
    pub(crate) fn resolved(&self) -> (Vec<UpstreamConfig>, Vec<RouteConfig>, Vec<ClientKeyConfig>) {
        if !self.upstreams.is_empty() {
            return (self.upstreams.clone(), self.routes.clone(), self.keys.clone());
        }
        let upstream = UpstreamConfig {
            name: "default".into(),
            style: self.upstream_style,
            base_url: self.upstream_base_url.clone(),
            api_key: self.api_key.clone(),
            headers: Vec::new(),
        };
        let route = RouteConfig::new("*", vec!["default".into()]);
        let mut keys = self.keys.clone();
        if let Some(token) = &self.client_token {
            keys.push(ClientKeyConfig::new("default", token.clone()));
        }
        (vec![upstream], vec![route], keys)
    }
}

/// A configuration that cannot be used, with what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

// ------------------------------------------------------------------ the file

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    listen: Option<String>,
    #[serde(default)]
    log_requests: Option<bool>,
    #[serde(default)]
    forward_client_key: bool,
    #[serde(default)]
    models: Vec<String>,
    #[serde(default)]
    threads: Option<usize>,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    timeouts: Timeouts,
    #[serde(default)]
    upstreams: Vec<FileUpstream>,
    #[serde(default)]
    routes: Vec<FileRoute>,
    #[serde(default)]
    keys: Vec<FileKey>,
    #[serde(default)]
    breaker: FileBreaker,
    keys_file: Option<PathBuf>,
    #[serde(default)]
    prices: Vec<FilePrice>,
    telemetry: Option<FileTelemetry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTelemetry {
    endpoint: String,
    timeout: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePrice {
    model: String,
    input: f64,
    output: f64,
    cached_input: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileBreaker {
    failures: Option<u32>,
    window: Option<f64>,
    cooldown: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Limits {
    max_body_bytes: Option<usize>,
    max_header_bytes: Option<usize>,
    max_upstream_body_bytes: Option<usize>,
    max_connections: Option<usize>,
    upstream_max_idle: Option<usize>,
    store: Option<String>,
    on_store_failure: Option<String>,
    window: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Timeouts {
    request: Option<f64>,
    idle: Option<f64>,
    upstream_connect: Option<f64>,
    upstream: Option<f64>,
    upstream_read: Option<f64>,
    shutdown_grace: Option<f64>,
    probe_interval: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileUpstream {
    name: String,
    style: String,
    base_url: Option<String>,
    api_key_env: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRoute {
    model: String,
    upstream: Option<String>,
    #[serde(default)]
    upstreams: Vec<FileTarget>,
    upstream_model: Option<String>,
    max_failovers: Option<u32>,
    retries: Option<u32>,
    retry_after_bound: Option<f64>,
    head_timeout: Option<f64>,
    rpm: Option<u64>,
    tpm: Option<u64>,
    daily_tokens: Option<u64>,
    monthly_tokens: Option<u64>,
}

/// A route's upstream: its name, or `{ name, model }`.
#[derive(Deserialize)]
#[serde(untagged)]
enum FileTarget {
    Name(String),
    WithModel(FileTargetModel),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTargetModel {
    name: String,
    model: Option<String>,
}

fn secs(field: &str, v: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(bad(format!("timeouts.{field}: {s} is not a positive number of seconds"))),
    }
}

/// Seconds as whole milliseconds, for the core's policies.
fn millis(owner: &str, field: &str, v: Option<f64>, default: u64) -> Result<u64, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) if s.is_finite() && s > 0.0 && s < 1e9 => Ok((s * 1000.0).round().max(1.0) as u64),
        Some(s) => Err(bad(format!("{owner}.{field}: {s} is not a positive number of seconds"))),
    }
}

/// Header names and values as HTTP allows them (token names, visible ASCII values).
fn check_header(owner: &str, name: &str, value: &str) -> Result<(), ConfigError> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(bad(format!("{owner}: header name {name:?} is not a valid HTTP header name")));
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(bad(format!("{owner}: header {name} has a control character in its value")));
    }
    Ok(())
}

impl File {
    fn into_config(self, env: &dyn Fn(&str) -> Option<String>) -> Result<ServeConfig, ConfigError> {
        let listen = match &self.listen {
            None => SocketAddr::from(([127, 0, 0, 1], 8080)),
            Some(l) => l.parse().map_err(|e| bad(format!("listen: {l:?} is not an address:port ({e})")))?,
        };
        if self.upstreams.is_empty() {
            return Err(bad("no [[upstreams]]: the gateway needs at least one upstream"));
        }
        let mut upstreams: Vec<UpstreamConfig> = Vec::new();
        for (i, u) in self.upstreams.into_iter().enumerate() {
            let at = format!("upstreams[{i}] ({:?})", u.name);
            if u.name.is_empty() {
                return Err(bad(format!("upstreams[{i}]: name is empty")));
            }
            if upstreams.iter().any(|x| x.name == u.name) {
                return Err(bad(format!("{at}: the name is used by an earlier upstream")));
            }
            let style = Style::parse(&u.style).ok_or_else(|| {
                bad(format!("{at}: style {:?} is not one of anthropic, openai, openai-responses, gemini", u.style))
            })?;
            if let Some(url) = &u.base_url {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(bad(format!("{at}: base_url {url:?} must start with http:// or https://")));
                }
            }
            let api_key = match &u.api_key_env {
                None => None,
                Some(var) => Some(env(var).filter(|k| !k.is_empty()).ok_or_else(|| {
                    bad(format!("{at}: api_key_env names {var}, which is not set in the environment"))
                })?),
            };
            let mut headers = Vec::new();
            for (k, v) in u.headers {
                check_header(&at, &k, &v)?;
                headers.push((k.to_ascii_lowercase(), v));
            }
            upstreams.push(UpstreamConfig { name: u.name, style, base_url: u.base_url, api_key, headers });
        }
        let mut routes = Vec::new();
        for (i, r) in self.routes.into_iter().enumerate() {
            let at = format!("routes[{i}] ({:?})", r.model);
            if r.model.is_empty() {
                return Err(bad(format!("routes[{i}]: model is empty")));
            }
            let mut names = r.upstream.into_iter().collect::<Vec<_>>();
            let mut models = vec![None; names.len()];
            for t in r.upstreams {
                let (name, model) = match t {
                    FileTarget::Name(n) => (n, None),
                    FileTarget::WithModel(FileTargetModel { name, model }) => (name, model),
                };
                if model.as_deref().is_some_and(|m| m.contains('*')) && !r.model.contains('*') {
                    return Err(bad(format!("{at}: the model for {name:?} has a `*` but model has none to fill it")));
                }
                names.push(name);
                models.push(model);
            }
            if names.is_empty() {
                return Err(bad(format!("{at}: give upstream = \"name\" or upstreams = [\"a\", \"b\"]")));
            }
            for n in &names {
                if !upstreams.iter().any(|u| &u.name == n) {
                    let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
                    return Err(bad(format!("{at}: no upstream is named {n:?} (known: {})", known.join(", "))));
                }
            }
            if r.upstream_model.as_deref().is_some_and(|m| m.contains('*')) && !r.model.contains('*') {
                return Err(bad(format!("{at}: upstream_model has a `*` but model has none to fill it")));
            }
            let defaults = RouteFailover::default();
            let policy = FailoverPolicy {
                max_failovers: r.max_failovers.unwrap_or(defaults.policy.max_failovers),
                retry_after_bound_ms: millis(
                    &at,
                    "retry_after_bound",
                    r.retry_after_bound,
                    defaults.policy.retry_after_bound_ms,
                )?,
                head_timeout_ms: r.head_timeout.map(|s| millis(&at, "head_timeout", Some(s), 0)).transpose()?,
            };
            let retry = RetryPolicy { retries: r.retries.unwrap_or(defaults.retry.retries), ..defaults.retry };
            let limits = rate_limits(&at, r.rpm, r.tpm, r.daily_tokens, r.monthly_tokens)?;
            routes.push(RouteConfig {
                model: r.model,
                upstreams: names,
                upstream_models: models,
                upstream_model: r.upstream_model,
                failover: RouteFailover { policy, retry },
                limits,
            });
        }
        if routes.is_empty() {
            // One upstream and no routes: everything goes to it, as with the flags.
            if upstreams.len() > 1 {
                return Err(bad("no [[routes]]: with several upstreams, say which models go where"));
            }
            let name = upstreams.first().map(|u| u.name.clone()).unwrap_or_default();
            routes.push(RouteConfig::new("*", vec![name]));
        }
        let keys = keys_from_file(self.keys, env)?;
        let first = upstreams.first().map(|u| u.style).unwrap_or(Style::OpenAi);
        let mut c = ServeConfig::new(listen, first);
        let l = self.limits;
        let t = self.timeouts;
        let positive = |field: &str, v: Option<usize>, default: usize| match v {
            Some(0) => Err(bad(format!("limits.{field}: must be more than 0"))),
            Some(n) => Ok(n),
            None => Ok(default),
        };
        c.max_body_bytes = positive("max_body_bytes", l.max_body_bytes, c.max_body_bytes)?;
        c.max_header_bytes = positive("max_header_bytes", l.max_header_bytes, c.max_header_bytes)?;
        if c.max_header_bytes < 8192 {
            return Err(bad("limits.max_header_bytes: at least 8192 (the HTTP/1.1 parser's floor)"));
        }
        c.max_upstream_body_bytes =
            positive("max_upstream_body_bytes", l.max_upstream_body_bytes, c.max_upstream_body_bytes)?;
        c.max_connections = positive("max_connections", l.max_connections, c.max_connections)?;
        c.upstream_max_idle = l.upstream_max_idle.unwrap_or(c.upstream_max_idle);
        c.request_timeout = secs("request", t.request, c.request_timeout)?;
        c.idle_timeout = secs("idle", t.idle, c.idle_timeout)?;
        c.upstream_connect_timeout = secs("upstream_connect", t.upstream_connect, c.upstream_connect_timeout)?;
        c.upstream_timeout = Some(secs("upstream", t.upstream, Duration::from_secs(600))?);
        c.upstream_read_timeout = secs("upstream_read", t.upstream_read, c.upstream_read_timeout)?;
        c.shutdown_grace = secs("shutdown_grace", t.shutdown_grace, c.shutdown_grace)?;
        c.probe_interval = secs("probe_interval", t.probe_interval, c.probe_interval)?;
        c.threads = self.threads.unwrap_or(1);
        c.log_requests = self.log_requests.unwrap_or(true);
        c.forward_client_key = self.forward_client_key;
        let b = self.breaker;
        let d = BreakerPolicy::default();
        if b.failures == Some(0) {
            return Err(bad("breaker.failures: must be more than 0"));
        }
        c.breaker = BreakerPolicy {
            failures: b.failures.unwrap_or(d.failures),
            window_ms: millis("breaker", "window", b.window, d.window_ms)?,
            cooldown_ms: millis("breaker", "cooldown", b.cooldown, d.cooldown_ms)?,
        };
        c.limit_store = limit_store(&l.store, &l.on_store_failure, l.window)?;
        for (i, p) in self.prices.into_iter().enumerate() {
            let ok = |v: f64| v.is_finite() && v >= 0.0;
            if p.model.is_empty() || !ok(p.input) || !ok(p.output) || !p.cached_input.is_none_or(ok) {
                return Err(bad(format!("prices[{i}] ({:?}): a model and prices of 0 or more", p.model)));
            }
            c.prices.push(ModelPrice {
                model: p.model,
                input: p.input,
                output: p.output,
                cached_input: p.cached_input,
            });
        }
        if let Some(t) = self.telemetry {
            if !(t.endpoint.starts_with("http://") || t.endpoint.starts_with("https://")) {
                return Err(bad(format!("telemetry: endpoint {:?} must start with http:// or https://", t.endpoint)));
            }
            let timeout = millis("telemetry", "timeout", t.timeout, 10_000)?;
            c.otlp = Some(OtlpExport { endpoint: t.endpoint, timeout: Duration::from_millis(timeout) });
        }
        c.keys_file = self.keys_file;
        c.models = self.models;
        c.upstreams = upstreams;
        c.routes = routes;
        c.keys = keys;
        Ok(c)
    }
}

/// The `[limits]` fields of the shared store.
fn limit_store(
    store: &Option<String>,
    on_failure: &Option<String>,
    window: Option<f64>,
) -> Result<LimitStoreConfig, ConfigError> {
    let d = LimitStoreConfig::default();
    if let Some(url) = store {
        let scheme = url.split_once("://").map(|(s, _)| s);
        if !matches!(scheme, Some("redis" | "rediss" | "redis+unix" | "unix" | "valkey" | "valkeys")) {
            return Err(bad(format!("limits.store: {url:?} must be a redis:// (or rediss://) URL")));
        }
        if cfg!(not(feature = "redis")) {
            return Err(bad("limits.store: this build has no shared store (the `redis` feature of nexus-drive)"));
        }
    }
    let on_failure = match on_failure.as_deref() {
        None | Some("open") => StoreFailure::Open,
        Some("closed") => StoreFailure::Closed,
        Some(other) => return Err(bad(format!("limits.on_store_failure: {other:?} is not \"open\" or \"closed\""))),
    };
    Ok(LimitStoreConfig {
        url: store.clone(),
        on_failure,
        window: Duration::from_millis(millis("limits", "window", window, d.window.as_millis() as u64)?),
    })
}

/// Whether `name` matches `pattern` (`*` = any run of characters), and what
/// the first `*` matched.
pub(crate) fn match_model<'a>(pattern: &str, name: &'a str) -> Option<&'a str> {
    let Some((head, rest)) = pattern.split_once('*') else {
        return (pattern == name).then_some("");
    };
    let tail = name.strip_prefix(head)?;
    // The first `*` takes the shortest run that lets the rest match.
    (0..=tail.len()).filter(|i| tail.is_char_boundary(*i)).find_map(|i| {
        let (captured, after) = tail.split_at(i);
        glob(rest, after).then_some(captured)
    })
}

fn glob(pattern: &str, s: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == s,
        Some((head, rest)) => match s.strip_prefix(head) {
            None => false,
            Some(tail) => (0..=tail.len()).filter(|i| tail.is_char_boundary(*i)).any(|i| glob(rest, &tail[i..])),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(var: &str) -> Option<String> {
        match var {
            "A_KEY" => Some("sk-a".into()),
            "TEAM_KEY" => Some("team-secret".into()),
            "OTHER_KEY" => Some("other-secret".into()),
            _ => None,
        }
    }

    const GOOD: &str = r#"
listen = "127.0.0.1:0"
[limits]
max_body_bytes = 1000
[timeouts]
upstream_read = 1.5
[[upstreams]]
name = "a"
style = "anthropic"
base_url = "http://127.0.0.1:9/"
api_key_env = "A_KEY"
headers = { "X-Extra" = "1" }
[[upstreams]]
name = "o"
style = "openai"
[[routes]]
model = "claude-*"
upstreams = ["a", { name = "o", model = "gpt-*" }]
upstream_model = "real-*"
max_failovers = 1
retries = 2
head_timeout = 2.5
[[routes]]
model = "*"
upstream = "o"
[[keys]]
name = "team"
key_env = "TEAM_KEY"
max_concurrent = 2
[breaker]
failures = 3
cooldown = 0.5
"#;

    #[test]
    fn a_full_file_is_read_with_keys_from_the_environment() {
        let c = ServeConfig::from_toml(GOOD, env).unwrap();
        assert_eq!(c.max_body_bytes, 1000);
        assert_eq!(c.upstream_read_timeout, Duration::from_millis(1500));
        assert_eq!(c.upstreams.len(), 2);
        assert_eq!(c.upstreams[0].api_key.as_deref(), Some("sk-a"));
        assert_eq!(c.upstreams[0].headers, vec![("x-extra".to_string(), "1".to_string())]);
        let f = c.routes[0].failover;
        assert_eq!((f.policy.max_failovers, f.retry.retries, f.policy.head_timeout_ms), (1, 2, Some(2500)));
        assert_eq!(f.policy.retry_after_bound_ms, FailoverPolicy::default().retry_after_bound_ms);
        assert_eq!(c.routes[1].failover, RouteFailover::default());
        assert_eq!(c.routes[1].failover.retry.retries, 0, "the gateway moves on instead of retrying");
        assert_eq!((c.breaker.failures, c.breaker.cooldown_ms), (3, 500));
        assert_eq!(c.breaker.window_ms, BreakerPolicy::default().window_ms);
        assert_eq!(c.upstreams[1].style, Style::OpenAi);
        assert_eq!(c.routes[0].upstreams, vec!["a", "o"]);
        assert_eq!(c.routes[0].upstream_models, vec![None, Some("gpt-*".to_string())]);
        assert_eq!(c.keys[0].key, "team-secret");
        assert_eq!(c.keys[0].max_concurrent, Some(2));
        // Secrets stay out of Debug output.
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("sk-a") && !dbg.contains("team-secret"), "{dbg}");
    }

    #[test]
    fn errors_name_what_is_wrong_and_where() {
        let cases: &[(&str, &str)] = &[
            ("listen = 5", "listen"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"anthropic\"\nbase_urll = \"x\"", "base_urll"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"cohere\"", "style \"cohere\""),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\napi_key_env = \"NOPE\"", "NOPE, which is not set"),
            (
                "[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n[[routes]]\nmodel = \"m\"\nupstream = \"b\"",
                "no upstream is named \"b\" (known: a)",
            ),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n[[upstreams]]\nname = \"a\"\nstyle = \"openai\"", "used by an earlier upstream"),
            ("listen = \"127.0.0.1:1\"", "no [[upstreams]]"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n[timeouts]\nrequest = -1", "timeouts.request"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\nheaders = { \"bad name\" = \"1\" }", "not a valid HTTP header name"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n[[keys]]\nname = \"k\"\nkey_env = \"TEAM_KEY\"\nmax_concurrent = 0", "max_concurrent = 0"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n[[keys]]\nname = \"k\"\nkey_env = \"TEAM_KEY\"\n[[keys]]\nname = \"j\"\nkey_env = \"TEAM_KEY\"", "same secret"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n[[upstreams]]\nname = \"b\"\nstyle = \"openai\"", "no [[routes]]"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n[[routes]]\nmodel = \"m\"\nupstream = \"a\"\nupstream_model = \"x-*\"", "has a `*` but model has none"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\nbase_url = \"ftp://x\"", "must start with http"),
            ("[[upstreams]\nname = \"a\"", "line 1"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n[breaker]\nfailures = 0", "breaker.failures"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n[breaker]\ncooldown = -2", "breaker.cooldown"),
            ("[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n[[routes]]\nmodel = \"m\"\nupstream = \"a\"\nhead_timeout = 0", "head_timeout"),
        ];
        for (text, want) in cases {
            let e = ServeConfig::from_toml(text, env).expect_err(text).0;
            assert!(e.contains(want), "{text:?}: {e:?} should mention {want:?}");
            assert!(!e.contains("team-secret"), "{e}");
        }
    }

    #[test]
    fn one_upstream_without_routes_takes_every_model() {
        let c = ServeConfig::from_toml("[[upstreams]]\nname = \"only\"\nstyle = \"gemini\"", env).unwrap();
        assert_eq!(c.routes, vec![RouteConfig::new("*", vec!["only".into()])]);
        assert!(c.log_requests);
    }

    #[test]
    fn wildcards_match_and_capture() {
        assert_eq!(match_model("claude-*", "claude-sonnet"), Some("sonnet"));
        assert_eq!(match_model("*", "anything"), Some("anything"));
        assert_eq!(match_model("exact", "exact"), Some(""));
        assert_eq!(match_model("exact", "exactly"), None);
        assert_eq!(match_model("a*-fast", "abc-fast"), Some("bc"));
        assert_eq!(match_model("a*-fast", "abc-slow"), None);
        assert_eq!(match_model("*-*", "x-y-z"), Some("x"));
        assert_eq!(match_model("gpt-*", "gpt-é"), Some("é"));
    }

    #[test]
    fn the_telemetry_table_names_a_traces_endpoint() {
        let base = "[[upstreams]]\nname = \"a\"\nstyle = \"openai\"\n";
        let with = |table: &str| ServeConfig::from_toml(&format!("{table}\n{base}"), env);
        let c = with("[telemetry]\nendpoint = \"http://127.0.0.1:4318/v1/traces\"\ntimeout = 2.5").unwrap();
        let expected =
            OtlpExport { endpoint: "http://127.0.0.1:4318/v1/traces".into(), timeout: Duration::from_millis(2500) };
        assert_eq!(c.otlp, Some(expected));
        assert_eq!(with("").unwrap().otlp, None);
        let e = with("[telemetry]\nendpoint = \"udp://x\"").unwrap_err();
        assert!(e.0.contains("telemetry: endpoint"), "{e}");
        assert!(with("[telemetry]\nendpoint = \"http://x\"\ntimeout = -1")
            .unwrap_err()
            .0
            .contains("telemetry.timeout"));
        assert!(with("[telemetry]\nendpoint = \"http://x\"\nsampler = 1").is_err(), "unknown fields are refused");
    }
}
