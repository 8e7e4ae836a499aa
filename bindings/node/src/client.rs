//! `Client`: the blocking driver of `nexus-drive` on a thread per call, with
//! JavaScript tools, `waitFor` and stream events carried over a [`Host`].
//!
//! Everything crosses the boundary as JSON text: the client's options once,
//! each call's options, every message to JavaScript. The result is the
//! driver's `RunResult` serialized as the CLI prints it (`--json`), plus
//! the suspended run's `state` and `runId`.

use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;

use napi::{Error, Result};
use napi_derive::napi;
use nexus_drive::agent_files::{load_agents, AgentFile};
use nexus_drive::blocking::Client as Driver;
use nexus_drive::builtins::Builtins;
use nexus_drive::cassette::Recorder;
use nexus_drive::machine_json::{self, AgentOptions};
use nexus_drive::mcp::{parse_servers, McpOptions, McpTools};
use nexus_drive::skills::Skills;
use nexus_drive::{
    Answer, CancelToken, ClientBuilder, ClientConfig, DriveError, DynTool, Message, Metrics, Request, RunResult,
    RunStore, StoreError, Style, ToolContext, ToolError, ToolOutcome, ToolResult, Toolbox, Upstream,
};
use nexus_proto::{OutputError, OutputSpec, Run, RunError, ToolDecl, ToolKind};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::bridge::{Host, HostFn};
use crate::store;

/// The options of `new Client({...})`, as the JS side passes them.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClientOptions {
    style: String,
    model: String,
    #[serde(default)]
    base_url: Option<String>,
    #[serde(default)]
    api_key_env: Option<String>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default)]
    max_turns: Option<u32>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    fallbacks: Vec<FallbackOptions>,
    /// `{"mcpServers": {...}}`, the format of `nexus run --mcp FILE`.
    #[serde(default)]
    mcp: Option<Value>,
    #[serde(default)]
    store: Option<String>,
    /// A cassette file every call of this client appends its session to.
    #[serde(default)]
    record: Option<String>,
    /// Provider streaming for `run` (`stream` always streams).
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    params: Option<Map<String, Value>>,
    #[serde(default)]
    timeout_ms: Option<u64>,
    /// The built-in tools: `true` for all, or a list of names.
    #[serde(default)]
    builtins: Option<Value>,
    /// The directory the built-in path tools are confined to (default: the current one).
    #[serde(default)]
    root: Option<String>,
    /// Agent Skills directories.
    #[serde(default)]
    skills: Vec<String>,
    /// Directories of Markdown agent definitions (`nexus run --agents DIR`).
    #[serde(default)]
    agents_dir: Vec<String>,
}

/// One fallback upstream.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FallbackOptions {
    style: String,
    base_url: String,
    model: String,
    #[serde(default)]
    api_key_env: Option<String>,
}

/// A tool as the JS side declares it; its `execute` stays in JavaScript.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSpec {
    name: String,
    #[serde(default)]
    description: String,
    input_schema: Value,
    /// A relay tool: declared to the model, its calls returned to the caller.
    #[serde(default)]
    relay: bool,
}

impl ToolSpec {
    /// The declaration the model sees.
    pub fn decl(&self) -> ToolDecl {
        match self.relay {
            true => ToolDecl::relay(&self.name, self.description.clone(), self.input_schema.clone()),
            false => ToolDecl::new(&self.name, self.description.clone(), self.input_schema.clone()),
        }
    }
}

/// One call: `run` (a prompt) or `resume` (a state or a stored run id).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CallOptions {
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    history: Vec<Message>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    answers: Vec<Answer>,
    #[serde(default)]
    tools: Vec<ToolSpec>,
    /// Whether JavaScript answers requests in-process (`waitFor`).
    #[serde(default)]
    wait_for: bool,
    /// Whether JavaScript wants the stream events (and provider streaming).
    #[serde(default)]
    events: bool,
    /// Sub-agents (`agent({...})`), executed by the Rust `AgentTool`; their
    /// tools' calls come back to JavaScript like the run's own.
    #[serde(default)]
    agents: Vec<AgentOptions<ToolSpec>>,
    /// The run's typed output (SPEC §16).
    #[serde(default)]
    output: Option<OutputSpec>,
}

