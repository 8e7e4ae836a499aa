//! What every request shares: upstreams, routes, client keys and their
//! limits, the upstream connection pool; and the per-request [`Ctx`] a
//! surface works through.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use nexus_proto::{ExchangeId, HttpRequest, Style, TransportErrorKind};

use super::config::{match_model, ConfigError, RouteFailover, ServeConfig};
use super::failover::Circuits;
use super::keys::KeyRing;
use super::limits::{Limiter, RateLimits, TokenUsage};
use super::ops::{Health, Metrics, Record};
use super::runtime;
use super::surface::{ErrorKind, GatewayError, Surface};
use crate::asynchronous::h1;

/// Upstream error bodies (and the small answers read whole besides the
/// model's: model lists, token counts) are capped here: they are messages.
pub(crate) const MAX_ERROR_BODY: usize = 1024 * 1024;

/// One upstream, as requests use it.
pub(crate) struct Upstream {
    pub(crate) name: String,
    pub(crate) style: Style,
    pub(crate) base_url: String,
    api_key: Option<String>,
    headers: Vec<(String, String)>,
    pub(crate) health: Health,
}

struct RouteRule {
    pattern: String,
    /// Each upstream with the model name it is sent, when it has its own.
    upstreams: Vec<(Arc<Upstream>, Option<String>)>,
    upstream_model: Option<String>,
    failover: RouteFailover,
    limits: RateLimits,
}

/// Everything the server's tasks share.
pub(crate) struct Shared {
    pub(crate) config: ServeConfig,
    pub(crate) upstreams: Vec<Arc<Upstream>>,
    routes: Vec<RouteRule>,
    pub(crate) keys: KeyRing,
    /// Request and token limits and budgets, counted here or in the shared store.
    pub(crate) limiter: Limiter,
    pool: Arc<h1::Pool>,
    pub(crate) metrics: Metrics,
    /// Every upstream's circuit breaker, shared by all requests.
    pub(crate) circuits: Circuits,
    pub(crate) surfaces: Vec<Arc<dyn Surface>>,
    pub(crate) stopping: AtomicBool,
    /// Connections being served, and the condition a shutdown waits on.
    pub(crate) active: Mutex<usize>,
    pub(crate) idle: Condvar,
    counter: AtomicU64,
    epoch: u64,
}

impl Shared {
    pub(crate) fn new(config: ServeConfig, surfaces: Vec<Arc<dyn Surface>>) -> Result<Shared, ConfigError> {
        let (ups, routes, keys) = config.resolved();
        let upstreams: Vec<Arc<Upstream>> = ups
            .into_iter()
            .map(|u| {
                Arc::new(Upstream {
                    base_url: u.base_url.unwrap_or_else(|| u.style.default_base_url().to_string()),
                    name: u.name,
                    style: u.style,
                    api_key: u.api_key,
                    headers: u.headers,
                    health: Health::default(),
                })
            })
            .collect();
        let routes = routes
            .into_iter()
            .map(|r| RouteRule {
                upstreams: r
                    .upstreams
                    .iter()
                    .enumerate()
                    .filter_map(|(i, n)| {
                        let up = upstreams.iter().find(|u| &u.name == n)?.clone();
                        Some((up, r.upstream_models.get(i).cloned().flatten()))
                    })
                    .collect(),
                pattern: r.model,
                upstream_model: r.upstream_model,
                failover: r.failover,
                limits: r.limits,
            })
            .collect();
        let keys = KeyRing::new(keys, config.keys_file.clone())?;
        let epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default();
        let breaker = config.breaker;
        let limiter = Limiter::new(config.limit_store.clone(), epoch);
        Ok(Shared {
            pool: Arc::new(h1::Pool::with_max_idle(config.upstream_connect_timeout, config.upstream_max_idle)),
            config,
            upstreams,
            routes,
            keys,
            metrics: Metrics::default(),
            circuits: Circuits::new(breaker, limiter.shared_circuits()),
            limiter,
            surfaces,
            stopping: AtomicBool::new(false),
            active: Mutex::new(0),
            idle: Condvar::new(),
            counter: AtomicU64::new(0),
            epoch,
        })
    }

