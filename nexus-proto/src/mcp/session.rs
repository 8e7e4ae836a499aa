//! The per-server session machine: era detection, the handshake, tool
//! listing, and the bookkeeping of requests in flight. Calls live in
//! `calls.rs`; both are transitions of the one [`Session`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::{json, Map, Value};

use super::elicit::InputAsk;
use super::error::{HandleError, McpInputError, ProtocolError};
use super::jsonrpc::{self, code, Message, RequestId};
use super::tools::{header_params, header_value, McpTool};
use super::types::*;
use crate::suspend::Request;
use crate::time::Timestamp;

/// How many abandoned request ids are remembered so their late responses
/// are ignored quietly instead of reported.
const ABANDONED_MEMORY: usize = 4096;
/// How often one request's lost SSE stream is reattached (`Last-Event-ID`)
/// before the request is given up as in doubt.
pub(super) const MAX_REATTACHES: u32 = 5;

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Link {
    /// Nothing open; connects when there is work.
    Down,
    /// The modern probe (`server/discover`) is out.
    Probing { id: i64 },
    /// Legacy `initialize` is out, offering `version`.
    Initializing { id: i64, version: &'static str },
    /// Ready for requests.
    Up,
}

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Purpose {
    Discover,
    Initialize,
    List,
    Call(String),
}

/// A request of ours waiting for its response.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Outstanding {
    pub method: &'static str,
    pub purpose: Purpose,
    pub sent: Timestamp,
    /// `None` while its timer is paused (a live elicitation of the call is with the user).
    pub deadline: Option<Timestamp>,
    /// How often its lost stream was reattached.
    pub reattaches: u32,
}

/// A tool list being fetched page by page.
#[derive(Debug, Clone, PartialEq, Default)]
pub(super) struct Listing {
    pub cursors: BTreeSet<String>,
    pub pages: u32,
    pub tools: Vec<McpTool>,
}

/// A server request waiting for the host's answer.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LiveElicit {
    pub server_id: RequestId,
    pub call: Option<String>,
    pub ask: InputAsk,
    pub request: Request,
}

/// One MCP server's client session. See the module docs for the driving loop.
#[derive(Debug, Clone)]
pub struct Session {
    pub(super) cfg: SessionConfig,
    pub(super) link: Link,
    pub(super) discovery: Option<Discovery>,
    pub(super) session_id: Option<String>,
    pub(super) next_id: i64,
    pub(super) outstanding: BTreeMap<i64, Outstanding>,
    pub(super) abandoned: BTreeSet<i64>,
    pub(super) calls: BTreeMap<String, super::calls::Call>,
    pub(super) list_wanted: bool,
    pub(super) listing: Option<Listing>,
    pub(super) tools: Option<Vec<McpTool>>,
    pub(super) tools_fresh_until: Option<Timestamp>,
    pub(super) tools_stale: bool,
    /// Live elicitations by the id of the `Request` given to the host.
    pub(super) live: BTreeMap<String, LiveElicit>,
    pub(super) out: VecDeque<Output>,
    pub(super) last_now: Timestamp,
    /// The probe that timed out while the session went on with `initialize`:
    /// if its answer still comes and says modern, the session switches.
    pub(super) late_probe: Option<i64>,
    /// `initialize` was already offered a second version on this connection.
    pub(super) init_retried: bool,
}

impl Session {
    /// A session that connects when first given work.
    pub fn new(cfg: SessionConfig) -> Result<Session, McpInputError> {
        if cfg.server.is_empty() {
            return Err(McpInputError::Config("the server key is empty".into()));
        }
        if let Some(d) = &cfg.discovery {
            let known = match d.era {
                Era::Modern => d.version == MODERN_VERSION,
                Era::Legacy => LEGACY_VERSIONS.contains(&d.version.as_str()),
            };
            if !known || d.format_version != 1 {
                return Err(McpInputError::Config(format!("discovery with unknown version {:?}", d.version)));
            }
        }
        Ok(Session {
            discovery: cfg.discovery.clone(),
            cfg,
            link: Link::Down,
            session_id: None,
            next_id: 1,
            outstanding: BTreeMap::new(),
            abandoned: BTreeSet::new(),
            calls: BTreeMap::new(),
            list_wanted: false,
            listing: None,
            tools: None,
            tools_fresh_until: None,
            tools_stale: false,
            live: BTreeMap::new(),
            out: VecDeque::new(),
            last_now: Timestamp(0),
            late_probe: None,
            init_retried: false,
        })
    }

    /// The config.
    pub fn config(&self) -> &SessionConfig {
        &self.cfg
    }

