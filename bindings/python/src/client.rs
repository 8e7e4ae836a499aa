//! The high-level client: the blocking driver of `nexus-drive`, run with the
//! GIL released. The facade builds one [`NativeClient`] per call from its
//! own settings and the call's tools; `arun`/`astream` wait on the same
//! driver from a worker thread, so Python's event loop stays free to run
//! `async def` tools.

use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nexus_drive::agent_files::{load_agents, AgentFile};
use nexus_drive::blocking::Client;
use nexus_drive::builtins::Builtins;
use nexus_drive::cassette::{self, Cassette, Recorder};
use nexus_drive::machine_json::{self, AgentOptions};
use nexus_drive::mcp::{parse_servers, McpOptions, McpTools};
use nexus_drive::skills::Skills;
use nexus_drive::{
    CancelToken, ClientBuilder, ClientConfig, DriveError, DynTool, Metrics, RunResult, RunStore, StreamItem, Toolbox,
};
use nexus_proto::{Answer, OutputSpec, Style, Upstream};
use pyo3::prelude::*;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::store::NativeStore;
use crate::tools::{self, ToolSpec};
use crate::{errors, ReplayError};

/// The facade's settings for one client, as JSON.
#[derive(Deserialize)]
struct Settings {
    style: String,
    model: String,
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default)]
    api_key: Option<String>,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    params: serde_json::Map<String, Value>,
    #[serde(default)]
    fallbacks: Vec<Fallback>,
    /// MCP configurations: `{"mcpServers": …}` objects.
    #[serde(default)]
    mcp: Vec<Value>,
    /// A cassette the client's runs are appended to.
    #[serde(default)]
    record: Option<String>,
    /// Built-in tools to turn on: `None` none, an empty list all of them.
    #[serde(default)]
    builtins: Option<Vec<String>>,
    /// The directory the built-in path tools are confined to (default: the current one).
    #[serde(default)]
    root: Option<String>,
    /// Agent Skills directories.
    #[serde(default)]
    skills: Vec<String>,
    /// A whole-run deadline, in milliseconds.
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// Directories of Markdown agent definitions (`nexus run --agents DIR`).
    #[serde(default)]
    agents_dirs: Vec<String>,
}

#[derive(Deserialize)]
struct Fallback {
    style: String,
    #[serde(default)]
    model: Option<String>,
    base_url: String,
    #[serde(default)]
    api_key_env: Option<String>,
}

fn style(name: &str) -> PyResult<Style> {
    Style::parse(name).ok_or_else(|| {
        errors::config(&format!("style {name:?}"), "use \"anthropic\", \"openai\", \"openai-responses\" or \"gemini\"")
    })
}

/// A cancel switch the facade flips when the awaiting task is cancelled.
#[pyclass(frozen, module = "nexus._native")]
pub struct NativeCancel {
    token: CancelToken,
}

#[pymethods]
impl NativeCancel {
    #[new]
    fn new() -> NativeCancel {
        NativeCancel { token: CancelToken::new() }
    }

    /// Stops the run: what is in flight is aborted and the run fails `cancelled`.
    fn cancel(&self) {
        self.token.cancel();
    }
}

/// What every run of one Python client shares: its settings, its
/// connection pool, its MCP servers (started once, kept running while it
/// lives), its cassette and its store.
#[pyclass(frozen, module = "nexus._native")]
pub struct NativeSession {
    settings: Settings,
    base: Client,
    mcp: Vec<McpTools>,
    builtins: Vec<DynTool>,
    skills: Option<Skills>,
    /// The agents of `agents_dirs`, bound to each run's tools by name.
    agent_files: Vec<AgentFile>,
    recorder: Option<Arc<Recorder>>,
    store: Option<Arc<dyn RunStore>>,
    /// Counters over every run of the client.
    metrics: Arc<Metrics>,
}

