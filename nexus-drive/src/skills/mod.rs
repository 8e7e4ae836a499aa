//! Agent Skills: packaged know-how in the open `SKILL.md` format, loaded on
//! demand.
//!
//! A skill is a folder whose `SKILL.md` holds YAML front matter (`name`,
//! `description`, optional `license`, `compatibility`, `metadata`,
//! `allowed-tools`) and Markdown instructions, with any files next to it
//! (`scripts/`, `references/`, `assets/`). A run sees skills in three steps,
//! so a hundred skills cost a hundred short lines until one is needed:
//!
//! 1. **Catalog.** Each skill's name and description are added to the
//!    system prompt, sorted by name, within a size budget
//!    ([`Skills::catalog_budget`]); skills past it are listed by name only,
//!    and [`Catalog::names_only`] tells the host which.
//! 2. **Activation.** A tool named `skill` (input `{"name": "…"}`) returns
//!    the skill's instructions and the list of its files.
//! 3. **Files.** Once a skill is activated, its folder joins the folders the
//!    `read` built-in may read (the workspace root stays the only one it may
//!    write or search). Scripts run only through `bash`, and only when the
//!    host enabled `bash`: a skill never turns a tool on, and never widens
//!    what a tool may reach before the model activated it.
//!
//! ```no_run
//! use nexus_drive::builtins::Builtins;
//! use nexus_drive::skills::Skills;
//! use nexus_drive::{ClientConfig, Style};
//!
//! let found = Skills::discover(["/srv/skills"]);
//! for problem in &found.errors {
//!     eprintln!("skipped: {problem}"); // names the file and the field
//! }
//! let skills = found.skills.catalog_budget(8 * 1024);
//! let late = skills.catalog().names_only;
//! if !late.is_empty() {
//!     eprintln!("listed by name only (over the catalog budget): {}", late.join(", "));
//! }
//! let mut config = ClientConfig::builder(Style::Anthropic, "claude-sonnet-4-5")
//!     .system("You help with documents.")
//!     .skills(skills);
//! for tool in Builtins::new("/srv/workspace").only(["read"])?.tools() {
//!     config = config.dyn_tool(tool);
//! }
//! let config = config.build()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Activations live in the transcript: every completed, successful `skill`
//! call is one ([`activations`]). A run restored from a snapshot therefore
//! knows what the model loaded, and its skills' folders are readable again,
//! with no state of their own. Each activation is also shown as a
//! [`StreamEvent::SkillActivated`](crate::StreamEvent::SkillActivated).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use nexus_proto::{Message, ToolResult};
use serde_json::{json, Value};

use crate::tool::{DynTool, ToolError, ToolOutcome};

mod catalog;
mod discover;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub(crate) mod parse;

pub use catalog::Catalog;
pub use parse::{MAX_COMPATIBILITY_CHARS, MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS};

/// The name of the tool that activates a skill.
pub const SKILL_TOOL: &str = "skill";

/// The catalog budget unless the host sets one: 16 KiB of system prompt.
pub const DEFAULT_CATALOG_BUDGET: usize = 16 * 1024;

/// One skill: its front matter, instructions and files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    name: String,
    description: String,
    license: Option<String>,
    compatibility: Option<String>,
    metadata: BTreeMap<String, String>,
    allowed_tools: Vec<String>,
    dir: PathBuf,
    skill_md: PathBuf,
    body: String,
    files: Vec<String>,
    files_truncated: bool,
}

impl Skill {
    /// The name (the same as its folder's).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it does and when to use it.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The `license` field.
    pub fn license(&self) -> Option<&str> {
        self.license.as_deref()
    }

    /// The `compatibility` field (environment requirements).
    pub fn compatibility(&self) -> Option<&str> {
        self.compatibility.as_deref()
    }

    /// The `metadata` map, every value as written.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The `allowed-tools` field, split into tool names. Informative only: it
    /// turns no tool on (the host decides which tools a run has).
    pub fn allowed_tools(&self) -> &[String] {
        &self.allowed_tools
    }

