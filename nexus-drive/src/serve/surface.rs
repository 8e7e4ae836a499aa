//! Where a client dialect plugs into the gateway.
//!
//! A [`Surface`] is one dialect's endpoints (OpenAI Chat Completions,
//! Anthropic Messages, …). The server does everything around it — HTTP/1.1
//! and h2c, header and body limits, client keys, per-key concurrency,
//! health, metrics, the access log, shutdown — and hands the surface a whole
//! request ([`SurfaceRequest`]: method, path, query, headers, body bytes).
//! The surface answers with a [`Reply`]: a status, headers and either a
//! whole body or a stream of body chunks. Errors the server raises on the
//! surface's behalf (401, 413, 429, 404, 405, an upstream that cannot be
//! reached) are shaped by the surface's own [`Surface::error`], so each
//! client sees the error objects its SDK parses.
//!
//! A surface reaches upstreams only through the [`Ctx`] it is given:
//! [`Ctx::route`] resolves the client's model name to upstream targets in
//! order, and [`Ctx::send`] makes one upstream exchange over the shared
//! connection pool (timeouts, health and metrics included). Token counts and
//! the model go to [`Ctx::note_model`] / [`Ctx::note_usage`] for metrics and
//! the access log.
//!
//! ```no_run
//! use std::sync::Arc;
//! use nexus_drive::serve::{
//!     serve_with, BoxFuture, Ctx, ErrorKind, GatewayError, Reply, ServeConfig, Surface, SurfaceRequest,
//!     UpstreamRequest,
//! };
//!
//! /// `POST /echo/{model}`: sends the body as is to the model's upstream.
//! struct Echo;
//!
//! impl Surface for Echo {
//!     fn name(&self) -> &'static str {
//!         "echo"
//!     }
//!
//!     fn claims(&self, path: &str) -> bool {
//!         path.starts_with("/echo/")
//!     }
//!
//!     fn error(&self, e: &GatewayError) -> Reply {
//!         let body = serde_json::json!({"problem": e.message}).to_string();
//!         e.headers.iter().fold(Reply::json(e.status, body), |r, (k, v)| r.with_header(k.clone(), v.clone()))
//!     }
//!
//!     fn handle<'a>(&'a self, req: SurfaceRequest, ctx: Ctx) -> BoxFuture<'a, Reply> {
//!         Box::pin(async move {
//!             let model = req.path.trim_start_matches("/echo/");
//!             let route = match ctx.route(model) {
//!                 Ok(r) => r,
//!                 Err(e) => return self.error(&e),
//!             };
//!             ctx.note_model(model);
//!             let target = route.primary();
//!             let up = UpstreamRequest {
//!                 method: "POST",
//!                 url: target.style().endpoint(target.base_url(), target.model(), false),
//!                 headers: target.style().base_headers(),
//!                 body: req.body.to_vec(),
//!                 stream: false,
//!             };
//!             let mut resp = match ctx.send(target, up).await {
//!                 Ok(r) => r,
//!                 Err(e) => return self.error(&e),
//!             };
//!             match resp.body.read_to_end(1 << 20).await {
//!                 Ok(bytes) => Reply::json(resp.status, bytes),
//!                 Err(e) => self.error(&e),
//!             }
//!         })
//!     }
//! }
//!
//! let config = ServeConfig::new("127.0.0.1:8080".parse()?, nexus_drive::Style::Anthropic);
//! let server = serve_with(config, vec![Arc::new(Echo)])?;
//! # let _ = ErrorKind::NotFound;
//! server.wait();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use futures_lite::Stream;
use hyper::http::{HeaderMap, Method};

use super::gateway::Ctx;

/// A boxed future, as [`Surface::handle`] returns it.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The chunks of a streamed body, in order. The stream is polled only as
/// fast as the client reads (backpressure), and dropped when the client
/// goes away — dropping it must cancel whatever feeds it (an upstream body).
pub type ChunkStream = Pin<Box<dyn Stream<Item = Bytes> + Send>>;

/// One request, as the server read it.
#[derive(Debug)]
pub struct SurfaceRequest {
    /// The method.
    pub method: Method,
    /// The path, without the query (`/v1/chat/completions`).
    pub path: String,
    /// The query string without `?`, when there is one.
    pub query: Option<String>,
    /// The request headers.
    pub headers: HeaderMap,
    /// The whole body (at most the configured limit).
    pub body: Bytes,
}

impl SurfaceRequest {
    /// The first header named `name`, when it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The value of query parameter `key` (not percent-decoded).
    pub fn query_param(&self, key: &str) -> Option<&str> {
        self.query.as_deref()?.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k == key).then_some(v)
        })
    }

    /// The client's key as the common dialects send it: `Authorization:
    /// Bearer`, `x-api-key` (Anthropic), `x-goog-api-key` or `?key=` (Gemini).
    pub fn client_key(&self) -> Option<&str> {
        if let Some(v) = self.header("authorization") {
            if let Some((scheme, token)) = v.split_once(' ') {
                if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() {
                    return Some(token.trim());
                }
            }
        }
        self.header("x-api-key")
            .or_else(|| self.header("x-goog-api-key"))
            .or_else(|| self.query_param("key"))
            .filter(|k| !k.is_empty())
    }
}

