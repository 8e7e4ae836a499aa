//! `--builtins[=NAMES]`: nexus-drive's built-in tools, confined to `--root`
//! (the current directory unless given): the root every path tool resolves
//! against.

use std::path::{Path, PathBuf};

use nexus_drive::builtins::Builtins;
use nexus_drive::DynTool;

use crate::Fail;

/// The root the path tools are confined to: `--root DIR` made absolute (so
/// it means the same thing whatever directory a tool later runs from), or
/// the current directory.
pub fn root(given: Option<&str>) -> Result<PathBuf, Fail> {
    match given {
        None => std::env::current_dir()
            .map_err(|e| Fail::runtime(format!("cannot read the current directory (the built-in tools' root): {e}"))),
        Some(dir) => {
            let path = Path::new(dir);
            let absolute = path.canonicalize().map_err(|e| Fail::usage(format!("--root {dir}: {e}")))?;
            if !absolute.is_dir() {
                return Err(Fail::usage(format!("--root {dir}: not a directory")));
            }
            Ok(absolute)
        }
    }
}

/// The built-ins named by `--builtins=a,b`, or all of them for a bare `--builtins`.
pub fn select(list: Option<&str>, root: &Path) -> Result<Vec<DynTool>, Fail> {
    let chosen = Builtins::new(root).select(list).map_err(|e| Fail::usage(format!("--builtins: {e}")))?;
    Ok(chosen.tools())
}

/// The built-ins with these names (a restored run binds its tools again by name).
pub fn by_names(names: &[&str], root: &Path) -> Result<Vec<DynTool>, String> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    Builtins::new(root).only(names.iter().copied()).map(|b| b.tools()).map_err(|e| e.to_string())
}
