//! `SKILL.md`: the YAML front matter between two `---` lines, then the
//! Markdown body, checked field by field against the Agent Skills format.
//!
//! Scalars are read as the text they were written as (`version: 1.0` stays
//! `"1.0"`), as the format's reference validator reads them: a skill's
//! fields are strings, and YAML's number and boolean typing would only
//! change what its author wrote.

use std::collections::BTreeMap;

use saphyr::{ScalarStyle, Yaml, YamlLoader};
use saphyr_parser::Parser;

/// The longest `name` (in characters).
pub const MAX_NAME_CHARS: usize = 64;
/// The longest `description` (in characters).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The longest `compatibility` (in characters).
pub const MAX_COMPATIBILITY_CHARS: usize = 500;

/// What a problem is about: the front matter as a whole, or one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// The field (`name`, `metadata.version`, …), when it is about one.
    pub(crate) field: Option<String>,
    pub(crate) message: String,
}

impl Problem {
    fn whole(message: impl Into<String>) -> Problem {
        Problem { field: None, message: message.into() }
    }

    fn field(field: impl Into<String>, message: impl Into<String>) -> Problem {
        Problem { field: Some(field.into()), message: message.into() }
    }
}

/// The front matter's fields, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FrontMatter {
    pub(crate) name: String,
    pub(crate) description: String,
    pub(crate) license: Option<String>,
    pub(crate) compatibility: Option<String>,
    pub(crate) metadata: BTreeMap<String, String>,
    pub(crate) allowed_tools: Vec<String>,
}

/// Splits `text` into the YAML between the opening and closing `---` lines
/// and the body after them (trimmed).
pub(crate) fn split(text: &str) -> Result<(&str, &str), Problem> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = strip_fence(text) else {
        return Err(Problem::whole("no YAML front matter: the file must begin with a `---` line"));
    };
    let mut offset = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end_matches(['\n', '\r']).trim_end() == "---" {
            let yaml = &rest[..offset];
            let body = &rest[offset + line.len()..];
            return Ok((yaml, body.trim()));
        }
        offset += line.len();
    }
    Err(Problem::whole("the front matter is not closed by a `---` line"))
}

/// The text after an opening `---` line, if `text` begins with one.
fn strip_fence(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("---")?;
    let rest = rest.trim_start_matches([' ', '\t']);
    rest.strip_prefix("\r\n").or_else(|| rest.strip_prefix('\n'))
}

/// Parses and checks the front matter of the skill in folder `folder`
/// (`None`: every rule but the folder-name one).
pub(crate) fn front_matter(yaml: &str, folder: Option<&str>) -> Result<FrontMatter, Problem> {
    let map = mapping(yaml)?;
    let mut fields: BTreeMap<String, &Yaml<'_>> = BTreeMap::new();
    for (k, v) in &map {
        // Keys other than strings cannot be fields of the format; they are
        // left out like any other field it does not define.
        if let Some(key) = scalar(k) {
            fields.insert(key, v);
        }
    }

    let name = required(&fields, "name")?;
    check_name(&name, folder)?;
    let description = required(&fields, "description")?;
    let chars = description.chars().count();
    if chars > MAX_DESCRIPTION_CHARS {
        return Err(Problem::field(
            "description",
            format!("is {chars} characters long; the limit is {MAX_DESCRIPTION_CHARS}"),
        ));
    }
    let license = optional(&fields, "license")?;
    let compatibility = optional(&fields, "compatibility")?;
    if let Some(c) = &compatibility {
        let chars = c.chars().count();
        if c.trim().is_empty() {
            return Err(Problem::field("compatibility", "is empty; leave the field out instead"));
        }
        if chars > MAX_COMPATIBILITY_CHARS {
            return Err(Problem::field(
                "compatibility",
                format!("is {chars} characters long; the limit is {MAX_COMPATIBILITY_CHARS}"),
            ));
        }
    }
    let metadata = match fields.get("metadata") {
        None => BTreeMap::new(),
        Some(v) if is_null(v) => BTreeMap::new(),
        Some(Yaml::Mapping(m)) => {
            let mut out = BTreeMap::new();
            for (k, v) in m {
                let key = scalar(k).ok_or_else(|| Problem::field("metadata", "keys must be strings"))?;
                let value = scalar(v).ok_or_else(|| {
                    Problem::field(format!("metadata.{key}"), "must be a string, not a list or a map")
                })?;
                out.insert(key, value);
            }
            out
        }
        Some(_) => return Err(Problem::field("metadata", "must be a map of string keys to string values")),
    };
    // The format says a space-separated string; skills written for other
    // clients also give a YAML list, which means the same.
    let allowed_tools = match fields.get("allowed-tools") {
        None => Vec::new(),
        Some(v) if is_null(v) => Vec::new(),
        Some(Yaml::Sequence(items)) => items
            .iter()
            .map(|i| scalar(i).ok_or_else(|| Problem::field("allowed-tools", "list items must be strings")))
            .collect::<Result<Vec<_>, _>>()?,
        Some(v) => scalar(v)
            .ok_or_else(|| Problem::field("allowed-tools", "must be a space-separated string of tool names"))?
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    };
    Ok(FrontMatter { name, description, license, compatibility, metadata, allowed_tools })
}

