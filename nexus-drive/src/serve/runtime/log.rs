//! Lines for stderr (the request log), batched per loop.
//!
//! Written one `write` per line, the request log cost a system call per
//! request, about a tenth of the gateway's CPU per request at one
//! connection (BENCHMARKS.md §8, "Laid out by BOLT, ..."). A loop instead
//! keeps its lines and writes them together: when they reach
//! [`BATCH_BYTES`], [`DELAY`] after the first of them, and when the loop
//! stops. A reader following the log sees each line within [`DELAY`];
//! lines stay whole and in each loop's order.

use std::io::Write;
use std::time::{Duration, Instant};

/// A batch is written once it holds this many bytes (about fifty lines) ...
pub(super) const BATCH_BYTES: usize = 16 * 1024;
/// ... or this long after its first line.
pub(super) const DELAY: Duration = Duration::from_millis(100);

/// One loop's unwritten lines.
#[derive(Default)]
pub(super) struct Batch {
    bytes: Vec<u8>,
    /// When the first unwritten line came.
    since: Option<Instant>,
}

impl Batch {
    /// Appends what `write` writes (whole lines); a write that fails leaves
    /// nothing of itself behind.
    pub(super) fn push(&mut self, write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) {
        let before = self.bytes.len();
        if write(&mut self.bytes).is_err() {
            self.bytes.truncate(before);
            return;
        }
        if before == 0 && !self.bytes.is_empty() {
            self.since = Some(Instant::now());
        }
        if self.bytes.len() >= BATCH_BYTES {
            self.write();
        }
    }

    /// How long the loop may sleep before this batch is due.
    pub(super) fn next_wait(&self, now: Instant) -> Option<Duration> {
        self.since.map(|t| (t + DELAY).saturating_duration_since(now))
    }

    /// Writes the batch if it is due at `now`.
    pub(super) fn write_if_due(&mut self, now: Instant) {
        if self.since.is_some_and(|t| now >= t + DELAY) {
            self.write();
        }
    }

    /// Writes every unwritten line.
    pub(super) fn write(&mut self) {
        if !self.bytes.is_empty() {
            write_stderr(&self.bytes);
        }
        self.bytes.clear();
        self.since = None;
    }
}

/// Whole lines to stderr in one call under its lock: lines written from two
/// threads (two loops' batches, or a line written off a loop) never interleave.
pub(super) fn write_stderr(lines: &[u8]) {
    let _ = std::io::stderr().lock().write_all(lines);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_due_after_its_delay_and_written_when_full() {
        let mut batch = Batch::default();
        assert_eq!(batch.next_wait(Instant::now()), None, "an empty batch is never due");
        batch.push(|b| {
            b.extend_from_slice(b"{\"a\":1}\n");
            Ok(())
        });
        let now = Instant::now();
        let wait = batch.next_wait(now).expect("a line waits");
        assert!(wait <= DELAY);
        batch.write_if_due(now);
        assert_eq!(batch.bytes, b"{\"a\":1}\n", "written before its delay");
        // A failed write leaves nothing of itself.
        batch.push(|b| {
            b.extend_from_slice(b"{\"half");
            Err(std::io::Error::other("no"))
        });
        assert_eq!(batch.bytes, b"{\"a\":1}\n");
        batch.write_if_due(now + DELAY);
        assert!(batch.bytes.is_empty() && batch.next_wait(now).is_none(), "due after its delay");
        // A full batch goes at once.
        let line = vec![b'x'; BATCH_BYTES];
        batch.push(|b| {
            b.extend_from_slice(&line);
            Ok(())
        });
        assert!(batch.bytes.is_empty(), "a full batch waits for nothing");
    }
}
