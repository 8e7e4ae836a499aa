//! Tool calls and host answers in flight on threads, collected as they finish.
//!
//! One call of a batch runs inline on the driver thread when nothing needs
//! watching meanwhile; this set is for everything else. The threads come
//! from the client's [`Workers`], so a busy client spawns none.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nexus_proto::{Answer, Request, ToolReply};

use crate::cancel::{CancelGuard, CancelToken};
use crate::config::WaitFor;
use crate::tool::{timed_out, ToolJob};

use super::workers::Workers;

/// How long a driver thread polls for a job's reply before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

enum Msg {
    Tool(String, ToolReply),
    Answer(Answer),
    Cancelled,
}

/// What finished.
pub(crate) enum Next {
    Tool(String, ToolReply),
    Answer(Answer),
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
        Jobs { tx, rx, waiting: Vec::new(), workers, _cancel: guard }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
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
