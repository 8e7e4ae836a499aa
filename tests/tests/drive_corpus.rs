//! Real provider traffic (`shared/wire-corpus`) through the whole client:
//! the fake replays each recording verbatim (whole bodies with their
//! status, streams cut into chunks of varying size) and both drivers run a
//! one-turn conversation against it. What a driver makes of the answer —
//! the assistant turn (text, reasoning with its signatures, tool calls),
//! stop reason, usage, or the provider error with status and body — must be
//! the recording's `.expected.json` (the official SDK's reading, the same
//! expectation the core's corpus tests decode to), the same in both
//! drivers, and the same in `run` and `stream`.
//!
//! Tools the recording calls are declared as relay tools: nothing runs
//! locally, and the run stops with the calls handed back to the caller.

mod drive_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use drive_support::{builder, Drv, KEY};
use nexus_drive::{DriveError, Message, RunError, RunResult, RunStatus, StopReason, StreamEvent};
use nexus_tests::fake::{FakeProvider, RecordedRequest, Script, Scripts, Style, Turn};
use nexus_tests::oracle::shared_dir;
use serde_json::{json, Value};

/// Request bodies recorded alongside the answers. A driver only ever
/// receives answers, so these cannot be replayed to one; the core's corpus
/// tests check that its encoder rebuilds them. Listed one by one so that a
/// new file in the corpus fails [`every_corpus_file_is_replayed_or_listed_as_skipped`]
/// until it is handled.
const SKIPPED: &[&str] = &[
    "anthropic/requests/pai_test_anthropic_test_anthropic_model_thinking_part_stream_0.expected.txt",
    "anthropic/requests/pai_test_anthropic_test_anthropic_model_thinking_part_stream_0.json",
    "anthropic/requests/pai_test_anthropic_test_anthropic_tool_with_thinking_1.expected.txt",
    "anthropic/requests/pai_test_anthropic_test_anthropic_tool_with_thinking_1.json",
    "anthropic/requests/pai_test_anthropic_test_multiple_parallel_tool_calls_1.expected.txt",
    "anthropic/requests/pai_test_anthropic_test_multiple_parallel_tool_calls_1.json",
    "gemini/requests/pai_test_google_test_google_model_iter_stream_1.expected.txt",
    "gemini/requests/pai_test_google_test_google_model_iter_stream_1.json",
    "gemini/requests/pai_test_google_test_google_tool_output_1.expected.txt",
    "gemini/requests/pai_test_google_test_google_tool_output_1.json",
    "openai/requests/pai_test_dbos_test_complex_agent_run_in_workflow_1.expected.txt",
    "openai/requests/pai_test_dbos_test_complex_agent_run_in_workflow_1.json",
    "openai/requests/pai_test_dbos_test_dbos_agent_with_hitl_tool_1.expected.txt",
    "openai/requests/pai_test_dbos_test_dbos_agent_with_hitl_tool_1.json",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_model_retry_1.expected.txt",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_model_retry_1.json",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_model_simple_response_with_tool_call_1.expected.note.md",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_model_simple_response_with_tool_call_1.expected.txt",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_model_simple_response_with_tool_call_1.json",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_phase_live_1.expected.txt",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_phase_live_1.json",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_streaming_usage_0.expected.txt",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_streaming_usage_0.json",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_thinking_with_modified_history_1.expected.txt",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_thinking_with_modified_history_1.json",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_thinking_with_tool_calls_1.expected.txt",
    "openai-responses/requests/pai_test_openai_responses_test_openai_responses_thinking_with_tool_calls_1.json",
];

const PROMPT: &str = "Replay the recorded answer.";

// ------------------------------------------------------------------ corpus

/// `shared/wire-corpus` (`NEXUS_SHARED` overrides `shared/`, as for the
/// core's corpus tests and the oracles).
fn corpus_dir() -> PathBuf {
    shared_dir().join("wire-corpus")
}