#[pymethods]
impl NativeSession {
    /// The client's counters over all its runs, as Prometheus text.
    fn metrics(&self) -> String {
        self.metrics.render()
    }

    #[new]
    #[pyo3(signature = (settings, store=None))]
    fn new(py: Python<'_>, settings: &str, store: Option<&NativeStore>) -> PyResult<NativeSession> {
        let settings: Settings = tools::parse("client settings", settings)?;
        let (builder, keys) = builder(&settings)?;
        let base = Client::new(builder.build().map_err(errors::drive)?);
        let mut mcp = Vec::new();
        for config in &settings.mcp {
            let servers =
                parse_servers(&config.to_string(), &|k| std::env::var(k).ok()).map_err(|e| errors::config("mcp", e))?;
            let started = py.detach(|| McpTools::start(&servers, &McpOptions::default()));
            if let Some(e) = started.errors().first() {
                return Err(errors::config("mcp", e));
            }
            mcp.push(started);
        }
        // Appended to, never truncated: a resume in another process adds to
        // the recording of the run it continues.
        let recorder = match &settings.record {
            Some(path) => {
                let path = Path::new(path);
                let rec =
                    Recorder::append(path).map_err(|e| errors::config(&format!("record {}", path.display()), e))?;
                for key in keys.iter().filter(|k| !k.is_empty()) {
                    rec.set_api_key(key);
                }
                Some(Arc::new(rec))
            }
            None => None,
        };
        let builtins = match &settings.builtins {
            None => Vec::new(),
            Some(names) => {
                let root = match &settings.root {
                    Some(dir) => PathBuf::from(dir),
                    None => std::env::current_dir().map_err(|e| errors::config("root", e))?,
                };
                let root = root.canonicalize().map_err(|e| errors::config(&format!("root {}", root.display()), e))?;
                let list = names.join(",");
                let chosen = Builtins::new(root).select((!names.is_empty()).then_some(list.as_str()));
                chosen.map_err(|e| errors::config("builtins", e))?.tools()
            }
        };
        let skills = match settings.skills.as_slice() {
            [] => None,
            dirs => {
                if let Some(dir) = dirs.iter().find(|d| !Path::new(d).is_dir()) {
                    return Err(errors::config(&format!("skills {dir}"), "not a directory"));
                }
                Some(Skills::discover(dirs).skills)
            }
        };
        let agent_files = load_agents(&settings.agents_dirs).map_err(|e| errors::config("agents_dir", e))?;
        let store = store.map(|s| s.store.clone());
        Ok(NativeSession {
            settings,
            base,
            mcp,
            builtins,
            skills,
            agent_files,
            recorder,
            store,
            metrics: Arc::default(),
        })
    }
}

/// The builder for `s` (without tools), and the keys it uses.
fn builder(s: &Settings) -> PyResult<(ClientBuilder, Vec<String>)> {
    let mut b = ClientConfig::builder(style(&s.style)?, s.model.clone()).stream(s.stream);
    let mut keys = Vec::new();
    if let Some(url) = &s.base_url {
        b = b.base_url(url);
    }
    match (&s.api_key, &s.api_key_env) {
        (Some(key), _) => {
            keys.push(key.clone());
            b = b.api_key(key);
        }
        (None, Some(var)) => {
            keys.extend(std::env::var(var).ok());
            b = b.api_key_env(var);
        }
        (None, None) => keys.extend(std::env::var(style(&s.style)?.api_key_env()).ok()),
    }
    if let Some(system) = &s.system {
        b = b.system(system);
    }
    if let Some(n) = s.max_turns {
        b = b.max_turns(n);
    }
    if let Some(n) = s.max_tokens {
        b = b.max_tokens(n);
    }
    if let Some(seed) = s.seed {
        b = b.seed(seed);
    }
    if !s.params.is_empty() {
        b = b.params(s.params.clone());
    }
    if let Some(ms) = s.timeout_ms {
        b = b.timeout(Duration::from_millis(ms));
    }
    for f in &s.fallbacks {
        let fs = style(&f.style)?;
        let model = f.model.clone().unwrap_or_else(|| s.model.clone());
        let upstream = Upstream { style: fs, base_url: f.base_url.clone(), model };
        b = match &f.api_key_env {
            Some(var) => {
                keys.extend(std::env::var(var).ok());
                b.fallback_key_env(upstream, var)
            }
            None => b.fallback(upstream),
        };
    }
    Ok((b, keys))
}

