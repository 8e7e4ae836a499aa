//! Tool calls and host answers in flight on threads, collected as they finish.
//!
//! A lone job with no timeout to enforce runs inline on the driver thread
//! (no thread spawn); this set is for everything else.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use nexus_proto::{Answer, Request, ToolReply};

use crate::cancel::{CancelGuard, CancelToken};
use crate::config::WaitFor;
use crate::tool::{timed_out, ToolJob};

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
}

pub(crate) struct Jobs {
    tx: Sender<Msg>,
    rx: Receiver<Msg>,
    waiting: Vec<Waiting>,
    _cancel: CancelGuard,
}

impl Jobs {
    pub(crate) fn new(cancel: &CancelToken) -> Jobs {
        let (tx, rx) = channel();
        let wake = tx.clone();
        let guard = cancel.on_cancel(move || {
            // The receiver may be gone already; nothing then waits to be woken.
            let _ = wake.send(Msg::Cancelled);
        });
        Jobs { tx, rx, waiting: Vec::new(), _cancel: guard }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub(crate) fn spawn_tool(&mut self, job: ToolJob) {
        let limit = job.timeout.map(|d| (Instant::now() + d, d, job.ctx.name().to_string()));
        self.waiting.push(Waiting { key: job.call_id.clone(), limit });
        let tx = self.tx.clone();
        std::thread::spawn(move || {
            let id = job.call_id.clone();
            let reply = job.run_blocking();
            let _ = tx.send(Msg::Tool(id, reply));
        });
    }

    pub(crate) fn spawn_answer(&mut self, wait_for: WaitFor, request: Request) {
        self.waiting.push(Waiting { key: request.id.clone(), limit: None });
        let tx = self.tx.clone();
        std::thread::spawn(move || {
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
            let msg = match wake {
                Some(at) => self.rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
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
