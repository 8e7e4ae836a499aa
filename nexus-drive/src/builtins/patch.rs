//! `apply_patch`: the `*** Begin Patch` grammar, applied all or nothing.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: hello.txt
//! +Hello
//! *** Update File: src/lib.rs
//! *** Move to: src/main.rs        (optional)
//! @@ fn main() {                  (optional: a line to find first)
//!  context
//! -removed
//! +added
//! *** End of File                 (optional: the hunk ends at the end of the file)
//! *** Delete File: old.txt
//! *** End Patch
//! ```
//!
//! Three phases. **Check**: every path is confined, every hunk is matched
//! against the file in memory, and every new content is computed — any
//! failure here changes nothing. **Stage**: each new content is written to a
//! temporary file beside its target. **Commit**: each target is backed up
//! (a hard link), then the temporary file is renamed over it (or the target
//! removed, for a delete). A failure while staging or committing undoes what
//! was done, restoring every backup, so the files end as they began. That
//! holds against every failure the process sees, not against a crash of
//! the machine in the middle of the commit.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;
use serde_json::Value;

use super::files::{read_text, stage};
use super::paths::Jail;
use super::{done, Settings};
use crate::tool::{ToolError, ToolOutcome};

/// `apply_patch` arguments.
#[derive(Deserialize)]
pub(crate) struct PatchArgs {
    #[serde(rename = "patchText", alias = "patch_text", alias = "patch")]
    patch_text: String,
}

/// One file operation of a patch.
#[derive(Debug, PartialEq)]
enum Op {
    Add { path: String, content: String },
    Delete { path: String },
    Update { path: String, move_to: Option<String>, chunks: Vec<Chunk> },
}

/// One `@@` hunk of an update.
#[derive(Debug, PartialEq, Default)]
struct Chunk {
    /// The text after `@@`: a line to find before matching the hunk.
    context: Option<String>,
    old: Vec<String>,
    new: Vec<String>,
    /// `*** End of File`: the hunk matches at the end of the file.
    eof: bool,
}

fn fail<T>(msg: impl std::fmt::Display) -> Result<T, ToolError> {
    Err(ToolError::msg(format!("apply_patch: {msg}")))
}

pub(crate) fn run(s: &Settings, args: PatchArgs) -> Result<ToolOutcome<Value>, ToolError> {
    let ops = parse(&args.patch_text).or_else(fail)?;
    let jail = Jail::open(&s.root).or_else(fail)?;
    let (changes, summary) = plan(&jail, &ops, s.read_cap).or_else(fail)?;
    commit(&changes, |_| Ok(())).or_else(|e| fail(format!("{e}; no file was changed")))?;
    done(format!("Applied the patch:\n{}", summary.join("\n")))
}

fn is_header(line: &str) -> bool {
    line.starts_with("*** Add File:")
        || line.starts_with("*** Delete File:")
        || line.starts_with("*** Update File:")
        || line.trim() == "*** End Patch"
}

