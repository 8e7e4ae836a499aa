//! The Anthropic Messages and Gemini surfaces: their routes, the upstream
//! exchange, and the answer in each dialect's own shapes. The translation
//! itself is [`nexus_proto::translate`]'s (one decoder and one encoder per
//! dialect, through the neutral request and turn).
//!
//! * `POST /v1/messages` (`?beta=true` accepted) and
//!   `POST /v1/messages/count_tokens`;
//! * `POST /v1beta/models/{model}:generateContent`,
//!   `:streamGenerateContent?alt=sse` and `:countTokens`; `GET /v1beta/models`;
//! * `POST /v1/responses` and `/v1/responses/input_tokens`;
//! * `GET /v1/models` asked by an Anthropic client (it sends
//!   `anthropic-version`): the list in Anthropic's shape ([`anthropic_models`]).
//!
//! When client and upstream speak the same family the body passes through
//! unchanged both ways (signatures, cache hints and betas included). What a
//! translation left out is named in the `x-nexus-dropped` response header.

use bytes::Bytes;
use nexus_proto::translate::{
    anthropic_request_to, error_to_openai, gemini_request_to, response_echo, response_to_anthropic, response_to_gemini,
    response_to_responses, responses_request_to, AnthropicStream, CompletionMeta, Emitter, GeminiStream, ResponseMeta,
    ResponsesStream, Surface as Dialect, SurfaceRequest as Translated, SurfaceStream, TranslateError,
    TranslatedRequest,
};
use nexus_proto::{SseDecoder, SseEvent, Style};
use serde_json::{json, Value};

mod count;

use super::failover::Forwarded;
use super::gateway::{Ctx, Route, Target, UpstreamBody, UpstreamRequest};
use super::handler::{note_usage, openai_error, retry_after_header, Usage};
use super::surface::{BoxFuture, ErrorKind, GatewayError, Reply, Surface, SurfaceRequest};

/// The header naming what a translation left out.
pub(crate) const DROPPED_HEADER: &str = "x-nexus-dropped";

/// `POST /v1/messages` and `/v1/messages/count_tokens` in Anthropic shapes.
pub(crate) struct AnthropicMessages;

/// `/v1beta/models/{model}:generateContent` and friends in Gemini shapes.
pub(crate) struct GeminiGenerate;

impl Surface for AnthropicMessages {
    fn name(&self) -> &'static str {
        "anthropic.messages"
    }

    fn claims(&self, path: &str) -> bool {
        matches!(path.trim_end_matches('/'), "/v1/messages" | "/v1/messages/count_tokens")
    }

    fn error(&self, e: &GatewayError) -> Reply {
        let mut te = gateway_error(e);
        if e.kind == ErrorKind::BudgetExceeded {
            // Anthropic's own answer for spending that is not allowed: 402 billing_error.
            te.status = 402;
        }
        error_reply(Dialect::Anthropic, &te, &e.headers)
    }

    fn handle<'a>(&'a self, req: SurfaceRequest, ctx: Ctx) -> BoxFuture<'a, Reply> {
        Box::pin(async move {
            let cx = Cx { req: &req, ctx: &ctx, dialect: Dialect::Anthropic };
            if req.method != "POST" {
                return cx.not_allowed();
            }
            if req.path.trim_end_matches('/') == "/v1/messages" {
                cx.messages().await
            } else {
                cx.count_tokens().await
            }
        })
    }
}

