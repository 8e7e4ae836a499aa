//! The HTTP side: hyper serves each connection (HTTP/1.1 with keep-alive
//! and pipelining, or h2c when the client opens with the HTTP/2 preface) as
//! a task on one of the gateway's event loops ([`runtime`]); [`dispatch`]
//! turns each request into a surface call with limits, keys and the record
//! around it.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_lite::FutureExt;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::{http1, http2};
use hyper::service::service_fn;
use hyper::{Request, Response};

use super::gateway::{Ctx, Shared};
use super::keys::{KeyRing, Permit};
use super::limits::{self, Admission, Limiter, Scope};
use super::ops::{self, Finish, Record};
use super::runtime::{self, Handle, Listener, LoopTimer, Stream};
use super::surface::{ChunkStream, ErrorKind, GatewayError, Reply, Surface, SurfaceRequest};

/// The first bytes of every HTTP/2 connection with prior knowledge (RFC 9113 §3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Accepts until `stop` closes, handing connections to the loops in turn
/// (each connection stays on its loop: its socket, its timers, its upstream
/// exchange).
pub(crate) async fn accept_loop(
    shared: Arc<Shared>,
    listener: Listener,
    loops: Vec<Handle>,
    stop: smol::channel::Receiver<()>,
) {
    let mut turn = 0usize;
    loop {
        let accepted = async { Some(listener.accept().await) }
            .or(async {
                let _ = stop.recv().await;
                None
            })
            .await;
        let stream = match accepted {
            None => break,
            Some(Ok(stream)) => stream,
            Some(Err(_)) => {
                // Out of descriptors or a connection reset before accept: back off
                // a moment instead of spinning on the same error.
                runtime::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let admitted = {
            let mut active = shared.active.lock().unwrap_or_else(|e| e.into_inner());
            let ok = *active < shared.config.max_connections;
            if ok {
                *active += 1;
            }
            ok
        };
        if !admitted {
            runtime::spawn(refuse_busy(stream)).detach();
            continue;
        }
        let Some(on) = loops.get(turn % loops.len().max(1)) else { return };
        turn = turn.wrapping_add(1);
        on.spawn(connection(shared.clone(), stream, stop.clone())).detach();
    }
    // Dropping the listener here refuses new connections from now on.
}

/// Answers a connection over the limit with 503 and closes it.
async fn refuse_busy(stream: mio::net::TcpStream) {
    use futures_lite::AsyncWriteExt;
    let Ok(mut s) = Stream::adopt(stream) else { return };
    let body = r#"{"error":{"message":"the gateway is at its connection limit; retry shortly","type":"server_error","param":null,"code":"overloaded"}}"#;
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        let _ = s.write_all(head.as_bytes()).await;
        let _ = s.write_all(body.as_bytes()).await;
        let _ = s.flush().await;
    };
    write.or(runtime::sleep(Duration::from_secs(5))).await;
}

/// Counts a connection out when its task ends, however it ends.
struct Active(Arc<Shared>);

impl Drop for Active {
    fn drop(&mut self) {
        let mut active = self.0.active.lock().unwrap_or_else(|e| e.into_inner());
        *active = active.saturating_sub(1);
        self.0.idle.notify_all();
    }
}

/// A hyper connection that can be asked to finish what it has and close.
trait Graceful: Future {
    fn begin_shutdown(self: Pin<&mut Self>);
}

impl<I, S, B> Graceful for http1::Connection<I, S>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn begin_shutdown(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

impl<I, S, B, E> Graceful for http2::Connection<I, S, E>
where
    S: hyper::service::HttpService<Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    E: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn begin_shutdown(self: Pin<&mut Self>) {
        self.graceful_shutdown();
    }
}

/// Runs a connection; when `stop` closes, lets it finish its requests and close.
async fn drive<C: Graceful>(conn: C, stop: smol::channel::Receiver<()>) {
    let mut conn = std::pin::pin!(conn);
    let finished = async {
        let _ = conn.as_mut().await;
        true
    }
    .or(async {
        let _ = stop.recv().await;
        false
    })
    .await;
    if !finished {
        conn.as_mut().begin_shutdown();
        let _ = conn.await;
    }
}

/// Whether a connection opens with the HTTP/2 preface (h2c with prior
/// knowledge). `None`: it closed or sent nothing in time.
async fn opens_with_h2(stream: &Stream, wait: Duration) -> Option<bool> {
    let sniff = async {
        let mut buf = [0u8; 24];
        loop {
            let n = stream.peek(&mut buf).await.ok()?;
            let seen = buf.get(..n)?;
            if n == 0 {
                return None;
            }
            if H2_PREFACE.get(..n) != Some(seen) {
                return Some(false);
            }
            if n == H2_PREFACE.len() {
                return Some(true);
            }
            // A prefix of the preface so far: wait for the rest.
            runtime::sleep(Duration::from_millis(1)).await;
        }
    };
    sniff
        .or(async {
            runtime::sleep(wait).await;
            None
        })
        .await
}

/// hyper's HTTP/2 streams as tasks of the connection's loop.
#[derive(Clone, Copy)]
struct LoopExec;

impl<F> hyper::rt::Executor<F> for LoopExec
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        runtime::spawn(fut).detach();
    }
}

