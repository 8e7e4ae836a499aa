//! The OpenAI Chat Completions surface: `POST /v1/chat/completions`
//! translated to the routed upstream's wire and back, and `GET /v1/models`.

use bytes::Bytes;
use nexus_proto::translate::{
    error_to_openai, openai_request_bytes_to, openai_request_to, response_to_openai_bytes, CompletionBytes,
    CompletionMeta, StreamTranslator, TranslateError, TranslatedRequest,
};
use nexus_proto::{SseDecoder, SseEvent, Style};
use serde_json::{json, Value};

use super::failover::Forwarded;
use super::gateway::{Ctx, Route, Target, UpstreamBody, UpstreamRequest, MAX_ERROR_BODY};
use super::limits::TokenUsage;
use super::surface::{BoxFuture, ErrorKind, GatewayError, Reply, Surface, SurfaceRequest};

/// `POST /v1/chat/completions` and `GET /v1/models[/{id}]` in OpenAI shapes.
pub(crate) struct ChatCompletions;

/// The path without a trailing slash or the `/v1` prefix.
fn endpoint(path: &str) -> &str {
    let path = path.trim_end_matches('/');
    path.strip_prefix("/v1").unwrap_or(path)
}

impl Surface for ChatCompletions {
    fn name(&self) -> &'static str {
        "openai.chat"
    }

    fn claims(&self, path: &str) -> bool {
        let p = endpoint(path);
        p == "/chat/completions" || p == "/models" || p.starts_with("/models/")
    }

    fn error(&self, e: &GatewayError) -> Reply {
        let mut reply = send_error(&openai_error(e), &[]);
        for (k, v) in &e.headers {
            reply = reply.with_header(k.clone(), v.clone());
        }
        reply
    }

    fn handle<'a>(&'a self, req: SurfaceRequest, ctx: Ctx) -> BoxFuture<'a, Reply> {
        Box::pin(async move {
            let p = endpoint(&req.path);
            let allow = |method: &'static str| {
                let mut e = GatewayError::new(
                    ErrorKind::MethodNotAllowed,
                    format!("{} is not allowed on {}; use {method}", req.method, req.path),
                );
                e.headers.push(("allow".into(), method.into()));
                self.error(&e)
            };
            match p {
                "/chat/completions" if req.method == "POST" => chat_completion(&req, &ctx).await,
                "/chat/completions" => allow("POST"),
                // Anthropic clients ask the same path; they get their own shape.
                "/models" if req.method == "GET" && req.header("anthropic-version").is_some() => {
                    super::surfaces::anthropic_models(&ctx).await
                }
                "/models" if req.method == "GET" => models(&ctx, None).await,
                "/models" => allow("GET"),
                p if req.method == "GET" => models(&ctx, p.strip_prefix("/models/")).await,
                _ => allow("GET"),
            }
        })
    }
}

/// A gateway error as an OpenAI error object.
pub(super) fn openai_error(e: &GatewayError) -> TranslateError {
    let (kind, code) = match e.kind {
        ErrorKind::Unauthorized => ("authentication_error", "invalid_api_key"),
        ErrorKind::RateLimited => ("requests", "rate_limit_exceeded"),
        ErrorKind::BudgetExceeded => ("insufficient_quota", "insufficient_quota"),
        ErrorKind::TooLarge => ("invalid_request_error", "request_too_large"),
        ErrorKind::NotFound => ("invalid_request_error", "unknown_url"),
        ErrorKind::MethodNotAllowed => ("invalid_request_error", "method_not_allowed"),
        ErrorKind::ModelNotFound => ("invalid_request_error", "model_not_found"),
        ErrorKind::InvalidRequest => ("invalid_request_error", "invalid_request"),
        ErrorKind::Timeout => ("server_error", "upstream_timeout"),
        ErrorKind::Overloaded => ("server_error", "overloaded"),
        _ => ("server_error", "upstream_error"),
    };
    TranslateError {
        status: e.status,
        message: e.message.clone(),
        kind: kind.into(),
        param: e.param.clone(),
        code: Some(code.into()),
    }
}

