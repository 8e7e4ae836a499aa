//! `Machine`: `nexus-proto`'s `Run` for hosts that do their own I/O.
//!
//! Inputs and outputs are JSON objects tagged by `type`, named after the
//! machine's `Input` and `Output` variants as the Python package names them
//! (`response_head`, `response_body`, `response_end`, `transport_error`,
//! `tool_reply`, `answer`, `timeout`, `cancel`, `abort`; `send`,
//! `run_tools`, `event`, `suspended`, `wait`, `done`). A body chunk's bytes
//! come as a `Buffer` beside its JSON.

use napi::bindgen_prelude::Buffer;
use napi::{Error, Result};
use napi_derive::napi;
use nexus_proto::{
    Answer, ExchangeId, Input, Message, Output, Run, RunConfig, RunError, Style, Timestamp, ToolDecl, ToolReply,
    TransportErrorKind,
};
use serde::Deserialize;

use crate::client::ToolSpec;
use serde_json::{json, Value};

fn invalid(message: impl std::fmt::Display) -> Error {
    Error::from_reason(message.to_string())
}

/// What a new machine runs: the config (any `RunConfig` key in the state
/// format's camelCase, defaults for the rest), its tools, and a prompt or a
/// whole transcript.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Start {
    config: serde_json::Map<String, Value>,
    #[serde(default)]
    tools: Vec<ToolSpec>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    messages: Vec<Message>,
}

/// One input, as the facade sends it.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum InputJson {
    ResponseHead {
        exchange: u64,
        status: u16,
        #[serde(default)]
        headers: Vec<(String, String)>,
    },
    ResponseBody {
        exchange: u64,
    },
    ResponseEnd {
        exchange: u64,
    },
    TransportError {
        exchange: u64,
        kind: TransportErrorKind,
        #[serde(default)]
        message: String,
    },
    ToolReply {
        #[serde(rename = "callId")]
        call_id: String,
        reply: ToolReply,
    },
    Answer {
        answer: Answer,
    },
    Timeout,
    Cancel,
    Abort {
        error: RunError,
    },
}

/// One run of the loop, driven by the host.
#[napi(js_name = "NativeMachine")]
pub struct Machine {
    run: Run,
}

#[napi]
impl Machine {
    /// A new run from `start` (JSON: `{config, tools, prompt | messages}`).
    #[napi(constructor)]
    pub fn new(start_json: String) -> Result<Machine> {
        let start: Start = serde_json::from_str(&start_json).map_err(|e| invalid(format!("Run options: {e}")))?;
        let config = run_config(start.config)?;
        let tools: Vec<ToolDecl> = start.tools.iter().map(ToolSpec::decl).collect();
        let mut messages = start.messages;
        if let Some(p) = start.prompt {
            messages.push(Message::user(p));
        }
        let run = Run::new(config, tools, messages).map_err(invalid)?;
        Ok(Machine { run })
    }

    /// A run restored from a [`snapshot`](Self::snapshot) (any process, any
    /// nexus: the CLI's state files are the same text).
    #[napi(factory)]
    pub fn restore(state: String) -> Result<Machine> {
        Run::restore(state.as_bytes()).map(|run| Machine { run }).map_err(invalid)
    }

    /// The run's state: JSON text without secrets.
    #[napi]
    pub fn snapshot(&self) -> String {
        String::from_utf8_lossy(&self.run.snapshot()).into_owned()
    }

    /// The API key for the requests it builds (memory only, never in a snapshot).
    #[napi]
    pub fn set_api_key(&mut self, key: String) {
        self.run.set_api_key(key);
    }