/// What a client shares between its calls.
struct Shared {
    options: ClientOptions,
    style: Style,
    store: OnceLock<std::result::Result<Arc<dyn RunStore>, StoreError>>,
    /// The MCP servers, started by the first call that needs them and kept
    /// until `close` (their processes and sessions outlive a run).
    mcp: Mutex<Option<Arc<McpTools>>>,
    /// The built-in tools and skills, set up by the first call (file system work).
    local: OnceLock<std::result::Result<Local, String>>,
    /// Counters over every call of the client (`metrics()`).
    metrics: Arc<Metrics>,
    /// The keep-alive connection pool and tool threads every call shares: a
    /// client built from the options alone by the first call. Each call's
    /// own client (its tools, answerer, events) is `with_config` on it, so a
    /// run reuses the connections, and TLS sessions, of the runs before it.
    base: OnceLock<Driver>,
}

/// What a client sets up once from the file system.
#[derive(Clone)]
struct Local {
    builtins: Vec<DynTool>,
    skills: Option<Skills>,
    agent_files: Vec<AgentFile>,
}

/// A client: the options, the store and the MCP servers its calls share.
#[napi(js_name = "NativeClient")]
pub struct Client {
    shared: Arc<Shared>,
}

/// A call in progress.
#[napi]
pub struct Call {
    cancel: CancelToken,
}

#[napi]
impl Call {
    /// Cancels the call: in-flight I/O is abandoned and the run ends `cancelled`.
    #[napi]
    pub fn cancel(&self) {
        self.cancel.cancel();
    }
}

fn invalid(message: impl Into<String>) -> Error {
    Error::from_reason(message.into())
}

fn parse_style(s: &str) -> Result<Style> {
    Style::parse(s)
        .ok_or_else(|| invalid(format!("unknown style {s:?}: use anthropic, openai, gemini or openai-responses")))
}

#[napi]
impl Client {
    /// Checks the options (nothing is opened or started yet: that happens on
    /// a call's own thread, so the constructor never blocks).
    #[napi(constructor)]
    pub fn new(options_json: String) -> Result<Client> {
        let options: ClientOptions =
            serde_json::from_str(&options_json).map_err(|e| invalid(format!("Client options: {e}")))?;
        let style = parse_style(&options.style)?;
        for f in &options.fallbacks {
            parse_style(&f.style)?;
        }
        if options.max_turns == Some(0) {
            return Err(invalid("maxTurns must be at least 1"));
        }
        let shared = Shared {
            options,
            style,
            store: OnceLock::new(),
            mcp: Mutex::new(None),
            local: OnceLock::new(),
            metrics: Arc::default(),
            base: OnceLock::new(),
        };
        Ok(Client { shared: Arc::new(shared) })
    }

    /// Starts a call on a thread of its own; `host` hears its events, tool
    /// calls and requests, then one `done` or `error` message.
    #[napi(ts_args_type = "callJson: string, host: (message: string) => void")]
    pub fn start(&self, call_json: String, host: HostFn) -> Result<Call> {
        let call: CallOptions = serde_json::from_str(&call_json).map_err(|e| invalid(format!("call options: {e}")))?;
        let cancel = CancelToken::new();
        let shared = self.shared.clone();
        let token = cancel.clone();
        thread::Builder::new()
            .name("nexus-run".into())
            .spawn(move || {
                let host = Arc::new(Host::new(host));
                let message = match execute(&shared, call, &host, token) {
                    Ok(result) => json!({"type": "done", "result": result}),
                    Err(e) => json!({"type": "error", "error": error_json(&e)}),
                };
                host.tell(&message);
            })
            .map_err(|e| invalid(format!("cannot start a thread: {e}")))?;
        Ok(Call { cancel })
    }

