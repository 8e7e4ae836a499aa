//! Where the MCP test servers are and what runs them.
//!
//! `.ci/mcp-deps.sh` installs the Python venv (PyPI `mcp`), Node 22 and the
//! npm servers, and prints the variables read here. Without them a test
//! says it was skipped — except under `CI=true`, where a missing dependency
//! is a failure.
#![allow(dead_code)]

use std::path::PathBuf;

/// The repository's `tests/mcp/servers` directory.
pub fn servers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/servers")
}

/// The path of one test server script.
pub fn server(name: &str) -> String {
    servers_dir().join(name).to_string_lossy().into_owned()
}

fn required(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() && std::path::Path::new(&v).exists() => Some(v),
        _ => {
            let why = format!("{var} is not set or does not exist: run `eval \"$(.ci/mcp-deps.sh)\"` first");
            if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
                panic!("{why}");
            }
            eprintln!("skipped: {why}");
            None
        }
    }
}

/// The venv's Python (with `mcp` installed).
pub fn python() -> Option<String> {
    required("NEXUS_MCP_PYTHON")
}

/// Node 22.
pub fn node() -> Option<String> {
    required("NEXUS_MCP_NODE")
}

/// The `@modelcontextprotocol/server-everything` package directory.
pub fn everything() -> Option<String> {
    required("NEXUS_MCP_EVERYTHING")
}

/// Whether a process is still running (absent or a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // The state is the field after the parenthesized command name.
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
            !matches!(state, Some("Z") | Some("X"))
        }
    }
}

/// Whether `pid` is a zombie whose parent is this process (we failed to reap it).
pub fn our_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let mut rest = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace()).into_iter().flatten();
    let state = rest.next();
    let ppid: Option<u32> = rest.next().and_then(|p| p.parse().ok());
    state == Some("Z") && ppid == Some(std::process::id())
}

/// An MCP server on a loopback port, killed when dropped.
pub struct HttpServer {
    pub child: std::process::Child,
    /// Its MCP endpoint.
    pub url: String,
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `kitchen.py http` (plus `extra` arguments) on the port it prints.
pub fn kitchen_http(py: &str, extra: &[&str]) -> HttpServer {
    http_server(py, "kitchen.py", &["http"], extra)
}

/// The test server `script` (with `args`, then `extra`) on the port it
/// prints first; what it prints after is read and dropped, so it never
/// writes to a closed pipe.
pub fn http_server(py: &str, script: &str, args: &[&str], extra: &[&str]) -> HttpServer {
    use std::io::BufRead;
    let mut child = std::process::Command::new(py)
        .arg(server(script))
        .args(args)
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start the HTTP server");
    let mut out = std::io::BufReader::new(child.stdout.take().expect("its stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the PORT line");
    let port = line.trim().strip_prefix("PORT ").expect("PORT line").to_string();
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    HttpServer { child, url: format!("http://127.0.0.1:{port}/mcp") }
}
