//! Where tokens live: a store the host provides, keyed by server and issuer.
//!
//! Tokens are never part of a run: not its snapshot, not a cassette, not a
//! log line, not an error. [`MemoryTokenStore`] keeps them for one process;
//! [`FileTokenStore`] keeps them in one file only its owner can read (0600),
//! for the CLI; the SQLite and PostgreSQL stores (`sql_store`) keep them in
//! a table beside the run stores'. Any of them wrapped in a
//! [`SealedTokenStore`](super::seal::SealedTokenStore) holds its secrets
//! sealed (SPEC §20).
//!
//! A store also keeps the secrets of each authorization a person has not
//! finished yet ([`PendingAuthorization`]: the PKCE verifier, `state`, the
//! client): a durable host's run suspends on the authorization request while
//! these wait here, protected like the tokens, for the process that
//! completes it.

use std::collections::BTreeMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::flow::PendingAuthorization;

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenAuthMethod {
    /// HTTP Basic with the client id and secret.
    ClientSecretBasic,
    /// The id and secret in the form body.
    ClientSecretPost,
    /// A public client: the id in the body, no secret.
    None,
}

/// A client identity at one authorization server.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientCredentials {
    /// The client id (a URL for a Client ID Metadata Document).
    pub client_id: String,
    /// The secret, for confidential clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    /// How to present them.
    pub auth_method: TokenAuthMethod,
}

impl fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("client_id", &self.client_id)
            .field("client_secret", &self.client_secret.as_ref().map(|_| "<redacted>"))
            .field("auth_method", &self.auth_method)
            .finish()
    }
}

/// What the store keeps for one (server, issuer): the tokens and what a
/// later process needs to refresh them.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRecord {
    /// The bearer token.
    pub access_token: String,
    /// The refresh token, when one was issued.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Unix seconds after which the access token is treated as expired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The scopes granted (or asked for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The RFC 8707 resource the token is for.
    pub resource: String,
    /// The token endpoint, for refreshing.
    pub token_endpoint: String,
    /// The client that obtained it.
    pub client: ClientCredentials,
}

impl fmt::Debug for TokenRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenRecord")
            .field("expires_at", &self.expires_at)
            .field("scope", &self.scope)
            .field("resource", &self.resource)
            .field("refreshable", &self.refresh_token.is_some())
            .finish_non_exhaustive()
    }
}

/// A failure of the store itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("token store: {0}")]
pub struct StoreError(pub String);

/// The host's token store. Implementations must keep records out of every
/// artifact of a run.
pub trait TokenStore: Send + Sync + fmt::Debug {
    /// The record for `server` at `issuer`.
    fn get(&self, server: &str, issuer: &str) -> Result<Option<TokenRecord>, StoreError>;
    /// Every issuer with a record for `server`, with its record.
    fn for_server(&self, server: &str) -> Result<Vec<(String, TokenRecord)>, StoreError>;
    /// Keeps (replaces) the record.
    fn put(&self, server: &str, issuer: &str, record: TokenRecord) -> Result<(), StoreError>;
    /// Forgets the record.
    fn remove(&self, server: &str, issuer: &str) -> Result<(), StoreError>;
    /// Keeps (replaces) the pending authorization of the request `id`.
    fn put_pending(&self, id: &str, pending: &PendingAuthorization) -> Result<(), StoreError>;
    /// The pending authorization of the request `id`.
    fn get_pending(&self, id: &str) -> Result<Option<PendingAuthorization>, StoreError>;
    /// Forgets it (completed or declined).
    fn remove_pending(&self, id: &str) -> Result<(), StoreError>;
    /// Forgets every pending authorization begun before `created_before`
    /// (unix seconds); one whose start is unknown is kept (the database
    /// stores take the time it was written). Returns how many went. The
    /// default keeps everything (a store that cannot tell).
    fn sweep_pending(&self, created_before: u64) -> Result<usize, StoreError> {
        let _ = created_before;
        Ok(0)
    }
}

