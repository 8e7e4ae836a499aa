//! Stores: conversations by id (for `ask`), and suspended runs with
//! compare-and-swap versions so two workers can never both resume one run.
//!
//! **Which to use.** A host keeps suspended runs in a [`RunStore`]: the
//! drivers' `resume_stored` claims, resumes and writes back (or removes) a
//! run, and [`RunStore::outstanding`] lists what a stored run waits for.
//! Every store implements it: [`MemoryRunStore`], [`FileRunStore`], and, on
//! databases, [`SqliteStore`](crate::SqliteStore) (feature `sqlite`) and
//! [`PostgresStore`](crate::PostgresStore) (feature `postgres`). The
//! database stores also implement [`ClaimStore`](crate::stores::ClaimStore),
//! which is for pools of workers only: leases, answers recorded before a
//! claim, progress saves and listing (see [`stores`](crate::stores)).
//!
//! The traits are small on purpose: a SQL backend is a table
//! `(id, state, version, claimed)` and three statements, e.g.
//! `UPDATE runs SET state = ?, version = version + 1, claimed = 0 WHERE id = ? AND version = ?`
//! for [`RunStore::save`], and the same with `claimed = 1 … AND claimed = 0` for
//! [`RunStore::claim`].

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use nexus_proto::{Message, Request};
use thiserror::Error;

/// A store operation failed or was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The record's version is not the one the write was based on.
    #[error("version conflict on {id:?}: expected {expected:?}, found {found:?}")]
    Conflict {
        /// The record id.
        id: String,
        /// The version the caller expected (`None`: that it did not exist).
        expected: Option<u64>,
        /// The version found (`None`: it does not exist).
        found: Option<u64>,
    },
    /// Another worker has claimed the run.
    #[error("run {0:?} is already claimed")]
    Claimed(String),
    /// No such record.
    #[error("no record {0:?}")]
    NotFound(String),
    /// The id cannot be used (empty).
    #[error("invalid record id {0:?}")]
    InvalidId(String),
    /// The backend failed.
    #[error("store I/O error: {0}")]
    Io(String),
    /// A stored record could not be read back.
    #[error("corrupt record {id:?}: {message}")]
    Corrupt {
        /// The record id.
        id: String,
        /// What is wrong.
        message: String,
    },
}

impl From<io::Error> for StoreError {
    fn from(e: io::Error) -> Self {
        StoreError::Io(e.to_string())
    }
}

/// Conversations by id: the transcript `ask` continues.
pub trait ConversationStore: Send + Sync {
    /// The transcript, or `None` for a new conversation.
    fn get(&self, id: &str) -> Result<Option<Vec<Message>>, StoreError>;
    /// Replaces the transcript.
    fn save(&self, id: &str, messages: &[Message]) -> Result<(), StoreError>;
    /// Forgets the conversation. Returns whether it existed.
    fn delete(&self, id: &str) -> Result<bool, StoreError>;
}

/// A stored run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    /// The run's snapshot bytes.
    pub state: Vec<u8>,
    /// Bumped by every write; writes name the version they are based on.
    pub version: u64,
    /// Whether a worker has claimed the run to resume it.
    pub claimed: bool,
}

/// Suspended runs, written with compare-and-swap on a version.
///
/// The life of a run: `save(id, state, None)` when it suspends (version 1);
/// a worker `claim`s it (version 2, claimed; a second claim fails); the
/// worker resumes it and either `save`s the new state based on the claimed
/// version (still pending; the claim is released) or `delete`s it (finished).
pub trait RunStore: Send + Sync {
    /// The record, if any.
    fn load(&self, id: &str) -> Result<Option<RunRecord>, StoreError>;
    /// Writes `state` if the current version is `expected` (`None`: the
    /// record must not exist). Releases a claim. Returns the new version.
    fn save(&self, id: &str, state: &[u8], expected: Option<u64>) -> Result<u64, StoreError>;
    /// Takes the run for resuming. Succeeds for one caller only: the record
    /// is marked claimed and its version bumped.
    fn claim(&self, id: &str) -> Result<RunRecord, StoreError>;
    /// Removes the record if its version is `expected`.
    fn delete(&self, id: &str, expected: u64) -> Result<(), StoreError>;

