//! `nexus serve`: a gateway that lets clients of one wire format reach
//! upstreams of any (Anthropic, Gemini, OpenAI-compatible), with routes,
//! client keys, limits, health and metrics.
//!
//! Point the official OpenAI SDK (or anything that speaks Chat Completions)
//! at it and each `POST /v1/chat/completions` is routed by its model,
//! translated with [`nexus_proto::translate`], sent upstream as one call
//! (another only when it fails and its route fails over), and answered in OpenAI shapes — streamed or not, tool calls
//! included. The caller owns the conversation and runs its tools; the
//! gateway keeps no state between requests and executes nothing.
//!
//! ## The server
//!
//! * [hyper] serves every connection: HTTP/1.1 with keep-alive and
//!   pipelining, and HTTP/2 without TLS (h2c, prior knowledge) when a
//!   connection opens with the HTTP/2 preface. Request heads are capped at
//!   [`ServeConfig::max_header_bytes`], bodies at [`ServeConfig::max_body_bytes`]
//!   (413 before the body is read when `content-length` says so).
//! * Connections are tasks on the gateway's event loops
//!   ([`ServeConfig::threads`], one by default; each its own executor,
//!   edge-triggered epoll and timers): ten thousand idle keep-alive
//!   connections or a thousand streams need no more threads, and a
//!   request's wake-ups stay on the thread of its connection.
//! * Slow clients: a request head must arrive within
//!   [`ServeConfig::idle_timeout`] of the connection going idle, a body within
//!   [`ServeConfig::request_timeout`], and a response write that the client
//!   does not take within `request_timeout` closes the connection.
//! * Streams are pulled by the client connection (backpressure): an upstream
//!   is read only as fast as its client reads, and a client that leaves drops
//!   the upstream body, which closes that upstream connection and so cancels
//!   the upstream request.
//! * Upstream calls go through the async driver's HTTP client and one
//!   keep-alive pool ([`ServeConfig::upstream_max_idle`] idle connections),
//!   so connections opened in a burst are reused by the next.
//! * [`ShutdownHandle::shutdown`] stops accepting, lets every request and
//!   stream in flight finish (within [`ServeConfig::shutdown_grace`]), and
//!   closes idle keep-alive connections; [`Server::wait`] returns after that.
//!
//! ## Routes, keys, limits
//!
//! [`ServeConfig::from_toml`] reads a configuration file (format in
//! [`config`](ServeConfig::from_toml)'s docs): upstreams (style, base URL,
//! key from an environment variable, extra headers), model routes (client
//! model name or `*` pattern → upstreams in order + upstream model name),
//! named client keys (or their SHA-256 in a keys file read again by
//! [`KeysHandle::reload`]) with limits each: requests in flight, requests
//! and tokens per minute, daily and monthly token budgets, over all models
//! or per model pattern. Limits count in the process, or — with
//! `[limits] store = "redis://…"` (feature `redis`) — in Redis or Valkey,
//! shared with every other instance along with the circuit breakers' open
//! circuits (SPEC §14 "Keys and limits").
//!
//! A route's upstreams are tried in order: a request the first cannot
//! answer (overloaded, unreachable, silent, cut before its first byte) is
//! re-translated for the next, as the core's
//! [`FailoverPolicy`](nexus_proto::FailoverPolicy) decides; one set of
//! circuit breakers per process skips upstreams that keep failing. The
//! `x-nexus-upstream` response header names the upstream that answered. A request without a
//! valid key gets 401 and one over its key's limit 429 with `Retry-After`
//! and the rate-limit headers its SDK reads, both in the surface's own error shape. Upstream keys and client keys are
//! never logged, never metric labels and never in an error body; the
//! client's key is not forwarded unless [`ServeConfig::forward_client_key`] says so.
//!
//! ## Operations
//!
//! * `GET /health`: 200 while the process serves.
//! * `GET /ready`: 200 when upstreams are configured and the last probe of
//!   each (a TCP connection every [`ServeConfig::probe_interval`], and every
//!   real exchange) succeeded; 503 with the reason otherwise.
//! * `GET /metrics`: Prometheus text — requests by surface, upstream, model,
//!   status and outcome; histograms of time to first byte and to the end;
//!   upstream errors by kind; failovers; circuit states; tokens in and out;
//!   requests in flight.
//! * With [`ServeConfig::log_requests`], one JSON line per request on stderr
//!   (method, path, surface, key name, status, model, upstream, times,
//!   tokens, upstream error) — never a body, a header or a key.
//!
//! ## Surfaces
//!
//! Each client dialect is a [`Surface`]: it claims its paths, shapes errors
//! its clients parse, and answers a whole request with a whole or streamed
//! reply through its [`Ctx`]. The server does everything around it.
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

mod config;
mod failover;
mod gateway;
mod handler;
mod keys;
mod limits;
mod ops;
pub(crate) mod runtime;
mod server;
mod surface;
mod surfaces;
mod trace;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

