//! A provider SSE stream → OpenAI `chat.completion.chunk` SSE.
//!
//! The provider's own assembler reads the stream (the same one the loop
//! uses), and each [`StreamEvent`] it yields becomes one chunk: text as
//! `delta.content`, reasoning as `delta.reasoning_content`, a tool call as a
//! `delta.tool_calls` entry whose first piece carries the index, id, type and
//! name, and whose later pieces carry the index and argument text. The final
//! chunks come from the assembled turn, so they say exactly what a whole
//! response would: the finish reason, then usage when it was asked for.

use serde::Serialize;

use super::response::{call_ids, provider_id, remote_error_to_openai, resolved, FunctionOut, UsageOut};
use super::{finish_reason, CompletionMeta, TranslateError};
use crate::event::StreamEvent;
use crate::provider::{Assembler, CallIds, Style};
use crate::sse::SseEvent;

/// Turns one provider stream into OpenAI chunk lines. Feed every SSE event
/// with [`push`](Self::push), then call [`finish`](Self::finish) when the
/// upstream body ends; write each returned string to the client as is.
///
/// A provider error (an error event, bytes that make no sense, a stream cut
/// short) becomes one `data: {"error": …}` line, which the OpenAI SDKs raise
/// as an API error, and nothing follows it: no `[DONE]`, so no client
/// mistakes the stream for complete. For an OpenAI upstream the events are
/// passed through unchanged.
#[derive(Debug, Clone)]
pub struct StreamTranslator {
    style: Style,
    meta: CompletionMeta,
    include_usage: bool,
    assembler: Assembler,
    /// Made at the first event, once the completion id is known.
    ids: Option<CallIds>,
    /// Tool calls in the order they started: (id, argument bytes sent).
    calls: Vec<(String, usize)>,
    role_sent: bool,
    /// The upstream sent `[DONE]` (OpenAI pass-through).
    done_seen: bool,
    finished: bool,
    failed: Option<TranslateError>,
    scratch: Vec<StreamEvent>,
    /// Every chunk's bytes up to its delta (`data: {"id":…,"delta":`), the
    /// same for every chunk of the stream and most of each: written from
    /// `meta` whenever it is set.
    head: Vec<u8>,
}

impl StreamTranslator {
    /// A translator reporting `model`; the completion id is taken from the
    /// provider's stream and `created` is 0 (see [`with_meta`](Self::with_meta)).
    /// `include_usage` is the request's `stream_options.include_usage`.
    pub fn new(style: Style, model: &str, include_usage: bool) -> StreamTranslator {
        StreamTranslator::with_meta(style, CompletionMeta::new(model), include_usage)
    }

    /// A translator with the completion's id, model and creation time given.
    pub fn with_meta(style: Style, meta: CompletionMeta, include_usage: bool) -> StreamTranslator {
        StreamTranslator {
            style,
            head: chunk_head(&meta),
            meta,
            include_usage,
            assembler: style.assembler(),
            ids: None,
            calls: Vec::new(),
            role_sent: false,
            done_seen: false,
            finished: false,
            failed: None,
            scratch: Vec::new(),
        }
    }

    /// The error the stream failed with, once it has.
    pub fn error(&self) -> Option<&TranslateError> {
        self.failed.as_ref()
    }

    /// The completion id the chunks carry (empty before the first event when derived).
    pub fn completion_id(&self) -> &str {
        &self.meta.id
    }

    /// Feeds one upstream SSE event; returns the chunk lines it yields.
    pub fn push(&mut self, event: &SseEvent) -> Vec<String> {
        let mut out = Vec::new();
        if self.finished || self.failed.is_some() {
            return out;
        }
        if self.style == Style::OpenAi {
            if self.done_seen {
                return out;
            }
            self.done_seen = event.data.trim() == "[DONE]";
            out.push(sse_line(event.event.as_deref(), &event.data));
            return out;
        }
        if self.ids.is_none() {
            if self.meta.id.is_empty() {
                // The first event names the response (Anthropic message_start,
                // every Gemini chunk); the fingerprint is the fallback.
                let body = event.data.as_bytes();
                self.meta = match provider_id(body) {
                    Some(token) => CompletionMeta { id: format!("chatcmpl-{token}"), ..self.meta.clone() },
                    None => resolved(&self.meta, body),
                };
                self.head = chunk_head(&self.meta);
            }
            self.ids = Some(call_ids(&self.meta));
        }
        let Some(ids) = self.ids.as_mut() else {
            return out;
        };
        let result = self.assembler.push(event, ids, &mut self.scratch);
        let events = std::mem::take(&mut self.scratch);
        for ev in &events {
            self.translate(ev, &mut out);
        }
        self.scratch = events;
        self.scratch.clear();
        if let Err(e) = result {
            self.fail(remote_error_to_openai(&e), &mut out);
        }
        out
    }

