//! The token counters of the surfaces: Anthropic `POST
//! /v1/messages/count_tokens`, Gemini `POST
//! /v1beta/models/{model}:countTokens` and Responses `POST
//! /v1/responses/input_tokens`.
//!
//! A count goes to the route's first upstream, asked in its own dialect:
//! Anthropic `count_tokens`, Gemini `countTokens` (with a
//! `generateContentRequest`), Responses `input_tokens`. The request reaches
//! it through the same translation a model call takes, so what is counted
//! is what would be sent. Chat Completions has no counter: the count is
//! estimated from the translated request and the answer says so.

use nexus_proto::provider::count;
use nexus_proto::translate::{
    error_to_openai, gemini_request_to, Surface as Dialect, SurfaceRequest as Translated, TranslateError,
    TranslatedRequest,
};
use nexus_proto::Style;
use serde_json::{json, Map, Value};

use super::{dropped_header, gateway_error, with_headers, Cx};
use crate::serve::gateway::{Target, UpstreamRequest, MAX_ERROR_BODY};
use crate::serve::surface::{ErrorKind, GatewayError, Reply};

/// The header that marks a count as the gateway's own estimate.
pub(crate) const ESTIMATE_HEADER: &str = "x-nexus-token-count";

/// The Gemini surface's count request as the `generateContent` body the
/// translators read: `generateContentRequest` without its `model`, else
/// `{contents}` (Google's rule: the first wins when both are sent).
pub(super) fn gemini_count_body(body: &[u8]) -> Result<Vec<u8>, TranslateError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid_json(format!("Invalid JSON payload received. {e}")))?;
    let Value::Object(mut obj) = value else {
        return Err(TranslateError::not_an_object("Invalid JSON payload received. The body must be an object."));
    };
    let inner = match obj.remove("generateContentRequest") {
        Some(Value::Object(mut inner)) => {
            inner.remove("model");
            inner
        }
        Some(_) => {
            return Err(TranslateError::invalid("generateContentRequest", "generateContentRequest must be an object"))
        }
        None => match obj.remove("contents") {
            Some(contents) => Map::from_iter([("contents".to_string(), contents)]),
            None => return Err(TranslateError::invalid("contents", "contents is not specified")),
        },
    };
    Ok(Value::Object(inner).to_string().into_bytes())
}

