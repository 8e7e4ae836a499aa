//! `PostgresStore` against the store contract (feature `postgres`). Needs a
//! server: `eval "$(.ci/postgres.sh start)"` exports `NEXUS_PG_URL`; each
//! test prints a line and passes without checking anything when it is unset.
//!
//! `cargo test -p nexus-drive --features postgres --test store_postgres`.
//! Each test works in its own schema, dropped at the end. The concurrency
//! test resumes `NEXUS_STORE_RUNS` runs (default 1,000) with 4 worker
//! processes; the kill test kills one with SIGKILL mid-resume.
#![cfg(all(feature = "postgres", feature = "blocking", feature = "async"))]

mod store_support;

use nexus_drive::stores::postgres::PostgresStore;
use nexus_drive::StoreError;
use store_support::{scenarios, workers, Db};

fn with_db(tag: &str, f: impl FnOnce(&Db)) {
    if let Some(db) = Db::postgres(tag) {
        f(&db);
        db.cleanup();
    }
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
fn concurrency_four_processes() {
    with_db("conc", |db| workers::concurrency(db, true));
}

#[test]
fn kill_mid_resume() {
    with_db("kill", workers::kill_mid_resume);
}

#[test]
fn schema_is_migrated_once_and_a_newer_one_refused() {
    with_db("schema", |db| {
        let schema = db.schema.clone().unwrap();
        // Four stores opening at once on an empty schema: one creates it.
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (url, schema) = (db.location.clone(), schema.clone());
                std::thread::spawn(move || PostgresStore::connect_in_schema(&url, &schema).map(|_| ()))
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        let mut c = postgres::Client::connect(&db.location, postgres::NoTls).unwrap();
        let q = format!("SELECT version FROM {schema}.schema_version");
        let versions: Vec<i32> = c.query(&q, &[]).unwrap().iter().map(|r| r.get(0)).collect();
        assert_eq!(versions, vec![1]);
        c.batch_execute(&format!("INSERT INTO {schema}.schema_version VALUES (2)")).unwrap();
        let err = PostgresStore::connect_in_schema(&db.location, &schema).unwrap_err();
        assert!(matches!(&err, StoreError::Io(m) if m.contains("newer")), "{err:?}");
        assert!(matches!(PostgresStore::connect_in_schema(&db.location, "Bad-Name"), Err(StoreError::Io(_))));
    });
}

/// Not a test: the body of a worker process (see `store_support::workers`).
#[test]
#[ignore = "entry point of the worker processes the multi-process tests start"]
fn worker_entry() {
    workers::worker_main();
}
