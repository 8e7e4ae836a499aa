//! Tokens and login secrets sealed at rest (SPEC §20).
//!
//! A [`KeyRing`] holds 256-bit keys; the first seals, every one opens, so a
//! key is rotated by putting a new one first and dropping the old one once
//! every record has been written again. A sealed value is text:
//!
//! ```text
//! nexus-sealed:v1:<key id>:<base64url(nonce ‖ AES-256-GCM ciphertext ‖ tag)>
//! ```
//!
//! The key id (8 hex digits of a SHA-256 of the key) names the key that
//! opens it; the nonce is 96 random bits. The associated data binds the
//! value to its place (server and issuer, or pending request id, and the
//! field), so a sealed value copied into another record does not open.
//!
//! [`SealedTokenStore`] seals the secret fields of any [`TokenStore`]'s
//! records — access and refresh tokens, client secrets, PKCE verifiers and
//! `state` — and leaves what is not secret (the resource, the endpoints,
//! the client id, expiry) readable for queries. A field written before
//! sealing (plain text) is read as it is and sealed on the record's next
//! write. A host with a KMS unwraps its data keys there and hands the bytes
//! to [`KeyRing::new`]; the keys never leave the process otherwise.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use base64::Engine;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use sha2::Digest;

use super::flow::PendingAuthorization;
use super::store::{ClientCredentials, StoreError, TokenRecord, TokenStore};

/// The prefix of every sealed value.
pub const SEALED_PREFIX: &str = "nexus-sealed:v1:";

/// The environment variable the CLI reads its key ring from.
pub const KEY_ENV: &str = "NEXUS_TOKEN_KEY";

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// Why a key ring could not be made or a value not opened. Messages name
/// key ids and places, never key bytes or values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// A key is not 32 bytes in hex or base64.
    #[error("key {index} is not 32 bytes in hex (64 digits) or base64")]
    BadKey {
        /// Its place in the ring, from 1.
        index: usize,
    },
    /// The ring has no key.
    #[error("no key given")]
    NoKey,
    /// A value is sealed with a key the ring does not hold.
    #[error("a value is sealed with key {key_id}, which is not in the key ring (it holds {held})")]
    UnknownKey {
        /// The key the value names.
        key_id: String,
        /// The ids the ring holds.
        held: String,
    },
    /// The value does not open: tampered with, cut, or moved from another record.
    #[error("a sealed value does not open under key {key_id}: altered, or moved from another record")]
    Tampered {
        /// The key the value names.
        key_id: String,
    },
    /// Reading or writing a key file failed.
    #[error("key file {path}: {message}")]
    KeyFile {
        /// The file.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// The system gave no randomness.
    #[error("no randomness from the system: {0}")]
    Random(String),
}

struct Key {
    id: String,
    key: LessSafeKey,
}

/// The keys tokens are sealed with: the first seals, every one opens.
#[derive(Clone)]
pub struct KeyRing {
    keys: Arc<[Key]>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing").field("key_ids", &self.key_ids()).finish()
    }
}

/// The id of a key: 8 hex digits of SHA-256 over a label and the key.
fn key_id(bytes: &[u8; 32]) -> String {
    let digest = sha2::Sha256::new().chain_update(b"nexus token key\0").chain_update(bytes).finalize();
    digest.iter().take(4).map(|b| format!("{b:02x}")).collect()
}

/// 32 bytes from 64 hex digits or base64 (standard or URL-safe, padded or not).
fn decode_key(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut out = [0u8; 32];
        for (i, pair) in text.as_bytes().chunks(2).enumerate() {
            let hex = std::str::from_utf8(pair).ok()?;
            out[i] = u8::from_str_radix(hex, 16).ok()?;
        }
        return Some(out);
    }
    let unpadded = text.trim_end_matches('=');
    let bytes =
        base64::engine::general_purpose::STANDARD_NO_PAD.decode(unpadded).or_else(|_| B64.decode(unpadded)).ok()?;
    bytes.try_into().ok()
}