    /// The limits of the route `model` takes (the first that matches), with its pattern.
    pub(crate) fn route_limits(&self, model: &str) -> Option<(&str, &RateLimits)> {
        let rule = self.routes.iter().find(|r| match_model(&r.pattern, model).is_some())?;
        (!rule.limits.is_empty()).then_some((rule.pattern.as_str(), &rule.limits))
    }

    /// Whether any route has limits.
    pub(crate) fn routes_limited(&self) -> bool {
        self.routes.iter().any(|r| !r.limits.is_empty())
    }
}

/// One upstream a route may send to, with the model name it is sent.
#[derive(Clone)]
pub struct Target {
    upstream: Arc<Upstream>,
    model: String,
}

impl Target {
    /// The upstream's configured name.
    pub fn upstream(&self) -> &str {
        &self.upstream.name
    }

    /// The upstream's wire format.
    pub fn style(&self) -> Style {
        self.upstream.style
    }

    /// The upstream's API root.
    pub fn base_url(&self) -> &str {
        &self.upstream.base_url
    }

    /// The model name to send upstream.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The key of this target's circuit breaker (style, base URL and model;
    /// see [`nexus_proto::Upstream::circuit_key`]).
    pub fn circuit_key(&self) -> String {
        nexus_proto::Upstream::circuit_key_of(self.upstream.style, &self.upstream.base_url, &self.model)
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("upstream", &self.upstream.name).field("model", &self.model).finish()
    }
}

/// Where a client model name goes: its upstream targets, in order.
///
/// A request is forwarded through [`targets`](Self::targets) in order; after
/// each failed attempt the core's [`FailoverPolicy`](nexus_proto::FailoverPolicy)
/// (in [`failover`](Self::failover)) says whether to retry, move on or stop.
#[derive(Debug, Clone)]
pub struct Route {
    /// The name the client asked for.
    pub client_model: String,
    /// The configured route pattern it matched (bounded: safe as a metric label).
    pub pattern: String,
    /// The first target.
    pub primary: Target,
    /// The targets after it, in the configured order.
    pub fallbacks: Vec<Target>,
    /// When a request moves on to the next target.
    pub failover: RouteFailover,
}

impl Route {
    /// The first target.
    pub fn primary(&self) -> &Target {
        &self.primary
    }

    /// Every target, in the configured order.
    pub fn targets(&self) -> impl Iterator<Item = &Target> {
        std::iter::once(&self.primary).chain(&self.fallbacks)
    }
}

/// One upstream request, as a surface builds it (the upstream's key and its
/// configured headers are added by [`Ctx::send`]).
#[derive(Debug, Clone)]
pub struct UpstreamRequest {
    /// `POST` or `GET`.
    pub method: &'static str,
    /// The full URL.
    pub url: String,
    /// Headers, without the upstream's auth header.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// The answer is a stream.
    pub stream: bool,
}

/// An upstream response head, and its body to read.
pub struct UpstreamResponse {
    /// The status.
    pub status: u16,
    /// The headers.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: UpstreamBody,
}