async fn connection(shared: Arc<Shared>, stream: mio::net::TcpStream, stop: smol::channel::Receiver<()>) {
    let _active = Active(shared.clone());
    let Ok(stream) = Stream::adopt(stream) else { return };
    let _ = stream.set_nodelay(true);
    let cfg = &shared.config;
    let Some(h2) = opens_with_h2(&stream, cfg.idle_timeout).await else { return };
    let io = WriteTimeout::new(stream, cfg.request_timeout);
    let for_service = shared.clone();
    let service = service_fn(move |req| {
        let shared = for_service.clone();
        async move { Ok::<_, Infallible>(dispatch(shared, req).await) }
    });
    if h2 {
        let mut b = http2::Builder::new(LoopExec);
        b.timer(LoopTimer)
            .max_header_list_size(u32::try_from(cfg.max_header_bytes).unwrap_or(u32::MAX))
            .keep_alive_interval(Some(cfg.idle_timeout))
            .keep_alive_timeout(cfg.request_timeout);
        drive(b.serve_connection(io, service), stop).await;
    } else {
        let mut b = http1::Builder::new();
        // The header timer runs from the moment a connection waits for its next
        // request head: it is both the keep-alive idle limit and the slow-head limit.
        b.timer(LoopTimer)
            .header_read_timeout(cfg.idle_timeout)
            .max_buf_size(cfg.max_header_bytes.max(8192))
            .max_headers(128)
            .pipeline_flush(true)
            .keep_alive(true);
        drive(b.serve_connection(io, service), stop).await;
    }
}

/// A socket whose writes give up when the peer has not taken a byte for
/// `timeout` (a client that stopped reading must not hold a stream, and its
/// upstream, forever).
struct WriteTimeout {
    io: Stream,
    timeout: Duration,
    blocked: Option<runtime::Sleep>,
}

impl WriteTimeout {
    fn new(io: Stream, timeout: Duration) -> WriteTimeout {
        WriteTimeout { io, timeout, blocked: None }
    }

    fn watch<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(r) => {
                self.blocked = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let timer = self.blocked.get_or_insert_with(|| runtime::sleep(timeout));
                match Pin::new(timer).poll(cx) {
                    Poll::Ready(_) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client has not read for the request timeout",
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

thread_local! {
    /// Where socket reads land before they are copied into hyper's buffer.
    /// hyper hands out uninitialized memory, which safe code must zero before
    /// reading into; one zeroed scratch per thread costs a copy of the bytes
    /// read instead, and no memory per connection.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; 16 * 1024]);
}

impl hyper::rt::Read for WriteTimeout {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        SCRATCH.with(|scratch| {
            let mut scratch = scratch.borrow_mut();
            let want = buf.remaining().min(scratch.len());
            let into = scratch.get_mut(..want).unwrap_or_default();
            match self.io.poll_read_buf(cx, into) {
                Poll::Ready(Ok(n)) => {
                    buf.put_slice(into.get(..n).unwrap_or_default());
                    Poll::Ready(Ok(()))
                }
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Pending => Poll::Pending,
            }
        })
    }
}

impl hyper::rt::Write for WriteTimeout {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let polled = self.io.poll_write_buf(cx, buf);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = self.io.poll_write_bufs(cx, bufs);
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Writes go straight to the socket: nothing is held here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.io.shutdown_write())
    }
}