/// The operations of a patch text, or what is wrong with it (with its line number).
fn parse(text: &str) -> Result<Vec<Op>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut i = lines.iter().position(|l| !l.trim().is_empty()).unwrap_or(lines.len());
    if lines.get(i).map(|l| l.trim()) != Some("*** Begin Patch") {
        return Err("the patch must start with '*** Begin Patch'".into());
    }
    i += 1;
    let mut ops = Vec::new();
    loop {
        let Some(line) = lines.get(i) else {
            return Err("the patch must end with '*** End Patch'".into());
        };
        let number = i + 1;
        if line.trim() == "*** End Patch" {
            break;
        }
        if line.trim().is_empty() {
            i += 1;
            continue;
        }
        if !is_header(line) {
            return Err(format!(
                "line {number}: expected '*** Add File:', '*** Update File:', '*** Delete File:' or '*** End Patch', \
                 found {line:?}"
            ));
        }
        // The section's body: up to the next header, without trailing blank lines.
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && !is_header(lines[end]) {
            end += 1;
        }
        let mut body_end = end;
        while body_end > start && lines[body_end - 1].trim().is_empty() {
            body_end -= 1;
        }
        let body = &lines[start..body_end];
        i = end;

        let path_of = |prefix: &str| {
            let path = line.trim_end().strip_prefix(prefix).unwrap_or_default().trim().to_string();
            if path.is_empty() {
                Err(format!("line {number}: a file path is missing"))
            } else {
                Ok(path)
            }
        };
        if line.starts_with("*** Add File:") {
            let path = path_of("*** Add File:")?;
            let mut content = String::new();
            for (k, l) in body.iter().enumerate() {
                match l.strip_prefix('+') {
                    Some(text) => content.push_str(text),
                    None if l.trim().is_empty() => {}
                    None => {
                        return Err(format!(
                            "line {}: every line of an added file starts with '+', found {l:?}",
                            start + k + 1
                        ))
                    }
                }
                content.push('\n');
            }
            ops.push(Op::Add { path, content });
        } else if line.starts_with("*** Delete File:") {
            let path = path_of("*** Delete File:")?;
            if let Some(k) = body.iter().position(|l| !l.trim().is_empty()) {
                return Err(format!("line {}: a deleted file takes no lines, found {:?}", start + k + 1, body[k]));
            }
            ops.push(Op::Delete { path });
        } else {
            let path = path_of("*** Update File:")?;
            let (move_to, hunks, first) = match body.first().and_then(|l| l.strip_prefix("*** Move to:")) {
                Some(dest) if !dest.trim().is_empty() => (Some(dest.trim().to_string()), &body[1..], start + 2),
                Some(_) => return Err(format!("line {}: '*** Move to:' needs a path", start + 1)),
                None => (None, body, start + 1),
            };
            let chunks = parse_hunks(hunks, first, &path)?;
            if chunks.is_empty() && move_to.is_none() {
                return Err(format!("line {number}: the update of {path} has no hunks"));
            }
            ops.push(Op::Update { path, move_to, chunks });
        }
    }
    if ops.is_empty() {
        return Err("the patch changes no file".into());
    }
    Ok(ops)
}

/// The hunks of an update; `first` is the line number of `lines[0]`.
fn parse_hunks(lines: &[&str], first: usize, path: &str) -> Result<Vec<Chunk>, String> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut current: Option<Chunk> = None;
    for (k, line) in lines.iter().enumerate() {
        let number = first + k;
        if let Some(rest) = line.strip_prefix("@@") {
            chunks.extend(current.take());
            // `@@ -1,3 +1,4 @@` (unified-diff ranges) carries no findable text.
            let context = rest.trim();
            let context = (!context.is_empty() && !context.starts_with('-')).then(|| context.to_string());
            current = Some(Chunk { context, ..Chunk::default() });
            continue;
        }
        if line.trim() == "*** End of File" {
            match current.as_mut() {
                Some(chunk) => chunk.eof = true,
                None => return Err(format!("line {number}: '*** End of File' outside a hunk")),
            }
            continue;
        }
        let chunk = current.get_or_insert_with(Chunk::default);
        match line.chars().next() {
            Some(' ') => {
                chunk.old.push(line[1..].to_string());
                chunk.new.push(line[1..].to_string());
            }
            Some('-') => chunk.old.push(line[1..].to_string()),
            Some('+') => chunk.new.push(line[1..].to_string()),
            // An empty line is an empty context line (editors strip the space).
            None => {
                chunk.old.push(String::new());
                chunk.new.push(String::new());
            }
            Some(_) => {
                return Err(format!(
                    "line {number}: unexpected line in the update of {path}: {line:?} (hunk lines start with ' ', \
                     '-' or '+')"
                ))
            }
        }
    }
    chunks.extend(current);
    if let Some(k) = chunks.iter().position(|c| c.old.is_empty() && c.new.is_empty()) {
        return Err(format!("hunk {} of {path} is empty", k + 1));
    }
    Ok(chunks)
}

