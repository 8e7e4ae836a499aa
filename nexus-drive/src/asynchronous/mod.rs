//! The async driver, on smol: the shared HTTP/1.1 client over smol sockets (`h1`) and the
//! batch's tool calls polled as concurrent futures (blocking tool bodies on
//! smol's blocking pool), beside the sub-agents' concurrent model calls. The
//! same pump as the blocking driver; only the I/O differs.

pub(crate) mod h1;

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use futures_lite::{FutureExt, Stream};
use nexus_proto::{Answer, ExchangeId, HttpRequest, InputError, Message, Request, Style, Timestamp, ToolReply};

use crate::cancel::CancelToken;
use crate::config::{ClientBuilder, ClientConfig, WaitFor};
use crate::engine::{self, Engine, Step};
use crate::error::DriveError;
use crate::input::{self, Claimed, RunInput};
use crate::result::{RunResult, StreamItem};
use crate::store::RunStore;
use crate::tool::ToolJob;

/// An async client. Cheap to clone; clones share the connection pool.
/// Its futures are `Send` and run on any executor that can drive smol's
/// reactor (smol, async-global-executor, `smol::block_on`, …).
#[derive(Clone)]
pub struct AsyncClient {
    cfg: Arc<ClientConfig>,
    pool: Arc<h1::Pool>,
    cancel: CancelToken,
}

impl std::fmt::Debug for AsyncClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncClient").field("config", &self.cfg).finish_non_exhaustive()
    }
}

impl AsyncClient {
    /// A builder for a client of `style` and `model`:
    /// `AsyncClient::builder(Style::Anthropic, "claude-haiku-4-5").async_tool(lookup).build()?`.
    pub fn builder(style: Style, model: impl Into<String>) -> ClientBuilder<AsyncClient> {
        ClientConfig::builder(style, model).building()
    }

    /// A client for `config`, with its own keep-alive connection pool.
    pub fn new(config: ClientConfig) -> AsyncClient {
        let pool = Arc::new(h1::Pool::new(config.connect_timeout));
        let cancel = config.cancel.clone();
        AsyncClient { cfg: Arc::new(config), pool, cancel }
    }

    /// A handle on the same client (and pool) whose runs use `token`.
    pub fn with_cancel(&self, token: CancelToken) -> AsyncClient {
        AsyncClient { cfg: self.cfg.clone(), pool: self.pool.clone(), cancel: token }
    }

    /// The config.
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// Runs to its end from a prompt or any other [`RunInput`] (see
    /// [`blocking::Client::run`](crate::blocking::Client::run)).
    pub async fn run(&self, input: impl Into<RunInput>) -> Result<RunResult, DriveError> {
        let (engine, claimed) = input::open(&self.cfg, &self.cancel, input.into());
        let result = match engine {
            Ok(e) => self.drain(e).await,
            Err(e) => Err(e),
        };
        match claimed {
            Some(c) => c.settle(result),
            None => result,
        }
    }

    /// Runs `prompt` after `history`.
    pub async fn run_with_history(
        &self,
        mut history: Vec<Message>,
        prompt: impl Into<String>,
    ) -> Result<RunResult, DriveError> {
        history.push(Message::user(prompt));
        self.run_messages(history).await
    }

    /// Runs over `messages`, the last of which must be a user turn.
    pub async fn run_messages(&self, messages: Vec<Message>) -> Result<RunResult, DriveError> {
        let engine = Engine::start(self.cfg.clone(), self.cancel.clone(), messages)?;
        self.drain(engine).await
    }

    /// Continues a suspended run from its snapshot with the host's answers
    /// (see [`blocking::Client::resume`](crate::blocking::Client::resume) for the rules).
    pub async fn resume(&self, state: &[u8], answers: Vec<Answer>) -> Result<RunResult, DriveError> {
        let engine = Engine::resume(self.cfg.clone(), self.cancel.clone(), state, answers)?;
        self.drain(engine).await
    }

