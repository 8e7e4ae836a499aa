//! Parked threads that run a client's tool calls and host answers.
//!
//! Spawning a thread per call costs a `clone`, a stack mapping and its
//! teardown: tens of microseconds, more than a typical tool. A client keeps
//! the threads that finish a job parked for a while and hands the next job to
//! one of them; only when none is idle is a new one spawned. A thread idle for
//! [`IDLE`] exits, so an idle client holds no threads.

use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a finished thread waits for another job before it exits.
const IDLE: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

/// The idle threads of one client, each reachable through its own channel.
pub(crate) struct Workers {
    idle: Mutex<Vec<Sender<Job>>>,
    /// How long a parked thread waits for a job ([`IDLE`]).
    linger: Duration,
}

impl Default for Workers {
    fn default() -> Workers {
        Workers { idle: Mutex::default(), linger: IDLE }
    }
}

impl Workers {
    /// Runs `job` on an idle thread, or on a new one when none is idle.
    pub(crate) fn run(self: &Arc<Self>, job: impl FnOnce() + Send + 'static) {
        let mut job: Job = Box::new(job);
        {
            // Sent under the lock, so a thread that times out cannot drop its
            // receiver between being picked and being sent to (see below).
            let mut idle = lock(&self.idle);
            while let Some(tx) = idle.pop() {
                // A thread that timed out has dropped its receiver: the job
                // comes back and the next one is tried.
                match tx.send(job) {
                    Ok(()) => return,
                    Err(back) => job = back.0,
                }
            }
        }
        let workers = Arc::downgrade(self);
        std::thread::spawn(move || {
            job();
            let (tx, rx) = channel::<Job>();
            loop {
                // The client is gone: nobody will hand this thread work again.
                let Some(parked) = workers.upgrade() else { return };
                lock(&parked.idle).push(tx.clone());
                let linger = parked.linger;
                drop(parked);
                match rx.recv_timeout(linger) {
                    Ok(next) => next(),
                    Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                        let Some(parked) = workers.upgrade() else { return };
                        let idle = lock(&parked.idle);
                        // A job sent before this lock was taken is in the
                        // channel; once it is released the receiver is gone
                        // and a send fails back to `run`. No job is lost.
                        match rx.try_recv() {
                            Ok(next) => {
                                drop(idle);
                                next();
                            }
                            Err(_) => {
                                drop(rx);
                                return;
                            }
                        }
                    }
                }
            }
        });
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::mpsc::channel;

    #[test]
    fn finished_threads_take_the_next_jobs() {
        let workers = Arc::new(Workers::default());
        let (tx, rx) = channel();
        let mut seen = HashSet::new();
        for _ in 0..20 {
            let tx = tx.clone();
            workers.run(move || tx.send(std::thread::current().id()).unwrap());
            // One job at a time: each finds the thread the last one parked.
            seen.insert(rx.recv().unwrap());
            // The thread parks itself after sending; wait until it has.
            while workers.idle.lock().unwrap().is_empty() {
                std::thread::yield_now();
            }
        }
        assert_eq!(seen.len(), 1, "jobs run one after another spawned {} threads", seen.len());
    }

    #[test]
    fn concurrent_jobs_get_threads_of_their_own() {
        let workers = Arc::new(Workers::default());
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let (tx, rx) = channel();
        for _ in 0..4 {
            let (b, tx) = (barrier.clone(), tx.clone());
            // Every job waits for all four: they can only finish if they run at once.
            workers.run(move || {
                b.wait();
                tx.send(()).unwrap();
            });
        }
        for _ in 0..4 {
            rx.recv_timeout(Duration::from_secs(30)).expect("jobs ran concurrently");
        }
    }

    #[test]
    fn no_job_is_lost_to_a_thread_timing_out() {
        // Threads that give up after 50 µs, and jobs arriving about that
        // often: many are handed to a thread in the very moment it times out.
        let workers = Arc::new(Workers { idle: Mutex::default(), linger: Duration::from_micros(50) });
        let (tx, rx) = channel();
        const JOBS: usize = 3_000;
        for i in 0..JOBS {
            let tx = tx.clone();
            workers.run(move || tx.send(i).unwrap());
            std::thread::sleep(Duration::from_micros((i % 7) as u64 * 15));
        }
        let mut seen = vec![false; JOBS];
        for _ in 0..JOBS {
            let i = rx.recv_timeout(Duration::from_secs(30)).expect("a job was lost");
            seen[i] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