    /// The upstream body ended: the final chunks (a `{}` argument piece for
    /// calls that had none, the finish reason, usage when asked for and
    /// reported) and `data: [DONE]`; or the error line when the stream failed
    /// or ended before the provider's end marker. Later calls return nothing.
    pub fn finish(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        if self.finished || self.failed.is_some() {
            return out;
        }
        self.finished = true;
        if self.style == Style::OpenAi {
            if !self.done_seen {
                self.fail(truncated("the upstream stream ended before `data: [DONE]`"), &mut out);
            }
            return out;
        }
        let turn = match self.assembler.finish() {
            Ok(turn) => turn,
            Err(e) => {
                self.fail(remote_error_to_openai(&e), &mut out);
                return out;
            }
        };
        self.role(&mut out);
        for (index, (_, sent)) in self.calls.iter().enumerate() {
            if *sent == 0 {
                out.push(self.chunk(ArgumentsDelta::of(index, "{}"), None));
            }
        }
        let has_calls = turn.tool_calls().next().is_some() || !self.calls.is_empty();
        out.push(self.chunk(Empty {}, Some(finish_reason(turn.stop.reason, has_calls))));
        if self.include_usage && turn.usage_reported {
            let usage = UsageChunk {
                id: &self.meta.id,
                object: "chat.completion.chunk",
                created: self.meta.created,
                model: &self.meta.model,
                choices: [],
                usage: UsageOut::of(&turn),
            };
            out.push(super::surface::data_event(&usage));
        }
        out.push("data: [DONE]\n\n".to_string());
        out
    }

    /// The upstream connection failed mid-stream (a read error, a timeout):
    /// the error line to end the client's stream with. Nothing follows it.
    pub fn abort(&mut self, error: TranslateError) -> Vec<String> {
        let mut out = Vec::new();
        if !self.finished && self.failed.is_none() {
            self.finished = true;
            self.fail(error, &mut out);
        }
        out
    }

    fn translate(&mut self, event: &StreamEvent, out: &mut Vec<String>) {
        match event {
            StreamEvent::TextDelta { text } if !text.is_empty() => {
                self.role(out);
                out.push(self.chunk(ContentDelta { content: text }, None));
            }
            StreamEvent::ReasoningDelta { text } if !text.is_empty() => {
                self.role(out);
                out.push(self.chunk(ReasoningDelta { reasoning_content: text }, None));
            }
            StreamEvent::ToolCallStarted { id, name } => {
                self.role(out);
                let index = self.calls.len();
                self.calls.push((id.clone(), 0));
                let delta = ToolCallsDelta {
                    tool_calls: [CallStart {
                        index,
                        id,
                        kind: "function",
                        function: FunctionOut { name, arguments: "" },
                    }],
                };
                out.push(self.chunk(delta, None));
            }
            StreamEvent::ToolCallDelta { id, arguments } if !arguments.is_empty() => {
                // Deltas name their call by id; the assemblers always start a call first.
                let Some(index) = self.calls.iter().position(|(c, _)| c == id) else {
                    return;
                };
                if let Some((_, sent)) = self.calls.get_mut(index) {
                    *sent += arguments.len();
                }
                out.push(self.chunk(ArgumentsDelta::of(index, arguments), None));
            }
            _ => {}
        }
    }

    /// The first chunk of a completion names the role.
    fn role(&mut self, out: &mut Vec<String>) {
        if !self.role_sent {
            self.role_sent = true;
            out.push(self.chunk(RoleDelta { role: "assistant", content: "" }, None));
        }
    }

