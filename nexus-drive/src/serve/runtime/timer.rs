//! A loop's timers: an ordered map of deadlines whose first entry bounds
//! the loop's wait. A deadline set, moved or dropped is a map operation,
//! never a system call; the gateway sets several per request (hyper's
//! head timer, the body and upstream-head timeouts).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::{current, Local};

/// Deadlines, each with the waker of the task that waits for it.
#[derive(Default)]
pub(crate) struct Timers {
    /// Keyed by deadline, then by a number that tells equal deadlines apart.
    map: BTreeMap<(Instant, u64), Option<Waker>>,
    next: u64,
}

impl Timers {
    fn insert(&mut self, at: Instant, waker: Waker) -> u64 {
        self.next += 1;
        self.map.insert((at, self.next), Some(waker));
        self.next
    }

    fn update(&mut self, key: (Instant, u64), waker: &Waker) {
        if let Some(slot) = self.map.get_mut(&key) {
            if !slot.as_ref().is_some_and(|w| w.will_wake(waker)) {
                *slot = Some(waker.clone());
            }
        }
    }

    fn remove(&mut self, key: (Instant, u64)) {
        self.map.remove(&key);
    }

    /// How long the loop may wait for I/O before the first deadline.
    pub(super) fn next_wait(&self, now: Instant) -> Option<Duration> {
        self.map.first_key_value().map(|((at, _), _)| at.saturating_duration_since(now))
    }

    /// The wakers of every deadline that has passed, removed.
    pub(super) fn take_due(&mut self, now: Instant) -> Vec<Waker> {
        let mut due = Vec::new();
        while let Some(entry) = self.map.first_entry() {
            if entry.key().0 > now {
                break;
            }
            if let Some(w) = entry.remove() {
                due.push(w);
            }
        }
        due
    }

    pub(super) fn take_all(&mut self) -> Vec<Waker> {
        std::mem::take(&mut self.map).into_values().flatten().collect()
    }
}

/// Waits until a deadline: on the loop's timers when polled on a loop, on
/// smol's otherwise.
pub(crate) struct Sleep {
    at: Instant,
    state: State,
}

enum State {
    Unset,
    /// In the timers of the loop whose remote side is at this address.
    Loop {
        key: (Instant, u64),
        owner: usize,
    },
    Smol(smol::Timer),
}

/// Sleeps for `d`.
pub(crate) fn sleep(d: Duration) -> Sleep {
    sleep_until(Instant::now() + d)
}

/// Sleeps until `at`.
pub(crate) fn sleep_until(at: Instant) -> Sleep {
    Sleep { at, state: State::Unset }
}

fn owner_of(local: &Local) -> usize {
    Arc::as_ptr(&local.remote) as usize
}

impl Sleep {
    /// Moves the deadline.
    pub(crate) fn reset(&mut self, at: Instant) {
        self.cancel();
        self.at = at;
    }

    fn cancel(&mut self) {
        if let State::Loop { key, owner } = std::mem::replace(&mut self.state, State::Unset) {
            if let Some(local) = current().filter(|l| owner_of(l) == owner) {
                if let Ok(mut timers) = local.timers.try_borrow_mut() {
                    timers.remove(key);
                }
            }
            // Dropped elsewhere, the entry stays until its deadline and then
            // wakes a waker that no longer waits: harmless.
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        self.cancel();
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if Instant::now() >= this.at {
            this.cancel();
            return Poll::Ready(());
        }
        match &mut this.state {
            State::Smol(timer) => Pin::new(timer).poll(cx).map(|_| ()),
            State::Loop { key, owner } => {
                match current().filter(|l| owner_of(l) == *owner) {
                    Some(local) => local.timers.borrow_mut().update(*key, cx.waker()),
                    // Polled on another thread than the one it was set on
                    // (never in the gateway): start over where it is now.
                    None => {
                        this.cancel();
                        return Pin::new(this).poll(cx);
                    }
                }
                Poll::Pending
            }
            State::Unset => {
                match current() {
                    Some(local) => {
                        let id = local.timers.borrow_mut().insert(this.at, cx.waker().clone());
                        this.state = State::Loop { key: (this.at, id), owner: owner_of(&local) };
                    }
                    None => {
                        let mut timer = smol::Timer::at(this.at);
                        let polled = Pin::new(&mut timer).poll(cx).map(|_| ());
                        this.state = State::Smol(timer);
                        return polled;
                    }
                }
                Poll::Pending
            }
        }
    }
}

/// hyper's timer (the header-read timeout, h2's keep-alive pings) on the loop.
#[derive(Clone, Copy, Default)]
pub(crate) struct LoopTimer;

impl hyper::rt::Sleep for Sleep {}

impl hyper::rt::Timer for LoopTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(sleep(duration))
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(sleep_until(deadline))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        // hyper moves its header timer for every request: in place, no allocation.
        match sleep.as_mut().downcast_mut_pin::<Sleep>() {
            Some(s) => s.get_mut().reset(new_deadline),
            None => *sleep = Box::pin(sleep_until(new_deadline)),
        }
    }
}
