//! [`PostgresStore`]: conversations and suspended runs in PostgreSQL, for
//! many stateless workers over one database.
//!
//! Tables: `conversations`, `runs` and `answers` (which cascades with its
//! run), created on first use under an advisory lock and versioned in
//! `schema_version`, so any number of workers may start at once; a database
//! whose schema is newer than this build is refused. Every operation is one
//! transaction. Claims are `UPDATE … WHERE claimed_until IS NULL OR
//! claimed_until <= now` on one row (a compare-and-swap: of two workers, the
//! second re-reads the row once the first commits, and finds it held);
//! [`ClaimStore::claim_ready`] picks its run with `FOR UPDATE SKIP LOCKED`,
//! so workers polling together take different runs without waiting on each
//! other. With the `mcp` feature the store is also a
//! [`TokenStore`](crate::mcp::auth::TokenStore) (`postgres/tokens.rs`:
//! tables `mcp_oauth_tokens` and `mcp_oauth_pending`).
//!
//! The client is the blocking [`postgres`](https://docs.rs/postgres) crate,
//! over a unix socket or TCP without TLS (`host=/tmp/pg port=5432
//! user=nexus dbname=nexus`, or a `postgresql://` URL). A host that needs TLS
//! connects its own client and hands it to [`PostgresStore::from_client`].
//!
//! ## From async code
//!
//! The store is blocking. From smol (the async driver), call it through
//! `smol::unblock`, which runs it on smol's blocking thread pool:
//!
//! ```no_run
//! # async fn f(store: std::sync::Arc<nexus_drive::stores::postgres::PostgresStore>) -> Result<(), nexus_drive::StoreError> {
//! use nexus_drive::stores::ClaimStore;
//! let s = store.clone();
//! let claim = smol::unblock(move || s.claim_ready(nexus_drive::stores::wall_clock_ms(), 60_000)).await?;
//! # let _ = claim; Ok(()) }
//! ```
//!
//! [`Checkpoints::resume_async`](super::Checkpoints::resume_async) does that
//! for the final write of a resume. Do not call the store from inside a
//! tokio runtime: the `postgres` crate runs its own.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use nexus_proto::{Answer, Message};
use postgres::types::ToSql;
use postgres::{Client, NoTls, Row, Statement, Transaction};

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
const SCHEMA_VERSION: i32 = 1;

/// The advisory lock key migrations take (any constant: `nexus` in ASCII).
const MIGRATION_LOCK: i64 = 0x006e_6578_7573;

const SCHEMA_V1: &str = "
CREATE TABLE conversations (
    id text PRIMARY KEY,
    messages text NOT NULL,
    updated_ms bigint NOT NULL
);
CREATE TABLE runs (
    id text PRIMARY KEY,
    conversation_id text,
    state bytea NOT NULL,
    version bigint NOT NULL,
    pending jsonb NOT NULL,
    expires_ms bigint,
    created_ms bigint NOT NULL,
    updated_ms bigint NOT NULL,
    claimed_until bigint,
    claims bigint NOT NULL DEFAULT 0,
    failures integer NOT NULL DEFAULT 0,
    last_error text
);
CREATE INDEX runs_by_conversation ON runs (conversation_id);
CREATE INDEX runs_by_updated ON runs (updated_ms, id);
CREATE INDEX runs_by_expiry ON runs (expires_ms);
CREATE INDEX runs_by_pending ON runs USING gin (pending jsonb_path_ops);
CREATE TABLE answers (
    run_id text NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    request_id text NOT NULL,
    answer text NOT NULL,
    recorded_ms bigint NOT NULL,
    seq bigserial,
    PRIMARY KEY (run_id, request_id)
);
INSERT INTO schema_version (version) VALUES (1);
";

/// Conversations and suspended runs in PostgreSQL. See the [module docs](self).
pub struct PostgresStore {
    conn: Mutex<Conn>,
    /// How to reconnect after the connection dropped (`None` for a client given whole).
    params: Option<String>,
    schema: Option<String>,
    lease_ms: u64,
    max_failures: u32,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The connection string may hold a password: never shown.
        f.debug_struct("PostgresStore")
            .field("schema", &self.schema)
            .field("lease_ms", &self.lease_ms)
            .finish_non_exhaustive()
    }
}

