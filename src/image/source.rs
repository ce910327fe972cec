//! Where the compressed image comes from: a local file, or HTTP(S) with retries and resumption.
//! Every download's HTTP client is built here ([`build_client`]): CA certificates, timeouts and
//! the proxy ([`super::proxy`]).
//!
//! The HTTP source retries the request on connection errors, timeouts, 408, 429 and 5xx with
//! exponential backoff. When the connection drops mid-body it asks for the rest with
//! `Range: bytes=N-` (and `If-Range`, so a file that changed on the server is not spliced onto
//! the old one), and fails clearly if the server answers with the whole file instead.

use anyhow::{anyhow, bail, Context, Result};
use reqwest::header::{HeaderMap, CONTENT_RANGE, ETAG, IF_RANGE, LAST_MODIFIED, RANGE};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cancel::Cancel;
use super::proxy::DownloadProxy;
use super::retry::{is_retryable_status, parse_content_range, RetryPolicy};
use crate::clock::{Failure, Retrying, Stopped, Tries, WaitError, SYSTEM_CLOCK};

/// A stream of compressed image bytes.
pub trait ImageSource: Send {
    /// The URL or path, for messages.
    fn describe(&self) -> String;
    /// Length of the whole stream when known up front (Content-Length, file size).
    fn total_len(&self) -> Option<u64>;
    /// Append the next bytes to `buf`; `Ok(0)` only at the end of the stream.
    fn read_more(&mut self, buf: &mut Vec<u8>, cancel: &Cancel) -> Result<usize>;
}

/// `--image-url` or `--image-file`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageLocation {
    Url(String),
    File(PathBuf),
}

#[derive(Clone, Debug)]
pub struct HttpOptions {
    pub retry: RetryPolicy,
    /// Extra CA certificates (PEM) trusted on top of the system roots.
    pub cacert: Option<PathBuf>,
    pub connect_timeout: Duration,
    /// How long the body may stay silent before the connection is treated as dropped.
    pub idle_timeout: Duration,
    /// The proxies; `None`: those of the environment (`HTTP_PROXY`, …) when the download starts.
    pub proxy: Option<DownloadProxy>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            retry: RetryPolicy::default(),
            cacert: None,
            connect_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            proxy: None,
        }
    }
}

/// Open the source: for HTTP this sends the request and waits for the response headers, so
/// an unreachable server or a 404 fails before any disk is touched.
pub fn open(
    location: &ImageLocation,
    http: &HttpOptions,
    cancel: &Cancel,
) -> Result<Box<dyn ImageSource>> {
    Ok(match location {
        ImageLocation::File(p) => Box::new(FileSource::open(p)?),
        ImageLocation::Url(u) => Box::new(HttpSource::open(u, http, cancel)?),
    })
}

const READ_SIZE: usize = 256 << 10;

pub struct FileSource {
    file: File,
    path: PathBuf,
    len: u64,
}

impl FileSource {
    pub fn open(path: &Path) -> Result<FileSource> {
        let file = File::open(path)
            .with_context(|| format!("cannot open image file {}", path.display()))?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            bail!("image file {} is not a regular file", path.display());
        }
        Ok(FileSource {
            file,
            path: path.to_path_buf(),
            len: meta.len(),
        })
    }
}

impl ImageSource for FileSource {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }
    fn total_len(&self) -> Option<u64> {
        Some(self.len)
    }
    fn read_more(&mut self, buf: &mut Vec<u8>, _cancel: &Cancel) -> Result<usize> {
        let start = buf.len();
        buf.resize(start + READ_SIZE, 0);
        let n = self
            .file
            .read(&mut buf[start..])
            .with_context(|| format!("reading image file {}", self.path.display()));
        buf.truncate(start + *n.as_ref().unwrap_or(&0));
        n
    }
}

/// How often a wait checks for cancellation.
const POLL: Duration = Duration::from_millis(200);

