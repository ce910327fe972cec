#![allow(dead_code)]
//! The tests' one HTTP/1.1 server, on hyper, on 127.0.0.1. It serves
//! * **routes**: a file or a buffer at a path, with `Range`/`If-Range` and an `ETag`, and
//!   scripted [`Fault`]s per request ([`Route::with_faults`]) or for every request
//!   ([`Route::with_sticky`]);
//! * an [`App`] for every other path (the fake assisted-service, the fake Kubernetes API),
//!   over HTTP or, with [`TestServer::with_app_tls`], HTTPS.
//!
//! Every request is logged with its body, the status answered and the body bytes sent.
//! Connections serve one request each (`Connection: close`) unless the app asks for
//! keep-alive. Dropping the server closes every socket at once, stalled ones included.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Either, Full};
use hyper::body::{Body, Bytes, Frame, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// File bodies go out in chunks of this size (on loopback 1 MiB beats smaller ones).
const COPY_CHUNK: usize = 1 << 20;

/// A route's content (`Source<PathBuf>`: the file is opened, and its size taken, anew for every
/// request) and an answer's (`Source<File>`).
#[derive(Clone, Debug)]
enum Source<F> {
    File(F),
    Bytes(Bytes),
}

/// One scripted misbehaviour of a route's answer. The first `Status` wins outright; of the
/// others each kind applies once per request (the last given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// Answer this status with a short `text/plain` body.
    Status(u16),
    /// Send the headers (with the full `Content-Length`), N body bytes, then close the socket.
    CutAfter(u64),
    /// Send N body bytes, then nothing, keeping the socket open until the server is dropped.
    StallAfter(u64),
    /// Answer 200 with the whole body even when a `Range` header is present.
    IgnoreRange,
    /// At most N bytes per second.
    Throttle(u64),
    /// Flip (xor 0xff) the byte at this offset of the resource, if the answer covers it.
    CorruptByte(u64),
}

/// A served resource and its fault script.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    content: Source<PathBuf>,
    /// `faults[i]` applies to the i-th request (0-based) of this path; later ones get none.
    faults: Vec<Vec<Fault>>,
    /// Applied to every request, in addition to `faults[i]`.
    sticky: Vec<Fault>,
    /// Quoted when served; `None` derives one from the size.
    etag: Option<String>,
}

impl Route {
    pub(crate) fn file(path: impl Into<PathBuf>) -> Route {
        Route::new(Source::File(path.into()))
    }
    pub(crate) fn bytes(data: impl Into<Vec<u8>>) -> Route {
        Route::new(Source::Bytes(Bytes::from(data.into())))
    }
    fn new(content: Source<PathBuf>) -> Route {
        Route {
            content,
            faults: Vec::new(),
            sticky: Vec::new(),
            etag: None,
        }
    }
    pub(crate) fn with_faults(self, faults: Vec<Vec<Fault>>) -> Route {
        Route { faults, ..self }
    }
    pub(crate) fn with_sticky(self, sticky: Vec<Fault>) -> Route {
        Route { sticky, ..self }
    }
    pub(crate) fn with_etag(self, etag: impl Into<String>) -> Route {
        let etag = Some(etag.into());
        Route { etag, ..self }
    }
}

/// A request as received and, in the log, how it was answered.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub method: String,
    /// Without the query string.
    pub path: String,
    /// Raw, without the `?`.
    pub query: String,
    pub headers: hyper::HeaderMap,
    pub body: Vec<u8>,
    /// The status answered (0 until then).
    pub status: u16,
    /// Body bytes handed to the connection so far (final once the answer ended).
    pub body_bytes_sent: u64,
}

/// A request of the log.
pub(crate) type RequestLog = Request;

