//! A run tree against scripted providers: each agent of the tree has an
//! API root of its own, and the provider there answers with its script,
//! chosen by counting the model turns already in the request (the wire
//! bytes come from `sim`). Tools are served by name from the qualified call
//! id's last segment, so the log says which agent ran what.
#![allow(dead_code)]

use std::collections::HashMap;

use nexus_proto::{
    AgentSpec, Answer, HttpRequest, Input, Output, Request, Run, RunConfig, StreamEvent, Style, Timestamp, ToolDecl,
    ToolInvocation, ToolReply, ToolResult,
};
use serde_json::{json, Value};

use crate::sim::{model_turns, wire_n, Stop, Turn};

pub const ROOT: &str = "http://127.0.0.1:1";

/// The API root of the agent at `path` (`""` for the top run).
pub fn root(name: &str) -> String {
    if name.is_empty() {
        ROOT.to_string()
    } else {
        format!("{ROOT}/{name}")
    }
}

pub fn config(style: Style, name: &str) -> RunConfig {
    let mut c = RunConfig::new(style, "test-model");
    c.base_url = root(name);
    c.seed = 7;
    c
}

/// `approve`: suspends once, then completes; `echo`: completes at once.
pub fn tools() -> Vec<ToolDecl> {
    vec![
        ToolDecl::new("approve", "asks first", json!({"type": "object"})),
        ToolDecl::new("echo", "echoes", json!({"type": "object"})),
    ]
}

pub fn agent(name: &str, style: Style) -> AgentSpec {
    AgentSpec::new(name, format!("the {name} agent"), config(style, name)).with_tools(tools())
}

pub fn delegate(id: &str, agent: &str, prompt: &str) -> (String, String, String) {
    (id.into(), agent.into(), json!({"prompt": prompt}).to_string())
}

pub fn call(id: &str, name: &str) -> (String, String, String) {
    (id.into(), name.into(), "{}".into())
}

/// Calls then a final text.
pub fn script(turns: Vec<Vec<(String, String, String)>>, last: &str) -> Vec<Turn> {
    let mut s: Vec<Turn> = turns.into_iter().map(|calls| Turn { text: None, calls }).collect();
    s.push(Turn::text(last));
    s
}

pub struct Tree {
    pub run: Run,
    /// Script per API root.
    pub scripts: HashMap<String, (Style, Vec<Turn>)>,
    pub now: Timestamp,
    /// Every tool execution: (qualified call id, whether it came with an answer).
    pub executed: Vec<(String, bool)>,
    /// Calls that completed, by qualified id.
    pub completed: Vec<String>,
    pub events: Vec<StreamEvent>,
    /// Requests sent: (url, auth header present).
    pub sent: Vec<(String, Value)>,
}

impl Tree {
    pub fn new(run: Run, scripts: Vec<(&str, Style, Vec<Turn>)>) -> Tree {
        let scripts = scripts.into_iter().map(|(n, s, t)| (root(n), (s, t))).collect();
        Tree { run, scripts, now: Timestamp(1_000), executed: vec![], completed: vec![], events: vec![], sent: vec![] }
    }

    /// The reply to one request, by its API root.
    pub fn respond(&mut self, req: &HttpRequest) -> Vec<u8> {
        let body: Value = serde_json::from_slice(&req.body).unwrap();
        let (root, (style, script)) = self
            .scripts
            .iter()
            .filter(|(r, _)| req.url.starts_with(r.as_str()))
            .max_by_key(|(r, _)| r.len())
            .unwrap_or_else(|| panic!("no script for {}", req.url));
        let n = model_turns(*style, &body);
        let turn = script.get(n).cloned().unwrap_or_else(|| Turn::text("(script exhausted)"));
        let bytes = wire_n(*style, &turn, req.streaming, n);
        self.sent.push((root.clone(), body));
        bytes
    }

    pub fn serve(&mut self, req: &HttpRequest) {
        let bytes = self.respond(req);
        let ex = req.exchange;
        let head = Input::ResponseHead {
            exchange: ex,
            status: 200,
            headers: vec![("content-type".into(), "application/json".into())],
        };
        self.run.handle_input(self.now, head).unwrap();
        for piece in bytes.chunks(97) {
            self.run.handle_input(self.now, Input::ResponseBody { exchange: ex, chunk: piece }).unwrap();
        }
        self.run.handle_input(self.now, Input::ResponseEnd { exchange: ex }).unwrap();
    }

    /// What the tools reply: `approve` asks until answered.
    pub fn tool(inv: &ToolInvocation) -> ToolReply {
        let name = inv.name.as_str();
        match (name, &inv.answer) {
            ("approve", None) => ToolReply::Pending(Request::new("approval", format!("may {} go?", inv.call_id))),
            ("approve", Some(_)) => ToolReply::Done(ToolResult::ok("approved")),
            _ => ToolReply::Done(ToolResult::ok(format!("{name} ran"))),
        }
    }

    pub fn reply(&mut self, inv: &ToolInvocation) {
        self.executed.push((inv.call_id.clone(), inv.answer.is_some()));
        let reply = Tree::tool(inv);
        if matches!(reply, ToolReply::Done(_)) {
            self.completed.push(inv.call_id.clone());
        }
        self.run.handle_input(self.now, Input::ToolReply { call_id: inv.call_id.clone(), reply }).unwrap();
    }

    /// Drives until the tree suspends or ends.
    pub fn drive(&mut self) -> Stop {
        for _ in 0..10_000 {
            match self.run.poll_output() {
                Output::Send(req) => self.serve(&req),
                Output::RunTools(batch) => {
                    for inv in batch.calls.iter().rev() {
                        self.reply(inv);
                    }
                }
                Output::Event(e) => self.events.push(e),
                Output::Suspended(reqs) => return Stop::Suspended(reqs),
                Output::Wait { until: Some(t) } => {
                    self.now = self.now.max(t);
                    self.run.handle_input(self.now, Input::Timeout).unwrap();
                }
                Output::Wait { until: None } => panic!("waiting with nothing in flight"),
                Output::Done(o) => return Stop::Done(o),
            }
        }
        panic!("no progress");
    }

    pub fn answer(&mut self, id: &str) -> Result<(), nexus_proto::InputError> {
        self.run.handle_input(self.now, Input::Answer(Answer::ok(id, None)))
    }

    pub fn reload(&mut self) {
        let bytes = self.run.snapshot();
        self.run = Run::restore(&bytes).unwrap();
        // Restoring marks running calls in doubt; after that it is a fixed point.
        let once = self.run.snapshot();
        let twice = Run::restore(&once).unwrap().snapshot();
        assert!(once == twice, "a restored tree snapshots byte for byte as before");
    }
}
