//! Finding skills on disk: the folders of each skills directory, each one's
//! `SKILL.md` read under a cap, and the files it bundles listed — with any
//! symbolic link that leads out of the skill's folder refusing the skill.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};

use super::parse;
use super::{Skill, SkillError, SkillErrorKind, SkillLimits};

/// Folders never listed as a skill's files (version control, dependencies, caches).
const SKIPPED_DIRS: &[&str] = &[".git", "node_modules", "__pycache__"];

/// The skills of one skills directory, sorted by folder name, and the
/// problems of the folders that could not be loaded.
pub(crate) fn scan_dir(dir: &Path, limits: &SkillLimits) -> (Vec<Skill>, Vec<SkillError>) {
    let mut skills = Vec::new();
    let mut errors = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => {
            errors.push(SkillError::new(
                dir,
                None,
                SkillErrorKind::Unreadable,
                format!("cannot read the skills directory: {e}"),
            ));
            return (skills, errors);
        }
    };
    let mut folders: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        // `is_dir` follows a link: a skill folder may be linked into the directory.
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    for folder in folders {
        let skill_md = folder.join("SKILL.md");
        // A folder without SKILL.md is not a skill (a README, a shared asset folder).
        if fs::symlink_metadata(&skill_md).is_err() {
            continue;
        }
        match load(&folder, limits) {
            Ok(skill) => skills.push(skill),
            Err(e) => errors.push(e),
        }
    }
    (skills, errors)
}

/// One skill folder, read and checked.
pub(crate) fn load(folder: &Path, limits: &SkillLimits) -> Result<Skill, SkillError> {
    let skill_md = folder.join("SKILL.md");
    let fail = |kind, field: Option<String>, msg: String| SkillError::new(&skill_md, field, kind, msg);
    let dir = fs::canonicalize(folder)
        .map_err(|e| fail(SkillErrorKind::Unreadable, None, format!("cannot resolve the skill folder: {e}")))?;
    let folder_name = folder.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();

    let real = inside(&dir, &skill_md).map_err(|why| fail(SkillErrorKind::Symlink, None, why))?;
    let meta = fs::metadata(&real).map_err(|e| fail(SkillErrorKind::Unreadable, None, e.to_string()))?;
    if !meta.is_file() {
        return Err(fail(SkillErrorKind::Unreadable, None, "is not a regular file".into()));
    }
    if meta.len() > limits.max_skill_md_bytes {
        return Err(fail(
            SkillErrorKind::TooLarge,
            None,
            format!("is {} bytes, over the {}-byte cap on SKILL.md", meta.len(), limits.max_skill_md_bytes),
        ));
    }
    // Read no more than the cap even if the file grew since it was measured.
    let mut bytes = Vec::new();
    File::open(&real)
        .and_then(|f| f.take(limits.max_skill_md_bytes + 1).read_to_end(&mut bytes))
        .map_err(|e| fail(SkillErrorKind::Unreadable, None, e.to_string()))?;
    if bytes.len() as u64 > limits.max_skill_md_bytes {
        return Err(fail(
            SkillErrorKind::TooLarge,
            None,
            format!("is over the {}-byte cap on SKILL.md", limits.max_skill_md_bytes),
        ));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| fail(SkillErrorKind::Unreadable, None, "is not UTF-8 text".into()))?;
    let (yaml, body) = parse::split(&text).map_err(|p| fail(SkillErrorKind::FrontMatter, p.field, p.message))?;
    let fm = parse::front_matter(yaml, Some(&folder_name)).map_err(|p| {
        let kind = if p.field.is_some() { SkillErrorKind::Field } else { SkillErrorKind::FrontMatter };
        fail(kind, p.field, p.message)
    })?;

    let mut files = Vec::new();
    let mut truncated = false;
    walk(&dir, &dir, 0, limits, &mut files, &mut truncated)
        .map_err(|(path, why)| SkillError::new(&folder.join(path), None, SkillErrorKind::Symlink, why))?;
    files.retain(|f| f != "SKILL.md");
    files.sort();
    Ok(Skill {
        name: fm.name,
        description: fm.description,
        license: fm.license,
        compatibility: fm.compatibility,
        metadata: fm.metadata,
        allowed_tools: fm.allowed_tools,
        dir,
        skill_md,
        body: body.to_string(),
        files,
        files_truncated: truncated,
    })
}

/// Where `path` (inside the skill folder `dir`) really is; an error when a
/// link takes it out of the folder or nowhere.
fn inside(dir: &Path, path: &Path) -> Result<PathBuf, String> {
    let real = fs::canonicalize(path).map_err(|e| {
        if fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            "is a symbolic link that points nowhere".to_string()
        } else {
            format!("cannot be resolved: {e}")
        }
    })?;
    if real.starts_with(dir) {
        Ok(real)
    } else {
        Err(format!(
            "is a symbolic link out of the skill folder (to {}); a skill may only bundle its own files",
            real.display()
        ))
    }
}

/// Lists the files under `at` (relative to `dir`, `/`-separated). Any link
/// that leads out of `dir` is an error `(relative path, why)`; links inside
/// are listed but not followed (so a loop cannot trap the walk).
fn walk(
    dir: &Path,
    at: &Path,
    depth: usize,
    limits: &SkillLimits,
    files: &mut Vec<String>,
    truncated: &mut bool,
) -> Result<(), (PathBuf, String)> {
    let Ok(entries) = fs::read_dir(at) else {
        return Ok(());
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(Result::ok).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let rel = path.strip_prefix(dir).unwrap_or(&path).to_path_buf();
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            inside(dir, &path).map_err(|why| (rel.clone(), why))?;
            if fs::metadata(&path).is_ok_and(|m| m.is_file()) {
                push(files, truncated, limits, &rel);
            }
        } else if meta.is_dir() {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if SKIPPED_DIRS.contains(&name.as_str()) {
                continue;
            }
            if depth + 1 >= limits.max_depth {
                *truncated = true;
                continue;
            }
            walk(dir, &path, depth + 1, limits, files, truncated)?;
        } else if meta.is_file() {
            push(files, truncated, limits, &rel);
        }
    }
    Ok(())
}

fn push(files: &mut Vec<String>, truncated: &mut bool, limits: &SkillLimits, rel: &Path) {
    if files.len() >= limits.max_files {
        *truncated = true;
        return;
    }
    files.push(rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"));
}