impl Request {
    /// First value of a header (name matched case-insensitively).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)?.to_str().ok()
    }

    /// The query's pairs, percent-decoded (`+` is a space).
    pub(crate) fn query_pairs(&self) -> Vec<(String, String)> {
        let url = reqwest::Url::parse(&format!("http://query.invalid/?{}", self.query))
            .expect("a query string");
        url.query_pairs()
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    pub(crate) fn query_param(&self, name: &str) -> Option<String> {
        self.query_pairs()
            .into_iter()
            .find_map(|(k, v)| (k == name).then_some(v))
    }

    pub(crate) fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON (`Null` when it is not JSON).
    pub(crate) fn body_json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// What answers the paths that are not routes.
pub(crate) trait App: Send + Sync + 'static {
    fn handle(&self, request: &Request) -> Reply;
    /// Keep connections open between requests (the Kubernetes API server does).
    fn keep_alive(&self) -> bool {
        false
    }
}

impl<F: Fn(&Request) -> Reply + Send + Sync + 'static> App for F {
    fn handle(&self, request: &Request) -> Reply {
        self(request)
    }
}

/// An application's answer.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub status: u16,
    pub content_type: Option<&'static str>,
    pub body: Vec<u8>,
    /// Close the connection right after this answer without saying so (no `Connection:
    /// close`): a server's or load balancer's idle timeout, as a pooling client sees it.
    pub hang_up: bool,
}

impl Reply {
    pub(crate) fn empty(status: u16) -> Reply {
        Reply {
            status,
            content_type: None,
            body: Vec::new(),
            hang_up: false,
        }
    }

    pub(crate) fn json(status: u16, value: &serde_json::Value) -> Reply {
        Reply {
            content_type: Some("application/json"),
            body: serde_json::to_vec(value).unwrap(),
            ..Reply::empty(status)
        }
    }

    pub(crate) fn bytes(body: Vec<u8>) -> Reply {
        Reply {
            content_type: Some("application/octet-stream"),
            body,
            ..Reply::empty(200)
        }
    }
}

impl From<Reply> for Response<ReplyBody> {
    fn from(reply: Reply) -> Self {
        let mut r = Response::new(Either::Left(Full::from(reply.body)));
        *r.status_mut() = StatusCode::from_u16(reply.status).expect("a valid status code");
        if let Some(ct) = reply.content_type {
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        r
    }
}

/// `404 Not Found\n` and the like.
fn text_answer(status: u16) -> Response<ReplyBody> {
    let code = StatusCode::from_u16(status).expect("a valid status code");
    let text = Reply {
        content_type: Some("text/plain"),
        body: format!("{code}\n").into_bytes(),
        ..Reply::empty(status)
    };
    text.into()
}

struct Shared {
    /// Each route with the number of requests it answered.
    routes: Mutex<HashMap<String, (Route, usize)>>,
    log: Mutex<Vec<RequestLog>>,
    app: Option<Arc<dyn App>>,
    tls: Option<TlsAcceptor>,
}

impl Shared {
    fn update_log(&self, idx: usize, f: impl FnOnce(&mut RequestLog)) {
        f(&mut self.log.lock().unwrap()[idx]);
    }
}

/// The server. Dropping it closes every socket.
pub(crate) struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    /// The task accepting connections (it owns the listening socket).
    accept: Mutex<tokio::task::JoinHandle<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

const LOCALHOST: ([u8; 4], u16) = ([127, 0, 0, 1], 0);

impl TestServer {
    /// Routes only, on an ephemeral port.
    pub(crate) fn start() -> TestServer {
        Self::launch(LOCALHOST.into(), None, None)
    }

    /// `app` answers every path that is not a route.
    pub(crate) fn with_app(app: impl App) -> TestServer {
        Self::launch(LOCALHOST.into(), Some(Arc::new(app)), None)
    }

    /// As [`TestServer::with_app`] on a given address (the standalone fake service's).
    pub(crate) fn with_app_on(addr: SocketAddr, app: impl App) -> TestServer {
        Self::launch(addr, Some(Arc::new(app)), None)
    }

    /// As [`TestServer::with_app`] over HTTPS (TLS 1.2 or 1.3), with the certificate chain and
    /// private key of the PEM files `cert` and `key` (e.g. a `Pki`'s).
    pub(crate) fn with_app_tls(app: impl App, cert: &Path, key: &Path) -> TestServer {
        let certs = CertificateDer::pem_file_iter(cert)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .expect("test https server: certificate PEM");
        let key = PrivateKeyDer::from_pem_file(key).expect("test https server: key PEM");
        let provider = Arc::new(tokio_rustls::rustls::crypto::aws_lc_rs::default_provider());
        let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
            .expect("test https server: TLS configuration");
        let acceptor = TlsAcceptor::from(Arc::new(config));
        Self::launch(LOCALHOST.into(), Some(Arc::new(app)), Some(acceptor))
    }

