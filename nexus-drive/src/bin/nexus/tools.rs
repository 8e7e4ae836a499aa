//! The tools a CLI run declares (relay declarations from a file, built-ins),
//! and `nexus tools`, which prints them as each provider receives them.

use std::path::Path;

use nexus_drive::skills::{Discovery, SKILL_TOOL};
use nexus_drive::{DynTool, Toolbox};
use nexus_proto::provider::ModelCall;
use nexus_proto::{Message, Style, ToolDecl, ToolKind};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::cli::{McpArgs, SkillsArgs, StyleParser};
use crate::{builtins, out, read_input, Fail};

/// Print the tool declarations as each provider receives them
///
/// Prints the tool declarations exactly as the provider receives them in the
/// `tools` field of a request (the request encoder builds them). Without
/// --style, prints an object with every style's shape.
///
/// --mcp starts the MCP servers of FILE (the format nexus run --mcp takes) and
/// lists their tools as {server}__{tool}, one per line with its server,
/// original name and description; with --json (or --skills), the declarations
/// as above, MCP tools included.
///
/// With --skills, prints an object instead: `tools` (the declarations as above,
/// with the `skill` tool), `skills` (each valid skill: name, description, path,
/// files and its optional fields), `skipped` (each broken skill: path, field,
/// error) and `catalog` (the text the system prompt gets, and which skills are
/// listed by name only).
#[derive(clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ToolsArgs {
    /// The built-in tools (bash, read, write, edit, grep, glob, webfetch,
    /// question, apply_patch, todowrite), or only a comma list of them.
    #[arg(long, value_name = "NAMES", num_args = 0..=1, require_equals = true)]
    pub builtins: Option<Option<String>>,
    /// A JSON array of {"name", "description", "input_schema"}:
    /// declaration-only (relay) tools.
    #[arg(long, value_name = "TOOLS.json")]
    pub relay: Option<String>,
    #[command(flatten)]
    pub skills: SkillsArgs,
    #[command(flatten)]
    pub agents: crate::agents::AgentsArgs,
    #[command(flatten)]
    pub mcp: McpArgs,
    /// Only this wire format's shape.
    #[arg(long, value_parser = StyleParser)]
    pub style: Option<Style>,
    /// The declarations as JSON even for MCP tools alone.
    #[arg(long)]
    pub json: bool,
}

/// One relay declaration as written in a `--relay` file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RelayDecl {
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default, alias = "parameters", alias = "inputSchema")]
    input_schema: Value,
}

/// Reads a `--relay` file: a JSON array of `{name, description, input_schema}`.
pub fn load_relay(path: &str) -> Result<Vec<ToolDecl>, Fail> {
    let bytes = read_input(path)?;
    let decls: Vec<RelayDecl> = serde_json::from_slice(&bytes).map_err(|e| {
        Fail::usage(format!("{path}: not a JSON array of {{name, description, input_schema}} tool declarations: {e}"))
    })?;
    let mut out = Vec::with_capacity(decls.len());
    for d in decls {
        if !(d.input_schema.is_null() || d.input_schema.is_object()) {
            return Err(Fail::usage(format!("{path}: input_schema of {:?} must be a JSON Schema object", d.name)));
        }
        let decl = ToolDecl::relay(&d.name, d.description, d.input_schema);
        if decl.name != d.name {
            eprintln!("nexus: relay tool {:?} is declared as {:?} (names keep only [a-zA-Z0-9_-])", d.name, decl.name);
        }
        out.push(decl);
    }
    Ok(out)
}

/// The toolbox of a run: the chosen built-ins, then the relay declarations.
/// A relay tool named like a built-in is refused even when built-ins are off.
pub fn toolbox(builtin_tools: Vec<DynTool>, relay: Vec<ToolDecl>) -> Result<Toolbox, Fail> {
    let mut tb = Toolbox::new();
    for t in builtin_tools {
        tb.add_dyn(t).map_err(|e| Fail::usage(e.to_string()))?;
    }
    for d in relay {
        tb.add_decl(d).map_err(|e| Fail::usage(e.to_string()))?;
    }
    Ok(tb)
}

/// The toolbox that serves a restored run: every relay declaration it holds,
/// and each executed tool bound again by name, confined to `root`.
pub fn rebind(decls: &[ToolDecl], root: &Path) -> Result<Toolbox, Fail> {
    let mut relay = Vec::new();
    let mut names = Vec::new();
    for d in decls {
        match d.kind {
            ToolKind::Relay => relay.push(d.clone()),
            // Bound again by the client's skills (see `run::resume_client`).
            _ if d.name == SKILL_TOOL => {}
            _ => names.push(d.name.as_str()),
        }
    }
    let executed = builtins::by_names(&names, root)
        .map_err(|e| Fail::runtime(format!("the saved run declares a tool this program cannot run: {e}")))?;
    toolbox(executed, relay)
}

