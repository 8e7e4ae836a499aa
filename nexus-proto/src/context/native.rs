//! The provider-native context options: body fields and headers a policy
//! adds for one style, and what the provider reports back.
//!
//! * Anthropic context editing (`context_management.edits` with
//!   `clear_tool_uses_20250919`): the API clears old tool results before the
//!   model sees the prompt; the client keeps and sends its whole view.
//! * OpenAI Responses server-side compaction (`context_management:
//!   [{type: "compaction", compact_threshold}]`): past the threshold the
//!   API compacts and returns an opaque `compaction` item, which the
//!   Responses style keeps on the assistant turn and sends back in its
//!   place (only OpenAI can read it). Each one is recorded in the state.
//!   Another style never sees the item: after a failover, what stands for
//!   the earlier turns is the machine's own summary (a compaction of the
//!   budget, §18), which every style can read.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::ContextPolicy;
use crate::message::Block;
use crate::provider::{responses, Style, TurnResponse};
use crate::run::RunState;

/// The beta header value Anthropic context editing needs.
pub const ANTHROPIC_CONTEXT_BETA: &str = "context-management-2025-06-27";

/// Anthropic context editing (`context_management.edits` with
/// `clear_tool_uses_20250919`, beta `context-management-2025-06-27`): the
/// API clears the oldest tool results server-side before the model sees
/// the prompt. The client still sends, and keeps, the whole view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClearToolUses {
    /// Input tokens at which the API starts clearing (`trigger`).
    pub trigger_tokens: u64,
    /// Most recent tool uses kept (`keep`).
    pub keep_tool_uses: u32,
    /// Clear at least this many tokens each time, so the cache is broken rarely (`clear_at_least`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clear_at_least: Option<u64>,
}

/// OpenAI Responses server-side compaction (`context_management: [{type:
/// "compaction", compact_threshold}]` on each Responses request): past the
/// threshold the API compacts the conversation and answers with an opaque
/// `compaction` output item, kept on the transcript and sent back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponsesCompaction {
    /// Rendered input tokens at which the API compacts (`compact_threshold`).
    pub compact_threshold: u64,
}

/// A compaction the provider made on its side, as recorded in the state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderCompaction {
    /// The 1-based turn whose answer carried it.
    pub turn: u32,
    /// The upstream that made it.
    pub upstream: usize,
    /// The style that can read it (`openai-responses`).
    pub style: Style,
    /// The provider's id of the item (empty when it gave none).
    pub id: String,
}

/// Body keys and headers of the provider-native options for `style`.
pub(super) fn options(policy: &ContextPolicy, style: Style) -> (Map<String, Value>, Vec<(String, String)>) {
    let mut extra = Map::new();
    let mut headers = Vec::new();
    match style {
        Style::Anthropic => {
            if let Some(c) = policy.anthropic_clear_tool_uses {
                let mut edit = json!({
                    "type": "clear_tool_uses_20250919",
                    "trigger": {"type": "input_tokens", "value": c.trigger_tokens},
                    "keep": {"type": "tool_uses", "value": c.keep_tool_uses},
                });
                if let (Some(n), Value::Object(o)) = (c.clear_at_least, &mut edit) {
                    o.insert("clear_at_least".into(), json!({"type": "input_tokens", "value": n}));
                }
                extra.insert("context_management".into(), json!({ "edits": [edit] }));
                headers.push(("anthropic-beta".to_string(), ANTHROPIC_CONTEXT_BETA.to_string()));
            }
        }
        Style::OpenAiResponses => {
            if let Some(c) = policy.responses_compaction {
                let entry = json!({"type": "compaction", "compact_threshold": c.compact_threshold});
                extra.insert("context_management".into(), Value::Array(vec![entry]));
            }
        }
        _ => {}
    }
    (extra, headers)
}

/// Records the compaction items an accepted turn carries (the turn about
/// to be counted as `state.turns + 1`).
pub(super) fn on_turn(state: &mut RunState, turn: &TurnResponse) {
    let style = state.config.parts_of(state.upstream).0;
    if style != Style::OpenAiResponses {
        return;
    }
    let ids: Vec<String> = turn
        .content
        .iter()
        .filter_map(|b| match b {
            Block::Text { provider_data, .. } => responses::compaction_item(provider_data.as_ref()),
            _ => None,
        })
        .map(|item| item.get("id").and_then(Value::as_str).unwrap_or_default().to_string())
        .collect();
    if ids.is_empty() {
        return;
    }
    let (turn_no, upstream) = (state.turns + 1, state.upstream);
    let ctx = state.context.get_or_insert_with(Default::default);
    for id in ids {
        ctx.provider_compactions.push(ProviderCompaction { turn: turn_no, upstream, style, id });
    }
}
