//! The file tools (`read`, `write`, `edit`, `grep`, `glob`) and their confinement to the root.
#![cfg(feature = "builtins")]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use nexus_drive::builtins::Builtins;
use nexus_drive::{ToolContext, ToolOutcome};
use serde_json::{json, Value};

/// A fresh directory with a `root/` inside (the workspace) and room beside it for "outside".
fn scratch(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "nexus-builtins-files-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("root")).unwrap();
    dir
}

/// The text the model sees and whether it is an error.
fn call(b: &Builtins, name: &str, args: Value) -> (String, bool) {
    match b.call(name, args, &ToolContext::new("c1", name)) {
        Ok(ToolOutcome::Done(Value::String(s))) => (s, false),
        Ok(ToolOutcome::Done(other)) => (other.to_string(), false),
        Ok(ToolOutcome::Result(r)) => (r.output, r.is_error),
        Ok(ToolOutcome::Pending(r)) => panic!("unexpected suspension: {r:?}"),
        Err(e) => (e.message().to_string(), true),
    }
}

fn tools(dir: &Path) -> Builtins {
    Builtins::new(dir.join("root")).enable_all()
}

#[test]
fn read_numbers_lines_and_pages_with_offset_and_limit() {
    let dir = scratch("read");
    fs::write(dir.join("root/a.txt"), "alpha\nbeta\r\ngamma\ndelta\n").unwrap();
    let b = tools(&dir);

    let (out, err) = call(&b, "read", json!({"path": "a.txt"}));
    assert!(!err, "{out}");
    assert_eq!(out, "     1\talpha\n     2\tbeta\n     3\tgamma\n     4\tdelta\n");

    let (out, err) = call(&b, "read", json!({"path": "a.txt", "offset": 2, "limit": 2}));
    assert!(!err, "{out}");
    assert_eq!(out, "     2\tbeta\n     3\tgamma\n(more lines follow; read on with offset 4)\n");

    // The other common spelling of the argument, and a numeric string, are understood.
    let (out, err) = call(&b, "read", json!({"filePath": "a.txt", "offset": "4"}));
    assert!(!err, "{out}");
    assert_eq!(out, "     4\tdelta\n");

    let (out, err) = call(&b, "read", json!({"path": "a.txt", "offset": 9}));
    assert!(err && out.contains("past the end"), "{out}");
    let (out, err) = call(&b, "read", json!({"path": "missing.txt"}));
    assert!(err && out.starts_with("read: missing.txt"), "{out}");
    let (out, err) = call(&b, "read", json!({}));
    assert!(err && out.contains("invalid arguments for read"), "{out}");
}

#[test]
fn read_refuses_an_oversize_file_but_pages_through_it() {
    let dir = scratch("oversize");
    let big: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
    fs::write(dir.join("root/big.log"), &big).unwrap();
    let b = tools(&dir).read_cap(1024);

    let (out, err) = call(&b, "read", json!({"path": "big.log"}));
    assert!(err, "{out}");
    assert!(out.contains(&format!("{} bytes, over the 1024-byte read cap", big.len())), "{out}");

    let (out, err) = call(&b, "read", json!({"path": "big.log", "offset": 4999, "limit": 5}));
    assert!(!err, "{out}");
    assert_eq!(out, "  4999\tline 4999\n  5000\tline 5000\n");

    fs::write(dir.join("root/bin.dat"), b"\x7fELF\0\0\x01").unwrap();
    let (out, err) = call(&b, "read", json!({"path": "bin.dat"}));
    assert!(err && out.contains("binary"), "{out}");
}

#[test]
fn read_output_is_capped_at_whole_lines() {
    let dir = scratch("cap");
    let text: String = (1..=300).map(|i| format!("{i:03} {}\n", "x".repeat(60))).collect();
    fs::write(dir.join("root/wide.txt"), &text).unwrap();
    let b = tools(&dir).output_cap(1000);
    let (out, err) = call(&b, "read", json!({"path": "wide.txt"}));
    assert!(!err, "{out}");
    // Each numbered line is 6 + 1 + 64 + 1 = 72 bytes: 13 fit in 1000.
    assert!(out.contains("    13\t013 "), "{out}");
    assert!(!out.contains("    14\t"), "{out}");
    assert!(out.ends_with("(more lines follow; read on with offset 14)\n"), "{out}");
}