/// The `tools` value of a request body in `style`'s shape.
pub fn wire_tools(style: Style, decls: &[ToolDecl]) -> Value {
    let messages = [Message::user(".")];
    let params = Map::new();
    let call = ModelCall {
        model: "model",
        system: None,
        messages: &messages,
        tools: decls,
        max_tokens: None,
        stream: false,
        params: &params,
        output: None,
    };
    style.encode_body(&call).get("tools").cloned().unwrap_or_else(|| Value::Array(Vec::new()))
}

/// Runs `nexus tools`.
pub fn main(args: ToolsArgs) -> Result<i32, Fail> {
    let builtin_tools = match &args.builtins {
        Some(names) => builtins::select(names.as_deref(), &builtins::root(None)?)?,
        None => Vec::new(),
    };
    let relay = match &args.relay {
        Some(path) => load_relay(path)?,
        None => Vec::new(),
    };
    let found = crate::skills::load(&args.skills.dirs, args.skills.budget)?;
    let mut tb = toolbox(builtin_tools, relay)?;
    let servers = crate::mcp::configs(&args.mcp)?;
    let mcp = if servers.is_empty() { None } else { Some(crate::mcp::start(&servers)?) };
    if let Some(m) = &mcp {
        crate::mcp::add_to(&mut tb, m)?;
        if !args.json && found.is_none() {
            for t in m.tools() {
                let about = t.tool.description.as_deref().unwrap_or("").lines().next().unwrap_or("");
                out(&format!("{}\t{}/{}\t{about}", t.exposed, t.server, t.tool.name));
            }
            return Ok(if m.errors().is_empty() { 0 } else { 1 });
        }
    }
    if let Some(found) = &found {
        if !found.skills.is_empty() {
            let has = |name: &str| tb.names().any(|n| n == name);
            let tool = found.skills.tool(has("read"), has("bash"));
            tb.add_dyn(tool).map_err(|e| Fail::usage(e.to_string()))?;
        }
    }
    let agents = crate::agents::load(&args.agents.dirs)?;
    let mut decls = tb.decls();
    // Each agent is a tool of the run, declared as the run declares it.
    let model = "model";
    for a in crate::agents::tools(&agents, args.style.unwrap_or(Style::OpenAi), model, &tb) {
        let parent = nexus_proto::RunConfig::new(args.style.unwrap_or(Style::OpenAi), model);
        decls.push(a.spec_decl(&parent));
    }
    let shown = match args.style {
        Some(s) => wire_tools(s, &decls),
        None => {
            let mut all = Map::new();
            for s in [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses] {
                all.insert(s.name().into(), wire_tools(s, &decls));
            }
            Value::Object(all)
        }
    };
    let mut shown = match &found {
        Some(found) => listing(found, shown),
        None => shown,
    };
    if !args.agents.dirs.is_empty() {
        if found.is_none() {
            shown = json!({ "tools": shown });
        }
        if let Some(obj) = shown.as_object_mut() {
            obj.insert("agents".into(), crate::agents::listing(&agents));
        }
    }
    out(&serde_json::to_string_pretty(&shown).unwrap_or_default());
    // A server left out is a failure to report, after what could be listed.
    Ok(if mcp.is_some_and(|m| !m.errors().is_empty()) { 1 } else { 0 })
}

/// `nexus tools --skills`: the declarations, the skills, the skipped ones and the catalog.
fn listing(found: &Discovery, tools: Value) -> Value {
    let skills: Vec<Value> = found
        .skills
        .iter()
        .map(|s| {
            let mut v = json!({
                "name": s.name(),
                "description": s.description(),
                "path": s.skill_md().display().to_string(),
                "files": s.files(),
            });
            let obj = v.as_object_mut().expect("an object");
            if let Some(l) = s.license() {
                obj.insert("license".into(), l.into());
            }
            if let Some(c) = s.compatibility() {
                obj.insert("compatibility".into(), c.into());
            }
            if !s.metadata().is_empty() {
                obj.insert("metadata".into(), json!(s.metadata()));
            }
            if !s.allowed_tools().is_empty() {
                obj.insert("allowedTools".into(), json!(s.allowed_tools()));
            }
            if s.files_truncated() {
                obj.insert("filesTruncated".into(), true.into());
            }
            v
        })
        .collect();
    let skipped: Vec<Value> = found
        .errors
        .iter()
        .map(|e| json!({"path": e.path.display().to_string(), "field": e.field, "error": e.message}))
        .collect();
    let catalog = found.skills.catalog();
    json!({
        "tools": tools,
        "skills": skills,
        "skipped": skipped,
        "catalog": {"text": catalog.text, "namesOnly": catalog.names_only},
    })
}
