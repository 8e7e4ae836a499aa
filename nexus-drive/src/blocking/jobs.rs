//! Tool calls, host answers and sub-agents' model calls in flight on
//! threads, collected as they finish (or, for a model call, as each piece
//! of its response arrives).
//!
//! One call of a batch runs inline on the driver thread when nothing needs
//! watching meanwhile, and the top run's model call is read there too (it
//! is alone in the tree); this set is for everything else. The threads come
//! from the client's [`Workers`], so a busy client spawns none.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nexus_proto::{Answer, ExchangeId, HttpRequest, Request, ToolReply};

use crate::cancel::{CancelGuard, CancelToken};
use crate::config::WaitFor;
use crate::h1::Failure;
use crate::tool::{timed_out, ToolJob};

use super::h1;
use super::workers::Workers;

/// How long a driver thread polls for a job's reply before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

enum Msg {
    Tool(String, ToolReply),
    Answer(Answer),
    Exchange(ExchangeId, Piece),
    Cancelled,
}

/// A piece of a model call read on a thread of its own.
pub(crate) enum Piece {
    Head { status: u16, headers: Vec<(String, String)> },
    Chunk(Vec<u8>),
    End,
    Failed(Failure),
}

/// A model call on a thread: a cancel of the run stops it, and so does the
/// driver dropping it (its own token shuts its socket).
struct Stream {
    id: ExchangeId,
    stop: CancelToken,
    _run_cancel: CancelGuard,
}

impl Drop for Stream {
    /// A call dropped before its end (by the driver, or with the run)
    /// stops: a thread blocked on its socket returns at once.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What finished.
pub(crate) enum Next {
    Tool(String, ToolReply),
    Answer(Answer),
    /// A piece of a model call's response; after `End` or `Failed` the call is forgotten.
    Exchange(ExchangeId, Piece),
    /// `until` passed first.
    TimedOut,
    /// The run was cancelled.
    Cancelled,
}

struct Waiting {
    key: String,
    /// Tool timeouts: when to give up and the timeout given.
    limit: Option<(Instant, Duration, String)>,
    /// A tool call no thread has started yet: the driver may take it back.
    unstarted: Option<Slot>,
}

/// A tool call handed to a worker, taken by whichever of the worker and the
/// driver gets to it first. A driver that finished its own call would
/// otherwise wait for a parked thread to wake up (a scheduler tick on a busy
/// machine) to run a call it can run itself at once; a worker that did start
/// keeps it, so calls that take time still run side by side.
type Slot = Arc<Mutex<Option<ToolJob>>>;

pub(crate) struct Jobs {
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    waiting: Vec<Waiting>,
    streams: Vec<Stream>,
    cancel: CancelToken,
    workers: Arc<Workers>,
    _cancel: CancelGuard,
}

impl Jobs {
    pub(crate) fn new(cancel: &CancelToken, workers: Arc<Workers>) -> Jobs {
        let (tx, rx) = channel();
        let wake = tx.clone();
        let guard = cancel.on_cancel(move || {
            // The receiver may be gone already; nothing then waits to be woken.
            let _ = wake.send(Msg::Cancelled);
        });
        Jobs { tx, rx, waiting: Vec::new(), streams: Vec::new(), cancel: cancel.clone(), workers, _cancel: guard }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty() && self.streams.is_empty()
    }

    /// Sends `req` and reads its response on a thread of its own, each
    /// piece coming back through [`next`](Self::next): a sub-agent's model
    /// call beside the others of its turn. `until` bounds the exchange,
    /// `head` its response head (as [`h1::send`] takes them).
    pub(crate) fn spawn_exchange(
        &mut self,
        pool: &Arc<h1::Pool>,
        req: HttpRequest,
        until: Option<Instant>,
        head: Option<Instant>,
    ) {
        let id = req.exchange;
        let stop = CancelToken::new();
        let on_cancel = stop.clone();
        let guard = self.cancel.on_cancel(move || on_cancel.cancel());
        self.streams.push(Stream { id, stop: stop.clone(), _run_cancel: guard });
        let (tx, pool) = (self.tx.clone(), pool.clone());
        self.workers.run(move || {
            let piece = |p: Piece| tx.send(Msg::Exchange(id, p)).is_ok();
            let resp = match h1::send(&pool, &req, &stop, until, head) {
                Ok(resp) => resp,
                Err(f) => {
                    piece(Piece::Failed(f));
                    return;
                }
            };
            let mut body = resp.body;
            if !piece(Piece::Head { status: resp.status, headers: resp.headers }) {
                return;
            }
            loop {
                let sent = match h1::read(&mut body, &stop, until) {
                    Ok(0) => {
                        piece(Piece::End);
                        return;
                    }
                    Ok(n) => piece(Piece::Chunk(body.chunk(n).to_vec())),
                    Err(f) => {
                        piece(Piece::Failed(f));
                        return;
                    }
                };
                // The driver is gone, or dropped this call.
                if !sent || stop.is_cancelled() {
                    return;
                }
            }
        });
    }

