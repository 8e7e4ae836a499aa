//! Durable stores on real databases: `sqlite::SqliteStore` (feature
//! `sqlite`, the embedded default) and `postgres::PostgresStore` (feature
//! `postgres`, for many workers over one database). The modules exist only
//! with their feature; what is here is shared by both.
//!
//! Both implement the crate's [`ConversationStore`] and [`RunStore`], and
//! [`ClaimStore`], which adds what many stateless workers need:
//!
//! * **claims with a lease**: [`ClaimStore::claim_run`] takes a suspended run
//!   by id with a compare-and-swap on its version, and holds it until
//!   `claimed_until` (milliseconds since the Unix epoch, compared with the
//!   `now` the caller passes). Two workers can never both hold a run; a
//!   worker that dies leaves it claimable again once the lease has passed.
//!   Every write a worker makes names the version its claim gave it, so a
//!   worker whose lease ran out and was taken over cannot write any more.
//! * **answers before the claim**: [`ClaimStore::record_answer`] keeps an
//!   answer keyed by (run id, request id), so a web handler can record it and
//!   any worker can pick the run up ([`ClaimStore::claim_ready`]).
//! * **progress saves**: [`ClaimStore::save_progress`] writes the state while
//!   the claim is held. A worker saves right after tools are handed out; if
//!   it dies then, the next claimer restores that state and the ledger turns
//!   every call that had started into an `in_doubt` request instead of
//!   running it again. [`Checkpoints`] does those saves for the drivers.
//! * **listing** by request kind, age and expiry (the `expiresAt` of the
//!   pending requests), and deleting a conversation with its runs.
//!
//! ## The life of a stored run
//!
//! ```text
//! insert_run ──► (suspended, pending requests listed)
//!     record_answer* ──► claim_run / claim_ready ──► (claimed until now + lease)
//!         save_progress* (tools handed out; results recorded)
//!         ├─ suspend_claimed  (still pending: claim released)
//!         ├─ finish_claimed   (done: removed, transcript saved to its conversation)
//!         └─ release_claim    (failed: claim released, last saved state kept)
//! ```
//!
//! What a run waits for is read from its state ([`Run::outstanding`](nexus_proto::Run::outstanding) of the
//! restored run), so the store always lists what the next claimer will see,
//! `in_doubt` requests included. Every state write drops the recorded
//! answers whose request is no longer pending: the answers left are exactly
//! those the next claimer can feed.
//!
//! ## Clocks
//!
//! The [`ClaimStore`] methods take `now` from the caller: no hidden clock, so
//! lease expiry is testable. The plain [`RunStore`] methods, which take no
//! time, read the wall clock and use the store's default lease.

use std::time::{SystemTime, UNIX_EPOCH};

use nexus_proto::{Answer, Message, Request};

use crate::result::SuspendedRun;
use crate::store::{ConversationStore, RunStore, StoreError};

mod checkpoints;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod shared;
#[cfg(feature = "sqlite")]
pub mod sqlite;

pub use checkpoints::Checkpoints;

/// The lease a claim gets when none is given: five minutes.
pub const DEFAULT_LEASE_MS: u64 = 5 * 60 * 1000;

/// How many failed resumes [`ClaimStore::claim_ready`] tolerates before it
/// stops offering a run (it can still be claimed by id and is still listed).
pub const DEFAULT_MAX_FAILURES: u32 = 5;

/// What a worker holds: the run's id, the version its writes are based on,
/// and when its claim runs out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The run id (the store key).
    pub run_id: String,
    /// The version of the record as this worker last wrote or claimed it.
    pub version: u64,
    /// Milliseconds since the epoch after which another worker may claim the run.
    pub claimed_until: u64,
}