impl Surface for GeminiGenerate {
    fn name(&self) -> &'static str {
        "gemini.generate"
    }

    fn claims(&self, path: &str) -> bool {
        path.starts_with("/v1beta/")
    }

    fn error(&self, e: &GatewayError) -> Reply {
        let wait = e.headers.iter().find(|(k, _)| k == "retry-after").map(|(_, v)| v.as_str());
        match (e.status, wait) {
            // Google's APIs say when to retry in the body: a google.rpc.RetryInfo detail.
            (429, Some(seconds)) => {
                let mut body = Dialect::Gemini.error_json(&gateway_error(e));
                body["error"]["details"] = json!([{
                    "@type": "type.googleapis.com/google.rpc.RetryInfo",
                    "retryDelay": format!("{seconds}s"),
                }]);
                with_headers(Reply::json(429, body.to_string()), &e.headers)
            }
            _ => error_reply(Dialect::Gemini, &gateway_error(e), &e.headers),
        }
    }

    fn handle<'a>(&'a self, req: SurfaceRequest, ctx: Ctx) -> BoxFuture<'a, Reply> {
        Box::pin(async move {
            let cx = Cx { req: &req, ctx: &ctx, dialect: Dialect::Gemini };
            let path = req.path.trim_end_matches('/');
            if path == "/v1beta/models" && req.method == "GET" {
                return models(&ctx, Dialect::Gemini).await;
            }
            if req.method != "POST" {
                return cx.not_allowed();
            }
            cx.gemini(path).await
        })
    }
}

/// `POST /v1/responses` (stateless) and `/v1/responses/input_tokens` in
/// OpenAI Responses shapes.
pub(crate) struct OpenAiResponses;

impl Surface for OpenAiResponses {
    fn name(&self) -> &'static str {
        "openai.responses"
    }

    fn claims(&self, path: &str) -> bool {
        matches!(path.trim_end_matches('/'), "/v1/responses" | "/v1/responses/input_tokens")
    }

    fn error(&self, e: &GatewayError) -> Reply {
        // The Responses API's errors are OpenAI error objects, with OpenAI's types and codes.
        error_reply(Dialect::Responses, &openai_error(e), &e.headers)
    }

    fn handle<'a>(&'a self, req: SurfaceRequest, ctx: Ctx) -> BoxFuture<'a, Reply> {
        Box::pin(async move {
            let cx = Cx { req: &req, ctx: &ctx, dialect: Dialect::Responses };
            if req.method != "POST" {
                return cx.not_allowed();
            }
            let (route, body, model) = match cx.body_routed() {
                Ok(x) => x,
                Err(e) => return cx.error(&e, &[]),
            };
            if req.path.trim_end_matches('/') != "/v1/responses" {
                // `/v1/responses/input_tokens`, asked of the route's first upstream (see [`count`]).
                ctx.note_model(&model);
                let target = route.primary;
                return match responses_request_to(target.style(), &body) {
                    Ok(sr) => cx.count(&target, sr).await,
                    Err(e) => cx.error(&e, &[]),
                };
            }
            let first = route.primary().model().to_string();
            cx.relay(&route, model, |target| responses_request_to(target.style(), &retarget(&body, &first, target)))
                .await
        })
    }
}

/// `GET /v1/models` for an Anthropic client (the Chat Completions surface
/// owns the path and hands such requests here).
pub(crate) async fn anthropic_models(ctx: &Ctx) -> Reply {
    models(ctx, Dialect::Anthropic).await
}

/// A gateway error as a [`TranslateError`] (the surfaces' error renderers take that).
fn gateway_error(e: &GatewayError) -> TranslateError {
    TranslateError {
        status: e.status,
        message: e.message.clone(),
        kind: "gateway".into(),
        param: e.param.clone(),
        code: Some(format!("{:?}", e.kind)),
    }
}

fn error_reply(dialect: Dialect, e: &TranslateError, extra: &[(String, String)]) -> Reply {
    with_headers(Reply::json(e.status, dialect.error_json(e).to_string()), extra)
}

fn with_headers(mut reply: Reply, extra: &[(String, String)]) -> Reply {
    for (k, v) in extra {
        reply = reply.with_header(k.clone(), v.clone());
    }
    reply
}

/// One request on one surface.
struct Cx<'a> {
    req: &'a SurfaceRequest,
    ctx: &'a Ctx,
    dialect: Dialect,
}

