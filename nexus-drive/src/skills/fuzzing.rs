//! The body of the `skill_md` fuzz target (`fuzz/`), built with the
//! `fuzzing` feature and run by the unit tests over mutated fixtures: any
//! bytes as a `SKILL.md` give a checked skill or a problem, never a panic,
//! and what is accepted keeps every rule of the format.

use super::parse::{self, MAX_COMPATIBILITY_CHARS, MAX_DESCRIPTION_CHARS, MAX_NAME_CHARS};

/// Checks one input; panics when an invariant does not hold.
pub fn skill_md(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let split = parse::split(&text);
    assert_eq!(split, parse::split(&text), "splitting is deterministic");
    let Ok((yaml, body)) = split else {
        return;
    };
    assert!(body.len() < text.len() && yaml.len() < text.len());
    assert_eq!(body, body.trim());
    let first = parse::front_matter(yaml, None);
    assert_eq!(first, parse::front_matter(yaml, None), "parsing is deterministic");
    let Ok(fm) = first else {
        return;
    };
    let name_chars = fm.name.chars().count();
    assert!((1..=MAX_NAME_CHARS).contains(&name_chars), "{:?}", fm.name);
    assert!(fm.name.chars().all(parse::name_char), "{:?}", fm.name);
    assert!(!fm.name.starts_with('-') && !fm.name.ends_with('-') && !fm.name.contains("--"));
    assert!(!fm.description.trim().is_empty());
    assert!(fm.description.chars().count() <= MAX_DESCRIPTION_CHARS);
    if let Some(c) = &fm.compatibility {
        assert!(!c.trim().is_empty() && c.chars().count() <= MAX_COMPATIBILITY_CHARS);
    }
    // The folder rule is the only one left: the same name passes, another fails on `name`.
    assert_eq!(parse::front_matter(yaml, Some(&fm.name)).as_ref(), Ok(&fm));
    let other = format!("{}-x", fm.name);
    let refused = parse::front_matter(yaml, Some(&other)).expect_err("another folder name is refused");
    assert_eq!(refused.field.as_deref(), Some("name"));
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every fixture SKILL.md, cut at many points and with bytes changed,
    /// plus inputs aimed at YAML's corners.
    #[test]
    fn mutated_skill_files_never_panic_and_accepted_ones_keep_the_rules() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut seeds: Vec<Vec<u8>> = Vec::new();
        for dir in [root.join("tests/fixtures/skills/anthropic"), root.join("examples/skills")] {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                if let Ok(bytes) = std::fs::read(entry.path().join("SKILL.md")) {
                    seeds.push(bytes);
                }
            }
        }
        assert!(seeds.len() >= 6);
        for corner in [
            &b"---\nname: a\ndescription: &x [*x, *x]\n---\n"[..],
            b"---\nname: !!binary aGVsbG8=\ndescription: d\n---\n",
            b"---\n? [a, b]\n: c\nname: a\ndescription: d\n---\n",
            b"---\nname: a\ndescription: |\n  multi\n  line\n---\n",
            b"---\n---\n",
            b"---\n\xff\xfe\n---\n",
            b"---\nname: \"\\u0041\"\ndescription: d\n---\n",
            b"---\nname: a\ndescription: d\nmetadata: {a: {b: c}}\n---\n",
        ] {
            seeds.push(corner.to_vec());
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for seed in &seeds {
            super::skill_md(seed);
            // Only the front matter matters beyond the first lines.
            let head = &seed[..seed.len().min(1200)];
            for cut in (0..head.len()).step_by(7) {
                super::skill_md(&head[..cut]);
            }
            for _ in 0..200 {
                let mut m = head.to_vec();
                for _ in 0..1 + next() % 4 {
                    let at = (next() as usize) % m.len().max(1);
                    let byte = b"-:\n #'\"[]{}&*!|>\t\\xA"[(next() as usize) % 20];
                    match next() % 3 {
                        0 if !m.is_empty() => m[at] = byte,
                        1 => m.insert(at.min(m.len()), byte),
                        _ if !m.is_empty() => {
                            m.remove(at);
                        }
                        _ => {}
                    }
                }
                super::skill_md(&m);
            }
        }
    }
}
