//! Sub-agent definitions as Markdown files with YAML front matter, the
//! format Claude Code keeps in `.claude/agents/`: `name`, `description`,
//! `tools` (a comma-separated list, or a YAML list, of tool names; absent:
//! the parent's tools), `model` (a model id on the parent's upstream, or
//! `inherit`, the default) and nexus's own optional `max_turns`; the body is
//! the agent's system prompt. The front matter is read with the Agent
//! Skills parser (saphyr).

use std::fmt;
use std::path::{Path, PathBuf};

use nexus_proto::Style;

use crate::agent::AgentTool;
use crate::skills::parse::{fields, split, Field};
use crate::tool::{Toolbox, ToolboxError};

/// One agent definition, read from its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFile {
    /// The tool name the parent's model sees.
    pub name: String,
    /// What the agent does, for the parent's model.
    pub description: String,
    /// The tools it may use, by name; `None`: the parent's.
    pub tools: Option<Vec<String>>,
    /// Its model on the parent's upstream; `None`: the parent's (`inherit`).
    pub model: Option<String>,
    /// Its cap on model calls.
    pub max_turns: Option<u32>,
    /// The body: its system prompt.
    pub prompt: String,
    /// Where it was read from.
    pub path: PathBuf,
}

impl AgentFile {
    /// The agent as a tool of a run on `style` and `model` whose tools are
    /// `toolbox`: the child runs on the same style, on its own model or the
    /// run's, with the tools the file names taken from `toolbox` (all of
    /// them when it names none). A name `toolbox` lacks is an error.
    pub fn agent_tool(&self, style: Style, model: &str, toolbox: &Toolbox) -> Result<AgentTool, ToolboxError> {
        let tools = match &self.tools {
            None => toolbox.clone(),
            Some(names) => toolbox.only(names)?,
        };
        let mut tool =
            AgentTool::new(&self.name, self.description.clone(), style, self.model.as_deref().unwrap_or(model))
                .system(self.prompt.clone())
                .toolbox(tools);
        if let Some(n) = self.max_turns {
            tool = tool.max_turns(n);
        }
        Ok(tool)
    }
}

/// Why a file is not an agent: the file, the 1-based line, the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentFileError {
    /// The file.
    pub path: PathBuf,
    /// The line the problem is on (the field's, else the first).
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for AgentFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path.display(), self.line, self.message)
    }
}

impl std::error::Error for AgentFileError {}

/// What a search of agent directories found.
#[derive(Debug, Clone, Default)]
pub struct FoundAgents {
    /// The agents, first directory first, files by name; a name defined
    /// again later is left out.
    pub agents: Vec<AgentFile>,
    /// Files that are not agents.
    pub errors: Vec<AgentFileError>,
    /// Later definitions of a name already taken: (name, the file kept, the file left out).
    pub duplicates: Vec<(String, PathBuf, PathBuf)>,
}

/// Reads every `*.md` file of each directory (not recursing), in order.
pub fn discover_agents(dirs: &[impl AsRef<Path>]) -> FoundAgents {
    let mut found = FoundAgents::default();
    for dir in dirs {
        let mut files: Vec<PathBuf> = match std::fs::read_dir(dir.as_ref()) {
            Ok(entries) => entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "md"))
                .collect(),
            Err(e) => {
                found.errors.push(AgentFileError { path: dir.as_ref().to_path_buf(), line: 0, message: e.to_string() });
                continue;
            }
        };
        files.sort();
        for path in files {
            let parsed = std::fs::read_to_string(&path)
                .map_err(|e| AgentFileError { path: path.clone(), line: 0, message: e.to_string() })
                .and_then(|text| parse_agent_file(&path, &text));
            match parsed {
                Err(e) => found.errors.push(e),
                Ok(agent) => match found.agents.iter().find(|a| a.name == agent.name) {
                    Some(kept) => found.duplicates.push((agent.name.clone(), kept.path.clone(), agent.path)),
                    None => found.agents.push(agent),
                },
            }
        }
    }
    found
}

/// The agents of `dirs` for a library caller, who has no one to warn: a
/// path that is not a directory, the first file that is not an agent, or a
/// name defined again is the error (where `nexus run --agents` warns and
/// goes on).
pub fn load_agents(dirs: &[impl AsRef<Path>]) -> Result<Vec<AgentFile>, AgentFileError> {
    if let Some(dir) = dirs.iter().map(AsRef::as_ref).find(|d| !d.is_dir()) {
        return Err(AgentFileError { path: dir.to_path_buf(), line: 0, message: "not a directory".into() });
    }
    let found = discover_agents(dirs);
    if let Some(e) = found.errors.into_iter().next() {
        return Err(e);
    }
    if let Some((name, kept, again)) = found.duplicates.into_iter().next() {
        let message = format!("the name {name} is already defined by {}", kept.display());
        return Err(AgentFileError { path: again, line: 1, message });
    }
    Ok(found.agents)
}