/// Where the request goes, and the body to translate for each target:
/// routed by the request's model (renamed as the route says), or — with one
/// catch-all route — `None`: the body is translated straight from its bytes.
fn plan(req: &SurfaceRequest, ctx: &Ctx) -> Result<(Route, Option<Value>), TranslateError> {
    if !ctx.routes_by_model() {
        let route = ctx
            .default_route()
            .ok_or_else(|| openai_error(&GatewayError::new(ErrorKind::ModelNotFound, "no route is configured")))?;
        return Ok((route, None));
    }
    let mut v: Value = match nexus_proto::json::from_bytes(&req.body) {
        Ok(v) => v,
        // The translator words a body that is not JSON the way every surface expects.
        Err(_) => return Err(openai_request_bytes_to(Style::OpenAi, &req.body).err().unwrap_or_else(not_json)),
    };
    let Some(model) = v.get("model").and_then(Value::as_str).map(str::to_string) else {
        return Err(TranslateError::invalid("model", "you must provide a model parameter"));
    };
    let route = ctx.route(&model).map_err(|e| openai_error(&e))?;
    // Renamed for the first target here; a later one with a model of its own gets a copy.
    let renamed = route.primary().model();
    if renamed != model {
        if let Some(m) = v.get_mut("model") {
            *m = Value::String(renamed.to_string());
        }
    }
    Ok((route, Some(v)))
}

fn not_json() -> TranslateError {
    TranslateError::invalid("", "the request body is not valid JSON")
}

/// `POST /v1/chat/completions`: translate, forward through the route's
/// upstreams (failing over as the route's policy says), translate back.
async fn chat_completion(req: &SurfaceRequest, ctx: &Ctx) -> Reply {
    let (route, parsed) = match plan(req, ctx) {
        Ok(x) => x,
        Err(e) => return send_error(&e, &[]),
    };
    let mut client_model = route.client_model.clone();
    if !client_model.is_empty() {
        ctx.note_model(&client_model);
    }
    let forwarded = ctx
        .forward(&route, |target| {
            let t = match &parsed {
                Some(v) if v.get("model").and_then(Value::as_str) == Some(target.model()) => {
                    openai_request_to(target.style(), v)?
                }
                Some(v) => {
                    let mut own = v.clone();
                    own["model"] = Value::String(target.model().to_string());
                    openai_request_to(target.style(), &own)?
                }
                None => openai_request_bytes_to(target.style(), &req.body)?,
            };
            let up = UpstreamRequest {
                method: "POST",
                url: t.url(target.base_url()),
                headers: t.headers(None),
                body: t.body.clone(),
                stream: t.stream,
            };
            Ok((t, up))
        })
        .await;
    let (t, response) = match forwarded {
        Forwarded::Served { with, response } => (with, response),
        Forwarded::Refused { with: t, status, retry_after, body } => {
            let retry_after = retry_after_header(retry_after.as_deref());
            if t.style == Style::OpenAi {
                // The upstream already speaks OpenAI: its own error, as sent.
                return with_headers(Reply::json(status, body), &retry_after);
            }
            return send_error(&error_to_openai(t.style, status, &body), &retry_after);
        }
        Forwarded::Failed(e) => return send_error(&openai_error(&e), &e.headers),
        Forwarded::Invalid(e) => return send_error(&e, &[]),
    };
    if client_model.is_empty() {
        // Straight from the bytes: the request's own model is the client's.
        client_model = t.model.clone();
        ctx.note_model(&client_model);
    }
    let style = t.style;
    let meta = CompletionMeta { id: ctx.response_id("chatcmpl-"), model: client_model, created: ctx.now_secs() };
    let status = response.status;
    let mut body = response.body;
    if t.stream {
        return stream(&t, body, meta, ctx.clone());
    }
    // Read whole already, by the forwarding.
    let bytes = match body.read_to_end(ctx.max_upstream_body_bytes()).await {
        Ok(bytes) => bytes,
        Err(e) => return send_error(&openai_error(&e), &[]),
    };
    if style == Style::OpenAi {
        // Only `usage` is read (the rest is skipped, not built): the body goes out as it came.
        if let Ok(OpenAiUsage { usage: Some(u) }) = nexus_proto::json::from_bytes::<OpenAiUsage>(&bytes) {
            ctx.note_token_usage(TokenUsage {
                input: u.prompt_tokens,
                output: u.completion_tokens,
                cached: u.prompt_tokens_details.map_or(0, |d| d.cached_tokens),
                reasoning: u.completion_tokens_details.map_or(0, |d| d.reasoning_tokens),
            });
        }
        return Reply::json(status, bytes);
    }
    // Written from the decoded turn straight to bytes, no tree; the counts
    // come from the turn, as a stream's come from the upstream's events
    // (cached and reasoning tokens included).
    match response_to_openai_bytes(style, &bytes, &meta) {
        Ok(CompletionBytes { body, usage, .. }) => {
            if let Some(u) = usage {
                ctx.note_token_usage(TokenUsage {
                    input: u.prompt_tokens,
                    output: u.completion_tokens,
                    cached: u.cached_tokens,
                    reasoning: u.reasoning_tokens,
                });
            }
            Reply::json(200, body)
        }
        Err(e) => send_error(&e, &[]),
    }
}

