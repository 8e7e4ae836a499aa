//! A host of the Rust library for the cross-language parity tests
//! (`bindings/python/tests/test_parity.py`): the same relay scenario the
//! `nexus` CLI and the Python package run, through `nexus_drive::blocking::Client`.
//!
//! ```text
//! parity_host run STYLE BASE_URL MODEL RELAY.json STATE_OUT PROMPT
//! parity_host resume STATE_IN ANSWERS.json
//! ```
//!
//! The key is read from `NEXUS_TEST_KEY`. Prints the result as JSON; a
//! pending run's state is written to STATE_OUT (`run`) or back to STATE_IN
//! (`resume`).

use std::process::ExitCode;

use nexus_drive::blocking::Client;
use nexus_drive::{Answer, ClientBuilder, ClientConfig, RunResult, Style, ToolDecl, Toolbox};
use nexus_proto::Run;
use serde::Deserialize;
use serde_json::Value;

#[derive(Deserialize)]
struct RelayDecl {
    name: String,
    description: String,
    input_schema: Value,
}

fn relay_toolbox(path: &str) -> Result<Toolbox, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let decls: Vec<RelayDecl> = serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let mut toolbox = Toolbox::new();
    for d in decls {
        toolbox.add_decl(ToolDecl::relay(&d.name, d.description, d.input_schema)).map_err(|e| e.to_string())?;
    }
    Ok(toolbox)
}

fn finish(result: RunResult, state_path: &str) -> Result<(), String> {
    if let Some(s) = &result.suspended {
        std::fs::write(state_path, &s.state).map_err(|e| format!("{state_path}: {e}"))?;
    }
    println!("{}", serde_json::to_string(&result).map_err(|e| e.to_string())?);
    Ok(())
}

fn run(args: &[String]) -> Result<(), String> {
    match args {
        [cmd, style, base_url, model, relay, state_out, prompt] if cmd == "run" => {
            let style = Style::parse(style).ok_or_else(|| format!("unknown style {style:?}"))?;
            let config = ClientConfig::builder(style, model.as_str())
                .base_url(base_url.as_str())
                .api_key_env("NEXUS_TEST_KEY")
                .toolbox(relay_toolbox(relay)?)
                .build()
                .map_err(|e| e.to_string())?;
            let result = Client::new(config).run(prompt.as_str()).map_err(|e| e.to_string())?;
            finish(result, state_out)
        }
        [cmd, state_in, answers] if cmd == "resume" => {
            let state = std::fs::read(state_in).map_err(|e| format!("{state_in}: {e}"))?;
            let answers: Vec<Answer> =
                serde_json::from_str(&std::fs::read_to_string(answers).map_err(|e| format!("{answers}: {e}"))?)
                    .map_err(|e| format!("{answers}: {e}"))?;
            let run = Run::restore(&state).map_err(|e| e.to_string())?;
            let config = ClientBuilder::from_run_config(run.config().clone())
                .api_key_env("NEXUS_TEST_KEY")
                .build()
                .map_err(|e| e.to_string())?;
            let result = Client::new(config).resume(&state, answers).map_err(|e| e.to_string())?;
            finish(result, state_in)
        }
        _ => Err(
            "usage: parity_host run STYLE BASE_URL MODEL RELAY.json STATE_OUT PROMPT | resume STATE_IN ANSWERS.json"
                .into(),
        ),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("parity_host: {e}");
            ExitCode::FAILURE
        }
    }
}
