//! The assisted-service REST client used on the host (the Go `inventory_client`).
//!
//! * Base URL: `--url` + `/api/assisted-install`.
//! * Every request carries `X-Secret-Key: <PULL_SECRET_TOKEN>` and a fresh `X-Request-ID` (one
//!   UUID per call, shared by the retries of that call, as the Go client does). An empty token
//!   is not sent (no `X-Secret-Key`): a service without authentication wants none; one that
//!   requires it answers 401, and that error says the token was empty.
//! * Connect timeout 30 s, no overall request timeout (the Go client sets none); proxies come
//!   from the environment.
//! * Retries follow the Go client (`rehttp`): see [`ClientRetry`].
//! * The token never appears in a log line, an error or a `Debug` output.

use std::fmt;
use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::blocking::{Client, Response};
use reqwest::header::{HeaderValue, ACCEPT, CONTENT_TYPE};
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use tracing::{debug, warn};
use uuid::Uuid;

pub use super::inventory::{InventoryClient, LogsType, LogsUpload};
pub use super::retry::ClientRetry;
use crate::clock::{Clock, Failure, NeverStop, Retrying, Stopped, SystemClock, WaitError};

/// Appended to `--url` (swagger `basePath`).
pub const API_BASE_PATH: &str = "/api/assisted-install";
/// The service stores `progress_info` in a varchar(2048); longer text is cut to this many chars.
pub const MAX_PROGRESS_INFO_CHARS: usize = 2048;

const REASON_EXCERPT_CHARS: usize = 200;
const REDACTED: &str = "<SECRET>";

/// How to reach the service.
#[derive(Clone, Default)]
pub struct ClientConfig {
    /// `--url`, e.g. `http://10.1.178.26:6000`; `/api/assisted-install` is appended.
    pub url: String,
    /// `PULL_SECRET_TOKEN`, sent as `X-Secret-Key`. Never logged.
    pub token: String,
    /// `--insecure`: do not verify the service certificate.
    pub insecure: bool,
    /// `--cacert`: a PEM bundle trusted in addition to the platform roots.
    pub cacert: Option<PathBuf>,
    pub retry: ClientRetry,
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("url", &self.url)
            .field("token", &token_placeholder(&self.token))
            .field("insecure", &self.insecure)
            .field("cacert", &self.cacert)
            .field("retry", &self.retry)
            .finish()
    }
}

fn token_placeholder(token: &str) -> &'static str {
    if token.is_empty() {
        "<empty>"
    } else {
        REDACTED
    }
}

/// A call that failed: the service answered with a non-2xx status after the retries, or no
/// answer came at all (`status` is `None`). Callers can branch on `status` via
/// `anyhow::Error::downcast_ref::<ServiceError>()`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ServiceError {
    /// The API operation, e.g. `UpdateHostInstallProgress`.
    pub call: &'static str,
    pub method: String,
    /// Path below `/api/assisted-install`, with the query string.
    pub path: String,
    pub status: Option<u16>,
    /// The service's `reason` (or `message`), else a short excerpt of the body, else the
    /// transport error.
    pub reason: String,
    /// How many requests were made.
    pub attempts: u32,
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} {})", self.call, self.method, self.path)?;
        match self.status {
            Some(code) => {
                write!(f, ": {code}")?;
                if let Some(text) = StatusCode::from_u16(code)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                {
                    write!(f, " {text}")?;
                }
            }
            None => f.write_str(": request failed")?,
        }
        if !self.reason.is_empty() {
            write!(f, ": {}", self.reason)?;
        }
        if self.attempts > 1 {
            write!(f, " (gave up after {} attempts)", self.attempts)?;
        }
        Ok(())
    }
}

/// The assisted-service client over `reqwest::blocking`. Do not create or drop it inside an
/// async runtime (reqwest's blocking client runs its own).
pub struct ServiceClient {
    http: Client,
    base: String,
    token: HeaderValue,
    token_text: String,
    retry: ClientRetry,
    /// Waits between retries; the real clock unless a test gives another.
    clock: Arc<dyn Clock>,
    /// Which token was empty, and where it comes from: the error of a 401 to a call sent
    /// without a token ends with it.
    token_source: &'static str,
}