/// The tools of one call.
#[derive(Deserialize)]
struct CallTools {
    /// Python tools, in the order of the invokers handed over with them:
    /// the run's own and its agents'.
    #[serde(default)]
    tools: Vec<ToolSpec>,
    /// Which of `tools` the run itself has (by index; absent: all).
    #[serde(default)]
    top: Option<Vec<usize>>,
    /// Relay tools: declarations whose calls go back to the caller.
    #[serde(default)]
    relay_tools: Vec<ToolSpec>,
    /// Sub-agents (`nexus.Agent`), executed by the Rust `AgentTool`.
    #[serde(default)]
    agents: Vec<AgentOptions<ToolRef>>,
    /// The run's typed output (the facade gives the client's default).
    #[serde(default)]
    output: Option<OutputSpec>,
    /// Ask for SSE streams (`stream`/`astream`).
    #[serde(default)]
    stream: bool,
}

/// A tool of a sub-agent: one of the call's Python tools (its index), a
/// tool of the client by name (a built-in, an MCP tool), or a relay tool.
#[derive(Deserialize)]
#[serde(untagged)]
enum ToolRef {
    Python(usize),
    Named(String),
    Relay { relay: ToolSpec },
}

/// The toolbox of a sub-agent from its references.
fn agent_toolbox(refs: Vec<ToolRef>, python: &[DynTool], session: &[DynTool]) -> PyResult<Toolbox> {
    let mut toolbox = Toolbox::new();
    for r in refs {
        let added = match r {
            ToolRef::Python(i) => {
                let tool = python.get(i).ok_or_else(|| errors::config("agent tools", format!("no tool {i}")))?;
                toolbox.add_dyn(tool.clone())
            }
            ToolRef::Named(name) => match session.iter().find(|t| t.decl().name == name) {
                Some(tool) => toolbox.add_dyn(tool.clone()),
                None => return Err(errors::config("agent tools", format!("the client has no tool named {name:?}"))),
            },
            ToolRef::Relay { relay } => toolbox.add_relay(&relay.name, relay.description, relay.input_schema),
        };
        added.map_err(|e| errors::drive(e.into()))?;
    }
    Ok(toolbox)
}

/// One call's client: the session's settings, pool, MCP servers, cassette
/// and store, with the call's tools, answerer and cancel switch.
#[pyclass(frozen, module = "nexus._native")]
pub struct NativeClient {
    client: Client,
    recorder: Option<Arc<Recorder>>,
    store: Option<Arc<dyn RunStore>>,
}

