//! The counters of one process: what the gateway counts with when no shared
//! store is configured, and while the shared one cannot be reached.
//!
//! The same rules as the shared store's scripts ([`super::redis`]), on the
//! same numbers: a sliding log per window scope, a running token total per
//! budget period.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use super::{Check, CheckKind, Count, Exceeded, Outcome};

/// One window scope's admissions still inside the window, oldest first.
#[derive(Default)]
struct Log {
    entries: VecDeque<Entry>,
    tokens: u64,
}

struct Entry {
    at_ms: u64,
    id: u64,
    tokens: u64,
}

impl Log {
    /// Drops the admissions older than `span_ms` before `now`.
    fn prune(&mut self, now: u64, span_ms: u64) {
        while let Some(e) = self.entries.front() {
            if e.at_ms + span_ms > now {
                break;
            }
            self.tokens = self.tokens.saturating_sub(e.tokens);
            self.entries.pop_front();
        }
    }

    /// How long until the tokens in the window fall below `max`.
    fn tokens_free_in(&self, now: u64, span_ms: u64, max: u64) -> u64 {
        let mut left = self.tokens;
        for e in &self.entries {
            left = left.saturating_sub(e.tokens);
            if left < max {
                return (e.at_ms + span_ms).saturating_sub(now).max(1);
            }
        }
        span_ms
    }
}

/// A budget period's tokens, and when its counter may be forgotten.
struct Spent {
    tokens: u64,
    forget_at_ms: u64,
}

/// In-memory counters, one lock for all: an admission checks and records
/// every scope of a request at once.
#[derive(Default)]
pub(crate) struct LocalCounters(Mutex<Inner>);

#[derive(Default)]
struct Inner {
    logs: HashMap<String, Log>,
    budgets: HashMap<String, Spent>,
}

impl LocalCounters {
    /// Admits request `id` with `estimate` tokens reserved in every scope of
    /// `checks`, or refuses it (recording nothing) naming the first limit it is over.
    pub(crate) fn admit(&self, now: u64, id: u64, checks: &[Check], estimate: u64) -> Outcome {
        let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let Inner { logs, budgets } = &mut *inner;
        let mut out = Outcome { now_ms: now, ..Outcome::default() };
        for (i, check) in checks.iter().enumerate() {
            let (count, refused) = match check.kind {
                CheckKind::Window { span_ms, requests, tokens } => {
                    let log = logs.entry(check.scope.clone()).or_default();
                    log.prune(now, span_ms);
                    let reset_ms = log.entries.front().map_or(0, |e| (e.at_ms + span_ms).saturating_sub(now));
                    let n = log.entries.len() as u64;
                    let refused = if requests.is_some_and(|max| n >= max) {
                        Some((Exceeded::Requests, reset_ms.max(1)))
                    } else {
                        tokens
                            .filter(|max| log.tokens >= *max)
                            .map(|max| (Exceeded::Tokens, log.tokens_free_in(now, span_ms, max)))
                    };
                    (Count { requests: n, tokens: log.tokens, reset_ms }, refused)
                }
                CheckKind::Budget { tokens: max, ends_in_ms } => {
                    let used = budgets.get(&check.scope).map_or(0, |s| s.tokens);
                    let refused = (used >= max).then_some((Exceeded::Budget, ends_in_ms.max(1)));
                    (Count { requests: 0, tokens: used, reset_ms: ends_in_ms }, refused)
                }
            };
            out.counts.push(count);
            if out.refused.is_none() {
                if let Some((what, wait)) = refused {
                    out.refused = Some((i, what));
                    out.retry_after_ms = wait;
                }
            }
        }
        if out.refused.is_some() {
            return out;
        }
        for (check, count) in checks.iter().zip(out.counts.iter_mut()) {
            match check.kind {
                CheckKind::Window { span_ms, .. } => {
                    let log = logs.entry(check.scope.clone()).or_default();
                    log.entries.push_back(Entry { at_ms: now, id, tokens: estimate });
                    log.tokens += estimate;
                    if count.requests == 0 {
                        count.reset_ms = span_ms;
                    }
                }
                CheckKind::Budget { ends_in_ms, .. } => {
                    if !budgets.contains_key(&check.scope) {
                        // A new period: the ones that have ended go.
                        budgets.retain(|_, s| s.forget_at_ms > now);
                    }
                    let spent = budgets
                        .entry(check.scope.clone())
                        .or_insert(Spent { tokens: 0, forget_at_ms: now + ends_in_ms + 1000 });
                    spent.tokens += estimate;
                }
            }
            count.requests += 1;
            count.tokens += estimate;
        }
        out
    }

