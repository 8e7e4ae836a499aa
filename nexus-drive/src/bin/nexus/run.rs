//! `nexus run` and `nexus resume`: the loop against a provider, with the
//! state written to a file (or kept in a `--store`) when the run suspends
//! and continued from it by another process.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use nexus_drive::blocking::Client;
use nexus_drive::cassette::Recorder;
use nexus_drive::mcp::McpTools;
use nexus_drive::stores::DEFAULT_LEASE_MS;
use nexus_drive::workdir::{self, Workdir};
use nexus_drive::{
    CancelToken, ClientBuilder, ClientConfig, DriveError, RunResult, RunStatus, StreamItem, SuspendedRun, Toolbox,
};
use nexus_proto::{
    Answer, Input, InputError, OutputMode, OutputSpec, Run, RunConfig, StreamEvent, Style, Timestamp, ToolDecl,
    ToolKind, Upstream,
};

use crate::cli::{McpArgs, SkillsArgs, StyleParser, EXIT_CODES};
use crate::store::{self, Heartbeat, Held, Store};
use crate::{builtins, mcp, out, out_inline, parse_style, read_input, skills, tools, Fail};

/// Where a suspended run's state goes unless `--state` says otherwise.
pub const DEFAULT_STATE: &str = "nexus-state.json";

/// Run the loop against a provider
///
/// Runs the tool-calling loop on PROMPT (`-` reads it from standard input).
///
/// A question an MCP server asks suspends the run like any other request (kind
/// input or authorization). An OAuth server's login: in-process, the URL is
/// printed and the redirect taken on a loopback port; with --state/--store, the
/// run suspends on the authorization request before its first model call.
#[derive(clap::Args)]
#[command(after_help = EXIT_CODES)]
pub struct RunArgs {
    /// Start the run's trace under this W3C traceparent (`00-TRACE-SPAN-FLAGS`;
    /// telemetry is on when OTEL_EXPORTER_OTLP_ENDPOINT is set, SPEC §22).
    #[arg(long, value_name = "TRACEPARENT", env = "TRACEPARENT")]
    pub traceparent: Option<String>,
    /// The wire format.
    #[arg(long, value_parser = StyleParser, default_value = "openai")]
    pub style: Style,
    /// API base URL (default: the provider's public one).
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// Model id (defaults: claude-sonnet-4-5, gpt-4o-mini, gemini-2.5-flash, gpt-5-mini).
    #[arg(long, value_name = "M")]
    pub model: Option<String>,
    /// The variable holding the API key (default ANTHROPIC_API_KEY,
    /// OPENAI_API_KEY or GEMINI_API_KEY, by style).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// The system prompt.
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// The most model calls the run makes.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_turns: Option<u32>,
    /// Print text as it arrives (with --json: every event as a JSON line).
    #[arg(long)]
    pub stream: bool,
    /// The model's context window in tokens (default: the built-in table of
    /// current models; a provider's "too long" refusal teaches it too).
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub context_window: Option<u64>,
    /// Compact the context (summarize the oldest turns with a model request)
    /// when the next request's estimate passes this fraction of the window.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.8, value_parser = fraction)]
    pub compact_at: f64,
    /// Cap on a tool result in the requests, in bytes: a longer one keeps its
    /// head and tail with a marker (the run keeps it whole).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(64..))]
    pub max_tool_result_bytes: Option<u64>,
    /// Ask the upstream's token counter (Anthropic, OpenAI Responses,
    /// Gemini) for a request whose estimate is within this fraction of the
    /// compaction point, and go by its count instead of the estimate.
    #[arg(long, value_name = "FRACTION", value_parser = fraction)]
    pub count_margin: Option<f64>,
    /// Ask OpenAI Responses upstreams to compact server-side past TOKENS
    /// input tokens (`context_management`); their opaque compaction items
    /// are kept and sent back to them only.
    #[arg(long, value_name = "TOKENS", value_parser = clap::value_parser!(u64).range(1..))]
    pub responses_compact_at: Option<u64>,
    /// A JSON array of {name, description, input_schema}: tools the model may
    /// call that run elsewhere; their calls suspend the run with one
    /// `tool_call` request per turn.
    #[arg(long, value_name = "TOOLS.json")]
    pub relay: Option<String>,
    /// Turn on the built-in tools (bash, read, write, edit, grep, glob,
    /// webfetch, question, apply_patch, todowrite), or only a comma list of
    /// them; path tools are confined to --root.
    #[arg(long, value_name = "NAMES", num_args = 0..=1, require_equals = true)]
    pub builtins: Option<Option<String>>,
    /// The directory the built-in path tools are confined to (default: the
    /// current directory).
    #[arg(long, value_name = "DIR")]
    pub root: Option<String>,
    /// Tools whose every call waits for a person's approval before it runs
    /// (a comma list: built-ins such as bash, MCP tools as {server}__{tool};
    /// repeatable). The run suspends on an `approval` request; answer it
    /// with nexus resume (`"ok": false` with a `reason` the model reads).
    #[arg(long, value_name = "TOOLS", value_delimiter = ',')]
    pub approve: Vec<String>,
    #[command(flatten)]
    pub skills: SkillsArgs,
    #[command(flatten)]
    pub agents: crate::agents::AgentsArgs,
    #[command(flatten)]
    pub mcp: McpArgs,
    /// Where the state goes when the run suspends (default nexus-state.json);
    /// it never contains the API key.
    #[arg(long, value_name = "FILE")]
    pub state: Option<String>,
    /// Keep a suspended run in a store, under its run id, instead of a state
    /// file: sqlite:PATH (a SQLite file), dir:PATH or a directory path (a
    /// file per run). The run id is printed (the first line of output, `runId`
    /// with --json); resume it with nexus resume --store.
    #[arg(long, value_name = "STORE")]
    pub store: Option<String>,
    /// Write the session to a cassette (see nexus replay).
    #[arg(long, value_name = "FILE")]
    pub record: Option<String>,
    /// Print the result as one JSON object: status, text, toolCalls, turns,
    /// usage, model, limit (when incomplete), pending (when pending),
    /// upstreams ([{turn, style, baseUrl, model}]: which upstream answered
    /// each turn), failovers ([{turn, from, to, reason}]), compactions
    /// ([{turn, tokensBefore, tokensAfter, turnsReplaced, usage}], when the
    /// context was compacted), runId (with --store); with --output-schema
    /// also output (the validated value), outputMode (the strategy in force
    /// at the end) and outputStrategies ([{upstream, strategy, turn, reason}]).
    #[arg(long)]
    pub json: bool,
    /// The run must end in a JSON value that validates against the JSON
    /// Schema in FILE (its root an object); printed as pretty JSON (as
    /// `output` with --json). An answer that fails validation goes back to
    /// the model, twice at most. An invalid schema is a usage error.
    #[arg(long, value_name = "FILE")]
    pub output_schema: Option<String>,
    /// How the schema reaches the model: auto (per upstream, from the model
    /// table), native (the provider's own field), tool (an output tool),
    /// prompted (the schema in the system prompt).
    #[arg(long, value_name = "MODE", requires = "output_schema", value_parser = ["auto", "native", "tool", "prompted"])]
    pub output_mode: Option<String>,
    /// An upstream (style=S,base-url=URL[,model=M][,api-key-env=VAR]) tried,
    /// in the order given, after the primary when a model call fails for the
    /// upstream's fault (connect errors, resets, 5xx, 429/529 after its
    /// retries, or at once when Retry-After is over 10 s); never on a 4xx
    /// request error or once text was shown. model defaults as for --model;
    /// the key comes from api-key-env, else from the style's usual variable
    /// (none when unset). Another style gets the transcript re-encoded for
    /// it. Repeatable.
    #[arg(long, value_name = "SPEC")]
    pub fallback: Vec<String>,
    /// The prompt (several words are joined with spaces; `-` reads standard input).
    #[arg(value_name = "PROMPT", required = true)]
    pub prompt: Vec<String>,
}

