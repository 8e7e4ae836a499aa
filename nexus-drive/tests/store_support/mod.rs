//! Shared by the database store tests (`store_sqlite.rs`, `store_postgres.rs`):
//! one set of scenarios over any [`ClaimStore`], runs suspended against the
//! fake provider, and the worker processes of the multi-process tests.
//!
//! Expectations come from the contract (claims, leases, the ledger's in-doubt
//! rule) and from the scripts the fake answers with, never from an earlier
//! run's output.
#![allow(dead_code)]

pub mod scenarios;
pub mod workers;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nexus_drive::blocking::Client;
use nexus_drive::cassette::Tap;
use nexus_drive::stores::ClaimStore;
use nexus_drive::{ClientConfig, DynTool, Request, RunResult, StoreError, Style, SuspendedRun, ToolOutcome};
use nexus_tests::fake::{ExpectFinal, FakeProvider, Script, Scripts, Style as FakeStyle, Turn};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

pub const KEY: &str = "sk-store-test-key";

/// Where a test's database is, in a form a worker process can open too.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Db {
    /// `sqlite` or `postgres`.
    pub kind: String,
    /// The file, or the connection string.
    pub location: String,
    /// PostgreSQL: the schema that isolates this test's tables.
    pub schema: Option<String>,
    /// SQLite: `synchronous = FULL`.
    pub durable: bool,
    /// Failed resumes after which `claim_ready` skips a run.
    pub max_failures: Option<u32>,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn unique(tag: &str) -> String {
    format!("{tag}_{}_{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

impl Db {
    /// A fresh SQLite file in its own temp dir.
    pub fn sqlite(tag: &str) -> Db {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-store-{}", unique(tag)));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Db {
            kind: "sqlite".into(),
            location: dir.join("store.db").to_string_lossy().into_owned(),
            schema: None,
            durable: true,
            max_failures: None,
        }
    }

    /// A fresh schema in the database of `NEXUS_PG_URL`, or `None` (with a
    /// printed line) when it is unset.
    pub fn postgres(tag: &str) -> Option<Db> {
        let Ok(url) = std::env::var("NEXUS_PG_URL") else {
            println!("skipped: NEXUS_PG_URL is unset (start a cluster with `eval \"$(.ci/postgres.sh start)\"`)");
            return None;
        };
        Some(Db {
            kind: "postgres".into(),
            location: url,
            schema: Some(format!("t_{}", unique(tag)).to_lowercase()),
            durable: true,
            max_failures: None,
        })
    }

    /// Opens a connection to it (each call: a new one).
    pub fn open(&self) -> Arc<dyn ClaimStore> {
        match self.try_open() {
            Ok(s) => s,
            Err(e) => panic!("open {} store at {}: {e}", self.kind, self.location),
        }
    }

    fn try_open(&self) -> Result<Arc<dyn ClaimStore>, StoreError> {
        match self.kind.as_str() {
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                use nexus_drive::stores::sqlite::{SqliteOptions, SqliteStore};
                let mut o = SqliteOptions {
                    synchronous_full: self.durable,
                    busy_timeout: Duration::from_secs(30),
                    ..SqliteOptions::default()
                };
                if let Some(n) = self.max_failures {
                    o.max_failures = n;
                }
                Ok(Arc::new(SqliteStore::open_with(&self.location, o)?))
            }
            #[cfg(feature = "postgres")]
            "postgres" => {
                use nexus_drive::stores::postgres::PostgresStore;
                let schema = self.schema.as_deref().unwrap_or("public");
                let mut s = PostgresStore::connect_in_schema(&self.location, schema)?;
                if let Some(n) = self.max_failures {
                    s = s.with_max_failures(n);
                }
                Ok(Arc::new(s))
            }
            other => panic!("store kind {other} is not compiled in"),
        }
    }

    /// Removes what the test left (best effort).
    pub fn cleanup(&self) {
        match self.kind.as_str() {
            "sqlite" => {
                if let Some(dir) = Path::new(&self.location).parent() {
                    let _ = fs::remove_dir_all(dir);
                }
            }
            #[cfg(feature = "postgres")]
            "postgres" => {
                if let (Some(schema), Ok(mut c)) =
                    (&self.schema, postgres::Client::connect(&self.location, postgres::NoTls))
                {
                    let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
                }
            }
            _ => {}
        }
    }
}