impl KeyRing {
    /// A ring of raw keys, the sealing one first (for hosts that get their
    /// keys from a KMS or a secret manager).
    pub fn new(keys: impl IntoIterator<Item = [u8; 32]>) -> Result<KeyRing, SealError> {
        let keys: Vec<Key> = keys
            .into_iter()
            .map(|bytes| {
                // AES-256-GCM takes any 32 bytes.
                let unbound = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| SealError::BadKey { index: 1 })?;
                Ok(Key { id: key_id(&bytes), key: LessSafeKey::new(unbound) })
            })
            .collect::<Result<_, SealError>>()?;
        if keys.is_empty() {
            return Err(SealError::NoKey);
        }
        Ok(KeyRing { keys: keys.into() })
    }

    /// A ring from text: keys separated by commas, spaces or lines, each 64
    /// hex digits or base64 of 32 bytes; `#` starts a comment. The form of
    /// `NEXUS_TOKEN_KEY` and of a key file.
    pub fn parse(text: &str) -> Result<KeyRing, SealError> {
        let words = text
            .lines()
            .map(|line| line.split('#').next().unwrap_or_default())
            .flat_map(|line| line.split([',', ' ', '\t']))
            .filter(|w| !w.trim().is_empty());
        let keys = words
            .enumerate()
            .map(|(i, w)| decode_key(w).ok_or(SealError::BadKey { index: i + 1 }))
            .collect::<Result<Vec<_>, _>>()?;
        KeyRing::new(keys)
    }

    /// A ring from a key file (the [`parse`](KeyRing::parse) form).
    pub fn from_file(path: &Path) -> Result<KeyRing, SealError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| SealError::KeyFile { path: path.display().to_string(), message: e.to_string() })?;
        KeyRing::parse(&text)
    }

    /// The ring in `path`, or, when there is no such file, a new random key
    /// written there (mode 0600, never over an existing file). The flag
    /// says whether the key was made now.
    pub fn load_or_create(path: &Path) -> Result<(KeyRing, bool), SealError> {
        let file_err =
            |e: std::io::Error| SealError::KeyFile { path: path.display().to_string(), message: e.to_string() };
        match std::fs::metadata(path) {
            Ok(_) => return Ok((KeyRing::from_file(path)?, false)),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(file_err(e)),
            Err(_) => {}
        }
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| SealError::Random(e.to_string()))?;
        let text = format!(
            "# nexus token key ring: the first key seals, every key opens (SPEC §20)\n{}\n",
            base64::engine::general_purpose::STANDARD.encode(key)
        );
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        use std::io::Write;
        match options.open(path) {
            Ok(mut f) => {
                f.write_all(text.as_bytes()).and_then(|_| f.sync_all()).map_err(file_err)?;
                Ok((KeyRing::new([key])?, true))
            }
            // Another process made it first: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok((KeyRing::from_file(path)?, false)),
            Err(e) => Err(file_err(e)),
        }
    }

    /// The keys' ids, the sealing one first.
    pub fn key_ids(&self) -> Vec<String> {
        self.keys.iter().map(|k| k.id.clone()).collect()
    }

    /// Seals `plain` for the place `aad` names.
    pub fn seal(&self, plain: &[u8], aad: &[u8]) -> Result<String, SealError> {
        let key = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).map_err(|e| SealError::Random(e.to_string()))?;
        let mut sealed = plain.to_vec();
        key.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), &mut sealed)
            .map_err(|_| SealError::Tampered { key_id: key.id.clone() })?;
        let mut body = nonce.to_vec();
        body.extend_from_slice(&sealed);
        Ok(format!("{SEALED_PREFIX}{}:{}", key.id, B64.encode(body)))
    }

    /// Opens a value [`seal`](KeyRing::seal) made for the place `aad` names.
    /// `None` when `text` is not sealed at all (a value written before sealing).
    pub fn open(&self, text: &str, aad: &[u8]) -> Result<Option<Vec<u8>>, SealError> {
        let Some(rest) = text.strip_prefix(SEALED_PREFIX) else {
            return Ok(None);
        };
        let (id, body) = rest.split_once(':').unwrap_or((rest, ""));
        let Some(key) = self.keys.iter().find(|k| k.id == id) else {
            return Err(SealError::UnknownKey { key_id: id.to_string(), held: self.key_ids().join(", ") });
        };
        let tampered = || SealError::Tampered { key_id: id.to_string() };
        let body = B64.decode(body).map_err(|_| tampered())?;
        if body.len() < NONCE_LEN {
            return Err(tampered());
        }
        let (nonce, sealed) = body.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| tampered())?;
        let mut sealed = sealed.to_vec();
        let plain = key.key.open_in_place(nonce, Aad::from(aad), &mut sealed).map_err(|_| tampered())?;
        Ok(Some(plain.to_vec()))
    }
}