    /// What the server said about itself once connected: store it to skip
    /// the probe next time ([`SessionConfig::discovery`]).
    pub fn discovery(&self) -> Option<&Discovery> {
        self.discovery.as_ref()
    }

    /// The legacy HTTP session id, when the server gave one (the transport
    /// sends `DELETE` with it when closing).
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// The last tool list, if any.
    pub fn tools(&self) -> Option<&[McpTool]> {
        self.tools.as_deref()
    }

    /// Whether the session is ready for requests.
    pub fn is_up(&self) -> bool {
        self.link == Link::Up
    }

    /// Calls in progress (sent, queued or waiting on a live elicitation).
    pub fn calls_in_progress(&self) -> usize {
        self.calls.len()
    }

    /// Feeds one input. On `Err` nothing changed (a [`ProtocolError`] is the
    /// server's fault: attach it to the server's errors and go on).
    pub fn handle_input(&mut self, now: Timestamp, input: Input<'_>) -> Result<(), HandleError> {
        if now < self.last_now {
            return Err(McpInputError::TimeWentBackwards { now: now.0, last: self.last_now.0 }.into());
        }
        match input {
            Input::Received { message, stream_of } => {
                let msg = jsonrpc::decode(message, self.cfg.max_message_bytes)?;
                self.check_received(&msg)?;
                self.last_now = now;
                self.on_message(now, msg, stream_of);
            }
            Input::SessionId(id) => {
                self.last_now = now;
                self.session_id = Some(id);
            }
            Input::Refused { id, status } => {
                let live = self.transport_subject(&id)?;
                self.last_now = now;
                if let Some((n, o)) = live.and_then(|n| self.outstanding.remove(&n).map(|o| (n, o))) {
                    self.on_failure(now, n, o, ProtocolError::Refused { method: String::new(), status }, true);
                }
            }
            Input::StreamLost { id, last_event_id } => {
                let live = self.transport_subject(&id)?;
                self.last_now = now;
                if let Some(n) = live {
                    self.on_stream_lost(now, n, last_event_id);
                }
            }
            Input::SessionExpired => {
                self.last_now = now;
                self.on_session_expired(now);
            }
            Input::Closed { reason } => {
                self.last_now = now;
                self.on_closed(reason);
            }
            Input::Timeout => {
                self.last_now = now;
                self.on_timeout(now);
            }
            Input::ListTools => {
                self.last_now = now;
                self.want_tools(now);
            }
            Input::Call(req) => {
                if self.calls.contains_key(&req.call) {
                    return Err(McpInputError::DuplicateCall(req.call).into());
                }
                self.last_now = now;
                self.start_call(now, req);
            }
            Input::Cancel { call } => {
                if !self.calls.contains_key(&call) {
                    return Err(McpInputError::UnknownCall(call).into());
                }
                self.last_now = now;
                self.cancel_call(now, &call, "cancelled by the host");
            }
            Input::Answer(answer) => {
                let Some(live) = self.live.remove(&answer.id) else {
                    return Err(McpInputError::UnknownAnswer(answer.id).into());
                };
                self.last_now = now;
                self.answer_live(now, live, &answer);
            }
        }
        Ok(())
    }

    /// The next thing to do. Poll until [`Output::Wait`].
    pub fn poll_output(&mut self) -> Output {
        if let Some(o) = self.out.pop_front() {
            return o;
        }
        let until = self.outstanding.values().filter_map(|o| o.deadline).min();
        Output::Wait { until }
    }

    /// The request a transport's report (a refusal, a lost stream) is about:
    /// `None` when the session abandoned it (timed out or cancelled, so the
    /// report races its own ending and nothing is left to do); an error when
    /// the session has no such request.
    fn transport_subject(&self, id: &RequestId) -> Result<Option<i64>, HandleError> {
        match id {
            RequestId::Num(n) if self.abandoned.contains(n) => Ok(None),
            RequestId::Num(n) if self.outstanding.contains_key(n) => Ok(Some(*n)),
            _ => Err(McpInputError::UnknownRequest(id.to_string()).into()),
        }
    }

    /// Refuses, before anything changes, a message the session cannot take.
    fn check_received(&self, msg: &Message) -> Result<(), ProtocolError> {
        match msg {
            Message::Response { id, .. } | Message::Error { id: Some(id), .. } => match id {
                RequestId::Num(n) if self.outstanding.contains_key(n) || self.abandoned.contains(n) => Ok(()),
                _ => Err(ProtocolError::unknown_response(id)),
            },
            Message::Error { id: None, error } => Err(ProtocolError::Rpc {
                method: "(unknown request)".into(),
                code: error.code,
                message: error.message.clone(),
            }),
            Message::Request { id, .. } if self.live.values().any(|l| &l.server_id == id) => {
                Err(ProtocolError::Shape(format!("request id {id} is already waiting for an answer")))
            }
            _ => Ok(()),
        }
    }

