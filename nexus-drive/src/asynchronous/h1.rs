//! The async driver's side of the shared HTTP/1.1 client ([`crate::h1`]):
//! its bytes moved over smol sockets, TLS by futures-rustls.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, ThreadId};

use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_lite::FutureExt;
use futures_rustls::client::TlsStream;
use futures_rustls::TlsConnector;
use nexus_proto::HttpRequest;
use smol::net::TcpStream;
use smol::Async;

pub(crate) use crate::h1::Failure;
use crate::h1::{connect_err, io_err, Buffers, Decoded, Exchange, Key, Link, Stage};

/// The async driver's and the gateway's keep-alive pool.
pub(crate) type Pool = crate::h1::Pool<Conn>;
/// A response whose body is read over a smol socket.
pub(crate) type Response = crate::h1::Response<Conn>;
/// A body read over a smol socket.
pub(crate) type Body = crate::h1::Body<Conn>;

/// A connection: plain TCP or TLS over it.
pub(crate) enum Conn {
    /// Held as the reactor's handle, whose readiness can be awaited.
    Plain(Arc<Async<std::net::TcpStream>>),
    /// On the gateway's event loop that opened it.
    #[cfg(feature = "serve")]
    Looped(crate::serve::runtime::Stream),
    Tls(Box<TlsStream<Tcp>>),
}

/// The socket under TLS: smol's, or the gateway loop's.
pub(crate) enum Tcp {
    Smol(TcpStream),
    #[cfg(feature = "serve")]
    Looped(crate::serve::runtime::Stream),
}

