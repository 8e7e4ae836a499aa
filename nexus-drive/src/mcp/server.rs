//! One server's driver: a thread that owns the sans-IO
//! [`Session`] and the server's link, and does
//! what the session asks.
//!
//! Callers (the tools, from any thread or task) talk to it over channels:
//! a command in, the outcome back on a one-shot channel that a blocking
//! caller waits on and an async caller awaits. Everything the server sends
//! arrives on the link's channel; the thread waits on both and on the
//! session's next timer, so one slow call never holds up another.
//!
//! A stdio server that exits fails its calls in flight (the session ends
//! them with the exit status and stderr tail) and is started again when the
//! session next has something to send.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_lite::future;
use nexus_proto::mcp::{
    CallRequest, Era, Event, HandleError, Input, McpTool, Output, RequestId, Session, SessionConfig, TransportKind,
};
use nexus_proto::{Answer, Request, Timestamp, ToolResult};
use serde_json::Value;

use super::auth::Authorizer;
use super::config::{ServerConfig, Transport};
use super::http::{HttpLink, PostOutcome};
use super::stdio::{StdioLink, StdioOptions};
use super::{Inbound, McpError};

/// How long connecting waits for a legacy server to answer its standalone
/// `GET` stream before sending requests anyway.
const STANDALONE_STREAM_WAIT: Duration = Duration::from_secs(2);

/// What a call came to.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// Its result (errors included: the model sees them).
    Done(ToolResult),
    /// The call needs the host: reply `Pending(request)`.
    Pending(Request),
}

enum Command {
    List(async_channel::Sender<Result<Vec<McpTool>, String>>),
    Call(Box<CallRequest>, async_channel::Sender<CallOutcome>),
    /// The answer to a live elicitation of `call` (in this process).
    Answer {
        call: String,
        answer: Answer,
        reply: async_channel::Sender<CallOutcome>,
    },
    Cancel(String),
    Stop(async_channel::Sender<()>),
}

/// Options for every server of a source.
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// stdio: the line cap and the shutdown grace.
    pub stdio: StdioOptions,
    /// HTTP: the connect timeout.
    pub connect_timeout: Duration,
    /// Declare elicitation to servers.
    pub elicitation: bool,
    /// How long a stdio server's first answer (to the modern probe) may take
    /// before it is taken for a legacy server (default 30 s).
    pub stdio_probe_timeout: Duration,
    /// OAuth for HTTP servers (MCP authorization); `None`: static headers only.
    pub auth: Option<Arc<Authorizer>>,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            stdio: StdioOptions::default(),
            connect_timeout: Duration::from_secs(10),
            elicitation: true,
            stdio_probe_timeout: Duration::from_secs(30),
            auth: None,
        }
    }
}

/// A handle on one server's driver thread. Cloning shares the thread; the
/// last handle dropped stops it (and the server).
#[derive(Clone)]
pub struct ServerHandle {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    name: String,
    commands: async_channel::Sender<Command>,
    errors: Arc<Mutex<Vec<String>>>,
    authorization: Arc<Mutex<Option<String>>>,
    auth: Option<Arc<Authorizer>>,
}

impl Drop for HandleInner {
    fn drop(&mut self) {
        let (tx, rx) = async_channel::bounded(1);
        if self.commands.try_send(Command::Stop(tx)).is_ok() {
            let _ = rx.recv_blocking();
        }
    }
}

impl std::fmt::Debug for ServerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHandle").field("name", &self.inner.name).finish_non_exhaustive()
    }
}

