//! Replaying a cassette through the real machine.

use std::collections::{HashMap, VecDeque};
use std::fmt;

use nexus_proto::http::is_secret_header;
use nexus_proto::{
    Answer, ExchangeId, HttpRequest, Input, Outcome, Output, Request, Run, StateError, StreamEvent, Timestamp,
    ToolInvocation, ToolReply,
};
use serde::Serialize;

use super::{Cassette, CassetteError, Entry, Payload, StateJson, REDACTED};

/// What a replay shows its observer, in order. Every method has a default
/// that does nothing, so an observer implements only what it shows.
pub trait Observer {
    /// A run begins (`resumed`: restored from a stored state in a new process).
    fn run_started(&mut self, _run: &Run, _resumed: bool) {}
    /// The machine built a request identical to the recorded one.
    fn request(&mut self, _req: &HttpRequest) {}
    /// A stream event.
    fn event(&mut self, _event: &StreamEvent) {}
    /// The machine handed out tool calls.
    fn tools(&mut self, _calls: &[ToolInvocation]) {}
    /// A tool's recorded reply is fed back.
    fn tool_reply(&mut self, _call: &ToolInvocation, _reply: &ToolReply) {}
    /// The run is suspended on these requests.
    fn suspended(&mut self, _requests: &[Request]) {}
    /// A recorded answer is fed.
    fn answer(&mut self, _answer: &Answer) {}
    /// The recorded run stopped suspended here and another process continued
    /// it from its stored state. Returns the bytes that process reads (the
    /// default hands them over in memory). An error ends the replay.
    fn handoff(&mut self, state: &[u8]) -> Result<Vec<u8>, String> {
        Ok(state.to_vec())
    }
    /// A run ended.
    fn finished(&mut self, _run: &Run, _outcome: &Outcome) {}
}

/// An observer that shows nothing.
#[derive(Debug, Default)]
pub struct Quiet;

impl Observer for Quiet {}

/// How the recording ends.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayEnd {
    /// The last run ended (done, incomplete or failed, as recorded).
    Finished(Outcome),
    /// The last run stopped suspended on these requests and was never resumed.
    Pending(Vec<Request>),
}

/// A replay that matched its recording.
#[derive(Debug)]
pub struct Replayed {
    /// How the recording ends.
    pub end: ReplayEnd,
    /// The last run, as the replay left it (transcript, usage, tool calls).
    pub run: Run,
    /// How many runs the cassette holds.
    pub runs: usize,
    /// How many requests were checked byte for byte.
    pub requests: usize,
}

/// A replay failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ReplayError {
    /// The cassette could not be read.
    Cassette(CassetteError),
    /// The machine did something other than what was recorded.
    Mismatch {
        /// 1-based line of the cassette where the difference shows.
        line: usize,
        /// What differs.
        message: String,
    },
    /// A recorded state could not be restored.
    State {
        /// 1-based line.
        line: usize,
        /// Why.
        error: StateError,
    },
}

impl fmt::Display for ReplayError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplayError::Cassette(e) => e.fmt(f),
            ReplayError::Mismatch { line, message } => {
                write!(f, "replay differs at cassette line {line}: {message}")
            }
            ReplayError::State { line, error } => write!(f, "cassette line {line}: {error}"),
        }
    }
}

impl std::error::Error for ReplayError {}

impl From<CassetteError> for ReplayError {
    fn from(e: CassetteError) -> Self {
        ReplayError::Cassette(e)
    }
}

/// Replays a cassette through the real machine: recorded inputs are fed at
/// their recorded times, and every request the machine builds must equal the
/// recorded one byte for byte (secret header values, redacted in cassettes,
/// are compared by name and place only).
pub fn replay(cassette: &Cassette, observer: &mut dyn Observer) -> Result<Replayed, ReplayError> {
    let mut r = Replayer {
        entries: &cassette.entries,
        next: 0,
        observer,
        run: None,
        sends: VecDeque::new(),
        running: HashMap::new(),
        line: 0,
        runs: 0,
        checked: 0,
        finished: None,
        stopped: false,
        defer: false,
    };
    let mut last = None;
    while let Some((line, entry)) = cassette.entries.get(r.next) {
        r.next += 1;
        r.line = *line;
        r.entry(entry)?;
        last = Some(entry);
    }
    let end = match last {
        Some(Entry::Done { outcome, .. }) => ReplayEnd::Finished(outcome.clone()),
        Some(Entry::Pending { requests }) => ReplayEnd::Pending(requests.clone()),
        _ => {
            return Err(ReplayError::Mismatch {
                line: r.line,
                message: "the cassette ends in the middle of a run (was the recording interrupted?)".into(),
            })
        }
    };
    let (runs, requests) = (r.runs, r.checked);
    let run = r.run.ok_or(ReplayError::Mismatch { line: r.line, message: "the cassette holds no run".into() })?;
    Ok(Replayed { end, run, runs, requests })
}

