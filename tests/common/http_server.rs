#![allow(dead_code)]
//! A small std-only HTTP/1.1 test server with scriptable fault injection.
//!
//! It listens on 127.0.0.1 (ephemeral port), runs one thread per connection, answers one
//! request per connection (`Connection: close` on every response) and serves either a file
//! from disk or an in-memory buffer. Per route, a test can script faults for the i-th request
//! (`Route::faults`) or for every request (`Route::sticky`).
//!
//! Include it from integration tests or benches with
//! `#[path = "../tests/common/http_server.rs"] mod http_server;` (or via `tests/common/mod.rs`).
//!
//! Notes for callers:
//! * `RequestLog::body_bytes_sent` is updated after every 1 MiB (or throttle slice) written
//!   and once more when the response ends, just before the socket is closed;
//!   `RequestLog::finished` says whether it is final. A client that read to EOF therefore
//!   always sees the final entry; a client that stops at `Content-Length` (reqwest/hyper) may
//!   look a moment too early: call `TestServer::wait_idle` first when exact counts matter.
//!   "Sent" means accepted by the kernel, not necessarily read by the client.
//! * File bodies are sent with a 1 MiB read/write loop, not sendfile: current std does not use
//!   sendfile/splice for `io::copy(File -> TcpStream)`, and on loopback the loop measured
//!   faster than both std's 8 KiB fallback and raw sendfile. A freshly created sparse file is
//!   slow on its first pass (the kernel fills the page cache), fast once cached.
//! * The per-path request counter lives in the route: replacing a route with `route()` resets it.
//! * Dropping the server stops accepting, wakes stalled/throttled handlers, shuts all open
//!   sockets down and joins every thread.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Fixed `Last-Modified` value sent on every resource response. An `If-Range` carrying exactly
/// this date is treated as matching.
pub const LAST_MODIFIED: &str = "Mon, 01 Jan 2024 00:00:00 GMT";

/// How long a `StallAfter` handler keeps the socket open (unless the server is dropped first).
pub const STALL_LIMIT: Duration = Duration::from_secs(60);

const MAX_HEADER_BYTES: usize = 64 * 1024;
const COPY_CHUNK: usize = 1024 * 1024;
const THROTTLE_MAX_CHUNK: u64 = 64 * 1024;
const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(30);
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// What a route serves.
#[derive(Clone, Debug)]
pub enum Body {
    /// A file on disk; opened (and its size taken) anew for every request.
    File(PathBuf),
    /// An in-memory buffer.
    Bytes(Arc<Vec<u8>>),
}

impl From<PathBuf> for Body {
    fn from(p: PathBuf) -> Body {
        Body::File(p)
    }
}

impl From<Vec<u8>> for Body {
    fn from(v: Vec<u8>) -> Body {
        Body::Bytes(Arc::new(v))
    }
}

impl From<Arc<Vec<u8>>> for Body {
    fn from(v: Arc<Vec<u8>>) -> Body {
        Body::Bytes(v)
    }
}

/// One scripted misbehaviour. Several faults can be combined for one request: the first
/// `Status` wins outright; otherwise the smallest `CutAfter`/`StallAfter` limit applies
/// (a cut wins a tie), the lowest `Throttle` rate applies and every `CorruptByte` is applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer this status with a short `text/plain` body and no image bytes.
    Status(u16),
    /// Send headers (full Content-Length for the requested range), then close the socket after
    /// N body bytes of this response. No effect if N >= the response body length.
    CutAfter(u64),
    /// Send N body bytes, then keep the socket open sending nothing until the server is dropped
    /// or `STALL_LIMIT` passes. No effect if N >= the response body length.
    StallAfter(u64),
    /// Answer 200 with the whole body even when a Range header is present.
    IgnoreRange,
    /// Limit this response to N bytes per second (N = 0 is treated as 1).
    Throttle(u64),
    /// Flip (xor 0xff) the byte at this absolute offset of the resource if the response covers it.
    CorruptByte(u64),
}

/// A served resource plus its fault script.
#[derive(Clone, Debug)]
pub struct Route {
    pub body: Body,
    /// `faults[i]` applies to the i-th request (0-based, GET or HEAD) of this path; requests
    /// past the end of the list get no scripted fault.
    pub faults: Vec<Vec<Fault>>,
    /// Applied to every request, in addition to `faults[i]`.
    pub sticky: Vec<Fault>,
    /// Entity tag; quoted automatically unless it already starts with `"` or `W/`.
    /// `None` derives one from the size.
    pub etag: Option<String>,
}

impl Route {
    pub fn new(body: impl Into<Body>) -> Route {
        Route {
            body: body.into(),
            faults: Vec::new(),
            sticky: Vec::new(),
            etag: None,
        }
    }
    pub fn file(path: impl Into<PathBuf>) -> Route {
        Route::new(Body::File(path.into()))
    }
    pub fn bytes(data: impl Into<Vec<u8>>) -> Route {
        Route::new(Body::Bytes(Arc::new(data.into())))
    }
    pub fn with_faults(mut self, faults: Vec<Vec<Fault>>) -> Route {
        self.faults = faults;
        self
    }
    pub fn with_sticky(mut self, sticky: Vec<Fault>) -> Route {
        self.sticky = sticky;
        self
    }
    pub fn with_etag(mut self, etag: impl Into<String>) -> Route {
        self.etag = Some(etag.into());
        self
    }
}

