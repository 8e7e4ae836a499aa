//! [`TokenStore`] on a [`PostgresStore`]: MCP OAuth tokens and pending
//! authorizations in the same database (and schema) as the runs.
//!
//! Tables, created when the store connects (under the migration lock,
//! `IF NOT EXISTS`: new tables only, outside the schema version):
//!
//! * `mcp_oauth_tokens (server, issuer, record, expires_at, updated_ms)`,
//!   primary key `(server, issuer)`: `record` is the [`TokenRecord`] as JSON
//!   text (access and refresh tokens, scope, resource, token endpoint,
//!   client); `expires_at` (unix seconds) repeats its expiry for queries.
//! * `mcp_oauth_pending (id, server, pending, created_ms)`: the secrets of
//!   authorizations a person has not finished ([`PendingAuthorization`]).
//!
//! Every write is one upsert in one transaction: a refresh that rotates the
//! refresh token replaces access and refresh token together or not at all,
//! and concurrent workers see one or the other. Errors carry PostgreSQL's
//! message and code only (never its `DETAIL`, which may quote a row).
//! Wrapped in a [`SealedTokenStore`](crate::mcp::auth::SealedTokenStore),
//! the secrets in `record` and `pending` are sealed (SPEC §20).

use super::{col, wall_clock_ms, PostgresStore};
use crate::mcp::auth::store::{StoreError as TokenError, TokenRecord, TokenStore};
use crate::mcp::auth::PendingAuthorization;
use crate::stores::shared::tokens::{column_int, from_text, store_err as err, to_text};

/// The token tables (idempotent).
pub(super) const TOKEN_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS mcp_oauth_tokens (
    server text NOT NULL,
    issuer text NOT NULL,
    record text NOT NULL,
    expires_at bigint,
    updated_ms bigint NOT NULL,
    PRIMARY KEY (server, issuer)
);
CREATE TABLE IF NOT EXISTS mcp_oauth_pending (
    id text PRIMARY KEY,
    server text NOT NULL,
    pending text NOT NULL,
    created_ms bigint NOT NULL
);
";

fn parse<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, TokenError> {
    from_text("postgres", what, text)
}

fn now_ms() -> i64 {
    column_int(wall_clock_ms())
}

impl TokenStore for PostgresStore {
    fn get(&self, server: &str, issuer: &str) -> Result<Option<TokenRecord>, TokenError> {
        let text: Option<String> = self
            .tx(|tx| {
                let row = tx.query_opt(
                    "SELECT record FROM mcp_oauth_tokens WHERE server = $1 AND issuer = $2",
                    &[&server, &issuer],
                )?;
                row.map(|r| col::<String>(&r, 0)).transpose()
            })
            .map_err(err)?;
        text.map(|t| parse("token record", &t)).transpose()
    }

    fn for_server(&self, server: &str) -> Result<Vec<(String, TokenRecord)>, TokenError> {
        let rows: Vec<(String, String)> = self
            .tx(|tx| {
                tx.query("SELECT issuer, record FROM mcp_oauth_tokens WHERE server = $1 ORDER BY issuer", &[&server])?
                    .iter()
                    .map(|r| Ok((col::<String>(r, 0)?, col::<String>(r, 1)?)))
                    .collect()
            })
            .map_err(err)?;
        rows.into_iter().map(|(issuer, t)| Ok((issuer, parse("token record", &t)?))).collect()
    }

    fn put(&self, server: &str, issuer: &str, record: TokenRecord) -> Result<(), TokenError> {
        let text = to_text(&record)?;
        let expires = record.expires_at.map(column_int);
        self.tx(|tx| {
            tx.execute(
                "INSERT INTO mcp_oauth_tokens (server, issuer, record, expires_at, updated_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (server, issuer) DO UPDATE
                 SET record = excluded.record, expires_at = excluded.expires_at, updated_ms = excluded.updated_ms",
                &[&server, &issuer, &text, &expires, &now_ms()],
            )?;
            Ok(())
        })
        .map_err(err)
    }

    fn remove(&self, server: &str, issuer: &str) -> Result<(), TokenError> {
        self.tx(|tx| {
            tx.execute("DELETE FROM mcp_oauth_tokens WHERE server = $1 AND issuer = $2", &[&server, &issuer])?;
            Ok(())
        })
        .map_err(err)
    }

    fn put_pending(&self, id: &str, pending: &PendingAuthorization) -> Result<(), TokenError> {
        let text = to_text(pending)?;
        // When it was begun, which the sweep goes by (the write's time for one without).
        let created_ms = pending.created_at.map_or_else(now_ms, |t| column_int(t.saturating_mul(1000)));
        self.tx(|tx| {
            tx.execute(
                "INSERT INTO mcp_oauth_pending (id, server, pending, created_ms) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (id) DO UPDATE
                 SET server = excluded.server, pending = excluded.pending, created_ms = excluded.created_ms",
                &[&id, &pending.server, &text, &created_ms],
            )?;
            Ok(())
        })
        .map_err(err)
    }

    fn get_pending(&self, id: &str) -> Result<Option<PendingAuthorization>, TokenError> {
        let text: Option<String> = self
            .tx(|tx| {
                let row = tx.query_opt("SELECT pending FROM mcp_oauth_pending WHERE id = $1", &[&id])?;
                row.map(|r| col::<String>(&r, 0)).transpose()
            })
            .map_err(err)?;
        text.map(|t| parse("pending authorization", &t)).transpose()
    }

    fn remove_pending(&self, id: &str) -> Result<(), TokenError> {
        self.tx(|tx| {
            tx.execute("DELETE FROM mcp_oauth_pending WHERE id = $1", &[&id])?;
            Ok(())
        })
        .map_err(err)
    }

    fn sweep_pending(&self, created_before: u64) -> Result<usize, TokenError> {
        let before = column_int(created_before.saturating_mul(1000));
        self.tx(|tx| tx.execute("DELETE FROM mcp_oauth_pending WHERE created_ms < $1", &[&before]))
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
            .map_err(err)
    }
}
