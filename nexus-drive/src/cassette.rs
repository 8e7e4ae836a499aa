//! Cassettes: a session written down as JSON lines, so it can be replayed
//! byte for byte without a network.
//!
//! A cassette holds, in order, everything that crossed the machine's edge:
//! the state each run started from, every request the machine built, every
//! input it was fed — response heads, body chunks exactly as read, ends,
//! transport errors, tool replies, answers, timer firings — each with the
//! time it was fed, and where a run stopped suspended and was resumed in
//! another process. Secrets are redacted when a line is written: secret-named
//! headers lose their value and the API key is replaced wherever it occurs,
//! so a cassette can be committed.
//!
//! Drivers record through the [`Tap`] seam (a [`Recorder`] is one): the
//! shared pump calls it for every input the machine accepts and every output
//! it produces, so both drivers record the same way. [`replay`] drives the
//! real machine ([`Run`]) from a cassette: it feeds the recorded inputs at
//! their recorded times and checks that every request the machine builds is
//! byte-identical to the recorded one; the first difference ends the replay
//! with a [`ReplayError::Mismatch`] naming it.
//!
//! # Format (version 1)
//!
//! One JSON object per line, tagged by `type`. The first line is
//! `{"type":"header","format":"nexus-cassette","version":1}`; then, per run:
//!
//! | `type` | fields | meaning |
//! |---|---|---|
//! | `start` | `state`, `apiKey`, `exchanges` | a new run; `state` is its [`Run::snapshot`] before the first output |
//! | `request` | `exchange`, `method`, `url`, `headers`, `text`/`base64` | a request the machine built |
//! | `response` | `exchange`, `status`, `headers`, `at` | its response head |
//! | `chunk` | `exchange`, `text`/`base64`, `at` | one body chunk, as read |
//! | `end` | `exchange`, `at` | the body is complete |
//! | `transport_error` | `exchange`, `kind`, `message`, `at` | the exchange failed |
//! | `tool` | `callId`, `name`, `reply`, `at` | a tool's reply |
//! | `answer` | `answer`, `at` | an answer fed to the run |
//! | `timeout` / `cancel` | `at` | a timer fired / the host cancelled |
//! | `pending` | `requests` | the run stopped suspended; its state was stored |
//! | `resume` | `state`, `apiKey`, `exchanges` | a new process restored the run from `state` |
//! | `done` | `outcome`, `text` | the run ended |
//!
//! `exchanges` is how many model calls the driver let the run's tree have
//! in flight at once ([`Run::set_concurrent_exchanges`]; absent when 1 or
//! when the run has no sub-agents, whose calls are one at a time anyway):
//! with parallel sub-agents it decides when each request goes out, so a
//! replay sets the same. Inputs are written in the order the machine was
//! fed them, however many calls were in flight.
//!
//! `at` is the time given with the input (ms since the Unix epoch). Bytes
//! are `text` when they are UTF-8, else `base64`. A cassette may hold several
//! runs one after another. Readers refuse a newer `version` and ignore
//! unknown fields.

use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;
use std::sync::Mutex;

