//! The async driver's HTTP/1.1 client: ureq-proto (the engine under ureq,
//! so both drivers share one HTTP/1.1 semantics) over smol sockets, rustls
//! for TLS, and a small keep-alive pool keyed by scheme, host and port.
//!
//! Only what the driver needs: one request with an in-memory body, a
//! response head, and a body read incrementally. A connection goes back to
//! the pool only when its response ended cleanly with nothing left over.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_lite::FutureExt;
use futures_rustls::client::TlsStream;
use futures_rustls::pki_types::ServerName;
use futures_rustls::rustls;
use futures_rustls::TlsConnector;
use nexus_proto::{HttpRequest, TransportErrorKind};
use smol::net::TcpStream;
use ureq_proto::client::state::RecvBody;
use ureq_proto::client::{Call, RecvBodyResult, RecvResponseResult, SendRequestResult};
use ureq_proto::http;
use ureq_proto::BodyMode;

/// Idle connections a driver's pool keeps (the gateway sizes its own).
const MAX_IDLE: usize = 16;
/// A response head larger than this is refused.
const MAX_HEAD: usize = 256 * 1024;
const READ_BUF: usize = 16 * 1024;
/// Room for a request head; grown on demand up to [`MAX_HEAD`].
const HEAD_BUF: usize = 8 * 1024;

/// A connection's buffers. They live as long as the connection and go back
/// to the pool with it, so a request on a reused connection allocates (and
/// zeroes) nothing: the head scratch, the outgoing bytes, what was read off
/// the socket, and the decoded body a driver borrows from.
struct Buffers {
    head: Vec<u8>,
    wire: Vec<u8>,
    read: Vec<u8>,
    body: Vec<u8>,
}

impl Buffers {
    fn new() -> Buffers {
        Buffers { head: vec![0; HEAD_BUF], wire: Vec::new(), read: vec![0; READ_BUF], body: vec![0; READ_BUF] }
    }
}

/// A connection with its buffers.
struct Link {
    conn: Conn,
    bufs: Buffers,
}

/// How an exchange failed.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) kind: TransportErrorKind,
    pub(crate) message: String,
}

fn connect_err(message: impl Into<String>) -> Failure {
    Failure { kind: TransportErrorKind::Connect, message: message.into() }
}

fn io_err(message: impl Into<String>) -> Failure {
    Failure { kind: TransportErrorKind::Io, message: message.into() }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    tls: bool,
    host: String,
    port: u16,
}

enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut [u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_close(cx),
            Conn::Tls(s) => Pin::new(&mut **s).poll_close(cx),
        }
    }
}

/// Keep-alive connections, shared by the runs of one client.
pub(crate) struct Pool {
    idle: Mutex<Vec<(Key, Link)>>,
    tls: OnceLock<Result<TlsConnector, String>>,
    connect_timeout: Duration,
    max_idle: usize,
}

impl Pool {
    pub(crate) fn new(connect_timeout: Duration) -> Pool {
        Pool::with_max_idle(connect_timeout, MAX_IDLE)
    }

    /// A pool keeping up to `max_idle` idle connections: a gateway keeps as
    /// many as it has requests in flight, so that every connection a burst
    /// opened is reused by the next one instead of closed.
    pub(crate) fn with_max_idle(connect_timeout: Duration, max_idle: usize) -> Pool {
        Pool { idle: Mutex::new(Vec::new()), tls: OnceLock::new(), connect_timeout, max_idle }
    }

    fn take(&self, key: &Key) -> Option<Link> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let pos = idle.iter().rposition(|(k, _)| k == key)?;
        Some(idle.remove(pos).1)
    }

    fn put(&self, key: Key, link: Link) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() >= self.max_idle {
            if self.max_idle == 0 {
                return;
            }
            idle.remove(0);
        }
        idle.push((key, link));
    }

    fn tls(&self) -> Result<TlsConnector, Failure> {
        self.tls.get_or_init(tls_connector).clone().map_err(connect_err)
    }

    async fn connect(&self, key: &Key) -> Result<Conn, Failure> {
        let timeout = self.connect_timeout;
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
            return Ok(Conn::Plain(tcp));
        }
        let name = ServerName::try_from(key.host.clone()).map_err(|e| connect_err(format!("TLS server name: {e}")))?;
        let tls = self.tls()?.connect(name, tcp).await.map_err(|e| connect_err(format!("TLS handshake: {e}")))?;
        Ok(Conn::Tls(Box::new(tls)))
    }
}

fn tls_connector() -> Result<TlsConnector, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsConnector::from(Arc::new(cfg)))
}

/// A response head and its body.
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Body,
}

