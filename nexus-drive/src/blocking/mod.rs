//! The blocking driver: the shared HTTP/1.1 client over std sockets
//! (`h1`), threads for concurrent tools and for sub-agents' concurrent
//! model calls.
//!
//! Every entry point builds the same driver and pumps it; `run` drains
//! it (giving events to the config's `on_event`), `stream` yields it.

mod h1;
mod jobs;
mod workers;

use std::sync::Arc;
use std::time::Instant;

use nexus_proto::{Answer, ExchangeId, InputError, Message, Request, Style, TransportErrorKind};

use crate::cancel::CancelToken;
use crate::config::{ClientBuilder, ClientConfig};
use crate::engine::{self, Engine, Step};
use crate::error::DriveError;
use crate::input::{self, Claimed, RunInput};
use crate::result::{RunResult, StreamItem};
use crate::store::RunStore;
use crate::tool::ToolJob;
use jobs::{Jobs, Next, Piece};
use workers::Workers;

/// A blocking client. Cheap to clone; clones share the connection pool and
/// the threads that run tools.
#[derive(Clone)]
pub struct Client {
    cfg: Arc<ClientConfig>,
    pool: Arc<h1::Pool>,
    workers: Arc<Workers>,
    cancel: CancelToken,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("config", &self.cfg).finish_non_exhaustive()
    }
}

impl Client {
    /// A builder for a client of `style` and `model`:
    /// `Client::builder(Style::OpenAi, "gpt-4o-mini").tool(add).build()?`.
    pub fn builder(style: Style, model: impl Into<String>) -> ClientBuilder<Client> {
        ClientConfig::builder(style, model).building()
    }

    /// A client for `config`, with its own keep-alive connection pool.
    pub fn new(config: ClientConfig) -> Client {
        let pool = Arc::new(h1::Pool::new(config.connect_timeout));
        let cancel = config.cancel.clone();
        Client { cfg: Arc::new(config), pool, workers: Arc::default(), cancel }
    }

    /// A handle on the same client (and pool) whose runs use `token`.
    pub fn with_cancel(&self, token: CancelToken) -> Client {
        Client { cfg: self.cfg.clone(), pool: self.pool.clone(), workers: self.workers.clone(), cancel: token }
    }

    /// A client for `config` on this client's connection pool and tool
    /// threads: for hosts that vary a run's tools or callbacks per call
    /// (as a language binding does) without a new connection, and a new
    /// TLS handshake, per run. The pool keeps this client's connect timeout.
    pub fn with_config(&self, config: ClientConfig) -> Client {
        let cancel = config.cancel.clone();
        Client { cfg: Arc::new(config), pool: self.pool.clone(), workers: self.workers.clone(), cancel }
    }

    /// The config.
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// Runs to its end (done, pending or incomplete) from a prompt, or from
    /// any other [`RunInput`]: a transcript, a suspended state with answers,
    /// a stored run with answers.
    pub fn run(&self, input: impl Into<RunInput>) -> Result<RunResult, DriveError> {
        let (engine, claimed) = input::open(&self.cfg, &self.cancel, input.into());
        let result = engine.and_then(|e| self.drain(e));
        match claimed {
            Some(c) => c.settle(result),
            None => result,
        }
    }

    /// Runs `prompt` after `history`.
    pub fn run_with_history(
        &self,
        mut history: Vec<Message>,
        prompt: impl Into<String>,
    ) -> Result<RunResult, DriveError> {
        history.push(Message::user(prompt));
        self.run_messages(history)
    }

    /// Runs over `messages`, the last of which must be a user turn.
    pub fn run_messages(&self, messages: Vec<Message>) -> Result<RunResult, DriveError> {
        let engine = Engine::start(self.cfg.clone(), self.cancel.clone(), messages)?;
        self.drain(engine)
    }

    /// Continues a suspended run from its snapshot with the host's answers.
    /// An answer whose id matches no outstanding request is refused before
    /// anything is sent; answers for only some requests leave it pending on the rest.
    pub fn resume(&self, state: &[u8], answers: Vec<Answer>) -> Result<RunResult, DriveError> {
        let engine = Engine::resume(self.cfg.clone(), self.cancel.clone(), state, answers)?;
        self.drain(engine)
    }

