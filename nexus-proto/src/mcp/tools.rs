//! A server's tool declarations: parsing, the names the model sees, the
//! digest that detects drift on resume, and the `x-mcp-header` parameters.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use thiserror::Error;

use crate::tool::ToolDecl;

/// The longest tool name every provider accepts.
pub const MAX_TOOL_NAME: usize = 64;

/// One tool as the server declared it. The schemas are kept raw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpTool {
    /// The server's name for it (unique per server only).
    pub name: String,
    /// A display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of its arguments, exactly as declared.
    pub input_schema: Value,
    /// JSON Schema of its `structuredContent`, when declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Hints (`readOnlyHint`, `destructiveHint`, …): untrusted unless the server is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

impl McpTool {
    /// From one element of a `tools/list` result's `tools`.
    pub fn from_json(v: &Value) -> Result<McpTool, String> {
        let name = v.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).ok_or("a tool without a name")?;
        let input_schema = match v.get("inputSchema") {
            Some(s @ Value::Object(_)) => s.clone(),
            _ => return Err(format!("tool {name:?}: inputSchema is not an object")),
        };
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Ok(McpTool {
            name: name.to_string(),
            title: s("title"),
            description: s("description"),
            input_schema,
            output_schema: v.get("outputSchema").filter(|s| s.is_object()).cloned(),
            annotations: v.get("annotations").filter(|s| s.is_object()).cloned(),
        })
    }

    /// The declaration the model sees under `exposed` (see [`expose`]); the
    /// input schema goes unchanged (providers lower it when they need to).
    pub fn to_decl(&self, exposed: &str) -> ToolDecl {
        let description = match (&self.title, &self.description) {
            (_, Some(d)) => d.clone(),
            (Some(t), None) => t.clone(),
            (None, None) => String::new(),
        };
        ToolDecl::new(exposed, description, self.input_schema.clone())
    }

    /// See [`digest`].
    pub fn digest(&self) -> String {
        digest(self)
    }
}

/// A digest of what a tool means: SHA-256 over the canonical JSON (keys
/// sorted) of its name, title, description, input and output schemas, as
/// `sha256:<hex>`. Store it with a run; on resume, a tool whose digest
/// changed (or that vanished) is not the tool the model chose.
pub fn digest(tool: &McpTool) -> String {
    let mut o = Map::new();
    o.insert("name".into(), Value::from(tool.name.as_str()));
    o.insert("title".into(), tool.title.clone().map(Value::from).unwrap_or(Value::Null));
    o.insert("description".into(), tool.description.clone().map(Value::from).unwrap_or(Value::Null));
    o.insert("inputSchema".into(), tool.input_schema.clone());
    o.insert("outputSchema".into(), tool.output_schema.clone().unwrap_or(Value::Null));
    let mut text = String::new();
    canonical(&Value::Object(o), &mut text);
    sha256_label(text.as_bytes())
}

