//! HTTPS with a CA of its own, made at test time: `openssl` makes the CA and a certificate for
//! 127.0.0.1 signed by it, for `TestServer::with_app_tls` (the machine-config-server behind
//! `api-int:22623`, the Kubernetes API). Requests whose TLS handshake fails never reach the log.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA and a server certificate for 127.0.0.1 signed by it (EC P-256 keys).
pub(crate) struct Pki {
    pub ca_pem: String,
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// `$1` is the files' name; they are made in the current directory.
const MAKE_PKI: &str = r#"set -e
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
openssl req -x509 $ec -keyout "$1-ca.key" -out "$1-ca.crt" -days 2 \
  -subj "/CN=test machine-config-server CA" \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
openssl req $ec -keyout "$1.key" -out "$1.csr" -subj /CN=api-int.test
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n' >"$1.ext"
openssl x509 -req -in "$1.csr" -CA "$1-ca.crt" -CAkey "$1-ca.key" -CAcreateserial \
  -out "$1.crt" -days 2 -extfile "$1.ext"
"#;

impl Pki {
    /// Files under `dir`, named after `name` (several may share a directory).
    pub(crate) fn new(dir: &Path, name: &str) -> Pki {
        let out = Command::new("sh")
            .args(["-c", MAKE_PKI, "make-pki", name])
            .current_dir(dir)
            .output()
            .expect("running openssl");
        assert!(
            out.status.success(),
            "openssl: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Pki {
            ca_pem: std::fs::read_to_string(dir.join(format!("{name}-ca.crt"))).unwrap(),
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        }
    }
}