struct Conn {
    client: Client,
    /// Prepared statements by text: one round trip per query instead of two.
    cache: HashMap<&'static str, Statement>,
}

/// A transaction with the statement cache.
struct Tx<'a> {
    tx: Transaction<'a>,
    cache: &'a mut HashMap<&'static str, Statement>,
}

type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

impl Tx<'_> {
    fn stmt(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(s) = self.cache.get(sql) {
            return Ok(s.clone());
        }
        let s = self.tx.prepare(sql).map_err(db)?;
        self.cache.insert(sql, s.clone());
        Ok(s)
    }

    fn execute(&mut self, sql: &'static str, params: Params<'_>) -> Result<u64, StoreError> {
        let s = self.stmt(sql)?;
        self.tx.execute(&s, params).map_err(db)
    }

    fn query(&mut self, sql: &'static str, params: Params<'_>) -> Result<Vec<Row>, StoreError> {
        let s = self.stmt(sql)?;
        self.tx.query(&s, params).map_err(db)
    }

    fn query_opt(&mut self, sql: &'static str, params: Params<'_>) -> Result<Option<Row>, StoreError> {
        let s = self.stmt(sql)?;
        self.tx.query_opt(&s, params).map_err(db)
    }
}

fn db(e: postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(d) => StoreError::Io(format!("postgres: {} ({})", d.message(), d.code().code())),
        None => StoreError::Io(format!("postgres: {e}")),
    }
}

fn int(v: u64) -> Result<i64, StoreError> {
    i64::try_from(v).map_err(|_| StoreError::Io(format!("{v} does not fit a database integer")))
}

fn uint(id: &str, v: i64) -> Result<u64, StoreError> {
    u64::try_from(v)
        .map_err(|_| StoreError::Corrupt { id: id.to_string(), message: format!("negative stored number {v}") })
}

/// A column, typed; a type mismatch is an error, not a panic.
fn col<'a, T: postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> Result<T, StoreError> {
    row.try_get(i).map_err(db)
}

