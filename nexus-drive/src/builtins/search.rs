//! `grep` and `glob`: walks of a directory inside the root.
//!
//! Both collect every candidate, sort, then cut at the limit, so which files
//! the model sees never depends on the order the file system lists them in.
//! Paths are printed relative to the root with `/` separators, the same
//! strings `read` and `edit` accept.
//!
//! The walk does not follow symbolic links (a link could lead out of the
//! root), and skips `.git` and `node_modules` below the starting directory.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use globset::{Glob, GlobBuilder, GlobMatcher};
use regex::RegexBuilder;
use serde::Deserialize;
use serde_json::Value;

use super::paths::Jail;
use super::{cap_text, done, lenient_u64, looks_binary, Settings};
use crate::tool::{ToolError, ToolOutcome};

/// Matches returned when the model gives no limit.
const DEFAULT_LIMIT: u64 = 100;
/// Directories no search descends into.
const SKIPPED_DIRS: &[&str] = &[".git", "node_modules"];
/// Entries a walk looks at before it stops, so a search of a huge tree ends.
const MAX_WALK_ENTRIES: usize = 200_000;
/// Matched lines longer than this are cut in `grep` output.
const MAX_MATCH_CHARS: usize = 500;

/// `grep` arguments.
#[derive(Deserialize)]
pub(crate) struct GrepArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default)]
    include: Option<String>,
    #[serde(default, deserialize_with = "lenient_u64")]
    limit: Option<u64>,
}

/// `glob` arguments.
#[derive(Deserialize)]
pub(crate) struct GlobArgs {
    pattern: String,
    #[serde(default)]
    path: Option<String>,
    #[serde(default, deserialize_with = "lenient_u64")]
    limit: Option<u64>,
}

fn fail<T>(tool: &str, msg: impl std::fmt::Display) -> Result<T, ToolError> {
    Err(ToolError::msg(format!("{tool}: {msg}")))
}

/// A file found by a walk.
struct Found {
    /// Relative to the walk's starting directory (what patterns match).
    rel: String,
    /// Relative to the root (what is printed).
    shown: String,
    path: PathBuf,
}

/// The regular files under `dir`, sorted by their path relative to the root,
/// and whether the walk stopped early.
fn walk(jail: &Jail, dir: &Path) -> (Vec<Found>, bool) {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    let mut stopped = false;
    while let Some(current) = stack.pop() {
        let Ok(entries) = fs::read_dir(&current) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_WALK_ENTRIES {
                stopped = true;
                break;
            }
            // `file_type` does not follow links: a link is neither a file nor a directory here.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() {
                if !SKIPPED_DIRS.iter().any(|d| entry.file_name() == *d) {
                    stack.push(path);
                }
            } else if kind.is_file() {
                let rel = path
                    .strip_prefix(dir)
                    .map(|r| r.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"))
                    .unwrap_or_default();
                out.push(Found { rel, shown: jail.show(&path), path });
            }
        }
        if stopped {
            break;
        }
    }
    out.sort_by(|a, b| a.shown.cmp(&b.shown));
    (out, stopped)
}

/// A glob as the tools use it: `*` and `?` stay within one path segment, `**`
/// crosses them; a pattern without `/` is matched against the file name alone.
struct Pattern {
    matcher: GlobMatcher,
    name_only: bool,
}

impl Pattern {
    fn new(pattern: &str) -> Result<Pattern, String> {
        let glob: Glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("invalid glob {pattern:?}: {e}"))?;
        Ok(Pattern { matcher: glob.compile_matcher(), name_only: !pattern.contains('/') })
    }

    fn matches(&self, rel: &str) -> bool {
        if self.name_only {
            self.matcher.is_match(rel.rsplit('/').next().unwrap_or(rel))
        } else {
            self.matcher.is_match(rel)
        }
    }
}

