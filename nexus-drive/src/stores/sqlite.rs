//! [`SqliteStore`]: conversations and suspended runs in one SQLite file.
//!
//! The embedded default: durable without a server. The library is compiled
//! in (rusqlite's `bundled`), so no system SQLite is needed.
//!
//! * WAL journal, so readers never wait for the writer, and several
//!   processes can share the file.
//! * Every operation is one transaction; writes begin `IMMEDIATE` (they take
//!   the write lock first, so a read-then-write never deadlocks on upgrade).
//! * A busy timeout (5 s by default) makes a writer wait for another rather
//!   than fail at once, retrying every 0.1 to 2 ms.
//! * `synchronous = FULL` by default: a committed write survives a power
//!   cut. [`SqliteOptions::synchronous_full`] `= false` trades that for speed
//!   (a crash of the process still loses nothing).
//!
//! One [`SqliteStore`] holds one connection behind a mutex: give each worker
//! thread its own store on the same file for parallel work; they coordinate
//! through the file's locks.
//!
//! The schema version is SQLite's `user_version`; the schema is created on
//! first use and a newer one is refused. With the `mcp` feature the store is
//! also a [`TokenStore`](crate::mcp::auth::TokenStore) (`sqlite/tokens.rs`:
//! tables `mcp_oauth_tokens` and `mcp_oauth_pending`).

use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nexus_proto::{Answer, Message};
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};

use super::shared::{
    answer_json, check_id, describe, describe_lenient, lease_conflict, parse_answer, parse_pending, Described,
};
use super::{
    wall_clock_ms, AnswerStatus, Claim, ClaimStore, ConversationDeleted, Lease, RunFilter, RunInfo, DEFAULT_LEASE_MS,
    DEFAULT_MAX_FAILURES,
};
use crate::result::SuspendedRun;
use crate::store::{ConversationStore, RunRecord, RunStore, StoreError};

// MCP OAuth tokens beside the runs (`TokenStore`).
#[cfg(feature = "mcp")]
mod tokens;

/// The schema this build writes.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY,
    messages TEXT NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    conversation_id TEXT,
    state BLOB NOT NULL,
    version INTEGER NOT NULL,
    pending TEXT NOT NULL,
    expires_ms INTEGER,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    claimed_until INTEGER,
    claims INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_conversation ON runs (conversation_id);
CREATE INDEX IF NOT EXISTS runs_by_updated ON runs (updated_ms);
CREATE INDEX IF NOT EXISTS runs_by_expiry ON runs (expires_ms);
CREATE TABLE IF NOT EXISTS answers (
    run_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    answer TEXT NOT NULL,
    recorded_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, request_id)
);
";

/// How [`SqliteStore::open_with`] sets up the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqliteOptions {
    /// How long a write waits for another writer before failing (default 5 s).
    pub busy_timeout: Duration,
    /// `synchronous = FULL` (default) rather than `NORMAL`.
    pub synchronous_full: bool,
    /// The lease the plain [`RunStore::claim`] takes (default [`DEFAULT_LEASE_MS`]).
    pub lease_ms: u64,
    /// Failed resumes after which [`ClaimStore::claim_ready`] skips a run
    /// (default [`DEFAULT_MAX_FAILURES`]).
    pub max_failures: u32,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            synchronous_full: true,
            lease_ms: DEFAULT_LEASE_MS,
            max_failures: DEFAULT_MAX_FAILURES,
        }
    }
}

/// Conversations and suspended runs in a SQLite database. See the [module docs](self).
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
    lease_ms: u64,
    max_failures: u32,
}

fn db(e: rusqlite::Error) -> StoreError {
    StoreError::Io(format!("sqlite: {e}"))
}

fn int(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Io(format!("{v} does not fit a database integer")))
}

fn uint(id: &str, v: i64) -> Result<u64, StoreError> {
    u64::try_from(v)
        .map_err(|_| StoreError::Corrupt { id: id.to_string(), message: format!("negative stored number {v}") })
}

