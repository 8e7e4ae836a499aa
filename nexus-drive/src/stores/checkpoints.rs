//! Progress saves while a claimed run is resumed, so that a worker dying
//! mid-resume leaves a state whose started calls come back in doubt.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use nexus_proto::{Input, Output, Run, Timestamp};

use super::{wall_clock_ms, Claim, ClaimStore, Lease, DEFAULT_LEASE_MS};
use crate::cancel::CancelToken;
use crate::cassette::Tap;
#[cfg(any(feature = "blocking", feature = "async"))]
use crate::error::DriveError;
#[cfg(any(feature = "blocking", feature = "async"))]
use crate::result::RunResult;
use crate::store::StoreError;

type Clock = dyn Fn() -> u64 + Send + Sync;

/// Resumes claimed runs and saves their progress in a [`ClaimStore`].
///
/// It is a [`Tap`]: give it to the client's config
/// ([`ClientBuilder::tap`](crate::ClientBuilder::tap)), then resume claimed
/// runs through [`resume`](Self::resume) (or `resume_async`). While a run
/// is resumed this way, its state is written under the claim
///
/// * when a batch of tools is handed out, **before** any of them runs: if
///   the worker dies while they run, the next claimer restores a state in
///   which they were started, and the ledger surfaces each as an `in_doubt`
///   request instead of running it again;
/// * at the first model request after that batch, once its results are in
///   the transcript: a worker dying during the model call leaves the
///   results saved, and the next claimer sends the request again.
///
/// Each save extends the lease, and so does a heartbeat (a thread renewing
/// the claim every third of the lease, [`ClaimStore::renew_claim`]) for as
/// long as the resume runs: a resume that outlives its lease keeps its run
/// while this process is alive, and a dead process's claim still runs out
/// one lease after its last renewal. At the end the run is written back
/// (suspended again), removed (finished; its transcript saved to its
/// conversation), or released with the error (failed).
///
/// When a save is refused (the lease ran out and another worker claimed the
/// run) or fails, the resume is cancelled and ends with that
/// [`StoreError`]; nothing more is written. A tool of the batch being handed
/// out at that moment still starts (a [`Tap`] cannot stop it), but it sees
/// [`ToolContext::is_cancelled`](crate::ToolContext::is_cancelled): tools
/// with side effects should check it first, and use their
/// [`idempotency_key`](crate::ToolContext::idempotency_key). A renewal
/// that finds the claim lost ends the resume the same way (a renewal that
/// merely fails, the store unreachable, is tried again at the next beat).
///
/// Runs are matched by run id, which is also their store key
/// ([`ClaimStore::insert_run`] stores them so). Runs the client drives
/// otherwise (new runs, plain `resume`) are not touched. Another tap (a
/// cassette recorder) can be chained behind it with [`chain`](Self::chain).
pub struct Checkpoints<S: ?Sized> {
    store: Arc<S>,
    lease_ms: u64,
    clock: Arc<Clock>,
    inner: Option<Arc<dyn Tap>>,
    active: Mutex<HashMap<String, Active>>,
    /// Held across each claim write (a save or a renewal): a renewal must
    /// name the version the last save left, or it would look lost.
    writing: Mutex<()>,
}

struct Active {
    lease: Lease,
    cancel: CancelToken,
    /// A tool batch was handed out since the last save.
    tools_out: bool,
    /// Why a save failed: the resume is over for this worker.
    lost: Option<StoreError>,
}

