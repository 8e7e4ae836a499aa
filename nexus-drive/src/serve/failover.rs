//! A request forwarded through its route's targets in order, with the
//! core's [`FailoverPolicy::decide`] judging every failed attempt, and the
//! circuit breakers every request of the process shares.
//!
//! Nothing here decides *whether* to move on: that is the core's policy, the
//! same one the loop uses. This module only performs what it decides —
//! sleeps for a retry, re-translates the request for the next target's
//! dialect, skips targets whose circuit is open — and reports it (metrics,
//! the access log, `x-nexus-upstream`).
//!
//! A failure counts until the first byte reaches the client: a stream's
//! first piece and a whole body are read before the answer is committed, so
//! a stream cut, stalled or opening with the provider's error before it has
//! sent anything is answered by the next target. After that the client has the answer's beginning, and a
//! failure ends it with an error event in its own dialect.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexus_proto::error::{ProviderError, RemoteError};
use nexus_proto::translate::TranslateError;
use nexus_proto::{
    Attempt, BreakerPolicy, Breakers, CallIds, CircuitState, Decision, FailoverPolicy, RunError, SseDecoder, Style,
    Timestamp, TransportErrorKind,
};

use super::gateway::{Ctx, Route, SendFailure, Target, UpstreamRequest, UpstreamResponse, MAX_ERROR_BODY};
use super::limits::SharedCircuits;
use super::surface::{ErrorKind, GatewayError};

/// The driver's clock, as the core's breakers take it.
fn now() -> Timestamp {
    Timestamp(crate::engine::now_ms())
}

/// Every upstream's circuit breaker (the core's [`Breakers`]), and which
/// configured upstream each circuit belongs to (for `/ready` and `/metrics`).
pub(crate) struct Circuits(Mutex<CircuitsInner>, Option<Arc<SharedCircuits>>);

struct CircuitsInner {
    breakers: Breakers,
    /// Circuit key → upstream name.
    owners: BTreeMap<String, String>,
    /// Half-open circuits with a probe request in flight: the others wait
    /// for its outcome instead of all trying an upstream that may still be down.
    probing: BTreeSet<String>,
}

/// A half-open circuit's probe in flight; dropping it lets the next one through.
pub(crate) struct Probe<'a> {
    circuits: &'a Circuits,
    key: Option<String>,
}

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.circuits.lock().probing.remove(&key);
        }
    }
}

impl Circuits {
    /// Breakers of `policy`; with `shared`, a circuit opened by any
    /// instance is open here too, and this instance's opens are published.
    pub(crate) fn new(policy: BreakerPolicy, shared: Option<Arc<SharedCircuits>>) -> Circuits {
        Circuits(
            Mutex::new(CircuitsInner {
                breakers: Breakers::new(policy),
                owners: BTreeMap::new(),
                probing: BTreeSet::new(),
            }),
            shared,
        )
    }

