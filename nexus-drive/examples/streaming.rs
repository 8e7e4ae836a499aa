//! Streaming a run to the terminal: text as the model writes it, tool calls
//! and their results as they happen.
//!
//! ```text
//! cargo run -p nexus-drive --example streaming
//! ANTHROPIC_API_KEY=… cargo run -p nexus-drive --example streaming -- "Write a haiku about Paris weather"
//! ```
//!
//! `Client::stream` is an iterator of [`StreamItem`]s: the run's
//! [`StreamEvent`]s in order, then its result. With `.stream(true)` the
//! provider is asked for server-sent events and every delta is handed over
//! as soon as its bytes arrive; without it the same events come, one whole
//! response at a time. (The async client's `stream` is the same, as a
//! `futures_lite::Stream`.)

mod support;

use std::io::Write;

use nexus_drive::blocking::Client;
use nexus_drive::{DriveError, DynTool, StreamEvent, StreamItem, ToolOutcome};
use nexus_tests::fake::{Script, Turn};
use serde_json::{json, Value};

const FINAL: &str = "Paris is sunny today, around 18°C with a light breeze from the west. \
                     A fine afternoon for a walk along the Seine; take a jacket for the evening.";

/// The scripted model (offline); its text reaches the terminal in pieces.
fn script() -> Script {
    Script::new(vec![Turn::text("Let me look that up.").call("get_weather", r#"{"city": "Paris"}"#), Turn::text(FINAL)])
}

fn main() -> Result<(), DriveError> {
    let prompt = std::env::args().nth(1).unwrap_or_else(|| "How is the weather in Paris this afternoon?".to_string());
    let provider = support::Provider::pick(script());

    // A dynamic tool: name, description and schema as data, arguments as JSON.
    let weather = DynTool::new(
        "get_weather",
        "The current weather in a city.",
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        |args, _ctx| {
            let city = args.get("city").and_then(Value::as_str).unwrap_or("?");
            Ok(ToolOutcome::Done(json!(format!("{city}: 18°C, sunny, light west wind"))))
        },
    );
    let config =
        provider.builder().system("You are a cheerful weather assistant.").dyn_tool(weather).stream(true).build()?;
    let client = Client::new(config);

    let mut term = Terminal::default();
    for item in client.stream(prompt) {
        match item? {
            StreamItem::Event(event) => match event {
                StreamEvent::TurnStarted { turn } => term.line(format_args!("[turn {turn}]")),
                StreamEvent::TextDelta { text } => term.text(&text),
                StreamEvent::ToolCallFinished { call } => {
                    term.line(format_args!("[tool call {} {}]", call.name, call.input))
                }
                StreamEvent::ToolResult { name, result, .. } => {
                    term.line(format_args!("[tool result {name}: {}]", result.output))
                }
                StreamEvent::Retrying { attempt, delay_ms, reason } => {
                    term.line(format_args!("[retry {attempt} in {delay_ms} ms: {reason}]"))
                }
                // Reasoning, usage, argument pieces: not shown here.
                _ => {}
            },
            StreamItem::Done(result) => {
                let deltas = term.deltas;
                term.line(format_args!(
                    "---\nstatus: {:?}, turns: {}, text deltas: {deltas}, tokens: {}",
                    result.status, result.turns, result.usage.total_tokens
                ))
            }
        }
    }
    Ok(())
}

/// Text pieces as they come; other lines start on a line of their own.
#[derive(Default)]
struct Terminal {
    mid_line: bool,
    deltas: usize,
}

impl Terminal {
    fn text(&mut self, piece: &str) {
        let mut out = std::io::stdout().lock();
        let _ = write!(out, "{piece}");
        // Show each piece now, not when its line is complete.
        let _ = out.flush();
        self.deltas += 1;
        self.mid_line = !piece.ends_with('\n');
    }

    fn line(&mut self, line: std::fmt::Arguments<'_>) {
        if std::mem::take(&mut self.mid_line) {
            println!();
        }
        println!("{line}");
    }
}