/// An answer.
pub enum Reply {
    /// A whole body.
    Whole {
        /// The status.
        status: u16,
        /// Headers (content type included).
        headers: Vec<(String, String)>,
        /// The body.
        body: Bytes,
    },
    /// A streamed body (SSE, or any chunked body).
    Stream {
        /// The status.
        status: u16,
        /// Headers (content type included).
        headers: Vec<(String, String)>,
        /// The chunks.
        body: ChunkStream,
    },
}

impl Reply {
    /// A JSON body.
    pub fn json(status: u16, body: impl Into<Bytes>) -> Reply {
        Reply::Whole { status, headers: vec![("content-type".into(), "application/json".into())], body: body.into() }
    }

    /// An event stream (`text/event-stream`, no caching).
    pub fn event_stream(body: ChunkStream) -> Reply {
        Reply::Stream {
            status: 200,
            headers: vec![
                ("content-type".into(), "text/event-stream; charset=utf-8".into()),
                ("cache-control".into(), "no-cache".into()),
            ],
            body,
        }
    }

    /// Adds a header.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Reply {
        match &mut self {
            Reply::Whole { headers, .. } | Reply::Stream { headers, .. } => headers.push((name.into(), value.into())),
        }
        self
    }

    /// The status.
    pub fn status(&self) -> u16 {
        match self {
            Reply::Whole { status, .. } | Reply::Stream { status, .. } => *status,
        }
    }
}

/// What kind of failure an error is, for a surface to pick its dialect's
/// error type and code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No valid client key (401).
    Unauthorized,
    /// A key's concurrency, request or token limit is reached (429, with `Retry-After`).
    RateLimited,
    /// A key's token budget for the day or month is spent (429; Anthropic's
    /// surface answers 402 `billing_error`).
    BudgetExceeded,
    /// The request body is over the limit (413).
    TooLarge,
    /// No such endpoint (404).
    NotFound,
    /// The endpoint exists, not with this method (405, with `Allow`).
    MethodNotAllowed,
    /// The request is malformed or cannot be served as asked (400).
    InvalidRequest,
    /// No route for the requested model (404).
    ModelNotFound,
    /// The upstream could not be reached, failed, or sent something unreadable (502).
    Upstream,
    /// The upstream did not answer, or stalled, in time (504).
    Timeout,
    /// The gateway is at capacity or shutting down (503).
    Overloaded,
}

/// An error the server or a surface answers with; [`Surface::error`] gives it
/// the surface's shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayError {
    /// The HTTP status.
    pub status: u16,
    /// What kind of failure.
    pub kind: ErrorKind,
    /// A message for the client (never a key or a body).
    pub message: String,
    /// The request parameter at fault, when one is.
    pub param: Option<String>,
    /// Headers to send with it (`retry-after`, `allow`).
    pub headers: Vec<(String, String)>,
}

impl GatewayError {
    /// An error of `kind` with its usual status.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> GatewayError {
        let status = match kind {
            ErrorKind::Unauthorized => 401,
            ErrorKind::RateLimited | ErrorKind::BudgetExceeded => 429,
            ErrorKind::TooLarge => 413,
            ErrorKind::NotFound | ErrorKind::ModelNotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::InvalidRequest => 400,
            ErrorKind::Upstream => 502,
            ErrorKind::Timeout => 504,
            ErrorKind::Overloaded => 503,
        };
        GatewayError { status, kind, message: message.into(), param: None, headers: Vec::new() }
    }

    /// Adds a header.
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> GatewayError {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

/// One client dialect's endpoints.
pub trait Surface: Send + Sync + 'static {
    /// Its name in metric labels and the access log (`openai.chat`, `anthropic.messages`, …).
    fn name(&self) -> &'static str;

    /// Whether `path` is one of its endpoints (any method: a wrong method is
    /// still this surface's to answer, with 405 in its shape).
    fn claims(&self, path: &str) -> bool;

    /// The client key the request presents; the default reads every common
    /// dialect's place for it ([`SurfaceRequest::client_key`]).
    fn client_key<'r>(&self, req: &'r SurfaceRequest) -> Option<&'r str> {
        req.client_key()
    }

    /// `error` in this dialect's error shape (status, headers and body).
    fn error(&self, error: &GatewayError) -> Reply;

    /// Answers one request. Failures are answered too (with [`error`](Self::error)).
    fn handle<'a>(&'a self, req: SurfaceRequest, ctx: Ctx) -> BoxFuture<'a, Reply>;
}
