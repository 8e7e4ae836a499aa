//! Sub-agents for the drivers: an [`AgentTool`] is a child run the model
//! can delegate a task to (SPEC §17). The machine runs the tree; the
//! drivers serve each agent's tool calls from that agent's own tools.

use std::fmt;

use nexus_proto::{AgentSpec, RunConfig, Style, Upstream};

use crate::tool::{DynTool, Tool, Toolbox, ToolboxError};

/// A sub-agent: a name and description the parent's model sees, and the
/// child run a call of it starts — its own model (on any wire format),
/// system prompt, turn limit, tools and agents.
///
/// ```
/// use nexus_drive::{AgentTool, ClientConfig};
/// use nexus_proto::Style;
///
/// let researcher = AgentTool::new("researcher", "Finds facts and cites them", Style::Anthropic, "claude-haiku-4-5")
///     .system("You research. Answer in three sentences with sources.")
///     .max_turns(6);
/// let config = ClientConfig::builder(Style::OpenAi, "gpt-4o-mini").no_api_key().agent(researcher).build()?;
/// assert!(config.toolbox().names().next().is_none(), "the agent is a tool of the run, not of the toolbox");
/// assert_eq!(config.run_config().agents.as_ref().unwrap().agents[0].name, "researcher");
/// # Ok::<(), nexus_drive::DriveError>(())
/// ```
#[derive(Clone)]
pub struct AgentTool {
    spec: AgentSpec,
    base_url_set: bool,
    toolbox: Toolbox,
    agents: Vec<AgentTool>,
    api_key: Option<String>,
    error: Option<ToolboxError>,
}

impl fmt::Debug for AgentTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentTool")
            .field("name", &self.spec.name)
            .field("style", &self.spec.config.style)
            .field("model", &self.spec.config.model)
            .field("tools", &self.toolbox)
            .field("agents", &self.agents)
            .finish_non_exhaustive()
    }
}

impl AgentTool {
    /// An agent named `name` whose child runs on `model` over `style`. Its
    /// base URL is the client's when it speaks the client's style, else the
    /// style's public one, unless [`base_url`](Self::base_url) says otherwise.
    pub fn new(name: &str, description: impl Into<String>, style: Style, model: impl Into<String>) -> AgentTool {
        AgentTool::from_config(name, description, RunConfig::new(style, model))
    }

    /// An agent whose child runs with `config` (its tools and agents are
    /// given here, not in the config).
    pub fn from_config(name: &str, description: impl Into<String>, mut config: RunConfig) -> AgentTool {
        let base_url_set = config.base_url != config.style.default_base_url();
        config.agents = None;
        AgentTool {
            spec: AgentSpec::new(name, description, config),
            base_url_set,
            toolbox: Toolbox::new(),
            agents: Vec::new(),
            api_key: None,
            error: None,
        }
    }

    /// The child's system prompt.
    pub fn system(mut self, prompt: impl Into<String>) -> AgentTool {
        self.spec.config.system = Some(prompt.into());
        self
    }

    /// The child's cap on model calls; reaching it gives the parent an error result.
    pub fn max_turns(mut self, n: u32) -> AgentTool {
        self.spec.config.max_turns = n;
        self
    }

    /// The child's typed output (SPEC §16): its result to the parent is the
    /// validated value as compact JSON.
    pub fn output(mut self, spec: nexus_proto::OutputSpec) -> AgentTool {
        self.spec.config.output = Some(spec);
        self
    }

    /// The child's API root.
    pub fn base_url(mut self, url: impl Into<String>) -> AgentTool {
        self.spec.config.base_url = url.into();
        self.base_url_set = true;
        self
    }

    /// The child's API key (memory only). Without one: the client's when the
    /// child speaks the client's style, else the style's environment variable.
    pub fn api_key(mut self, key: impl Into<String>) -> AgentTool {
        self.api_key = Some(key.into());
        self
    }

    /// A typed blocking tool of the child.
    pub fn tool<T: Tool>(mut self, tool: T) -> AgentTool {
        if let Err(e) = self.toolbox.add(tool) {
            self.error.get_or_insert(e);
        }
        self
    }

    /// A dynamic tool of the child.
    pub fn dyn_tool(mut self, tool: DynTool) -> AgentTool {
        if let Err(e) = self.toolbox.add_dyn(tool) {
            self.error.get_or_insert(e);
        }
        self
    }

    /// The child's tools, replacing any given before.
    pub fn toolbox(mut self, toolbox: Toolbox) -> AgentTool {
        self.toolbox = toolbox;
        self
    }

    /// An agent the child may delegate to in turn.
    pub fn agent(mut self, agent: AgentTool) -> AgentTool {
        self.agents.push(agent);
        self
    }

    /// The tool name.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The tool declaration a run on `parent` gives its model for this agent.
    pub fn spec_decl(&self, parent: &RunConfig) -> nexus_proto::ToolDecl {
        self.spec(parent).decl()
    }

    /// The first tool that could not be added, if any.
    pub(crate) fn error(&self) -> Option<ToolboxError> {
        self.error.clone().or_else(|| self.agents.iter().find_map(AgentTool::error))
    }

    /// What the machine runs: the config with the child's tools and agents,
    /// the base URL resolved against the parent's.
    pub(crate) fn spec(&self, parent: &RunConfig) -> AgentSpec {
        let mut spec = self.spec.clone();
        if !self.base_url_set && spec.config.style == parent.style {
            spec.config.base_url = parent.base_url.clone();
        }
        spec.tools = self.toolbox.decls();
        for child in &self.agents {
            let child = child.spec(&spec.config);
            spec.config = spec.config.with_agent(child);
        }
        spec
    }
}

/// A client's agents, for serving their tool calls and keys.
#[derive(Clone, Debug, Default)]
pub(crate) struct AgentTools(pub(crate) Vec<AgentTool>);

impl AgentTools {
    /// The toolbox of the agent reached by `names` (from the top run's agents down).
    pub(crate) fn toolbox(&self, names: &[String]) -> Option<&Toolbox> {
        let (first, rest) = names.split_first()?;
        let mut agent = self.0.iter().find(|a| a.name() == first)?;
        for name in rest {
            agent = agent.agents.iter().find(|a| a.name() == name)?;
        }
        Some(&agent.toolbox)
    }

    /// Every agent's key, by name: its own, else `fallback` for its upstream.
    pub(crate) fn keys(&self, fallback: &dyn Fn(&Upstream) -> Option<String>) -> Vec<(String, String)> {
        fn walk(agents: &[AgentTool], fallback: &dyn Fn(&Upstream) -> Option<String>, out: &mut Vec<(String, String)>) {
            for a in agents {
                let c = &a.spec.config;
                let upstream = Upstream { style: c.style, base_url: c.base_url.clone(), model: c.model.clone() };
                if let Some(key) = a.api_key.clone().or_else(|| fallback(&upstream)) {
                    out.push((a.name().to_string(), key));
                }
                walk(&a.agents, fallback, out);
            }
        }
        let mut out = Vec::new();
        walk(&self.0, fallback, &mut out);
        out
    }
}