/// One request as seen by the server.
#[derive(Clone, Debug)]
pub struct RequestLog {
    pub method: String,
    /// Request target without the query string.
    pub path: String,
    pub range: Option<String>,
    pub if_range: Option<String>,
    /// Headers as received (original name case, in order).
    pub headers: Vec<(String, String)>,
    /// Status sent (0 only for the instant between logging and choosing the response).
    pub status: u16,
    /// Body bytes handed to the socket for this response.
    pub body_bytes_sent: u64,
    /// Faults that applied to this request (scripted + sticky).
    pub faults: Vec<Fault>,
    /// True once the response has ended and `body_bytes_sent` is final (set just before the
    /// socket is closed; a stalled response stays unfinished until the server is dropped).
    pub finished: bool,
}

impl RequestLog {
    /// First header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct RouteState {
    route: Route,
    hits: usize,
}

#[derive(Default)]
struct State {
    routes: HashMap<String, RouteState>,
    log: Vec<RequestLog>,
    /// Connections accepted and not yet finished.
    active: usize,
    /// Clones of open sockets, so Drop can shut them down.
    conns: HashMap<u64, TcpStream>,
}

struct Shared {
    state: Mutex<State>,
    idle: Condvar,
    stopping: AtomicBool,
    stop_lock: Mutex<()>,
    stop_cv: Condvar,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Sleep for `dur` unless the server stops first. Returns true if stopping.
    fn pause(&self, dur: Duration) -> bool {
        let deadline = Instant::now() + dur;
        let mut g = lock(&self.stop_lock);
        loop {
            if self.stopping() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = self
                .stop_cv
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn update_log(&self, idx: usize, f: impl FnOnce(&mut RequestLog)) {
        if let Some(entry) = lock(&self.state).log.get_mut(idx) {
            f(entry);
        }
    }
}

/// The server. Dropping it shuts everything down.
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Bind 127.0.0.1:0 and spawn the accept thread.
    pub fn start() -> TestServer {
        let listener =
            TcpListener::bind(("127.0.0.1", 0)).expect("test http server: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("test http server: local_addr");
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            idle: Condvar::new(),
            stopping: AtomicBool::new(false),
            stop_lock: Mutex::new(()),
            stop_cv: Condvar::new(),
            handles: Mutex::new(Vec::new()),
        });
        let sh = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("test-http-accept".into())
            .spawn(move || accept_loop(sh, listener))
            .expect("test http server: spawn accept thread");
        TestServer {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// "http://127.0.0.1:PORT"
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Full URL for a path ("/x" -> "http://127.0.0.1:PORT/x").
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url(), path)
    }

    /// Add or replace a route (replacing resets its request counter). `path` like "/rhcos.raw.gz".
    pub fn route(&self, path: &str, route: Route) {
        lock(&self.shared.state)
            .routes
            .insert(path.to_string(), RouteState { route, hits: 0 });
    }

    /// Serve a file without faults; returns the full URL.
    pub fn serve_file(&self, path: &str, file: impl Into<PathBuf>) -> String {
        self.route(path, Route::file(file));
        self.url(path)
    }

    /// Serve a buffer without faults; returns the full URL.
    pub fn serve_bytes(&self, path: &str, data: impl Into<Vec<u8>>) -> String {
        self.route(path, Route::bytes(data));
        self.url(path)
    }

    /// Every request seen, in arrival order.
    pub fn requests(&self) -> Vec<RequestLog> {
        lock(&self.shared.state).log.clone()
    }

    /// Requests whose path (query string removed) equals `path`.
    pub fn requests_for(&self, path: &str) -> Vec<RequestLog> {
        let path = strip_query(path);
        lock(&self.shared.state)
            .log
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// How many GET/HEAD requests the current route at `path` has counted.
    pub fn request_count(&self, path: &str) -> usize {
        lock(&self.shared.state)
            .routes
            .get(path)
            .map_or(0, |r| r.hits)
    }

    pub fn clear_requests(&self) {
        lock(&self.shared.state).log.clear();
    }

    /// Wait until no connection is open (all responses ended and logged). Returns false on
    /// timeout (e.g. a handler is stalled or a client still holds a connection).
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut st = lock(&self.shared.state);
        while st.active > 0 {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            st = self
                .shared
                .idle
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        {
            let _g = lock(&self.shared.stop_lock);
            self.shared.stopping.store(true, Ordering::SeqCst);
            self.shared.stop_cv.notify_all();
        }
        // Wake the blocking accept() with a throwaway connection.
        let woke = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2)).is_ok();
        if let Some(h) = self.accept.take() {
            if woke {
                let _ = h.join();
            }
        }
        // The accept thread is gone (or stuck): every live connection is registered.
        for s in lock(&self.shared.state).conns.values() {
            let _ = s.shutdown(Shutdown::Both);
        }
        let handles = std::mem::take(&mut *lock(&self.shared.handles));
        for h in handles {
            let _ = h.join();
        }
    }
}