    /// Replaces request `id`'s reserved tokens by what it used (`delta`:
    /// used minus reserved). A window entry that has left the window is gone
    /// and needs nothing.
    pub(crate) fn settle(&self, id: u64, checks: &[Check], delta: i64) {
        let mut inner = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let add = |n: &mut u64| *n = n.saturating_add_signed(delta);
        for check in checks {
            match check.kind {
                CheckKind::Window { .. } => {
                    let Some(log) = inner.logs.get_mut(&check.scope) else { continue };
                    let Some(e) = log.entries.iter_mut().rev().find(|e| e.id == id) else { continue };
                    let before = e.tokens;
                    add(&mut e.tokens);
                    log.tokens = log.tokens - before + e.tokens;
                }
                CheckKind::Budget { .. } => {
                    if let Some(s) = inner.budgets.get_mut(&check.scope) {
                        add(&mut s.tokens);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(requests: Option<u64>, tokens: Option<u64>) -> Vec<Check> {
        vec![Check {
            scope: "k".into(),
            kind: CheckKind::Window { span_ms: 1000, requests, tokens },
            name: "rpm",
            owner: String::new(),
        }]
    }

    #[test]
    fn a_window_admits_its_requests_and_frees_them_as_they_age() {
        let c = LocalCounters::default();
        let checks = window(Some(2), None);
        assert!(c.admit(0, 1, &checks, 0).refused.is_none());
        assert!(c.admit(400, 2, &checks, 0).refused.is_none());
        let out = c.admit(500, 3, &checks, 0);
        assert_eq!(out.refused, Some((0, Exceeded::Requests)));
        assert_eq!(out.retry_after_ms, 500, "the first leaves the window at 1000");
        assert!(c.admit(1000, 4, &checks, 0).refused.is_none(), "the first has aged out");
        assert_eq!(c.admit(1001, 5, &checks, 0).retry_after_ms, 399);
    }

    #[test]
    fn tokens_are_reserved_then_settled_to_what_was_used() {
        let c = LocalCounters::default();
        let checks = window(None, Some(100));
        assert!(c.admit(0, 1, &checks, 80).refused.is_none());
        // 80 reserved: there is room, so the next is admitted and reserves its own.
        assert!(c.admit(1, 2, &checks, 30).refused.is_none());
        assert_eq!(c.admit(2, 3, &checks, 1).refused, Some((0, Exceeded::Tokens)));
        // The first used 10, not 80: room again.
        c.settle(1, &checks, -70);
        let out = c.admit(3, 3, &checks, 1);
        assert!(out.refused.is_none());
        assert_eq!(out.counts[0].tokens, 41);
    }

    proptest::proptest! {
        /// Whatever the arrivals, estimates and settlements: no window of
        /// `span` ever holds more admissions than the limit, and a request
        /// is admitted only while the window's tokens are under the limit.
        #[test]
        fn no_window_ever_holds_more_than_its_limit(
            steps in proptest::collection::vec((0u64..400, 0u64..50, -20i64..20), 1..200),
            max_requests in 1u64..8,
            max_tokens in 1u64..200,
        ) {
            let span = 1000;
            let c = LocalCounters::default();
            let checks = window(Some(max_requests), Some(max_tokens));
            let (mut now, mut admitted) = (0u64, Vec::<u64>::new());
            for (id, (gap, estimate, settle)) in steps.into_iter().enumerate() {
                now += gap;
                let out = c.admit(now, id as u64, &checks, estimate);
                match out.refused {
                    None => {
                        admitted.push(now);
                        let in_window = admitted.iter().filter(|t| **t + span > now).count() as u64;
                        proptest::prop_assert!(in_window <= max_requests);
                        proptest::prop_assert!(out.counts[0].tokens - estimate < max_tokens);
                        c.settle(id as u64, &checks, settle.max(-(estimate as i64)));
                    }
                    Some(_) => proptest::prop_assert!(out.retry_after_ms >= 1 && out.retry_after_ms <= span),
                }
            }
        }
    }

    #[test]
    fn a_refusal_records_nothing_in_any_scope() {
        let c = LocalCounters::default();
        let mut checks = window(Some(10), None);
        checks.push(Check {
            scope: "b".into(),
            kind: CheckKind::Budget { tokens: 5, ends_in_ms: 9000 },
            name: "daily_tokens",
            owner: String::new(),
        });
        assert!(c.admit(0, 1, &checks, 5).refused.is_none());
        let out = c.admit(1, 2, &checks, 5);
        assert_eq!(out.refused, Some((1, Exceeded::Budget)));
        assert_eq!(out.retry_after_ms, 9000);
        assert_eq!(out.counts[0].requests, 1, "the refused request is not in the window");
    }
}
