//! Every `TokenStore` against one contract: memory, the 0600 file, SQLite
//! and PostgreSQL (feature `postgres`; needs `NEXUS_PG_URL` from
//! `eval "$(.ci/postgres.sh start)"`, each test in its own schema, dropped
//! at the end; without it the PostgreSQL tests print a line and check
//! nothing, as the run store suite does).
//!
//! The contract: records keyed by server and issuer, the expiry kept, a
//! rotated refresh token stored with its access token atomically (two
//! writers rotating at once never leave a mixed pair), removal, pending
//! authorizations kept and forgotten, another connection sees what one
//! wrote, and no value ever appears in a `Debug` output or an error.
//!
//! Sealed (SPEC §20): each store under a `SealedTokenStore` keeps the same
//! contract, holds no secret byte in its storage, opens under a rotated
//! ring, refuses a wrong key or an altered value with an error naming the
//! store (and deletes nothing), and reads a record written before sealing,
//! sealing it on its next write.
#![cfg(feature = "mcp")]

use std::sync::Arc;

use nexus_drive::mcp::auth::seal::SEALED_PREFIX;
use nexus_drive::mcp::auth::{
    ClientCredentials, FileTokenStore, KeyRing, MemoryTokenStore, PendingAuthorization, SealedTokenStore,
    TokenAuthMethod, TokenRecord, TokenStore,
};

const SECRET: &str = "tok-secret-Zq81";

fn record(access: &str, refresh: Option<&str>, expires_at: Option<u64>) -> TokenRecord {
    TokenRecord {
        access_token: access.into(),
        refresh_token: refresh.map(str::to_string),
        expires_at,
        scope: Some("notes offline_access".into()),
        resource: "http://127.0.0.1:9/mcp".into(),
        token_endpoint: "http://127.0.0.1:9/token".into(),
        client: ClientCredentials {
            client_id: "client-1".into(),
            client_secret: Some(format!("{SECRET}-client")),
            auth_method: TokenAuthMethod::ClientSecretPost,
        },
    }
}

fn pending(server: &str) -> PendingAuthorization {
    PendingAuthorization {
        server: server.into(),
        issuer: "http://127.0.0.1:9".into(),
        resource: "http://127.0.0.1:9/mcp".into(),
        token_endpoint: "http://127.0.0.1:9/token".into(),
        client: ClientCredentials { client_id: "c".into(), client_secret: None, auth_method: TokenAuthMethod::None },
        redirect_uri: "http://127.0.0.1:8976/callback".into(),
        verifier: format!("{SECRET}-verifier-0123456789abcdefghijklmnopqrstu"),
        state: format!("{SECRET}-state"),
        scope: Some("notes".into()),
        iss_required: true,
        created_at: Some(1_900_000_000),
    }
}