/// A response body: whole or streamed, carrying the request's [`Finish`]
/// (and its key's concurrency slot) until it has been sent or dropped.
pub(crate) struct GwBody {
    kind: Kind,
    finish: Option<Finish>,
    permit: Option<Permit>,
}

enum Kind {
    Whole(Option<Bytes>),
    Stream(ChunkStream),
}

impl GwBody {
    fn done(&mut self) {
        if let Some(mut f) = self.finish.take() {
            f.completed = true;
        }
        self.permit = None;
    }
}

impl Body for GwBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let next = match &mut this.kind {
            Kind::Whole(b) => b.take(),
            Kind::Stream(s) => match s.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(b) => b,
            },
        };
        match next {
            Some(bytes) => {
                if let Some(f) = &this.finish {
                    f.record.note_first_byte();
                }
                if matches!(this.kind, Kind::Whole(None)) {
                    this.done();
                }
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
            None => {
                this.done();
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.kind, Kind::Whole(None))
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Whole(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::Stream(_) => SizeHint::default(),
        }
    }
}

/// The response header naming the upstream that answered.
const UPSTREAM_HEADER: &str = "x-nexus-upstream";

/// Turns a reply into a hyper response that carries `finish` (and `permit`).
fn respond(reply: Reply, finish: Finish, permit: Option<Permit>) -> Response<GwBody> {
    finish.record.note_status(reply.status());
    // The configured name of the upstream whose answer this is (never its URL or key).
    let served_by = finish.record.upstream();
    let (status, headers, kind) = match reply {
        Reply::Whole { status, headers, body } => {
            (status, headers, Kind::Whole(if body.is_empty() { None } else { Some(body) }))
        }
        Reply::Stream { status, headers, body } => (status, headers, Kind::Stream(body)),
    };
    let mut body = GwBody { kind, finish: Some(finish), permit };
    if matches!(body.kind, Kind::Whole(None)) {
        // Nothing will be polled: the answer is complete as it is handed over.
        if let Some(f) = &body.finish {
            f.record.note_first_byte();
        }
        body.done();
    }
    let mut response = Response::new(body);
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::BAD_GATEWAY);
    let h = response.headers_mut();
    if let Some(v) = served_by.and_then(|name| hyper::header::HeaderValue::from_str(&name).ok()) {
        h.insert(UPSTREAM_HEADER, v);
    }
    for (k, v) in headers {
        if let (Ok(k), Ok(v)) =
            (hyper::header::HeaderName::from_bytes(k.as_bytes()), hyper::header::HeaderValue::from_str(&v))
        {
            h.append(k, v);
        }
    }
    response
}