/// One recorded answer and what it must decode to.
struct Recording {
    style: Style,
    /// Path inside the corpus, e.g. `anthropic/vai_text.json`.
    rel: String,
    stream: bool,
    bytes: Vec<u8>,
    expected: Value,
    /// The HTTP status the answer came with.
    status: u16,
}

impl Recording {
    /// The fake's model name for this recording (unique across styles).
    fn model(&self) -> String {
        let name = self.rel.rsplit_once('/').map_or(self.rel.as_str(), |(_, n)| n);
        let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
        format!("{}-{stem}", self.style.name())
    }

    /// Whether the expectation is a provider error instead of a turn (the
    /// rule the core's corpus tests use).
    fn is_error(&self) -> bool {
        self.expected["error"]["type"].is_string() && self.expected["stop"].is_null()
    }

    /// The tool names the recording calls, each once.
    fn tool_names(&self) -> BTreeSet<String> {
        let calls = self.expected["tool_calls"].as_array().into_iter().flatten();
        calls.filter_map(|c| c["name"].as_str().map(str::to_string)).collect()
    }

    fn turn(&self) -> Turn {
        if self.stream {
            Turn::recorded_stream(self.bytes.clone())
        } else {
            Turn::recorded_body(self.status, self.bytes.clone())
        }
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The recorded answers of one style, sorted (requests excluded).
fn recordings(style: Style) -> Vec<Recording> {
    let dir = corpus_dir().join(style.name());
    let manifest = String::from_utf8(read(&corpus_dir().join("MANIFEST.md"))).expect("MANIFEST.md is UTF-8");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("wire corpus at {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.is_file() && capture_kind(p).is_some())
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let name = path.file_name().unwrap_or_default().to_string_lossy().to_string();
            let rel = format!("{}/{name}", style.name());
            let expected_path = expectation_of(&path);
            let expected: Value = serde_json::from_slice(&read(&expected_path))
                .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
            let mut rec = Recording {
                style,
                stream: capture_kind(&path) == Some(true),
                bytes: read(&path),
                expected,
                rel,
                status: 200,
            };
            // An in-stream error comes after a 200 head.
            if rec.is_error() && !rec.stream {
                rec.status = recorded_status(&manifest, &rec.rel);
            }
            rec
        })
        .collect()
}

/// `Some(is_stream)` for a capture (`.sse`, or `.json` that is not an expectation).
fn capture_kind(path: &Path) -> Option<bool> {
    let name = path.file_name()?.to_str()?;
    if name.ends_with(".expected.json") {
        None
    } else if name.ends_with(".sse") {
        Some(true)
    } else if name.ends_with(".json") {
        Some(false)
    } else {
        None
    }
}

fn expectation_of(capture: &Path) -> PathBuf {
    let name = capture.file_name().unwrap_or_default().to_string_lossy();
    let stem = name.rsplit_once('.').map_or(&*name, |(s, _)| s);
    capture.with_file_name(format!("{stem}.expected.json"))
}

/// The status of an error recording, from its MANIFEST row (`… (HTTP 400 …)`):
/// the expectation holds the error's type and message, the manifest says
/// how it came.
fn recorded_status(manifest: &str, rel: &str) -> u16 {
    let row = manifest
        .lines()
        .find(|l| l.starts_with(&format!("| `{rel}`")))
        .unwrap_or_else(|| panic!("{rel}: no MANIFEST.md row"));
    let at = row.find("HTTP ").unwrap_or_else(|| panic!("{rel}: the MANIFEST.md row names no HTTP status"));
    row[at + 5..]
        .get(..3)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{rel}: unreadable HTTP status in {row:?}"))
}

/// Every file under `dir`, relative to it.
fn files_under(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy().to_string();
        let rel = if prefix.is_empty() { name } else { format!("{prefix}/{name}") };
        if path.is_dir() {
            files_under(&path, &rel, out);
        } else {
            out.push(rel);
        }
    }
}

