//! `--store`: where `nexus run` keeps a suspended run under its run id and
//! where `nexus resume` claims it, so that while a claim holds no other
//! resume of that suspension can start; and `nexus runs`, which lists what
//! a store holds.
//!
//! * `sqlite:PATH` — a [`SqliteStore`] file. A claim is a lease (`--lease`,
//!   default 5 minutes) that a [`Heartbeat`] renews
//!   every third of the lease while the resume runs (SPEC §20.2), so no
//!   second resume can claim a run whose resume is alive, however long it
//!   takes. If the resuming process dies, its claim runs out one lease after
//!   the last renewal and the run can be claimed again. Should a claim still
//!   be lost (the process stalled past its lease and another resume took
//!   the run), the renewal says so and the resume is cancelled before its
//!   next model call or tool; its outcome is never written (exit 5).
//! * `dir:PATH`, or a plain directory path — a [`FileRunStore`]: one
//!   `<id>.run` file per run, each write under a lock. Its claim is held
//!   until the resume ends.

use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::Duration;

use nexus_drive::stores::sqlite::SqliteStore;
use nexus_drive::stores::{wall_clock_ms, ClaimStore, Lease, RunFilter};
use nexus_drive::{CancelToken, FileRunStore, RunStore, StoreError, SuspendedRun};
use nexus_proto::{Answer, Request, Run};
use serde_json::{json, Value};

use crate::{out, Fail};

/// Where a `--store` value points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `sqlite:PATH`.
    Sqlite(PathBuf),
    /// `dir:PATH` or a plain path: the file store.
    Dir(PathBuf),
}

/// Reads a `--store` value. A prefix that looks like a scheme (two or more
/// of `[A-Za-z0-9+.-]`, starting with a letter, then `:`) must be one we
/// know; anything else is a directory path (one-letter prefixes stay paths
/// so that `C:\runs` means a directory). A directory whose name has such a
/// prefix is written `dir:NAME`.
pub fn parse_location(spec: &str) -> Result<Location, Fail> {
    let scheme = spec.split_once(':').filter(|(s, _)| {
        s.len() >= 2
            && s.starts_with(|c: char| c.is_ascii_alphabetic())
            && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '.' | '-'))
    });
    let (location, path) = match scheme {
        Some(("sqlite", path)) => (Location::Sqlite(PathBuf::from(path)), path),
        Some(("dir", path)) => (Location::Dir(PathBuf::from(path)), path),
        Some((other, _)) => {
            return Err(Fail::usage(format!(
                "--store {spec:?}: unknown store scheme {other:?}; use sqlite:PATH, dir:PATH or a directory path"
            )))
        }
        None => (Location::Dir(PathBuf::from(spec)), spec),
    };
    if path.is_empty() {
        return Err(Fail::usage(format!("--store {spec:?}: no path after the scheme")));
    }
    Ok(location)
}

enum Backend {
    File(FileRunStore),
    /// The store and its file (a heartbeat opens its own connection).
    Sqlite(SqliteStore, PathBuf),
}

/// An open store.
pub struct Store {
    /// The `--store` value as given, for messages.
    pub spec: String,
    backend: Backend,
}

/// A run this process has claimed: writes name the version of the claim.
pub struct Held {
    /// The run id.
    pub run_id: String,
    /// The state as claimed.
    pub state: Vec<u8>,
    /// Answers recorded in the store for its pending requests (SQLite; a
    /// host sharing the database may have recorded some).
    pub recorded: Vec<Answer>,
    version: u64,
    claimed_until: u64,
}

impl Held {
    fn lease(&self) -> Lease {
        Lease { run_id: self.run_id.clone(), version: self.version, claimed_until: self.claimed_until }
    }
}

/// A stored run, as `nexus runs` lists it.
pub struct Listed {
    /// The run id.
    pub run_id: String,
    /// Whether a resume holds it now.
    pub claimed: bool,
    /// The record version.
    pub version: u64,
    /// What it waits for.
    pub pending: Vec<Request>,
}