    fn on_message(&mut self, now: Timestamp, msg: Message, stream_of: Option<RequestId>) {
        match msg {
            Message::Response { id: RequestId::Num(n), result } => {
                if let Some(o) = self.outstanding.remove(&n) {
                    self.on_result(now, n, o, result);
                } else if self.late_probe == Some(n) {
                    self.late_probe = None;
                    self.on_late_probe(now, &result);
                }
            }
            Message::Error { id: Some(RequestId::Num(n)), error } => {
                if let Some(o) = self.outstanding.remove(&n) {
                    let pe = ProtocolError::Rpc {
                        method: o.method.into(),
                        code: error.code,
                        message: error.message.clone(),
                    };
                    if let Purpose::Call(key) = &o.purpose {
                        let key = key.clone();
                        self.on_call_error(now, &key, error);
                    } else if o.purpose == Purpose::Initialize && refuses_version(&error) {
                        self.on_version_refused(now, error.data.as_ref());
                    } else {
                        let recognised_modern = matches!(
                            error.code,
                            code::HEADER_MISMATCH
                                | code::MISSING_REQUIRED_CLIENT_CAPABILITY
                                | code::UNSUPPORTED_PROTOCOL_VERSION
                        );
                        if o.purpose == Purpose::Discover && recognised_modern {
                            self.on_modern_error(now, error.code, error.data.as_ref());
                        } else {
                            self.on_failure(now, n, o, pe, false);
                        }
                    }
                }
            }
            Message::Response { .. } | Message::Error { .. } => {}
            Message::Request { id, method, params } => self.on_server_request(now, id, &method, params, stream_of),
            Message::Notification { method, params } => {
                self.on_notification(now, &method, params.unwrap_or(Value::Null))
            }
        }
    }

    fn on_result(&mut self, now: Timestamp, _id: i64, o: Outstanding, result: Value) {
        match o.purpose {
            Purpose::Discover => self.on_discovered(now, &result),
            Purpose::Initialize => self.on_initialized(now, &result),
            Purpose::List => self.on_list_page(now, &result),
            Purpose::Call(key) => self.on_call_result(now, &key, result),
        }
    }

    /// A request of ours failed without a result: an error response, a
    /// refusal by the transport, or a timeout.
    fn on_failure(&mut self, now: Timestamp, id: i64, o: Outstanding, error: ProtocolError, refused: bool) {
        let error = match error {
            ProtocolError::Refused { status, .. } => ProtocolError::Refused { method: o.method.into(), status },
            e => e,
        };
        match o.purpose {
            // Any failure of the probe that is not a recognised modern error means legacy.
            Purpose::Discover => {
                self.forget(id);
                self.initialize(now, LEGACY_VERSIONS[0]);
            }
            Purpose::Initialize => self.connect_failed(error),
            Purpose::List => {
                self.listing = None;
                self.list_wanted = false;
                self.out.push_back(Output::ToolsFailed { error });
            }
            Purpose::Call(key) => {
                let what = if refused { "was refused" } else { "failed" };
                self.finish_call_error(&key, format!("MCP server {}: tools/call {what}: {error}", self.cfg.server));
            }
        }
    }

    fn on_timeout(&mut self, now: Timestamp) {
        let due: Vec<i64> =
            self.outstanding.iter().filter(|(_, o)| o.deadline.is_some_and(|d| d <= now)).map(|(id, _)| *id).collect();
        for id in due {
            let Some(o) = self.outstanding.remove(&id) else { continue };
            let after_ms = o.sent.ms_until(now);
            match &o.purpose {
                Purpose::Discover => {
                    self.forget(id);
                    // A slow server may still answer it: see `on_late_probe`.
                    self.late_probe = Some(id);
                    self.out.push_back(Output::Abandon { id: RequestId::Num(id) });
                    self.initialize(now, LEGACY_VERSIONS[0]);
                }
                // `initialize` must not be cancelled: the connection is given up instead.
                Purpose::Initialize => {
                    self.connect_failed(ProtocolError::Timeout { method: o.method.into(), after_ms })
                }
                Purpose::List => {
                    self.send_cancelled(id, "timeout");
                    self.on_failure(
                        now,
                        id,
                        o,
                        ProtocolError::Timeout { method: "tools/list".into(), after_ms },
                        false,
                    );
                }
                Purpose::Call(key) => {
                    let key = key.clone();
                    self.send_cancelled(id, "timeout");
                    self.finish_call_error(
                        &key,
                        format!(
                            "MCP server {}: the call timed out after {after_ms} ms and was cancelled",
                            self.cfg.server
                        ),
                    );
                }
            }
        }
    }

