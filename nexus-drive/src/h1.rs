//! The HTTP/1.1 client both drivers share: ureq-proto (the engine under
//! ureq) for the protocol, rustls for TLS, a small keep-alive pool keyed by
//! scheme, host and port. This module is the part without I/O: the request
//! written into one buffer, the response head and body decoded from bytes
//! read. `asynchronous::h1` moves the bytes over smol sockets, `blocking::h1` over
//! std ones; both run the same steps, so both drivers have one HTTP/1.1
//! semantics.
//!
//! Only what the drivers need: one request with an in-memory body, a
//! response head, and a body read incrementally. A connection goes back to
//! the pool only when its response ended cleanly with nothing left over.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use nexus_proto::{HttpRequest, TransportErrorKind};
use rustls::pki_types::ServerName;
use ureq_proto::client::state::{RecvBody, RecvResponse};
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
pub(crate) struct Buffers {
    head: Vec<u8>,
    wire: Vec<u8>,
    read: Vec<u8>,
    body: Vec<u8>,
}

impl Buffers {
    pub(crate) fn new() -> Buffers {
        Buffers { head: vec![0; HEAD_BUF], wire: Vec::new(), read: vec![0; READ_BUF], body: vec![0; READ_BUF] }
    }
}

/// A connection with its buffers.
pub(crate) struct Link<C> {
    pub(crate) conn: C,
    pub(crate) bufs: Buffers,
}

/// How an exchange failed.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) kind: TransportErrorKind,
    pub(crate) message: String,
}

pub(crate) fn connect_err(message: impl Into<String>) -> Failure {
    Failure { kind: TransportErrorKind::Connect, message: message.into() }
}

pub(crate) fn io_err(message: impl Into<String>) -> Failure {
    Failure { kind: TransportErrorKind::Io, message: message.into() }
}

/// Where an exchange failed: before the request was on the wire (the server
/// cannot have seen it, so on a reused connection it goes again on a fresh
/// one), or after it was sent. Then the server may have acted on it, and the
/// failure goes to the run, whose retry budget decides: a request the driver
/// re-sent on its own would be an attempt nobody counted.
pub(crate) enum Stage {
    Unsent(Failure),
    Sent(Failure),
}

impl Stage {
    pub(crate) fn into_failure(self) -> Failure {
        match self {
            Stage::Unsent(f) | Stage::Sent(f) => f,
        }
    }
}

/// Where a connection goes: pooled connections are reused only for the same key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Key {
    pub(crate) tls: bool,
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl Key {
    /// The request's URI and the connection it needs.
    pub(crate) fn of(url: &str) -> Result<(http::Uri, Key), Failure> {
        let uri: http::Uri = url.parse().map_err(|e| connect_err(format!("bad URL {url:?}: {e}")))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(connect_err(format!("unsupported URL scheme in {url:?}"))),
        };
        let host = uri.host().ok_or_else(|| connect_err(format!("no host in {url:?}")))?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok((uri, Key { tls, host, port }))
    }

    /// The name TLS verifies the server's certificate against.
    pub(crate) fn server_name(&self) -> Result<ServerName<'static>, Failure> {
        ServerName::try_from(self.host.clone()).map_err(|e| connect_err(format!("TLS server name: {e}")))
    }
}

/// Whether an idle pooled connection can carry a request: its socket has
/// nothing to read. A read that would block means open; end of stream (the
/// server closed it while it sat in the pool), an error, or stray bytes mean
/// it cannot be used. Checked before every reuse, as ureq does, so a request
/// is not written into a connection the server already closed. One system
/// call (a non-blocking peek), whatever mode the socket is in.
#[cfg(unix)]
pub(crate) fn still_open(socket: impl std::os::fd::AsFd) -> bool {
    use rustix::net::{recv, RecvFlags};
    let mut probe = [0u8; 1];
    matches!(recv(socket, &mut probe, RecvFlags::PEEK | RecvFlags::DONTWAIT), Err(e) if e == rustix::io::Errno::WOULDBLOCK)
}

/// Keep-alive connections, shared by the runs of one client.
pub(crate) struct Pool<C> {
    idle: Mutex<Vec<(Key, Link<C>)>>,
    tls: OnceLock<Result<Arc<rustls::ClientConfig>, String>>,
    pub(crate) connect_timeout: Duration,
    max_idle: usize,
}