use nexus_proto::http::is_secret_header;
use nexus_proto::{
    Answer, HttpRequest, Input, Outcome, Output, Request, Run, Timestamp, ToolReply, TransportErrorKind,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

mod replay;

pub use replay::{replay, Observer, Quiet, ReplayEnd, ReplayError, Replayed};

/// The `format` of the header line.
pub const FORMAT: &str = "nexus-cassette";
/// The version this build writes (and the newest it reads).
pub const VERSION: u64 = 1;
/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Response headers whose values are dropped besides the secret ones:
/// cookies identify the account as surely as a key does.
const SECRET_RESPONSE_HEADERS: &[&str] = &["set-cookie", "set-cookie2"];

/// One line of a cassette.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Entry {
    /// The first line.
    Header {
        /// Always [`FORMAT`].
        format: String,
        /// The format version.
        version: u64,
    },
    /// A new run begins.
    Start {
        /// [`Run::snapshot`] of the run before its first output: config, tools, transcript, seed.
        state: StateJson,
        /// Whether an API key was given (its value is never recorded).
        #[serde(rename = "apiKey", default)]
        api_key: bool,
        /// Model calls the tree could have in flight at once.
        #[serde(default = "one", skip_serializing_if = "is_one")]
        exchanges: usize,
    },
    /// A request the machine built (secret values redacted).
    Request {
        /// The machine's exchange id.
        exchange: u64,
        /// HTTP method.
        method: String,
        /// Full URL.
        url: String,
        /// Headers, in order.
        headers: Vec<(String, String)>,
        /// The body.
        #[serde(flatten)]
        body: Payload,
    },
    /// The response head.
    Response {
        /// Which exchange.
        exchange: u64,
        /// HTTP status.
        status: u16,
        /// Response headers, in order.
        headers: Vec<(String, String)>,
        /// When it was fed.
        #[serde(default)]
        at: u64,
    },
    /// One body chunk, exactly as read.
    Chunk {
        /// Which exchange.
        exchange: u64,
        /// The bytes.
        #[serde(flatten)]
        data: Payload,
        /// When it was fed.
        #[serde(default)]
        at: u64,
    },
    /// The response body is complete.
    End {
        /// Which exchange.
        exchange: u64,
        /// When it was fed.
        #[serde(default)]
        at: u64,
    },
    /// The exchange failed in the transport.
    TransportError {
        /// Which exchange.
        exchange: u64,
        /// How.
        kind: TransportErrorKind,
        /// The driver's description.
        message: String,
        /// When it was fed.
        #[serde(default)]
        at: u64,
    },
    /// A tool replied.
    Tool {
        /// The call id.
        #[serde(rename = "callId")]
        call_id: String,
        /// The tool name (for readers; the replay checks it when present).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        name: String,
        /// What it replied.
        reply: ToolReply,
        /// When it was fed.
        #[serde(default)]
        at: u64,
    },
    /// An answer was fed to the run.
    Answer {
        /// The answer.
        answer: Answer,
        /// When it was fed.
        #[serde(default)]
        at: u64,
    },
    /// A timer the machine asked for fired.
    Timeout {
        /// When it was fed.
        #[serde(default)]
        at: u64,
    },
    /// The host cancelled the run.
    Cancel {
        /// When it was fed.
        #[serde(default)]
        at: u64,
    },
    /// The host ended the run with an error (a hook or the error classifier).
    Abort {
        /// The error the run ended with.
        error: nexus_proto::RunError,
        /// When it was fed.
        #[serde(default)]
        at: u64,
    },
    /// The circuits routing saw changed (a run with fallbacks and a breaker):
    /// until when each upstream's circuit is open, in the run's upstream
    /// order. Recorded because other runs of the same client move them; a
    /// replay feeds them back where they were recorded.
    Circuits {
        /// Per upstream: the time its circuit stays open until, or null.
        #[serde(rename = "openUntil")]
        open_until: Vec<Option<u64>>,
    },
    /// The run stopped suspended on these requests and its state was stored.
    Pending {
        /// The outstanding requests.
        requests: Vec<Request>,
    },
    /// A new process restored the run from this state.
    Resume {
        /// The state bytes it read.
        state: StateJson,
        /// Whether an API key was given.
        #[serde(rename = "apiKey", default)]
        api_key: bool,
        /// Model calls the tree could have in flight at once.
        #[serde(default = "one", skip_serializing_if = "is_one")]
        exchanges: usize,
    },
    /// The run ended.
    Done {
        /// How.
        outcome: Outcome,
        /// The final text.
        #[serde(default)]
        text: String,
    },
}

/// A run state embedded verbatim (as JSON, not as a string), so the bytes
/// a process stored are the bytes a replay compares.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StateJson(pub Box<RawValue>);

impl StateJson {
    /// The state bytes.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.get().as_bytes()
    }

    /// Wraps state bytes; `None` when they are not JSON.
    pub fn from_bytes(state: &[u8]) -> Option<StateJson> {
        let text = std::str::from_utf8(state).ok()?;
        RawValue::from_string(text.to_string()).ok().map(StateJson)
    }
}

impl PartialEq for StateJson {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

/// Bytes in a line: as text when they are UTF-8, else as base64 (a chunk
/// may end inside a multi-byte character).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Payload {
    /// The bytes as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The bytes as standard base64, when they are not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

impl Payload {
    /// Encodes bytes.
    pub fn new(bytes: &[u8]) -> Payload {
        match std::str::from_utf8(bytes) {
            Ok(text) => Payload { text: Some(text.to_string()), base64: None },
            Err(_) => Payload { text: None, base64: Some(base64_encode(bytes)) },
        }
    }