impl Cx<'_> {
    fn error(&self, e: &TranslateError, extra: &[(String, String)]) -> Reply {
        error_reply(self.dialect, e, extra)
    }

    fn not_allowed(&self) -> Reply {
        let e = TranslateError {
            status: 405,
            message: format!("{} is not allowed on {}; use POST", self.req.method, self.req.path),
            kind: "invalid_request_error".into(),
            param: None,
            code: Some("method_not_allowed".into()),
        };
        self.error(&e, &[("allow".into(), "POST".into())])
    }

    /// The route for the client's `model`, and the model name to send
    /// upstream when the route renames it (every target is sent the same).
    fn route(&self, model: &str) -> Result<(Route, Option<String>), TranslateError> {
        if !self.ctx.routes_by_model() {
            let route = self
                .ctx
                .default_route()
                .ok_or_else(|| gateway_error(&GatewayError::new(ErrorKind::ModelNotFound, "no route is configured")))?;
            return Ok((route, None));
        }
        let route = self.ctx.route(model).map_err(|e| gateway_error(&e))?;
        let upstream_model = route.primary().model();
        let renamed = (upstream_model != model).then(|| upstream_model.to_string());
        Ok((route, renamed))
    }

    // ------------------------------------------------------------ Anthropic

    fn beta_headers(&self) -> Vec<&str> {
        self.req.headers.get_all("anthropic-beta").iter().filter_map(|v| v.to_str().ok()).collect()
    }

    /// The body's model (routing needs it before translating), the route,
    /// and the body to translate (model renamed as the route says).
    fn body_routed(&self) -> Result<(Route, Bytes, String), TranslateError> {
        let parsed: Option<Value> = serde_json::from_slice(&self.req.body).ok();
        let model = parsed.as_ref().and_then(|v| v.get("model")).and_then(Value::as_str).unwrap_or_default();
        let model = model.to_string();
        if model.is_empty() && self.ctx.routes_by_model() {
            // The translator words a missing model or a body that is not JSON.
            let worded = match self.dialect {
                Dialect::Responses => responses_request_to(Style::OpenAi, &self.req.body).err(),
                _ => anthropic_request_to(Style::OpenAi, &self.req.body, &[]).err(),
            };
            return Err(worded.unwrap_or_else(|| TranslateError::invalid("model", "model: Field required")));
        }
        let (route, renamed) = self.route(&model)?;
        let body = match (renamed, parsed) {
            (Some(name), Some(mut v)) => {
                v["model"] = Value::String(name);
                Bytes::from(v.to_string())
            }
            _ => self.req.body.clone(),
        };
        Ok((route, body, model))
    }

    async fn messages(&self) -> Reply {
        let (route, body, model) = match self.body_routed() {
            Ok(x) => x,
            Err(e) => return self.error(&e, &[]),
        };
        let betas = self.beta_headers();
        let first = route.primary().model().to_string();
        self.relay(&route, model, |target| {
            anthropic_request_to(target.style(), &retarget(&body, &first, target), &betas)
        })
        .await
    }

    /// Headers for an Anthropic upstream when the client speaks Anthropic
    /// too: its API version and betas go along.
    fn anthropic_headers(&self, t: &TranslatedRequest) -> Vec<(String, String)> {
        let mut headers = t.headers(None);
        if let Some(version) = self.req.header("anthropic-version") {
            headers.retain(|(k, _)| k != "anthropic-version");
            headers.push(("anthropic-version".into(), version.to_string()));
        }
        for beta in self.beta_headers() {
            headers.push(("anthropic-beta".into(), beta.to_string()));
        }
        headers
    }

    /// `POST /v1/messages/count_tokens` (see [`count`]).
    async fn count_tokens(&self) -> Reply {
        let (route, body, model) = match self.body_routed() {
            Ok(x) => x,
            Err(e) => return self.error(&e, &[]),
        };
        self.ctx.note_model(&model);
        // A count is not worth a failover: the route's first upstream answers it.
        let target = route.primary;
        match anthropic_request_to(target.style(), &body, &self.beta_headers()) {
            Ok(sr) => self.count(&target, sr).await,
            Err(e) => self.error(&e, &[]),
        }
    }

    // ------------------------------------------------------------ Gemini

    async fn gemini(&self, path: &str) -> Reply {
        let not_found = |what: &str| TranslateError {
            status: 404,
            message: format!("{what} is not found"),
            kind: "invalid_request_error".into(),
            param: None,
            code: Some("not_found".into()),
        };
        let Some((model, method)) = path.strip_prefix("/v1beta/models/").and_then(|rest| rest.rsplit_once(':')) else {
            return self.error(&not_found(path), &[]);
        };
        let stream = match method {
            "generateContent" => false,
            "streamGenerateContent" => {
                if self.req.query_param("alt") != Some("sse") {
                    let e = TranslateError::invalid(
                        "alt",
                        "streamGenerateContent is served as server-sent events only; add ?alt=sse",
                    );
                    return self.error(&e, &[]);
                }
                true
            }
            "countTokens" => return self.gemini_count(model).await,
            _ => return self.error(&not_found(&format!("Method {method}")), &[]),
        };
        let route = match self.route(model) {
            Ok((route, _)) => route,
            Err(e) => return self.error(&e, &[]),
        };
        let body = &self.req.body;
        self.relay(&route, model.to_string(), |target| {
            // A catch-all route's targets name no model: the client's is sent.
            let upstream_model = if target.model().is_empty() { model } else { target.model() };
            gemini_request_to(target.style(), upstream_model, stream, body)
        })
        .await
    }

    // ------------------------------------------------------------ both

    /// The request forwarded through `route`'s upstreams (`translate`
    /// writes it for each one's wire format; the route's policy says when to
    /// move on) and the answer in this surface's shapes.
    async fn relay(
        &self,
        route: &Route,
        client_model: String,
        translate: impl Fn(&Target) -> Result<Translated, TranslateError>,
    ) -> Reply {
        self.ctx.note_model(&client_model);
        let forwarded = self
            .ctx
            .forward(route, |target| {
                let sr = translate(target)?;
                let t = &sr.upstream;
                let mut url = t.url(target.base_url());
                let headers = if t.style == Style::Anthropic && self.dialect == Dialect::Anthropic {
                    if self.req.query_param("beta") == Some("true") {
                        url.push_str("?beta=true");
                    }
                    self.anthropic_headers(t)
                } else {
                    t.headers(None)
                };
                let up = UpstreamRequest { method: "POST", url, headers, body: t.body.clone(), stream: t.stream };
                Ok((sr, up))
            })
            .await;
        let (sr, response) = match forwarded {
            Forwarded::Served { with, response } => (with, response),
            Forwarded::Refused { with: sr, status, retry_after, body } => {
                let mut extra = retry_after_header(retry_after.as_deref());
                extra.extend(dropped_header(&sr.dropped));
                if sr.upstream.style == self.dialect.native_style() {
                    // Same family: the upstream's own error, as sent (clients match on its wording).
                    return with_headers(Reply::json(status, body), &extra);
                }
                return self.error(&error_to_openai(sr.upstream.style, status, &body), &extra);
            }
            Forwarded::Failed(e) => return self.error(&gateway_error(&e), &e.headers),
            Forwarded::Invalid(e) => return self.error(&e, &[]),
        };
        let t = &sr.upstream;
        let native = t.style == self.dialect.native_style();
        let extra = dropped_header(&sr.dropped);
        let status = response.status;
        let mut body = response.body;
        let prefix = if self.dialect == Dialect::Anthropic { "msg_" } else { "resp_" };
        let meta =
            CompletionMeta { id: self.ctx.response_id(prefix), model: client_model, created: self.ctx.now_secs() };
        let echo = if self.dialect == Dialect::Responses { response_echo(&self.req.body) } else { Default::default() };
        let rmeta = ResponseMeta { id: meta.id.clone(), model: meta.model.clone(), created_at: meta.created, echo };
        if t.stream {
            let translator: Option<Box<dyn Translate>> = match (self.dialect, t.style) {
                _ if native => None,
                (Dialect::Anthropic, style) => Some(Box::new(AnthropicStream::new(style, meta))),
                (Dialect::Responses, style) => Some(Box::new(ResponsesStream::new(style, rmeta))),
                (_, style) => Some(Box::new(GeminiStream::new(style, meta))),
            };
            let pump = Pump {
                body,
                translator,
                decoder: SseDecoder::new(),
                events: Vec::new(),
                done: false,
                dialect: self.dialect,
                scanned: Usage::default(),
                counted: false,
                ctx: self.ctx.clone(),
            };
            let chunks = futures_lite::stream::unfold(pump, |mut p| async move {
                let out = p.next().await?;
                Some((out, p))
            });
            return with_headers(Reply::event_stream(Box::pin(chunks)), &extra);
        }
        let bytes = match body.read_to_end(self.ctx.max_upstream_body_bytes()).await {
            Ok(bytes) => bytes,
            Err(e) => return self.error(&gateway_error(&e), &extra),
        };
        if native {
            if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                note_usage(self.ctx, &v);
            }
            return with_headers(Reply::json(status, bytes), &extra);
        }
        let answer = match self.dialect {
            Dialect::Anthropic => response_to_anthropic(t.style, &bytes, &meta),
            Dialect::Responses => response_to_responses(t.style, &bytes, &rmeta),
            _ => response_to_gemini(t.style, &bytes, &meta),
        };
        match answer {
            Ok(v) => {
                note_usage(self.ctx, &v);
                with_headers(Reply::json(200, serde_json::to_vec(&v).unwrap_or_default()), &extra)
            }
            Err(e) => self.error(&e, &extra),
        }
    }
}