impl ServerHandle {
    /// Starts the driver for `config` (the server itself starts when first needed).
    pub fn start(config: &ServerConfig, options: &DriverOptions) -> Result<ServerHandle, McpError> {
        let kind = match config.transport {
            Transport::Stdio { .. } => TransportKind::Stdio,
            Transport::Http { .. } => TransportKind::Http,
        };
        let mut cfg = SessionConfig::new(config.name.clone(), kind);
        cfg.elicitation = options.elicitation;
        cfg.era = config.era;
        if kind == TransportKind::Stdio {
            // A legacy stdio server answers the probe with an error at once;
            // only a silent one waits it out. A slow start (an interpreter
            // importing its SDK on a loaded machine) should not read as
            // silence: some servers bind the connection to the era of the
            // first request they read, the probe, and then refuse initialize.
            // Should the answer still come after the timeout, the session
            // switches to the modern era then.
            cfg.probe_timeout_ms = options.stdio_probe_timeout.as_millis() as u64;
        }
        cfg.max_message_bytes = options.stdio.max_message_bytes;
        if let Some(ms) = config.timeout_ms {
            cfg.call_timeout_ms = ms;
        }
        let session = Session::new(cfg).map_err(|e| McpError::Config(format!("server {:?}: {e}", config.name)))?;
        let (commands, rx) = async_channel::unbounded();
        let errors = Arc::new(Mutex::new(Vec::new()));
        let authorization = Arc::new(Mutex::new(None));
        let driver = Driver {
            config: config.clone(),
            options: options.clone(),
            session,
            link: None,
            commands: rx,
            lists: Vec::new(),
            calls: HashMap::new(),
            finished: HashMap::new(),
            live: HashMap::new(),
            errors: errors.clone(),
            last_now: 0,
            initialize: None,
            authorization: authorization.clone(),
        };
        thread::Builder::new()
            .name(format!("mcp-{}", config.name))
            .spawn(move || driver.run())
            .map_err(|e| McpError::Spawn { server: config.name.clone(), message: format!("thread: {e}") })?;
        Ok(ServerHandle {
            inner: Arc::new(HandleInner {
                name: config.name.clone(),
                commands,
                errors,
                authorization,
                auth: options.auth.clone(),
            }),
        })
    }

    /// The server's name (its config key).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The server's tool list (connecting first when needed).
    pub async fn list_tools(&self) -> Result<Vec<McpTool>, McpError> {
        let (tx, rx) = async_channel::bounded(1);
        self.send(Command::List(tx))?;
        rx.recv()
            .await
            .map_err(|_| self.stopped())?
            .map_err(|message| McpError::Protocol { server: self.inner.name.clone(), message })
    }

    /// Calls a tool (or resumes a suspended call: `req.resume`).
    pub async fn call(&self, req: CallRequest) -> Result<CallOutcome, McpError> {
        let (tx, rx) = async_channel::bounded(1);
        let key = req.call.clone();
        self.send(Command::Call(Box::new(req), tx))?;
        let guard = CancelOnDrop { handle: self, call: Some(key) };
        let out = rx.recv().await.map_err(|_| self.stopped());
        guard.disarm();
        out
    }

    /// Answers the live elicitation `answer.id` of `call` and waits for the
    /// call to go on. A call this process no longer holds (the question was
    /// asked in another process) is resumed as `fallback` instead, which the
    /// session ends as the spec says (in doubt, never re-run).
    pub async fn answer(&self, call: &str, answer: Answer, fallback: CallRequest) -> Result<CallOutcome, McpError> {
        let (tx, rx) = async_channel::bounded(1);
        self.send(Command::Answer { call: call.to_string(), answer, reply: tx.clone() })?;
        let guard = CancelOnDrop { handle: self, call: Some(call.to_string()) };
        let out = match rx.recv().await {
            Ok(CallOutcome::Done(r)) if r.output == NOT_HELD => {
                self.send(Command::Call(Box::new(fallback), tx))?;
                rx.recv().await.map_err(|_| self.stopped())
            }
            Ok(o) => Ok(o),
            Err(_) => Err(self.stopped()),
        };
        guard.disarm();
        out
    }

    /// The authorization request this server is waiting on (a `401` a
    /// person must answer), if any.
    pub fn authorization_request(&self) -> Option<Request> {
        let id = self.inner.authorization.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
        self.inner.auth.as_ref()?.request(&id)
    }

