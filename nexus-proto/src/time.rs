//! Time as data. The core never reads a clock: every input that depends on
//! time carries a [`Timestamp`] the driver read from its own clock.

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch, as read by the driver.
///
/// Wall-clock milliseconds (not a monotonic `Instant`) because a suspended run
/// may be resumed in another process on another day, and its deadlines and
/// retry timers must still mean the same moment there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The timestamp `ms` milliseconds after `self`, saturating at the far future.
    pub fn plus_ms(self, ms: u64) -> Timestamp {
        Timestamp(self.0.saturating_add(ms))
    }

    /// Milliseconds from `self` until `later` (0 when `later` is not later).
    pub fn ms_until(self, later: Timestamp) -> u64 {
        later.0.saturating_sub(self.0)
    }
}
