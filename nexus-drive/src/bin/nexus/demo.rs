//! `nexus demo`: the main job, offline. A session recorded against a
//! provider is embedded in the binary and replayed through the real machine
//! with a readable trace: parallel tool calls, an approval answered in the
//! same process, then a follow-up whose approval suspends the run — its
//! state goes to a file and a new process resumes it.
//!
//! `nexus demo --record FILE --base-url URL` runs the same session live and
//! writes the cassette (this is how the embedded ones are made; the test
//! `cli_demo` re-records them against the fake provider and compares).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use nexus_drive::blocking::Client;
use nexus_drive::cassette::{replay, Cassette, Recorder};
use nexus_drive::{ClientBuilder, ClientConfig, DynTool, ToolError, ToolOutcome};
use nexus_proto::{Answer, Request, Run, Style};
use serde_json::{json, Value};

use crate::cli::StyleParser;
use crate::trace::Trace;
use crate::{out, Fail};

/// A recorded session replayed offline through the real machine
///
/// Replays a recorded session offline through the real state machine and
/// prints its trace: two tool calls in parallel, an approval answered in the
/// same process, then a follow-up whose approval suspends the run — the state
/// goes to a file and a new process resumes it with the answer. Every request
/// the machine builds is checked byte for byte against the recording.
#[derive(clap::Args)]
pub struct DemoArgs {
    /// The wire format of the recording shown.
    #[arg(long, value_parser = StyleParser, default_value = "anthropic")]
    style: Style,
    /// Record the session afresh to this cassette, against --base-url (how
    /// the embedded cassettes are made).
    #[arg(long, value_name = "FILE", hide = true, requires = "base_url")]
    record: Option<String>,
    /// The provider to record against.
    #[arg(long, value_name = "URL", hide = true)]
    base_url: Option<String>,
    /// The variable holding the API key for recording (default: the style's usual one).
    #[arg(long, value_name = "VAR", hide = true)]
    api_key_env: Option<String>,
}

/// The model the demo session is recorded with.
pub const MODEL: &str = "nexus-demo";

const SYSTEM: &str = "You are a travel assistant. Use the tools; ask before booking or sending anything.";
const PROMPT_1: &str = "I'm in Paris on Friday with a friend. What's the weather there, how many bags do we have if I \
bring 2 and she brings 3, and could you book a table for two at Le Petit Zinc at 20:00?";
const PROMPT_2: &str = "Great. Please email the plan to sam@example.com.";

const CASSETTE_ANTHROPIC: &str = include_str!("../../../../examples/cassettes/demo-anthropic.jsonl");
const CASSETTE_OPENAI: &str = include_str!("../../../../examples/cassettes/demo-openai.jsonl");
const CASSETTE_GEMINI: &str = include_str!("../../../../examples/cassettes/demo-gemini.jsonl");
const CASSETTE_RESPONSES: &str = include_str!("../../../../examples/cassettes/demo-openai-responses.jsonl");

fn embedded(style: Style) -> &'static str {
    match style {
        Style::Anthropic => CASSETTE_ANTHROPIC,
        Style::OpenAi => CASSETTE_OPENAI,
        Style::Gemini => CASSETTE_GEMINI,
        Style::OpenAiResponses => CASSETTE_RESPONSES,
    }
}

/// Runs `nexus demo`.
pub fn main(args: DemoArgs) -> Result<i32, Fail> {
    let style = args.style;
    if let (Some(path), Some(base)) = (&args.record, &args.base_url) {
        let var = args.api_key_env.as_deref().unwrap_or(style.api_key_env());
        let key = std::env::var(var).map_err(|_| Fail::usage(format!("no API key: set {var}")))?;
        record(style, base, &key, Path::new(path))?;
        return Ok(0);
    }
    show(style)
}

