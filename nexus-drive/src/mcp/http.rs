//! The Streamable HTTP transport (with the 2024-11-05 HTTP+SSE transport as
//! its fallback), on ureq.
//!
//! Every message is its own `POST` to the one endpoint with `Accept:
//! application/json, text/event-stream`. A JSON answer is delivered at once;
//! an SSE answer is read on its own thread, and every message on it (server
//! requests and notifications before the response, then the response) is
//! delivered in order on the link's channel, so the session can answer a
//! server's request while the stream is still open. When an SSE stream ends
//! before the response it carries, the link says so
//! ([`Inbound::StreamLost`], with the last event id it read) and the
//! session decides: a legacy server that gave its events ids is reattached
//! ([`HttpLink::reattach`]: `GET` + `Last-Event-ID` after the server's
//! `retry:` delay); otherwise the call is in doubt and never sent again.
//!
//! Every request's `POST` and response stream can be closed from the
//! driver's thread ([`HttpLink::abandon`]): the socket is shut down, which
//! in the 2026 era is itself the cancellation of a call.
//!
//! `POST`s run on a small pool per link — at most [`MAX_POST_THREADS`] for
//! requests and one for notifications and responses, so a slow JSON answer
//! never holds up the answer to a server's question. An open SSE stream is
//! read on a thread of its own while it lasts (ureq is blocking; the
//! stream's thread ends with it).
//!
//! Sessions: the `Mcp-Session-Id` the server assigns is sent on every later
//! request; a `404` on a request that carried it means the session expired
//! ([`PostOutcome::SessionExpired`]: the session re-initializes, and a
//! `tools/call` that was in flight is in doubt — never replayed here).
//! [`HttpLink::close`] ends the session with `DELETE`.
//!
//! Static headers (`Authorization: Bearer ${TOKEN}`) are sent on every
//! request and appear nowhere else: not in errors, not in `Debug`.

use std::collections::HashMap;
use std::io::{self, Read};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread;
use std::time::{Duration, Instant};

use nexus_proto::sse::{SseDecoder, SseEvent};
use serde_json::Value;

use super::auth::{Authorizer, Step};
use super::cancel_io::{cancellable_agent, with_cancel};
use super::stdio::recv_deadline;
use super::{Inbound, McpError, ServerExit};
use crate::cancel::CancelToken;

/// A response body larger than this is refused.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// Threads per link that send requests (`POST`s waiting for their answer).
pub const MAX_POST_THREADS: usize = 4;
/// The reconnection delay when the server sets none.
const DEFAULT_RETRY: Duration = Duration::from_millis(1000);

/// What a `POST` came to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostOutcome {
    /// `202 Accepted` (a notification or a response was taken).
    Accepted,
    /// A JSON answer, already delivered on the link's channel.
    Delivered,
    /// An SSE stream: its messages arrive on the link's channel as they come.
    Streaming,
    /// `404` on a request that carried a session id: the session expired and
    /// was dropped; initialize again.
    SessionExpired,
    /// The server demands authorization and a person must give it: the
    /// [`Authorizer`] holds the `authorization`
    /// request under this id ([`Authorizer::request`](super::auth::Authorizer::request)).
    AuthorizationRequired {
        /// The id of the authorization request.
        request: String,
    },
    /// The request was abandoned ([`HttpLink::abandon`]) before its answer.
    Abandoned,
    /// Any other refusal. A JSON-RPC message in the body was delivered too
    /// (a modern server's error answer); `body` is its start, for errors.
    Rejected {
        /// The HTTP status.
        status: u16,
        /// The start of the body.
        body: String,
        /// Whether a JSON-RPC message in the body was delivered.
        delivered: bool,
    },
}

/// Which HTTP transport the link speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    Streamable,
    /// 2024-11-05: messages are posted to the URL the GET stream's
    /// `endpoint` event named; answers come on that stream.
    LegacySse {
        post_url: String,
    },
}

#[derive(Debug)]
struct State {
    mode: Mode,
    session_id: Option<String>,
    protocol_version: Option<String>,
}