/// The front matter as one YAML mapping, scalars kept as written.
fn mapping(yaml: &str) -> Result<saphyr::Mapping<'_>, Problem> {
    let mut parser = Parser::new_from_str(yaml);
    let mut loader: YamlLoader<'_, Yaml<'_>> = YamlLoader::default();
    loader.early_parse(false);
    parser.load(&mut loader, false).map_err(|e| Problem::whole(format!("invalid YAML front matter: {e}")))?;
    if let Some(e) = loader.error() {
        return Err(Problem::whole(format!("invalid YAML front matter: {e}")));
    }
    match loader.into_documents().into_iter().next() {
        Some(Yaml::Mapping(map)) => Ok(map),
        _ => Err(Problem::whole("the front matter is not a YAML mapping of fields")),
    }
}

/// A front matter field as read for other Markdown-with-front-matter
/// files (agent definitions): a scalar as written, a list of scalars, or
/// something else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Field {
    Text(String),
    List(Vec<String>),
    Other,
}

/// The front matter's top-level fields, each as a [`Field`]; null values
/// are left out (they mean "not given").
pub(crate) fn fields(yaml: &str) -> Result<BTreeMap<String, Field>, Problem> {
    let map = mapping(yaml)?;
    let mut out = BTreeMap::new();
    for (k, v) in &map {
        let Some(key) = scalar(k) else { continue };
        if is_null(v) {
            continue;
        }
        let field = match v {
            Yaml::Sequence(items) => match items.iter().map(scalar).collect::<Option<Vec<_>>>() {
                Some(list) => Field::List(list),
                None => Field::Other,
            },
            other => scalar(other).map_or(Field::Other, Field::Text),
        };
        out.insert(key, field);
    }
    Ok(out)
}

/// The format's name rules: 1–64 lowercase letters, digits and hyphens, no
/// hyphen first, last or twice in a row, and the same as the folder's name.
/// Letters are Unicode lowercase letters, as in the format's reference
/// validator (which also takes `é`).
pub(crate) fn check_name(name: &str, folder: Option<&str>) -> Result<(), Problem> {
    let bad = |why: String| Err(Problem::field("name", format!("{name:?} {why}")));
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        return bad(format!("is {chars} characters long; the limit is {MAX_NAME_CHARS}"));
    }
    if let Some(c) = name.chars().find(|c| !name_char(*c)) {
        return bad(format!("contains {c:?}: only lowercase letters, digits and hyphens are allowed"));
    }
    if name.starts_with('-') || name.ends_with('-') {
        return bad("must not start or end with a hyphen".into());
    }
    if name.contains("--") {
        return bad("must not contain two hyphens in a row".into());
    }
    if let Some(folder) = folder.filter(|f| *f != name) {
        return bad(format!("must be the same as the skill's folder name {folder:?}"));
    }
    Ok(())
}

/// A letter or digit that lowercasing leaves as it is, or `-` (the
/// reference validator's `isalnum()` and `name == name.lower()`).
pub(crate) fn name_char(c: char) -> bool {
    c == '-' || (c.is_alphanumeric() && c.to_lowercase().eq(std::iter::once(c)))
}

/// A required string field, present and not blank.
fn required(fields: &BTreeMap<String, &Yaml<'_>>, field: &str) -> Result<String, Problem> {
    match optional(fields, field)? {
        None => Err(Problem::field(field, "is missing (it is required)")),
        Some(v) if v.trim().is_empty() => Err(Problem::field(field, "is empty (it is required)")),
        Some(v) => Ok(v),
    }
}

/// An optional string field (`None` when absent or null).
fn optional(fields: &BTreeMap<String, &Yaml<'_>>, field: &str) -> Result<Option<String>, Problem> {
    match fields.get(field) {
        None => Ok(None),
        Some(v) if is_null(v) => Ok(None),
        Some(v) => scalar(v).map(Some).ok_or_else(|| Problem::field(field, "must be a string, not a list or a map")),
    }
}

/// A scalar's text as written (tags are looked through).
fn scalar(y: &Yaml<'_>) -> Option<String> {
    match y {
        Yaml::Representation(text, _, _) => Some(text.to_string()),
        Yaml::Value(v) => Some(match v {
            saphyr::Scalar::Null => String::new(),
            saphyr::Scalar::Boolean(b) => b.to_string(),
            saphyr::Scalar::Integer(i) => i.to_string(),
            saphyr::Scalar::FloatingPoint(f) => f.to_string(),
            saphyr::Scalar::String(s) => s.to_string(),
        }),
        Yaml::Tagged(_, inner) => scalar(inner),
        _ => None,
    }
}

