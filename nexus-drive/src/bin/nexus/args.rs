//! Command-line parsing, by hand: a handful of flags per command does not
//! justify a dependency, and hand-rolled parsing keeps error messages ours.
//!
//! Accepted forms: `--flag VALUE`, `--flag=VALUE`, switches (`--stream`),
//! switches with an optional inline value (`--builtins` or
//! `--builtins=read,grep`), positionals anywhere, and `--` to end flags.

use std::collections::{HashMap, HashSet};

use crate::Fail;

/// Which flags a command takes.
pub struct Spec {
    /// The command, for messages.
    pub command: &'static str,
    /// Flags that take a value.
    pub values: &'static [&'static str],
    /// Flags that take none.
    pub switches: &'static [&'static str],
    /// Flags that take an optional `=VALUE`.
    pub optional: &'static [&'static str],
}

/// Value flags that may be given more than once (each time adds a value, in order).
pub const REPEATABLE: &[&str] = &["skills", "mcp", "fallback"];

/// What was given.
#[derive(Debug, Default)]
pub struct Parsed {
    values: HashMap<&'static str, String>,
    repeated: HashMap<&'static str, Vec<String>>,
    switches: HashSet<&'static str>,
    /// Positionals, in order.
    pub positionals: Vec<String>,
}

impl Parsed {
    /// The value of `--name`, if given.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// Every value of a repeatable `--name`, in the order given.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.repeated.get(name).map(|v| v.iter().map(String::as_str).collect()).unwrap_or_default()
    }

    /// Whether the switch `--name` was given.
    pub fn switch(&self, name: &str) -> bool {
        self.switches.contains(name)
    }

    /// `--name` parsed as a number.
    pub fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, Fail> {
        match self.value(name) {
            None => Ok(None),
            Some(v) => {
                v.parse().map(Some).map_err(|_| Fail::usage(format!("--{name} wants a whole number, got {v:?}")))
            }
        }
    }
}

/// Parses `args` (the command's own arguments) against `spec`.
pub fn parse(args: &[String], spec: &Spec) -> Result<Parsed, Fail> {
    let mut out = Parsed::default();
    let mut iter = args.iter();
    let mut flags_done = false;
    while let Some(arg) = iter.next() {
        if flags_done || !arg.starts_with("--") || arg == "-" {
            out.positionals.push(arg.clone());
            continue;
        }
        if arg == "--" {
            flags_done = true;
            continue;
        }
        let body = &arg[2..];
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        let known = |list: &'static [&'static str]| list.iter().copied().find(|f| *f == name);
        if let Some(flag) = known(spec.values) {
            let value = match inline {
                Some(v) => v,
                None => iter
                    .next()
                    .cloned()
                    .ok_or_else(|| Fail::usage(format!("--{flag} needs a value (nexus {} --help)", spec.command)))?,
            };
            if REPEATABLE.contains(&flag) {
                out.repeated.entry(flag).or_default().push(value.clone());
                out.values.entry(flag).or_insert(value);
            } else if out.values.insert(flag, value).is_some() {
                return Err(Fail::usage(format!("--{flag} is given twice")));
            }
        } else if let Some(flag) = known(spec.switches) {
            if inline.is_some() {
                return Err(Fail::usage(format!("--{flag} takes no value")));
            }
            if !out.switches.insert(flag) {
                return Err(Fail::usage(format!("--{flag} is given twice")));
            }
        } else if let Some(flag) = known(spec.optional) {
            if !out.switches.insert(flag) {
                return Err(Fail::usage(format!("--{flag} is given twice")));
            }
            if let Some(v) = inline {
                out.values.insert(flag, v);
            }
        } else {
            return Err(Fail::usage(format!(
                "unknown option --{name} for `nexus {}` (see nexus {} --help)",
                spec.command, spec.command
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: Spec = Spec {
        command: "t",
        values: &["style", "max-turns", "fallback"],
        switches: &["json"],
        optional: &["builtins"],
    };

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn forms() {
        let p = parse(
            &args(&["--style", "openai", "hello", "--json", "--builtins=read,grep", "--", "--not-a-flag"]),
            &SPEC,
        )
        .unwrap();
        assert_eq!(p.value("style"), Some("openai"));
        assert!(p.switch("json") && p.switch("builtins"));
        assert_eq!(p.value("builtins"), Some("read,grep"));
        assert_eq!(p.positionals, ["hello", "--not-a-flag"]);
        let p = parse(&args(&["--fallback", "a", "--fallback=b"]), &SPEC).unwrap();
        assert_eq!(p.all("fallback"), ["a", "b"]);
        let p = parse(&args(&["--max-turns=3", "-"]), &SPEC).unwrap();
        assert!(p.all("skills").is_empty());
        let spec = Spec { command: "t", values: &["skills"], switches: &[], optional: &[] };
        let repeated = parse(&args(&["--skills", "a", "--skills=b"]), &spec).unwrap();
        assert_eq!(repeated.all("skills"), ["a", "b"]);
        assert_eq!(p.number::<u32>("max-turns").unwrap(), Some(3));
        assert_eq!(p.positionals, ["-"]);
    }

    #[test]
    fn mistakes_are_usage_errors() {
        for bad in
            [&["--nope"][..], &["--style"], &["--json=1"], &["--json", "--json"], &["--style", "a", "--style", "b"]]
        {
            let err = parse(&args(bad), &SPEC).unwrap_err();
            assert_eq!(err.code, 2, "{bad:?}");
        }
        let p = parse(&args(&["--max-turns", "x"]), &SPEC).unwrap();
        assert_eq!(p.number::<u32>("max-turns").unwrap_err().code, 2);
    }
}
