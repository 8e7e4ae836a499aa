//! Calls from the run's threads into JavaScript, and JavaScript's replies.
//!
//! Rust never waits on Node's thread: a run works on a thread of its own and
//! hands JavaScript one JSON message at a time through a thread-safe
//! function (queued onto the JS thread in order). A message that needs an
//! answer (a tool call, a request for `waitFor`) carries an `id`; the JS
//! side settles it with [`reply`], which wakes the waiting run thread.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use napi_derive::napi;
use serde_json::Value;

/// The JS function a run reports to: one JSON text argument, no error-first convention.
pub type HostFn = ThreadsafeFunction<String, (), String, Status, false>;

/// How often a thread waiting for JavaScript looks at its cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(20);

/// Replies awaited, by message id.
fn waiting() -> MutexGuard<'static, HashMap<u32, SyncSender<String>>> {
    static WAITING: OnceLock<Mutex<HashMap<u32, SyncSender<String>>>> = OnceLock::new();
    WAITING.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner())
}

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

/// One run's line to JavaScript.
pub struct Host {
    js: HostFn,
}

impl Host {
    /// A line over `js`.
    pub fn new(js: HostFn) -> Host {
        Host { js }
    }

    /// Sends `message` without waiting for anything back.
    pub fn tell(&self, message: &Value) {
        // A closed function (the environment is shutting down) has no one to tell.
        let _ = self.js.call(message.to_string(), ThreadsafeFunctionCallMode::NonBlocking);
    }

    /// Sends `message` with a fresh `id` and waits for JavaScript's
    /// [`reply`]; `None` when `cancelled()` turns true first, or when the
    /// message could not be delivered.
    pub fn ask(&self, mut message: Value, cancelled: &dyn Fn() -> bool) -> Option<Value> {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        waiting().insert(id, tx);
        message["id"] = Value::from(id);
        if self.js.call(message.to_string(), ThreadsafeFunctionCallMode::NonBlocking) != Status::Ok {
            waiting().remove(&id);
            return None;
        }
        loop {
            match rx.recv_timeout(CANCEL_POLL) {
                Ok(text) => return Some(serde_json::from_str(&text).unwrap_or(Value::Null)),
                Err(RecvTimeoutError::Timeout) if cancelled() => {
                    waiting().remove(&id);
                    return None;
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }
}

/// Settles the message `id` with `json` (the JS side's answer to a tool
/// call or a request). Returns whether a run was still waiting for it.
#[napi]
pub fn reply(id: u32, json: String) -> bool {
    match waiting().remove(&id) {
        Some(tx) => tx.send(json).is_ok(),
        None => false,
    }
}
