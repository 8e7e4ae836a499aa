//! Confinement: every path a built-in is given resolves inside the root.
//!
//! A path is joined to the root (absolute paths are taken as they are), then
//! the deepest ancestor that exists is canonicalized — which resolves every
//! symbolic link and `..` on the part that exists — and the rest is
//! re-attached. The result must lie inside the canonical root. Checking the
//! deepest *existing* ancestor is what makes the check hold for a file that
//! `write` is about to create, which has no canonical form yet.
//!
//! The check is about the file tools' path resolution. It does not defend
//! against a concurrent process that swaps a checked directory for a link
//! between the check and the use, and it is no sandbox for `bash`.

use std::ffi::OsString;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// A canonical root that paths are resolved inside, and the folders
/// besides it that reading is granted in (activated skills' folders).
pub(crate) struct Jail {
    root: PathBuf,
    also: Vec<PathBuf>,
}

impl Jail {
    /// The root, canonicalized now (it may have been created since the tools were built).
    pub(crate) fn open(root: &Path) -> Result<Jail, String> {
        fs::canonicalize(root)
            .map(|root| Jail { root, also: Vec::new() })
            .map_err(|e| format!("the workspace root {} is not usable: {e}", root.display()))
    }

    /// The root, and the folders in `also` (canonicalized now; one that is
    /// gone is left out) as further places a path may resolve inside.
    pub(crate) fn open_with(root: &Path, also: &[PathBuf]) -> Result<Jail, String> {
        let mut jail = Jail::open(root)?;
        jail.also = also.iter().filter_map(|dir| fs::canonicalize(dir).ok()).collect();
        Ok(jail)
    }

    /// The canonical root.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// `input` resolved inside the root, or a message saying why it is refused.
    pub(crate) fn resolve(&self, input: &str) -> Result<PathBuf, String> {
        if input.is_empty() {
            return Err("a path is required".into());
        }
        if input.contains('\0') {
            return Err(format!("{input:?} is not a valid path"));
        }
        let given = Path::new(input);
        let joined = if given.is_absolute() { given.to_path_buf() } else { self.root.join(given) };
        let parts: Vec<Component<'_>> = joined.components().collect();

        // Walk up from the full path to the deepest ancestor that exists.
        let mut split = parts.len();
        let base = loop {
            let prefix: PathBuf = parts.iter().take(split).collect();
            match fs::canonicalize(&prefix) {
                Ok(canonical) => break canonical,
                Err(_) if fs::symlink_metadata(&prefix).is_ok() => {
                    // It exists but cannot be resolved: a link that points
                    // nowhere (following it on write would create a file
                    // wherever it points) or an entry we may not look into.
                    return Err(format!(
                        "{input}: {} is a symbolic link that points nowhere or cannot be resolved",
                        self.show(&prefix)
                    ));
                }
                Err(_) if split == 0 => return Err(format!("{input}: cannot be resolved")),
                Err(_) => split -= 1,
            }
        };

        let mut resolved = base;
        for part in parts.iter().skip(split) {
            match part {
                Component::Normal(name) => resolved.push(OsString::from(name)),
                Component::CurDir => {}
                // `..` below a directory that does not exist cannot be checked
                // against the file system, and never names anything useful.
                Component::ParentDir => {
                    return Err(format!("{input}: `..` after a directory that does not exist is not allowed"))
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(format!("{input}: cannot be resolved"));
                }
            }
        }
        if resolved.starts_with(&self.root) || self.also.iter().any(|dir| resolved.starts_with(dir)) {
            Ok(resolved)
        } else {
            Err(format!("{input} is outside the workspace root {}; paths must stay inside it", self.root.display()))
        }
    }

    /// A resolved path as the model should see it: relative to the root, with
    /// `/` separators (`.` for the root itself).
    pub(crate) fn show(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/"),
            Err(_) => path.display().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nexus-jail-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("root/sub")).unwrap();
        dir
    }

    #[test]
    fn inside_paths_resolve_and_escapes_do_not() {
        let dir = scratch("basic");
        let jail = Jail::open(&dir.join("root")).unwrap();
        let root = jail.root().to_path_buf();
        assert_eq!(jail.resolve("sub").unwrap(), root.join("sub"));
        assert_eq!(jail.resolve("sub/new/file.txt").unwrap(), root.join("sub/new/file.txt"));
        assert_eq!(jail.resolve("sub/../x").unwrap(), root.join("x"));
        assert_eq!(jail.resolve(".").unwrap(), root);
        assert_eq!(jail.resolve(root.join("sub").to_str().unwrap()).unwrap(), root.join("sub"));
        assert!(jail.resolve("../outside").unwrap_err().contains("outside the workspace root"));
        assert!(jail.resolve("sub/../../outside").unwrap_err().contains("outside the workspace root"));
        assert!(jail.resolve("/etc/passwd").unwrap_err().contains("outside the workspace root"));
        assert!(jail.resolve("missing/../../x").is_err());
        assert!(jail.resolve("").is_err());
        let _ = fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn links_that_lead_out_are_refused_even_for_new_files() {
        let dir = scratch("links");
        fs::create_dir_all(dir.join("outside")).unwrap();
        std::os::unix::fs::symlink(dir.join("outside"), dir.join("root/out")).unwrap();
        std::os::unix::fs::symlink(dir.join("outside/nothing"), dir.join("root/dangling")).unwrap();
        std::os::unix::fs::symlink("sub", dir.join("root/inner")).unwrap();
        let jail = Jail::open(&dir.join("root")).unwrap();
        assert!(jail.resolve("out/new.txt").unwrap_err().contains("outside the workspace root"));
        assert!(jail.resolve("dangling").unwrap_err().contains("points nowhere"));
        assert_eq!(jail.resolve("inner/f").unwrap(), jail.root().join("sub/f"));
        let _ = fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn granted_folders_are_inside_but_links_out_of_them_are_not() {
        let dir = scratch("granted");
        fs::create_dir_all(dir.join("skill/references")).unwrap();
        fs::write(dir.join("skill/references/a.md"), "a").unwrap();
        fs::write(dir.join("secret.txt"), "s").unwrap();
        std::os::unix::fs::symlink(dir.join("secret.txt"), dir.join("skill/leak")).unwrap();
        let skill = dir.join("skill/references/a.md");
        let plain = Jail::open(&dir.join("root")).unwrap();
        assert!(plain.resolve(skill.to_str().unwrap()).unwrap_err().contains("outside the workspace root"));
        let granted = Jail::open_with(&dir.join("root"), &[dir.join("skill"), dir.join("gone")]).unwrap();
        let canonical = fs::canonicalize(&skill).unwrap();
        assert_eq!(granted.resolve(skill.to_str().unwrap()).unwrap(), canonical);
        assert_eq!(granted.show(&canonical), canonical.display().to_string());
        assert!(granted.resolve(dir.join("skill/leak").to_str().unwrap()).is_err());
        assert!(granted.resolve(dir.join("skill/../secret.txt").to_str().unwrap()).is_err());
        // Relative paths still mean the workspace.
        assert_eq!(granted.resolve("references/a.md").unwrap(), granted.root().join("references/a.md"));
        let _ = fs::remove_dir_all(&dir);
    }
}
