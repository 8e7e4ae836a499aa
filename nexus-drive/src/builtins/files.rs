//! `read`, `write` and `edit`, and the atomic file replacement they share with `apply_patch`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::Value;

use super::paths::Jail;
use super::{cap_text, done, lenient_u64, looks_binary, Settings};
use crate::tool::{ToolContext, ToolError, ToolOutcome};

/// Lines `read` returns when the model gives no limit.
const DEFAULT_READ_LINES: u64 = 2000;
/// Longer lines are cut in `read` output (minified files would flood the model otherwise).
const MAX_LINE_CHARS: usize = 2000;

/// `read` arguments. `filePath` is accepted too: some models use the other common spelling.
#[derive(Deserialize)]
pub(crate) struct ReadArgs {
    #[serde(alias = "filePath")]
    path: String,
    #[serde(default, deserialize_with = "lenient_u64")]
    offset: Option<u64>,
    #[serde(default, deserialize_with = "lenient_u64")]
    limit: Option<u64>,
}

/// `write` arguments.
#[derive(Deserialize)]
pub(crate) struct WriteArgs {
    #[serde(alias = "filePath")]
    path: String,
    content: String,
}

/// `edit` arguments.
#[derive(Deserialize)]
pub(crate) struct EditArgs {
    #[serde(alias = "filePath")]
    path: String,
    #[serde(rename = "oldString")]
    old_string: String,
    #[serde(rename = "newString")]
    new_string: String,
    #[serde(rename = "replaceAll", default)]
    replace_all: bool,
}

fn fail<T>(tool: &str, msg: impl std::fmt::Display) -> Result<T, ToolError> {
    Err(ToolError::msg(format!("{tool}: {msg}")))
}

/// Numbered lines of a text file, a window at a time.
/// Besides the root, `read` reads inside the folders the run was granted
/// (`ctx.read_roots()`: activated skills' folders); no other tool does.
pub(crate) fn read(s: &Settings, args: ReadArgs, ctx: &ToolContext) -> Result<ToolOutcome<Value>, ToolError> {
    let jail = Jail::open_with(&s.root, ctx.read_roots()).or_else(|e| fail("read", e))?;
    let path = jail.resolve(&args.path).or_else(|e| fail("read", e))?;
    let shown = jail.show(&path);
    let meta = fs::metadata(&path).or_else(|e| fail("read", format!("{shown}: {e}")))?;
    if meta.is_dir() {
        return fail("read", format!("{shown} is a directory; list it with glob"));
    }
    let windowed = args.offset.is_some() || args.limit.is_some();
    if meta.len() > s.read_cap && !windowed {
        return fail(
            "read",
            format!(
                "{shown} is {} bytes, over the {}-byte read cap; read a window with offset and limit, or search it \
                 with grep",
                meta.len(),
                s.read_cap
            ),
        );
    }
    let mut reader = BufReader::new(File::open(&path).or_else(|e| fail("read", format!("{shown}: {e}")))?);
    if looks_binary(reader.fill_buf().or_else(|e| fail("read", format!("{shown}: {e}")))?) {
        return fail("read", format!("{shown} looks like a binary file"));
    }

    let offset = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(DEFAULT_READ_LINES).max(1);
    let mut out = String::new();
    let mut line = Vec::new();
    let mut number = 0u64;
    let mut shown_lines = 0u64;
    let mut more = false;
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).or_else(|e| fail("read", format!("{shown}: {e}")))?;
        if n == 0 {
            break;
        }
        number += 1;
        if number < offset {
            continue;
        }
        if shown_lines == limit {
            more = true;
            break;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let text = match text.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => format!("{}… [line cut]", &text[..cut]),
            None => text.to_string(),
        };
        let numbered = format!("{number:>6}\t{text}\n");
        // Stop at a whole line rather than cut one, so "read on with offset" is
        // exact; keep room for that note.
        if shown_lines > 0 && out.len() + numbered.len() + 64 > s.output_cap {
            more = true;
            break;
        }
        out.push_str(&numbered);
        shown_lines += 1;
    }
    if number == 0 {
        return done(format!("({shown} is empty)"));
    }
    if shown_lines == 0 {
        return fail("read", format!("offset {offset} is past the end of {shown} ({number} lines)"));
    }
    if more {
        out.push_str(&format!("(more lines follow; read on with offset {})\n", offset + shown_lines));
    }
    done(cap_text(out, s.output_cap))
}