/// The directory a search starts from: `path` inside the root, or the root.
fn start(jail: &Jail, path: Option<&str>, tool: &str) -> Result<PathBuf, ToolError> {
    let dir = match path.filter(|p| !p.is_empty()) {
        Some(p) => jail.resolve(p).or_else(|e| fail(tool, e))?,
        None => jail.root().to_path_buf(),
    };
    if !dir.is_dir() {
        return fail(tool, format!("{} is not a directory", jail.show(&dir)));
    }
    Ok(dir)
}

/// Lines matching a regular expression, as `path:line:text`.
pub(crate) fn grep(s: &Settings, args: GrepArgs) -> Result<ToolOutcome<Value>, ToolError> {
    let regex = RegexBuilder::new(&args.pattern)
        .size_limit(1 << 20)
        .build()
        .or_else(|e| fail("grep", format!("invalid regular expression: {e}")))?;
    let include = match args.include.as_deref().filter(|i| !i.is_empty()) {
        Some(glob) => Some(Pattern::new(glob).or_else(|e| fail("grep", e))?),
        None => None,
    };
    let jail = Jail::open(&s.root).or_else(|e| fail("grep", e))?;
    let dir = start(&jail, args.path.as_deref(), "grep")?;
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT).max(1);

    let (files, stopped) = walk(&jail, &dir);
    let mut lines = Vec::new();
    let mut cut = false;
    let mut bytes = Vec::new();
    'files: for file in files {
        if include.as_ref().is_some_and(|p| !p.matches(&file.rel)) {
            continue;
        }
        bytes.clear();
        let Ok(f) = File::open(&file.path) else {
            continue;
        };
        // Files over the read cap are skipped rather than read in part: a
        // partial search would report "no match" for text it never saw.
        if f.take(s.read_cap + 1).read_to_end(&mut bytes).is_err() || bytes.len() as u64 > s.read_cap {
            continue;
        }
        if looks_binary(&bytes) {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.split('\n').enumerate() {
            let line = line.strip_suffix('\r').unwrap_or(line);
            if !regex.is_match(line) {
                continue;
            }
            if lines.len() as u64 == limit {
                cut = true;
                break 'files;
            }
            let line = match line.char_indices().nth(MAX_MATCH_CHARS) {
                Some((at, _)) => format!("{}… [line cut]", &line[..at]),
                None => line.to_string(),
            };
            lines.push(format!("{}:{}:{line}", file.shown, i + 1));
        }
    }
    if lines.is_empty() {
        return done(if stopped {
            "No matches (the search stopped early: too many files)".into()
        } else {
            "No matches".into()
        });
    }
    let mut out = lines.join("\n");
    if cut {
        out.push_str(&format!("\n(stopped at {limit} matches; narrow the pattern, path or include to see the rest)"));
    }
    if stopped {
        out.push_str(&format!("\n(the search stopped after {MAX_WALK_ENTRIES} entries; give a narrower path)"));
    }
    done(cap_text(out, s.output_cap))
}

/// Files matching a glob, as sorted paths relative to the root.
pub(crate) fn glob(s: &Settings, args: GlobArgs) -> Result<ToolOutcome<Value>, ToolError> {
    let pattern = Pattern::new(&args.pattern).or_else(|e| fail("glob", e))?;
    let jail = Jail::open(&s.root).or_else(|e| fail("glob", e))?;
    let dir = start(&jail, args.path.as_deref(), "glob")?;
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT).max(1);

    let (files, stopped) = walk(&jail, &dir);
    let matched: Vec<String> = files.into_iter().filter(|f| pattern.matches(&f.rel)).map(|f| f.shown).collect();
    if matched.is_empty() {
        return done("No files found".into());
    }
    let total = matched.len();
    let mut out = matched.into_iter().take(limit as usize).collect::<Vec<_>>().join("\n");
    if total as u64 > limit {
        out.push_str(&format!("\n(showing {limit} of {total} files; narrow the pattern or path to see the rest)"));
    }
    if stopped {
        out.push_str(&format!("\n(the search stopped after {MAX_WALK_ENTRIES} entries; give a narrower path)"));
    }
    done(cap_text(out, s.output_cap))
}