    /// Tells the server a request is off, and the transport to stop reading it.
    pub(super) fn send_cancelled(&mut self, id: i64, reason: &str) {
        self.forget(id);
        let params = json!({"requestId": id, "reason": reason});
        self.transmit_notification("notifications/cancelled", Some(params), None);
        self.out.push_back(Output::Abandon { id: RequestId::Num(id) });
    }

    /// Remembers an id whose response no longer matters.
    pub(super) fn forget(&mut self, id: i64) {
        self.outstanding.remove(&id);
        self.abandoned.insert(id);
        while self.abandoned.len() > ABANDONED_MEMORY {
            self.abandoned.pop_first();
        }
    }

    fn on_closed(&mut self, reason: String) {
        let ids: Vec<i64> = self.outstanding.keys().copied().collect();
        for id in ids {
            self.forget(id);
        }
        self.link = Link::Down;
        self.session_id = None;
        self.late_probe = None;
        self.live.clear();
        if self.listing.take().is_some() || self.list_wanted {
            self.list_wanted = false;
            self.out.push_back(Output::ToolsFailed { error: ProtocolError::Closed(reason.clone()) });
        }
        let keys: Vec<String> = self.calls.keys().cloned().collect();
        for key in keys {
            let sent = self.calls.get(&key).is_some_and(|c| c.id.is_some());
            let msg = if sent {
                format!(
                    "MCP server {} closed while the call was running ({reason}); it may or may not have completed and was not re-run",
                    self.cfg.server
                )
            } else {
                format!("MCP server {} closed before the call was sent ({reason})", self.cfg.server)
            };
            self.finish_call_error(&key, msg);
        }
    }

    fn on_session_expired(&mut self, now: Timestamp) {
        let ids: Vec<i64> = self.outstanding.keys().copied().collect();
        for id in ids {
            self.forget(id);
        }
        self.session_id = None;
        self.link = Link::Down;
        self.late_probe = None;
        self.live.clear();
        if self.listing.take().is_some() {
            self.list_wanted = true; // idempotent: fetched again after re-initializing
        }
        let sent: Vec<String> = self.calls.iter().filter(|(_, c)| c.id.is_some()).map(|(k, _)| k.clone()).collect();
        for key in sent {
            self.finish_call_error(
                &key,
                format!(
                    "MCP server {}: the session expired while the call was running; it may or may not have completed and was not re-run",
                    self.cfg.server
                ),
            );
        }
        self.pump(now);
    }

    /// Opens the session if there is work and it is down; sends what waits.
    pub(super) fn pump(&mut self, now: Timestamp) {
        let work = self.list_wanted || self.calls.values().any(|c| c.id.is_none() && c.waiting_for_link);
        if !work {
            return;
        }
        match self.link {
            Link::Down => self.connect(now),
            Link::Up => {
                if self.list_wanted && self.listing.is_none() {
                    self.list_wanted = false;
                    self.listing = Some(Listing::default());
                    self.request_page(now, None);
                }
                let ready: Vec<String> = self
                    .calls
                    .iter()
                    .filter(|(_, c)| c.id.is_none() && c.waiting_for_link)
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in ready {
                    self.send_call(now, &key);
                }
            }
            Link::Probing { .. } | Link::Initializing { .. } => {}
        }
    }

    fn connect(&mut self, now: Timestamp) {
        self.init_retried = false;
        self.late_probe = None;
        let era = self.discovery.as_ref().map(|d| d.era).or(self.cfg.era);
        match era {
            Some(Era::Modern) => {
                let d = self.discovery.clone().unwrap_or_else(|| modern_discovery(None));
                self.up(now, d);
            }
            Some(Era::Legacy) => self.initialize(now, LEGACY_VERSIONS[0]),
            None => {
                let timeout = self.cfg.probe_timeout_ms;
                let id = self.send_request(now, "server/discover", Map::new(), Purpose::Discover, timeout, None, true);
                self.link = Link::Probing { id };
            }
        }
    }

    fn up(&mut self, now: Timestamp, d: Discovery) {
        self.link = Link::Up;
        self.discovery = Some(d.clone());
        self.out.push_back(Output::Event(Event::Connected { discovery: d }));
        self.pump(now);
    }

