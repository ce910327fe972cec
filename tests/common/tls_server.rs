#![allow(dead_code)]
//! An HTTPS server with a CA of its own, made at test time: `openssl` makes the CA and a
//! certificate for 127.0.0.1 signed by it, and a few lines of python3 (`http.server` wrapped
//! in `ssl`) serve one body on every path, TLS 1.2 or later, logging each request's path and
//! headers. It stands in for the machine-config-server behind `api-int:22623`. Requests whose
//! TLS handshake fails never reach the log.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A CA and a server certificate for 127.0.0.1 signed by it (EC P-256 keys).
pub(crate) struct Pki {
    pub ca_pem: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    /// Files under `dir`, named after `name` (several may share a directory).
    pub(crate) fn new(dir: &Path, name: &str) -> Pki {
        let ca_key = format!("{name}-ca.key");
        let ca_crt = format!("{name}-ca.crt");
        let key = format!("{name}.key");
        let csr = format!("{name}.csr");
        let crt = format!("{name}.crt");
        let ext = format!("{name}.ext");
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let mut args = vec!["req", "-x509"];
        args.extend(ec);
        args.extend([
            "-keyout",
            &ca_key,
            "-out",
            &ca_crt,
            "-days",
            "2",
            "-subj",
            "/CN=test machine-config-server CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ]);
        openssl(dir, &args);
        let mut args = vec!["req"];
        args.extend(ec);
        args.extend(["-keyout", &key, "-out", &csr, "-subj", "/CN=api-int.test"]);
        openssl(dir, &args);
        std::fs::write(
            dir.join(&ext),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
        )
        .unwrap();
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_crt,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &crt,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
        Pki {
            ca_pem: std::fs::read_to_string(dir.join(&ca_crt)).unwrap(),
            cert: dir.join(crt),
            key: dir.join(key),
        }
    }
}

const SERVER: &str = r#"
import http.server, json, ssl, sys
cert, key, body_path, log_path = sys.argv[1:5]
body = open(body_path, 'rb').read()

class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def do_GET(self):
        with open(log_path, 'a') as log:
            log.write(json.dumps({'path': self.path, 'headers': dict(self.headers.items())}) + '\n')
        self.send_response(200)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.send_header('Connection', 'close')
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.minimum_version = ssl.TLSVersion.TLSv1_2
context.load_cert_chain(cert, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// The python3 HTTPS server; killed on drop.
pub(crate) struct TlsServer {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

/// One request as the server logged it.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct Logged {
    pub path: String,
    pub headers: std::collections::HashMap<String, String>,
}

impl Logged {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

impl TlsServer {
    /// Serves `body` on every path with `pki`'s certificate; its files go under `dir`.
    pub(crate) fn start(dir: &Path, pki: &Pki, body: &[u8]) -> TlsServer {
        let body_path = dir.join("tls-server-body");
        std::fs::write(&body_path, body).unwrap();
        let log = dir.join("tls-server.log");
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(SERVER)
            .arg(&pki.cert)
            .arg(&pki.key)
            .arg(&body_path)
            .arg(&log)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("the TLS server did not start: {line:?}"));
        TlsServer { child, port, log }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("https://127.0.0.1:{}{path}", self.port)
    }

    /// The requests served so far.
    pub(crate) fn requests(&self) -> Vec<Logged> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
