//! `nexus decode --style S [--stream] FILE`: one captured response body (or
//! raw SSE capture) through the same decoders the loop uses.

use nexus_proto::provider::decode_capture;
use nexus_proto::{RemoteError, Style};
use serde::Serialize;
use serde_json::Value;

use crate::cli::StyleParser;
use crate::{out, read_input, Fail};

/// Decode one captured response body or SSE stream
///
/// Decodes one provider response body (or, with --stream, one raw SSE capture)
/// with the code the loop uses, and prints one JSON object:
///
///   {"text": "...", "tool_calls": [{"id", "name", "input"}],
///    "stop": "<the provider's stop/finish reason>", "usage": {"input": N, "output": N}}
///
/// `text` is every text block joined (reasoning is not text; it is shown as
/// `thinking` when present). A call id the provider did not send is null;
/// usage the provider did not send is null.
///
/// An error body prints the same object with `error: {type, message}` and
/// exits 1; a malformed or truncated input exits 1 with a message on stderr.
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct DecodeArgs {
    /// The wire format the capture is in.
    #[arg(long, value_parser = StyleParser)]
    style: Style,
    /// The input is a raw SSE capture of a streamed response.
    #[arg(long)]
    stream: bool,
    /// The captured body (`-` reads standard input).
    #[arg(value_name = "FILE")]
    file: String,
}

/// Runs the command.
pub fn main(args: DecodeArgs) -> Result<i32, Fail> {
    let DecodeArgs { style, stream, file } = args;
    let bytes = read_input(&file)?;
    match decode_capture(style, &bytes, stream) {
        Ok(turn) => {
            out(&pretty(&Summary::of(&turn.summary())));
            Ok(0)
        }
        Err(RemoteError::Provider(e)) => {
            let body = Summary {
                error: Some(ErrorOut { kind: e.kind.clone(), message: e.message.clone() }),
                ..Summary::of(&Value::Null)
            };
            out(&pretty(&body));
            Err(Fail::runtime(format!("{file}: {e}")))
        }
        Err(e) => {
            let hint =
                if !stream && looks_like_sse(&bytes) { " (this looks like an SSE capture: add --stream)" } else { "" };
            let what = if stream { "SSE stream" } else { "response body" };
            Err(Fail::runtime(format!("cannot decode {file} ({} {what}): {e}{hint}", style.name())))
        }
    }
}

/// The printed object. A struct rather than a JSON map so the keys come in
/// the documented order.
#[derive(Serialize)]
struct Summary {
    text: String,
    tool_calls: Vec<CallOut>,
    stop: Value,
    usage: UsageOut,
    #[serde(skip_serializing_if = "Value::is_null")]
    thinking: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorOut>,
}

#[derive(Serialize)]
struct CallOut {
    id: Value,
    name: Value,
    input: Value,
}

#[derive(Serialize)]
struct UsageOut {
    input: Value,
    output: Value,
}

#[derive(Serialize)]
struct ErrorOut {
    #[serde(rename = "type")]
    kind: String,
    message: String,
}

impl Summary {
    /// From [`TurnResponse::summary`](nexus_proto::TurnResponse::summary), the
    /// normalization the corpus expectations use.
    fn of(s: &Value) -> Summary {
        let get = |v: &Value, k: &str| v.get(k).cloned().unwrap_or(Value::Null);
        let calls = s.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        let usage = get(s, "usage");
        Summary {
            text: s.get("text").and_then(Value::as_str).unwrap_or_default().to_string(),
            tool_calls: calls
                .iter()
                .map(|c| CallOut { id: get(c, "id"), name: get(c, "name"), input: get(c, "input") })
                .collect(),
            stop: get(s, "stop"),
            usage: UsageOut { input: get(&usage, "input"), output: get(&usage, "output") },
            thinking: get(s, "thinking"),
            error: None,
        }
    }
}

fn looks_like_sse(bytes: &[u8]) -> bool {
    let start = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let trimmed = start.iter().position(|b| !b.is_ascii_whitespace()).and_then(|i| start.get(i..)).unwrap_or_default();
    trimmed.starts_with(b"data:") || trimmed.starts_with(b"event:") || trimmed.starts_with(b":")
}

pub fn pretty<T: Serialize>(v: &T) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}
