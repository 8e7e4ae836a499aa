//! The HTTP side of the Anthropic Messages and Gemini surfaces: routes,
//! client keys, the upstream exchange, and the answer in the surface's own
//! shapes. The translation itself is [`nexus_proto::translate`]'s.
//!
//! * `POST /v1/messages` (`?beta=true` accepted) and
//!   `POST /v1/messages/count_tokens`;
//! * `POST /v1beta/models/{model}:generateContent` and
//!   `:streamGenerateContent?alt=sse`;
//! * `GET /v1/models` asked by an Anthropic client (it sends
//!   `anthropic-version`) and `GET /v1beta/models`: the model list in that
//!   client's shape.
//!
//! When client and upstream speak the same family the body passes through
//! unchanged both ways (signatures, cache hints and betas included). What a
//! translation left out is named in the `x-nexus-dropped` response header.

use std::io::Read;
use std::net::TcpStream;
use std::sync::atomic::Ordering;

use nexus_proto::translate::{
    anthropic_request_to, error_to_openai, gemini_request_to, response_to_anthropic, response_to_gemini,
    AnthropicStream, CompletionMeta, GeminiStream, Surface, SurfaceRequest, TranslateError,
};
use nexus_proto::{SseDecoder, SseEvent, Style};
use serde_json::{json, Value};

use super::handler::{
    now_secs, read_capped, retry_after, send, send_upstream, server_error, upstream_models, Answered, MAX_ERROR_BODY,
};
use super::http::{Chunked, Request};
use super::State;

/// The header naming what a translation left out.
pub(super) const DROPPED_HEADER: &str = "x-nexus-dropped";

/// Answers the request when it belongs to one of these surfaces.
pub(super) fn route(req: &Request, out: &mut TcpStream, state: &State, close: bool) -> Option<Answered> {
    let path = req.path().trim_end_matches('/');
    let surface = if path == "/v1/messages" || path == "/v1/messages/count_tokens" {
        Surface::Anthropic
    } else if path.starts_with("/v1beta/") {
        Surface::Gemini
    } else if path == "/v1/models" && req.header("anthropic-version").is_some() {
        Surface::Anthropic
    } else {
        return None;
    };
    let cx = Cx { req, state, surface, close };
    if let Err(e) = cx.check_client_key() {
        return Some(cx.error(out, &e, &[]));
    }
    Some(match (surface, path) {
        (Surface::Anthropic, "/v1/models") => cx.models(out),
        (Surface::Gemini, "/v1beta/models") if req.method == "GET" => cx.models(out),
        (_, _) if req.method != "POST" => {
            let e = TranslateError {
                status: 405,
                message: format!("{} is not allowed on {}; use POST", req.method, req.path()),
                kind: "invalid_request_error".into(),
                param: None,
                code: Some("method_not_allowed".into()),
            };
            cx.error(out, &e, &[("allow", "POST".to_string())])
        }
        (Surface::Anthropic, "/v1/messages") => cx.messages(out),
        (Surface::Anthropic, _) => cx.count_tokens(out),
        _ => cx.gemini(out, path),
    })
}

/// One request on one surface.
struct Cx<'a> {
    req: &'a Request,
    state: &'a State,
    surface: Surface,
    close: bool,
}

