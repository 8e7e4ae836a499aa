//! The model calls in flight. A run and its sub-agents may have several at
//! once (SPEC §17, parallel children), each sent by one run of the tree;
//! what belongs to a call — its turn and attempt numbers for the hooks, its
//! head deadline, its retry budget, its metric and its span — is read from
//! the run that sent it, found by its agent path ([`Run::exchange_owner`]).

use std::time::Instant;

use nexus_proto::provider::is_retryable_status;
use nexus_proto::{
    ExchangeId, HttpRequest, Input, Run, RunError, StreamEvent, Style, Timestamp, TransportErrorKind, Usage,
};

use super::Engine;
use crate::config::{FailureInfo, RetryDecision};
use crate::error::DriveError;
use crate::hooks::{ModelRequest, ModelResponse};
use crate::metrics::Metric;

/// One model call in flight.
pub(super) struct Exchange {
    id: ExchangeId,
    /// The agent path of the run that sent it (empty for the top run).
    path: String,
    started: Instant,
    status: Option<u16>,
    /// An error response, held whole until its end so the host's classifier
    /// can decide before the machine schedules a retry.
    held: Option<Held>,
    usage_before: Usage,
    turns_before: u32,
    /// The wire format of the upstream it went to: an error body is decoded by it.
    style: Style,
    /// The model of the upstream it went to, kept for the metric only.
    model: Option<String>,
}

struct Held {
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// The turn and retry attempt of one run of the tree, as the hooks, the
/// metrics and the classifier count them.
#[derive(Default)]
pub(super) struct Pace {
    turn: u32,
    attempt: u32,
}

/// The agent path a machine event belongs to, and the event itself.
fn owned(ev: &StreamEvent) -> (&str, &StreamEvent) {
    match ev {
        StreamEvent::Agent { agent, event } => (agent.as_str(), event.inner()),
        other => ("", other),
    }
}

impl Engine {
    /// The run of the tree at `path` (the top run when it has gone).
    fn owner(&self, path: &str) -> &Run {
        self.run.agent_run(path).unwrap_or(&self.run)
    }

    fn pace(&mut self, path: &str) -> &mut Pace {
        self.paces.entry(path.to_string()).or_default()
    }

    fn attempt_of(&self, path: &str) -> u32 {
        self.paces.get(path).map_or(0, |p| p.attempt)
    }

    /// Whether exchange `id` is still one the run waits on (a driver stops
    /// reading one the machine gave up on or a newer request superseded).
    pub(crate) fn in_flight(&self, id: ExchangeId) -> bool {
        self.exchanges.iter().any(|x| x.id == id)
    }

    /// Whether exchange `id` may share the driver with other model calls:
    /// a sub-agent's, when the run takes several at once. The top run's own
    /// call is alone in the tree (children live only while it runs tools),
    /// so a driver may read it inline.
    pub(crate) fn shares_time(&self, id: ExchangeId) -> bool {
        self.run.concurrent_exchanges() > 1 && self.exchanges.iter().any(|x| x.id == id && !x.path.is_empty())
    }