    /// Claims, resumes and writes back a stored run (see
    /// [`blocking::Client::resume_stored`](crate::blocking::Client::resume_stored)).
    /// The store is called inline: keep its operations short.
    pub async fn resume_stored(
        &self,
        store: &dyn RunStore,
        run_id: &str,
        answers: Vec<Answer>,
    ) -> Result<RunResult, DriveError> {
        let claimed = store.claim(run_id)?;
        let result = self.resume(&claimed.state, answers).await;
        engine::settle_stored(store, run_id, &claimed, result)
    }

    /// Continues a stored conversation (see [`blocking::Client::ask`](crate::blocking::Client::ask)).
    pub async fn ask(&self, conversation_id: &str, prompt: impl Into<String>) -> Result<RunResult, DriveError> {
        let history = engine::load_conversation(&self.cfg, conversation_id)?;
        let result = self.run_with_history(history, prompt).await?;
        engine::save_conversation(&self.cfg, conversation_id, &result)?;
        Ok(result)
    }

    /// Resumes a run that `ask` left pending and saves the conversation
    /// once it is no longer pending.
    pub async fn resume_ask(
        &self,
        conversation_id: &str,
        state: &[u8],
        answers: Vec<Answer>,
    ) -> Result<RunResult, DriveError> {
        engine::conversations(&self.cfg)?;
        let result = self.resume(state, answers).await?;
        engine::save_conversation(&self.cfg, conversation_id, &result)?;
        Ok(result)
    }