fn accept_loop(shared: Arc<Shared>, listener: TcpListener) {
    let mut next_id: u64 = 0;
    loop {
        let conn = listener.accept();
        if shared.stopping() {
            break;
        }
        let stream = match conn {
            Ok((s, _)) => s,
            Err(_) => {
                thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        let id = next_id;
        next_id += 1;
        {
            let mut st = lock(&shared.state);
            st.active += 1;
            if let Ok(c) = stream.try_clone() {
                st.conns.insert(id, c);
            }
        }
        let sh = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name("test-http-conn".into())
            .spawn(move || handle_connection(&sh, stream, id));
        match spawned {
            Ok(h) => {
                let mut hs = lock(&shared.handles);
                hs.retain(|h| !h.is_finished());
                hs.push(h);
            }
            Err(_) => {
                let mut st = lock(&shared.state);
                st.active -= 1;
                st.conns.remove(&id);
                shared.idle.notify_all();
            }
        }
    }
}

/// Unregisters the connection when the handler ends, even by panic.
struct ConnGuard<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for ConnGuard<'_> {
    fn drop(&mut self) {
        let mut st = lock(&self.shared.state);
        st.conns.remove(&self.id);
        st.active = st.active.saturating_sub(1);
        self.shared.idle.notify_all();
    }
}

struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

enum ReadOutcome {
    Request(Request),
    /// Unparseable request; method if one was seen.
    Bad(String),
    /// Connection closed / timed out / server stopping before a complete header block.
    Gone,
}

fn read_request(stream: &mut TcpStream) -> ReadOutcome {
    let mut buf: Vec<u8> = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = find_head_end(&buf) {
            break pos;
        }
        if buf.len() > MAX_HEADER_BYTES {
            return ReadOutcome::Bad(String::new());
        }
        match stream.read(&mut chunk) {
            Ok(0) => return ReadOutcome::Gone,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return ReadOutcome::Gone,
        }
    };
    let text = String::from_utf8_lossy(&buf[..head_end]);
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    // Tolerate stray empty lines before the request line (RFC 9112 section 2.2).
    let request_line = loop {
        match lines.next() {
            Some("") => continue,
            Some(l) => break l,
            None => return ReadOutcome::Bad(String::new()),
        }
    };
    let mut parts = request_line.split_ascii_whitespace();
    let (method, target, version) = match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(m), Some(t), Some(v), None) => (m.to_string(), t.to_string(), v),
        (Some(m), _, _, _) => return ReadOutcome::Bad(m.to_string()),
        _ => return ReadOutcome::Bad(String::new()),
    };
    if !version.starts_with("HTTP/") {
        return ReadOutcome::Bad(method);
    }
    let mut headers = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        match line.split_once(':') {
            Some((n, v)) if !n.is_empty() && !n.contains(' ') => {
                headers.push((n.to_string(), v.trim().to_string()))
            }
            _ => return ReadOutcome::Bad(method),
        }
    }
    // Accept absolute-form targets ("http://host:port/path").
    let target = match target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        Some(rest) => match rest.find('/') {
            Some(i) => rest[i..].to_string(),
            None => "/".to_string(),
        },
        None => target,
    };
    ReadOutcome::Request(Request {
        method,
        target,
        headers,
    })
}

/// Index just past the blank line ending the header block, if present.
fn find_head_end(buf: &[u8]) -> Option<usize> {
    for i in 0..buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some(i + 2);
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some(i + 3);
            }
        }
    }
    None
}

fn strip_query(target: &str) -> &str {
    target.split(['?', '#']).next().unwrap_or(target)
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        410 => "Gone",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Faults of one request, folded together.
#[derive(Default)]
struct Effective {
    status: Option<u16>,
    cut: Option<u64>,
    stall: Option<u64>,
    ignore_range: bool,
    throttle: Option<u64>,
    corrupt: Vec<u64>,
}

impl Effective {
    fn from(faults: &[Fault]) -> Effective {
        let mut e = Effective::default();
        for f in faults {
            match *f {
                Fault::Status(c) => {
                    e.status.get_or_insert(c);
                }
                Fault::CutAfter(n) => e.cut = Some(e.cut.map_or(n, |c| c.min(n))),
                Fault::StallAfter(n) => e.stall = Some(e.stall.map_or(n, |s| s.min(n))),
                Fault::IgnoreRange => e.ignore_range = true,
                Fault::Throttle(r) => {
                    let r = r.max(1);
                    e.throttle = Some(e.throttle.map_or(r, |t| t.min(r)));
                }
                Fault::CorruptByte(o) => e.corrupt.push(o),
            }
        }
        e
    }
}

enum RangeOutcome {
    Full,
    /// Inclusive byte range.
    Partial(u64, u64),
    Unsatisfiable,
}

/// Parse a single-range `bytes=` header. Anything we don't understand (other units, multiple
/// ranges, malformed specs) is ignored, which means a full 200 response.
fn parse_range(value: &str, total: u64) -> RangeOutcome {
    let value = value.trim();
    let Some((unit, spec)) = value.split_once('=') else {
        return RangeOutcome::Full;
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") || spec.contains(',') {
        return RangeOutcome::Full;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return RangeOutcome::Full;
    };
    let (a, b) = (a.trim(), b.trim());
    if a.is_empty() {
        // Suffix range: the last N bytes.
        let Ok(n) = b.parse::<u64>() else {
            return RangeOutcome::Full;
        };
        if n == 0 || total == 0 {
            return RangeOutcome::Unsatisfiable;
        }
        let n = n.min(total);
        return RangeOutcome::Partial(total - n, total - 1);
    }
    let Ok(start) = a.parse::<u64>() else {
        return RangeOutcome::Full;
    };
    let end = if b.is_empty() {
        None
    } else {
        match b.parse::<u64>() {
            Ok(e) if e >= start => Some(e),
            _ => return RangeOutcome::Full,
        }
    };
    if start >= total {
        return RangeOutcome::Unsatisfiable;
    }
    let end = end.map_or(total - 1, |e| e.min(total - 1));
    RangeOutcome::Partial(start, end)
}

fn quote_etag(tag: &str) -> String {
    if tag.starts_with('"') || tag.starts_with("W/") {
        tag.to_string()
    } else {
        format!("\"{tag}\"")
    }
}

fn handle_connection(shared: &Shared, mut stream: TcpStream, id: u64) {
    let _guard = ConnGuard { shared, id };
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(REQUEST_READ_TIMEOUT));
    let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
    if !shared.stopping() {
        serve_one(shared, &mut stream);
    }
    close(stream);
}

