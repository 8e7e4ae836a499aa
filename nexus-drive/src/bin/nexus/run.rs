//! `nexus run` and `nexus resume`: the loop against a provider, with the
//! state written to a file when the run suspends and continued from it by
//! another process.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use nexus_drive::blocking::Client;
use nexus_drive::cassette::Recorder;
use nexus_drive::{ClientBuilder, ClientConfig, DriveError, RunResult, RunStatus, StreamItem, Toolbox};
use nexus_proto::{Answer, Input, InputError, Run, RunConfig, StreamEvent, Style, Timestamp};

use crate::args::{parse, Parsed, Spec};
use crate::{builtins, out, out_inline, parse_style, read_input, tools, Fail};

const RUN_SPEC: Spec = Spec {
    command: "run",
    values: &["style", "base-url", "model", "api-key-env", "system", "max-turns", "relay", "state", "record"],
    switches: &["stream", "json"],
    optional: &["builtins"],
};

const RESUME_SPEC: Spec = Spec {
    command: "resume",
    values: &["state", "answer", "api-key-env", "record"],
    switches: &["json", "stream"],
    optional: &[],
};

/// Where a suspended run's state goes unless `--state` says otherwise.
pub const DEFAULT_STATE: &str = "nexus-state.json";

pub const RUN_HELP: &str = "\
nexus run [--style anthropic|openai|gemini] [--base-url URL] [--model M]
          [--api-key-env VAR] [--system TEXT] [--max-turns N] [--stream]
          [--relay TOOLS.json] [--builtins[=NAMES]] [--state FILE]
          [--record FILE] [--json] PROMPT