/// Parses one definition; `path` names it in errors.
pub fn parse_agent_file(path: &Path, text: &str) -> Result<AgentFile, AgentFileError> {
    let fail = |line: usize, message: String| AgentFileError { path: path.to_path_buf(), line, message };
    let (yaml, body) = split(text).map_err(|p| fail(1, p.message))?;
    // Line 1 is the opening `---`; the front matter starts on line 2.
    let line_of = |key: &str| {
        yaml.lines()
            .position(|l| l.strip_prefix(key).is_some_and(|rest| rest.trim_start().starts_with(':')))
            .map_or(1, |i| i + 2)
    };
    let fields = fields(yaml).map_err(|p| fail(yaml_error_line(&p.message).map_or(1, |l| l + 1), p.message))?;
    let text = |key: &str| -> Result<Option<String>, AgentFileError> {
        match fields.get(key) {
            None => Ok(None),
            Some(Field::Text(t)) => Ok(Some(t.trim().to_string())),
            Some(_) => Err(fail(line_of(key), format!("{key} must be a string"))),
        }
    };
    let name = text("name")?.filter(|n| !n.is_empty()).ok_or_else(|| fail(1, "name is missing".into()))?;
    if let Some(c) = name.chars().find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_')) {
        return Err(fail(line_of("name"), format!("name {name:?} contains {c:?}: a tool name takes [A-Za-z0-9_-]")));
    }
    let description = text("description")?
        .filter(|d| !d.is_empty())
        .ok_or_else(|| fail(line_of("description").max(1), "description is missing".into()))?;
    let tools = match fields.get("tools") {
        None => None,
        Some(Field::Text(t)) => Some(t.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()),
        Some(Field::List(l)) => Some(l.iter().map(|s| s.trim().to_string()).collect()),
        Some(Field::Other) => return Err(fail(line_of("tools"), "tools must be a comma-separated list".into())),
    };
    let model = text("model")?.filter(|m| !m.is_empty() && m != "inherit");
    let max_turns = match text("max_turns")? {
        None => None,
        Some(n) => match n.parse::<u32>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(fail(line_of("max_turns"), format!("max_turns must be a whole number from 1, not {n:?}"))),
        },
    };
    Ok(AgentFile { name, description, tools, model, max_turns, prompt: body.to_string(), path: path.to_path_buf() })
}

/// The 1-based line inside the front matter a YAML error names, if any.
fn yaml_error_line(message: &str) -> Option<usize> {
    let at = message.find("line ")?;
    message[at + 5..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AgentFile, AgentFileError> {
        parse_agent_file(Path::new("agents/a.md"), text)
    }

    #[test]
    fn a_claude_code_agent_file_reads_whole() {
        let a = parse(
            "---\nname: code-reviewer\ndescription: Reviews diffs for bugs\ntools: read, grep,  glob\n\
             model: inherit\nmax_turns: 4\n---\nYou review code.\n",
        )
        .unwrap();
        assert_eq!((a.name.as_str(), a.description.as_str()), ("code-reviewer", "Reviews diffs for bugs"));
        assert_eq!(a.tools, Some(vec!["read".to_string(), "grep".to_string(), "glob".to_string()]));
        assert_eq!((a.model, a.max_turns, a.prompt.as_str()), (None, Some(4), "You review code."));
        let b = parse("---\nname: b\ndescription: d\ntools: [read, bash]\nmodel: other-model\n---\n").unwrap();
        assert_eq!(b.tools, Some(vec!["read".to_string(), "bash".to_string()]));
        assert_eq!(b.model.as_deref(), Some("other-model"));
        assert_eq!(parse("---\nname: c\ndescription: d\n---\nbody").unwrap().tools, None);
    }

    #[test]
    fn load_agents_refuses_what_discovery_would_warn_about() {
        let dir = std::env::temp_dir().join(format!("nexus-agent-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        std::fs::write(a.join("one.md"), "---\nname: one\ndescription: d\n---\nFirst.").unwrap();
        assert_eq!(load_agents(&[&a]).unwrap()[0].prompt, "First.");
        std::fs::write(b.join("again.md"), "---\nname: one\ndescription: d\n---\n").unwrap();
        let e = load_agents(&[&a, &b]).unwrap_err();
        assert_eq!((e.path, e.line), (b.join("again.md"), 1));
        assert!(e.message.contains("one.md"), "{}", e.message);
        std::fs::write(a.join("two.md"), "---\nname: two\n---\n").unwrap();
        assert_eq!(load_agents(&[&a]).unwrap_err().message, "description is missing");
        assert_eq!(load_agents(&[a.join("one.md")]).unwrap_err().message, "not a directory");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn errors_name_the_file_and_the_line() {
        let e = parse("---\nname: a\ndescription: d\nmax_turns: many\n---\n").unwrap_err();
        assert_eq!(e.to_string(), "agents/a.md:4: max_turns must be a whole number from 1, not \"many\"");
        let e = parse("---\ndescription: d\n---\n").unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (1, "name is missing"));
        let e = parse("---\nname: bad name\ndescription: d\n---\n").unwrap_err();
        assert_eq!(e.line, 2, "{e}");
        let e = parse("no front matter").unwrap_err();
        assert!(e.to_string().starts_with("agents/a.md:1: no YAML front matter"), "{e}");
        let e = parse("---\nname: a\ndescription: d\ntools: {x: 1}\n---\n").unwrap_err();
        assert_eq!(e.line, 4, "{e}");
    }
}
