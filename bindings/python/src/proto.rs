//! `nexus.proto.Run`: the sans-IO machine itself, for Python hosts that do
//! their own I/O (as h11 is for HTTP). Inputs and outputs cross as JSON
//! text; response bytes cross as `bytes`, untouched. Local misuse (an input
//! the run cannot take) raises `StateError` and leaves the run as it was.

use nexus_proto::{
    Answer, ExchangeId, Input, Message, Output, Run, RunConfig, RunError, Status, Style, Timestamp, ToolDecl,
    ToolReply, TransportErrorKind,
};
use pyo3::prelude::*;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::{errors, tools, StateError};

/// One input, as the facade sends it (`chunk` travels beside it as bytes).
#[derive(Deserialize)]
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

/// The machine for one run.
#[pyclass(module = "nexus._native")]
pub struct ProtoRun {
    run: Run,
}

fn state_err(e: impl std::fmt::Display) -> PyErr {
    StateError::new_err(e.to_string())
}

#[pymethods]
impl ProtoRun {
    /// A new run: `config` holds a `RunConfig`'s camelCase keys (`style`
    /// and `model` at least; the rest default as in Rust), `tools` a list
    /// of `{name, description, input_schema}`, `messages` the transcript
    /// with the new user turn last.
    #[new]
    fn new(config_json: &str, tools_json: &str, messages_json: &str) -> PyResult<ProtoRun> {
        let config = run_config(tools::parse("config", config_json)?)?;
        let decls: Vec<ToolDecl> = tools::parse("tools", tools_json)?;
        let messages: Vec<Message> = tools::parse("messages", messages_json)?;
        Ok(ProtoRun { run: Run::new(config, decls, messages).map_err(state_err)? })
    }

    /// A run from [`snapshot`](Self::snapshot) text.
    #[staticmethod]
    fn restore(state: &str) -> PyResult<ProtoRun> {
        Ok(ProtoRun { run: Run::restore(state.as_bytes()).map_err(state_err)? })
    }

    /// The state as JSON text (no secrets).
    fn snapshot(&self) -> String {
        String::from_utf8_lossy(&self.run.snapshot()).into_owned()
    }

    /// The API key, held in memory only (never in a snapshot).
    fn set_api_key(&mut self, key: &str) {
        self.run.set_api_key(key);
    }

    /// Feeds one input at `now_ms` (milliseconds on any monotonic clock).
    #[pyo3(signature = (now_ms, input_json, chunk=None))]
    fn handle_input(&mut self, now_ms: u64, input_json: &str, chunk: Option<&[u8]>) -> PyResult<()> {
        let input: InputJson = serde_json::from_str(input_json).map_err(state_err)?;
        let input = match input {
            InputJson::ResponseHead { exchange, status, headers } => {
                Input::ResponseHead { exchange: ExchangeId(exchange), status, headers }
            }
            InputJson::ResponseBody { exchange } => {
                Input::ResponseBody { exchange: ExchangeId(exchange), chunk: chunk.unwrap_or_default() }
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
        self.run.handle_input(Timestamp(now_ms), input).map_err(state_err)
    }

    /// The next thing the host must do, as JSON text: `send`, `run_tools`,
    /// `event`, `suspended`, `wait` or `done`.
    fn poll_output(&mut self) -> String {
        output_json(self.run.poll_output()).to_string()
    }

    /// `running`, `pending`, `done`, `incomplete` or `failed`.
    fn status(&self) -> &'static str {
        match self.run.status() {
            Status::Running => "running",
            Status::Pending => "pending",
            Status::Done => "done",
            Status::Incomplete => "incomplete",
            Status::Failed => "failed",
        }
    }

    /// A summary as JSON text: `runId`, `text`, `toolCalls`, `turns`, `usage`, `pending`.
    fn summary(&self) -> String {
        json!({
            "runId": self.run.id(),
            "text": self.run.final_text(),
            "toolCalls": self.run.tool_calls(),
            "turns": self.run.turns(),
            "usage": self.run.usage(),
            "pending": self.run.outstanding(),
        })
        .to_string()
    }
}

/// The given keys over the defaults of `RunConfig::new(style, model)`.
fn run_config(given: serde_json::Map<String, Value>) -> PyResult<RunConfig> {
    let text = |k: &str| given.get(k).and_then(Value::as_str).map(str::to_owned);
    let (Some(style), Some(model)) = (text("style"), text("model")) else {
        return Err(errors::config("config", "\"style\" and \"model\" are required"));
    };
    let style = Style::parse(&style).ok_or_else(|| errors::config("config", format!("unknown style {style:?}")))?;
    let mut merged = match serde_json::to_value(RunConfig::new(style, model)) {
        Ok(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    for (k, v) in given {
        if k != "style" {
            merged.insert(k, v);
        }
    }
    serde_json::from_value(Value::Object(merged)).map_err(|e| errors::config("config", e))
}

fn output_json(out: Output) -> Value {
    match out {
        Output::Send(req) => json!({
            "type": "send",
            "exchange": req.exchange.0,
            "method": req.method,
            "url": req.url,
            "headers": req.headers,
            // The body is JSON the machine wrote: UTF-8 by construction.
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
