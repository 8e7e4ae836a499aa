//! Server configuration: the common `{"mcpServers": {NAME: …}}` file format,
//! with `${VAR}` expansion in headers and environment values.
//!
//! Expanded values are secrets as far as nexus is concerned: they live only
//! in the [`ServerConfig`] of this process, `Debug` prints them redacted, and
//! nothing writes them into a state, a cassette or a log.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde_json::Value;

use super::McpError;

/// How to reach one server.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Transport {
    /// A child process speaking newline-delimited JSON-RPC on stdin/stdout.
    Stdio {
        /// The program.
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables (expanded). The child gets these on
        /// top of a small safe base (see [`SAFE_ENV`]), not the host's whole
        /// environment: an MCP server does not get the host's API keys
        /// unless the configuration hands them over.
        env: BTreeMap<String, String>,
        /// The working directory (the host's when `None`).
        cwd: Option<PathBuf>,
    },
    /// A Streamable HTTP endpoint (with the 2024-11-05 HTTP+SSE transport as
    /// the fallback the spec describes).
    Http {
        /// The endpoint URL.
        url: String,
        /// Static headers sent on every request (values expanded).
        headers: Vec<(String, String)>,
    },
}

/// Host variables a stdio server inherits (everything else must be named in
/// its `env`).
pub const SAFE_ENV: &[&str] =
    &["HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ"];

impl fmt::Debug for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transport::Stdio { command, args, env, cwd } => f
                .debug_struct("Stdio")
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>())
                .field("cwd", cwd)
                .finish(),
            Transport::Http { url, headers } => f
                .debug_struct("Http")
                .field("url", url)
                .field("headers", &headers.iter().map(|(k, _)| k).collect::<Vec<_>>())
                .finish(),
        }
    }
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// The config key: the prefix of its tools' names (`{name}__{tool}`).
    pub name: String,
    /// How to reach it.
    pub transport: Transport,
    /// Only these tools (original names), when given.
    pub allow: Option<Vec<String>>,
    /// Never these tools (original names).
    pub deny: Vec<String>,
    /// Per-call timeout in milliseconds (the default is 60 s).
    pub timeout_ms: Option<u64>,
    /// The wire era to speak (`"protocol": "legacy"` or `"modern"`); `None`
    /// probes modern first and falls back to legacy, as the spec says.
    pub era: Option<nexus_proto::mcp::Era>,
}

impl ServerConfig {
    /// A stdio server.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>, args: &[&str]) -> ServerConfig {
        ServerConfig {
            name: name.into(),
            transport: Transport::Stdio {
                command: command.into(),
                args: args.iter().map(|s| s.to_string()).collect(),
                env: BTreeMap::new(),
                cwd: None,
            },
            allow: None,
            deny: Vec::new(),
            timeout_ms: None,
            era: None,
        }
    }

    /// A Streamable HTTP server.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> ServerConfig {
        ServerConfig {
            name: name.into(),
            transport: Transport::Http { url: url.into(), headers: Vec::new() },
            allow: None,
            deny: Vec::new(),
            timeout_ms: None,
            era: None,
        }
    }

    /// Whether the tool `name` (its original name) passes the allow/deny lists.
    pub fn permits(&self, tool: &str) -> bool {
        self.allow.as_ref().is_none_or(|a| a.iter().any(|t| t == tool)) && !self.deny.iter().any(|t| t == tool)
    }
}

/// Parses a configuration file's text (`{"mcpServers": {NAME: {...}}}`),
/// expanding `${VAR}` in header values, `env` values, `args` and `url` with
/// `lookup`. Server order is the file's key order, sorted (deterministic).
pub fn parse_servers(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Vec<ServerConfig>, McpError> {
    let bad = |m: String| McpError::Config(m);
    let root: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let servers =
        root.get("mcpServers").and_then(Value::as_object).ok_or_else(|| bad("no \"mcpServers\" object".into()))?;
    let mut out = Vec::new();
    for (name, spec) in servers {
        out.push(parse_one(name, spec, lookup).map_err(|m| bad(format!("server {name:?}: {m}")))?);
    }
    Ok(out)
}

fn parse_one(name: &str, spec: &Value, lookup: &dyn Fn(&str) -> Option<String>) -> Result<ServerConfig, String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err("a server name may hold only ASCII letters, digits, '_' and '-'".into());
    }
    if name.contains("__") {
        return Err("a server name may not contain \"__\" (it separates server and tool)".into());
    }
    let obj = spec.as_object().ok_or("not an object")?;
    let string = |key: &str| -> Result<Option<String>, String> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => expand(s, lookup).map(Some),
            Some(_) => Err(format!("{key:?} must be a string")),
        }
    };
    let strings = |key: &str| -> Result<Option<Vec<String>>, String> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().ok_or(format!("{key:?} must hold strings")).and_then(|s| expand(s, lookup)))
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(format!("{key:?} must be an array of strings")),
        }
    };
    let map = |key: &str| -> Result<Vec<(String, String)>, String> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Object(m)) => m
                .iter()
                .map(|(k, v)| {
                    let v = v.as_str().ok_or(format!("{key:?}.{k} must be a string"))?;
                    Ok((k.clone(), expand(v, lookup)?))
                })
                .collect(),
            Some(_) => Err(format!("{key:?} must be an object of strings")),
        }
    };
    let kind = string("type")?;
    let url = string("url")?;
    let transport = match (kind.as_deref(), url) {
        (Some("http") | Some("streamable-http") | Some("streamableHttp") | Some("sse"), Some(url))
        | (None, Some(url)) => {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("url {url:?} is not http(s)"));
            }
            Transport::Http { url, headers: map("headers")? }
        }
        (Some("http") | Some("streamable-http") | Some("streamableHttp") | Some("sse"), None) => {
            return Err("an http server needs a \"url\"".into())
        }
        (None | Some("stdio"), None) => {
            let command = string("command")?.ok_or("needs a \"command\" (stdio) or a \"url\" (http)")?;
            Transport::Stdio {
                command,
                args: strings("args")?.unwrap_or_default(),
                env: map("env")?.into_iter().collect(),
                cwd: string("cwd")?.map(PathBuf::from),
            }
        }
        (Some(other), _) => return Err(format!("unknown type {other:?} (stdio or http)")),
    };
    let timeout_ms = match obj.get("timeout") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_u64().ok_or("\"timeout\" must be milliseconds (a whole number)")?),
    };
    let era = match string("protocol")?.as_deref() {
        None | Some("auto") => None,
        Some("legacy") => Some(nexus_proto::mcp::Era::Legacy),
        Some("modern") => Some(nexus_proto::mcp::Era::Modern),
        Some(other) => return Err(format!("unknown protocol {other:?} (auto, legacy or modern)")),
    };
    Ok(ServerConfig {
        name: name.to_string(),
        transport,
        allow: strings("allow")?,
        deny: strings("deny")?.unwrap_or_default(),
        timeout_ms,
        era,
    })
}

