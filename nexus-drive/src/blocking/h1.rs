//! The blocking driver's side of the shared HTTP/1.1 client ([`crate::h1`]):
//! its bytes moved over std sockets, TLS by rustls.
//!
//! Every blocking socket call is bounded by the run's deadline (and, while
//! the response head is awaited, by the failover policy's head timeout),
//! and is armed with the run's [`CancelToken`]: a cancel from any thread
//! shuts the socket, so the blocked call returns at once. Arming covers one
//! call at a time, never a connection sitting in the pool, where another
//! run may pick it up.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nexus_proto::{HttpRequest, TransportErrorKind};
use ureq_proto::http::Uri;

use crate::cancel::{CancelGuard, CancelToken};
use crate::h1::{connect_err, io_err, Buffers, Decoded, Exchange, Failure, Key, Link, Stage};

/// The blocking driver's keep-alive pool.
pub(crate) type Pool = crate::h1::Pool<Conn>;
/// A response whose body is read over a std socket.
pub(crate) type Response = crate::h1::Response<Conn>;
/// A body read over a std socket.
pub(crate) type Body = crate::h1::Body<Conn>;

/// A connection: plain TCP or TLS over it.
pub(crate) struct Conn {
    /// The socket, shared with a cancel listener that may shut it from
    /// another thread.
    tcp: Arc<TcpStream>,
    /// TLS over the socket, for an `https` connection.
    tls: Option<Box<rustls::StreamOwned<rustls::ClientConnection, Shared>>>,
    /// The read and write timeout the socket has now.
    timeout: Option<Duration>,
}

/// The connection's socket as rustls reads and writes it.
struct Shared(Arc<TcpStream>);

impl Read for Shared {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self.0).read(buf)
    }
}

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self.0).write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&*self.0).flush()
    }
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// Bounds the next blocking call by `until`: a socket timeout of what is
    /// left, set only when it changes (a run without a deadline pays no
    /// system call for it).
    fn bound(&mut self, until: Option<Instant>) -> io::Result<()> {
        let left = match until {
            None => None,
            Some(t) => {
                let left = t.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "the time allowed ran out"));
                }
                Some(left)
            }
        };
        if left != self.timeout {
            self.tcp().set_read_timeout(left)?;
            self.tcp().set_write_timeout(left)?;
            self.timeout = left;
        }
        Ok(())
    }

    /// Shuts the socket when `token` is cancelled, until the guard drops.
    fn arm(&self, token: &CancelToken) -> io::Result<CancelGuard> {
        if token.is_cancelled() {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "the run was cancelled"));
        }
        let shut = self.tcp.clone();
        Ok(token.on_cancel(move || {
            let _ = shut.shutdown(Shutdown::Both);
        }))
    }

    /// Completes a TLS handshake, bounded and armed.
    fn handshake(&mut self, token: &CancelToken, until: Option<Instant>) -> Result<(), Failure> {
        self.bound(until).map_err(|e| failure("TLS handshake", e, true))?;
        let _armed = self.arm(token).map_err(|e| connect_err(format!("TLS handshake: {e}")))?;
        if let Some(s) = &mut self.tls {
            while s.conn.is_handshaking() {
                s.conn.complete_io(&mut s.sock).map_err(|e| match failure("TLS handshake", e, until.is_some()) {
                    f if f.kind == TransportErrorKind::Timeout => f,
                    f => connect_err(f.message),
                })?;
            }
        }
        Ok(())
    }

    /// One read of a body, bounded and armed (per read: reading may end the
    /// body and hand the connection back to the pool).
    fn read_for(&mut self, buf: &mut [u8], token: &CancelToken, until: Option<Instant>) -> io::Result<usize> {
        self.bound(until)?;
        let _armed = self.arm(token)?;
        self.read(buf)
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.tls {
            Some(s) => s.read(buf),
            None => (&*self.tcp).read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.tls {
            Some(s) => s.write(buf),
            None => (&*self.tcp).write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.tls {
            Some(s) => s.flush(),
            None => (&*self.tcp).flush(),
        }
    }
}

/// An I/O error as a failure: a timeout when a bound was set (a socket
/// timeout surfaces as `WouldBlock` or `TimedOut`), otherwise an I/O error.
fn failure(what: &str, e: io::Error, bounded: bool) -> Failure {
    if bounded && matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
        return Failure { kind: TransportErrorKind::Timeout, message: format!("{what}: timed out") };
    }
    io_err(format!("{what}: {e}"))
}