/// The new content of a file once `chunks` are applied, or which hunk does not match.
fn apply_chunks(content: &str, chunks: &[Chunk], path: &str) -> Result<String, String> {
    let ends_with_newline = content.ends_with('\n');
    let mut lines: Vec<&str> = if content.is_empty() { Vec::new() } else { content.split('\n').collect() };
    if ends_with_newline {
        lines.pop();
    }
    let mut cursor = 0;
    let mut edits: Vec<(usize, usize, &[String])> = Vec::new();
    for (n, chunk) in chunks.iter().enumerate() {
        if let Some(context) = &chunk.context {
            match find(&lines, std::slice::from_ref(context), cursor, false) {
                Some(at) => cursor = at + 1,
                None => return Err(format!("hunk {} of {path}: the line {context:?} after @@ was not found", n + 1)),
            }
        }
        if chunk.old.is_empty() {
            let at = if chunk.context.is_some() { cursor } else { lines.len() };
            edits.push((at, 0, &chunk.new));
            continue;
        }
        let at = find(&lines, &chunk.old, cursor, chunk.eof).ok_or_else(|| {
            format!(
                "hunk {} of {path} does not match the file; these lines were not found:\n{}",
                n + 1,
                chunk.old.join("\n")
            )
        })?;
        edits.push((at, chunk.old.len(), &chunk.new));
        cursor = at + chunk.old.len();
    }
    edits.sort_by_key(|e| e.0);
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    for (at, len, new) in edits.into_iter().rev() {
        out.splice(at..at + len, new.iter().cloned());
    }
    let mut text = out.join("\n");
    if !out.is_empty() && (ends_with_newline || content.is_empty()) {
        text.push('\n');
    }
    Ok(text)
}

/// Where `pattern` occurs in `lines` at or after `from`: exactly if it can,
/// else ignoring trailing, then surrounding whitespace (models often get
/// indentation or trailing spaces slightly wrong). With `eof`, the end of
/// the file is tried first.
fn find(lines: &[&str], pattern: &[String], from: usize, eof: bool) -> Option<usize> {
    if pattern.len() > lines.len() {
        return None;
    }
    let last = lines.len() - pattern.len();
    let passes: [fn(&str) -> &str; 3] = [|s| s, str::trim_end, str::trim];
    for norm in passes {
        let at = |i: usize| lines[i..i + pattern.len()].iter().zip(pattern).all(|(l, p)| norm(l) == norm(p));
        if eof && last >= from && at(last) {
            return Some(last);
        }
        if let Some(i) = (from..=last).find(|i| at(*i)) {
            return Some(i);
        }
    }
    None
}

/// One file change, ready to commit: new content, or `None` to delete.
struct Change {
    target: PathBuf,
    content: Option<String>,
}

/// Checks every operation against the files and computes every new content,
/// touching nothing. Returns the changes and a line per file for the result.
fn plan(jail: &Jail, ops: &[Op], read_cap: u64) -> Result<(Vec<Change>, Vec<String>), String> {
    let mut changes = Vec::new();
    let mut summary = Vec::new();
    let mut touched = HashSet::new();
    let mut claim = |path: &Path, shown: &str| {
        if touched.insert(path.to_path_buf()) {
            Ok(())
        } else {
            Err(format!("{shown} appears twice in the patch"))
        }
    };
    for op in ops {
        match op {
            Op::Add { path, content } => {
                let target = jail.resolve(path)?;
                let shown = jail.show(&target);
                claim(&target, &shown)?;
                if fs::symlink_metadata(&target).is_ok() {
                    return Err(format!("{shown} already exists (change it with '*** Update File:')"));
                }
                changes.push(Change { target, content: Some(content.clone()) });
                summary.push(format!("A {shown}"));
            }
            Op::Delete { path } => {
                let target = jail.resolve(path)?;
                let shown = jail.show(&target);
                claim(&target, &shown)?;
                match fs::metadata(&target) {
                    Ok(m) if m.is_file() => {}
                    Ok(_) => return Err(format!("{shown} is not a file")),
                    Err(e) => return Err(format!("{shown}: {e}")),
                }
                changes.push(Change { target, content: None });
                summary.push(format!("D {shown}"));
            }
            Op::Update { path, move_to, chunks } => {
                let target = jail.resolve(path)?;
                let shown = jail.show(&target);
                claim(&target, &shown)?;
                let old = read_text(&target, read_cap).map_err(|e| format!("{shown}: {e}"))?;
                let new = apply_chunks(&old, chunks, &shown)?;
                match move_to {
                    Some(dest) => {
                        let dest = jail.resolve(dest)?;
                        let dest_shown = jail.show(&dest);
                        claim(&dest, &dest_shown)?;
                        if fs::symlink_metadata(&dest).is_ok() {
                            return Err(format!("cannot move {shown} to {dest_shown}: it already exists"));
                        }
                        changes.push(Change { target: dest, content: Some(new) });
                        changes.push(Change { target, content: None });
                        summary.push(format!("M {shown} -> {dest_shown}"));
                    }
                    None => {
                        changes.push(Change { target, content: Some(new) });
                        summary.push(format!("M {shown}"));
                    }
                }
            }
        }
    }
    Ok((changes, summary))
}

