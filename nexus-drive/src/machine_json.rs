//! The machine and a tool call's context as JSON, for hosts in other
//! languages (the Python and Node packages): what they send and receive is
//! built here once.
//!
//! Inputs and outputs are JSON objects tagged by `type`: `response_head`,
//! `response_body` (its bytes travel beside the JSON), `response_end`,
//! `transport_error`, `tool_reply`, `answer`, `timeout`, `cancel`, `abort`
//! in; `send`, `run_tools`, `event`, `suspended`, `wait`, `done` out.
//!
//! For the drivers' facades: a sub-agent as the packages declare it
//! ([`AgentOptions`]), a run's pending requests with the agent path that
//! owns each ([`pending`]), and a request handed to a host's answerer
//! ([`request`]).

use nexus_proto::{
    agent::PATH_SEPARATOR, Answer, ExchangeId, Input, Output, OutputSpec, Request, Run, RunConfig, RunError, Style,
    ToolReply, TransportErrorKind,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::agent::AgentTool;
use crate::result::RunResult;
use crate::tool::{ToolContext, Toolbox};

/// A sub-agent as a package declares it (SPEC §17, §21): `name`,
/// `description`, and optionally `system`, `model` (the parent's when
/// absent; the child speaks the parent's wire format), `maxTurns`, `output`
/// (an [`OutputSpec`] for the child's typed result), its `tools` (`T`: the
/// package's own reference to a tool it serves) and `agents` of its own.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentOptions<T> {
    /// The tool name the parent's model sees.
    pub name: String,
    /// What it does, for the parent's model.
    #[serde(default)]
    pub description: String,
    /// The child's system prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// The child's model on the parent's upstream.
    #[serde(default)]
    pub model: Option<String>,
    /// The child's cap on model calls.
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// The child's typed output.
    #[serde(default)]
    pub output: Option<OutputSpec>,
    /// The child's tools, as the package refers to them.
    #[serde(default = "Vec::new")]
    pub tools: Vec<T>,
    /// Agents the child may delegate to in turn.
    #[serde(default = "Vec::new")]
    pub agents: Vec<AgentOptions<T>>,
}

impl<T> AgentOptions<T> {
    /// The agent tool of a run on `style` and `model`; `toolbox` turns each
    /// agent's tool references into its toolbox (called once per agent).
    pub fn agent_tool<E>(
        self,
        style: Style,
        model: &str,
        toolbox: &mut dyn FnMut(Vec<T>) -> Result<Toolbox, E>,
    ) -> Result<AgentTool, E> {
        let child_model = self.model.unwrap_or_else(|| model.to_string());
        let mut tool =
            AgentTool::new(&self.name, self.description, style, child_model.clone()).toolbox(toolbox(self.tools)?);
        if let Some(system) = self.system {
            tool = tool.system(system);
        }
        if let Some(n) = self.max_turns {
            tool = tool.max_turns(n);
        }
        if let Some(spec) = self.output {
            tool = tool.output(spec);
        }
        for child in self.agents {
            tool = tool.agent(child.agent_tool(style, &child_model, toolbox)?);
        }
        Ok(tool)
    }
}

/// The pending requests of `result`, each a sub-agent's with `agent`: the
/// agent path of the run that asks (the id to answer is `id` as is).
pub fn pending(result: &RunResult) -> Value {
    let run = result.suspended.as_ref().and_then(|s| Run::restore(&s.state).ok());
    let items = result.pending.iter().map(|r| {
        let mut v = serde_json::to_value(r).unwrap_or_default();
        let owner = run.as_ref().and_then(|run| run.request_owner(&r.id)).filter(|o| !o.is_empty());
        if let (Some(owner), Some(obj)) = (owner, v.as_object_mut()) {
            obj.insert("agent".into(), owner.into());
        }
        v
    });
    Value::Array(items.collect())
}

/// A request as a host's answerer gets it, with `agent` when a sub-agent
/// asks: the delegating call ids of its qualified id. The core's own
/// request ids (`pnd_` and a provider's call id) never hold the separator,
/// so the last one ends the path.
pub fn request(request: &Request) -> Value {
    let mut v = serde_json::to_value(request).unwrap_or_default();
    if let (Some((owner, _)), Some(obj)) = (request.id.rsplit_once(PATH_SEPARATOR), v.as_object_mut()) {
        obj.insert("agent".into(), owner.into());
    }
    v
}

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
