//! A scripted provider and a virtual clock driving a [`Run`] in memory, in
//! the spirit of quinn's test `Pair`: the "provider" answers each request
//! with real wire bytes (built here by hand, independently of the codecs),
//! chosen by counting the model turns already in the request's transcript.
#![allow(dead_code)]

use nexus_proto::{
    Answer, ExchangeId, HttpRequest, Input, Outcome, Output, Request, Run, RunConfig, StreamEvent, Style, Timestamp,
    ToolBatch, ToolDecl, ToolReply,
};
use serde_json::{json, Value};

/// The text the host was shown: every `TextDelta` of `events`, joined.
pub fn shown_text<'a>(events: impl IntoIterator<Item = &'a StreamEvent>) -> String {
    events
        .into_iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// One scripted model turn.
#[derive(Clone, Debug, Default)]
pub struct Turn {
    pub text: Option<String>,
    /// (id, name, raw arguments)
    pub calls: Vec<(String, String, String)>,
}

impl Turn {
    pub fn text(t: &str) -> Turn {
        Turn { text: Some(t.into()), calls: vec![] }
    }
    pub fn calls(calls: &[(&str, &str, &str)]) -> Turn {
        Turn {
            text: None,
            calls: calls.iter().map(|(i, n, a)| (i.to_string(), n.to_string(), a.to_string())).collect(),
        }
    }
}

/// Counts model turns already present in a request body.
pub fn model_turns(style: Style, body: &Value) -> usize {
    if style == Style::OpenAiResponses {
        // A model turn is a run of output items between inputs.
        let is_output = |item: &Value| match item["type"].as_str() {
            Some("reasoning" | "function_call") => true,
            Some("message") | None => item["role"] == "assistant",
            _ => false,
        };
        let items = body["input"].as_array().cloned().unwrap_or_default();
        return items
            .iter()
            .enumerate()
            .filter(|(i, it)| is_output(it) && (*i == 0 || !is_output(&items[i - 1])))
            .count();
    }
    let (key, role) = match style {
        Style::Gemini => ("contents", "model"),
        _ => ("messages", "assistant"),
    };
    body[key].as_array().map(|a| a.iter().filter(|m| m["role"] == role).count()).unwrap_or(0)
}

/// The wire body of a scripted turn (whole JSON or an SSE stream). Turn `n`
/// (0-based) numbers the Responses item ids, and every Responses turn starts
/// with a reasoning item whose encrypted content names it.
pub fn wire_n(style: Style, turn: &Turn, stream: bool, n: usize) -> Vec<u8> {
    if style == Style::OpenAiResponses {
        return responses_wire(turn, stream, n);
    }
    wire(style, turn, stream)
}

/// The encrypted content of scripted Responses turn `n`'s reasoning item.
pub fn encrypted(n: usize) -> String {
    format!("gAAAA-turn-{n}")
}

fn responses_wire(turn: &Turn, stream: bool, n: usize) -> Vec<u8> {
    let reasoning = json!({"id": format!("rs_{n}"), "type": "reasoning", "encrypted_content": encrypted(n),
                           "summary": [{"type": "summary_text", "text": format!("thinking {n}")}]});
    let message = |t: &str| {
        json!({"id": format!("msg_{n}"), "type": "message", "status": "completed", "role": "assistant",
                                   "content": [{"type": "output_text", "text": t, "annotations": [], "logprobs": []}]})
    };
    let call = |i: usize, id: &str, name: &str, args: &str| {
        json!({"id": format!("fc_{n}_{i}"), "type": "function_call",
        "status": "completed", "call_id": id, "name": name, "arguments": args})
    };
    let mut output = vec![reasoning.clone()];
    if let Some(t) = &turn.text {
        output.push(message(t));
    }
    for (i, (id, name, args)) in turn.calls.iter().enumerate() {
        output.push(call(i, id, name, args));
    }
    let usage = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 15});
    let response = |status: &str, output: Vec<Value>, usage: Value| {
        json!({"id": format!("resp_{n}"), "object": "response",
        "created_at": 1, "status": status, "error": null, "incomplete_details": null, "model": "m",
        "output": output, "usage": usage})
    };
    if !stream {
        return serde_json::to_vec(&response("completed", output, usage)).unwrap();
    }
    let mut out = String::new();
    let mut seq = 0;
    let mut ev = |mut data: Value| {
        data["sequence_number"] = json!(seq);
        seq += 1;
        out += &format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap());
    };
    ev(json!({"type": "response.created", "response": response("in_progress", vec![], Value::Null)}));
    for (index, item) in output.iter().enumerate() {
        let mut added = item.clone();
        match item["type"].as_str().unwrap() {
            "reasoning" => {
                added["summary"] = json!([]);
                added["encrypted_content"] = json!("gAAAA-partial");
                ev(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                for piece in split3(&format!("thinking {n}")) {
                    ev(json!({"type": "response.reasoning_summary_text.delta", "item_id": format!("rs_{n}"),
                              "output_index": index, "summary_index": 0, "delta": piece}));
                }
            }
            "message" => {
                added["content"] = json!([]);
                ev(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                for piece in split3(item["content"][0]["text"].as_str().unwrap()) {
                    ev(json!({"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                              "content_index": 0, "delta": piece, "logprobs": []}));
                }
            }
            _ => {
                added["arguments"] = json!("");
                ev(json!({"type": "response.output_item.added", "output_index": index, "item": added}));
                for piece in split3(item["arguments"].as_str().unwrap()) {
                    ev(json!({"type": "response.function_call_arguments.delta", "item_id": item["id"],
                              "output_index": index, "delta": piece}));
                }
                ev(json!({"type": "response.function_call_arguments.done", "item_id": item["id"],
                          "output_index": index, "arguments": item["arguments"]}));
            }
        }
        ev(json!({"type": "response.output_item.done", "output_index": index, "item": item}));
    }
    ev(json!({"type": "response.completed", "response": response("completed", output, usage)}));
    out.into_bytes()
}

/// The wire body of a scripted turn (whole JSON or an SSE stream).
pub fn wire(style: Style, turn: &Turn, stream: bool) -> Vec<u8> {
    match (style, stream) {
        (Style::OpenAiResponses, _) => responses_wire(turn, stream, 0),
        (Style::OpenAi, false) => {
            let calls: Vec<Value> = turn
                .calls
                .iter()
                .map(|(id, n, a)| json!({"id": id, "type": "function", "function": {"name": n, "arguments": a}}))
                .collect();
            let mut msg = json!({"role": "assistant", "content": turn.text});
            if !calls.is_empty() {
                msg["tool_calls"] = Value::Array(calls);
            }
            let finish = if turn.calls.is_empty() { "stop" } else { "tool_calls" };
            serde_json::to_vec(&json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            }))
            .unwrap()
        }
        (Style::OpenAi, true) => {
            let mut out = String::new();
            let chunk = |delta: Value, finish: Value| {
                json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",
                       "choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
            };
            out += &format!("data: {}\n\n", chunk(json!({"role":"assistant","content":""}), Value::Null));
            if let Some(t) = &turn.text {
                for piece in split3(t) {
                    out += &format!("data: {}\n\n", chunk(json!({"content": piece}), Value::Null));
                }
            }
            for (i, (id, n, a)) in turn.calls.iter().enumerate() {
                out += &format!(
                    "data: {}\n\n",
                    chunk(
                        json!({"tool_calls":[{"index":i,"id":id,"type":"function","function":{"name":n,"arguments":""}}]}),
                        Value::Null
                    )
                );
                for piece in split3(a) {
                    out += &format!(
                        "data: {}\n\n",
                        chunk(json!({"tool_calls":[{"index":i,"function":{"arguments":piece}}]}), Value::Null)
                    );
                }
            }
            let finish = if turn.calls.is_empty() { "stop" } else { "tool_calls" };
            out += &format!("data: {}\n\n", chunk(json!({}), json!(finish)));
            out += &format!(
                "data: {}\n\n",
                json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],
                       "usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}})
            );
            out += "data: [DONE]\n\n";
            out.into_bytes()
        }
        (Style::Anthropic, false) => {
            let mut content = vec![];
            if let Some(t) = &turn.text {
                content.push(json!({"type":"text","text":t}));
            }
            for (id, n, a) in &turn.calls {
                let input: Value = serde_json::from_str(a).unwrap_or(json!({}));
                content.push(json!({"type":"tool_use","id":id,"name":n,"input":input}));
            }
            let stop = if turn.calls.is_empty() { "end_turn" } else { "tool_use" };
            serde_json::to_vec(&json!({
                "id":"msg_1","type":"message","role":"assistant","model":"m","content":content,
                "stop_reason":stop,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}
            }))
            .unwrap()
        }
        (Style::Anthropic, true) => {
            let mut out = String::new();
            let mut ev = |name: &str, data: Value| out += &format!("event: {name}\ndata: {data}\n\n");
            ev(
                "message_start",
                json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":1}}}),
            );
            let mut idx = 0;
            if let Some(t) = &turn.text {
                ev(
                    "content_block_start",
                    json!({"type":"content_block_start","index":idx,"content_block":{"type":"text","text":""}}),
                );
                for piece in split3(t) {
                    ev(
                        "content_block_delta",
                        json!({"type":"content_block_delta","index":idx,"delta":{"type":"text_delta","text":piece}}),
                    );
                }
                ev("content_block_stop", json!({"type":"content_block_stop","index":idx}));
                idx += 1;
            }
            for (id, n, a) in &turn.calls {
                ev(
                    "content_block_start",
                    json!({"type":"content_block_start","index":idx,"content_block":{"type":"tool_use","id":id,"name":n,"input":{}}}),
                );
                for piece in split3(a) {
                    ev(
                        "content_block_delta",
                        json!({"type":"content_block_delta","index":idx,"delta":{"type":"input_json_delta","partial_json":piece}}),
                    );
                }
                ev("content_block_stop", json!({"type":"content_block_stop","index":idx}));
                idx += 1;
            }
            let stop = if turn.calls.is_empty() { "end_turn" } else { "tool_use" };
            ev(
                "message_delta",
                json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":{"output_tokens":5}}),
            );
            ev("message_stop", json!({"type":"message_stop"}));
            out.into_bytes()
        }
        (Style::Gemini, stream) => {
            let mut parts = vec![];
            if let Some(t) = &turn.text {
                parts.push(json!({"text": t}));
            }
            for (_, n, a) in &turn.calls {
                let args: Value = serde_json::from_str(a).unwrap_or(json!({}));
                parts.push(json!({"functionCall": {"name": n, "args": args}}));
            }
            let body = json!({
                "candidates":[{"content":{"role":"model","parts":parts},"finishReason":"STOP","index":0}],
                "usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"totalTokenCount":15},
                "modelVersion":"m"
            });
            if stream {
                format!("data: {body}\r\n\r\n").into_bytes()
            } else {
                serde_json::to_vec(&body).unwrap()
            }
        }
    }
}