#[test]
fn write_creates_parents_and_replaces_atomically() {
    let dir = scratch("write");
    let b = tools(&dir);
    let (out, err) = call(&b, "write", json!({"path": "deep/er/new.txt", "content": "hello\n"}));
    assert!(!err, "{out}");
    assert_eq!(out, "Wrote 6 bytes to deep/er/new.txt");
    assert_eq!(fs::read_to_string(dir.join("root/deep/er/new.txt")).unwrap(), "hello\n");

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(dir.join("root/deep/er/new.txt"), fs::Permissions::from_mode(0o751)).unwrap();
    }
    let (out, err) = call(&b, "write", json!({"path": "deep/er/new.txt", "content": "bye"}));
    assert!(!err, "{out}");
    assert_eq!(fs::read_to_string(dir.join("root/deep/er/new.txt")).unwrap(), "bye");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.join("root/deep/er/new.txt")).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o751, "replacing a file keeps its permissions");
    }
    // Nothing but the file itself is left in its directory (no temporary file).
    let names: Vec<_> = fs::read_dir(dir.join("root/deep/er")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, vec!["new.txt"]);

    let (out, err) = call(&b, "write", json!({"path": "deep", "content": "x"}));
    assert!(err && out.contains("is a directory"), "{out}");
}

#[test]
fn edit_needs_a_unique_match_unless_replace_all() {
    let dir = scratch("edit");
    fs::write(dir.join("root/f.rs"), "let a = 1;\nlet b = 1;\n").unwrap();
    let b = tools(&dir);

    let (out, err) = call(&b, "edit", json!({"path": "f.rs", "oldString": "= 1", "newString": "= 2"}));
    assert!(err && out.contains("occurs 2 times"), "{out}");
    assert_eq!(fs::read_to_string(dir.join("root/f.rs")).unwrap(), "let a = 1;\nlet b = 1;\n");

    let (out, err) = call(&b, "edit", json!({"path": "f.rs", "oldString": "let b = 1", "newString": "let b = 3"}));
    assert!(!err, "{out}");
    assert_eq!(out, "Edited f.rs (1 replacement)");
    assert_eq!(fs::read_to_string(dir.join("root/f.rs")).unwrap(), "let a = 1;\nlet b = 3;\n");

    let (out, err) =
        call(&b, "edit", json!({"path": "f.rs", "oldString": "let", "newString": "const", "replaceAll": true}));
    assert!(!err, "{out}");
    assert_eq!(out, "Edited f.rs (2 replacements)");
    assert_eq!(fs::read_to_string(dir.join("root/f.rs")).unwrap(), "const a = 1;\nconst b = 3;\n");

    let (out, err) = call(&b, "edit", json!({"path": "f.rs", "oldString": "nope", "newString": "x"}));
    assert!(err && out.contains("not found"), "{out}");
    let (out, err) = call(&b, "edit", json!({"path": "f.rs", "oldString": "", "newString": "x"}));
    assert!(err && out.contains("must not be empty"), "{out}");
}