/// The contract, on `open()` (each call a new handle on the same storage).
fn contract(open: &dyn Fn() -> Arc<dyn TokenStore>) {
    let a = open();
    assert_eq!(a.get("notes", "https://as1").unwrap(), None);
    assert!(a.for_server("notes").unwrap().is_empty());

    let first = record(&format!("{SECRET}-a1"), Some(&format!("{SECRET}-r1")), Some(1_900_000_000));
    a.put("notes", "https://as1", first.clone()).unwrap();
    a.put("notes", "https://as2", record("other", None, None)).unwrap();
    a.put("docs", "https://as1", record("docs-token", None, Some(5))).unwrap();
    let b = open();
    assert_eq!(b.get("notes", "https://as1").unwrap(), Some(first.clone()), "another handle sees it, expiry kept");
    let listed = b.for_server("notes").unwrap();
    let issuers: Vec<&str> = listed.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(issuers, ["https://as1", "https://as2"]);
    assert_eq!(b.get("docs", "https://as1").unwrap().unwrap().expires_at, Some(5));
    assert_eq!(b.get("docs", "https://as2").unwrap(), None);

    // A refresh rotates both tokens: replaced together.
    let rotated = record(&format!("{SECRET}-a2"), Some(&format!("{SECRET}-r2")), Some(1_900_003_600));
    b.put("notes", "https://as1", rotated.clone()).unwrap();
    assert_eq!(a.get("notes", "https://as1").unwrap(), Some(rotated));

    // Two writers rotating at once: every read is a pair written together.
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let s = open();
            std::thread::spawn(move || {
                for n in 0..25 {
                    let r = record(&format!("a-{w}-{n}"), Some(&format!("r-{w}-{n}")), Some(n));
                    s.put("notes", "https://as1", r).unwrap();
                }
            })
        })
        .collect();
    let reader = open();
    for _ in 0..25 {
        let r = reader.get("notes", "https://as1").unwrap().unwrap();
        let tail = r.access_token.trim_start_matches(|c: char| c.is_ascii_alphabetic()).to_string();
        if r.access_token.starts_with("a-") {
            assert_eq!(r.refresh_token.as_deref(), Some(format!("r{tail}").as_str()), "a mixed pair: {r:?}");
        }
    }
    for w in writers {
        w.join().unwrap();
    }
    let last = reader.get("notes", "https://as1").unwrap().unwrap();
    assert_eq!(last.refresh_token.unwrap().trim_start_matches('r'), last.access_token.trim_start_matches('a'));

    a.remove("notes", "https://as2").unwrap();
    assert_eq!(b.get("notes", "https://as2").unwrap(), None);
    assert_eq!(b.for_server("notes").unwrap().len(), 1);
    a.remove("nobody", "https://none").unwrap();

    // Pending authorizations.
    assert_eq!(a.get_pending("authorize-notes-1").unwrap(), None);
    a.put_pending("authorize-notes-1", &pending("notes")).unwrap();
    a.put_pending("authorize-docs-1", &pending("docs")).unwrap();
    assert_eq!(b.get_pending("authorize-notes-1").unwrap(), Some(pending("notes")));
    b.remove_pending("authorize-notes-1").unwrap();
    assert_eq!(a.get_pending("authorize-notes-1").unwrap(), None);
    assert_eq!(a.get_pending("authorize-docs-1").unwrap().unwrap().server, "docs");
    b.remove_pending("authorize-notes-1").unwrap();

    // Logins begun before a time are swept; newer ones stay.
    let mut old = pending("old");
    old.created_at = Some(1_000);
    a.put_pending("authorize-old-1", &old).unwrap();
    assert_eq!(b.sweep_pending(1_500_000_000).unwrap(), 1);
    assert_eq!(a.get_pending("authorize-old-1").unwrap(), None);
    assert!(a.get_pending("authorize-docs-1").unwrap().is_some(), "begun after the time");

    // Nothing secret in Debug output.
    let shown = format!("{a:?} {b:?} {:?} {:?}", a.get("docs", "https://as1").unwrap(), pending("x"));
    assert!(!shown.contains(SECRET) && !shown.contains("docs-token"), "{shown}");
}

fn sealed(inner: Arc<dyn TokenStore>, seeds: &[u8], name: &str) -> Arc<dyn TokenStore> {
    let keys = KeyRing::new(seeds.iter().map(|s| [*s; 32])).unwrap();
    Arc::new(SealedTokenStore::new(inner, keys, name))
}