/// The JSON array of `ids`, for `json_each`.
fn ids_json(ids: &[String]) -> String {
    serde_json::to_string(ids).unwrap_or_else(|_| "[]".into())
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` with the default options.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating if needed) the database at `path`.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore, StoreError> {
        let conn = Connection::open(path).map_err(db)?;
        // WAL is a property of the file: set once, it stays for every connection.
        let mode: String = conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0)).map_err(db)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Io(format!("sqlite: WAL journal refused (got {mode})")));
        }
        SqliteStore::setup(conn, &options)
    }

    /// A private in-memory database (tests, throwaway runs). It has no WAL
    /// and vanishes with the store.
    pub fn open_in_memory() -> Result<SqliteStore, StoreError> {
        let conn = Connection::open_in_memory().map_err(db)?;
        SqliteStore::setup(conn, &SqliteOptions::default())
    }

    fn setup(mut conn: Connection, options: &SqliteOptions) -> Result<SqliteStore, StoreError> {
        let timeout = options.busy_timeout;
        let mut waiting_since = Instant::now();
        // SQLite's own busy handler sleeps up to 100 ms between tries, long
        // after a writer's short transaction has freed the lock; writers of
        // this store hold it for one small transaction, so retry soon.
        conn.busy_handler(Some(move |tries: i32| {
            if tries == 0 {
                waiting_since = Instant::now();
            }
            if waiting_since.elapsed() >= timeout {
                return false;
            }
            let pause = match tries {
                0..=3 => 100,
                4..=15 => 500,
                _ => 2_000,
            };
            std::thread::sleep(Duration::from_micros(pause));
            true
        }))
        .map_err(db)?;
        let sync = if options.synchronous_full { "FULL" } else { "NORMAL" };
        conn.pragma_update(None, "synchronous", sync).map_err(db)?;
        migrate(&mut conn)?;
        Ok(SqliteStore { conn: Mutex::new(conn), lease_ms: options.lease_ms, max_failures: options.max_failures })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while holding the connection leaves no transaction open
        // (rusqlite rolls back on drop): the connection is still usable.
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` in one `IMMEDIATE` transaction, committed when it returns `Ok`.
    fn write<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
        let out = f(&tx)?;
        tx.commit().map_err(db)?;
        Ok(out)
    }

    /// Runs `f` in one read transaction (a consistent snapshot).
    fn read<T>(&self, f: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(db)?;
        let out = f(&tx)?;
        tx.commit().map_err(db)?;
        Ok(out)
    }

    /// Takes the run for `lease_ms` if nobody holds it at `now`, inside `tx`.
    fn claim_in(tx: &Transaction<'_>, id: &str, now: u64, lease_ms: u64) -> Result<Claim, StoreError> {
        let until = now.saturating_add(lease_ms);
        let row = tx
            .prepare_cached(
                "UPDATE runs SET claimed_until = ?2, version = version + 1, claims = claims + 1
                 WHERE id = ?1 AND (claimed_until IS NULL OR claimed_until <= ?3)
                 RETURNING state, version, conversation_id, claims",
            )
            .map_err(db)?
            .query_row(params![id, int(until)?, int(now)?], |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?, r.get::<_, Option<String>>(2)?, r.get::<_, i64>(3)?))
            })
            .optional()
            .map_err(db)?;
        let Some((state, version, conversation_id, claims)) = row else {
            return Err(match current_version(tx, id)? {
                Some(_) => StoreError::Claimed(id.to_string()),
                None => StoreError::NotFound(id.to_string()),
            });
        };
        let mut stmt = tx.prepare_cached("SELECT answer FROM answers WHERE run_id = ?1 ORDER BY rowid").map_err(db)?;
        let texts = stmt
            .query_map(params![id], |r| r.get::<_, String>(0))
            .map_err(db)?
            .collect::<Result<Vec<_>, _>>()
            .map_err(db)?;
        let answers = texts.iter().map(|t| parse_answer(id, t)).collect::<Result<Vec<_>, _>>()?;
        Ok(Claim {
            lease: Lease { run_id: id.to_string(), version: uint(id, version)?, claimed_until: until },
            state,
            answers,
            conversation_id,
            claims: uint(id, claims)?,
        })
    }

    /// Writes a state under `lease`: the new version, or a conflict.
    fn write_state(
        tx: &Transaction<'_>,
        lease: &Lease,
        state: &[u8],
        d: &Described,
        now: u64,
        claimed_until: Option<u64>,
    ) -> Result<u64, StoreError> {
        let changed = tx
            .prepare_cached(
                "UPDATE runs SET state = ?3, version = version + 1, pending = ?4, expires_ms = ?5,
                     updated_ms = ?6, claimed_until = ?7,
                     failures = CASE WHEN ?7 IS NULL THEN 0 ELSE failures END,
                     last_error = CASE WHEN ?7 IS NULL THEN NULL ELSE last_error END
                 WHERE id = ?1 AND version = ?2",
            )
            .map_err(db)?
            .execute(params![
                lease.run_id,
                int(lease.version)?,
                state,
                d.pending_json,
                d.expires_ms.map(int).transpose()?,
                int(now)?,
                claimed_until.map(int).transpose()?,
            ])
            .map_err(db)?;
        if changed == 0 {
            return Err(lease_conflict(lease, current_version(tx, &lease.run_id)?));
        }
        prune_answers(tx, &lease.run_id, &d.pending_ids)?;
        Ok(lease.version + 1)
    }

    fn delete_conversation_in(tx: &Transaction<'_>, id: &str) -> Result<ConversationDeleted, StoreError> {
        tx.execute("DELETE FROM answers WHERE run_id IN (SELECT id FROM runs WHERE conversation_id = ?1)", params![id])
            .map_err(db)?;
        let runs = tx.execute("DELETE FROM runs WHERE conversation_id = ?1", params![id]).map_err(db)?;
        let conversation = tx.execute("DELETE FROM conversations WHERE id = ?1", params![id]).map_err(db)?;
        Ok(ConversationDeleted { conversation: conversation > 0, runs: runs as u64 })
    }
}