#[derive(serde::Deserialize)]
struct OpenAiUsage {
    usage: Option<UsageCounts>,
}

#[derive(serde::Deserialize)]
struct UsageCounts {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(serde::Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: u64,
}

#[derive(serde::Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: u64,
}

/// Counts the tokens of an answer's `usage` (any dialect's shape).
pub(super) fn note_usage(ctx: &Ctx, v: &Value) {
    let mut u = Usage::default();
    u.scan_value(v);
    if u.seen {
        ctx.note_token_usage(u.tokens());
    }
}

/// An upstream event stream as OpenAI chunks, each sent as soon as it is
/// complete. Pulled by the client's connection: a client that reads slowly
/// slows the upstream read, and one that leaves drops the upstream body
/// (closing that connection, which cancels the upstream request).
fn stream(t: &TranslatedRequest, body: UpstreamBody, meta: CompletionMeta, ctx: Ctx) -> Reply {
    let translator = (t.style != Style::OpenAi).then(|| t.stream_translator(meta));
    let state = Pump {
        body,
        translator,
        decoder: SseDecoder::new(),
        events: Vec::new(),
        done: false,
        usage: Usage::default(),
        ctx,
    };
    let chunks = futures_lite::stream::unfold(state, |mut p| async move {
        let out = p.next().await?;
        Some((out, p))
    });
    Reply::event_stream(Box::pin(chunks))
}

struct Pump {
    body: UpstreamBody,
    /// `None`: same format both sides, the bytes go through as they come.
    translator: Option<StreamTranslator>,
    decoder: SseDecoder,
    events: Vec<SseEvent>,
    done: bool,
    usage: Usage,
    ctx: Ctx,
}

impl Pump {
    async fn next(&mut self) -> Option<Bytes> {
        let out = self.step().await;
        if self.done {
            // Counted once, before the last piece leaves: the request's record
            // is finished as soon as the client has it.
            let u = std::mem::take(&mut self.usage);
            if u.input + u.output > 0 {
                self.ctx.note_token_usage(u.tokens());
            }
        }
        out
    }

    async fn step(&mut self) -> Option<Bytes> {
        let Pump { body, translator, decoder, events, done, usage, .. } = self;
        loop {
            if *done {
                return None;
            }
            let mut lines = Vec::new();
            match body.chunk().await {
                Ok(Some(piece)) => {
                    let Some(tr) = translator.as_mut() else {
                        usage.scan_lines(piece);
                        return Some(Bytes::copy_from_slice(piece));
                    };
                    decoder.feed(piece, events);
                    for ev in events.drain(..) {
                        usage.scan(ev.data.as_bytes());
                        lines.extend(tr.push(&ev));
                    }
                    // After an error line nothing more is read: the upstream is done for.
                    *done = tr.error().is_some();
                }
                Ok(None) => {
                    *done = true;
                    let tr = translator.as_mut()?;
                    decoder.finish(events);
                    for ev in events.drain(..) {
                        usage.scan(ev.data.as_bytes());
                        lines.extend(tr.push(&ev));
                    }
                    lines.extend(tr.finish());
                }
                Err(e) => {
                    *done = true;
                    let e = openai_error(&e);
                    match translator.as_mut() {
                        Some(tr) => lines.extend(tr.abort(e)),
                        // The blank line ends whatever event the upstream left half-written.
                        None => return Some(Bytes::from(format!("\n\ndata: {}\n\n", e.to_json()))),
                    }
                }
            }
            if lines.is_empty() {
                continue;
            }
            return Some(Bytes::from(lines.concat()));
        }
    }
}