/// Where an exchange failed: before the request was on the wire (the server
/// cannot have seen it, so on a reused connection it goes again on a fresh
/// one), or after it was sent. Then the server may have acted on it, and the
/// failure goes to the run, whose retry budget decides: a request the driver
/// re-sent on its own would be an attempt nobody counted.
enum Stage {
    Unsent(Failure),
    Sent(Failure),
}

/// Whether an idle pooled connection can carry a request. It has nothing to
/// read: a read that cannot complete at once means open; end of stream (the
/// server closed it while it sat in the pool), an error, or stray bytes mean
/// it cannot be used. Checked before every reuse, as ureq does, so a request
/// is not written into a connection the server already closed.
async fn still_open(conn: &mut Conn) -> bool {
    let mut probe = [0u8; 1];
    futures_lite::future::poll_once(conn.read(&mut probe)).await.is_none()
}

/// Sends `req` and reads the response head.
pub(crate) async fn send(pool: &Arc<Pool>, req: &HttpRequest) -> Result<Response, Failure> {
    let uri: http::Uri = req.url.parse().map_err(|e| connect_err(format!("bad URL {:?}: {e}", req.url)))?;
    let tls = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        _ => return Err(connect_err(format!("unsupported URL scheme in {:?}", req.url))),
    };
    let host = uri.host().ok_or_else(|| connect_err(format!("no host in {:?}", req.url)))?;
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let key = Key { tls, host, port };
    for attempt in 0..2 {
        let mut pooled = None;
        if attempt == 0 {
            while let Some(mut link) = pool.take(&key) {
                if still_open(&mut link.conn).await {
                    pooled = Some(link);
                    break;
                }
            }
        }
        let reused = pooled.is_some();
        let link = match pooled {
            Some(link) => link,
            None => Link { conn: pool.connect(&key).await?, bufs: Buffers::new() },
        };
        match exchange(link, &uri, req, key.clone(), pool.clone()).await {
            Ok(r) => return Ok(r),
            Err(Stage::Unsent(_)) if reused => continue,
            Err(Stage::Unsent(f)) | Err(Stage::Sent(f)) => return Err(f),
        }
    }
    Err(io_err("no connection could be used"))
}

fn build(uri: &http::Uri, req: &HttpRequest) -> Result<http::Request<()>, Failure> {
    let mut b = http::Request::builder().method(req.method).uri(uri.clone());
    for (k, v) in &req.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    if !req.body.is_empty() && req.header("content-length").is_none() {
        b = b.header("content-length", req.body.len());
    }
    b.body(()).map_err(|e| connect_err(format!("bad request: {e}")))
}

async fn exchange(
    link: Link,
    uri: &http::Uri,
    req: &HttpRequest,
    key: Key,
    pool: Arc<Pool>,
) -> Result<Response, Stage> {
    let unsent = |f: Failure| Stage::Unsent(f);
    let call = Call::new(build(uri, req).map_err(unsent)?).map_err(|e| unsent(connect_err(e.to_string())))?;
    let mut call = call.proceed();
    let Link { mut conn, bufs } = link;
    let Buffers { head: mut out, mut wire, read: mut buf, body: decoded } = bufs;
    // The request head, then the body as is (it has a content-length).
    wire.clear();
    while !call.can_proceed() {
        match call.write(&mut out) {
            Ok(n) => wire.extend_from_slice(out.get(..n).unwrap_or_default()),
            Err(ureq_proto::Error::OutputOverflow) if out.len() < MAX_HEAD => out.resize(out.len() * 2, 0),
            Err(e) => return Err(unsent(connect_err(format!("request head: {e}")))),
        }
    }
    let proto = |e: ureq_proto::Error| unsent(connect_err(format!("request: {e}")));
    let mut call = match call.proceed().map_err(proto)? {
        Some(SendRequestResult::SendBody(mut c)) => {
            c.consume_direct_write(req.body.len()).map_err(proto)?;
            wire.extend_from_slice(&req.body);
            c.proceed().ok_or_else(|| unsent(connect_err("request body incomplete")))?
        }
        Some(SendRequestResult::RecvResponse(c)) => c,
        Some(SendRequestResult::Await100(_)) | None => return Err(unsent(connect_err("unexpected request state"))),
    };
    let sent = async {
        conn.write_all(&wire).await?;
        conn.flush().await
    };
    sent.await.map_err(|e| unsent(io_err(format!("send: {e}"))))?;
    // A large request body is not kept around with an idle connection.
    if wire.capacity() > 4 * READ_BUF {
        wire = Vec::new();
    }

    let (mut start, mut end) = (0usize, 0usize);
    let response = loop {
        if end > start {
            let input = buf.get(start..end).unwrap_or_default();
            let (used, resp) =
                call.try_response(input, false).map_err(|e| Stage::Sent(io_err(format!("response head: {e}"))))?;
            start += used;
            if let Some(resp) = resp {
                break resp;
            }
        }
        compact(&mut buf, &mut start, &mut end);
        if end == buf.len() {
            if buf.len() >= MAX_HEAD {
                return Err(Stage::Sent(io_err("response head too large")));
            }
            buf.resize(buf.len() * 2, 0);
        }
        let n = match conn.read(buf.get_mut(end..).unwrap_or_default()).await {
            Ok(n) => n,
            Err(e) => return Err(Stage::Sent(io_err(format!("read: {e}")))),
        };
        if n == 0 {
            return Err(Stage::Sent(io_err("the connection closed before the response head")));
        }
        end += n;
    };
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let mut body = Body {
        conn: Some(conn),
        call: None,
        buf,
        start,
        end,
        decoded,
        spare: Some((out, wire)),
        close_delimited: false,
        key,
        pool,
    };
    match call.proceed() {
        Some(RecvResponseResult::RecvBody(c)) => {
            body.close_delimited = matches!(c.body_mode(), BodyMode::CloseDelimited);
            body.call = Some(c);
        }
        Some(RecvResponseResult::Cleanup(c)) => {
            if !c.must_close_connection() && body.start == body.end {
                body.release();
            }
            body.conn = None;
        }
        Some(RecvResponseResult::Redirect(_)) | None => body.conn = None,
    }
    Ok(Response { status, headers, body })
}

