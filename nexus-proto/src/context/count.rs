//! Asking the upstream's token counter instead of trusting the estimate.
//!
//! With `countMargin` set, a model request whose estimate falls within
//! that fraction of the trigger (either side: the estimate alone would
//! decide between sending and compacting) is first counted by the
//! upstream's own counter (Anthropic `count_tokens`, Responses
//! `input_tokens`, Gemini `countTokens`; Chat Completions has none). The
//! count request is an ordinary recorded exchange; its answer replaces the
//! estimate for that very body (matched by a hash of its bytes) and
//! calibrates later estimates. A counter that fails leaves the estimate
//! standing: a count is advice, never a reason to fail the run.

use serde::{Deserialize, Serialize};

use super::{Budget, ContextPolicy, Prepared};
use crate::provider::{count, Style};
use crate::run::RunState;

/// A count asked for one request body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Pending {
    pub upstream: usize,
    /// FNV-1a of the counted body.
    pub hash: u64,
    pub bytes: u64,
    pub estimate: u64,
    /// The answer (the estimate when the counter failed); `None` while asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

/// One count the upstream made for the run, as recorded in the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenCount {
    /// The 1-based turn whose request was counted.
    pub turn: u32,
    /// The upstream that counted.
    pub upstream: usize,
    /// The machine's estimate of the request.
    pub estimate: u64,
    /// The upstream's count (`None`: the counter failed; the estimate stood).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
}

/// What the budget goes by for a request body.
pub(super) enum Counted {
    /// Ask the counter first: this is its request.
    Ask(Prepared),
    /// These tokens (the count, or the estimate).
    Tokens(u64),
}

/// FNV-1a: a body's identity across the count and the request built again
/// after it (no hasher state, the same in every process).
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// The tokens the budget goes by for `body`, or the count request to make first.
pub(super) fn settle(
    state: &mut RunState,
    policy: &ContextPolicy,
    budget: Option<&Budget>,
    style: Style,
    body: &[u8],
    est: u64,
    headers: &[(String, String)],
) -> Counted {
    let upstream = state.upstream;
    let previous = state.context.as_mut().and_then(|c| c.count.take());
    if policy.count_margin.is_none() && previous.is_none() {
        // No counting: not even the hash is computed.
        return Counted::Tokens(est);
    }
    let hash = fnv(body);
    if let Some(p) = previous {
        match p.tokens {
            Some(tokens) if p.upstream == upstream && p.hash == hash => return Counted::Tokens(tokens),
            // Answered for another body: one count per request built, never a loop of them.
            Some(_) => return Counted::Tokens(est),
            // Asked but never answered (a restored run, a retry): asked again below.
            None => {}
        }
    }
    let (Some(margin), Some(b)) = (policy.count_margin, budget) else { return Counted::Tokens(est) };
    let near = (b.trigger as f64 * margin) as u64;
    if est.abs_diff(b.trigger) > near {
        return Counted::Tokens(est);
    }
    let (_, base_url, model) = state.config.parts_of(upstream);
    let (Some(url), Some(count_body)) =
        (count::endpoint(style, base_url, model), count::request_body(style, body, model))
    else {
        return Counted::Tokens(est);
    };
    state.context.get_or_insert_with(Default::default).count =
        Some(Pending { upstream, hash, bytes: body.len() as u64, estimate: est, tokens: None });
    Counted::Ask(Prepared { body: count_body, compaction: false, headers: headers.to_vec(), url: Some(url) })
}

/// Whether the request in flight is a count.
pub(crate) fn counting(state: &RunState) -> bool {
    state.context.as_ref().and_then(|c| c.count.as_ref()).is_some_and(|p| p.tokens.is_none())
}

/// The counter answered (`status`, `body`): the count, or on any failure
/// the estimate, stands for the body; a count calibrates the estimate.
pub(crate) fn accept(state: &mut RunState, status: u16, body: &[u8]) {
    let style = state.config.parts_of(state.upstream).0;
    let turn = state.turns + 1;
    let Some(ctx) = state.context.as_mut() else { return };
    let Some(p) = ctx.count.as_mut() else { return };
    let tokens = if (200..300).contains(&status) { count::read(style, body) } else { None };
    p.tokens = Some(tokens.unwrap_or(p.estimate));
    let (upstream, bytes, estimate) = (p.upstream, p.bytes, p.estimate);
    if let Some(n) = tokens.filter(|n| *n > 0) {
        ctx.calibration = Some((upstream, bytes, n));
    }
    ctx.token_counts.push(TokenCount { turn, upstream, estimate, tokens });
}