/// Token counts seen in an upstream stream, whatever the upstream reports
/// and whether or not the client asked for a usage chunk. Providers report
/// running totals (Anthropic's `message_delta`, Gemini's `usageMetadata`),
/// so the largest value of each wins.
///
/// Input counts cached tokens in (Anthropic reports cache reads apart from
/// `input_tokens`; the others within); output counts reasoning in.
#[derive(Default)]
pub(super) struct Usage {
    pub(super) input: u64,
    pub(super) output: u64,
    pub(super) cached: u64,
    pub(super) reasoning: u64,
    /// A usage object was found.
    pub(super) seen: bool,
}

impl Usage {
    /// One event's JSON, read only when it mentions usage. Only the keys
    /// that carry usage are built ([`UsageCarriers`]); the rest of the event
    /// (a chunk's deltas, a whole message) is skipped. An event that does not
    /// fit that shape is read whole, as before.
    pub(super) fn scan(&mut self, data: &[u8]) {
        if !contains(data, b"usage") {
            return;
        }
        // A derived struct would also read an array, by position.
        let object = data.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{');
        match nexus_proto::json::from_bytes::<UsageCarriers>(data).ok().filter(|_| object) {
            Some(carriers) => self.scan_value(&carriers.into_value()),
            None => {
                if let Ok(v) = serde_json::from_slice::<Value>(data) {
                    self.scan_value(&v);
                }
            }
        }
    }

    /// An answer's or event's usage, whatever the dialect.
    pub(super) fn scan_value(&mut self, v: &Value) {
        let n = |v: Option<&Value>, k: &str| v.and_then(|u| u.get(k)).and_then(Value::as_u64).unwrap_or(0);
        let sub = |v: Option<&Value>, k: &str, f: &str| n(v.and_then(|u| u.get(k)), f);
        // Anthropic: message_start.message.usage and message_delta.usage;
        // Responses: response.completed's response.usage.
        let nested = |k: &str| v.get(k).and_then(|m| m.get("usage"));
        for u in [v.get("usage"), nested("message"), nested("response")] {
            if u.is_none() {
                continue;
            }
            self.seen = true;
            let cache_read = n(u, "cache_read_input_tokens");
            self.input = self.input.max(n(u, "input_tokens") + cache_read).max(n(u, "prompt_tokens"));
            self.output = self.output.max(n(u, "output_tokens")).max(n(u, "completion_tokens"));
            self.cached = self.cached.max(cache_read).max(sub(u, "prompt_tokens_details", "cached_tokens")).max(sub(
                u,
                "input_tokens_details",
                "cached_tokens",
            ));
            self.reasoning = self.reasoning.max(sub(u, "completion_tokens_details", "reasoning_tokens")).max(sub(
                u,
                "output_tokens_details",
                "reasoning_tokens",
            ));
        }
        let g = v.get("usageMetadata");
        if g.is_some() {
            self.seen = true;
            self.input = self.input.max(n(g, "promptTokenCount"));
            self.output = self.output.max(n(g, "candidatesTokenCount") + n(g, "thoughtsTokenCount"));
            self.cached = self.cached.max(n(g, "cachedContentTokenCount"));
            self.reasoning = self.reasoning.max(n(g, "thoughtsTokenCount"));
        }
    }

    /// What was found, as the record keeps it.
    pub(super) fn tokens(&self) -> TokenUsage {
        TokenUsage { input: self.input, output: self.output, cached: self.cached, reasoning: self.reasoning }
    }

    /// The `data:` lines of a piece of an OpenAI stream.
    pub(super) fn scan_lines(&mut self, piece: &[u8]) {
        if !contains(piece, b"\"usage\":{") {
            return;
        }
        // Only the lines with a usage object: the `"usage":null` of every
        // other chunk says nothing the object's line does not.
        for line in piece.split(|b| *b == b'\n') {
            if let Some(data) = line.strip_prefix(b"data: ").filter(|d| contains(d, b"\"usage\":{")) {
                self.scan(data);
            }
        }
    }
}

/// The keys of an event [`Usage::scan_value`] reads: `usage`, `usageMetadata`,
/// and `usage` inside `message` or `response`. A key present with `null` is
/// kept as `null` (a usage object was announced).
#[derive(serde::Deserialize)]
struct UsageCarriers {
    #[serde(default, deserialize_with = "present")]
    usage: Option<Value>,
    #[serde(default, rename = "usageMetadata", deserialize_with = "present")]
    usage_metadata: Option<Value>,
    #[serde(default)]
    message: Option<Carrier>,
    #[serde(default)]
    response: Option<Carrier>,
}

#[derive(serde::Deserialize)]
struct Carrier {
    #[serde(default, deserialize_with = "present")]
    usage: Option<Value>,
}

/// A present key's value, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    <Value as serde::Deserialize>::deserialize(d).map(Some)
}

