//! Per-key request and token limits, token budgets, and where they are
//! counted: in this process, or in Redis/Valkey shared by every instance.
//!
//! A request is admitted against every limit that applies to it at once
//! (its key's, and those of its key's model patterns it matches): one
//! atomic check-and-record, so two instances never both take the last slot.
//!
//! * Request and token limits count over a **sliding window**
//!   ([`LimitStoreConfig::window`], 60 s by default, the limits scaled to
//!   it): each admission is logged with its time, and a request is admitted
//!   while fewer than the limit's requests (or tokens) are in the last
//!   window. Unlike a fixed window this never lets twice the limit through
//!   around a window boundary, and the wait it reports is exact: when the
//!   oldest admission leaves the window.
//! * Token budgets count per **calendar period** (UTC day, UTC month): one
//!   running total per period.
//! * Tokens: the request's estimate (its body's size in bytes / 4, plus
//!   the output it allows) is reserved at admission; when the answer ends
//!   the reservation is replaced by the tokens the upstream reported
//!   (streams included). A request admitted while any token is left may
//!   end over the limit by its own tokens, never more when estimates hold.

mod local;
#[cfg(feature = "redis")]
mod redis;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;

use super::config::match_model;
use super::surface::{ErrorKind, GatewayError};
pub(crate) use local::LocalCounters;

/// Request and token limits, each optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimits {
    /// Requests per minute.
    pub rpm: Option<u64>,
    /// Input + output tokens per minute.
    pub tpm: Option<u64>,
    /// Input + output tokens per UTC day.
    pub daily_tokens: Option<u64>,
    /// Input + output tokens per UTC month.
    pub monthly_tokens: Option<u64>,
}

impl RateLimits {
    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == RateLimits::default()
    }
}

/// A key's own limits for the models a pattern matches (the client's model
/// name; `*` matches any run of characters), counted apart from its other models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLimits {
    /// The pattern.
    pub model: String,
    /// Its limits.
    pub limits: RateLimits,
}

/// What happens when the shared store cannot be reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StoreFailure {
    /// Keep serving, counting in this process until the store is back.
    #[default]
    Open,
    /// Refuse limited requests with 503 until the store is back.
    Closed,
}

/// Where limits are counted.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitStoreConfig {
    /// `redis://HOST:PORT/DB` (or `rediss://`, `redis+unix://`): counters,
    /// budgets and circuit states shared through Redis or Valkey. `None`:
    /// in this process.
    pub url: Option<String>,
    /// What a request does when the shared store is unreachable.
    pub on_failure: StoreFailure,
    /// The sliding window request and token limits count over; the per-minute
    /// limits are scaled to it (`rpm = 600` with a 6 s window: 60 per 6 s).
    pub window: Duration,
}

impl Default for LimitStoreConfig {
    fn default() -> Self {
        LimitStoreConfig { url: None, on_failure: StoreFailure::Open, window: Duration::from_secs(60) }
    }
}

/// A model's price, in US dollars per million tokens, for the cost counter.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPrice {
    /// The client's model name or pattern (`*` matches any run of characters).
    pub model: String,
    /// Per million input tokens (cached ones excepted when they have their own price).
    pub input: f64,
    /// Per million output tokens (reasoning included).
    pub output: f64,
    /// Per million cached input tokens (`None`: as `input`).
    pub cached_input: Option<f64>,
}

/// Tokens one answer reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Input tokens, cached ones included.
    pub input: u64,
    /// Output tokens, reasoning included.
    pub output: u64,
    /// Input tokens read from the provider's cache.
    pub cached: u64,
    /// Output tokens spent reasoning.
    pub reasoning: u64,
}

impl TokenUsage {
    /// Input plus output: what token limits count.
    pub fn total(&self) -> u64 {
        self.input + self.output
    }
}

/// The cost of `usage` at the first price whose pattern matches `model`.
pub(crate) fn cost(prices: &[ModelPrice], model: &str, usage: &TokenUsage) -> Option<f64> {
    let p = prices.iter().find(|p| match_model(&p.model, model).is_some())?;
    let cached = usage.cached.min(usage.input);
    let cached_price = p.cached_input.unwrap_or(p.input);
    Some(
        ((usage.input - cached) as f64 * p.input + cached as f64 * cached_price + usage.output as f64 * p.output) / 1e6,
    )
}

