//! The directory a suspended run works in, kept beside its state.
//!
//! A run's built-in path tools are confined to a root directory, which is a
//! fact about the host, not about the conversation: it stays out of the
//! machine's state (the `RunState` of SPEC §8), whose snapshots stay
//! byte-for-byte what [`Run::snapshot`](nexus_proto::Run::snapshot) gives.
//! A host keeps it in the state's *envelope*: one more top-level member,
//! `"workdir": {"root": "/abs/dir"}`, written after the machine's own
//! members. [`Run::restore`](nexus_proto::Run::restore) passes over it (the
//! machine ignores members it does not know), so the bytes travel through
//! every store (files, SQLite, PostgreSQL, memory) and state file unchanged,
//! and a state without it reads as a run with no stored root.
//!
//! The machine never writes it: a host attaches it each time it writes a
//! snapshot ([`attach`]) and reads it back when it resumes ([`read`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The state member that holds the [`Workdir`].
pub const MEMBER: &str = "workdir";

/// Where a run's tools work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workdir {
    /// The absolute directory the built-in path tools are confined to.
    pub root: PathBuf,
}

impl Workdir {
    /// A workdir rooted at `root`.
    pub fn new(root: impl AsRef<Path>) -> Workdir {
        Workdir { root: root.as_ref().to_path_buf() }
    }
}

/// Why a state's workdir could not be read or attached.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkdirError {
    /// The state is not a JSON object (not a run snapshot).
    #[error("the state is not a JSON object: {0}")]
    NotAnObject(String),
    /// The `workdir` member is there but is not `{"root": "..."}`.
    #[error("the state's workdir is malformed: {0}")]
    Malformed(String),
    /// The root is not valid UTF-8, so it cannot be written as JSON text.
    #[error("the root {0:?} is not UTF-8 and cannot be stored with the run")]
    NotUtf8(PathBuf),
}

#[derive(Deserialize)]
struct Probe {
    workdir: Option<serde_json::Value>,
}

/// The workdir stored in `state`, if any.
pub fn read(state: &[u8]) -> Result<Option<Workdir>, WorkdirError> {
    let probe: Probe = serde_json::from_slice(state).map_err(|e| WorkdirError::NotAnObject(e.to_string()))?;
    match probe.workdir {
        None => Ok(None),
        Some(v) => serde_json::from_value(v).map(Some).map_err(|e| WorkdirError::Malformed(e.to_string())),
    }
}

/// `state` with `workdir` as its envelope: the machine's bytes as they were,
/// then the `workdir` member before the closing brace. A workdir already
/// there is replaced (the state is then written again without it first).
pub fn attach(state: &[u8], workdir: &Workdir) -> Result<Vec<u8>, WorkdirError> {
    let root = workdir.root.to_str().ok_or_else(|| WorkdirError::NotUtf8(workdir.root.clone()))?;
    let bare = strip(state)?;
    append_member(&bare, MEMBER, &serde_json::json!({ "root": root }))
}

/// `state` with one more top-level member, written before its closing
/// brace: the bytes before it stay as they were. Other envelope members
/// (the trace context of `telemetry`) are written the same way.
pub(crate) fn append_member(state: &[u8], name: &str, value: &serde_json::Value) -> Result<Vec<u8>, WorkdirError> {
    let end = state.iter().rposition(|b| !b.is_ascii_whitespace());
    let (Some(end), Some(b'{')) = (end, state.iter().find(|b| !b.is_ascii_whitespace())) else {
        return Err(WorkdirError::NotAnObject("no object".into()));
    };
    if state[end] != b'}' {
        return Err(WorkdirError::NotAnObject("no closing brace".into()));
    }
    let empty = state[..end].iter().rposition(|b| !b.is_ascii_whitespace()).is_some_and(|i| state[i] == b'{');
    let mut out = state[..end].to_vec();
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(format!("{}:{value}}}", serde_json::Value::from(name)).as_bytes());
    out.extend_from_slice(&state[end + 1..]);
    Ok(out)
}

/// `state` without its `workdir` member: what the machine wrote, byte for
/// byte when the member is where [`attach`] put it (so a recorded session
/// still replays against the machine's own snapshot).
pub fn strip(state: &[u8]) -> Result<Vec<u8>, WorkdirError> {
    // A malformed workdir is refused, not dropped.
    read(state)?;
    strip_member(state, MEMBER)
}