/// The stream translators, as the pump drives them.
trait Translate: Send {
    fn push(&mut self, event: &SseEvent) -> Vec<String>;
    fn finish(&mut self) -> Vec<String>;
    fn abort(&mut self, error: TranslateError) -> Vec<String>;
    fn failed(&self) -> bool;
    /// Input and output tokens of the finished turn.
    fn usage(&self) -> Option<(u64, u64)>;
}

impl<E: Emitter + Send> Translate for SurfaceStream<E> {
    fn push(&mut self, event: &SseEvent) -> Vec<String> {
        SurfaceStream::push(self, event)
    }
    fn finish(&mut self) -> Vec<String> {
        SurfaceStream::finish(self)
    }
    fn abort(&mut self, error: TranslateError) -> Vec<String> {
        SurfaceStream::abort(self, error)
    }
    fn failed(&self) -> bool {
        self.error().is_some()
    }
    fn usage(&self) -> Option<(u64, u64)> {
        SurfaceStream::usage(self).map(|u| (u.prompt_tokens, u.completion_tokens))
    }
}

/// An upstream event stream re-emitted event by event, pulled by the
/// client's connection (a slow client slows the upstream read; one that
/// leaves drops the upstream body).
struct Pump {
    body: UpstreamBody,
    /// `None`: same family both sides, the bytes go through as they come.
    translator: Option<Box<dyn Translate>>,
    decoder: SseDecoder,
    events: Vec<SseEvent>,
    done: bool,
    dialect: Dialect,
    /// Token counts read from a stream that passes through untranslated.
    scanned: Usage,
    counted: bool,
    ctx: Ctx,
}