/// Send FIN, swallow whatever the client sent that we did not read (so the kernel does not
/// answer with RST and destroy data the client has not read yet), then drop the socket.
fn close(stream: TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    if stream.set_nonblocking(true).is_ok() {
        let mut sink = [0u8; 4096];
        let mut s = &stream;
        for _ in 0..64 {
            match s.read(&mut sink) {
                Ok(n) if n > 0 => continue,
                _ => break,
            }
        }
    }
}

fn simple_response(stream: &mut TcpStream, code: u16, extra: &str, head_only: bool) -> u64 {
    let body = format!("{} {}\n", code, reason(code));
    let mut out = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
        code,
        reason(code),
        body.len(),
        extra
    );
    if !head_only {
        out.push_str(&body);
    }
    match stream.write_all(out.as_bytes()) {
        Ok(()) if !head_only => body.len() as u64,
        _ => 0,
    }
}

fn serve_one(shared: &Shared, stream: &mut TcpStream) {
    let req = match read_request(stream) {
        ReadOutcome::Request(r) => r,
        ReadOutcome::Gone => return,
        ReadOutcome::Bad(method) => {
            let idx = push_log(shared, method, "", Vec::new(), Vec::new(), 400);
            let sent = simple_response(stream, 400, "", false);
            shared.update_log(idx, |l| l.body_bytes_sent = sent);
            finish_log(shared, idx);
            return;
        }
    };
    let path = strip_query(&req.target).to_string();
    let head_only = req.method == "HEAD";

    if req.method != "GET" && !head_only {
        let idx = push_log(
            shared,
            req.method.clone(),
            &path,
            req.headers.clone(),
            Vec::new(),
            405,
        );
        let sent = simple_response(stream, 405, "Allow: GET, HEAD\r\n", false);
        shared.update_log(idx, |l| l.body_bytes_sent = sent);
        finish_log(shared, idx);
        return;
    }

    // Look the route up, count the request and log it in one critical section so that the log
    // order matches the per-path request numbering.
    let (idx, found) = {
        let mut st = lock(&shared.state);
        let key = if st.routes.contains_key(&req.target) {
            req.target.clone()
        } else {
            path.clone()
        };
        let found = st.routes.get_mut(&key).map(|rs| {
            let i = rs.hits;
            rs.hits += 1;
            let mut faults = rs.route.faults.get(i).cloned().unwrap_or_default();
            faults.extend(rs.route.sticky.iter().cloned());
            (rs.route.body.clone(), rs.route.etag.clone(), faults)
        });
        let status = if found.is_some() { 0 } else { 404 };
        let faults = found.as_ref().map(|f| f.2.clone()).unwrap_or_default();
        st.log.push(new_log(
            req.method.clone(),
            &path,
            req.headers.clone(),
            faults,
            status,
        ));
        (st.log.len() - 1, found)
    };
    let Some((body, etag, faults)) = found else {
        let sent = simple_response(stream, 404, "", head_only);
        shared.update_log(idx, |l| l.body_bytes_sent = sent);
        finish_log(shared, idx);
        return;
    };

    let sent = respond(shared, stream, idx, &req, head_only, body, etag, &faults);
    shared.update_log(idx, |l| l.body_bytes_sent = sent);
    finish_log(shared, idx);
}

fn new_log(
    method: String,
    path: &str,
    headers: Vec<(String, String)>,
    faults: Vec<Fault>,
    status: u16,
) -> RequestLog {
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    RequestLog {
        method,
        path: path.to_string(),
        range: find("range"),
        if_range: find("if-range"),
        status,
        body_bytes_sent: 0,
        faults,
        finished: false,
        headers,
    }
}

fn push_log(
    shared: &Shared,
    method: String,
    path: &str,
    headers: Vec<(String, String)>,
    faults: Vec<Fault>,
    status: u16,
) -> usize {
    let mut st = lock(&shared.state);
    st.log.push(new_log(method, path, headers, faults, status));
    st.log.len() - 1
}

fn finish_log(shared: &Shared, idx: usize) {
    shared.update_log(idx, |l| l.finished = true);
}