    /// The state of `key` here, or open when another instance opened it.
    fn state(&self, c: &CircuitsInner, key: &str, at: Timestamp) -> CircuitState {
        let local = c.breakers.state(key, at);
        match (&local, self.1.as_ref().and_then(|s| s.open_until(key, at.0))) {
            (CircuitState::Closed, Some(until)) => CircuitState::Open { until: Timestamp(until) },
            _ => local,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CircuitsInner> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a call to `key` may go out now: its circuit is closed, or
    /// half-open with no probe in flight.
    fn allows(&self, key: &str) -> bool {
        let c = self.lock();
        match self.state(&c, key, now()) {
            CircuitState::Closed => true,
            CircuitState::HalfOpen => !c.probing.contains(key),
            CircuitState::Open { .. } => false,
        }
    }

    /// Lets a call to `key` go out: `None` when its circuit is open or its
    /// half-open probe is taken; a half-open circuit's call is its probe.
    pub(crate) fn admit(&self, key: &str) -> Option<Probe<'_>> {
        let mut c = self.lock();
        match self.state(&c, key, now()) {
            CircuitState::Closed => Some(Probe { circuits: self, key: None }),
            CircuitState::HalfOpen if c.probing.insert(key.to_string()) => {
                Some(Probe { circuits: self, key: Some(key.to_string()) })
            }
            _ => None,
        }
    }

    fn success(&self, key: &str) {
        let mut c = self.lock();
        let at = now();
        let was = c.breakers.state(key, at);
        c.breakers.record_success(key, at);
        if let (Some(shared), CircuitState::HalfOpen) = (&self.1, was) {
            shared.closed(key);
        }
    }

    /// Records a failure the upstream `name` is at fault for.
    pub(crate) fn failure(&self, key: &str, name: &str) {
        let mut c = self.lock();
        if !c.owners.contains_key(key) {
            c.owners.insert(key.to_string(), name.to_string());
        }
        let at = now();
        let was_open = matches!(c.breakers.state(key, at), CircuitState::Open { .. });
        c.breakers.record_failure(key, at);
        if let (Some(shared), false, CircuitState::Open { until }) = (&self.1, was_open, c.breakers.state(key, at)) {
            shared.opened(key, name, at.ms_until(until));
        }
    }

    /// The least healthy state among `upstream`'s circuits, and when the
    /// earliest of its open circuits turns half-open.
    pub(crate) fn state_of(&self, upstream: &str) -> CircuitState {
        let c = self.lock();
        let at = now();
        let mut worst = CircuitState::Closed;
        let elsewhere = self.1.as_ref().map(|s| s.open_of(upstream, at.0)).unwrap_or_default();
        let states = c
            .owners
            .iter()
            .filter(|(_, owner)| owner.as_str() == upstream)
            .map(|(key, _)| self.state(&c, key, at))
            .chain(elsewhere.into_iter().map(|(_, until)| CircuitState::Open { until: Timestamp(until) }));
        for state in states {
            worst = match (worst, state) {
                (CircuitState::Open { until: a }, CircuitState::Open { until: b }) => {
                    CircuitState::Open { until: a.min(b) }
                }
                (open @ CircuitState::Open { .. }, _) | (_, open @ CircuitState::Open { .. }) => open,
                (CircuitState::HalfOpen, _) | (_, CircuitState::HalfOpen) => CircuitState::HalfOpen,
                _ => CircuitState::Closed,
            };
        }
        worst
    }

    /// When the first of these circuits turns half-open (ms from now).
    fn reopens_in(&self, keys: &[String]) -> u64 {
        let c = self.lock();
        let at = now();
        keys.iter()
            .filter_map(|k| match self.state(&c, k, at) {
                CircuitState::Open { until } => Some(at.ms_until(until)),
                _ => None,
            })
            .min()
            .unwrap_or(0)
    }
}

/// The name of a circuit state, as `/ready` and the docs spell it.
pub(crate) fn state_name(state: CircuitState) -> &'static str {
    match state {
        CircuitState::Closed => "closed",
        CircuitState::Open { .. } => "open",
        CircuitState::HalfOpen => "half_open",
    }
}

/// How a forwarded request ended.
pub(crate) enum Forwarded<T> {
    /// A target answered 2xx. A stream's first piece, or a whole body, has
    /// been read already (and is handed out first by the body).
    Served {
        /// What the request was built with for this target.
        with: T,
        /// The answer (boxed: it is much larger than the other outcomes).
        response: Box<UpstreamResponse>,
    },
    /// The last target tried refused with an error status the policy does
    /// not move on from (a 4xx request error, or the last upstream's 5xx).
    Refused {
        /// What the request was built with for this target.
        with: T,
        /// The status.
        status: u16,
        /// Its `Retry-After`, when it gave one.
        retry_after: Option<String>,
        /// Its error body (capped).
        body: Vec<u8>,
    },
    /// No target answered (unreachable, timed out, cut, or every circuit open).
    Failed(GatewayError),
    /// The request cannot be written for the first target: the client's error.
    Invalid(TranslateError),
}