    /// Stops the model calls `keep` refuses (the run no longer waits on them).
    pub(crate) fn retain_exchanges(&mut self, keep: impl Fn(ExchangeId) -> bool) {
        self.streams.retain(|s| keep(s.id));
    }

    pub(crate) fn spawn_tool(&mut self, job: ToolJob) {
        let limit = job.timeout.map(|d| (Instant::now() + d, d, job.ctx.name().to_string()));
        let key = job.call_id.clone();
        let slot: Slot = Arc::new(Mutex::new(Some(job)));
        // A call with a timeout stays with its thread, which the timeout watches.
        let unstarted = limit.is_none().then(|| slot.clone());
        self.waiting.push(Waiting { key, limit, unstarted });
        let tx = self.tx.clone();
        self.workers.run(move || {
            let Some(job) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() else {
                return; // the driver ran it
            };
            let id = job.call_id.clone();
            let reply = job.run_blocking();
            let _ = tx.send(Msg::Tool(id, reply));
        });
    }

    /// Takes back a tool call no worker has started, to run it on the driver thread.
    pub(crate) fn take_unstarted(&mut self) -> Option<ToolJob> {
        let (pos, job) = self.waiting.iter().enumerate().find_map(|(i, w)| {
            let slot = w.unstarted.as_ref()?;
            let job = slot.lock().unwrap_or_else(|e| e.into_inner()).take()?;
            Some((i, job))
        })?;
        self.waiting.swap_remove(pos);
        Some(job)
    }

    pub(crate) fn spawn_answer(&mut self, wait_for: WaitFor, request: Request) {
        self.waiting.push(Waiting { key: request.id.clone(), limit: None, unstarted: None });
        let tx = self.tx.clone();
        self.workers.run(move || {
            let _ = tx.send(Msg::Answer(answer_blocking(&wait_for, request)));
        });
    }

    /// Waits for the next job to finish, a tool timeout, `until`, or a cancel.
    pub(crate) fn next(&mut self, until: Option<Instant>) -> Next {
        loop {
            let soonest = self.waiting.iter().filter_map(|w| w.limit.as_ref().map(|l| l.0)).min();
            let wake = match (soonest, until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let msg = match self.spin() {
                Some(msg) => Ok(msg),
                None => match wake {
                    Some(at) => self.rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                    None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                },
            };
            match msg {
                Ok(Msg::Tool(id, reply)) => {
                    if self.forget(&id) {
                        return Next::Tool(id, reply);
                    }
                    // A late reply of a call that already timed out.
                }
                Ok(Msg::Answer(a)) => {
                    if self.forget(&a.id) {
                        return Next::Answer(a);
                    }
                }
                Ok(Msg::Exchange(id, piece)) => {
                    let Some(pos) = self.streams.iter().position(|s| s.id == id) else {
                        // A piece of a call the driver dropped.
                        continue;
                    };
                    if matches!(piece, Piece::End | Piece::Failed(_)) {
                        self.streams.swap_remove(pos);
                    }
                    return Next::Exchange(id, piece);
                }
                Ok(Msg::Cancelled) => return Next::Cancelled,
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    let now = Instant::now();
                    let expired = self.waiting.iter().position(|w| w.limit.as_ref().is_some_and(|l| l.0 <= now));
                    if let Some(pos) = expired {
                        let w = self.waiting.swap_remove(pos);
                        if let Some((_, d, name)) = w.limit {
                            return Next::Tool(w.key, timed_out(&name, d));
                        }
                    }
                    if until.is_some_and(|u| u <= now) {
                        return Next::TimedOut;
                    }
                }
            }
        }
    }

    /// Polls for a finished job for up to [`SPIN`] before the driver thread
    /// goes to sleep. Most tools are quick: their reply lands within
    /// microseconds, while putting the driver to sleep and waking it again
    /// costs two context switches and, on a virtual machine, an
    /// inter-processor interrupt: more than the tool itself.
    fn spin(&self) -> Option<Msg> {
        let start = Instant::now();
        loop {
            if let Ok(msg) = self.rx.try_recv() {
                return Some(msg);
            }
            if start.elapsed() >= SPIN {
                return None;
            }
            std::hint::spin_loop();
        }
    }

    fn forget(&mut self, key: &str) -> bool {
        match self.waiting.iter().position(|w| w.key == key) {
            Some(pos) => {
                self.waiting.swap_remove(pos);
                true
            }
            None => false,
        }
    }
}

/// Asks the host; a panicking answerer declines (the run goes on).
pub(crate) fn answer_blocking(wait_for: &WaitFor, request: Request) -> Answer {
    let id = request.id.clone();
    catch_unwind(AssertUnwindSafe(|| match wait_for {
        WaitFor::Blocking(f) => f(request),
        WaitFor::Async(f) => futures_lite::future::block_on(f(request)),
    }))
    .unwrap_or_else(|_| Answer::declined(id, "cancelled"))
}
