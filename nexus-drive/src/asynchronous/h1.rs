//! The async driver's side of the shared HTTP/1.1 client ([`crate::h1`]):
//! its bytes moved over smol sockets, TLS by futures-rustls.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

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
    async fn readable(&self) -> io::Result<()> {
        #[cfg(feature = "serve")]
        if let Conn::Looped(s) = self {
            // Readiness is kept by the loop: this waits for the answer's edge.
            futures_lite::future::poll_fn(|cx| s.poll_readable(cx)).await;
            return Ok(());
        }
        let Conn::Plain(s) = self else { return Ok(()) };
        let mut ready = s.readable();
        let mut polled = false;
        futures_lite::future::poll_fn(|cx| {
            if std::mem::replace(&mut polled, true) {
                return Poll::Ready(Ok(()));
            }
            ready.poll(cx)
        })
        .await
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
            let mut cx = Context::from_waker(std::task::Waker::noop());
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