impl<S: ?Sized> fmt::Debug for Checkpoints<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Checkpoints")
            .field("lease_ms", &self.lease_ms)
            .field("active", &lock(&self.active).len())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing panics while the map is locked; a poisoned map is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<S: ClaimStore + ?Sized + 'static> Checkpoints<S> {
    /// Checkpoints into `store`, with the [default lease](DEFAULT_LEASE_MS)
    /// and the wall clock.
    pub fn new(store: Arc<S>) -> Checkpoints<S> {
        Checkpoints {
            store,
            lease_ms: DEFAULT_LEASE_MS,
            clock: Arc::new(wall_clock_ms),
            inner: None,
            active: Mutex::new(HashMap::new()),
            writing: Mutex::new(()),
        }
    }

    /// The lease each claim and each save takes, in ms.
    pub fn with_lease_ms(mut self, lease_ms: u64) -> Checkpoints<S> {
        self.lease_ms = lease_ms;
        self
    }

    /// The clock (ms since the epoch) claims and saves are stamped with.
    pub fn with_clock(mut self, clock: impl Fn() -> u64 + Send + Sync + 'static) -> Checkpoints<S> {
        self.clock = Arc::new(clock);
        self
    }

    /// Shows every run, input and output to `tap` too (after the save).
    pub fn chain(mut self, tap: Arc<dyn Tap>) -> Checkpoints<S> {
        self.inner = Some(tap);
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// The lease in ms.
    pub fn lease_ms(&self) -> u64 {
        self.lease_ms
    }

    /// The clock's time.
    pub fn now(&self) -> u64 {
        (self.clock)()
    }

    /// Claims the run `run_id` (see [`ClaimStore::claim_run`]).
    pub fn claim(&self, run_id: &str) -> Result<Claim, StoreError> {
        self.store.claim_run(run_id, self.now(), self.lease_ms)
    }

    /// Claims the run that waited longest among those with an answer (see
    /// [`ClaimStore::claim_ready`]).
    pub fn claim_ready(&self) -> Result<Option<Claim>, StoreError> {
        self.store.claim_ready(self.now(), self.lease_ms)
    }

    /// Resumes a claimed run with its recorded answers on `client` (whose
    /// config must have this as its tap), saving progress as it goes, and
    /// settles it in the store. The config's cancel token still cancels it.
    ///
    /// A client whose tap is not this one could not save progress: the
    /// claim is released untouched and the call fails with
    /// [`DriveError::Config`].
    #[cfg(feature = "blocking")]
    pub fn resume(&self, client: &crate::blocking::Client, claim: Claim) -> Result<RunResult, DriveError> {
        let Claim { lease, state, answers, .. } = claim;
        self.check_tap(client.config(), &lease)?;
        let token = self.register(&lease, client.config().cancel_token());
        let stop = CancelToken::new();
        let result = std::thread::scope(|scope| {
            scope.spawn(|| self.heartbeat(&lease.run_id, &stop));
            let result = client.with_cancel(token.0).resume(&state, answers);
            stop.cancel();
            result
        });
        drop(token.1);
        let (lease, lost) = self.unregister(lease);
        self.settle(&lease, lost, result)
    }

    /// [`resume`](Self::resume) on the async driver.
    ///
    /// The bridge: the store's client is blocking, so the claim's final write
    /// runs on smol's blocking pool (`smol::unblock`). The progress saves
    /// run inline, on the executor thread, because the driver calls its tap
    /// synchronously: each is one short transaction.
    #[cfg(feature = "async")]
    pub async fn resume_async(
        self: &Arc<Self>,
        client: &crate::asynchronous::AsyncClient,
        claim: Claim,
    ) -> Result<RunResult, DriveError>
    where
        S: Send + Sync,
    {
        let Claim { lease, state, answers, .. } = claim;
        self.check_tap(client.config(), &lease)?;
        let token = self.register(&lease, client.config().cancel_token());
        // The heartbeat's writes block: a thread of its own, not the executor.
        let stop = CancelToken::new();
        let beat = {
            let (this, stop, run_id) = (Arc::clone(self), stop.clone(), lease.run_id.clone());
            std::thread::spawn(move || this.heartbeat(&run_id, &stop))
        };
        let result = client.with_cancel(token.0).resume(&state, answers).await;
        stop.cancel();
        let _ = smol::unblock(move || beat.join()).await;
        drop(token.1);
        let (lease, lost) = self.unregister(lease);
        let this = Arc::clone(self);
        smol::unblock(move || this.settle(&lease, lost, result)).await
    }

    /// Refuses a client that would resume without these checkpoints (the
    /// in-doubt guarantee needs the progress saves), giving the claim back.
    #[cfg(any(feature = "blocking", feature = "async"))]
    fn check_tap(&self, cfg: &crate::config::ClientConfig, lease: &Lease) -> Result<(), DriveError> {
        let ours = cfg.tap.as_ref().is_some_and(|t| std::ptr::addr_eq(Arc::as_ptr(t), self as *const Self));
        if ours {
            return Ok(());
        }
        let _ = self.store.release_claim(lease, None, self.now());
        Err(DriveError::Config(
            "the client's tap must be these Checkpoints (ClientBuilder::tap) to resume through them".into(),
        ))
    }

    /// Starts tracking a run; the returned token cancels its resume, and
    /// the guard links it to the config's token until dropped.
    #[cfg(any(feature = "blocking", feature = "async"))]
    fn register(&self, lease: &Lease, host: &CancelToken) -> (CancelToken, crate::cancel::CancelGuard) {
        let token = CancelToken::new();
        let linked = token.clone();
        let guard = host.on_cancel(move || linked.cancel());
        lock(&self.active).insert(
            lease.run_id.clone(),
            Active { lease: lease.clone(), cancel: token.clone(), tools_out: false, lost: None },
        );
        (token, guard)
    }

    /// Stops tracking a run: its latest lease, and why a save failed.
    #[cfg(any(feature = "blocking", feature = "async"))]
    fn unregister(&self, lease: Lease) -> (Lease, Option<StoreError>) {
        match lock(&self.active).remove(&lease.run_id) {
            Some(a) => (a.lease, a.lost),
            None => (lease, None),
        }
    }

    /// Writes the outcome under the claim: suspended again, finished, or released.
    #[cfg(any(feature = "blocking", feature = "async"))]
    fn settle(
        &self,
        lease: &Lease,
        lost: Option<StoreError>,
        result: Result<RunResult, DriveError>,
    ) -> Result<RunResult, DriveError> {
        if let Some(e) = lost {
            // Another worker owns the run now (or the store failed): write nothing.
            return Err(DriveError::Store(e));
        }
        let now = self.now();
        match result {
            Ok(r) => {
                match &r.suspended {
                    Some(s) => {
                        self.store.suspend_claimed(lease, &s.state, now)?;
                    }
                    None => self.store.finish_claimed(lease, Some(&r.messages), now)?,
                }
                Ok(r)
            }
            Err(e) => {
                // The run's last saved state stands; the failure is counted so
                // `claim_ready` stops offering a run that keeps failing. When
                // the release itself fails the claim simply runs out.
                let _ = self.store.release_claim(lease, Some(&e.to_string()), now);
                Err(e)
            }
        }
    }

    /// Renews the claim on `run_id` every third of the lease until `stop`
    /// is cancelled; a claim found lost is recorded and the resume cancelled.
    #[cfg(any(feature = "blocking", feature = "async"))]
    fn heartbeat(&self, run_id: &str, stop: &CancelToken) {
        let every = std::time::Duration::from_millis((self.lease_ms / 3).max(1));
        while !stop.sleep(every) {
            let _writing = lock(&self.writing);
            let mut lease = match lock(&self.active).get(run_id) {
                Some(a) if a.lost.is_none() => a.lease.clone(),
                _ => return,
            };
            let renewed = self.store.renew_claim(&mut lease, self.now(), self.lease_ms);
            let cancel = {
                let mut map = lock(&self.active);
                let Some(a) = map.get_mut(run_id) else {
                    return;
                };
                match renewed {
                    Ok(()) => {
                        a.lease = lease;
                        None
                    }
                    Err(e @ (StoreError::Conflict { .. } | StoreError::NotFound(_))) => {
                        a.lost = Some(e);
                        Some(a.cancel.clone())
                    }
                    // The store did not answer: the lease still holds for
                    // two more beats; try again then.
                    Err(_) => None,
                }
            };
            if let Some(c) = cancel {
                c.cancel();
                return;
            }
        }
    }

    /// Saves the run's state under its claim, if it is one being resumed here.
    fn checkpoint(&self, run: &Run, handing_out_tools: bool) {
        let _writing = lock(&self.writing);
        let mut lease = {
            let mut map = lock(&self.active);
            let Some(a) = map.get_mut(run.id()) else {
                return;
            };
            if a.lost.is_some() || !(handing_out_tools || a.tools_out) {
                return;
            }
            a.tools_out = handing_out_tools;
            a.lease.clone()
        };
        let saved = self.store.save_progress(&mut lease, &run.snapshot(), self.now(), self.lease_ms);
        let cancel = {
            let mut map = lock(&self.active);
            let Some(a) = map.get_mut(run.id()) else {
                return;
            };
            match saved {
                Ok(()) => {
                    a.lease = lease;
                    None
                }
                Err(e) => {
                    a.lost = Some(e);
                    Some(a.cancel.clone())
                }
            }
        };
        if let Some(c) = cancel {
            c.cancel();
        }
    }
}

impl<S: ClaimStore + ?Sized + 'static> Tap for Checkpoints<S> {
    fn started(&self, run: &Run) {
        if let Some(t) = &self.inner {
            t.started(run);
        }
    }

    fn input(&self, now: Timestamp, input: &Input<'_>) {
        if let Some(t) = &self.inner {
            t.input(now, input);
        }
    }

    fn output(&self, run: &Run, output: &Output) {
        match output {
            // The calls are marked started in the state before the driver
            // gets them: saved now, they come back in doubt after a crash.
            Output::RunTools(_) => self.checkpoint(run, true),
            Output::Send(_) => self.checkpoint(run, false),
            _ => {}
        }
        if let Some(t) = &self.inner {
            t.output(run, output);
        }
    }
}
