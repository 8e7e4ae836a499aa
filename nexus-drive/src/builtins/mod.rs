//! The built-in tools: an agent that can act with zero wiring, with a
//! security posture a host can trust.
//!
//! Ten tools, with the names and input schemas of the upstream set:
//! `bash`, `read`, `write`, `edit`, `grep`, `glob`, `webfetch`, `question`,
//! `apply_patch` and `todowrite`. Every one of them is **off** until the host
//! turns it on, one by one or all at once:
//!
//! ```no_run
//! use nexus_drive::builtins::Builtins;
//! use nexus_drive::Toolbox;
//!
//! let builtins = Builtins::new("/srv/workspace").enable_all();
//! let mut toolbox = Toolbox::new();
//! builtins.add_to(&mut toolbox)?;
//!
//! // or only some, by name (what `--builtins=read,grep` means):
//! let readers = Builtins::new("/srv/workspace").select(Some("read,grep"))?;
//! assert_eq!(readers.enabled(), vec!["read", "grep"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! What "safe by default" means here:
//!
//! * **Confinement.** Every path a tool is given (including the paths inside
//!   an `apply_patch` text and `bash`'s working directory) resolves against the
//!   root; `..` escapes, absolute paths outside it and symbolic links that lead
//!   out of it are refused with an error *result* the model can read. The check
//!   canonicalizes the deepest existing ancestor, so it also holds for files
//!   `write` is about to create. It is a guarantee about the file tools' path
//!   resolution, not a sandbox: a command run by `bash` can reach anything the
//!   process can.
//! * **Caps.** Output the model sees is capped (64 KiB by default, with a note
//!   saying what was cut); `read`, `edit` and `grep` refuse or skip files over
//!   the read cap; `webfetch` caps the response size and the time.
//! * **`bash`** runs in its own process group, which is killed whole at the
//!   timeout (and when the command ends, so background jobs do not outlive
//!   it), with the provider API keys removed from its environment.
//! * **`webfetch`** only speaks http(s), follows redirects itself, and refuses
//!   loopback, private, link-local, CGNAT, multicast and unspecified addresses
//!   unless the host allows them — checked after DNS resolution, on every
//!   hop, and the connection goes to the address that was checked.
//!
//! A relay tool can never take a built-in's name, even when the built-ins
//! are off (see [`RESERVED_BUILTINS`]).

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

use crate::tool::{DynTool, ToolContext, ToolError, ToolOutcome, Toolbox, ToolboxError, RESERVED_BUILTINS};

mod bash;
mod files;
mod html;
mod interact;
mod patch;
mod paths;
mod search;
mod web;

pub use web::{Resolve, SystemResolver};

/// The provider API keys `bash` never passes on to a command.
pub const SCRUBBED_ENV: &[&str] =
    &["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENROUTER_API_KEY"];

/// A name that is not one of the built-in tools.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0:?} is not a built-in tool (the built-ins are: {list})", list = RESERVED_BUILTINS.join(", "))]
pub struct UnknownBuiltin(pub String);

/// The built-in tools' settings: which tools are on, the root they are
/// confined to, and their caps. All tools are off until turned on.
#[derive(Clone)]
pub struct Builtins {
    settings: Settings,
    enabled: BTreeSet<&'static str>,
}

/// What the tools read at call time (shared by all of them, behind an `Arc`).
#[derive(Clone)]
pub(crate) struct Settings {
    pub(crate) root: PathBuf,
    pub(crate) shell: PathBuf,
    pub(crate) bash_timeout: Duration,
    pub(crate) bash_max_timeout: Duration,
    pub(crate) output_cap: usize,
    pub(crate) read_cap: u64,
    pub(crate) scrub_env: Vec<String>,
    pub(crate) web: WebSettings,
}

/// `webfetch`'s settings.
#[derive(Clone)]
pub(crate) struct WebSettings {
    pub(crate) allow_private: bool,
    pub(crate) allowed: Vec<SocketAddr>,
    pub(crate) max_redirects: u32,
    pub(crate) max_bytes: u64,
    pub(crate) timeout: Duration,
    pub(crate) max_timeout: Duration,
    pub(crate) resolver: Arc<dyn Resolve>,
}