// ------------------------------------------------------------------ running

/// A fake serving every recording of `recs` under its own model name.
fn fake_for(recs: &[Recording]) -> FakeProvider {
    let mut scripts = Scripts::new(KEY);
    for rec in recs {
        scripts = scripts.model(rec.model(), Script::new(vec![rec.turn()]));
    }
    FakeProvider::start(scripts)
}

fn client(fake: &FakeProvider, rec: &Recording, drv: Drv) -> drive_support::Cl {
    let mut b = builder(fake, rec.style, &rec.model(), rec.stream).max_turns(1).retries(0);
    for name in rec.tool_names() {
        b = b.relay_tool(&name, format!("relays {name} to the caller"), json!({"type": "object"}));
    }
    drv.client(b.build().expect("client config"))
}

/// Runs the recording through `drv`, once with `run` and once with
/// `stream`; both must end the same way. Returns the end and the stream's events.
fn drive(fake: &FakeProvider, rec: &Recording, drv: Drv) -> (Result<RunResult, DriveError>, Vec<StreamEvent>) {
    let cl = client(fake, rec, drv);
    let ran = cl.run(PROMPT);
    let (events, streamed) = cl.stream(PROMPT);
    assert_eq!(comparable(&ran), comparable(&streamed), "{} {drv:?}: run and stream end differently", rec.rel);
    (ran, events)
}

/// An end in a form two runs can be compared by: the result as the CLI
/// prints it plus the suspended run's requests (its snapshot bytes are not
/// compared), or the error.
fn comparable(end: &Result<RunResult, DriveError>) -> Result<(Value, Value), DriveError> {
    match end {
        Ok(r) => Ok((
            serde_json::to_value(r).expect("result serializes"),
            serde_json::to_value(r.suspended.as_ref().map(|s| &s.pending)).expect("requests serialize"),
        )),
        Err(e) => Err(e.clone()),
    }
}

// ------------------------------------------------------------------ checks

/// The run's assistant turn, when the answer had content (a turn without
/// any block is not added to the transcript).
fn assistant_turn(r: &RunResult) -> Option<&Message> {
    // `Role` is not re-exported; the assistant constructor names it.
    let assistant = Message::assistant(String::new()).role;
    let mut turns = r.messages.iter().filter(|m| m.role == assistant);
    let turn = turns.next();
    assert!(turns.next().is_none(), "a one-turn run has one assistant turn");
    turn
}

/// The reasoning blocks of a turn, as serialized.
fn reasoning_blocks(turn: Option<&Message>) -> Vec<Value> {
    let blocks = turn.map(|m| serde_json::to_value(&m.content).expect("blocks serialize")).unwrap_or(json!([]));
    blocks.as_array().into_iter().flatten().filter(|b| b["type"] == "reasoning").cloned().collect()
}

/// The corpus summary (`{text, tool_calls, stop, usage, thinking, error}`) of
/// a driver's end. `stop` is the neutral reason here: a run result carries
/// no provider string (see [`neutral_stop`]).
fn summarize(end: &Result<RunResult, DriveError>) -> Value {
    match end {
        Ok(r) => {
            let turn = assistant_turn(r);
            let calls: Vec<Value> = turn
                .into_iter()
                .flat_map(Message::tool_calls)
                .map(|c| {
                    let generated = c.provider_data.as_ref().and_then(|d| d.pointer("/nexus/generatedId"))
                        == Some(&Value::Bool(true));
                    json!({"id": if generated { Value::Null } else { json!(c.id) }, "name": c.name, "input": c.input})
                })
                .collect();
            let reasoning = reasoning_blocks(turn);
            let thinking: String = reasoning.iter().filter_map(|b| b["text"].as_str()).collect();
            json!({
                "text": turn.map(Message::text).unwrap_or_default(),
                "tool_calls": calls,
                "stop": r.stop_reason,
                "usage": {"input": r.usage.prompt_tokens, "output": r.usage.completion_tokens},
                "thinking": if reasoning.is_empty() { Value::Null } else { json!(thinking) },
                "error": null,
            })
        }
        Err(DriveError::Run(RunError::Provider(p))) => json!({
            "text": "", "tool_calls": [], "stop": null,
            "usage": {"input": null, "output": null}, "thinking": null,
            "error": {"type": p.kind, "message": p.message},
        }),
        Err(e) => json!({"drive_error": e.to_string()}),
    }
}