#[test]
fn dot_dot_escapes_are_refused_by_every_path_tool() {
    let dir = scratch("dotdot");
    fs::write(dir.join("secret.txt"), "top secret\n").unwrap();
    fs::create_dir_all(dir.join("root/sub")).unwrap();
    let b = tools(&dir);
    let cases = [
        ("read", json!({"path": "../secret.txt"})),
        ("read", json!({"path": "sub/../../secret.txt"})),
        ("write", json!({"path": "../evil.txt", "content": "x"})),
        ("write", json!({"path": "../newdir/evil.txt", "content": "x"})),
        ("edit", json!({"path": "../secret.txt", "oldString": "top", "newString": "no"})),
        ("grep", json!({"pattern": "secret", "path": ".."})),
        ("glob", json!({"pattern": "*", "path": "../"})),
        ("bash", json!({"command": "pwd", "workdir": ".."})),
    ];
    for (tool, args) in cases {
        let (out, err) = call(&b, tool, args.clone());
        assert!(err, "{tool} {args}: {out}");
        assert!(out.contains("outside the workspace root"), "{tool} {args}: {out}");
        assert!(!out.contains("top secret"), "{tool} leaked the file: {out}");
    }
    assert_eq!(fs::read_to_string(dir.join("secret.txt")).unwrap(), "top secret\n");
    assert!(!dir.join("evil.txt").exists() && !dir.join("newdir").exists());
}

#[test]
fn absolute_paths_outside_the_root_are_refused_and_inside_accepted() {
    let dir = scratch("absolute");
    fs::write(dir.join("secret.txt"), "top secret\n").unwrap();
    fs::write(dir.join("root/mine.txt"), "mine\n").unwrap();
    let b = tools(&dir);
    let outside = dir.join("secret.txt").to_string_lossy().into_owned();
    let (out, err) = call(&b, "read", json!({"path": outside}));
    assert!(err && out.contains("outside the workspace root"), "{out}");
    let (out, err) = call(&b, "read", json!({"path": "/etc/hostname"}));
    assert!(err && out.contains("outside the workspace root"), "{out}");
    let (out, err) = call(&b, "write", json!({"path": dir.join("x.txt").to_string_lossy(), "content": "x"}));
    assert!(err && out.contains("outside the workspace root"), "{out}");
    assert!(!dir.join("x.txt").exists());

    let inside = fs::canonicalize(dir.join("root/mine.txt")).unwrap().to_string_lossy().into_owned();
    let (out, err) = call(&b, "read", json!({"path": inside}));
    assert!(!err, "{out}");
    assert_eq!(out, "     1\tmine\n");
}

#[cfg(unix)]
#[test]
fn symlinks_that_escape_are_refused_and_inner_ones_followed() {
    use std::os::unix::fs::symlink;
    let dir = scratch("symlink");
    fs::create_dir_all(dir.join("outside")).unwrap();
    fs::write(dir.join("outside/secret.txt"), "top secret\n").unwrap();
    fs::write(dir.join("root/real.txt"), "real\n").unwrap();
    symlink(dir.join("outside"), dir.join("root/door")).unwrap();
    symlink(dir.join("outside/secret.txt"), dir.join("root/peek.txt")).unwrap();
    symlink(dir.join("outside/not-yet.txt"), dir.join("root/trap.txt")).unwrap();
    symlink("real.txt", dir.join("root/alias.txt")).unwrap();
    let b = tools(&dir);

    for (tool, args) in [
        ("read", json!({"path": "door/secret.txt"})),
        ("read", json!({"path": "peek.txt"})),
        ("write", json!({"path": "door/new.txt", "content": "x"})),
        ("edit", json!({"path": "peek.txt", "oldString": "top", "newString": "no"})),
        ("grep", json!({"pattern": "secret", "path": "door"})),
        ("bash", json!({"command": "pwd", "workdir": "door"})),
    ] {
        let (out, err) = call(&b, tool, args.clone());
        assert!(err && out.contains("outside the workspace root"), "{tool} {args}: {out}");
    }
    // A link that points nowhere yet: writing through it would create a file outside.
    let (out, err) = call(&b, "write", json!({"path": "trap.txt", "content": "x"}));
    assert!(err && out.contains("points nowhere"), "{out}");
    assert!(!dir.join("outside/not-yet.txt").exists());
    assert!(!dir.join("outside/new.txt").exists());

    let (out, err) = call(&b, "read", json!({"path": "alias.txt"}));
    assert!(!err, "{out}");
    assert_eq!(out, "     1\treal\n");

    // Walks do not follow links at all, so nothing behind `door` is listed or searched.
    let (out, err) = call(&b, "grep", json!({"pattern": "secret"}));
    assert!(!err && out == "No matches", "{out}");
    let (out, _) = call(&b, "glob", json!({"pattern": "**/*.txt"}));
    assert_eq!(out, "real.txt");
}