/// A [`TokenStore`] whose secrets are sealed under a [`KeyRing`] before the
/// store underneath sees them. `name` names the store in errors (a path or
/// a `sqlite:`/`postgres` label).
pub struct SealedTokenStore {
    inner: Arc<dyn TokenStore>,
    keys: KeyRing,
    name: String,
}

impl fmt::Debug for SealedTokenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SealedTokenStore")
            .field("name", &self.name)
            .field("key_ids", &self.keys.key_ids())
            .field("inner", &self.inner)
            .finish()
    }
}

/// Which record a field belongs to: the associated data of its sealed value.
enum Place<'a> {
    Token { server: &'a str, issuer: &'a str },
    Pending { id: &'a str },
}

impl Place<'_> {
    fn aad(&self, field: &str) -> Vec<u8> {
        match self {
            Place::Token { server, issuer } => format!("token\0{server}\0{issuer}\0{field}"),
            Place::Pending { id } => format!("pending\0{id}\0{field}"),
        }
        .into_bytes()
    }
}

impl SealedTokenStore {
    /// Seals what goes into `inner` under `keys`.
    pub fn new(inner: Arc<dyn TokenStore>, keys: KeyRing, name: impl Into<String>) -> SealedTokenStore {
        SealedTokenStore { inner, keys, name: name.into() }
    }

    fn fail(&self, e: SealError) -> StoreError {
        StoreError(format!("{}: {e}; nothing was changed or deleted", self.name))
    }

    fn seal(&self, place: &Place<'_>, field: &str, value: &mut String) -> Result<(), StoreError> {
        *value = self.keys.seal(value.as_bytes(), &place.aad(field)).map_err(|e| self.fail(e))?;
        Ok(())
    }

    fn open(&self, place: &Place<'_>, field: &str, value: &mut String) -> Result<(), StoreError> {
        if let Some(plain) = self.keys.open(value, &place.aad(field)).map_err(|e| self.fail(e))? {
            *value = String::from_utf8(plain)
                .map_err(|_| StoreError(format!("{}: a sealed {field} is not text", self.name)))?;
        }
        Ok(())
    }

    fn client(
        &self,
        place: &Place<'_>,
        client: &mut ClientCredentials,
        f: fn(&Self, &Place<'_>, &str, &mut String) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        match &mut client.client_secret {
            Some(secret) => f(self, place, "client_secret", secret),
            None => Ok(()),
        }
    }