/// Whether `p` was begun before `created_before`.
fn stale(p: &PendingAuthorization, created_before: u64) -> bool {
    p.created_at.is_some_and(|t| t < created_before)
}

type Records = BTreeMap<String, BTreeMap<String, TokenRecord>>;
type Pendings = BTreeMap<String, PendingAuthorization>;

/// Tokens for this process only.
#[derive(Default)]
pub struct MemoryTokenStore {
    records: Mutex<Records>,
    pending: Mutex<Pendings>,
}

impl fmt::Debug for MemoryTokenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTokenStore").finish_non_exhaustive()
    }
}

impl MemoryTokenStore {
    /// An empty store.
    pub fn new() -> MemoryTokenStore {
        MemoryTokenStore::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl TokenStore for MemoryTokenStore {
    fn get(&self, server: &str, issuer: &str) -> Result<Option<TokenRecord>, StoreError> {
        Ok(self.lock().get(server).and_then(|m| m.get(issuer)).cloned())
    }
    fn for_server(&self, server: &str) -> Result<Vec<(String, TokenRecord)>, StoreError> {
        Ok(self.lock().get(server).map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default())
    }
    fn put(&self, server: &str, issuer: &str, record: TokenRecord) -> Result<(), StoreError> {
        self.lock().entry(server.to_string()).or_default().insert(issuer.to_string(), record);
        Ok(())
    }
    fn remove(&self, server: &str, issuer: &str) -> Result<(), StoreError> {
        if let Some(m) = self.lock().get_mut(server) {
            m.remove(issuer);
        }
        Ok(())
    }
    fn put_pending(&self, id: &str, pending: &PendingAuthorization) -> Result<(), StoreError> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_string(), pending.clone());
        Ok(())
    }
    fn get_pending(&self, id: &str) -> Result<Option<PendingAuthorization>, StoreError> {
        Ok(self.pending.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned())
    }
    fn remove_pending(&self, id: &str) -> Result<(), StoreError> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
        Ok(())
    }
    fn sweep_pending(&self, created_before: u64) -> Result<usize, StoreError> {
        let mut all = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let before = all.len();
        all.retain(|_, p| !stale(p, created_before));
        Ok(before - all.len())
    }
}

/// Tokens in one JSON file with mode 0600, rewritten whole (write to a
/// temporary file beside it, then rename) so a reader never sees half of it.
/// Pending authorizations go in a second file beside it, the same way
/// (`tokens.json` → `tokens.pending.json`).
pub struct FileTokenStore {
    path: PathBuf,
    lock: Mutex<()>,
}

impl fmt::Debug for FileTokenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileTokenStore").field("path", &self.path).finish_non_exhaustive()
    }
}