/// Moves unread bytes to the front of the buffer.
fn compact(buf: &mut [u8], start: &mut usize, end: &mut usize) {
    if *start > 0 {
        buf.copy_within(*start..*end, 0);
        *end -= *start;
        *start = 0;
    }
}

/// A response body, read incrementally.
pub(crate) struct Body {
    conn: Option<Conn>,
    call: Option<Call<RecvBody>>,
    /// Bytes read off the socket; `start..end` not yet decoded.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The decoded body piece [`read`](Self::read) produced last.
    decoded: Vec<u8>,
    /// The head and wire buffers, returned to the pool with the connection.
    spare: Option<(Vec<u8>, Vec<u8>)>,
    close_delimited: bool,
    key: Key,
    pool: Arc<Pool>,
}

impl Body {
    /// Decodes the next piece of the body into [`chunk`](Self::chunk) and
    /// returns its length (0 at its end).
    pub(crate) async fn read(&mut self) -> Result<usize, Failure> {
        loop {
            let Some(call) = self.call.as_mut() else {
                return Ok(0);
            };
            let input = self.buf.get(self.start..self.end).unwrap_or_default();
            let (used, produced) =
                call.read(input, &mut self.decoded).map_err(|e| io_err(format!("response body: {e}")))?;
            self.start += used;
            if produced > 0 {
                return Ok(produced);
            }
            if !self.close_delimited && call.can_proceed() {
                self.finish();
                return Ok(0);
            }
            if used > 0 {
                continue;
            }
            compact(&mut self.buf, &mut self.start, &mut self.end);
            if self.end == self.buf.len() {
                self.buf.resize(self.buf.len() * 2, 0);
            }
            let conn = self.conn.as_mut().ok_or_else(|| io_err("the connection is gone"))?;
            let n = conn
                .read(self.buf.get_mut(self.end..).unwrap_or_default())
                .await
                .map_err(|e| io_err(format!("read: {e}")))?;
            if n == 0 {
                self.call = None;
                self.conn = None;
                if self.close_delimited {
                    return Ok(0);
                }
                return Err(io_err("the connection closed before the end of the body"));
            }
            self.end += n;
        }
    }

    /// The first `n` bytes of the piece [`read`](Self::read) decoded last.
    pub(crate) fn chunk(&self, n: usize) -> &[u8] {
        self.decoded.get(..n).unwrap_or_default()
    }

    /// The body ended: the connection goes back to the pool when it can be reused.
    fn finish(&mut self) {
        let Some(call) = self.call.take() else { return };
        let reusable = match call.proceed() {
            Some(RecvBodyResult::Cleanup(c)) => !c.must_close_connection(),
            _ => false,
        };
        if reusable && self.start == self.end {
            self.release();
        }
        self.conn = None;
    }

    /// Gives the connection and every buffer back to the pool.
    fn release(&mut self) {
        let (Some(conn), Some((head, wire))) = (self.conn.take(), self.spare.take()) else { return };
        let bufs = Buffers { head, wire, read: std::mem::take(&mut self.buf), body: std::mem::take(&mut self.decoded) };
        self.pool.put(self.key.clone(), Link { conn, bufs });
    }
}