/// A plain empty, `~` or `null` scalar: YAML's null, meaning "not given".
fn is_null(y: &Yaml<'_>) -> bool {
    match y {
        Yaml::Representation(text, ScalarStyle::Plain, None) => {
            matches!(text.as_ref(), "" | "~" | "null" | "Null" | "NULL")
        }
        Yaml::Value(saphyr::Scalar::Null) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fm(yaml: &str, folder: &str) -> Result<FrontMatter, Problem> {
        front_matter(yaml, Some(folder))
    }

    #[test]
    fn front_matter_is_split_from_the_body() {
        let (yaml, body) = split("---\nname: a\n---\n\n# Title\nText\n").unwrap();
        assert_eq!(yaml, "name: a\n");
        assert_eq!(body, "# Title\nText");
        let (yaml, body) = split("\u{feff}---\r\nname: a\r\n---\r\nbody").unwrap();
        assert_eq!((yaml, body), ("name: a\r\n", "body"));
        assert!(split("# no front matter\n").unwrap_err().message.contains("must begin with a `---` line"));
        assert!(split("---\nname: a\n").unwrap_err().message.contains("not closed"));
        // A `---` inside a value is not the end: only a line of its own is.
        let (yaml, _) = split("---\ndescription: a --- b\n---\n").unwrap();
        assert_eq!(yaml, "description: a --- b\n");
    }

    #[test]
    fn fields_are_read_as_written() {
        let f = fm(
            "name: pdf\ndescription: \"Reads PDFs: text and tables.\"\nlicense: Apache-2.0\n\
             metadata:\n  version: 1.0\n  author: example\n  beta: true\nallowed-tools: Bash(git:*) Read\n\
             model: anything\n",
            "pdf",
        )
        .unwrap();
        assert_eq!(f.description, "Reads PDFs: text and tables.");
        assert_eq!(f.license.as_deref(), Some("Apache-2.0"));
        assert_eq!(f.metadata.get("version").map(String::as_str), Some("1.0"));
        assert_eq!(f.metadata.get("beta").map(String::as_str), Some("true"));
        assert_eq!(f.allowed_tools, ["Bash(git:*)", "Read"]);
        let f = fm("name: x\ndescription: >-\n  folded\n  text\nallowed-tools: [Read, Grep]\nlicense:\n", "x").unwrap();
        assert_eq!(f.description, "folded text");
        assert_eq!(f.allowed_tools, ["Read", "Grep"]);
        assert_eq!(f.license, None);
    }

    #[test]
    fn each_rule_names_its_field() {
        let case = |yaml: &str, folder: &str| fm(yaml, folder).unwrap_err();
        let p = case("description: d\n", "x");
        assert_eq!((p.field.as_deref(), p.message.as_str()), (Some("name"), "is missing (it is required)"));
        assert_eq!(case("name: x\n", "x").field.as_deref(), Some("description"));
        assert_eq!(case("name: x\ndescription: '  '\n", "x").message, "is empty (it is required)");
        for (name, why) in [
            ("PDF", "only lowercase letters"),
            ("-pdf", "start or end with a hyphen"),
            ("pdf-", "start or end with a hyphen"),
            ("pdf--x", "two hyphens in a row"),
            ("pdf_x", "only lowercase letters"),
            ("a b", "only lowercase letters"),
        ] {
            let p = case(&format!("name: '{name}'\ndescription: d\n"), name);
            assert_eq!(p.field.as_deref(), Some("name"), "{name}");
            assert!(p.message.contains(why), "{name}: {}", p.message);
        }
        let long = "a".repeat(65);
        assert!(case(&format!("name: {long}\ndescription: d\n"), &long).message.contains("65 characters"));
        assert!(fm(&format!("name: {}\ndescription: d\n", "a".repeat(64)), &"a".repeat(64)).is_ok());
        assert!(case("name: pdf\ndescription: d\n", "pdfs").message.contains("folder name \"pdfs\""));
        assert!(fm("name: café-2\ndescription: d\n", "café-2").is_ok());
        // Titlecase letters change when lowercased: refused like uppercase ones.
        assert!(case("name: ǅa\ndescription: d\n", "ǅa").message.contains("contains 'ǅ'"));
        let p = case(&format!("name: x\ndescription: {}\n", "d".repeat(1025)), "x");
        assert_eq!(p.field.as_deref(), Some("description"));
        assert!(p.message.contains("1025 characters long; the limit is 1024"), "{}", p.message);
        assert!(fm(&format!("name: x\ndescription: {}\n", "é".repeat(1024)), "x").is_ok());
        let p = case(&format!("name: x\ndescription: d\ncompatibility: {}\n", "c".repeat(501)), "x");
        assert_eq!(p.field.as_deref(), Some("compatibility"));
        assert_eq!(case("name: x\ndescription: d\nmetadata: [a]\n", "x").field.as_deref(), Some("metadata"));
        assert_eq!(case("name: x\ndescription: d\nmetadata:\n  k: [1]\n", "x").field.as_deref(), Some("metadata.k"));
        assert_eq!(case("name: [x]\ndescription: d\n", "x").field.as_deref(), Some("name"));
        assert!(case("name: x\ndescription: d\nname: y\n", "x").message.contains("invalid YAML"));
        assert!(case("- a\n- b\n", "x").message.contains("not a YAML mapping"));
        assert!(case("name: x\n  description: : d\n", "x").message.contains("invalid YAML"));
    }
}
