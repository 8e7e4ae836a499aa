//! `nexus`: the tool-calling loop from a shell.
//!
//! Exit codes: 0 done, 3 pending (state written), 4 incomplete, 2 usage or
//! config error, 1 runtime error, 5 a stored run that cannot be claimed
//! (another resume holds it, or it is no longer waiting). Errors go to
//! stderr as one line.
#![forbid(unsafe_code)]

mod args;
mod builtins;
mod decode;
mod demo;
mod replay;
mod run;
mod serve;
mod store;
mod tools;
mod trace;

use std::io::{Read, Write};

use nexus_proto::Style;

const HELP: &str = "\
nexus — the LLM tool-calling loop (Anthropic, OpenAI, Gemini) from a shell

usage:
  nexus demo [--style S]                 a recorded session with tool calls, a suspension and
                                         its resume, replayed offline through the real machine
  nexus run [options] PROMPT             run the loop against a provider
  nexus resume --state FILE --answer ANSWERS.json [--json] [--stream]
  nexus resume --store STORE --run ID --answer ANSWERS.json [--json] [--stream]
  nexus runs --store STORE [--json]      list the suspended runs a store holds
  nexus replay CASSETTE [--json]         re-run a recorded session against its recording
  nexus tools [--builtins[=NAMES]] [--relay FILE] [--style S]
  nexus decode --style S [--stream] FILE decode one captured response body or SSE stream
  nexus serve --listen ADDR --upstream-style S   an OpenAI-compatible gateway to S

`nexus COMMAND --help` describes each command.

exit codes: 0 done · 3 pending (state written) · 4 incomplete · 2 usage or config error · 1 runtime error
            · 5 stored run not claimable (another resume holds it, or it is no longer waiting)";

/// Why a command stopped early: an exit code and one line for stderr.
#[derive(Debug)]
pub struct Fail {
    /// The exit code.
    pub code: i32,
    /// The message.
    pub message: String,
}

impl Fail {
    /// A usage or config error (exit 2).
    pub fn usage(message: impl Into<String>) -> Fail {
        Fail { code: 2, message: message.into() }
    }

    /// A runtime error (exit 1).
    pub fn runtime(message: impl Into<String>) -> Fail {
        Fail { code: 1, message: message.into() }
    }

    /// A stored run this process may not resume (exit 5): another resume
    /// holds it, it is no longer waiting, or it moved on under our claim.
    /// Its own code, so a script can tell "someone else has it" from a
    /// failure worth retrying.
    pub fn conflict(message: impl Into<String>) -> Fail {
        Fail { code: 5, message: message.into() }
    }
}

/// Prints a line on stdout. A closed pipe (`nexus demo | head`) is not an
/// error worth reporting: the output is simply no longer wanted.
pub fn out(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
}

/// Prints without a line end and flushes (streamed text).
pub fn out_inline(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

/// Parses a `--style` value.
pub fn parse_style(s: &str) -> Result<Style, Fail> {
    Style::parse(s)
        .ok_or_else(|| Fail::usage(format!("unknown style {s:?}: use anthropic, openai, gemini or openai-responses")))
}

/// Reads a file, or standard input for `-`.
pub fn read_input(path: &str) -> Result<Vec<u8>, Fail> {
    if path == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| Fail::runtime(format!("cannot read standard input: {e}")))?;
        return Ok(buf);
    }
    std::fs::read(path).map_err(|e| Fail::runtime(format!("cannot read {path}: {e}")))
}

/// A command's entry point: its arguments in, an exit code out.
type Command = fn(&[String]) -> Result<i32, Fail>;

fn dispatch(argv: &[String]) -> Result<i32, Fail> {
    let Some((command, rest)) = argv.split_first() else {
        out(HELP);
        return Err(Fail::usage("no command given"));
    };
    let wants_help = rest.iter().any(|a| a == "--help" || a == "-h");
    let (help, main): (&str, Command) = match command.as_str() {
        "run" => (run::RUN_HELP, run::run_main),
        "resume" => (run::RESUME_HELP, run::resume_main),
        "runs" => (store::RUNS_HELP, store::runs_main),
        "replay" => (replay::HELP, replay::main),
        "demo" => (demo::HELP, demo::main),
        "tools" => (tools::HELP, tools::main),
        "decode" => (decode::HELP, decode::main),
        "serve" => (serve::HELP, serve::main),
        "help" | "--help" | "-h" => {
            out(HELP);
            return Ok(0);
        }
        "--version" | "-V" | "version" => {
            out(&format!("nexus {}", env!("CARGO_PKG_VERSION")));
            return Ok(0);
        }
        other => return Err(Fail::usage(format!("unknown command {other:?} (nexus --help lists them)"))),
    };
    if wants_help {
        out(help);
        return Ok(0);
    }
    main(rest)
}

fn main() {
    // Lossy rather than `env::args`, which panics on an argument that is not UTF-8.
    let argv: Vec<String> = std::env::args_os().skip(1).map(|a| a.to_string_lossy().into_owned()).collect();
    let code = match dispatch(&argv) {
        Ok(code) => code,
        Err(fail) => {
            eprintln!("nexus: {}", fail.message);
            fail.code
        }
    };
    std::process::exit(code);
}