fn tree(dir: &Path) {
    let root = dir.join("root");
    for (path, text) in [
        ("src/lib.rs", "pub fn alpha() {}\nfn beta() {}\n"),
        ("src/deep/mod.rs", "// alpha here\n"),
        ("README.md", "alpha and omega\n"),
        ("notes.txt", "nothing\r\nalpha at line two\r\n"),
        (".git/config", "alpha in git\n"),
        ("node_modules/x/index.js", "alpha in deps\n"),
        ("alpha-b.txt", "b\n"),
        ("alpha/z.txt", "z\n"),
    ] {
        fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
        fs::write(root.join(path), text).unwrap();
    }
}

#[test]
fn grep_sorts_by_path_then_line_skips_git_and_honours_include_and_limit() {
    let dir = scratch("grep");
    tree(&dir);
    let b = tools(&dir);

    let (out, err) = call(&b, "grep", json!({"pattern": "alpha"}));
    assert!(!err, "{out}");
    assert_eq!(
        out,
        "README.md:1:alpha and omega\nnotes.txt:2:alpha at line two\nsrc/deep/mod.rs:1:// alpha here\nsrc/lib.rs:1:pub fn alpha() {}"
    );

    let (out, _) = call(&b, "grep", json!({"pattern": "^(pub )?fn", "include": "*.rs"}));
    assert_eq!(out, "src/lib.rs:1:pub fn alpha() {}\nsrc/lib.rs:2:fn beta() {}");

    // Paths stay relative to the root when the search starts lower, so they feed `read` directly.
    let (out, _) = call(&b, "grep", json!({"pattern": "alpha", "path": "src/deep"}));
    assert_eq!(out, "src/deep/mod.rs:1:// alpha here");

    let (out, _) = call(&b, "grep", json!({"pattern": "alpha", "limit": 2}));
    assert!(
        out.starts_with("README.md:1:alpha and omega\nnotes.txt:2:alpha at line two\n(stopped at 2 matches"),
        "{out}"
    );

    let (out, err) = call(&b, "grep", json!({"pattern": "zzz"}));
    assert!(!err && out == "No matches", "{out}");
    let (out, err) = call(&b, "grep", json!({"pattern": "("}));
    assert!(err && out.contains("invalid regular expression"), "{out}");
}

#[test]
fn glob_lists_sorted_relative_paths_with_a_limit() {
    let dir = scratch("glob");
    tree(&dir);
    let b = tools(&dir);

    let (out, _) = call(&b, "glob", json!({"pattern": "*.txt"}));
    // Sorted as whole strings: `alpha-b.txt` ('-' is 0x2d) before `alpha/z.txt` ('/' is 0x2f).
    assert_eq!(out, "alpha-b.txt\nalpha/z.txt\nnotes.txt");

    let (out, _) = call(&b, "glob", json!({"pattern": "src/**/*.rs"}));
    assert_eq!(out, "src/deep/mod.rs\nsrc/lib.rs");
    let (out, _) = call(&b, "glob", json!({"pattern": "src/*.rs"}));
    assert_eq!(out, "src/lib.rs", "* does not cross a directory");
    let (out, _) = call(&b, "glob", json!({"pattern": "**/*.rs", "path": "src"}));
    assert_eq!(out, "src/deep/mod.rs\nsrc/lib.rs");

    let (out, _) = call(&b, "glob", json!({"pattern": "**", "limit": 2}));
    assert_eq!(out, "README.md\nalpha-b.txt\n(showing 2 of 6 files; narrow the pattern or path to see the rest)");

    let (out, err) = call(&b, "glob", json!({"pattern": "*.none"}));
    assert!(!err && out == "No files found", "{out}");
    let (out, err) = call(&b, "glob", json!({"pattern": "*", "path": "README.md"}));
    assert!(err && out.contains("not a directory"), "{out}");
}
