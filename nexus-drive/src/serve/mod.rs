//! `nexus serve`: an OpenAI-compatible gateway in front of Anthropic,
//! Gemini or an OpenAI-compatible upstream.
//!
//! Point the official OpenAI SDK (or anything that speaks Chat Completions)
//! at it and each `POST /v1/chat/completions` is translated with
//! [`nexus_proto::translate`], sent upstream as exactly one call, and
//! answered in OpenAI shapes — streamed or not, tool calls included. The
//! caller owns the conversation and runs its tools; the gateway keeps no
//! state between requests and executes nothing.
//!
//! * `GET /v1/models` lists the configured models, or (when none are
//!   configured) the upstream's own list, translated.
//! * The upstream key comes from the configuration (the CLI reads it from
//!   the environment); the client's bearer token is never forwarded unless
//!   [`ServeConfig::forward_client_key`] says so, and when
//!   [`ServeConfig::client_token`] is set the client must present it.
//! * Each connection has its own thread, so requests and streams never wait
//!   on one another; bodies over [`ServeConfig::max_body_bytes`] get 413.
//! * Malformed JSON, untranslatable requests and upstream failures are
//!   answered with OpenAI error objects and the matching status; upstream
//!   errors keep the upstream's message.
//! * [`ShutdownHandle::shutdown`] stops accepting, lets every request and
//!   stream in flight finish (within [`ServeConfig::shutdown_grace`]), and
//!   closes idle keep-alive connections; [`Server::wait`] returns after that.
//!
//! ```no_run
//! use nexus_drive::serve::{serve, ServeConfig};
//! use nexus_drive::Style;
//!
//! let config = ServeConfig::new("127.0.0.1:8080".parse()?, Style::Anthropic)
//!     .api_key_from_env("ANTHROPIC_API_KEY");
//! let server = serve(config)?;
//! let stop = server.shutdown_handle(); // call stop.shutdown() from a signal handler
//! # let _ = stop;
//! server.wait();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod handler;
mod http;
mod surfaces;

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nexus_proto::Style;

/// How the gateway runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The address to listen on (port 0 picks a free one; see [`Server::local_addr`]).
    pub listen: SocketAddr,
    /// The upstream's wire format.
    pub upstream_style: Style,
    /// The upstream's API root; `None` is the style's public API.
    pub upstream_base_url: Option<String>,
    /// The upstream key. Kept in memory only, never logged.
    pub api_key: Option<String>,
    /// Send the client's own bearer token upstream instead of [`api_key`](Self::api_key).
    /// Off by default: a client's credentials stay with the gateway.
    pub forward_client_key: bool,
    /// When set, clients must send `Authorization: Bearer <this>`.
    pub client_token: Option<String>,
    /// Models `GET /v1/models` lists; empty asks the upstream.
    pub models: Vec<String>,
    /// Request bodies larger than this are refused with 413.
    pub max_body_bytes: usize,
    /// Upstream response bodies (non-streaming) larger than this fail with 502.
    pub max_upstream_body_bytes: usize,
    /// Connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// How long connecting to the upstream may take.
    pub upstream_connect_timeout: Duration,
    /// How long one upstream exchange may take, body included (`None`: no limit).
    pub upstream_timeout: Option<Duration>,
    /// How long an idle keep-alive connection is kept.
    pub idle_timeout: Duration,
    /// How long a request may take to arrive once it has begun.
    pub request_timeout: Duration,
    /// How long a shutdown waits for requests and streams in flight.
    pub shutdown_grace: Duration,
    /// Write one line per request to stderr (method, path, status, duration; never headers).
    pub log_requests: bool,
}

impl ServeConfig {
    /// Defaults: the style's public API, no key, 16 MiB request bodies, 512
    /// connections, 10 s to connect, 10 min per upstream exchange, 60 s idle,
    /// 30 s to receive a request, 60 s shutdown grace.
    pub fn new(listen: SocketAddr, upstream_style: Style) -> ServeConfig {
        ServeConfig {
            listen,
            upstream_style,
            upstream_base_url: None,
            api_key: None,
            forward_client_key: false,
            client_token: None,
            models: Vec::new(),
            max_body_bytes: 16 * 1024 * 1024,
            max_upstream_body_bytes: 64 * 1024 * 1024,
            max_connections: 512,
            upstream_connect_timeout: Duration::from_secs(10),
            upstream_timeout: Some(Duration::from_secs(600)),
            idle_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(60),
            log_requests: false,
        }
    }

    /// Sets the upstream API root.
    pub fn upstream_base_url(mut self, url: impl Into<String>) -> ServeConfig {
        self.upstream_base_url = Some(url.into());
        self
    }

    /// Reads the upstream key from the environment variable `var` (left
    /// unset when the variable is missing or empty).
    pub fn api_key_from_env(mut self, var: &str) -> ServeConfig {
        self.api_key = std::env::var(var).ok().filter(|k| !k.is_empty());
        self
    }

    /// Sets the upstream key.
    pub fn api_key(mut self, key: impl Into<String>) -> ServeConfig {
        self.api_key = Some(key.into());
        self
    }

