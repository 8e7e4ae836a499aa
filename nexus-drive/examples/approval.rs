//! A tool that needs a human's approval, answered in-process through `wait_for`.
//!
//! ```text
//! cargo run -p nexus-drive --example approval               # asks on the terminal
//! echo y | cargo run -p nexus-drive --example approval      # approves
//! cargo run -p nexus-drive --example approval < /dev/null   # no answer: declined
//! ```
//!
//! The `transfer` tool does not move money on its first execution: it
//! suspends with an `approval` [`Request`]. The run hands every outstanding
//! request of the turn to the config's `wait_for` answerer (here: a question
//! on the terminal). On `ok: true` the same tool runs once more, with the
//! same arguments and the answer in its [`ToolContext`]; on `ok: false` it is
//! not run again and the model gets the error result `declined: <prompt>`.
//!
//! Without `wait_for`, the run would return `pending` with its state instead,
//! to be resumed later (see `durable_web_handler`).

mod support;

use std::io::{BufRead, Write};
use std::sync::Mutex;

use nexus_drive::blocking::Client;
use nexus_drive::{Answer, DriveError, Request, StreamEvent, Tool, ToolContext, ToolError, ToolOutcome};
use nexus_tests::fake::{Script, Turn};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, Deserialize)]
struct TransferArgs {
    to: String,
    amount: u64,
}

struct Transfer;

impl Tool for Transfer {
    const NAME: &'static str = "transfer";
    type Args = TransferArgs;
    type Output = String;

    fn description(&self) -> String {
        "Sends money to a person. Needs the account holder's approval.".into()
    }

    fn input_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "to": {"type": "string", "description": "Who receives the money"},
                "amount": {"type": "integer", "description": "US dollars"},
            },
            "required": ["to", "amount"],
        }))
    }

    fn call(&self, args: TransferArgs, ctx: &ToolContext) -> Result<ToolOutcome<String>, ToolError> {
        // The first execution asks; the execution after an `ok` answer acts.
        // (A declined request never comes back here.)
        if ctx.answer().is_none_or(|a| !a.ok) {
            let mut request = Request::new("approval", format!("Send ${} to {}?", args.amount, args.to));
            request.data = json!({"to": args.to, "amount": args.amount}).as_object().cloned();
            return Ok(ToolOutcome::Pending(request));
        }
        // The idempotency key is stable across retries and processes: a real
        // payment API would take it to make a repeated execution harmless.
        println!("  [tool] transfer executed: ${} to {} (key {})", args.amount, args.to, ctx.idempotency_key());
        Ok(ToolOutcome::Done(format!("sent ${} to {}", args.amount, args.to)))
    }
}

/// Asks on the terminal. Requests of one turn come concurrently (one thread
/// each), so the terminal is taken one question at a time. No answer (end
/// of input) declines.
fn ask_the_human(request: Request) -> Answer {
    static TERMINAL: Mutex<()> = Mutex::new(());
    let _turn = TERMINAL.lock().unwrap_or_else(|e| e.into_inner());
    print!("approval needed ({}): {} [y/N] ", request.id, request.prompt);
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let yes = matches!(line.trim(), "y" | "Y" | "yes");
    println!("{}", if yes { "approved" } else { "declined" });
    if yes {
        Answer::ok(request.id, None)
    } else {
        Answer::declined(request.id, "declined")
    }
}

/// The scripted model (offline): ask for the transfer, then report.
fn script() -> Script {
    Script::new(vec![
        Turn::default().call("transfer", r#"{"to": "Sam", "amount": 40}"#),
        Turn::text("I have handled your transfer request; the result is above."),
    ])
}

fn main() -> Result<(), DriveError> {
    let provider = support::Provider::pick(script());
    let config = provider
        .builder()
        .system("You are a banking assistant. Be brief.")
        .tool(Transfer)
        .wait_for(ask_the_human)
        .on_event(|event| {
            if let StreamEvent::ToolResult { name, result, .. } = event {
                let mark = if result.is_error { "error" } else { "ok" };
                println!("result of {name} ({mark}): {}", result.output);
            }
        })
        .build()?;

    let result = Client::new(config).run("Please send $40 to Sam.")?;
    println!("status: {:?}, turns: {}", result.status, result.turns);
    println!("answer: {}", result.text);
    Ok(())
}