/// Continue a suspended run in this process
///
/// ANSWERS.json holds one answer or an array of them: {"id": "<request id>",
/// "ok": true, "data": {...}}; a relay (`tool_call`) request is answered with
/// data.results: [{id, output, isError}]. An `authorization` request (an MCP
/// server's OAuth login) is answered with --answer ID=REDIRECT_URL: the URL the
/// browser was sent back to (or its query, code=…&state=…); a wrong state is
/// refused and the run stays as it was. A login waits $NEXUS_MCP_LOGIN_TTL
/// (seconds, or 30s, 15m, 1h; default 15m); after that, --login-again starts
/// it anew: a new URL is printed and the run stays suspended on the new
/// request.
///
/// Answers for only some requests leave the run pending on the rest (the state
/// file is replaced atomically); an answer whose id matches no outstanding
/// request changes nothing and exits 1. When the run finishes, the state file
/// is removed. The API key is read from the environment again, and so are the
/// keys of the run's fallback upstreams (kept in the state without their keys):
/// --fallback style=S,base-url=URL[,model=M],api-key-env=VAR names the variable
/// for one of them (the style's usual variable otherwise). With --record, the
/// session is appended to that cassette. The run's root (the --root it ran
/// with, or the directory it started in) is kept with it and its built-in
/// path tools stay confined there, wherever the resume runs from; a --root
/// that names another directory is refused unless --move-root is given too.
/// A run that uses MCP tools needs the same --mcp files again; an MCP tool that
/// changed (description or input schema) or vanished since the run began is
/// reported and the resume refused, unless --accept-tool-changes is given.
///
/// Give the run's --skills DIR again too when it was started with skills: the
/// `skill` tool and its files are served from there (the catalog the run
/// started with stays as it was).
///
/// With --store, the run ID is claimed in STORE first (sqlite:PATH, dir:PATH
/// or a directory path, as given to nexus run --store): while the claim holds,
/// no other resume of that suspension can start. A dir: claim holds until its
/// resume ends. A SQLite claim lasts --lease seconds (default 300) and is
/// renewed every third of that while the resume runs; a resume that dies
/// frees the run once its claim runs out. A resume whose claim is lost all the
/// same (stalled past its lease) is stopped before its next model call or
/// tool and saves nothing (exit code 5). When the run suspends
/// again its new state replaces the old and the claim is released; when it
/// finishes it is removed from the store. A run another resume holds, or one
/// no longer waiting there (finished, or never stored), is refused with exit
/// code 5 and nothing is changed. A resume that fails gives the claim back
/// with the state it found. `nexus runs --store STORE` lists the stored runs.
#[derive(clap::Args)]
#[command(
    verbatim_doc_comment,
    after_help = EXIT_CODES,
    override_usage = "\
nexus resume --state FILE --answer ANSWERS.json [OPTIONS]
       nexus resume --store STORE --run ID --answer ANSWERS.json [OPTIONS]
       nexus resume (--state FILE | --store STORE --run ID) --mcp FILE --login-again"
)]
pub struct ResumeArgs {
    /// Continue the run's trace under this W3C traceparent (`00-TRACE-SPAN-FLAGS`;
    /// telemetry is on when OTEL_EXPORTER_OTLP_ENDPOINT is set, SPEC §22).
    #[arg(long, value_name = "TRACEPARENT", env = "TRACEPARENT")]
    pub traceparent: Option<String>,
    /// The state file the run suspended into.
    #[arg(long, value_name = "FILE")]
    pub state: Option<String>,
    /// The store the run is kept in (as given to nexus run --store).
    #[arg(long, value_name = "STORE")]
    pub store: Option<String>,
    /// The run's id in --store (nexus runs --store STORE lists them).
    #[arg(long, value_name = "ID")]
    pub run: Option<String>,
    /// The answers: a JSON file (`-` reads standard input), or ID=REDIRECT_URL
    /// for an authorization request.
    #[arg(long, value_name = "ANSWERS.json", required_unless_present = "login_again")]
    pub answer: Option<String>,
    /// Start again the MCP logins the run waits for (one that expired, SPEC
    /// §20.3): each server is asked for a new login, whose URL is printed;
    /// the run stays suspended (exit 3) on the new requests, answered as
    /// before with --answer ID=REDIRECT_URL. Needs the run's --mcp files.
    #[arg(long, conflicts_with = "answer")]
    pub login_again: bool,
    /// The variable holding the API key (default: the run's style's usual one).
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// The directory the built-in path tools are confined to (default: the
    /// one stored with the run; for a run stored without one, the current
    /// directory). Another directory than the stored one needs --move-root.
    #[arg(long, value_name = "DIR")]
    pub root: Option<String>,
    /// Confine the run's tools to --root DIR from now on although the run
    /// was kept with another root (it moved, or its files did).
    #[arg(long, requires = "root")]
    pub move_root: bool,
    /// The run's --skills directories again (repeatable).
    #[arg(long = "skills", value_name = "DIR")]
    pub skills: Vec<String>,
    /// The run's --approve tools again: their later calls wait for approval
    /// too (a call already approved runs without it).
    #[arg(long, value_name = "TOOLS", value_delimiter = ',')]
    pub approve: Vec<String>,
    #[command(flatten)]
    pub mcp: McpArgs,
    /// Go on although an MCP tool changed or vanished since the run began.
    #[arg(long)]
    pub accept_tool_changes: bool,
    /// The key variable of one of the run's fallback upstreams:
    /// style=S,base-url=URL[,model=M],api-key-env=VAR (repeatable).
    #[arg(long, value_name = "SPEC")]
    pub fallback: Vec<String>,
    /// Append the session to this cassette.
    #[arg(long, value_name = "FILE")]
    pub record: Option<String>,
    /// With a sqlite: --store, how long the claim lasts without renewal, in
    /// seconds: the resume renews it every third of that while it runs, and a
    /// resume that dies frees the run once it runs out.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_LEASE_MS / 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub lease: u64,
    /// Print the result as one JSON object (as nexus run --json).
    #[arg(long)]
    pub json: bool,
    /// Print text as it arrives (with --json: every event as a JSON line).
    #[arg(long)]
    pub stream: bool,
}

