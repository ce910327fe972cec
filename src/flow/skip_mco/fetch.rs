//! Fetching the config a pointer Ignition config points to (Go `getMCSIgnition`): a `data:` URL
//! is decoded (gunzipped when it is gzip), anything else is one GET from the
//! machine-config-server, `https` trusting the pointer config's CA only.
//!
//! As in Go: no proxy (the MCS is the cluster's own `api-int`, which a proxy cannot reach or
//! must not see), the status code is not checked (the body must parse as a config), the
//! pointer's HTTP headers are not sent. Unlike Go, a request has a time limit (a stalled server
//! cannot outlast the fetch budget). No User-Agent: the bootstrap reads `User-Agent:"Ignition…`
//! in the MCS log as "this host fetched its Ignition config".

use anyhow::{anyhow, bail, Context, Result};
use std::time::Duration;

use super::machine_config::{display_source, encapsulated_mc, EncapsulatedMc, PointerConfig};
use crate::ignition::data_url;

/// What the MCS needs to serve a spec 3 config with the encapsulated MachineConfig.
const IGNITION_ACCEPT: &str = "application/vnd.coreos.ignition+json; version=3.4.0";

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The whole request; the MCS answers a few MiB at most.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Fetches the encapsulated MachineConfig behind one pointer config, as often as needed.
pub(crate) struct McsFetcher {
    source: String,
    /// `None` for a `data:` source.
    client: Option<reqwest::blocking::Client>,
}

impl McsFetcher {
    /// Checks what trying again cannot fix: the scheme, the CA `https` needs, the client.
    pub(crate) fn new(pointer: &PointerConfig) -> Result<McsFetcher> {
        let source = pointer.source.clone();
        if data_url::is_data_url(&source) {
            return Ok(McsFetcher {
                source,
                client: None,
            });
        }
        let shown = display_source(&source);
        let url = reqwest::Url::parse(&source)
            .map_err(|e| anyhow!("the pointer Ignition config's source {shown}: {e}"))?;
        let builder = reqwest::blocking::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(REQUEST_TIMEOUT);
        let builder = match (url.scheme(), &pointer.ca_pem) {
            ("http", _) => builder,
            ("https", None) => bail!(
                "{shown} is https but the pointer Ignition config gives no CA certificate to trust"
            ),
            ("https", Some(pem)) => {
                let certs = reqwest::Certificate::from_pem_bundle(pem.as_bytes())
                    .context("parsing the CA of the pointer Ignition config")?;
                if certs.is_empty() {
                    bail!("the CA of the pointer Ignition config holds no PEM certificate");
                }
                // Only the cluster's CA, not the system's roots (Go's RootCAs pool).
                builder
                    .tls_certs_only(certs)
                    .tls_version_min(reqwest::tls::Version::TLS_1_2)
            }
            (other, _) => bail!("{shown}: unsupported scheme {other:?} (http, https or data)"),
        };
        let client = builder
            .build()
            .context("building the HTTP client for the machine-config-server")?;
        Ok(McsFetcher {
            source,
            client: Some(client),
        })
    }

    /// The source, fit for a log line.
    pub(crate) fn shown(&self) -> String {
        display_source(&self.source)
    }

    /// One try: the served config's bytes, then the MachineConfig in them.
    pub(crate) fn fetch(&self) -> Result<EncapsulatedMc> {
        let served = match &self.client {
            None => embedded_config(&self.source)?,
            Some(client) => self.get(client)?,
        };
        encapsulated_mc(&served)
    }

    fn get(&self, client: &reqwest::blocking::Client) -> Result<Vec<u8>> {
        let shown = self.shown();
        tracing::info!("getting the Ignition config from {shown}");
        // reqwest's errors quote the URL, credentials and all: without it, ours names it. Its
        // causes say what went wrong (refused, TLS).
        let response = client
            .get(&self.source)
            .header(reqwest::header::ACCEPT, IGNITION_ACCEPT)
            .send()
            .map_err(|e| anyhow::Error::new(e.without_url()))
            .with_context(|| format!("failed to get the Ignition config from {shown}"))?;
        let status = response.status();
        let body = response
            .bytes()
            .map_err(|e| anyhow::Error::new(e.without_url()))
            .with_context(|| format!("reading the Ignition config from {shown}"))?;
        tracing::debug!("{shown} answered {status} with {} bytes", body.len());
        Ok(body.to_vec())
    }
}

