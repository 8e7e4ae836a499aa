//! A support agent as a newcomer writes it: two tools from plain functions,
//! a refund that needs a person's approval, the answer streamed as it comes.
//!
//! ```text
//! cargo run -p nexus-drive --example support_agent                        # both variants below, offline
//! echo y | cargo run -p nexus-drive --example support_agent -- ask        # approved in-process (wait_for)
//! echo "n not after 30 days" | cargo run -p nexus-drive --example support_agent -- ask   # declined, with a reason
//! cargo run -p nexus-drive --example support_agent -- stored DB y         # stored in SQLite, resumed by a second process
//! ```
//!
//! * `ask`: the refund's approval is answered in-process: the client's
//!   `wait_for` asks on the terminal (`y` approves; any other line declines,
//!   and its words are the reason the model reads).
//! * `stored DB ANSWER`: a client without `wait_for` ends the run pending on
//!   the approval; this process keeps it in the SQLite file `DB` and exits.
//!   A second process (`resume DB RUN_ID ANSWER`, started here as a child)
//!   lists what the stored run waits for, answers it and streams the rest of
//!   the run through the same `stream` call a fresh run uses; the store
//!   removes the run once it is finished.
//!
//! Offline, a scripted model plays the customer's case; `NEXUS_BASE_URL`
//! (ending in `/v1`), `NEXUS_MODEL` and `NEXUS_API_KEY` point it at any
//! OpenAI-compatible server, a provider's key at that provider (see
//! `support/mod.rs`).

mod support;

use std::io::{BufRead, Write};
use std::process::{Command, ExitCode};
use std::sync::Arc;

use nexus_drive::{
    tool, Answer, Client, DriveError, Request, RunInput, RunResult, RunStore, SqliteStore, StreamEvent, StreamItem,
    ToolError,
};
use nexus_tests::fake::{Script, Turn};
use serde::Serialize;

/// What `order_status` tells the model, in this order.
#[derive(Serialize)]
struct Order {
    order_id: String,
    status: &'static str,
    total_cents: u64,
    currency: &'static str,
}

/// Looks up an order: its status and total.
///
/// # Arguments
/// * `order_id` - The order's id, as on the receipt (A-1001).
#[tool]
fn order_status(order_id: String) -> Result<Order, ToolError> {
    if !order_id.starts_with("A-") {
        return Err(ToolError::msg(format!("no order {order_id}")));
    }
    Ok(Order { order_id, status: "delivered", total_cents: 4000, currency: "EUR" })
}

/// What `refund` tells the model.
#[derive(Serialize)]
struct Refund {
    order_id: String,
    refunded_cents: u64,
    reference: String,
}

/// Refunds an order, in full or in part. A person approves every refund first.
///
/// # Arguments
/// * `order_id` - The order to refund.
/// * `amount_cents` - How much, in cents.
/// * `reason` - Why, in the customer's words.
#[tool(needs_approval)]
fn refund(order_id: String, amount_cents: u64, reason: String) -> Result<Refund, ToolError> {
    println!("  [refund] {amount_cents} cents on {order_id} ({reason})");
    Ok(Refund { reference: format!("R-{order_id}"), order_id, refunded_cents: amount_cents })
}