    fn launch(addr: SocketAddr, app: Option<Arc<dyn App>>, tls: Option<TlsAcceptor>) -> TestServer {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("test-http")
            .enable_all()
            .build()
            .expect("test http server: runtime");
        let listener = runtime.block_on(TcpListener::bind(addr));
        let listener = listener.expect("test http server: bind");
        let shared = Arc::new(Shared {
            routes: Mutex::default(),
            log: Mutex::default(),
            app,
            tls,
        });
        TestServer {
            addr: listener.local_addr().expect("test http server: local_addr"),
            accept: Mutex::new(runtime.spawn(accept_loop(shared.clone(), listener))),
            shared,
            runtime: Some(runtime),
        }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (`https://` with TLS)
    pub(crate) fn base_url(&self) -> String {
        let scheme = if self.shared.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// `/x` → `http://127.0.0.1:PORT/x`
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url())
    }

    /// Adds or replaces a route (replacing resets its request count).
    pub(crate) fn route(&self, path: &str, route: Route) {
        let mut routes = self.shared.routes.lock().unwrap();
        routes.insert(path.to_string(), (route, 0));
    }

    /// Serves a file without faults; returns its URL.
    pub(crate) fn serve_file(&self, path: &str, file: impl Into<PathBuf>) -> String {
        self.route(path, Route::file(file));
        self.url(path)
    }

    /// Every request so far, in arrival order.
    pub(crate) fn requests(&self) -> Vec<RequestLog> {
        self.shared.log.lock().unwrap().clone()
    }

    pub(crate) fn requests_for(&self, path: &str) -> Vec<RequestLog> {
        let requests = self.requests().into_iter();
        requests.filter(|r| r.path == path).collect()
    }

    /// Closes the listening socket for `duration` (connections are refused), then listens on
    /// the same port again (tokio binds with `SO_REUSEADDR`). Returns once the socket is closed.
    pub(crate) fn unavailable_for(&self, duration: Duration) {
        let runtime = self.runtime.as_ref().expect("test http server: running");
        let mut accept = self.accept.lock().unwrap();
        accept.abort();
        let _ = runtime.block_on(&mut *accept);
        let (shared, addr) = (self.shared.clone(), self.addr);
        *accept = runtime.spawn(async move {
            tokio::time::sleep(duration).await;
            loop {
                match TcpListener::bind(addr).await {
                    Ok(listener) => break accept_loop(shared, listener).await,
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        });
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            // Drops every task: the listener and all connections close, stalled ones too.
            rt.shutdown_timeout(Duration::from_secs(5));
        }
    }
}

async fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            match shared.tls.clone() {
                None => serve_connection(shared, stream).await,
                // A failed handshake (a client refusing our CA) just closes.
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        serve_connection(shared, stream).await;
                    }
                }
            }
        });
    }
}

async fn serve_connection<S>(shared: Arc<Shared>, stream: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let hang_up = Arc::new(AtomicBool::new(false));
    let keep_alive = shared.app.as_ref().is_some_and(|a| a.keep_alive());
    let io = TokioIo::new(HangUpIo {
        stream,
        hang_up: hang_up.clone(),
    });
    let service =
        hyper::service::service_fn(move |req| answer(shared.clone(), hang_up.clone(), req));
    let _ = hyper::server::conn::http1::Builder::new()
        .keep_alive(keep_alive)
        .serve_connection(io, service)
        .await;
}