/// A change's progress through the commit, for the undo.
#[derive(Default)]
struct Progress {
    temp: Option<PathBuf>,
    backup: Option<PathBuf>,
    applied: bool,
}

/// Stages then commits every change, or undoes all of it. `before` runs
/// before each change is committed (a failure injected by tests).
fn commit(changes: &[Change], before: impl Fn(usize) -> io::Result<()>) -> io::Result<()> {
    let mut created_dirs = Vec::new();
    let mut progress: Vec<Progress> = Vec::with_capacity(changes.len());
    for change in changes {
        let staged = match &change.content {
            Some(content) => match change.target.parent() {
                Some(dir) => {
                    ensure_dir(dir, &mut created_dirs).and_then(|()| stage(&change.target, content.as_bytes()))
                }
                None => Err(io::Error::other("a file has no parent directory")),
            },
            None => Ok(PathBuf::new()),
        };
        match staged {
            Ok(temp) => progress.push(Progress { temp: change.content.as_ref().map(|_| temp), ..Progress::default() }),
            Err(e) => {
                undo(changes, &mut progress, &created_dirs);
                return Err(io::Error::new(e.kind(), format!("{}: {e}", change.target.display())));
            }
        }
    }
    for (i, change) in changes.iter().enumerate() {
        let step = commit_one(change, &mut progress[i], || before(i));
        if let Err(e) = step {
            undo(changes, &mut progress, &created_dirs);
            return Err(io::Error::new(e.kind(), format!("{}: {e}", change.target.display())));
        }
    }
    for p in &progress {
        if let Some(backup) = &p.backup {
            let _ = fs::remove_file(backup);
        }
    }
    Ok(())
}

fn commit_one(change: &Change, p: &mut Progress, before: impl Fn() -> io::Result<()>) -> io::Result<()> {
    before()?;
    if fs::symlink_metadata(&change.target).is_ok() {
        p.backup = Some(backup(&change.target)?);
    }
    match &p.temp {
        Some(temp) => fs::rename(temp, &change.target)?,
        None => fs::remove_file(&change.target)?,
    }
    p.temp = None;
    p.applied = true;
    Ok(())
}

/// A second name for `path`'s current content, beside it.
fn backup(path: &Path) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let dir = path.parent().ok_or_else(|| io::Error::other("has no parent directory"))?;
    let backup =
        dir.join(format!(".{name}.nexus-{}-{}.bak", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed)));
    // A hard link costs nothing and keeps the very inode; a copy is the
    // fallback for file systems without links.
    if fs::hard_link(path, &backup).is_err() {
        fs::copy(path, &backup)?;
    }
    Ok(backup)
}

/// Puts every target back as it was and removes everything staged.
fn undo(changes: &[Change], progress: &mut [Progress], created_dirs: &[PathBuf]) {
    for (change, p) in changes.iter().zip(progress.iter_mut()).rev() {
        match (&p.backup, p.applied) {
            (Some(backup), true) => {
                let _ = fs::rename(backup, &change.target);
            }
            (Some(backup), false) => {
                let _ = fs::remove_file(backup);
            }
            (None, true) => {
                let _ = fs::remove_file(&change.target);
            }
            (None, false) => {}
        }
        if let Some(temp) = p.temp.take() {
            let _ = fs::remove_file(temp);
        }
    }
    for dir in created_dirs.iter().rev() {
        let _ = fs::remove_dir(dir);
    }
}

