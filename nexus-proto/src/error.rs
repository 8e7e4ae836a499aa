//! Errors, split the h11 way: [`InputError`] is local misuse of the API
//! (nothing changed); [`ProviderError`] and [`DecodeError`] are the remote
//! side going wrong; [`RunError`] is why a run ended in failure.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The provider answered with an error (an error status, an error body, or an
/// `error` event mid-stream). The status and the provider's own body are kept.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
#[error("provider error{}: {kind}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
pub struct ProviderError {
    /// HTTP status, when the error came as a status (absent for mid-stream error events).
    pub status: Option<u16>,
    /// The provider's error type (`overloaded_error`, `invalid_request_error`, `INVALID_ARGUMENT`, …),
    /// or `http_<status>` when the body named none.
    pub kind: String,
    /// The provider's message (or the start of the body when it had none).
    pub message: String,
    /// The raw error body, as received (lossy UTF-8, capped at 64 KiB).
    pub body: String,
    /// Whether retrying may help (429, 500, 502, 503, 504, 529, overloaded).
    pub retryable: bool,
    /// `Retry-After` in milliseconds, when the provider gave delay-seconds.
    pub retry_after_ms: Option<u64>,
}

/// The response bytes do not make sense: malformed JSON, a missing field the
/// format requires, a stream that ended before its end marker, a body over the limit.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum DecodeError {
    /// Not valid JSON (or not valid UTF-8).
    #[error("malformed JSON: {0}")]
    Json(String),
    /// Valid JSON that is not the provider's response shape.
    #[error("unexpected response shape: {0}")]
    Shape(String),
    /// The stream ended before the provider's end marker.
    #[error("truncated stream: {0}")]
    Truncated(String),
    /// The body exceeded the configured limit.
    #[error("response body over the {limit}-byte limit")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
}

/// Either kind of remote failure while reading a response.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RemoteError {
    /// The provider said no.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The bytes made no sense.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

impl From<serde_json::Error> for DecodeError {
    fn from(e: serde_json::Error) -> Self {
        DecodeError::Json(e.to_string())
    }
}

impl From<serde_json::Error> for RemoteError {
    fn from(e: serde_json::Error) -> Self {
        RemoteError::Decode(e.into())
    }
}

/// The driver misused the API. The run is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InputError {
    /// An answer whose id matches no outstanding request.
    #[error("answer id {0:?} matches no outstanding request")]
    UnknownAnswer(String),
    /// A tool result for a call that is not running.
    #[error("tool call {0:?} is not running")]
    UnknownToolCall(String),
    /// A response for an exchange that is not in flight.
    #[error("exchange {0} is not in flight")]
    UnknownExchange(u64),
    /// Response body before its head, or a second head.
    #[error("response input out of order: {0}")]
    OutOfOrder(&'static str),
    /// Time went backwards.
    #[error("time went backwards: {now} < {last}")]
    TimeWentBackwards {
        /// The time given.
        now: u64,
        /// The latest time seen before.
        last: u64,
    },
    /// The run has finished.
    #[error("the run has finished")]
    Finished,
    /// The config is invalid.
    #[error("invalid config: {0}")]
    Config(String),
    /// An answer to a request of [`Run::await_host`](crate::Run::await_host):
    /// the host acts on it and calls [`Run::settle_host`](crate::Run::settle_host).
    #[error("request {0:?} is settled by the host (Run::settle_host), not answered as an input")]
    HostSettles(String),
}

/// A request that would be unbalanced or otherwise rejected by the provider
/// was caught before it was sent.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
#[error("transcript check failed: {0}")]
pub struct GateError(pub String);

/// How a transport failure happened, as the driver saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "fuzzing", derive(arbitrary::Arbitrary))]
pub enum TransportErrorKind {
    /// Could not connect / resolve / handshake.
    Connect,
    /// Connection reset or closed early.
    Io,
    /// A timeout the driver enforces (not retried: an abort).
    Timeout,
    /// The driver aborted the exchange (cancel). Never retried.
    Aborted,
}

/// Why a run ended in failure.
#[derive(Debug, Clone, PartialEq, Eq, Error, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunError {
    /// The provider refused (after retries, when retryable).
    #[error(transparent)]
    Provider(ProviderError),
    /// The provider's bytes made no sense.
    #[error(transparent)]
    Decode(DecodeError),
    /// The network failed (after retries, when retryable).
    #[error("transport error ({kind:?}): {message}")]
    Transport {
        /// How.
        kind: TransportErrorKind,
        /// The driver's description.
        message: String,
    },
    /// The pre-send gate refused an unbalanced request.
    #[error(transparent)]
    Gate(GateError),
    /// The host cancelled the run.
    #[error("run cancelled")]
    Cancelled,
    /// The host ended the run (a hook refused to go on).
    #[error("run aborted: {reason}")]
    Aborted {
        /// The host's reason.
        reason: String,
    },
    /// The whole-run deadline passed.
    #[error("run deadline exceeded")]
    DeadlineExceeded,
    /// The run has an output spec and ended without a valid value.
    #[error(transparent)]
    Output(crate::output::OutputError),
    /// The next request cannot be brought under the context window, even
    /// compacted (one message bigger than the window, say). Nothing was sent.
    #[error("context exhausted: the next request needs about {estimate} tokens, the limit is {limit}; biggest: {}", biggest.iter().map(|i| format!("{} ({} tokens)", i.what, i.tokens)).collect::<Vec<_>>().join(", "))]
    ContextExhausted {
        /// The estimate of the smallest view the run could make.
        estimate: u64,
        /// The window minus the reserve.
        limit: u64,
        /// The biggest items of that view, biggest first.
        biggest: Vec<crate::context::ContextItem>,
    },
}

/// A serialized state could not be restored. Nothing was changed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum StateError {
    /// Not valid state JSON.
    #[error("corrupt state: {0}")]
    Corrupt(String),
    /// A `format_version` this build does not know.
    #[error("unsupported state format_version {found} (this build reads 1..={supported})")]
    UnsupportedVersion {
        /// The version found.
        found: u64,
        /// The newest version this build reads.
        supported: u64,
    },
    /// The state is well-formed JSON but breaks an invariant.
    #[error("inconsistent state: {0}")]
    Inconsistent(String),
}