impl UsageCarriers {
    /// The event as `scan_value` sees it, without what it does not read.
    fn into_value(self) -> Value {
        let mut v = serde_json::Map::new();
        let nested = |c: Option<Carrier>| c.and_then(|c| c.usage).map(|u| json!({ "usage": u }));
        for (key, value) in [
            ("usage", self.usage),
            ("usageMetadata", self.usage_metadata),
            ("message", nested(self.message)),
            ("response", nested(self.response)),
        ] {
            if let Some(value) = value {
                v.insert(key.to_string(), value);
            }
        }
        Value::Object(v)
    }
}

/// Whether `needle` occurs in `haystack` (memchr's vectorized search: the
/// gateway asks this of every piece of every answer it forwards).
pub(super) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

/// `GET /v1/models` and `GET /v1/models/{id}`: the configured models, or the upstream's.
async fn models(ctx: &Ctx, id: Option<&str>) -> Reply {
    let route = ctx.default_route();
    let owner = route.as_ref().map_or("nexus", |r| r.primary().style().name());
    let mut names = ctx.listed_models();
    if names.is_empty() {
        if let Some(r) = &route {
            names = match upstream_models(ctx, r.primary()).await {
                Ok(names) => names,
                Err(e) => return send_error(&e, &[]),
            };
        }
    }
    let object = |name: &str| json!({ "id": name, "object": "model", "created": 0, "owned_by": owner });
    match id {
        None => {
            let list = json!({ "object": "list", "data": names.iter().map(|n| object(n)).collect::<Vec<_>>() });
            Reply::json(200, list.to_string())
        }
        Some(id) if names.iter().any(|n| n == id) => Reply::json(200, object(id).to_string()),
        Some(id) => {
            let e = TranslateError {
                status: 404,
                message: format!("The model `{id}` does not exist or you do not have access to it."),
                kind: "invalid_request_error".into(),
                param: None,
                code: Some("model_not_found".into()),
            };
            send_error(&e, &[])
        }
    }
}

/// The upstream's model list, as model ids.
pub(super) async fn upstream_models(ctx: &Ctx, target: &Target) -> Result<Vec<String>, TranslateError> {
    let style = target.style();
    let base = target.base_url().trim_end_matches('/');
    let url = match style {
        Style::Anthropic if base.ends_with("/v1") => format!("{base}/models?limit=1000"),
        Style::Anthropic => format!("{base}/v1/models?limit=1000"),
        Style::OpenAi | Style::OpenAiResponses => format!("{base}/models"),
        Style::Gemini => format!("{base}/models?pageSize=1000"),
    };
    let mut headers = style.base_headers();
    headers.retain(|(k, _)| k != "content-type");
    let up = UpstreamRequest { method: "GET", url, headers, body: Vec::new(), stream: false };
    let response = ctx.send(target, up).await.map_err(|e| openai_error(&e))?;
    let status = response.status;
    let mut body = response.body;
    let bytes = body.read_to_end(MAX_ERROR_BODY * 8).await.map_err(|e| openai_error(&e))?;
    if !(200..300).contains(&status) {
        return Err(error_to_openai(style, status, &bytes));
    }
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| {
        openai_error(&GatewayError::new(ErrorKind::Upstream, format!("the upstream model list is not JSON: {e}")))
    })?;
    let (items, key) = match style {
        Style::Gemini => (v.get("models"), "name"),
        _ => (v.get("data"), "id"),
    };
    Ok(items
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get(key).and_then(Value::as_str))
        .map(|name| name.strip_prefix("models/").unwrap_or(name).to_string())
        .collect())
}