#[pymethods]
impl NativeClient {
    #[new]
    #[pyo3(signature = (session, call, invokers, wait_for=None, cancel=None))]
    fn new(
        session: &NativeSession,
        call: &str,
        invokers: Vec<Py<PyAny>>,
        wait_for: Option<Py<PyAny>>,
        cancel: Option<&NativeCancel>,
    ) -> PyResult<NativeClient> {
        let call: CallTools = tools::parse("tools", call)?;
        if call.tools.len() != invokers.len() {
            return Err(errors::config("tools", "one invoker per tool"));
        }
        let (mut b, _) = builder(&session.settings)?;
        b = b.stream(session.settings.stream || call.stream);
        let python: Vec<DynTool> =
            call.tools.into_iter().zip(invokers).map(|(spec, invoke)| tools::python_tool(spec, invoke)).collect();
        let served: Vec<DynTool> =
            session.mcp.iter().flat_map(McpTools::dyn_tools).chain(session.builtins.iter().cloned()).collect();
        let mut toolbox = Toolbox::new();
        let top: Vec<usize> = call.top.unwrap_or_else(|| (0..python.len()).collect());
        for i in top {
            let tool = python.get(i).ok_or_else(|| errors::config("tools", format!("no tool {i}")))?;
            toolbox.add_dyn(tool.clone()).map_err(|e| errors::drive(e.into()))?;
        }
        for relay in call.relay_tools {
            toolbox
                .add_relay(&relay.name, relay.description, relay.input_schema)
                .map_err(|e| errors::drive(e.into()))?;
        }
        for t in served.iter().cloned() {
            toolbox.add_dyn(t).map_err(|e| errors::drive(e.into()))?;
        }
        let (style, model) = (style(&session.settings.style)?, session.settings.model.as_str());
        for agent in call.agents {
            b = b.agent(agent.agent_tool(style, model, &mut |refs| agent_toolbox(refs, &python, &served))?);
        }
        // A Markdown agent names its tools among the run's own.
        for file in &session.agent_files {
            let agent = file
                .agent_tool(style, model, &toolbox)
                .map_err(|e| errors::config(&format!("agent {}", file.path.display()), format!("tools: {e}")))?;
            b = b.agent(agent);
        }
        if let Some(spec) = call.output {
            b = b.output(spec);
        }
        b = b.toolbox(toolbox);
        if let Some(skills) = &session.skills {
            b = b.skills(skills.clone());
        }
        if let Some(f) = wait_for {
            b = b.wait_for(tools::wait_for(f));
        }
        if let Some(c) = cancel {
            b = b.cancel_token(c.token.clone());
        }
        if let Some(rec) = &session.recorder {
            b = b.tap(rec.clone());
        }
        let metrics = session.metrics.clone();
        b = b.on_metric(move |m| metrics.observe(m));
        let config = b.build().map_err(errors::drive)?;
        Ok(NativeClient {
            client: session.base.with_config(config),
            recorder: session.recorder.clone(),
            store: session.store.clone(),
        })
    }

    /// Runs `messages_json` (the neutral transcript, the new user turn last)
    /// and returns the result as JSON text.
    #[pyo3(signature = (messages_json, interruptible=false))]
    fn run(&self, py: Python<'_>, messages_json: &str, interruptible: bool) -> PyResult<String> {
        let messages = tools::parse("messages", messages_json)?;
        let result = self.wait(py, interruptible, || self.client.run_messages(messages))?;
        self.finish(py, result)
    }

    /// Resumes from a state (JSON text) or, with a store, a run id.
    #[pyo3(signature = (state_or_run_id, answers_json, interruptible=false))]
    fn resume(
        &self,
        py: Python<'_>,
        state_or_run_id: &str,
        answers_json: &str,
        interruptible: bool,
    ) -> PyResult<String> {
        let answers: Vec<Answer> = tools::parse("answers", answers_json)?;
        let (store, recorder) = (self.store.as_deref(), self.recorder.as_deref());
        let result =
            self.wait(py, interruptible, || resume(&self.client, store, recorder, state_or_run_id, answers))?;
        self.finish(py, result)
    }

    /// `run` on a thread of its own, for `arun`: `done(result_json, None)`
    /// or `done(None, exception)` is called (with the GIL) when it ends.
    /// A thread per run, not a pool: an event loop may await any number
    /// of runs at once.
    fn start(&self, messages_json: &str, done: Py<PyAny>) -> PyResult<()> {
        let messages = tools::parse("messages", messages_json)?;
        let client = self.client.clone();
        self.spawn(done, move || client.run_messages(messages))
    }