impl<C> Pool<C> {
    pub(crate) fn new(connect_timeout: Duration) -> Pool<C> {
        Pool::with_max_idle(connect_timeout, MAX_IDLE)
    }

    /// A pool keeping up to `max_idle` idle connections: a gateway keeps as
    /// many as it has requests in flight, so that every connection a burst
    /// opened is reused by the next one instead of closed.
    pub(crate) fn with_max_idle(connect_timeout: Duration, max_idle: usize) -> Pool<C> {
        Pool { idle: Mutex::new(Vec::new()), tls: OnceLock::new(), connect_timeout, max_idle }
    }

    /// The most recently pooled connection for `key` that `still_open`
    /// finds usable; the ones it finds closed are dropped.
    pub(crate) fn take_open(&self, key: &Key, mut still_open: impl FnMut(&mut C) -> bool) -> Option<Link<C>> {
        loop {
            let mut link = {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                let pos = idle.iter().rposition(|(k, _)| k == key)?;
                idle.remove(pos).1
            };
            if still_open(&mut link.conn) {
                return Some(link);
            }
        }
    }

    fn put(&self, key: Key, link: Link<C>) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() >= self.max_idle {
            if self.max_idle == 0 {
                return;
            }
            idle.remove(0);
        }
        idle.push((key, link));
    }

    /// The TLS client configuration, made on first use.
    pub(crate) fn tls(&self) -> Result<Arc<rustls::ClientConfig>, Failure> {
        self.tls.get_or_init(tls_config).clone().map_err(connect_err)
    }
}

fn tls_config() -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
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

/// One exchange on one connection, from the request bytes to the response head.
pub(crate) struct Exchange<C> {
    call: Call<RecvResponse>,
    conn: C,
    /// The request, head and body, to write in one go.
    wire: Vec<u8>,
    head: Vec<u8>,
    /// Bytes read off the socket; `start..end` not yet decoded.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    decoded: Vec<u8>,
}

impl<C> Exchange<C> {
    /// Writes `req` (head and body) into the link's outgoing buffer.
    pub(crate) fn start(link: Link<C>, uri: &http::Uri, req: &HttpRequest) -> Result<Exchange<C>, Stage> {
        let unsent = |f: Failure| Stage::Unsent(f);
        let call = Call::new(build(uri, req).map_err(unsent)?).map_err(|e| unsent(connect_err(e.to_string())))?;
        let mut call = call.proceed();
        let Link { conn, bufs } = link;
        let Buffers { head: mut out, mut wire, read: buf, body: decoded } = bufs;
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
        let call = match call.proceed().map_err(proto)? {
            Some(SendRequestResult::SendBody(mut c)) => {
                c.consume_direct_write(req.body.len()).map_err(proto)?;
                wire.extend_from_slice(&req.body);
                c.proceed().ok_or_else(|| unsent(connect_err("request body incomplete")))?
            }
            Some(SendRequestResult::RecvResponse(c)) => c,
            Some(SendRequestResult::Await100(_)) | None => return Err(unsent(connect_err("unexpected request state"))),
        };
        Ok(Exchange { call, conn, wire, head: out, buf, start: 0, end: 0, decoded })
    }

    /// The connection, and the request bytes to write on it.
    pub(crate) fn outgoing(&mut self) -> (&mut C, &[u8]) {
        (&mut self.conn, &self.wire)
    }

    /// The connection (the async driver awaits its readiness).
    #[cfg(feature = "async")]
    pub(crate) fn conn(&mut self) -> &mut C {
        &mut self.conn
    }

    /// The request is on the wire.
    pub(crate) fn sent(&mut self) {
        // A large request body is not kept around with an idle connection.
        if self.wire.capacity() > 4 * READ_BUF {
            self.wire = Vec::new();
        }
    }

    /// The response head, once the bytes read so far hold all of it.
    pub(crate) fn try_head(&mut self) -> Result<Option<http::Response<()>>, Stage> {
        if self.end == self.start {
            return Ok(None);
        }
        let input = self.buf.get(self.start..self.end).unwrap_or_default();
        let (used, resp) =
            self.call.try_response(input, false).map_err(|e| Stage::Sent(io_err(format!("response head: {e}"))))?;
        self.start += used;
        Ok(resp)
    }