/// The neutral reason each provider's documented stop string maps to. A
/// run result keeps only the neutral reason, so the recording's raw string
/// is mapped here; Gemini ends function-call turns with `STOP` too.
fn neutral_stop(style: Style, raw: &str, has_calls: bool) -> StopReason {
    match (style, raw) {
        (Style::Anthropic | Style::OpenAiResponses, "end_turn") | (Style::OpenAi, "stop") => StopReason::EndTurn,
        (Style::Gemini, "STOP") if has_calls => StopReason::ToolUse,
        (Style::Gemini, "STOP") => StopReason::EndTurn,
        (Style::Anthropic | Style::OpenAiResponses, "tool_use") | (Style::OpenAi, "tool_calls") => StopReason::ToolUse,
        (Style::Anthropic | Style::OpenAiResponses, "max_tokens")
        | (Style::OpenAi, "length")
        | (Style::Gemini, "MAX_TOKENS") => StopReason::MaxTokens,
        (Style::Anthropic, "refusal") => StopReason::Refusal,
        (Style::Gemini, "SAFETY" | "RECITATION") | (Style::OpenAi | Style::OpenAiResponses, "content_filter") => {
            StopReason::ContentFilter
        }
        _ => panic!("{style:?}: stop reason {raw:?} is not in this test's table; add its documented meaning"),
    }
}

/// The recording's expectation in the driver's terms: the raw stop string
/// becomes the neutral reason.
fn want_summary(rec: &Recording) -> Value {
    let mut want = rec.expected.clone();
    if let Some(raw) = rec.expected["stop"].as_str() {
        let has_calls = rec.expected["tool_calls"].as_array().is_some_and(|c| !c.is_empty());
        want["stop"] = json!(neutral_stop(rec.style, raw, has_calls));
    }
    want
}

/// The same fields the core's corpus tests compare: text, tool_calls, stop,
/// usage, thinking, and for a provider error its type (plus, here, its message).
fn assert_matches(rec: &Recording, got: &Value, want: &Value) {
    let mut keys = vec!["text", "tool_calls", "stop", "usage", "thinking"];
    if rec.is_error() {
        keys.push("error");
    }
    for key in keys {
        assert_eq!(got[key], want[key], "{}: field {key}\n got: {got}\nwant: {want}", rec.rel);
    }
}