    /// The skill's folder, canonical.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `SKILL.md` file, as found.
    pub fn skill_md(&self) -> &Path {
        &self.skill_md
    }

    /// The instructions (the Markdown after the front matter, trimmed).
    pub fn body(&self) -> &str {
        &self.body
    }

    /// The files the skill bundles besides `SKILL.md`, relative to its
    /// folder with `/` separators, sorted.
    pub fn files(&self) -> &[String] {
        &self.files
    }

    /// Whether [`files`](Self::files) was cut at [`SkillLimits::max_files`]
    /// or [`SkillLimits::max_depth`].
    pub fn files_truncated(&self) -> bool {
        self.files_truncated
    }
}

/// What is wrong with a skill that was not loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkillErrorKind {
    /// The skills directory, the folder or its `SKILL.md` cannot be read.
    Unreadable,
    /// `SKILL.md` is over [`SkillLimits::max_skill_md_bytes`].
    TooLarge,
    /// No front matter, or front matter that is not a YAML mapping.
    FrontMatter,
    /// A field breaks the format's rules ([`SkillError::field`] says which).
    Field,
    /// A symbolic link in the folder leads out of it (or nowhere).
    Symlink,
    /// Another skills directory given earlier has a skill of this name.
    Duplicate,
}

/// A skill that was skipped, and why: the file, the field when one is at
/// fault, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillError {
    /// The file (or folder, or link) at fault.
    pub path: PathBuf,
    /// The front-matter field at fault (`name`, `metadata.version`, …).
    pub field: Option<String>,
    /// What kind of problem it is.
    pub kind: SkillErrorKind,
    /// What is wrong, in words.
    pub message: String,
}

impl SkillError {
    fn new(path: &Path, field: Option<String>, kind: SkillErrorKind, message: String) -> SkillError {
        SkillError { path: path.to_path_buf(), field, kind, message }
    }
}

impl fmt::Display for SkillError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{}: field `{field}` {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for SkillError {}

/// Bounds on what discovery reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkillLimits {
    /// The largest `SKILL.md` read (256 KiB by default); a larger one skips its skill.
    pub max_skill_md_bytes: u64,
    /// The most files listed per skill (500 by default).
    pub max_files: usize,
    /// The deepest folder level listed (6 by default).
    pub max_depth: usize,
}

impl Default for SkillLimits {
    fn default() -> SkillLimits {
        SkillLimits { max_skill_md_bytes: 256 * 1024, max_files: 500, max_depth: 6 }
    }
}

/// What [`Skills::discover`] found: the skills that loaded, and one error per
/// skill (or directory) that did not.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// The valid skills.
    pub skills: Skills,
    /// Why each other skill was skipped.
    pub errors: Vec<SkillError>,
}

/// A set of skills with unique names, sorted by name, and the catalog budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skills {
    skills: Vec<Skill>,
    budget: usize,
}

impl Default for Skills {
    fn default() -> Skills {
        Skills { skills: Vec::new(), budget: DEFAULT_CATALOG_BUDGET }
    }
}

