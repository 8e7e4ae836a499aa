//! Operations: `GET /health`, `GET /ready`, `GET /metrics` (Prometheus
//! text), upstream probes, and the per-request record behind the metrics
//! and the one-line JSON access log.
//!
//! Nothing here ever holds a key: records carry the key's *name*, metric
//! labels are surface, upstream, model (bounded) and status.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use serde_json::json;

use nexus_proto::CircuitState;

use super::failover::state_name;
use super::gateway::Shared;
use super::limits::{cost, Reservation, TokenUsage};
use super::surface::Reply;
use crate::metrics::{counter, histogram, labels, labels_into, Histogram, FINE_BUCKETS};

/// Distinct model label values kept; later ones are counted as `other`, so
/// clients naming random models cannot grow the metrics without bound.
const MAX_MODEL_LABELS: usize = 256;

/// An upstream's last known reachability.
#[derive(Default)]
pub(crate) struct Health(Mutex<Option<Result<(), String>>>);

impl Health {
    pub(crate) fn set_ok(&self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Ok(()));
    }

    pub(crate) fn set_failed(&self, why: &str) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Err(why.to_string()));
    }

    fn get(&self) -> Option<Result<(), String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What one request did, filled in as it goes; finished once, when its
/// response has been sent (or the client left).
pub(crate) struct Record {
    started: Instant,
    method: String,
    path: String,
    surface: &'static str,
    data: Mutex<RecordData>,
    /// The request's SERVER span (SPEC §22.5).
    pub(crate) span: super::trace::SpanHandle,
}

#[derive(Default)]
struct RecordData {
    key: Option<String>,
    model: Option<String>,
    /// The route pattern the model matched.
    route: Option<String>,
    upstream: Option<String>,
    usage: TokenUsage,
    /// Whether an answer reported usage at all.
    usage_seen: bool,
    /// The tokens reserved at admission, settled when the record finishes.
    reservation: Option<Reservation>,
    /// The limit that refused the request.
    refused_by: Option<&'static str>,
    upstream_error: Option<&'static str>,
    failovers: Vec<LogFailover>,
    status: u16,
    first_byte: Option<Duration>,
}

/// One move to the next upstream, as the access log shows it.
#[derive(serde::Serialize)]
struct LogFailover {
    from: String,
    to: String,
    reason: String,
}

impl Record {
    pub(crate) fn new(method: &str, path: &str, surface: &'static str) -> Record {
        Record {
            started: Instant::now(),
            method: method.to_string(),
            path: path.to_string(),
            surface,
            data: Mutex::new(RecordData::default()),
            span: super::trace::SpanHandle::default(),
        }
    }

    /// The record of a request traced under `span`.
    pub(crate) fn traced(mut self, span: super::trace::SpanHandle) -> Record {
        self.span = span;
        self
    }

    fn data(&self) -> std::sync::MutexGuard<'_, RecordData> {
        self.data.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The client key's name (never the key).
    pub(crate) fn note_key(&self, name: &str) {
        self.data().key = Some(name.to_string());
    }

    pub(crate) fn note_model(&self, model: &str) {
        self.data().model = Some(model.to_string());
    }

    pub(crate) fn note_upstream(&self, name: &str) {
        self.data().upstream = Some(name.to_string());
    }

    pub(crate) fn note_usage(&self, u: TokenUsage) {
        let mut d = self.data();
        d.usage.input += u.input;
        d.usage.output += u.output;
        d.usage.cached += u.cached;
        d.usage.reasoning += u.reasoning;
        d.usage_seen = true;
    }

    pub(crate) fn note_route(&self, pattern: &str) {
        self.data().route = Some(pattern.to_string());
    }

    /// The tokens reserved for the request, settled when it finishes.
    pub(crate) fn note_reservation(&self, r: Reservation) {
        self.data().reservation = Some(r);
    }

    /// The limit (`rpm`, `tpm`, `daily_tokens`, `monthly_tokens`, `concurrency`,
    /// `disabled`, `store`) that refused the request.
    pub(crate) fn note_refused(&self, limit: &'static str) {
        self.data().refused_by = Some(limit);
    }

    /// The upstream that served (or whose answer the client got).
    pub(crate) fn upstream(&self) -> Option<String> {
        self.data().upstream.clone()
    }

    pub(crate) fn note_failover(&self, from: &str, to: &str, reason: &str) {
        self.data().failovers.push(LogFailover { from: from.into(), to: to.into(), reason: reason.into() });
    }