    fn each_token_field(
        &self,
        place: &Place<'_>,
        mut r: TokenRecord,
        f: fn(&Self, &Place<'_>, &str, &mut String) -> Result<(), StoreError>,
    ) -> Result<TokenRecord, StoreError> {
        f(self, place, "access_token", &mut r.access_token)?;
        if let Some(refresh) = &mut r.refresh_token {
            f(self, place, "refresh_token", refresh)?;
        }
        self.client(place, &mut r.client, f)?;
        Ok(r)
    }

    fn each_pending_field(
        &self,
        place: &Place<'_>,
        mut p: PendingAuthorization,
        f: fn(&Self, &Place<'_>, &str, &mut String) -> Result<(), StoreError>,
    ) -> Result<PendingAuthorization, StoreError> {
        f(self, place, "verifier", &mut p.verifier)?;
        f(self, place, "state", &mut p.state)?;
        self.client(place, &mut p.client, f)?;
        Ok(p)
    }
}

impl TokenStore for SealedTokenStore {
    fn get(&self, server: &str, issuer: &str) -> Result<Option<TokenRecord>, StoreError> {
        let place = Place::Token { server, issuer };
        self.inner.get(server, issuer)?.map(|r| self.each_token_field(&place, r, Self::open)).transpose()
    }

    fn for_server(&self, server: &str) -> Result<Vec<(String, TokenRecord)>, StoreError> {
        self.inner
            .for_server(server)?
            .into_iter()
            .map(|(issuer, r)| {
                let opened = self.each_token_field(&Place::Token { server, issuer: &issuer }, r, Self::open)?;
                Ok((issuer, opened))
            })
            .collect()
    }

    fn put(&self, server: &str, issuer: &str, record: TokenRecord) -> Result<(), StoreError> {
        let sealed = self.each_token_field(&Place::Token { server, issuer }, record, Self::seal)?;
        self.inner.put(server, issuer, sealed)
    }

    fn remove(&self, server: &str, issuer: &str) -> Result<(), StoreError> {
        self.inner.remove(server, issuer)
    }

    fn put_pending(&self, id: &str, pending: &PendingAuthorization) -> Result<(), StoreError> {
        let sealed = self.each_pending_field(&Place::Pending { id }, pending.clone(), Self::seal)?;
        self.inner.put_pending(id, &sealed)
    }

    fn get_pending(&self, id: &str) -> Result<Option<PendingAuthorization>, StoreError> {
        self.inner.get_pending(id)?.map(|p| self.each_pending_field(&Place::Pending { id }, p, Self::open)).transpose()
    }

    fn remove_pending(&self, id: &str) -> Result<(), StoreError> {
        self.inner.remove_pending(id)
    }

    fn sweep_pending(&self, created_before: u64) -> Result<usize, StoreError> {
        self.inner.sweep_pending(created_before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(seeds: &[u8]) -> KeyRing {
        KeyRing::new(seeds.iter().map(|s| [*s; 32])).unwrap()
    }

    #[test]
    fn a_value_opens_only_under_its_key_and_place() {
        let keys = ring(&[1]);
        let sealed = keys.seal(b"tok-secret", b"token\0a\0i\0access_token").unwrap();
        assert!(sealed.starts_with(SEALED_PREFIX) && !sealed.contains("tok-secret"), "{sealed}");
        assert_eq!(keys.open(&sealed, b"token\0a\0i\0access_token").unwrap().as_deref(), Some(&b"tok-secret"[..]));
        assert_ne!(sealed, keys.seal(b"tok-secret", b"x").unwrap(), "a fresh nonce each time");
        // Another place, a flipped byte, a cut value: refused.
        assert!(matches!(keys.open(&sealed, b"token\0b\0i\0access_token"), Err(SealError::Tampered { .. })));
        let mut flipped = sealed.clone().into_bytes();
        let last = flipped.len() - 2;
        flipped[last] = if flipped[last] == b'A' { b'B' } else { b'A' };
        let flipped = String::from_utf8(flipped).unwrap();
        assert!(matches!(keys.open(&flipped, b"token\0a\0i\0access_token"), Err(SealError::Tampered { .. })));
        assert!(matches!(keys.open(&sealed[..sealed.len() - 30], b"x"), Err(SealError::Tampered { .. })));
        // Another key: named, not opened.
        let other = ring(&[2]);
        let e = other.open(&sealed, b"token\0a\0i\0access_token").unwrap_err();
        assert!(matches!(&e, SealError::UnknownKey { key_id, .. } if *key_id == keys.key_ids()[0]), "{e}");
        // Plain text is not sealed: left to the caller.
        assert_eq!(keys.open("plain", b"x").unwrap(), None);
    }

    #[test]
    fn keys_parse_from_hex_and_base64_and_rotate() {
        let hex = "00".repeat(31) + "01";
        let b64 = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        let parsed = KeyRing::parse(&format!("# comment\n{hex}, {b64}\n")).unwrap();
        assert_eq!(parsed.key_ids().len(), 2);
        assert_eq!(parsed.key_ids()[1], ring(&[7]).key_ids()[0]);
        for bad in ["", "# only a comment", "abcd", &"0".repeat(63)] {
            assert!(KeyRing::parse(bad).is_err(), "{bad:?}");
        }
        // Rotation: the old ring's values open under the new ring, which seals with its first key.
        let old = ring(&[1]);
        let new = ring(&[2, 1]);
        let sealed = old.seal(b"v", b"p").unwrap();
        assert_eq!(new.open(&sealed, b"p").unwrap().as_deref(), Some(&b"v"[..]));
        assert!(new.seal(b"v", b"p").unwrap().contains(&new.key_ids()[0]));
        let shown = format!("{new:?}");
        assert!(shown.contains(&new.key_ids()[0]) && !shown.contains("020202"), "{shown}");
    }
}
