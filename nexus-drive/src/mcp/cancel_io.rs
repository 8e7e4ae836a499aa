//! ureq agents whose connections can be shut down from another thread when
//! a run is cancelled (the MCP HTTP transport's).
//!
//! ureq has no per-request abort, but its TCP connector registers a shutdown
//! handle for every socket. A wrapping connector keeps those handles on the
//! transport; while a driver thread is inside ureq (sending, or reading the
//! body) the transport arms the run's [`CancelToken`] with them, so a cancel
//! from any thread shuts the socket and the blocked read returns at once.

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, Weak};

use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, DefaultConnector, NextTimeout, ShutdownHandle, Transport,
};

use crate::cancel::{CancelGuard, CancelToken};

thread_local! {
    /// The token of the run this thread is doing ureq I/O for.
    static CURRENT: RefCell<Option<CancelToken>> = const { RefCell::new(None) };
}

/// Marks this thread's ureq I/O as belonging to a run, for the scope's life.
struct Scope;

impl Scope {
    fn enter(token: &CancelToken) -> Scope {
        CURRENT.with(|c| *c.borrow_mut() = Some(token.clone()));
        Scope
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        CURRENT.with(|c| *c.borrow_mut() = None);
    }
}

/// An agent with `config` whose sockets a [`CancelToken`] can shut while
/// a thread does I/O inside [`with_cancel`] (the MCP HTTP transport closes a
/// call's response stream this way).
pub(crate) fn cancellable_agent(config: ureq::config::Config) -> ureq::Agent {
    ureq::Agent::with_parts(config, CancelConnector(DefaultConnector::new()), DefaultResolver::default())
}

/// Runs `f` with this thread's ureq I/O shut down by `token`'s cancel.
pub(crate) fn with_cancel<R>(token: &CancelToken, f: impl FnOnce() -> R) -> R {
    let _scope = Scope::enter(token);
    f()
}

/// The default connector chain, with each socket's shutdown handle kept on its transport.
#[derive(Debug)]
struct CancelConnector(DefaultConnector);

impl Connector<()> for CancelConnector {
    type Out = CancelTransport;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<()>,
    ) -> Result<Option<CancelTransport>, ureq::Error> {
        let captured: Arc<Mutex<Vec<Weak<dyn ShutdownHandle>>>> = Arc::default();
        let sink = captured.clone();
        let register = details.register_shutdown.clone();
        let details = ConnectionDetails {
            uri: details.uri,
            addrs: details.addrs.clone(),
            config: details.config,
            request_level: details.request_level,
            resolver: details.resolver,
            now: details.now,
            timeout: details.timeout,
            current_time: details.current_time.clone(),
            run_connector: details.run_connector.clone(),
            register_shutdown: Arc::new(move |handle: Weak<dyn ShutdownHandle>| {
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(handle.clone());
                register(handle)
            }),
        };
        let transport = self.0.connect(&details, chained)?;
        let handles: Arc<[Weak<dyn ShutdownHandle>]> =
            std::mem::take(&mut *captured.lock().unwrap_or_else(|e| e.into_inner())).into();
        Ok(transport.map(|inner| CancelTransport { inner, handles }))
    }
}

struct CancelTransport {
    inner: Box<dyn Transport>,
    handles: Arc<[Weak<dyn ShutdownHandle>]>,
}

impl fmt::Debug for CancelTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelTransport").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl CancelTransport {
    /// Arms the current run's token with this socket for one I/O call.
    fn arm(&self) -> Result<Option<CancelGuard>, ureq::Error> {
        CURRENT.with(|c| match &*c.borrow() {
            None => Ok(None),
            Some(token) if token.is_cancelled() => {
                Err(ureq::Error::Io(io::Error::new(io::ErrorKind::Interrupted, "the run was cancelled")))
            }
            Some(token) => {
                let handles = self.handles.clone();
                Ok(Some(token.on_cancel(move || {
                    for h in handles.iter() {
                        if let Some(h) = h.upgrade() {
                            h.shutdown();
                        }
                    }
                })))
            }
        })
    }
}

impl Transport for CancelTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        self.inner.buffers()
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        let _armed = self.arm()?;
        self.inner.transmit_output(amount, timeout)
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        let _armed = self.arm()?;
        self.inner.await_input(timeout)
    }

    fn is_open(&mut self) -> bool {
        self.inner.is_open()
    }

    fn is_tls(&self) -> bool {
        self.inner.is_tls()
    }
}