pub struct HttpSource {
    rt: tokio::runtime::Runtime,
    client: reqwest::Client,
    /// The proxy this URL's scheme is given, as errors name it (`None`: direct).
    proxy: Option<String>,
    url: reqwest::Url,
    opts: HttpOptions,
    response: Option<reqwest::Response>,
    /// Bytes of the body delivered so far.
    pos: u64,
    total: Option<u64>,
    /// ETag (or Last-Modified) of the first response, sent as If-Range when resuming.
    validator: Option<String>,
    /// Failures since data last arrived (across reconnections: the `--fetch-retries` budget).
    tries: Tries,
}

/// The client, and the proxy settings it applies.
fn build_client(opts: &HttpOptions) -> Result<(reqwest::Client, DownloadProxy)> {
    let mut builder = reqwest::Client::builder()
        .user_agent(concat!("assisted-installer/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(opts.connect_timeout);
    if let Some(path) = &opts.cacert {
        let pem = std::fs::read(path)
            .with_context(|| format!("reading CA certificates from {}", path.display()))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem)
            .with_context(|| format!("parsing CA certificates in {}", path.display()))?;
        if certs.is_empty() {
            bail!("{} holds no PEM certificate", path.display());
        }
        builder = builder.tls_certs_merge(certs);
    }
    let proxy = match &opts.proxy {
        Some(p) => p.clone(),
        None => DownloadProxy::from_env(),
    };
    tracing::debug!("downloads: {}", proxy.describe());
    builder = proxy.apply(builder)?;
    let client = builder.build().context("building the HTTP client")?;
    Ok((client, proxy))
}

/// A request or read that failed, and whether to try again.
type Attempt<T> = Result<T, Failure<anyhow::Error>>;

fn retry<T>(why: String) -> Attempt<T> {
    Err(Failure::Retry(anyhow!(why)))
}

fn fatal<T>(e: anyhow::Error) -> Attempt<T> {
    Err(Failure::Fatal(e))
}

/// `url` for messages and logs: scheme://host[:port]/path, without the credentials, query or
/// fragment it may carry (a password, a signed token).
pub fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => {
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            let host = u.host_str().unwrap_or_default();
            format!("{}://{host}{port}{}", u.scheme(), u.path())
        }
        // Not a URL: it may still hold a secret, so nothing of it.
        Err(_) => "<not a URL>".to_string(),
    }
}

impl HttpSource {
    /// The URL as messages show it (see [`shown_url`]).
    fn shown(&self) -> String {
        shown_url(self.url.as_str())
    }