    /// The connection, and room to read more of the head into.
    pub(crate) fn incoming(&mut self) -> Result<(&mut C, &mut [u8]), Stage> {
        compact(&mut self.buf, &mut self.start, &mut self.end);
        if self.end == self.buf.len() {
            if self.buf.len() >= MAX_HEAD {
                return Err(Stage::Sent(io_err("response head too large")));
            }
            self.buf.resize(self.buf.len() * 2, 0);
        }
        Ok((&mut self.conn, self.buf.get_mut(self.end..).unwrap_or_default()))
    }

    /// `n` bytes were read into the room [`incoming`](Self::incoming) gave.
    pub(crate) fn filled(&mut self, n: usize) -> Result<(), Stage> {
        if n == 0 {
            return Err(Stage::Sent(io_err("the connection closed before the response head")));
        }
        self.end += n;
        Ok(())
    }

    /// The response: its head, and its body with the connection.
    pub(crate) fn respond(self, head: http::Response<()>, key: Key, pool: Arc<Pool<C>>) -> Response<C> {
        let status = head.status().as_u16();
        let headers = head
            .headers()
            .iter()
            .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let Exchange { call, conn, wire, head: out, buf, start, end, decoded } = self;
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
        Response { status, headers, body }
    }
}

/// Moves unread bytes to the front of the buffer.
fn compact(buf: &mut [u8], start: &mut usize, end: &mut usize) {
    if *start > 0 {
        buf.copy_within(*start..*end, 0);
        *end -= *start;
        *start = 0;
    }
}

/// A response head and its body.
pub(crate) struct Response<C> {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Body<C>,
}

/// What decoding the bytes at hand gave.
pub(crate) enum Decoded {
    /// A piece of the body, in [`Body::chunk`].
    Piece(usize),
    /// The body ended.
    End,
    /// More bytes are needed: read them into [`Body::incoming`].
    More,
}

/// A response body, read incrementally.
pub(crate) struct Body<C> {
    conn: Option<C>,
    call: Option<Call<RecvBody>>,
    /// Bytes read off the socket; `start..end` not yet decoded.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// The decoded body piece [`decode`](Self::decode) produced last.
    decoded: Vec<u8>,
    /// The head and wire buffers, returned to the pool with the connection.
    spare: Option<(Vec<u8>, Vec<u8>)>,
    close_delimited: bool,
    key: Key,
    pool: Arc<Pool<C>>,
}

impl<C> Body<C> {
    /// Decodes what has been read so far.
    pub(crate) fn decode(&mut self) -> Result<Decoded, Failure> {
        loop {
            let Some(call) = self.call.as_mut() else {
                return Ok(Decoded::End);
            };
            let input = self.buf.get(self.start..self.end).unwrap_or_default();
            let (used, produced) =
                call.read(input, &mut self.decoded).map_err(|e| io_err(format!("response body: {e}")))?;
            self.start += used;
            if produced > 0 {
                return Ok(Decoded::Piece(produced));
            }
            if !self.close_delimited && call.can_proceed() {
                self.finish();
                return Ok(Decoded::End);
            }
            if used == 0 {
                return Ok(Decoded::More);
            }
        }
    }

    /// The connection, and room to read more of the body into.
    pub(crate) fn incoming(&mut self) -> Result<(&mut C, &mut [u8]), Failure> {
        compact(&mut self.buf, &mut self.start, &mut self.end);
        if self.end == self.buf.len() {
            self.buf.resize(self.buf.len() * 2, 0);
        }
        let conn = self.conn.as_mut().ok_or_else(|| io_err("the connection is gone"))?;
        Ok((conn, self.buf.get_mut(self.end..).unwrap_or_default()))
    }

    /// `n` bytes were read into the room [`incoming`](Self::incoming) gave;
    /// 0 is the end of the connection, which ends a body only if the
    /// connection's end delimits it.
    pub(crate) fn filled(&mut self, n: usize) -> Result<(), Failure> {
        if n > 0 {
            self.end += n;
            return Ok(());
        }
        self.call = None;
        self.conn = None;
        if self.close_delimited {
            return Ok(());
        }
        Err(io_err("the connection closed before the end of the body"))
    }

    /// The first `n` bytes of the piece [`decode`](Self::decode) gave last.
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