    pub(crate) fn note_upstream_error(&self, what: &'static str) {
        self.data().upstream_error.get_or_insert(what);
    }

    pub(crate) fn note_status(&self, status: u16) {
        self.data().status = status;
    }

    pub(crate) fn note_first_byte(&self) {
        let mut d = self.data();
        if d.first_byte.is_none() {
            d.first_byte = Some(self.started.elapsed());
        }
    }
}

/// Finishes a record when dropped: metrics, the access log line, in-flight
/// count. Carried by the response body, so a stream is counted when it ends
/// and a client that leaves mid-stream is counted then (as `client_gone`).
pub(crate) struct Finish {
    pub(crate) shared: Arc<Shared>,
    pub(crate) record: Arc<Record>,
    pub(crate) completed: bool,
}

impl Finish {
    pub(crate) fn new(shared: Arc<Shared>, record: Arc<Record>) -> Finish {
        shared.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
        Finish { shared, record, completed: false }
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        let m = &self.shared.metrics;
        m.in_flight.fetch_sub(1, Ordering::Relaxed);
        let r = &self.record;
        let total = r.started.elapsed();
        let mut d = r.data();
        let outcome = if self.completed { "complete" } else { "client_gone" };
        if let Some(reservation) = d.reservation.take() {
            // What the upstream reported; an answer that failed charges
            // nothing; one cut before its usage arrived keeps its estimate.
            let used = match (d.usage_seen, (200..300).contains(&d.status)) {
                (true, _) => Some(d.usage.total()),
                (false, false) => None,
                (false, true) => Some(reservation.estimate()),
            };
            self.shared.limiter.settle(&reservation, used);
        }
        let cost_usd = d.model.as_deref().and_then(|model| cost(&self.shared.config.prices, model, &d.usage));
        m.finish(r.surface, &d, total, outcome, cost_usd);
        if d.usage_seen {
            r.span.note_usage(d.model.as_deref(), d.usage.input, d.usage.output);
        }
        r.span.end(Some(d.status), d.upstream_error.or(if self.completed { None } else { Some("client_gone") }));
        if self.shared.config.log_requests {
            let line = LogLine {
                ts_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|t| t.as_millis() as u64)
                    .unwrap_or_default(),
                method: &r.method,
                path: &r.path,
                surface: r.surface,
                key: d.key.as_deref(),
                status: d.status,
                model: d.model.as_deref(),
                upstream: d.upstream.as_deref(),
                first_byte_ms: d.first_byte.map(|t| t.as_secs_f64() * 1e3),
                total_ms: total.as_secs_f64() * 1e3,
                route: d.route.as_deref(),
                tokens_in: d.usage.input,
                tokens_out: d.usage.output,
                tokens_cached: d.usage.cached,
                tokens_reasoning: d.usage.reasoning,
                cost_usd,
                limited_by: d.refused_by,
                upstream_error: d.upstream_error,
                failovers: &d.failovers,
                outcome,
                trace_id: r.span.trace_id(),
            };
            // Whole lines, batched with the loop's others (runtime::log_line).
            super::runtime::log_line(|out| {
                serde_json::to_writer(&mut *out, &line)?;
                out.push(b'\n');
                Ok(())
            });
        }
    }
}

/// One access-log line (serialized as is: no intermediate JSON tree).
#[derive(serde::Serialize)]
struct LogLine<'a> {
    ts_ms: u64,
    method: &'a str,
    path: &'a str,
    surface: &'a str,
    key: Option<&'a str>,
    status: u16,
    model: Option<&'a str>,
    upstream: Option<&'a str>,
    first_byte_ms: Option<f64>,
    total_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<&'a str>,
    tokens_in: u64,
    tokens_out: u64,
    tokens_cached: u64,
    tokens_reasoning: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost_usd: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limited_by: Option<&'a str>,
    upstream_error: Option<&'a str>,
    #[serde(skip_serializing_if = "<[LogFailover]>::is_empty")]
    failovers: &'a [LogFailover],
    outcome: &'a str,
    /// The request's trace, when traced.
    #[serde(skip_serializing_if = "Option::is_none")]
    trace_id: Option<String>,
}