fn default_model(style: Style) -> &'static str {
    match style {
        Style::Anthropic => "claude-sonnet-4-5",
        Style::OpenAi => "gpt-4o-mini",
        Style::Gemini => "gemini-2.5-flash",
        Style::OpenAiResponses => "gpt-5-mini",
    }
}

/// Reads the API key from `--api-key-env VAR` or the style's usual variable.
fn api_key(var: Option<&str>, style: Style) -> Result<String, Fail> {
    let var = var.unwrap_or(style.api_key_env());
    match std::env::var(var) {
        Ok(k) if !k.trim().is_empty() => Ok(k),
        _ => Err(Fail::usage(format!("no API key: set {var} (or name another variable with --api-key-env)"))),
    }
}

/// One `--fallback style=S,base-url=URL[,model=M][,api-key-env=VAR]`: the
/// upstream and its key (from the named variable, which must be set, else
/// from the style's usual variable when set).
fn fallback(spec: &str) -> Result<(Upstream, Option<String>), Fail> {
    let usage = |why: String| Fail::usage(format!("--fallback {spec:?}: {why}"));
    let (mut style, mut base_url, mut model, mut var) = (None, None, None, None);
    for item in spec.split(',') {
        let (k, v) = item.split_once('=').ok_or_else(|| usage(format!("{item:?} is not key=value")))?;
        let slot = match k.trim() {
            "style" => &mut style,
            "base-url" => &mut base_url,
            "model" => &mut model,
            "api-key-env" => &mut var,
            other => return Err(usage(format!("unknown key {other:?} (style, base-url, model, api-key-env)"))),
        };
        if slot.replace(v.trim().to_string()).is_some() {
            return Err(usage(format!("{k} is given twice")));
        }
    }
    let style = parse_style(&style.ok_or_else(|| usage("style= is required".into()))?)?;
    let base_url = base_url.filter(|u| !u.is_empty()).ok_or_else(|| usage("base-url= is required".into()))?;
    let model = model.filter(|m| !m.is_empty()).unwrap_or_else(|| default_model(style).to_string());
    let key = match var {
        Some(var) => match std::env::var(&var) {
            Ok(k) if !k.trim().is_empty() => Some(k),
            _ => return Err(usage(format!("no API key: {var} is not set"))),
        },
        None => std::env::var(style.api_key_env()).ok().filter(|k| !k.trim().is_empty()),
    };
    Ok((Upstream { style, base_url, model }, key))
}

/// `--output-schema FILE [--output-mode MODE]`: the spec, checked here so a
/// bad schema is a usage error before any model call.
fn output_spec(path: &str, mode: Option<&str>) -> Result<OutputSpec, Fail> {
    let bad = |why: String| Fail::usage(format!("--output-schema {path}: {why}"));
    let bytes = fs::read(path).map_err(|e| bad(e.to_string()))?;
    let schema: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
    let mode = mode.and_then(OutputMode::parse).unwrap_or_default();
    let spec = OutputSpec::new(schema).with_mode(mode);
    spec.check().map_err(bad)?;
    Ok(spec)
}