impl Pump {
    async fn next(&mut self) -> Option<Bytes> {
        let out = self.step().await;
        if self.done {
            // Counted once, before the last piece leaves, as for a whole answer.
            let mut usage = self.scanned.tokens();
            if let Some((input, output)) = self.translator.as_ref().and_then(|tr| tr.usage()) {
                (usage.input, usage.output) = (input, output);
            }
            if !std::mem::replace(&mut self.counted, true) && usage.total() > 0 {
                self.ctx.note_token_usage(usage);
            }
        }
        out
    }

    async fn step(&mut self) -> Option<Bytes> {
        let Pump { body, translator, decoder, events, done, dialect, scanned, .. } = self;
        loop {
            if *done {
                return None;
            }
            let mut lines = Vec::new();
            match body.chunk().await {
                Ok(Some(piece)) => {
                    decoder.feed(piece, events);
                    let Some(tr) = translator.as_mut() else {
                        // Same family: the bytes go on as they came; only usage is read.
                        events.drain(..).for_each(|ev| scanned.scan(ev.data.as_bytes()));
                        return Some(Bytes::copy_from_slice(piece));
                    };
                    lines.extend(events.drain(..).flat_map(|ev| {
                        // Cached and reasoning tokens are read from the upstream's own events.
                        scanned.scan(ev.data.as_bytes());
                        tr.push(&ev)
                    }));
                    // After an error event nothing more is read: the upstream is done for.
                    *done = tr.failed();
                }
                Ok(None) => {
                    *done = true;
                    decoder.finish(events);
                    let Some(tr) = translator.as_mut() else {
                        events.drain(..).for_each(|ev| scanned.scan(ev.data.as_bytes()));
                        return None;
                    };
                    lines.extend(events.drain(..).flat_map(|ev| {
                        scanned.scan(ev.data.as_bytes());
                        tr.push(&ev)
                    }));
                    lines.extend(tr.finish());
                }
                Err(e) => {
                    *done = true;
                    let e = gateway_error(&e);
                    match translator.as_mut() {
                        Some(tr) => lines.extend(tr.abort(e)),
                        None => {
                            // The blank line ends whatever event the upstream left half-written.
                            let data = dialect.error_json(&e);
                            let text = match dialect {
                                Dialect::Anthropic | Dialect::Responses => {
                                    format!("\n\nevent: error\ndata: {data}\n\n")
                                }
                                _ => format!("\n\ndata: {data}\n\n"),
                            };
                            return Some(Bytes::from(text));
                        }
                    }
                }
            }
            if !lines.is_empty() {
                return Some(Bytes::from(lines.concat()));
            }
        }
    }
}