    /// Claims the run `run_id` in `store`, resumes it, and writes it back
    /// (still pending) or removes it (finished). A run claimed by another
    /// worker is refused with [`StoreError::Claimed`](crate::StoreError::Claimed).
    pub fn resume_stored(
        &self,
        store: &dyn RunStore,
        run_id: &str,
        answers: Vec<Answer>,
    ) -> Result<RunResult, DriveError> {
        let claimed = store.claim(run_id)?;
        let result = self.resume(&claimed.state, answers);
        engine::settle_stored(store, run_id, &claimed, result)
    }

    /// Continues the conversation `conversation_id` of the config's
    /// conversation store with `prompt`, and saves it unless the run is pending.
    pub fn ask(&self, conversation_id: &str, prompt: impl Into<String>) -> Result<RunResult, DriveError> {
        let history = engine::load_conversation(&self.cfg, conversation_id)?;
        let result = self.run_with_history(history, prompt)?;
        engine::save_conversation(&self.cfg, conversation_id, &result)?;
        Ok(result)
    }

    /// Resumes a run that `ask` left pending and saves the conversation
    /// once it is no longer pending.
    pub fn resume_ask(
        &self,
        conversation_id: &str,
        state: &[u8],
        answers: Vec<Answer>,
    ) -> Result<RunResult, DriveError> {
        engine::conversations(&self.cfg)?;
        let result = self.resume(state, answers)?;
        engine::save_conversation(&self.cfg, conversation_id, &result)?;
        Ok(result)
    }

    /// [`run`](Self::run), yielding the run's events as they happen and its
    /// result last: a fresh run and a resumed or stored one alike.
    pub fn stream(&self, input: impl Into<RunInput>) -> RunStream<'_> {
        let (engine, claimed) = input::open(&self.cfg, &self.cancel, input.into());
        let mut stream = RunStream::new(self, engine);
        stream.claimed = claimed;
        stream
    }

    /// [`stream`](Self::stream) over `messages`.
    pub fn stream_messages(&self, messages: Vec<Message>) -> RunStream<'_> {
        RunStream::new(self, Engine::start(self.cfg.clone(), self.cancel.clone(), messages))
    }

    /// A run on `prompt` that suspends at once, before its first model call,
    /// on `requests` the host settles itself
    /// ([`Run::await_host`](nexus_proto::Run::await_host)): a step its tools
    /// depend on, such as an MCP server's authorization. The result is
    /// pending, with the state to keep; the host later restores it, calls
    /// [`Run::settle_host`](nexus_proto::Run::settle_host) for each request
    /// (adding the tools it brought) and resumes the new snapshot. For
    /// durable hosts: a client with `wait_for` would hand these requests to
    /// it, and their answers are not run inputs.
    pub fn stream_awaiting(&self, prompt: impl Into<String>, requests: Vec<Request>) -> RunStream<'_> {
        let messages = vec![Message::user(prompt)];
        RunStream::new(self, Engine::start_awaiting(self.cfg.clone(), self.cancel.clone(), messages, requests))
    }

    /// [`resume`](Self::resume), as a stream.
    pub fn stream_resume(&self, state: &[u8], answers: Vec<Answer>) -> RunStream<'_> {
        RunStream::new(self, Engine::resume(self.cfg.clone(), self.cancel.clone(), state, answers))
    }

    fn drain(&self, engine: Engine) -> Result<RunResult, DriveError> {
        let mut driver = Driver::new(self, engine);
        let on_event = self.cfg.on_event.clone();
        loop {
            match driver.next() {
                Some(Ok(StreamItem::Event(ev))) => {
                    if let Some(f) = &on_event {
                        f(&ev);
                    }
                }
                Some(Ok(StreamItem::Done(result))) => return Ok(result),
                Some(Err(e)) => return Err(e),
                None => return Err(DriveError::Input(InputError::Finished)),
            }
        }
    }
}

impl From<ClientConfig> for Client {
    fn from(config: ClientConfig) -> Client {
        Client::new(config)
    }
}