/// One Streamable HTTP server.
pub struct HttpLink {
    name: String,
    url: String,
    headers: Vec<(String, String)>,
    agent: ureq::Agent,
    state: Arc<Mutex<State>>,
    tx: async_channel::Sender<Inbound>,
    rx: async_channel::Receiver<Inbound>,
    /// Set when the link is closed: stream threads stop delivering.
    closed: Arc<AtomicBool>,
    /// OAuth for this server (`None`: static headers only).
    auth: Option<Arc<Authorizer>>,
    /// What closes each request's exchange, and the `retry:` of lost streams.
    streams: Arc<Mutex<Streams>>,
    /// Sends requests in the background.
    requests: Lane,
    /// Sends notifications and responses in the background.
    control: Lane,
}

/// Per request (keyed by its id as JSON text).
#[derive(Default)]
struct Streams {
    /// Cancelling it shuts the request's `POST` or response stream.
    tokens: HashMap<String, CancelToken>,
    /// The server's `retry:` delay, for a stream that was lost.
    retry: HashMap<String, Duration>,
}

fn key(id: &Value) -> String {
    id.to_string()
}

/// One message to post and its extra headers.
type Job = (Vec<u8>, Vec<(String, String)>);

/// A bounded set of threads sending `POST`s from a queue, started on demand.
struct Lane {
    name: &'static str,
    max: usize,
    tx: async_channel::Sender<Job>,
    rx: async_channel::Receiver<Job>,
    workers: Arc<AtomicUsize>,
    idle: Arc<AtomicUsize>,
}

impl Lane {
    fn new(name: &'static str, max: usize) -> Lane {
        let (tx, rx) = async_channel::unbounded();
        Lane { name, max, tx, rx, workers: Arc::default(), idle: Arc::default() }
    }

    /// Queues one message; a worker starts when none is idle and the lane has room.
    fn submit(&self, link: Weak<HttpLink>, server: &str, job: Job) -> io::Result<()> {
        self.tx.try_send(job).map_err(|_| io::Error::other("the link is closed"))?;
        if self.idle.load(Ordering::SeqCst) > 0 {
            return Ok(());
        }
        // Claim a worker slot; give it back when the lane is full.
        if self.workers.fetch_add(1, Ordering::SeqCst) >= self.max {
            self.workers.fetch_sub(1, Ordering::SeqCst);
            return Ok(());
        }
        let (rx, idle, workers) = (self.rx.clone(), self.idle.clone(), self.workers.clone());
        let spawned = thread::Builder::new().name(format!("mcp-{server}-{}", self.name)).spawn(move || loop {
            idle.fetch_add(1, Ordering::SeqCst);
            let job = rx.recv_blocking();
            idle.fetch_sub(1, Ordering::SeqCst);
            let (Ok((body, extra)), Some(link)) = (job, link.upgrade()) else {
                workers.fetch_sub(1, Ordering::SeqCst);
                return;
            };
            let outcome = link.post(&body, &extra);
            link.deliver(Inbound::Posted { request: request_id(&body), outcome });
        });
        if let Err(e) = spawned {
            self.workers.fetch_sub(1, Ordering::SeqCst);
            return Err(e);
        }
        Ok(())
    }

    fn close(&self) {
        self.tx.close();
    }
}

/// A body reader that `token` interrupts: its socket is shut down on cancel.
struct Cancellable<R> {
    inner: R,
    token: CancelToken,
}

impl<R: Read> Read for Cancellable<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Cancellable { inner, token } = self;
        if token.is_cancelled() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "the request was abandoned"));
        }
        with_cancel(token, || inner.read(buf))
    }
}

/// How often one message is sent again after the server refused it and the
/// authorizer got a new token (refresh, step-up, a person's authorization).
const MAX_AUTH_RETRIES: u32 = 4;

/// What one `POST` came to, before authorization is considered.
enum Attempt {
    Done(PostOutcome),
    /// `401`/`403` with an authorizer present: its `WWW-Authenticate`.
    Unauthorized {
        status: u16,
        www_authenticate: Option<String>,
    },
}

impl std::fmt::Debug for HttpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpLink").field("name", &self.name).field("url", &self.url).finish_non_exhaustive()
    }
}

