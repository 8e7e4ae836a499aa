//! The gateway's event loops: one thread each, every one an executor, an
//! epoll reactor (mio, edge-triggered) and a timer set of its own.
//!
//! A proxied request costs two wake-ups (the client's request arrives, the
//! upstream's answer arrives) and, at the floor, one read and one write on
//! each side. smol's reactor (async-io over `polling`) adds to each wake-up
//! a `timerfd_settime` and an `epoll_ctl` for its timer, an `epoll_ctl` to
//! re-arm every oneshot source it waits on, reads that end in `EAGAIN`, a
//! reactor notification for every timer set or dropped, and, when another
//! thread holds the reactor, a hand-off between threads: about 30 system
//! calls a request where a byte-copying proxy makes 7. Here:
//!
//! * sockets are registered once, edge-triggered; a read that returns less
//!   than it asked for has emptied the socket, so the next read waits for
//!   the next edge instead of finding `EAGAIN` (as tokio's readiness does);
//! * timers are a map in the loop; its nearest deadline is `epoll_wait`'s
//!   timeout. Setting, moving or dropping one is no system call;
//! * a task and the sockets it waits on belong to one loop: waking it is a
//!   push onto that loop's queue. Only a waker called from another thread
//!   (async-io's timers, a channel fed by the Redis thread) crosses threads,
//!   through the loop's remote queue and an eventfd.
//!
//! * the request log's lines are batched per loop ([`log_line`]): one write
//!   for many requests, not one each.
//!
//! Futures that use smol's own sockets and timers still run here: async-io's
//! thread drives them and wakes the task from outside. The async driver and
//! everything off the gateway's hot path keep smol; [`sleep`] and the
//! upstream client pick the loop when they run on one.

mod log;
mod net;
mod timer;

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use async_task::{Runnable, Task};

pub(crate) use net::{connect, Listener, Stream};
pub(crate) use timer::{sleep, sleep_until, LoopTimer, Sleep};

/// The token of each loop's waker (sockets take the slab's keys, from 0).
const WAKE: mio::Token = mio::Token(usize::MAX);

/// Tasks run between two looks at the sockets when tasks keep waking each
/// other: I/O is not starved by a busy loop.
const BUDGET: usize = 256;

/// What other threads reach of a loop: its remote queue and its waker.
pub(crate) struct Remote {
    queue: Mutex<Vec<Runnable>>,
    /// Whether the waker has been rung since the loop last took the queue.
    rung: AtomicBool,
    waker: mio::Waker,
    /// Sockets dropped on another thread (or while the sources were
    /// borrowed), to be forgotten by this loop when it takes its remote side.
    released: Mutex<Vec<usize>>,
    halted: AtomicBool,
}

impl Remote {
    fn schedule(self: &Arc<Remote>, runnable: Runnable) {
        let mut runnable = Some(runnable);
        // `try_with`: a waker may be called while this thread's locals are
        // being torn down; the remote queue takes the task then.
        let _ = CURRENT.try_with(|c| {
            if let Some(local) = &*c.borrow() {
                if Arc::ptr_eq(&local.remote, self) {
                    if let Some(r) = runnable.take() {
                        local.queue.borrow_mut().push_back(r);
                    }
                }
            }
        });
        if let Some(runnable) = runnable {
            self.queue.lock().unwrap_or_else(|e| e.into_inner()).push(runnable);
            self.ring();
        }
    }

    fn ring(&self) {
        if !self.rung.swap(true, Ordering::AcqRel) {
            let _ = self.waker.wake();
        }
    }
}

/// The part of a loop only its own thread touches.
pub(crate) struct Local {
    remote: Arc<Remote>,
    registry: mio::Registry,
    queue: RefCell<VecDeque<Runnable>>,
    sources: RefCell<slab::Slab<Arc<net::Source>>>,
    timers: RefCell<timer::Timers>,
    log: RefCell<log::Batch>,
}

thread_local! {
    /// The loop this thread runs, if it runs one.
    static CURRENT: RefCell<Option<Rc<Local>>> = const { RefCell::new(None) };
}

/// The loop of the current thread.
pub(crate) fn current() -> Option<Rc<Local>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Writes one or more whole lines to stderr: batched with the loop's other
/// lines when this thread runs a loop (see `log`), at once otherwise.
/// `write` appends the lines to the buffer it is given.
pub(crate) fn log_line(write: impl FnOnce(&mut Vec<u8>) -> io::Result<()>) {
    match current() {
        Some(local) => local.log.borrow_mut().push(write),
        None => {
            let mut bytes = Vec::new();
            if write(&mut bytes).is_ok() {
                log::write_stderr(&bytes);
            }
        }
    }
}

/// Whether the current thread runs a loop.
pub(crate) fn on_loop() -> bool {
    CURRENT.with(|c| c.borrow().is_some())
}

/// A loop, as other threads hold it: spawn onto it, stop it.
#[derive(Clone)]
pub(crate) struct Handle(Arc<Remote>);

impl Handle {
    /// Runs `future` as a task of this loop.
    pub(crate) fn spawn<T: Send + 'static>(&self, future: impl Future<Output = T> + Send + 'static) -> Task<T> {
        let remote = self.0.clone();
        let (runnable, task) = async_task::spawn(future, move |r| remote.schedule(r));
        runnable.schedule();
        task
    }
}

/// Runs `future` as a task of the current thread's loop; off a loop, on
/// smol's global executor.
pub(crate) fn spawn<T: Send + 'static>(future: impl Future<Output = T> + Send + 'static) -> Task<T> {
    match current() {
        Some(local) => Handle(local.remote.clone()).spawn(future),
        None => smol::spawn(future),
    }
}