impl UpstreamResponse {
    /// The first header named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// An upstream body, read piece by piece. Dropping it closes the upstream
/// connection (unless the body was read to its end), which cancels the
/// upstream request.
pub struct UpstreamBody {
    body: h1::Body,
    read_timeout: Duration,
    deadline: Option<Instant>,
    /// When a piece last arrived (or the head did).
    progress: Instant,
    /// Fires at the earliest moment the body could count as stalled; armed
    /// once and moved on only when it fires early. A timer per read would
    /// cost a reactor wake-up per piece.
    watchdog: Option<runtime::Sleep>,
    upstream: Arc<Upstream>,
    /// The circuit a stall or a cut counts against.
    circuit: String,
    record: Arc<Record>,
    shared: Arc<Shared>,
    /// Bytes already read (a stream's first piece, or a whole body) that
    /// [`chunk`](Self::chunk) hands out before reading more.
    held: Option<Vec<u8>>,
    held_out: Vec<u8>,
    /// The body has been read to its end (into `held`).
    ended: bool,
    /// What the last failure was (`stalled`, `stream_cut`, `body_too_large`).
    failure: Option<&'static str>,
    /// The attempt's span and status: it ends when the body is done with.
    attempt: (super::trace::SpanHandle, u16),
}

impl Drop for UpstreamBody {
    fn drop(&mut self) {
        self.attempt.0.end(Some(self.attempt.1), self.failure);
    }
}

impl UpstreamBody {
    /// The next piece of the body; `None` at its end. A read that stays
    /// silent past the upstream read timeout (or the exchange's deadline) is
    /// a 504; a cut connection a 502.
    pub async fn chunk(&mut self) -> Result<Option<&[u8]>, GatewayError> {
        if let Some(held) = self.held.take() {
            self.held_out = held;
            return Ok(Some(&self.held_out));
        }
        if self.ended {
            return Ok(None);
        }
        let UpstreamBody { body, watchdog, progress, read_timeout, deadline, .. } = self;
        let stall_at = |progress: Instant| {
            let at = progress + *read_timeout;
            deadline.map_or(at, |d| at.min(d))
        };
        let read = loop {
            let timer = watchdog.get_or_insert_with(|| runtime::sleep_until(stall_at(*progress)));
            let woke = async { Some(body.read().await) }
                .or(async {
                    timer.await;
                    None
                })
                .await;
            match woke {
                Some(r) => break Some(r),
                None if Instant::now() >= stall_at(*progress) => break None,
                // Pieces came since it was armed: move it to the new moment.
                None => {
                    if let Some(t) = watchdog.as_mut() {
                        t.reset(stall_at(*progress));
                    }
                }
            }
        };
        if matches!(read, Some(Ok(_))) {
            self.progress = Instant::now();
        }
        match read {
            Some(Ok(0)) => Ok(None),
            Some(Ok(n)) => Ok(Some(self.body.chunk(n))),
            Some(Err(f)) => {
                let e = GatewayError::new(ErrorKind::Upstream, format!("the upstream stream failed: {}", f.message));
                self.failed("stream_cut");
                Err(e)
            }
            None => {
                self.failed("stalled");
                let silent = self.progress.elapsed().as_secs_f64();
                Err(GatewayError::new(ErrorKind::Timeout, format!("the upstream sent nothing for {silent:.1} s")))
            }
        }
    }

    /// The whole body, up to `cap` bytes.
    pub async fn read_to_end(&mut self, cap: usize) -> Result<Vec<u8>, GatewayError> {
        let mut out = Vec::new();
        while let Some(piece) = self.chunk().await? {
            out.extend_from_slice(piece);
            if out.len() > cap {
                self.failed("body_too_large");
                return Err(GatewayError::new(
                    ErrorKind::Upstream,
                    format!("the upstream response is over the {cap}-byte limit"),
                ));
            }
        }
        Ok(out)
    }

    /// Reads the first piece now and keeps it for [`chunk`](Self::chunk):
    /// a stream that fails before it has sent anything can still be
    /// answered by another upstream.
    pub(crate) async fn prefetch(&mut self) -> Result<(), GatewayError> {
        let first = self.chunk().await?.map(<[u8]>::to_vec);
        match first {
            Some(piece) => self.held = Some(piece),
            None => self.ended = true,
        }
        Ok(())
    }

    /// Reads the whole body now (up to `cap` bytes) and keeps it for
    /// [`chunk`](Self::chunk) and [`read_to_end`](Self::read_to_end).
    pub(crate) async fn buffer(&mut self, cap: usize) -> Result<(), GatewayError> {
        let all = self.read_to_end(cap).await?;
        self.ended = true;
        self.held = (!all.is_empty()).then_some(all);
        Ok(())
    }

    /// The piece [`prefetch`](Self::prefetch) read, not yet handed out.
    pub(crate) fn held(&self) -> Option<&[u8]> {
        self.held.as_deref()
    }

    /// What the last failure of this body was.
    pub(crate) fn failure(&self) -> Option<&'static str> {
        self.failure
    }

    fn failed(&mut self, what: &'static str) {
        self.failure = Some(what);
        self.shared.metrics.upstream_error(&self.upstream.name, what);
        self.record.note_upstream_error(what);
        if what != "body_too_large" {
            // A stall or a cut is the upstream's doing; a body over our cap is not.
            self.shared.circuits.failure(&self.circuit, &self.upstream.name);
        }
    }
}

/// What a surface works through for one request: routing, upstream calls,
/// and what the metrics and the access log should know.
#[derive(Clone)]
pub struct Ctx {
    pub(crate) shared: Arc<Shared>,
    pub(crate) record: Arc<Record>,
    /// The client's own key, kept only when it may be forwarded upstream.
    pub(crate) forward_key: Option<String>,
}

