//! `nexus.proto.Run`: the sans-IO machine itself, for Python hosts that do
//! their own I/O (as h11 is for HTTP). Inputs and outputs cross as JSON
//! text; response bytes cross as `bytes`, untouched. Local misuse (an input
//! the run cannot take) raises `StateError` and leaves the run as it was.

use nexus_drive::machine_json;
use nexus_proto::{Message, Run, Timestamp, ToolDecl};
use pyo3::prelude::*;

use crate::{errors, tools, StateError};

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
        let config =
            machine_json::run_config(tools::parse("config", config_json)?).map_err(|e| errors::config("config", e))?;
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
        let input = machine_json::input(input_json, chunk.unwrap_or_default()).map_err(state_err)?;
        self.run.handle_input(Timestamp(now_ms), input).map_err(state_err)
    }

    /// The next thing the host must do, as JSON text: `send`, `run_tools`,
    /// `event`, `suspended`, `wait` or `done`.
    fn poll_output(&mut self) -> String {
        machine_json::output(self.run.poll_output()).to_string()
    }

    /// `running`, `pending`, `done`, `incomplete` or `failed`.
    fn status(&self) -> String {
        machine_json::status(&self.run)
    }

    /// A summary as JSON text: `runId`, `status`, `text`, `turns`, `usage`,
    /// `toolCalls`, `pending`, `outcome`.
    fn summary(&self) -> String {
        machine_json::summary(&self.run).to_string()
    }
}
