//! Skill discovery on real folders: public skills written elsewhere
//! (`fixtures/skills/anthropic`, from the `anthropics/skills` repository)
//! load with their fields and files; broken skills are each skipped with
//! an error naming the file and the field, while the others still load.

#![cfg(all(feature = "skills", feature = "builtins"))]

use std::fs;
use std::path::{Path, PathBuf};

use nexus_drive::builtins::Builtins;
use nexus_drive::skills::{activations, SkillErrorKind, SkillLimits, Skills, SKILL_TOOL};
use nexus_drive::{Message, ToolContext, ToolOutcome};
use nexus_proto::message::{Block, Role, ToolCall, ToolResultBlock};
use serde_json::{json, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/skills/anthropic")
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("nexus-skills-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn skill(root: &Path, folder: &str, skill_md: &str) -> PathBuf {
    let dir = root.join(folder);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("SKILL.md"), skill_md).unwrap();
    dir
}

#[test]
fn public_skills_load_with_their_fields_and_files() {
    let found = Skills::discover([fixtures()]);
    assert!(found.errors.is_empty(), "{:?}", found.errors);
    let names: Vec<&str> = found.skills.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["internal-comms", "mcp-builder", "slack-gif-creator", "webapp-testing"]);

    let mcp = found.skills.get("mcp-builder").unwrap();
    assert!(mcp.description().starts_with("Guide for creating high-quality MCP (Model Context Protocol) servers"));
    assert_eq!(mcp.license(), Some("Complete terms in LICENSE.txt"));
    assert!(mcp.body().starts_with("# MCP Server Development Guide"), "{}", &mcp.body()[..60]);
    assert!(!mcp.body().contains("name: mcp-builder"), "the front matter is not part of the body");
    assert_eq!(
        mcp.files(),
        [
            "LICENSE.txt",
            "reference/evaluation.md",
            "reference/mcp_best_practices.md",
            "reference/node_mcp_server.md",
            "reference/python_mcp_server.md",
            "scripts/connections.py",
            "scripts/evaluation.py",
            "scripts/example_evaluation.xml",
            "scripts/requirements.txt",
        ]
    );
    assert!(!mcp.files_truncated());
    let web = found.skills.get("webapp-testing").unwrap();
    assert!(web.files().contains(&"scripts/with_server.py".to_string()), "{:?}", web.files());
    // The description holds a quoted sentence with a colon: YAML read right.
    let gif = found.skills.get("slack-gif-creator").unwrap();
    assert!(gif.description().ends_with("like \"make me a GIF of X doing Y for Slack.\""), "{}", gif.description());
    assert_eq!(gif.dir(), fs::canonicalize(fixtures().join("slack-gif-creator")).unwrap());

    let catalog = found.skills.catalog();
    assert_eq!(catalog.described, names);
    assert!(catalog.names_only.is_empty());
    assert_eq!(catalog.text.matches("<skill>").count(), 4);
    // Nothing of a body in the catalog.
    assert!(!catalog.text.contains("MCP Server Development Guide"));
}

#[test]
fn the_catalog_keeps_to_its_budget_and_says_who_is_listed_by_name_only() {
    let all = Skills::discover([fixtures()]).skills;
    let full = all.catalog().text.len();
    let tight = all.clone().catalog_budget(full - 1);
    let c = tight.catalog();
    // Sorted by name: the last skill's description no longer fits.
    assert_eq!(c.described, ["internal-comms", "mcp-builder", "slack-gif-creator"]);
    assert_eq!(c.names_only, ["webapp-testing"]);
    assert!(c.text.len() < full, "{} >= {full}", c.text.len());
    assert!(c.text.contains("webapp-testing"), "a skill past the budget is still named");
    assert!(!c.text.contains("Toolkit for interacting with and testing local web applications"));
    let none = all.clone().catalog_budget(0).catalog();
    assert!(none.described.is_empty());
    assert_eq!(none.names_only.len(), 4);
    // Deterministic: the same set gives the same text.
    assert_eq!(all.catalog(), Skills::discover([fixtures()]).skills.catalog());
}