impl Cx<'_> {
    /// The Gemini surface's `:countTokens` for the client's `model`.
    pub(super) async fn gemini_count(&self, model: &str) -> Reply {
        let route = match self.route(model) {
            Ok((route, _)) => route,
            Err(e) => return self.error(&e, &[]),
        };
        self.ctx.note_model(model);
        let target = route.primary;
        let upstream_model = if target.model().is_empty() { model } else { target.model() };
        let translated = gemini_count_body(&self.req.body)
            .and_then(|body| gemini_request_to(target.style(), upstream_model, false, &body));
        match translated {
            Ok(sr) => self.count(&target, sr).await,
            Err(e) => self.error(&e, &[]),
        }
    }

    /// Counts `sr` (the client's request translated for `target`) with the
    /// upstream's own counter and answers in this surface's shape. In the
    /// same family the client's body goes as it came and the upstream's
    /// answer comes back as sent.
    pub(super) async fn count(&self, target: &Target, sr: Translated) -> Reply {
        let dropped = dropped_header(&sr.dropped);
        let t = &sr.upstream;
        let native = t.style == self.dialect.native_style();
        let Some(up) = self.count_request(target, t, native) else {
            // Roughly four bytes of JSON per token: an estimate, and said to be one.
            let estimate = t.body.len().div_ceil(4) as u64;
            return with_headers(Reply::json(200, self.count_answer(estimate)), &dropped)
                .with_header(ESTIMATE_HEADER, "estimate");
        };
        let response = match self.ctx.send(target, up).await {
            Ok(r) => r,
            Err(e) => return self.error(&gateway_error(&e), &dropped),
        };
        let status = response.status;
        let mut body = response.body;
        let bytes = match body.read_to_end(MAX_ERROR_BODY).await {
            Ok(b) => b,
            Err(e) => return self.error(&gateway_error(&e), &dropped),
        };
        if native {
            return with_headers(Reply::json(status, bytes), &dropped);
        }
        if !(200..300).contains(&status) {
            return self.error(&error_to_openai(t.style, status, &bytes), &dropped);
        }
        match count::read(t.style, &bytes) {
            Some(n) => with_headers(Reply::json(200, self.count_answer(n)), &dropped),
            None => {
                let e = GatewayError::new(ErrorKind::Upstream, "the upstream's token count has no count");
                self.error(&gateway_error(&e), &dropped)
            }
        }
    }

    /// The count request in the upstream's dialect (`None`: it has no
    /// counter): the translated call reduced to what the counter takes
    /// ([`count::request_body`]), or in the same family the client's own.
    fn count_request(&self, target: &Target, t: &TranslatedRequest, native: bool) -> Option<UpstreamRequest> {
        let mut url = count::endpoint(t.style, target.base_url(), &t.model)?;
        if native && t.style == Style::Anthropic && self.req.query_param("beta") == Some("true") {
            // Anthropic's SDK marks beta calls so; the upstream is asked the same way.
            url.push_str("?beta=true");
        }
        let body = match t.style {
            Style::Gemini if native => gemini_native_count(&self.req.body, &t.model),
            _ if native => t.body.clone(),
            style => count::request_body(style, &t.body, &t.model)?,
        };
        let headers = if native && t.style == Style::Anthropic { self.anthropic_headers(t) } else { t.headers(None) };
        Some(UpstreamRequest { method: "POST", url, headers, body, stream: false })
    }

    /// `n` tokens in this surface's shape.
    fn count_answer(&self, n: u64) -> String {
        match self.dialect {
            Dialect::Responses => json!({ "object": "response.input_tokens", "input_tokens": n }),
            Dialect::Gemini => json!({ "totalTokens": n }),
            _ => json!({ "input_tokens": n }),
        }
        .to_string()
    }
}

/// A Gemini client's count body for a Gemini upstream: as sent, but for the
/// model a `generateContentRequest` names, which becomes the route's.
fn gemini_native_count(body: &[u8], model: &str) -> Vec<u8> {
    match serde_json::from_slice::<Value>(body) {
        Ok(mut v) if v["generateContentRequest"].get("model").is_some() => {
            let name = format!("models/{model}");
            if v["generateContentRequest"]["model"] == name.as_str() {
                return body.to_vec();
            }
            v["generateContentRequest"]["model"] = Value::String(name);
            v.to_string().into_bytes()
        }
        _ => body.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gemini_count_reads_either_form() {
        let contents = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        let body = gemini_count_body(contents.to_string().as_bytes()).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), contents);

        let wrapped = json!({"generateContentRequest": {"model": "models/m", "contents": [], "systemInstruction": {}}});
        let body = gemini_count_body(wrapped.to_string().as_bytes()).unwrap();
        assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), json!({"contents": [], "systemInstruction": {}}));

        assert_eq!(gemini_count_body(b"{}").unwrap_err().param.as_deref(), Some("contents"));
        assert_eq!(gemini_count_body(b"[1]").unwrap_err().status, 400);
        assert_eq!(gemini_count_body(br#"{"generateContentRequest": 1}"#).unwrap_err().status, 400);
    }

    #[test]
    fn a_gemini_passthrough_names_the_routed_model() {
        let plain = br#"{"contents":[]}"#;
        assert_eq!(gemini_native_count(plain, "x"), plain.to_vec());
        let same = br#"{"generateContentRequest":{"model":"models/x","contents":[]}}"#;
        assert_eq!(gemini_native_count(same, "x"), same.to_vec());
        let renamed: Value = serde_json::from_slice(&gemini_native_count(
            br#"{"generateContentRequest":{"model":"models/a","contents":[]}}"#,
            "b",
        ))
        .unwrap();
        assert_eq!(renamed["generateContentRequest"]["model"], "models/b");
    }
}
