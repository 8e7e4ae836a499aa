//! `--agents DIR` (repeatable): sub-agents defined as Markdown files with
//! YAML front matter (Claude Code's `.claude/agents/` format), each a tool
//! of the run whose execution is a child run (SPEC §17).

use std::path::Path;

use nexus_drive::agent_files::{discover_agents, AgentFile};
use nexus_drive::{AgentTool, Toolbox};
use nexus_proto::{AgentSpec, RunConfig, Style};
use serde_json::{json, Value};

use crate::Fail;

/// `--agents DIR`, for the commands that run or list the loop's tools.
#[derive(clap::Args, Default)]
pub struct AgentsArgs {
    /// A directory of sub-agents: Markdown files with YAML front matter
    /// (Claude Code's .claude/agents/ format) giving name, description, tools
    /// (a comma list of this run's tool names; default: all of them), model
    /// (a model on this run's upstream, or inherit, the default) and
    /// max_turns; the body is the agent's system prompt. Each agent becomes a
    /// tool named by its name. Repeatable: the first definition of a name
    /// wins. Broken files are skipped with a warning naming file and line.
    #[arg(long = "agents", id = "agent_dirs", value_name = "DIR")]
    pub dirs: Vec<String>,
}

/// The agents of every `--agents DIR`, broken files and duplicates reported
/// on stderr. A DIR that is not a directory is a usage error.
pub fn load(dirs: &[String]) -> Result<Vec<AgentFile>, Fail> {
    for dir in dirs {
        if !Path::new(dir).is_dir() {
            return Err(Fail::usage(format!("--agents {dir}: not a directory")));
        }
    }
    let found = discover_agents(dirs);
    for e in &found.errors {
        eprintln!("nexus: skipped agent: {e}");
    }
    for (name, kept, skipped) in &found.duplicates {
        eprintln!(
            "nexus: skipped agent: {}: the name {name} is already defined by {}",
            skipped.display(),
            kept.display()
        );
    }
    Ok(found.agents)
}

/// Each agent as a tool of a run on `style` and `model`, its tools taken
/// from `toolbox` by name. An agent naming a tool the run does not have is
/// skipped with a warning.
pub fn tools(agents: &[AgentFile], style: Style, model: &str, toolbox: &Toolbox) -> Vec<AgentTool> {
    let mut out = Vec::new();
    for a in agents {
        match a.agent_tool(style, model, toolbox) {
            Ok(tool) => out.push(tool),
            Err(e) => eprintln!("nexus: skipped agent: {}: tools: {e}", a.path.display()),
        }
    }
    out
}

/// The agents of a saved run, their tools bound again by name (`rebind`
/// serves each agent's declarations as it serves the run's own).
pub fn from_state(
    config: &RunConfig,
    rebind: &dyn Fn(&[nexus_proto::ToolDecl]) -> Result<Toolbox, Fail>,
) -> Result<Vec<AgentTool>, Fail> {
    let Some(agents) = &config.agents else { return Ok(Vec::new()) };
    agents.agents.iter().map(|spec| from_spec(spec, rebind)).collect()
}

fn from_spec(
    spec: &AgentSpec,
    rebind: &dyn Fn(&[nexus_proto::ToolDecl]) -> Result<Toolbox, Fail>,
) -> Result<AgentTool, Fail> {
    let mut tool =
        AgentTool::from_config(&spec.name, spec.description.clone(), spec.config.clone()).toolbox(rebind(&spec.tools)?);
    for child in spec.config.agents.iter().flat_map(|a| a.agents.iter()) {
        tool = tool.agent(from_spec(child, rebind)?);
    }
    Ok(tool)
}

/// `nexus tools --agents`: each agent as listed.
pub fn listing(agents: &[AgentFile]) -> Value {
    Value::Array(
        agents
            .iter()
            .map(|a| {
                json!({
                    "name": a.name,
                    "description": a.description,
                    "tools": a.tools,
                    "model": a.model.as_deref().unwrap_or("inherit"),
                    "maxTurns": a.max_turns,
                    "path": a.path.display().to_string(),
                })
            })
            .collect(),
    )
}