    fn initialize(&mut self, now: Timestamp, version: &'static str) {
        let mut params = Map::new();
        params.insert("protocolVersion".into(), Value::from(version));
        params.insert("capabilities".into(), self.capabilities());
        params.insert("clientInfo".into(), self.client_info());
        let timeout = self.cfg.request_timeout_ms;
        let id = self.send_request(now, "initialize", params, Purpose::Initialize, timeout, None, false);
        self.link = Link::Initializing { id, version };
    }

    fn connect_failed(&mut self, error: ProtocolError) {
        self.link = Link::Down;
        self.out.push_back(Output::Event(Event::ConnectFailed { error: error.clone() }));
        if self.list_wanted || self.listing.take().is_some() {
            self.list_wanted = false;
            self.out.push_back(Output::ToolsFailed { error: error.clone() });
        }
        let keys: Vec<String> = self.calls.keys().cloned().collect();
        for key in keys {
            self.finish_call_error(&key, format!("MCP server {} is unavailable: {error}", self.cfg.server));
        }
    }

    fn on_discovered(&mut self, now: Timestamp, result: &Value) {
        let versions: Vec<&str> = result
            .get("supportedVersions")
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if versions.contains(&MODERN_VERSION) {
            self.up(now, modern_discovery(Some(result)));
        } else if versions.is_empty() {
            self.initialize(now, LEGACY_VERSIONS[0]);
        } else if let Some(v) = best_legacy(&versions) {
            self.initialize(now, v);
        } else {
            self.connect_failed(ProtocolError::UnsupportedVersion {
                offered: versions.join(", "),
                supported: supported_versions(),
            });
        }
    }

    /// A recognised modern error to the probe: the server speaks the modern era.
    fn on_modern_error(&mut self, now: Timestamp, code: i64, data: Option<&Value>) {
        if code == code::UNSUPPORTED_PROTOCOL_VERSION {
            let supported: Vec<&str> = data
                .and_then(|d| d.get("supported"))
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(v) = best_legacy(&supported) {
                return self.initialize(now, v);
            }
            return self.connect_failed(ProtocolError::UnsupportedVersion {
                offered: supported.join(", "),
                supported: supported_versions(),
            });
        }
        self.up(now, modern_discovery(None));
    }