fn valid_schema_name(s: &str) -> bool {
    let mut chars = s.chars();
    s.len() <= 63
        && chars.next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl PostgresStore {
    /// Connects (no TLS) and creates or checks the schema in the default `public` schema.
    pub fn connect(params: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect_in(params, None)
    }

    /// Connects (no TLS) and keeps every table in the database schema
    /// `schema` (created if missing; lowercase letters, digits and `_`), so
    /// several stores can share one database.
    pub fn connect_in_schema(params: &str, schema: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect_in(params, Some(schema))
    }

    fn connect_in(params: &str, schema: Option<&str>) -> Result<PostgresStore, StoreError> {
        let client = Client::connect(params, NoTls).map_err(db)?;
        let mut store = PostgresStore::from_client(client, schema)?;
        store.params = Some(params.to_string());
        Ok(store)
    }

    /// A store over a connected client (TLS or any setup the host needs).
    /// It cannot reconnect when that connection drops.
    pub fn from_client(client: Client, schema: Option<&str>) -> Result<PostgresStore, StoreError> {
        if let Some(s) = schema.filter(|s| !valid_schema_name(s)) {
            return Err(StoreError::Io(format!("invalid schema name {s:?}")));
        }
        let mut conn = Conn { client, cache: HashMap::new() };
        prepare_session(&mut conn.client, schema)?;
        Ok(PostgresStore {
            conn: Mutex::new(conn),
            params: None,
            schema: schema.map(str::to_string),
            lease_ms: DEFAULT_LEASE_MS,
            max_failures: DEFAULT_MAX_FAILURES,
        })
    }

    /// The lease the plain [`RunStore::claim`] takes.
    pub fn with_lease_ms(mut self, lease_ms: u64) -> PostgresStore {
        self.lease_ms = lease_ms;
        self
    }

    /// Failed resumes after which [`ClaimStore::claim_ready`] skips a run.
    pub fn with_max_failures(mut self, n: u32) -> PostgresStore {
        self.max_failures = n;
        self
    }

    fn conn(&self) -> Result<MutexGuard<'_, Conn>, StoreError> {
        // A panic while holding the connection drops its transaction, which
        // rolls back: the connection is still usable.
        let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        if guard.client.is_closed() {
            if let Some(params) = &self.params {
                let mut client = Client::connect(params, NoTls).map_err(db)?;
                prepare_session(&mut client, self.schema.as_deref())?;
                *guard = Conn { client, cache: HashMap::new() };
            }
        }
        Ok(guard)
    }

    /// Runs `f` in one transaction, committed when it returns `Ok`.
    fn tx<T>(&self, f: impl FnOnce(&mut Tx<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let mut guard = self.conn()?;
        let Conn { client, cache } = &mut *guard;
        let tx = client.transaction().map_err(db)?;
        let mut tx = Tx { tx, cache };
        let out = f(&mut tx)?;
        tx.tx.commit().map_err(db)?;
        Ok(out)
    }

    /// Takes the run for `lease_ms` if nobody holds it at `now`, inside `tx`.
    fn claim_in(tx: &mut Tx<'_>, id: &str, now: u64, lease_ms: u64) -> Result<Claim, StoreError> {
        let until = now.saturating_add(lease_ms);
        let row = tx.query_opt(
            "UPDATE runs SET claimed_until = $2, version = version + 1, claims = claims + 1
             WHERE id = $1 AND (claimed_until IS NULL OR claimed_until <= $3)
             RETURNING state, version, conversation_id, claims",
            &[&id, &int(until)?, &int(now)?],
        )?;
        let Some(row) = row else {
            return Err(match current_version(tx, id)? {
                Some(_) => StoreError::Claimed(id.to_string()),
                None => StoreError::NotFound(id.to_string()),
            });
        };
        let answers = tx
            .query("SELECT answer FROM answers WHERE run_id = $1 ORDER BY seq", &[&id])?
            .iter()
            .map(|r| col::<&str>(r, 0).and_then(|t| parse_answer(id, t)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Claim {
            lease: Lease { run_id: id.to_string(), version: uint(id, col(&row, 1)?)?, claimed_until: until },
            state: col(&row, 0)?,
            answers,
            conversation_id: col(&row, 2)?,
            claims: uint(id, col(&row, 3)?)?,
        })
    }

    /// Writes a state under `lease`: the new version, or a conflict.
    fn write_state(
        tx: &mut Tx<'_>,
        lease: &Lease,
        state: &[u8],
        d: &Described,
        now: u64,
        claimed_until: Option<u64>,
    ) -> Result<u64, StoreError> {
        let changed = tx.execute(
            "UPDATE runs SET state = $3, version = version + 1, pending = $4::text::jsonb,
                 expires_ms = $5, updated_ms = $6, claimed_until = $7,
                 failures = CASE WHEN $7::bigint IS NULL THEN 0 ELSE failures END,
                 last_error = CASE WHEN $7::bigint IS NULL THEN NULL ELSE last_error END
             WHERE id = $1 AND version = $2",
            &[
                &lease.run_id,
                &int(lease.version)?,
                &state,
                &d.pending_json,
                &d.expires_ms.map(int).transpose()?,
                &int(now)?,
                &claimed_until.map(int).transpose()?,
            ],
        )?;
        if changed == 0 {
            return Err(lease_conflict(lease, current_version(tx, &lease.run_id)?));
        }
        prune_answers(tx, &lease.run_id, &d.pending_ids)?;
        Ok(lease.version + 1)
    }
}

/// Sets the search path and creates or checks the schema. Migrations run
/// under a transaction-scoped advisory lock: workers starting together
/// wait for the first one instead of racing it.
fn prepare_session(client: &mut Client, schema: Option<&str>) -> Result<(), StoreError> {
    let mut tx = client.transaction().map_err(db)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).map_err(db)?;
    if let Some(s) = schema {
        // The name was checked to be a plain lowercase identifier: no quoting issue.
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {s}; SET LOCAL search_path TO {s}")).map_err(db)?;
    }
    tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version integer NOT NULL)").map_err(db)?;
    let row = tx.query_one("SELECT coalesce(max(version), 0) FROM schema_version", &[]).map_err(db)?;
    let version: i32 = row.try_get(0).map_err(db)?;
    if version > SCHEMA_VERSION {
        return Err(StoreError::Io(format!(
            "postgres: database schema version {version} is newer than this build's {SCHEMA_VERSION}"
        )));
    }
    if version < 1 {
        tx.batch_execute(SCHEMA_V1).map_err(db)?;
    }
    #[cfg(feature = "mcp")]
    tx.batch_execute(tokens::TOKEN_SCHEMA).map_err(db)?;
    tx.commit().map_err(db)?;
    if let Some(s) = schema {
        // For the session, now that the transaction-local one has ended.
        client.batch_execute(&format!("SET search_path TO {s}")).map_err(db)?;
    }
    Ok(())
}