enum Source {
    File(File),
    Bytes(Arc<Vec<u8>>),
}

/// Serve a resource response. Returns body bytes sent.
#[allow(clippy::too_many_arguments)]
fn respond(
    shared: &Shared,
    stream: &mut TcpStream,
    idx: usize,
    req: &Request,
    head_only: bool,
    body: Body,
    etag: Option<String>,
    faults: &[Fault],
) -> u64 {
    let eff = Effective::from(faults);
    if let Some(code) = eff.status {
        shared.update_log(idx, |l| l.status = code);
        return simple_response(stream, code, "", head_only);
    }

    let (source, total) = match body {
        Body::Bytes(b) => {
            let n = b.len() as u64;
            (Source::Bytes(b), n)
        }
        Body::File(p) => match File::open(&p).and_then(|f| f.metadata().map(|m| (f, m.len()))) {
            Ok((f, n)) => (Source::File(f), n),
            Err(_) => {
                shared.update_log(idx, |l| l.status = 500);
                return simple_response(stream, 500, "", head_only);
            }
        },
    };
    let etag = etag
        .as_deref()
        .map(quote_etag)
        .unwrap_or_else(|| format!("\"size-{total}\""));

    let mut outcome = RangeOutcome::Full;
    if let Some(range) = req.header("range") {
        let if_range_ok = match req.header("if-range") {
            None => true,
            Some(v) => v == etag || v == LAST_MODIFIED,
        };
        if !eff.ignore_range && if_range_ok {
            outcome = parse_range(range, total);
        }
    }

    let common = format!(
        "Accept-Ranges: bytes\r\nETag: {etag}\r\nLast-Modified: {LAST_MODIFIED}\r\nConnection: close\r\n"
    );
    let (code, start, len, extra) = match outcome {
        RangeOutcome::Full => (200, 0, total, String::new()),
        RangeOutcome::Partial(s, e) => (
            206,
            s,
            e - s + 1,
            format!("Content-Range: bytes {s}-{e}/{total}\r\n"),
        ),
        RangeOutcome::Unsatisfiable => {
            shared.update_log(idx, |l| l.status = 416);
            let head = format!(
                "HTTP/1.1 416 {}\r\nContent-Range: bytes */{total}\r\nContent-Length: 0\r\n{common}\r\n",
                reason(416)
            );
            let _ = stream.write_all(head.as_bytes());
            return 0;
        }
    };
    shared.update_log(idx, |l| l.status = code);
    let head = format!(
        "HTTP/1.1 {code} {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\n{extra}{common}\r\n",
        reason(code)
    );
    if stream.write_all(head.as_bytes()).is_err() || head_only {
        return 0;
    }

    // Where (if anywhere) the body is interrupted.
    let cut = eff.cut.filter(|&n| n < len);
    let stall = eff.stall.filter(|&n| n < len);
    let (to_send, stall_after) = match (cut, stall) {
        (Some(c), Some(s)) if s < c => (s, true),
        (Some(c), _) => (c, false),
        (None, Some(s)) => (s, true),
        (None, None) => (len, false),
    };
    let corrupt: Vec<u64> = eff
        .corrupt
        .iter()
        .copied()
        .filter(|&o| o >= start && o < start + to_send)
        .collect();

    let sent = if eff.throttle.is_none() && corrupt.is_empty() {
        send_fast(shared, stream, idx, source, start, to_send)
    } else {
        send_slow(
            shared,
            stream,
            idx,
            source,
            start,
            to_send,
            eff.throttle,
            &corrupt,
        )
    };

    if stall_after && sent == to_send {
        shared.update_log(idx, |l| l.body_bytes_sent = sent);
        let _ = stream.flush();
        shared.pause(STALL_LIMIT);
    }
    sent
}

/// Plain copy without per-byte work. Buffers go out in one `write` loop. Files go through a
/// 1 MiB read/write loop: current std deliberately does not use sendfile/splice for
/// `io::copy(File -> TcpStream)` (it only does so when later file changes can't show through),
/// and on loopback the 1 MiB loop measured faster than both std's 8 KiB fallback and raw
/// sendfile(2).
fn send_fast(
    shared: &Shared,
    stream: &mut TcpStream,
    idx: usize,
    source: Source,
    start: u64,
    len: u64,
) -> u64 {
    match source {
        Source::Bytes(b) => {
            let data = &b[start as usize..(start + len) as usize];
            write_counted(stream, data)
        }
        file => send_slow(shared, stream, idx, file, start, len, None, &[]),
    }
}