/// How a client's error ends the command.
fn drive_fail(e: DriveError) -> Fail {
    match e {
        DriveError::Config(_) | DriveError::Toolbox(_) | DriveError::Input(InputError::Config(_)) => {
            Fail::usage(e.to_string())
        }
        other => Fail::runtime(other.to_string()),
    }
}

/// Opens the cassette: a new one for `run`, appended to for `resume`.
fn recorder(path: Option<&str>, append: bool, keys: &[String]) -> Result<Option<Arc<Recorder>>, Fail> {
    let Some(path) = path else {
        return Ok(None);
    };
    let path = Path::new(path);
    let rec = if append { Recorder::append(path) } else { Recorder::create(path) }
        .map_err(|e| Fail::runtime(format!("cannot record to {}: {e}", path.display())))?;
    for key in keys {
        rec.set_api_key(key);
    }
    Ok(Some(Arc::new(rec)))
}

/// Where a suspended run is kept.
enum Keep {
    /// A state file, written when the run suspends.
    File {
        /// The file.
        path: PathBuf,
        /// The run was resumed from `path`: remove it once the run is over.
        resumed: bool,
    },
    /// A store: a new run is inserted under its run id; a claimed one is
    /// written under its claim.
    Store {
        /// The open store (boxed: a SQLite connection is large).
        store: Box<Store>,
        /// The run this process claimed, when resuming.
        held: Option<Held>,
    },
}

struct Ctx {
    /// The root the built-in path tools are confined to: kept with the run
    /// when it suspends (the state's envelope, [`workdir`]).
    root: PathBuf,
    json: bool,
    stream: bool,
    /// The run has an output spec: its answer is the value, not the text.
    typed: bool,
    keep: Keep,
    record: Option<Arc<Recorder>>,
}

/// Runs `nexus run`.
pub fn run_main(p: RunArgs) -> Result<i32, Fail> {
    let prompt = match p.prompt.as_slice() {
        [one] if one == "-" => {
            String::from_utf8(read_input("-")?).map_err(|_| Fail::usage("the prompt is not UTF-8"))?
        }
        many => many.join(" "),
    };
    if prompt.trim().is_empty() {
        return Err(Fail::usage("the prompt is empty"));
    }
    let style = p.style;
    let model = p.model.as_deref().unwrap_or(default_model(style));
    if p.state.is_some() && p.store.is_some() {
        return Err(Fail::usage("--state and --store both say where the run is kept: give one"));
    }
    if let Some(spec) = &p.store {
        store::parse_location(spec)?;
    }
    let root = builtins::root(p.root.as_deref())?;
    let builtin_tools = match &p.builtins {
        Some(names) => builtins::select(names.as_deref(), &root)?,
        None => Vec::new(),
    };
    let relay = p.relay.as_deref().map(tools::load_relay).transpose()?.unwrap_or_default();
    let mut toolbox = tools::toolbox(builtin_tools, relay)?;
    let found = skills::load(&p.skills.dirs, p.skills.budget)?;
    let key = api_key(p.api_key_env.as_deref(), style)?;
    let servers = mcp::configs(&p.mcp)?;
    // A kept run (--state/--store) does not wait for a person: a server
    // whose listing needs an authorization makes the run suspend on it.
    let durable = p.state.is_some() || p.store.is_some();
    // Kept for the whole run: dropping it stops the servers.
    let (_mcp, waiting) = match servers.is_empty() {
        true => (None, Vec::new()),
        false => {
            let (m, waiting) = mcp::start_for_run(&servers, durable)?;
            mcp::add_to(&mut toolbox, &m)?;
            (Some(m), waiting)
        }
    };

    let agents = crate::agents::load(&p.agents.dirs)?;
    let agent_tools = crate::agents::tools(&agents, style, model, &toolbox);
    let mut b = ClientConfig::builder(style, model).api_key(key.clone()).toolbox(toolbox).stream(p.stream);
    for name in p.approve.iter().filter(|n| !n.trim().is_empty()) {
        b = b.needs_approval(name.trim(), true);
    }
    for agent in agent_tools {
        b = b.agent(agent);
    }
    if let Some(found) = found {
        b = b.skills(found.skills);
    }
    if let Some(url) = &p.base_url {
        b = b.base_url(url);
    }
    let mut keys = vec![key.clone()];
    for spec in &p.fallback {
        let (upstream, key) = fallback(spec)?;
        b = match key {
            Some(k) => {
                keys.push(k.clone());
                b.fallback_key(upstream, k)
            }
            None => b.fallback(upstream),
        };
    }
    if let Some(s) = &p.system {
        b = b.system(s);
    }
    if let Some(n) = p.max_turns {
        b = b.max_turns(n);
    }
    // The context budget is always on in the CLI: a long tool loop compacts
    // instead of dying at the window.
    b = b.compact_at(p.compact_at);
    if let Some(tokens) = p.context_window {
        b = b.context_window(tokens);
    }
    if let Some(n) = p.max_tool_result_bytes {
        b = b.max_tool_result_bytes(usize::try_from(n).unwrap_or(usize::MAX));
    }
    if let Some(f) = p.count_margin {
        b = b.count_margin(f);
    }
    if let Some(tokens) = p.responses_compact_at {
        b = b.responses_compaction(tokens);
    }
    let typed = p.output_schema.is_some();
    if let Some(path) = &p.output_schema {
        b = b.output(output_spec(path, p.output_mode.as_deref())?);
    }
    // Opened once everything else is known to be right (a mistake must not
    // leave an empty store behind), and before the run (a store that cannot
    // be opened must not cost a model call whose outcome could not be kept).
    let keep = match &p.store {
        Some(spec) => Keep::Store { store: Box::new(Store::open(spec, true)?), held: None },
        None => Keep::File { path: PathBuf::from(p.state.as_deref().unwrap_or(DEFAULT_STATE)), resumed: false },
    };
    let record = recorder(p.record.as_deref(), false, &keys)?;
    if let Some(r) = &record {
        b = b.tap(r.clone());
    }
    if let Some(t) = crate::telemetry::for_run(p.traceparent.as_deref())? {
        b = b.telemetry(t);
    }
    let client = Client::new(b.build().map_err(drive_fail)?);
    let ctx = Ctx { root, json: p.json, stream: p.stream, typed, keep, record };
    // The run itself waits for the authorizations (SPEC §13, durable runs):
    // suspended before its first model call, kept like any suspended run.
    let items = match waiting.is_empty() {
        true => client.stream(prompt),
        false => client.stream_awaiting(prompt, waiting),
    };
    finish(&ctx, items)
}