fn current_version(tx: &mut Tx<'_>, id: &str) -> Result<Option<u64>, StoreError> {
    let row = tx.query_opt("SELECT version FROM runs WHERE id = $1", &[&id])?;
    row.map(|r| col::<i64>(&r, 0).and_then(|v| uint(id, v))).transpose()
}

/// Drops the answers whose request the run no longer waits for: those left
/// are exactly what the next claimer can feed.
fn prune_answers(tx: &mut Tx<'_>, run_id: &str, pending_ids: &[String]) -> Result<(), StoreError> {
    tx.execute(
        "DELETE FROM answers WHERE run_id = $1 AND NOT (request_id = ANY($2::text[]))",
        &[&run_id, &pending_ids],
    )?;
    Ok(())
}

fn insert(
    tx: &mut Tx<'_>,
    id: &str,
    conversation_id: Option<&str>,
    state: &[u8],
    d: &Described,
    now: u64,
) -> Result<(), StoreError> {
    let n = tx.execute(
        "INSERT INTO runs (id, conversation_id, state, version, pending, expires_ms, created_ms, updated_ms)
         VALUES ($1, $2, $3, 1, $4::text::jsonb, $5, $6, $6) ON CONFLICT (id) DO NOTHING",
        &[&id, &conversation_id, &state, &d.pending_json, &d.expires_ms.map(int).transpose()?, &int(now)?],
    )?;
    if n == 0 {
        return Err(StoreError::Conflict { id: id.to_string(), expected: None, found: current_version(tx, id)? });
    }
    Ok(())
}

const UPSERT_CONVERSATION: &str = "INSERT INTO conversations (id, messages, updated_ms) VALUES ($1, $2, $3)
     ON CONFLICT (id) DO UPDATE SET messages = EXCLUDED.messages, updated_ms = EXCLUDED.updated_ms";

impl ConversationStore for PostgresStore {
    fn get(&self, id: &str) -> Result<Option<Vec<Message>>, StoreError> {
        let text: Option<String> = self.tx(|tx| {
            tx.query_opt("SELECT messages FROM conversations WHERE id = $1", &[&id])?.map(|r| col(&r, 0)).transpose()
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
        self.tx(|tx| tx.execute(UPSERT_CONVERSATION, &[&id, &text, &now]).map(|_| ()))
    }

    /// Removes the conversation and its runs (see [`ClaimStore::delete_conversation`]).
    fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let d = self.delete_conversation(id)?;
        Ok(d.conversation || d.runs > 0)
    }
}

impl RunStore for PostgresStore {
    fn load(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let now = int(wall_clock_ms())?;
        self.tx(|tx| {
            let Some(row) = tx.query_opt(
                "SELECT state, version, coalesce(claimed_until > $2, false) FROM runs WHERE id = $1",
                &[&id, &now],
            )?
            else {
                return Ok(None);
            };
            Ok(Some(RunRecord { state: col(&row, 0)?, version: uint(id, col(&row, 1)?)?, claimed: col(&row, 2)? }))
        })
    }

    /// Inserts (`expected: None`) or replaces the state, releasing any claim.
    /// Any bytes are kept; a state that restores is also listed with its
    /// pending requests.
    fn save(&self, id: &str, state: &[u8], expected: Option<u64>) -> Result<u64, StoreError> {
        check_id(id)?;
        let d = describe_lenient(id, state);
        let now = wall_clock_ms();
        self.tx(|tx| match expected {
            None => insert(tx, id, None, state, &d, now).map(|()| 1),
            Some(v) => {
                let lease = Lease { run_id: id.to_string(), version: v, claimed_until: 0 };
                PostgresStore::write_state(tx, &lease, state, &d, now, None)
            }
        })
    }

