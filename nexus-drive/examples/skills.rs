//! Agent Skills: two `SKILL.md` folders (`examples/skills/`), listed in the
//! system prompt, one loaded on demand, its reference read.
//!
//! ```text
//! cargo run -p nexus-drive --example skills
//! ```
//!
//! The client gets the skills and the `read` built-in, confined to a scratch
//! workspace. The model sees only the catalog (each skill's name and
//! description). It calls `skill` with `changelog-writer` and gets that
//! skill's instructions and the list of its files; from then on, and only
//! then, `read` may open files in that skill's folder. `sql-review` stays a
//! catalog line. Nothing here turns `bash` on, so the model is told the
//! skill's script cannot be run.

mod support;

use std::path::Path;

use nexus_drive::blocking::Client;
use nexus_drive::builtins::Builtins;
use nexus_drive::skills::Skills;
use nexus_drive::{DriveError, StreamEvent};
use nexus_tests::fake::{Script, Turn};
use serde_json::json;

const ANSWER: &str = "## [1.3.0] - 2026-12-03\n### Added\n- Load Agent Skills on demand\n### Fixed\n- Keep the catalog within its budget";

/// The scripted model (offline): load the skill, read its format reference, answer.
fn script(format_md: &Path) -> Script {
    Script::new(vec![
        Turn::default().call("skill", r#"{"name": "changelog-writer"}"#),
        Turn::default().call("read", json!({"path": format_md.display().to_string()}).to_string()),
        Turn::text(ANSWER),
    ])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let found = Skills::discover([Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/skills")]);
    for problem in &found.errors {
        eprintln!("skipped: {problem}");
    }
    let skills = found.skills;
    let names: Vec<&str> = skills.iter().map(|s| s.name()).collect();
    println!("skills: {}", names.join(", "));
    let catalog = skills.catalog();
    println!("catalog: {} described, {} by name only", catalog.described.len(), catalog.names_only.len());
    let writer = skills.get("changelog-writer").ok_or("the changelog-writer skill is missing")?;
    println!("changelog-writer files: {}", writer.files().join(", "));

    let workspace = std::env::temp_dir().join(format!("nexus-skills-example-{}", std::process::id()));
    std::fs::create_dir_all(&workspace)?;
    let provider = support::Provider::pick(script(&writer.dir().join("references/format.md")));
    let mut builder =
        provider.builder().system("You maintain this project's changelog. Be brief.").skills(skills.clone()).on_event(
            |event| match event {
                StreamEvent::SkillActivated { name, .. } => println!("[skill activated] {name}"),
                StreamEvent::ToolResult { name, result, .. } => {
                    let mark = if result.is_error { "error" } else { "ok" };
                    let first = result.output.lines().next().unwrap_or_default();
                    println!("[{name} {mark}] {first}");
                }
                _ => {}
            },
        );
    for tool in Builtins::new(&workspace).only(["read"])?.tools() {
        builder = builder.dyn_tool(tool);
    }
    let config = builder.build().map_err(|e: DriveError| e.to_string())?;

    let result =
        Client::new(config).run("Draft the changelog entry for 1.3.0: skills support, and the catalog budget fix.");
    let _ = std::fs::remove_dir_all(&workspace);
    let result = result?;
    println!("status: {:?}, turns: {}", result.status, result.turns);
    println!("answer:\n{}", result.text);
    Ok(())
}