/// The installer's empty token, as a 401's error names it.
pub const INSTALLER_TOKEN_SOURCE: &str =
    "PULL_SECRET_TOKEN is empty or unset (the agent passes the host's token to the installer in it)";

impl fmt::Debug for ServiceClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceClient")
            .field("base", &self.base)
            .field("token", &token_placeholder(&self.token_text))
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// One API operation to perform.
struct Call {
    name: &'static str,
    method: Method,
    /// Below the base path, already percent-encoded, with the query.
    path: String,
    body: Option<Vec<u8>>,
    /// A multipart file upload `(file name, bytes)`, rebuilt for every attempt.
    file: Option<(String, Vec<u8>)>,
}

impl Call {
    fn new(name: &'static str, method: Method, path: String) -> Call {
        Call {
            name,
            method,
            path,
            body: None,
            file: None,
        }
    }
}

/// Why one attempt of a call failed.
#[derive(Debug)]
enum Failed {
    /// The service answered with this status, or no answer came (`None`): becomes a
    /// [`ServiceError`].
    Answer { status: Option<u16>, reason: String },
    /// A local failure (bad JSON, a file that cannot be written): reported as is.
    Local(anyhow::Error),
}

/// No answer (a body cut short, a reset): worth another attempt.
fn no_answer(reason: String) -> Failure<Failed> {
    Failure::Retry(Failed::Answer {
        status: None,
        reason,
    })
}

/// A local failure (bad JSON, a file error): give up at once.
fn local(e: anyhow::Error) -> Failure<Failed> {
    Failure::Fatal(Failed::Local(e))
}

impl ServiceClient {
    pub fn new(config: ClientConfig) -> Result<ServiceClient> {
        let base = format!("{}{}", config.url.trim_end_matches('/'), API_BASE_PATH);
        let parsed = reqwest::Url::parse(&base)
            .with_context(|| format!("invalid assisted-service URL {:?}", config.url))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            anyhow::bail!(
                "invalid assisted-service URL {:?}: the scheme must be http or https",
                config.url
            );
        }
        let mut token = HeaderValue::from_str(&config.token).map_err(|_| {
            anyhow!("PULL_SECRET_TOKEN contains characters that cannot be sent in an HTTP header")
        })?;
        token.set_sensitive(true);