    /// [`run`](Self::run), yielding the run's events as they happen and its
    /// result last: a fresh run and a resumed or stored one alike.
    pub fn stream(
        &self,
        input: impl Into<RunInput>,
    ) -> impl Stream<Item = Result<StreamItem, DriveError>> + Send + 'static {
        let (engine, claimed) = input::open(&self.cfg, &self.cancel, input.into());
        let mut claimed = claimed;
        futures_lite::StreamExt::map(self.stream_of(engine), move |item| Claimed::settle_item(&mut claimed, item))
    }

    /// [`stream`](Self::stream) over `messages`.
    pub fn stream_messages(
        &self,
        messages: Vec<Message>,
    ) -> impl Stream<Item = Result<StreamItem, DriveError>> + Send + 'static {
        self.stream_of(Engine::start(self.cfg.clone(), self.cancel.clone(), messages))
    }

    /// A run on `prompt` suspended at once on host requests (see
    /// [`blocking::Client::stream_awaiting`](crate::blocking::Client::stream_awaiting)).
    pub fn stream_awaiting(
        &self,
        prompt: impl Into<String>,
        requests: Vec<Request>,
    ) -> impl Stream<Item = Result<StreamItem, DriveError>> + Send + 'static {
        let messages = vec![Message::user(prompt)];
        self.stream_of(Engine::start_awaiting(self.cfg.clone(), self.cancel.clone(), messages, requests))
    }

    /// [`resume`](Self::resume), as a stream.
    pub fn stream_resume(
        &self,
        state: &[u8],
        answers: Vec<Answer>,
    ) -> impl Stream<Item = Result<StreamItem, DriveError>> + Send + 'static {
        self.stream_of(Engine::resume(self.cfg.clone(), self.cancel.clone(), state, answers))
    }

    fn stream_of(
        &self,
        engine: Result<Engine, DriveError>,
    ) -> impl Stream<Item = Result<StreamItem, DriveError>> + Send + 'static {
        let seed = match engine {
            Ok(e) => Seed::Driver(Box::new(Driver::new(self.pool.clone(), e))),
            Err(e) => Seed::Error(e),
        };
        futures_lite::stream::unfold(seed, |seed| async move {
            match seed {
                Seed::Error(e) => Some((Err(e), Seed::Over)),
                Seed::Over => None,
                Seed::Driver(mut d) => {
                    let item = d.next().await?;
                    Some((item, Seed::Driver(d)))
                }
            }
        })
    }

    async fn drain(&self, engine: Engine) -> Result<RunResult, DriveError> {
        let mut driver = Driver::new(self.pool.clone(), engine);
        let on_event = self.cfg.on_event.clone();
        loop {
            match driver.next().await {
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

impl From<ClientConfig> for AsyncClient {
    fn from(config: ClientConfig) -> AsyncClient {
        AsyncClient::new(config)
    }
}

enum Seed {
    Driver(Box<Driver>),
    Error(DriveError),
    Over,
}

/// A finished piece of concurrent work.
enum Done {
    Tool(String, ToolReply),
    Answer(Answer),
    /// A sub-agent's model call has its response head (boxed: a response is
    /// far larger than the other pieces).
    Head(ExchangeId, Box<Result<h1::Response, h1::Failure>>),
}

type Work = Pin<Box<dyn Future<Output = Done> + Send>>;

/// What woke the driver up.
enum Woke {
    Chunk(ExchangeId, Result<usize, h1::Failure>),
    /// A piece of the body of `streams[i]`.
    Stream(usize, Result<usize, h1::Failure>),
    Work(Done),
    Timer,
    Cancelled,
}

/// One run being pumped.
struct Driver {
    engine: Engine,
    pool: Arc<h1::Pool>,
    /// The top run's response body (alone in the tree).
    body: Option<(ExchangeId, h1::Body)>,
    /// The response bodies of sub-agents' calls read side by side.
    streams: Vec<(ExchangeId, h1::Body)>,
    /// Tools, answers, and sub-agents' requests awaiting their head (these
    /// tagged with their exchange, so one the machine gave up on is dropped).
    work: Vec<(Option<ExchangeId>, Work)>,
    /// Which of `streams` is read first on the next wait: each in turn, so
    /// one that always has bytes ready cannot hold the others back.
    first: usize,
    alarm: Alarm,
    done: bool,
}

impl Driver {
    fn new(pool: Arc<h1::Pool>, engine: Engine) -> Driver {
        Driver {
            engine,
            pool,
            body: None,
            streams: Vec::new(),
            work: Vec::new(),
            first: 0,
            alarm: Alarm::new(),
            done: false,
        }
    }

    async fn next(&mut self) -> Option<Result<StreamItem, DriveError>> {
        if self.done {
            return None;
        }
        loop {
            match self.engine.step() {
                Step::Event(ev) => return Some(Ok(StreamItem::Event(ev))),
                Step::Send(req) => {
                    if self.engine.shares_time(req.exchange) {
                        // A sub-agent's call beside its siblings': its head is awaited with the other work.
                        let (pool, id) = (self.pool.clone(), req.exchange);
                        let sent = async move { Done::Head(id, Box::new(h1::send(&pool, &req).await)) };
                        self.work.push((Some(id), Box::pin(sent)));
                        continue;
                    }
                    self.body = None;
                    self.send(req).await;
                }
                Step::RunTools(jobs) => {
                    // Which calls run here is decided for the whole batch
                    // first: a call that turns out slow must not send its
                    // siblings elsewhere halfway through.
                    let (here, others): (Vec<ToolJob>, Vec<ToolJob>) = jobs.into_iter().partition(ToolJob::runs_inline);
                    for job in others {
                        let fut = job.run_async();
                        self.work.push((
                            None,
                            Box::pin(async move {
                                let (id, reply) = fut.await;
                                Done::Tool(id, reply)
                            }),
                        ));
                    }
                    // These would run on this thread inside their futures
                    // anyway: run now, without boxing those futures
                    // (kilobytes each, as they can also await the blocking
                    // pool and a timeout).
                    for job in here {
                        self.engine.run_here(job);
                    }
                }
                Step::Resolve(requests) => {
                    let Some(wait_for) = self.engine.config().wait_for.clone() else {
                        continue;
                    };
                    for request in requests {
                        let fut = answer_async(wait_for.clone(), request);
                        self.work.push((None, Box::pin(async move { Done::Answer(fut.await) })));
                    }
                }
                Step::Wait { until, busy } => {
                    if let Err(e) = self.wait(until, busy).await {
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
        self.streams.clear();
        self.work.clear();
        Some(item)
    }

    /// Sends a request and reads its head, racing the cancel token and the deadline.
    async fn send(&mut self, req: HttpRequest) {
        let cancel = self.engine.cancel_token().clone();
        // The head may be due before the run's deadline (the failover policy's head timeout).
        let deadline = self.engine.head_deadline(req.exchange);
        let alarm = self.alarm.at(deadline, &self.engine);
        let pool = self.pool.clone();
        // A stack temporary, matched right away: boxing the response buys nothing.
        #[allow(clippy::large_enum_variant)]
        enum Sent {
            Response(Result<h1::Response, h1::Failure>),
            Cancelled,
            Deadline,
        }
        let sent = async { Sent::Response(h1::send(&pool, &req).await) }
            .or(async {
                cancel.cancelled().await;
                Sent::Cancelled
            })
            .or(async {
                alarm.await;
                Sent::Deadline
            })
            .await;
        match sent {
            Sent::Response(Ok(resp)) => {
                if self.engine.on_head(req.exchange, resp.status, resp.headers) {
                    self.body = Some((req.exchange, resp.body));
                }
            }
            Sent::Response(Err(f)) => self.engine.on_transport_error(req.exchange, f.kind, f.message),
            // `step` feeds the cancel.
            Sent::Cancelled => {}
            Sent::Deadline => self.engine.on_timeout(),
        }
    }

    /// Makes progress on whatever is in flight, or sleeps until `until`.
    async fn wait(&mut self, until: Option<Timestamp>, busy: bool) -> Result<(), DriveError> {
        let cancel = self.engine.cancel_token().clone();
        let Driver { body, streams, work, first, alarm, engine, .. } = self;
        *first = first.wrapping_add(1);
        let first = *first;
        if body.is_none() && streams.is_empty() && work.is_empty() && until.is_none() {
            return Err(DriveError::Input(InputError::OutOfOrder(if busy {
                "the run waits on work this driver lost"
            } else {
                "the run waits with nothing in flight"
            })));
        }
        let progress = async {
            if let Some((id, b)) = body.as_mut() {
                return Woke::Chunk(*id, b.read().await);
            }
            if streams.is_empty() {
                if !work.is_empty() {
                    return Woke::Work(first_done(work).await);
                }
                return std::future::pending().await;
            }
            first_progress(streams, work, first).await
        };
        let alarm = alarm.at(until, engine);
        let woke = progress
            .or(async {
                alarm.await;
                Woke::Timer
            })
            .or(async {
                cancel.cancelled().await;
                Woke::Cancelled
            })
            .await;
        match woke {
            Woke::Chunk(id, Ok(0)) => {
                self.body = None;
                self.engine.on_end(id);
            }
            Woke::Chunk(id, Ok(n)) => {
                // The body lends its own buffer: nothing is copied or kept per run.
                let keep = match &self.body {
                    Some((_, b)) => self.engine.on_body(id, b.chunk(n)),
                    None => false,
                };
                if !keep {
                    self.body = None;
                }
            }
            Woke::Chunk(id, Err(f)) => {
                self.body = None;
                self.engine.on_transport_error(id, f.kind, f.message);
            }
            Woke::Stream(i, Ok(0)) => {
                let (id, _) = self.streams.swap_remove(i);
                self.engine.on_end(id);
            }
            Woke::Stream(i, Ok(n)) => {
                if let Some((id, b)) = self.streams.get(i) {
                    self.engine.on_body(*id, b.chunk(n));
                }
            }
            Woke::Stream(i, Err(f)) => {
                let (id, _) = self.streams.swap_remove(i);
                self.engine.on_transport_error(id, f.kind, f.message);
            }
            Woke::Work(Done::Head(id, sent)) => match *sent {
                Ok(resp) => {
                    if self.engine.on_head(id, resp.status, resp.headers) {
                        self.streams.push((id, resp.body));
                    }
                }
                Err(f) => self.engine.on_transport_error(id, f.kind, f.message),
            },
            Woke::Work(Done::Tool(id, reply)) => self.engine.on_tool_reply(&id, reply),
            Woke::Work(Done::Answer(answer)) => self.engine.on_answer(answer)?,
            Woke::Timer => self.engine.on_timeout(),
            Woke::Cancelled => {}
        }
        // Calls the machine gave up on (a head timeout, a newer request) stop.
        let engine = &self.engine;
        self.streams.retain(|(id, _)| engine.in_flight(*id));
        self.work.retain(|(id, _)| id.is_none_or(|id| engine.in_flight(id)));
        Ok(())
    }
}

/// The run's one timer, kept across waits and re-armed only when the time
/// it is asked to fire at moves.
///
/// async-io wakes its reactor each time a timer is registered, so a timer
/// made afresh per wait would cost the reactor a spurious turn (an `eventfd`
/// write, an `epoll_pwait` that returns at once, and the re-arming around
/// it) on every wait: on every chunk of a stream under a run deadline. One
/// kept timer is registered once per deadline; polling it again with the
/// same waker registers nothing.
struct Alarm {
    /// What the timer is armed for; `None` once it fired or when unarmed.
    armed: Option<Timestamp>,
    timer: smol::Timer,
}

impl Alarm {
    fn new() -> Alarm {
        Alarm { armed: None, timer: smol::Timer::never() }
    }

    /// Completes at `at` (a millisecond after, so the deadline has passed
    /// by the wall clock too when it fires), or never.
    fn at<'a>(&'a mut self, at: Option<Timestamp>, engine: &Engine) -> impl Future<Output = ()> + 'a {
        if self.armed != at {
            match at {
                Some(t) => self.timer.set_after(engine.until(t) + Duration::from_millis(1)),
                None => self.timer = smol::Timer::never(),
            }
            self.armed = at;
        }
        async move {
            if self.armed.is_none() {
                return std::future::pending().await;
            }
            (&mut self.timer).await;
            // A one-shot timer that fired stays quiet: the next wait for the
            // same time arms it again.
            self.armed = None;
        }
    }
}

/// The first of `work` to finish (removed from it).
async fn first_done(work: &mut Vec<(Option<ExchangeId>, Work)>) -> Done {
    futures_lite::future::poll_fn(|cx| poll_work(work, cx)).await
}

fn poll_work(work: &mut Vec<(Option<ExchangeId>, Work)>, cx: &mut std::task::Context<'_>) -> Poll<Done> {
    let ready = work.iter_mut().enumerate().find_map(|(i, (_, w))| match w.as_mut().poll(cx) {
        Poll::Ready(done) => Some((i, done)),
        Poll::Pending => None,
    });
    match ready {
        Some((i, done)) => {
            drop(work.swap_remove(i));
            Poll::Ready(done)
        }
        None => Poll::Pending,
    }
}

/// The first of `work` to finish, or the first piece of any of `streams`'
/// bodies, those read from `first` on (modulo their number). A body's read
/// is dropped unfinished when another wins: it consumes nothing until it
/// completes, so the next wait picks it up.
async fn first_progress(
    streams: &mut [(ExchangeId, h1::Body)],
    work: &mut Vec<(Option<ExchangeId>, Work)>,
    first: usize,
) -> Woke {
    type Read<'a> = Pin<Box<dyn Future<Output = Result<usize, h1::Failure>> + Send + 'a>>;
    let n = streams.len();
    let mut reads: Vec<Read<'_>> = streams.iter_mut().map(|(_, b)| Box::pin(b.read()) as Read<'_>).collect();
    futures_lite::future::poll_fn(|cx| {
        if let Poll::Ready(done) = poll_work(work, cx) {
            return Poll::Ready(Woke::Work(done));
        }
        for k in 0..n {
            let i = (first + k) % n;
            if let Some(Poll::Ready(r)) = reads.get_mut(i).map(|read| read.as_mut().poll(cx)) {
                return Poll::Ready(Woke::Stream(i, r));
            }
        }
        Poll::Pending
    })
    .await
}

/// Asks the host; a panicking answerer declines (the run goes on).
async fn answer_async(wait_for: WaitFor, request: Request) -> Answer {
    let id = request.id.clone();
    let answer = match wait_for {
        WaitFor::Blocking(f) => smol::unblock(move || catch_unwind(AssertUnwindSafe(|| f(request))).ok()).await,
        WaitFor::Async(f) => AssertUnwindSafe(f(request)).catch_unwind().await.ok(),
    };
    answer.unwrap_or_else(|| Answer::declined(id, "cancelled"))
}
