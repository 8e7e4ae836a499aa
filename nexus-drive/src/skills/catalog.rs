//! What the model reads: the catalog in the system prompt, the `skill`
//! tool's description, and what an activation returns.

use super::{Skill, SKILL_TOOL};

/// What the `skill` tool says of itself.
pub(crate) const TOOL_DESCRIPTION: &str = concat!(
    "Load a skill: its full instructions and the list of the files it bundles. ",
    "The available skills are listed in the system prompt; load one when the task ",
    "matches its description, before doing the task.",
);

const INTRO: &str = concat!(
    "The following skills provide specialized instructions for specific tasks. ",
    "When a task matches a skill's description, call the `skill` tool with the skill's ",
    "name to load its full instructions before proceeding.\n",
);

/// The catalog of a set of skills, as added to the system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Catalog {
    /// The text (empty when there are no skills).
    pub text: String,
    /// The skills listed with their description, sorted by name.
    pub described: Vec<String>,
    /// The skills listed by name only because the budget was spent, sorted by name.
    pub names_only: Vec<String>,
}

/// Builds the catalog: skills in name order, each with its description
/// while the whole text — including the line that names the skills left
/// without one — stays within `budget` bytes; from the first that does not
/// fit on, names only. The names are given whatever the budget, so every
/// skill stays reachable (a budget smaller than the names alone is exceeded).
pub(crate) fn build(skills: &[Skill], budget: usize) -> Catalog {
    if skills.is_empty() {
        return Catalog { text: String::new(), described: Vec::new(), names_only: Vec::new() };
    }
    const OPEN: &str = "<available_skills>\n";
    const CLOSE: &str = "</available_skills>";
    let mut text = format!("{INTRO}{OPEN}");
    let mut described = Vec::new();
    let mut cut = skills.len();
    for (i, skill) in skills.iter().enumerate() {
        let entry = format!(
            "<skill>\n<name>{}</name>\n<description>{}</description>\n</skill>\n",
            escape(&skill.name),
            escape(&skill.description)
        );
        let rest = names_line(&skills[i + 1..]).len();
        if text.len() + entry.len() + rest + CLOSE.len() > budget {
            cut = i;
            break;
        }
        text.push_str(&entry);
        described.push(skill.name.clone());
    }
    text.push_str(&names_line(&skills[cut..]));
    text.push_str(CLOSE);
    Catalog { text, described, names_only: skills[cut..].iter().map(|s| s.name.clone()).collect() }
}

/// The line naming the skills listed without a description (empty for none).
fn names_line(skills: &[Skill]) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let names: Vec<String> = skills.iter().map(|s| escape(&s.name)).collect();
    format!(
        "<more_skills>Listed by name only, for space (load one with the `{SKILL_TOOL}` tool to see what it is \
         for): {}</more_skills>\n",
        names.join(", ")
    )
}

/// What an activation returns: the instructions, where the skill lives, and
/// its files, with how (or whether) the model can use them in this run.
pub(crate) fn activation_text(skill: &Skill, can_read: bool, can_run: bool) -> String {
    let dir = skill.dir.display();
    let mut out = format!("<skill_content name=\"{}\">\n{}\n\n", escape(&skill.name), skill.body);
    out.push_str(&format!("Skill directory: {dir}\n"));
    if skill.files.is_empty() {
        out.push_str("The skill bundles no other files.\n");
    } else {
        out.push_str("Relative paths in this skill are relative to the skill directory.\n");
        out.push_str(if can_read {
            "Read its files with the `read` tool, giving the absolute path (the skill directory, then the file).\n"
        } else {
            "There is no `read` tool in this run: its files cannot be opened here.\n"
        });
        out.push_str(if can_run {
            "Run its scripts with the `bash` tool, by absolute path.\n"
        } else {
            "There is no `bash` tool in this run: its scripts cannot be run here.\n"
        });
        out.push_str("<skill_resources>\n");
        for f in &skill.files {
            out.push_str(&format!("<file>{}</file>\n", escape(f)));
        }
        if skill.files_truncated {
            out.push_str("<more>the list is cut: the skill has more files</more>\n");
        }
        out.push_str("</skill_resources>\n");
    }
    out.push_str("</skill_content>");
    out
}

/// `<`, `>` and `&` escaped, so a description cannot close the catalog's tags.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
