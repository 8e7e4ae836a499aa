//! `--mcp FILE` (repeatable): MCP servers' tools for `nexus run`, `nexus
//! resume` and `nexus tools`, from files in the common
//! `{"mcpServers": {NAME: {command, args, env, cwd} | {type: "http", url, headers}}}`
//! format. `${VAR}` in values is expanded from the environment; expanded
//! values never reach a state file, a cassette or a message.

use nexus_drive::mcp::{parse_servers, McpTools, ServerConfig};
use nexus_drive::Toolbox;
use nexus_proto::{Request, ToolDecl};

use crate::cli::McpArgs;
use crate::{read_input, Fail};

/// The servers of every `--mcp FILE`, in order; a server name given twice is refused.
pub fn configs(args: &McpArgs) -> Result<Vec<ServerConfig>, Fail> {
    let mut all: Vec<ServerConfig> = Vec::new();
    for path in &args.files {
        let bytes = read_input(path)?;
        let text = String::from_utf8(bytes).map_err(|_| Fail::usage(format!("{path}: not UTF-8")))?;
        let servers =
            parse_servers(&text, &|k| std::env::var(k).ok()).map_err(|e| Fail::usage(format!("{path}: {e}")))?;
        crate::mcp_auth::note_config(path, &text)?; // OAuth clients (the `oauth` blocks)
        for s in servers {
            if all.iter().any(|o| o.name == s.name) {
                return Err(Fail::usage(format!("MCP server {:?} is configured twice ({path})", s.name)));
            }
            all.push(s);
        }
    }
    Ok(all)
}

/// Starts the servers and lists their tools. A server that fails is left
/// out with a warning on stderr; the run goes on with the others.
pub fn start(configs: &[ServerConfig]) -> Result<McpTools, Fail> {
    Ok(start_for_run(configs, false)?.0)
}

/// [`start`] for a run. When `durable` (the run is kept with `--state` or
/// `--store`), a server whose listing waits for a person's authorization is
/// not left out: its authorization request is returned, for the run to
/// suspend on before its first model call (the server's tools join the run
/// once `nexus resume` completes it).
pub fn start_for_run(configs: &[ServerConfig], durable: bool) -> Result<(McpTools, Vec<Request>), Fail> {
    let options = crate::mcp_auth::options(configs, durable)?; // OAuth for HTTP servers
    let mcp = McpTools::start(configs, &options);
    let mut waiting = Vec::new();
    if let Some(auth) = &options.driver.auth {
        for cfg in configs {
            if mcp.server(&cfg.name).is_none() {
                if let Some(request) = auth.open_request(&cfg.name) {
                    waiting.push(request);
                }
            }
        }
    }
    let names: Vec<&str> = waiting.iter().filter_map(|r| r.data.as_ref()?.get("server")?.as_str()).collect();
    for e in mcp.errors() {
        if names.iter().any(|n| e.to_string().contains(&format!("{n:?}"))) {
            continue;
        }
        eprintln!("nexus: {e} (its tools are left out)");
    }
    for n in &names {
        eprintln!("nexus: MCP server {n:?} needs a person's authorization before its tools can be listed");
    }
    for w in mcp.warnings() {
        eprintln!("nexus: {w}");
    }
    Ok((mcp, waiting))
}

/// Adds every MCP tool to `tb`.
pub fn add_to(tb: &mut Toolbox, mcp: &McpTools) -> Result<(), Fail> {
    for t in mcp.dyn_tools() {
        tb.add_dyn(t).map_err(|e| Fail::usage(format!("MCP: {e}")))?;
    }
    Ok(())
}

/// The names in `decls` that look like MCP tools (`server__tool`).
pub fn mcp_names(decls: &[ToolDecl]) -> Vec<&str> {
    decls.iter().map(|d| d.name.as_str()).filter(|n| n.contains("__")).collect()
}