    /// What the stored run `id` waits for: its outstanding requests, in call
    /// order (in-doubt calls included, as the next resume will see them), to
    /// show a person or answer. [`StoreError::NotFound`] when there is no such run.
    fn outstanding(&self, id: &str) -> Result<Vec<Request>, StoreError> {
        self.load(id)?.ok_or_else(|| StoreError::NotFound(id.to_string()))?.outstanding(id)
    }
}

impl RunRecord {
    /// The outstanding requests of the run in this record (see
    /// [`RunStore::outstanding`]); `id` names it in an error.
    pub fn outstanding(&self, id: &str) -> Result<Vec<Request>, StoreError> {
        nexus_proto::Run::restore(&self.state)
            .map(|run| run.outstanding())
            .map_err(|e| StoreError::Corrupt { id: id.to_string(), message: e.to_string() })
    }
}

fn check_version(id: &str, current: Option<&RunRecord>, expected: Option<u64>) -> Result<(), StoreError> {
    let found = current.map(|r| r.version);
    if found != expected {
        return Err(StoreError::Conflict { id: id.to_string(), expected, found });
    }
    Ok(())
}

fn check_id(id: &str) -> Result<(), StoreError> {
    if id.is_empty() {
        return Err(StoreError::InvalidId(id.to_string()));
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Conversations in memory.
#[derive(Debug, Default)]
pub struct MemoryConversationStore {
    map: Mutex<HashMap<String, Vec<Message>>>,
}

impl MemoryConversationStore {
    /// An empty store.
    pub fn new() -> MemoryConversationStore {
        MemoryConversationStore::default()
    }
}

impl ConversationStore for MemoryConversationStore {
    fn get(&self, id: &str) -> Result<Option<Vec<Message>>, StoreError> {
        Ok(lock(&self.map).get(id).cloned())
    }

    fn save(&self, id: &str, messages: &[Message]) -> Result<(), StoreError> {
        check_id(id)?;
        lock(&self.map).insert(id.to_string(), messages.to_vec());
        Ok(())
    }

    fn delete(&self, id: &str) -> Result<bool, StoreError> {
        Ok(lock(&self.map).remove(id).is_some())
    }
}

/// Runs in memory.
#[derive(Debug, Default)]
pub struct MemoryRunStore {
    map: Mutex<HashMap<String, RunRecord>>,
}

impl MemoryRunStore {
    /// An empty store.
    pub fn new() -> MemoryRunStore {
        MemoryRunStore::default()
    }
}

impl RunStore for MemoryRunStore {
    fn load(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        Ok(lock(&self.map).get(id).cloned())
    }

    fn save(&self, id: &str, state: &[u8], expected: Option<u64>) -> Result<u64, StoreError> {
        check_id(id)?;
        let mut map = lock(&self.map);
        check_version(id, map.get(id), expected)?;
        let version = expected.unwrap_or(0) + 1;
        map.insert(id.to_string(), RunRecord { state: state.to_vec(), version, claimed: false });
        Ok(version)
    }

    fn claim(&self, id: &str) -> Result<RunRecord, StoreError> {
        let mut map = lock(&self.map);
        let rec = map.get_mut(id).ok_or_else(|| StoreError::NotFound(id.to_string()))?;
        if rec.claimed {
            return Err(StoreError::Claimed(id.to_string()));
        }
        rec.claimed = true;
        rec.version += 1;
        Ok(rec.clone())
    }

    fn delete(&self, id: &str, expected: u64) -> Result<(), StoreError> {
        let mut map = lock(&self.map);
        check_version(id, map.get(id), Some(expected))?;
        map.remove(id);
        Ok(())
    }
}

/// Ids as file names: `[A-Za-z0-9_-]` kept, every other byte as `%XX`, so
/// any id maps to one safe name and back.
fn file_stem(id: &str) -> Result<String, StoreError> {
    check_id(id)?;
    let mut s = String::with_capacity(id.len());
    for b in id.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    Ok(s)
}

/// The id [`file_stem`] turned into `stem`, or `None` for a name it cannot
/// have written (another file in the directory, a bad escape): a name only
/// counts when it encodes back to itself.
fn stem_id(stem: &str) -> Option<String> {
    let bytes = stem.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    let id = String::from_utf8(out).ok()?;
    (file_stem(&id).ok()? == stem).then_some(id)
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces `dir/name` so that a crash at any point leaves either the old
/// file or the new one, never a mix: write a temp file, fsync it, rename it
/// over the target, fsync the directory (so the rename itself is durable).
fn write_atomic(dir: &Path, name: &str, parts: &[&[u8]]) -> io::Result<()> {
    let n = TMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.tmp-{}-{n}", std::process::id()));
    let written = (|| {
        let mut f = File::create(&tmp)?;
        for p in parts {
            f.write_all(p)?;
        }
        f.sync_all()?;
        fs::rename(&tmp, dir.join(name))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written?;
    sync_dir(dir)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    // Directories cannot be opened for syncing on every platform; where they
    // can (Unix), the rename is not durable until the directory is synced.
    #[cfg(unix)]
    File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn read_opt(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Conversations as JSON files in a directory (one per id, written atomically).
#[derive(Debug)]
pub struct FileConversationStore {
    dir: PathBuf,
}

impl FileConversationStore {
    /// A store in `dir` (created if missing).
    pub fn open(dir: impl Into<PathBuf>) -> Result<FileConversationStore, StoreError> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(FileConversationStore { dir })
    }
}

impl ConversationStore for FileConversationStore {
    fn get(&self, id: &str) -> Result<Option<Vec<Message>>, StoreError> {
        let path = self.dir.join(format!("{}.json", file_stem(id)?));
        match read_opt(&path)? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| StoreError::Corrupt { id: id.to_string(), message: e.to_string() }),
        }
    }

    fn save(&self, id: &str, messages: &[Message]) -> Result<(), StoreError> {
        let name = format!("{}.json", file_stem(id)?);
        let bytes = serde_json::to_vec(messages).map_err(|e| StoreError::Io(e.to_string()))?;
        write_atomic(&self.dir, &name, &[&bytes])?;
        Ok(())
    }

    fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let path = self.dir.join(format!("{}.json", file_stem(id)?));
        match fs::remove_file(&path) {
            Ok(()) => {
                sync_dir(&self.dir)?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// Runs as files in a directory: `<id>.run` holds a header line
/// (`nexus-run <version> <claimed>`) and the state. Writes are atomic, and
/// the read-compare-write of each operation holds an exclusive lock on
/// `<id>.lock`, so processes sharing the directory cannot interleave.
#[derive(Debug)]
pub struct FileRunStore {
    dir: PathBuf,
}

const RUN_MAGIC: &str = "nexus-run";

impl FileRunStore {
    /// A store in `dir` (created if missing).
    pub fn open(dir: impl Into<PathBuf>) -> Result<FileRunStore, StoreError> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        Ok(FileRunStore { dir })
    }

    /// The ids of the runs in the directory, sorted. The [`RunStore`] trait
    /// has no listing; this reads the `<id>.run` names back into ids, so a
    /// host can enumerate what it stored without knowing the name encoding.
    /// Files the store did not write are skipped. A run removed while the
    /// directory is read may still be listed: [`load`](RunStore::load) then
    /// finds nothing.
    pub fn ids(&self) -> Result<Vec<String>, StoreError> {
        let mut ids = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let name = entry?.file_name();
            if let Some(id) = name.to_str().and_then(|n| n.strip_suffix(".run")).and_then(stem_id) {
                ids.push(id);
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Runs `f` holding the record's lock. The OS releases the lock if the
    /// process dies, so a crash cannot wedge the record.
    fn locked<T>(&self, id: &str, f: impl FnOnce(&str) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let stem = file_stem(id)?;
        let lock_file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join(format!("{stem}.lock")))?;
        lock_file.lock()?;
        let out = f(&stem);
        let _ = lock_file.unlock();
        out
    }

    fn read(&self, id: &str, stem: &str) -> Result<Option<RunRecord>, StoreError> {
        let Some(bytes) = read_opt(&self.dir.join(format!("{stem}.run")))? else {
            return Ok(None);
        };
        let corrupt = |m: &str| StoreError::Corrupt { id: id.to_string(), message: m.to_string() };
        let nl = bytes.iter().position(|&b| b == b'\n').ok_or_else(|| corrupt("no header line"))?;
        let (head, rest) = bytes.split_at(nl);
        let head = std::str::from_utf8(head).map_err(|_| corrupt("header is not UTF-8"))?;
        let mut parts = head.split(' ');
        if parts.next() != Some(RUN_MAGIC) {
            return Err(corrupt("not a run record"));
        }
        let version = parts.next().and_then(|v| v.parse().ok()).ok_or_else(|| corrupt("bad version"))?;
        let claimed = match parts.next() {
            Some("0") => false,
            Some("1") => true,
            _ => return Err(corrupt("bad claim flag")),
        };
        let state = rest.get(1..).unwrap_or_default().to_vec();
        Ok(Some(RunRecord { state, version, claimed }))
    }

    fn write(&self, stem: &str, state: &[u8], version: u64, claimed: bool) -> Result<(), StoreError> {
        let head = format!("{RUN_MAGIC} {version} {}\n", u8::from(claimed));
        write_atomic(&self.dir, &format!("{stem}.run"), &[head.as_bytes(), state])?;
        Ok(())
    }
}

impl RunStore for FileRunStore {
    fn load(&self, id: &str) -> Result<Option<RunRecord>, StoreError> {
        let stem = file_stem(id)?;
        self.read(id, &stem)
    }

    fn save(&self, id: &str, state: &[u8], expected: Option<u64>) -> Result<u64, StoreError> {
        self.locked(id, |stem| {
            let current = self.read(id, stem)?;
            check_version(id, current.as_ref(), expected)?;
            let version = expected.unwrap_or(0) + 1;
            self.write(stem, state, version, false)?;
            Ok(version)
        })
    }

    fn claim(&self, id: &str) -> Result<RunRecord, StoreError> {
        self.locked(id, |stem| {
            let mut rec = self.read(id, stem)?.ok_or_else(|| StoreError::NotFound(id.to_string()))?;
            if rec.claimed {
                return Err(StoreError::Claimed(id.to_string()));
            }
            rec.claimed = true;
            rec.version += 1;
            self.write(stem, &rec.state, rec.version, true)?;
            Ok(rec)
        })
    }

    fn delete(&self, id: &str, expected: u64) -> Result<(), StoreError> {
        self.locked(id, |stem| {
            let current = self.read(id, stem)?;
            check_version(id, current.as_ref(), Some(expected))?;
            fs::remove_file(self.dir.join(format!("{stem}.run")))?;
            let _ = fs::remove_file(self.dir.join(format!("{stem}.lock")));
            sync_dir(&self.dir)?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "nexus-store-{tag}-{}-{}",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn cas_contract(store: &dyn RunStore) {
        assert_eq!(store.load("r/1").unwrap(), None);
        assert_eq!(store.save("r/1", b"s1", None).unwrap(), 1);
        assert!(matches!(store.save("r/1", b"x", None), Err(StoreError::Conflict { found: Some(1), .. })));
        assert_eq!(store.save("r/1", b"s2", Some(1)).unwrap(), 2);
        assert!(matches!(store.save("r/1", b"x", Some(1)), Err(StoreError::Conflict { .. })));
        let claimed = store.claim("r/1").unwrap();
        assert_eq!((claimed.state.as_slice(), claimed.version, claimed.claimed), (&b"s2"[..], 3, true));
        assert_eq!(store.claim("r/1"), Err(StoreError::Claimed("r/1".into())));
        // The claimer writes on top of its claim, which releases it.
        assert_eq!(store.save("r/1", b"s3", Some(3)).unwrap(), 4);
        assert!(!store.load("r/1").unwrap().unwrap().claimed);
        assert!(matches!(store.delete("r/1", 3), Err(StoreError::Conflict { .. })));
        store.delete("r/1", 4).unwrap();
        assert_eq!(store.load("r/1").unwrap(), None);
        assert_eq!(store.claim("r/1"), Err(StoreError::NotFound("r/1".into())));
    }

    #[test]
    fn memory_run_store_contract() {
        cas_contract(&MemoryRunStore::new());
    }

    #[test]
    fn file_run_store_contract_and_ids_with_any_bytes() {
        let dir = temp_dir("runs");
        let store = FileRunStore::open(&dir).unwrap();
        cas_contract(&store);
        assert_eq!(file_stem("a.b/c ü").unwrap(), "a%2Eb%2Fc%20%C3%BC");
        assert!(matches!(store.save("", b"x", None), Err(StoreError::InvalidId(_))));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn file_run_store_lists_its_ids() {
        let dir = temp_dir("ids");
        let store = FileRunStore::open(&dir).unwrap();
        assert_eq!(store.ids().unwrap(), Vec::<String>::new());
        for id in ["run_b", "a.b/c ü", "run_a"] {
            store.save(id, b"s", None).unwrap();
        }
        // Neither a lock file, a temporary file, nor a name the store cannot
        // have written (a bad or needless escape, an empty stem) is a run.
        for other in ["x.txt", "bad%2.run", "bad%zz.run", "%61.run", ".run", ".run_a.run.tmp-1-1"] {
            fs::write(dir.join(other), b"").unwrap();
        }
        assert_eq!(store.ids().unwrap(), ["a.b/c ü", "run_a", "run_b"]);
        store.delete("run_a", 1).unwrap();
        assert_eq!(store.ids().unwrap(), ["a.b/c ü", "run_b"]);
        assert_eq!(stem_id("r%2F1").as_deref(), Some("r/1"));
        assert_eq!(stem_id("r%2f1"), None, "the store writes upper-case escapes");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_write_that_died_before_its_rename_leaves_the_old_record() {
        let dir = temp_dir("crash");
        let store = FileRunStore::open(&dir).unwrap();
        store.save("run", b"old state", None).unwrap();
        // What a crash between the temp write and the rename leaves behind.
        fs::write(dir.join(".run.run.tmp-1-1"), b"nexus-run 2 0\nhalf-writ").unwrap();
        let rec = store.load("run").unwrap().unwrap();
        assert_eq!((rec.state.as_slice(), rec.version), (&b"old state"[..], 1));
        assert_eq!(store.save("run", b"new", Some(1)).unwrap(), 2);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn concurrent_claims_have_one_winner() {
        let dir = temp_dir("claims");
        let store = std::sync::Arc::new(FileRunStore::open(&dir).unwrap());
        store.save("r", b"s", None).unwrap();
        let wins: usize = (0..8)
            .map(|_| {
                let s = store.clone();
                std::thread::spawn(move || s.claim("r").is_ok())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| usize::from(h.join().unwrap_or(false)))
            .sum();
        assert_eq!(wins, 1);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn conversation_stores_round_trip_and_delete() {
        let dir = temp_dir("conv");
        let file = FileConversationStore::open(&dir).unwrap();
        let mem = MemoryConversationStore::new();
        for store in [&file as &dyn ConversationStore, &mem] {
            assert_eq!(store.get("c").unwrap(), None);
            let msgs = vec![Message::user("hi"), Message::assistant("hello")];
            store.save("c", &msgs).unwrap();
            assert_eq!(store.get("c").unwrap(), Some(msgs));
            assert!(store.delete("c").unwrap());
            assert!(!store.delete("c").unwrap());
            assert_eq!(store.get("c").unwrap(), None);
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