/// The events of a run, then its result. Ends after the result or an error.
pub struct RunStream<'c> {
    driver: Option<Driver<'c>>,
    error: Option<DriveError>,
    /// The stored run this one resumes, settled on the last item.
    claimed: Option<Claimed>,
}

impl<'c> RunStream<'c> {
    fn new(client: &'c Client, engine: Result<Engine, DriveError>) -> RunStream<'c> {
        match engine {
            Ok(e) => RunStream { driver: Some(Driver::new(client, e)), error: None, claimed: None },
            Err(e) => RunStream { driver: None, error: Some(e), claimed: None },
        }
    }
}

impl Iterator for RunStream<'_> {
    type Item = Result<StreamItem, DriveError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(e) = self.error.take() {
            return Some(Claimed::settle_item(&mut self.claimed, Err(e)));
        }
        let item = self.driver.as_mut()?.next();
        if item.is_none() {
            self.driver = None;
        }
        item.map(|item| Claimed::settle_item(&mut self.claimed, item))
    }
}

/// The body being read, and the deadline its reads are held to.
struct Body {
    id: ExchangeId,
    body: h1::Body,
    until: Option<Instant>,
}

/// One run being pumped.
struct Driver<'c> {
    client: &'c Client,
    engine: Engine,
    body: Option<Body>,
    jobs: Option<Jobs>,
    done: bool,
}