async fn answer(
    shared: Arc<Shared>,
    hang_up: Arc<AtomicBool>,
    req: hyper::Request<Incoming>,
) -> Result<Response<ReplyBody>, Infallible> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes().to_vec());
    let request = Request {
        method: parts.method.to_string(),
        path: parts.uri.path().to_string(),
        query: parts.uri.query().unwrap_or("").to_string(),
        headers: parts.headers,
        body: body.unwrap_or_default(),
        status: 0,
        body_bytes_sent: 0,
    };
    // Count the request and log it in one critical section, so that the log order matches the
    // per-route numbering.
    let (idx, route) = {
        let mut routes = shared.routes.lock().unwrap();
        let route = routes.get_mut(&request.path).map(|(route, hits)| {
            let mut faults = route.faults.get(*hits).cloned().unwrap_or_default();
            faults.extend(route.sticky.iter().cloned());
            *hits += 1;
            (route.clone(), faults)
        });
        let mut log = shared.log.lock().unwrap();
        log.push(request.clone());
        (log.len() - 1, route)
    };
    let response = match (route, &shared.app) {
        (Some((route, faults)), _) => serve_route(&shared, idx, &hang_up, &request, route, faults),
        (None, Some(app)) => {
            let reply = app.handle(&request);
            hang_up.store(reply.hang_up, Ordering::SeqCst);
            let sent = reply.body.len() as u64;
            shared.update_log(idx, |l| l.body_bytes_sent = sent);
            reply.into()
        }
        (None, None) => text_answer(404),
    };
    let status = response.status().as_u16();
    shared.update_log(idx, |l| l.status = status);
    Ok(response)
}

/// `bytes=A-` or `bytes=A-B` (the forms the installer sends): the inclusive range, `Err` when
/// it is unsatisfiable; `None` (a whole answer) for anything else.
fn parse_range(value: &str, total: u64) -> Option<Result<(u64, u64), ()>> {
    let (a, b) = value.trim().strip_prefix("bytes=")?.split_once('-')?;
    let start: u64 = a.parse().ok()?;
    let last = total.saturating_sub(1);
    let end = match b {
        "" => last,
        b => b.parse::<u64>().ok().filter(|&e| e >= start)?.min(last),
    };
    Some(if start < total {
        Ok((start, end))
    } else {
        Err(())
    })
}

fn serve_route(
    shared: &Arc<Shared>,
    idx: usize,
    hang_up: &Arc<AtomicBool>,
    req: &Request,
    route: Route,
    faults: Vec<Fault>,
) -> Response<ReplyBody> {
    let (mut stop, mut throttle, mut ignore_range, mut corrupt) = (None, None, false, Vec::new());
    for fault in faults {
        match fault {
            Fault::Status(code) => return text_answer(code),
            Fault::CutAfter(n) | Fault::StallAfter(n) => stop = Some((n, fault)),
            Fault::IgnoreRange => ignore_range = true,
            Fault::Throttle(rate) => throttle = Some(rate.max(1)),
            Fault::CorruptByte(at) => corrupt.push(at),
        }
    }
    let (total, source) = match route.content {
        Source::Bytes(b) => (b.len() as u64, Source::Bytes(b)),
        Source::File(p) => match File::open(&p).and_then(|f| Ok((f.metadata()?.len(), f))) {
            Ok((n, f)) => (n, Source::File(f)),
            Err(_) => return text_answer(500),
        },
    };
    let etag = format!("\"{}\"", route.etag.unwrap_or(format!("size-{total}")));
    let range = req
        .header("range")
        .filter(|_| !ignore_range && req.header("if-range").is_none_or(|v| v == etag))
        .and_then(|r| parse_range(r, total));
    let mut r: Response<ReplyBody> = Reply::empty(200).into();
    let h = r.headers_mut();
    let mut set = |name: &'static str, value: String| {
        h.insert(name, HeaderValue::from_str(&value).expect("a header value"));
    };
    set("accept-ranges", "bytes".into());
    set("etag", etag);
    let (status, start, len) = match range {
        None => (StatusCode::OK, 0, total),
        Some(Ok((s, e))) => {
            set("content-range", format!("bytes {s}-{e}/{total}"));
            (StatusCode::PARTIAL_CONTENT, s, e - s + 1)
        }
        Some(Err(())) => {
            set("content-range", format!("bytes */{total}"));
            set("content-length", "0".into());
            *r.status_mut() = StatusCode::RANGE_NOT_SATISFIABLE;
            return r;
        }
    };
    set("content-type", "application/octet-stream".into());
    set("content-length", len.to_string());
    // Where (if anywhere) the body stops early, and how.
    let stop = stop.filter(|s| s.0 < len);
    let n = stop.as_ref().map_or(len, |s| s.0);
    let (chunks, rx) = tokio::sync::mpsc::channel(1);
    let task = send_resource(chunks, source, start..start + n, throttle, corrupt, stop);
    tokio::spawn(task);
    *r.status_mut() = status;
    *r.body_mut() = Either::Right(ResourceBody {
        chunks: rx,
        hang_up: hang_up.clone(),
        shared: shared.clone(),
        idx,
    });
    r
}