/// Creates `dir` and its missing parents, recording each one created (for the undo).
fn ensure_dir(dir: &Path, created: &mut Vec<PathBuf>) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut current = Some(dir);
    while let Some(d) = current {
        if fs::symlink_metadata(d).is_ok() {
            break;
        }
        missing.push(d.to_path_buf());
        current = d.parent();
    }
    for d in missing.into_iter().rev() {
        fs::create_dir(&d)?;
        created.push(d);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar_parses_into_operations() {
        let ops = parse(
            "*** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Update File: b.txt\n*** Move to: c.txt\n@@ fn x\n \
             keep\n-old\n+new\n*** End of File\n\n*** Delete File: d.txt\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(
            ops,
            vec![
                Op::Add { path: "a.txt".into(), content: "one\ntwo\n".into() },
                Op::Update {
                    path: "b.txt".into(),
                    move_to: Some("c.txt".into()),
                    chunks: vec![Chunk {
                        context: Some("fn x".into()),
                        old: vec!["keep".into(), "old".into()],
                        new: vec!["keep".into(), "new".into()],
                        eof: true,
                    }],
                },
                Op::Delete { path: "d.txt".into() },
            ]
        );
    }

    #[test]
    fn malformed_patches_name_the_problem() {
        assert!(parse("*** Add File: a\n+x\n*** End Patch").unwrap_err().contains("Begin Patch"));
        assert!(parse("*** Begin Patch\n*** Add File: a\n+x\n").unwrap_err().contains("End Patch"));
        assert!(parse("*** Begin Patch\n*** Add File: a\nx\n*** End Patch").unwrap_err().contains("line 3"));
        assert!(parse("*** Begin Patch\n*** Update File: a\n*** End Patch").unwrap_err().contains("no hunks"));
        assert!(parse("*** Begin Patch\n*** End Patch").unwrap_err().contains("no file"));
        assert!(parse("*** Begin Patch\nhello\n*** End Patch").unwrap_err().contains("line 2"));
    }

    #[test]
    fn random_patches_and_files_do_not_panic() {
        let pieces = [
            "*** Begin Patch",
            "*** End Patch",
            "*** Add File: a",
            "*** Update File: a",
            "*** Delete File: a",
            "*** Move to: b",
            "*** End of File",
            "@@",
            "@@ x",
            "+x",
            "-x",
            " x",
            "",
            "x",
            "+",
            "-",
            " ",
            "é",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..3000 {
            let lines: Vec<&str> = (0..next(12)).map(|_| pieces[next(pieces.len())]).collect();
            let text = lines.join("\n");
            let _ = parse(&text);
            let _ = parse(&format!("*** Begin Patch\n*** Update File: f\n{text}\n*** End Patch"));
            if let Ok(chunks) = parse_hunks(&lines, 1, "f") {
                let file: String = (0..next(6)).map(|_| format!("{}\n", pieces[next(pieces.len())])).collect();
                let _ = apply_chunks(&file, &chunks, "f");
                let _ = apply_chunks(file.trim_end(), &chunks, "f");
            }
        }
    }

    #[test]
    fn hunks_apply_in_order_from_their_context() {
        let chunks = vec![
            Chunk { context: Some("fn b()".into()), old: vec!["    x".into()], new: vec!["    y".into()], eof: false },
            Chunk { context: None, old: vec!["end".into()], new: vec!["end".into(), "tail".into()], eof: true },
        ];
        let file = "fn a()\n    x\nfn b()\n    x\nend\n";
        assert_eq!(apply_chunks(file, &chunks, "f").unwrap(), "fn a()\n    x\nfn b()\n    y\nend\ntail\n");
        let bad = vec![Chunk { context: None, old: vec!["nope".into()], new: vec![], eof: false }];
        assert!(apply_chunks(file, &bad, "f").unwrap_err().contains("hunk 1 of f does not match"));
    }

    #[test]
    fn a_failure_while_committing_restores_every_file() {
        let dir = std::env::temp_dir().join(format!("nexus-patch-commit-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("a"), "a0").unwrap();
        fs::write(dir.join("c"), "c0").unwrap();
        let changes = vec![
            Change { target: dir.join("a"), content: Some("a1".into()) },
            Change { target: dir.join("new/b"), content: Some("b1".into()) },
            Change { target: dir.join("c"), content: None },
            Change { target: dir.join("d"), content: Some("d1".into()) },
        ];
        // The third change fails after the first two were committed.
        let err = commit(&changes, |i| if i == 2 { Err(io::Error::other("injected")) } else { Ok(()) }).unwrap_err();
        assert!(err.to_string().contains("injected"));
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "a0");
        assert_eq!(fs::read_to_string(dir.join("c")).unwrap(), "c0");
        let mut left: Vec<String> =
            fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, vec!["a", "c"], "no new file, directory, temporary or backup is left");

        commit(&changes, |_| Ok(())).unwrap();
        assert_eq!(fs::read_to_string(dir.join("a")).unwrap(), "a1");
        assert_eq!(fs::read_to_string(dir.join("new/b")).unwrap(), "b1");
        assert!(!dir.join("c").exists());
        assert_eq!(fs::read_to_string(dir.join("d")).unwrap(), "d1");
        let _ = fs::remove_dir_all(&dir);
    }
}