fn show(style: Style) -> Result<i32, Fail> {
    let cassette =
        Cassette::parse(embedded(style)).map_err(|e| Fail::runtime(format!("the embedded cassette: {e}")))?;
    let dir = std::env::temp_dir().join(format!("nexus-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Fail::runtime(format!("cannot create {}: {e}", dir.display())))?;
    out(&format!(
        "nexus demo — a session recorded against a provider speaking the {} wire format, replayed\n\
         offline through the real state machine. Responses, tool results and answers come from the\n\
         recording (examples/cassettes/demo-{}.jsonl); every request the machine builds is checked\n\
         byte for byte against it.",
        style.name(),
        style.name()
    ));
    let mut trace = Trace::new(Some(dir.clone()), false);
    let done = replay(&cassette, &mut trace);
    let _ = std::fs::remove_dir_all(&dir);
    let done = done.map_err(|e| Fail::runtime(format!("demo: {e}")))?;
    out("");
    out(&crate::replay::summary(&done));
    out("Next: `nexus run --help` to run the loop against a real provider, `nexus replay FILE` for your own recordings.");
    Ok(0)
}

// ---------------------------------------------------------------- the live session

/// The demo's tools. Their results depend on their arguments only, so a
/// recording is reproducible.
fn demo_tools() -> Vec<DynTool> {
    let get_weather = DynTool::new(
        "get_weather",
        "Current weather for a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |args, _ctx| {
            let city = args.get("city").and_then(Value::as_str).unwrap_or("");
            let weather = match city {
                "Paris" => "18°C, sunny",
                "Tokyo" => "24°C, light rain",
                _ => "20°C, clear",
            };
            Ok(ToolOutcome::Done(Value::String(format!("{city}: {weather}"))))
        },
    );
    let add = DynTool::new(
        "add",
        "Adds a and b.",
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
        |args, _ctx| {
            let n = |k: &str| {
                args.get(k).and_then(Value::as_f64).ok_or_else(|| ToolError::msg(format!("{k} must be a number")))
            };
            let sum = n("a")? + n("b")?;
            // Whole numbers read as such (`5`, not `5.0`).
            let whole = sum.fract() == 0.0 && sum.abs() < 9e15;
            Ok(ToolOutcome::Done(if whole { json!(sum as i64) } else { json!(sum) }))
        },
    );
    let book_table = DynTool::new(
        "book_table",
        "Books a restaurant table. Needs the user's approval.",
        json!({"type": "object", "properties": {
            "restaurant": {"type": "string"}, "time": {"type": "string"}, "guests": {"type": "integer"}
        }, "required": ["restaurant", "time", "guests"]}),
        |args, ctx| {
            let s = |k: &str| {
                args.get(k).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).unwrap_or_default()
            };
            let (restaurant, time, guests) = (s("restaurant"), s("time"), s("guests"));
            if ctx.answer().is_none() {
                let prompt = format!("Book a table for {guests} at {restaurant} at {time}?");
                return Ok(ToolOutcome::Pending(Request::new("approval", prompt)));
            }
            let initials: String = restaurant.split_whitespace().filter_map(|w| w.chars().next()).collect();
            let code = format!("{}-{}", initials.to_uppercase(), time.replace(':', ""));
            Ok(ToolOutcome::Done(Value::String(format!(
                "Booked: table for {guests} at {restaurant}, {time} (confirmation {code})"
            ))))
        },
    );
    let send_email = DynTool::new(
        "send_email",
        "Sends an email. Needs the user's approval.",
        json!({"type": "object", "properties": {
            "to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}
        }, "required": ["to", "subject", "body"]}),
        |args, ctx| {
            let to = args.get("to").and_then(Value::as_str).unwrap_or("").to_string();
            let subject = args.get("subject").and_then(Value::as_str).unwrap_or("").to_string();
            if ctx.answer().is_none() {
                return Ok(ToolOutcome::Pending(Request::new(
                    "approval",
                    format!("Send an email to {to} with subject {subject:?}?"),
                )));
            }
            Ok(ToolOutcome::Done(Value::String(format!("Sent to {to}: {subject:?}"))))
        },
    );
    vec![get_weather, add, book_table, send_email]
}

fn builder(style: Style, base: &str, key: &str, rec: &Arc<Recorder>) -> Result<ClientBuilder, Fail> {
    let mut b = ClientConfig::builder(style, MODEL).base_url(base).api_key(key).system(SYSTEM).tap(rec.clone());
    for t in demo_tools() {
        b = b.dyn_tool(t);
    }
    Ok(b)
}

/// Runs the demo session live against `base` and writes its cassette.
fn record(style: Style, base: &str, key: &str, path: &Path) -> Result<(), Fail> {
    let fail = |e: nexus_drive::DriveError| Fail::runtime(e.to_string());
    let rec = Arc::new(
        Recorder::create(path).map_err(|e| Fail::runtime(format!("cannot record to {}: {e}", path.display())))?,
    );
    rec.set_api_key(key);

    // Run 1: the host answers approvals in the same process.
    let approve = |r: Request| Answer::ok(r.id, None);
    let cfg = builder(style, base, key, &rec)?.seed(1).wait_for(approve).build().map_err(fail)?;
    let first = Client::new(cfg).run(PROMPT_1).map_err(fail)?;
    if first.is_pending() || first.text.is_empty() {
        return Err(Fail::runtime(format!("run 1 did not finish: {:?}", first.status)));
    }

    // Run 2: no in-process answerer, so the approval suspends the run and its state is stored.
    let cfg = builder(style, base, key, &rec)?.seed(2).build().map_err(fail)?;
    let second = Client::new(cfg).run_with_history(first.messages.clone(), PROMPT_2).map_err(fail)?;
    let Some(suspended) = second.suspended.clone().filter(|_| second.is_pending()) else {
        return Err(Fail::runtime(format!("run 2 did not suspend: {:?}", second.status)));
    };
    let state_file = PathBuf::from(format!("{}.state.json", path.display()));
    std::fs::write(&state_file, &suspended.state).map_err(|e| Fail::runtime(e.to_string()))?;
    rec.pending(&suspended.pending);

    // …and a fresh client, as a new process would, resumes it from the file.
    let state = std::fs::read(&state_file).map_err(|e| Fail::runtime(e.to_string()))?;
    let _ = std::fs::remove_file(&state_file);
    let restored = Run::restore(&state).map_err(|e| Fail::runtime(e.to_string()))?;
    let answers: Vec<Answer> = restored.outstanding().into_iter().map(|r| Answer::ok(r.id, None)).collect();
    let mut b = ClientBuilder::from_run_config(restored.config().clone()).api_key(key).tap(rec.clone());
    for t in demo_tools() {
        b = b.dyn_tool(t);
    }
    rec.resume(&state);
    let third = Client::new(b.build().map_err(fail)?).resume(&state, answers).map_err(fail)?;
    if third.is_pending() {
        return Err(Fail::runtime("the resumed run is still pending"));
    }
    rec.finish().map_err(|e| Fail::runtime(format!("recording failed: {e}")))?;
    out(&format!("recorded {} ({} style)", path.display(), style.name()));
    Ok(())
}