/// Signatures as the recording sends them, in order: Anthropic
/// `(signature, redacted data)` per reasoning block, Gemini every
/// `thoughtSignature`. Read from the bytes here, not by the codec.
fn recorded_signatures(rec: &Recording) -> Vec<(String, String)> {
    let payloads: Vec<Value> = if rec.stream {
        let text = String::from_utf8_lossy(&rec.bytes);
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    } else {
        vec![serde_json::from_slice(&rec.bytes).expect("recorded body is JSON")]
    };
    let mut out: Vec<(String, String)> = Vec::new();
    match rec.style {
        Style::Anthropic if rec.stream => {
            let mut by_index: BTreeMap<u64, usize> = BTreeMap::new();
            for p in &payloads {
                let index = p["index"].as_u64().unwrap_or(0);
                let block = &p["content_block"];
                match (p["type"].as_str(), block["type"].as_str()) {
                    (Some("content_block_start"), Some("thinking")) => {
                        by_index.insert(index, out.len());
                        out.push((block["signature"].as_str().unwrap_or("").to_string(), String::new()));
                    }
                    (Some("content_block_start"), Some("redacted_thinking")) => {
                        out.push((String::new(), block["data"].as_str().unwrap_or("").to_string()));
                    }
                    (Some("content_block_delta"), _) if p["delta"]["type"] == "signature_delta" => {
                        let slot = by_index.get(&index).copied().expect("signature_delta for a thinking block");
                        out[slot].0.push_str(p["delta"]["signature"].as_str().unwrap_or(""));
                    }
                    _ => {}
                }
            }
        }
        Style::Anthropic => {
            for b in payloads.iter().flat_map(|p| p["content"].as_array().cloned().unwrap_or_default()) {
                match b["type"].as_str() {
                    Some("thinking") => out.push((b["signature"].as_str().unwrap_or("").into(), String::new())),
                    Some("redacted_thinking") => out.push((String::new(), b["data"].as_str().unwrap_or("").into())),
                    _ => {}
                }
            }
        }
        Style::Gemini => {
            for p in &payloads {
                let parts = p["candidates"][0]["content"]["parts"].as_array().cloned().unwrap_or_default();
                for part in parts {
                    if let Some(sig) = part["thoughtSignature"].as_str().filter(|s| !s.is_empty()) {
                        out.push((sig.to_string(), String::new()));
                    }
                }
            }
        }
        // Each reasoning item's encrypted content, from `output_item.done`
        // in a stream (the `.added` one may be incomplete).
        Style::OpenAiResponses => {
            let items: Vec<Value> = if rec.stream {
                payloads
                    .iter()
                    .filter(|p| p["type"] == "response.output_item.done")
                    .map(|p| p["item"].clone())
                    .collect()
            } else {
                payloads.iter().flat_map(|p| p["output"].as_array().cloned().unwrap_or_default()).collect()
            };
            for item in items.iter().filter(|i| i["type"] == "reasoning") {
                out.push((item["encrypted_content"].as_str().unwrap_or("").to_string(), String::new()));
            }
        }
        Style::OpenAi => {}
    }
    out
}

/// The signatures the run's transcript keeps, in the same shape.
fn kept_signatures(rec: &Recording, turn: Option<&Message>) -> Vec<(String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    match rec.style {
        Style::Anthropic => {
            reasoning_blocks(turn).iter().map(|b| (text(&b["signature"]), text(&b["redacted"]))).collect()
        }
        Style::Gemini => {
            let blocks = turn.map(|m| serde_json::to_value(&m.content).expect("blocks serialize")).unwrap_or(json!([]));
            let all = blocks.as_array().cloned().unwrap_or_default();
            all.iter()
                .filter_map(|b| b.pointer("/provider_data/gemini/thoughtSignature"))
                .map(|s| (text(s), String::new()))
                .collect()
        }
        Style::OpenAiResponses => reasoning_blocks(turn)
            .iter()
            .map(|b| (text(&b["provider_data"]["openai-responses"]["item"]["encrypted_content"]), String::new()))
            .collect(),
        Style::OpenAi => Vec::new(),
    }
}

/// Whether raw arguments are something a tool could be given (the core's
/// rule: empty, or one complete JSON value).
fn arguments_complete(raw: &str) -> bool {
    raw.trim().is_empty() || serde_json::from_str::<Value>(raw).is_ok()
}

