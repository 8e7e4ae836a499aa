//! `--builtins[=NAMES]`: nexus-drive's built-in tools, confined to the
//! current directory (the root every path tool resolves against).

use nexus_drive::builtins::Builtins;
use nexus_drive::DynTool;

use crate::Fail;

fn root() -> Result<std::path::PathBuf, String> {
    std::env::current_dir().map_err(|e| format!("cannot read the current directory (the built-in tools' root): {e}"))
}

/// The built-ins named by `--builtins=a,b`, or all of them for a bare `--builtins`.
pub fn select(list: Option<&str>) -> Result<Vec<DynTool>, Fail> {
    let builtins = Builtins::new(root().map_err(Fail::runtime)?);
    let chosen = builtins.select(list).map_err(|e| Fail::usage(format!("--builtins: {e}")))?;
    Ok(chosen.tools())
}

/// The built-ins with these names (a restored run binds its tools again by name).
pub fn by_names(names: &[&str]) -> Result<Vec<DynTool>, String> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let builtins = Builtins::new(root()?);
    builtins.only(names.iter().copied()).map(|b| b.tools()).map_err(|e| e.to_string())
}
