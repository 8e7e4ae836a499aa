//! Client keys: from the configuration file, and from a keys file that
//! holds only their SHA-256 and is read again on [`KeysHandle::reload`]
//! (SIGHUP in the CLI) without a restart or a dropped connection.
//!
//! Requests in flight keep the key they were admitted with; a key's
//! in-flight count belongs to its name, so it survives a reload.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::config::{ClientKeyConfig, ConfigError};
use super::limits::{ModelLimits, RateLimits};

/// A key's limits and secret, as requests see it.
pub(crate) struct Key {
    pub(crate) name: String,
    secret: String,
    sha256: Option<[u8; 32]>,
    pub(crate) disabled: bool,
    pub(crate) max_concurrent: Option<usize>,
    pub(crate) limits: RateLimits,
    pub(crate) models: Vec<ModelLimits>,
    in_flight: Arc<AtomicUsize>,
}

impl Key {
    /// Whether any request or token limit applies to it.
    pub(crate) fn is_limited(&self) -> bool {
        !self.limits.is_empty() || self.models.iter().any(|m| !m.limits.is_empty())
    }
}

/// Holds one of a key's concurrency slots until dropped.
pub(crate) struct Permit(Arc<AtomicUsize>);

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The keys in effect: the configuration's, then the keys file's.
pub(crate) struct KeyRing {
    keys: RwLock<Arc<Vec<Arc<Key>>>>,
    configured: Vec<ClientKeyConfig>,
    file: Option<PathBuf>,
}

impl KeyRing {
    pub(crate) fn new(configured: Vec<ClientKeyConfig>, file: Option<PathBuf>) -> Result<KeyRing, ConfigError> {
        let ring = KeyRing { keys: RwLock::new(Arc::new(Vec::new())), configured, file };
        ring.reload()?;
        Ok(ring)
    }

    /// Reads the keys file again and swaps the keys in at once; returns how
    /// many keys are in effect. A file that cannot be read or is wrong
    /// leaves the keys as they were.
    pub(crate) fn reload(&self) -> Result<usize, ConfigError> {
        let mut all = self.configured.clone();
        if let Some(path) = &self.file {
            let text =
                std::fs::read_to_string(path).map_err(|e| ConfigError(format!("keys_file {}: {e}", path.display())))?;
            let from_file = read_keys_file(&text, &|v| std::env::var(v).ok())
                .map_err(|e| ConfigError(format!("keys_file {}: {e}", path.display())))?;
            for k in from_file {
                if all.iter().any(|c| c.name == k.name) {
                    return Err(ConfigError(format!(
                        "keys_file {}: key {:?} is also in the configuration",
                        path.display(),
                        k.name
                    )));
                }
                all.push(k);
            }
        }
        let old = self.current();
        let counts: HashMap<&str, &Arc<AtomicUsize>> = old.iter().map(|k| (k.name.as_str(), &k.in_flight)).collect();
        let keys: Vec<Arc<Key>> = all
            .into_iter()
            .map(|k| {
                let in_flight = counts.get(k.name.as_str()).map_or_else(Default::default, |c| Arc::clone(c));
                Arc::new(Key {
                    name: k.name,
                    secret: k.key,
                    sha256: k.key_sha256,
                    disabled: k.disabled,
                    max_concurrent: k.max_concurrent,
                    limits: k.limits,
                    models: k.models,
                    in_flight,
                })
            })
            .collect();
        let n = keys.len();
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(keys);
        Ok(n)
    }

    fn current(&self) -> Arc<Vec<Arc<Key>>> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether requests need a key at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.current().is_empty() && self.file.is_none()
    }

    /// The key `presented` is. Every secret and hash is compared in full,
    /// so the time taken does not say how much of one matched.
    pub(crate) fn find(&self, presented: Option<&str>) -> Option<Arc<Key>> {
        let presented = presented?.as_bytes();
        let keys = self.current();
        let digest: Option<[u8; 32]> =
            keys.iter().any(|k| k.sha256.is_some()).then(|| Sha256::digest(presented).into());
        let mut found = None;
        for k in keys.iter() {
            let same = match (&k.sha256, &digest) {
                (Some(h), Some(d)) => equal(h, d),
                _ => !k.secret.is_empty() && equal(k.secret.as_bytes(), presented),
            };
            if same {
                found = Some(k.clone());
            }
        }
        found
    }

    /// Takes one of `key`'s concurrency slots, or says it is full.
    pub(crate) fn acquire(key: &Key) -> Option<Permit> {
        let before = key.in_flight.fetch_add(1, Ordering::AcqRel);
        let permit = Permit(key.in_flight.clone());
        match key.max_concurrent {
            Some(max) if before >= max => None,
            _ => Some(permit),
        }
    }
}

/// Compares in time that depends only on the lengths.
fn equal(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for (j, x) in a.iter().enumerate() {
        diff |= x ^ b.get(j).copied().unwrap_or(0);
    }
    diff == 0
}

/// Reloads a running gateway's keys file (see [`Server::keys_handle`](super::Server::keys_handle)).
#[derive(Clone)]
pub struct KeysHandle(pub(crate) Arc<super::gateway::Shared>);

impl KeysHandle {
    /// Reads the keys file again; returns how many keys are now in effect.
    /// On error the keys in effect stay as they were.
    pub fn reload(&self) -> Result<usize, ConfigError> {
        self.0.keys.reload()
    }
}

// ------------------------------------------------------------------ the file

