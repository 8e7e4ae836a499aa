//! [`TokenStore`] on a [`SqliteStore`]: MCP OAuth tokens and pending
//! authorizations in the same file as the runs they serve.
//!
//! Tables (created with the schema, outside its version: they are new
//! tables only, so a database without them gets them on open):
//!
//! * `mcp_oauth_tokens (server, issuer, record, expires_at, updated_ms)`,
//!   primary key `(server, issuer)`: `record` is the [`TokenRecord`] as JSON
//!   (access and refresh tokens, scope, resource, token endpoint, client);
//!   `expires_at` (unix seconds) repeats its expiry for queries such as
//!   sweeping dead records.
//! * `mcp_oauth_pending (id, server, pending, created_ms)`: the secrets of
//!   authorizations a person has not finished ([`PendingAuthorization`]).
//!
//! Every write is one statement in one `IMMEDIATE` transaction: a refresh
//! that rotates the refresh token replaces access and refresh token together
//! or not at all. Values are never logged: errors name the table, not the
//! row. Wrapped in a [`SealedTokenStore`](crate::mcp::auth::SealedTokenStore),
//! the secrets in `record` and `pending` are sealed (SPEC §20); the file's
//! permissions protect the rest, as they protect the runs.

use rusqlite::{params, OptionalExtension};

use super::{db, wall_clock_ms, SqliteStore};
use crate::mcp::auth::store::{StoreError as TokenError, TokenRecord, TokenStore};
use crate::mcp::auth::PendingAuthorization;
use crate::stores::shared::tokens::{column_int, from_text, store_err as err, to_text};

/// The token tables (idempotent).
pub(super) const TOKEN_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS mcp_oauth_tokens (
    server TEXT NOT NULL,
    issuer TEXT NOT NULL,
    record TEXT NOT NULL,
    expires_at INTEGER,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (server, issuer)
);
CREATE TABLE IF NOT EXISTS mcp_oauth_pending (
    id TEXT PRIMARY KEY,
    server TEXT NOT NULL,
    pending TEXT NOT NULL,
    created_ms INTEGER NOT NULL
);
";

fn parse<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, TokenError> {
    from_text("sqlite", what, text)
}

impl TokenStore for SqliteStore {
    fn get(&self, server: &str, issuer: &str) -> Result<Option<TokenRecord>, TokenError> {
        let text = self
            .read(|tx| {
                tx.prepare_cached("SELECT record FROM mcp_oauth_tokens WHERE server = ?1 AND issuer = ?2")
                    .map_err(db)?
                    .query_row(params![server, issuer], |r| r.get::<_, String>(0))
                    .optional()
                    .map_err(db)
            })
            .map_err(err)?;
        text.map(|t| parse("token record", &t)).transpose()
    }

    fn for_server(&self, server: &str) -> Result<Vec<(String, TokenRecord)>, TokenError> {
        let rows = self
            .read(|tx| {
                let mut stmt = tx
                    .prepare_cached("SELECT issuer, record FROM mcp_oauth_tokens WHERE server = ?1 ORDER BY issuer")
                    .map_err(db)?;
                let rows = stmt
                    .query_map(params![server], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                    .map_err(db)?
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(db)?;
                Ok(rows)
            })
            .map_err(err)?;
        rows.into_iter().map(|(issuer, t)| Ok((issuer, parse("token record", &t)?))).collect()
    }

    fn put(&self, server: &str, issuer: &str, record: TokenRecord) -> Result<(), TokenError> {
        let text = to_text(&record)?;
        let now = column_int(wall_clock_ms());
        self.write(|tx| {
            tx.prepare_cached(
                "INSERT INTO mcp_oauth_tokens (server, issuer, record, expires_at, updated_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (server, issuer) DO UPDATE
                 SET record = excluded.record, expires_at = excluded.expires_at, updated_ms = excluded.updated_ms",
            )
            .map_err(db)?
            .execute(params![server, issuer, text, record.expires_at.map(column_int), now])
            .map_err(db)?;
            Ok(())
        })
        .map_err(err)
    }

    fn remove(&self, server: &str, issuer: &str) -> Result<(), TokenError> {
        self.write(|tx| {
            tx.prepare_cached("DELETE FROM mcp_oauth_tokens WHERE server = ?1 AND issuer = ?2")
                .map_err(db)?
                .execute(params![server, issuer])
                .map_err(db)?;
            Ok(())
        })
        .map_err(err)
    }

    fn put_pending(&self, id: &str, pending: &PendingAuthorization) -> Result<(), TokenError> {
        let text = to_text(pending)?;
        // When it was begun, which the sweep goes by (the write's time for one without).
        let now =
            pending.created_at.map_or_else(|| column_int(wall_clock_ms()), |t| column_int(t.saturating_mul(1000)));
        self.write(|tx| {
            tx.prepare_cached(
                "INSERT INTO mcp_oauth_pending (id, server, pending, created_ms) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (id) DO UPDATE
                 SET server = excluded.server, pending = excluded.pending, created_ms = excluded.created_ms",
            )
            .map_err(db)?
            .execute(params![id, pending.server, text, now])
            .map_err(db)?;
            Ok(())
        })
        .map_err(err)
    }

    fn get_pending(&self, id: &str) -> Result<Option<PendingAuthorization>, TokenError> {
        let text = self
            .read(|tx| {
                tx.prepare_cached("SELECT pending FROM mcp_oauth_pending WHERE id = ?1")
                    .map_err(db)?
                    .query_row(params![id], |r| r.get::<_, String>(0))
                    .optional()
                    .map_err(db)
            })
            .map_err(err)?;
        text.map(|t| parse("pending authorization", &t)).transpose()
    }

    fn remove_pending(&self, id: &str) -> Result<(), TokenError> {
        self.write(|tx| {
            tx.prepare_cached("DELETE FROM mcp_oauth_pending WHERE id = ?1")
                .map_err(db)?
                .execute(params![id])
                .map_err(db)?;
            Ok(())
        })
        .map_err(err)
    }

    fn sweep_pending(&self, created_before: u64) -> Result<usize, TokenError> {
        let before = column_int(created_before.saturating_mul(1000));
        self.write(|tx| {
            tx.prepare_cached("DELETE FROM mcp_oauth_pending WHERE created_ms < ?1")
                .map_err(db)?
                .execute(params![before])
                .map_err(db)
        })
        .map_err(err)
    }
}