/// A fraction in (0, 1], for --compact-at.
fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("{s:?} is not a fraction in (0, 1]")),
    }
}

/// Runs `nexus resume`.
pub fn resume_main(p: ResumeArgs) -> Result<i32, Fail> {
    let from_store = match (&p.state, &p.store, &p.run) {
        (Some(_), Some(_), _) => {
            return Err(Fail::usage("--state and --store both say where the run is kept: give one"))
        }
        (Some(_), None, Some(_)) => {
            return Err(Fail::usage("--run names a run in a --store; a --state file holds one run"))
        }
        (None, None, _) => return Err(Fail::usage("resume needs --state FILE, or --store STORE --run ID")),
        (None, Some(_), None) => {
            return Err(Fail::usage("resume --store needs --run ID (nexus runs --store STORE lists them)"))
        }
        (None, Some(spec), Some(id)) => Some((spec, id)),
        (Some(_), None, None) => None,
    };
    if p.login_again {
        return crate::login_again::login_again(&p, from_store);
    }
    match from_store {
        Some((spec, id)) => resume_stored(&p, spec, id),
        None => resume_file(&p, p.state.as_deref().unwrap_or(DEFAULT_STATE)),
    }
}

/// The root a resumed run's built-in path tools are confined to: the one
/// kept with the run unless `--root` names it again; `--root` elsewhere only
/// with `--move-root`. A run kept without one (written before roots were
/// kept) takes `--root` or the current directory, as it always did.
pub fn resume_root(p: &ResumeArgs, state: &[u8], source: &str) -> Result<PathBuf, Fail> {
    let stored = workdir::read(state).map_err(|e| Fail::runtime(format!("{source}: {e}")))?;
    let Some(stored) = stored else {
        return builtins::root(p.root.as_deref());
    };
    let kept = stored.root.display();
    let Some(dir) = p.root.as_deref() else {
        if !stored.root.is_dir() {
            return Err(Fail::usage(format!(
                "{source}: the run's root {kept} (kept with it when it suspended) no longer exists; \
                 give --root DIR --move-root to confine its tools to another directory"
            )));
        }
        return Ok(stored.root);
    };
    let given = builtins::root(Some(dir))?;
    // Compared as the file system resolves them, so a symlink to the same place matches.
    if stored.root.canonicalize().ok().as_deref() == Some(given.as_path()) {
        return Ok(given);
    }
    if !p.move_root {
        return Err(Fail::usage(format!(
            "{source}: --root {dir} is not the run's root {kept} (kept with it when it suspended); \
             leave --root out to go on in {kept}, or add --move-root to confine its tools to {} from now on",
            given.display()
        )));
    }
    eprintln!("nexus: the run's root moves from {kept} to {}", given.display());
    Ok(given)
}

/// The machine's snapshot in a kept state, without its envelope: what the
/// resume feeds, records and compares.
pub fn machine_state(state: &[u8], source: &str) -> Result<Vec<u8>, Fail> {
    workdir::strip(state).map_err(|e| Fail::runtime(format!("{source}: {e}")))
}

/// `nexus resume --state FILE`.
fn resume_file(p: &ResumeArgs, state_path: &str) -> Result<i32, Fail> {
    let state = fs::read(state_path).map_err(|e| Fail::runtime(format!("cannot read state file {state_path}: {e}")))?;
    Run::restore(&state).map_err(|e| Fail::runtime(format!("state file {state_path}: {e}")))?;
    let root = resume_root(p, &state, &format!("state file {state_path}"))?;
    let state = machine_state(&state, state_path)?;
    let (host, answers) = split_host(&state, load_answers(p.answer.as_deref().unwrap_or("-"))?);
    check_answers(&state, &answers, state_path)?;
    // Authorizations the run waits for are completed first; the file is
    // replaced only when the run suspends again (or removed when it ends).
    let state = settle_host(p, &state, host)?;
    let run = Run::restore(&state).map_err(|e| Fail::runtime(format!("state file {state_path}: {e}")))?;
    let keep = Keep::File { path: PathBuf::from(state_path), resumed: true };
    let (client, record, _mcp) = resume_client(p, &run, &state, &root)?;
    // The output spec is the run's, kept in its state.
    let typed = run.config().output.is_some();
    let ctx = Ctx { root, json: p.json, stream: p.stream, typed, keep, record };
    let items = client.stream_resume(&state, answers);
    finish(&ctx, items)
}