/// A `[[keys]]` entry, in the configuration file and in a keys file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileKey {
    name: String,
    key_env: Option<String>,
    /// The key's SHA-256, hex.
    sha256: Option<String>,
    #[serde(default)]
    disabled: bool,
    max_concurrent: Option<usize>,
    rpm: Option<u64>,
    tpm: Option<u64>,
    daily_tokens: Option<u64>,
    monthly_tokens: Option<u64>,
    #[serde(default)]
    models: Vec<FileModelLimits>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileModelLimits {
    model: String,
    rpm: Option<u64>,
    tpm: Option<u64>,
    daily_tokens: Option<u64>,
    monthly_tokens: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: Vec<FileKey>,
}

/// A keys file's text (`[[keys]]` entries, each with `sha256` or `key_env`).
pub(crate) fn read_keys_file(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<ClientKeyConfig>, ConfigError> {
    let file: KeysFile = toml::from_str(text).map_err(|e| ConfigError(e.to_string().trim_end().to_string()))?;
    keys_from_file(file.keys, env)
}

/// Limits as a file gives them (each optional, none 0).
pub(crate) fn rate_limits(
    at: &str,
    rpm: Option<u64>,
    tpm: Option<u64>,
    daily: Option<u64>,
    monthly: Option<u64>,
) -> Result<RateLimits, ConfigError> {
    for (field, v) in [("rpm", rpm), ("tpm", tpm), ("daily_tokens", daily), ("monthly_tokens", monthly)] {
        if v == Some(0) {
            return Err(ConfigError(format!("{at}: {field} = 0 would refuse every request")));
        }
    }
    Ok(RateLimits { rpm, tpm, daily_tokens: daily, monthly_tokens: monthly })
}

/// Checks and resolves `[[keys]]` entries (secrets from `env`).
pub(crate) fn keys_from_file(
    entries: Vec<FileKey>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<ClientKeyConfig>, ConfigError> {
    let bad = |m: String| ConfigError(m);
    let mut keys: Vec<ClientKeyConfig> = Vec::new();
    for (i, k) in entries.into_iter().enumerate() {
        let at = format!("keys[{i}] ({:?})", k.name);
        if k.name.is_empty() {
            return Err(bad(format!("keys[{i}]: name is empty")));
        }
        if keys.iter().any(|x| x.name == k.name) {
            return Err(bad(format!("{at}: the name is used by an earlier key")));
        }
        let mut c = ClientKeyConfig::new(k.name, String::new());
        match (k.key_env, k.sha256) {
            (Some(var), None) => {
                c.key = env(&var)
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| bad(format!("{at}: key_env names {var}, which is not set in the environment")))?;
                if keys.iter().any(|x| !x.key.is_empty() && x.key == c.key) {
                    return Err(bad(format!("{at}: the same secret as an earlier key (each name needs its own)")));
                }
            }
            (None, Some(hex)) => {
                c.key_sha256 =
                    Some(parse_sha256(&hex).ok_or_else(|| bad(format!("{at}: sha256 must be 64 hexadecimal digits")))?);
            }
            _ => {
                return Err(bad(format!(
                    "{at}: give key_env (a variable holding the key) or sha256 (its hash), one of them"
                )))
            }
        }
        if k.max_concurrent == Some(0) {
            return Err(bad(format!("{at}: max_concurrent = 0 would refuse every request")));
        }
        c.max_concurrent = k.max_concurrent;
        c.disabled = k.disabled;
        c.limits = rate_limits(&at, k.rpm, k.tpm, k.daily_tokens, k.monthly_tokens)?;
        for (j, m) in k.models.into_iter().enumerate() {
            let mat = format!("{at}.models[{j}] ({:?})", m.model);
            if m.model.is_empty() {
                return Err(bad(format!("{mat}: model is empty")));
            }
            let limits = rate_limits(&mat, m.rpm, m.tpm, m.daily_tokens, m.monthly_tokens)?;
            c.models.push(ModelLimits { model: m.model, limits });
        }
        keys.push(c);
    }
    Ok(keys)
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA_OF_SECRET: &str = "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b";

    #[test]
    fn a_hashed_key_is_found_by_its_secret() {
        let keys = read_keys_file(&format!("[[keys]]\nname = \"h\"\nsha256 = \"{SHA_OF_SECRET}\"\nrpm = 5"), &|_| None)
            .unwrap();
        assert_eq!(keys[0].limits.rpm, Some(5));
        let ring = KeyRing::new(keys, None).unwrap();
        assert_eq!(ring.find(Some("secret")).map(|k| k.name.clone()).as_deref(), Some("h"));
        assert!(ring.find(Some("secreT")).is_none());
        assert!(ring.find(None).is_none());
    }

    #[test]
    fn keys_file_errors_name_the_entry() {
        let cases = [
            ("[[keys]]\nname = \"a\"", "give key_env"),
            ("[[keys]]\nname = \"a\"\nsha256 = \"zz\"", "64 hexadecimal"),
            (&*format!("[[keys]]\nname = \"a\"\nsha256 = \"{SHA_OF_SECRET}\"\nrpm = 0"), "rpm = 0"),
            (
                &*format!("[[keys]]\nname = \"a\"\nsha256 = \"{SHA_OF_SECRET}\"\n[[keys.models]]\nmodel = \"\""),
                "model is empty",
            ),
            ("[[keys]]\nname = \"a\"\nsha256 = \"x\"\nrpmm = 1", "rpmm"),
        ];
        for (text, want) in cases {
            let e = read_keys_file(text, &|_| None).expect_err(text).0;
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}