impl fmt::Debug for Builtins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.settings;
        f.debug_struct("Builtins")
            .field("enabled", &self.enabled())
            .field("root", &s.root)
            .field("bash_timeout", &s.bash_timeout)
            .field("output_cap", &s.output_cap)
            .field("read_cap", &s.read_cap)
            .field("webfetch_allow_private", &s.web.allow_private)
            .finish_non_exhaustive()
    }
}

impl Default for Builtins {
    /// All tools off, confined to the current directory.
    fn default() -> Builtins {
        Builtins::new(".")
    }
}

impl Builtins {
    /// Settings for tools confined to `root` (relative roots are taken from
    /// the current directory at call time). Every tool starts off.
    pub fn new(root: impl Into<PathBuf>) -> Builtins {
        Builtins {
            settings: Settings {
                root: root.into(),
                shell: PathBuf::from("bash"),
                bash_timeout: Duration::from_secs(60),
                bash_max_timeout: Duration::from_secs(600),
                output_cap: 64 * 1024,
                read_cap: 1024 * 1024,
                scrub_env: SCRUBBED_ENV.iter().map(|s| s.to_string()).collect(),
                web: WebSettings {
                    allow_private: false,
                    allowed: Vec::new(),
                    max_redirects: 5,
                    max_bytes: 5 * 1024 * 1024,
                    timeout: Duration::from_secs(30),
                    max_timeout: Duration::from_secs(120),
                    resolver: Arc::new(SystemResolver),
                },
            },
            enabled: BTreeSet::new(),
        }
    }

    /// Turns every built-in on.
    pub fn enable_all(mut self) -> Builtins {
        self.enabled = RESERVED_BUILTINS.iter().copied().collect();
        self
    }

    /// Turns every built-in off.
    pub fn disable_all(mut self) -> Builtins {
        self.enabled.clear();
        self
    }

    /// Turns one built-in on or off.
    pub fn set(mut self, name: &str, on: bool) -> Result<Builtins, UnknownBuiltin> {
        let name = canonical(name)?;
        if on {
            self.enabled.insert(name);
        } else {
            self.enabled.remove(name);
        }
        Ok(self)
    }

    /// Turns one built-in on.
    pub fn enable(self, name: &str) -> Result<Builtins, UnknownBuiltin> {
        self.set(name, true)
    }