impl HttpLink {
    /// A link to the endpoint `url`, sending `headers` on every request.
    pub fn new(name: &str, url: &str, headers: Vec<(String, String)>, connect_timeout: Duration) -> HttpLink {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(connect_timeout))
            .max_redirects(0)
            .build();
        let (tx, rx) = async_channel::unbounded();
        HttpLink {
            name: name.to_string(),
            url: url.to_string(),
            headers,
            agent: cancellable_agent(config),
            state: Arc::new(Mutex::new(State { mode: Mode::Streamable, session_id: None, protocol_version: None })),
            tx,
            rx,
            closed: Arc::new(AtomicBool::new(false)),
            auth: None,
            streams: Arc::default(),
            requests: Lane::new("post", MAX_POST_THREADS),
            control: Lane::new("notify", 1),
        }
    }

    /// Authorizes this link's requests with `auth` (OAuth 2.1, MCP authorization).
    pub fn with_authorizer(mut self, auth: Option<Arc<Authorizer>>) -> HttpLink {
        self.auth = auth;
        self
    }

    /// The static headers plus the bearer token, when the authorizer has one
    /// and the configuration sets no `Authorization` of its own.
    fn request_headers(&self) -> (Vec<(String, String)>, Option<String>) {
        let mut headers = self.headers.clone();
        let configured = headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("authorization"));
        let bearer = match &self.auth {
            Some(auth) if !configured => auth.bearer(&self.name),
            _ => None,
        };
        if let Some(token) = &bearer {
            headers.push(("authorization".into(), format!("Bearer {token}")));
        }
        (headers, bearer)
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The session id the server assigned, if any.
    pub fn session_id(&self) -> Option<String> {
        self.lock().session_id.clone()
    }

    /// Sets the protocol version sent as `MCP-Protocol-Version` from now on
    /// (the negotiated one, legacy era; the request's own, modern era).
    pub fn set_protocol_version(&self, version: Option<String>) {
        self.lock().protocol_version = version;
    }

    /// Forgets the session (before initializing again).
    pub fn reset_session(&self) {
        self.lock().session_id = None;
    }

    /// Whether the link fell back to the 2024-11-05 HTTP+SSE transport.
    pub fn is_legacy_sse(&self) -> bool {
        matches!(self.lock().mode, Mode::LegacySse { .. })
    }

    /// The next inbound item, waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Option<Inbound> {
        recv_deadline(&self.rx, Instant::now() + timeout)
    }

    /// The next inbound item (async).
    pub async fn recv(&self) -> Option<Inbound> {
        self.rx.recv().await.ok()
    }

    /// The inbound channel itself.
    pub fn inbox(&self) -> &async_channel::Receiver<Inbound> {
        &self.rx
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn err(&self, message: impl Into<String>) -> McpError {
        McpError::Http { server: self.name.clone(), message: message.into() }
    }

    /// Posts one JSON-RPC message with `extra` headers (`Mcp-Method`,
    /// `Mcp-Name`, `Mcp-Param-*` for the modern era). A request can be
    /// [abandoned](Self::abandon) from another thread while it waits.
    pub fn post(&self, body: &[u8], extra: &[(String, String)]) -> Result<PostOutcome, McpError> {
        let id = request_id(body);
        // A request queued by `post_in_background` already has its token:
        // abandoned while it waited, it is not sent at all.
        let token = match &id {
            Some(id) => self.streams().tokens.entry(key(id)).or_default().clone(),
            None => CancelToken::new(),
        };
        if token.is_cancelled() {
            if let Some(id) = &id {
                self.streams().tokens.remove(&key(id));
            }
            return Ok(PostOutcome::Abandoned);
        }
        let out = with_cancel(&token, || self.post_authorized(body, extra, &token));
        if matches!(out, Ok(PostOutcome::Streaming)) {
            return out; // the stream's reader owns the token now
        }
        if let Some(id) = &id {
            self.streams().tokens.remove(&key(id));
        }
        if token.is_cancelled() {
            return Ok(PostOutcome::Abandoned);
        }
        out
    }

    /// Shuts the `POST` or the response stream of request `id`: later
    /// messages for it are not read. Closing the stream is how a 2026 client
    /// cancels a request.
    pub fn abandon(&self, id: &Value) {
        // Left in place: whoever owns the exchange (a queued post, a POST, a
        // stream's reader) sees it cancelled and removes it.
        let token = self.streams().tokens.get(&key(id)).cloned();
        if let Some(token) = token {
            token.cancel();
        }
    }

    /// Resumes the lost response stream of request `id` (legacy
    /// resumability): after the server's `retry:` delay, `GET` with
    /// `Last-Event-ID: last_event_id`, and its messages are delivered as
    /// the stream's were. A refused `GET` is [`Inbound::StreamLost`] without
    /// an event id; a failed one, with the same id (the session bounds the tries).
    pub fn reattach(self: &Arc<Self>, id: &Value, last_event_id: &str) -> Result<(), McpError> {
        let token = CancelToken::new();
        let retry = {
            let mut st = self.streams();
            st.tokens.insert(key(id), token.clone());
            st.retry.remove(&key(id)).unwrap_or(DEFAULT_RETRY)
        };
        let (session, version) = {
            let st = self.lock();
            (st.session_id.clone(), st.protocol_version.clone())
        };
        let ctx = StreamCtx {
            link: self.stream_handle(),
            expect: Some(id.clone()),
            server: self.name.clone(),
            url: self.url.clone(),
            session,
            version,
            token,
        };
        let last = last_event_id.to_string();
        thread::Builder::new()
            .name(format!("mcp-{}-reattach", self.name))
            .spawn(move || ctx.reattach(retry, &last))
            .map(|_| ())
            .map_err(|e| self.err(format!("thread: {e}")))
    }

    fn streams(&self) -> std::sync::MutexGuard<'_, Streams> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn post_authorized(
        &self,
        body: &[u8],
        extra: &[(String, String)],
        token: &CancelToken,
    ) -> Result<PostOutcome, McpError> {
        // The authorization seam: a 401/403 goes to the authorizer, which
        // refreshes or authorizes (or hands back a person's request); the
        // message is then sent again with the new token.
        let mut retries = 0;
        loop {
            let (headers, bearer) = self.request_headers();
            match self.post_once(body, extra, &headers, token)? {
                Attempt::Done(outcome) => return Ok(outcome),
                Attempt::Unauthorized { status, www_authenticate } => {
                    let Some(auth) = &self.auth else { return Err(self.err(format!("{status}: not authorized"))) };
                    if retries == MAX_AUTH_RETRIES {
                        return Err(self.err(format!("{status}: still refused after authorizing {retries} times")));
                    }
                    retries += 1;
                    match auth.challenged(&self.name, &self.url, status, www_authenticate.as_deref(), bearer.as_deref())
                    {
                        Ok(Step::Retry) => continue,
                        Ok(Step::Person(request)) => {
                            return Ok(PostOutcome::AuthorizationRequired { request: request.id })
                        }
                        Err(e) => return Err(self.err(format!("{status}: {e}"))),
                    }
                }
            }
        }
    }

    fn post_once(
        &self,
        body: &[u8],
        extra: &[(String, String)],
        headers: &[(String, String)],
        token: &CancelToken,
    ) -> Result<Attempt, McpError> {
        let given = |name: &str| extra.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone());
        let (mode, session, version) = {
            let mut st = self.lock();
            let session = given("mcp-session-id").or_else(|| st.session_id.clone());
            // The version the session sends is the one later GETs and the DELETE carry.
            if let Some(v) = given("mcp-protocol-version") {
                st.protocol_version = Some(v);
            }
            (st.mode.clone(), session, st.protocol_version.clone())
        };
        let target = match &mode {
            Mode::Streamable => self.url.clone(),
            Mode::LegacySse { post_url } => post_url.clone(),
        };
        let mut req = ureq::http::Request::builder()
            .method("POST")
            .uri(target.as_str())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        let ours = ["mcp-session-id", "mcp-protocol-version"];
        for (k, v) in
            headers.iter().chain(extra.iter().filter(|(k, _)| !ours.iter().any(|o| k.eq_ignore_ascii_case(o))))
        {
            req = req.header(k.as_str(), v.as_str());
        }
        if let Some(id) = &session {
            req = req.header("mcp-session-id", id.as_str());
        }
        if let Some(v) = &version {
            req = req.header("mcp-protocol-version", v.as_str());
        }
        let req = req.body(body).map_err(|e| self.err(format!("bad request: {e}")))?;
        let resp = match self.agent.run(req) {
            Ok(resp) => resp,
            Err(_) if token.is_cancelled() => return Ok(Attempt::Done(PostOutcome::Abandoned)),
            Err(e) => return Err(self.err(format!("POST {target}: {e}"))),
        };
        let status = resp.status().as_u16();
        let header = |n: &str| resp.headers().get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
        if let Some(id) = header("mcp-session-id") {
            let new = self.lock().session_id.replace(id.clone()).as_deref() != Some(id.as_str());
            if new {
                self.deliver(Inbound::SessionId(id));
            }
        }
        let content_type = header("content-type").unwrap_or_default().to_ascii_lowercase();
        let www_authenticate = header("www-authenticate");
        let mut reader = resp.into_body().into_reader();
        if status == 404 && session.is_some() && mode == Mode::Streamable {
            self.lock().session_id = None;
            return Ok(Attempt::Done(PostOutcome::SessionExpired));
        }
        if matches!(status, 401 | 403) && self.auth.is_some() {
            let _ = read_capped(&mut reader, 64 * 1024);
            return Ok(Attempt::Unauthorized { status, www_authenticate });
        }
        if !(200..300).contains(&status) {
            let bytes = read_capped(&mut reader, 64 * 1024).unwrap_or_default();
            let delivered = looks_like_message(&bytes) && self.deliver(Inbound::Message(bytes.clone()));
            return Ok(Attempt::Done(PostOutcome::Rejected { status, body: excerpt(&bytes), delivered }));
        }
        if matches!(mode, Mode::LegacySse { .. }) {
            // Answers come on the GET stream; whatever this body holds is not one.
            let _ = read_capped(&mut reader, 64 * 1024);
            return Ok(Attempt::Done(PostOutcome::Accepted));
        }
        if content_type.starts_with("text/event-stream") {
            let expect = request_id(body);
            let ctx = StreamCtx {
                link: self.stream_handle(),
                expect,
                server: self.name.clone(),
                url: self.url.clone(),
                session,
                version,
                token: token.clone(),
            };
            let reader = Cancellable { inner: reader, token: token.clone() };
            thread::Builder::new()
                .name(format!("mcp-{}-sse", self.name))
                .spawn(move || ctx.pump(Box::new(reader), DEFAULT_RETRY))
                .map_err(|e| self.err(format!("thread: {e}")))?;
            return Ok(Attempt::Done(PostOutcome::Streaming));
        }
        let bytes = match read_capped(&mut reader, MAX_BODY_BYTES) {
            Ok(bytes) => bytes,
            Err(_) if token.is_cancelled() => return Ok(Attempt::Done(PostOutcome::Abandoned)),
            Err(e) => return Err(self.err(e)),
        };
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Attempt::Done(PostOutcome::Accepted));
        }
        self.deliver(Inbound::Message(bytes));
        Ok(Attempt::Done(PostOutcome::Delivered))
    }

    /// [`post`](Self::post) in the background, on the link's bounded pool
    /// (requests on up to [`MAX_POST_THREADS`] threads, notifications and
    /// responses on one of their own): the outcome arrives on the link's
    /// channel as [`Inbound::Posted`] (after any message the answer
    /// carried), so a slow JSON answer never holds up the session's driver.
    ///
    /// `notifications/initialized` is the exception: it is posted before
    /// this returns, because a server sets itself up when it has it (tools
    /// it registers only for clients that declared a capability), and the
    /// requests that follow must not overtake it.
    pub fn post_in_background(self: &Arc<Self>, body: Vec<u8>, extra: Vec<(String, String)>) -> Result<(), McpError> {
        if is_initialized_notification(&body) {
            let outcome = self.post(&body, &extra);
            self.deliver(Inbound::Posted { request: None, outcome });
            return Ok(());
        }
        let lane = match request_id(&body) {
            Some(id) => {
                // Registered now, so an abandon while it waits in the queue stops it.
                self.streams().tokens.entry(key(&id)).or_default();
                &self.requests
            }
            None => &self.control,
        };
        lane.submit(Arc::downgrade(self), &self.name, (body, extra)).map_err(|e| self.err(format!("thread: {e}")))
    }

    /// Opens the server's standalone `GET` stream (server notifications and
    /// requests outside any call, such as `list_changed`). `Ok(false)` when
    /// the server offers none (`405`).
    pub fn listen(&self) -> Result<bool, McpError> {
        let (session, version) = {
            let st = self.lock();
            (st.session_id.clone(), st.protocol_version.clone())
        };
        let resp = self.get(&self.url, session.as_deref(), version.as_deref(), None)?;
        let status = resp.status().as_u16();
        if !(200..300).contains(&status) {
            return Ok(false);
        }
        let token = CancelToken::new();
        // A new standalone stream (a new session) replaces the old one.
        if let Some(old) = self.streams().tokens.insert("listen".into(), token.clone()) {
            old.cancel();
        }
        let ctx = StreamCtx {
            link: self.stream_handle(),
            expect: None,
            server: self.name.clone(),
            url: self.url.clone(),
            session,
            version,
            token: token.clone(),
        };
        let reader = Cancellable { inner: resp.into_body().into_reader(), token };
        thread::Builder::new()
            .name(format!("mcp-{}-listen", self.name))
            .spawn(move || ctx.pump(Box::new(reader), DEFAULT_RETRY))
            .map_err(|e| self.err(format!("thread: {e}")))?;
        Ok(true)
    }

    /// Switches to the 2024-11-05 HTTP+SSE transport: opens the `GET` stream
    /// and waits (up to `timeout`) for its `endpoint` event.
    pub fn fall_back_to_sse(&self, timeout: Duration) -> Result<(), McpError> {
        let resp = self.get(&self.url, None, None, None)?;
        let status = resp.status().as_u16();
        let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        if !(200..300).contains(&status) || !ct.to_ascii_lowercase().starts_with("text/event-stream") {
            return Err(self.err(format!("GET {} for the HTTP+SSE transport answered {status} ({ct})", self.url)));
        }
        let (endpoint_tx, endpoint_rx) = async_channel::bounded::<String>(1);
        let link = self.stream_handle();
        let (server, base) = (self.name.clone(), self.url.clone());
        let mut reader = resp.into_body().into_reader();
        thread::Builder::new()
            .name(format!("mcp-{}-sse-legacy", self.name))
            .spawn(move || {
                let mut dec = SseDecoder::new();
                let mut events = Vec::new();
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    let n = match reader.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    dec.feed(buf.get(..n).unwrap_or_default(), &mut events);
                    for ev in events.drain(..) {
                        if ev.event.as_deref() == Some("endpoint") {
                            let _ = endpoint_tx.try_send(join_url(&base, ev.data.trim()));
                        } else if !link.deliver_event(ev, None) {
                            return;
                        }
                    }
                }
                link.deliver(Inbound::Exited(ServerExit {
                    status: format!("{server}: the HTTP+SSE stream ended"),
                    stderr_tail: String::new(),
                }));
            })
            .map_err(|e| self.err(format!("thread: {e}")))?;
        let post_url = recv_deadline(&endpoint_rx, Instant::now() + timeout)
            .ok_or_else(|| self.err("the HTTP+SSE stream sent no endpoint event"))?;
        self.lock().mode = Mode::LegacySse { post_url };
        Ok(())
    }

    /// Ends the session (`DELETE`, when one was assigned) and stops
    /// delivering. Idempotent.
    pub fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.requests.close();
        self.control.close();
        // Every stream still open ends now (their threads with them).
        let tokens: Vec<CancelToken> = self.streams().tokens.drain().map(|(_, t)| t).collect();
        for t in tokens {
            t.cancel();
        }
        let (session, version) = {
            let mut st = self.lock();
            (st.session_id.take(), st.protocol_version.clone())
        };
        if let Some(id) = session {
            let mut req = ureq::http::Request::builder().method("DELETE").uri(self.url.as_str());
            for (k, v) in &self.request_headers().0 {
                req = req.header(k.as_str(), v.as_str());
            }
            req = req.header("mcp-session-id", id.as_str());
            if let Some(v) = &version {
                req = req.header("mcp-protocol-version", v.as_str());
            }
            if let Ok(req) = req.body(()) {
                // 405 (the server keeps sessions itself) and failures are fine: we are leaving.
                let _ = self.agent.run(req);
            }
        }
        self.rx.close();
    }

    fn get(
        &self,
        url: &str,
        session: Option<&str>,
        version: Option<&str>,
        last_event_id: Option<&str>,
    ) -> Result<ureq::http::Response<ureq::Body>, McpError> {
        get(&self.agent, &self.request_headers().0, url, session, version, last_event_id).map_err(|e| self.err(e))
    }

    fn deliver(&self, item: Inbound) -> bool {
        !self.closed.load(Ordering::SeqCst) && self.tx.try_send(item).is_ok()
    }

    fn stream_handle(&self) -> StreamHandle {
        StreamHandle {
            agent: self.agent.clone(),
            headers: self.request_headers().0,
            tx: self.tx.clone(),
            closed: self.closed.clone(),
            streams: self.streams.clone(),
        }
    }
}