/// `nexus resume --store STORE --run ID`: everything that can be refused is
/// checked on a look at the stored run before it is claimed, so a mistake
/// leaves the store untouched; once claimed, any failure gives it back.
fn resume_stored(p: &ResumeArgs, spec: &str, id: &str) -> Result<i32, Fail> {
    let store = Store::open(spec, false)?;
    let label = format!("run {id} in {spec}");
    let peeked = store.peek(id)?;
    let run = Run::restore(&peeked).map_err(|e| Fail::runtime(format!("{label}: {e}")))?;
    let (host, answers) = split_host(&peeked, load_answers(p.answer.as_deref().unwrap_or("-"))?);
    check_answers(&peeked, &answers, &label)?;
    api_key(p.api_key_env.as_deref(), run.config().style)?;
    let root = resume_root(p, &peeked, &label)?;

    let lease_ms = p.lease.saturating_mul(1000);
    let held = store.claim(id, lease_ms)?;
    // Renewed from now on, so a long preparation (MCP servers starting, an
    // authorization completed) keeps the claim too; a loss cancels the run.
    let cancel = CancelToken::new();
    let heartbeat = match store.heartbeat(&held, lease_ms, cancel.clone()) {
        Ok(h) => h,
        Err(fail) => return Err(release_after(&store, &held, fail, false)),
    };
    let answers = with_recorded(answers, &held.recorded);
    // The record may have moved on between the look and the claim (another
    // resume suspended it again), and recorded answers join ours: check again.
    // Authorizations the run waits for are completed under the claim.
    let prepared = machine_state(&held.state, &label).and_then(|claimed| {
        Run::restore(&claimed).map_err(|e| Fail::runtime(format!("{label}: {e}")))?;
        check_answers(&claimed, &answers, &label)?;
        let state = settle_host(p, &claimed, host)?;
        let run = Run::restore(&state).map_err(|e| Fail::runtime(format!("{label}: {e}")))?;
        resume_client(p, &run, &state, &root).map(|ready| (ready, state))
    });
    let ((client, record, _mcp), state) = match prepared {
        Ok(ready) => ready,
        // Refused before anything ran: the claim goes back as it was.
        Err(fail) => {
            return Err(match heartbeat.and_then(Heartbeat::stop) {
                Some(lost) => store.claim_lost(&held, &lost),
                None => release_after(&store, &held, fail, false),
            })
        }
    };
    let client = client.with_cancel(cancel);
    // The stream takes its own copy of the state, so the claim can move into the context.
    let items = client.stream_resume(&state, answers);
    let typed = run.config().output.is_some();
    let keep = Keep::Store { store: Box::new(store), held: Some(held) };
    let ctx = Ctx { root, json: p.json, stream: p.stream, typed, keep, record };
    let outcome = finish(&ctx, items);
    // A claim lost mid-run: the run was cancelled and the store refused its
    // outcome; say why, whatever the run ended with.
    match (heartbeat.and_then(Heartbeat::stop), &ctx.keep) {
        (Some(lost), Keep::Store { store, held: Some(held) }) => Err(store.claim_lost(held, &lost)),
        _ => outcome,
    }
}

/// The answers to `state`'s host requests (the authorizations a run waits
/// for before its first model call), and the others.
fn split_host(state: &[u8], answers: Vec<Answer>) -> (Vec<Answer>, Vec<Answer>) {
    let Ok(run) = Run::restore(state) else {
        return (Vec::new(), answers);
    };
    answers.into_iter().partition(|a| run.host_requests().iter().any(|r| r.id == a.id))
}

/// Completes the authorizations answered in `host` and adds the servers'
/// tools to the run: the state to resume from.
fn settle_host(p: &ResumeArgs, state: &[u8], host: Vec<Answer>) -> Result<Vec<u8>, Fail> {
    if host.is_empty() {
        return Ok(state.to_vec());
    }
    let servers = mcp::configs(&p.mcp)?;
    Ok(crate::mcp_auth::settle(&servers, state, host)?.0)
}

/// The answers given, then those recorded in the store for requests they
/// do not answer (the store asks a claimer to feed every recorded answer;
/// for a request answered both ways, the one given here wins).
fn with_recorded(mut answers: Vec<Answer>, recorded: &[Answer]) -> Vec<Answer> {
    for a in recorded {
        if !answers.iter().any(|b| b.id == a.id) {
            answers.push(a.clone());
        }
    }
    answers
}

