//! Python callables as tools of the loop, and `wait_for`.
//!
//! The driver calls a tool on one of its threads with the GIL released; the
//! call attaches to the interpreter, hands the facade the arguments and the
//! call's context as JSON text, and reads back a `ToolReply` in its serde
//! form (`{"status": "done" | "pending", "value": …}`). The facade catches
//! the tool's exceptions and turns them into error results; anything that
//! still escapes (a bug in the facade) becomes an error result here too, so
//! a Python failure never unwinds into the driver.

use std::time::Duration;

use nexus_drive::{DynTool, ToolError, ToolOutcome};
use nexus_proto::{Answer, Request, ToolReply};
use pyo3::prelude::*;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::errors;

/// One tool as the facade declares it; `invoke(args_json, ctx_json) -> reply_json`.
#[derive(Deserialize)]
pub struct ToolSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default = "empty_object")]
    pub input_schema: Value,
    /// Give up on a call after this long (it gets an error result; a Python
    /// function already running is not stopped).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

fn empty_object() -> Value {
    json!({"type": "object", "properties": {}})
}

/// A tool that calls `invoke` with the GIL held.
pub fn python_tool(spec: ToolSpec, invoke: Py<PyAny>) -> DynTool {
    let timeout = spec.timeout_ms.map(Duration::from_millis);
    let tool = DynTool::new(&spec.name, spec.description, spec.input_schema, move |args, ctx| {
        let context = nexus_drive::machine_json::tool_context(ctx).to_string();
        let reply = Python::attach(|py| -> PyResult<String> {
            invoke.call1(py, (args.to_string(), context))?.extract::<String>(py)
        });
        match reply {
            Ok(text) => match serde_json::from_str::<ToolReply>(&text) {
                Ok(ToolReply::Done(result)) => Ok(ToolOutcome::Result(result)),
                Ok(ToolReply::Pending(request)) => Ok(ToolOutcome::Pending(request)),
                Err(e) => Err(ToolError::msg(format!("the tool's reply is not a tool reply: {e}"))),
            },
            Err(e) => Err(ToolError::msg(Python::attach(|py| describe(py, &e)))),
        }
    });
    match timeout {
        Some(d) => tool.timeout(d),
        None => tool,
    }
}

/// `wait_for(request_json) -> answer_json`, with the GIL held. An answerer
/// that fails answers `ok: false` (reason `cancelled`, its error in
/// `data.error`) rather than leaving the run waiting for an answer that
/// will never come.
pub fn wait_for(answerer: Py<PyAny>) -> impl Fn(Request) -> Answer + Send + Sync + 'static {
    move |request: Request| {
        let id = request.id.clone();
        let text = nexus_drive::machine_json::request(&request).to_string();
        let answer = Python::attach(|py| -> PyResult<String> { answerer.call1(py, (text,))?.extract::<String>(py) });
        let failed = |id: String, message: String| {
            let mut data = serde_json::Map::new();
            data.insert("error".into(), Value::String(message));
            Answer { id, ok: false, data: Some(data), reason: Some("cancelled".into()) }
        };
        match answer.map_err(|e| Python::attach(|py| describe(py, &e))) {
            Ok(text) => serde_json::from_str::<Answer>(&text)
                .unwrap_or_else(|e| failed(id, format!("the answerer's reply is not an answer: {e}"))),
            Err(message) => failed(id, message),
        }
    }
}

/// `TypeName: message`, as Python prints an exception's last line.
fn describe(py: Python<'_>, e: &PyErr) -> String {
    let name = e.get_type(py).name().map(|n| n.to_string()).unwrap_or_else(|_| "Exception".into());
    match e.value(py).str() {
        Ok(s) if !s.to_string().is_empty() => format!("{name}: {s}"),
        _ => name,
    }
}

/// The facade's JSON, parsed, or a config error naming what it was.
pub fn parse<T: for<'de> Deserialize<'de>>(what: &str, text: &str) -> PyResult<T> {
    serde_json::from_str(text).map_err(|e| errors::config(what, e))
}