impl FileTokenStore {
    /// A store in `path` (created on first write).
    pub fn new(path: impl Into<PathBuf>) -> FileTokenStore {
        FileTokenStore { path: path.into(), lock: Mutex::new(()) }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file pending authorizations are kept in.
    pub fn pending_path(&self) -> PathBuf {
        self.path.with_extension("pending.json")
    }

    fn read(&self) -> Result<Records, StoreError> {
        read_json_file(&self.path)
    }

    fn write(&self, records: &Records) -> Result<(), StoreError> {
        write_private(&self.path, records)
    }

    fn guard(&self) -> std::sync::MutexGuard<'_, ()> {
        self.lock.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn read_json_file<T: serde::de::DeserializeOwned + Default>(path: &Path) -> Result<T, StoreError> {
    match std::fs::read(path) {
        // The serde error names a position, never the content.
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map_err(|e| StoreError(format!("{} is not a token file: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
        Err(e) => Err(StoreError(format!("reading {}: {e}", path.display()))),
    }
}

/// Replaces `path` with `value` as JSON, mode 0600, by rename.
fn write_private<T: Serialize>(path: &Path, value: &T) -> Result<(), StoreError> {
    {
        let bytes = serde_json::to_vec_pretty(value).map_err(|e| StoreError(e.to_string()))?;
        let tmp = path.with_extension("tmp");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let io = |e: std::io::Error| StoreError(format!("writing {}: {e}", path.display()));
        let mut file = options.open(&tmp).map_err(io)?;
        #[cfg(unix)]
        {
            // A file left by an older version may have wider permissions.
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(io)?;
        }
        file.write_all(&bytes).map_err(io)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }
}

impl TokenStore for FileTokenStore {
    fn get(&self, server: &str, issuer: &str) -> Result<Option<TokenRecord>, StoreError> {
        let _g = self.guard();
        Ok(self.read()?.get(server).and_then(|m| m.get(issuer)).cloned())
    }
    fn for_server(&self, server: &str) -> Result<Vec<(String, TokenRecord)>, StoreError> {
        let _g = self.guard();
        Ok(self
            .read()?
            .get(server)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default())
    }
    fn put(&self, server: &str, issuer: &str, record: TokenRecord) -> Result<(), StoreError> {
        let _g = self.guard();
        let mut all = self.read()?;
        all.entry(server.to_string()).or_default().insert(issuer.to_string(), record);
        self.write(&all)
    }
    fn remove(&self, server: &str, issuer: &str) -> Result<(), StoreError> {
        let _g = self.guard();
        let mut all = self.read()?;
        if let Some(m) = all.get_mut(server) {
            m.remove(issuer);
        }
        self.write(&all)
    }
    fn put_pending(&self, id: &str, pending: &PendingAuthorization) -> Result<(), StoreError> {
        let _g = self.guard();
        let mut all: Pendings = read_json_file(&self.pending_path())?;
        all.insert(id.to_string(), pending.clone());
        write_private(&self.pending_path(), &all)
    }
    fn get_pending(&self, id: &str) -> Result<Option<PendingAuthorization>, StoreError> {
        let _g = self.guard();
        let all: Pendings = read_json_file(&self.pending_path())?;
        Ok(all.get(id).cloned())
    }
    fn remove_pending(&self, id: &str) -> Result<(), StoreError> {
        let _g = self.guard();
        let mut all: Pendings = read_json_file(&self.pending_path())?;
        if all.remove(id).is_some() {
            write_private(&self.pending_path(), &all)?;
        }
        Ok(())
    }
    fn sweep_pending(&self, created_before: u64) -> Result<usize, StoreError> {
        let _g = self.guard();
        let mut all: Pendings = read_json_file(&self.pending_path())?;
        let before = all.len();
        all.retain(|_, p| !stale(p, created_before));
        let swept = before - all.len();
        if swept > 0 {
            write_private(&self.pending_path(), &all)?;
        }
        Ok(swept)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(token: &str) -> TokenRecord {
        TokenRecord {
            access_token: token.into(),
            refresh_token: Some("r-secret".into()),
            expires_at: Some(10),
            scope: None,
            resource: "https://mcp/x".into(),
            token_endpoint: "https://as/token".into(),
            client: ClientCredentials {
                client_id: "c".into(),
                client_secret: Some("s-secret".into()),
                auth_method: TokenAuthMethod::ClientSecretBasic,
            },
        }
    }

    #[test]
    fn file_store_is_private_and_keyed_by_server_and_issuer() {
        let dir = std::env::temp_dir().join(format!("nexus-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = FileTokenStore::new(dir.join("tokens.json"));
        store.put("a", "https://as1", record("t1")).unwrap();
        store.put("a", "https://as2", record("t2")).unwrap();
        let again = FileTokenStore::new(dir.join("tokens.json"));
        assert_eq!(again.get("a", "https://as1").unwrap().unwrap().access_token, "t1");
        assert_eq!(again.for_server("a").unwrap().len(), 2);
        assert_eq!(again.get("b", "https://as1").unwrap(), None);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(store.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        again.remove("a", "https://as1").unwrap();
        assert_eq!(store.get("a", "https://as1").unwrap(), None);
        let shown = format!("{:?}", store.get("a", "https://as2").unwrap());
        assert!(!shown.contains("t2") && !shown.contains("secret"), "{shown}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