#[test]
fn broken_skills_are_each_skipped_with_the_file_and_field_while_the_rest_load() {
    let root = scratch("broken");
    skill(&root, "good", "---\nname: good\ndescription: A good skill.\n---\nDo good things.\n");
    let no_fm = skill(&root, "no-front-matter", "# Just Markdown\n");
    let bad_name = skill(&root, "Bad_Name", "---\nname: Bad_Name\ndescription: d\n---\n");
    let long = skill(&root, "long", &format!("---\nname: long\ndescription: {}\n---\n", "x".repeat(1025)));
    let mismatch = skill(&root, "folder", "---\nname: other\ndescription: d\n---\n");
    let huge = skill(&root, "huge", &format!("---\nname: huge\ndescription: d\n---\n{}", "y".repeat(300 * 1024)));
    let bad_yaml = skill(&root, "bad-yaml", "---\nname: bad-yaml\ndescription: [unclosed\n---\n");
    fs::create_dir_all(root.join("not-a-skill")).unwrap();
    fs::write(root.join("README.md"), "not a skill either").unwrap();
    fs::write(root.join("secret.txt"), "outside").unwrap();
    let linked = skill(&root, "linked", "---\nname: linked\ndescription: d\n---\n");
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join("secret.txt"), linked.join("notes.md")).unwrap();
    #[cfg(unix)]
    let dangling = {
        let dir = skill(&root, "dangling", "---\nname: dangling\ndescription: d\n---\n");
        std::os::unix::fs::symlink(root.join("nowhere"), dir.join("gone.md")).unwrap();
        dir
    };
    let linked_md = root.join("linked-md");
    fs::create_dir_all(&linked_md).unwrap();
    fs::write(root.join("elsewhere.md"), "---\nname: linked-md\ndescription: d\n---\n").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(root.join("elsewhere.md"), linked_md.join("SKILL.md")).unwrap();

    let found = Skills::discover([&root]);
    let names: Vec<&str> = found.skills.iter().map(|s| s.name()).collect();
    assert_eq!(names, ["good"], "{:?}", found.errors);
    let error_for = |dir: &Path| {
        found
            .errors
            .iter()
            .find(|e| e.path.starts_with(dir))
            .unwrap_or_else(|| panic!("no error for {}: {:?}", dir.display(), found.errors))
    };
    let e = error_for(&no_fm);
    assert_eq!((e.kind, e.field.as_deref()), (SkillErrorKind::FrontMatter, None));
    assert_eq!(e.path, no_fm.join("SKILL.md"));
    assert!(e.to_string().ends_with("SKILL.md: no YAML front matter: the file must begin with a `---` line"), "{e}");
    let e = error_for(&bad_name);
    assert_eq!((e.kind, e.field.as_deref()), (SkillErrorKind::Field, Some("name")));
    assert!(e.to_string().contains("SKILL.md: field `name` \"Bad_Name\" contains 'B'"), "{e}");
    let e = error_for(&long);
    assert_eq!(e.field.as_deref(), Some("description"));
    assert!(e.message.contains("1025 characters long; the limit is 1024"), "{e}");
    let e = error_for(&mismatch);
    assert!(e.message.contains("same as the skill's folder name \"folder\""), "{e}");
    let e = error_for(&huge);
    assert_eq!(e.kind, SkillErrorKind::TooLarge);
    assert!(e.message.contains("over the 262144-byte cap"), "{e}");
    let e = error_for(&bad_yaml);
    assert_eq!(e.kind, SkillErrorKind::FrontMatter);
    assert!(e.message.starts_with("invalid YAML front matter"), "{e}");
    #[cfg(unix)]
    {
        let e = error_for(&linked);
        assert_eq!(e.kind, SkillErrorKind::Symlink);
        assert_eq!(e.path, linked.join("notes.md"));
        assert!(e.message.contains("symbolic link out of the skill folder"), "{e}");
        let e = error_for(&dangling);
        assert_eq!((e.kind, e.message.as_str()), (SkillErrorKind::Symlink, "is a symbolic link that points nowhere"));
        let e = error_for(&linked_md);
        assert_eq!(e.kind, SkillErrorKind::Symlink);
    }
    assert_eq!(found.errors.len(), if cfg!(unix) { 9 } else { 6 }, "{:?}", found.errors);

    // A higher cap lets the huge one in; limits are the host's.
    let limits = SkillLimits { max_skill_md_bytes: 1024 * 1024, ..SkillLimits::default() };
    assert!(Skills::discover_with([&root], &limits).skills.get("huge").is_some());
    let _ = fs::remove_dir_all(&root);
}

/// A skill folder linked into the skills directory is the host's choice: it
/// loads, named after the link, with its real folder as its directory.
#[cfg(unix)]
#[test]
fn a_linked_skill_folder_loads_from_where_it_really_is() {
    let root = scratch("linked-folder");
    let real = skill(&root, "real-place", "---\nname: shared\ndescription: d\n---\nBody.\n");
    fs::create_dir_all(root.join("skills")).unwrap();
    std::os::unix::fs::symlink(&real, root.join("skills/shared")).unwrap();
    let found = Skills::discover([root.join("skills")]);
    assert!(found.errors.is_empty(), "{:?}", found.errors);
    let shared = found.skills.get("shared").unwrap();
    assert_eq!(shared.dir(), fs::canonicalize(&real).unwrap());
    assert_eq!(shared.body(), "Body.");
    let _ = fs::remove_dir_all(&root);
}

