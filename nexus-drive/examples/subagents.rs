//! Sub-agents: the model delegates two tasks to two agents, each a child
//! run on its own model and wire format with its own tools; one child's
//! tool needs an approval, answered in-process through `wait_for`.
//!
//! ```text
//! cargo run -p nexus-drive --example subagents
//! NEXUS_STYLE=anthropic cargo run -p nexus-drive --example subagents
//! ```
//!
//! Offline only: a scripted provider on loopback plays all three models
//! (the planner on `NEXUS_STYLE`'s wire format, OpenAI's by default; the
//! researcher on Anthropic's; the booker on Gemini's). The machine runs the
//! tree: the children's model calls and tool calls come out of the parent
//! run with their ids qualified by the delegating call's id, the booker's
//! approval surfaces at the top as `<call id>/pnd_<its call id>`, and each
//! child's final text becomes its delegating call's result. Without
//! `wait_for` the run would return `pending` with one state holding the
//! whole tree, to be resumed in any process.

mod support;

use nexus_drive::blocking::Client;
use nexus_drive::{AgentTool, Answer, ClientConfig, DriveError, DynTool, Request, StreamEvent, Style, ToolOutcome};
use nexus_tests::fake::{FakeProvider, Script, Scripts, Turn};
use serde_json::{json, Value};
use support::fake_style;

const KEY: &str = "sk-scripted";

/// What the three scripted models say and call.
fn scripts() -> Scripts {
    Scripts::new(KEY)
        .model(
            "planner-model",
            Script::new(vec![
                Turn::default()
                    .call("researcher", r#"{"prompt": "When is the city museum open?"}"#)
                    .call("booker", r#"{"prompt": "Book two tickets for Saturday."}"#),
                Turn::text(
                    "The museum is open Tuesday to Sunday, 10:00-18:00, and your two Saturday tickets are booked.",
                ),
            ]),
        )
        .model(
            "researcher-model",
            Script::new(vec![
                Turn::default().call("lookup", r#"{"q": "city museum opening hours"}"#),
                Turn::text("Open Tuesday to Sunday, 10:00-18:00."),
            ]),
        )
        .model(
            "booker-model",
            Script::new(vec![
                Turn::default().call("book", r#"{"tickets": 2, "day": "Saturday"}"#),
                Turn::text("Booked 2 tickets for Saturday."),
            ]),
        )
}

fn lookup() -> DynTool {
    DynTool::new("lookup", "Looks a fact up", json!({"type": "object"}), |args, _| {
        println!("  [researcher's tool] lookup {}", args["q"]);
        Ok(ToolOutcome::Done(Value::String("city museum: Tue-Sun 10:00-18:00".into())))
    })
}

/// Books only once approved: the first execution asks.
fn book() -> DynTool {
    DynTool::new("book", "Books tickets (needs approval)", json!({"type": "object"}), |args, ctx| {
        if ctx.answer().is_none_or(|a| !a.ok) {
            return Ok(ToolOutcome::Pending(Request::new(
                "approval",
                format!("Book {} tickets for {}?", args["tickets"], args["day"]),
            )));
        }
        println!("  [booker's tool] booked {} tickets (key {})", args["tickets"], ctx.idempotency_key());
        Ok(ToolOutcome::Done(Value::String("confirmation B-1234".into())))
    })
}

fn main() -> Result<(), DriveError> {
    let style = std::env::var("NEXUS_STYLE").ok().and_then(|s| Style::parse(&s)).unwrap_or(Style::OpenAi);
    let fake = FakeProvider::start(scripts());
    eprintln!("# offline: a scripted provider at {}", fake.addr());

    let researcher = AgentTool::new("researcher", "Finds facts", Style::Anthropic, "researcher-model")
        .base_url(fake.base_url(fake_style(Style::Anthropic)))
        .api_key(KEY)
        .system("You research. Answer in one sentence.")
        .max_turns(4)
        .dyn_tool(lookup());
    let booker = AgentTool::new("booker", "Books tickets", Style::Gemini, "booker-model")
        .base_url(fake.base_url(fake_style(Style::Gemini)))
        .api_key(KEY)
        .system("You book tickets.")
        .dyn_tool(book());

    let config = ClientConfig::builder(style, "planner-model")
        .base_url(fake.base_url(fake_style(style)))
        .api_key(KEY)
        .system("You plan. Delegate research and bookings.")
        .agent(researcher)
        .agent(booker)
        .wait_for(|request: Request| {
            // The id says whose request it is: `<delegating call id>/<the child's id>`.
            println!("approving {} ({})", request.id, request.prompt);
            Answer::ok(request.id, None)
        })
        .on_event(|event| match event {
            StreamEvent::Agent { agent, event } => {
                if let StreamEvent::ToolResult { name, result, .. } = event.as_ref() {
                    println!("  [{agent}] result of {name}: {}", result.output);
                }
            }
            StreamEvent::ToolResult { name, result, .. } => println!("agent {name} answered: {}", result.output),
            _ => {}
        })
        .build()?;

    let result = Client::new(config).run("Find the museum's hours and book two tickets for Saturday.")?;
    println!("status: {:?}, turns: {}", result.status, result.turns);
    for a in &result.agents {
        println!("agent {} at {}: {} turns, {} tokens, {}", a.name, a.path, a.turns, a.usage.total_tokens, a.status);
    }
    println!("answer: {}", result.text);
    Ok(())
}