/// The gateway's counters and histograms.
#[derive(Default)]
pub(crate) struct Metrics {
    pub(crate) in_flight: AtomicI64,
    inner: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    models: BTreeSet<String>,
    requests: BTreeMap<String, u64>,
    first_byte: BTreeMap<String, Histogram>,
    duration: BTreeMap<String, Histogram>,
    upstream_errors: BTreeMap<String, u64>,
    failovers: BTreeMap<String, u64>,
    tokens: BTreeMap<String, u64>,
    key_requests: BTreeMap<String, u64>,
    key_tokens: BTreeMap<String, u64>,
    key_rejections: BTreeMap<String, u64>,
    /// Dollars per key and model, as text when rendered.
    key_cost: BTreeMap<String, f64>,
    /// The label text of the series being counted (kept for its capacity).
    scratch: String,
}

impl Registry {
    /// The label a model is counted under: its name while there are few,
    /// `other` past [`MAX_MODEL_LABELS`].
    fn model_label<'a>(&mut self, model: Option<&'a str>) -> &'a str {
        let Some(m) = model else { return "" };
        if self.models.contains(m) {
            return m;
        }
        if self.models.len() < MAX_MODEL_LABELS {
            self.models.insert(m.to_string());
            return m;
        }
        "other"
    }
}

/// The value of series `key`, made by `make` when it is new (the only time
/// the key is copied).
fn series<'m, V>(map: &'m mut BTreeMap<String, V>, key: &str, make: impl FnOnce() -> V) -> &'m mut V {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), make());
    }
    map.get_mut(key).expect("the series was just inserted")
}

/// A status code's digits, written into `buf` (no allocation).
fn status_digits(mut n: u16, buf: &mut [u8; 5]) -> &str {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || i == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[i..]).unwrap_or_default()
}

impl Metrics {
    pub(crate) fn upstream_error(&self, upstream: &str, kind: &str) {
        let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *r.upstream_errors.entry(labels(&[("upstream", upstream), ("kind", kind)])).or_default() += 1;
    }

    /// A request moved from upstream `from` to `to` (reason: a bounded label
    /// such as `status_529`, `connect`, `stalled`, `circuit_open`).
    pub(crate) fn failover(&self, from: &str, to: &str, reason: &str) {
        let mut r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *r.failovers.entry(labels(&[("from", from), ("to", to), ("reason", reason)])).or_default() += 1;
    }

