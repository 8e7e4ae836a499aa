//! A fake LLM provider on loopback HTTP/1.1 that speaks the Anthropic,
//! OpenAI Chat Completions, OpenAI Responses and Gemini wire formats.
//!
//! It is an implementation independent of `nexus-proto`: request bodies are
//! read and responses written with `serde_json` directly, following the real
//! APIs (the recorded corpus in `shared/wire-corpus` and the official SDKs,
//! which the crate's tests use as oracles), so the loop's encoders and
//! decoders are never tested against themselves.
//!
//! ```no_run
//! use nexus_tests::fake::{FakeProvider, Script, Scripts, Style, Turn};
//!
//! let fake = FakeProvider::start(Scripts::new("k").model(
//!     "m",
//!     Script::new(vec![Turn::default().call("add", r#"{"a":2,"b":2}"#), Turn::text("4")]),
//! ));
//! let url = format!("{}/chat/completions", fake.base_url(Style::OpenAi));
//! # let _ = url;
//! ```
//!
//! The model's turn is chosen from the request alone (the number of
//! assistant messages in its transcript), so one server serves many
//! concurrent conversations and a conversation resumed in another process.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod anthropic;
mod context;
mod faults;
mod gate;
mod gemini;
pub(crate) mod http;
mod openai;
mod output;
mod reply;
mod responses;
pub mod script;
mod server;
mod wire;

pub use gate::Gate;
pub use script::{
    ExpectFinal, Fault, FaultKind, Recorded, Script, Scripts, Thinking, ToolCallSpec, Turn, TurnUsage, DEFAULT_API_KEY,
};

use server::{lock, Shared};

/// What the fake's token counters (`/v1/messages/count_tokens`,
/// `:countTokens`) answer for a request body: a quarter of the length of
/// its compact JSON, rounded up. Tests recompute it from the recorded body.
pub fn fake_token_count(body: &Value) -> u64 {
    (body.to_string().len() as u64).div_ceil(4)
}

/// A wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Style {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Chat Completions.
    #[serde(rename = "openai")]
    OpenAi,
    /// Gemini generateContent.
    Gemini,
    /// OpenAI Responses.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
}

impl Style {
    /// All four.
    pub const ALL: [Style; 4] = [Style::Anthropic, Style::OpenAi, Style::Gemini, Style::OpenAiResponses];

    /// `anthropic` | `openai` | `gemini` | `openai-responses` (the corpus
    /// folders' names; the oracles call the last one `responses`).
    pub fn name(self) -> &'static str {
        match self {
            Style::Anthropic => "anthropic",
            Style::OpenAi => "openai",
            Style::Gemini => "gemini",
            Style::OpenAiResponses => "openai-responses",
        }
    }

    /// The oracles' name for the style.
    pub fn oracle_name(self) -> &'static str {
        match self {
            Style::OpenAiResponses => "responses",
            other => other.name(),
        }
    }
}

/// One request the server received, as received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// Which connection it came on (numbered from 0 in accept order).
    pub connection: u64,
    /// The method.
    pub method: String,
    /// Path plus query, as sent.
    pub target: String,
    /// Header names and values, in order (auth headers included: this is a test double).
    pub headers: Vec<(String, String)>,
    /// The body bytes (de-chunked).
    pub body: Vec<u8>,
    /// The body parsed as JSON, when it was a model call with a JSON body.
    pub json: Option<Value>,
    /// The wire format the path belongs to.
    pub style: Option<Style>,
    /// The model asked for.
    pub model: Option<String>,
    /// The script turn selected.
    pub turn: Option<usize>,
    /// The 0-based attempt at that turn.
    pub attempt: Option<u32>,
    /// The status answered (`None` when the connection was reset before any).
    pub status: Option<u16>,
    /// Whether a `100 Continue` was sent before the body.
    pub sent_continue: bool,
}

impl RecordedRequest {
    /// The first header named `name` (ASCII case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The path without the query.
    pub fn path(&self) -> &str {
        self.target.split_once('?').map_or(self.target.as_str(), |(p, _)| p)
    }
}