    /// `initialize` refused the version offered (`-32022`, or the legacy
    /// `-32602` with `data.supported`): offer once the newest version both
    /// sides speak — the modern era when the server lists it — else fail
    /// with [`ProtocolError::UnsupportedVersion`].
    fn on_version_refused(&mut self, now: Timestamp, data: Option<&Value>) {
        let supported: Vec<&str> = data
            .and_then(|d| d.get("supported"))
            .and_then(Value::as_array)
            .map(|v| v.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let tried = match self.link {
            Link::Initializing { version, .. } => Some(version),
            _ => None,
        };
        if !self.init_retried {
            if supported.contains(&MODERN_VERSION) && self.cfg.era != Some(Era::Legacy) {
                self.init_retried = true;
                return self.up(now, modern_discovery(None));
            }
            if let Some(v) = best_legacy(&supported).filter(|v| Some(*v) != tried) {
                self.init_retried = true;
                return self.initialize(now, v);
            }
        }
        self.connect_failed(ProtocolError::UnsupportedVersion {
            offered: supported.join(", "),
            supported: supported_versions(),
        });
    }

    /// The probe's answer came after it timed out and the session went on
    /// with `initialize`: a server that speaks the modern era is talked to
    /// in it from now on. An `initialize` still out is no longer waited for;
    /// requests already sent in the legacy era finish as they are.
    fn on_late_probe(&mut self, now: Timestamp, result: &Value) {
        let modern = result
            .get("supportedVersions")
            .and_then(Value::as_array)
            .is_some_and(|v| v.iter().any(|x| x.as_str() == Some(MODERN_VERSION)));
        if !modern || self.cfg.era.is_some() || self.era() == Some(Era::Modern) {
            return;
        }
        if let Link::Initializing { id, .. } = self.link {
            // Not cancelled (initialize never is): its answer is just ignored.
            self.forget(id);
        }
        self.up(now, modern_discovery(Some(result)));
    }

    /// The SSE stream of request `n` was lost before its response.
    fn on_stream_lost(&mut self, now: Timestamp, n: i64, last_event_id: Option<String>) {
        let legacy_era = self.era() == Some(Era::Legacy);
        let Some(o) = self.outstanding.get_mut(&n) else { return };
        // Only the legacy era resumes streams; during `initialize` the era is legacy by construction.
        let legacy = legacy_era || o.purpose == Purpose::Initialize;
        if let Some(last) = last_event_id.filter(|l| legacy && !l.is_empty() && o.reattaches < MAX_REATTACHES) {
            o.reattaches += 1;
            self.out.push_back(Output::Reattach { id: RequestId::Num(n), last_event_id: last });
            return;
        }
        let Some(o) = self.outstanding.remove(&n) else { return };
        match &o.purpose {
            Purpose::Call(key) => {
                let key = key.clone();
                if legacy {
                    // A legacy server goes on after a disconnect: ask it to stop.
                    self.send_cancelled(n, "the response stream was lost");
                } else {
                    // In the modern era the closed stream was itself the cancellation.
                    self.forget(n);
                }
                self.finish_call_error(
                    &key,
                    format!(
                        "MCP server {}: the stream carrying the call's answer was lost; it may or may not have completed and was not re-run",
                        self.cfg.server
                    ),
                );
            }
            _ => {
                self.forget(n);
                let method = o.method.to_string();
                self.on_failure(now, n, o, ProtocolError::StreamLost { method }, false);
            }
        }
    }

    fn on_initialized(&mut self, now: Timestamp, result: &Value) {
        let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
        if !LEGACY_VERSIONS.contains(&version) {
            return self.connect_failed(ProtocolError::UnsupportedVersion {
                offered: version.into(),
                supported: supported_versions(),
            });
        }
        let d = Discovery {
            format_version: 1,
            era: Era::Legacy,
            version: version.into(),
            capabilities: result.get("capabilities").cloned().unwrap_or(Value::Null),
            server_info: result.get("serverInfo").cloned(),
            instructions: result.get("instructions").and_then(Value::as_str).map(str::to_string),
        };
        // Set before the notification so it carries the negotiated version header.
        self.discovery = Some(d.clone());
        self.transmit_notification("notifications/initialized", None, None);
        self.up(now, d);
    }

    fn want_tools(&mut self, now: Timestamp) {
        let fresh = self.tools.is_some()
            && !self.tools_stale
            && match self.era() {
                Some(Era::Modern) => self.tools_fresh_until.is_some_and(|t| now < t),
                _ => true,
            };
        if fresh {
            let tools = self.tools.clone().unwrap_or_default();
            self.out.push_back(Output::ToolsListed { tools, changed: false });
            return;
        }
        if self.listing.is_none() {
            self.list_wanted = true;
        }
        self.pump(now);
    }

    fn request_page(&mut self, now: Timestamp, cursor: Option<String>) {
        let mut params = Map::new();
        if let Some(c) = cursor {
            params.insert("cursor".into(), Value::from(c));
        }
        let timeout = self.cfg.request_timeout_ms;
        self.send_request(now, "tools/list", params, Purpose::List, timeout, None, true);
    }

    fn on_list_page(&mut self, now: Timestamp, result: &Value) {
        let Some(mut listing) = self.listing.take() else { return };
        listing.pages += 1;
        let Some(tools) = result.get("tools").and_then(Value::as_array) else {
            self.out.push_back(Output::ToolsFailed {
                error: ProtocolError::Shape("tools/list result without `tools`".into()),
            });
            return;
        };
        for t in tools {
            match McpTool::from_json(t) {
                Ok(tool) => {
                    let bad_header = match self.cfg.transport {
                        TransportKind::Http => header_params(&tool.input_schema).err(),
                        TransportKind::Stdio => None,
                    };
                    match bad_header {
                        Some(reason) => {
                            self.out.push_back(Output::Event(Event::ToolRejected { tool: tool.name, reason }))
                        }
                        None if listing.tools.iter().any(|x| x.name == tool.name) => {
                            self.out.push_back(Output::Event(Event::ToolRejected {
                                tool: tool.name,
                                reason: "declared twice".into(),
                            }))
                        }
                        None => listing.tools.push(tool),
                    }
                }
                Err(reason) => {
                    let tool = t.get("name").and_then(Value::as_str).unwrap_or("(unnamed)").to_string();
                    self.out.push_back(Output::Event(Event::ToolRejected { tool, reason }));
                }
            }
        }
        if let Some(cursor) = result.get("nextCursor").and_then(Value::as_str) {
            if !listing.cursors.insert(cursor.to_string()) {
                self.out.push_back(Output::ToolsFailed { error: ProtocolError::RepeatedCursor(cursor.into()) });
                return;
            }
            if listing.pages >= self.cfg.max_list_pages {
                self.out.push_back(Output::ToolsFailed { error: ProtocolError::TooManyPages(self.cfg.max_list_pages) });
                return;
            }
            self.listing = Some(listing);
            self.request_page(now, Some(cursor.to_string()));
            return;
        }
        let ttl = result.get("ttlMs").and_then(Value::as_u64).unwrap_or(0);
        self.tools_fresh_until = Some(now.plus_ms(ttl));
        self.tools_stale = false;
        let changed = match &self.tools {
            None => false,
            Some(old) => {
                old.len() != listing.tools.len()
                    || old.iter().zip(&listing.tools).any(|(a, b)| a.name != b.name || a.digest() != b.digest())
            }
        };
        self.tools = Some(listing.tools.clone());
        self.out.push_back(Output::ToolsListed { tools: listing.tools, changed });
        // A list_changed that came while this list was being fetched asks for another.
        self.pump(now);
    }

    fn on_notification(&mut self, now: Timestamp, method: &str, params: Value) {
        let s = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_string);
        match method {
            "notifications/progress" => self.on_progress(now, &params),
            "notifications/tools/list_changed" => {
                self.tools_stale = true;
                if self.tools.is_some() && self.listing.is_none() {
                    self.list_wanted = true;
                    self.pump(now);
                } else if self.listing.is_some() {
                    // The page being fetched may be from the old list: fetch again after it.
                    self.list_wanted = true;
                }
            }
            "notifications/message" => self.out.push_back(Output::Event(Event::Log {
                level: s("level").unwrap_or_else(|| "info".into()),
                logger: s("logger"),
                data: params.get("data").cloned().unwrap_or(Value::Null),
            })),
            "notifications/cancelled" => {
                let id = params.get("requestId").cloned().and_then(|v| serde_json::from_value::<RequestId>(v).ok());
                let withdrawn: Vec<String> = self
                    .live
                    .iter()
                    .filter(|(_, l)| Some(&l.server_id) == id.as_ref())
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in withdrawn {
                    if let Some(l) = self.live.remove(&key) {
                        self.resume_timer(now, l.call.as_deref());
                    }
                    self.out.push_back(Output::Event(Event::ElicitationWithdrawn { request: key }));
                }
            }
            "notifications/elicitation/complete" => {
                if let Some(elicitation_id) = s("elicitationId") {
                    self.out.push_back(Output::Event(Event::ElicitationComplete { elicitation_id }));
                }
            }
            _ => {}
        }
    }

