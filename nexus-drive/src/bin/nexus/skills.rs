//! `--skills DIR` (repeatable): Agent Skills found in each DIR's folders,
//! with every skipped skill reported on stderr, and `--skills-budget BYTES`
//! for the catalog's share of the system prompt.

use std::path::Path;

use nexus_drive::skills::{Discovery, Skills};

use crate::Fail;

/// Discovers the skills of every `--skills DIR` (`None` when none is given).
/// A DIR that is not a directory is a usage error; a broken skill in one is
/// skipped with a warning naming its file and field.
/// `budget` is `--skills-budget` (clap requires `--skills` with it).
pub fn load(dirs: &[String], budget: Option<usize>) -> Result<Option<Discovery>, Fail> {
    if dirs.is_empty() {
        return Ok(None);
    }
    for dir in dirs {
        if !Path::new(dir).is_dir() {
            return Err(Fail::usage(format!("--skills {dir}: not a directory")));
        }
    }
    let mut found = Skills::discover(dirs);
    for e in &found.errors {
        eprintln!("nexus: skipped skill: {e}");
    }
    if let Some(budget) = budget {
        found.skills = found.skills.catalog_budget(budget);
    }
    let late = found.skills.catalog().names_only;
    if !late.is_empty() {
        eprintln!(
            "nexus: the skills catalog is over its budget: {} listed by name only ({}); raise --skills-budget to \
             describe them",
            late.len(),
            late.join(", ")
        );
    }
    Ok(Some(found))
}