/// `Retry-After` from an upstream refusal, passed on when it is delay-seconds
/// (the OpenAI SDKs honour it).
pub(super) fn retry_after_header(value: Option<&str>) -> Vec<(String, String)> {
    value
        .filter(|v| nexus_proto::provider::parse_retry_after(v).is_some())
        .map(|v| vec![("retry-after".to_string(), v.trim().to_string())])
        .unwrap_or_default()
}

fn with_headers(mut reply: Reply, extra: &[(String, String)]) -> Reply {
    for (k, v) in extra {
        reply = reply.with_header(k.clone(), v.clone());
    }
    reply
}

fn send_error(e: &TranslateError, extra: &[(String, String)]) -> Reply {
    with_headers(Reply::json(e.status, e.to_json().to_string()), extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`Usage::scan`] found, field by field.
    fn found(u: &Usage) -> (u64, u64, u64, u64, bool) {
        (u.input, u.output, u.cached, u.reasoning, u.seen)
    }

    #[test]
    fn contains_finds_a_needle_anywhere_and_only_there() {
        let windows = |h: &[u8], n: &[u8]| n.is_empty() || h.windows(n.len()).any(|w| w == n);
        let hay = b"data: {\"usage\":null}\n\ndata: {\"usage\":{\"a\":1}} uu\"usage\"";
        for needle in [&b"usage"[..], b"\"usage\":{", b"\"usage\"", b"u", b"uu", b"x", b"}}", b"data: {", b""] {
            for end in 0..=hay.len() {
                assert_eq!(contains(&hay[..end], needle), windows(&hay[..end], needle));
            }
        }
    }

    #[test]
    fn usage_read_from_its_keys_is_usage_read_from_the_whole_event() {
        let events = [
            r#"{"id":"c","choices":[{"delta":{"content":"hi"}}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":20,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":3}}}"#,
            r#"{"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":5,"cache_read_input_tokens":2,"output_tokens":1}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}}"#,
            r#"{"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":7,"output_tokens":2,"input_tokens_details":{"cached_tokens":1},"output_tokens_details":{"reasoning_tokens":1}}}}"#,
            r#"{"candidates":[],"usageMetadata":{"promptTokenCount":11,"candidatesTokenCount":4,"thoughtsTokenCount":2,"cachedContentTokenCount":3}}"#,
            r#"{"message":"usage is a word here","usage":{"output_tokens":1}}"#,
            r#"{"message":null,"response":{"usage":null},"text":"usage"}"#,
            r#"{"usage":{"output_tokens":1},"usage":{"output_tokens":6}}"#,
            r#"["usage",{"output_tokens":5}]"#,
            r#"{"usage": {"prompt_tokens": 3, "completion_tokens": 1}} "#,
            r#"{"usage":{"prompt_tokens":3}"#,
        ];
        for event in events {
            let (mut keys, mut whole) = (Usage::default(), Usage::default());
            keys.scan(event.as_bytes());
            if let Ok(v) = serde_json::from_slice::<Value>(event.as_bytes()) {
                whole.scan_value(&v);
            }
            assert_eq!(found(&keys), found(&whole), "{event}");
        }
        let mut all = Usage::default();
        for event in events {
            all.scan(event.as_bytes());
        }
        assert_eq!(found(&all), (20, 9, 4, 3, true), "the largest of each, over a stream");
    }
}
