//! The machine and a tool call's context as JSON, for hosts in other
//! languages (the Python and Node packages): what they send and receive is
//! built here once.
//!
//! Inputs and outputs are JSON objects tagged by `type`: `response_head`,
//! `response_body` (its bytes travel beside the JSON), `response_end`,
//! `transport_error`, `tool_reply`, `answer`, `timeout`, `cancel`, `abort`
//! in; `send`, `run_tools`, `event`, `suspended`, `wait`, `done` out.

use nexus_proto::{Answer, ExchangeId, Input, Output, Run, RunConfig, RunError, Style, ToolReply, TransportErrorKind};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::tool::ToolContext;

/// One input as JSON (`chunk` is not part of it).
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
        #[serde(alias = "callId")]
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

/// The input `json` names, a `response_body` carrying `chunk`.
pub fn input<'a>(json: &str, chunk: &'a [u8]) -> Result<Input<'a>, serde_json::Error> {
    Ok(match serde_json::from_str(json)? {
        InputJson::ResponseHead { exchange, status, headers } => {
            Input::ResponseHead { exchange: ExchangeId(exchange), status, headers }
        }
        InputJson::ResponseBody { exchange } => Input::ResponseBody { exchange: ExchangeId(exchange), chunk },
        InputJson::ResponseEnd { exchange } => Input::ResponseEnd { exchange: ExchangeId(exchange) },
        InputJson::TransportError { exchange, kind, message } => {
            Input::TransportError { exchange: ExchangeId(exchange), kind, message }
        }
        InputJson::ToolReply { call_id, reply } => Input::ToolReply { call_id, reply },
        InputJson::Answer { answer } => Input::Answer(answer),
        InputJson::Timeout => Input::Timeout,
        InputJson::Cancel => Input::Cancel,
        InputJson::Abort { error } => Input::Abort { error },
    })
}

/// `RunConfig::new(style, model)` with the given camelCase keys laid over
/// it (`style` and `model` are required).
pub fn run_config(given: Map<String, Value>) -> Result<RunConfig, String> {
    let text = |k: &str| given.get(k).and_then(Value::as_str).map(str::to_owned);
    let (Some(style), Some(model)) = (text("style"), text("model")) else {
        return Err("\"style\" and \"model\" are required".into());
    };
    let style = Style::parse(&style).ok_or_else(|| format!("unknown style {style:?}"))?;
    let mut merged = match serde_json::to_value(RunConfig::new(style, model)) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    for (k, v) in given {
        if k != "style" {
            merged.insert(k, v);
        }
    }
    serde_json::from_value(Value::Object(merged)).map_err(|e| e.to_string())
}

/// One output as JSON.
pub fn output(out: Output) -> Value {
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

/// `running`, `pending`, `done`, `incomplete` or `failed`.
pub fn status(run: &Run) -> String {
    format!("{:?}", run.status()).to_lowercase()
}

/// Where the run stands: `runId`, `status`, `text`, `turns`, `usage`,
/// `toolCalls`, `pending`, `outcome`.
pub fn summary(run: &Run) -> Value {
    json!({
        "runId": run.id(),
        "status": status(run),
        "text": run.final_text(),
        "turns": run.turns(),
        "usage": run.usage(),
        "toolCalls": run.tool_calls(),
        "pending": run.outstanding(),
        "outcome": run.outcome(),
    })
}

/// What a host's tool is told about its call: `callId`, `name`, `turn`,
/// `idempotencyKey`, `answer`, `request`.
pub fn tool_context(ctx: &ToolContext) -> Value {
    json!({
        "callId": ctx.call_id(),
        "name": ctx.name(),
        "turn": ctx.turn(),
        "idempotencyKey": ctx.idempotency_key(),
        "answer": ctx.answer(),
        "request": ctx.request(),
    })
}