impl Ctx {
    /// The route for `client_model`: the first configured route whose
    /// pattern matches it. No match is a 404 (`ErrorKind::ModelNotFound`).
    pub fn route(&self, client_model: &str) -> Result<Route, GatewayError> {
        for rule in &self.shared.routes {
            let Some(captured) = match_model(&rule.pattern, client_model) else { continue };
            let model_for = |own: &Option<String>| match own.as_ref().or(rule.upstream_model.as_ref()) {
                None => client_model.to_string(),
                Some(m) => m.replacen('*', captured, 1),
            };
            let mut targets =
                rule.upstreams.iter().map(|(u, own)| Target { upstream: u.clone(), model: model_for(own) });
            let Some(primary) = targets.next() else { continue };
            return Ok(Route {
                client_model: client_model.to_string(),
                pattern: rule.pattern.clone(),
                primary,
                fallbacks: targets.collect(),
                failover: rule.failover,
            });
        }
        let mut e = GatewayError::new(
            ErrorKind::ModelNotFound,
            format!("The model `{client_model}` does not exist or you do not have access to it."),
        );
        e.param = Some("model".into());
        Err(e)
    }

    /// Whether routing depends on the model name at all (a single `*` route
    /// to one upstream without renaming does not: a surface may skip reading it).
    pub fn routes_by_model(&self) -> bool {
        !matches!(
            self.shared.routes.as_slice(),
            [r] if r.pattern == "*" && r.upstream_model.is_none() && r.upstreams.iter().all(|(_, own)| own.is_none())
        )
    }

    /// The models `GET /models` should list: the configured list, else the
    /// routes' exact (wildcard-free) names. Empty: ask [`default_route`](Self::default_route)'s upstream.
    pub fn listed_models(&self) -> Vec<String> {
        if !self.shared.config.models.is_empty() {
            return self.shared.config.models.clone();
        }
        self.shared.routes.iter().filter(|r| !r.pattern.contains('*')).map(|r| r.pattern.clone()).collect()
    }

    /// The route of the first rule (for requests that name no model, such as
    /// a model list, or when [`routes_by_model`](Self::routes_by_model) is false);
    /// its targets' model is empty (the request's own is sent).
    pub fn default_route(&self) -> Option<Route> {
        let rule = self.shared.routes.first()?;
        let mut targets = rule.upstreams.iter().map(|(u, _)| Target { upstream: u.clone(), model: String::new() });
        let primary = targets.next()?;
        Some(Route {
            client_model: String::new(),
            pattern: rule.pattern.clone(),
            primary,
            fallbacks: targets.collect(),
            failover: rule.failover,
        })
    }

    /// The configured cap on a whole (non-streamed) upstream body.
    pub fn max_upstream_body_bytes(&self) -> usize {
        self.shared.config.max_upstream_body_bytes
    }

    /// Records the model the request is for (bounded label cardinality is the
    /// metrics' business).
    pub fn note_model(&self, model: &str) {
        self.record.note_model(model);
    }

    /// Records the tokens an answer reported.
    pub fn note_usage(&self, input: u64, output: u64) {
        self.record.note_usage(TokenUsage { input, output, ..TokenUsage::default() });
    }

    /// Records the tokens an answer reported, cached and reasoning ones included.
    pub fn note_token_usage(&self, usage: TokenUsage) {
        self.record.note_usage(usage);
    }