pub use config::{ClientKeyConfig, ConfigError, OtlpExport, RouteConfig, RouteFailover, ServeConfig, UpstreamConfig};
pub use gateway::{Ctx, Route, Target, UpstreamBody, UpstreamRequest, UpstreamResponse};
pub use keys::KeysHandle;
pub use limits::{LimitStoreConfig, ModelLimits, ModelPrice, RateLimits, StoreFailure, TokenUsage};
pub use surface::{BoxFuture, ChunkStream, ErrorKind, GatewayError, Reply, Surface, SurfaceRequest};

use gateway::Shared;

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
    /// A server thread could not be started.
    #[error("cannot start the server thread: {0}")]
    Thread(io::Error),
    /// The keys file could not be read or is wrong.
    #[error("{0}")]
    Keys(ConfigError),
}

/// The surfaces every server has, in the order they are asked to claim a
/// path. The first also answers paths nobody claims (404 in its shape).
/// A new dialect adds itself here.
fn builtin_surfaces() -> Vec<Arc<dyn Surface>> {
    vec![
        Arc::new(handler::ChatCompletions),
        Arc::new(surfaces::AnthropicMessages),
        Arc::new(surfaces::GeminiGenerate),
        Arc::new(surfaces::OpenAiResponses),
    ]
}

/// Stops a running gateway: no new connections, in-flight work finishes.
/// Cheap to clone; safe to call from any thread, any number of times.
#[derive(Clone)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
    stop: smol::channel::Sender<()>,
}

impl ShutdownHandle {
    /// Begins a graceful shutdown; returns at once ([`Server::wait`] waits).
    pub fn shutdown(&self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Closing the channel wakes every task waiting on it: the accept
        // loop, each connection (to finish its requests and close), the probes.
        self.stop.close();
    }

    /// Whether a shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.shared.stopping.load(Ordering::SeqCst)
    }
}

/// A running gateway.
pub struct Server {
    addr: SocketAddr,
    handle: ShutdownHandle,
    accept: Option<async_task::Task<()>>,
    /// Stopped once everything has drained.
    loops: runtime::Runtime,
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

    /// A handle that reads the keys file again (for SIGHUP, or another thread).
    pub fn keys_handle(&self) -> KeysHandle {
        KeysHandle(self.handle.shared.clone())
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
            // Parks without touching the reactor: a waiting thread that held
            // async-io's reactor would take every I/O event first and wake
            // the executor thread across threads, two switches per event.
            futures_lite::future::block_on(accept);
        }
        let shared = &self.handle.shared;
        let deadline = Instant::now() + shared.config.shutdown_grace;
        {
            let mut active = shared.active.lock().unwrap_or_else(|e| e.into_inner());
            while *active > 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                active = shared.idle.wait_timeout(active, left).unwrap_or_else(|e| e.into_inner()).0;
            }
        }
        self.loops.stop();
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

/// Connections the kernel may hold for the accept loop (it caps this at
/// `net.core.somaxconn`): a burst of clients connecting at once is queued,
/// not reset.
const ACCEPT_BACKLOG: i32 = 4096;

fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(ACCEPT_BACKLOG)?;
    Ok(socket.into())
}

/// Starts the gateway on `config.listen` with the built-in surfaces and
/// returns at once.
///
/// The CLI wires SIGINT/SIGTERM to [`Server::shutdown_handle`] and then calls
/// [`Server::wait`].
pub fn serve(config: ServeConfig) -> Result<Server, ServeError> {
    serve_with(config, builtin_surfaces())
}

/// [`serve`] with these surfaces (in the order they claim paths).
pub fn serve_with(config: ServeConfig, surfaces: Vec<Arc<dyn Surface>>) -> Result<Server, ServeError> {
    let listen = config.listen;
    let std_listener = bind(listen).map_err(|source| ServeError::Bind { addr: listen, source })?;
    let addr = std_listener.local_addr().map_err(|source| ServeError::Bind { addr: listen, source })?;
    let threads = match config.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let shared = Arc::new(Shared::new(config, surfaces).map_err(ServeError::Keys)?);
    let loops = runtime::Runtime::start(threads, "nexus-serve").map_err(ServeError::Thread)?;
    let handles = loops.handles().to_vec();
    let first = handles.first().cloned().ok_or_else(|| ServeError::Thread(io::Error::other("no event loop")))?;
    // The listener joins the first loop's epoll there, so that a failure to
    // register it is this call's error.
    let listener = futures_lite::future::block_on(first.spawn(async move { runtime::Listener::adopt(std_listener) }))
        .map_err(|source| ServeError::Bind { addr: listen, source })?;
    let (stop, stopped) = smol::channel::bounded::<()>(1);
    first.spawn(ops::probe_loop(shared.clone(), stopped.clone())).detach();
    let accept = first.spawn(server::accept_loop(shared.clone(), listener, handles, stopped));
    Ok(Server { addr, handle: ShutdownHandle { shared, stop }, accept: Some(accept), loops })
}
