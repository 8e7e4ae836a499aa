//! What the fake model says: scripts of turns, keyed by model name.
//!
//! The same types are built in Rust by tests and read from JSON by the
//! `fake-provider` binary. Unknown keys are refused here (unlike provider
//! JSON) so a typo in a script file fails loudly instead of being ignored.
//!
//! ```json
//! {
//!   "api_key": "test-key",
//!   "models": {
//!     "weather-model": {
//!       "turns": [
//!         {"text": "Let me look.",
//!          "tool_calls": [{"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}],
//!          "usage": {"input": 20, "output": 9},
//!          "faults": [{"kind": "status", "status": 429, "times": 2, "retry_after": "0"}]},
//!         {"text": "Sunny, 21 °C.", "stop_reason": "end_turn"}
//!       ],
//!       "expect_final": {"tool_result_contains": ["Paris"]}
//!     }
//!   }
//! }
//! ```
//!
//! A top-level `"gate": {"models": ["m-a", "m-b"], "count": 2}` holds the
//! answers to the first requests for those models until `count` of them
//! arrived (see [`Gate`](crate::fake::Gate)): a test of concurrent calls.
//!
//! Fault kinds: `status` (`status`, `retry_after`, `body`),
//! `reset_before_headers`, `reset_after_headers`, `reset_mid_stream`
//! (`after_events`), `truncated_chunked`, `stall` (`ms`), `malformed_json`,
//! `huge_body` (`bytes`), `stream_error` (`after_events`), `stall_mid_stream`
//! (`after_events`, `ms`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The API key the server accepts when none is configured.
pub const DEFAULT_API_KEY: &str = "test-key";

fn default_api_key() -> String {
    DEFAULT_API_KEY.to_string()
}

/// Everything a server serves: the accepted key and one script per model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scripts {
    /// The only API key the server accepts (every style).
    #[serde(default = "default_api_key")]
    pub api_key: String,
    /// Scripts by model name (the `model` body field, or the model in the Gemini URL).
    #[serde(default)]
    pub models: BTreeMap<String, Script>,
    /// Answers held until several requests are in flight at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate: Option<crate::fake::Gate>,
}

impl Default for Scripts {
    fn default() -> Self {
        Scripts { api_key: default_api_key(), models: BTreeMap::new(), gate: None }
    }
}

impl Scripts {
    /// No scripts, accepting `api_key`.
    pub fn new(api_key: impl Into<String>) -> Scripts {
        Scripts { api_key: api_key.into(), models: BTreeMap::new(), gate: None }
    }

    /// Holds the answers to the first `count` requests for `models` until
    /// all `count` have arrived ([`Gate`](crate::fake::Gate)).
    pub fn gate(mut self, models: &[&str], count: usize) -> Scripts {
        self.gate = Some(crate::fake::Gate { models: models.iter().map(|m| m.to_string()).collect(), count });
        self
    }

    /// Adds (or replaces) the script of `model`.
    pub fn model(mut self, model: impl Into<String>, script: Script) -> Scripts {
        self.models.insert(model.into(), script);
        self
    }

    /// Parses the JSON shape the binary reads.
    pub fn from_json(text: &str) -> Result<Scripts, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// One fake model: the turns it answers, in order.
///
/// Which turn answers a request is derived from the request alone: turn index
/// = the number of assistant (`model`) messages in its transcript. So the
/// server keeps no conversation state and a run resumed in another process
/// gets the right turn.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Turn 0 answers a transcript with no assistant message, turn 1 one with one, …
    #[serde(default)]
    pub turns: Vec<Turn>,
    /// Checks on the request that asks for the last turn (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_final: Option<ExpectFinal>,
    /// The model's context window: a request whose token count
    /// ([`fake_token_count`](crate::fake::fake_token_count)) is over it is
    /// refused with the provider's own "too long" 400, and every answer
    /// reports its request's count as its input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_limit: Option<u64>,
    /// A request whose system prompt contains this text asks for a
    /// summary: it is answered with one instead of a scripted turn, and the
    /// turn of every request is found from the last tool call id in it (a
    /// compacted transcript holds fewer assistant turns than were made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summarize_on: Option<String>,
}

impl Script {
    /// A script of these turns.
    pub fn new(turns: Vec<Turn>) -> Script {
        Script { turns, expect_final: None, context_limit: None, summarize_on: None }
    }

    /// Refuses requests over `tokens` (see [`Script::context_limit`]).
    pub fn context_limit(mut self, tokens: u64) -> Script {
        self.context_limit = Some(tokens);
        self
    }

    /// Answers summary requests (see [`Script::summarize_on`]).
    pub fn summarize_on(mut self, marker: impl Into<String>) -> Script {
        self.summarize_on = Some(marker.into());
        self
    }

    /// Adds checks on the request for the last turn.
    pub fn expect_final(mut self, expect: ExpectFinal) -> Script {
        self.expect_final = Some(expect);
        self
    }
}

