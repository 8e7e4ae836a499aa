//! A durable web handler: a request suspends, its state goes to a store, and
//! a later request — in another process — answers it and resumes the run.
//!
//! ```text
//! cargo run -p nexus-drive --example durable_web_handler                       # both requests, two processes
//! cargo run -p nexus-drive --example durable_web_handler -- chat DIR PROMPT      # request 1: suspends
//! cargo run -p nexus-drive --example durable_web_handler -- answer DIR RUN ANSWER  # request 2: resumes
//! ```
//!
//! Two handlers, as a stateless web service would have them (each call here
//! stands for one HTTP request, its lines `>` the request and `<` the response):
//!
//! * `POST /chat {"prompt"}` runs the model. The `book_table` tool needs the
//!   user's approval and has no one to ask in-process, so the run suspends:
//!   its state (versioned JSON, no secrets) is saved in a [`FileRunStore`]
//!   under its run id, and the handler answers `202` with what it waits for.
//! * `POST /runs/{id}/answers {Answer}`, possibly hours later and in another
//!   process, claims the stored run, resumes it with the answer and settles
//!   the store: removed once finished, written back if still pending. The
//!   claim makes a second, concurrent answer fail instead of booking twice;
//!   an answer whose id matches no outstanding request is refused (`400`)
//!   and leaves the run as it was.
//!
//! Run without arguments, the example plays both requests, each in a child
//! process of its own, against a temporary store directory.

mod support;

use std::path::Path;
use std::process::{Command, ExitCode};

use nexus_drive::blocking::Client;
use nexus_drive::proto::InputError;
use nexus_drive::{
    Answer, ClientConfig, DriveError, FileRunStore, Request, RunResult, RunStore, StoreError, Tool, ToolContext,
    ToolError, ToolOutcome,
};
use nexus_tests::fake::{ExpectFinal, Script, Turn};
use serde::Deserialize;
use serde_json::{json, Value};

const SYSTEM: &str = "You book restaurant tables. Be brief.";

#[derive(Debug, Deserialize)]
struct BookingArgs {
    restaurant: String,
    time: String,
    guests: u32,
}

struct BookTable;

impl Tool for BookTable {
    const NAME: &'static str = "book_table";
    type Args = BookingArgs;
    type Output = String;

    fn description(&self) -> String {
        "Books a restaurant table. Needs the user's approval.".into()
    }

    fn input_schema(&self) -> Option<Value> {
        Some(json!({
            "type": "object",
            "properties": {
                "restaurant": {"type": "string"},
                "time": {"type": "string", "description": "HH:MM"},
                "guests": {"type": "integer"},
            },
            "required": ["restaurant", "time", "guests"],
        }))
    }

    fn call(&self, args: BookingArgs, ctx: &ToolContext) -> Result<ToolOutcome<String>, ToolError> {
        if ctx.answer().is_none_or(|a| !a.ok) {
            return Ok(ToolOutcome::Pending(Request::new(
                "approval",
                format!("Book {} at {} for {}?", args.restaurant, args.time, args.guests),
            )));
        }
        println!(
            "  [tool] booking {} at {} for {} (pid {})",
            args.restaurant,
            args.time,
            args.guests,
            std::process::id()
        );
        Ok(ToolOutcome::Done(format!(
            "booked {} at {} for {}: confirmation LPZ-2000",
            args.restaurant, args.time, args.guests
        )))
    }
}

