//! Shared by the drivers' end-to-end tests: one handle over either
//! driver, and builders, tools and checks for scenarios against the fake.
#![allow(dead_code, unused_macros)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use nexus_drive::asynchronous::AsyncClient;
use nexus_drive::blocking::Client;
use nexus_drive::{
    Answer, CancelToken, ClientBuilder, ClientConfig, DriveError, DynTool, Message, Request, RunInput, RunResult,
    RunStore, StreamEvent, StreamItem, ToolContext, ToolError, ToolOutcome,
};
use nexus_tests::fake::{ExpectFinal, FakeProvider, Script, Style, Turn};
use serde_json::{json, Map, Value};

pub const KEY: &str = "sk-drive-test-key";

/// Runs each listed case, a function taking a [`Drv`], once per driver:
/// `blocking::CASE` and `asynk::CASE` (the async driver). Every case must hold for both.
macro_rules! both_drivers {
    ($($name:ident),* $(,)?) => {
        mod blocking {
            $( #[test] fn $name() { super::$name($crate::drive_support::Drv::Blocking) } )*
        }
        mod asynk {
            $( #[test] fn $name() { super::$name($crate::drive_support::Drv::Async) } )*
        }
    };
}

// ------------------------------------------------------------------ drivers

#[derive(Debug, Clone, Copy)]
pub enum Drv {
    Blocking,
    Async,
}

pub enum Cl {
    B(Client),
    A(AsyncClient),
}

impl Drv {
    pub fn client(self, cfg: ClientConfig) -> Cl {
        match self {
            Drv::Blocking => Cl::B(Client::new(cfg)),
            Drv::Async => Cl::A(AsyncClient::new(cfg)),
        }
    }
}

impl Cl {
    pub fn run(&self, prompt: &str) -> Result<RunResult, DriveError> {
        match self {
            Cl::B(c) => c.run(prompt),
            Cl::A(c) => smol::block_on(c.run(prompt)),
        }
    }

    pub fn resume(&self, state: &[u8], answers: Vec<Answer>) -> Result<RunResult, DriveError> {
        match self {
            Cl::B(c) => c.resume(state, answers),
            Cl::A(c) => smol::block_on(c.resume(state, answers)),
        }
    }

    pub fn resume_stored(&self, store: &dyn RunStore, id: &str, answers: Vec<Answer>) -> Result<RunResult, DriveError> {
        match self {
            Cl::B(c) => c.resume_stored(store, id, answers),
            Cl::A(c) => smol::block_on(c.resume_stored(store, id, answers)),
        }
    }

    pub fn ask(&self, id: &str, prompt: &str) -> Result<RunResult, DriveError> {
        match self {
            Cl::B(c) => c.ask(id, prompt),
            Cl::A(c) => smol::block_on(c.ask(id, prompt)),
        }
    }

    pub fn resume_ask(&self, id: &str, state: &[u8], answers: Vec<Answer>) -> Result<RunResult, DriveError> {
        match self {
            Cl::B(c) => c.resume_ask(id, state, answers),
            Cl::A(c) => smol::block_on(c.resume_ask(id, state, answers)),
        }
    }

    pub fn with_cancel(&self, token: CancelToken) -> Cl {
        match self {
            Cl::B(c) => Cl::B(c.with_cancel(token)),
            Cl::A(c) => Cl::A(c.with_cancel(token)),
        }
    }

    /// Every event of a streamed run, then how it ended (nothing may follow the end).
    pub fn stream(&self, input: impl Into<RunInput>) -> (Vec<StreamEvent>, Result<RunResult, DriveError>) {
        let items: Vec<Result<StreamItem, DriveError>> = match self {
            Cl::B(c) => c.stream(input).collect(),
            Cl::A(c) => smol::block_on(async {
                use smol::stream::StreamExt;
                c.stream(input).collect::<Vec<_>>().await
            }),
        };
        let mut events = Vec::new();
        let mut end = None;
        for item in items {
            assert!(end.is_none(), "an item after the end of the stream: {item:?}");
            match item {
                Ok(StreamItem::Event(e)) => events.push(e),
                Ok(StreamItem::Done(r)) => end = Some(Ok(r)),
                Err(e) => end = Some(Err(e)),
            }
        }
        (events, end.expect("the stream ended without a result"))
    }
}

// ------------------------------------------------------------------ helpers

pub const STYLES: [Style; 4] = Style::ALL;

pub fn proto_style(s: Style) -> nexus_drive::Style {
    nexus_drive::Style::parse(s.name()).expect("the fake and the library name their styles alike")
}

/// A builder aimed at the fake for `style`, with fast backoff.
pub fn builder(fake: &FakeProvider, style: Style, model: &str, stream: bool) -> ClientBuilder {
    builder_for_url(&fake.base_url(style), style, model, stream)
}

/// [`builder`] for a fake known only by its base URL (how a worker process
/// reaches the fake its parent started).
pub fn builder_for_url(base_url: &str, style: Style, model: &str, stream: bool) -> ClientBuilder {
    ClientConfig::builder(proto_style(style), model)
        .base_url(base_url)
        .api_key(KEY)
        .stream(stream)
        .seed(7)
        .retry_base_delay(Duration::from_millis(5))
}

/// Every event a client reported through `on_event`, in order.
#[derive(Clone, Default)]
pub struct Events(Arc<Mutex<Vec<StreamEvent>>>);

impl Events {
    /// `b`, reporting every event into a fresh `Events`.
    pub fn record(b: ClientBuilder) -> (ClientBuilder, Events) {
        let events = Events::default();
        let sink = events.0.clone();
        (b.on_event(move |e| sink.lock().unwrap().push(e.clone())), events)
    }

    /// The events so far.
    pub fn recorded(&self) -> Vec<StreamEvent> {
        self.0.lock().unwrap().clone()
    }
}

/// `(retry number, delay, reason)` of every `retrying` event.
pub fn retries_of(events: &[StreamEvent]) -> Vec<(u32, u64, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Retrying { attempt, delay_ms, reason } => Some((*attempt, *delay_ms, reason.clone())),
            _ => None,
        })
        .collect()
}

