//! Throughput of the database stores: how many suspended runs per second
//! workers take through claim → resume → save.
//!
//! `cargo bench -p nexus-drive --features sqlite,postgres --bench stores`
//! (PostgreSQL rows need `NEXUS_PG_URL`, e.g. from `.ci/postgres.sh start`).
//! `NEXUS_BENCH_RUNS` sets the runs per round (default 200); each row is
//! the median of 5 rounds, each on a fresh database. Prints a markdown
//! table; nothing is asserted.
//!
//! Two cycles per store:
//! * `resume`: the whole worker cycle. `claim_ready` takes a run whose
//!   approval was recorded, the blocking client resumes it (the tool runs,
//!   one model call to the fake provider on loopback), `Checkpoints` saves
//!   progress twice and the run is finished (removed). Four transactions and
//!   one HTTP exchange per run.
//! * `store only`: the same four transactions (`claim_ready`, two
//!   `save_progress`, `finish_claimed`) without resuming: the store's share
//!   of a cycle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nexus_drive::blocking::Client;
use nexus_drive::stores::{wall_clock_ms, Checkpoints, ClaimStore};
use nexus_drive::{Answer, ClientConfig, DynTool, Request, Style, SuspendedRun, ToolOutcome};
use nexus_tests::fake::{FakeProvider, Script, Scripts, Style as FakeStyle, Turn};
use serde_json::json;

const KEY: &str = "sk-bench";
const MODEL: &str = "m-bench";
const ROUNDS: usize = 5;

type Open = Box<dyn Fn(usize) -> Arc<dyn ClaimStore>>;

struct Backend {
    name: &'static str,
    /// A fresh, empty store for round `n` (and more connections to it).
    open: Open,
    cleanup: Box<dyn Fn(usize)>,
}

fn client(url: &str, seed: u64, ck: Option<Arc<Checkpoints<dyn ClaimStore>>>) -> Client {
    let tool = DynTool::new("approve", "needs an approval", json!({"type": "object"}), |_, ctx| {
        Ok(match ctx.answer() {
            None => ToolOutcome::Pending(Request::new("approval", "ok?")),
            Some(_) => ToolOutcome::Done(json!("done")),
        })
    });
    let mut b = ClientConfig::builder(Style::OpenAi, MODEL).base_url(url).api_key(KEY).seed(seed).dyn_tool(tool);
    if let Some(ck) = ck {
        b = b.tap(ck);
    }
    match b.build() {
        Ok(cfg) => Client::new(cfg),
        Err(e) => panic!("bench client: {e}"),
    }
}

fn suspended(url: &str, n: usize) -> Vec<SuspendedRun> {
    (0..n as u64)
        .map(|seed| {
            let r = client(url, seed + 1, None).run("go").expect("suspend");
            r.suspended.expect("the run suspends")
        })
        .collect()
}

/// Stores `runs` in `store` with their approvals recorded.
fn load(store: &dyn ClaimStore, runs: &[SuspendedRun]) {
    let now = wall_clock_ms();
    for s in runs {
        store.insert_run(s, None, now).expect("insert");
        for r in &s.pending {
            store.record_answer(&s.run_id, &Answer::ok(r.id.clone(), None), now).expect("answer");
        }
    }
}