/// The scripted model (offline). The final request must carry the
/// confirmation, so a resume that lost the tool's result fails loudly.
fn script() -> Script {
    Script::new(vec![
        Turn::default().call("book_table", r#"{"restaurant": "Le Petit Zinc", "time": "20:00", "guests": 2}"#),
        Turn::text("Your table for two at Le Petit Zinc is booked for 20:00 (confirmation LPZ-2000)."),
    ])
    .expect_final(ExpectFinal {
        tool_result_contains: vec!["LPZ-2000".into()],
        tool_results: Some(1),
        messages: None,
    })
}

/// An HTTP response: status and JSON body.
struct Response(u16, Value);

fn client(provider: &support::Provider) -> Result<Client, DriveError> {
    let config: ClientConfig = provider.builder().system(SYSTEM).tool(BookTable).build()?;
    Ok(Client::new(config))
}

/// `POST /chat`: run the prompt; store the run if it suspends.
fn post_chat(store: &dyn RunStore, prompt: &str) -> Response {
    let provider = support::Provider::pick(script());
    let result = client(&provider).and_then(|c| c.run(prompt));
    match result {
        Ok(result) => match &result.suspended {
            Some(suspended) => match store.save(&suspended.run_id, &suspended.state, None) {
                Ok(_) => {
                    Response(202, json!({"status": "pending", "runId": suspended.run_id, "pending": suspended.pending}))
                }
                Err(e) => Response(500, json!({"error": e.to_string()})),
            },
            None => Response(200, finished(&result)),
        },
        Err(e) => Response(502, json!({"error": e.to_string()})),
    }
}

/// `POST /runs/{id}/answers`: resume the stored run with one answer.
fn post_answer(store: &dyn RunStore, run_id: &str, body: &str) -> Response {
    let answer: Answer = match serde_json::from_str(body) {
        Ok(a) => a,
        Err(e) => return Response(400, json!({"error": format!("not an answer: {e}")})),
    };
    // The resumed run goes to this process's client's base URL (a client
    // that sets one sends the runs it resumes there), so a scripted
    // provider of this process's own serves it offline.
    let provider = support::Provider::pick(script());
    let result = client(&provider).and_then(|c| c.resume_stored(store, run_id, vec![answer]));
    match result {
        Ok(result) if result.is_pending() => {
            Response(202, json!({"status": "pending", "runId": run_id, "pending": result.pending}))
        }
        Ok(result) => Response(200, finished(&result)),
        Err(DriveError::Store(StoreError::NotFound(_))) => {
            Response(404, json!({"error": format!("no suspended run {run_id}")}))
        }
        Err(DriveError::Store(StoreError::Claimed(_))) => {
            Response(409, json!({"error": "another request is resuming this run"}))
        }
        Err(e @ DriveError::Input(InputError::UnknownAnswer(_))) => Response(400, json!({"error": e.to_string()})),
        Err(e) => Response(502, json!({"error": e.to_string()})),
    }
}

fn finished(result: &RunResult) -> Value {
    json!({"status": result.status, "text": result.text, "toolCalls": result.tool_calls})
}

fn respond(Response(status, body): Response) -> ExitCode {
    println!("< {status} {body}");
    if status < 300 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn open(dir: &str) -> Result<FileRunStore, ExitCode> {
    FileRunStore::open(dir).map_err(|e| {
        eprintln!("cannot open the store {dir}: {e}");
        ExitCode::FAILURE
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["chat", dir, prompt] => {
            let store = match open(dir) {
                Ok(s) => s,
                Err(code) => return code,
            };
            println!("> POST /chat {}", json!({ "prompt": prompt }));
            respond(post_chat(&store, prompt))
        }
        ["answer", dir, run_id, answer] => {
            let store = match open(dir) {
                Ok(s) => s,
                Err(code) => return code,
            };
            println!("> POST /runs/{run_id}/answers {answer}");
            respond(post_answer(&store, run_id, answer))
        }
        [] => both_requests(),
        _ => {
            eprintln!("usage: durable_web_handler [chat DIR PROMPT | answer DIR RUN_ID ANSWER_JSON]");
            ExitCode::from(2)
        }
    }
}

/// Plays both requests, each in a process of its own, approving the booking.
fn both_requests() -> ExitCode {
    let dir = std::env::temp_dir().join(format!("nexus-durable-example-{}", std::process::id()));
    let code = match play(&dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    code
}

fn play(dir: &Path) -> Result<(), String> {
    let dir = dir.to_str().ok_or("the temporary directory is not UTF-8")?;
    let first = child(&["chat", dir, "Book a table for two at Le Petit Zinc, 20:00."])?;
    let body = first.lines().find_map(|l| l.strip_prefix("< 202 ")).ok_or("the first request did not suspend")?;
    let body: Value = serde_json::from_str(body).map_err(|e| e.to_string())?;
    let run_id = body["runId"].as_str().ok_or("no runId")?;
    let request = &body["pending"][0];
    println!("(the user approves: {})", request["prompt"]);
    let answer = json!({"id": request["id"], "ok": true}).to_string();
    child(&["answer", dir, run_id, &answer])?;
    Ok(())
}

/// Runs this example again with `args`, echoing its output.
fn child(args: &[&str]) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe).args(args).output().map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    print!("{stdout}");
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err(format!("`{}` failed", args.first().unwrap_or(&"")));
    }
    Ok(stdout)
}