/// The scripted model (offline): look the order up, refund it, report.
fn script() -> Script {
    Script::new(vec![
        Turn::default().call("order_status", r#"{"order_id": "A-1001"}"#),
        Turn::default().call("refund", r#"{"order_id": "A-1001", "amount_cents": 4000, "reason": "arrived damaged"}"#),
        Turn::text("I have looked into order A-1001; the refund's outcome is above."),
    ])
}

const PROMPT: &str = "Order A-1001 arrived damaged. I would like my money back.";

fn client(provider: &support::Provider, in_process: bool) -> Result<Client, DriveError> {
    let builder = provider
        .configure(Client::builder(provider.style, &provider.model))
        .system("You are the support agent of a web shop. Be brief.")
        .tool(order_status)
        .tool(refund)
        .stream(true);
    if in_process {
        builder.wait_for(ask_on_the_terminal).build()
    } else {
        builder.build()
    }
}

/// `y` approves; any other line declines with its words as the reason; no
/// answer (end of input) declines.
fn answer_from(request: &Request, line: &str) -> Answer {
    match line.trim() {
        "y" | "Y" | "yes" => Answer::ok(request.id.clone(), None),
        "" => Answer::declined(request.id.clone(), "declined"),
        words => Answer::declined(request.id.clone(), words.trim_start_matches(['n', 'N']).trim()),
    }
}

fn ask_on_the_terminal(request: Request) -> Answer {
    print!("\napproval needed: {} [y / a reason to decline] ", request.prompt);
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let answer = answer_from(&request, &line);
    println!("{}", if answer.ok { "approved" } else { "declined" });
    answer
}

/// Prints the run's text as it streams, and each tool result; the result last.
fn show(items: impl Iterator<Item = Result<StreamItem, DriveError>>) -> Result<RunResult, DriveError> {
    for item in items {
        match item? {
            StreamItem::Event(StreamEvent::TextDelta { text }) => {
                print!("{text}");
                let _ = std::io::stdout().flush();
            }
            StreamItem::Event(StreamEvent::ToolResult { name, result, .. }) => {
                let mark = if result.is_error { "error" } else { "ok" };
                println!("  result of {name} ({mark}): {}", result.output);
            }
            StreamItem::Event(_) => {}
            StreamItem::Done(result) => {
                println!("\nstatus: {:?}, turns: {}", result.status, result.turns);
                return Ok(result);
            }
        }
    }
    Err(DriveError::Config("the stream ended without a result".into()))
}

/// The in-process variant.
fn ask() -> Result<(), DriveError> {
    let provider = support::Provider::pick(script());
    show(client(&provider, true)?.stream(PROMPT))?;
    Ok(())
}

/// The first process of the stored variant: run until the approval, keep
/// the run in SQLite, hand it to a second process.
fn stored(db: &str, answer: &str) -> Result<ExitCode, DriveError> {
    let provider = support::Provider::pick(script());
    let store = SqliteStore::open(db)?;
    let result = show(client(&provider, false)?.stream(PROMPT))?;
    let Some(suspended) = result.suspended else {
        println!("finished without asking");
        return Ok(ExitCode::SUCCESS);
    };
    store.save(&suspended.run_id, &suspended.state, None)?;
    println!("stored run {} in {db}, waiting for: {}", suspended.run_id, suspended.pending[0].prompt);
    drop(store);
    let exe = std::env::current_exe().map_err(|e| DriveError::Config(e.to_string()))?;
    let status = Command::new(exe)
        .args(["resume", db, &suspended.run_id, answer])
        .status()
        .map_err(|e| DriveError::Config(e.to_string()))?;
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The second process: what the stored run waits for, the answer, the rest
/// of the run streamed through the same entry point as a fresh one.
fn resume(db: &str, run_id: &str, line: &str) -> Result<(), DriveError> {
    let provider = support::Provider::pick(script());
    let store: Arc<dyn RunStore> = Arc::new(SqliteStore::open(db)?);
    let outstanding = store.outstanding(run_id)?;
    for request in &outstanding {
        println!("[second process] {run_id} waits for {}: {}", request.kind, request.prompt);
    }
    let answers = outstanding.iter().map(|r| answer_from(r, line)).collect();
    show(client(&provider, false)?.stream(RunInput::stored(store.clone(), run_id, answers)))?;
    println!("[second process] still stored: {}", store.load(run_id)?.is_some());
    Ok(())
}

fn main() -> Result<ExitCode, DriveError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["ask"] => ask().map(|()| ExitCode::SUCCESS),
        ["stored", db, answer] => stored(db, answer),
        ["resume", db, run_id, answer] => resume(db, run_id, answer).map(|()| ExitCode::SUCCESS),
        [] => {
            println!("== approval in-process");
            ask()?;
            println!("== approval stored in SQLite, resumed by a second process");
            let dir = std::env::temp_dir().join(format!("nexus-support-agent-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| DriveError::Config(e.to_string()))?;
            let code = stored(&dir.join("runs.db").to_string_lossy(), "y");
            let _ = std::fs::remove_dir_all(&dir);
            code
        }
        _ => {
            eprintln!("usage: support_agent [ask | stored DB ANSWER | resume DB RUN_ID ANSWER]");
            Ok(ExitCode::from(2))
        }
    }
}