/// The client that continues `run` (its config and tools, the key from the
/// environment again), the cassette it appends to, and the MCP servers its
/// MCP tools run on (kept for the resume: dropping them stops the servers).
fn resume_client(p: &ResumeArgs, run: &Run, state: &[u8], root: &Path) -> Result<Resumed, Fail> {
    let config: RunConfig = run.config().clone();
    let key = api_key(p.api_key_env.as_deref(), config.style)?;
    let (mcp_decls, others): (Vec<ToolDecl>, Vec<ToolDecl>) =
        run.tools().iter().cloned().partition(|d| d.kind != ToolKind::Relay && d.name.contains("__"));
    // Sub-agents are tools of the run the machine serves, not the toolbox.
    let agent_names: Vec<&str> = config.agents.iter().flat_map(|a| a.agents.iter()).map(|a| a.name.as_str()).collect();
    let others: Vec<ToolDecl> = others.into_iter().filter(|d| !agent_names.contains(&d.name.as_str())).collect();
    let mut toolbox: Toolbox = tools::rebind(&others, root)?;
    let servers = mcp::configs(&p.mcp)?;
    let mcp_tools = match (mcp_decls.is_empty(), servers.is_empty()) {
        (true, _) => None,
        (false, true) => {
            let names: Vec<&str> = mcp::mcp_names(&mcp_decls);
            return Err(Fail::usage(format!(
                "the saved run uses MCP tools ({}); give the same --mcp FILE(s) as the run had",
                names.join(", ")
            )));
        }
        (false, false) => {
            // A resumed run is a kept one: a person's step suspends it again.
            let (m, _) = mcp::start_for_run(&servers, true)?;
            let drift = m.drift(&mcp_decls, &servers);
            if !drift.is_empty() && !p.accept_tool_changes {
                let list: Vec<String> = drift.iter().map(|d| d.to_string()).collect();
                return Err(Fail::runtime(format!(
                    "{}; the model chose these tools for what they meant then (resume with --accept-tool-changes to go on anyway)",
                    list.join("; ")
                )));
            }
            for d in &drift {
                eprintln!("nexus: {d}");
            }
            for t in m.dyn_tools() {
                if mcp_decls.iter().any(|d| d.name == t.decl().name) {
                    toolbox.add_dyn(t).map_err(|e| Fail::usage(format!("MCP: {e}")))?;
                }
            }
            Some(m)
        }
    };
    let uses_skills = run.tools().iter().any(|d| d.name == nexus_drive::skills::SKILL_TOOL);
    let found = skills::load(&p.skills, None)?;
    if uses_skills && found.is_none() {
        return Err(Fail::usage(
            "the saved run uses Agent Skills: give its --skills DIR again (its skills' files are read from there)",
        ));
    }
    // A sub-agent's tools are bound again from its declarations in the state, like the run's own.
    let agent_tools = crate::agents::from_state(&config, &|decls| tools::rebind(decls, root))?;
    let mut b = ClientBuilder::from_run_config(config).api_key(key.clone()).toolbox(toolbox);
    for name in p.approve.iter().filter(|n| !n.trim().is_empty()) {
        b = b.needs_approval(name.trim(), true);
    }
    for agent in agent_tools {
        b = b.agent(agent);
    }
    if let Some(found) = found {
        b = b.skills(found.skills);
    }
    // The fallbacks come from the state; their keys from --fallback or the environment.
    let mut keys = vec![key.clone()];
    for spec in &p.fallback {
        if let (upstream, Some(k)) = fallback(spec)? {
            keys.push(k.clone());
            b = b.upstream_key(upstream, k);
        }
    }
    for u in run.config().upstreams().iter().skip(1) {
        if let Some(k) = std::env::var(u.style.api_key_env()).ok().filter(|k| !k.trim().is_empty()) {
            keys.push(k);
        }
    }
    if let Some(t) = crate::telemetry::for_run(p.traceparent.as_deref())? {
        b = b.telemetry(t);
    }
    let record = recorder(p.record.as_deref(), true, &keys)?;
    if let Some(r) = &record {
        r.resume(state);
        b = b.tap(r.clone());
    }
    Ok((Client::new(b.build().map_err(drive_fail)?), record, mcp_tools))
}

/// What a resume runs with.
type Resumed = (Client, Option<Arc<Recorder>>, Option<McpTools>);

/// `ANSWERS.json`: one answer or an array of them.
fn load_answers(path: &str) -> Result<Vec<Answer>, Fail> {
    if let Some(answer) = crate::mcp_auth::answer_shorthand(path) {
        return Ok(vec![answer]);
    }
    let bytes = read_input(path)?;
    let value: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| Fail::usage(format!("{path}: not JSON: {e}")))?;
    let answers = if value.is_array() {
        serde_json::from_value::<Vec<Answer>>(value)
    } else {
        serde_json::from_value::<Answer>(value).map(|a| vec![a])
    };
    let answers = answers.map_err(|e| {
        Fail::usage(format!("{path}: not an answer ({{\"id\", \"ok\", \"data\"?}}) or an array of them: {e}"))
    })?;
    if answers.is_empty() {
        return Err(Fail::usage(format!("{path}: no answer in it")));
    }
    Ok(answers)
}

/// Feeds the answers to a scratch copy of the run first, so an answer the
/// run would refuse is reported before anything is sent, recorded or written.
/// `source` names where the run came from, for messages.
fn check_answers(state: &[u8], answers: &[Answer], source: &str) -> Result<(), Fail> {
    let mut probe = Run::restore(state).map_err(|e| Fail::runtime(format!("{source}: {e}")))?;
    let mut now = Timestamp(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0));
    for a in answers {
        let fed = match probe.handle_input(now, Input::Answer(a.clone())) {
            Err(InputError::TimeWentBackwards { last, .. }) => {
                now = Timestamp(last);
                probe.handle_input(now, Input::Answer(a.clone()))
            }
            other => other,
        };
        match fed {
            Ok(()) => {}
            Err(InputError::Finished) => {
                return Err(Fail::runtime(format!(
                    "the run in {source} has already finished; there is nothing to answer"
                )))
            }
            Err(e) => {
                let ids: Vec<String> = Run::restore(state)
                    .map(|r| r.outstanding().into_iter().map(|r| r.id).collect())
                    .unwrap_or_default();
                return Err(Fail::runtime(format!(
                    "{e} (outstanding: {}); nothing was changed",
                    if ids.is_empty() { "none".to_string() } else { ids.join(", ") }
                )));
            }
        }
    }
    Ok(())
}

/// Pumps the run, shows it, and turns its end into an exit code.
fn finish(ctx: &Ctx, items: impl Iterator<Item = Result<StreamItem, DriveError>>) -> Result<i32, Fail> {
    let mut streamed_text = false;
    let mut result = None;
    for item in items {
        match item {
            Ok(StreamItem::Event(ev)) => {
                if ctx.stream && ctx.json {
                    out(&serde_json::to_string(&ev).unwrap_or_default());
                } else if let StreamEvent::SkillActivated { name, .. } = &ev {
                    // Not part of the answer: the host's note of what the model loaded.
                    if !ctx.json {
                        eprintln!("nexus: skill {name} loaded");
                    }
                } else if ctx.stream && !ctx.typed {
                    // A typed run's answer is its value, printed at the end.
                    if let StreamEvent::TextDelta { text } = &ev {
                        out_inline(text);
                        streamed_text = true;
                    }
                }
            }
            Ok(StreamItem::Done(r)) => {
                result = Some(r);
                break;
            }
            Err(e) => {
                if streamed_text {
                    out("");
                }
                let fail = drive_fail(e);
                close_record(ctx)?;
                return Err(give_back(ctx, fail));
            }
        }
    }
    if streamed_text {
        out("");
    }
    let Some(result) = result else {
        close_record(ctx)?;
        return Err(give_back(ctx, Fail::runtime("the run ended without a result")));
    };
    let code = match result.status {
        RunStatus::Done => 0,
        RunStatus::Pending => 3,
        RunStatus::Incomplete => 4,
    };
    if result.status == RunStatus::Pending {
        save_state(ctx, &result)?;
    } else {
        match &ctx.keep {
            // The run this file held is over; leaving it would invite a second resume.
            Keep::File { path, resumed: true } => {
                let _ = fs::remove_file(path);
            }
            Keep::Store { store, held: Some(held) } => store.finish(held)?,
            _ => {}
        }
    }
    close_record(ctx)?;
    show(ctx, &result, streamed_text);
    Ok(code)
}