    /// `resume` on a thread of its own, for `aresume` (see [`start`](Self::start)).
    fn start_resume(&self, state_or_run_id: String, answers_json: &str, done: Py<PyAny>) -> PyResult<()> {
        let answers: Vec<Answer> = tools::parse("answers", answers_json)?;
        let (client, store, recorder) = (self.client.clone(), self.store.clone(), self.recorder.clone());
        self.spawn(done, move || resume(&client, store.as_deref(), recorder.as_deref(), &state_or_run_id, answers))
    }

    /// Starts the run on a thread and returns its events as they happen.
    #[pyo3(signature = (messages_json, state=None, answers_json=None))]
    fn stream(&self, messages_json: &str, state: Option<String>, answers_json: Option<&str>) -> PyResult<NativeStream> {
        let client = self.client.clone();
        let (tx, rx) = sync_channel::<Result<StreamItem, DriveError>>(64);
        let start: Box<dyn FnOnce() + Send> = match state {
            Some(state) => {
                let answers: Vec<Answer> = tools::parse("answers", answers_json.unwrap_or("[]"))?;
                if let Some(r) = &self.recorder {
                    r.resume(state.as_bytes());
                }
                Box::new(move || {
                    for item in client.stream_resume(state.as_bytes(), answers) {
                        if tx.send(item).is_err() {
                            break;
                        }
                    }
                })
            }
            None => {
                let messages = tools::parse("messages", messages_json)?;
                Box::new(move || {
                    for item in client.stream_messages(messages) {
                        if tx.send(item).is_err() {
                            break;
                        }
                    }
                })
            }
        };
        std::thread::Builder::new()
            .name("nexus-stream".into())
            .spawn(start)
            .map_err(|e| errors::config("stream", e))?;
        Ok(NativeStream {
            rx: Mutex::new(Some(rx)),
            cancel: self.client.config().cancel_token().clone(),
            recorder: self.recorder.clone(),
            store: self.store.clone(),
        })
    }
}

impl NativeClient {
    /// Runs `work` on a new thread, settles its result and hands it to `done`.
    fn spawn(
        &self,
        done: Py<PyAny>,
        work: impl FnOnce() -> Result<RunResult, DriveError> + Send + 'static,
    ) -> PyResult<()> {
        let (store, recorder) = (self.store.clone(), self.recorder.clone());
        std::thread::Builder::new()
            .name("nexus-run".into())
            .spawn(move || {
                let settled = work()
                    .map_err(errors::drive)
                    .and_then(|result| settle(&result, recorder.as_deref(), store.as_deref()));
                Python::attach(|py| {
                    let called = match settled {
                        Ok(text) => done.call1(py, (text, py.None())),
                        Err(e) => done.call1(py, (py.None(), e.into_value(py))),
                    };
                    // `done` only schedules the result on the event loop; a
                    // loop already closed has no one left to tell.
                    if let Err(e) = called {
                        e.write_unraisable(py, None);
                    }
                });
            })
            .map(|_| ())
            .map_err(|e| errors::config("run thread", e))
    }

    /// Runs `work` with the GIL released. When `interruptible` (the caller
    /// is Python's main thread, the only one that handles signals), the
    /// work runs on a scoped thread while this one checks for signals every
    /// 100 ms: Ctrl-C cancels the run, waits for it to stop (a tool already
    /// running finishes first), and raises `KeyboardInterrupt`.
    fn wait<T: Send>(&self, py: Python<'_>, interruptible: bool, work: impl FnOnce() -> T + Send) -> PyResult<T> {
        if !interruptible {
            return Ok(py.detach(work));
        }
        let cancel = self.client.config().cancel_token().clone();
        py.detach(|| {
            std::thread::scope(|scope| {
                let (tx, rx) = std::sync::mpsc::channel();
                scope.spawn(move || {
                    let _ = tx.send(work());
                });
                let mut interrupted = None;
                loop {
                    match rx.recv_timeout(Duration::from_millis(100)) {
                        Ok(value) => return interrupted.map_or(Ok(value), Err),
                        Err(RecvTimeoutError::Timeout) if interrupted.is_none() => {
                            if let Err(e) = Python::attach(|py| py.check_signals()) {
                                cancel.cancel();
                                interrupted = Some(e);
                            }
                        }
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => {
                            // The work panicked: the scope re-raises it.
                            return Err(errors::config("run", "the run's thread panicked"));
                        }
                    }
                }
            })
        })
    }