/// How the run must end: done without calls; pending on a relay request
/// holding every complete call; with only cut-off calls, their error results
/// are recorded and the one-turn limit ends the run.
fn assert_run_end(rec: &Recording, r: &RunResult) {
    let calls: Vec<_> = assistant_turn(r).into_iter().flat_map(Message::tool_calls).collect();
    let complete: Vec<_> = calls.iter().filter(|c| arguments_complete(&c.arguments)).collect();
    let cut: Vec<_> = calls.iter().filter(|c| !arguments_complete(&c.arguments)).collect();
    if calls.is_empty() {
        assert_eq!(r.status, RunStatus::Done, "{}", rec.rel);
        assert!(r.suspended.is_none() && r.pending.is_empty(), "{}", rec.rel);
        return;
    }
    if !complete.is_empty() {
        assert_eq!(r.status, RunStatus::Pending, "{}: relay calls suspend the run", rec.rel);
        assert_eq!(r.pending.len(), 1, "{}: one relay request for the turn", rec.rel);
        let req = &r.pending[0];
        assert_eq!(req.kind, "tool_call", "{}", rec.rel);
        let data = req.data.as_ref().expect("relay request data");
        let relayed: Vec<(&str, &str, &Value)> = data["calls"]
            .as_array()
            .expect("relay calls")
            .iter()
            .map(|c| (c["id"].as_str().unwrap_or(""), c["name"].as_str().unwrap_or(""), &c["input"]))
            .collect();
        let want: Vec<_> = complete.iter().map(|c| (c.id.as_str(), c.name.as_str(), &c.input)).collect();
        assert_eq!(relayed, want, "{}: the relayed calls", rec.rel);
        assert!(r.suspended.as_ref().is_some_and(|s| s.pending == r.pending), "{}", rec.rel);
    } else {
        assert_eq!((r.status, r.limit.as_deref()), (RunStatus::Incomplete, Some("maxTurns")), "{}", rec.rel);
    }
    for c in cut {
        let record = r.tool_calls.iter().find(|t| t.id == c.id).expect("a result for the cut-off call");
        assert!(record.is_error && record.output.contains("invalid arguments"), "{}: {record:?}", rec.rel);
    }
}

/// The stream's events add up to the result: deltas concatenate to the
/// text, reasoning and raw arguments; each call starts once and finishes
/// once; one usage and one turn end, as in the result.
fn assert_events_add_up(rec: &Recording, r: &RunResult, events: &[StreamEvent]) {
    let turn = assistant_turn(r);
    let calls: Vec<_> = turn.into_iter().flat_map(Message::tool_calls).collect();
    let (mut text, mut reasoning) = (String::new(), String::new());
    let (mut started, mut finished) = (Vec::new(), Vec::new());
    let mut args: BTreeMap<String, String> = BTreeMap::new();
    let (mut usages, mut ends) = (Vec::new(), Vec::new());
    for ev in events {
        match ev {
            StreamEvent::TextDelta { text: t } => text.push_str(t),
            StreamEvent::ReasoningDelta { text: t } => reasoning.push_str(t),
            StreamEvent::ToolCallStarted { id, name } => started.push((id.clone(), name.clone())),
            StreamEvent::ToolCallDelta { id, arguments } => args.entry(id.clone()).or_default().push_str(arguments),
            StreamEvent::ToolCallFinished { call } => finished.push(&**call),
            StreamEvent::Usage { usage } => usages.push(*usage),
            StreamEvent::TurnFinished { turn, stop } => ends.push((*turn, *stop)),
            _ => {}
        }
    }
    let want_reasoning: String = reasoning_blocks(turn).iter().filter_map(|b| b["text"].as_str()).collect();
    assert_eq!(text, turn.map(Message::text).unwrap_or_default(), "{}: text deltas", rec.rel);
    assert_eq!(reasoning, want_reasoning, "{}: reasoning deltas", rec.rel);
    let want_started: Vec<_> = calls.iter().map(|c| (c.id.clone(), c.name.clone())).collect();
    assert_eq!(started, want_started, "{}: calls started", rec.rel);
    assert_eq!(finished, calls, "{}: calls finished", rec.rel);
    for c in &calls {
        assert_eq!(args.get(&c.id).map_or("", String::as_str), c.arguments, "{}: argument deltas of {}", rec.rel, c.id);
    }
    assert_eq!(usages, [r.usage], "{}: usage events", rec.rel);
    assert_eq!(ends, [(1, r.stop_reason.expect("a stop reason"))], "{}: turn end", rec.rel);
}