/// One model answer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Reasoning before the answer (Anthropic `thinking`, Gemini `thought` parts;
    /// OpenAI Chat Completions returns none, so it is left out there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// Visible text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Tool calls, in order, after the text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallSpec>,
    /// Gemini only: send call ids (the API normally sends functionCall parts without one).
    #[serde(default, skip_serializing_if = "is_false")]
    pub with_ids: bool,
    /// OpenAI Chat Completions streams only: every call's head first, then
    /// the argument pieces of the calls in turn (index 0, 1, 0, 1, ...), as
    /// some servers stream parallel calls.
    #[serde(default, skip_serializing_if = "is_false")]
    pub interleave_calls: bool,
    /// Token counts reported for this turn.
    #[serde(default)]
    pub usage: TurnUsage,
    /// Overrides the stop reason. A neutral name (`end_turn`, `tool_use`,
    /// `max_tokens`, `stop_sequence`, `refusal`, `content_filter`, `pause_turn`)
    /// is mapped to each provider's word; anything else is sent verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Faults for the attempts at this turn, consumed in order; once they are
    /// used up the turn is answered normally.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<Fault>,
    /// A recorded provider answer to send byte for byte instead of one
    /// rendered from the fields above (which are then not used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded: Option<Recorded>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Turn {
    /// A turn answering with text only.
    pub fn text(text: impl Into<String>) -> Turn {
        Turn { text: Some(text.into()), ..Turn::default() }
    }

    /// Appends a tool call whose id the server generates.
    pub fn call(mut self, name: impl Into<String>, arguments: impl Into<String>) -> Turn {
        self.tool_calls.push(ToolCallSpec { name: name.into(), arguments: arguments.into(), id: None });
        self
    }

    /// Appends a tool call with a fixed id.
    pub fn call_with_id(
        mut self,
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Turn {
        self.tool_calls.push(ToolCallSpec { name: name.into(), arguments: arguments.into(), id: Some(id.into()) });
        self
    }

    /// Sets the reasoning text and its signature.
    pub fn thinking(mut self, text: impl Into<String>, signature: impl Into<String>) -> Turn {
        self.thinking = Some(Thinking { text: text.into(), signature: signature.into() });
        self
    }

    /// Sets the visible text.
    pub fn with_text(mut self, text: impl Into<String>) -> Turn {
        self.text = Some(text.into());
        self
    }

    /// Sets the reported token counts.
    pub fn usage(mut self, input: u64, output: u64) -> Turn {
        self.usage = TurnUsage { input, output };
        self
    }

    /// Overrides the stop reason (see [`Turn::stop_reason`]).
    pub fn stop(mut self, reason: impl Into<String>) -> Turn {
        self.stop_reason = Some(reason.into());
        self
    }

    /// Gemini: send call ids.
    pub fn with_ids(mut self) -> Turn {
        self.with_ids = true;
        self
    }

    /// Appends a fault.
    pub fn fault(mut self, fault: Fault) -> Turn {
        self.faults.push(fault);
        self
    }

    /// Streams the calls' argument pieces interleaved (Chat Completions only).
    pub fn interleaved(mut self) -> Turn {
        self.interleave_calls = true;
        self
    }

    /// A turn answering with a recorded whole body (`application/json`,
    /// Content-Length) and the status it was recorded with.
    pub fn recorded_body(status: u16, body: impl Into<Vec<u8>>) -> Turn {
        Turn { recorded: Some(Recorded { status, stream: false, body: body.into() }), ..Turn::default() }
    }

    /// A turn answering with a recorded SSE body (status 200).
    pub fn recorded_stream(body: impl Into<Vec<u8>>) -> Turn {
        Turn { recorded: Some(Recorded { status: 200, stream: true, body: body.into() }), ..Turn::default() }
    }
}

/// A provider answer replayed verbatim: real traffic (the shared wire
/// corpus) goes through the same server, HTTP framing and fault handling as
/// scripted turns, so a client can be checked against bytes the fake's own
/// encoders did not produce.
///
/// JSON: `{"status": 400, "stream": false, "body": [123, 125]}` (`body` is a
/// byte array, so recordings that are not UTF-8 fit too).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recorded {
    /// The HTTP status (200 for answers; the recorded status for error bodies).
    #[serde(default = "ok_status")]
    pub status: u16,
    /// `true`: sent as `text/event-stream`, chunked, in many chunks of
    /// varying size that ignore event, line and UTF-8 boundaries (so the
    /// client meets arbitrary cuts); `false`: one `application/json` body.
    #[serde(default)]
    pub stream: bool,
    /// The body, exactly as recorded.
    pub body: Vec<u8>,
}

fn ok_status() -> u16 {
    200
}