struct Replayer<'o> {
    /// The whole cassette: `circuits` lines are applied as the machine is
    /// polled past the point where they were recorded.
    entries: &'o [(usize, Entry)],
    /// The next entry the main loop takes.
    next: usize,
    observer: &'o mut dyn Observer,
    run: Option<Run>,
    /// Requests the machine emitted that no `request` line has matched yet.
    sends: VecDeque<HttpRequest>,
    /// Tool calls handed out and not yet replied to.
    running: HashMap<String, ToolInvocation>,
    line: usize,
    runs: usize,
    checked: usize,
    finished: Option<Outcome>,
    /// The previous entry stopped the run suspended (a new run may follow).
    stopped: bool,
    /// A resumed run has its answers fed before it is polled, as drivers do.
    defer: bool,
}

impl Replayer<'_> {
    fn mismatch<T>(&self, message: impl Into<String>) -> Result<T, ReplayError> {
        Err(ReplayError::Mismatch { line: self.line, message: message.into() })
    }

    fn feed(&mut self, at: u64, input: Input<'_>) -> Result<(), ReplayError> {
        let line = self.line;
        let Some(run) = self.run.as_mut() else {
            return self.mismatch("an input before any `start`");
        };
        run.handle_input(Timestamp(at), input).map_err(|e| ReplayError::Mismatch {
            line,
            message: format!("the machine refused the recorded input: {e}"),
        })?;
        if self.defer {
            return Ok(());
        }
        self.drain()
    }

    /// Polls until the machine waits or is done, collecting what it asks for.
    fn drain(&mut self) -> Result<(), ReplayError> {
        self.defer = false;
        loop {
            // The recording's driver set these just before the poll that follows them.
            while let Some((line, Entry::Circuits { open_until })) = self.entries.get(self.next) {
                self.next += 1;
                self.line = *line;
                self.circuits(open_until)?;
            }
            let Some(run) = self.run.as_mut() else {
                return Ok(());
            };
            match run.poll_output() {
                Output::Send(req) => self.sends.push_back(req),
                Output::RunTools(batch) => {
                    self.observer.tools(&batch.calls);
                    for call in batch.calls {
                        self.running.insert(call.call_id.clone(), call);
                    }
                }
                Output::Event(ev) => self.observer.event(&ev),
                Output::Suspended(requests) => self.observer.suspended(&requests),
                Output::Wait { .. } => return Ok(()),
                Output::Done(outcome) => {
                    if self.finished.is_none() {
                        self.observer.finished(run, &outcome);
                    }
                    self.finished = Some(outcome);
                    return Ok(());
                }
            }
        }
    }

    fn circuits(&mut self, open_until: &[Option<u64>]) -> Result<(), ReplayError> {
        let line = self.line;
        let Some(run) = self.run.as_mut() else {
            return self.mismatch("`circuits` before any `start`");
        };
        run.set_circuit_view(open_until.iter().map(|t| t.map(Timestamp)).collect()).map_err(|e| ReplayError::Mismatch {
            line,
            message: format!("the machine refused the recorded circuits: {e}"),
        })
    }

    fn begin(&mut self, state: &StateJson, api_key: bool, resumed: bool, exchanges: usize) -> Result<(), ReplayError> {
        let line = self.line;
        let mut run = Run::restore(state.as_bytes()).map_err(|error| ReplayError::State { line, error })?;
        // With parallel sub-agents it decides when each request goes out.
        run.set_concurrent_exchanges(exchanges);
        if api_key {
            // The recorded request carried an auth header; so must this one
            // (its value is never compared).
            run.set_api_key(REDACTED);
            for i in 1..run.config().upstream_count() {
                run.set_upstream_api_key(i, REDACTED);
            }
            // So did the sub-agents' requests, to whatever API they call.
            let mut names = Vec::new();
            agent_names(run.config(), &mut names);
            for name in names {
                run.set_agent_api_key(&name, REDACTED);
            }
        }
        self.sends.clear();
        self.running.clear();
        self.finished = None;
        self.observer.run_started(&run, resumed);
        self.run = Some(run);
        if resumed {
            self.defer = true;
            Ok(())
        } else {
            self.runs += 1;
            self.drain()
        }
    }

    fn entry(&mut self, entry: &Entry) -> Result<(), ReplayError> {
        let stopped = std::mem::replace(&mut self.stopped, matches!(entry, Entry::Pending { .. }));
        if self.defer && !matches!(entry, Entry::Answer { .. }) {
            self.drain()?;
        }
        match entry {
            Entry::Header { .. } => self.mismatch("a second header"),
            Entry::Start { state, api_key, exchanges } => {
                if self.run.is_some() && self.finished.is_none() && !stopped {
                    return self.mismatch("a new run starts before the previous one ended");
                }
                self.begin(state, *api_key, false, *exchanges)
            }
            Entry::Resume { state, api_key, exchanges } => self.resume(state, *api_key, *exchanges),
            Entry::Request { exchange, method, url, headers, body } => {
                let Some(sent) = self.sends.pop_front() else {
                    return self.mismatch(format!(
                        "the recording sent request {exchange} here; the machine sent none ({})",
                        self.idle_reason()
                    ));
                };
                let Some(body) = body.bytes() else {
                    return self.mismatch("the request body is not valid base64");
                };
                if let Some(diff) = compare_request(&sent, *exchange, method, url, headers, &body) {
                    return self.mismatch(format!("request {exchange}: {diff}"));
                }
                self.checked += 1;
                self.observer.request(&sent);
                Ok(())
            }
            Entry::Response { exchange, status, headers, at } => self.feed(
                *at,
                Input::ResponseHead { exchange: ExchangeId(*exchange), status: *status, headers: headers.clone() },
            ),
            Entry::Chunk { exchange, data, at } => {
                let Some(bytes) = Payload::bytes(data) else {
                    return self.mismatch("the chunk is not valid base64");
                };
                self.feed(*at, Input::ResponseBody { exchange: ExchangeId(*exchange), chunk: &bytes })
            }
            Entry::End { exchange, at } => self.feed(*at, Input::ResponseEnd { exchange: ExchangeId(*exchange) }),
            Entry::TransportError { exchange, kind, message, at } => self.feed(
                *at,
                Input::TransportError { exchange: ExchangeId(*exchange), kind: *kind, message: message.clone() },
            ),
            Entry::Tool { call_id, name, reply, at } => {
                let Some(call) = self.running.remove(call_id) else {
                    return self.mismatch(format!(
                        "the recording has a reply of tool call {call_id} {name}; the machine did not hand that call out ({})",
                        self.idle_reason()
                    ));
                };
                if !name.is_empty() && call.name != *name {
                    return self.mismatch(format!(
                        "tool call {call_id}: recorded tool {name}, the machine asked for {}",
                        call.name
                    ));
                }
                self.observer.tool_reply(&call, reply);
                self.feed(*at, Input::ToolReply { call_id: call_id.clone(), reply: reply.clone() })
            }
            Entry::Answer { answer, at } => {
                self.observer.answer(answer);
                self.feed(*at, Input::Answer(answer.clone()))
            }
            Entry::Timeout { at } => self.feed(*at, Input::Timeout),
            Entry::Cancel { at } => self.feed(*at, Input::Cancel),
            Entry::Abort { error, at } => self.feed(*at, Input::Abort { error: error.clone() }),
            Entry::Circuits { open_until } => self.circuits(open_until),
            Entry::Pending { requests } => {
                let Some(run) = &self.run else {
                    return self.mismatch("`pending` before any `start`");
                };
                if !self.sends.is_empty() || !self.running.is_empty() || self.finished.is_some() {
                    return self.mismatch(format!(
                        "the recorded run stopped suspended; the machine did not ({})",
                        self.idle_reason()
                    ));
                }
                let outstanding = run.outstanding();
                if outstanding != *requests {
                    return self.mismatch(format!(
                        "the recorded run was suspended on {}; the machine is suspended on {}",
                        json_text(requests),
                        json_text(&outstanding)
                    ));
                }
                Ok(())
            }
            Entry::Done { outcome, text } => {
                let Some(run) = &self.run else {
                    return self.mismatch("`done` before any `start`");
                };
                match &self.finished {
                    None => self.mismatch(format!(
                        "the recorded run ended {}; the machine has not ({})",
                        outcome_word(outcome),
                        self.idle_reason()
                    )),
                    Some(o) if o != outcome => self.mismatch(format!(
                        "the recorded run ended {}; the machine ended {}",
                        json_text(outcome),
                        json_text(o)
                    )),
                    Some(_) if run.final_text() != *text => self.mismatch(format!(
                        "final text differs: recorded {:?}, replayed {:?}",
                        text,
                        run.final_text()
                    )),
                    Some(_) => Ok(()),
                }
            }
        }
    }

    /// A stored state handed to a new process. When the cassette holds the
    /// run that stored it, the replayed machine must have stored exactly the
    /// recorded bytes.
    fn resume(&mut self, state: &StateJson, api_key: bool, exchanges: usize) -> Result<(), ReplayError> {
        let Some(run) = &self.run else {
            // A cassette that begins with a resumed run (recorded from its resume on).
            self.runs += 1;
            return self.begin(state, api_key, true, exchanges);
        };
        if self.finished.is_some() {
            return self.mismatch("a run is resumed after it ended");
        }
        let mine = run.snapshot();
        let recorded = state.as_bytes();
        if mine != recorded && !same_after_migration(recorded, &mine) {
            let at = first_difference(&mine, recorded);
            return self.mismatch(format!(
                "the stored state the next process read differs at byte {at}: recorded {}, replayed {}",
                excerpt(recorded, at),
                excerpt(&mine, at)
            ));
        }
        let line = self.line;
        let handed = self.observer.handoff(&mine).map_err(|message| ReplayError::Mismatch { line, message })?;
        let Some(handed) = StateJson::from_bytes(&handed) else {
            return self.mismatch("the handed-over state is not JSON");
        };
        self.begin(&handed, api_key, true, exchanges)
    }

    fn idle_reason(&self) -> String {
        if let Some(o) = &self.finished {
            return format!("it ended {}", outcome_word(o));
        }
        if let Some(req) = self.sends.front() {
            return format!("it sent request {}", req.exchange.0);
        }
        if !self.running.is_empty() {
            let mut ids: Vec<&str> = self.running.keys().map(String::as_str).collect();
            ids.sort_unstable();
            return format!("it waits for tool calls {}", ids.join(", "));
        }
        match &self.run {
            Some(run) if !run.outstanding().is_empty() => {
                let ids: Vec<String> = run.outstanding().into_iter().map(|r| r.id).collect();
                format!("it is suspended on {}", ids.join(", "))
            }
            Some(_) => "it waits for a response or a timer".into(),
            None => "no run has started".into(),
        }
    }
}