/// Whether a request asks for what an `.sse` recording is, an SSE stream
/// (`stream: true`, Gemini's `alt=sse`), rather than one body.
fn asks_for_a_stream(style: Style, req: &RecordedRequest) -> bool {
    if style == Style::Gemini {
        req.target.contains(":streamGenerateContent") && req.target.contains("alt=sse")
    } else {
        req.json.as_ref().is_some_and(|j| j["stream"] == json!(true))
    }
}

/// Replays every recording of `style` through both drivers and checks each end.
fn replay_style(style: Style) {
    let recs = recordings(style);
    assert!(recs.iter().any(|r| r.stream) && recs.iter().any(|r| !r.stream), "{style:?}: whole and stream recordings");
    let fake = fake_for(&recs);
    let mut signed = 0;
    for rec in &recs {
        let (blocking, blocking_events) = drive(&fake, rec, Drv::Blocking);
        let (asynk, async_events) = drive(&fake, rec, Drv::Async);
        assert_eq!(comparable(&blocking), comparable(&asynk), "{}: the drivers disagree", rec.rel);
        assert_eq!(blocking_events, async_events, "{}: the drivers' events differ", rec.rel);

        assert_matches(rec, &summarize(&blocking), &want_summary(rec));
        match &blocking {
            Ok(r) => {
                assert!(!rec.is_error(), "{}: expected a provider error, the run ended {:?}", rec.rel, r.status);
                assert_eq!(r.turns, 1, "{}", rec.rel);
                assert_eq!(r.text, assistant_turn(r).map(Message::text).unwrap_or_default(), "{}", rec.rel);
                let turn = assistant_turn(r);
                let signatures = recorded_signatures(rec);
                assert_eq!(kept_signatures(rec, turn), signatures, "{}: signatures", rec.rel);
                signed += usize::from(!signatures.is_empty());
                assert_run_end(rec, r);
                assert_events_add_up(rec, r, &blocking_events);
            }
            Err(DriveError::Run(RunError::Provider(p))) if rec.stream => {
                // An in-stream error event: no status, the event's data kept.
                assert!(rec.is_error(), "{}: unexpected provider error {p}", rec.rel);
                assert_eq!(p.status, None, "{}: an in-stream error has no status", rec.rel);
                let text = String::from_utf8_lossy(&rec.bytes);
                let event = text.lines().filter_map(|l| l.strip_prefix("data: ")).find(|d| d.contains(&p.message));
                assert_eq!(Some(p.body.as_str()), event, "{}: the error event as received", rec.rel);
                assert!(!p.retryable, "{}: {} is final", rec.rel, p.kind);
            }
            Err(DriveError::Run(RunError::Provider(p))) => {
                assert!(rec.is_error(), "{}: unexpected provider error {p}", rec.rel);
                assert_eq!(p.status, Some(rec.status), "{}: status", rec.rel);
                assert_eq!(p.body.as_bytes(), rec.bytes.as_slice(), "{}: the error body as received", rec.rel);
                assert!(!p.retryable, "{}: a {} is final", rec.rel, rec.status);
            }
            Err(e) => panic!("{}: the run failed: {e}", rec.rel),
        }

        // Each of the four runs made exactly one request, in the recording's
        // form, answered with the recorded status.
        assert_eq!(fake.attempts(&rec.model(), 0), 4, "{}: requests", rec.rel);
        let requests = fake.requests_for(&rec.model());
        let statuses: Vec<_> = requests.iter().map(|q| q.status).collect();
        assert_eq!(statuses, [Some(rec.status); 4], "{}: statuses sent", rec.rel);
        let forms: Vec<bool> = requests.iter().map(|q| asks_for_a_stream(rec.style, q)).collect();
        assert_eq!(forms, [rec.stream; 4], "{}: streamed requests (run and stream, per driver)", rec.rel);
    }
    assert!(fake.failures().is_empty(), "{style:?}: {:?}", fake.failures());
    // Chat Completions carries no reasoning; the other two corpora do, signed.
    assert_eq!(signed > 0, style != Style::OpenAi, "{style:?}: recordings with signatures: {signed}");
}

