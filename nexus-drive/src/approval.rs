//! Declarative approval: a tool that needs a person's yes before it runs.
//!
//! Any tool — typed, async, dynamic, built-in, an MCP server's, `#[tool]` —
//! may carry an [`ApprovalPolicy`]. A call it applies to suspends before the
//! tool runs, on a standard `approval` [`Request`] (SPEC §19); like every
//! suspension it is answered in-process (`wait_for`) or stored and resumed
//! in any process. `ok: true` runs the tool as if it had never been asked;
//! `ok: false` gives the model the decline and its reason, and the tool
//! never runs. The decision is taken once, when the call first comes: a
//! resume never evaluates the policy again.

use std::fmt;
use std::sync::Arc;

use nexus_proto::Request;
use serde_json::{Map, Value};

/// The `data.source` of the requests this module makes: how the retry after
/// an answer knows the request was the approval and not the tool's own.
pub const APPROVAL_SOURCE: &str = "needs_approval";

/// The `kind` of an approval request.
pub const KIND_APPROVAL: &str = "approval";

type Predicate = dyn Fn(&Value) -> bool + Send + Sync;

/// When a tool's calls need a person's approval before they run.
#[derive(Clone, Default)]
pub enum ApprovalPolicy {
    /// Never: the tool runs at once (the default).
    #[default]
    Never,
    /// Every call.
    Always,
    /// The calls whose arguments the predicate holds for.
    When(Arc<Predicate>),
}

impl ApprovalPolicy {
    /// The calls whose arguments (the parsed JSON object the model sent)
    /// `predicate` holds for: `ApprovalPolicy::when(|args| args["amount"].as_u64() > Some(100))`.
    pub fn when(predicate: impl Fn(&Value) -> bool + Send + Sync + 'static) -> ApprovalPolicy {
        ApprovalPolicy::When(Arc::new(predicate))
    }

    /// Whether a call with these arguments must be approved first.
    pub fn applies_to(&self, arguments: &Value) -> bool {
        match self {
            ApprovalPolicy::Never => false,
            ApprovalPolicy::Always => true,
            ApprovalPolicy::When(p) => p(arguments),
        }
    }

    /// Whether the policy never asks.
    pub fn is_never(&self) -> bool {
        matches!(self, ApprovalPolicy::Never)
    }
}

impl From<bool> for ApprovalPolicy {
    fn from(always: bool) -> Self {
        if always {
            ApprovalPolicy::Always
        } else {
            ApprovalPolicy::Never
        }
    }
}

impl fmt::Debug for ApprovalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ApprovalPolicy::Never => "Never",
            ApprovalPolicy::Always => "Always",
            ApprovalPolicy::When(_) => "When(..)",
        })
    }
}

/// The request a call of `tool` with `input` (raw text `arguments`) suspends on.
pub(crate) fn approval_request(tool: &str, input: &Value, arguments: &str) -> Request {
    let mut data = Map::new();
    data.insert("source".into(), Value::from(APPROVAL_SOURCE));
    data.insert("tool".into(), Value::from(tool));
    data.insert("input".into(), input.clone());
    let shown = if arguments.trim().is_empty() { "{}" } else { arguments };
    let mut request = Request::new(KIND_APPROVAL, format!("Allow {tool} to run with {shown}?"));
    request.data = Some(data);
    request
}

/// Whether `request` is an approval this module made (so the call's retry
/// runs the tool, which never sees the approval as its own answer).
pub(crate) fn is_approval_request(request: &Request) -> bool {
    request.kind == KIND_APPROVAL
        && request.data.as_ref().and_then(|d| d.get("source")).and_then(Value::as_str) == Some(APPROVAL_SOURCE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn policies_and_the_request_they_make() {
        let big = ApprovalPolicy::when(|a| a["amount"].as_u64().is_some_and(|n| n > 100));
        assert!(big.applies_to(&json!({"amount": 500})) && !big.applies_to(&json!({"amount": 5})));
        assert!(ApprovalPolicy::from(true).applies_to(&json!({})));
        assert!(!ApprovalPolicy::default().applies_to(&json!({})));

        let r = approval_request("refund", &json!({"order": "A1"}), r#"{"order":"A1"}"#);
        assert_eq!(r.kind, "approval");
        assert_eq!(r.prompt, r#"Allow refund to run with {"order":"A1"}?"#);
        assert_eq!(
            Value::Object(r.data.clone().unwrap()),
            json!({"source": "needs_approval", "tool": "refund", "input": {"order": "A1"}})
        );
        assert!(is_approval_request(&r));
        // A tool's own approval request is its own: the retry hands it the answer.
        assert!(!is_approval_request(&Request::new("approval", "ok?")));
    }
}