    /// Exactly these built-ins on, every other one off.
    pub fn only<I, S>(mut self, names: I) -> Result<Builtins, UnknownBuiltin>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.enabled.clear();
        for name in names {
            self = self.enable(name.as_ref())?;
        }
        Ok(self)
    }

    /// The command-line form: `None` (a bare `--builtins`) turns them all on;
    /// `Some("read,grep")` turns on exactly those (blank items are ignored).
    pub fn select(self, list: Option<&str>) -> Result<Builtins, UnknownBuiltin> {
        match list {
            None => Ok(self.enable_all()),
            Some(list) => self.only(list.split(',').map(str::trim).filter(|n| !n.is_empty())),
        }
    }

    /// The built-ins that are on, in the canonical order.
    pub fn enabled(&self) -> Vec<&'static str> {
        RESERVED_BUILTINS.iter().copied().filter(|n| self.enabled.contains(n)).collect()
    }

    /// Whether `name` is on.
    pub fn is_enabled(&self, name: &str) -> bool {
        self.enabled.contains(name)
    }

    /// The root every path tool is confined to.
    pub fn root(&self) -> &Path {
        &self.settings.root
    }

    /// The interpreter `bash` runs commands with (`bash` from `PATH` by default),
    /// as `SHELL -c COMMAND`.
    pub fn shell(mut self, shell: impl Into<PathBuf>) -> Builtins {
        self.settings.shell = shell.into();
        self
    }

    /// `bash`'s timeout when the model gives none (60 s by default).
    pub fn bash_timeout(mut self, timeout: Duration) -> Builtins {
        self.settings.bash_timeout = timeout;
        self
    }

    /// The longest timeout the model may ask `bash` for (10 min by default).
    pub fn bash_max_timeout(mut self, timeout: Duration) -> Builtins {
        self.settings.bash_max_timeout = timeout;
        self
    }

    /// Also removes `var` from the environment of `bash` commands (the
    /// provider API keys in [`SCRUBBED_ENV`] always are).
    pub fn scrub_env(mut self, var: impl Into<String>) -> Builtins {
        self.settings.scrub_env.push(var.into());
        self
    }

    /// The most text one result gives the model (64 KiB by default); the rest
    /// is cut with a note saying so.
    pub fn output_cap(mut self, bytes: usize) -> Builtins {
        self.settings.output_cap = bytes.max(256);
        self
    }

    /// The largest file `read` reads whole, `edit` and `apply_patch` change,
    /// and `grep` searches (1 MiB by default). `read` can still page through a
    /// larger file with `offset`/`limit`.
    pub fn read_cap(mut self, bytes: u64) -> Builtins {
        self.settings.read_cap = bytes;
        self
    }

    /// Lets `webfetch` reach loopback, private, link-local and other
    /// non-public addresses (off by default).
    pub fn webfetch_allow_private(mut self, allow: bool) -> Builtins {
        self.settings.web.allow_private = allow;
        self
    }

    /// Lets `webfetch` reach this one address and port even though it is not
    /// public (an internal documentation server, say); every other non-public
    /// address stays refused.
    pub fn webfetch_allow_address(mut self, addr: SocketAddr) -> Builtins {
        self.settings.web.allowed.push(addr);
        self
    }

    /// How many redirects `webfetch` follows (5 by default).
    pub fn webfetch_max_redirects(mut self, n: u32) -> Builtins {
        self.settings.web.max_redirects = n;
        self
    }

    /// The most bytes of a response `webfetch` reads (5 MiB by default).
    pub fn webfetch_max_bytes(mut self, bytes: u64) -> Builtins {
        self.settings.web.max_bytes = bytes;
        self
    }

    /// `webfetch`'s time budget when the model gives none (30 s by default),
    /// covering resolution, every hop and the body.
    pub fn webfetch_timeout(mut self, timeout: Duration) -> Builtins {
        self.settings.web.timeout = timeout;
        self
    }

    /// The longest time budget the model may ask `webfetch` for (2 min by default).
    pub fn webfetch_max_timeout(mut self, timeout: Duration) -> Builtins {
        self.settings.web.max_timeout = timeout;
        self
    }

    /// How `webfetch` turns host names into addresses (the system resolver by
    /// default). Every address it returns is checked before any connection.
    pub fn webfetch_resolver(mut self, resolver: impl Resolve) -> Builtins {
        self.settings.web.resolver = Arc::new(resolver);
        self
    }

    /// The enabled tools, in the canonical order, ready for a [`Toolbox`] or
    /// a [`ClientBuilder`](crate::ClientBuilder).
    pub fn tools(&self) -> Vec<DynTool> {
        let settings = Arc::new(self.settings.clone());
        self.enabled()
            .into_iter()
            .map(|name| {
                let s = settings.clone();
                DynTool::new(name, describe(name), schema(name), move |args, ctx| dispatch(&s, name, args, ctx))
            })
            .collect()
    }

    /// Adds the enabled tools to a toolbox.
    pub fn add_to(&self, toolbox: &mut Toolbox) -> Result<(), ToolboxError> {
        for tool in self.tools() {
            toolbox.add_dyn(tool)?;
        }
        Ok(())
    }

    /// Runs one built-in directly, as a driver would (for hosts with their own
    /// dispatch, and for tests). A tool that is off gives an error result.
    pub fn call(&self, name: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutcome<Value>, ToolError> {
        let known = canonical(name).map_err(|e| ToolError::msg(e.to_string()))?;
        if !self.enabled.contains(known) {
            return Err(ToolError::msg(format!("the built-in tool {known} is not enabled")));
        }
        dispatch(&self.settings, known, args, ctx)
    }
}

/// The `&'static` name of a built-in.
fn canonical(name: &str) -> Result<&'static str, UnknownBuiltin> {
    RESERVED_BUILTINS.iter().copied().find(|n| *n == name).ok_or_else(|| UnknownBuiltin(name.to_string()))
}

fn dispatch(s: &Settings, name: &str, args: Value, ctx: &ToolContext) -> Result<ToolOutcome<Value>, ToolError> {
    match name {
        "bash" => bash::run(s, parse(name, args)?, ctx),
        "read" => files::read(s, parse(name, args)?, ctx),
        "write" => files::write(s, parse(name, args)?),
        "edit" => files::edit(s, parse(name, args)?),
        "grep" => search::grep(s, parse(name, args)?),
        "glob" => search::glob(s, parse(name, args)?),
        "webfetch" => web::fetch(s, parse(name, args)?, ctx),
        "question" => interact::question(args, ctx),
        "apply_patch" => patch::run(s, parse(name, args)?),
        "todowrite" => interact::todowrite(parse(name, args)?),
        other => Err(ToolError::msg(format!("{other:?} is not a built-in tool"))),
    }
}