    pub fn open(url: &str, opts: &HttpOptions, cancel: &Cancel) -> Result<HttpSource> {
        // Not even an unparseable URL is printed: it may still hold a password or a token.
        let parsed = reqwest::Url::parse(url).context("invalid URL")?;
        if !matches!(parsed.scheme(), "http" | "https") {
            bail!("URL {} must be http:// or https://", shown_url(url));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the HTTP runtime")?;
        let (client, proxy) = {
            let _guard = rt.enter();
            build_client(opts)?
        };
        let proxy = proxy.for_scheme(parsed.scheme());
        let mut src = HttpSource {
            rt,
            client,
            proxy,
            url: parsed,
            opts: opts.clone(),
            response: None,
            pos: 0,
            total: None,
            validator: None,
            tries: Tries::default(),
        };
        src.with_retries(cancel, |src| {
            src.response = Some(src.attempt()?);
            Ok(())
        })?;
        Ok(src)
    }

    /// Runs `step` with the `--fetch-retries` budget and backoff, on the real clock, stopped by
    /// `cancel`.
    fn with_retries<T>(
        &mut self,
        cancel: &Cancel,
        mut step: impl FnMut(&mut Self) -> Attempt<T>,
    ) -> Result<T> {
        let schedule = self.opts.retry.schedule();
        let mut tries = self.tries;
        // Logged before each wait between tries.
        let log = |why: &anyhow::Error, next: &Retrying| {
            tracing::warn!("{why}; {next} in {:.1}s", next.delay.as_secs_f64())
        };
        let result =
            SYSTEM_CLOCK.retry_counting(cancel, &schedule, &mut tries, |_| step(self), log);
        self.tries = tries;
        result.map_err(|e| match e {
            WaitError::Stopped { .. } => {
                anyhow!(Stopped).context(format!("download of {} cancelled", self.shown()))
            }
            WaitError::GaveUp { failures, last } => anyhow!(
                "{last}; giving up after {} retries (raise --fetch-retries, or check the server and network)",
                failures - 1
            ),
            WaitError::Fatal { error, .. } => error,
        })
    }

    /// One request (from `pos`).
    fn attempt(&mut self) -> Attempt<reqwest::Response> {
        let mut req = self
            .client
            .get(self.url.clone())
            .header(reqwest::header::ACCEPT_ENCODING, "identity");
        if self.pos > 0 {
            req = req.header(RANGE, format!("bytes={}-", self.pos));
            if let Some(v) = &self.validator {
                req = req.header(IF_RANGE, v.as_str());
            }
        }
        let result = self.rt.block_on(req.send());
        let resp = match result {
            Ok(r) => r,
            // `{:#}`: with its causes (reqwest's own Display hides the interesting part).
            Err(e) => {
                // A refused or unknown proxy reads like a refused or unknown server: say which.
                let via = match &self.proxy {
                    Some(p) => format!(" (sent through the proxy {p})"),
                    None => String::new(),
                };
                return retry(format!(
                    "GET {}{via}: {:#}",
                    self.shown(),
                    anyhow!(e.without_url())
                ));
            }
        };
        let status = resp.status();
        let code = status.as_u16();
        if code == 407 {
            let proxy = match &self.proxy {
                Some(p) => format!("the proxy {p}"),
                None => "a proxy on the way".to_string(),
            };
            return fatal(anyhow!(
                "GET {}: {proxy} wants credentials it was not given or refused (407 \
                 Proxy Authentication Required): give them in the proxy URL, \
                 http://user:password@host:port",
                self.shown()
            ));
        }
        if is_retryable_status(code) {
            return retry(format!("GET {}: server answered {status}", self.shown()));
        }
        if self.pos == 0 {
            if matches!(code, 404 | 410) {
                return fatal(anyhow!(NotFound(self.shown())));
            }
            if !status.is_success() {
                return fatal(anyhow!(
                    "GET {}: server answered {status}; check the URL",
                    self.shown()
                ));
            }
            self.total = resp.content_length();
            self.validator = validator(resp.headers());
            return Ok(resp);
        }
        self.check_resume(resp)
    }

    /// A resumed request must continue exactly where the body stopped.
    fn check_resume(&self, resp: reqwest::Response) -> Attempt<reqwest::Response> {
        let status = resp.status();
        if status.as_u16() == 200 {
            return fatal(anyhow!(
                "the download of {} broke off at byte {}{}, and the server answered the request for the rest (Range: bytes={}-) \
                 with the whole file ({status}): it does not support range requests, or the file changed; cannot resume",
                self.shown(),
                self.pos,
                self.total.map(|t| format!(" of {t}")).unwrap_or_default(),
                self.pos
            ));
        }
        if status.as_u16() != 206 {
            return fatal(anyhow!(
                "GET {} (resuming at byte {}): server answered {status}",
                self.shown(),
                self.pos
            ));
        }
        let range = resp
            .headers()
            .get(CONTENT_RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_content_range);
        match range {
            Some((first, _, total))
                if first == self.pos && (total.is_none() || total == self.total) =>
            {
                Ok(resp)
            }
            other => fatal(anyhow!(
                "GET {} (resuming at byte {}): the server sent an unexpected Content-Range {:?}; cannot resume",
                self.shown(),
                self.pos,
                other
            )),
        }
    }

    /// Wait for the next body chunk, at most the idle timeout, waking to check cancellation.
    /// Appends it to `buf` and returns its length; `None` at the end of the body.
    fn next_chunk(&mut self, buf: &mut Vec<u8>, cancel: &Cancel) -> Result<Option<usize>, String> {
        let resp = self.response.as_mut().expect("a response is open");
        let idle = self.opts.idle_timeout;
        let mut waited = Duration::ZERO;
        self.rt.block_on(async {
            loop {
                if cancel.is_cancelled() {
                    return Err("cancelled".to_string());
                }
                let slice = POLL
                    .min(idle.saturating_sub(waited))
                    .max(Duration::from_millis(1));
                match tokio::time::timeout(slice, resp.chunk()).await {
                    Ok(Ok(Some(chunk))) => {
                        buf.extend_from_slice(&chunk);
                        return Ok(Some(chunk.len()));
                    }
                    Ok(Ok(None)) => return Ok(None),
                    Ok(Err(e)) => return Err(format!("{:#}", anyhow!(e))),
                    Err(_) => {
                        waited += slice;
                        if waited >= idle {
                            return Err(format!(
                                "no data for {}s (idle timeout)",
                                idle.as_secs_f64()
                            ));
                        }
                    }
                }
            }
        })
    }

    /// Reconnect if the last read broke off, then read the next chunk.
    fn read_step(&mut self, buf: &mut Vec<u8>, cancel: &Cancel) -> Attempt<usize> {
        if self.response.is_none() {
            tracing::info!("resuming {} from byte {}", self.shown(), self.pos);
            self.response = Some(self.attempt()?);
        }
        let why = match self.next_chunk(buf, cancel) {
            Ok(Some(n)) => {
                self.pos += n as u64;
                return Ok(n);
            }
            Ok(None) => match self.total {
                Some(t) if self.pos < t => "the server closed the connection".to_string(),
                _ => return Ok(0),
            },
            Err(e) if cancel.is_cancelled() => {
                return fatal(
                    anyhow!(Stopped)
                        .context(format!("download of {} cancelled: {e}", self.shown())),
                )
            }
            Err(e) => e,
        };
        self.response = None;
        retry(format!(
            "download of {} interrupted at byte {}{}: {why}",
            self.shown(),
            self.pos,
            self.total.map(|t| format!(" of {t}")).unwrap_or_default()
        ))
    }
}

/// The server has no such file (404 or 410): for a document that may be absent (a signature),
/// "missing" rather than a failure.
#[derive(Debug, thiserror::Error)]
#[error("GET {0}: the server has no such file (404); check the URL")]
pub struct NotFound(pub String);

/// A small document over http(s) (a signature, stream metadata, an Ignition config), read
/// whole with the same retries, CA certificates and timeouts as the image; `None` when the
/// server has no such file. `what` names it in errors; more than `limit` bytes is refused (a
/// wrong URL can name a multi-GiB image).
pub fn fetch_document(
    url: &str,
    what: &str,
    limit: u64,
    http: &HttpOptions,
    cancel: &Cancel,
) -> Result<Option<Vec<u8>>> {
    let mut src = match HttpSource::open(url, http, cancel) {
        Ok(src) => src,
        Err(e) if e.downcast_ref::<NotFound>().is_some() => return Ok(None),
        Err(e) => return Err(e.context(format!("fetching the {what}"))),
    };
    let too_big = || {
        anyhow!(
            "the {what} at {} is larger than {limit} bytes: is it the right URL?",
            shown_url(url)
        )
    };
    if src.total.is_some_and(|t| t > limit) {
        return Err(too_big());
    }
    let mut body = Vec::new();
    while src
        .read_more(&mut body, cancel)
        .with_context(|| format!("fetching the {what}"))?
        > 0
    {
        if body.len() as u64 > limit {
            return Err(too_big());
        }
    }
    Ok(Some(body))
}

fn validator(h: &HeaderMap) -> Option<String> {
    // A weak ETag cannot be used with If-Range (RFC 9110 13.1.5); fall back to Last-Modified.
    h.get(ETAG)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.starts_with("W/"))
        .or_else(|| h.get(LAST_MODIFIED).and_then(|v| v.to_str().ok()))
        .map(str::to_string)
}

impl ImageSource for HttpSource {
    fn describe(&self) -> String {
        self.shown()
    }

    fn total_len(&self) -> Option<u64> {
        self.total
    }

    fn read_more(&mut self, buf: &mut Vec<u8>, cancel: &Cancel) -> Result<usize> {
        let n = self.with_retries(cancel, |src| src.read_step(buf, cancel))?;
        self.tries = Tries::default();
        Ok(n)
    }
}