impl<'c> Driver<'c> {
    fn new(client: &'c Client, engine: Engine) -> Driver<'c> {
        Driver { client, engine, body: None, jobs: None, done: false }
    }

    fn next(&mut self) -> Option<Result<StreamItem, DriveError>> {
        if self.done {
            return None;
        }
        loop {
            match self.engine.step() {
                Step::Event(ev) => return Some(Ok(StreamItem::Event(ev))),
                Step::Send(req) => {
                    let until = self.engine.deadline().map(|d| Instant::now() + self.engine.until(d));
                    let head = self.engine.head_deadline(req.exchange).map(|d| Instant::now() + self.engine.until(d));
                    if self.engine.shares_time(req.exchange) {
                        // A sub-agent's call beside its siblings': read on a thread of its own.
                        let client = self.client;
                        self.jobs_mut().spawn_exchange(&client.pool, req, until, head);
                        continue;
                    }
                    // A new request supersedes a body still open (the machine gave up on it).
                    self.body = None;
                    match h1::send(&self.client.pool, &req, self.engine.cancel_token(), until, head) {
                        Ok(resp) => {
                            if self.engine.on_head(req.exchange, resp.status, resp.headers) {
                                self.body = Some(Body { id: req.exchange, body: resp.body, until });
                            }
                        }
                        Err(f) => self.transport_error(req.exchange, f.kind, f.message),
                    }
                }
                Step::RunTools(jobs) => {
                    // Calls may run on this thread only when nothing needs
                    // watching while it is busy: no other work in flight, no
                    // deadline, and no timeout on any call of the batch (a
                    // sibling's timeout would go unwatched).
                    if !(self.idle_jobs()
                        && self.engine.deadline().is_none()
                        && jobs.iter().all(|j| j.timeout.is_none()))
                    {
                        for job in jobs {
                            self.jobs_mut().spawn_tool(job);
                        }
                        continue;
                    }
                    // Calls of tools that have been quick run here, one after
                    // another: a hand-off would cost more than they take. Of
                    // the others, one runs here too (a lone call costs no
                    // hand-off) and the rest go to parked threads first, so
                    // they start at once.
                    let (mut here, mut others): (Vec<ToolJob>, Vec<ToolJob>) =
                        jobs.into_iter().partition(ToolJob::is_quick);
                    if let Some(job) = others.pop() {
                        here.push(job);
                    }
                    for job in others {
                        self.jobs_mut().spawn_tool(job);
                    }
                    for job in here {
                        self.engine.run_here(job);
                    }
                    // Calls no worker has started yet are quicker run here than waited for.
                    while let Some(job) = self.jobs.as_mut().and_then(Jobs::take_unstarted) {
                        self.engine.run_here(job);
                    }
                }
                Step::Resolve(requests) => {
                    let Some(wait_for) = self.engine.config().wait_for.clone() else {
                        continue;
                    };
                    let lone = requests.len() == 1 && self.idle_jobs() && self.engine.deadline().is_none();
                    for request in requests {
                        if lone {
                            let answer = jobs::answer_blocking(&wait_for, request);
                            if let Err(e) = self.engine.on_answer(answer) {
                                return self.finish(Err(e));
                            }
                        } else {
                            self.jobs_mut().spawn_answer(wait_for.clone(), request);
                        }
                    }
                }
                Step::Wait { until, busy } => {
                    if let Err(e) = self.wait(until, busy) {
                        return self.finish(Err(e));
                    }
                }
                Step::Finished(result) => return self.finish((*result).map(StreamItem::Done)),
            }
        }
    }

    fn finish(&mut self, item: Result<StreamItem, DriveError>) -> Option<Result<StreamItem, DriveError>> {
        self.done = true;
        self.body = None;
        self.jobs = None;
        Some(item)
    }

    fn idle_jobs(&self) -> bool {
        self.jobs.as_ref().is_none_or(Jobs::is_empty)
    }

    fn jobs_mut(&mut self) -> &mut Jobs {
        self.jobs.get_or_insert_with(|| Jobs::new(self.engine.cancel_token(), self.client.workers.clone()))
    }

    /// Makes progress on whatever is in flight, or sleeps until `until`.
    fn wait(&mut self, until: Option<nexus_proto::Timestamp>, busy: bool) -> Result<(), DriveError> {
        if let Some(body) = &mut self.body {
            let id = body.id;
            match h1::read(&mut body.body, self.engine.cancel_token(), body.until) {
                Ok(0) => {
                    self.body = None;
                    self.engine.on_end(id);
                }
                Ok(n) => {
                    if !self.engine.on_body(id, body.body.chunk(n)) {
                        self.body = None;
                    }
                }
                Err(f) => {
                    self.body = None;
                    self.transport_error(id, f.kind, f.message);
                }
            }
            return Ok(());
        }
        if let Some(jobs) = self.jobs.as_mut().filter(|j| !j.is_empty()) {
            let at = until.map(|t| Instant::now() + self.engine.until(t));
            match jobs.next(at) {
                Next::Tool(id, reply) => self.engine.on_tool_reply(&id, reply),
                Next::Answer(answer) => self.engine.on_answer(answer)?,
                Next::Exchange(id, piece) => self.on_piece(id, piece),
                Next::TimedOut => self.engine.on_timeout(),
                Next::Cancelled => {}
            }
            // Calls the machine gave up on (a head timeout, a newer request) stop.
            let engine = &self.engine;
            if let Some(jobs) = self.jobs.as_mut() {
                jobs.retain_exchanges(|id| engine.in_flight(id));
            }
            return Ok(());
        }
        match until {
            Some(t) => {
                if !self.engine.cancel_token().sleep(self.engine.until(t)) {
                    self.engine.on_timeout();
                }
                Ok(())
            }
            None if busy => Err(DriveError::Input(InputError::OutOfOrder("the run waits on work this driver lost"))),
            None => Err(DriveError::Input(InputError::OutOfOrder("the run waits with nothing in flight"))),
        }
    }

    /// A piece of a model call read on a thread of its own.
    fn on_piece(&mut self, id: ExchangeId, piece: Piece) {
        match piece {
            Piece::Head { status, headers } => {
                self.engine.on_head(id, status, headers);
            }
            Piece::Chunk(bytes) => {
                self.engine.on_body(id, &bytes);
            }
            Piece::End => self.engine.on_end(id),
            Piece::Failed(f) => self.transport_error(id, f.kind, f.message),
        }
    }

    fn transport_error(&mut self, id: ExchangeId, kind: TransportErrorKind, message: String) {
        if kind == TransportErrorKind::Timeout {
            // A socket timeout may fire a hair before the deadline by the run's clock:
            // let it pass, so the machine reports the deadline, not a timeout.
            if let Some(d) = self.engine.deadline() {
                let left = self.engine.until(d);
                if left < std::time::Duration::from_millis(250) {
                    self.engine.cancel_token().sleep(left);
                }
            }
        }
        self.engine.on_transport_error(id, kind, message);
    }
}