/// The sealed checks on the storage `open_raw` opens; `raw_bytes` reads
/// everything that storage holds (files, or the tables' text).
fn sealed_contract(open_raw: &dyn Fn() -> Arc<dyn TokenStore>, raw_bytes: &dyn Fn() -> Vec<u8>, name: &str) {
    contract(&|| sealed(open_raw(), &[1], name));
    let store = sealed(open_raw(), &[1], name);
    let secret = record(&format!("{SECRET}-a9"), Some(&format!("{SECRET}-r9")), Some(7));
    store.put("vault", "https://as1", secret.clone()).unwrap();
    store.put_pending("authorize-vault-1", &pending("vault")).unwrap();
    let raw = String::from_utf8_lossy(&raw_bytes()).into_owned();
    assert!(!raw.contains(SECRET) && !raw.contains("docs-token"), "a secret at rest in {name}");
    assert!(raw.contains(SEALED_PREFIX) && raw.contains("client-1"), "sealed values, readable ids: {name}");
    let stored = open_raw().get("vault", "https://as1").unwrap().unwrap();
    assert!(stored.access_token.starts_with(SEALED_PREFIX) && stored.expires_at == Some(7), "{name}");

    // A restart with a rotated ring (a new key first) reads it; a write seals with the new key,
    // after which the old key can go.
    let rotated = sealed(open_raw(), &[2, 1], name);
    assert_eq!(rotated.get("vault", "https://as1").unwrap(), Some(secret.clone()));
    assert_eq!(rotated.get_pending("authorize-vault-1").unwrap(), Some(pending("vault")));
    rotated.put("vault", "https://as1", secret.clone()).unwrap();
    assert_eq!(sealed(open_raw(), &[2], name).get("vault", "https://as1").unwrap(), Some(secret.clone()));

    // A wrong key: an error naming the store and the key, nothing deleted.
    let e = sealed(open_raw(), &[3], name).get("vault", "https://as1").unwrap_err().to_string();
    assert!(e.contains(name) && e.contains("not in the key ring") && !e.contains(SECRET), "{e}");
    let e = sealed(open_raw(), &[3], name).get_pending("authorize-vault-1").unwrap_err().to_string();
    assert!(e.contains(name), "{e}");
    assert!(open_raw().get("vault", "https://as1").unwrap().is_some(), "the record is kept");

    // An altered value, or one moved from another record, does not open.
    let mut altered = open_raw().get("vault", "https://as1").unwrap().unwrap();
    altered.access_token.replace_range(altered.access_token.len() - 3.., "AAA");
    open_raw().put("vault", "https://as1", altered).unwrap();
    let e = rotated.get("vault", "https://as1").unwrap_err().to_string();
    assert!(e.contains(name) && e.contains("altered"), "{e}");
    let moved = open_raw().get("notes", "https://as1").unwrap().unwrap();
    open_raw().put("vault", "https://as1", moved).unwrap();
    assert!(rotated.get("vault", "https://as1").is_err(), "a value sealed for another record");

    // A record written before sealing is read as it is and sealed on its next write.
    let legacy = record(&format!("{SECRET}-old"), Some(&format!("{SECRET}-old-r")), None);
    open_raw().put("legacy", "https://as1", legacy.clone()).unwrap();
    open_raw().put_pending("authorize-legacy-1", &pending("legacy")).unwrap();
    assert_eq!(store.get("legacy", "https://as1").unwrap(), Some(legacy.clone()));
    assert_eq!(store.get_pending("authorize-legacy-1").unwrap(), Some(pending("legacy")));
    store.put("legacy", "https://as1", legacy.clone()).unwrap();
    store.put_pending("authorize-legacy-1", &pending("legacy")).unwrap();
    let resealed = open_raw().get("legacy", "https://as1").unwrap().unwrap();
    assert!(resealed.access_token.starts_with(SEALED_PREFIX), "{name}");
    assert!(resealed.refresh_token.is_some_and(|r| r.starts_with(SEALED_PREFIX)), "{name}");
    let resealed = open_raw().get_pending("authorize-legacy-1").unwrap().unwrap();
    assert!(resealed.verifier.starts_with(SEALED_PREFIX) && resealed.state.starts_with(SEALED_PREFIX));
    assert_eq!(store.get("legacy", "https://as1").unwrap(), Some(legacy));
}

#[test]
fn memory_store_keeps_the_contract() {
    let shared: Arc<dyn TokenStore> = Arc::new(MemoryTokenStore::new());
    contract(&|| shared.clone());
}