    fn finish(&self, surface: &str, d: &RecordData, total: Duration, outcome: &str, cost_usd: Option<f64>) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let r = &mut *guard;
        // Every series' label text is written into one buffer, and a key is
        // allocated only for a series not seen before: a request in steady
        // state allocates nothing here.
        let mut text = std::mem::take(&mut r.scratch);
        let model = r.model_label(d.model.as_deref());
        let upstream = d.upstream.as_deref().unwrap_or("");
        let mut digits = [0; 5];
        let status = status_digits(d.status, &mut digits);
        let fine = || Histogram::with_buckets(FINE_BUCKETS);
        let base = [("surface", surface), ("upstream", upstream), ("model", model)];
        labels_into(&mut text, &[base[0], base[1], base[2], ("status", status), ("outcome", outcome)]);
        *series(&mut r.requests, &text, u64::default) += 1;
        labels_into(&mut text, &base);
        if let Some(t) = d.first_byte {
            series(&mut r.first_byte, &text, fine).observe(t.as_secs_f64());
        }
        series(&mut r.duration, &text, fine).observe(total.as_secs_f64());
        if d.usage.total() > 0 {
            for (dir, n) in [("in", d.usage.input), ("out", d.usage.output)] {
                labels_into(&mut text, &[("upstream", upstream), ("model", model), ("direction", dir)]);
                *series(&mut r.tokens, &text, u64::default) += n;
            }
        }
        // Per key name (bounded: names come from the configuration).
        if let Some(key) = d.key.as_deref() {
            labels_into(&mut text, &[("key", key), ("status", status)]);
            *series(&mut r.key_requests, &text, u64::default) += 1;
            let u = &d.usage;
            for (kind, n) in
                [("input", u.input), ("output", u.output), ("cached", u.cached), ("reasoning", u.reasoning)]
            {
                if n > 0 {
                    labels_into(&mut text, &[("key", key), ("kind", kind)]);
                    *series(&mut r.key_tokens, &text, u64::default) += n;
                }
            }
            if let Some(limit) = d.refused_by {
                labels_into(&mut text, &[("key", key), ("limit", limit)]);
                *series(&mut r.key_rejections, &text, u64::default) += 1;
            }
            if let Some(c) = cost_usd {
                labels_into(&mut text, &[("key", key), ("model", model)]);
                *series(&mut r.key_cost, &text, f64::default) += c;
            }
        }
        r.scratch = text;
    }

    /// The Prometheus text exposition; `circuits` is each upstream's
    /// breaker state (0 closed, 1 half-open, 2 open); `store_up` whether the
    /// shared limit store answers (`None`: there is none).
    pub(crate) fn render(&self, circuits: &BTreeMap<String, u64>, store_up: Option<bool>) -> String {
        let r = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        counter(
            &mut out,
            "nexus_gateway_requests_total",
            "Requests by surface, upstream, model, status and outcome (complete, client_gone).",
            &r.requests,
        );
        histogram(
            &mut out,
            "nexus_gateway_first_byte_seconds",
            "Time from the request to the first response body byte.",
            &r.first_byte,
        );
        histogram(
            &mut out,
            "nexus_gateway_request_duration_seconds",
            "Time from the request to the end of its response.",
            &r.duration,
        );
        counter(
            &mut out,
            "nexus_gateway_upstream_errors_total",
            "Upstream failures by upstream and kind (connect, io, timeout, stalled, stream_cut, body_too_large).",
            &r.upstream_errors,
        );
        counter(
            &mut out,
            "nexus_gateway_failovers_total",
            "Requests moved from one upstream to the next, by from, to and reason (status_NNN, connect, io, timeout, stalled, stream_cut, stream_error, circuit_open).",
            &r.failovers,
        );
        let _ = writeln!(
            out,
            "# HELP nexus_gateway_upstream_circuit Each upstream's circuit breaker: 0 closed, 1 half-open, 2 open.\n# TYPE nexus_gateway_upstream_circuit gauge"
        );
        for (series, v) in circuits {
            let _ = writeln!(out, "nexus_gateway_upstream_circuit{{{series}}} {v}");
        }
        counter(&mut out, "nexus_gateway_tokens_total", "Tokens reported by upstreams, by direction.", &r.tokens);
        counter(
            &mut out,
            "nexus_gateway_key_requests_total",
            "Requests by client key name and status.",
            &r.key_requests,
        );
        counter(
            &mut out,
            "nexus_gateway_key_tokens_total",
            "Tokens by client key name and kind (input, output, cached, reasoning).",
            &r.key_tokens,
        );
        counter(
            &mut out,
            "nexus_gateway_key_rejections_total",
            "Requests refused by a key's limit, by key name and limit (rpm, tpm, daily_tokens, monthly_tokens, concurrency, disabled, store).",
            &r.key_rejections,
        );
        let _ = writeln!(
            out,
            "# HELP nexus_gateway_key_cost_usd_total Cost in US dollars from the configured prices, by key name and model.\n# TYPE nexus_gateway_key_cost_usd_total counter"
        );
        for (series, v) in &r.key_cost {
            let _ = writeln!(out, "nexus_gateway_key_cost_usd_total{{{series}}} {v}");
        }
        if let Some(up) = store_up {
            let _ = writeln!(
                out,
                "# HELP nexus_gateway_limit_store_up Whether the shared limit store answers (0: limits are counted in this process).\n# TYPE nexus_gateway_limit_store_up gauge\nnexus_gateway_limit_store_up {}",
                u8::from(up)
            );
        }
        let _ = writeln!(
            out,
            "# HELP nexus_gateway_in_flight Requests being answered now.\n# TYPE nexus_gateway_in_flight gauge\nnexus_gateway_in_flight {}",
            self.in_flight.load(Ordering::Relaxed)
        );
        out
    }
}

/// Answers `/health`, `/ready` and `/metrics`; `None` for any other path.
pub(crate) fn answer(shared: &Shared, method: &hyper::Method, path: &str) -> Option<Reply> {
    let get = method == hyper::Method::GET || method == hyper::Method::HEAD;
    match path {
        "/health" | "/healthz" if get => Some(Reply::json(200, json!({"status": "ok"}).to_string())),
        "/ready" | "/readyz" if get => {
            let mut ready = !shared.upstreams.is_empty() && !shared.stopping.load(Ordering::SeqCst);
            let mut ups = serde_json::Map::new();
            for u in &shared.upstreams {
                let mut state = match u.health.get() {
                    Some(Ok(())) => json!({"status": "ok"}),
                    Some(Err(why)) => {
                        ready = false;
                        json!({"status": "unreachable", "error": why})
                    }
                    None => {
                        ready = false;
                        json!({"status": "unknown"})
                    }
                };
                // A reachable upstream that keeps failing is not ready either.
                let circuit = shared.circuits.state_of(&u.name);
                if matches!(circuit, CircuitState::Open { .. }) {
                    ready = false;
                }
                state["circuit"] = json!(state_name(circuit));
                ups.insert(u.name.clone(), state);
            }
            let mut body = json!({"status": if ready { "ready" } else { "not_ready" }, "upstreams": ups});
            if let Some((up, error)) = shared.limiter.store_state() {
                // Serving on local counters is degraded, not down: readiness stands.
                if !up && shared.limiter.fails_closed() {
                    ready = false;
                }
                body["limit_store"] = match error {
                    Some(e) if !up => json!({"status": "unreachable", "error": e, "counting": "local"}),
                    _ if up => json!({"status": "ok", "counting": "shared"}),
                    _ => json!({"status": "connecting", "counting": "local"}),
                };
            }
            Some(Reply::json(if ready { 200 } else { 503 }, body.to_string()))
        }
        "/metrics" if get => Some(Reply::Whole {
            status: 200,
            headers: vec![("content-type".into(), "text/plain; version=0.0.4; charset=utf-8".into())],
            body: shared.metrics.render(&circuit_gauges(shared), shared.limiter.store_state().map(|(up, _)| up)).into(),
        }),
        _ => None,
    }
}