fn split3(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() < 3 {
        return vec![s.to_string()];
    }
    let a = chars.len() / 3;
    let b = 2 * chars.len() / 3;
    vec![chars[..a].iter().collect(), chars[a..b].iter().collect(), chars[b..].iter().collect()]
}

/// What a driving step ended on.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    Suspended(Vec<Request>),
    Done(Outcome),
}

/// A run, a scripted provider, a clock, and a log of what happened.
pub struct Sim {
    pub run: Run,
    pub style: Style,
    pub script: Vec<Turn>,
    pub now: Timestamp,
    /// Every request body sent, parsed.
    pub sent: Vec<Value>,
    /// Every executed call id (with the answer, when a retry).
    pub executed: Vec<(String, Option<Answer>)>,
    pub events: Vec<StreamEvent>,
    /// Fed in this many-byte chunks.
    pub chunk: usize,
}

pub fn config(style: Style, stream: bool) -> RunConfig {
    let mut c = RunConfig::new(style, "test-model");
    c.base_url = "http://127.0.0.1:1".into();
    c.stream = stream;
    c.seed = 7;
    c
}

impl Sim {
    pub fn new(style: Style, stream: bool, tools: Vec<ToolDecl>, script: Vec<Turn>) -> Sim {
        let run = Run::new(config(style, stream), tools, vec![nexus_proto::Message::user("go")]).unwrap();
        Sim { run, style, script, now: Timestamp(1_000), sent: vec![], executed: vec![], events: vec![], chunk: 7 }
    }