impl Cx<'_> {
    fn upstream_style(&self) -> Style {
        self.state.config.upstream_style
    }

    /// With a client token configured, the client must present it the way
    /// its SDK sends keys: bearer, `x-api-key`, `x-goog-api-key` or `?key=`.
    fn check_client_key(&self) -> Result<(), TranslateError> {
        let Some(token) = &self.state.config.client_token else {
            return Ok(());
        };
        if self.client_key().as_deref() == Some(token.as_str()) {
            return Ok(());
        }
        Err(TranslateError {
            status: 401,
            message: "invalid x-api-key".into(),
            kind: "authentication_error".into(),
            param: None,
            code: Some("invalid_api_key".into()),
        })
    }

    fn client_key(&self) -> Option<String> {
        let bearer = self.req.header("authorization").and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_string())
        });
        bearer
            .or_else(|| self.req.header("x-api-key").map(|k| k.trim().to_string()))
            .or_else(|| self.req.header("x-goog-api-key").map(|k| k.trim().to_string()))
            .or_else(|| query_param(&self.req.target, "key"))
            .filter(|k| !k.is_empty())
    }

    /// The key sent upstream: the configured one, or the client's own when so configured.
    fn upstream_key(&self) -> Option<String> {
        if self.state.config.forward_client_key {
            if let Some(key) = self.client_key() {
                return Some(key);
            }
        }
        self.state.config.api_key.clone()
    }

    fn error(&self, out: &mut TcpStream, e: &TranslateError, extra: &[(&str, String)]) -> Answered {
        send(out, e.status, self.surface.error_json(e).to_string().as_bytes(), extra, self.close)
    }

    fn next_id(&self, prefix: &str) -> String {
        let n = self.state.counter.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}{:016x}{n:x}", self.state.epoch)
    }

    // ------------------------------------------------------------ Anthropic

    fn beta_headers(&self) -> Vec<&str> {
        self.req
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("anthropic-beta"))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn messages(&self, out: &mut TcpStream) -> Answered {
        let style = self.upstream_style();
        match anthropic_request_to(style, &self.req.body, &self.beta_headers()) {
            Ok(sr) => self.relay(out, sr),
            Err(e) => self.error(out, &e, &[]),
        }
    }

    /// Headers for an Anthropic upstream when the client speaks Anthropic too:
    /// its API version and betas go along.
    fn anthropic_headers(&self, t: &nexus_proto::translate::TranslatedRequest) -> Vec<(String, String)> {
        let mut headers = t.headers(self.upstream_key().as_deref());
        if let Some(version) = self.req.header("anthropic-version") {
            headers.retain(|(k, _)| k != "anthropic-version");
            headers.push(("anthropic-version".into(), version.to_string()));
        }
        for beta in self.beta_headers() {
            headers.push(("anthropic-beta".into(), beta.to_string()));
        }
        headers
    }

    /// `POST /v1/messages/count_tokens`: the upstream's own counter where it
    /// has one (Anthropic, Gemini `countTokens`); Chat Completions has none,
    /// so the count is estimated from the translated request (system and
    /// tools included) and the `x-nexus-token-count: estimate` header says so.
    fn count_tokens(&self, out: &mut TcpStream) -> Answered {
        let style = self.upstream_style();
        // count_tokens bodies carry no max_tokens; the translators want none either.
        let sr = match anthropic_request_to(style, &self.req.body, &self.beta_headers()) {
            Ok(sr) => sr,
            Err(e) => return self.error(out, &e, &[]),
        };
        let dropped = dropped_header(&sr.dropped);
        let t = &sr.upstream;
        let base = self.state.base_url.trim_end_matches('/');
        let (url, body, headers) = match style {
            Style::Anthropic => {
                let root = base.strip_suffix("/v1").unwrap_or(base);
                (format!("{root}/v1/messages/count_tokens"), t.body.clone(), self.anthropic_headers(t))
            }
            Style::Gemini => {
                let mut inner: Value = serde_json::from_slice(&t.body).unwrap_or(Value::Null);
                if let Value::Object(o) = &mut inner {
                    o.insert("model".into(), json!(format!("models/{}", t.model)));
                    // The counter refuses generation settings it does not count.
                    o.remove("generationConfig");
                }
                let body = json!({ "generateContentRequest": inner }).to_string().into_bytes();
                (format!("{base}/models/{}:countTokens", t.model), body, t.headers(self.upstream_key().as_deref()))
            }
            _ => {
                // Roughly four bytes of JSON per token: an estimate, and said to be one.
                let estimate = t.body.len().div_ceil(4);
                let mut extra = dropped;
                extra.push(("x-nexus-token-count", "estimate".to_string()));
                let body = json!({ "input_tokens": estimate }).to_string();
                return send(out, 200, body.as_bytes(), &extra, self.close);
            }
        };
        let response = match send_upstream(self.state, "POST", &url, &headers, &body) {
            Ok(r) => r,
            Err(e) => return self.error(out, &e, &dropped),
        };
        let status = response.status().as_u16();
        let mut reader = response.into_body().into_reader();
        let bytes = read_capped(&mut reader, MAX_ERROR_BODY).unwrap_or_else(|(partial, _)| partial);
        if style == Style::Anthropic {
            return send(out, status, &bytes, &dropped, self.close);
        }
        if !(200..300).contains(&status) {
            return self.error(out, &error_to_openai(style, status, &bytes), &dropped);
        }
        let total = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| v.get("totalTokens")?.as_u64());
        match total {
            Some(n) => send(out, 200, json!({ "input_tokens": n }).to_string().as_bytes(), &dropped, self.close),
            None => {
                let e = server_error(502, "the upstream token count has no totalTokens", "upstream_decode_error");
                self.error(out, &e, &dropped)
            }
        }
    }

    // ------------------------------------------------------------ Gemini

    fn gemini(&self, out: &mut TcpStream, path: &str) -> Answered {
        let not_found = |what: &str| TranslateError {
            status: 404,
            message: format!("{what} is not found"),
            kind: "invalid_request_error".into(),
            param: None,
            code: Some("not_found".into()),
        };
        let Some((model, method)) = path.strip_prefix("/v1beta/models/").and_then(|rest| rest.rsplit_once(':')) else {
            return self.error(out, &not_found(path), &[]);
        };
        let stream = match method {
            "generateContent" => false,
            "streamGenerateContent" => {
                if query_param(&self.req.target, "alt").as_deref() != Some("sse") {
                    let e = TranslateError::invalid(
                        "alt",
                        "streamGenerateContent is served as server-sent events only; add ?alt=sse",
                    );
                    return self.error(out, &e, &[]);
                }
                true
            }
            _ => return self.error(out, &not_found(&format!("Method {method}")), &[]),
        };
        match gemini_request_to(self.upstream_style(), model, stream, &self.req.body) {
            Ok(sr) => self.relay(out, sr),
            Err(e) => self.error(out, &e, &[]),
        }
    }

    // ------------------------------------------------------------ both

    /// One upstream call and its answer in this surface's shapes.
    fn relay(&self, out: &mut TcpStream, sr: SurfaceRequest) -> Answered {
        let t = &sr.upstream;
        let native = t.style == self.surface.native_style();
        let dropped = dropped_header(&sr.dropped);
        let mut url = t.url(&self.state.base_url);
        let headers = if t.style == Style::Anthropic && self.surface == Surface::Anthropic {
            if query_param(&self.req.target, "beta").as_deref() == Some("true") {
                url.push_str("?beta=true");
            }
            self.anthropic_headers(t)
        } else {
            t.headers(self.upstream_key().as_deref())
        };
        let response = match send_upstream(self.state, "POST", &url, &headers, &t.body) {
            Ok(r) => r,
            Err(e) => return self.error(out, &e, &dropped),
        };
        let status = response.status().as_u16();
        let mut extra = retry_after(&response);
        extra.extend(dropped);
        let mut body = response.into_body().into_reader();
        if !(200..300).contains(&status) {
            let bytes = read_capped(&mut body, MAX_ERROR_BODY).unwrap_or_else(|(partial, _)| partial);
            if native {
                // Same family: the upstream's own error, as sent (clients match on its wording).
                return send(out, status, &bytes, &extra, self.close);
            }
            return self.error(out, &error_to_openai(t.style, status, &bytes), &extra);
        }
        let prefix = if self.surface == Surface::Anthropic { "msg_" } else { "resp_" };
        let meta = CompletionMeta { id: self.next_id(prefix), model: t.model.clone(), created: now_secs() };
        if t.stream {
            return self.stream(out, body, t.style, meta, &extra);
        }
        let bytes = match read_capped(&mut body, self.state.config.max_upstream_body_bytes) {
            Ok(bytes) => bytes,
            Err((_, why)) => return self.error(out, &server_error(502, &why, "upstream_body"), &extra),
        };
        if native {
            return send(out, status, &bytes, &extra, self.close);
        }
        let answer = match self.surface {
            Surface::Anthropic => response_to_anthropic(t.style, &bytes, &meta),
            _ => response_to_gemini(t.style, &bytes, &meta),
        };
        match answer {
            Ok(v) => send(out, 200, v.to_string().as_bytes(), &extra, self.close),
            Err(e) => self.error(out, &e, &extra),
        }
    }

    /// Pipes the upstream's event stream to the client, each event written
    /// and flushed as soon as it is translated.
    fn stream(
        &self,
        out: &mut TcpStream,
        mut body: ureq::BodyReader<'static>,
        style: Style,
        meta: CompletionMeta,
        extra: &[(&str, String)],
    ) -> Answered {
        let Ok(mut client) = Chunked::start_with(out, self.close, extra) else {
            return Answered { status: 200, close: true };
        };
        let mut translator: Option<Box<dyn Translate>> = match (self.surface, style) {
            (Surface::Anthropic, Style::Anthropic) | (Surface::Gemini, Style::Gemini) => None,
            (Surface::Anthropic, _) => Some(Box::new(AnthropicStream::new(style, meta))),
            _ => Some(Box::new(GeminiStream::new(style, meta))),
        };
        let mut buf = vec![0u8; 16 * 1024];
        let mut decoder = SseDecoder::new();
        let mut events = Vec::new();
        let ended_cleanly = loop {
            let read = body.read(&mut buf);
            let Some(t) = translator.as_mut() else {
                // Same family both sides: the bytes go through as they come.
                match read {
                    Ok(0) => break true,
                    Ok(n) => {
                        if client.send(buf.get(..n).unwrap_or_default()).is_err() {
                            return Answered { status: 200, close: true };
                        }
                        continue;
                    }
                    Err(e) => {
                        let e = server_error(502, &format!("the upstream stream failed: {e}"), "upstream_stream");
                        let data = self.surface.error_json(&e);
                        let text = match self.surface {
                            Surface::Anthropic => format!("\n\nevent: error\ndata: {data}\n\n"),
                            _ => format!("\n\ndata: {data}\n\n"),
                        };
                        let _ = client.send(text.as_bytes());
                        break false;
                    }
                }
            };
            let mut lines = Vec::new();
            let done = match read {
                Ok(0) => {
                    decoder.finish(&mut events);
                    lines.extend(events.drain(..).flat_map(|ev| t.push(&ev)));
                    lines.extend(t.finish());
                    true
                }
                Ok(n) => {
                    decoder.feed(buf.get(..n).unwrap_or_default(), &mut events);
                    lines.extend(events.drain(..).flat_map(|ev| t.push(&ev)));
                    t.failed()
                }
                Err(e) => {
                    let e = server_error(502, &format!("the upstream stream failed: {e}"), "upstream_stream");
                    lines.extend(t.abort(e));
                    true
                }
            };
            if client.send(lines.concat().as_bytes()).is_err() {
                return Answered { status: 200, close: true };
            }
            if done {
                break !t.failed();
            }
        };
        if client.end().is_err() {
            return Answered { status: 200, close: true };
        }
        Answered { status: 200, close: self.close || !ended_cleanly }
    }

    // ------------------------------------------------------------ models

    /// The model list in the asking client's shape.
    fn models(&self, out: &mut TcpStream) -> Answered {
        let names = if self.state.config.models.is_empty() {
            match upstream_models(self.req, self.state) {
                Ok(names) => names,
                Err(e) => return self.error(out, &e, &[]),
            }
        } else {
            self.state.config.models.clone()
        };
        let body = match self.surface {
            Surface::Anthropic => {
                let data: Vec<Value> = names
                    .iter()
                    .map(|n| json!({ "type": "model", "id": n, "display_name": n, "created_at": "1970-01-01T00:00:00Z" }))
                    .collect();
                json!({ "data": data, "has_more": false, "first_id": names.first(), "last_id": names.last() })
            }
            _ => {
                let models: Vec<Value> = names
                    .iter()
                    .map(|n| {
                        json!({
                            "name": format!("models/{n}"),
                            "displayName": n,
                            "supportedGenerationMethods": ["generateContent", "streamGenerateContent"],
                        })
                    })
                    .collect();
                json!({ "models": models })
            }
        };
        send(out, 200, body.to_string().as_bytes(), &[], self.close)
    }
}