/// Where tool executions are recorded: one line per execution, appended
/// and flushed before the tool returns, so a killed process leaves it behind.
#[derive(Debug, Clone)]
pub struct ExecLog(pub PathBuf);

impl ExecLog {
    pub fn new(dir: &Path, name: &str) -> ExecLog {
        ExecLog(dir.join(name))
    }

    pub fn record(&self, line: &str) {
        let mut f = OpenOptions::new().create(true).append(true).open(&self.0).unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
        f.sync_all().unwrap();
    }

    pub fn lines(&self) -> Vec<String> {
        read_lines(&self.0)
    }
}

pub fn read_lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-store-work-{}", unique(tag)));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

pub fn data(v: Value) -> Option<Map<String, Value>> {
    v.as_object().cloned()
}

/// The `charge` tool: it suspends on an approval request (its kind and
/// `expiresAt` come from the arguments, default `approval` and none); run
/// with the answer it records its idempotency key in `log`, optionally
/// hangs (to be killed there), and returns `charged N`.
pub fn charge_tool(log: ExecLog, hang: bool) -> DynTool {
    DynTool::new(
        "charge",
        "Charges an amount once approved",
        json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        move |args, ctx| {
            let n = args["n"].as_i64().unwrap_or(0);
            if ctx.answer().is_none() {
                let mut r = Request::new(args["kind"].as_str().unwrap_or("approval"), format!("charge {n}?"));
                r.expires_at = args["expires"].as_str().map(str::to_string);
                return Ok(ToolOutcome::Pending(r));
            }
            log.record(ctx.idempotency_key());
            if hang {
                std::thread::sleep(Duration::from_secs(600));
            }
            Ok(ToolOutcome::Done(json!(format!("charged {n}"))))
        },
    )
}

/// A client of the fake at `base_url` (OpenAI style) with the charge tool.
pub fn client(base_url: &str, model: &str, seed: u64, log: ExecLog, tap: Option<Arc<dyn Tap>>) -> Client {
    client_hanging(base_url, model, seed, log, tap, false)
}

pub fn client_hanging(
    base_url: &str,
    model: &str,
    seed: u64,
    log: ExecLog,
    tap: Option<Arc<dyn Tap>>,
    hang: bool,
) -> Client {
    Client::new(config(base_url, model, seed, log, tap, hang))
}

/// The config [`client`] uses (for the async driver).
pub fn config(
    base_url: &str,
    model: &str,
    seed: u64,
    log: ExecLog,
    tap: Option<Arc<dyn Tap>>,
    hang: bool,
) -> ClientConfig {
    let mut b = ClientConfig::builder(Style::OpenAi, model)
        .base_url(base_url)
        .api_key(KEY)
        .seed(seed)
        .retries(2)
        .retry_base_delay(Duration::from_millis(5))
        .dyn_tool(charge_tool(log, hang));
    if let Some(t) = tap {
        b = b.tap(t);
    }
    b.build().unwrap()
}

/// A fake whose `model` calls `charge` once per entry of `calls` (the
/// arguments as JSON text) and then says `done_text`, checking that the
/// final request carries one result per call.
pub fn fake_with(models: &[(&str, &[&str], &str)]) -> FakeProvider {
    let mut scripts = Scripts::new(KEY);
    for (model, calls, done_text) in models {
        let mut first = Turn::default();
        for args in calls.iter() {
            first = first.call("charge", *args);
        }
        let script = Script::new(vec![first, Turn::text(*done_text)])
            .expect_final(ExpectFinal { tool_results: Some(calls.len()), ..ExpectFinal::default() });
        scripts = scripts.model(*model, script);
    }
    FakeProvider::start(scripts)
}

pub fn base_url(fake: &FakeProvider) -> String {
    fake.base_url(FakeStyle::OpenAi)
}

/// Runs `model` until it suspends (a distinct run per seed).
pub fn suspend(base_url: &str, model: &str, seed: u64, log: ExecLog) -> SuspendedRun {
    let r = client(base_url, model, seed, log, None).run("charge please").unwrap();
    assert!(r.is_pending(), "the run should suspend: {r:?}");
    r.suspended.unwrap()
}

pub fn outputs(r: &RunResult) -> Vec<String> {
    r.tool_calls.iter().map(|c| c.output.clone()).collect()
}

/// A small deterministic PRNG (xorshift64*) for shuffles.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            v.swap(i, j);
        }
    }
}