/// A running fake provider. Dropping it stops the server and waits for its threads.
pub struct FakeProvider {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl FakeProvider {
    /// Starts a server on `127.0.0.1` at a free port.
    ///
    /// # Panics
    /// When no loopback port can be bound (the tests using it cannot run then).
    pub fn start(scripts: Scripts) -> FakeProvider {
        match FakeProvider::start_on(scripts, 0) {
            Ok(fake) => fake,
            Err(e) => panic!("fake provider: cannot listen on 127.0.0.1: {e}"),
        }
    }

    /// Starts a server on `127.0.0.1:port` (`0` picks a free port).
    pub fn start_on(scripts: Scripts, port: u16) -> io::Result<FakeProvider> {
        let listener = TcpListener::bind(("127.0.0.1", port))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(scripts));
        let for_loop = Arc::clone(&shared);
        let accept = std::thread::Builder::new()
            .name("fake-provider-accept".to_string())
            .spawn(move || server::accept_loop(listener, for_loop))?;
        Ok(FakeProvider { addr, shared, accept: Some(accept) })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL a client of `style` is configured with: Anthropic
    /// `http://ADDR` (+ `/v1/messages`), OpenAI `http://ADDR/v1`
    /// (+ `/chat/completions`), Gemini `http://ADDR/v1beta`
    /// (+ `/models/{model}:generateContent`).
    pub fn base_url(&self, style: Style) -> String {
        match style {
            Style::Anthropic => format!("http://{}", self.addr),
            Style::OpenAi | Style::OpenAiResponses => format!("http://{}/v1", self.addr),
            Style::Gemini => format!("http://{}/v1beta", self.addr),
        }
    }

    /// The full URL of one model call, as each provider's client builds it.
    pub fn endpoint(&self, style: Style, model: &str, stream: bool) -> String {
        match style {
            Style::Anthropic => format!("{}/v1/messages", self.base_url(style)),
            Style::OpenAi => format!("{}/chat/completions", self.base_url(style)),
            Style::OpenAiResponses => format!("{}/responses", self.base_url(style)),
            Style::Gemini if stream => format!("{}/models/{model}:streamGenerateContent?alt=sse", self.base_url(style)),
            Style::Gemini => format!("{}/models/{model}:generateContent", self.base_url(style)),
        }
    }

    /// The accepted API key.
    pub fn api_key(&self) -> &str {
        &self.shared.scripts.api_key
    }

    /// Every request received so far, in order of completion.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The requests for one model.
    pub fn requests_for(&self, model: &str) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).iter().filter(|r| r.model.as_deref() == Some(model)).cloned().collect()
    }

    /// Forgets the recorded requests (attempt counts are kept).
    pub fn clear_requests(&self) {
        lock(&self.shared.requests).clear();
    }

    /// How many attempts at `turn` of `model` were made.
    pub fn attempts(&self, model: &str, turn: usize) -> u32 {
        lock(&self.shared.attempts).get(&(model.to_string(), turn)).copied().unwrap_or(0)
    }

    /// The `expect_final` checks that failed, in order.
    pub fn failures(&self) -> Vec<String> {
        lock(&self.shared.failures).clone()
    }

    /// How many replies the client stopped taking before their end (the
    /// connection was closed under a write): a client that cancels shows here.
    pub fn replies_cut_by_client(&self) -> u64 {
        self.shared.cut_by_client.load(Ordering::SeqCst)
    }

    /// How many connections the server has closed so far, live (a tool can
    /// wait on it to act only after the server hung up).
    pub fn closed_connections(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.shared.closed)
    }

    /// How many requests have arrived at the scripts' gate so far.
    pub fn gate_arrived(&self) -> usize {
        self.shared.gate.arrived()
    }

    /// Opens the scripts' gate: held requests are answered.
    pub fn open_gate(&self) {
        self.shared.gate.open();
    }

    /// Stops the server and waits for its threads (what dropping it does).
    pub fn stop(self) {}
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        // The accept loop blocks in accept(): one connection wakes it to see the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}