/// A running claim renewal ([`Store::heartbeat`]).
pub struct Heartbeat {
    stop: CancelToken,
    thread: JoinHandle<Option<StoreError>>,
}

impl Heartbeat {
    /// Stops renewing; why the claim was lost, if it was.
    pub fn stop(self) -> Option<StoreError> {
        self.stop.cancel();
        self.thread.join().ok().flatten()
    }
}

/// The exit-5 refusal for a run that cannot be claimed.
fn refused(e: StoreError, run_id: &str, spec: &str) -> Fail {
    match e {
        StoreError::Claimed(_) => Fail::conflict(format!(
            "run {run_id} in {spec} is claimed: another resume of this suspension is under way; nothing was changed"
        )),
        StoreError::NotFound(_) => Fail::conflict(format!(
            "run {run_id} is not waiting in {spec}: it was already resumed to the end, or never suspended there; nothing was changed"
        )),
        other => Fail::runtime(format!("{spec}: {other}")),
    }
}

impl Store {
    /// Opens the store `--store spec` names. `create`: make it if missing
    /// (`nexus run`); otherwise a missing store is an error rather than an
    /// empty new one (a mistyped path must not look like "no such run").
    pub fn open(spec: &str, create: bool) -> Result<Store, Fail> {
        let location = parse_location(spec)?;
        let path = match &location {
            Location::Sqlite(p) | Location::Dir(p) => p.as_path(),
        };
        if !create && !path.exists() {
            return Err(Fail::runtime(format!("no store at {}: {spec} does not exist", path.display())));
        }
        let fail = |e: StoreError| Fail::runtime(format!("cannot open the store {spec}: {e}"));
        let backend = match &location {
            Location::Sqlite(p) => Backend::Sqlite(SqliteStore::open(p).map_err(fail)?, p.clone()),
            Location::Dir(p) => Backend::File(FileRunStore::open(p).map_err(fail)?),
        };
        Ok(Store { spec: spec.to_string(), backend })
    }

    /// Stores a run that has just suspended. An id already stored is an
    /// error (run ids are drawn at random per run: it means a clash).
    pub fn insert(&self, run: &SuspendedRun) -> Result<(), Fail> {
        let stored = match &self.backend {
            Backend::Sqlite(s, _) => s.insert_run(run, None, wall_clock_ms()).map(|_| ()),
            Backend::File(s) => s.save(&run.run_id, &run.state, None).map(|_| ()),
        };
        stored.map_err(|e| Fail::runtime(format!("cannot store run {} in {}: {e}", run.run_id, self.spec)))
    }

    /// The state stored for `run_id`, without claiming it.
    pub fn peek(&self, run_id: &str) -> Result<Vec<u8>, Fail> {
        let record = match &self.backend {
            Backend::Sqlite(s, _) => s.load(run_id),
            Backend::File(s) => s.load(run_id),
        };
        match record {
            Ok(Some(r)) => Ok(r.state),
            Ok(None) => Err(refused(StoreError::NotFound(run_id.to_string()), run_id, &self.spec)),
            Err(e) => Err(refused(e, run_id, &self.spec)),
        }
    }

    /// Claims `run_id`: while the claim holds, this process alone may resume
    /// it (a SQLite claim lasts `lease_ms` unless renewed; see the module docs).
    pub fn claim(&self, run_id: &str, lease_ms: u64) -> Result<Held, Fail> {
        let held = match &self.backend {
            Backend::Sqlite(s, _) => s.claim_run(run_id, wall_clock_ms(), lease_ms).map(|c| Held {
                run_id: run_id.to_string(),
                state: c.state,
                recorded: c.answers,
                version: c.lease.version,
                claimed_until: c.lease.claimed_until,
            }),
            Backend::File(s) => s.claim(run_id).map(|r| Held {
                run_id: run_id.to_string(),
                state: r.state,
                recorded: Vec::new(),
                version: r.version,
                claimed_until: 0,
            }),
        };
        held.map_err(|e| refused(e, run_id, &self.spec))
    }