    /// Decodes the bytes; `None` when the base64 is invalid.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        match (&self.text, &self.base64) {
            (Some(t), _) => Some(t.as_bytes().to_vec()),
            (None, Some(b)) => base64_decode(b),
            (None, None) => Some(Vec::new()),
        }
    }
}

/// A cassette could not be read.
#[derive(Debug)]
#[non_exhaustive]
pub enum CassetteError {
    /// Reading the file failed.
    Io(io::Error),
    /// A line is not a cassette entry.
    Line {
        /// 1-based line number.
        line: usize,
        /// Why.
        message: String,
    },
    /// The header is missing or names another format.
    NotACassette(String),
    /// Written by a newer version.
    UnsupportedVersion {
        /// The version found.
        found: u64,
    },
}

impl fmt::Display for CassetteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CassetteError::Io(e) => write!(f, "cannot read cassette: {e}"),
            CassetteError::Line { line, message } => write!(f, "cassette line {line}: {message}"),
            CassetteError::NotACassette(why) => write!(f, "not a nexus cassette: {why}"),
            CassetteError::UnsupportedVersion { found } => {
                write!(f, "cassette version {found} is newer than this build reads (1..={VERSION})")
            }
        }
    }
}

impl std::error::Error for CassetteError {}

/// A parsed cassette: its entries with their line numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct Cassette {
    /// `(1-based line number, entry)`, header excluded.
    pub entries: Vec<(usize, Entry)>,
}

impl Cassette {
    /// Parses cassette text. Blank lines are skipped.
    pub fn parse(text: &str) -> Result<Cassette, CassetteError> {
        Cassette::from_lines(text.lines().map(|l| Ok(l.to_string())))
    }

    /// Reads a cassette file.
    pub fn load(path: &Path) -> Result<Cassette, CassetteError> {
        let file = File::open(path).map_err(CassetteError::Io)?;
        Cassette::from_lines(BufReader::new(file).lines())
    }

    fn from_lines(lines: impl Iterator<Item = io::Result<String>>) -> Result<Cassette, CassetteError> {
        let mut entries = Vec::new();
        let mut header = false;
        for (i, line) in lines.enumerate() {
            let line = line.map_err(CassetteError::Io)?;
            let no = i + 1;
            if line.trim().is_empty() {
                continue;
            }
            let entry = parse_entry(&line).map_err(|e| {
                if header {
                    CassetteError::Line { line: no, message: e.to_string() }
                } else {
                    CassetteError::NotACassette(format!("line {no} is not a cassette header ({e})"))
                }
            })?;
            match entry {
                Entry::Header { format, version } if !header => {
                    if format != FORMAT {
                        return Err(CassetteError::NotACassette(format!("format is {format:?}, not {FORMAT:?}")));
                    }
                    if version == 0 || version > VERSION {
                        return Err(CassetteError::UnsupportedVersion { found: version });
                    }
                    header = true;
                }
                _ if !header => {
                    return Err(CassetteError::NotACassette(format!("line {no} comes before the header")));
                }
                Entry::Header { .. } => {
                    return Err(CassetteError::Line { line: no, message: "a second header".into() });
                }
                other => entries.push((no, other)),
            }
        }
        if !header {
            return Err(CassetteError::NotACassette("the file is empty".into()));
        }
        Ok(Cassette { entries })
    }
}

/// The concurrency a replay needs: it decides anything only where children
/// may call their models side by side.
fn exchanges_of(run: &Run) -> usize {
    match &run.config().agents {
        Some(a) if !a.agents.is_empty() => run.concurrent_exchanges(),
        _ => 1,
    }
}

fn one() -> usize {
    1
}

fn is_one(n: &usize) -> bool {
    *n == 1
}

/// Parses one line. `start` and `resume` lines are read into a plain
/// struct: serde buffers internally tagged enums, and a buffered value can no
/// longer give the raw state text back.
fn parse_entry(line: &str) -> Result<Entry, serde_json::Error> {
    #[derive(Deserialize)]
    struct Tag {
        #[serde(rename = "type")]
        kind: String,
    }
    #[derive(Deserialize)]
    struct StateLine {
        state: StateJson,
        #[serde(rename = "apiKey", default)]
        api_key: bool,
        #[serde(default = "one")]
        exchanges: usize,
    }
    match serde_json::from_str::<Tag>(line)?.kind.as_str() {
        "start" => serde_json::from_str::<StateLine>(line).map(|l| Entry::Start {
            state: l.state,
            api_key: l.api_key,
            exchanges: l.exchanges,
        }),
        "resume" => serde_json::from_str::<StateLine>(line).map(|l| Entry::Resume {
            state: l.state,
            api_key: l.api_key,
            exchanges: l.exchanges,
        }),
        _ => serde_json::from_str(line),
    }
}