/// A claimed run.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// What the worker writes with.
    pub lease: Lease,
    /// The run's snapshot bytes.
    pub state: Vec<u8>,
    /// The answers recorded for its pending requests, oldest first: feed
    /// them all when resuming (they are dropped from the store by the first
    /// state write after the run took them).
    pub answers: Vec<Answer>,
    /// The conversation the run belongs to, if any.
    pub conversation_id: Option<String>,
    /// How many times the run has been claimed, this claim included: more
    /// than one means an earlier worker released it or died holding it.
    pub claims: u64,
}

/// What [`ClaimStore::record_answer`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerStatus {
    /// Recorded: the next claimer gets it.
    Recorded,
    /// An answer for that request was already recorded; the first one stands.
    Duplicate,
    /// The run does not wait for that request (answered and resumed
    /// already, or never asked). Nothing was recorded.
    NotPending,
}

/// A stored run, as listed.
#[derive(Debug, Clone, PartialEq)]
pub struct RunInfo {
    /// The run id.
    pub run_id: String,
    /// The conversation it belongs to, if any.
    pub conversation_id: Option<String>,
    /// The record version.
    pub version: u64,
    /// What it waits for (what the next claimer will see).
    pub pending: Vec<Request>,
    /// Ids of the pending requests that have an answer recorded.
    pub answered: Vec<String>,
    /// When it was first stored (ms since the epoch).
    pub created_ms: u64,
    /// When its state was last written (ms since the epoch).
    pub updated_ms: u64,
    /// The earliest `expiresAt` of its pending requests (ms since the epoch).
    pub expires_ms: Option<u64>,
    /// When the current or last claim runs out.
    pub claimed_until: Option<u64>,
    /// How many times it has been claimed.
    pub claims: u64,
    /// Failed resumes since it last suspended cleanly.
    pub failures: u32,
    /// Why the last failed resume failed.
    pub last_error: Option<String>,
}

impl RunInfo {
    /// Whether a worker holds it at `now`.
    pub fn is_claimed(&self, now: u64) -> bool {
        self.claimed_until.is_some_and(|t| t > now)
    }

    /// The kinds of its pending requests, in order, without repeats.
    pub fn kinds(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in &self.pending {
            if !out.contains(&r.kind.as_str()) {
                out.push(&r.kind);
            }
        }
        out
    }
}

/// Which runs [`ClaimStore::list_runs`] returns (all conditions must hold),
/// oldest state first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs with a pending request of this kind.
    pub kind: Option<String>,
    /// Only runs whose state was last written at or before this time (their age).
    pub updated_before: Option<u64>,
    /// Only runs with a pending request that expires at or before this time.
    pub expires_before: Option<u64>,
    /// Only runs of this conversation.
    pub conversation_id: Option<String>,
    /// `Some(true)`: only runs a worker holds at `now`; `Some(false)`: only
    /// runs nobody holds; `None`: both.
    pub claimed: Option<bool>,
    /// At most this many.
    pub limit: Option<usize>,
}

impl RunFilter {
    /// Every run.
    pub fn new() -> RunFilter {
        RunFilter::default()
    }

    /// Only runs waiting on a request of `kind`.
    pub fn kind(mut self, kind: impl Into<String>) -> RunFilter {
        self.kind = Some(kind.into());
        self
    }

    /// Only runs whose state is at least `age_ms` old at `now`.
    pub fn older_than(mut self, now: u64, age_ms: u64) -> RunFilter {
        self.updated_before = Some(now.saturating_sub(age_ms));
        self
    }

    /// Only runs with a request expiring at or before `at`.
    pub fn expiring_by(mut self, at: u64) -> RunFilter {
        self.expires_before = Some(at);
        self
    }

    /// Only runs of one conversation.
    pub fn conversation(mut self, id: impl Into<String>) -> RunFilter {
        self.conversation_id = Some(id.into());
        self
    }

    /// Only claimed (`true`) or only unclaimed (`false`) runs.
    pub fn claimed(mut self, claimed: bool) -> RunFilter {
        self.claimed = Some(claimed);
        self
    }