    /// Finishes the authorization `answer` answers (exchanging the code for
    /// tokens); the server's next request carries the token.
    pub fn complete_authorization(&self, answer: &Answer) -> Result<(), McpError> {
        let Some(auth) = &self.inner.auth else {
            return Err(McpError::Config(format!("server {:?} has no authorizer", self.inner.name)));
        };
        auth.complete(answer)
            .map_err(|e| McpError::Http { server: self.inner.name.clone(), message: e.to_string() })?;
        let mut open = self.inner.authorization.lock().unwrap_or_else(|e| e.into_inner());
        if open.as_deref() == Some(answer.id.as_str()) {
            *open = None;
        }
        Ok(())
    }

    /// Errors this server caused that belong to no call (bad lines, unknown
    /// response ids, a failed start), oldest first.
    pub fn errors(&self) -> Vec<String> {
        self.inner.errors.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn send(&self, c: Command) -> Result<(), McpError> {
        self.inner.commands.try_send(c).map_err(|_| self.stopped())
    }

    fn stopped(&self) -> McpError {
        McpError::Closed { server: self.inner.name.clone(), message: "was stopped".into(), stderr_tail: String::new() }
    }
}

/// A marker the driver answers an `Answer` with when it holds no such live question.
const NOT_HELD: &str = "\u{0}not held";

/// A call whose caller went away (a cancelled run dropped its future) is cancelled.
struct CancelOnDrop<'a> {
    handle: &'a ServerHandle,
    call: Option<String>,
}

impl CancelOnDrop<'_> {
    fn disarm(mut self) {
        self.call = None;
    }
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            let _ = self.handle.inner.commands.try_send(Command::Cancel(call));
        }
    }
}

enum Link {
    Stdio(StdioLink),
    Http(Arc<HttpLink>),
}

impl Link {
    fn inbox(&self) -> &async_channel::Receiver<Inbound> {
        match self {
            Link::Stdio(l) => l.inbox(),
            Link::Http(l) => l.inbox(),
        }
    }

    fn close(&self) {
        match self {
            Link::Stdio(l) => {
                l.shutdown();
            }
            Link::Http(l) => l.close(),
        }
    }
}

/// What the thread waits for.
enum Woken {
    Command(Command),
    Inbound(Inbound),
    CommandsGone,
    LinkGone,
    Timer,
}

struct Driver {
    config: ServerConfig,
    options: DriverOptions,
    session: Session,
    link: Option<Link>,
    commands: async_channel::Receiver<Command>,
    lists: Vec<async_channel::Sender<Result<Vec<McpTool>, String>>>,
    calls: HashMap<String, async_channel::Sender<CallOutcome>>,
    /// Results of calls whose caller was not waiting (it went to ask the host).
    finished: HashMap<String, CallOutcome>,
    /// Live elicitations given to a caller: the call they belong to.
    live: HashMap<String, String>,
    errors: Arc<Mutex<Vec<String>>>,
    last_now: u64,
    /// HTTP: the `initialize` in flight (id, message, headers), to post again
    /// over the 2024-11-05 HTTP+SSE transport if the endpoint refuses it.
    initialize: Option<PendingInit>,
    /// The id of the authorization request a refusal left open (shared with the handle).
    authorization: Arc<Mutex<Option<String>>>,
}

/// An `initialize` in flight over HTTP: its id, message and headers.
type PendingInit = (Value, Vec<u8>, Vec<(String, String)>);

const MAX_KEPT_ERRORS: usize = 64;

impl Driver {
    fn now(&mut self) -> Timestamp {
        let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        // The session refuses time going backwards; a wall clock may step back.
        self.last_now = self.last_now.max(ms);
        Timestamp(self.last_now)
    }

    fn note(&self, message: String) {
        let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
        if errors.len() >= MAX_KEPT_ERRORS {
            errors.remove(0);
        }
        errors.push(message);
    }

    fn input(&mut self, input: Input<'_>) {
        let now = self.now();
        match self.session.handle_input(now, input) {
            Ok(()) => {}
            Err(HandleError::Protocol(e)) => self.note(format!("MCP server {:?}: {e}", self.config.name)),
            Err(e) => self.note(format!("MCP server {:?}: {e}", self.config.name)),
        }
    }