/// The names of every agent `config` may delegate to, at any depth.
fn agent_names(config: &nexus_proto::RunConfig, out: &mut Vec<String>) {
    for spec in config.agents.iter().flat_map(|a| &a.agents) {
        if !out.contains(&spec.name) {
            out.push(spec.name.clone());
            agent_names(&spec.config, out);
        }
    }
}

fn outcome_word(o: &Outcome) -> &'static str {
    match o {
        Outcome::Done => "done",
        Outcome::Incomplete { .. } => "incomplete",
        Outcome::Failed { .. } => "failed",
    }
}

fn json_text<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Compares a request the machine built with a recorded one; `None` when equal.
fn compare_request(
    sent: &HttpRequest,
    exchange: u64,
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Option<String> {
    if sent.exchange.0 != exchange {
        return Some(format!("the machine numbered it exchange {}", sent.exchange.0));
    }
    if sent.method != method {
        return Some(format!("method: recorded {method}, replayed {}", sent.method));
    }
    if sent.url != url {
        return Some(format!("url: recorded {url}, replayed {}", sent.url));
    }
    for i in 0..sent.headers.len().max(headers.len()) {
        match (headers.get(i), sent.headers.get(i)) {
            (Some((rk, rv)), Some((k, v))) => {
                if !rk.eq_ignore_ascii_case(k) {
                    return Some(format!("header {}: recorded {rk:?}, replayed {k:?}", i + 1));
                }
                if !is_secret_header(k) && rv != v {
                    return Some(format!("header {k}: recorded {rv:?}, replayed {v:?}"));
                }
            }
            (Some((rk, _)), None) => return Some(format!("header {rk} was recorded but not sent")),
            (None, Some((k, _))) => return Some(format!("header {k} was sent but not recorded")),
            (None, None) => {}
        }
    }
    if sent.body != body {
        let at = first_difference(&sent.body, body);
        return Some(format!(
            "body differs at byte {at} (recorded {} bytes, replayed {}): recorded {}, replayed {}",
            body.len(),
            sent.body.len(),
            excerpt(body, at),
            excerpt(&sent.body, at)
        ));
    }
    None
}

/// A cassette recorded by a build that wrote an older state format holds
/// that format; the replaying machine writes the current one, with what the
/// newer versions added (version 2: the upstream of each turn, the
/// failovers). They agree when they agree on everything the older version
/// knew.
fn same_after_migration(recorded: &[u8], mine: &[u8]) -> bool {
    let (Ok(serde_json::Value::Object(mut old)), Ok(serde_json::Value::Object(mut new))) =
        (serde_json::from_slice(recorded), serde_json::from_slice(mine))
    else {
        return false;
    };
    let older =
        old.get("format_version").and_then(serde_json::Value::as_u64).is_some_and(|v| v < nexus_proto::FORMAT_VERSION);
    if older {
        for key in ["format_version", "upstream", "served", "failovers"] {
            old.remove(key);
            new.remove(key);
        }
    }
    // A member a later build of the same version added: a recording made
    // before it holds it in none of its run states (a parent's or a child's).
    let predates_announced = !recorded.windows(ANNOUNCED.len()).any(|w| w == ANNOUNCED.as_bytes());
    if predates_announced {
        forget_announced(&mut new);
    }
    (older || predates_announced) && old == new
}

const ANNOUNCED: &str = "\"announcedTurn\"";

/// Drops `announcedTurn` from a run state and the child run states nested in it.
fn forget_announced(state: &mut serde_json::Map<String, serde_json::Value>) {
    if state.contains_key("runId") {
        state.remove("announcedTurn");
    }
    for value in state.values_mut() {
        match value {
            serde_json::Value::Object(o) => forget_announced(o),
            serde_json::Value::Array(items) => {
                for item in items.iter_mut() {
                    if let serde_json::Value::Object(o) = item {
                        forget_announced(o);
                    }
                }
            }
            _ => {}
        }
    }
}

fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()))
}