    /// Claims with the wall clock and the store's lease.
    fn claim(&self, id: &str) -> Result<RunRecord, StoreError> {
        let c = self.tx(|tx| PostgresStore::claim_in(tx, id, wall_clock_ms(), self.lease_ms))?;
        Ok(RunRecord { state: c.state, version: c.lease.version, claimed: true })
    }

    fn delete(&self, id: &str, expected: u64) -> Result<(), StoreError> {
        self.tx(|tx| {
            // Its answers go with it (ON DELETE CASCADE).
            let n = tx.execute("DELETE FROM runs WHERE id = $1 AND version = $2", &[&id, &int(expected)?])?;
            if n == 0 {
                return Err(StoreError::Conflict {
                    id: id.to_string(),
                    expected: Some(expected),
                    found: current_version(tx, id)?,
                });
            }
            Ok(())
        })
    }
}

impl ClaimStore for PostgresStore {
    fn insert_run(&self, run: &SuspendedRun, conversation_id: Option<&str>, now: u64) -> Result<u64, StoreError> {
        check_id(&run.run_id)?;
        let d = describe(&run.run_id, &run.state)?;
        self.tx(|tx| insert(tx, &run.run_id, conversation_id, &run.state, &d, now))?;
        Ok(1)
    }

    fn record_answer(&self, run_id: &str, answer: &Answer, now: u64) -> Result<AnswerStatus, StoreError> {
        let text = answer_json(answer);
        self.tx(|tx| {
            // FOR SHARE: a state write (which prunes answers) cannot run
            // between this check and the insert.
            let row = tx
                .query_opt(
                    "SELECT pending @> jsonb_build_array(jsonb_build_object('id', $2::text))
                     FROM runs WHERE id = $1 FOR SHARE",
                    &[&run_id, &answer.id],
                )?
                .ok_or_else(|| StoreError::NotFound(run_id.to_string()))?;
            if !col::<bool>(&row, 0)? {
                return Ok(AnswerStatus::NotPending);
            }
            let n = tx.execute(
                "INSERT INTO answers (run_id, request_id, answer, recorded_ms) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (run_id, request_id) DO NOTHING",
                &[&run_id, &answer.id, &text, &int(now)?],
            )?;
            Ok(if n == 0 { AnswerStatus::Duplicate } else { AnswerStatus::Recorded })
        })
    }

    fn claim_run(&self, run_id: &str, now: u64, lease_ms: u64) -> Result<Claim, StoreError> {
        self.tx(|tx| PostgresStore::claim_in(tx, run_id, now, lease_ms))
    }

    fn claim_ready(&self, now: u64, lease_ms: u64) -> Result<Option<Claim>, StoreError> {
        let max = i32::try_from(self.max_failures).unwrap_or(i32::MAX);
        self.tx(|tx| {
            let row = tx.query_opt(
                "SELECT id FROM runs r
                 WHERE (claimed_until IS NULL OR claimed_until <= $1) AND failures < $2
                   AND EXISTS (SELECT 1 FROM answers a WHERE a.run_id = r.id)
                 ORDER BY updated_ms, id LIMIT 1
                 FOR UPDATE SKIP LOCKED",
                &[&int(now)?, &max],
            )?;
            let Some(row) = row else { return Ok(None) };
            let id: String = col(&row, 0)?;
            PostgresStore::claim_in(tx, &id, now, lease_ms).map(Some)
        })
    }

    fn save_progress(&self, lease: &mut Lease, state: &[u8], now: u64, lease_ms: u64) -> Result<(), StoreError> {
        let d = describe(&lease.run_id, state)?;
        let until = now.saturating_add(lease_ms);
        let version = self.tx(|tx| PostgresStore::write_state(tx, lease, state, &d, now, Some(until)))?;
        lease.version = version;
        lease.claimed_until = until;
        Ok(())
    }

