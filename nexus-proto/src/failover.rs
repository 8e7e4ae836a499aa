//! Upstream failover: which failures move a model call on to the next
//! upstream, and a circuit breaker per upstream.
//!
//! Both are plain data driven by the `now` the driver passes in, so a run
//! that failed over replays exactly, and the same rules serve the loop (one
//! [`Run`](crate::Run) over an ordered list of upstreams) and a gateway route
//! (one request over an ordered list of upstreams, see [`FailoverPolicy::decide`]).
//!
//! The breaker state is shared by many runs (it belongs to the client, not
//! to a run): a driver keeps one [`Breakers`] and hands it to each run with
//! [`Run::sync_circuits`](crate::Run::sync_circuits) before polling it.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::config::RetryPolicy;
use crate::error::{DecodeError, RunError, TransportErrorKind};
use crate::provider::Style;
use crate::time::Timestamp;

/// One place a model call can go: a wire format, an API root and a model.
/// Its key is given to the run separately (never part of the state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Upstream {
    /// Wire format.
    pub style: Style,
    /// API base URL.
    pub base_url: String,
    /// Model id, sent verbatim.
    pub model: String,
}

impl Upstream {
    /// `model` at the style's public base URL.
    pub fn new(style: Style, model: impl Into<String>) -> Upstream {
        Upstream { style, base_url: style.default_base_url().to_string(), model: model.into() }
    }

    /// The same upstream at another base URL.
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Upstream {
        self.base_url = base_url.into();
        self
    }

    /// The key its circuit is kept under in [`Breakers`]: style, base URL and
    /// model (an overloaded model is not an overloaded provider).
    pub fn circuit_key(&self) -> String {
        Upstream::circuit_key_of(self.style, &self.base_url, &self.model)
    }

    /// [`circuit_key`](Self::circuit_key) from borrowed parts, for a caller
    /// that holds them elsewhere (a gateway asks for it on every request).
    pub fn circuit_key_of(style: Style, base_url: &str, model: &str) -> String {
        // `join` sizes the string once; `format!` goes through `fmt` per part.
        [style.name(), base_url, model].join(" ")
    }
}

/// When a failed model call moves on to the next upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailoverPolicy {
    /// Failovers allowed in one run (a gateway: in one request).
    pub max_failovers: u32,
    /// A 429/529 whose `Retry-After` asks for longer than this (ms) moves on
    /// at once instead of waiting out this upstream's retries.
    pub retry_after_bound_ms: u64,
    /// An upstream that has not sent its response head this long (ms) after
    /// the request was emitted fails the attempt as a timeout. `None`: only
    /// the run's deadline bounds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_timeout_ms: Option<u64>,
}

impl Default for FailoverPolicy {
    fn default() -> Self {
        FailoverPolicy { max_failovers: 4, retry_after_bound_ms: 10_000, head_timeout_ms: None }
    }
}

/// What to do after a failed attempt at an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Try the same upstream again after this many milliseconds.
    Retry {
        /// The backoff (`Retry-After` when the provider gave one).
        delay_ms: u64,
    },
    /// Move on to the next upstream now.
    FailOver,
    /// Give up: the failure is final.
    Fail,
}

/// One failed attempt, as [`FailoverPolicy::decide`] needs to see it.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    /// Why it failed.
    pub error: &'a RunError,
    /// Whether the same upstream may help on a retry (429, 5xx, `connect`/`io`, …).
    pub retryable: bool,
    /// The provider's `Retry-After`, in ms.
    pub retry_after_ms: Option<u64>,
    /// 0-based attempt number at this upstream.
    pub attempt: u32,
    /// Whether any byte of this attempt's answer reached the host (or, for a
    /// gateway, the client). Nothing is retried or failed over after that.
    pub delivered: bool,
    /// Failovers already made in this run (or request).
    pub failovers: u32,
    /// Whether another upstream is available to move to.
    pub has_next: bool,
}

impl FailoverPolicy {
    /// Whether this failure says the upstream, not the request, is at fault:
    /// connect errors, resets and timeouts, HTTP 5xx and 429/529 (and the same
    /// errors as mid-stream events), a stream cut before its end. Never a 4xx
    /// request error, a malformed body, a cancel or the run's own deadline.
    pub fn upstream_at_fault(error: &RunError) -> bool {
        match error {
            RunError::Transport { kind, .. } => {
                matches!(kind, TransportErrorKind::Connect | TransportErrorKind::Io | TransportErrorKind::Timeout)
            }
            RunError::Provider(p) => match p.status {
                Some(s) => s >= 500 || s == 429,
                None => p.retryable,
            },
            RunError::Decode(DecodeError::Truncated(_)) => true,
            _ => false,
        }
    }