impl Drop for HttpLink {
    fn drop(&mut self) {
        self.close();
    }
}

/// What a stream thread needs of its link.
struct StreamHandle {
    agent: ureq::Agent,
    headers: Vec<(String, String)>,
    tx: async_channel::Sender<Inbound>,
    closed: Arc<AtomicBool>,
    streams: Arc<Mutex<Streams>>,
}

impl StreamHandle {
    fn deliver(&self, item: Inbound) -> bool {
        !self.closed.load(Ordering::SeqCst) && self.tx.try_send(item).is_ok()
    }

    /// Delivers one SSE event's message (`:` keep-alives and the empty
    /// priming event carry none).
    fn deliver_event(&self, ev: SseEvent, stream_of: Option<&Value>) -> bool {
        if ev.data.trim().is_empty() {
            return true;
        }
        match (ev.event.as_deref(), stream_of) {
            (None | Some("message"), None) => self.deliver(Inbound::Message(ev.data.into_bytes())),
            (None | Some("message"), Some(id)) => {
                self.deliver(Inbound::Streamed { message: ev.data.into_bytes(), request: id.clone() })
            }
            (Some(_), _) => true, // an event type MCP does not define: ignored, as SSE says
        }
    }
}

/// One SSE response stream.
struct StreamCtx {
    link: StreamHandle,
    /// The id of the request whose response ends this stream (`None`: the
    /// standalone stream, which has no end of its own).
    expect: Option<Value>,
    server: String,
    url: String,
    session: Option<String>,
    version: Option<String>,
    /// Shuts the stream when the request is abandoned.
    token: CancelToken,
}