/// What a tool does, for the model.
fn describe(name: &str) -> &'static str {
    match name {
        "bash" => concat!(
            "Run a shell command (bash -c) in the workspace and return its combined stdout and ",
            "stderr. A non-zero exit is an error. The command runs in its own process group, which ",
            "is killed at the timeout and when the command ends: background jobs do not outlive it. ",
            "Long output is cut in the middle.",
        ),
        "read" => concat!(
            "Read a text file in the workspace. Lines come back numbered (line number, tab, text); ",
            "use offset (1-based line) and limit (line count) to read a window of a long file.",
        ),
        "write" => concat!(
            "Write a file in the workspace, replacing it whole if it exists and creating parent ",
            "directories.",
        ),
        "edit" => concat!(
            "Replace an exact string in a file. oldString must occur exactly once unless replaceAll ",
            "is true; include enough surrounding text to make it unique.",
        ),
        "grep" => concat!(
            "Search file contents with a regular expression (Rust regex syntax) under a directory ",
            "of the workspace. Prints path:line:text, paths relative to the workspace, sorted. ",
            "include filters file names with a glob (e.g. *.rs).",
        ),
        "glob" => concat!(
            "List the files matching a glob pattern (*, **, ?, {a,b}) under a directory of the ",
            "workspace, as sorted paths relative to the workspace. A pattern without / matches ",
            "file names at any depth.",
        ),
        "webfetch" => concat!(
            "Fetch an http(s) URL and return its content as markdown (default), plain text or raw ",
            "html. Only public addresses are reachable.",
        ),
        "question" => concat!(
            "Ask the user one or more questions and wait for the answer. Never use it to ask for ",
            "passwords, keys or other secrets.",
        ),
        "apply_patch" => concat!(
            "Apply a patch to workspace files. Format: '*** Begin Patch', then per file ",
            "'*** Add File: PATH' (every line prefixed with +), '*** Delete File: PATH', or ",
            "'*** Update File: PATH' (optionally followed by '*** Move to: PATH') with hunks that ",
            "start with '@@' (optionally followed by a line to find first) and hold ' ' context, ",
            "'-' removed and '+' added lines; then '*** End Patch'. Every hunk is checked first, ",
            "and either every file changes or none does.",
        ),
        "todowrite" => "Write the todo list (the whole list each time) and get it back rendered.",
        _ => "",
    }
}