    fn base_url(&self) -> String {
        self.upstream_base_url.clone().unwrap_or_else(|| self.upstream_style.default_base_url().to_string())
    }
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The accept thread could not be started.
    #[error("cannot start the server thread: {0}")]
    Thread(io::Error),
}

/// What every connection thread shares.
pub(crate) struct State {
    pub(crate) config: ServeConfig,
    pub(crate) base_url: String,
    pub(crate) agent: ureq::Agent,
    pub(crate) stopping: AtomicBool,
    /// Connections being served, and the condition a shutdown waits on.
    active: Mutex<usize>,
    idle: Condvar,
    /// Makes completion ids unique within this process.
    pub(crate) counter: AtomicU64,
    /// Distinguishes this process's ids from another's.
    pub(crate) epoch: u64,
}

/// Stops a running gateway: no new connections, in-flight work finishes.
/// Cheap to clone; safe to call from any thread, any number of times.
#[derive(Clone)]
pub struct ShutdownHandle {
    state: Arc<State>,
    addr: SocketAddr,
}

impl ShutdownHandle {
    /// Begins a graceful shutdown; returns at once ([`Server::wait`] waits).
    pub fn shutdown(&self) {
        if self.state.stopping.swap(true, Ordering::SeqCst) {
            return;
        }
        // The accept loop blocks in accept(); a connection of our own wakes it.
        let wake = match self.addr {
            SocketAddr::V4(a) if a.ip().is_unspecified() => SocketAddr::from(([127, 0, 0, 1], a.port())),
            SocketAddr::V6(a) if a.ip().is_unspecified() => SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], a.port())),
            a => a,
        };
        let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
    }

    /// Whether a shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.state.stopping.load(Ordering::SeqCst)
    }
}

/// A running gateway.
pub struct Server {
    addr: SocketAddr,
    handle: ShutdownHandle,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle that stops it (for a signal handler, or another thread).
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// Blocks until a shutdown has completed: the listener is closed and every
    /// request and stream in flight has finished (or the grace period ran out).
    pub fn wait(mut self) {
        self.join();
    }

    /// Shuts down and waits (see [`ShutdownHandle::shutdown`] and [`wait`](Self::wait)).
    pub fn shutdown(self) {
        self.handle.shutdown();
        self.wait();
    }

    fn join(&mut self) {
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let state = &self.handle.state;
        let deadline = Instant::now() + state.config.shutdown_grace;
        let mut active = state.active.lock().unwrap_or_else(|e| e.into_inner());
        while *active > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            active = state.idle.wait_timeout(active, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }
}

impl Drop for Server {
    /// A server dropped without [`wait`](Server::wait) is shut down.
    fn drop(&mut self) {
        if self.accept.is_some() {
            self.handle.shutdown();
            self.join();
        }
    }
}

/// Starts the gateway on `config.listen` and returns at once.
///
/// The CLI wires SIGINT/SIGTERM to [`Server::shutdown_handle`] and then calls
/// [`Server::wait`].
pub fn serve(config: ServeConfig) -> Result<Server, ServeError> {
    let listener =
        TcpListener::bind(config.listen).map_err(|source| ServeError::Bind { addr: config.listen, source })?;
    let addr = listener.local_addr().map_err(|source| ServeError::Bind { addr: config.listen, source })?;
    let agent_config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_connect(Some(config.upstream_connect_timeout))
        .timeout_global(config.upstream_timeout)
        .build();
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    let state = Arc::new(State {
        base_url: config.base_url(),
        agent: ureq::Agent::new_with_config(agent_config),
        config,
        stopping: AtomicBool::new(false),
        active: Mutex::new(0),
        idle: Condvar::new(),
        counter: AtomicU64::new(0),
        epoch,
    });
    let for_loop = Arc::clone(&state);
    let accept = std::thread::Builder::new()
        .name("nexus-serve-accept".to_string())
        .spawn(move || accept_loop(listener, for_loop))
        .map_err(ServeError::Thread)?;
    Ok(Server { addr, handle: ShutdownHandle { state, addr }, accept: Some(accept) })
}

fn accept_loop(listener: TcpListener, state: Arc<State>) {
    for stream in listener.incoming() {
        if state.stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let admitted = {
            let mut active = state.active.lock().unwrap_or_else(|e| e.into_inner());
            let ok = *active < state.config.max_connections;
            if ok {
                *active += 1;
            }
            ok
        };
        if !admitted {
            handler::refuse_busy(stream);
            continue;
        }
        let for_conn = Arc::clone(&state);
        let spawned = std::thread::Builder::new().name("nexus-serve-conn".to_string()).spawn(move || {
            let _done = Finished(&for_conn);
            handler::connection(stream, &for_conn);
        });
        if spawned.is_err() {
            Finished(&state).drop_now();
        }
    }
    // Dropping the listener here refuses new connections from now on.
}

/// Counts a connection out when its thread ends, however it ends.
struct Finished<'a>(&'a State);

impl Finished<'_> {
    fn drop_now(self) {}
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        let mut active = self.0.active.lock().unwrap_or_else(|e| e.into_inner());
        *active = active.saturating_sub(1);
        self.0.idle.notify_all();
    }
}