impl StreamCtx {
    /// Reads the stream to its end. One that ends before the response it
    /// carries is reported as lost, with the last event id read and the
    /// server's `retry:` kept for a reattach; the session decides what follows.
    fn pump(self, mut reader: Box<dyn Read + Send>, mut retry: Duration) {
        let mut last_id: Option<String> = None;
        let mut dec = SseDecoder::new();
        let answered = matches!(self.read_stream(&mut reader, &mut dec, &mut last_id, &mut retry), Ok(true));
        let Some(expect) = &self.expect else { return };
        {
            let mut st = self.link.streams.lock().unwrap_or_else(|e| e.into_inner());
            st.tokens.remove(&key(expect));
            if !answered && !self.token.is_cancelled() {
                st.retry.insert(key(expect), retry);
            }
        }
        if !answered && !self.token.is_cancelled() {
            self.link.deliver(Inbound::StreamLost { request: expect.clone(), last_event_id: last_id });
        }
    }

    /// Waits `retry`, then `GET`s the stream again from `last_event_id`.
    fn reattach(self, retry: Duration, last_event_id: &str) {
        let Some(expect) = self.expect.clone() else { return };
        if self.token.sleep(retry) || self.link.closed.load(Ordering::SeqCst) {
            return; // abandoned meanwhile
        }
        let resp = with_cancel(&self.token, || {
            get(
                &self.link.agent,
                &self.link.headers,
                &self.url,
                self.session.as_deref(),
                self.version.as_deref(),
                Some(last_event_id),
            )
        });
        let lost = |why: String, again: Option<String>| {
            self.link.streams.lock().unwrap_or_else(|e| e.into_inner()).tokens.remove(&key(&expect));
            if !self.token.is_cancelled() {
                self.link.deliver(Inbound::Malformed(why));
                self.link.deliver(Inbound::StreamLost { request: expect.clone(), last_event_id: again });
            }
        };
        match resp {
            Ok(resp) if resp.status().is_success() => {
                let reader = Cancellable { inner: resp.into_body().into_reader(), token: self.token.clone() };
                self.pump(Box::new(reader), retry);
            }
            Ok(resp) => lost(
                format!(
                    "{}: resuming the SSE stream from event {last_event_id} was refused ({})",
                    self.server,
                    resp.status().as_u16()
                ),
                None,
            ),
            Err(e) => lost(format!("{}: resuming the SSE stream: {e}", self.server), Some(last_event_id.to_string())),
        }
    }