/// A short quote of `bytes` around `at`, for difference messages.
fn excerpt(bytes: &[u8], at: usize) -> String {
    let start = at.saturating_sub(24);
    let end = at.saturating_add(40).min(bytes.len());
    let slice = bytes.get(start..end).unwrap_or_default();
    let text = String::from_utf8_lossy(slice);
    let dots = |b: bool| if b { "…" } else { "" };
    format!("{:?}", format!("{}{}{}", dots(start > 0), text, dots(end < bytes.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_differing_byte_is_named() {
        let req = HttpRequest {
            exchange: ExchangeId(2),
            method: "POST",
            url: "http://x/v1/messages".into(),
            headers: vec![("content-type".into(), "application/json".into()), ("x-api-key".into(), "real".into())],
            body: br#"{"a":1,"b":2}"#.to_vec(),
            streaming: false,
        };
        let headers = vec![("content-type".into(), "application/json".into()), ("x-api-key".into(), REDACTED.into())];
        assert_eq!(compare_request(&req, 2, "POST", "http://x/v1/messages", &headers, br#"{"a":1,"b":2}"#), None);
        let diff = compare_request(&req, 2, "POST", "http://x/v1/messages", &headers, br#"{"a":1,"b":3}"#).unwrap();
        assert!(diff.contains("byte 11"), "{diff}");
        let diff = compare_request(&req, 3, "POST", "http://x/v1/messages", &headers, br#"{"a":1,"b":2}"#).unwrap();
        assert!(diff.contains("exchange 2"), "{diff}");
        let diff =
            compare_request(&req, 2, "POST", "http://x/v1/messages", &headers[..1], br#"{"a":1,"b":2}"#).unwrap();
        assert!(diff.contains("x-api-key was sent but not recorded"), "{diff}");
    }
}