Runs the tool-calling loop on PROMPT (`-` reads it from standard input).

  --style        wire format (default openai)
  --base-url     API base URL (default: the provider's public one)
  --model        model id (defaults: claude-sonnet-4-5, gpt-4o-mini, gemini-2.5-flash)
  --api-key-env  the variable holding the API key (default ANTHROPIC_API_KEY,
                 OPENAI_API_KEY or GEMINI_API_KEY)
  --relay        a JSON array of {name, description, input_schema}: tools the
                 model may call that run elsewhere; their calls suspend the run
                 with one `tool_call` request per turn
  --builtins     turn on the built-in tools (bash, read, write, edit, grep, glob,
                 webfetch, question, apply_patch, todowrite), or only a comma list
                 of them; path tools are confined to the current directory
  --state        where the state goes when the run suspends (default nexus-state.json);
                 it never contains the API key
  --record       write the session to a cassette (see nexus replay)
  --stream       print text as it arrives (with --json: every event as a JSON line)
  --json         print the result as one JSON object: status, text, toolCalls,
                 turns, usage, model, limit (when incomplete), pending (when pending)

exit codes: 0 done · 3 pending (state written) · 4 incomplete · 2 usage or config error · 1 runtime error";

pub const RESUME_HELP: &str = "\
nexus resume --state FILE --answer ANSWERS.json [--api-key-env VAR] [--record FILE] [--json] [--stream]

Continues a suspended run in this process. ANSWERS.json holds one answer or
an array of them: {\"id\": \"<request id>\", \"ok\": true, \"data\": {...}}; a relay
(`tool_call`) request is answered with data.results: [{id, output, isError}].
Answers for only some requests leave the run pending on the rest (the state
file is replaced atomically); an answer whose id matches no outstanding
request changes nothing and exits 1. When the run finishes, the state file
is removed. The API key is read from the environment again. With --record,
the session is appended to that cassette.";

fn default_model(style: Style) -> &'static str {
    match style {
        Style::Anthropic => "claude-sonnet-4-5",
        Style::OpenAi => "gpt-4o-mini",
        Style::Gemini => "gemini-2.5-flash",
    }
}

/// Reads the API key from `--api-key-env` or the style's usual variable.
fn api_key(p: &Parsed, style: Style) -> Result<String, Fail> {
    let var = p.value("api-key-env").unwrap_or(style.api_key_env());
    match std::env::var(var) {
        Ok(k) if !k.trim().is_empty() => Ok(k),
        _ => Err(Fail::usage(format!("no API key: set {var} (or name another variable with --api-key-env)"))),
    }
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
fn recorder(p: &Parsed, append: bool, key: &str) -> Result<Option<Arc<Recorder>>, Fail> {
    let Some(path) = p.value("record") else {
        return Ok(None);
    };
    let path = Path::new(path);
    let rec = if append { Recorder::append(path) } else { Recorder::create(path) }
        .map_err(|e| Fail::runtime(format!("cannot record to {}: {e}", path.display())))?;
    rec.set_api_key(key);
    Ok(Some(Arc::new(rec)))
}

struct Ctx {
    json: bool,
    stream: bool,
    state: PathBuf,
    record: Option<Arc<Recorder>>,
    /// The run was resumed from `state`: remove it once the run is over.
    resumed: bool,
}

/// Runs `nexus run`.
pub fn run_main(args: &[String]) -> Result<i32, Fail> {
    let p = parse(args, &RUN_SPEC)?;
    let prompt = match p.positionals.as_slice() {
        [] => return Err(Fail::usage("run needs a PROMPT (or - to read it from standard input)")),
        [one] if one == "-" => {
            String::from_utf8(read_input("-")?).map_err(|_| Fail::usage("the prompt is not UTF-8"))?
        }
        many => many.join(" "),
    };
    if prompt.trim().is_empty() {
        return Err(Fail::usage("the prompt is empty"));
    }
    let style = p.value("style").map(parse_style).transpose()?.unwrap_or(Style::OpenAi);
    let model = p.value("model").unwrap_or(default_model(style));
    let max_turns: Option<u32> = p.number("max-turns")?;
    if max_turns == Some(0) {
        return Err(Fail::usage("--max-turns must be at least 1"));
    }
    let builtin_tools = if p.switch("builtins") { builtins::select(p.value("builtins"))? } else { Vec::new() };
    let relay = p.value("relay").map(tools::load_relay).transpose()?.unwrap_or_default();
    let toolbox = tools::toolbox(builtin_tools, relay)?;
    let key = api_key(&p, style)?;

    let mut b = ClientConfig::builder(style, model).api_key(key.clone()).toolbox(toolbox).stream(p.switch("stream"));
    if let Some(url) = p.value("base-url") {
        b = b.base_url(url);
    }
    if let Some(s) = p.value("system") {
        b = b.system(s);
    }
    if let Some(n) = max_turns {
        b = b.max_turns(n);
    }
    let record = recorder(&p, false, &key)?;
    if let Some(r) = &record {
        b = b.tap(r.clone());
    }
    let client = Client::new(b.build().map_err(drive_fail)?);
    let ctx = Ctx {
        json: p.switch("json"),
        stream: p.switch("stream"),
        state: PathBuf::from(p.value("state").unwrap_or(DEFAULT_STATE)),
        record,
        resumed: false,
    };
    let items = client.stream(prompt);
    finish(&ctx, items)
}

/// Runs `nexus resume`.
pub fn resume_main(args: &[String]) -> Result<i32, Fail> {
    let p = parse(args, &RESUME_SPEC)?;
    if let Some(extra) = p.positionals.first() {
        return Err(Fail::usage(format!(
            "resume takes no positional argument (got {extra:?}); answers go in --answer FILE"
        )));
    }
    let state_path = p.value("state").ok_or_else(|| Fail::usage("resume needs --state FILE"))?;
    let answer_path = p.value("answer").ok_or_else(|| Fail::usage("resume needs --answer ANSWERS.json"))?;
    let state = fs::read(state_path).map_err(|e| Fail::runtime(format!("cannot read state file {state_path}: {e}")))?;
    let run = Run::restore(&state).map_err(|e| Fail::runtime(format!("state file {state_path}: {e}")))?;
    let answers = load_answers(answer_path)?;
    check_answers(&state, &answers, state_path)?;

    let config: RunConfig = run.config().clone();
    let key = api_key(&p, config.style)?;
    let toolbox: Toolbox = tools::rebind(run.tools())?;
    let mut b = ClientBuilder::from_run_config(config).api_key(key.clone()).toolbox(toolbox);
    let record = recorder(&p, true, &key)?;
    if let Some(r) = &record {
        r.resume(&state);
        b = b.tap(r.clone());
    }
    let client = Client::new(b.build().map_err(drive_fail)?);
    let ctx = Ctx {
        json: p.switch("json"),
        stream: p.switch("stream"),
        state: PathBuf::from(state_path),
        record,
        resumed: true,
    };
    let items = client.stream_resume(&state, answers);
    finish(&ctx, items)
}

/// `ANSWERS.json`: one answer or an array of them.
fn load_answers(path: &str) -> Result<Vec<Answer>, Fail> {
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
fn check_answers(state: &[u8], answers: &[Answer], state_path: &str) -> Result<(), Fail> {
    let mut probe = Run::restore(state).map_err(|e| Fail::runtime(format!("state file {state_path}: {e}")))?;
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
                    "the run in {state_path} has already finished; there is nothing to answer"
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
                } else if ctx.stream {
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
                close_record(ctx)?;
                return Err(drive_fail(e));
            }
        }
    }
    if streamed_text {
        out("");
    }
    let Some(result) = result else {
        close_record(ctx)?;
        return Err(Fail::runtime("the run ended without a result"));
    };
    let code = match result.status {
        RunStatus::Done => 0,
        RunStatus::Pending => 3,
        RunStatus::Incomplete => 4,
    };
    if result.status == RunStatus::Pending {
        save_state(ctx, &result)?;
    } else if ctx.resumed {
        // The run this file held is over; leaving it would invite a second resume.
        let _ = fs::remove_file(&ctx.state);
    }
    close_record(ctx)?;
    show(ctx, &result, streamed_text);
    Ok(code)
}

fn save_state(ctx: &Ctx, result: &RunResult) -> Result<(), Fail> {
    let Some(s) = &result.suspended else {
        return Err(Fail::runtime("the run is pending but the driver gave no state to save"));
    };
    write_atomic(&ctx.state, &s.state)
        .map_err(|e| Fail::runtime(format!("cannot write state file {}: {e}", ctx.state.display())))?;
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

fn show(ctx: &Ctx, result: &RunResult, streamed_text: bool) {
    if ctx.json {
        out(&serde_json::to_string(result).unwrap_or_default());
    }
    match result.status {
        _ if ctx.json && result.status != RunStatus::Pending => {}
        RunStatus::Done => {
            if !streamed_text {
                out(&result.text);
            }
        }
        RunStatus::Incomplete => {
            if !streamed_text && !result.text.is_empty() {
                out(&result.text);
            }
            eprintln!("nexus: run incomplete: the {} limit stopped it", result.limit.as_deref().unwrap_or("turn"));
        }
        RunStatus::Pending => {
            if !ctx.json {
                out(&serde_json::to_string_pretty(&result.pending).unwrap_or_default());
            }
            eprintln!(
                "nexus: run suspended on {} request(s); state saved to {}. Continue with: nexus resume --state {} --answer ANSWERS.json",
                result.pending.len(),
                ctx.state.display(),
                ctx.state.display()
            );
        }
    }
}

/// Replaces `path` so that a crash leaves either the old or the new file,
/// never a torn one: a temporary file in the same directory, synced, then
/// renamed over it, then the directory synced.
fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
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
