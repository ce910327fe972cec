//! The tests' forward HTTP proxy on 127.0.0.1: the only way to reach the made-up host names it
//! is given (`images.example.invalid` → a [`TestServer`](super::http_server::TestServer)'s
//! address), as a proxy is the only way off a disconnected network. It forwards plain-http
//! requests (absolute-form, rewritten to origin-form) and tunnels `CONNECT`; an IP address is
//! reached directly, an unknown name gets 502. With [`TestProxy::with_credentials`] a request
//! without the right `Proxy-Authorization` gets 407. Every request is logged.

use base64::Engine as _;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// One request the proxy saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ProxiedRequest {
    pub method: String,
    /// The request target: `http://host:port/path` or, for `CONNECT`, `host:port`.
    pub target: String,
    /// The `Proxy-Authorization` header, as sent.
    pub authorization: Option<String>,
}

struct Shared {
    hosts: HashMap<String, SocketAddr>,
    /// `Basic …` the requests must carry, when set.
    credentials: Mutex<Option<String>>,
    log: Mutex<Vec<ProxiedRequest>>,
}

/// The proxy; it stops accepting when dropped (connections in flight finish).
pub(crate) struct TestProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stopped: Arc<AtomicBool>,
}

impl TestProxy {
    /// A proxy resolving each `(name, address)` of `hosts` (names compare case-insensitively).
    pub(crate) fn start(hosts: &[(&str, SocketAddr)]) -> TestProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("test proxy: bind");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            hosts: hosts
                .iter()
                .map(|(n, a)| (n.to_ascii_lowercase(), *a))
                .collect(),
            credentials: Mutex::default(),
            log: Mutex::default(),
        });
        let stopped = Arc::new(AtomicBool::new(false));
        let (serving, stop) = (shared.clone(), stopped.clone());
        std::thread::Builder::new()
            .name("test-proxy".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let shared = serving.clone();
                    std::thread::spawn(move || {
                        let _ = serve(&shared, conn);
                    });
                }
            })
            .unwrap();
        TestProxy {
            addr,
            shared,
            stopped,
        }
    }

    /// Requests must carry `Proxy-Authorization: Basic` with `user` and `password`.
    pub(crate) fn with_credentials(self, user: &str, password: &str) -> TestProxy {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        *self.shared.credentials.lock().unwrap() = Some(format!("Basic {token}"));
        self
    }

    /// `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn requests(&self) -> Vec<ProxiedRequest> {
        self.shared.log.lock().unwrap().clone()
    }

    /// The targets requested, in order.
    pub(crate) fn targets(&self) -> Vec<String> {
        self.requests().into_iter().map(|r| r.target).collect()
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        // Wake the accept loop so it sees the proxy is gone.
        self.stopped.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

/// The request head (up to the blank line) and any body bytes read with it.
fn read_head(conn: &mut TcpStream) -> io::Result<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((String::from_utf8_lossy(&buf).into_owned(), rest));
        }
        let n = conn.read(&mut chunk)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn answer(conn: &mut TcpStream, status: &str, why: &str) -> io::Result<()> {
    let extra = match status.starts_with("407") {
        true => "Proxy-Authenticate: Basic realm=\"test\"\r\n",
        false => "",
    };
    write!(
        conn,
        "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{why}",
        why.len()
    )
}

fn serve(shared: &Shared, mut conn: TcpStream) -> io::Result<()> {
    let (head, body) = read_head(&mut conn)?;
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_string();
    let mut parts = request_line.split(' ');
    let (method, target, version) = (
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or_default().to_string(),
        parts.next().unwrap_or("HTTP/1.1").to_string(),
    );
    let headers: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    let header = |name: &str| {
        headers.iter().find_map(|h| {
            let (k, v) = h.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    let authorization = header("Proxy-Authorization");
    shared.log.lock().unwrap().push(ProxiedRequest {
        method: method.clone(),
        target: target.clone(),
        authorization: authorization.clone(),
    });
    let wanted = shared.credentials.lock().unwrap().clone();
    if wanted.is_some() && authorization != wanted {
        return answer(&mut conn, "407 Proxy Authentication Required", "");
    }
    // CONNECT host:port, or GET http://host[:port]/path.
    let (authority, origin_form) = if method == "CONNECT" {
        (target.clone(), None)
    } else {
        let Some(rest) = target.strip_prefix("http://") else {
            return answer(&mut conn, "400 Bad Request", "not a proxy request");
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let path = if path.is_empty() { "/" } else { path };
        (authority.to_string(), Some(path.to_string()))
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if p.parse::<u16>().is_ok() => (h.to_string(), p.parse().unwrap()),
        _ => (authority.clone(), 80),
    };
    let upstream = match shared.hosts.get(&host.to_ascii_lowercase()) {
        Some(addr) => *addr,
        None => match host.parse() {
            Ok(ip) => SocketAddr::new(ip, port),
            Err(_) => {
                return answer(
                    &mut conn,
                    "502 Bad Gateway",
                    &format!("unknown host {host}"),
                );
            }
        },
    };
    let mut up = match TcpStream::connect(upstream) {
        Ok(up) => up,
        Err(e) => return answer(&mut conn, "502 Bad Gateway", &e.to_string()),
    };
    match origin_form {
        None => conn.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")?,
        Some(path) => {
            let mut out = format!("{method} {path} {version}\r\n");
            for h in &headers {
                let name = h.split(':').next().unwrap_or_default().trim();
                if !name.eq_ignore_ascii_case("proxy-authorization")
                    && !name.eq_ignore_ascii_case("proxy-connection")
                {
                    out.push_str(h);
                    out.push_str("\r\n");
                }
            }
            out.push_str("\r\n");
            up.write_all(out.as_bytes())?;
        }
    }
    up.write_all(&body)?;
    // Both ways until the server closes (the test server closes after each answer).
    let (mut from_client, mut to_up) = (conn.try_clone()?, up.try_clone()?);
    let upload = std::thread::spawn(move || {
        let _ = io::copy(&mut from_client, &mut to_up);
        let _ = to_up.shutdown(Shutdown::Write);
    });
    let _ = io::copy(&mut up, &mut conn);
    let _ = conn.shutdown(Shutdown::Both);
    let _ = up.shutdown(Shutdown::Both);
    let _ = upload.join();
    Ok(())
}
