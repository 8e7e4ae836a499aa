//! `WWW-Authenticate` parsing (RFC 9110 §11.6.1 challenges, RFC 6750 §3
//! Bearer parameters, RFC 9728 §5.1 `resource_metadata`).
//!
//! A header that does not follow the grammar is an error, not a guess: a
//! client that half-reads a challenge may send its person to the wrong place.

use super::AuthError;

/// What a `Bearer` challenge said.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BearerChallenge {
    /// RFC 9728: where the protected-resource metadata is.
    pub resource_metadata: Option<String>,
    /// The scopes the request needs (space separated).
    pub scope: Option<String>,
    /// `invalid_token`, `insufficient_scope`, …
    pub error: Option<String>,
    /// The server's explanation.
    pub error_description: Option<String>,
}

/// One challenge: its scheme and its parameters (names lowercased).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// The auth scheme as sent.
    pub scheme: String,
    /// `name=value` parameters, names lowercased, values unquoted.
    pub params: Vec<(String, String)>,
}

/// Parses every challenge of a `WWW-Authenticate` value.
pub fn parse_challenges(header: &str) -> Result<Vec<Challenge>, AuthError> {
    let mut p = Parser { s: header.as_bytes(), i: 0 };
    let mut out: Vec<Challenge> = Vec::new();
    loop {
        p.skip_list_separators();
        if p.done() {
            break;
        }
        let scheme = p.token();
        if scheme.is_empty() {
            return Err(p.error("an auth scheme was expected"));
        }
        let mut params = Vec::new();
        loop {
            p.skip_ws();
            let mark = p.i;
            let name = p.token();
            if name.is_empty() {
                if p.done() || p.peek() == Some(b',') {
                    break;
                }
                return Err(p.error("a parameter name was expected"));
            }
            p.skip_ws();
            if p.peek() != Some(b'=') {
                // A token without `=` starts the next challenge.
                p.i = mark;
                break;
            }
            p.i += 1;
            p.skip_ws();
            let value = if p.peek() == Some(b'"') { p.quoted()? } else { p.token() };
            if value.is_empty() {
                return Err(p.error(&format!("the parameter {name:?} has no value")));
            }
            let name = name.to_ascii_lowercase();
            if params.iter().any(|(n, _)| *n == name) {
                return Err(p.error(&format!("the parameter {name:?} appears twice")));
            }
            params.push((name, value));
            p.skip_ws();
            match p.peek() {
                None => break,
                Some(b',') => {
                    p.i += 1;
                }
                Some(_) => return Err(p.error("a comma was expected between parameters")),
            }
        }
        out.push(Challenge { scheme, params });
    }
    if out.is_empty() {
        return Err(AuthError::Challenge("the WWW-Authenticate header is empty".into()));
    }
    Ok(out)
}

/// The `Bearer` challenge of a `WWW-Authenticate` value (`Ok(None)` when it
/// names only other schemes).
pub fn parse_bearer(header: &str) -> Result<Option<BearerChallenge>, AuthError> {
    let challenges = parse_challenges(header)?;
    let Some(c) = challenges.into_iter().find(|c| c.scheme.eq_ignore_ascii_case("bearer")) else {
        return Ok(None);
    };
    let get = |n: &str| c.params.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    Ok(Some(BearerChallenge {
        resource_metadata: get("resource_metadata"),
        scope: get("scope"),
        error: get("error"),
        error_description: get("error_description"),
    }))
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn done(&self) -> bool {
        self.i >= self.s.len()
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    fn skip_list_separators(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b',')) {
            self.i += 1;
        }
    }

    fn token(&mut self) -> String {
        let start = self.i;
        // RFC 9110 tchar, plus the token68 characters `/` (which tokens lack).
        while let Some(c) = self.peek() {
            if c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~/:".contains(&c) {
                self.i += 1;
            } else {
                break;
            }
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    fn quoted(&mut self) -> Result<String, AuthError> {
        self.i += 1; // the opening quote
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.error("a quoted string is not terminated")),
                Some(b'"') => {
                    self.i += 1;
                    return Ok(String::from_utf8_lossy(&out).into_owned());
                }
                Some(b'\\') => {
                    self.i += 1;
                    let Some(c) = self.peek() else {
                        return Err(self.error("a quoted string ends in a backslash"));
                    };
                    out.push(c);
                    self.i += 1;
                }
                Some(c) if c < 0x20 && c != b'\t' => return Err(self.error("a control character in a quoted string")),
                Some(c) => {
                    out.push(c);
                    self.i += 1;
                }
            }
        }
    }

    fn error(&self, what: &str) -> AuthError {
        AuthError::Challenge(format!("malformed WWW-Authenticate header at byte {}: {what}", self.i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parameters_are_read() {
        let c = parse_bearer(
            r#"Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp", scope="files:read files:write""#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(c.scope.as_deref(), Some("files:read files:write"));
        let c = parse_bearer(r#"Basic realm="x", Bearer error="insufficient_scope", scope=admin"#).unwrap().unwrap();
        assert_eq!(c.error.as_deref(), Some("insufficient_scope"));
        assert_eq!(c.scope.as_deref(), Some("admin"));
        assert_eq!(parse_bearer(r#"Basic realm="x""#).unwrap(), None);
        assert_eq!(parse_bearer("Bearer").unwrap(), Some(BearerChallenge::default()));
        let c = parse_bearer(r#"bearer error_description="say \"hi\"""#).unwrap().unwrap();
        assert_eq!(c.error_description.as_deref(), Some("say \"hi\""));
    }

    #[test]
    fn malformed_headers_are_refused() {
        for bad in [
            r#"Bearer resource_metadata="https://x"#,
            r#"Bearer scope="#,
            r#"Bearer scope="a" "b""#,
            r#"Bearer scope="a", scope="b""#,
            "",
            "=x",
            "Bearer ;",
        ] {
            let err = parse_bearer(bad).unwrap_err();
            assert!(matches!(err, AuthError::Challenge(_)), "{bad:?}: {err}");
        }
    }
}