    /// Reads one stream to its end. `Ok(true)` once the expected response passed.
    fn read_stream(
        &self,
        reader: &mut Box<dyn Read + Send>,
        dec: &mut SseDecoder,
        last_id: &mut Option<String>,
        retry: &mut Duration,
    ) -> Result<bool, String> {
        let mut events = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        let mut finished = false;
        while !finished {
            let read = reader.read(&mut buf);
            // The decoder forgets both at `finish`: keep them first.
            if let Some(ms) = dec.retry() {
                *retry = Duration::from_millis(ms);
            }
            if let Some(id) = dec.last_event_id() {
                *last_id = Some(id.to_string());
            }
            let n = match read {
                Ok(n) => n,
                Err(e) => return Err(e.to_string()),
            };
            if n == 0 {
                dec.finish(&mut events);
                finished = true;
            } else {
                dec.feed(buf.get(..n).unwrap_or_default(), &mut events);
            }
            for ev in events.drain(..) {
                if let Some(id) = &ev.id {
                    *last_id = Some(id.clone());
                }
                let answers = self.expect.as_ref().is_some_and(|want| is_response_to(&ev.data, want));
                if !self.link.deliver_event(ev, self.expect.as_ref()) {
                    return Ok(true);
                }
                if answers {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }
}

fn get(
    agent: &ureq::Agent,
    headers: &[(String, String)],
    url: &str,
    session: Option<&str>,
    version: Option<&str>,
    last_event_id: Option<&str>,
) -> Result<ureq::http::Response<ureq::Body>, String> {
    let mut req = ureq::http::Request::builder().method("GET").uri(url).header("accept", "text/event-stream");
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    if let Some(id) = session {
        req = req.header("mcp-session-id", id);
    }
    if let Some(v) = version {
        req = req.header("mcp-protocol-version", v);
    }
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    let req = req.body(()).map_err(|e| format!("bad request: {e}"))?;
    agent.run(req).map_err(|e| format!("GET {url}: {e}"))
}

/// The `id` of a JSON-RPC request body (`None` for a notification or a response).
fn request_id(body: &[u8]) -> Option<Value> {
    let v: Value = serde_json::from_slice(body).ok()?;
    if v.get("method").is_some() {
        v.get("id").cloned()
    } else {
        None
    }
}

fn is_initialized_notification(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body)
        .is_ok_and(|v| v.get("method").and_then(Value::as_str) == Some("notifications/initialized"))
}

/// Whether `data` is the response (result or error) to request `id`.
fn is_response_to(data: &str, id: &Value) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(data) else { return false };
    v.get("id") == Some(id) && v.get("method").is_none() && (v.get("result").is_some() || v.get("error").is_some())
}

fn looks_like_message(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes).is_ok_and(|v| v.get("jsonrpc").is_some())
}