/// Creates the schema on first use; refuses a newer one.
fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate).map_err(db)?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(db)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Io(format!(
            "sqlite: database schema version {version} is newer than this build's {SCHEMA_VERSION}"
        )));
    }
    if version < 1 {
        tx.execute_batch(SCHEMA).map_err(db)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION).map_err(db)?;
    }
    #[cfg(feature = "mcp")]
    tx.execute_batch(tokens::TOKEN_SCHEMA).map_err(db)?;
    tx.commit().map_err(db)
}

fn current_version(tx: &Transaction<'_>, id: &str) -> Result<Option<u64>, StoreError> {
    let v = tx
        .prepare_cached("SELECT version FROM runs WHERE id = ?1")
        .map_err(db)?
        .query_row(params![id], |r| r.get::<_, i64>(0))
        .optional()
        .map_err(db)?;
    v.map(|v| uint(id, v)).transpose()
}

/// Drops the answers whose request the run no longer waits for: those left
/// are exactly what the next claimer can feed.
fn prune_answers(tx: &Transaction<'_>, run_id: &str, pending_ids: &[String]) -> Result<(), StoreError> {
    tx.prepare_cached(
        "DELETE FROM answers WHERE run_id = ?1
         AND request_id NOT IN (SELECT value FROM json_each(?2))",
    )
    .map_err(db)?
    .execute(params![run_id, ids_json(pending_ids)])
    .map_err(db)?;
    Ok(())
}

impl ConversationStore for SqliteStore {
    fn get(&self, id: &str) -> Result<Option<Vec<Message>>, StoreError> {
        let text = self.read(|tx| {
            tx.prepare_cached("SELECT messages FROM conversations WHERE id = ?1")
                .map_err(db)?
                .query_row(params![id], |r| r.get::<_, String>(0))
                .optional()
                .map_err(db)
        })?;
        text.map(|t| {
            serde_json::from_str(&t).map_err(|e| StoreError::Corrupt { id: id.to_string(), message: e.to_string() })
        })
        .transpose()
    }

    fn save(&self, id: &str, messages: &[Message]) -> Result<(), StoreError> {
        check_id(id)?;
        let text = serde_json::to_string(messages).map_err(|e| StoreError::Io(e.to_string()))?;
        let now = int(wall_clock_ms())?;
        self.write(|tx| {
            tx.prepare_cached(
                "INSERT INTO conversations (id, messages, updated_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO UPDATE SET messages = excluded.messages, updated_ms = excluded.updated_ms",
            )
            .map_err(db)?
            .execute(params![id, text, now])
            .map_err(db)?;
            Ok(())
        })
    }