// ------------------------------------------------------------- the circuits

/// A circuit opened or closed here, for the other instances.
// Read only by the shared store's thread.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) enum CircuitChange {
    Opened { key: String, upstream: String, for_ms: u64 },
    Closed { key: String },
}

/// Circuits every instance sees: the ones opened anywhere (read from the
/// shared store every 200 ms), and where this instance's changes go.
pub(crate) struct SharedCircuits {
    /// Circuit key → (open until, on this process's clock; upstream name).
    open: Arc<Mutex<HashMap<String, (u64, String)>>>,
    publish: Box<dyn Fn(CircuitChange) + Send + Sync>,
}

impl SharedCircuits {
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn new(
        open: Arc<Mutex<HashMap<String, (u64, String)>>>,
        publish: Box<dyn Fn(CircuitChange) + Send + Sync>,
    ) -> SharedCircuits {
        SharedCircuits { open, publish }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u64, String)>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Until when circuit `key` is open elsewhere (`None`: it is not).
    pub(crate) fn open_until(&self, key: &str, now_ms: u64) -> Option<u64> {
        self.lock().get(key).map(|(until, _)| *until).filter(|until| *until > now_ms)
    }

    /// The circuits of `upstream` open elsewhere, with when each closes.
    pub(crate) fn open_of(&self, upstream: &str, now_ms: u64) -> Vec<(String, u64)> {
        self.lock()
            .iter()
            .filter(|(_, (until, owner))| owner == upstream && *until > now_ms)
            .map(|(k, (until, _))| (k.clone(), *until))
            .collect()
    }

    /// This instance opened `key` for `for_ms`: every instance skips it as long.
    pub(crate) fn opened(&self, key: &str, upstream: &str, for_ms: u64) {
        let until = crate::engine::now_ms() + for_ms;
        self.lock().insert(key.to_string(), (until, upstream.to_string()));
        (self.publish)(CircuitChange::Opened { key: key.into(), upstream: upstream.into(), for_ms });
    }

    /// This instance's probe found `key` well again.
    pub(crate) fn closed(&self, key: &str) {
        if self.lock().remove(key).is_some() {
            (self.publish)(CircuitChange::Closed { key: key.into() });
        }
    }
}

// ------------------------------------------------------------- the counting

/// One counter a request is admitted against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    /// The counter's name in the store: the key's name, the model pattern,
    /// and for budgets the period.
    pub(crate) scope: String,
    pub(crate) kind: CheckKind,
    /// The configuration field it enforces (`rpm`, `tpm`, `daily_tokens`, …)
    /// for messages and metric labels; a window enforces `rpm` and `tpm` both.
    pub(crate) name: &'static str,
    /// Whose limit it is, for messages: ``key `team` `` , ``route `gpt-*` ``.
    pub(crate) owner: String,
}

/// Whose limits a request is counted against: a key, a key on some models,
/// or a route (every key's requests on it).
pub(crate) enum Scope<'a> {
    Key(&'a str),
    KeyModels(&'a str, &'a str),
    Route(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckKind {
    /// At most `requests` admissions and `tokens` tokens in any `span_ms`.
    Window { span_ms: u64, requests: Option<u64>, tokens: Option<u64> },
    /// At most `tokens` in a calendar period that ends in `ends_in_ms`.
    Budget { tokens: u64, ends_in_ms: u64 },
}

/// Which limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exceeded {
    Requests,
    Tokens,
    Budget,
}

/// A counter's state after a check.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Count {
    pub(crate) requests: u64,
    pub(crate) tokens: u64,
    /// When the oldest admission leaves the window (a budget: when its period ends).
    pub(crate) reset_ms: u64,
}

/// What a store answered to an admission.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// The check (by index) and limit that refused it; `None`: admitted.
    pub(crate) refused: Option<(usize, Exceeded)>,
    pub(crate) retry_after_ms: u64,
    /// Each check's counter, after the admission when there was one.
    pub(crate) counts: Vec<Count>,
    /// The store's clock.
    pub(crate) now_ms: u64,
}