/// The visible text the host was shown, joined.
pub fn shown_text(events: &[StreamEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TextDelta { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The turn numbers of the `turn finished` events.
pub fn turns_finished(events: &[StreamEvent]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::TurnFinished { turn, .. } => Some(*turn),
            _ => None,
        })
        .collect()
}

pub fn data(v: Value) -> Option<Map<String, Value>> {
    v.as_object().cloned()
}

pub fn ok_tool(name: &str, f: impl Fn(&Value, &ToolContext) -> String + Send + Sync + 'static) -> DynTool {
    DynTool::new(name, format!("the {name} tool"), json!({"type": "object"}), move |args, ctx| {
        Ok(ToolOutcome::Done(Value::String(f(&args, ctx))))
    })
}

pub fn outputs(r: &RunResult) -> Vec<String> {
    r.tool_calls.iter().map(|c| c.output.clone()).collect()
}

/// The tool results of the transcript, in order.
pub fn transcript_results(r: &RunResult) -> Vec<String> {
    r.messages.iter().flat_map(Message::tool_results).map(|b| b.output.clone()).collect()
}

/// Holds `n` parties until all have arrived (or 10 s passed): proof that
/// they ran at the same time, with no timing assertion.
pub struct Gate {
    n: usize,
    arrived: Mutex<usize>,
    cv: Condvar,
    wait: Duration,
}

impl Gate {
    pub fn new(n: usize) -> Arc<Gate> {
        Gate::with_wait(n, Duration::from_secs(10))
    }

    /// A gate whose parties give up after `wait`.
    pub fn with_wait(n: usize, wait: Duration) -> Arc<Gate> {
        Arc::new(Gate { n, arrived: Mutex::new(0), cv: Condvar::new(), wait })
    }

    pub fn pass(&self) -> bool {
        let mut a = self.arrived.lock().unwrap();
        *a += 1;
        self.cv.notify_all();
        let (a, _) = self.cv.wait_timeout_while(a, self.wait, |a| *a < self.n).unwrap();
        *a >= self.n
    }
}

pub fn script(turns: Vec<Turn>) -> Script {
    Script::new(turns)
}

pub fn expect_results(n: usize, contains: &[&str]) -> ExpectFinal {
    ExpectFinal {
        tool_result_contains: contains.iter().map(|s| s.to_string()).collect(),
        tool_results: Some(n),
        messages: None,
    }
}

pub fn run_error(r: Result<RunResult, DriveError>) -> DriveError {
    match r {
        Ok(r) => panic!("expected a failure, got {:?} {:?}", r.status, r.text),
        Err(e) => e,
    }
}

pub fn counter() -> Arc<AtomicUsize> {
    Arc::new(AtomicUsize::new(0))
}

pub fn transfer_tools(b: ClientBuilder, transfers: &Arc<AtomicUsize>, adds: &Arc<AtomicUsize>) -> ClientBuilder {
    let (t, a) = (transfers.clone(), adds.clone());
    b.dyn_tool(DynTool::new("transfer", "moves money", json!({"type": "object"}), move |args, ctx| {
        t.fetch_add(1, Ordering::SeqCst);
        match ctx.answer() {
            None => Ok(ToolOutcome::Pending(Request::new("approval", format!("approve {}", args["amount"])))),
            Some(ans) if ans.ok => Ok(ToolOutcome::Done(json!(format!("sent {}", args["amount"])))),
            Some(_) => Err(ToolError::msg("not approved")),
        }
    }))
    .dyn_tool(ok_tool("add", move |args, _| {
        a.fetch_add(1, Ordering::SeqCst);
        (args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)).to_string()
    }))
}