/// A `data:` source's config: decoded, and gunzipped when it starts with the gzip magic (Go
/// always gunzips; an uncompressed one is taken as it is rather than refused).
fn embedded_config(source: &str) -> Result<Vec<u8>> {
    let data = data_url::decode(source).context("decoding the embedded Ignition config")?;
    if data.starts_with(&[0x1f, 0x8b]) {
        return data_url::decompress(data, Some("gzip"))
            .context("decompressing the embedded Ignition config");
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ignition::data_url::tests::{encode_base64, gzip};
    use std::io::{Read, Write};
    use std::net::TcpListener;

    fn mc_config() -> Vec<u8> {
        let mc = br#"{"spec":{"osImageURL":"quay.io/ocp@sha256:1","kernelArguments":["a=1"]}}"#;
        serde_json::to_vec(&serde_json::json!({"storage": {"files": [{
            "path": "/etc/ignition-machine-config-encapsulated.json",
            "contents": {"source": format!("data:;base64,{}", encode_base64(mc))}
        }]}}))
        .unwrap()
    }

    fn pointer(source: &str, ca: Option<&str>) -> PointerConfig {
        PointerConfig {
            source: source.into(),
            ca_pem: ca.map(String::from),
        }
    }

    /// What a fetcher for `source` (no CA) gets.
    fn fetch(source: &str) -> Result<EncapsulatedMc> {
        McsFetcher::new(&pointer(source, None)).unwrap().fetch()
    }

    #[test]
    fn data_urls_plain_gzipped_and_broken() {
        let plain = format!("data:;base64,{}", encode_base64(&mc_config()));
        let f = McsFetcher::new(&pointer(&plain, None)).unwrap();
        assert_eq!(f.fetch().unwrap().os_image_url, "quay.io/ocp@sha256:1");
        assert_eq!(
            f.shown(),
            format!("an embedded data: URL ({} bytes)", plain.len())
        );
        let mut gzipped = gzip(&mc_config());
        let mc = fetch(&format!("data:;base64,{}", encode_base64(&gzipped))).unwrap();
        assert_eq!(mc.os_image_url, "quay.io/ocp@sha256:1");
        assert_eq!(mc.kernel_arguments, vec!["a=1"]);
        gzipped.truncate(gzipped.len() / 2);
        let e = fetch(&format!("data:;base64,{}", encode_base64(&gzipped))).unwrap_err();
        assert!(format!("{e:#}").contains("decompressing"), "{e:#}");
    }

    #[test]
    fn https_needs_a_ca_and_other_schemes_are_refused() {
        let e = McsFetcher::new(&pointer("https://api-int.x:22623/config/master", None))
            .err()
            .unwrap();
        assert!(e.to_string().contains("gives no CA certificate"), "{e}");
        let e = McsFetcher::new(&pointer("https://x/c", Some("not pem")))
            .err()
            .unwrap();
        assert!(format!("{e:#}").contains("no PEM certificate"), "{e:#}");
        let e = McsFetcher::new(&pointer("tftp://x/c", None)).err().unwrap();
        assert!(e.to_string().contains("unsupported scheme \"tftp\""), "{e}");
        // http needs no CA, and one given is not in the way.
        McsFetcher::new(&pointer("http://x/c", None)).unwrap();
        McsFetcher::new(&pointer("http://x/c", Some("whatever"))).unwrap();
    }

    /// Go reads whatever comes back: an error page fails as "not JSON", a config is used.
    #[test]
    fn the_status_is_not_checked_but_the_body_must_be_a_config() {
        let cases = [
            ("500 Internal Server Error", mc_config(), true),
            ("503 Service Unavailable", b"not ready".to_vec(), false),
            ("200 OK", Vec::new(), false),
        ];
        for (status, body, used) in cases {
            // A one-shot server: the request head read, then the answer.
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let url = format!("http://{}/config/worker", listener.local_addr().unwrap());
            let server = std::thread::spawn(move || {
                let (mut stream, _) = listener.accept().unwrap();
                let (mut buf, mut got) = ([0u8; 4096], Vec::new());
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let length = body.len();
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n"
                );
                stream
                    .write_all(&[head.as_bytes(), &body].concat())
                    .unwrap();
            });
            let got = fetch(&url);
            server.join().unwrap();
            match got {
                Ok(mc) => assert!(
                    used && mc.os_image_url == "quay.io/ocp@sha256:1",
                    "{status}"
                ),
                Err(e) => assert!(!used && format!("{e:#}").contains("not JSON"), "{e:#}"),
            }
        }
    }

    #[test]
    fn an_unreachable_server_fails_without_quoting_credentials() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let url = format!("http://core:pa55w0rd@127.0.0.1:{port}/config/master?token=t0k3n");
        let e = fetch(&url).unwrap_err();
        let text = format!("{e:#} {e:?}");
        assert!(
            text.contains(&format!(
                "failed to get the Ignition config from http://127.0.0.1:{port}/config/master"
            )),
            "{text}"
        );
        assert!(
            !text.contains("pa55w0rd") && !text.contains("t0k3n"),
            "{text}"
        );
    }
}
