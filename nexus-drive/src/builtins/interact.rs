//! `question` and `todowrite`: the tools that touch neither files nor the network.

use nexus_proto::Request;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::done;
use crate::tool::{ToolContext, ToolError, ToolOutcome};

/// The `kind` of the request `question` suspends with.
pub(crate) const KIND_QUESTION: &str = "question";

/// Suspends with a `question` request; on the retry after the host answered,
/// gives the model the answer's data as JSON.
///
/// The prompt is each question's text, plus ` (options: a, b)` when it has
/// options, joined by `\n` — the format hosts of the upstream contract parse.
/// `data.questions` carries the questions as the model sent them (an array
/// sent as a JSON string is parsed first).
pub(crate) fn question(args: Value, ctx: &ToolContext) -> Result<ToolOutcome<Value>, ToolError> {
    if let Some(answer) = ctx.answer() {
        // A declined answer never gets here (the run turns it into an error
        // result without retrying), so this is the user's reply.
        let data = Value::Object(answer.data.clone().unwrap_or_default());
        return done(data.to_string());
    }
    // Some models send the array as a JSON string; take it as meant.
    let parsed = match args.get("questions") {
        Some(Value::String(text)) => serde_json::from_str::<Value>(text).ok(),
        other => other.cloned(),
    };
    let questions = match parsed {
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(Value::Array(_)) => return Err(ToolError::msg("question: questions must not be empty")),
        _ => return Err(ToolError::msg("invalid arguments for question: questions must be an array")),
    };
    let mut lines = Vec::with_capacity(questions.len());
    for (i, q) in questions.iter().enumerate() {
        let Some(text) = q.get("question").and_then(Value::as_str) else {
            return Err(ToolError::msg(format!("question: questions[{i}] has no question text")));
        };
        let options: Vec<String> = match q.get("options") {
            Some(Value::Array(opts)) => opts
                .iter()
                .map(|o| match o {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect(),
            _ => Vec::new(),
        };
        if options.is_empty() {
            lines.push(text.to_string());
        } else {
            lines.push(format!("{text} (options: {})", options.join(", ")));
        }
    }
    let mut data = Map::new();
    data.insert("questions".into(), Value::Array(questions));
    let mut request = Request::new(KIND_QUESTION, lines.join("\n"));
    request.data = Some(data);
    Ok(ToolOutcome::Pending(request))
}

/// `todowrite` arguments.
#[derive(Deserialize)]
pub(crate) struct TodoArgs {
    #[serde(default)]
    todos: Vec<Todo>,
}

/// One todo. Lenient: a missing field is empty, and the other common shape
/// (`content` and `status: "completed"`) is understood too.
#[derive(Deserialize)]
struct Todo {
    #[serde(default, alias = "content")]
    text: String,
    #[serde(default)]
    completed: bool,
    #[serde(default)]
    status: Option<String>,
}

/// Renders the list. Stateless: the model sends the whole list every time,
/// and the transcript is where it lives.
pub(crate) fn todowrite(args: TodoArgs) -> Result<ToolOutcome<Value>, ToolError> {
    if args.todos.is_empty() {
        return done("(no todos)".into());
    }
    let lines: Vec<String> = args
        .todos
        .iter()
        .map(|t| {
            let completed = t.completed || t.status.as_deref() == Some("completed");
            format!("[{}] {}", if completed { "x" } else { " " }, t.text)
        })
        .collect();
    done(lines.join("\n"))
}
