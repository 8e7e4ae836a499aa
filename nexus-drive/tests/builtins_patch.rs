//! `apply_patch`: the Begin/End Patch grammar, confinement, and all-or-nothing writes.
#![cfg(feature = "builtins")]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use nexus_drive::builtins::Builtins;
use nexus_drive::{ToolContext, ToolOutcome};
use serde_json::{json, Value};

fn scratch(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "nexus-builtins-patch-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("root")).unwrap();
    dir
}

fn apply(b: &Builtins, patch: &str) -> (String, bool) {
    match b.call("apply_patch", json!({"patchText": patch}), &ToolContext::new("c1", "apply_patch")) {
        Ok(ToolOutcome::Done(Value::String(s))) => (s, false),
        Ok(ToolOutcome::Result(r)) => (r.output, r.is_error),
        Err(e) => (e.message().to_string(), true),
        other => panic!("unexpected outcome: {other:?}"),
    }
}

/// Every file under `dir` (hidden ones included) with its content: a snapshot to compare.
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                out.insert(format!("{rel}/"), String::new());
                walk(base, &path, out);
            } else {
                out.insert(rel, fs::read_to_string(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn setup(dir: &Path) -> Builtins {
    let root = dir.join("root");
    fs::create_dir_all(root.join("src")).unwrap();
    fs::write(root.join("src/main.rs"), "fn main() {\n    println!(\"hi\");\n}\n").unwrap();
    fs::write(root.join("src/util.rs"), "pub fn one() -> u32 {\n    1\n}\n\npub fn two() -> u32 {\n    2\n}\n")
        .unwrap();
    fs::write(root.join("old.txt"), "obsolete\n").unwrap();
    Builtins::new(root).only(["apply_patch"]).unwrap()
}

#[test]
fn add_update_move_and_delete_in_one_patch() {
    let dir = scratch("ok");
    let b = setup(&dir);
    let patch = "*** Begin Patch
*** Add File: docs/hello.md
+# Hello
+
+World
*** Update File: src/util.rs
@@ pub fn two() -> u32 {
-    2
+    22
*** Update File: src/main.rs
*** Move to: src/bin/app.rs
@@
 fn main() {
-    println!(\"hi\");
+    println!(\"hello\");
 }
*** Delete File: old.txt
*** End Patch";
    let (out, err) = apply(&b, patch);
    assert!(!err, "{out}");
    assert_eq!(out, "Applied the patch:\nA docs/hello.md\nM src/util.rs\nM src/main.rs -> src/bin/app.rs\nD old.txt");
    let root = dir.join("root");
    assert_eq!(fs::read_to_string(root.join("docs/hello.md")).unwrap(), "# Hello\n\nWorld\n");
    assert_eq!(
        fs::read_to_string(root.join("src/util.rs")).unwrap(),
        "pub fn one() -> u32 {\n    1\n}\n\npub fn two() -> u32 {\n    22\n}\n",
        "the @@ line picks which `    N` line the hunk changes"
    );
    assert_eq!(fs::read_to_string(root.join("src/bin/app.rs")).unwrap(), "fn main() {\n    println!(\"hello\");\n}\n");
    assert!(!root.join("src/main.rs").exists());
    assert!(!root.join("old.txt").exists());
    // No temporary or backup file is left behind.
    assert!(snapshot(&root).keys().all(|k| !k.contains(".nexus-")), "{:?}", snapshot(&root).keys());
}

#[test]
fn a_patch_whose_second_hunk_fails_leaves_every_file_untouched() {
    let dir = scratch("second-hunk");
    let b = setup(&dir);
    let before = snapshot(&dir);
    // The first operation adds a file, the second updates util.rs with a good
    // first hunk and a second hunk that matches nothing, the third deletes.
    let patch = "*** Begin Patch
*** Add File: new.txt
+new
*** Update File: src/util.rs
@@ pub fn one() -> u32 {
-    1
+    11
@@ pub fn two() -> u32 {
-    3
+    33
*** Delete File: old.txt
*** End Patch";
    let (out, err) = apply(&b, patch);
    assert!(err, "{out}");
    assert!(out.contains("hunk 2 of src/util.rs does not match"), "{out}");
    assert_eq!(snapshot(&dir), before, "nothing changed, nothing was created");
}

#[test]
fn a_later_file_that_fails_undoes_the_earlier_ones() {
    let dir = scratch("later-file");
    let b = setup(&dir);
    fs::write(dir.join("root/blocker"), "a file where a directory would go\n").unwrap();
    let before = snapshot(&dir);
    // Every hunk matches; the last file cannot be written because its parent
    // "directory" is a file, so the failure comes while writing.
    let patch = "*** Begin Patch
*** Update File: src/main.rs
@@
-    println!(\"hi\");
+    println!(\"changed\");
*** Delete File: old.txt
*** Add File: fresh/dir/a.txt
+a
*** Add File: blocker/b.txt
+b
*** End Patch";
    let (out, err) = apply(&b, patch);
    assert!(err, "{out}");
    assert!(out.contains("no file was changed"), "{out}");
    assert_eq!(snapshot(&dir), before, "the update, the delete and the new directories were all undone");
}

#[test]
fn paths_in_the_patch_are_confined() {
    let dir = scratch("confined");
    let b = setup(&dir);
    fs::write(dir.join("victim.txt"), "safe\n").unwrap();
    let before = snapshot(&dir);
    for patch in [
        "*** Begin Patch\n*** Add File: ../escape.txt\n+x\n*** End Patch",
        "*** Begin Patch\n*** Delete File: ../victim.txt\n*** End Patch",
        "*** Begin Patch\n*** Update File: ../victim.txt\n@@\n-safe\n+owned\n*** End Patch",
        "*** Begin Patch\n*** Update File: old.txt\n*** Move to: ../moved.txt\n*** End Patch",
        "*** Begin Patch\n*** Add File: /tmp/nexus-patch-escape.txt\n+x\n*** End Patch",
    ] {
        let (out, err) = apply(&b, patch);
        assert!(err && out.contains("outside the workspace root"), "{patch}: {out}");
    }
    assert_eq!(snapshot(&dir), before);
    assert!(!Path::new("/tmp/nexus-patch-escape.txt").exists());
}

#[test]
fn refusals_name_the_problem() {
    let dir = scratch("refusals");
    let b = setup(&dir);
    let before = snapshot(&dir);
    let cases = [
        ("*** Begin Patch\n*** Add File: old.txt\n+x\n*** End Patch", "already exists"),
        ("*** Begin Patch\n*** Delete File: nothing.txt\n*** End Patch", "nothing.txt"),
        ("*** Begin Patch\n*** Update File: nothing.txt\n@@\n-a\n+b\n*** End Patch", "nothing.txt"),
        ("*** Begin Patch\n*** Delete File: old.txt\n*** Delete File: ./old.txt\n*** End Patch", "appears twice"),
        ("*** Update File: old.txt\n@@\n-obsolete\n+x\n*** End Patch", "Begin Patch"),
        ("*** Begin Patch\n*** Update File: old.txt\n@@\n-obsolete\n+x\n", "End Patch"),
        ("*** Begin Patch\n*** Update File: old.txt\n@@\n~obsolete\n*** End Patch", "line 4"),
    ];
    for (patch, expected) in cases {
        let (out, err) = apply(&b, patch);
        assert!(err && out.contains(expected), "{patch}: {out}");
    }
    assert_eq!(snapshot(&dir), before);
}
