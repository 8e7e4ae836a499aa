//! What both database stores share: how a state is described for listing
//! and answers, and the JSON and error helpers around it.

use nexus_proto::{Answer, Request, Run};

use super::{parse_rfc3339_ms, Lease};
use crate::store::StoreError;

/// What the store keeps about a state besides its bytes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Described {
    /// What the next claimer will be asked, as JSON text of a `Request` array.
    pub pending_json: String,
    /// The pending request ids.
    pub pending_ids: Vec<String>,
    /// The earliest `expiresAt`, in ms since the epoch.
    pub expires_ms: Option<u64>,
}

/// Reads what a state waits for by restoring it, exactly as the next
/// claimer will: calls that were running come back as `in_doubt` requests.
pub(crate) fn describe(run_id: &str, state: &[u8]) -> Result<Described, StoreError> {
    let run =
        Run::restore(state).map_err(|e| StoreError::Corrupt { id: run_id.to_string(), message: e.to_string() })?;
    Ok(describe_requests(&run.outstanding()))
}

/// [`describe`] for the plain `RunStore` methods, which take any bytes:
/// a state that does not restore waits for nothing the store can list.
pub(crate) fn describe_lenient(run_id: &str, state: &[u8]) -> Described {
    describe(run_id, state).unwrap_or_else(|_| describe_requests(&[]))
}

fn describe_requests(pending: &[Request]) -> Described {
    Described {
        // Requests are strings and JSON values only: serializing cannot fail.
        pending_json: serde_json::to_string(pending).unwrap_or_else(|_| "[]".into()),
        pending_ids: pending.iter().map(|r| r.id.clone()).collect(),
        expires_ms: pending.iter().filter_map(|r| r.expires_at.as_deref().and_then(parse_rfc3339_ms)).min(),
    }
}

/// Parses a stored pending list back (lenient: a list that does not parse is empty).
pub(crate) fn parse_pending(json: &str) -> Vec<Request> {
    serde_json::from_str(json).unwrap_or_default()
}

/// Parses a stored answer, naming the run when it is corrupt.
pub(crate) fn parse_answer(run_id: &str, json: &str) -> Result<Answer, StoreError> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt { id: run_id.to_string(), message: format!("stored answer: {e}") })
}

/// The answer as stored (JSON text).
pub(crate) fn answer_json(answer: &Answer) -> String {
    // Answers are strings, bools and JSON values only: serializing cannot fail.
    serde_json::to_string(answer).unwrap_or_default()
}

/// Refuses ids no store can key on.
pub(crate) fn check_id(id: &str) -> Result<(), StoreError> {
    if id.is_empty() {
        return Err(StoreError::InvalidId(id.to_string()));
    }
    Ok(())
}

/// The conflict error for a write under `lease` that found `found`.
pub(crate) fn lease_conflict(lease: &Lease, found: Option<u64>) -> StoreError {
    StoreError::Conflict { id: lease.run_id.clone(), expected: Some(lease.version), found }
}

/// What both stores' `TokenStore`s share: records kept as JSON text, and
/// errors that name the table's backend, never a value.
#[cfg(feature = "mcp")]
pub(crate) mod tokens {
    use crate::mcp::auth::store::StoreError as TokenError;
    use crate::store::StoreError;

    pub(crate) fn store_err(e: StoreError) -> TokenError {
        TokenError(e.to_string())
    }

    /// A stored `what` read back; `backend` names the store in the error.
    pub(crate) fn from_text<T: serde::de::DeserializeOwned>(
        backend: &str,
        what: &str,
        text: &str,
    ) -> Result<T, TokenError> {
        // serde's message names a position and a type, never the value.
        serde_json::from_str(text).map_err(|e| TokenError(format!("{backend}: a stored {what} is corrupt: {e}")))
    }

    pub(crate) fn to_text<T: serde::Serialize>(v: &T) -> Result<String, TokenError> {
        serde_json::to_string(v).map_err(|e| TokenError(e.to_string()))
    }

    /// A count for a signed 64-bit column (saturating).
    pub(crate) fn column_int(v: u64) -> i64 {
        i64::try_from(v).unwrap_or(i64::MAX)
    }
}