/// Expands `${VAR}` (and `${VAR:-default}`); `$$` is a literal `$`. An unset
/// variable without a default is an error naming it (never its value).
pub fn expand(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('{') {
            let end = body.find('}').ok_or_else(|| format!("unclosed \"${{\" in {s:?}"))?;
            let inner = &body[..end];
            let (var, default) = match inner.split_once(":-") {
                Some((v, d)) => (v, Some(d)),
                None => (inner, None),
            };
            match (lookup(var), default) {
                (Some(v), _) => out.push_str(&v),
                (None, Some(d)) => out.push_str(d),
                (None, None) => return Err(format!("environment variable {var} is not set")),
            }
            rest = &body[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        match k {
            "TOKEN" => Some("s3cret".into()),
            "HOME" => Some("/home/x".into()),
            _ => None,
        }
    }

    #[test]
    fn both_transports_parse_with_expansion() {
        let text = r#"{"mcpServers": {
            "files": {"command": "npx", "args": ["-y", "srv", "${HOME}/data"], "env": {"K": "${TOKEN}"}, "cwd": "/tmp"},
            "remote": {"type": "http", "url": "https://x.test/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"},
                       "allow": ["a"], "deny": ["b"], "timeout": 5000}
        }}"#;
        let servers = parse_servers(text, &env).unwrap();
        assert_eq!(servers.len(), 2);
        let Transport::Stdio { command, args, env: e, cwd } = &servers[0].transport else { panic!() };
        assert_eq!((command.as_str(), args[2].as_str()), ("npx", "/home/x/data"));
        assert_eq!(e["K"], "s3cret");
        assert_eq!(cwd.as_deref(), Some(std::path::Path::new("/tmp")));
        let Transport::Http { url, headers } = &servers[1].transport else { panic!() };
        assert_eq!(url, "https://x.test/mcp");
        assert_eq!(headers[0], ("Authorization".to_string(), "Bearer s3cret".to_string()));
        assert!(servers[1].permits("a") && !servers[1].permits("b") && !servers[1].permits("c"));
        assert_eq!(servers[1].timeout_ms, Some(5000));
        // Debug output never shows an expanded value.
        let dbg = format!("{servers:?}");
        assert!(!dbg.contains("s3cret"), "{dbg}");
    }

    #[test]
    fn bad_configs_say_what_is_wrong() {
        let err = |t: &str| parse_servers(t, &env).unwrap_err().to_string();
        assert!(err("{}").contains("mcpServers"));
        assert!(err(r#"{"mcpServers": {"a__b": {"command": "x"}}}"#).contains("__"));
        assert!(err(r#"{"mcpServers": {"a": {}}}"#).contains("command"));
        assert!(err(r#"{"mcpServers": {"a": {"type": "ws", "url": "ws://x"}}}"#).contains("unknown type"));
        let unset = err(r#"{"mcpServers": {"a": {"url": "http://x", "headers": {"A": "${NOPE}"}}}}"#);
        assert!(unset.contains("NOPE is not set"), "{unset}");
    }

    #[test]
    fn expansion_rules() {
        assert_eq!(expand("a$${TOKEN}", &env).unwrap(), "a${TOKEN}");
        assert_eq!(expand("${NOPE:-dflt}/${TOKEN}", &env).unwrap(), "dflt/s3cret");
        assert_eq!(expand("cost $5", &env).unwrap(), "cost $5");
        assert!(expand("${TOKEN", &env).is_err());
    }
}