/// A set of running loops.
pub(crate) struct Runtime {
    handles: Vec<Handle>,
    threads: Vec<JoinHandle<()>>,
}

impl Runtime {
    /// Starts `n` loops (at least one), each on a thread named `{name}-{i}`.
    pub(crate) fn start(n: usize, name: &str) -> io::Result<Runtime> {
        let mut rt = Runtime { handles: Vec::new(), threads: Vec::new() };
        for i in 0..n.max(1) {
            let poll = mio::Poll::new()?;
            let registry = poll.registry().try_clone()?;
            let remote = Arc::new(Remote {
                queue: Mutex::new(Vec::new()),
                rung: AtomicBool::new(false),
                waker: mio::Waker::new(poll.registry(), WAKE)?,
                released: Mutex::new(Vec::new()),
                halted: AtomicBool::new(false),
            });
            let for_thread = remote.clone();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || run(for_thread, poll, registry))?;
            rt.handles.push(Handle(remote));
            rt.threads.push(thread);
        }
        Ok(rt)
    }

    pub(crate) fn handles(&self) -> &[Handle] {
        &self.handles
    }

    /// Stops every loop (the tasks still there are dropped) and joins their threads.
    pub(crate) fn stop(&mut self) {
        for h in &self.handles {
            h.0.halted.store(true, Ordering::SeqCst);
            let _ = h.0.waker.wake();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One loop, until it is halted.
fn run(remote: Arc<Remote>, mut poll: mio::Poll, registry: mio::Registry) {
    let local = Rc::new(Local {
        remote: remote.clone(),
        registry,
        queue: RefCell::new(VecDeque::new()),
        sources: RefCell::new(slab::Slab::new()),
        timers: RefCell::new(timer::Timers::default()),
        log: RefCell::new(log::Batch::default()),
    });
    CURRENT.with(|c| *c.borrow_mut() = Some(local.clone()));
    let mut events = mio::Events::with_capacity(1024);
    while !remote.halted.load(Ordering::Acquire) {
        run_tasks(&local);
        let now = Instant::now();
        let wait = if !local.queue.borrow().is_empty() || remote.rung.load(Ordering::Acquire) {
            Some(Duration::ZERO)
        } else {
            // The sooner of the next timer and the log batch's deadline.
            [local.timers.borrow().next_wait(now), local.log.borrow().next_wait(now)].into_iter().flatten().min()
        };
        if let Err(e) = poll.poll(&mut events, wait) {
            if e.kind() != io::ErrorKind::Interrupted {
                // epoll_wait fails only on a bad descriptor or memory: nothing
                // this loop can mend. Back off instead of spinning.
                std::thread::sleep(Duration::from_millis(10));
            }
            continue;
        }
        {
            let sources = local.sources.borrow();
            for ev in events.iter() {
                if ev.token() == WAKE {
                    continue;
                }
                if let Some(source) = sources.get(ev.token().0) {
                    source.on_event(ev);
                }
            }
        }
        let now = Instant::now();
        local.log.borrow_mut().write_if_due(now);
        let due = local.timers.borrow_mut().take_due(now);
        for waker in due {
            waker.wake();
        }
    }
    shut(&local);
    // After the tasks: a request cut short by the stop logs as it drops.
    local.log.borrow_mut().write();
    CURRENT.with(|c| *c.borrow_mut() = None);
}

/// Runs queued tasks (this loop's, then those woken from other threads)
/// until none is left or the budget is spent.
fn run_tasks(local: &Local) {
    let mut ran = 0;
    while ran < BUDGET {
        let next = local.queue.borrow_mut().pop_front();
        let runnable = match next {
            Some(r) => r,
            None => {
                if !take_remote(local) {
                    break;
                }
                continue;
            }
        };
        runnable.run();
        ran += 1;
    }
}

/// Takes what other threads left since the waker was rung: tasks onto the
/// local queue, sockets dropped there out of the sources. Whether any task
/// came.
fn take_remote(local: &Local) -> bool {
    if !local.remote.rung.swap(false, Ordering::AcqRel) {
        return false;
    }
    let released = std::mem::take(&mut *local.remote.released.lock().unwrap_or_else(|e| e.into_inner()));
    if !released.is_empty() {
        let mut sources = local.sources.borrow_mut();
        for token in released {
            sources.try_remove(token);
        }
    }
    let taken = std::mem::take(&mut *local.remote.queue.lock().unwrap_or_else(|e| e.into_inner()));
    let any = !taken.is_empty();
    local.queue.borrow_mut().extend(taken);
    any
}

/// Drops every task the loop still holds: queued ones, and those that wait
/// on its sockets and timers (their wakers are the only references left).
fn shut(local: &Local) {
    loop {
        let queued: Vec<Runnable> = local.queue.borrow_mut().drain(..).collect();
        take_remote(local);
        let wakers: Vec<_> = local.sources.borrow().iter().flat_map(|(_, s)| s.take_wakers()).collect();
        let timers = local.timers.borrow_mut().take_all();
        if queued.is_empty() && wakers.is_empty() && timers.is_empty() && local.queue.borrow().is_empty() {
            break;
        }
        // Dropped outside every borrow: a task's future drops its sockets,
        // which remove themselves from the loop.
        drop(queued);
        drop(wakers);
        drop(timers);
    }
    local.sources.borrow_mut().clear();
}

#[cfg(test)]
mod tests;