fn connect(pool: &Pool, key: &Key, cancel: &CancelToken, until: Option<Instant>) -> Result<Conn, Failure> {
    let addrs: Vec<SocketAddr> = (key.host.as_str(), key.port)
        .to_socket_addrs()
        .map_err(|e| connect_err(format!("resolve {}: {e}", key.host)))?
        .collect();
    let mut last = None;
    let mut tcp = None;
    for addr in addrs {
        let mut timeout = pool.connect_timeout;
        if let Some(t) = until {
            timeout = timeout.min(t.saturating_duration_since(Instant::now()));
        }
        if timeout.is_zero() {
            return Err(Failure { kind: TransportErrorKind::Timeout, message: "connect: timed out".into() });
        }
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                tcp = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let tcp = tcp.ok_or_else(|| {
        let why = last.map_or_else(|| "no address".to_string(), |e| e.to_string());
        connect_err(format!("connect to {}:{}: {why}", key.host, key.port))
    })?;
    // Requests are written whole; waiting to coalesce only adds latency.
    let _ = tcp.set_nodelay(true);
    let tcp = Arc::new(tcp);
    if !key.tls {
        return Ok(Conn { tcp, tls: None, timeout: None });
    }
    let tls =
        rustls::ClientConnection::new(pool.tls()?, key.server_name()?).map_err(|e| connect_err(format!("TLS: {e}")))?;
    let stream = rustls::StreamOwned::new(tls, Shared(tcp.clone()));
    let mut conn = Conn { tcp, tls: Some(Box::new(stream)), timeout: None };
    conn.handshake(cancel, until)?;
    Ok(conn)
}

#[cfg(unix)]
fn still_open(conn: &mut Conn) -> bool {
    crate::h1::still_open(conn.tcp())
}

/// See [`crate::h1::still_open`]: a peek with the socket made non-blocking for it.
#[cfg(not(unix))]
fn still_open(conn: &mut Conn) -> bool {
    let tcp = conn.tcp();
    if tcp.set_nonblocking(true).is_err() {
        return false;
    }
    let mut probe = [0u8; 1];
    let open = matches!(tcp.peek(&mut probe), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
    tcp.set_nonblocking(false).is_ok() && open
}

/// Sends `req` and reads the response head: on a pooled connection when one
/// is open, and once more on a new one when that fails before the request
/// was sent. `until` bounds the whole exchange (the run's deadline); `head`
/// bounds the wait for the response head alone (the failover policy's head
/// timeout).
pub(crate) fn send(
    pool: &Arc<Pool>,
    req: &HttpRequest,
    cancel: &CancelToken,
    until: Option<Instant>,
    head: Option<Instant>,
) -> Result<Response, Failure> {
    let (uri, key) = Key::of(&req.url)?;
    let bounds = (until, [until, head].into_iter().flatten().min());
    if let Some(link) = pool.take_open(&key, still_open) {
        match exchange(link, &uri, req, &key, pool, cancel, bounds) {
            Err(Stage::Unsent(_)) => {}
            done => return done.map_err(Stage::into_failure),
        }
    }
    let link = Link { conn: connect(pool, &key, cancel, until)?, bufs: Buffers::new() };
    exchange(link, &uri, req, &key, pool, cancel, bounds).map_err(Stage::into_failure)
}

fn exchange(
    link: Link<Conn>,
    uri: &Uri,
    req: &HttpRequest,
    key: &Key,
    pool: &Arc<Pool>,
    cancel: &CancelToken,
    (until, head_until): (Option<Instant>, Option<Instant>),
) -> Result<Response, Stage> {
    let mut ex = Exchange::start(link, uri, req)?;
    let (conn, wire) = ex.outgoing();
    // One arming for the request and its head: the connection cannot go
    // back to the pool before `respond`, and the guard is gone by then.
    let armed = conn.arm(cancel).map_err(|e| Stage::Unsent(failure("send", e, false)))?;
    let sent = conn.bound(until).and_then(|()| {
        conn.write_all(wire)?;
        conn.flush()
    });
    sent.map_err(|e| Stage::Unsent(failure("send", e, until.is_some())))?;
    ex.sent();
    let head = loop {
        if let Some(head) = ex.try_head()? {
            break head;
        }
        let (conn, room) = ex.incoming()?;
        let n = conn
            .bound(head_until)
            .and_then(|()| conn.read(room))
            .map_err(|e| Stage::Sent(failure("read", e, head_until.is_some())))?;
        ex.filled(n)?;
    };
    drop(armed);
    Ok(ex.respond(head, key.clone(), pool.clone()))
}

/// Decodes the next piece of `body` into its chunk and returns its length
/// (0 at its end). `until` bounds each read (the run's deadline).
pub(crate) fn read(body: &mut Body, cancel: &CancelToken, until: Option<Instant>) -> Result<usize, Failure> {
    loop {
        match body.decode()? {
            Decoded::Piece(n) => return Ok(n),
            Decoded::End => return Ok(0),
            Decoded::More => {}
        }
        let (conn, room) = body.incoming()?;
        let n = conn.read_for(room, cancel, until).map_err(|e| failure("read", e, until.is_some()))?;
        body.filled(n)?;
    }
}
