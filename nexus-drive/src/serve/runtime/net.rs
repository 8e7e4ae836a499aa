//! Sockets on a loop: registered once, edge-triggered, with their readiness
//! kept here so that a read or write is tried only when it can succeed.

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_lite::FutureExt;

use super::{current, sleep, Local, Remote};

/// One direction's readiness: bit 0 says "may succeed"; bit 1 that the
/// peer closed this direction (or the socket failed), which no later edge
/// will announce again, so it is never cleared; the rest counts the edges
/// seen, so that a task on another thread clearing readiness after a short
/// read cannot erase an edge that arrived meanwhile.
struct Direction {
    state: AtomicUsize,
    waker: Mutex<Option<Waker>>,
}

const READY: usize = 1;
const CLOSED: usize = 2;
const EDGE: usize = 4;

impl Direction {
    fn new(ready: bool) -> Direction {
        Direction { state: AtomicUsize::new(if ready { READY } else { 0 }), waker: Mutex::new(None) }
    }

    fn edge(&self, closed: bool) {
        let flags = READY | if closed { CLOSED } else { 0 };
        let _ = self.state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| Some((s | flags).wrapping_add(EDGE)));
        let waker = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The state when ready, else `None` after leaving `cx`'s waker.
    fn poll_ready(&self, cx: &mut Context<'_>) -> Option<usize> {
        let s = self.state.load(Ordering::Acquire);
        if s & READY != 0 {
            return Some(s);
        }
        {
            let mut slot = self.waker.lock().unwrap_or_else(|e| e.into_inner());
            if !slot.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *slot = Some(cx.waker().clone());
            }
        }
        // An edge between the load and the waker being left: take it now.
        let s = self.state.load(Ordering::Acquire);
        (s & READY != 0).then_some(s)
    }

    /// Marks the direction not ready, unless an edge came after `seen` or
    /// the peer has closed it (its end is still to be read).
    fn clear(&self, seen: usize) {
        if seen & CLOSED == 0 {
            let _ = self.state.compare_exchange(seen, seen & !READY, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// What the loop keeps of a socket.
pub(crate) struct Source {
    read: Direction,
    write: Direction,
}

impl Source {
    pub(super) fn on_event(&self, ev: &mio::event::Event) {
        let (read_closed, write_closed) = (ev.is_read_closed() || ev.is_error(), ev.is_write_closed() || ev.is_error());
        if ev.is_readable() || read_closed {
            self.read.edge(read_closed);
        }
        if ev.is_writable() || write_closed {
            self.write.edge(write_closed);
        }
    }

    pub(super) fn take_wakers(&self) -> Vec<Waker> {
        [&self.read, &self.write]
            .into_iter()
            .filter_map(|d| d.waker.lock().unwrap_or_else(|e| e.into_inner()).take())
            .collect()
    }
}

/// A registration: removed from its loop when dropped.
struct Registered {
    source: Arc<Source>,
    token: usize,
    owner: Arc<Remote>,
}

impl Registered {
    fn new(local: &Local, io: &mut impl mio::event::Source, read: bool, write: bool) -> io::Result<Registered> {
        let source = Arc::new(Source { read: Direction::new(read), write: Direction::new(write) });
        let token = local.sources.borrow_mut().insert(source.clone());
        let interest = mio::Interest::READABLE | mio::Interest::WRITABLE;
        if let Err(e) = local.registry.register(io, mio::Token(token), interest) {
            local.sources.borrow_mut().remove(token);
            return Err(e);
        }
        Ok(Registered { source, token, owner: local.remote.clone() })
    }

    /// Runs `op` when `dir` may succeed; an `EAGAIN` (or, for reads, a
    /// short read, which emptied the socket) waits for the next edge.
    fn poll_io<R>(
        &self,
        cx: &mut Context<'_>,
        dir: impl Fn(&Source) -> &Direction,
        drained: impl Fn(&R) -> bool,
        mut op: impl FnMut() -> io::Result<R>,
    ) -> Poll<io::Result<R>> {
        let d = dir(&self.source);
        loop {
            let Some(seen) = d.poll_ready(cx) else { return Poll::Pending };
            match op() {
                Ok(r) => {
                    if drained(&r) {
                        d.clear(seen);
                    }
                    return Poll::Ready(Ok(r));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => d.clear(seen),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        // Closing the descriptor takes it out of epoll; the loop forgets the
        // token now, or, when dropped elsewhere, once the ring wakes it.
        let mine = current().filter(|l| Arc::ptr_eq(&l.remote, &self.owner));
        let removed = mine.as_ref().is_some_and(|l| match l.sources.try_borrow_mut() {
            Ok(mut sources) => {
                sources.try_remove(self.token);
                true
            }
            Err(_) => false,
        });
        if !removed {
            self.owner.released.lock().unwrap_or_else(|e| e.into_inner()).push(self.token);
            self.owner.ring();
        }
    }
}

fn not_on_loop() -> io::Error {
    io::Error::other("not on a gateway event loop")
}

/// A TCP connection on a loop.
pub(crate) struct Stream {
    // Declared first: dropped (and forgotten by the loop) before the socket closes.
    reg: Registered,
    io: mio::net::TcpStream,
}

impl Stream {
    /// Takes a connected socket onto the current thread's loop.
    pub(crate) fn adopt(mut io: mio::net::TcpStream) -> io::Result<Stream> {
        let local = current().ok_or_else(not_on_loop)?;
        // Readable: an accepted socket may hold its first request already
        // (registration reports it, but trying costs one read, not a turn).
        let reg = Registered::new(&local, &mut io, true, true)?;
        Ok(Stream { reg, io })
    }

    pub(crate) fn set_nodelay(&self, on: bool) -> io::Result<()> {
        self.io.set_nodelay(on)
    }

    /// Whether anything (bytes, the end, an error) may have arrived since a
    /// read last emptied the socket. A pooled connection with nothing is
    /// still open without a probe: a close is an edge, and its loop looks
    /// at every edge an `epoll_wait` returned before it runs a task. That
    /// holds for the tasks of its own loop only: another loop's task may
    /// run while this socket's loop has yet to look (a connection pooled by
    /// one loop and taken by another), so there anything may have arrived.
    pub(crate) fn may_have_arrived(&self) -> bool {
        let own_loop = current().is_some_and(|l| Arc::ptr_eq(&l.remote, &self.reg.owner));
        !own_loop || self.reg.source.read.state.load(Ordering::Acquire) & READY != 0
    }

    pub(crate) fn socket(&self) -> &mio::net::TcpStream {
        &self.io
    }

    /// Waits until a read may succeed, without reading.
    pub(crate) fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<()> {
        match self.reg.source.read.poll_ready(cx) {
            Some(_) => Poll::Ready(()),
            None => Poll::Pending,
        }
    }

    /// Reads without taking: what `buf` can hold of what has arrived.
    pub(crate) async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        futures_lite::future::poll_fn(|cx| self.reg.poll_io(cx, |s| &s.read, |_| false, || self.io.peek(buf))).await
    }

    pub(crate) fn poll_read_buf(&self, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        let want = buf.len();
        self.reg.poll_io(cx, |s| &s.read, |&n| n > 0 && n < want, || (&self.io).read(buf))
    }

    pub(crate) fn poll_write_buf(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.reg.poll_io(cx, |s| &s.write, |_| false, || (&self.io).write(buf))
    }

    pub(crate) fn poll_write_bufs(&self, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        self.reg.poll_io(cx, |s| &s.write, |_| false, || (&self.io).write_vectored(bufs))
    }

    pub(crate) fn shutdown_write(&self) -> io::Result<()> {
        match self.io.shutdown(std::net::Shutdown::Write) {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Err(e),
            _ => Ok(()),
        }
    }
}

impl futures_lite::io::AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        self.poll_read_buf(cx, buf)
    }
}

impl futures_lite::io::AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.poll_write_buf(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_bufs(cx, bufs)
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.shutdown_write())
    }
}

/// A listening socket on a loop.
pub(crate) struct Listener {
    reg: Registered,
    io: mio::net::TcpListener,
}

impl Listener {
    /// Takes a bound, listening socket onto the current thread's loop.
    pub(crate) fn adopt(listener: std::net::TcpListener) -> io::Result<Listener> {
        let local = current().ok_or_else(not_on_loop)?;
        listener.set_nonblocking(true)?;
        let mut io = mio::net::TcpListener::from_std(listener);
        let reg = Registered::new(&local, &mut io, true, false)?;
        Ok(Listener { reg, io })
    }

    /// The next connection, not yet on any loop.
    pub(crate) async fn accept(&self) -> io::Result<mio::net::TcpStream> {
        futures_lite::future::poll_fn(|cx| self.reg.poll_io(cx, |s| &s.read, |_| false, || self.io.accept()))
            .await
            .map(|(s, _)| s)
    }
}

/// Connects to `host:port` from the current thread's loop within `timeout`.
pub(crate) async fn connect(host: &str, port: u16, timeout: Duration) -> io::Result<Stream> {
    let attempt = async {
        let addrs: Vec<SocketAddr> = match host.trim_matches(['[', ']']).parse::<std::net::IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            // Name lookups block: smol's thread pool does them.
            Err(_) => smol::net::resolve((host, port)).await?,
        };
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{host} resolved to no address"));
        for addr in addrs {
            match connect_one(addr).await {
                Ok(s) => return Ok(s),
                Err(e) => last = e,
            }
        }
        Err(last)
    };
    attempt
        .or(async {
            sleep(timeout).await;
            Err(io::Error::new(io::ErrorKind::TimedOut, format!("connect timed out after {timeout:?}")))
        })
        .await
}

async fn connect_one(addr: SocketAddr) -> io::Result<Stream> {
    let stream = start_connect(addr)?;
    futures_lite::future::poll_fn(|cx| {
        stream.reg.source.write.poll_ready(cx).map_or(Poll::Pending, |_| Poll::Ready(()))
    })
    .await;
    if let Some(e) = stream.io.take_error()? {
        return Err(e);
    }
    stream.io.peer_addr()?;
    Ok(stream)
}

/// A connection begun (non-blocking) and registered; not writable until
/// the handshake is done, whose edge the caller waits for.
fn start_connect(addr: SocketAddr) -> io::Result<Stream> {
    let local = current().ok_or_else(not_on_loop)?;
    let mut io = mio::net::TcpStream::connect(addr)?;
    let reg = Registered::new(&local, &mut io, false, false)?;
    Ok(Stream { reg, io })
}