/// An admitted request's reserved tokens, settled when its answer ends.
pub(crate) struct Reservation {
    id: u64,
    checks: Vec<Check>,
    estimate: u64,
    /// Reserved in the shared store (else in this process).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    shared: bool,
}

impl Reservation {
    /// The tokens reserved.
    pub(crate) fn estimate(&self) -> u64 {
        self.estimate
    }
}

/// A key's limit state as the rate-limit response headers show it.
#[derive(Debug, Clone, Default)]
pub(crate) struct RateInfo {
    /// Limit, remaining, ms until the oldest admission leaves the window.
    pub(crate) requests: Option<(u64, u64, u64)>,
    pub(crate) tokens: Option<(u64, u64, u64)>,
    pub(crate) now_ms: u64,
}

/// What admission decided.
pub(crate) enum Admission {
    /// No limit applies.
    Unlimited,
    /// Admitted; settle the reservation when the answer ends.
    Admitted(Reservation, RateInfo),
    /// Over a limit (or the shared store is down and failing closed).
    Refused { error: GatewayError, limit: &'static str },
}

/// Every key's limits, counted in this process or in the shared store.
pub(crate) struct Limiter {
    config: LimitStoreConfig,
    local: LocalCounters,
    #[cfg(feature = "redis")]
    shared: Option<redis::RedisCounters>,
    next_id: AtomicU64,
}

/// A limit scaled from per minute to the window (at least one).
fn per_window(per_minute: u64, window_ms: u64) -> u64 {
    (u128::from(per_minute) * u128::from(window_ms)).div_ceil(60_000).max(1) as u64
}

impl Limiter {
    /// Counting as `config` says. The shared store's thread starts here.
    pub(crate) fn new(config: LimitStoreConfig, instance: u64) -> Limiter {
        #[cfg(feature = "redis")]
        let shared = config.url.as_deref().map(|url| redis::RedisCounters::start(url, instance));
        #[cfg(not(feature = "redis"))]
        let _ = instance;
        Limiter {
            config,
            local: LocalCounters::default(),
            #[cfg(feature = "redis")]
            shared,
            next_id: AtomicU64::new(1),
        }
    }

    /// The shared store's circuits (for the breakers), when there is one.
    pub(crate) fn shared_circuits(&self) -> Option<Arc<SharedCircuits>> {
        #[cfg(feature = "redis")]
        if let Some(s) = &self.shared {
            return Some(s.circuits());
        }
        None
    }

    /// The shared store's state for `/ready`, logs and `/metrics`: `None`
    /// without one, else whether it answers and the last error.
    pub(crate) fn store_state(&self) -> Option<(bool, Option<String>)> {
        #[cfg(feature = "redis")]
        if let Some(s) = &self.shared {
            return Some(s.state());
        }
        None
    }

    /// Whether limited requests are refused while the shared store is unreachable.
    pub(crate) fn fails_closed(&self) -> bool {
        self.config.on_failure == StoreFailure::Closed
    }