        let mut builder = Client::builder()
            .connect_timeout(Duration::from_secs(30))
            // No overall deadline: the Go client sets none, and downloads may be slow.
            .timeout(None)
            .tcp_keepalive(Duration::from_secs(30))
            .pool_idle_timeout(Duration::from_secs(90))
            .user_agent(concat!("assisted-installer/", env!("CARGO_PKG_VERSION")));
        if is_loopback(&parsed) {
            // Like Go's ProxyFromEnvironment, never send loopback traffic through a proxy.
            builder = builder.no_proxy();
        }
        if config.insecure {
            warn!(url = %config.url, "TLS certificate verification of the assisted-service is disabled (--insecure)");
            builder = builder.tls_danger_accept_invalid_certs(true);
        }
        if let Some(path) = &config.cacert {
            let pem = fs::read(path)
                .with_context(|| format!("reading the CA certificate file {}", path.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .with_context(|| format!("parsing the CA certificate file {}", path.display()))?;
            if certs.is_empty() {
                anyhow::bail!(
                    "the CA certificate file {} holds no PEM certificate",
                    path.display()
                );
            }
            debug!(cacert = %path.display(), count = certs.len(), "trusting extra CA certificates");
            builder = builder.tls_certs_merge(certs);
        }
        let http = builder
            .build()
            .context("building the assisted-service HTTP client")?;
        Ok(ServiceClient {
            http,
            base,
            token,
            token_text: config.token,
            retry: config.retry,
            clock: Arc::new(SystemClock),
            token_source: INSTALLER_TOKEN_SOURCE,
        })
    }

    /// Says which token was empty and where it comes from, in the error of a 401 to a call
    /// sent without one (default: [`INSTALLER_TOKEN_SOURCE`]).
    pub fn with_token_source(mut self, source: &'static str) -> Self {
        self.token_source = source;
        self
    }

    /// The reason of a failed call as the error shows it: the token redacted, and for a 401
    /// to a call sent without a token, what was wrong and what to do.
    fn reason(&self, status: Option<u16>, reason: &str) -> String {
        let reason = self.redact(reason);
        if status != Some(401) || !self.token_text.is_empty() {
            return reason;
        }
        let hint = format!(
            "no token was sent, and this assisted-service requires one: {}",
            self.token_source
        );
        if reason.is_empty() {
            hint
        } else {
            format!("{reason}; {hint}")
        }
    }

    /// Waits between retries on `clock` (tests drive the policy with a fake one).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Replaces the token in text that may echo it (a server body, an error chain).
    fn redact(&self, text: &str) -> String {
        if self.token_text.is_empty() {
            text.to_string()
        } else {
            text.replace(&self.token_text, REDACTED)
        }
    }

    /// Sends `call` with the retry policy; `on_success` consumes a 2xx response.
    fn execute<T>(
        &self,
        call: &Call,
        mut on_success: impl FnMut(Response) -> Result<T, Failure<Failed>>,
    ) -> Result<T> {
        let url = format!("{}{}", self.base, call.path);
        let request_id = Uuid::new_v4().to_string();
        let schedule = self.retry.schedule();
        let attempt = |attempt: u32| -> Result<T, Failure<Failed>> {
            debug!(call = call.name, method = %call.method, path = %call.path, request_id = %request_id, attempt, "sending request");
            let mut request = self
                .http
                .request(call.method.clone(), &url)
                .header("X-Request-ID", request_id.as_str());
            if !self.token_text.is_empty() {
                // Agent authentication (swagger `agentAuth`).
                request = request.header("X-Secret-Key", self.token.clone());
            }
            if let Some(body) = &call.body {
                request = request
                    .header(CONTENT_TYPE, "application/json")
                    .header(ACCEPT, "application/json")
                    .body(body.clone());
            }
            if let Some((file_name, bytes)) = &call.file {
                let part = reqwest::blocking::multipart::Part::bytes(bytes.clone())
                    .file_name(file_name.clone())
                    .mime_str("application/octet-stream")
                    .map_err(|e| local(anyhow!("building the upload: {e}")))?;
                request = request
                    .header(ACCEPT, "application/json")
                    .multipart(reqwest::blocking::multipart::Form::new().part("upfile", part));
            }
            match request.send() {
                Ok(response) if response.status().is_success() => {
                    let value = on_success(response)?;
                    debug!(call = call.name, request_id = %request_id, "request succeeded");
                    Ok(value)
                }
                Ok(response) => {
                    let status = Some(response.status().as_u16());
                    let failure = self.retry.classify(response.status().as_u16(), ());
                    if schedule.permits(&failure, attempt + 1) {
                        // Not read when retried, as in Go.
                        let reason = String::new();
                        return Err(self.retry.classify(
                            response.status().as_u16(),
                            Failed::Answer { status, reason },
                        ));
                    }
                    let reason = reason_from_body(response);
                    Err(Failure::Fatal(Failed::Answer { status, reason }))
                }
                Err(e) if is_transient(&e) => Err(no_answer(error_chain(&e))),
                Err(e) => Err(Failure::Fatal(Failed::Answer {
                    status: None,
                    reason: error_chain(&e),
                })),
            }
        };
        // Every failure up to the third, then every 30th, as a warning.
        let on_retry = |failed: &Failed, next: &Retrying| {
            let (status, msg) = match failed {
                Failed::Answer { status, reason } => (*status, self.redact(reason)),
                Failed::Local(e) => (None, self.redact(&format!("{e:#}"))),
            };
            let attempt = next.failures;
            if attempt <= 3 || (attempt - 1).is_multiple_of(30) {
                warn!(call = call.name, method = %call.method, path = %call.path, status = ?status, error = %msg, attempt, delay_ms = next.delay.as_millis() as u64, "assisted-service request failed, retrying");
            } else {
                debug!(call = call.name, status = ?status, error = %msg, attempt, "assisted-service request failed, retrying");
            }
        };
        let what = || format!("{} ({} {})", call.name, call.method, call.path);
        match self.clock.retry(&NeverStop, &schedule, attempt, on_retry) {
            Ok(value) => Ok(value),
            Err(WaitError::Stopped { .. }) => Err(anyhow!(Stopped).context(what())),
            Err(e) => {
                let attempts = e.failures();
                match e.into_last() {
                    Some(Failed::Answer { status, reason }) => Err(ServiceError {
                        call: call.name,
                        method: call.method.to_string(),
                        path: call.path.clone(),
                        status,
                        reason: self.reason(status, &reason),
                        attempts,
                    }
                    .into()),
                    Some(Failed::Local(e)) => {
                        Err(anyhow!(self.redact(&format!("{:#}", e.context(what())))))
                    }
                    None => unreachable!("only a stop ends a call before its first attempt"),
                }
            }
        }
    }

    /// Sends `body` as JSON; any 2xx answer is success and its body is not read.
    pub(crate) fn send_json<B: serde::Serialize>(
        &self,
        name: &'static str,
        method: Method,
        path: String,
        body: &B,
    ) -> Result<()> {
        let body = serde_json::to_vec(body).with_context(|| format!("encoding the {name} body"))?;
        let call = Call {
            body: Some(body),
            ..Call::new(name, method, path)
        };
        self.execute(&call, |_| Ok(()))
    }

    /// GETs `path` and decodes the JSON answer.
    pub(crate) fn get_json<T: DeserializeOwned>(
        &self,
        name: &'static str,
        path: String,
    ) -> Result<T> {
        self.execute(&Call::new(name, Method::GET, path), |response| {
            let bytes = response.bytes().map_err(|e| no_answer(error_chain(&e)))?;
            decode_body(&bytes).map_err(local)
        })
    }

    /// POSTs `data` as the multipart field `upfile` (swagger's), named `file_name`.
    pub(crate) fn upload(
        &self,
        name: &'static str,
        path: String,
        file_name: &str,
        data: &[u8],
    ) -> Result<()> {
        let call = Call {
            file: Some((file_name.to_string(), data.to_vec())),
            ..Call::new(name, Method::POST, path)
        };
        self.execute(&call, |_| Ok(()))
    }

    /// Streams a GET answer into `dest` through a temporary file in the same directory, fsyncs
    /// it and renames it into place. A body cut short is retried like a failed connection.
    pub(crate) fn download(&self, name: &'static str, path: String, dest: &Path) -> Result<()> {
        let call = Call::new(name, Method::GET, path);
        let bytes = self.execute(&call, |response| stream_to_file(response, dest))?;
        debug!(call = name, dest = %dest.display(), bytes, "download complete");
        Ok(())
    }
}

/// A response body as `T`. serde_json's message names the line and column (and the field, when
/// one is missing or of the wrong type) and never the body, which may hold secrets.
pub(crate) fn decode_body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| anyhow!("decoding the response body: {e}"))
}