// ---------------------------------------------------------------- recording

/// What a driver shows a recorder. The shared pump calls it, so the blocking
/// and the async driver record identically; every method has an empty
/// default.
pub trait Tap: Send + Sync {
    /// A new run, before its first output.
    fn started(&self, _run: &Run) {}
    /// An input the machine accepted, with the time it was fed at.
    fn input(&self, _now: Timestamp, _input: &Input<'_>) {}
    /// An output the machine produced, before the driver acts on it.
    fn output(&self, _run: &Run, _output: &Output) {}
    /// The circuits the run routes by changed ([`Run::circuit_view`]), before
    /// its next output.
    fn circuits(&self, _run: &Run) {}
    /// A run restored from a stored state, before its answers are fed.
    fn restored(&self, _run: &Run) {}
}

/// Writes a cassette as a session goes. It is a [`Tap`] for the driver; the
/// host adds what only it knows: [`Recorder::resume`] when it restores a
/// stored run, and [`Recorder::pending`] when it stores one.
///
/// Every line is flushed as written, so a crash leaves a readable prefix.
/// Writing never interrupts the session: the first write error is kept and
/// returned by [`Recorder::finish`].
pub struct Recorder {
    inner: Mutex<Inner>,
}

struct Inner {
    out: Box<dyn Write + Send>,
    secrets: Vec<String>,
    api_key: bool,
    /// Tool names by call id (tool replies name only the call).
    names: HashMap<String, String>,
    /// The state a host said it resumed from, written once the driver
    /// shows the restored run (its `resume` line then says how many model
    /// calls the run may have in flight).
    resumed: Option<Vec<u8>>,
    error: Option<io::Error>,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Recorder")
    }
}

impl Recorder {
    /// A new cassette at `path` (replacing any file there).
    pub fn create(path: &Path) -> io::Result<Recorder> {
        let file = File::create(path)?;
        let rec = Recorder::to_writer(Box::new(file));
        rec.write_header();
        Ok(rec)
    }