    fn renew_claim(&self, lease: &mut Lease, now: u64, lease_ms: u64) -> Result<(), StoreError> {
        let until = now.saturating_add(lease_ms);
        self.tx(|tx| {
            let n = tx.execute(
                "UPDATE runs SET claimed_until = $3 WHERE id = $1 AND version = $2 AND claimed_until IS NOT NULL",
                &[&lease.run_id, &int(lease.version)?, &int(until)?],
            )?;
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
        self.tx(|tx| PostgresStore::write_state(tx, lease, state, &d, now, None))
    }

    fn finish_claimed(&self, lease: &Lease, transcript: Option<&[Message]>, now: u64) -> Result<(), StoreError> {
        let text = transcript.map(serde_json::to_string).transpose().map_err(|e| StoreError::Io(e.to_string()))?;
        self.tx(|tx| {
            let row = tx.query_opt(
                "DELETE FROM runs WHERE id = $1 AND version = $2 RETURNING conversation_id",
                &[&lease.run_id, &int(lease.version)?],
            )?;
            let Some(row) = row else {
                return Err(lease_conflict(lease, current_version(tx, &lease.run_id)?));
            };
            let conversation: Option<String> = col(&row, 0)?;
            if let (Some(conv), Some(text)) = (conversation, &text) {
                tx.execute(UPSERT_CONVERSATION, &[&conv, text, &int(now)?])?;
            }
            Ok(())
        })
    }

    fn release_claim(&self, lease: &Lease, error: Option<&str>, _now: u64) -> Result<u64, StoreError> {
        self.tx(|tx| {
            let n = tx.execute(
                "UPDATE runs SET version = version + 1, claimed_until = NULL,
                     failures = failures + (CASE WHEN $3::text IS NULL THEN 0 ELSE 1 END),
                     last_error = coalesce($3, last_error)
                 WHERE id = $1 AND version = $2",
                &[&lease.run_id, &int(lease.version)?, &error],
            )?;
            if n == 0 {
                return Err(lease_conflict(lease, current_version(tx, &lease.run_id)?));
            }
            Ok(lease.version + 1)
        })
    }

    fn list_runs(&self, filter: &RunFilter, now: u64) -> Result<Vec<RunInfo>, StoreError> {
        let limit = filter.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows = self.tx(|tx| {
            tx.query(
                "SELECT id, conversation_id, version, pending::text, created_ms, updated_ms, expires_ms,
                        claimed_until, claims, failures, last_error,
                        ARRAY(SELECT request_id FROM answers a WHERE a.run_id = r.id ORDER BY seq)
                 FROM runs r
                 WHERE ($1::text IS NULL OR r.pending @> jsonb_build_array(jsonb_build_object('kind', $1::text)))
                   AND ($2::bigint IS NULL OR updated_ms <= $2)
                   AND ($3::bigint IS NULL OR expires_ms <= $3)
                   AND ($4::text IS NULL OR conversation_id = $4)
                   AND ($5::boolean IS NULL OR $5 = coalesce(claimed_until > $6, false))
                 ORDER BY updated_ms, id LIMIT $7",
                &[
                    &filter.kind,
                    &filter.updated_before.map(int).transpose()?,
                    &filter.expires_before.map(int).transpose()?,
                    &filter.conversation_id,
                    &filter.claimed,
                    &int(now)?,
                    &limit,
                ],
            )
        })?;
        rows.iter().map(info).collect()
    }

    fn delete_conversation(&self, id: &str) -> Result<ConversationDeleted, StoreError> {
        self.tx(|tx| {
            // Answers go with their runs (ON DELETE CASCADE).
            let runs = tx.execute("DELETE FROM runs WHERE conversation_id = $1", &[&id])?;
            let conversation = tx.execute("DELETE FROM conversations WHERE id = $1", &[&id])?;
            Ok(ConversationDeleted { conversation: conversation > 0, runs })
        })
    }
}

fn info(row: &Row) -> Result<RunInfo, StoreError> {
    let id: String = col(row, 0)?;
    let opt =
        |i: usize| -> Result<Option<u64>, StoreError> { col::<Option<i64>>(row, i)?.map(|v| uint(&id, v)).transpose() };
    Ok(RunInfo {
        conversation_id: col(row, 1)?,
        version: uint(&id, col(row, 2)?)?,
        pending: parse_pending(col(row, 3)?),
        created_ms: uint(&id, col(row, 4)?)?,
        updated_ms: uint(&id, col(row, 5)?)?,
        expires_ms: opt(6)?,
        claimed_until: opt(7)?,
        claims: uint(&id, col(row, 8)?)?,
        failures: u32::try_from(col::<i32>(row, 9)?).unwrap_or(0),
        last_error: col(row, 10)?,
        answered: col(row, 11)?,
        run_id: id,
    })
}