/// Each upstream's breaker state as a gauge series.
fn circuit_gauges(shared: &Shared) -> BTreeMap<String, u64> {
    shared
        .upstreams
        .iter()
        .map(|u| {
            let v = match shared.circuits.state_of(&u.name) {
                CircuitState::Closed => 0,
                CircuitState::HalfOpen => 1,
                CircuitState::Open { .. } => 2,
            };
            (labels(&[("upstream", &u.name)]), v)
        })
        .collect()
}

/// Checks every upstream now and then: a TCP connection to its host and port
/// within the connect timeout. Runs until `stop` closes.
pub(crate) async fn probe_loop(shared: Arc<Shared>, stop: smol::channel::Receiver<()>) {
    loop {
        for u in &shared.upstreams {
            match host_port(&u.base_url) {
                None => u.health.set_failed("the base URL has no host"),
                Some((host, port)) => {
                    let t = shared.config.upstream_connect_timeout;
                    let connected = smol::net::TcpStream::connect((host.as_str(), port))
                        .or(async {
                            smol::Timer::after(t).await;
                            Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))
                        })
                        .await;
                    match connected {
                        Ok(_) => u.health.set_ok(),
                        Err(e) => u.health.set_failed(&format!("connect to {host}:{port}: {e}")),
                    }
                }
            }
        }
        let stopped = async {
            let _ = stop.recv().await;
            true
        }
        .or(async {
            smol::Timer::after(shared.config.probe_interval).await;
            false
        })
        .await;
        if stopped {
            return;
        }
    }
}

fn host_port(url: &str) -> Option<(String, u16)> {
    let (tls, rest) = match url.split_once("://")? {
        ("https", r) => (true, r),
        ("http", r) => (false, r),
        _ => return None,
    };
    let authority = rest.split(['/', '?']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => match p.parse() {
            Ok(p) => (h, p),
            Err(_) => (authority, if tls { 443 } else { 80 }),
        },
        _ => (authority, if tls { 443 } else { 80 }),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    (!host.is_empty()).then(|| (host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_of_base_urls() {
        assert_eq!(host_port("https://api.anthropic.com"), Some(("api.anthropic.com".into(), 443)));
        assert_eq!(host_port("http://127.0.0.1:8080/v1"), Some(("127.0.0.1".into(), 8080)));
        assert_eq!(host_port("http://[::1]:9/v1beta"), Some(("::1".into(), 9)));
        assert_eq!(host_port("ftp://x"), None);
    }

    #[test]
    fn status_digits_are_the_number_s() {
        for n in [0u16, 7, 10, 200, 429, 999, 1000, 65535] {
            assert_eq!(status_digits(n, &mut [0; 5]), n.to_string());
        }
    }

    #[test]
    fn a_series_is_counted_once_per_label_set_and_rendered_as_before() {
        let mut map = BTreeMap::new();
        let mut text = String::new();
        for (model, n) in [("a\"b", 1), ("c", 2), ("a\"b", 3)] {
            labels_into(&mut text, &[("model", model), ("status", "200")]);
            *series(&mut map, &text, u64::default) += n;
        }
        let want: Vec<(String, u64)> = vec![
            (labels(&[("model", "a\"b"), ("status", "200")]), 4),
            (labels(&[("model", "c"), ("status", "200")]), 2),
        ];
        assert_eq!(map.into_iter().collect::<Vec<_>>(), want);
        assert_eq!(want[0].0, r#"model="a\"b",status="200""#);
    }
}