// ------------------------------------------------------------------ tests

#[test]
fn anthropic_recordings_decode_to_their_expectations_in_both_drivers() {
    replay_style(Style::Anthropic);
}

#[test]
fn openai_recordings_decode_to_their_expectations_in_both_drivers() {
    replay_style(Style::OpenAi);
}

#[test]
fn gemini_recordings_decode_to_their_expectations_in_both_drivers() {
    replay_style(Style::Gemini);
}

#[test]
fn openai_responses_recordings_decode_to_their_expectations_in_both_drivers() {
    replay_style(Style::OpenAiResponses);
}

/// Every file in the corpus is a replayed recording, its expectation, the
/// manifest, or one of [`SKIPPED`] (and every skipped file exists).
#[test]
fn every_corpus_file_is_replayed_or_listed_as_skipped() {
    let mut all = Vec::new();
    files_under(&corpus_dir(), "", &mut all);
    let mut handled: BTreeSet<String> = BTreeSet::from(["MANIFEST.md".to_string()]);
    for style in Style::ALL {
        for rec in recordings(style) {
            let stem = rec.rel.rsplit_once('.').map_or(rec.rel.as_str(), |(s, _)| s);
            handled.insert(format!("{stem}.expected.json"));
            // A note documents how the expectation was made (where the wire
            // departs from the SDK's types); it is not a recording.
            let note = format!("{stem}.expected.note.md");
            if corpus_dir().join(&note).is_file() {
                handled.insert(note);
            }
            handled.insert(rec.rel);
        }
    }
    let skipped: BTreeSet<&str> = SKIPPED.iter().copied().collect();
    let unhandled: Vec<&str> =
        all.iter().map(String::as_str).filter(|f| !handled.contains(*f) && !skipped.contains(f)).collect();
    assert!(unhandled.is_empty(), "corpus files neither replayed nor listed as skipped: {unhandled:?}");
    let gone: Vec<&str> = skipped.iter().copied().filter(|f| !all.iter().any(|a| a == f)).collect();
    assert!(gone.is_empty(), "listed as skipped but not in the corpus: {gone:?}");
    assert!(handled.iter().all(|f| all.contains(f)), "every replayed recording has its expectation");
}

/// Where the corpus holds the same answer whole and streamed (the same
/// expectation), a driver ends both runs identically. The other pairs with
/// matching names are different recordings, checked only against their own
/// expectations above.
#[test]
fn whole_and_streamed_recordings_of_one_answer_end_alike() {
    let mut compared = Vec::new();
    for style in Style::ALL {
        let recs = recordings(style);
        let fake = fake_for(&recs);
        for whole in recs.iter().filter(|r| !r.stream) {
            let stem = whole.rel.trim_end_matches(".json");
            let Some(streamed) = recs.iter().find(|r| r.rel == format!("{stem}_stream.sse")) else { continue };
            if whole.expected != streamed.expected {
                continue;
            }
            for drv in [Drv::Blocking, Drv::Async] {
                let without_model = |end: Result<RunResult, DriveError>| {
                    // The model name differs by design: each recording has its own.
                    comparable(&end.map(|r| RunResult { model: String::new(), upstreams: Vec::new(), ..r }))
                };
                let (a, b) = (client(&fake, whole, drv).run(PROMPT), client(&fake, streamed, drv).run(PROMPT));
                // Both are the recorded answer, not merely alike.
                assert_matches(whole, &summarize(&a), &want_summary(whole));
                assert_matches(streamed, &summarize(&b), &want_summary(streamed));
                assert_eq!(without_model(a), without_model(b), "{} and {} through {drv:?}", whole.rel, streamed.rel);
            }
            compared.push(whole.rel.clone());
        }
    }
    assert!(!compared.is_empty(), "the corpus holds at least one answer both whole and streamed");
}