/// `state` without its top-level member `name`: byte for byte what it was
/// before [`append_member`] when the member is last (as appended), else the
/// state written again without it; unchanged when it has none.
pub(crate) fn strip_member(state: &[u8], name: &str) -> Result<Vec<u8>, WorkdirError> {
    // Members as raw text: nothing below the top level is parsed into a tree.
    let mut members: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
        serde_json::from_slice(state).map_err(|e| WorkdirError::NotAnObject(e.to_string()))?;
    let Some(member) = members.remove(name) else {
        return Ok(state.to_vec());
    };
    // Where `append_member` puts it: last, after a comma (or alone after the brace).
    let suffix = format!("{}:{}}}", serde_json::Value::from(name), member.get());
    let end = state.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |i| i + 1);
    if let Some(start) = end.checked_sub(suffix.len()).filter(|&s| &state[s..end] == suffix.as_bytes()) {
        let before = state[..start].iter().rposition(|b| !b.is_ascii_whitespace());
        let cut = match before.map(|i| (i, state[i])) {
            Some((i, b',')) => Some(i),
            Some((i, b'{')) => Some(i + 1),
            _ => None,
        };
        if let Some(cut) = cut {
            let mut out = state[..cut].to_vec();
            out.push(b'}');
            out.extend_from_slice(&state[end..]);
            return Ok(out);
        }
    }
    serde_json::to_vec(&members).map_err(|e| WorkdirError::NotAnObject(e.to_string()))
}

#[cfg(test)]
mod tests {
    use nexus_proto::{Run, RunConfig, Style};

    use super::*;

    fn snapshot() -> Vec<u8> {
        let config = RunConfig::new(Style::OpenAi, "m");
        Run::new(config, Vec::new(), vec![nexus_proto::Message::user("hi")]).unwrap().snapshot()
    }

    #[test]
    fn attached_rides_along_and_the_machine_passes_over_it() {
        let state = snapshot();
        let w = Workdir::new("/srv/project \"a\"");
        let kept = attach(&state, &w).unwrap();
        assert!(kept.starts_with(&state[..state.len() - 1]), "the machine's bytes stay a prefix");
        assert_eq!(read(&kept).unwrap(), Some(w.clone()));
        assert_eq!(read(&state).unwrap(), None, "a state without one has none");
        let run = Run::restore(&kept).unwrap();
        assert_eq!(run.snapshot(), state, "restore ignores it; the snapshot is the machine's alone");
        // Attaching again replaces it, never duplicates it.
        let moved = attach(&kept, &Workdir::new("/elsewhere")).unwrap();
        assert_eq!(read(&moved).unwrap(), Some(Workdir::new("/elsewhere")));
        assert_eq!(moved.windows(MEMBER.len()).filter(|s| *s == MEMBER.as_bytes()).count(), 1);
        assert_eq!(strip(&moved).unwrap(), state, "stripped back to the machine's bytes");
        assert_eq!(strip(&state).unwrap(), state);
    }

    #[test]
    fn bad_input_is_a_typed_error() {
        assert!(matches!(read(b"nope"), Err(WorkdirError::NotAnObject(_))));
        assert!(matches!(read(br#"{"workdir": 3}"#), Err(WorkdirError::Malformed(_))));
        assert!(matches!(attach(b"nope", &Workdir::new("/x")), Err(WorkdirError::NotAnObject(_))));
        assert_eq!(attach(b"{}", &Workdir::new("/x")).unwrap(), br#"{"workdir":{"root":"/x"}}"#.to_vec());
    }

    proptest::proptest! {
        /// Any member appended to any object strips back to the object's
        /// exact bytes, and the other members stay readable.
        #[test]
        fn an_appended_member_strips_back_to_the_exact_bytes(
            keys in proptest::collection::btree_set("[a-z\\\\\"é]{1,6}", 0..4),
            name in "[a-z\"\\\\ ]{1,8}",
            text in "\\PC{0,24}",
            spaced in proptest::bool::ANY,
        ) {
            let mut object = serde_json::Map::new();
            for (i, k) in keys.iter().enumerate() {
                object.insert(k.clone(), serde_json::json!([i, k]));
            }
            object.remove(&name);
            let mut state = serde_json::to_vec(&object).unwrap();
            if spaced {
                state.extend_from_slice(b" \n");
            }
            let value = serde_json::json!({"text": text, "n": 1});
            let kept = append_member(&state, &name, &value).unwrap();
            let back: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&kept).unwrap();
            proptest::prop_assert_eq!(back.get(&name), Some(&value));
            proptest::prop_assert_eq!(back.len(), object.len() + 1);
            proptest::prop_assert_eq!(strip_member(&kept, &name).unwrap(), state.clone());
            proptest::prop_assert_eq!(strip_member(&state, &name).unwrap(), state);
        }
    }
}