/// `localhost` or a loopback address.
fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Percent-encodes everything but RFC 3986 unreserved characters (ids are UUIDs, so this is
/// normally the identity).
pub(crate) fn encode(text: &str) -> String {
    const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    utf8_percent_encode(text, UNRESERVED).to_string()
}

/// The reason the service gave: `reason` (swagger `error`), else `message` (`infra_error`), else
/// a short excerpt of the body.
fn reason_from_body(response: Response) -> String {
    let mut body = Vec::new();
    // The reason is short; do not read an unbounded body.
    if let Err(e) = response.take(64 * 1024).read_to_end(&mut body) {
        return format!("(reading the error body failed: {e})");
    }
    reason_from_bytes(&body)
}

pub(crate) fn reason_from_bytes(body: &[u8]) -> String {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        for key in ["reason", "message"] {
            if let Some(text) = value.get(key).and_then(|v| v.as_str()) {
                if !text.is_empty() {
                    return text.to_string();
                }
            }
        }
    }
    let text = String::from_utf8_lossy(body);
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.chars().count() > REASON_EXCERPT_CHARS {
        let cut: String = collapsed.chars().take(REASON_EXCERPT_CHARS).collect();
        format!("{cut}…")
    } else {
        collapsed
    }
}

/// `e` and its sources, joined with ": ".
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text
}