/// Runs one cycle with `workers` threads until nothing is ready; returns runs/s.
fn round(backend: &Backend, n: usize, url: &str, runs: &[SuspendedRun], workers: usize, full: bool) -> f64 {
    let store = (backend.open)(n);
    load(&*store, runs);
    let start = Instant::now();
    std::thread::scope(|scope| {
        for w in 0..workers {
            let store = if w == 0 { store.clone() } else { (backend.open)(n) };
            scope.spawn(move || {
                let ck = Arc::new(Checkpoints::new(store.clone()).with_lease_ms(60_000));
                let c = client(url, 0, Some(ck.clone()));
                while let Some(claim) = ck.claim_ready().expect("claim") {
                    if full {
                        ck.resume(&c, claim).expect("resume");
                    } else {
                        // The same transactions as a resume, without the run.
                        let mut lease = claim.lease;
                        for _ in 0..2 {
                            let now = wall_clock_ms();
                            store.save_progress(&mut lease, &claim.state, now, 60_000).expect("save");
                        }
                        store.finish_claimed(&lease, None, wall_clock_ms()).expect("finish");
                    }
                }
            });
        }
    });
    let secs = start.elapsed().as_secs_f64();
    (backend.cleanup)(n);
    runs.len() as f64 / secs.max(1e-9)
}

fn backends() -> Vec<Backend> {
    let mut out = Vec::new();
    #[cfg(feature = "sqlite")]
    {
        use nexus_drive::stores::sqlite::{SqliteOptions, SqliteStore};
        for (name, full) in [("sqlite (synchronous=FULL)", true), ("sqlite (synchronous=NORMAL)", false)] {
            let dir = std::env::temp_dir().join(format!("nexus-bench-stores-{}-{full}", std::process::id()));
            let path = move |n: usize| dir.join(format!("round-{n}.db"));
            let p2 = path.clone();
            out.push(Backend {
                name,
                open: Box::new(move |n| {
                    let p = path(n);
                    if let Some(d) = p.parent() {
                        let _ = std::fs::create_dir_all(d);
                    }
                    let o = SqliteOptions {
                        synchronous_full: full,
                        busy_timeout: Duration::from_secs(30),
                        ..SqliteOptions::default()
                    };
                    Arc::new(SqliteStore::open_with(p, o).expect("open sqlite"))
                }),
                cleanup: Box::new(move |n| {
                    let p = p2(n);
                    for suffix in ["", "-wal", "-shm"] {
                        let _ = std::fs::remove_file(format!("{}{suffix}", p.display()));
                    }
                }),
            });
        }
    }
    #[cfg(feature = "postgres")]
    match std::env::var("NEXUS_PG_URL") {
        Ok(url) => {
            use nexus_drive::stores::postgres::PostgresStore;
            let schema = |n: usize| format!("bench_{}_{n}", std::process::id());
            let u2 = url.clone();
            out.push(Backend {
                name: "postgres",
                open: Box::new(move |n| Arc::new(PostgresStore::connect_in_schema(&url, &schema(n)).expect("connect"))),
                cleanup: Box::new(move |n| {
                    if let Ok(mut c) = postgres::Client::connect(&u2, postgres::NoTls) {
                        let _ =
                            c.batch_execute(&format!("DROP SCHEMA IF EXISTS bench_{}_{n} CASCADE", std::process::id()));
                    }
                }),
            });
        }
        Err(_) => eprintln!("postgres rows skipped: NEXUS_PG_URL is unset"),
    }
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let n: usize = std::env::var("NEXUS_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(200);
    let fake = FakeProvider::start(
        Scripts::new(KEY)
            .model(MODEL, Script::new(vec![Turn::default().call("approve", "{}"), Turn::text("approved")])),
    );
    let url = fake.base_url(FakeStyle::OpenAi);
    let runs = suspended(&url, n);

    println!("| store | cycle | workers | runs/s (median of {ROUNDS}) | ms/run |");
    println!("|---|---|---:|---:|---:|");
    let mut round_no = 0;
    for b in backends() {
        for (cycle, full, workers) in [("store only", false, 1), ("resume", true, 1), ("resume", true, 4)] {
            let rates: Vec<f64> = (0..ROUNDS)
                .map(|_| {
                    round_no += 1;
                    round(&b, round_no, &url, &runs, workers, full)
                })
                .collect();
            let m = median(rates);
            println!("| {} | {cycle} | {workers} | {m:.0} | {:.2} |", b.name, 1000.0 / m.max(1e-9));
        }
    }
}