    fn on_server_request(
        &mut self,
        now: Timestamp,
        id: RequestId,
        method: &str,
        params: Option<Value>,
        stream_of: Option<RequestId>,
    ) {
        match method {
            "ping" => self.respond(&id, json!({})),
            "elicitation/create" if self.cfg.elicitation => {
                let params = params.unwrap_or(Value::Null);
                self.on_live_elicitation(now, id, &params, stream_of);
            }
            _ => {
                let body = jsonrpc::error_response(&id, code::METHOD_NOT_FOUND, "Method not found");
                self.push_transmit(body, None, None);
            }
        }
    }

    /// Sends a response to a server request.
    pub(super) fn respond(&mut self, id: &RequestId, result: Value) {
        let body = jsonrpc::response(id, result);
        self.push_transmit(body, None, None);
    }

    pub(super) fn era(&self) -> Option<Era> {
        self.discovery.as_ref().map(|d| d.era)
    }

    fn capabilities(&self) -> Value {
        if self.cfg.elicitation {
            json!({"elicitation": {"form": {}, "url": {}}})
        } else {
            json!({})
        }
    }

    fn client_info(&self) -> Value {
        json!({"name": self.cfg.client_name, "version": self.cfg.client_version})
    }

    /// Sends a request; `modern` asks for the 2026 `_meta` and headers (the
    /// probe is modern before the era is known).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_request(
        &mut self,
        now: Timestamp,
        method: &'static str,
        mut params: Map<String, Value>,
        purpose: Purpose,
        timeout_ms: u64,
        call: Option<&str>,
        modern_if_known: bool,
    ) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        let modern = modern_if_known && (self.era() == Some(Era::Modern) || matches!(purpose, Purpose::Discover));
        let mut headers = Vec::new();
        if modern {
            let meta = params.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(meta) = meta {
                meta.insert("io.modelcontextprotocol/protocolVersion".into(), Value::from(MODERN_VERSION));
                meta.insert("io.modelcontextprotocol/clientCapabilities".into(), self.capabilities());
                meta.insert("io.modelcontextprotocol/clientInfo".into(), self.client_info());
            }
            headers.push(("MCP-Protocol-Version".to_string(), MODERN_VERSION.to_string()));
            headers.push(("Mcp-Method".to_string(), method.to_string()));
            if let Some(name) = params.get("name").and_then(Value::as_str) {
                headers.push(("Mcp-Name".to_string(), header_value(name)));
            }
            if method == "tools/call" {
                headers.extend(self.param_headers(&params));
            }
        } else if purpose != Purpose::Initialize {
            headers.extend(self.legacy_headers());
        }
        let body = jsonrpc::request(&RequestId::Num(id), method, Some(&Value::Object(params)));
        self.outstanding.insert(
            id,
            Outstanding { method, purpose, sent: now, deadline: Some(now.plus_ms(timeout_ms)), reattaches: 0 },
        );
        self.out.push_back(Output::Transmit(Transmit {
            message: body,
            id: Some(RequestId::Num(id)),
            call: call.map(str::to_string),
            headers,
        }));
        id
    }

    fn legacy_headers(&self) -> Vec<(String, String)> {
        let mut h = Vec::new();
        if let Some(d) = self.discovery.as_ref().filter(|d| d.era == Era::Legacy) {
            h.push(("MCP-Protocol-Version".to_string(), d.version.clone()));
        }
        if let Some(s) = &self.session_id {
            h.push(("Mcp-Session-Id".to_string(), s.clone()));
        }
        h
    }

    /// `Mcp-Param-*` for a `tools/call`, from the tool's `x-mcp-header` annotations.
    fn param_headers(&self, params: &Map<String, Value>) -> Vec<(String, String)> {
        let (Some(name), Some(tools)) = (params.get("name").and_then(Value::as_str), self.tools.as_ref()) else {
            return Vec::new();
        };
        let Some(tool) = tools.iter().find(|t| t.name == name) else { return Vec::new() };
        let Ok(annotated) = header_params(&tool.input_schema) else { return Vec::new() };
        let args = params.get("arguments");
        let mut out = Vec::new();
        for (path, header) in annotated {
            let mut v = args;
            for step in &path {
                v = v.and_then(|x| x.get(step));
            }
            let text = match v {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Bool(b)) => b.to_string(),
                Some(Value::Number(n)) => n.to_string(),
                _ => continue,
            };
            out.push((format!("Mcp-Param-{header}"), header_value(&text)));
        }
        out
    }

    pub(super) fn transmit_notification(&mut self, method: &str, params: Option<Value>, call: Option<String>) {
        let body = jsonrpc::notification(method, params.as_ref());
        self.push_transmit(body, None, call);
        if self.era() == Some(Era::Modern) {
            if let Some(Output::Transmit(t)) = self.out.back_mut() {
                t.headers.push(("Mcp-Method".to_string(), method.to_string()));
            }
        }
    }

    fn push_transmit(&mut self, message: Vec<u8>, id: Option<RequestId>, call: Option<String>) {
        let headers = match self.era() {
            Some(Era::Modern) => vec![("MCP-Protocol-Version".to_string(), MODERN_VERSION.to_string())],
            _ => self.legacy_headers(),
        };
        self.out.push_back(Output::Transmit(Transmit { message, id, call, headers }));
    }
}