    /// Wraps an existing (e.g. restored) run.
    pub fn from_run(run: Run, script: Vec<Turn>) -> Sim {
        let style = run.config().style;
        Sim { run, style, script, now: Timestamp(1_000), sent: vec![], executed: vec![], events: vec![], chunk: 7 }
    }

    /// Serves one request with the scripted reply.
    pub fn serve(&mut self, req: &HttpRequest) {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        // A run that failed over speaks its current upstream's format.
        self.style = self.run.upstream().style;
        nexus_proto::check_transcript(self.style, self.run.transcript()).expect("emitted request must be balanced");
        let n = model_turns(self.style, &body);
        self.sent.push(body);
        let turn = self.script.get(n).cloned().unwrap_or_else(|| Turn::text("(script exhausted)"));
        let bytes = wire_n(self.style, &turn, req.streaming, n);
        let ct = if req.streaming { "text/event-stream" } else { "application/json" };
        self.feed_response(req.exchange, 200, ct, &bytes);
    }

    pub fn feed_response(&mut self, ex: ExchangeId, status: u16, ct: &str, bytes: &[u8]) {
        let head = Input::ResponseHead { exchange: ex, status, headers: vec![("content-type".into(), ct.into())] };
        self.run.handle_input(self.now, head).unwrap();
        for piece in bytes.chunks(self.chunk.max(1)) {
            self.run.handle_input(self.now, Input::ResponseBody { exchange: ex, chunk: piece }).unwrap();
        }
        self.run.handle_input(self.now, Input::ResponseEnd { exchange: ex }).unwrap();
    }