    fn finish(&self, py: Python<'_>, result: Result<RunResult, DriveError>) -> PyResult<String> {
        let result = result.map_err(errors::drive)?;
        py.detach(|| settle(&result, self.recorder.as_deref(), self.store.as_deref()))
    }
}

/// Resumes from a state (JSON text) or, with a store, a run id, and
/// records the state taken in the cassette.
fn resume(
    client: &Client,
    store: Option<&dyn RunStore>,
    recorder: Option<&Recorder>,
    state_or_run_id: &str,
    answers: Vec<Answer>,
) -> Result<RunResult, DriveError> {
    match store {
        Some(store) if !is_state(state_or_run_id) => {
            if let (Some(r), Ok(Some(record))) = (recorder, store.load(state_or_run_id)) {
                // The state the claim below takes (another worker's claim in
                // between is refused, and nothing is sent).
                r.resume(&record.state);
            }
            client.resume_stored(store, state_or_run_id, answers)
        }
        _ => {
            if let Some(r) = recorder {
                r.resume(state_or_run_id.as_bytes());
            }
            client.resume(state_or_run_id.as_bytes(), answers)
        }
    }
}

/// A state is a JSON object; a run id never starts with `{`.
fn is_state(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

/// Keeps a pending run (store, cassette) and renders the result for the facade.
fn settle(result: &RunResult, recorder: Option<&Recorder>, store: Option<&dyn RunStore>) -> PyResult<String> {
    let mut out = serde_json::to_value(result).map_err(|e| errors::config("result", e))?;
    if let Some(s) = &result.suspended {
        if let Some(r) = recorder {
            r.pending(&s.pending);
        }
        if let Some(store) = store {
            // Saved as new, or over the version a resume_stored left it at.
            let expected = store.load(&s.run_id).map_err(errors::store)?.map(|r| r.version);
            store.save(&s.run_id, &s.state, expected).map_err(errors::store)?;
            out["runId"] = json!(s.run_id);
        }
        out["state"] = json!(String::from_utf8_lossy(&s.state));
        out["pending"] = machine_json::pending(result);
    }
    if let Some(r) = recorder {
        r.finish().map_err(|e| errors::config("record", e))?;
    }
    Ok(out.to_string())
}

/// The events of a streamed run, then its result.
#[pyclass(frozen, module = "nexus._native")]
pub struct NativeStream {
    rx: Mutex<Option<Receiver<Result<StreamItem, DriveError>>>>,
    cancel: CancelToken,
    recorder: Option<Arc<Recorder>>,
    store: Option<Arc<dyn RunStore>>,
}

#[pymethods]
impl NativeStream {
    /// The next event as JSON text (`{"type": …}`; the last one is
    /// `{"type": "done", "result": …}`), or `None` once the run is over.
    /// Waits with the GIL released.
    fn next(&self, py: Python<'_>) -> PyResult<Option<String>> {
        // Taken out of the lock while waiting: one reader at a time, and
        // the lock is never held with the GIL released.
        let Some(mut rx) = self.rx.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return Ok(None);
        };
        // Woken every 100 ms to handle signals (on Python's main thread):
        // Ctrl-C cancels the run and is raised, and the stream ends.
        let item = loop {
            let (back, item) = py.detach(move || {
                let item = rx.recv_timeout(Duration::from_millis(100));
                (rx, item)
            });
            rx = back;
            match item {
                Err(RecvTimeoutError::Timeout) => {
                    if let Err(e) = py.check_signals() {
                        self.cancel.cancel();
                        return Err(e);
                    }
                }
                Ok(item) => break Some(item),
                Err(RecvTimeoutError::Disconnected) => break None,
            }
        };
        let Some(item) = item else {
            return Ok(None);
        };
        let (text, last) = py.detach(|| render(item, self.recorder.as_deref(), self.store.as_deref()))?;
        if !last {
            *self.rx.lock().unwrap_or_else(|e| e.into_inner()) = Some(rx);
        }
        Ok(Some(text))
    }

    /// For `astream`: hands every item to `on_item` from a thread of its
    /// own (with the GIL): `on_item(event_json, None)`, then
    /// `on_item(None, None)` at the end or `on_item(None, exception)`.
    fn pump(&self, on_item: Py<PyAny>) -> PyResult<()> {
        let Some(rx) = self.rx.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return Err(errors::config("stream", "already consumed"));
        };
        let (recorder, store) = (self.recorder.clone(), self.store.clone());
        let tell = move |item: Option<PyResult<String>>| {
            Python::attach(|py| {
                let called = match item {
                    Some(Ok(text)) => on_item.call1(py, (text, py.None())),
                    Some(Err(e)) => on_item.call1(py, (py.None(), e.into_value(py))),
                    None => on_item.call1(py, (py.None(), py.None())),
                };
                called.map_err(|e| e.write_unraisable(py, None)).is_ok()
            })
        };
        std::thread::Builder::new()
            .name("nexus-stream-pump".into())
            .spawn(move || {
                for item in rx {
                    match render(item, recorder.as_deref(), store.as_deref()) {
                        Ok((text, last)) => {
                            if !tell(Some(Ok(text))) || last {
                                return;
                            }
                        }
                        Err(e) => {
                            tell(Some(Err(e)));
                            return;
                        }
                    }
                }
                tell(None);
            })
            .map(|_| ())
            .map_err(|e| errors::config("stream thread", e))
    }
}

