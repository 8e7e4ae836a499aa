//! The tools a CLI run declares (relay declarations from a file, built-ins),
//! and `nexus tools`, which prints them as each provider receives them.

use std::path::Path;

use nexus_drive::{DynTool, Toolbox};
use nexus_proto::provider::ModelCall;
use nexus_proto::{Message, Style, ToolDecl, ToolKind};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::args::{parse, Spec};
use crate::{builtins, out, parse_style, read_input, Fail};

const SPEC: Spec = Spec { command: "tools", values: &["relay", "style"], switches: &[], optional: &["builtins"] };

pub const HELP: &str = "\
nexus tools [--builtins[=NAMES]] [--relay TOOLS.json] [--style anthropic|openai|gemini|openai-responses]

Prints the tool declarations exactly as the provider receives them in the
`tools` field of a request (the request encoder builds them). Without
--style, prints an object with all three shapes.

TOOLS.json is a JSON array of {\"name\", \"description\", \"input_schema\"}
declaration-only (relay) tools.";

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
    };
    style.encode_body(&call).get("tools").cloned().unwrap_or_else(|| Value::Array(Vec::new()))
}

/// Runs `nexus tools`.
pub fn main(args: &[String]) -> Result<i32, Fail> {
    let p = parse(args, &SPEC)?;
    if let Some(extra) = p.positionals.first() {
        return Err(Fail::usage(format!("tools takes no positional argument (got {extra:?})")));
    }
    let style = p.value("style").map(parse_style).transpose()?;
    let builtin_tools =
        if p.switch("builtins") { builtins::select(p.value("builtins"), &builtins::root(None)?)? } else { Vec::new() };
    let relay = match p.value("relay") {
        Some(path) => load_relay(path)?,
        None => Vec::new(),
    };
    let decls = toolbox(builtin_tools, relay)?.decls();
    let shown = match style {
        Some(s) => wire_tools(s, &decls),
        None => {
            let mut all = Map::new();
            for s in [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses] {
                all.insert(s.name().into(), wire_tools(s, &decls));
            }
            Value::Object(all)
        }
    };
    out(&serde_json::to_string_pretty(&shown).unwrap_or_default());
    Ok(0)
}
