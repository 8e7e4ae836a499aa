//! `nexus`: the tool-calling loop from a shell.
//!
//! Exit codes: 0 done, 3 pending (state written), 4 incomplete, 2 usage or
//! config error, 1 runtime error, 5 a stored run that cannot be claimed
//! (another resume holds it, or it is no longer waiting). A command's
//! errors go to stderr as one line; a usage mistake clap finds in the
//! arguments is reported in clap's words (with a suggestion and the usage).
#![forbid(unsafe_code)]
// The `…Args` structs' doc comments are the commands' help texts, written for
// a terminal (`[--flag]`, `<id>`, JSON shapes), not for rustdoc's markup.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

mod agents;
mod builtins;
mod cli;
mod decode;
mod demo;
mod login_again;
mod mcp;
mod mcp_auth;
mod replay;
mod run;
mod serve;
mod skills;
mod store;
mod telemetry;
mod tools;
mod trace;

use std::io::{Read, Write};

use clap::Parser;
use nexus_proto::Style;

use crate::cli::{Cli, Command};

/// The process's allocator. The gateway's requests are short-lived trees of
/// small allocations (JSON bodies, headers, the transcript of a translated
/// request), freed on another request's time; mimalloc's per-thread free
/// lists serve them at a fraction of glibc's cost per call.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

fn dispatch(command: Command) -> Result<i32, Fail> {
    match command {
        Command::Run(args) => run::run_main(args),
        Command::Resume(args) => run::resume_main(args),
        Command::Runs(args) => store::runs_main(args),
        Command::Replay(args) => replay::main(args),
        Command::Demo(args) => demo::main(args),
        Command::Tools(args) => tools::main(args),
        Command::Decode(args) => decode::main(args),
        Command::Serve(args) => serve::main(args),
        Command::Completions(args) => Ok(cli::completions(args)),
        Command::Version => {
            out(&format!("nexus {}", env!("CARGO_PKG_VERSION")));
            Ok(0)
        }
    }
}

fn main() {
    let command = match Cli::try_parse() {
        Ok(cli) => cli.command,
        Err(e) => {
            // Help and --version go to stdout (exit 0), usage mistakes to
            // stderr (exit 2). A closed pipe (`nexus --help | head`) is not
            // worth reporting.
            let _ = e.print();
            std::process::exit(e.exit_code());
        }
    };
    let code = match dispatch(command) {
        Ok(code) => code,
        Err(fail) => {
            eprintln!("nexus: {}", fail.message);
            fail.code
        }
    };
    telemetry::shutdown();
    std::process::exit(code);
}