    /// Removes the conversation and its runs (see [`ClaimStore::delete_conversation`]).
    fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let d = self.delete_conversation(id)?;
        Ok(d.conversation || d.runs > 0)
    }
}

impl RunStore for SqliteStore {
    fn load(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let now = wall_clock_ms();
        let row = self.read(|tx| {
            tx.prepare_cached("SELECT state, version, claimed_until FROM runs WHERE id = ?1")
                .map_err(db)?
                .query_row(params![id], |r| {
                    Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?, r.get::<_, Option<i64>>(2)?))
                })
                .optional()
                .map_err(db)
        })?;
        row.map(|(state, version, until)| {
            Ok(RunRecord {
                state,
                version: uint(id, version)?,
                claimed: until.is_some_and(|t| t > i64::try_from(now).unwrap_or(i64::MAX)),
            })
        })
        .transpose()
    }

    /// Inserts (`expected: None`) or replaces the state, releasing any claim.
    /// Any bytes are kept; a state that restores is also listed with its
    /// pending requests.
    fn save(&self, id: &str, state: &[u8], expected: Option<u64>) -> Result<u64, StoreError> {
        check_id(id)?;
        let d = describe_lenient(id, state);
        let now = wall_clock_ms();
        self.write(|tx| match expected {
            None => {
                insert(tx, id, None, state, &d, now)?;
                Ok(1)
            }
            Some(v) => {
                let lease = Lease { run_id: id.to_string(), version: v, claimed_until: 0 };
                SqliteStore::write_state(tx, &lease, state, &d, now, None)
            }
        })
    }

    /// Claims with the wall clock and the store's lease.
    fn claim(&self, id: &str) -> Result<RunRecord, StoreError> {
        let c = self.write(|tx| SqliteStore::claim_in(tx, id, wall_clock_ms(), self.lease_ms))?;
        Ok(RunRecord { state: c.state, version: c.lease.version, claimed: true })
    }

    fn delete(&self, id: &str, expected: u64) -> Result<(), StoreError> {
        self.write(|tx| {
            let n = tx
                .execute("DELETE FROM runs WHERE id = ?1 AND version = ?2", params![id, int(expected)?])
                .map_err(db)?;
            if n == 0 {
                return Err(StoreError::Conflict {
                    id: id.to_string(),
                    expected: Some(expected),
                    found: current_version(tx, id)?,
                });
            }
            tx.execute("DELETE FROM answers WHERE run_id = ?1", params![id]).map_err(db)?;
            Ok(())
        })
    }
}

/// Inserts a new run (version 1); a conflict when the id exists.
fn insert(
    tx: &Transaction<'_>,
    id: &str,
    conversation_id: Option<&str>,
    state: &[u8],
    d: &Described,
    now: u64,
) -> Result<(), StoreError> {
    let n = tx
        .prepare_cached(
            "INSERT INTO runs (id, conversation_id, state, version, pending, expires_ms, created_ms, updated_ms)
             VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?6) ON CONFLICT (id) DO NOTHING",
        )
        .map_err(db)?
        .execute(params![id, conversation_id, state, d.pending_json, d.expires_ms.map(int).transpose()?, int(now)?])
        .map_err(db)?;
    if n == 0 {
        return Err(StoreError::Conflict { id: id.to_string(), expected: None, found: current_version(tx, id)? });
    }
    // Answers left by an earlier run under this id must not reach this one.
    prune_answers(tx, id, &d.pending_ids)
}

impl ClaimStore for SqliteStore {
    fn insert_run(&self, run: &SuspendedRun, conversation_id: Option<&str>, now: u64) -> Result<u64, StoreError> {
        check_id(&run.run_id)?;
        let d = describe(&run.run_id, &run.state)?;
        self.write(|tx| insert(tx, &run.run_id, conversation_id, &run.state, &d, now))?;
        Ok(1)
    }