fn read_capped(reader: &mut impl Read, cap: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let n = reader.take(cap as u64 + 1).read_to_end(&mut out).map_err(|e| format!("reading the body: {e}"))?;
    if n > cap {
        return Err(format!("a response body exceeded the {cap}-byte cap"));
    }
    Ok(out)
}

fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut end = text.len().min(300);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].trim().to_string()
}

/// Resolves the `endpoint` event's URL against the stream's URL.
fn join_url(base: &str, endpoint: &str) -> String {
    if endpoint.starts_with("http://") || endpoint.starts_with("https://") {
        return endpoint.to_string();
    }
    let scheme_end = base.find("://").map_or(0, |p| p + 3);
    let origin_end = base[scheme_end..].find('/').map_or(base.len(), |p| scheme_end + p);
    if endpoint.starts_with('/') {
        format!("{}{endpoint}", &base[..origin_end])
    } else {
        let dir_end = base.rfind('/').filter(|&p| p >= origin_end).map_or(base.len(), |p| p + 1);
        let dir = &base[..dir_end];
        if dir.ends_with('/') {
            format!("{dir}{endpoint}")
        } else {
            format!("{dir}/{endpoint}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn endpoint_urls_resolve_against_the_stream_url() {
        assert_eq!(join_url("http://h:1/sse", "/messages?s=1"), "http://h:1/messages?s=1");
        assert_eq!(join_url("http://h:1/a/sse", "messages?s=1"), "http://h:1/a/messages?s=1");
        assert_eq!(join_url("http://h:1", "/m"), "http://h:1/m");
        assert_eq!(join_url("http://h:1/sse", "https://o/m"), "https://o/m");
    }

    #[test]
    fn responses_are_matched_by_id_only() {
        let id = json!(3);
        assert!(is_response_to(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#, &id));
        assert!(is_response_to(r#"{"jsonrpc":"2.0","id":3,"error":{"code":1,"message":""}}"#, &id));
        // A server request that reuses the number is not the response.
        assert!(!is_response_to(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#, &id));
        assert!(!is_response_to(r#"{"jsonrpc":"2.0","id":"3","result":{}}"#, &id));
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","id":"a","method":"x"}"#), Some(json!("a")));
        assert_eq!(request_id(br#"{"jsonrpc":"2.0","method":"x"}"#), None);
    }
}