    /// One `chat.completion.chunk` line: the stream's [`chunk_head`], the
    /// delta written from borrowed fields, the rest of the choice. The same
    /// bytes as the whole chunk serialized with its keys in OpenAI's order
    /// (`Chunk`, which the tests hold it to).
    fn chunk<D: Serialize>(&self, delta: D, finish: Option<&'static str>) -> String {
        let mut line = Vec::with_capacity(self.head.len() + 160);
        line.extend_from_slice(&self.head);
        // Writing a struct of strings and numbers into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut line, &delta);
        line.extend_from_slice(b",\"logprobs\":null,\"finish_reason\":");
        let _ = serde_json::to_writer(&mut line, &finish);
        line.extend_from_slice(b"}]}\n\n");
        String::from_utf8(line).unwrap_or_default()
    }

    fn fail(&mut self, error: TranslateError, out: &mut Vec<String>) {
        out.push(format!("data: {}\n\n", error.to_json()));
        self.failed = Some(error);
    }
}

/// `data: {"id":…,"object":"chat.completion.chunk","created":…,"model":…,"choices":[{"index":0,"delta":`
/// for `meta`.
fn chunk_head(meta: &CompletionMeta) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + meta.id.len() + meta.model.len());
    out.extend_from_slice(b"data: {\"id\":");
    // Strings and a number into a `Vec` cannot fail.
    let _ = serde_json::to_writer(&mut out, &meta.id);
    out.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
    let _ = serde_json::to_writer(&mut out, &meta.created);
    out.extend_from_slice(b",\"model\":");
    let _ = serde_json::to_writer(&mut out, &meta.model);
    out.extend_from_slice(b",\"choices\":[{\"index\":0,\"delta\":");
    out
}

/// The last chunk of a stream that asked for usage: no choices, the counts.
#[derive(Serialize)]
struct UsageChunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [(); 0],
    usage: UsageOut,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct RoleDelta {
    role: &'static str,
    content: &'static str,
}

#[derive(Serialize)]
struct ContentDelta<'a> {
    content: &'a str,
}

#[derive(Serialize)]
struct ReasoningDelta<'a> {
    reasoning_content: &'a str,
}

#[derive(Serialize)]
struct ToolCallsDelta<C> {
    tool_calls: [C; 1],
}

#[derive(Serialize)]
struct CallStart<'a> {
    index: usize,
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionOut<'a>,
}

#[derive(Serialize)]
struct CallArguments<'a> {
    index: usize,
    function: Arguments<'a>,
}

#[derive(Serialize)]
struct Arguments<'a> {
    arguments: &'a str,
}

/// A later piece of call `index`: its argument text only.
struct ArgumentsDelta;

impl ArgumentsDelta {
    fn of(index: usize, arguments: &str) -> ToolCallsDelta<CallArguments<'_>> {
        ToolCallsDelta { tool_calls: [CallArguments { index, function: Arguments { arguments } }] }
    }
}

fn truncated(message: &str) -> TranslateError {
    TranslateError {
        status: 502,
        message: message.to_string(),
        kind: "server_error".to_string(),
        param: None,
        code: Some("upstream_truncated".to_string()),
    }
}

