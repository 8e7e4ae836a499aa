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
use nexus_drive::machine_json;
use nexus_proto::{Message, Run, Timestamp, ToolDecl};
use serde::Deserialize;
use serde_json::Value;

use crate::client::ToolSpec;

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
        let config = machine_json::run_config(start.config).map_err(|e| invalid(format!("config: {e}")))?;
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
        let bytes: Vec<u8> = chunk.map(|b| b.to_vec()).unwrap_or_default();
        let input = machine_json::input(&input_json, &bytes).map_err(|e| invalid(format!("input: {e}")))?;
        // Node's clock is a float of milliseconds; the machine counts whole ones.
        let now = Timestamp(if now_ms.is_finite() && now_ms > 0.0 { now_ms as u64 } else { 0 });
        self.run.handle_input(now, input).map_err(invalid)
    }

    /// The next thing the host must do, as JSON.
    #[napi]
    pub fn poll_output(&mut self) -> String {
        machine_json::output(self.run.poll_output()).to_string()
    }

    /// Where the run stands: `{runId, status, text, turns, usage, toolCalls, pending, outcome}`.
    #[napi]
    pub fn summary(&self) -> String {
        machine_json::summary(&self.run).to_string()
    }
}