    fn record_answer(&self, run_id: &str, answer: &Answer, now: u64) -> Result<AnswerStatus, StoreError> {
        let text = answer_json(answer);
        self.write(|tx| {
            let pending = tx
                .prepare_cached("SELECT pending FROM runs WHERE id = ?1")
                .map_err(db)?
                .query_row(params![run_id], |r| r.get::<_, String>(0))
                .optional()
                .map_err(db)?
                .ok_or_else(|| StoreError::NotFound(run_id.to_string()))?;
            if !parse_pending(&pending).iter().any(|r| r.id == answer.id) {
                return Ok(AnswerStatus::NotPending);
            }
            let n = tx
                .prepare_cached(
                    "INSERT INTO answers (run_id, request_id, answer, recorded_ms) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (run_id, request_id) DO NOTHING",
                )
                .map_err(db)?
                .execute(params![run_id, answer.id, text, int(now)?])
                .map_err(db)?;
            Ok(if n == 0 { AnswerStatus::Duplicate } else { AnswerStatus::Recorded })
        })
    }

    fn claim_run(&self, run_id: &str, now: u64, lease_ms: u64) -> Result<Claim, StoreError> {
        self.write(|tx| SqliteStore::claim_in(tx, run_id, now, lease_ms))
    }

    fn claim_ready(&self, now: u64, lease_ms: u64) -> Result<Option<Claim>, StoreError> {
        self.write(|tx| {
            let id = tx
                .prepare_cached(
                    "SELECT id FROM runs
                     WHERE (claimed_until IS NULL OR claimed_until <= ?1) AND failures < ?2
                       AND id IN (SELECT run_id FROM answers)
                     ORDER BY updated_ms, id LIMIT 1",
                )
                .map_err(db)?
                .query_row(params![int(now)?, self.max_failures], |r| r.get::<_, String>(0))
                .optional()
                .map_err(db)?;
            id.map(|id| SqliteStore::claim_in(tx, &id, now, lease_ms)).transpose()
        })
    }

    fn save_progress(&self, lease: &mut Lease, state: &[u8], now: u64, lease_ms: u64) -> Result<(), StoreError> {
        let d = describe(&lease.run_id, state)?;
        let until = now.saturating_add(lease_ms);
        let version = self.write(|tx| SqliteStore::write_state(tx, lease, state, &d, now, Some(until)))?;
        lease.version = version;
        lease.claimed_until = until;
        Ok(())
    }

    fn renew_claim(&self, lease: &mut Lease, now: u64, lease_ms: u64) -> Result<(), StoreError> {
        let until = now.saturating_add(lease_ms);
        self.write(|tx| {
            let n = tx
                .prepare_cached(
                    "UPDATE runs SET claimed_until = ?3 WHERE id = ?1 AND version = ?2 AND claimed_until IS NOT NULL",
                )
                .map_err(db)?
                .execute(params![lease.run_id, int(lease.version)?, int(until)?])
                .map_err(db)?;
            if n == 0 {
                return Err(lease_conflict(lease, current_version(tx, &lease.run_id)?));
            }
            Ok(())
        })?;
        lease.claimed_until = until;
        Ok(())
    }

    fn suspend_claimed(&self, lease: &Lease, state: &[u8], now: u64) -> Result<u64, StoreError> {
        let d = describe(&lease.run_id, state)?;
        self.write(|tx| SqliteStore::write_state(tx, lease, state, &d, now, None))
    }

    fn finish_claimed(&self, lease: &Lease, transcript: Option<&[Message]>, now: u64) -> Result<(), StoreError> {
        let text = transcript.map(serde_json::to_string).transpose().map_err(|e| StoreError::Io(e.to_string()))?;
        self.write(|tx| {
            let conversation = tx
                .prepare_cached("DELETE FROM runs WHERE id = ?1 AND version = ?2 RETURNING conversation_id")
                .map_err(db)?
                .query_row(params![lease.run_id, int(lease.version)?], |r| r.get::<_, Option<String>>(0))
                .optional()
                .map_err(db)?;
            let Some(conversation) = conversation else {
                return Err(lease_conflict(lease, current_version(tx, &lease.run_id)?));
            };
            tx.execute("DELETE FROM answers WHERE run_id = ?1", params![lease.run_id]).map_err(db)?;
            if let (Some(conv), Some(text)) = (conversation, &text) {
                tx.prepare_cached(
                    "INSERT INTO conversations (id, messages, updated_ms) VALUES (?1, ?2, ?3)
                     ON CONFLICT (id) DO UPDATE SET messages = excluded.messages, updated_ms = excluded.updated_ms",
                )
                .map_err(db)?
                .execute(params![conv, text, int(now)?])
                .map_err(db)?;
            }
            Ok(())
        })
    }