/// Creates or replaces a file whole.
pub(crate) fn write(s: &Settings, args: WriteArgs) -> Result<ToolOutcome<Value>, ToolError> {
    let jail = Jail::open(&s.root).or_else(|e| fail("write", e))?;
    let path = jail.resolve(&args.path).or_else(|e| fail("write", e))?;
    let shown = jail.show(&path);
    if path.is_dir() {
        return fail("write", format!("{shown} is a directory"));
    }
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).or_else(|e| fail("write", format!("{shown}: creating its directory: {e}")))?;
    }
    replace_file(&path, args.content.as_bytes()).or_else(|e| fail("write", format!("{shown}: {e}")))?;
    done(format!("Wrote {} bytes to {shown}", args.content.len()))
}

/// Replaces an exact string in a file.
pub(crate) fn edit(s: &Settings, args: EditArgs) -> Result<ToolOutcome<Value>, ToolError> {
    if args.old_string.is_empty() {
        return fail("edit", "oldString must not be empty (use write to create a file)");
    }
    if args.old_string == args.new_string {
        return fail("edit", "oldString and newString are the same; nothing to change");
    }
    let jail = Jail::open(&s.root).or_else(|e| fail("edit", e))?;
    let path = jail.resolve(&args.path).or_else(|e| fail("edit", e))?;
    let shown = jail.show(&path);
    let content = read_text(&path, s.read_cap).or_else(|e| fail("edit", format!("{shown}: {e}")))?;
    let count = content.matches(args.old_string.as_str()).count();
    if count == 0 {
        return fail("edit", format!("oldString was not found in {shown}"));
    }
    if count > 1 && !args.replace_all {
        return fail(
            "edit",
            format!(
                "oldString occurs {count} times in {shown}; include more surrounding text to make it unique, or set \
                 replaceAll"
            ),
        );
    }
    let next = content.replace(args.old_string.as_str(), &args.new_string);
    replace_file(&path, next.as_bytes()).or_else(|e| fail("edit", format!("{shown}: {e}")))?;
    let plural = if count == 1 { "" } else { "s" };
    done(format!("Edited {shown} ({count} replacement{plural})"))
}

/// A file's text, refused when it is over `cap` bytes, binary, or not UTF-8
/// (rewriting those through a `String` would corrupt them).
pub(crate) fn read_text(path: &Path, cap: u64) -> io::Result<String> {
    let meta = fs::metadata(path)?;
    if meta.is_dir() {
        return Err(io::Error::other("is a directory"));
    }
    if meta.len() > cap {
        return Err(io::Error::other(format!("{} bytes, over the {cap}-byte cap", meta.len())));
    }
    let mut bytes = Vec::new();
    File::open(path)?.take(cap + 1).read_to_end(&mut bytes)?;
    if looks_binary(&bytes) {
        return Err(io::Error::other("looks like a binary file"));
    }
    String::from_utf8(bytes).map_err(|_| io::Error::other("is not UTF-8 text"))
}

/// Writes `content` to a new temporary file beside `path`, ready to be
/// renamed over it; the permissions of the file it replaces are kept.
pub(crate) fn stage(path: &Path, content: &[u8]) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().ok_or_else(|| io::Error::other("has no parent directory"))?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.nexus-{}-{}.tmp", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(content)?;
        file.sync_all()?;
        if let Ok(meta) = fs::metadata(path) {
            fs::set_permissions(&tmp, meta.permissions())?;
        }
        Ok(())
    })();
    match result {
        Ok(()) => Ok(tmp),
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Replaces `path` atomically: readers see the old content or the new, never a mix.
pub(crate) fn replace_file(path: &Path, content: &[u8]) -> io::Result<()> {
    let tmp = stage(path, content)?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}