    /// Appends to the cassette at `path`, creating it when missing or empty
    /// (a resumed run adds its lines to the cassette of the run it continues).
    pub fn append(path: &Path) -> io::Result<Recorder> {
        let existing = match File::open(path) {
            Ok(mut f) => {
                let mut probe = [0u8; 512];
                let n = f.read(&mut probe)?;
                !probe.get(..n).unwrap_or_default().iter().all(u8::is_ascii_whitespace)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        };
        if existing {
            // Refuse to append to something that is not a cassette we can read.
            Cassette::load(path).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let rec = Recorder::to_writer(Box::new(file));
        if !existing {
            rec.write_header();
        }
        Ok(rec)
    }

    /// A recorder writing to any sink (no header is written; see [`Recorder::create`]).
    pub fn to_writer(out: Box<dyn Write + Send>) -> Recorder {
        Recorder {
            inner: Mutex::new(Inner {
                out,
                secrets: Vec::new(),
                api_key: false,
                names: HashMap::new(),
                resumed: None,
                error: None,
            }),
        }
    }

    fn write_header(&self) {
        self.write(&Entry::Header { format: FORMAT.into(), version: VERSION });
    }

    /// The run's API key: redacted wherever it occurs, and noted (as a yes)
    /// so a replay sends an auth header too.
    pub fn set_api_key(&self, key: &str) {
        let mut inner = self.lock();
        inner.api_key = true;
        // Very short strings would redact ordinary text; real keys are long.
        if key.len() >= 4 {
            inner.secrets.push(key.to_string());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn redact(&self, text: &str) -> String {
        let inner = self.lock();
        let mut out = text.to_string();
        for s in &inner.secrets {
            if out.contains(s.as_str()) {
                out = out.replace(s.as_str(), REDACTED);
            }
        }
        out
    }

    fn payload(&self, bytes: &[u8]) -> Payload {
        let mut p = Payload::new(bytes);
        if let Some(t) = &p.text {
            p.text = Some(self.redact(t));
        }
        p
    }

    fn write(&self, entry: &Entry) {
        // A resumed run the driver did not show: its line goes first as it is.
        let resumed = self.lock().resumed.take();
        if let Some(state) = resumed {
            self.state_entry(&state, true, 1);
        }
        let mut inner = self.lock();
        if inner.error.is_some() {
            return;
        }
        let mut line = match serde_json::to_vec(entry) {
            Ok(l) => l,
            Err(e) => {
                inner.error = Some(io::Error::other(e));
                return;
            }
        };
        line.push(b'\n');
        if let Err(e) = inner.out.write_all(&line).and_then(|()| inner.out.flush()) {
            inner.error = Some(e);
        }
    }

    fn state_entry(&self, state: &[u8], resume: bool, exchanges: usize) {
        let api_key = self.lock().api_key;
        match StateJson::from_bytes(state) {
            Some(state) if resume => self.write(&Entry::Resume { state, api_key, exchanges }),
            Some(state) => self.write(&Entry::Start { state, api_key, exchanges }),
            None => {
                let mut inner = self.lock();
                inner.error.get_or_insert(io::Error::new(io::ErrorKind::InvalidData, "a run state that is not JSON"));
            }
        }
    }

    /// The host restored a stored run from these bytes (call before feeding its answers).
    pub fn resume(&self, state: &[u8]) {
        // A traced run's trace context rides beside its state with random
        // ids: never recorded (SPEC §22.4).
        let state = crate::telemetry::strip(state);
        let earlier = self.lock().resumed.replace(state);
        if let Some(earlier) = earlier {
            self.state_entry(&earlier, true, 1);
        }
    }

    /// The host stored the suspended run (its state holds these outstanding requests).
    pub fn pending(&self, requests: &[Request]) {
        self.write(&Entry::Pending { requests: requests.to_vec() });
    }

    fn request(&self, req: &HttpRequest) {
        let headers = req
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), if is_secret_header(k) { REDACTED.to_string() } else { self.redact(v) }))
            .collect();
        self.write(&Entry::Request {
            exchange: req.exchange.0,
            method: req.method.to_string(),
            url: self.redact(&req.url),
            headers,
            body: self.payload(&req.body),
        });
    }

    /// Flushes and returns the first write error, if any.
    pub fn finish(&self) -> io::Result<()> {
        let resumed = self.lock().resumed.take();
        if let Some(state) = resumed {
            self.state_entry(&state, true, 1);
        }
        let mut inner = self.lock();
        if let Some(e) = inner.error.take() {
            return Err(e);
        }
        inner.out.flush()
    }
}

impl Tap for Recorder {
    fn started(&self, run: &Run) {
        self.state_entry(&run.snapshot(), false, exchanges_of(run));
    }

    fn restored(&self, run: &Run) {
        let resumed = self.lock().resumed.take();
        if let Some(state) = resumed {
            self.state_entry(&state, true, exchanges_of(run));
        }
    }

    fn input(&self, now: Timestamp, input: &Input<'_>) {
        let at = now.0;
        let entry = match input {
            Input::ResponseHead { exchange, status, headers } => {
                let headers = headers
                    .iter()
                    .map(|(k, v)| {
                        let secret =
                            is_secret_header(k) || SECRET_RESPONSE_HEADERS.iter().any(|s| s.eq_ignore_ascii_case(k));
                        (k.clone(), if secret { REDACTED.to_string() } else { self.redact(v) })
                    })
                    .collect();
                Entry::Response { exchange: exchange.0, status: *status, headers, at }
            }
            Input::ResponseBody { exchange, chunk } => {
                Entry::Chunk { exchange: exchange.0, data: self.payload(chunk), at }
            }
            Input::ResponseEnd { exchange } => Entry::End { exchange: exchange.0, at },
            Input::TransportError { exchange, kind, message } => {
                Entry::TransportError { exchange: exchange.0, kind: *kind, message: self.redact(message), at }
            }
            Input::ToolReply { call_id, reply } => {
                let name = self.lock().names.get(call_id).cloned().unwrap_or_default();
                Entry::Tool { call_id: call_id.clone(), name, reply: reply.clone(), at }
            }
            Input::Answer(answer) => Entry::Answer { answer: answer.clone(), at },
            Input::Timeout => Entry::Timeout { at },
            Input::Cancel => Entry::Cancel { at },
            Input::Abort { error } => Entry::Abort { error: error.clone(), at },
        };
        self.write(&entry);
    }

    fn circuits(&self, run: &Run) {
        let open_until = run.circuit_view().iter().map(|t| t.map(|t| t.0)).collect();
        self.write(&Entry::Circuits { open_until });
    }