    /// Keeps `held` while a resume runs: renews a SQLite claim every third of
    /// `lease_ms` on a connection of its own, and cancels `cancel` (the
    /// resume's) when a renewal finds the claim lost. `None` for a `dir:`
    /// store, whose claim holds until it is released.
    pub fn heartbeat(&self, held: &Held, lease_ms: u64, cancel: CancelToken) -> Result<Option<Heartbeat>, Fail> {
        let Backend::Sqlite(_, path) = &self.backend else {
            return Ok(None);
        };
        let store = SqliteStore::open(path)
            .map_err(|e| Fail::runtime(format!("cannot open the store {} to renew the claim: {e}", self.spec)))?;
        let mut lease = held.lease();
        let stop = CancelToken::new();
        let stopped = stop.clone();
        let every = Duration::from_millis((lease_ms / 3).max(1));
        let thread = std::thread::spawn(move || {
            while !stopped.sleep(every) {
                match store.renew_claim(&mut lease, wall_clock_ms(), lease_ms) {
                    Ok(()) => {}
                    Err(e @ (StoreError::Conflict { .. } | StoreError::NotFound(_))) => {
                        cancel.cancel();
                        return Some(e);
                    }
                    // The file was busy or unreadable: the lease still holds
                    // for two more beats; try again then.
                    Err(_) => {}
                }
            }
            None
        });
        Ok(Some(Heartbeat { stop, thread }))
    }

    /// The claim was lost while the resume ran: nothing of it was kept.
    pub fn claim_lost(&self, held: &Held, e: &StoreError) -> Fail {
        Fail::conflict(format!(
            "lost the claim on run {} in {} while resuming it ({e}): another resume took it; this resume was \
             stopped and nothing of it was saved",
            held.run_id, self.spec
        ))
    }

    /// The claimed run suspended again: writes its new state and releases the claim.
    pub fn suspend(&self, held: &Held, state: &[u8]) -> Result<(), Fail> {
        let written = match &self.backend {
            Backend::Sqlite(s, _) => s.suspend_claimed(&held.lease(), state, wall_clock_ms()).map(|_| ()),
            Backend::File(s) => s.save(&held.run_id, state, Some(held.version)).map(|_| ()),
        };
        written.map_err(|e| self.lost(held, e))
    }

    /// The claimed run is over (done or incomplete): removes it.
    pub fn finish(&self, held: &Held) -> Result<(), Fail> {
        let removed = match &self.backend {
            Backend::Sqlite(s, _) => s.finish_claimed(&held.lease(), None, wall_clock_ms()),
            Backend::File(s) => s.delete(&held.run_id, held.version),
        };
        removed.map_err(|e| self.lost(held, e))
    }

    /// Gives the claimed run back unchanged, so it can be resumed again.
    /// `error` says why this resume failed (SQLite counts and keeps it).
    pub fn release(&self, held: &Held, error: Option<&str>) -> Result<(), Fail> {
        let released = match &self.backend {
            Backend::Sqlite(s, _) => s.release_claim(&held.lease(), error, wall_clock_ms()).map(|_| ()),
            Backend::File(s) => s.save(&held.run_id, &held.state, Some(held.version)).map(|_| ()),
        };
        released.map_err(|e| self.lost(held, e))
    }

    /// A write under the claim was refused: the record moved on without us.
    fn lost(&self, held: &Held, e: StoreError) -> Fail {
        match e {
            StoreError::Conflict { .. } => Fail::conflict(format!(
                "run {} in {} changed while this resume held it (its claim ran out and another resume took it): \
                 this resume's outcome was not saved",
                held.run_id, self.spec
            )),
            other => Fail::runtime(format!("cannot write run {} in {}: {other}", held.run_id, self.spec)),
        }
    }