    fn run(mut self) {
        loop {
            let until = self.drain();
            match self.wait(until) {
                Woken::Command(Command::Stop(done)) => {
                    if let Some(link) = self.link.take() {
                        link.close();
                    }
                    let _ = done.try_send(());
                    return;
                }
                Woken::CommandsGone => {
                    if let Some(link) = self.link.take() {
                        link.close();
                    }
                    return;
                }
                Woken::Command(c) => self.command(c),
                Woken::Inbound(i) => self.inbound(i),
                Woken::LinkGone => {
                    self.link = None;
                    self.input(Input::Closed { reason: "the connection closed".into() });
                }
                Woken::Timer => self.input(Input::Timeout),
            }
        }
    }

    fn wait(&mut self, until: Option<Timestamp>) -> Woken {
        let commands = self.commands.clone();
        let inbox = self.link.as_ref().map(|l| l.inbox().clone());
        let now = self.now();
        let timer = until.map(|u| Duration::from_millis(now.ms_until(u)));
        future::block_on(future::or(
            future::or(
                async {
                    match commands.recv().await {
                        Ok(c) => Woken::Command(c),
                        Err(_) => Woken::CommandsGone,
                    }
                },
                async {
                    match &inbox {
                        Some(rx) => match rx.recv().await {
                            Ok(i) => Woken::Inbound(i),
                            Err(_) => Woken::LinkGone,
                        },
                        None => future::pending().await,
                    }
                },
            ),
            async {
                match timer {
                    Some(d) => {
                        smol::Timer::after(d).await;
                        Woken::Timer
                    }
                    None => future::pending().await,
                }
            },
        ))
    }

    fn command(&mut self, c: Command) {
        match c {
            Command::List(reply) => {
                self.lists.push(reply);
                self.input(Input::ListTools);
            }
            Command::Call(req, reply) => {
                let key = req.call.clone();
                if let Some(done) = self.finished.remove(&key) {
                    let _ = reply.try_send(done);
                    return;
                }
                self.calls.insert(key.clone(), reply);
                let now = self.now();
                if let Err(e) = self.session.handle_input(now, Input::Call(*req)) {
                    if let Some(reply) = self.calls.remove(&key) {
                        let _ = reply.try_send(CallOutcome::Done(ToolResult::error(format!(
                            "MCP server {:?}: {e}",
                            self.config.name
                        ))));
                    }
                }
            }
            Command::Answer { call, answer, reply } => {
                if self.live.remove(&answer.id).is_none() {
                    // Asked in another process (or already over): let the caller fall back.
                    match self.finished.remove(&call) {
                        Some(done) => {
                            let _ = reply.try_send(done);
                        }
                        None => {
                            let _ = reply.try_send(CallOutcome::Done(ToolResult::error(NOT_HELD)));
                        }
                    }
                    return;
                }
                if let Some(done) = self.finished.remove(&call) {
                    let _ = reply.try_send(done);
                    return;
                }
                self.calls.insert(call, reply);
                self.input(Input::Answer(answer));
            }
            Command::Cancel(call) => {
                self.calls.remove(&call);
                self.input(Input::Cancel { call });
            }
            Command::Stop(_) => {} // handled in run
        }
    }