/// One failed attempt, kept until the next succeeds or the policy gives up.
enum Failure<T> {
    Refused {
        with: T,
        status: u16,
        retry_after: Option<String>,
        body: Vec<u8>,
    },
    Failed(GatewayError),
    /// A stream whose first event is the provider's error: when it is the
    /// last word, the client gets it as its own dialect's error event.
    Stream {
        with: T,
        response: Box<UpstreamResponse>,
        message: String,
    },
}

impl<T> Failure<T> {
    /// What is kept of a failure once another attempt follows: not the
    /// upstream connection of a failed stream.
    fn settled(self) -> Failure<T> {
        match self {
            Failure::Stream { message, .. } => Failure::Failed(GatewayError::new(ErrorKind::Upstream, message)),
            other => other,
        }
    }
}

impl<T> From<Failure<T>> for Forwarded<T> {
    fn from(f: Failure<T>) -> Forwarded<T> {
        match f {
            Failure::Refused { with, status, retry_after, body } => {
                Forwarded::Refused { with, status, retry_after, body }
            }
            Failure::Failed(e) => Forwarded::Failed(e),
            Failure::Stream { with, response, .. } => Forwarded::Served { with, response },
        }
    }
}

/// The provider's error, when a stream's first piece says nothing visible
/// before it (an `overloaded_error` event instead of an answer), read by the
/// core's own stream decoder for `style`.
fn stream_error(style: Style, piece: &[u8]) -> Option<ProviderError> {
    // Every error the decoders report names itself: an `error` event or key,
    // or a `response.failed` event. A piece without either word (nor an
    // escape that could spell one) is not decoded: the first piece of a
    // stream is often the whole answer.
    if ![&b"error"[..], b"failed", b"\\u"].into_iter().any(|word| super::handler::contains(piece, word)) {
        return None;
    }
    let mut events = Vec::new();
    SseDecoder::new().feed(piece, &mut events);
    let mut assembler = style.assembler();
    let (mut ids, mut deltas) = (CallIds::default(), Vec::new());
    for event in &events {
        match assembler.push(event, &mut ids, &mut deltas) {
            Err(RemoteError::Provider(p)) if !assembler.emitted_anything() => return Some(p),
            // A malformed event is the stream's to report; a visible delta commits the answer.
            Err(_) => return None,
            Ok(()) if assembler.emitted_anything() => return None,
            Ok(()) => {}
        }
    }
    None
}

/// A random share in `0..bound` for the backoff's jitter (std's per-process
/// random hash keys; no generator of our own to seed).
fn jitter(bound: u64) -> u64 {
    RandomState::new().hash_one(bound) % bound.max(1)
}