    /// When exchange `id` must have its response head by: the failover
    /// policy's head timeout of the run that sent it, or the run's deadline
    /// when earlier.
    pub(crate) fn head_deadline(&self, id: ExchangeId) -> Option<Timestamp> {
        let top = self.run.head_deadline();
        let Some(ex) = self.exchanges.iter().find(|x| x.id == id).filter(|x| !x.path.is_empty()) else {
            return top;
        };
        match (self.run.config().deadline, self.owner(&ex.path).head_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Forgets every call in flight (a cancel or an abort ends them all).
    pub(super) fn drop_exchanges(&mut self) {
        self.exchanges.clear();
    }

    /// Forgets the calls the machine no longer waits on (a head timeout
    /// failed one).
    pub(super) fn prune_exchanges(&mut self) {
        let run = &self.run;
        self.exchanges.retain(|x| run.exchange_owner(x.id).is_some());
    }

    /// Retries and failovers move the attempt count of the run they belong to.
    pub(super) fn pace_event(&mut self, ev: &StreamEvent) {
        let (path, inner) = owned(ev);
        match inner {
            StreamEvent::Retrying { attempt, .. } => self.pace(path).attempt = *attempt,
            StreamEvent::Failover { from, to, reason, .. } => {
                let path = path.to_string();
                self.pace(&path).attempt = 0;
                if let Some(m) = &self.cfg.on_metric {
                    let config = self.owner(&path).config();
                    let name = |i: usize| {
                        config.upstream(i).map(|u| format!("{} {}", u.style.name(), u.model)).unwrap_or_default()
                    };
                    m(&Metric::Failover { from: name(*from), to: name(*to), reason: reason.clone() });
                }
            }
            _ => {}
        }
    }

    pub(super) fn prepare_send(&mut self, mut req: HttpRequest) -> Option<HttpRequest> {
        let (path, upstream) =
            self.run.exchange_owner(req.exchange).unwrap_or_else(|| (String::new(), self.run.upstream()));
        let owner = self.owner(&path);
        let (turns_before, usage_before) = (owner.turns(), owner.usage());
        let head_timeout = owner.config().failover.head_timeout_ms.is_some();
        let turn = turns_before + 1;
        let pace = self.pace(&path);
        if turn != pace.turn {
            pace.turn = turn;
            pace.attempt = 0;
        }
        let attempt = pace.attempt;
        if let Some(t) = &self.cfg.body_transform {
            req.body = t(std::mem::take(&mut req.body));
        }
        if let Some(hook) = self.cfg.hooks.before_model.clone() {
            let mut view = ModelRequest { turn, attempt, url: &req.url, body: &mut req.body };
            if let Err(e) = hook(&mut view) {
                self.abort(DriveError::Hook(e.0));
                return None;
            }
        }
        self.spans.send(&self.run, &req, attempt);
        if head_timeout {
            // The machine starts the head timer at its first input after the send.
            let _ = self.feed(Input::Timeout);
        }
        // A run has one call in flight: a newer request of the same run
        // supersedes what is left of its last.
        self.exchanges.retain(|x| x.path != path);
        let model = self.cfg.on_metric.is_some().then_some(upstream.model);
        self.exchanges.push(Exchange {
            id: req.exchange,
            path,
            started: Instant::now(),
            status: None,
            held: None,
            usage_before,
            turns_before,
            style: upstream.style,
            model,
        });
        Some(req)
    }

    fn current(&mut self, id: ExchangeId) -> Option<&mut Exchange> {
        self.exchanges.iter_mut().find(|x| x.id == id)
    }

    fn take(&mut self, id: ExchangeId) -> Option<Exchange> {
        let pos = self.exchanges.iter().position(|x| x.id == id)?;
        Some(self.exchanges.swap_remove(pos))
    }

    /// The response head. Returns whether to read the body.
    pub(crate) fn on_head(&mut self, id: ExchangeId, status: u16, headers: Vec<(String, String)>) -> bool {
        let Some(ex) = self.current(id) else {
            return false;
        };
        ex.status = Some(status);
        if !(200..300).contains(&status) {
            ex.held = Some(Held { headers, body: Vec::new() });
            return true;
        }
        if self.feed(Input::ResponseHead { exchange: id, status, headers }).is_err() {
            self.take(id);
            return false;
        }
        true
    }

    /// A piece of the body. Returns whether to keep reading (false once the
    /// machine has given up on the exchange: over the limit, failed, cancelled).
    pub(crate) fn on_body(&mut self, id: ExchangeId, chunk: &[u8]) -> bool {
        let limit = self.run.config().max_body_bytes;
        let Some(ex) = self.current(id) else {
            return false;
        };
        if let Some(held) = &mut ex.held {
            // The machine keeps only the start of an oversize error body; so do we.
            let room = limit.saturating_sub(held.body.len());
            held.body.extend_from_slice(chunk.get(..chunk.len().min(room)).unwrap_or_default());
            return true;
        }
        if self.feed(Input::ResponseBody { exchange: id, chunk }).is_err() {
            self.take(id);
            return false;
        }
        // Found again rather than its path copied: this runs for every chunk.
        if let Some(ex) = self.exchanges.iter().find(|x| x.id == id) {
            self.spans.first_chunk(&ex.path);
        }
        true
    }

    /// The body is complete.
    pub(crate) fn on_end(&mut self, id: ExchangeId) {
        let Some(ex) = self.take(id) else {
            return;
        };
        if let Some(held) = &ex.held {
            let status = ex.status.unwrap_or(0);
            let will_retry = is_retryable_status(status) && self.retries_left(&ex.path);
            let info = FailureInfo {
                status: Some(status),
                transport: None,
                attempt: self.attempt_of(&ex.path),
                will_retry,
                message: String::from_utf8_lossy(&held.body).into_owned(),
            };
            if self.classify(&info) == RetryDecision::FailNow && will_retry {
                let retry_after =
                    held.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case("retry-after")).map(|(_, v)| v.as_str());
                let err = ex.style.decode_error(Some(status), retry_after, &held.body);
                self.exchange_ended(&ex, false);
                self.abort(DriveError::Run(RunError::Provider(err)));
                return;
            }
            // Fed as the machine would have read it; it decides on retries.
            let fed = self
                .feed(Input::ResponseHead { exchange: id, status, headers: held.headers.clone() })
                .and_then(|()| self.feed(Input::ResponseBody { exchange: id, chunk: &held.body }))
                .and_then(|()| self.feed(Input::ResponseEnd { exchange: id }));
            let _ = fed;
        } else {
            let _ = self.feed(Input::ResponseEnd { exchange: id });
        }
        let ok = self.run.agent_run(&ex.path).is_some_and(|owner| owner.turns() > ex.turns_before);
        self.exchange_ended(&ex, ok);
    }

    /// The exchange failed in the transport (never called for aborts the
    /// driver made because of a cancel: `step` feeds the cancel).
    pub(crate) fn on_transport_error(&mut self, id: ExchangeId, kind: TransportErrorKind, message: String) {
        let Some(ex) = self.take(id) else {
            return;
        };
        if self.cancel.is_cancelled() {
            return;
        }
        let will_retry =
            matches!(kind, TransportErrorKind::Connect | TransportErrorKind::Io) && self.retries_left(&ex.path);
        let attempt = self.attempt_of(&ex.path);
        let info = FailureInfo { status: None, transport: Some(kind), attempt, will_retry, message };
        if self.classify(&info) == RetryDecision::FailNow && will_retry {
            self.exchange_ended(&ex, false);
            self.abort(DriveError::Run(RunError::Transport { kind, message: info.message }));
            return;
        }
        let _ = self.feed(Input::TransportError { exchange: id, kind, message: info.message });
        self.exchange_ended(&ex, false);
    }

    fn retries_left(&self, path: &str) -> bool {
        self.attempt_of(path) < self.owner(path).config().retry.retries
    }

    fn classify(&self, info: &FailureInfo) -> RetryDecision {
        self.cfg.classifier.as_ref().map_or(RetryDecision::Default, |c| c(info))
    }

    /// Metrics and the `after_model` hook for an exchange that ended.
    fn exchange_ended(&mut self, ex: &Exchange, ok: bool) {
        let latency = ex.started.elapsed();
        self.spans.exchange_ended(&self.run, &ex.path, ok, ex.status);
        let (turn, attempt) = self.paces.get(&ex.path).map_or((0, 0), |p| (p.turn, p.attempt));
        if let Some(m) = &self.cfg.on_metric {
            let usage = self.owner(&ex.path).usage();
            m(&Metric::Llm {
                model: ex.model.clone().unwrap_or_default(),
                status: if ok { "ok" } else { "error" },
                http_status: ex.status,
                latency,
                attempt,
                prompt_tokens: usage.prompt_tokens.saturating_sub(ex.usage_before.prompt_tokens),
                completion_tokens: usage.completion_tokens.saturating_sub(ex.usage_before.completion_tokens),
            });
        }
        if let Some(hook) = self.cfg.hooks.after_model.clone() {
            let resp = ModelResponse { turn, attempt, status: ex.status, latency, ok };
            if let Err(e) = hook(&resp) {
                self.abort(DriveError::Hook(e.0));
            }
        }
    }
}