    /// Every stored run, oldest first (SQLite) or by id (files).
    pub fn list(&self) -> Result<Vec<Listed>, Fail> {
        let fail = |e: StoreError| Fail::runtime(format!("cannot list {}: {e}", self.spec));
        match &self.backend {
            Backend::Sqlite(s, _) => {
                let now = wall_clock_ms();
                let infos = s.list_runs(&RunFilter::new(), now).map_err(fail)?;
                Ok(infos
                    .into_iter()
                    .map(|i| Listed {
                        claimed: i.is_claimed(now),
                        version: i.version,
                        pending: i.pending,
                        run_id: i.run_id,
                    })
                    .collect())
            }
            Backend::File(s) => {
                let ids = s.ids().map_err(fail)?;
                let mut out = Vec::with_capacity(ids.len());
                for id in ids {
                    // Removed between the directory read and now: finished, not listed.
                    let Some(record) = s.load(&id).map_err(fail)? else { continue };
                    let pending = Run::restore(&record.state).map(|r| r.outstanding()).unwrap_or_default();
                    out.push(Listed { run_id: id, claimed: record.claimed, version: record.version, pending });
                }
                Ok(out)
            }
        }
    }
}

/// List the suspended runs a store holds
///
/// Lists the suspended runs STORE holds: one line per run with its id, whether
/// a resume holds it, what it waits for (kind and request id) and when a
/// pending MCP login expires. With --json, an array of {runId, claimed,
/// version, pending, logins: [{id, expiresAt, expired}]}.
#[derive(clap::Args)]
pub struct RunsArgs {
    /// The store: sqlite:PATH, dir:PATH or a directory path (as given to nexus run --store).
    #[arg(long, value_name = "STORE")]
    store: String,
    /// Print the runs as one JSON array.
    #[arg(long)]
    json: bool,
}

/// Runs `nexus runs`.
pub fn runs_main(args: RunsArgs) -> Result<i32, Fail> {
    let spec = &args.store;
    let runs = Store::open(spec, false)?.list()?;
    let now = wall_clock_ms() / 1000;
    if args.json {
        let mut list = Vec::with_capacity(runs.len());
        for r in &runs {
            let logins: Vec<Value> = logins(r)?
                .into_iter()
                .map(|(id, at)| json!({"id": id, "expiresAt": at, "expired": at <= now}))
                .collect();
            list.push(json!({
                "runId": r.run_id, "claimed": r.claimed, "version": r.version, "pending": r.pending, "logins": logins
            }));
        }
        out(&Value::Array(list).to_string());
        return Ok(0);
    }
    for r in &runs {
        let mut waits: Vec<String> = r.pending.iter().map(|q| format!("{}:{}", q.kind, q.id)).collect();
        for (_, at) in logins(r)? {
            waits.push(match at.checked_sub(now).filter(|left| *left > 0) {
                Some(left) => format!("(login expires in {} min)", left.div_ceil(60)),
                None => "(login expired)".to_string(),
            });
        }
        let state = if r.claimed { "claimed" } else { "waiting" };
        out(&format!("{}\t{state}\t{}", r.run_id, waits.join(" ")));
    }
    Ok(0)
}

/// The run's pending MCP logins whose start the token store knows, with
/// when each expires (unix seconds).
fn logins(r: &Listed) -> Result<Vec<(String, u64)>, Fail> {
    let mut found = Vec::new();
    for q in r.pending.iter().filter(|q| q.kind == "authorization") {
        if let Some(at) = crate::mcp_auth::login_expiry(&q.id)? {
            found.push((q.id.clone(), at));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_locations() {
        assert_eq!(parse_location("sqlite:runs.db").unwrap(), Location::Sqlite("runs.db".into()));
        assert_eq!(parse_location("sqlite:/a:b/runs.db").unwrap(), Location::Sqlite("/a:b/runs.db".into()));
        assert_eq!(parse_location("dir:runs").unwrap(), Location::Dir("runs".into()));
        assert_eq!(parse_location("dir:odd:name").unwrap(), Location::Dir("odd:name".into()));
        assert_eq!(parse_location("./runs").unwrap(), Location::Dir("./runs".into()));
        assert_eq!(parse_location("/var/lib/nexus").unwrap(), Location::Dir("/var/lib/nexus".into()));
        assert_eq!(parse_location("C:\\runs").unwrap(), Location::Dir("C:\\runs".into()));
        for bad in ["postgres://localhost/db", "redis:x", "sqlite:", "dir:"] {
            assert_eq!(parse_location(bad).unwrap_err().code, 2, "{bad}");
        }
    }
}