impl AsyncRead for Tcp {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Tcp::Smol(s) => Pin::new(s).poll_read(cx, buf),
            #[cfg(feature = "serve")]
            Tcp::Looped(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Tcp {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Tcp::Smol(s) => Pin::new(s).poll_write(cx, buf),
            #[cfg(feature = "serve")]
            Tcp::Looped(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tcp::Smol(s) => Pin::new(s).poll_flush(cx),
            #[cfg(feature = "serve")]
            Tcp::Looped(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Tcp::Smol(s) => Pin::new(s).poll_close(cx),
            #[cfg(feature = "serve")]
            Tcp::Looped(s) => Pin::new(s).poll_close(cx),
        }
    }
}

impl Conn {
    /// Waits until the socket has something to read. After a request is
    /// written, the response cannot be there yet: waiting for readiness
    /// first spares a read that would only find the socket empty. (Through
    /// TLS, the next read does this itself.)
    ///
    /// The first wake-up is taken as readiness and the read that follows
    /// checks it, as async-io's own `read_with` does. Asked again after the
    /// wake-up, async-io's readiness future reports an event delivered by a
    /// reactor turn that began before the interest was registered as stale
    /// and waits for one more turn: when async-io's own thread holds the
    /// reactor, that is a second hand-off between threads for a response
    /// that is already there. A read that finds nothing registers again.
    ///
    /// A wake-up from another thread means another thread ran the reactor:
    /// async-io's own, which takes it whenever two of its looks, 50 µs apart
    /// at first, find no reactor turn in between, and starts its looks over
    /// each time it takes it. The response's processing that follows is
    /// such a stretch, so it would take the reactor again, and the next
    /// wait would be one more hand-off between threads. One yield first
    /// lets `block_on` run a reactor turn of its own (without waiting),
    /// which that thread sees and backs off from. Waits woken on the
    /// polling thread, the steady state, yield nothing.
    async fn readable(&self) -> io::Result<()> {
        #[cfg(feature = "serve")]
        if let Conn::Looped(s) = self {
            // Readiness is kept by the loop: this waits for the answer's edge.
            futures_lite::future::poll_fn(|cx| s.poll_readable(cx)).await;
            return Ok(());
        }
        let Conn::Plain(s) = self else { return Ok(()) };
        let mut ready = s.readable();
        let mut probe: Option<Arc<WakeProbe>> = None;
        futures_lite::future::poll_fn(|cx| {
            if probe.is_some() {
                return Poll::Ready(Ok(()));
            }
            let (p, waker) = WakeProbe::around(cx.waker());
            probe = Some(p);
            ready.poll(&mut Context::from_waker(&waker))
        })
        .await?;
        if probe.is_some_and(|p| p.woken_elsewhere()) {
            futures_lite::future::yield_now().await;
        }
        Ok(())
    }
}

/// A waker around another that notes whether it was woken from a thread
/// other than the one that made it.
struct WakeProbe {
    inner: Waker,
    made_on: ThreadId,
    elsewhere: AtomicBool,
}

impl WakeProbe {
    /// The probe, and a waker that wakes `inner` through it.
    fn around(inner: &Waker) -> (Arc<WakeProbe>, Waker) {
        let probe = Arc::new(WakeProbe {
            inner: inner.clone(),
            made_on: thread::current().id(),
            elsewhere: AtomicBool::new(false),
        });
        let waker = Waker::from(probe.clone());
        (probe, waker)
    }

    fn woken_elsewhere(&self) -> bool {
        self.elsewhere.load(Ordering::Acquire)
    }
}

impl Wake for WakeProbe {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if thread::current().id() != self.made_on {
            self.elsewhere.store(true, Ordering::Release);
        }
        self.inner.wake_by_ref();
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(&mut &**s).poll_read(cx, buf),
            #[cfg(feature = "serve")]
            Conn::Looped(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(&mut &**s).poll_write(cx, buf),
            #[cfg(feature = "serve")]
            Conn::Looped(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(&mut &**s).poll_flush(cx),
            #[cfg(feature = "serve")]
            Conn::Looped(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(&mut &**s).poll_close(cx),
            #[cfg(feature = "serve")]
            Conn::Looped(s) => Pin::new(s).poll_close(cx),
            Conn::Tls(s) => Pin::new(&mut **s).poll_close(cx),
        }
    }
}

async fn connect(pool: &Pool, key: &Key) -> Result<Conn, Failure> {
    let timeout = pool.connect_timeout;
    #[cfg(feature = "serve")]
    if crate::serve::runtime::on_loop() {
        // On a gateway loop, the upstream socket joins that loop: its
        // readiness and its wake-ups stay on the thread of the request.
        let tcp = crate::serve::runtime::connect(&key.host, key.port, timeout)
            .await
            .map_err(|e| connect_err(format!("connect to {}:{}: {e}", key.host, key.port)))?;
        let _ = tcp.set_nodelay(true);
        if !key.tls {
            return Ok(Conn::Looped(tcp));
        }
        return tls(pool, key, Tcp::Looped(tcp)).await;
    }
    let tcp = TcpStream::connect((key.host.as_str(), key.port))
        .or(async {
            smol::Timer::after(timeout).await;
            Err(io::Error::new(io::ErrorKind::TimedOut, format!("connect timed out after {timeout:?}")))
        })
        .await
        .map_err(|e| connect_err(format!("connect to {}:{}: {e}", key.host, key.port)))?;
    // Requests are written whole; waiting to coalesce only adds latency.
    let _ = tcp.set_nodelay(true);
    if !key.tls {
        return Ok(Conn::Plain(tcp.into()));
    }
    tls(pool, key, Tcp::Smol(tcp)).await
}

async fn tls(pool: &Pool, key: &Key, tcp: Tcp) -> Result<Conn, Failure> {
    let name = key.server_name()?;
    let tls = TlsConnector::from(pool.tls()?)
        .connect(name, tcp)
        .await
        .map_err(|e| connect_err(format!("TLS handshake: {e}")))?;
    Ok(Conn::Tls(Box::new(tls)))
}

/// See [`crate::h1::still_open`]. A TLS connection is probed through TLS,
/// with one poll of a read that must not complete: a record the server sent
/// after the handshake (a session ticket) is read and kept by rustls rather
/// than taken for stray bytes.
fn still_open(conn: &mut Conn) -> bool {
    match conn {
        #[cfg(unix)]
        Conn::Plain(s) => crate::h1::still_open(s.get_ref()),
        #[cfg(feature = "serve")]
        Conn::Looped(s) => !s.may_have_arrived() || crate::h1::still_open(s.socket()),
        _ => {
            let mut probe = [0u8; 1];
            let mut cx = Context::from_waker(Waker::noop());
            Pin::new(conn).poll_read(&mut cx, &mut probe).is_pending()
        }
    }
}

/// Sends `req` and reads the response head: on a pooled connection when one
/// is open, and once more on a new one when that fails before the request
/// was sent.
pub(crate) async fn send(pool: &Arc<Pool>, req: &HttpRequest) -> Result<Response, Failure> {
    let (uri, key) = Key::of(&req.url)?;
    if let Some(link) = pool.take_open(&key, still_open) {
        match exchange(link, &uri, req, key.clone(), pool.clone()).await {
            Err(Stage::Unsent(_)) => {}
            done => return done.map_err(Stage::into_failure),
        }
    }
    let link = Link { conn: connect(pool, &key).await?, bufs: Buffers::new() };
    exchange(link, &uri, req, key, pool.clone()).await.map_err(Stage::into_failure)
}

async fn exchange(
    link: Link<Conn>,
    uri: &ureq_proto::http::Uri,
    req: &HttpRequest,
    key: Key,
    pool: Arc<Pool>,
) -> Result<Response, Stage> {
    let mut ex = Exchange::start(link, uri, req)?;
    let (conn, wire) = ex.outgoing();
    let sent = async {
        conn.write_all(wire).await?;
        conn.flush().await
    };
    sent.await.map_err(|e| Stage::Unsent(io_err(format!("send: {e}"))))?;
    ex.sent();
    ex.conn().readable().await.map_err(|e| Stage::Sent(io_err(format!("read: {e}"))))?;
    let head = loop {
        if let Some(head) = ex.try_head()? {
            break head;
        }
        let (conn, room) = ex.incoming()?;
        let n = conn.read(room).await.map_err(|e| Stage::Sent(io_err(format!("read: {e}"))))?;
        ex.filled(n)?;
    };
    Ok(ex.respond(head, key, pool))
}

impl Body {
    /// Decodes the next piece of the body into [`chunk`](Self::chunk) and
    /// returns its length (0 at its end).
    pub(crate) async fn read(&mut self) -> Result<usize, Failure> {
        loop {
            match self.decode()? {
                Decoded::Piece(n) => return Ok(n),
                Decoded::End => return Ok(0),
                Decoded::More => {}
            }
            let (conn, room) = self.incoming()?;
            let n = conn.read(room).await.map_err(|e| io_err(format!("read: {e}")))?;
            self.filled(n)?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_probe_tells_a_wake_from_another_thread_and_always_passes_it_on() {
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let inner = Waker::from(count.clone());

        let (here, waker) = WakeProbe::around(&inner);
        waker.wake_by_ref();
        assert!(!here.woken_elsewhere(), "woken on the thread that made it");
        assert_eq!(count.0.load(Ordering::SeqCst), 1);

        let (there, waker) = WakeProbe::around(&inner);
        std::thread::spawn(move || waker.wake()).join().unwrap();
        assert!(there.woken_elsewhere(), "woken from another thread");
        assert_eq!(count.0.load(Ordering::SeqCst), 2);
    }
}
