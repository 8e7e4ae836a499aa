//! The Streamable HTTP transport (with the 2024-11-05 HTTP+SSE transport as
//! its fallback), on ureq.
//!
//! Every message is its own `POST` to the one endpoint with `Accept:
//! application/json, text/event-stream`. A JSON answer is delivered at once;
//! an SSE answer is read on its own thread, and every message on it (server
//! requests and notifications before the response, then the response) is
//! delivered in order on the link's channel, so the session can answer a
//! server's request while the stream is still open. When an SSE stream ends
//! before the response it carries, and the server gave its events ids, the
//! stream is resumed with `GET` + `Last-Event-ID` after the server's
//! `retry:` delay (the spec's resumability).
//!
//! Sessions: the `Mcp-Session-Id` the server assigns is sent on every later
//! request; a `404` on a request that carried it means the session expired
//! ([`PostOutcome::SessionExpired`]: the session re-initializes, and a
//! `tools/call` that was in flight is in doubt — never replayed here).
//! [`HttpLink::close`] ends the session with `DELETE`.
//!
//! Static headers (`Authorization: Bearer ${TOKEN}`) are sent on every
//! request and appear nowhere else: not in errors, not in `Debug`.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use nexus_proto::sse::{SseDecoder, SseEvent};
use serde_json::Value;

use super::auth::{Authorizer, Step};
use super::stdio::recv_deadline;
use super::{Inbound, McpError, ServerExit};

/// A response body larger than this is refused.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// How many times one SSE stream is resumed before the request fails.
const MAX_RESUMES: u32 = 5;
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
            agent: ureq::Agent::new_with_config(config),
            state: Arc::new(Mutex::new(State { mode: Mode::Streamable, session_id: None, protocol_version: None })),
            tx,
            rx,
            closed: Arc::new(AtomicBool::new(false)),
            auth: None,
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
    /// `Mcp-Name`, `Mcp-Param-*` for the modern era).
    pub fn post(&self, body: &[u8], extra: &[(String, String)]) -> Result<PostOutcome, McpError> {
        // The authorization seam: a 401/403 goes to the authorizer, which
        // refreshes or authorizes (or hands back a person's request); the
        // message is then sent again with the new token.
        let mut retries = 0;
        loop {
            let (headers, bearer) = self.request_headers();
            match self.post_once(body, extra, &headers)? {
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
        let resp = self.agent.run(req).map_err(|e| self.err(format!("POST {target}: {e}")))?;
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
            };
            thread::Builder::new()
                .name(format!("mcp-{}-sse", self.name))
                .spawn(move || ctx.pump(Box::new(reader)))
                .map_err(|e| self.err(format!("thread: {e}")))?;
            return Ok(Attempt::Done(PostOutcome::Streaming));
        }
        let bytes = read_capped(&mut reader, MAX_BODY_BYTES).map_err(|e| self.err(e))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Attempt::Done(PostOutcome::Accepted));
        }
        self.deliver(Inbound::Message(bytes));
        Ok(Attempt::Done(PostOutcome::Delivered))
    }

    /// [`post`](Self::post) on its own thread: the outcome arrives on the
    /// link's channel as [`Inbound::Posted`] (after any message the answer
    /// carried), so a slow JSON answer never holds up the session's driver.
    pub fn post_in_background(self: &Arc<Self>, body: Vec<u8>, extra: Vec<(String, String)>) -> Result<(), McpError> {
        let link = self.clone();
        thread::Builder::new()
            .name(format!("mcp-{}-post", self.name))
            .spawn(move || {
                let outcome = link.post(&body, &extra);
                link.deliver(Inbound::Posted { request: request_id(&body), outcome });
            })
            .map(|_| ())
            .map_err(|e| self.err(format!("thread: {e}")))
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
        let ctx = StreamCtx {
            link: self.stream_handle(),
            expect: None,
            server: self.name.clone(),
            url: self.url.clone(),
            session,
            version,
        };
        let reader = resp.into_body().into_reader();
        thread::Builder::new()
            .name(format!("mcp-{}-listen", self.name))
            .spawn(move || ctx.pump(Box::new(reader)))
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

/// One SSE response stream and how to resume it.
struct StreamCtx {
    link: StreamHandle,
    /// The id of the request whose response ends this stream (`None`: the
    /// standalone stream, which has no end of its own).
    expect: Option<Value>,
    server: String,
    url: String,
    session: Option<String>,
    version: Option<String>,
}

impl StreamCtx {
    fn pump(self, first: Box<dyn Read + Send>) {
        let mut reader = first;
        let mut resumes = 0;
        let mut retry = DEFAULT_RETRY;
        let mut last_id: Option<String> = None;
        loop {
            let mut dec = SseDecoder::new();
            if let Ok(true) = self.read_stream(&mut reader, &mut dec, &mut last_id, &mut retry) {
                return; // the response arrived
            }
            // The stream ended without its response. Resumable only when the
            // server gave its events ids; the standalone stream just ends.
            let Some(id) = last_id.clone().filter(|_| self.expect.is_some() && resumes < MAX_RESUMES) else {
                if self.expect.is_some() {
                    self.link.deliver(Inbound::Malformed(format!(
                        "the SSE stream for request {} ended before its response{}",
                        self.expect.as_ref().map(Value::to_string).unwrap_or_default(),
                        if last_id.is_none() { " (no event ids to resume from)" } else { " (resumes exhausted)" }
                    )));
                }
                return;
            };
            resumes += 1;
            thread::sleep(retry);
            if self.link.closed.load(Ordering::SeqCst) {
                return;
            }
            match get(
                &self.link.agent,
                &self.link.headers,
                &self.url,
                self.session.as_deref(),
                self.version.as_deref(),
                Some(&id),
            ) {
                Ok(resp) if resp.status().is_success() => reader = Box::new(resp.into_body().into_reader()),
                Ok(resp) => {
                    self.link.deliver(Inbound::Malformed(format!(
                        "{}: resuming the SSE stream from event {id} was refused ({})",
                        self.server,
                        resp.status().as_u16()
                    )));
                    return;
                }
                Err(e) => {
                    self.link.deliver(Inbound::Malformed(format!("{}: resuming the SSE stream: {e}", self.server)));
                    return;
                }
            }
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
