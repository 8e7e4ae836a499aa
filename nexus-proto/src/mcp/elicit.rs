//! User input as suspension: MCP's ways of asking the user something, each
//! turned into nexus's one [`Request`], and the host's [`Answer`] turned
//! back into what the server expects.
//!
//! | MCP | `Request` | answer → wire |
//! |---|---|---|
//! | 2026 `input_required` (form inputs) | `kind: "input"`, `data: {server, tool, inputs, requestState, round}` | retry with a new id, `inputResponses`, the exact `requestState` |
//! | 2026 `input_required` (only URL inputs) | `kind: "authorization"`, `url` | the same retry, `{action: "accept"}` |
//! | legacy `elicitation/create`, form | `kind: "input"` (live: answered through the session) | the response `{action, content}` |
//! | legacy `elicitation/create`, URL | `kind: "authorization"`, `url` | the response `{action}` |
//! | legacy `-32042` | `kind: "authorization"`, `url`, `data.retry: true` | the call again, new id |
//!
//! Answers: `ok: true` accepts; its `data` is the form content of a single
//! input, or `data.responses: {key: content}` for several (a value that is
//! itself `{action, content?}` is sent as is). `ok: false` declines, or
//! cancels when `reason` is `cancelled`. Defaults in a requested schema
//! fill the fields an accepting answer leaves out.

use serde_json::{json, Map, Value};

use crate::suspend::{Answer, Request};

/// `kind` of a request for user input (a form).
pub const KIND_INPUT: &str = "input";
/// `kind` of a request that sends the user to a URL.
pub const KIND_AUTHORIZATION: &str = "authorization";

/// One input a server asked for, as it appears in `data.inputs`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct InputAsk {
    pub key: String,
    pub mode: String,
    pub message: String,
    pub schema: Option<Value>,
    pub url: Option<String>,
}

impl InputAsk {
    /// From an `elicitation/create` params object (`mode` absent = form).
    pub(crate) fn from_params(key: String, params: &Value) -> InputAsk {
        let s = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_string);
        InputAsk {
            key,
            mode: s("mode").unwrap_or_else(|| "form".into()),
            message: s("message").unwrap_or_default(),
            schema: params.get("requestedSchema").cloned(),
            url: s("url"),
        }
    }

    fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("key".into(), Value::from(self.key.as_str()));
        o.insert("mode".into(), Value::from(self.mode.as_str()));
        o.insert("message".into(), Value::from(self.message.as_str()));
        if let Some(s) = &self.schema {
            o.insert("requestedSchema".into(), s.clone());
        }
        if let Some(u) = &self.url {
            o.insert("url".into(), Value::from(u.as_str()));
        }
        Value::Object(o)
    }

    pub(crate) fn from_json(v: &Value) -> Option<InputAsk> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(InputAsk {
            key: s("key")?,
            mode: s("mode").unwrap_or_else(|| "form".into()),
            message: s("message").unwrap_or_default(),
            schema: v.get("requestedSchema").cloned(),
            url: s("url"),
        })
    }
}

/// The request for a set of inputs. `extra` goes into `data` after the inputs.
pub(crate) fn request_for(server: &str, tool: &str, asks: &[InputAsk], extra: Map<String, Value>) -> Request {
    let all_url = !asks.is_empty() && asks.iter().all(|a| a.mode == "url");
    let prompt = asks.iter().map(|a| a.message.as_str()).filter(|m| !m.is_empty()).collect::<Vec<_>>().join("\n");
    let prompt = if prompt.is_empty() { format!("MCP server {server} needs input for {tool}") } else { prompt };
    let mut data = Map::new();
    data.insert("server".into(), Value::from(server));
    data.insert("tool".into(), Value::from(tool));
    data.insert("inputs".into(), Value::Array(asks.iter().map(InputAsk::to_json).collect()));
    data.extend(extra);
    Request {
        id: String::new(),
        kind: if all_url { KIND_AUTHORIZATION } else { KIND_INPUT }.into(),
        prompt,
        url: if all_url { asks[0].url.clone() } else { None },
        data: Some(data),
        expires_at: None,
    }
}

/// The elicitation result (`{action, content?}`) for one input, or `None`
/// when an accepting answer for several inputs left this one out (the
/// server re-asks what it still needs).
pub(crate) fn response_for(ask: &InputAsk, answer: &Answer, single: bool) -> Option<Value> {
    if !answer.ok {
        let action = if answer.reason.as_deref() == Some("cancelled") { "cancel" } else { "decline" };
        return Some(json!({ "action": action }));
    }
    let data = answer.data.clone().unwrap_or_default();
    let given = match data.get("responses").and_then(Value::as_object) {
        Some(responses) => responses.get(&ask.key).cloned()?,
        None if single => Value::Object(data),
        None => return None,
    };
    if let Some(action) = given.get("action").and_then(Value::as_str) {
        if matches!(action, "accept" | "decline" | "cancel") {
            let mut out = given.clone();
            if action == "accept" && ask.mode != "url" {
                let content = given.get("content").cloned().unwrap_or_else(|| json!({}));
                out["content"] = with_defaults(content, ask.schema.as_ref());
            }
            return Some(out);
        }
    }
    if ask.mode == "url" {
        return Some(json!({ "action": "accept" }));
    }
    Some(json!({ "action": "accept", "content": with_defaults(given, ask.schema.as_ref()) }))
}

/// Fills the properties a form answer left out with the requested schema's
/// `default`s (SEP-1034). Content that is not an object is left as is.
pub fn with_defaults(content: Value, schema: Option<&Value>) -> Value {
    let Value::Object(mut obj) = content else { return content };
    if let Some(props) = schema.and_then(|s| s.get("properties")).and_then(Value::as_object) {
        for (name, prop) in props {
            if let Some(d) = prop.get("default") {
                obj.entry(name.clone()).or_insert_with(|| d.clone());
            }
        }
    }
    Value::Object(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(key: &str) -> InputAsk {
        InputAsk::from_params(
            key.into(),
            &json!({"message":"Name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"integer","default":3}}}}),
        )
    }

    #[test]
    fn single_input_shorthand_gets_defaults() {
        let mut data = Map::new();
        data.insert("name".into(), json!("octocat"));
        let r = response_for(&ask("a"), &Answer::ok("x", Some(data)), true).unwrap();
        assert_eq!(r, json!({"action":"accept","content":{"name":"octocat","n":3}}));
    }

    #[test]
    fn responses_by_key_and_declines() {
        let data: Map<String, Value> =
            serde_json::from_value(json!({"responses":{"a":{"name":"x"},"b":{"action":"decline"}}})).unwrap();
        let answer = Answer::ok("x", Some(data));
        assert_eq!(response_for(&ask("a"), &answer, false).unwrap()["content"]["name"], "x");
        assert_eq!(response_for(&ask("b"), &answer, false).unwrap(), json!({"action":"decline"}));
        assert_eq!(response_for(&ask("c"), &answer, false), None);
        assert_eq!(
            response_for(&ask("a"), &Answer::declined("x", "cancelled"), true).unwrap(),
            json!({"action":"cancel"})
        );
        assert_eq!(
            response_for(&ask("a"), &Answer::declined("x", "declined"), true).unwrap(),
            json!({"action":"decline"})
        );
    }
}