    fn inbound(&mut self, i: Inbound) {
        match i {
            Inbound::Message(m) => self.input(Input::Received { message: &m, stream_of: None }),
            Inbound::Streamed { message, request } => {
                let id = request_id(&request);
                self.input(Input::Received { message: &message, stream_of: id });
            }
            Inbound::SessionId(id) => self.input(Input::SessionId(id)),
            Inbound::Malformed(why) => self.note(format!("MCP server {:?}: {why}", self.config.name)),
            Inbound::StreamLost { request, last_event_id } => {
                if let Some(id) = request_id(&request) {
                    self.input(Input::StreamLost { id, last_event_id });
                }
            }
            Inbound::Exited(exit) => {
                self.link = None;
                let reason = if exit.stderr_tail.is_empty() {
                    exit.status
                } else {
                    format!("{}; its stderr ends with:\n{}", exit.status, exit.stderr_tail)
                };
                self.input(Input::Closed { reason });
            }
            Inbound::Posted { request, outcome } => match outcome {
                Ok(PostOutcome::SessionExpired) => self.input(Input::SessionExpired),
                // The authorization seam: the message fails as refused, and
                // the calls it fails become the person's request (see `finish`).
                Ok(PostOutcome::AuthorizationRequired { request: auth }) => {
                    self.note(format!("MCP server {:?}: authorization required (request {auth})", self.config.name));
                    *self.authorization.lock().unwrap_or_else(|e| e.into_inner()) = Some(auth);
                    if let Some(id) = request.as_ref().and_then(request_id) {
                        self.input(Input::Refused { id, status: 401 });
                    }
                }
                Ok(PostOutcome::Rejected { status, delivered: false, body }) => {
                    if matches!(status, 400 | 404 | 405) && self.fall_back(request.as_ref()) {
                        return;
                    }
                    match request.as_ref().and_then(request_id) {
                        Some(id) => self.input(Input::Refused { id, status }),
                        None => self.note(format!("MCP server {:?}: HTTP {status}: {body}", self.config.name)),
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    self.note(e.to_string());
                    self.input(Input::Closed { reason: e.to_string() });
                }
            },
        }
    }

    /// Does everything the session asks until it waits; returns when to wake it.
    fn drain(&mut self) -> Option<Timestamp> {
        loop {
            match self.session.poll_output() {
                Output::Wait { until } => return until,
                Output::Transmit(t) => self.transmit(t.message, t.headers),
                Output::Abandon { id } => {
                    // HTTP: the request's POST or response stream is shut
                    // (in 2026 that is the cancellation). stdio: the session
                    // ignores what still comes for it.
                    if let Some(Link::Http(link)) = &self.link {
                        link.abandon(&id_value(&id));
                    }
                }
                Output::Reattach { id, last_event_id } => {
                    let reattached = match &self.link {
                        Some(Link::Http(link)) => link.reattach(&id_value(&id), &last_event_id).is_ok(),
                        _ => false,
                    };
                    if !reattached {
                        self.input(Input::StreamLost { id, last_event_id: None });
                    }
                }
                Output::ToolsListed { tools, .. } => {
                    for reply in self.lists.drain(..) {
                        let _ = reply.try_send(Ok(tools.clone()));
                    }
                }
                Output::ToolsFailed { error } => {
                    for reply in self.lists.drain(..) {
                        let _ = reply.try_send(Err(error.to_string()));
                    }
                }
                Output::CallDone { call, result } => self.finish(call, CallOutcome::Done(result)),
                Output::CallSuspended { call, request } => self.finish(call, CallOutcome::Pending(request)),
                Output::Elicit { call, request } => match call {
                    Some(call) if self.calls.contains_key(&call) => {
                        self.live.insert(request.id.clone(), call.clone());
                        self.finish(call, CallOutcome::Pending(request));
                    }
                    _ => {
                        // Nobody to ask: the server hears "cancel".
                        let answer = Answer::declined(request.id.clone(), "cancelled");
                        self.input(Input::Answer(answer));
                    }
                },
                Output::Event(Event::Connected { discovery }) => {
                    // Legacy HTTP: server requests and notifications outside
                    // any call (list_changed, some elicitations) come on the
                    // standalone GET stream, when the server offers one.
                    if let (Era::Legacy, Some(Link::Http(link))) = (discovery.era, &self.link) {
                        let link = link.clone();
                        let (opened, wait) = std::sync::mpsc::channel();
                        let spawned =
                            thread::Builder::new().name(format!("mcp-{}-get", self.config.name)).spawn(move || {
                                let _ = link.listen();
                                let _ = opened.send(());
                            });
                        // The stream is opened before the first request goes
                        // out, so a server never takes it for a reconnection of
                        // a call's stream; one that holds its answer head only
                        // delays the connection this long.
                        if spawned.is_ok() {
                            let _ = wait.recv_timeout(STANDALONE_STREAM_WAIT);
                        }
                    }
                }
                Output::Event(Event::ConnectFailed { error }) => {
                    let message = format!("MCP server {:?}: {error}", self.config.name);
                    self.note(message);
                }
                Output::Event(Event::ToolRejected { tool, reason }) => {
                    self.note(format!("MCP server {:?}: tool {tool:?} left out: {reason}", self.config.name));
                }
                Output::Event(Event::ElicitationWithdrawn { request }) => {
                    self.live.remove(&request);
                }
                Output::Event(_) => {}
            }
        }
    }

    fn finish(&mut self, call: String, outcome: CallOutcome) {
        let outcome = match outcome {
            CallOutcome::Done(r) if r.is_error => match self.authorization_request() {
                Some(request) => CallOutcome::Pending(request),
                None => CallOutcome::Done(r),
            },
            other => other,
        };
        match self.calls.remove(&call) {
            Some(reply) => {
                let _ = reply.try_send(outcome);
            }
            None => {
                self.finished.insert(call, outcome);
            }
        }
    }

    fn transmit(&mut self, message: Vec<u8>, headers: Vec<(String, String)>) {
        if self.link.is_none() {
            match self.connect() {
                Ok(link) => self.link = Some(link),
                Err(e) => {
                    self.note(e.to_string());
                    self.input(Input::Closed { reason: e.to_string() });
                    return;
                }
            }
        }
        if matches!(self.link, Some(Link::Http(_))) {
            let parsed: Option<Value> = serde_json::from_slice(&message).ok();
            if let Some(v) = parsed.filter(|v| v.get("method").and_then(Value::as_str) == Some("initialize")) {
                self.initialize = Some((v["id"].clone(), message.clone(), headers.clone()));
            }
        }
        let sent = match self.link.as_ref() {
            Some(Link::Stdio(l)) => l.send(&message),
            Some(Link::Http(l)) => l.post_in_background(message, headers),
            None => return,
        };
        if let Err(e) = sent {
            self.link = None;
            self.input(Input::Closed { reason: e.to_string() });
        }
    }

    /// An endpoint that refuses `initialize` (without a JSON-RPC answer) may
    /// be a 2024-11-05 HTTP+SSE server: open its GET stream and post the
    /// `initialize` again there. Whether it took over.
    fn fall_back(&mut self, request: Option<&Value>) -> bool {
        let Some((id, message, headers)) = self.initialize.take() else { return false };
        if request != Some(&id) {
            self.initialize = Some((id, message, headers));
            return false;
        }
        let Some(Link::Http(link)) = &self.link else { return false };
        if link.is_legacy_sse() || link.fall_back_to_sse(self.options.connect_timeout).is_err() {
            return false;
        }
        let link = link.clone();
        link.post_in_background(message, headers).is_ok()
    }

    /// The open authorization request of this server, if a refusal left one.
    fn authorization_request(&self) -> Option<Request> {
        let id = self.authorization.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
        self.options.auth.as_ref()?.request(&id)
    }

    fn connect(&self) -> Result<Link, McpError> {
        match &self.config.transport {
            Transport::Stdio { command, args, env, cwd } => {
                StdioLink::spawn(&self.config.name, command, args, env, cwd.as_deref(), &self.options.stdio)
                    .map(Link::Stdio)
            }
            Transport::Http { url, headers } => Ok(Link::Http(Arc::new(
                HttpLink::new(&self.config.name, url, headers.clone(), self.options.connect_timeout)
                    .with_authorizer(self.options.auth.clone()),
            ))),
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(link) = self.link.take() {
            link.close();
        }
    }
}

fn id_value(id: &RequestId) -> Value {
    match id {
        RequestId::Num(n) => Value::from(*n),
        RequestId::Str(s) => Value::from(s.as_str()),
    }
}

fn request_id(v: &Value) -> Option<RequestId> {
    match v {
        Value::Number(n) => n.as_i64().map(RequestId::Num),
        Value::String(s) => Some(RequestId::Str(s.clone())),
        _ => None,
    }
}