    /// Drives until the run suspends or ends, running tools with `tool`.
    pub fn drive(&mut self, tool: &mut dyn FnMut(&nexus_proto::ToolInvocation) -> ToolReply) -> Stop {
        for _ in 0..10_000 {
            match self.run.poll_output() {
                Output::Send(req) => self.serve(&req),
                Output::RunTools(ToolBatch { calls, .. }) => {
                    // Reply in reverse order: results must still be recorded in call order.
                    for inv in calls.iter().rev() {
                        self.executed.push((inv.call_id.clone(), inv.answer.clone()));
                        let reply = tool(inv);
                        self.run
                            .handle_input(self.now, Input::ToolReply { call_id: inv.call_id.clone(), reply })
                            .unwrap();
                    }
                }
                Output::Event(e) => self.events.push(e),
                Output::Suspended(reqs) => return Stop::Suspended(reqs),
                Output::Wait { until: Some(t) } => {
                    self.now = t;
                    self.run.handle_input(self.now, Input::Timeout).unwrap();
                }
                Output::Wait { until: None } => panic!("waiting with nothing in flight"),
                Output::Done(o) => return Stop::Done(o),
            }
        }
        panic!("no progress");
    }

    pub fn answer(&mut self, a: Answer) -> Result<(), nexus_proto::InputError> {
        self.run.handle_input(self.now, Input::Answer(a))
    }

    /// Snapshot, restore, keep going with the restored run.
    pub fn reload(&mut self) {
        let bytes = self.run.snapshot();
        self.run = Run::restore(&bytes).unwrap();
    }
}

/// A tool function: echoes `name(args)`.
pub fn echo(inv: &nexus_proto::ToolInvocation) -> ToolReply {
    ToolReply::Done(nexus_proto::ToolResult::ok(format!("{}:{}", inv.name, inv.input)))
}
