//! `fake-provider --scripts FILE.json [--port N] [--api-key K] [--exit-after SECS] [--requests FILE]`
//!
//! Serves the scripts on 127.0.0.1 and prints `{"addr":"127.0.0.1:PORT"}` on
//! stdout once it listens. It runs until killed, or for `--exit-after` seconds.
//! With `--requests`, every request received is appended to FILE as a JSON
//! line `{"connection", "method", "target", "body"}` (the body as received, as text), so
//! tests in other languages can compare request bytes.
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nexus_tests::fake::{FakeProvider, Scripts};

const USAGE: &str =
    "usage: fake-provider --scripts FILE.json [--port N] [--api-key K] [--exit-after SECS] [--requests FILE]";

struct Args {
    scripts: String,
    port: u16,
    api_key: Option<String>,
    exit_after: Option<u64>,
    requests: Option<String>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut scripts = None;
    let mut port = 0u16;
    let mut api_key = None;
    let mut exit_after = None;
    let mut requests = None;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--scripts" => scripts = Some(value("--scripts")?),
            "--port" => port = value("--port")?.parse().map_err(|e| format!("--port: {e}"))?,
            "--api-key" => api_key = Some(value("--api-key")?),
            "--exit-after" => {
                exit_after = Some(value("--exit-after")?.parse().map_err(|e| format!("--exit-after: {e}"))?)
            }
            "--requests" => requests = Some(value("--requests")?),
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let scripts = scripts.ok_or_else(|| format!("--scripts is required\n{USAGE}"))?;
    Ok(Args { scripts, port, api_key, exit_after, requests })
}

fn open_log(path: &str) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().create(true).append(true).open(path)
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let text = match std::fs::read_to_string(&args.scripts) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("cannot read {}: {e}", args.scripts);
            return ExitCode::from(2);
        }
    };
    let mut scripts = match Scripts::from_json(&text) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{}: not a scripts file: {e}", args.scripts);
            return ExitCode::from(2);
        }
    };
    if let Some(k) = args.api_key {
        scripts.api_key = k;
    }
    let fake = match FakeProvider::start_on(scripts, args.port) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("cannot listen on 127.0.0.1:{}: {e}", args.port);
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout();
    if writeln!(stdout, "{{\"addr\":\"{}\"}}", fake.addr()).and_then(|()| stdout.flush()).is_err() {
        return ExitCode::FAILURE;
    }
    let deadline = args.exit_after.map(|s| Instant::now() + Duration::from_secs(s));
    let mut log = match args.requests.as_deref().map(open_log).transpose() {
        Ok(log) => log,
        Err(e) => {
            eprintln!("cannot write the requests file: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut logged = 0;
    loop {
        // Often enough that a test reading the file after its run sees every request.
        std::thread::sleep(Duration::from_millis(if log.is_some() { 10 } else { 200 }));
        if let Some(out) = log.as_mut() {
            let seen = fake.requests();
            for r in seen.iter().skip(logged) {
                let line = serde_json::json!({
                    "connection": r.connection,
                    "method": r.method,
                    "target": r.target,
                    "body": String::from_utf8_lossy(&r.body),
                });
                if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
                    return ExitCode::FAILURE;
                }
            }
            logged = logged.max(seen.len());
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    drop(fake);
    ExitCode::SUCCESS
}