/// Reasoning text and the signature that must be echoed back.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thinking {
    /// The reasoning text.
    #[serde(default)]
    pub text: String,
    /// Anthropic `signature` / Gemini `thoughtSignature` (base64 text: the
    /// Gemini SDK decodes it to bytes).
    #[serde(default)]
    pub signature: String,
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    /// Tool name.
    pub name: String,
    /// The arguments as JSON text, sent byte-exact (OpenAI's string, the text
    /// of Anthropic's `input` / Gemini's `args`). Text that is not JSON is sent
    /// as-is in streams (so clients can be tested on broken arguments).
    #[serde(default = "empty_object")]
    pub arguments: String,
    /// A fixed call id; otherwise one is derived from the model, turn and
    /// position (`toolu_…` for Anthropic, `call_…` for OpenAI and Gemini).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

fn empty_object() -> String {
    "{}".to_string()
}

/// Token counts of one turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnUsage {
    /// Prompt tokens (`input_tokens`, `prompt_tokens`, `promptTokenCount`).
    #[serde(default = "default_input")]
    pub input: u64,
    /// Output tokens (`output_tokens`, `completion_tokens`, `candidatesTokenCount`).
    #[serde(default = "default_output")]
    pub output: u64,
}

fn default_input() -> u64 {
    10
}

fn default_output() -> u64 {
    5
}

impl Default for TurnUsage {
    fn default() -> Self {
        TurnUsage { input: default_input(), output: default_output() }
    }
}

/// A misbehaviour for some attempts at a turn. Attempts are counted per
/// model and turn; `times` consecutive attempts get this fault.
///
/// JSON: `{"kind": "status", "status": 429, "times": 2, "retry_after": "1"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fault {
    /// How many consecutive attempts get it.
    #[serde(default = "one")]
    pub times: u32,
    /// What happens.
    #[serde(flatten)]
    pub kind: FaultKind,
}

fn one() -> u32 {
    1
}

impl Fault {
    /// A fault for one attempt.
    pub fn new(kind: FaultKind) -> Fault {
        Fault { times: 1, kind }
    }

    /// An error status with the provider's error body for it.
    pub fn status(status: u16) -> Fault {
        Fault::new(FaultKind::Status { status, retry_after: None, body: None })
    }

    /// An error status with a `Retry-After` header.
    pub fn status_retry_after(status: u16, retry_after: impl Into<String>) -> Fault {
        Fault::new(FaultKind::Status { status, retry_after: Some(retry_after.into()), body: None })
    }

    /// For `n` consecutive attempts instead of one.
    pub fn times(mut self, n: u32) -> Fault {
        self.times = n;
        self
    }
}

/// The ways a turn can go wrong.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FaultKind {
    /// Answer with this status and the provider's error body for it.
    Status {
        /// The HTTP status (429, 500, 503, 529, …).
        status: u16,
        /// A `Retry-After` header value, sent verbatim.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<String>,
        /// A body to send instead of the provider's own.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
    },
    /// Close the connection after reading the request, before any response byte.
    ResetBeforeHeaders,
    /// Answer normally, keep-alive and all, then close the connection: a
    /// server whose idle timeout ran out while the client kept it pooled.
    CloseWhenIdle,
    /// Send the 200 response head, then close.
    ResetAfterHeaders,
    /// Send `after_events` stream events (half the body when not streaming), then close.
    ResetMidStream {
        /// Events written before the close.
        after_events: usize,
    },
    /// Send the whole chunked body but close without the terminating `0` chunk
    /// (a non-streaming answer is then sent chunked too).
    TruncatedChunked,
    /// Wait this long before answering (then answer normally).
    Stall {
        /// Milliseconds.
        ms: u64,
    },
    /// Status 200 with a body that is not JSON (in a stream: one event whose data is not JSON).
    MalformedJson,
    /// A valid answer whose text is `bytes` long.
    HugeBody {
        /// Size of the text in bytes.
        bytes: usize,
    },
    /// In a stream, a provider error event after `after_events` events (Anthropic
    /// `event: error` overloaded_error, OpenAI `{"error":…}` data, Gemini
    /// `{"error":…}` data); a non-streaming request gets the overloaded status instead.
    StreamError {
        /// Events written before the error.
        after_events: usize,
    },
    /// In a stream, `after_events` events, then silence for `ms`, then the
    /// rest (a non-streaming answer waits `ms` before it is sent).
    StallMidStream {
        /// Events written before the silence.
        after_events: usize,
        /// Milliseconds of silence.
        ms: u64,
    },
}

/// Checks on the request that asks for the script's last turn. A failed check
/// answers 400 with an `expect_final` message and is listed by
/// [`crate::fake::FakeProvider::failures`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectFinal {
    /// Each text must occur in some tool result of the transcript.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_result_contains: Vec<String>,
    /// The transcript holds exactly this many tool results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_results: Option<usize>,
    /// The transcript holds exactly this many messages (Gemini: contents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages: Option<usize>,
}