    /// A response id unique in this process and across restarts:
    /// `<prefix><process epoch><counter>`.
    pub fn response_id(&self, prefix: &str) -> String {
        let n = self.shared.counter.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}{:016x}{n:x}", self.shared.epoch)
    }

    /// Seconds since the Unix epoch (response `created` fields).
    pub fn now_secs(&self) -> u64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
    }

    /// Sends one request to `target`'s upstream and reads the response head.
    /// Adds the upstream's key (or the client's, when forwarding is on) and
    /// its configured headers. Unreachable is a 502, no head within the
    /// exchange timeout a 504.
    pub async fn send(&self, target: &Target, req: UpstreamRequest) -> Result<UpstreamResponse, GatewayError> {
        self.send_within(target, req, None).await.map_err(|f| f.error)
    }

    /// [`send`](Self::send), waiting at most `head_timeout` for the response
    /// head (else the exchange timeout), and saying how it failed.
    pub(crate) async fn send_within(
        &self,
        target: &Target,
        req: UpstreamRequest,
        head_timeout: Option<Duration>,
    ) -> Result<UpstreamResponse, SendFailure> {
        let up = &target.upstream;
        self.record.note_upstream(&up.name);
        let mut headers = req.headers;
        headers.extend(up.headers.iter().cloned());
        // Each attempt is a span of its own; the upstream continues its trace.
        let attempt = self.record.span.attempt(&self.shared.config, target, &req.url, req.stream);
        if let Some(tp) = attempt.traceparent() {
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case("traceparent") && !k.eq_ignore_ascii_case("tracestate"));
            headers.push(("traceparent".to_string(), tp));
        }
        if let Some(key) = self.forward_key.as_deref().or(up.api_key.as_deref()).filter(|k| !k.is_empty()) {
            headers.push(up.style.auth_header(key));
        }
        let http = HttpRequest {
            exchange: ExchangeId(0),
            method: req.method,
            url: req.url,
            headers,
            body: req.body,
            streaming: req.stream,
        };
        let cfg = &self.shared.config;
        let deadline = cfg.upstream_timeout.map(|t| Instant::now() + t);
        let whole = cfg.upstream_timeout.unwrap_or(Duration::from_secs(365 * 24 * 3600));
        let head_wait = head_timeout.map_or(whole, |h| h.min(whole));
        let pool = &self.shared.pool;
        let sent = async { Some(h1::send(pool, &http).await) }
            .or(async {
                runtime::sleep(head_wait).await;
                None
            })
            .await;
        let fail = |what: &'static str, kind: TransportErrorKind, error: GatewayError| {
            self.shared.metrics.upstream_error(&up.name, what);
            self.record.note_upstream_error(what);
            attempt.end(None, Some(what));
            SendFailure { what, kind, error }
        };
        match sent {
            Some(Ok(resp)) => {
                up.health.set_ok();
                Ok(UpstreamResponse {
                    status: resp.status,
                    headers: resp.headers,
                    body: UpstreamBody {
                        body: resp.body,
                        read_timeout: cfg.upstream_read_timeout,
                        deadline,
                        progress: Instant::now(),
                        watchdog: None,
                        upstream: up.clone(),
                        circuit: target.circuit_key(),
                        record: self.record.clone(),
                        shared: self.shared.clone(),
                        held: None,
                        held_out: Vec::new(),
                        ended: false,
                        failure: None,
                        attempt: (attempt.clone(), resp.status),
                    },
                })
            }
            Some(Err(f)) => {
                let connect = f.kind == TransportErrorKind::Connect;
                if connect {
                    up.health.set_failed(&f.message);
                }
                let what = if connect { "connect" } else { "io" };
                Err(fail(
                    what,
                    f.kind,
                    GatewayError::new(ErrorKind::Upstream, format!("the upstream could not be reached: {}", f.message)),
                ))
            }
            None => Err(fail(
                "timeout",
                TransportErrorKind::Timeout,
                GatewayError::new(
                    ErrorKind::Timeout,
                    format!("the upstream did not answer within {:.0} s", head_wait.as_secs_f64()),
                ),
            )),
        }
    }
}

/// How an upstream call failed: the metric label, the kind the failover
/// policy judges, and the error for the client.
pub(crate) struct SendFailure {
    pub(crate) what: &'static str,
    pub(crate) kind: TransportErrorKind,
    pub(crate) error: GatewayError,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_targets_circuit_key_is_the_cores() {
        for (style, model) in [(Style::Anthropic, "claude-x"), (Style::OpenAi, ""), (Style::Gemini, "g 1")] {
            let upstream = Arc::new(Upstream {
                name: "u".into(),
                style,
                base_url: "http://127.0.0.1:9/v1".into(),
                api_key: None,
                headers: Vec::new(),
                health: Health::default(),
            });
            let target = Target { upstream: upstream.clone(), model: model.into() };
            let core = nexus_proto::Upstream { style, base_url: upstream.base_url.clone(), model: model.into() };
            assert_eq!(target.circuit_key(), core.circuit_key());
        }
    }
}
