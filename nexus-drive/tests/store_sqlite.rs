//! `SqliteStore` against the store contract (feature `sqlite`):
//! `cargo test -p nexus-drive --features sqlite --test store_sqlite`.
//!
//! The concurrency test resumes `NEXUS_STORE_RUNS` runs (default 1,000)
//! with 4 threads, each on its own connection to one WAL file; the kill
//! test kills a worker process that shares the file.
#![cfg(all(feature = "sqlite", feature = "blocking", feature = "async"))]

mod store_support;

use nexus_drive::stores::sqlite::SqliteStore;
use nexus_drive::stores::ClaimStore;
use nexus_drive::{RunStore, StoreError};
use store_support::{scenarios, workers, Db};

fn with_db(tag: &str, f: impl FnOnce(&Db)) {
    let db = Db::sqlite(tag);
    f(&db);
    db.cleanup();
}

#[test]
fn round_trips() {
    with_db("rt", scenarios::round_trips);
}

#[test]
fn claim_conflicts() {
    with_db("cc", scenarios::claim_conflicts);
}

#[test]
fn failing_runs_are_set_aside() {
    with_db("fail", scenarios::failing_runs_are_set_aside);
}

#[test]
fn lease_expiry() {
    with_db("lease", scenarios::lease_expiry);
}

#[test]
fn heartbeat_keeps_the_claim() {
    with_db("beat", scenarios::heartbeat_keeps_the_claim);
}

#[test]
fn a_lost_claim_stops_the_resume() {
    with_db("lost", scenarios::a_lost_claim_stops_the_resume);
}

#[test]
fn answers_before_claim() {
    with_db("ans", scenarios::answers_before_claim);
}

#[test]
fn listing() {
    with_db("list", scenarios::listing);
}

#[test]
fn async_resume_and_a_client_without_checkpoints() {
    with_db("async", scenarios::async_resume_and_a_client_without_checkpoints);
}

#[test]
fn delete_cascade() {
    with_db("del", scenarios::delete_cascade);
}

#[test]
fn concurrency_four_threads() {
    // The test is about correctness: `synchronous = NORMAL` keeps fsyncs
    // from dominating (a process crash still loses nothing).
    let db = Db { durable: false, ..Db::sqlite("conc") };
    workers::concurrency(&db, false);
    db.cleanup();
}

#[test]
fn kill_mid_resume() {
    with_db("kill", workers::kill_mid_resume);
}

#[test]
fn wal_mode_and_schema_version() {
    let db = Db::sqlite("wal");
    let _store = SqliteStore::open(&db.location).unwrap();
    let conn = rusqlite::Connection::open(&db.location).unwrap();
    let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0)).unwrap();
    assert_eq!(mode, "wal");
    let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(v, 1);
    // A database written by a newer build is refused, not misread.
    conn.pragma_update(None, "user_version", 2).unwrap();
    drop(conn);
    let err = SqliteStore::open(&db.location).unwrap_err();
    assert!(matches!(&err, StoreError::Io(m) if m.contains("newer")), "{err:?}");
    db.cleanup();
}

#[test]
fn in_memory_store_works_without_wal() {
    let store = SqliteStore::open_in_memory().unwrap();
    assert_eq!(RunStore::save(&store, "r", b"x", None).unwrap(), 1);
    assert!(store.list_runs(&Default::default(), 0).unwrap()[0].pending.is_empty());
}

/// Not a test: the body of a worker process (see `store_support::workers`).
#[test]
#[ignore = "entry point of the worker processes the multi-process tests start"]
fn worker_entry() {
    workers::worker_main();
}