impl Ctx {
    /// Forwards one request through `route`'s targets in order. `build`
    /// writes the request for a target (its dialect and model): it is called
    /// again for each target tried, so a target of another dialect gets the
    /// request re-translated. A target whose circuit is open is skipped.
    pub(crate) async fn forward<T>(
        &self,
        route: &Route,
        mut build: impl FnMut(&Target) -> Result<(T, UpstreamRequest), TranslateError>,
    ) -> Forwarded<T> {
        self.record.note_route(&route.pattern);
        let policy = route.failover.policy;
        let retry = route.failover.retry;
        let head_timeout = policy.head_timeout_ms.map(Duration::from_millis);
        let targets: Vec<&Target> = route.targets().collect();
        let keys: Vec<String> = targets.iter().map(|t| t.circuit_key()).collect();
        let circuits = &self.shared.circuits;
        let next_after = |from: Option<usize>| {
            let start = from.map_or(0, |i| i + 1);
            (start..targets.len()).find(|&j| circuits.allows(&keys[j]))
        };
        let Some(mut i) = next_after(None) else {
            return all_open(route, circuits, &keys);
        };
        if i > 0 {
            self.note_failover(targets[0], targets[i], "circuit_open");
        }
        let (mut attempt, mut failovers) = (0u32, 0u32);
        let mut last: Option<Failure<T>> = None;
        loop {
            // Held until this attempt's outcome is recorded.
            let _probe = loop {
                match circuits.admit(&keys[i]) {
                    Some(probe) => break probe,
                    // Opened, or its probe taken, since it was chosen: the next one.
                    None => match next_after(Some(i)) {
                        Some(j) => {
                            self.note_failover(targets[i], targets[j], "circuit_open");
                            i = j;
                        }
                        None => return last.map_or_else(|| all_open(route, circuits, &keys), Forwarded::from),
                    },
                }
            };
            let target = targets[i];
            let (with, request) = match build(target) {
                Ok(x) => x,
                // The client's request cannot be written for the first
                // target: its error. For a later one: the last failure stands.
                Err(e) => return last.map_or(Forwarded::Invalid(e), Forwarded::from),
            };
            let stream = request.stream;
            let (error, retryable, retry_after_ms, failure, reason) =
                match self.send_within(target, request, head_timeout).await {
                    Ok(mut response) if (200..300).contains(&response.status) => {
                        let read = if stream {
                            response.body.prefetch().await
                        } else {
                            response.body.buffer(self.max_upstream_body_bytes()).await
                        };
                        let refused = match (&read, stream) {
                            (Ok(()), true) => response.body.held().and_then(|p| stream_error(target.style(), p)),
                            _ => None,
                        };
                        match (read, refused) {
                            (Ok(()), Some(p)) => {
                                let (retryable, after) = (p.retryable, p.retry_after_ms);
                                let message = format!("the upstream stream failed: {p}");
                                let error = RunError::Provider(p);
                                if FailoverPolicy::upstream_at_fault(&error) {
                                    circuits.failure(&keys[i], target.upstream());
                                }
                                let response = Box::new(response);
                                (
                                    error,
                                    retryable,
                                    after,
                                    Failure::Stream { with, response, message },
                                    "stream_error".into(),
                                )
                            }
                            (Ok(()), None) => {
                                circuits.success(&keys[i]);
                                return Forwarded::Served { with, response: Box::new(response) };
                            }
                            (Err(e), _) => {
                                let what = response.body.failure().unwrap_or("io");
                                if what == "body_too_large" {
                                    // Our cap, not the upstream's fault: no other upstream would do better.
                                    return Forwarded::Failed(e);
                                }
                                // The body counted this failure against the circuit itself.
                                let kind = if e.kind == ErrorKind::Timeout {
                                    TransportErrorKind::Timeout
                                } else {
                                    TransportErrorKind::Io
                                };
                                let error = RunError::Transport { kind, message: e.message.clone() };
                                (error, true, None, Failure::Failed(e), what.to_string())
                            }
                        }
                    }
                    Ok(mut response) => {
                        let status = response.status;
                        let retry_after = response.header("retry-after").map(str::to_string);
                        let body = response.body.read_to_end(MAX_ERROR_BODY).await.unwrap_or_default();
                        let p = target.style().decode_error(Some(status), retry_after.as_deref(), &body);
                        let (retryable, after) = (p.retryable, p.retry_after_ms);
                        let error = RunError::Provider(p);
                        if FailoverPolicy::upstream_at_fault(&error) {
                            circuits.failure(&keys[i], target.upstream());
                        }
                        (
                            error,
                            retryable,
                            after,
                            Failure::Refused { with, status, retry_after, body },
                            format!("status_{status}"),
                        )
                    }
                    Err(SendFailure { what, kind, error: e }) => {
                        let error = RunError::Transport { kind, message: e.message.clone() };
                        if FailoverPolicy::upstream_at_fault(&error) {
                            circuits.failure(&keys[i], target.upstream());
                        }
                        (error, true, None, Failure::Failed(e), what.to_string())
                    }
                };
            let next = next_after(Some(i));
            let decision = policy.decide(
                &retry,
                Attempt {
                    error: &error,
                    retryable,
                    retry_after_ms,
                    attempt,
                    // Nothing has reached the client: the answer is committed only once read.
                    delivered: false,
                    failovers,
                    has_next: next.is_some(),
                },
                jitter,
            );
            match (decision, next) {
                (Decision::Retry { delay_ms }, _) => {
                    last = Some(failure.settled());
                    attempt += 1;
                    super::runtime::sleep(Duration::from_millis(delay_ms)).await;
                }
                (Decision::FailOver, Some(to)) => {
                    last = Some(failure.settled());
                    self.note_failover(target, targets[to], &reason);
                    failovers += 1;
                    attempt = 0;
                    i = to;
                }
                _ => return failure.into(),
            }
        }
    }