impl Skills {
    /// Discovers the skills in `dirs`, each a directory of skill folders,
    /// with the default [`SkillLimits`]. Invalid skills are skipped, each
    /// with an error; when two directories hold a skill of the same name,
    /// the one in the directory given first wins.
    pub fn discover<I, P>(dirs: I) -> Discovery
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        Skills::discover_with(dirs, &SkillLimits::default())
    }

    /// [`discover`](Self::discover) with other limits.
    pub fn discover_with<I, P>(dirs: I, limits: &SkillLimits) -> Discovery
    where
        I: IntoIterator<Item = P>,
        P: AsRef<Path>,
    {
        let mut skills: Vec<Skill> = Vec::new();
        let mut errors = Vec::new();
        for dir in dirs {
            let (found, problems) = discover::scan_dir(dir.as_ref(), limits);
            errors.extend(problems);
            for skill in found {
                if let Some(first) = skills.iter().find(|s| s.name == skill.name) {
                    errors.push(SkillError::new(
                        &skill.skill_md,
                        None,
                        SkillErrorKind::Duplicate,
                        format!("a skill named {:?} was already found at {}", skill.name, first.skill_md.display()),
                    ));
                } else {
                    skills.push(skill);
                }
            }
        }
        skills.sort_by(|a, b| a.name.cmp(&b.name));
        Discovery { skills: Skills { skills, budget: DEFAULT_CATALOG_BUDGET }, errors }
    }

    /// The most bytes of system prompt the catalog may take (16 KiB by
    /// default). Skills whose description would not fit are listed by
    /// name only, after the others.
    pub fn catalog_budget(mut self, bytes: usize) -> Skills {
        self.budget = bytes;
        self
    }

    /// The skills, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &Skill> {
        self.skills.iter()
    }

    /// The skill named `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name == name)
    }

    /// How many skills there are.
    pub fn len(&self) -> usize {
        self.skills.len()
    }

    /// Whether there are none (then a client adds no catalog and no tool).
    pub fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The catalog the system prompt gets.
    pub fn catalog(&self) -> Catalog {
        catalog::build(&self.skills, self.budget)
    }

    /// The `skill` tool. `can_read` and `can_run`: whether the run has the
    /// `read` and `bash` built-ins, so the model is told how (or whether) it
    /// can use the skill's files.
    pub fn tool(&self, can_read: bool, can_run: bool) -> DynTool {
        let names: Vec<Value> = self.skills.iter().map(|s| Value::String(s.name.clone())).collect();
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "enum": names, "description": "The skill's name, as listed in the system prompt"}
            },
            "required": ["name"],
            "additionalProperties": false
        });
        let this = self.clone();
        DynTool::new(SKILL_TOOL, catalog::TOOL_DESCRIPTION, schema, move |args, _ctx| {
            let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
            this.activate(name, can_read, can_run).map(ToolOutcome::Result)
        })
    }

    /// What the `skill` tool answers for `name`: the instructions, the skill
    /// directory and the list of its files (and, in the result's metadata,
    /// `{"skill": name, "dir": folder}`); an error naming the skills when
    /// there is no such skill. `can_read`/`can_run` as for [`tool`](Self::tool).
    pub fn activate(&self, name: &str, can_read: bool, can_run: bool) -> Result<ToolResult, ToolError> {
        let Some(skill) = self.get(name) else {
            let known: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
            return Err(ToolError::msg(format!("no skill named {name:?}; the skills are: {}", known.join(", "))));
        };
        let mut result = ToolResult::ok(catalog::activation_text(skill, can_read, can_run));
        result.metadata = Some(json!({"skill": skill.name, "dir": skill.dir.display().to_string()}));
        Ok(result)
    }

    /// The folders of the skills activated in `transcript` (see
    /// [`activations`]), in activation order, each once. Skills this set
    /// does not hold (any more) are left out.
    pub fn granted_dirs(&self, transcript: &[Message]) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = Vec::new();
        for a in activations(transcript) {
            if let Some(skill) = self.get(&a.name) {
                if !dirs.contains(&skill.dir) {
                    dirs.push(skill.dir.clone());
                }
            }
        }
        dirs
    }
}

/// One activation of a skill: a completed `skill` call that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activation {
    /// The call's id.
    pub call_id: String,
    /// The skill's name.
    pub name: String,
}

/// The skills activated in a transcript, in order: every `skill` call with
/// a result that is not an error. This is how a restored run knows what the
/// model loaded: the transcript is the record.
pub fn activations(transcript: &[Message]) -> Vec<Activation> {
    let mut calls: BTreeMap<&str, &str> = BTreeMap::new();
    let mut out = Vec::new();
    for message in transcript {
        for call in message.tool_calls().filter(|c| c.name == SKILL_TOOL) {
            if let Some(name) = call.input.get("name").and_then(Value::as_str) {
                calls.insert(call.id.as_str(), name);
            }
        }
        for result in message.tool_results().filter(|r| r.name == SKILL_TOOL && !r.is_error) {
            if let Some(name) = calls.get(result.call_id.as_str()) {
                out.push(Activation { call_id: result.call_id.clone(), name: name.to_string() });
            }
        }
    }
    out
}