/// `sha256:<hex>` of `data`.
pub(crate) fn sha256_label(data: &[u8]) -> String {
    let hash = sha256(data);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in hash {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// `v` as JSON with every object's keys sorted: one text per value.
pub(crate) fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, &Value> = m.iter().collect();
            out.push('{');
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::from(k.as_str()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// Two tools that would be exposed under one name.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("MCP tools {first} and {second} would both be exposed as {name:?}; rename a server or deny one of the tools")]
pub struct NameCollision {
    /// The exposed name.
    pub name: String,
    /// `server/tool` of the first.
    pub first: String,
    /// `server/tool` of the second.
    pub second: String,
}

/// The name the model sees for `tool` of `server` (its config key):
/// `{server}__{tool}`, every character outside `[A-Za-z0-9_-]` replaced by
/// `_`. A name over [`MAX_TOOL_NAME`] characters is cut and ends in `_` and
/// eight hex digits of its digest, so two long names stay apart.
pub fn exposed_name(server: &str, tool: &str) -> String {
    let full = format!("{server}__{tool}");
    let clean = crate::tool::sanitize_name(&full);
    if clean.chars().count() <= MAX_TOOL_NAME {
        return clean;
    }
    let hash = sha256(full.as_bytes());
    let tail = format!("_{:02x}{:02x}{:02x}{:02x}", hash[0], hash[1], hash[2], hash[3]);
    let keep: String = clean.chars().take(MAX_TOOL_NAME - tail.len()).collect();
    keep + &tail
}

/// Exposed names for `(server, tool)` pairs, in order, refusing any two
/// that end up the same after sanitizing.
pub fn expose<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Vec<String>, NameCollision> {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Vec::new();
    for (server, tool) in pairs {
        let name = exposed_name(server, tool);
        let origin = format!("{server}/{tool}");
        if let Some(first) = seen.insert(name.clone(), origin.clone()) {
            return Err(NameCollision { name, first, second: origin });
        }
        out.push(name);
    }
    Ok(out)
}

/// The `x-mcp-header` parameters of an input schema: (property path, header
/// name suffix). `Err` says why the annotation makes the tool invalid (the
/// HTTP transport must then leave the tool out).
pub fn header_params(schema: &Value) -> Result<Vec<(Vec<String>, String)>, String> {
    let mut out = Vec::new();
    walk_headers(schema, &mut Vec::new(), true, &mut out)?;
    let mut names: Vec<String> = out.iter().map(|(_, n)| n.to_ascii_lowercase()).collect();
    names.sort();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err("two x-mcp-header values differ only in case".into());
    }
    Ok(out)
}

fn walk_headers(
    schema: &Value,
    path: &mut Vec<String>,
    reachable: bool,
    out: &mut Vec<(Vec<String>, String)>,
) -> Result<(), String> {
    let Value::Object(s) = schema else { return Ok(()) };
    if path.len() > 32 {
        return Ok(());
    }
    if let Some(h) = s.get("x-mcp-header") {
        let name = h.as_str().ok_or("x-mcp-header is not a string")?;
        if !reachable || path.is_empty() {
            return Err(format!("x-mcp-header {name:?} is not on a property reachable through `properties` only"));
        }
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(format!("x-mcp-header {name:?} is not an HTTP token"));
        }
        match s.get("type").and_then(Value::as_str) {
            Some("string" | "integer" | "boolean") => {}
            _ => {
                return Err(format!("x-mcp-header {name:?} is on a property that is not a string, integer or boolean"))
            }
        }
        out.push((path.clone(), name.to_string()));
    }
    for (k, v) in s {
        match (k.as_str(), v) {
            ("properties", Value::Object(props)) => {
                for (name, sub) in props {
                    path.push(name.clone());
                    let r = walk_headers(sub, path, reachable, out);
                    path.pop();
                    r?;
                }
            }
            ("x-mcp-header" | "default" | "const" | "enum" | "examples", _) => {}
            (_, Value::Object(_)) => walk_headers(v, &mut Vec::new(), false, out)?,
            (_, Value::Array(items)) => {
                for item in items {
                    walk_headers(item, &mut Vec::new(), false, out)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A header value as the 2026 HTTP transport wants it: plain when it is
/// visible ASCII without surrounding spaces, else `=?base64?…?=`.
pub fn header_value(raw: &str) -> String {
    let sentinel = raw.starts_with("=?base64?") && raw.ends_with("?=");
    let padded = raw.starts_with(' ') || raw.ends_with(' ');
    let visible = raw.bytes().all(|b| (0x20..=0x7e).contains(&b));
    if visible && !padded && !sentinel {
        raw.to_string()
    } else {
        format!("=?base64?{}?=", base64(raw.as_bytes()))
    }
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        out.push(A[(n >> 18) as usize & 63] as char);
        out.push(A[(n >> 12) as usize & 63] as char);
        out.push(if c.len() > 1 { A[(n >> 6) as usize & 63] as char } else { '=' });
        out.push(if c.len() > 2 { A[n as usize & 63] as char } else { '=' });
    }
    out
}

/// SHA-256 (FIPS 180-4). Written out because the core takes no hashing
/// dependency; the digests only need to be stable and collision-resistant.
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
        0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
        0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
        0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
        0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
        0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
        0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];
    let mut h: [u32; 8] =
        [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64).wrapping_mul(8)).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh.wrapping_add(s1).wrapping_add(ch).wrapping_add(K[i]).wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sha256_known_answers() {
        let hex = |d: [u8; 32]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(hex(sha256(b"")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(hex(sha256(b"abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let long = vec![b'a'; 1000];
        assert_eq!(hex(sha256(&long)), "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
    }

    #[test]
    fn base64_and_header_values() {
        assert_eq!(header_value("us-west1"), "us-west1");
        assert_eq!(header_value("Hello, 世界"), "=?base64?SGVsbG8sIOS4lueVjA==?=");
        assert_eq!(header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
        assert_eq!(header_value("line1\nline2"), "=?base64?bGluZTEKbGluZTI=?=");
        assert_eq!(header_value("=?base64?literal?="), "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=");
    }

    #[test]
    fn header_params_follow_the_rules() {
        let ok = json!({"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},
            "o":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}}}});
        assert_eq!(
            header_params(&ok).unwrap(),
            vec![(vec!["o".to_string(), "n".to_string()], "N".to_string()), (vec!["region".into()], "Region".into())]
        );
        let in_items =
            json!({"type":"object","properties":{"a":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}});
        assert!(header_params(&in_items).is_err());
        let number = json!({"type":"object","properties":{"a":{"type":"number","x-mcp-header":"A"}}});
        assert!(header_params(&number).is_err());
        let dup = json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}});
        assert!(header_params(&dup).is_err());
    }
}