/// One request: operations endpoints, else the surface that claims the
/// path — after its key, its key's concurrency slot and its body limit.
pub(crate) async fn dispatch(shared: Arc<Shared>, req: Request<Incoming>) -> Response<GwBody> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    let claimed = shared.surfaces.iter().find(|s| s.claims(&path)).cloned();
    let surface: Option<Arc<dyn Surface>> = claimed.clone().or_else(|| shared.surfaces.first().cloned());
    let name = surface.as_ref().map_or("none", |s| s.name());
    let span = super::trace::SpanHandle::server(&shared.config, parts.method.as_str(), &path, &parts.headers);
    let record =
        Arc::new(Record::new(parts.method.as_str(), &path, if claimed.is_some() { name } else { "none" }).traced(span));
    let finish = Finish::new(shared.clone(), record.clone());
    if let Some(reply) = ops::answer(&shared, &parts.method, &path) {
        return respond(reply, finish, None);
    }
    let Some(surface) = surface else {
        return respond(Reply::json(404, r#"{"error":{"message":"no such endpoint"}}"#), finish, None);
    };
    let mut sreq = SurfaceRequest {
        method: parts.method,
        query: parts.uri.query().map(str::to_string),
        path,
        headers: parts.headers,
        body: Bytes::new(),
    };
    if claimed.is_none() {
        let e = GatewayError::new(ErrorKind::NotFound, format!("Invalid URL ({} {})", sreq.method, sreq.path));
        return respond(surface.error(&e), finish, None);
    }
    let mut permit = None;
    let mut key = None;
    if !shared.keys.is_empty() {
        let Some(k) = shared.keys.find(surface.client_key(&sreq)) else {
            let e = GatewayError::new(ErrorKind::Unauthorized, "Incorrect API key provided.");
            return respond(surface.error(&e), finish, None);
        };
        record.note_key(&k.name);
        if k.disabled {
            record.note_refused("disabled");
            let e = GatewayError::new(ErrorKind::Unauthorized, format!("The API key `{}` is disabled.", k.name));
            return respond(surface.error(&e), finish, None);
        }
        match KeyRing::acquire(&k) {
            Some(p) => permit = Some(p),
            None => {
                record.note_refused("concurrency");
                let e = GatewayError::new(
                    ErrorKind::RateLimited,
                    "Too many requests in flight for this key; retry when one has finished.",
                )
                .with_header("retry-after", "1");
                return respond(surface.error(&e), finish, None);
            }
        }
        key = Some(k);
    }
    let max = shared.config.max_body_bytes;
    let too_large = || GatewayError::new(ErrorKind::TooLarge, format!("the request body is over the {max}-byte limit"));
    let declared = sreq.header("content-length").and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return respond(surface.error(&too_large()), finish, permit);
    }
    let timeout = shared.config.request_timeout;
    let collected = async { Some(Limited::new(body, max).collect().await) }
        .or(async {
            runtime::sleep(timeout).await;
            None
        })
        .await;
    sreq.body = match collected {
        Some(Ok(c)) => c.to_bytes(),
        Some(Err(e)) if e.is::<http_body_util::LengthLimitError>() => {
            return respond(surface.error(&too_large()), finish, permit);
        }
        Some(Err(e)) => {
            let e = GatewayError::new(ErrorKind::InvalidRequest, format!("the request body could not be read: {e}"));
            return respond(surface.error(&e), finish, permit);
        }
        None => {
            let mut e = GatewayError::new(
                ErrorKind::InvalidRequest,
                format!("the request body did not arrive within {} s", timeout.as_secs()),
            );
            e.status = 408;
            return respond(surface.error(&e), finish, permit);
        }
    };
    let mut rate_headers = Vec::new();
    let limited = key.as_ref().is_some_and(|k| k.is_limited()) || shared.routes_limited();
    if limited && sreq.method == hyper::Method::POST {
        let (model, estimate) = limits::estimate(&sreq.path, &sreq.body);
        let model = model.unwrap_or_default();
        let mut scopes = match &key {
            Some(k) => Limiter::key_scopes(&k.name, &k.limits, &k.models, &model),
            None => Vec::new(),
        };
        if let Some((pattern, l)) = shared.route_limits(&model) {
            scopes.push((Scope::Route(pattern), l));
        }
        let checks = shared.limiter.checks(&scopes);
        match shared.limiter.admit(checks, estimate).await {
            Admission::Unlimited => {}
            Admission::Admitted(reservation, info) => {
                record.note_reservation(reservation);
                rate_headers = info.for_surface(surface.name());
            }
            Admission::Refused { mut error, limit } => {
                record.note_refused(limit);
                error.headers.retain(|(name, _)| limits::keep_for_surface(surface.name(), name));
                return respond(surface.error(&error), finish, permit);
            }
        }
    }
    let forward_key =
        if shared.config.forward_client_key { surface.client_key(&sreq).map(str::to_string) } else { None };
    let ctx = Ctx { shared: shared.clone(), record, forward_key };
    let mut reply = surface.handle(sreq, ctx).await;
    for (name, value) in rate_headers {
        reply = reply.with_header(name, value);
    }
    respond(reply, finish, permit)
}