/// A resume that failed gives its claim back with the state it found
/// (nothing it did is saved, as with a state file left as it was), so the
/// run can be resumed again.
fn give_back(ctx: &Ctx, fail: Fail) -> Fail {
    match &ctx.keep {
        Keep::Store { store, held: Some(held) } => release_after(store, held, fail, true),
        _ => fail,
    }
}

/// Gives `held` back unchanged after `fail`, which is what the command
/// reports; a release that fails too is added to its message. `failed`:
/// the resume ran and failed, and the store keeps `fail`'s message (SQLite
/// counts it); otherwise it was refused before anything ran.
pub fn release_after(store: &Store, held: &Held, fail: Fail, failed: bool) -> Fail {
    let released = store.release(held, failed.then_some(fail.message.as_str()));
    match released {
        Ok(()) => fail,
        Err(e) => Fail { code: fail.code, message: format!("{}; and {}", fail.message, e.message) },
    }
}

fn save_state(ctx: &Ctx, result: &RunResult) -> Result<(), Fail> {
    let Some(s) = &result.suspended else {
        return Err(give_back(ctx, Fail::runtime("the run is pending but the driver gave no state to save")));
    };
    // The root goes with the run (the state's envelope, not the machine's state).
    let state = workdir::attach(&s.state, &Workdir::new(&ctx.root))
        .map_err(|e| give_back(ctx, Fail::runtime(format!("cannot keep the run's root with it: {e}"))))?;
    match &ctx.keep {
        Keep::File { path, .. } => write_atomic(path, &state)
            .map_err(|e| Fail::runtime(format!("cannot write state file {}: {e}", path.display())))?,
        Keep::Store { store, held: None } => store.insert(&SuspendedRun { state, ..s.clone() })?,
        Keep::Store { store, held: Some(held) } => store.suspend(held, &state)?,
    }
    if let Some(r) = &ctx.record {
        r.pending(&s.pending);
    }
    Ok(())
}

fn close_record(ctx: &Ctx) -> Result<(), Fail> {
    match &ctx.record {
        Some(r) => r.finish().map_err(|e| Fail::runtime(format!("recording failed: {e}"))),
        None => Ok(()),
    }
}

/// The id a stored run is kept under (`None` with a state file).
fn stored_id<'a>(ctx: &'a Ctx, result: &'a RunResult) -> Option<&'a str> {
    match &ctx.keep {
        Keep::File { .. } => None,
        Keep::Store { held: Some(held), .. } => Some(&held.run_id),
        Keep::Store { held: None, .. } => result.suspended.as_ref().map(|s| s.run_id.as_str()),
    }
}

fn show(ctx: &Ctx, result: &RunResult, streamed_text: bool) {
    let run_id = stored_id(ctx, result);
    let pending = nexus_drive::machine_json::pending(result);
    if ctx.json {
        let mut value = serde_json::to_value(result).unwrap_or_default();
        if let Some(obj) = value.as_object_mut() {
            if let Some(id) = run_id {
                obj.insert("runId".into(), id.into());
            }
            if !result.pending.is_empty() {
                obj.insert("pending".into(), pending.clone());
            }
        }
        out(&value.to_string());
    }
    match result.status {
        _ if ctx.json && result.status != RunStatus::Pending => {}
        RunStatus::Done => match &result.output {
            Some(value) => out(&serde_json::to_string_pretty(value).unwrap_or_default()),
            None if !streamed_text => out(&result.text),
            None => {}
        },
        RunStatus::Incomplete => {
            if !streamed_text && !result.text.is_empty() {
                out(&result.text);
            }
            eprintln!("nexus: run incomplete: the {} limit stopped it", result.limit.as_deref().unwrap_or("turn"));
        }
        RunStatus::Pending => {
            if !ctx.json {
                if let Some(id) = run_id {
                    out(id);
                }
                out(&serde_json::to_string_pretty(&pending).unwrap_or_default());
            }
            match (&ctx.keep, run_id) {
                (Keep::Store { store, .. }, Some(id)) => eprintln!(
                    "nexus: run suspended on {} request(s); stored as run {id} in {}. Continue with: nexus resume --store {} --run {id} --answer ANSWERS.json",
                    result.pending.len(),
                    store.spec,
                    store.spec
                ),
                (Keep::File { path, .. }, _) => eprintln!(
                    "nexus: run suspended on {} request(s); state saved to {}. Continue with: nexus resume --state {} --answer ANSWERS.json",
                    result.pending.len(),
                    path.display(),
                    path.display()
                ),
                (Keep::Store { .. }, None) => {}
            }
        }
    }
}

/// Replaces `path` so that a crash leaves either the old or the new file,
/// never a torn one: a temporary file in the same directory, synced, then
/// renamed over it, then the directory synced.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "state".into());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            // The state holds the conversation: keep it to its owner.
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
        return written;
    }
    if let Ok(d) = fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}