#[test]
fn file_store_keeps_the_contract_with_private_files() {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-token-stores-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokens.json");
    // One handle per thread would race on the whole-file rewrite; the file
    // store serializes through one handle (the CLI has one per process).
    let shared: Arc<dyn TokenStore> = Arc::new(FileTokenStore::new(&path));
    contract(&|| shared.clone());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for p in [path.clone(), dir.join("tokens.pending.json")] {
            assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600, "{}", p.display());
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn file_store_sealed_holds_no_secret() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("nexus-token-stores-sealed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tokens.json");
    let shared: Arc<dyn TokenStore> = Arc::new(FileTokenStore::new(&path));
    let files = || {
        let mut all = std::fs::read(&path).unwrap_or_default();
        all.extend(std::fs::read(dir.join("tokens.pending.json")).unwrap_or_default());
        all
    };
    sealed_contract(&|| shared.clone(), &files, &path.display().to_string());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use nexus_drive::stores::sqlite::SqliteStore;

    fn scratch() -> std::path::PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("nexus-token-sqlite-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn sqlite_store_keeps_the_contract_across_connections() {
        let dir = scratch();
        let path = dir.join("runs.db");
        contract(&|| Arc::new(SqliteStore::open(&path).unwrap()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sqlite_store_sealed_holds_no_secret() {
        let dir = scratch();
        let path = dir.join("runs.db");
        let db = || {
            let mut all = Vec::new();
            for suffix in ["", "-wal", "-journal"] {
                all.extend(std::fs::read(format!("{}{suffix}", path.display())).unwrap_or_default());
            }
            all
        };
        // The scan runs before any plain record is written (SQLite may keep a
        // replaced row's bytes in a free page until it is reused).
        sealed_contract(&|| Arc::new(SqliteStore::open(&path).unwrap()), &db, "sqlite:runs.db");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupt_row_is_an_error_that_quotes_nothing_of_it() {
        let dir = scratch();
        let path = dir.join("runs.db");
        let store = SqliteStore::open(&path).unwrap();
        store.put("notes", "https://as1", record(&format!("{SECRET}-a"), None, None)).unwrap();
        store.put_pending("authorize-notes-1", &pending("notes")).unwrap();
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute(&format!("UPDATE mcp_oauth_tokens SET record = '{{\"access_token\":\"{SECRET}-a\",'"), []).unwrap();
        raw.execute(&format!("UPDATE mcp_oauth_pending SET pending = '[\"{SECRET}-v\"]'"), []).unwrap();
        let e = store.get("notes", "https://as1").unwrap_err().to_string();
        assert!(e.contains("corrupt") && !e.contains(SECRET), "{e}");
        let e = store.for_server("notes").unwrap_err().to_string();
        assert!(!e.contains(SECRET), "{e}");
        let e = store.get_pending("authorize-notes-1").unwrap_err().to_string();
        assert!(e.contains("corrupt") && !e.contains(SECRET), "{e}");
        // The run tables are untouched by the token tables and vice versa.
        use nexus_drive::RunStore;
        assert!(store.load("run_x").unwrap().is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[cfg(feature = "postgres")]
mod postgres_store {
    use super::*;
    use nexus_drive::stores::postgres::PostgresStore;

    fn with_schema(tag: &str, f: impl FnOnce(&str, &str)) {
        let Ok(url) = std::env::var("NEXUS_PG_URL") else {
            println!("skipped: NEXUS_PG_URL is unset (start a cluster with `eval \"$(.ci/postgres.sh start)\"`)");
            return;
        };
        let schema = format!("tok_{tag}_{}", std::process::id());
        f(&url, &schema);
        if let Ok(mut c) = postgres::Client::connect(&url, postgres::NoTls) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
        }
    }

    #[test]
    fn postgres_store_keeps_the_contract_across_connections() {
        with_schema("contract", |url, schema| {
            contract(&|| Arc::new(PostgresStore::connect_in_schema(url, schema).unwrap()));
        });
    }

    #[test]
    fn postgres_store_sealed_holds_no_secret() {
        with_schema("sealed", |url, schema| {
            let tables = || {
                let mut raw = postgres::Client::connect(url, postgres::NoTls).unwrap();
                let mut all = Vec::new();
                for q in [
                    format!("SELECT record::text FROM {schema}.mcp_oauth_tokens"),
                    format!("SELECT pending::text FROM {schema}.mcp_oauth_pending"),
                ] {
                    for row in raw.query(q.as_str(), &[]).unwrap() {
                        all.extend(row.get::<_, String>(0).into_bytes());
                    }
                }
                all
            };
            sealed_contract(&|| Arc::new(PostgresStore::connect_in_schema(url, schema).unwrap()), &tables, "postgres");
        });
    }

    #[test]
    fn a_corrupt_row_is_an_error_that_quotes_nothing_of_it() {
        with_schema("corrupt", |url, schema| {
            let store = PostgresStore::connect_in_schema(url, schema).unwrap();
            store.put("notes", "https://as1", record(&format!("{SECRET}-a"), None, None)).unwrap();
            let mut raw = postgres::Client::connect(url, postgres::NoTls).unwrap();
            raw.batch_execute(&format!(
                "UPDATE {schema}.mcp_oauth_tokens SET record = '{{\"access_token\":\"{SECRET}-a\",'"
            ))
            .unwrap();
            let e = store.get("notes", "https://as1").unwrap_err().to_string();
            assert!(e.contains("corrupt") && !e.contains(SECRET), "{e}");
        });
    }
}