    fn output(&self, run: &Run, output: &Output) {
        match output {
            Output::Send(req) => self.request(req),
            Output::RunTools(batch) => {
                let mut inner = self.lock();
                for call in &batch.calls {
                    inner.names.insert(call.call_id.clone(), call.name.clone());
                }
            }
            Output::Done(outcome) => self.write(&Entry::Done { outcome: outcome.clone(), text: run.final_text() }),
            _ => {}
        }
    }
}

// ---------------------------------------------------------------- base64

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [
            group.first().copied().unwrap_or(0),
            group.get(1).copied().unwrap_or(0),
            group.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(B64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64 (padding optional); `None` on any other character.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let digits: Vec<u32> = text
        .trim_end_matches('=')
        .bytes()
        .map(|c| B64.iter().position(|&d| d == c).map(|p| p as u32))
        .collect::<Option<_>>()?;
    if digits.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for group in digits.chunks(4) {
        let n = group.iter().enumerate().fold(0u32, |acc, (i, d)| acc | (d << (18 - 6 * i)));
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(bytes.get(..group.len() - 1).unwrap_or_default());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nexus_proto::ExchangeId;
    use std::sync::Arc;

    #[test]
    fn base64_round_trips_every_length() {
        // RFC 4648 §10 test vectors.
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64_encode(plain.as_bytes()), encoded);
            assert_eq!(base64_decode(encoded).as_deref(), Some(plain.as_bytes()));
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&all)), Some(all));
        assert_eq!(base64_decode("Zm9v!"), None);
        assert_eq!(base64_decode("Z"), None);
    }

    #[test]
    fn a_chunk_cut_inside_a_character_is_kept_exactly() {
        let word = "é".as_bytes();
        let half = &word[..1];
        let p = Payload::new(half);
        assert!(p.text.is_none(), "not UTF-8, so not text");
        assert_eq!(p.bytes().as_deref(), Some(half));
        assert_eq!(Payload::new(b"ok").text.as_deref(), Some("ok"));
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn secrets_never_reach_the_cassette() {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let rec = Recorder::to_writer(Box::new(Sink(buf.clone())));
        rec.set_api_key("sk-very-secret");
        rec.request(&HttpRequest {
            exchange: ExchangeId(1),
            method: "POST",
            url: "https://x.test/v1?key=sk-very-secret".into(),
            headers: vec![
                ("authorization".into(), "Bearer sk-very-secret".into()),
                ("x-goog-api-key".into(), "other".into()),
                ("content-type".into(), "application/json".into()),
            ],
            body: b"{}".to_vec(),
            streaming: false,
        });
        let head = Input::ResponseHead {
            exchange: ExchangeId(1),
            status: 200,
            headers: vec![("set-cookie".into(), "session=abc".into())],
        };
        rec.input(Timestamp(5), &head);
        rec.input(Timestamp(6), &Input::ResponseBody { exchange: ExchangeId(1), chunk: b"echo sk-very-secret" });
        rec.finish().unwrap();
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("sk-very-secret"), "{text}");
        assert!(!text.contains("other"), "{text}");
        assert!(!text.contains("session=abc"), "{text}");
        assert!(text.contains("application/json"));
        assert!(text.contains(r#""at":6"#), "inputs carry their time: {text}");
    }

    #[test]
    fn a_newer_version_or_another_format_is_refused() {
        let newer = r#"{"type":"header","format":"nexus-cassette","version":99}"#;
        assert!(matches!(Cassette::parse(newer), Err(CassetteError::UnsupportedVersion { found: 99 })));
        let other = r#"{"type":"header","format":"vcr","version":1}"#;
        assert!(matches!(Cassette::parse(other), Err(CassetteError::NotACassette(_))));
        assert!(matches!(Cassette::parse(""), Err(CassetteError::NotACassette(_))));
        assert!(matches!(Cassette::parse("garbage"), Err(CassetteError::NotACassette(_))));
        let bad_line = "{\"type\":\"header\",\"format\":\"nexus-cassette\",\"version\":1}\n{\"type\":\"nope\"}";
        assert!(matches!(Cassette::parse(bad_line), Err(CassetteError::Line { line: 2, .. })));
        let later_field = "{\"type\":\"header\",\"format\":\"nexus-cassette\",\"version\":1,\"by\":\"x\"}\n";
        assert!(Cassette::parse(later_field).is_ok(), "unknown fields are ignored");
    }
}