    fn release_claim(&self, lease: &Lease, error: Option<&str>, _now: u64) -> Result<u64, StoreError> {
        self.write(|tx| {
            let n = tx
                .prepare_cached(
                    "UPDATE runs SET version = version + 1, claimed_until = NULL,
                         failures = failures + (?3 IS NOT NULL), last_error = COALESCE(?3, last_error)
                     WHERE id = ?1 AND version = ?2",
                )
                .map_err(db)?
                .execute(params![lease.run_id, int(lease.version)?, error])
                .map_err(db)?;
            if n == 0 {
                return Err(lease_conflict(lease, current_version(tx, &lease.run_id)?));
            }
            Ok(lease.version + 1)
        })
    }

    fn list_runs(&self, filter: &RunFilter, now: u64) -> Result<Vec<RunInfo>, StoreError> {
        let limit = match filter.limit {
            Some(n) => i64::try_from(n).unwrap_or(i64::MAX),
            None => -1,
        };
        let rows = self.read(|tx| {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT id, conversation_id, version, pending, created_ms, updated_ms, expires_ms,
                            claimed_until, claims, failures, last_error,
                            (SELECT json_group_array(request_id) FROM answers a WHERE a.run_id = r.id)
                     FROM runs r
                     WHERE (?1 IS NULL OR EXISTS (SELECT 1 FROM json_each(r.pending)
                                                  WHERE json_extract(value, '$.kind') = ?1))
                       AND (?2 IS NULL OR updated_ms <= ?2)
                       AND (?3 IS NULL OR expires_ms <= ?3)
                       AND (?4 IS NULL OR conversation_id = ?4)
                       AND (?5 IS NULL OR ?5 = (claimed_until IS NOT NULL AND claimed_until > ?6))
                     ORDER BY updated_ms, id LIMIT ?7",
                )
                .map_err(db)?;
            let rows = stmt
                .query_map(
                    params![
                        filter.kind,
                        filter.updated_before.map(int).transpose()?,
                        filter.expires_before.map(int).transpose()?,
                        filter.conversation_id,
                        filter.claimed,
                        int(now)?,
                        limit,
                    ],
                    |r| {
                        Ok(RawInfo {
                            id: r.get(0)?,
                            conversation_id: r.get(1)?,
                            version: r.get(2)?,
                            pending: r.get(3)?,
                            created_ms: r.get(4)?,
                            updated_ms: r.get(5)?,
                            expires_ms: r.get(6)?,
                            claimed_until: r.get(7)?,
                            claims: r.get(8)?,
                            failures: r.get(9)?,
                            last_error: r.get(10)?,
                            answered: r.get(11)?,
                        })
                    },
                )
                .map_err(db)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(db)?;
            Ok(rows)
        })?;
        rows.into_iter().map(RawInfo::into_info).collect()
    }

    fn delete_conversation(&self, id: &str) -> Result<ConversationDeleted, StoreError> {
        self.write(|tx| SqliteStore::delete_conversation_in(tx, id))
    }
}

/// A listed row as SQLite gives it.
struct RawInfo {
    id: String,
    conversation_id: Option<String>,
    version: i64,
    pending: String,
    created_ms: i64,
    updated_ms: i64,
    expires_ms: Option<i64>,
    claimed_until: Option<i64>,
    claims: i64,
    failures: i64,
    last_error: Option<String>,
    answered: Option<String>,
}

impl RawInfo {
    fn into_info(self) -> Result<RunInfo, StoreError> {
        let id = self.id;
        Ok(RunInfo {
            version: uint(&id, self.version)?,
            pending: parse_pending(&self.pending),
            answered: self.answered.as_deref().and_then(|a| serde_json::from_str(a).ok()).unwrap_or_default(),
            created_ms: uint(&id, self.created_ms)?,
            updated_ms: uint(&id, self.updated_ms)?,
            expires_ms: self.expires_ms.map(|v| uint(&id, v)).transpose()?,
            claimed_until: self.claimed_until.map(|v| uint(&id, v)).transpose()?,
            claims: uint(&id, self.claims)?,
            failures: u32::try_from(self.failures).unwrap_or(u32::MAX),
            last_error: self.last_error,
            conversation_id: self.conversation_id,
            run_id: id,
        })
    }
}