fn schema(name: &str) -> Value {
    use serde_json::json;
    let body = match name {
        "bash" => json!({
            "properties": {
                "command": {"type": "string", "description": "The command to run"},
                "timeout": {"type": "number", "description": "Timeout in milliseconds (default 60000)"},
                "workdir": {"type": "string", "description": "Working directory, inside the workspace (default: its root)"},
                "description": {"type": "string", "description": "What the command does, in a few words"}
            },
            "required": ["command"]
        }),
        "read" => json!({
            "properties": {
                "path": {"type": "string", "description": "The file to read"},
                "offset": {"type": "number", "description": "The 1-based line to start at"},
                "limit": {"type": "number", "description": "How many lines to read (default 2000)"}
            },
            "required": ["path"]
        }),
        "write" => json!({
            "properties": {
                "path": {"type": "string", "description": "The file to write"},
                "content": {"type": "string", "description": "The whole new content"}
            },
            "required": ["path", "content"]
        }),
        "edit" => json!({
            "properties": {
                "path": {"type": "string", "description": "The file to edit"},
                "oldString": {"type": "string", "description": "The exact text to replace"},
                "newString": {"type": "string", "description": "The text to put instead"},
                "replaceAll": {"type": "boolean", "description": "Replace every occurrence (default false)"}
            },
            "required": ["path", "oldString", "newString"]
        }),
        "grep" => json!({
            "properties": {
                "pattern": {"type": "string", "description": "The regular expression to search for"},
                "path": {"type": "string", "description": "The directory to search (default: the workspace root)"},
                "include": {"type": "string", "description": "Only files whose names match this glob, e.g. *.rs"},
                "limit": {"type": "number", "description": "The most matches to return (default 100)"}
            },
            "required": ["pattern"]
        }),
        "glob" => json!({
            "properties": {
                "pattern": {"type": "string", "description": "The glob pattern, e.g. **/*.rs"},
                "path": {"type": "string", "description": "The directory to search (default: the workspace root)"},
                "limit": {"type": "number", "description": "The most paths to return (default 100)"}
            },
            "required": ["pattern"]
        }),
        "webfetch" => json!({
            "properties": {
                "url": {"type": "string", "description": "The http(s) URL to fetch"},
                "format": {"type": "string", "enum": ["text", "markdown", "html"], "description": "The format of the content (default markdown)"},
                "timeout": {"type": "number", "description": "Timeout in seconds (default 30)"}
            },
            "required": ["url"]
        }),
        "question" => json!({
            "properties": {
                "questions": {
                    "type": "array",
                    "description": "The questions to ask",
                    "items": {
                        "type": "object",
                        "properties": {
                            "question": {"type": "string", "description": "The question"},
                            "header": {"type": "string", "description": "A short label for it"},
                            "options": {"type": "array", "items": {"type": "string"}, "description": "Choices to offer"},
                            "multiple": {"type": "boolean", "description": "Whether several options may be chosen"}
                        },
                        "required": ["question"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["questions"]
        }),
        "apply_patch" => json!({
            "properties": {
                "patchText": {"type": "string", "description": "The patch, from '*** Begin Patch' to '*** End Patch'"}
            },
            "required": ["patchText"]
        }),
        "todowrite" => json!({
            "properties": {
                "todos": {
                    "type": "array",
                    "description": "The whole todo list",
                    "items": {
                        "type": "object",
                        "properties": {
                            "id": {"type": "string"},
                            "text": {"type": "string"},
                            "completed": {"type": "boolean"}
                        },
                        "required": ["id", "text", "completed"],
                        "additionalProperties": false
                    }
                }
            },
            "required": ["todos"]
        }),
        _ => json!({"properties": {}}),
    };
    let mut schema = json!({"type": "object"});
    if let (Some(out), Value::Object(fields)) = (schema.as_object_mut(), body) {
        out.extend(fields);
        out.insert("additionalProperties".into(), Value::Bool(false));
    }
    schema
}

/// The arguments as the tool's type; a mismatch is an error result naming the problem.
fn parse<A: DeserializeOwned>(name: &str, args: Value) -> Result<A, ToolError> {
    // A model that sends no arguments at all means "no arguments".
    let args = if args.is_null() { Value::Object(Default::default()) } else { args };
    serde_json::from_value(args).map_err(|e| ToolError::msg(format!("invalid arguments for {name}: {e}")))
}

/// A count or size the model may send as an integer, a float (`10.0`) or a
/// numeric string (`"10"`): models do all three. Negative values become 0.
pub(crate) fn lenient_u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let Some(n) = lenient_f64(d)? else {
        return Ok(None);
    };
    if n.is_nan() || n <= 0.0 {
        return Ok(Some(0));
    }
    // `as` saturates at u64::MAX for huge floats, which every caller clamps.
    Ok(Some(n as u64))
}

/// A number the model may send as a number or a numeric string.
pub(crate) fn lenient_f64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Num {
        N(f64),
        S(String),
    }
    match Option::<Num>::deserialize(d)? {
        None => Ok(None),
        Some(Num::N(n)) => Ok(Some(n)),
        Some(Num::S(s)) if s.trim().is_empty() => Ok(None),
        Some(Num::S(s)) => {
            s.trim().parse::<f64>().map(Some).map_err(|_| serde::de::Error::custom(format!("{s:?} is not a number")))
        }
    }
}

/// `text` cut to at most `cap` bytes (on a character boundary), with a note
/// saying how much was left out, so the model knows it did not see it all.
pub(crate) fn cap_text(text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let omitted = text.len() - end;
    let mut out = text;
    out.truncate(end);
    out.push_str(&format!("\n[output cut: {omitted} more bytes not shown]"));
    out
}

/// A successful text result.
pub(crate) fn done(text: String) -> Result<ToolOutcome<Value>, ToolError> {
    Ok(ToolOutcome::Done(Value::String(text)))
}

/// Whether these bytes look like a binary file (a NUL in the first 8 KiB, as git decides).
pub(crate) fn looks_binary(bytes: &[u8]) -> bool {
    bytes.iter().take(8192).any(|b| *b == 0)
}
