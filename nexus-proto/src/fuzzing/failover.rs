//! The failover rules' fuzz body: [`failover`] drives the circuit breakers
//! through an arbitrary sequence of outcomes at non-decreasing times and asks
//! the failover policy about arbitrary failed attempts.

use arbitrary::Unstructured;

use crate::config::RetryPolicy;
use crate::error::{DecodeError, ProviderError, RunError, TransportErrorKind};
use crate::failover::{Attempt, BreakerPolicy, Breakers, CircuitState, Decision, FailoverPolicy};
use crate::time::Timestamp;

const KEYS: [&str; 3] = ["a", "b", "c"];

/// Checks: a circuit is open exactly from the failure that opened it until
/// its cooldown ends; it opens on the N-th failure within the window (at
/// once when half-open) and closes on a success; the policy never retries
/// or fails over after output was delivered, never fails over on a request
/// error, with no upstream left or past its cap, and retries only within
/// the retry budget.
pub fn failover(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = run(&mut u);
}

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let policy = BreakerPolicy {
        failures: u.int_in_range(1..=4)?,
        window_ms: u.int_in_range(1..=5_000)?,
        cooldown_ms: u.int_in_range(1..=5_000)?,
    };
    let mut breakers = Breakers::new(policy);
    // A model of each circuit: failure times within the window, when it opened.
    let mut model: Vec<(Vec<u64>, Option<u64>)> = vec![(Vec::new(), None); KEYS.len()];
    let mut now = 0u64;
    for _ in 0..u.int_in_range(0..=64)? {
        now += u.int_in_range(0..=2_000u64)?;
        let i = usize::from(u.int_in_range(0..=2u8)?);
        let (failures, opened) = &mut model[i];
        let t = Timestamp(now);
        let expected = match *opened {
            Some(at) if now < at + policy.cooldown_ms => {
                CircuitState::Open { until: Timestamp(at + policy.cooldown_ms) }
            }
            Some(_) => CircuitState::HalfOpen,
            None => CircuitState::Closed,
        };
        assert_eq!(breakers.state(KEYS[i], t), expected);
        assert_eq!(breakers.allows(KEYS[i], t), !matches!(expected, CircuitState::Open { .. }));
        if u.arbitrary::<bool>()? {
            breakers.record_success(KEYS[i], t);
            failures.clear();
            *opened = None;
            assert_eq!(breakers.state(KEYS[i], t), CircuitState::Closed);
        } else {
            breakers.record_failure(KEYS[i], t);
            match expected {
                CircuitState::HalfOpen => {
                    *opened = Some(now);
                    failures.clear();
                }
                CircuitState::Open { .. } => {}
                CircuitState::Closed => {
                    failures.push(now);
                    failures.retain(|f| f + policy.window_ms > now);
                    if failures.len() >= policy.failures as usize {
                        *opened = Some(now);
                        failures.clear();
                    }
                }
            }
            let open = matches!(breakers.state(KEYS[i], t), CircuitState::Open { .. });
            assert_eq!(open, opened.is_some_and(|at| now < at + policy.cooldown_ms));
        }
    }
    let retry = RetryPolicy { retries: u.int_in_range(0..=3)?, base_delay_ms: 100, max_delay_ms: 1_000 };
    let fp = FailoverPolicy {
        max_failovers: u.int_in_range(0..=3)?,
        retry_after_bound_ms: u.int_in_range(0..=20_000)?,
        head_timeout_ms: None,
    };
    for _ in 0..u.int_in_range(0..=32)? {
        let status: u16 = *u.choose(&[400, 401, 404, 408, 429, 500, 502, 503, 504, 529])?;
        let error = match u.int_in_range(0..=4u8)? {
            0 => RunError::Provider(ProviderError {
                status: Some(status),
                kind: "k".into(),
                message: "m".into(),
                body: String::new(),
                retryable: matches!(status, 429 | 500 | 502 | 503 | 504 | 529),
                retry_after_ms: None,
            }),
            1 => RunError::Transport {
                kind: *u.choose(&[
                    TransportErrorKind::Connect,
                    TransportErrorKind::Io,
                    TransportErrorKind::Timeout,
                    TransportErrorKind::Aborted,
                ])?,
                message: String::new(),
            },
            2 => RunError::Decode(DecodeError::Truncated(String::new())),
            3 => RunError::Decode(DecodeError::Json(String::new())),
            _ => RunError::Cancelled,
        };
        let a = Attempt {
            error: &error,
            retryable: u.arbitrary()?,
            retry_after_ms: u.arbitrary::<Option<u16>>()?.map(|s| u64::from(s) * 10),
            attempt: u.int_in_range(0..=4)?,
            delivered: u.arbitrary()?,
            failovers: u.int_in_range(0..=4)?,
            has_next: u.arbitrary()?,
        };
        let d = fp.decide(&retry, a, |bound| bound / 2);
        let at_fault = FailoverPolicy::upstream_at_fault(&error);
        if a.delivered {
            assert_eq!(d, Decision::Fail);
        }
        if let RunError::Provider(p) = &error {
            if p.status.is_some_and(|s| (400..500).contains(&s) && s != 429) {
                assert!(!at_fault, "a request error is never the upstream's fault");
            }
        }
        match d {
            Decision::FailOver => assert!(at_fault && a.has_next && a.failovers < fp.max_failovers),
            Decision::Retry { delay_ms } => {
                assert!(a.retryable && a.attempt < retry.retries);
                if let Some(ra) = a.retry_after_ms {
                    assert_eq!(delay_ms, ra);
                }
            }
            Decision::Fail => {}
        }
    }
    Ok(())
}