/// One SSE event as text: the `event:` line when there is one, each data
/// line as its own `data:` line (a payload may hold newlines), a blank line.
fn sse_line(event: Option<&str>, data: &str) -> String {
    let mut s = String::with_capacity(data.len() + 16);
    if let Some(event) = event {
        s.push_str("event: ");
        s.push_str(event);
        s.push('\n');
    }
    for line in data.split('\n') {
        s.push_str("data: ");
        s.push_str(line);
        s.push('\n');
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> SseEvent {
        SseEvent { event: None, data: data.to_string(), id: None }
    }

    #[test]
    fn openai_events_pass_through() {
        let mut t = StreamTranslator::new(Style::OpenAi, "m", false);
        assert_eq!(t.push(&ev("{\"a\":1}")), vec!["data: {\"a\":1}\n\n".to_string()]);
        assert_eq!(t.push(&ev("[DONE]")), vec!["data: [DONE]\n\n".to_string()]);
        assert!(t.push(&ev("{}")).is_empty());
        assert!(t.finish().is_empty());
    }

    #[test]
    fn an_openai_stream_without_done_ends_in_an_error() {
        let mut t = StreamTranslator::new(Style::OpenAi, "m", false);
        t.push(&ev("{}"));
        let out = t.finish();
        assert_eq!(out.len(), 1);
        assert!(out[0].starts_with("data: {\"error\""), "{out:?}");
        assert_eq!(t.error().map(|e| e.status), Some(502));
    }

    #[test]
    fn an_abort_ends_the_stream_with_its_error() {
        let mut t = StreamTranslator::new(Style::Anthropic, "m", false);
        let e = TranslateError::invalid("x", "gone");
        let out = t.abort(e.clone());
        assert_eq!(out, vec![format!("data: {}\n\n", e.to_json())]);
        assert!(t.abort(e).is_empty());
        assert!(t.finish().is_empty());
        assert!(t.push(&ev("{}")).is_empty());
    }

    /// A chunk is written from borrowed fields, keys in OpenAI's order.
    #[test]
    fn chunks_are_written_in_openais_key_order() {
        let mut t = StreamTranslator::with_meta(
            Style::Anthropic,
            CompletionMeta { id: "chatcmpl-1".into(), model: "m".into(), created: 7 },
            true,
        );
        let mut out = Vec::new();
        t.translate(&StreamEvent::ToolCallStarted { id: "call_1".into(), name: "add".into() }, &mut out);
        t.translate(&StreamEvent::ToolCallDelta { id: "call_1".into(), arguments: "{\"a\":1}".into() }, &mut out);
        let head = r#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":"#;
        assert_eq!(
            out,
            vec![
                format!(r#"{head}{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}]}}"#)
                    + "\n\n",
                format!(
                    r#"{head}{{"tool_calls":[{{"index":0,"id":"call_1","type":"function","function":{{"name":"add","arguments":""}}}}]}},"logprobs":null,"finish_reason":null}}]}}"#
                ) + "\n\n",
                format!(
                    r#"{head}{{"tool_calls":[{{"index":0,"function":{{"arguments":"{{\"a\":1}}"}}}}]}},"logprobs":null,"finish_reason":null}}]}}"#
                ) + "\n\n",
            ]
        );
    }

    /// A chunk whole, keys in OpenAI's order: what [`StreamTranslator::chunk`] writes.
    #[derive(Serialize)]
    struct Chunk<'a, D> {
        id: &'a str,
        object: &'static str,
        created: u64,
        model: &'a str,
        choices: [ChunkChoice<D>; 1],
    }

    #[derive(Serialize)]
    struct ChunkChoice<D> {
        index: u32,
        delta: D,
        logprobs: (),
        finish_reason: Option<&'static str>,
    }

    /// The head written once and the delta after it are the chunk
    /// serialized whole, for ids and models that need escaping too, with
    /// the meta given and with the id the first event names.
    #[test]
    fn a_chunk_is_its_whole_serialization() {
        let metas = [
            CompletionMeta { id: "chatcmpl-1".into(), model: "m".into(), created: 7 },
            CompletionMeta { id: "chatcmpl-\"q\"\\é".into(), model: "mödel\n\u{1}".into(), created: u64::MAX },
            CompletionMeta { id: String::new(), model: String::new(), created: 0 },
        ];
        for meta in metas {
            let mut t = StreamTranslator::with_meta(Style::Anthropic, meta, false);
            for first_event in [false, true] {
                if first_event {
                    t.push(&ev(r#"{"type":"message_start","message":{"id":"msg_1","model":"m"}}"#));
                }
                let meta = t.meta.clone();
                for finish in [None, Some("stop"), Some("tool_calls")] {
                    let content = ContentDelta { content: "a \"b\"\n" };
                    assert_eq!(t.chunk(&content, finish), whole(&meta, &content, finish));
                    assert_eq!(t.chunk(Empty {}, finish), whole(&meta, Empty {}, finish));
                }
            }
        }
        // The id the first event named is in the chunks after it.
        let mut t = StreamTranslator::new(Style::Anthropic, "m", false);
        t.push(&ev(r#"{"type":"message_start","message":{"id":"msg_1","model":"m"}}"#));
        assert!(t.chunk(Empty {}, None).starts_with(r#"data: {"id":"chatcmpl-msg_1","#), "{}", t.chunk(Empty {}, None));
    }

    fn whole<D: Serialize>(meta: &CompletionMeta, delta: D, finish: Option<&'static str>) -> String {
        let chunk = Chunk {
            id: &meta.id,
            object: "chat.completion.chunk",
            created: meta.created,
            model: &meta.model,
            choices: [ChunkChoice { index: 0, delta, logprobs: (), finish_reason: finish }],
        };
        super::super::surface::data_event(&chunk)
    }

    #[test]
    fn multi_line_data_keeps_its_lines() {
        assert_eq!(sse_line(Some("error"), "a\nb"), "event: error\ndata: a\ndata: b\n\n");
    }
}