/// The model list in the asking client's shape.
async fn models(ctx: &Ctx, dialect: Dialect) -> Reply {
    let mut names = ctx.listed_models();
    if names.is_empty() {
        if let Some(r) = ctx.default_route() {
            names = match super::handler::upstream_models(ctx, r.primary()).await {
                Ok(names) => names,
                Err(e) => return error_reply(dialect, &e, &[]),
            };
        }
    }
    let body = match dialect {
        Dialect::Anthropic => {
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
    Reply::json(200, body.to_string())
}

/// The body for `target`: as it is when the target is sent the model the
/// body already names (`first`, the route's first target's), else a copy
/// naming the target's own model.
fn retarget(body: &Bytes, first: &str, target: &Target) -> Bytes {
    if target.model().is_empty() || target.model() == first {
        return body.clone();
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(mut v) if v.is_object() => {
            v["model"] = Value::String(target.model().to_string());
            Bytes::from(v.to_string())
        }
        _ => body.clone(),
    }
}

/// The `x-nexus-dropped` header, when anything was dropped. Names come from
/// the client's own keys, so anything but visible ASCII is replaced: a key
/// must not be able to start a header of its own.
fn dropped_header(dropped: &[String]) -> Vec<(String, String)> {
    if dropped.is_empty() {
        return Vec::new();
    }
    let mut value: String =
        dropped.join(", ").chars().map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' }).collect();
    if value.len() > 2048 {
        value.truncate(2045);
        value.push_str("...");
    }
    vec![(DROPPED_HEADER.to_string(), value)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_names_cannot_break_the_header() {
        let h = dropped_header(&["a\r\nx-evil: 1".into(), "é".into()]);
        assert_eq!(h, vec![(DROPPED_HEADER.to_string(), "a??x-evil: 1, ?".to_string())]);
        assert!(dropped_header(&[]).is_empty());
        let long = dropped_header(&["x".repeat(5000)]);
        assert_eq!(long[0].1.len(), 2048);
    }
}