    /// The client's counters (model requests, tool calls, runs, tokens) as
    /// Prometheus text.
    #[napi]
    pub fn metrics(&self) -> String {
        self.shared.metrics.render()
    }

    /// Stops the client's MCP servers (a later call starts them again).
    #[napi]
    pub fn close(&self) {
        self.shared.mcp.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// Why a call failed, for the JS side's `NexusError` subclasses.
enum Failure {
    Drive(DriveError),
    Usage(String),
}

impl From<DriveError> for Failure {
    fn from(e: DriveError) -> Self {
        Failure::Drive(e)
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Drive(DriveError::Store(e))
    }
}

fn error_json(f: &Failure) -> Value {
    if let Failure::Drive(DriveError::Run(RunError::Output(o))) = f {
        return output_error_json(o);
    }
    let (kind, message, status) = match f {
        Failure::Usage(m) => ("config", m.clone(), None),
        Failure::Drive(e) => {
            let kind = match e {
                DriveError::Run(RunError::Cancelled) => "cancelled",
                DriveError::Run(RunError::Provider(_)) => "provider",
                DriveError::Run(_) => "run",
                DriveError::Store(StoreError::Claimed(_)) => "claimed",
                DriveError::Store(StoreError::NotFound(_)) => "not_found",
                DriveError::Store(_) => "store",
                DriveError::State(_) => "state",
                DriveError::Input(_) => "input",
                DriveError::Hook(_) => "hook",
                _ => "config",
            };
            (kind, e.to_string(), e.status())
        }
    };
    json!({"kind": kind, "message": message, "status": status})
}

/// A run that ended without a valid typed output: `output_invalid` (with
/// `attempts` and the validation `errors`), `output_refused` or
/// `output_truncated`, each with `raw`, what the model wrote.
fn output_error_json(e: &OutputError) -> Value {
    let message = e.to_string();
    match e {
        OutputError::Invalid { attempts, raw, errors } => {
            json!({"kind": "output_invalid", "message": message, "raw": raw, "attempts": attempts, "errors": errors})
        }
        OutputError::Refused { message: why } => json!({"kind": "output_refused", "message": message, "raw": why}),
        OutputError::Truncated { raw } => json!({"kind": "output_truncated", "message": message, "raw": raw}),
        _ => json!({"kind": "output", "message": message}),
    }
}

fn execute(
    shared: &Shared,
    call: CallOptions,
    host: &Arc<Host>,
    cancel: CancelToken,
) -> std::result::Result<Value, Failure> {
    let opts = &shared.options;
    let store = match &opts.store {
        Some(spec) => Some(shared.store.get_or_init(|| store::open(spec)).clone()?),
        None => None,
    };
    // A stored run is resumed from its record; a state, from the text given.
    let state: Option<Vec<u8>> = match (&call.state, &call.run_id, &store) {
        (Some(s), _, _) => Some(s.clone().into_bytes()),
        (None, Some(id), Some(store)) => match store.load(id)? {
            Some(record) => Some(record.state),
            None => return Err(StoreError::NotFound(id.clone()).into()),
        },
        (None, Some(_), None) => return Err(Failure::Usage("resume by run id needs the client's `store`".into())),
        (None, None, _) => None,
    };
    let restored = state.as_deref().map(Run::restore).transpose().map_err(DriveError::from)?;

    let key = api_key(opts.api_key_env.as_deref(), restored.as_ref().map_or(shared.style, |r| r.config().style))?;
    let mut b = match &restored {
        // The run's own config (model, system, limits, fallbacks) wins, as for `nexus resume`.
        Some(run) => ClientBuilder::from_run_config(run.config().clone()),
        None => fresh_builder(shared)?,
    };
    if let Some(k) = &key {
        b = b.api_key(k.clone());
    }
    if let Some(url) = &opts.base_url {
        b = b.base_url(url.clone());
    }
    if let Some(ms) = opts.timeout_ms {
        b = b.timeout(std::time::Duration::from_millis(ms));
    }
    let mut keys: Vec<String> = key.into_iter().collect();
    for f in &opts.fallbacks {
        let upstream = Upstream {
            style: parse_style(&f.style).map_err(|e| Failure::Usage(e.reason))?,
            base_url: f.base_url.clone(),
            model: f.model.clone(),
        };
        if let Some(k) = api_key(f.api_key_env.as_deref(), upstream.style)? {
            keys.push(k.clone());
            b = if restored.is_some() { b.upstream_key(upstream, k) } else { b.fallback_key(upstream, k) };
        } else if restored.is_none() {
            b = b.fallback(upstream);
        }
    }
    let declared: Vec<ToolDecl> = restored.as_ref().map(|r| r.tools().to_vec()).unwrap_or_default();
    let local = shared.local.get_or_init(|| local(opts)).clone().map_err(Failure::Usage)?;
    if let Some(skills) = &local.skills {
        b = b.skills(skills.clone());
    }
    let (toolbox, _mcp) = toolbox(shared, &call, &declared, &local.builtins, host, &cancel)?;
    // Agents run on the run's wire format; a resumed run's come from its state.
    let (style, model) = match &restored {
        Some(run) => (run.config().style, run.config().model.clone()),
        None => (shared.style, opts.model.clone()),
    };
    for agent in call.agents {
        let tool = agent.agent_tool(style, &model, &mut |specs| {
            let mut tb = Toolbox::new();
            for spec in &specs {
                match spec.relay {
                    true => tb.add_decl(spec.decl()),
                    false => tb.add_dyn(js_tool(spec, host.clone(), cancel.clone())),
                }
                .map_err(DriveError::from)?;
            }
            Ok::<_, Failure>(tb)
        })?;
        b = b.agent(tool);
    }
    // A Markdown agent names its tools among the run's own.
    for file in &local.agent_files {
        let agent = file
            .agent_tool(style, &model, &toolbox)
            .map_err(|e| Failure::Usage(format!("agent {}: tools: {e}", file.path.display())))?;
        b = b.agent(agent);
    }
    if let (Some(spec), None) = (call.output, &restored) {
        b = b.output(spec);
    }
    let metrics = shared.metrics.clone();
    b = b
        .toolbox(toolbox)
        .stream(call.events || opts.stream)
        .cancel_token(cancel.clone())
        .on_metric(move |m| metrics.observe(m));
    if call.wait_for {
        let (host, cancel) = (host.clone(), cancel.clone());
        b = b.wait_for(move |request: Request| {
            let asked = json!({"type": "wait_for", "request": machine_json::request(&request)});
            let declined = || Answer::declined(request.id.clone(), "cancelled");
            match host.ask(asked, &|| cancel.is_cancelled()) {
                Some(v) => serde_json::from_value(v).unwrap_or_else(|_| declined()),
                None => declined(),
            }
        });
    }
    if call.events {
        let host = host.clone();
        b = b.on_event(move |event| host.tell(&json!({"type": "event", "event": event})));
    }
    if let Some(path) = &opts.record {
        let rec =
            Recorder::append(Path::new(path)).map_err(|e| Failure::Usage(format!("cannot record to {path}: {e}")))?;
        for k in &keys {
            rec.set_api_key(k);
        }
        b = b.tap(Arc::new(rec));
    }
    let config = b.build()?;
    let driver = match shared.base.get() {
        Some(base) => base.with_config(config),
        None => {
            let base = Driver::new(fresh_builder(shared)?.build()?);
            shared.base.get_or_init(|| base).with_config(config)
        }
    };

    let result = match (state, &call.run_id, &store) {
        (Some(_), Some(id), Some(store)) if call.state.is_none() => {
            driver.resume_stored(store.as_ref(), id, call.answers)?
        }
        (Some(state), _, _) => driver.resume(&state, call.answers)?,
        (None, _, _) => {
            let prompt = call.prompt.clone().ok_or_else(|| Failure::Usage("run needs a prompt".into()))?;
            let result = driver.run_with_history(call.history, prompt)?;
            if let (Some(store), Some(s)) = (&store, &result.suspended) {
                store.save(&s.run_id, &s.state, None)?;
            }
            result
        }
    };
    Ok(result_json(&result))
}

/// A new run's builder from the client's options.
fn fresh_builder(shared: &Shared) -> std::result::Result<ClientBuilder, Failure> {
    let opts = &shared.options;
    let mut b: ClientBuilder = ClientConfig::builder(shared.style, opts.model.clone());
    if let Some(s) = &opts.system {
        b = b.system(s.clone());
    }
    if let Some(n) = opts.max_turns {
        b = b.max_turns(n);
    }
    if let Some(n) = opts.max_tokens {
        b = b.max_tokens(n);
    }
    if let Some(p) = &opts.params {
        b = b.params(p.clone());
    }
    Ok(b)
}

/// An API key: from the named variable, which must be set, else from the
/// style's usual variable (none when unset: a keyless local server).
fn api_key(named: Option<&str>, style: Style) -> std::result::Result<Option<String>, Failure> {
    let set = |var: &str| std::env::var(var).ok().filter(|k| !k.trim().is_empty());
    match named {
        Some(var) => set(var).map(Some).ok_or_else(|| Failure::Usage(format!("no API key: {var} is not set"))),
        None => Ok(set(style.api_key_env())),
    }
}

/// The call's toolbox: its JS tools and relay tools, the MCP servers'
/// tools, and — when resuming — the relay tools the saved run declared.
fn toolbox(
    shared: &Shared,
    call: &CallOptions,
    declared: &[ToolDecl],
    builtins: &[DynTool],
    host: &Arc<Host>,
    cancel: &CancelToken,
) -> std::result::Result<(Toolbox, Option<Arc<McpTools>>), Failure> {
    let mut tb = Toolbox::new();
    for spec in &call.tools {
        if spec.relay {
            tb.add_decl(spec.decl()).map_err(DriveError::from)?;
        } else {
            tb.add_dyn(js_tool(spec, host.clone(), cancel.clone())).map_err(DriveError::from)?;
        }
    }
    for d in declared {
        if d.kind == ToolKind::Relay && !call.tools.iter().any(|t| t.name == d.name) {
            tb.add_decl(d.clone()).map_err(DriveError::from)?;
        }
    }
    let mcp = mcp_tools(shared)?;
    let served = mcp.iter().flat_map(|m| m.dyn_tools()).chain(builtins.iter().cloned());
    for t in served {
        // On resume, only the tools the run was started with.
        if declared.is_empty() || declared.iter().any(|d| d.name == t.decl().name) {
            tb.add_dyn(t).map_err(DriveError::from)?;
        }
    }
    Ok((tb, mcp))
}

/// The built-in tools and the skills the options ask for.
fn local(opts: &ClientOptions) -> std::result::Result<Local, String> {
    let builtins = match &opts.builtins {
        None | Some(Value::Bool(false)) => Vec::new(),
        Some(chosen) => {
            let list = match chosen {
                Value::Bool(true) => None,
                Value::Array(names) => {
                    let names: Option<Vec<&str>> = names.iter().map(Value::as_str).collect();
                    Some(names.ok_or("builtins: a list of tool names")?.join(","))
                }
                _ => return Err("builtins: true or a list of tool names".into()),
            };
            let root = match &opts.root {
                Some(dir) => std::path::PathBuf::from(dir),
                None => std::env::current_dir().map_err(|e| format!("root: {e}"))?,
            };
            let root = root.canonicalize().map_err(|e| format!("root {}: {e}", root.display()))?;
            Builtins::new(root).select(list.as_deref()).map_err(|e| format!("builtins: {e}"))?.tools()
        }
    };
    let skills = match opts.skills.as_slice() {
        [] => None,
        dirs => {
            if let Some(missing) = dirs.iter().find(|d| !Path::new(d).is_dir()) {
                return Err(format!("skills {missing}: not a directory"));
            }
            Some(Skills::discover(dirs).skills)
        }
    };
    let agent_files = load_agents(&opts.agents_dir).map_err(|e| format!("agentsDir: {e}"))?;
    Ok(Local { builtins, skills, agent_files })
}

/// The client's MCP servers, started on first use.
fn mcp_tools(shared: &Shared) -> std::result::Result<Option<Arc<McpTools>>, Failure> {
    let Some(config) = &shared.options.mcp else {
        return Ok(None);
    };
    let mut slot = shared.mcp.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = slot.as_ref() {
        return Ok(Some(m.clone()));
    }
    let servers = parse_servers(&config.to_string(), &|k| std::env::var(k).ok())
        .map_err(|e| Failure::Usage(format!("mcp: {e}")))?;
    let started = McpTools::start(&servers, &McpOptions::default());
    if let Some(e) = started.errors().first() {
        return Err(Failure::Usage(format!("mcp: {e}")));
    }
    let started = Arc::new(started);
    *slot = Some(started.clone());
    Ok(Some(started))
}

/// A tool whose calls go to JavaScript's `execute`.
fn js_tool(spec: &ToolSpec, host: Arc<Host>, cancel: CancelToken) -> DynTool {
    let name = spec.name.clone();
    DynTool::new(&spec.name, spec.description.clone(), spec.input_schema.clone(), move |args, ctx: &ToolContext| {
        let asked = json!({
            "type": "tool",
            "tool": name,
            "args": args,
            "ctx": machine_json::tool_context(ctx),
        });
        let reply = host
            .ask(asked, &|| cancel.is_cancelled() || ctx.is_cancelled())
            .ok_or_else(|| ToolError::msg("the call was cancelled"))?;
        tool_outcome(reply)
    })
}

/// JavaScript's reply to a tool call: `{output}`, `{result: {output, isError}}`,
/// `{pending: Request}` or `{error: message}`.
fn tool_outcome(reply: Value) -> std::result::Result<ToolOutcome<Value>, ToolError> {
    let field = |k: &str| reply.get(k).cloned();
    if let Some(message) = field("error") {
        return Err(ToolError::msg(message.as_str().map_or_else(|| message.to_string(), str::to_string)));
    }
    if let Some(mut request) = field("pending") {
        if request.get("id").is_none() {
            request["id"] = Value::from("");
        }
        return serde_json::from_value::<Request>(request)
            .map(ToolOutcome::Pending)
            .map_err(|e| ToolError::msg(format!("pending(...) is not a request: {e}")));
    }
    if let Some(result) = field("result") {
        return serde_json::from_value::<ToolResult>(result)
            .map(ToolOutcome::Result)
            .map_err(|e| ToolError::msg(format!("not a tool result: {e}")));
    }
    Ok(ToolOutcome::Done(field("output").unwrap_or(Value::Null)))
}

/// The result as the CLI prints it with `--json`, plus the suspended run.
fn result_json(result: &RunResult) -> Value {
    let mut v = serde_json::to_value(result).unwrap_or(Value::Null);
    if let (Some(s), Value::Object(map)) = (&result.suspended, &mut v) {
        map.insert("runId".into(), Value::from(s.run_id.clone()));
        map.insert("pending".into(), machine_json::pending(result));
        map.insert("state".into(), Value::from(String::from_utf8_lossy(&s.state).into_owned()));
    }
    v
}