/// Whether a request error is worth retrying: connection refused or reset, timeouts, a response
/// cut short. Not: bad requests, redirect loops, TLS certificate failures.
fn is_transient(e: &reqwest::Error) -> bool {
    if e.is_builder() || e.is_redirect() || e.is_decode() {
        return false;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            // rustls reports certificate and handshake failures as InvalidData.
            if io.kind() == std::io::ErrorKind::InvalidData {
                return false;
            }
        }
        if s.to_string().contains("certificate") {
            return false;
        }
        source = s.source();
    }
    true
}

/// Streams `response` into a private (0600: Ignition files carry the pull secret) temporary
/// file beside `dest`, fsyncs it and renames it over `dest`. The temporary file is removed on
/// any failure.
fn stream_to_file(mut response: Response, dest: &Path) -> Result<u64, Failure<Failed>> {
    let fatal = local;
    let file_name = dest.file_name().ok_or_else(|| {
        fatal(anyhow!(
            "download destination {} has no file name",
            dest.display()
        ))
    })?;
    let dir = match dest.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(file_name);
    prefix.push(".");
    let mut tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(".part")
        .permissions(fs::Permissions::from_mode(0o600))
        .tempfile_in(&dir)
        .map_err(|e| {
            fatal(anyhow!(e).context(format!("creating a temporary file in {}", dir.display())))
        })?;
    let tmp_name = tmp.path().display().to_string();

    let mut buf = vec![0u8; 64 * 1024];
    let mut total: u64 = 0;
    loop {
        let n = match response.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(no_answer(format!(
                    "reading the body failed after {total} bytes: {}",
                    error_chain(&e)
                )))
            }
        };
        tmp.write_all(&buf[..n])
            .map_err(|e| fatal(anyhow!(e).context(format!("writing {tmp_name}"))))?;
        total += n as u64;
    }
    tmp.as_file()
        .sync_all()
        .map_err(|e| fatal(anyhow!(e).context(format!("syncing {tmp_name}"))))?;
    tmp.persist(dest).map_err(|e| {
        fatal(anyhow!(e.error).context(format!("renaming {tmp_name} to {}", dest.display())))
    })?;
    // Make the rename durable; not all filesystems allow syncing a directory, so best effort.
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_on_the_given_clock() {
        let clock = Arc::new(crate::clock::FakeClock::new());
        // A port on 127.0.0.1 with nothing listening: every attempt fails at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = ServiceClient::new(ClientConfig {
            url: format!("http://127.0.0.1:{port}"),
            token: "tok".into(),
            retry: ClientRetry::dry_run(),
            ..Default::default()
        })
        .unwrap()
        .with_clock(clock.clone());
        let err = client.get_cluster("c", true).unwrap_err();
        let se = err.downcast_ref::<ServiceError>().unwrap();
        assert_eq!((se.status, se.attempts), (None, 4));
        let text = err.to_string();
        let want = "GetCluster (GET /v2/clusters/c?exclude-hosts=true): request failed: ";
        assert!(text.starts_with(want), "{text}");
        assert!(text.contains("(gave up after 4 attempts)"), "{text}");
        let sleeps = clock.sleeps();
        assert_eq!(sleeps.len(), 3);
        for (attempt, d) in (0..).zip(&sleeps) {
            assert!(
                *d < ClientRetry::dry_run().delay_bound(attempt),
                "{sleeps:?}"
            );
        }
    }

    #[test]
    fn config_debug_hides_token() {
        let config = ClientConfig {
            url: "https://svc:8090".into(),
            token: "eyJhbGciOiJFUzI1NiJ9.super-secret".into(),
            ..Default::default()
        };
        let text = format!("{config:?} {config:#?}");
        assert!(!text.contains("super-secret"), "{text}");
        assert!(text.contains("<SECRET>"));
        let client = ServiceClient::new(config.clone()).unwrap();
        let text = format!("{client:?}");
        assert!(!text.contains("super-secret"), "{text}");
        assert_eq!(client.base, "https://svc:8090/api/assisted-install");
        let empty = ClientConfig::default();
        assert!(format!("{empty:?}").contains("<empty>"));
    }

    #[test]
    fn base_url_and_bad_inputs() {
        let mk = |url: &str| {
            ServiceClient::new(ClientConfig {
                url: url.into(),
                ..Default::default()
            })
        };
        assert_eq!(
            mk("http://10.1.178.26:6000/").unwrap().base,
            "http://10.1.178.26:6000/api/assisted-install"
        );
        assert!(mk("not a url").is_err());
        assert!(mk("ftp://host").is_err());
        let bad_token = ServiceClient::new(ClientConfig {
            url: "http://h".into(),
            token: "abc\ndef-secret".into(),
            ..Default::default()
        })
        .unwrap_err();
        assert!(!format!("{bad_token:#}").contains("def-secret"));
    }

    #[test]
    fn loopback_detection() {
        let yes = [
            "http://127.0.0.1:6000",
            "http://localhost",
            "http://[::1]:8090",
            "http://127.1.2.3",
        ];
        let no = [
            "http://10.1.178.26:6000",
            "https://api.openshift.com",
            "http://[fe80::1]",
        ];
        for u in yes {
            assert!(is_loopback(&reqwest::Url::parse(u).unwrap()), "{u}");
        }
        for u in no {
            assert!(!is_loopback(&reqwest::Url::parse(u).unwrap()), "{u}");
        }
    }

    #[test]
    fn bad_ca_files_fail_construction() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let mk = |path: PathBuf| {
            ServiceClient::new(ClientConfig {
                url: "https://svc".into(),
                cacert: Some(path),
                ..Default::default()
            })
        };
        let missing = mk(dir.join("missing.pem")).unwrap_err();
        assert!(
            format!("{missing:#}").contains("missing.pem"),
            "{missing:#}"
        );
        let garbage = dir.join("garbage.pem");
        fs::write(&garbage, "not a certificate\n").unwrap();
        let err = mk(garbage).unwrap_err();
        assert!(format!("{err:#}").contains("garbage.pem"), "{err:#}");
        let broken = dir.join("broken.pem");
        fs::write(
            &broken,
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        assert!(mk(broken).is_err());
    }

    #[test]
    fn encoding_and_reasons() {
        assert_eq!(
            encode("8d5b5f4e-0000-4000-8000-000000000001"),
            "8d5b5f4e-0000-4000-8000-000000000001"
        );
        assert_eq!(encode("bootstrap.ign"), "bootstrap.ign");
        assert_eq!(encode("a b/c?d"), "a%20b%2Fc%3Fd");
        // A JSON `reason` or `message`: the conflict and unauthorized tests in
        // tests/service_client.rs.
        assert_eq!(
            reason_from_bytes(b"<html>\n  bad   gateway\n</html>"),
            "<html> bad gateway </html>"
        );
        let long = "x".repeat(1000);
        let r = reason_from_bytes(long.as_bytes());
        assert_eq!(r.chars().count(), REASON_EXCERPT_CHARS + 1);
    }
}