/// One stream item as the facade's JSON, and whether it is the last
/// (the result, settled: a pending run kept and the cassette flushed).
fn render(
    item: Result<StreamItem, DriveError>,
    recorder: Option<&Recorder>,
    store: Option<&dyn RunStore>,
) -> PyResult<(String, bool)> {
    match item.map_err(errors::drive)? {
        StreamItem::Event(ev) => Ok((serde_json::to_string(&ev).map_err(|e| errors::config("event", e))?, false)),
        StreamItem::Done(result) => {
            let settled = settle(&result, recorder, store)?;
            Ok((format!("{{\"type\":\"done\",\"result\":{settled}}}"), true))
        }
    }
}

/// Replays a cassette offline, checking every request byte for byte;
/// returns `{"status", "text", "runs", "requests", "pending"}` as JSON text.
#[pyfunction]
pub fn replay(py: Python<'_>, path: &str) -> PyResult<String> {
    let replayed = py.detach(|| -> Result<_, String> {
        let cassette = Cassette::load(Path::new(path)).map_err(|e| e.to_string())?;
        cassette::replay(&cassette, &mut cassette::Quiet).map_err(|e| e.to_string())
    });
    let replayed = replayed.map_err(ReplayError::new_err)?;
    let (status, pending) = match &replayed.end {
        cassette::ReplayEnd::Finished(outcome) => (serde_json::to_value(outcome).unwrap_or_default(), vec![]),
        cassette::ReplayEnd::Pending(requests) => (json!({"status": "pending"}), requests.clone()),
    };
    Ok(json!({
        "outcome": status,
        "text": replayed.run.final_text(),
        "toolCalls": replayed.run.tool_calls(),
        "turns": replayed.run.turns(),
        "usage": replayed.run.usage(),
        "runs": replayed.runs,
        "requests": replayed.requests,
        "pending": pending,
    })
    .to_string())
}