    fn note_failover(&self, from: &Target, to: &Target, reason: &str) {
        self.shared.metrics.failover(from.upstream(), to.upstream(), reason);
        self.record.note_failover(from.upstream(), to.upstream(), reason);
    }
}

/// Every upstream of `route` is skipped: 503, retry when the first circuit turns half-open.
fn all_open<T>(route: &Route, circuits: &Circuits, keys: &[String]) -> Forwarded<T> {
    let wait_s = circuits.reopens_in(keys).div_ceil(1000).max(1);
    let mut e = GatewayError::new(
        ErrorKind::Overloaded,
        format!("every upstream for `{}` is failing; the next try is in {wait_s} s", route.pattern),
    );
    e.headers.push(("retry-after".into(), wait_s.to_string()));
    Forwarded::Failed(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_s_first_error_is_found_in_every_dialect_and_an_answer_is_not_decoded() {
        let errors = [
            (Style::Anthropic, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"),
            (Style::OpenAi, "data: {\"error\":{\"message\":\"busy\",\"type\":\"server_error\"}}\n\n"),
            (Style::OpenAi, "data: {\"\\u0065rror\":{\"message\":\"busy\",\"type\":\"server_error\"}}\n\n"),
            (Style::Gemini, "data: {\"error\":{\"code\":503,\"message\":\"busy\",\"status\":\"UNAVAILABLE\"}}\n\n"),
            (Style::OpenAiResponses, "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\"}}\n\n"),
        ];
        for (style, piece) in errors {
            assert!(stream_error(style, piece.as_bytes()).is_some(), "{style:?}: {piece}");
        }
        let answer = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n";
        assert!(stream_error(Style::OpenAi, answer.as_bytes()).is_none());
    }

    #[test]
    fn a_half_open_circuit_lets_one_probe_through_at_a_time() {
        let circuits = Circuits::new(BreakerPolicy { failures: 1, window_ms: 60_000, cooldown_ms: 1 }, None);
        assert!(circuits.admit("k").is_some_and(|p| p.key.is_none()), "closed: no probe");
        circuits.failure("k", "up");
        // Wait out the 1 ms cooldown (the breakers read the wall clock).
        let until = now().plus_ms(5);
        while now() < until {
            std::thread::yield_now();
        }
        assert_eq!(circuits.state_of("up"), CircuitState::HalfOpen);
        let probe = circuits.admit("k").expect("the probe");
        assert!(circuits.admit("k").is_none(), "a second call while the probe is out");
        assert!(!circuits.allows("k"));
        drop(probe);
        assert!(circuits.allows("k"), "the probe ended without an outcome: another may try");
        let probe = circuits.admit("k").expect("the next probe");
        circuits.success("k");
        drop(probe);
        assert_eq!(circuits.state_of("up"), CircuitState::Closed);
        assert!(circuits.admit("k").is_some() && circuits.admit("k").is_some(), "closed: no limit");
    }
}