    /// At most `n` runs.
    pub fn limit(mut self, n: usize) -> RunFilter {
        self.limit = Some(n);
        self
    }
}

/// What [`ClaimStore::delete_conversation`] removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConversationDeleted {
    /// Whether a saved transcript was removed.
    pub conversation: bool,
    /// How many runs of the conversation were removed (claimed ones too:
    /// their workers' next write fails with [`StoreError::Conflict`]).
    pub runs: u64,
}

/// Suspended runs shared by many workers: claims with a lease, answers
/// recorded before the claim, progress saves, listing. See the [module
/// docs](self) for the life of a run.
///
/// Every write is one transaction. Writes made under a claim name its
/// [`Lease`]; they fail with [`StoreError::Conflict`] when the record moved
/// on (the lease ran out and another worker claimed it, or it was deleted).
pub trait ClaimStore: RunStore + ConversationStore {
    /// Stores a run that has just suspended, under its run id, optionally as
    /// part of a conversation. Returns its version (1). Refuses an existing
    /// id with [`StoreError::Conflict`].
    fn insert_run(&self, run: &SuspendedRun, conversation_id: Option<&str>, now: u64) -> Result<u64, StoreError>;

    /// Records the answer to one pending request of a run (claimed or not).
    /// [`StoreError::NotFound`] when there is no such run.
    fn record_answer(&self, run_id: &str, answer: &Answer, now: u64) -> Result<AnswerStatus, StoreError>;

    /// Claims the run `run_id` until `now + lease_ms`, with its recorded
    /// answers. [`StoreError::Claimed`] while another claim is live,
    /// [`StoreError::NotFound`] when there is no such run.
    fn claim_run(&self, run_id: &str, now: u64, lease_ms: u64) -> Result<Claim, StoreError>;

    /// Claims the run that has waited longest among those nobody holds that
    /// have at least one recorded answer (and fewer failed resumes than the
    /// store's limit). `None` when there is none.
    fn claim_ready(&self, now: u64, lease_ms: u64) -> Result<Option<Claim>, StoreError>;

    /// Writes `state` while keeping the claim, and extends it to
    /// `now + lease_ms`. `lease` is updated to the new version.
    fn save_progress(&self, lease: &mut Lease, state: &[u8], now: u64, lease_ms: u64) -> Result<(), StoreError>;

    /// Extends the claim to `now + lease_ms` without writing the state (a
    /// heartbeat: a resume that outlives its lease keeps its run while it is
    /// alive; a dead worker's claim still runs out). The version is unchanged.
    /// [`StoreError::Conflict`] when the claim is lost (the record moved on:
    /// another worker claimed it after the lease ran out, or it was released
    /// or removed): the worker must stop before its next side effect.
    fn renew_claim(&self, lease: &mut Lease, now: u64, lease_ms: u64) -> Result<(), StoreError>;

    /// Writes the state of a run that suspended again and releases the claim
    /// (its failure count is reset). Returns the new version.
    fn suspend_claimed(&self, lease: &Lease, state: &[u8], now: u64) -> Result<u64, StoreError>;

    /// Removes a finished run with its answers; when it belongs to a
    /// conversation and `transcript` is given, saves that as the
    /// conversation's transcript in the same transaction.
    fn finish_claimed(&self, lease: &Lease, transcript: Option<&[Message]>, now: u64) -> Result<(), StoreError>;

    /// Gives the run back without changing its state (the last one written
    /// stands). With `error`, counts a failed resume and keeps the message.
    /// Returns the new version.
    fn release_claim(&self, lease: &Lease, error: Option<&str>, now: u64) -> Result<u64, StoreError>;

    /// The runs matching `filter` (claims judged at `now`), oldest state first.
    fn list_runs(&self, filter: &RunFilter, now: u64) -> Result<Vec<RunInfo>, StoreError>;