/// Whether an error to `initialize` refuses the offered protocol version.
fn refuses_version(error: &jsonrpc::RpcError) -> bool {
    let lists = error.data.as_ref().and_then(|d| d.get("supported")).is_some_and(Value::is_array);
    error.code == code::UNSUPPORTED_PROTOCOL_VERSION || (error.code == code::INVALID_PARAMS && lists)
}

/// The newest legacy version this client speaks among `offered`.
fn best_legacy(offered: &[&str]) -> Option<&'static str> {
    LEGACY_VERSIONS.iter().copied().find(|v| offered.contains(v))
}

/// The modern era's discovery, from a `server/discover` result when there is one.
fn modern_discovery(result: Option<&Value>) -> Discovery {
    let get = |k: &str| result.and_then(|r| r.get(k));
    Discovery {
        format_version: 1,
        era: Era::Modern,
        version: MODERN_VERSION.into(),
        capabilities: get("capabilities").cloned().unwrap_or(Value::Null),
        server_info: get("_meta").and_then(|m| m.get("io.modelcontextprotocol/serverInfo")).cloned(),
        instructions: get("instructions").and_then(Value::as_str).map(str::to_string),
    }
}

fn supported_versions() -> String {
    let mut all = vec![MODERN_VERSION];
    all.extend_from_slice(LEGACY_VERSIONS);
    all.join(", ")
}