#[test]
fn directories_given_first_win_and_missing_ones_are_reported() {
    let a = scratch("first");
    let b = scratch("second");
    skill(&a, "same", "---\nname: same\ndescription: from a\n---\n");
    skill(&b, "same", "---\nname: same\ndescription: from b\n---\n");
    skill(&b, "only-b", "---\nname: only-b\ndescription: b\n---\n");
    let missing = a.join("no-such-dir");
    let found = Skills::discover([&a, &b, &missing]);
    assert_eq!(found.skills.get("same").unwrap().description(), "from a");
    assert!(found.skills.get("only-b").is_some());
    assert_eq!(found.errors.len(), 2, "{:?}", found.errors);
    assert_eq!(found.errors[0].kind, SkillErrorKind::Duplicate);
    assert_eq!(found.errors[0].path, b.join("same/SKILL.md"));
    assert_eq!(found.errors[1].kind, SkillErrorKind::Unreadable);
    assert_eq!(found.errors[1].path, missing);
    let _ = fs::remove_dir_all(&a);
    let _ = fs::remove_dir_all(&b);
}

fn call(skills: &Skills, name: &str) -> nexus_drive::ToolResult {
    skills.activate(name, true, false).unwrap_or_else(|e| nexus_drive::ToolResult::error(e.message().to_string()))
}

#[test]
fn activation_returns_the_body_and_files_and_grants_reading_the_folder_only_then() {
    let skills = Skills::discover([fixtures()]).skills;
    let tool = skills.tool(true, false);
    assert_eq!(tool.decl().name, SKILL_TOOL);
    assert_eq!(tool.decl().input_schema["properties"]["name"]["enum"].as_array().unwrap().len(), 4);
    let r = call(&skills, "mcp-builder");
    assert!(!r.is_error);
    let dir = skills.get("mcp-builder").unwrap().dir().to_path_buf();
    assert!(r.output.starts_with("<skill_content name=\"mcp-builder\">\n# MCP Server Development Guide"));
    assert!(r.output.contains(&format!("Skill directory: {}", dir.display())));
    assert!(r.output.contains("<file>reference/mcp_best_practices.md</file>"));
    assert!(r.output.contains("There is no `bash` tool in this run"));
    let with_bash = skills.activate("mcp-builder", true, true).unwrap();
    assert!(with_bash.output.contains("Run its scripts with the `bash` tool, by absolute path."));
    let bare = skills.activate("mcp-builder", false, false).unwrap();
    assert!(bare.output.contains("There is no `read` tool in this run: its files cannot be opened here."));
    assert_eq!(r.metadata.as_ref().unwrap()["skill"], "mcp-builder");
    let r = call(&skills, "nope");
    assert!(r.is_error && r.output.contains("no skill named \"nope\""), "{r:?}");

    // Reading a skill's file with `read`: refused until granted.
    let workspace = scratch("workspace");
    let builtins = Builtins::new(&workspace).only(["read"]).unwrap();
    let file = dir.join("reference/mcp_best_practices.md");
    let args = json!({"path": file.display().to_string(), "limit": 3});
    let refused = builtins.call("read", args.clone(), &ToolContext::new("r1", "read")).unwrap_err();
    assert!(refused.message().contains("outside the workspace root"), "{}", refused.message());

    // The transcript records the activation; the grant follows from it.
    let transcript = vec![
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall(ToolCall {
                id: "c1".into(),
                name: SKILL_TOOL.into(),
                input: json!({"name": "mcp-builder"}),
                arguments: r#"{"name":"mcp-builder"}"#.into(),
                provider_data: None,
            })],
        },
        Message {
            role: Role::User,
            content: vec![Block::ToolResult(ToolResultBlock {
                call_id: "c1".into(),
                name: SKILL_TOOL.into(),
                output: "…".into(),
                is_error: false,
            })],
        },
    ];
    assert_eq!(activations(&transcript).len(), 1);
    assert!(skills.granted_dirs(&transcript[..1]).is_empty(), "a call without its result grants nothing");
    let granted = skills.granted_dirs(&transcript);
    assert_eq!(granted, std::slice::from_ref(&dir));
    let mut ctx = ToolContext::new("r2", "read");
    for d in &granted {
        ctx = ctx.with_read_root(d);
    }
    let ToolOutcome::Done(Value::String(text)) = builtins.call("read", args, &ctx).unwrap() else { panic!() };
    assert!(text.contains("# MCP Server Best Practices"), "{text}");
    // Writing there stays refused: only `read` honours the grant.
    let writer = Builtins::new(&workspace).only(["write"]).unwrap();
    let w = json!({"path": dir.join("x.md").display().to_string(), "content": "x"});
    assert!(writer.call("write", w, &ctx).is_err());
    let _ = fs::remove_dir_all(&workspace);
}