/// The stream translators, as the pipe drives them.
trait Translate {
    fn push(&mut self, event: &SseEvent) -> Vec<String>;
    fn finish(&mut self) -> Vec<String>;
    fn abort(&mut self, error: TranslateError) -> Vec<String>;
    fn failed(&self) -> bool;
}

impl<E: nexus_proto::translate::Emitter> Translate for nexus_proto::translate::SurfaceStream<E> {
    fn push(&mut self, event: &SseEvent) -> Vec<String> {
        nexus_proto::translate::SurfaceStream::push(self, event)
    }
    fn finish(&mut self) -> Vec<String> {
        nexus_proto::translate::SurfaceStream::finish(self)
    }
    fn abort(&mut self, error: TranslateError) -> Vec<String> {
        nexus_proto::translate::SurfaceStream::abort(self, error)
    }
    fn failed(&self) -> bool {
        self.error().is_some()
    }
}

/// The `x-nexus-dropped` header, when anything was dropped. Names come from
/// the client's own keys, so anything but visible ASCII is replaced: a key
/// must not be able to start a header of its own.
pub(super) fn dropped_header(dropped: &[String]) -> Vec<(&'static str, String)> {
    if dropped.is_empty() {
        return Vec::new();
    }
    let mut value: String =
        dropped.join(", ").chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    if value.len() > 2048 {
        value.truncate(2045);
        value.push_str("...");
    }
    vec![(DROPPED_HEADER, value)]
}

/// A query parameter's raw value.
fn query_param(target: &str, key: &str) -> Option<String> {
    let (_, query) = target.split_once('?')?;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| v.to_string())
    })
}
