//! A gate on model calls: the answers to the first requests for some models
//! are held until a set number of them have arrived. A client that has
//! those calls in flight at once gets its answers; one that sends them one
//! after another never completes the set, and the gate, after a long
//! bound, opens with a failure that names how many came together. Overlap
//! is proven by what the server saw, never by timing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::server::lock;

/// Which requests to hold, and how many must be held at once before any is answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    /// Requests for these models are held (others pass).
    pub models: Vec<String>,
    /// How many must have arrived before the held ones are answered.
    pub count: usize,
}

/// How long a held request waits for the rest before the gate gives up.
const GIVE_UP: Duration = Duration::from_secs(30);

/// A gate's live state.
#[derive(Default)]
pub struct GateState {
    /// Requests that arrived at the gate so far, and whether it opened.
    arrived: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl GateState {
    /// Holds a request for `model` while the gate is closed. Returns a
    /// failure to record when the gate opened without the full set.
    pub fn hold(&self, gate: &Gate, model: &str, shutdown: &AtomicBool) -> Option<String> {
        if !gate.models.iter().any(|m| m == model) {
            return None;
        }
        let mut state = lock(&self.arrived);
        if state.1 {
            return None;
        }
        state.0 += 1;
        if state.0 >= gate.count {
            state.1 = true;
            self.changed.notify_all();
            return None;
        }
        let started = Instant::now();
        while !state.1 {
            if shutdown.load(Ordering::SeqCst) {
                return None;
            }
            if started.elapsed() >= GIVE_UP {
                state.1 = true;
                self.changed.notify_all();
                return Some(format!(
                    "gate: {} of {} requests for {:?} arrived together",
                    state.0, gate.count, gate.models
                ));
            }
            // Short waits: a server shutting down is seen soon.
            state = self
                .changed
                .wait_timeout(state, Duration::from_millis(50))
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        None
    }

    /// How many requests have arrived at the gate.
    pub fn arrived(&self) -> usize {
        lock(&self.arrived).0
    }

    /// Opens the gate: held requests are answered, later ones pass.
    pub fn open(&self) {
        lock(&self.arrived).1 = true;
        self.changed.notify_all();
    }
}
