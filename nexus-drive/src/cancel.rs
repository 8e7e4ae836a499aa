//! The cancel handle shared by a host and a running driver.
//!
//! One primitive serves both drivers: a flag, a condition variable for the
//! blocking driver's interruptible sleeps, and a list of listeners (wakers for
//! the async driver, socket shutdowns for ureq) that fire once on cancel.

// Each driver uses a part of this; with one driver (or none) compiled in,
// the rest is unused by design.
#![cfg_attr(not(all(feature = "blocking", feature = "async")), allow(dead_code))]

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// Cancels the runs it is given to. Cheap to clone; every clone cancels the same runs.
///
/// On cancel an in-flight model request is aborted (never retried), sleeps end,
/// and the run ends with [`RunError::Cancelled`](nexus_proto::RunError::Cancelled).
/// A tool that is running is not interrupted (it sees
/// [`ToolContext::is_cancelled`](crate::ToolContext::is_cancelled)); its result is discarded.
/// A cancelled token stays cancelled: a run started with it ends at once, so
/// give each cancellable run its own (see `Client::with_cancel`).
#[derive(Clone, Default)]
pub struct CancelToken(Arc<Inner>);

#[derive(Default)]
struct Inner {
    flag: AtomicBool,
    listeners: Mutex<Listeners>,
    cv: Condvar,
}

#[derive(Default)]
struct Listeners {
    next_id: u64,
    list: Vec<(u64, Listener)>,
}

enum Listener {
    Waker(Waker),
    Call(Box<dyn Fn() + Send + Sync>),
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken").field("cancelled", &self.is_cancelled()).finish()
    }
}

impl CancelToken {
    /// A token that has not been cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Cancels every run using this token. Idempotent.
    pub fn cancel(&self) {
        if self.0.flag.swap(true, Ordering::SeqCst) {
            return;
        }
        let list = std::mem::take(&mut self.lock().list);
        for (_, listener) in list {
            match listener {
                Listener::Waker(w) => w.wake(),
                Listener::Call(f) => f(),
            }
        }
        self.0.cv.notify_all();
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.flag.load(Ordering::SeqCst)
    }

    fn lock(&self) -> MutexGuard<'_, Listeners> {
        // A listener never panics while the lock is held, but a poisoned lock
        // still holds a usable list.
        self.0.listeners.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Blocks for `dur` or until cancelled. Returns whether it was cancelled
    /// (a host's periodic work, such as a claim heartbeat, stops on it).
    pub fn sleep(&self, dur: Duration) -> bool {
        let end = Instant::now() + dur;
        let mut guard = self.lock();
        loop {
            if self.is_cancelled() {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            guard = match self.0.cv.wait_timeout(guard, end - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    /// Runs `f` once on cancel (at once when already cancelled) unless the
    /// guard is dropped first.
    pub(crate) fn on_cancel(&self, f: impl Fn() + Send + Sync + 'static) -> CancelGuard {
        let mut l = self.lock();
        if self.is_cancelled() {
            drop(l);
            f();
            return CancelGuard { token: self.clone(), id: None };
        }
        let id = l.next_id;
        l.next_id += 1;
        l.list.push((id, Listener::Call(Box::new(f))));
        CancelGuard { token: self.clone(), id: Some(id) }
    }

    /// A future that completes when the token is cancelled.
    pub(crate) fn cancelled(&self) -> Cancelled<'_> {
        Cancelled { token: self, id: None }
    }

    fn remove(&self, id: u64) {
        self.lock().list.retain(|(i, _)| *i != id);
    }
}

/// Unregisters an [`CancelToken::on_cancel`] listener on drop.
pub(crate) struct CancelGuard {
    token: CancelToken,
    id: Option<u64>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.token.remove(id);
        }
    }
}

/// See [`CancelToken::cancelled`].
pub(crate) struct Cancelled<'a> {
    token: &'a CancelToken,
    id: Option<u64>,
}

impl Future for Cancelled<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.token.is_cancelled() {
            return Poll::Ready(());
        }
        let mut l = self.token.lock();
        // Checked again under the lock: cancel() sets the flag before taking it.
        if self.token.is_cancelled() {
            return Poll::Ready(());
        }
        match self.id {
            Some(id) => {
                if let Some((_, Listener::Waker(w))) = l.list.iter_mut().find(|(i, _)| *i == id) {
                    if !w.will_wake(cx.waker()) {
                        *w = cx.waker().clone();
                    }
                }
            }
            None => {
                let id = l.next_id;
                l.next_id += 1;
                l.list.push((id, Listener::Waker(cx.waker().clone())));
                drop(l);
                self.id = Some(id);
            }
        }
        Poll::Pending
    }
}

impl Drop for Cancelled<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            self.token.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn listeners_fire_once_and_guards_unregister() {
        let t = CancelToken::new();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let kept = t.on_cancel(move || {
            h.fetch_add(1, Ordering::SeqCst);
        });
        let h = hits.clone();
        let dropped = t.on_cancel(move || {
            h.fetch_add(10, Ordering::SeqCst);
        });
        drop(dropped);
        t.cancel();
        t.cancel();
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        drop(kept);
        // Registering after cancel runs at once.
        let h = hits.clone();
        let _g = t.on_cancel(move || {
            h.fetch_add(100, Ordering::SeqCst);
        });
        assert_eq!(hits.load(Ordering::SeqCst), 101);
    }

    #[test]
    fn sleep_ends_early_on_cancel() {
        let t = CancelToken::new();
        let t2 = t.clone();
        let start = Instant::now();
        let th = std::thread::spawn(move || t2.sleep(Duration::from_secs(30)));
        std::thread::sleep(Duration::from_millis(20));
        t.cancel();
        assert!(th.join().unwrap_or(false));
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(!CancelToken::new().sleep(Duration::from_millis(1)));
    }

    #[test]
    fn cancelled_future_completes() {
        let t = CancelToken::new();
        let t2 = t.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            t2.cancel();
        });
        futures_lite::future::block_on(t.cancelled());
        assert!(t.is_cancelled());
    }
}