/// Reads `range` of a route's resource for its [`ResourceBody`], chunk by chunk, with its
/// faults; then ends the body, or (`stop`) keeps it pending, after asking for the cut.
async fn send_resource(
    chunks: tokio::sync::mpsc::Sender<Option<(Bytes, u64)>>,
    source: Source<File>,
    range: std::ops::Range<u64>,
    throttle: Option<u64>,
    corrupt: Vec<u64>,
    stop: Option<(u64, Fault)>,
) {
    let began = Instant::now();
    let chunk = throttle.map_or(COPY_CHUNK, |rate| (rate / 20).clamp(1, 64 << 10) as usize);
    let mut pos = range.start;
    while pos < range.end {
        if let Some(rate) = throttle {
            let sent = (pos - range.start) as f64;
            let due = began + Duration::from_secs_f64(sent / rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let next = pos..range.end.min(pos + chunk as u64);
        let mut data = match &source {
            Source::Bytes(b) => b[next.start as usize..next.end as usize].to_vec(),
            Source::File(f) => {
                let mut buf = vec![0u8; (next.end - pos) as usize];
                // A read error ends the body short: hyper drops the connection.
                let Ok(()) = f.read_exact_at(&mut buf, pos) else {
                    return;
                };
                buf
            }
        };
        for o in corrupt.iter().filter(|o| next.contains(o)) {
            data[(o - pos) as usize] ^= 0xff;
        }
        pos = next.end;
        let sent = pos - range.start;
        if chunks.send(Some((Bytes::from(data), sent))).await.is_err() {
            return;
        }
    }
    if let Some((_, stop)) = stop {
        if matches!(stop, Fault::CutAfter(_)) {
            let _ = chunks.send(None).await;
        }
        std::future::pending::<()>().await;
    }
}

/// A route's body: the chunks [`send_resource`] reads, each with the bytes sent once it is;
/// `None` is a cut.
struct ResourceBody {
    chunks: tokio::sync::mpsc::Receiver<Option<(Bytes, u64)>>,
    hang_up: Arc<AtomicBool>,
    shared: Arc<Shared>,
    idx: usize,
}

impl Body for ResourceBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<io::Result<Frame<Bytes>>>> {
        let this = self.get_mut();
        match ready!(this.chunks.poll_recv(cx)) {
            Some(Some((data, sent))) => {
                this.shared
                    .update_log(this.idx, |l| l.body_bytes_sent = sent);
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            // A cut is not an error, on which hyper would drop the connection with what it has
            // not written yet: the socket closes after hyper's next flush, which follows this
            // poll.
            Some(None) => {
                this.hang_up.store(true, Ordering::SeqCst);
                Poll::Pending
            }
            None => Poll::Ready(None),
        }
    }
}

/// An answer's body: a buffer (or nothing), or a route's resource.
type ReplyBody = Either<Full<Bytes>, ResourceBody>;

/// The socket, which closes after the next flush once `hang_up` is set (see [`Reply::hang_up`]).
struct HangUpIo<S> {
    stream: S,
    hang_up: Arc<AtomicBool>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for HangUpIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for HangUpIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(Pin::new(&mut this.stream).poll_flush(cx))?;
        if this.hang_up.load(Ordering::SeqCst) {
            ready!(Pin::new(&mut this.stream).poll_shutdown(cx))?;
            // An error ends hyper's connection, which drops the socket.
            return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