    /// The checks for a request with a key of these limits, for `model`.
    pub(crate) fn checks(&self, scopes: &[(Scope<'_>, &RateLimits)]) -> Vec<Check> {
        let span_ms = u64::try_from(self.config.window.as_millis()).unwrap_or(60_000).max(1);
        let now = crate::engine::now_ms();
        let mut out = Vec::new();
        for (scope, l) in scopes {
            let (scope, owner) = match scope {
                Scope::Key(k) => (format!("k:{k}"), format!("key `{k}`")),
                Scope::KeyModels(k, m) => (format!("k:{k}|{m}"), format!("key `{k}` on models `{m}`")),
                Scope::Route(r) => (format!("r:{r}"), format!("route `{r}`")),
            };
            if l.rpm.is_some() || l.tpm.is_some() {
                let kind = CheckKind::Window {
                    span_ms,
                    requests: l.rpm.map(|n| per_window(n, span_ms)),
                    tokens: l.tpm.map(|n| per_window(n, span_ms)),
                };
                out.push(Check { scope: format!("w:{scope}"), kind, name: "rpm", owner: owner.clone() });
            }
            for (max, name, (period, ends)) in
                [(l.daily_tokens, "daily_tokens", day(now)), (l.monthly_tokens, "monthly_tokens", month(now))]
            {
                if let Some(tokens) = max {
                    let kind = CheckKind::Budget { tokens, ends_in_ms: ends.saturating_sub(now) };
                    out.push(Check { scope: format!("b:{scope}:{period}"), kind, name, owner: owner.clone() });
                }
            }
        }
        out
    }

    /// A key's scopes for a request for `model`: its own, and those of its
    /// model patterns that match.
    pub(crate) fn key_scopes<'a>(
        key: &'a str,
        limits: &'a RateLimits,
        models: &'a [ModelLimits],
        model: &str,
    ) -> Vec<(Scope<'a>, &'a RateLimits)> {
        let mut out = vec![(Scope::Key(key), limits)];
        for m in models.iter().filter(|m| match_model(&m.model, model).is_some()) {
            out.push((Scope::KeyModels(key, &m.model), &m.limits));
        }
        out
    }

    /// Admits a request against `checks` with `estimate` tokens reserved.
    pub(crate) async fn admit(&self, checks: Vec<Check>, estimate: u64) -> Admission {
        if checks.is_empty() {
            return Admission::Unlimited;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        #[cfg(feature = "redis")]
        if let Some(shared) = &self.shared {
            match shared.admit(id, &checks, estimate).await {
                Some(out) => {
                    return judge(&checks, out, Reservation { id, checks: checks.clone(), estimate, shared: true })
                }
                None if self.config.on_failure == StoreFailure::Closed => {
                    let error = GatewayError::new(
                        ErrorKind::Overloaded,
                        "the shared limit store cannot be reached and this gateway refuses limited requests until it is back",
                    )
                    .with_header("retry-after", "1");
                    return Admission::Refused { error, limit: "store" };
                }
                // Fail open: this process's counters stand in until it is back.
                None => {}
            }
        }
        let out = self.local.admit(crate::engine::now_ms(), id, &checks, estimate);
        judge(&checks, out, Reservation { id, checks: checks.clone(), estimate, shared: false })
    }

    /// Replaces a reservation by the tokens the request used (`None`: it was
    /// not answered, nothing is charged). Never waits on the shared store.
    pub(crate) fn settle(&self, r: &Reservation, used: Option<u64>) {
        let used = used.unwrap_or(0);
        if used == r.estimate {
            return;
        }
        let delta = i64::try_from(used).unwrap_or(i64::MAX) - i64::try_from(r.estimate).unwrap_or(i64::MAX);
        #[cfg(feature = "redis")]
        if r.shared {
            if let Some(s) = &self.shared {
                s.settle(r.id, &r.checks, delta);
            }
            return;
        }
        self.local.settle(r.id, &r.checks, delta);
    }

    /// The store's view of `checks` for the rate-limit headers.
    fn info(checks: &[Check], out: &Outcome) -> RateInfo {
        let mut info = RateInfo { now_ms: out.now_ms, ..RateInfo::default() };
        if let Some((CheckKind::Window { requests, tokens, .. }, c)) =
            checks.first().map(|c| c.kind).zip(out.counts.first())
        {
            info.requests = requests.map(|max| (max, max.saturating_sub(c.requests), c.reset_ms));
            info.tokens = tokens.map(|max| (max, max.saturating_sub(c.tokens), c.reset_ms));
        }
        info
    }
}

/// An outcome as an admission: the refusal's error names the limit.
fn judge(checks: &[Check], out: Outcome, reservation: Reservation) -> Admission {
    let info = Limiter::info(checks, &out);
    let Some((i, what)) = out.refused else {
        return Admission::Admitted(reservation, info);
    };
    // The store names the check by index; one it cannot have named refuses as the first.
    let Some(check) = checks.get(i).or(checks.first()) else {
        return Admission::Admitted(reservation, info);
    };
    let who = &check.owner;
    let wait_s = out.retry_after_ms.div_ceil(1000).max(1);
    let (limit, message, kind) = match (what, check.kind) {
        (Exceeded::Requests, CheckKind::Window { requests, span_ms, .. }) => (
            "rpm",
            format!(
                "Rate limit reached for {who}: {} requests per {} s (rpm). Try again in {wait_s} s.",
                requests.unwrap_or(0),
                span_ms.div_ceil(1000)
            ),
            ErrorKind::RateLimited,
        ),
        (Exceeded::Tokens, CheckKind::Window { tokens, span_ms, .. }) => (
            "tpm",
            format!(
                "Rate limit reached for {who}: {} tokens per {} s (tpm). Try again in {wait_s} s.",
                tokens.unwrap_or(0),
                span_ms.div_ceil(1000)
            ),
            ErrorKind::RateLimited,
        ),
        (_, CheckKind::Budget { tokens, .. }) => (
            check.name,
            format!("Token budget exhausted for {who}: {tokens} tokens ({}). It resets in {wait_s} s.", check.name),
            ErrorKind::BudgetExceeded,
        ),
        _ => ("rpm", format!("Rate limit reached for {who}."), ErrorKind::RateLimited),
    };
    let mut error = GatewayError::new(kind, message);
    error.headers.push(("retry-after".into(), wait_s.to_string()));
    error.headers.push(("retry-after-ms".into(), out.retry_after_ms.max(1).to_string()));
    error.headers.extend(info.headers_for_openai_and_anthropic());
    Admission::Refused { error, limit }
}

impl RateInfo {
    /// Both families of rate-limit headers; [`for_surface`](Self::for_surface) picks.
    fn headers_for_openai_and_anthropic(&self) -> Vec<(String, String)> {
        let mut h = self.for_surface("openai");
        h.extend(self.for_surface("anthropic"));
        h
    }

    /// The rate-limit headers the clients of `surface` read: `x-ratelimit-*`
    /// (OpenAI: durations such as `1s`, `6m0s`), `anthropic-ratelimit-*`
    /// (RFC 3339 reset times); none for others.
    pub(crate) fn for_surface(&self, surface: &str) -> Vec<(String, String)> {
        let mut h = Vec::new();
        let family = if surface.starts_with("openai") {
            1
        } else if surface.starts_with("anthropic") {
            2
        } else {
            return h;
        };
        for (what, v) in [("requests", self.requests), ("tokens", self.tokens)] {
            let Some((limit, remaining, reset_ms)) = v else { continue };
            if family == 1 {
                h.push((format!("x-ratelimit-limit-{what}"), limit.to_string()));
                h.push((format!("x-ratelimit-remaining-{what}"), remaining.to_string()));
                h.push((format!("x-ratelimit-reset-{what}"), openai_duration(reset_ms)));
            } else {
                h.push((format!("anthropic-ratelimit-{what}-limit"), limit.to_string()));
                h.push((format!("anthropic-ratelimit-{what}-remaining"), remaining.to_string()));
                h.push((format!("anthropic-ratelimit-{what}-reset"), rfc3339(self.now_ms + reset_ms)));
            }
        }
        h
    }
}

/// Which headers of a refusal belong to `surface` (the others are dropped).
pub(crate) fn keep_for_surface(surface: &str, name: &str) -> bool {
    if name.starts_with("x-ratelimit-") {
        return surface.starts_with("openai");
    }
    if name.starts_with("anthropic-ratelimit-") {
        return surface.starts_with("anthropic");
    }
    true
}

/// A duration as OpenAI's reset headers write it: `20ms`, `1s`, `6m0s`, `1h2m3s`.
fn openai_duration(ms: u64) -> String {
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let s = ms.div_ceil(1000);
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, s) => format!("{h}h{m}m{s}s"),
    }
}

/// Days since 1970-01-01 as (year, month, day) (Howard Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// (year, month, day) as days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

const DAY_MS: u64 = 86_400_000;

/// The UTC day of `now_ms` (`2026-12-04`) and when it ends.
fn day(now_ms: u64) -> (String, u64) {
    let days = now_ms / DAY_MS;
    let (y, m, d) = civil(days as i64);
    (format!("{y:04}-{m:02}-{d:02}"), (days + 1) * DAY_MS)
}

/// The UTC month of `now_ms` (`2026-12`) and when it ends.
fn month(now_ms: u64) -> (String, u64) {
    let (y, m, _) = civil((now_ms / DAY_MS) as i64);
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    (format!("{y:04}-{m:02}"), days_from_civil(ny, nm, 1) as u64 * DAY_MS)
}

/// Epoch milliseconds as RFC 3339 (`2026-12-04T17:48:45Z`).
fn rfc3339(ms: u64) -> String {
    let (y, mo, d) = civil((ms / DAY_MS) as i64);
    let s = (ms % DAY_MS) / 1000;
    format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z", s / 3600, (s % 3600) / 60, s % 60)
}

// ------------------------------------------------------------ the estimate

/// The fields of a request body the estimate reads (the rest is skipped).
#[derive(Deserialize, Default)]
struct Asks {
    model: Option<String>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
    max_output_tokens: Option<u64>,
    #[serde(rename = "generationConfig")]
    generation_config: Option<GenerationConfig>,
}

#[derive(Deserialize, Default)]
struct GenerationConfig {
    #[serde(rename = "maxOutputTokens")]
    max_output_tokens: Option<u64>,
}

/// A request's model (from its body, or a Gemini path) and its token
/// estimate: the body's bytes / 4 for the input, plus the output it allows.
pub(crate) fn estimate(path: &str, body: &[u8]) -> (Option<String>, u64) {
    let asks: Asks = serde_json::from_slice(body).unwrap_or_default();
    let output = asks
        .max_tokens
        .or(asks.max_completion_tokens)
        .or(asks.max_output_tokens)
        .or(asks.generation_config.and_then(|g| g.max_output_tokens))
        .unwrap_or(0);
    let model = asks.model.or_else(|| {
        let rest = path.strip_prefix("/v1beta/models/")?;
        Some(rest.split(':').next()?.to_string())
    });
    (model, (body.len() as u64).div_ceil(4) + output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar_periods_and_timestamps() {
        // 2026-12-04T17:48:45Z
        let t = 1_796_406_525_000;
        assert_eq!(rfc3339(t), "2026-12-04T17:48:45Z");
        assert_eq!(day(t), ("2026-12-04".to_string(), 1_796_428_800_000));
        assert_eq!(month(t).0, "2026-12");
        assert_eq!(rfc3339(month(t).1), "2027-01-01T00:00:00Z");
        assert_eq!(rfc3339(month(1_772_323_200_000).1), "2026-04-01T00:00:00Z", "March ends with April");
    }

    #[test]
    fn openai_durations() {
        assert_eq!(openai_duration(20), "20ms");
        assert_eq!(openai_duration(1000), "1s");
        assert_eq!(openai_duration(360_000), "6m0s");
        assert_eq!(openai_duration(3_723_000), "1h2m3s");
    }

    #[test]
    fn limits_scale_to_the_window() {
        assert_eq!(per_window(600, 6000), 60);
        assert_eq!(per_window(600, 60_000), 600);
        assert_eq!(per_window(1, 1000), 1, "never zero");
    }

    #[test]
    fn the_estimate_reads_the_model_and_the_output_allowed() {
        let body = br#"{"model":"m","max_tokens":100,"messages":[]}"#;
        assert_eq!(estimate("/v1/messages", body), (Some("m".into()), (body.len() as u64).div_ceil(4) + 100));
        let g = br#"{"generationConfig":{"maxOutputTokens":7}}"#;
        assert_eq!(estimate("/v1beta/models/gem:generateContent", g).0.as_deref(), Some("gem"));
        assert_eq!(estimate("/x", b"not json").1, 2);
    }

    #[test]
    fn cost_counts_cached_input_at_its_price() {
        let prices = [ModelPrice { model: "gpt-*".into(), input: 2.0, output: 8.0, cached_input: Some(0.5) }];
        let u = TokenUsage { input: 1_000_000, output: 500_000, cached: 200_000, reasoning: 100 };
        let c = cost(&prices, "gpt-4.1", &u).unwrap();
        assert!((c - (1.6 + 0.1 + 4.0)).abs() < 1e-9, "{c}");
        assert_eq!(cost(&prices, "claude", &u), None);
    }
}