/// Write all of `data`, returning how much was accepted before any error.
fn write_counted(stream: &mut TcpStream, data: &[u8]) -> u64 {
    let mut done = 0;
    while done < data.len() {
        match stream.write(&data[done..]) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    done as u64
}

/// Chunked copy applying throttling and byte corruption.
#[allow(clippy::too_many_arguments)]
fn send_slow(
    shared: &Shared,
    stream: &mut TcpStream,
    idx: usize,
    source: Source,
    start: u64,
    len: u64,
    throttle: Option<u64>,
    corrupt: &[u64],
) -> u64 {
    let chunk = match throttle {
        Some(rate) => (rate / 20).clamp(1, THROTTLE_MAX_CHUNK) as usize,
        None => COPY_CHUNK,
    };
    let (mut file, bytes) = match source {
        Source::File(mut f) => {
            if f.seek(SeekFrom::Start(start)).is_err() {
                return 0;
            }
            (Some(f), None)
        }
        Source::Bytes(b) => (None, Some(b)),
    };
    let mut buf = vec![0u8; chunk.min(len as usize).max(1)];
    let began = Instant::now();
    let mut sent: u64 = 0;
    while sent < len {
        if shared.stopping() {
            break;
        }
        let want = chunk.min((len - sent) as usize);
        let pos = start + sent;
        let got = match (&mut file, &bytes) {
            (Some(f), _) => match read_full(f, &mut buf[..want]) {
                Ok(n) => n,
                Err(_) => break,
            },
            (None, Some(b)) => {
                let from = pos as usize;
                buf[..want].copy_from_slice(&b[from..from + want]);
                want
            }
            (None, None) => break,
        };
        if got == 0 {
            break; // file shrank under us
        }
        for &o in corrupt {
            if o >= pos && o < pos + got as u64 {
                buf[(o - pos) as usize] ^= 0xff;
            }
        }
        let w = write_counted(stream, &buf[..got]);
        sent += w;
        if w < got as u64 {
            break;
        }
        shared.update_log(idx, |l| l.body_bytes_sent = sent);
        if let Some(rate) = throttle {
            let due = began + Duration::from_secs_f64(sent as f64 / rate as f64);
            let now = Instant::now();
            if due > now && sent < len && shared.pause(due - now) {
                break;
            }
        }
    }
    sent
}

/// Read until `buf` is full or EOF.
fn read_full(f: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Resp {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
        /// Error that ended the body read (None = clean EOF).
        error: Option<io::ErrorKind>,
    }

    impl Resp {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
        fn content_length(&self) -> u64 {
            self.header("content-length").unwrap().parse().unwrap()
        }
    }

    fn send(srv: &TestServer, method: &str, path: &str, extra: &[(&str, &str)]) -> TcpStream {
        let mut s = TcpStream::connect(srv.addr()).unwrap();
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", srv.addr());
        for (n, v) in extra {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        s
    }

    /// Read a whole response (until EOF, error or timeout).
    fn read_resp(mut s: TcpStream, timeout: Duration) -> Resp {
        s.set_read_timeout(Some(timeout)).unwrap();
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut error = None;
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    error = Some(e.kind());
                    break;
                }
            }
        }
        let end = find_head_end(&raw).expect("no complete header block");
        let head = String::from_utf8(raw[..end].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap();
        assert!(status_line.starts_with("HTTP/1.1 "), "{status_line}");
        let status = status_line[9..12].parse().unwrap();
        let headers = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.to_string(), v.trim().to_string())
            })
            .collect();
        Resp {
            status,
            headers,
            body: raw[end..].to_vec(),
            error,
        }
    }

    fn get(srv: &TestServer, path: &str, extra: &[(&str, &str)]) -> Resp {
        read_resp(send(srv, "GET", path, extra), Duration::from_secs(5))
    }

    fn pattern(n: usize) -> Vec<u8> {
        let mut x: u32 = 0x1234_5678;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    struct TempFile(PathBuf);
    impl TempFile {
        fn new(data: &[u8]) -> TempFile {
            static N: AtomicUsize = AtomicUsize::new(0);
            let p = std::env::temp_dir().join(format!(
                "http-server-test-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::SeqCst)
            ));
            std::fs::write(&p, data).unwrap();
            TempFile(p)
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn full_get_and_head() {
        let data = pattern(300_000);
        let tf = TempFile::new(&data);
        let srv = TestServer::start();
        let url = srv.serve_file("/img.raw", &tf.0);
        assert_eq!(url, format!("{}/img.raw", srv.base_url()));
        assert!(srv.base_url().starts_with("http://127.0.0.1:"));

        let r = get(&srv, "/img.raw", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, data);
        assert_eq!(r.content_length(), data.len() as u64);
        assert_eq!(r.header("accept-ranges"), Some("bytes"));
        assert_eq!(r.header("etag"), Some("\"size-300000\""));
        assert_eq!(r.header("last-modified"), Some(LAST_MODIFIED));
        assert_eq!(r.header("content-type"), Some("application/octet-stream"));
        assert_eq!(r.header("connection"), Some("close"));

        let h = read_resp(send(&srv, "HEAD", "/img.raw", &[]), Duration::from_secs(5));
        assert_eq!(h.status, 200);
        assert_eq!(h.content_length(), data.len() as u64);
        assert!(h.body.is_empty());

        // Bytes body, custom etag, query string ignored for routing.
        srv.route(
            "/mem",
            Route::bytes(b"hello world".to_vec()).with_etag("v1"),
        );
        let r = get(&srv, "/mem?x=1", &[]);
        assert_eq!((r.status, r.body.as_slice()), (200, &b"hello world"[..]));
        assert_eq!(r.header("etag"), Some("\"v1\""));
    }

    #[test]
    fn ranges_and_416() {
        let data = pattern(100_000);
        let tf = TempFile::new(&data);
        let srv = TestServer::start();
        srv.serve_file("/f", &tf.0);

        let r = get(&srv, "/f", &[("Range", "bytes=1000-")]);
        assert_eq!(r.status, 206);
        assert_eq!(r.header("content-range"), Some("bytes 1000-99999/100000"));
        assert_eq!(r.body, &data[1000..]);

        let r = get(&srv, "/f", &[("range", "bytes=10-19")]);
        assert_eq!(r.status, 206);
        assert_eq!(r.header("Content-Range"), Some("bytes 10-19/100000"));
        assert_eq!(r.content_length(), 10);
        assert_eq!(r.body, &data[10..20]);

        let r = get(&srv, "/f", &[("Range", "bytes=99990-200000")]);
        assert_eq!((r.status, r.body.as_slice()), (206, &data[99990..]));

        let r = get(&srv, "/f", &[("Range", "bytes=-5")]);
        assert_eq!((r.status, r.body.as_slice()), (206, &data[99995..]));

        let r = get(&srv, "/f", &[("Range", "bytes=100000-")]);
        assert_eq!(r.status, 416);
        assert_eq!(r.header("content-range"), Some("bytes */100000"));
        assert!(r.body.is_empty());

        let h = read_resp(
            send(&srv, "HEAD", "/f", &[("Range", "bytes=5-9")]),
            Duration::from_secs(5),
        );
        assert_eq!((h.status, h.content_length(), h.body.len()), (206, 5, 0));
    }

    #[test]
    fn ignore_range_and_if_range() {
        let data = pattern(50_000);
        let srv = TestServer::start();
        srv.route(
            "/r",
            Route::bytes(data.clone())
                .with_etag("abc")
                .with_faults(vec![vec![Fault::IgnoreRange]]),
        );

        let r = get(&srv, "/r", &[("Range", "bytes=100-")]);
        assert_eq!((r.status, r.header("content-range")), (200, None));
        assert_eq!(r.body, data);

        // Second request: no fault, range honoured.
        let r = get(&srv, "/r", &[("Range", "bytes=100-")]);
        assert_eq!(r.status, 206);
        assert_eq!(r.body, &data[100..]);

        // If-Range mismatch -> whole body; match -> range.
        let r = get(
            &srv,
            "/r",
            &[("Range", "bytes=100-"), ("If-Range", "\"other\"")],
        );
        assert_eq!((r.status, r.body.len()), (200, data.len()));
        let r = get(
            &srv,
            "/r",
            &[("Range", "bytes=100-"), ("If-Range", "\"abc\"")],
        );
        assert_eq!((r.status, r.body.len()), (206, data.len() - 100));
        let r = get(
            &srv,
            "/r",
            &[("Range", "bytes=100-"), ("If-Range", LAST_MODIFIED)],
        );
        assert_eq!(r.status, 206);

        let log = srv.requests_for("/r");
        assert_eq!(log[2].if_range.as_deref(), Some("\"other\""));
        assert_eq!(log[0].faults, vec![Fault::IgnoreRange]);
    }

    #[test]
    fn status_then_success_and_log() {
        let data = pattern(10_000);
        let srv = TestServer::start();
        srv.route(
            "/s",
            Route::bytes(data.clone())
                .with_faults(vec![vec![Fault::Status(503)], vec![Fault::Status(503)]]),
        );
        let r = get(&srv, "/s", &[]);
        assert_eq!(r.status, 503);
        assert!(r.body.starts_with(b"503"));
        let h = read_resp(send(&srv, "HEAD", "/s", &[]), Duration::from_secs(5));
        assert_eq!(h.status, 503); // HEAD counts too
        let r = get(&srv, "/s", &[("Range", "bytes=0-99"), ("X-Test", "yes")]);
        assert_eq!((r.status, r.body.as_slice()), (206, &data[..100]));
        let r = get(&srv, "/nope", &[]);
        assert_eq!(r.status, 404);
        let r = read_resp(send(&srv, "POST", "/s", &[]), Duration::from_secs(5));
        assert_eq!(r.status, 405);
        assert_eq!(srv.request_count("/s"), 3);

        assert!(srv.wait_idle(Duration::from_secs(5)));
        let all = srv.requests();
        let summary: Vec<(&str, &str, u16)> = all
            .iter()
            .map(|l| (l.method.as_str(), l.path.as_str(), l.status))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("GET", "/s", 503),
                ("HEAD", "/s", 503),
                ("GET", "/s", 206),
                ("GET", "/nope", 404),
                ("POST", "/s", 405)
            ]
        );
        let l = &all[2];
        assert_eq!(l.range.as_deref(), Some("bytes=0-99"));
        assert_eq!(l.header("x-test"), Some("yes"));
        assert_eq!(l.body_bytes_sent, 100);
        assert!(l.finished && all.iter().all(|l| l.finished));
        assert_eq!(all[1].body_bytes_sent, 0);
        assert_eq!(srv.requests_for("/s").len(), 4);
    }

    #[test]
    fn cut_after() {
        let data = pattern(200_000);
        let tf = TempFile::new(&data);
        let srv = TestServer::start();
        srv.route(
            "/c",
            Route::file(&tf.0).with_faults(vec![vec![Fault::CutAfter(12_345)]]),
        );
        let r = get(&srv, "/c", &[]);
        assert_eq!(r.status, 200);
        assert_eq!(r.content_length(), 200_000);
        assert_eq!(r.body, &data[..12_345]);
        // A cut inside a range response counts bytes of that response.
        srv.route(
            "/c",
            Route::bytes(data.clone()).with_sticky(vec![Fault::CutAfter(10)]),
        );
        let r = get(&srv, "/c", &[("Range", "bytes=1000-")]);
        assert_eq!((r.status, r.content_length()), (206, 199_000));
        assert_eq!(r.body, &data[1000..1010]);
        assert!(srv.wait_idle(Duration::from_secs(5)));
        let sent: Vec<u64> = srv
            .requests_for("/c")
            .iter()
            .map(|l| l.body_bytes_sent)
            .collect();
        assert_eq!(sent, vec![12_345, 10]);
    }

    #[test]
    fn stall_after_and_prompt_drop() {
        let data = pattern(100_000);
        let srv = TestServer::start();
        srv.route(
            "/st",
            Route::bytes(data.clone()).with_sticky(vec![Fault::StallAfter(1000)]),
        );
        let mut s = send(&srv, "GET", "/st", &[]);
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 8192];
        let kind = loop {
            match s.read(&mut buf) {
                Ok(0) => panic!("unexpected EOF"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => break e.kind(),
            }
        };
        assert!(
            matches!(kind, io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut),
            "{kind:?}"
        );
        let end = find_head_end(&got).unwrap();
        assert_eq!(&got[end..], &data[..1000]);
        let log = srv.requests_for("/st");
        assert_eq!((log[0].body_bytes_sent, log[0].finished), (1000, false));

        let t = Instant::now();
        drop(srv);
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "drop took {:?}",
            t.elapsed()
        );
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert!(!matches!(s.read(&mut buf), Ok(n) if n > 0));
    }

    #[test]
    fn throttle() {
        let data = pattern(60_000);
        let srv = TestServer::start();
        srv.route(
            "/t",
            Route::bytes(data.clone()).with_sticky(vec![Fault::Throttle(200_000)]),
        );
        let t = Instant::now();
        let r = get(&srv, "/t", &[]);
        let el = t.elapsed();
        assert_eq!(r.body, data);
        // 60 kB at 200 kB/s ~ 0.3 s (the first 10 kB chunk goes out at once).
        assert!(
            el >= Duration::from_millis(200) && el < Duration::from_millis(1500),
            "{el:?}"
        );
    }

    #[test]
    fn corrupt_byte() {
        let data = pattern(3 * 1024 * 1024);
        let tf = TempFile::new(&data);
        let srv = TestServer::start();
        let off = 1024 * 1024 + 7;
        srv.route(
            "/x",
            Route::file(&tf.0).with_sticky(vec![Fault::CorruptByte(off)]),
        );
        let diffs = |a: &[u8], b: &[u8]| {
            a.iter()
                .zip(b)
                .enumerate()
                .filter(|(_, (x, y))| x != y)
                .map(|(i, _)| i)
                .collect::<Vec<_>>()
        };

        let r = get(&srv, "/x", &[]);
        assert_eq!(r.body.len(), data.len());
        assert_eq!(diffs(&r.body, &data), vec![off as usize]);
        assert_eq!(r.body[off as usize], data[off as usize] ^ 0xff);

        let r = get(&srv, "/x", &[("Range", "bytes=1048000-1049000")]);
        assert_eq!(r.status, 206);
        assert_eq!(
            diffs(&r.body, &data[1_048_000..=1_049_000]),
            vec![off as usize - 1_048_000]
        );

        let r = get(&srv, "/x", &[("Range", "bytes=2000000-")]);
        assert_eq!(r.body, &data[2_000_000..]);

        // In-memory body too.
        srv.route(
            "/m",
            Route::bytes(data[..100].to_vec()).with_sticky(vec![Fault::CorruptByte(99)]),
        );
        let r = get(&srv, "/m", &[]);
        assert_eq!(diffs(&r.body, &data[..100]), vec![99]);
    }

    #[test]
    fn early_disconnect_is_harmless() {
        let data = pattern(8 * 1024 * 1024);
        let tf = TempFile::new(&data);
        let srv = TestServer::start();
        srv.serve_file("/big", &tf.0);
        srv.route(
            "/slow",
            Route::bytes(data.clone()).with_sticky(vec![Fault::CorruptByte(5)]),
        );
        for p in ["/big", "/slow"] {
            let mut s = send(&srv, "GET", p, &[]);
            let mut buf = [0u8; 1000];
            s.read_exact(&mut buf).unwrap();
            drop(s);
        }
        // Garbage request and an idle connection that just closes.
        let mut s = TcpStream::connect(srv.addr()).unwrap();
        s.write_all(b"nonsense\r\n\r\n").unwrap();
        assert_eq!(read_resp(s, Duration::from_secs(5)).status, 400);
        drop(TcpStream::connect(srv.addr()).unwrap());
        assert!(srv.wait_idle(Duration::from_secs(5)));
        // (How much was accepted before the reset depends on socket buffer sizes.)
        for l in srv.requests().iter().take(2) {
            assert!(
                l.finished && l.status == 200 && l.body_bytes_sent <= data.len() as u64,
                "{l:?}"
            );
        }
        let r = get(&srv, "/big", &[]);
        assert_eq!(r.body.len(), data.len());
    }
}