    /// Removes a conversation's transcript and every run of it, with their
    /// answers, in one transaction.
    fn delete_conversation(&self, id: &str) -> Result<ConversationDeleted, StoreError>;
}

/// The wall clock in ms since the epoch, for the [`RunStore`] methods (which
/// take no time) and for [`Checkpoints`] by default.
pub fn wall_clock_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)).unwrap_or(0)
}

/// An RFC 3339 timestamp (`2025-06-01T12:00:00Z`, `…T12:00:00.250+02:00`)
/// as ms since the epoch; times before the epoch are 0. `None` when it is
/// not RFC 3339: `expiresAt` is advisory, so an unreadable one only means
/// the run is not listed by expiry.
pub fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        part.iter().try_fold(0i64, |acc, d| Some(acc * 10 + i64::from(d - b'0')))
    };
    let sep = |at: usize, allowed: &[u8]| b.get(at).is_some_and(|c| allowed.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap(year) => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > month_days || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while let Some(d) = b.get(i).filter(|d| d.is_ascii_digit()) {
            if i - start < 3 {
                millis = millis * 10 + i64::from(d - b'0');
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        for _ in (i - start)..3 {
            millis *= 10;
        }
    }
    let offset_min = match b.get(i) {
        Some(b'Z' | b'z') if i + 1 == b.len() => 0,
        Some(&c @ (b'+' | b'-')) if i + 6 == b.len() && sep(i + 3, b":") => {
            let (oh, om) = (num(i + 1, 2)?, num(i + 4, 2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let m = oh * 60 + om;
            if c == b'+' {
                m
            } else {
                -m
            }
        }
        _ => return None,
    };
    // Days from 1970-01-01 to the date (Howard Hinnant's days_from_civil).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    // A leap second (:60) counts as the next second's start.
    let secs = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_min * 60;
    Some(u64::try_from(secs * 1000 + millis).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_by_the_rules() {
        // 2000-03-01 is 11017 days after the epoch (30 years of 365 days,
        // 7 leap days in 1972..=1996, plus Jan and Feb 2000 = 31 + 29).
        assert_eq!(parse_rfc3339_ms("2000-03-01T00:00:00Z"), Some(11_017 * 86_400_000));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1_500));
        assert_eq!(parse_rfc3339_ms("1970-01-01t00:00:00.123456z"), Some(123));
        // An offset east of UTC is earlier in UTC.
        assert_eq!(parse_rfc3339_ms("1970-01-01T02:00:00+02:00"), Some(0));
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00-00:30"), Some(1_800_000));
        assert_eq!(parse_rfc3339_ms("1969-12-31T23:59:59Z"), Some(0));
        for bad in [
            "",
            "2025-02-29T00:00:00Z",
            "2025-13-01T00:00:00Z",
            "2025-01-01T00:00:00",
            "2025-01-01T24:00:00Z",
            "2025-01-01T00:00:00.Z",
            "2025-01-01T00:00:00+0200",
            "2025-01-01T00:00:00Zjunk",
            "２０25-01-01T00:00:00Z",
        ] {
            assert_eq!(parse_rfc3339_ms(bad), None, "{bad}");
        }
        assert!(parse_rfc3339_ms("2024-02-29T00:00:00Z").is_some());
    }

    #[test]
    fn kinds_are_listed_once_in_order() {
        let info = RunInfo {
            run_id: "r".into(),
            conversation_id: None,
            version: 1,
            pending: vec![Request::new("approval", "a"), Request::new("input", "b"), Request::new("approval", "c")],
            answered: vec![],
            created_ms: 0,
            updated_ms: 0,
            expires_ms: None,
            claimed_until: Some(10),
            claims: 1,
            failures: 0,
            last_error: None,
        };
        assert_eq!(info.kinds(), ["approval", "input"]);
        assert!(info.is_claimed(9) && !info.is_claimed(10));
    }
}