    /// Feeds one input (JSON, tagged by `type`; a `response_body`'s bytes
    /// in `chunk`) at `now_ms` (ms since the Unix epoch). A refused input
    /// changes nothing.
    #[napi]
    pub fn handle_input(&mut self, now_ms: f64, input_json: String, chunk: Option<Buffer>) -> Result<()> {
        let parsed: InputJson = serde_json::from_str(&input_json).map_err(|e| invalid(format!("input: {e}")))?;
        let bytes: Vec<u8> = chunk.map(|b| b.to_vec()).unwrap_or_default();
        let input = match parsed {
            InputJson::ResponseHead { exchange, status, headers } => {
                Input::ResponseHead { exchange: ExchangeId(exchange), status, headers }
            }
            InputJson::ResponseBody { exchange } => {
                Input::ResponseBody { exchange: ExchangeId(exchange), chunk: &bytes }
            }
            InputJson::ResponseEnd { exchange } => Input::ResponseEnd { exchange: ExchangeId(exchange) },
            InputJson::TransportError { exchange, kind, message } => {
                Input::TransportError { exchange: ExchangeId(exchange), kind, message }
            }
            InputJson::ToolReply { call_id, reply } => Input::ToolReply { call_id, reply },
            InputJson::Answer { answer } => Input::Answer(answer),
            InputJson::Timeout => Input::Timeout,
            InputJson::Cancel => Input::Cancel,
            InputJson::Abort { error } => Input::Abort { error },
        };
        // Node's clock is a float of milliseconds; the machine counts whole ones.
        let now = Timestamp(if now_ms.is_finite() && now_ms > 0.0 { now_ms as u64 } else { 0 });
        self.run.handle_input(now, input).map_err(invalid)
    }

    /// The next thing the host must do, as JSON.
    #[napi]
    pub fn poll_output(&mut self) -> String {
        output_json(self.run.poll_output()).to_string()
    }

    /// Where the run stands: `{runId, status, text, turns, usage, toolCalls, pending}`.
    #[napi]
    pub fn summary(&self) -> String {
        let status = format!("{:?}", self.run.status()).to_lowercase();
        json!({
            "runId": self.run.id(),
            "status": status,
            "text": self.run.final_text(),
            "turns": self.run.turns(),
            "usage": self.run.usage(),
            "toolCalls": self.run.tool_calls(),
            "pending": self.run.outstanding(),
            "outcome": self.run.outcome(),
        })
        .to_string()
    }
}

/// `RunConfig::new(style, model)` with the given keys laid over it.
fn run_config(given: serde_json::Map<String, Value>) -> Result<RunConfig> {
    let word = |k: &str| given.get(k).and_then(Value::as_str).map(str::to_string);
    let style_word = word("style").ok_or_else(|| invalid("config.style is required"))?;
    let style = Style::parse(&style_word).ok_or_else(|| invalid(format!("unknown style {style_word:?}")))?;
    let model = word("model").ok_or_else(|| invalid("config.model is required"))?;
    let mut base = serde_json::to_value(RunConfig::new(style, model)).map_err(invalid)?;
    if let Value::Object(map) = &mut base {
        for (k, v) in given {
            if k != "style" {
                map.insert(k, v);
            }
        }
    }
    serde_json::from_value(base).map_err(|e| invalid(format!("config: {e}")))
}

fn output_json(output: Output) -> Value {
    match output {
        Output::Send(req) => json!({
            "type": "send",
            "exchange": req.exchange.0,
            "method": req.method,
            "url": req.url,
            "headers": req.headers,
            "body": String::from_utf8_lossy(&req.body),
            "streaming": req.streaming,
        }),
        Output::RunTools(batch) => json!({
            "type": "run_tools",
            "turn": batch.turn,
            "calls": batch.calls.iter().map(|c| json!({
                "callId": c.call_id,
                "name": c.name,
                "input": c.input,
                "arguments": c.arguments,
                "idempotencyKey": c.idempotency_key,
                "answer": c.answer,
                "request": c.request,
            })).collect::<Vec<_>>(),
        }),
        Output::Event(event) => json!({"type": "event", "event": event}),
        Output::Suspended(requests) => json!({"type": "suspended", "requests": requests}),
        Output::Wait { until } => json!({"type": "wait", "until": until.map(|t| t.0)}),
        Output::Done(outcome) => json!({"type": "done", "outcome": outcome}),
    }
}