    /// The next step after a failed attempt: retry this upstream (within
    /// `retry`), fail over, or give up. A 429/529 with a `Retry-After` over
    /// [`retry_after_bound_ms`](Self::retry_after_bound_ms) moves on at once;
    /// a timeout moves on without a retry (waiting again rarely helps).
    /// `jitter` is the backoff's random share, drawn by the caller from its
    /// seeded generator (`0 ..= base·2ⁿ/2`).
    pub fn decide(&self, retry: &RetryPolicy, a: Attempt<'_>, jitter: impl FnOnce(u64) -> u64) -> Decision {
        if a.delivered {
            return Decision::Fail;
        }
        let at_fault = Self::upstream_at_fault(a.error);
        let can_fail_over = at_fault && a.has_next && a.failovers < self.max_failovers;
        let long_wait = a.retry_after_ms.is_some_and(|ms| ms > self.retry_after_bound_ms);
        let timed_out = matches!(a.error, RunError::Transport { kind: TransportErrorKind::Timeout, .. });
        if can_fail_over && (long_wait || timed_out) {
            return Decision::FailOver;
        }
        if a.retryable && a.attempt < retry.retries {
            let delay_ms = a.retry_after_ms.unwrap_or_else(|| {
                let exp = retry.base_delay_ms.saturating_mul(1u64 << a.attempt.min(20));
                exp.saturating_add(jitter(exp / 2 + 1)).min(retry.max_delay_ms.max(retry.base_delay_ms))
            });
            return Decision::Retry { delay_ms };
        }
        if can_fail_over {
            Decision::FailOver
        } else {
            Decision::Fail
        }
    }
}

/// When a circuit opens and how long it stays open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerPolicy {
    /// Failures within [`window_ms`](Self::window_ms) that open the circuit.
    pub failures: u32,
    /// The window failures are counted in (ms).
    pub window_ms: u64,
    /// How long an open circuit refuses calls before it lets one through (half-open).
    pub cooldown_ms: u64,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy { failures: 5, window_ms: 30_000, cooldown_ms: 30_000 }
    }
}

/// Where one upstream's circuit stands at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CircuitState {
    /// Calls go through.
    Closed,
    /// Calls are refused until `until`.
    Open {
        /// When it turns half-open.
        until: Timestamp,
    },
    /// The cooldown is over: calls go through; the next failure opens it
    /// again at once, the next success closes it.
    HalfOpen,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Circuit {
    /// Failure times within the window (oldest first).
    failures: VecDeque<Timestamp>,
    opened_at: Option<Timestamp>,
}

/// The circuits of every upstream a client talks to. Sans-IO: every call
/// takes the driver's `now`; nothing here reads a clock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Breakers {
    policy: BreakerPolicy,
    circuits: BTreeMap<String, Circuit>,
}

impl Breakers {
    /// Empty circuits (all closed) under `policy`.
    pub fn new(policy: BreakerPolicy) -> Breakers {
        Breakers { policy, circuits: BTreeMap::new() }
    }

    /// The policy.
    pub fn policy(&self) -> BreakerPolicy {
        self.policy
    }

    /// Where the circuit of `key` (see [`Upstream::circuit_key`]) stands at `now`.
    pub fn state(&self, key: &str, now: Timestamp) -> CircuitState {
        match self.circuits.get(key).and_then(|c| c.opened_at) {
            None => CircuitState::Closed,
            Some(at) => {
                let until = at.plus_ms(self.policy.cooldown_ms);
                if now < until {
                    CircuitState::Open { until }
                } else {
                    CircuitState::HalfOpen
                }
            }
        }
    }

    /// Whether a call to `key` may go out at `now` (closed or half-open).
    pub fn allows(&self, key: &str, now: Timestamp) -> bool {
        !matches!(self.state(key, now), CircuitState::Open { .. })
    }

    /// Records an answered call: a half-open circuit closes.
    pub fn record_success(&mut self, key: &str, _now: Timestamp) {
        if let Some(c) = self.circuits.get_mut(key) {
            c.failures.clear();
            c.opened_at = None;
        }
    }

    /// Records a failure the upstream is at fault for. Opens the circuit when
    /// the window holds [`BreakerPolicy::failures`] of them, or at once when
    /// it was half-open.
    pub fn record_failure(&mut self, key: &str, now: Timestamp) {
        let policy = self.policy;
        let half_open = self.state(key, now) == CircuitState::HalfOpen;
        let c = self.circuits.entry(key.to_string()).or_default();
        if half_open {
            c.opened_at = Some(now);
            c.failures.clear();
            return;
        }
        if c.opened_at.is_some() {
            // Already open (a call sent before it opened failed late).
            return;
        }
        c.failures.push_back(now);
        while c.failures.front().is_some_and(|t| t.plus_ms(policy.window_ms) <= now) {
            c.failures.pop_front();
        }
        if policy.failures > 0 && c.failures.len() >= policy.failures as usize {
            c.opened_at = Some(now);
            c.failures.clear();
        }
    }
}

/// One model turn and the upstream that answered it (state and reports).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServedTurn {
    /// 1-based turn number.
    pub turn: u32,
    /// Index into the run's upstreams (0 is the primary).
    pub upstream: usize,
}

/// One move from an upstream to the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FailoverRecord {
    /// The 1-based turn it happened in.
    pub turn: u32,
    /// Index of the upstream left.
    pub from: usize,
    /// Index of the upstream moved to.
    pub to: usize,
    /// Why: the failure, or `circuit open`.
    pub reason: String,
}

/// The params an upstream is sent: the run's own for the primary's style,
/// none for another style (they are written for one provider's body).
pub(crate) fn params_for<'a>(
    primary: Style,
    style: Style,
    params: &'a Map<String, Value>,
    empty: &'a Map<String, Value>,
) -> &'a Map<String, Value> {
    if style == primary {
        params
    } else {
        empty
    }
}
