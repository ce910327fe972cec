//! The HTTP image source against a local fault-injecting server: retries, Range resume,
//! If-Range, servers that ignore ranges, stalls, and errors that must not be retried.

mod common;

use assisted_installer::image::retry::{Retries, RetryPolicy};
use assisted_installer::image::source::{HttpOptions, HttpSource, ImageSource};
use assisted_installer::image::Cancel;
use common::http_server::{Fault, Route, TestServer};
use common::images::pattern;
use std::time::{Duration, Instant};

fn fast(retries: u32) -> HttpOptions {
    HttpOptions {
        retry: RetryPolicy {
            retries: Retries::Count(retries),
            initial_backoff: Duration::from_millis(20),
            max_backoff: Duration::from_millis(100),
        },
        idle_timeout: Duration::from_secs(5),
        ..HttpOptions::default()
    }
}

fn read_all(src: &mut dyn ImageSource) -> anyhow::Result<Vec<u8>> {
    let cancel = Cancel::new();
    let mut out = Vec::new();
    while src.read_more(&mut out, &cancel)? > 0 {}
    Ok(out)
}

fn fetch(srv: &TestServer, path: &str, opts: &HttpOptions) -> anyhow::Result<Vec<u8>> {
    let mut src = HttpSource::open(&srv.url(path), opts, &Cancel::new())?;
    read_all(&mut src)
}

/// One cut, resumed with a Range request carrying the ETag; three cuts, each resumed (each
/// resume makes progress, so a retry budget of 1 is renewed every time).
#[test]
fn cut_connections_are_resumed_with_range_requests() {
    let data = pattern(4 << 20, 1);
    let srv = TestServer::start();
    let cut = |at| vec![Fault::CutAfter(at)];
    let once = Route::bytes(data.clone()).with_etag("v1");
    srv.route("/once", once.with_faults(vec![cut(1_500_000)]));
    let thrice = Route::bytes(data.clone()).with_faults(vec![cut(700_000); 3]);
    srv.route("/thrice", thrice);
    assert_eq!(fetch(&srv, "/once", &fast(3)).unwrap(), data);
    let reqs = srv.requests_for("/once");
    assert_eq!(reqs.len(), 2, "{reqs:?}");
    assert_eq!(reqs[0].header("range"), None);
    let resumed_at: u64 = reqs[1]
        .header("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .unwrap()
        .parse()
        .unwrap();
    assert!(resumed_at > 0 && resumed_at <= 1_500_000, "{resumed_at}");
    assert_eq!(
        reqs[1].header("if-range"),
        Some("\"v1\""),
        "If-Range carries the ETag"
    );
    assert_eq!(reqs[1].status, 206);
    assert_eq!(fetch(&srv, "/thrice", &fast(1)).unwrap(), data);
    assert_eq!(srv.requests_for("/thrice").len(), 4);
}

/// Each retryable status: twice, then the data; always, until the budget runs out. A 404 is
/// not retried.
#[test]
fn retryable_statuses_are_retried_and_the_budget_runs_out() {
    let data = pattern(100_000, 3);
    for code in [408u16, 429, 500, 502, 503, 504] {
        let srv = TestServer::start();
        let twice = vec![vec![Fault::Status(code)], vec![Fault::Status(code)]];
        srv.route("/img", Route::bytes(data.clone()).with_faults(twice));
        srv.route(
            "/gone",
            Route::bytes(data.clone()).with_sticky(vec![Fault::Status(code)]),
        );
        assert_eq!(fetch(&srv, "/img", &fast(2)).unwrap(), data, "{code}");
        assert_eq!(srv.requests_for("/img").len(), 3, "{code}");
        let err = fetch(&srv, "/gone", &fast(2)).unwrap_err().to_string();
        assert!(err.contains(&code.to_string()), "{err}");
        assert!(err.contains("giving up after 2 retries"), "{err}");
        let count = srv.requests_for("/gone").len();
        assert_eq!(count, 3, "{code}: first try + 2 retries");
    }
    // A 404 is not: it fails at once with the URL and the status.
    let srv = TestServer::start();
    let err = fetch(&srv, "/missing.raw.gz", &fast(5))
        .unwrap_err()
        .to_string();
    assert!(err.contains("404"), "{err}");
    assert!(err.contains("/missing.raw.gz"), "{err}");
    assert_eq!(srv.requests().len(), 1, "a 404 is not retried");
}

#[test]
fn a_server_that_ignores_range_fails_clearly() {
    let data = pattern(2 << 20, 4);
    let srv = TestServer::start();
    srv.route(
        "/img",
        Route::bytes(data)
            .with_faults(vec![vec![Fault::CutAfter(1 << 20)]])
            .with_sticky(vec![Fault::IgnoreRange]),
    );
    let err = format!("{:#}", fetch(&srv, "/img", &fast(3)).unwrap_err());
    assert!(err.contains("does not support range requests"), "{err}");
    assert!(err.contains("Range: bytes="), "{err}");
}

#[test]
fn a_changed_file_is_not_spliced_onto_the_old_one() {
    // If-Range with an ETag the server no longer has: it answers 200 with the whole (new) file.
    let data = pattern(2 << 20, 5);
    let srv = TestServer::start();
    srv.route(
        "/img",
        Route::bytes(data.clone())
            .with_etag("old")
            .with_faults(vec![vec![Fault::CutAfter(1 << 20)]]),
    );
    let opts = fast(3);
    let mut src = HttpSource::open(&srv.url("/img"), &opts, &Cancel::new()).unwrap();
    // The file changes on the server while we read (same path, new ETag).
    srv.route("/img", Route::bytes(data).with_etag("new"));
    let err = format!("{:#}", read_all(&mut src).unwrap_err());
    assert!(err.contains("or the file changed"), "{err}");
}

#[test]
fn a_stalled_body_hits_the_idle_timeout_and_is_resumed() {
    let data = pattern(1 << 20, 6);
    let srv = TestServer::start();
    srv.route(
        "/img",
        Route::bytes(data.clone()).with_faults(vec![vec![Fault::StallAfter(300_000)]]),
    );
    let opts = HttpOptions {
        idle_timeout: Duration::from_millis(500),
        ..fast(2)
    };
    let start = Instant::now();
    assert_eq!(fetch(&srv, "/img", &opts).unwrap(), data);
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_eq!(srv.requests_for("/img").len(), 2);
}

/// A port of 127.0.0.1 nobody listens on (a listener bound and dropped).
fn unused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `open` without an answer: a refused connection, once retried; a URL that is not HTTP.
#[test]
fn open_fails_after_the_retries_of_a_refused_connection_and_on_other_schemes() {
    let refused = format!("http://127.0.0.1:{}/img", unused_port());
    for (url, want) in [
        (refused.as_str(), "giving up after 1 retries"),
        ("ftp://example/img", "http:// or https://"),
    ] {
        let err = HttpSource::open(url, &fast(1), &Cancel::new())
            .err()
            .unwrap();
        assert!(err.to_string().contains(want), "{err}");
    }
}

#[test]
fn cancellation_stops_a_backoff_at_once() {
    let srv = TestServer::start();
    srv.route(
        "/img",
        Route::bytes(vec![0u8; 10]).with_sticky(vec![Fault::Status(503)]),
    );
    let opts = HttpOptions {
        retry: RetryPolicy {
            retries: Retries::Infinite,
            initial_backoff: Duration::from_secs(30),
            max_backoff: Duration::from_secs(30),
        },
        ..HttpOptions::default()
    };
    let cancel = Cancel::new();
    let c2 = cancel.clone();
    let url = srv.url("/img");
    let start = Instant::now();
    let t = std::thread::spawn(move || {
        HttpSource::open(&url, &opts, &c2)
            .err()
            .map(|e| e.to_string())
    });
    std::thread::sleep(Duration::from_millis(300));
    cancel.cancel();
    let err = t.join().unwrap().unwrap();
    assert!(err.contains("cancelled"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(10));
}

/// A small document: read whole through a cut (resumed like an image), `None` for a 404 (a
/// signature may be absent), an error for other refusals and for a body over the limit.
#[test]
fn documents_are_fetched_whole_and_a_404_is_missing() {
    use assisted_installer::image::source::fetch_document;
    let data = pattern(300_000, 6);
    let srv = TestServer::start();
    srv.route(
        "/doc",
        Route::bytes(data.clone()).with_faults(vec![vec![Fault::CutAfter(100_000)]]),
    );
    srv.route(
        "/denied",
        Route::bytes(vec![]).with_sticky(vec![Fault::Status(403)]),
    );
    let get = |path: &str, limit| {
        fetch_document(
            &srv.url(path),
            "test document",
            limit,
            &fast(2),
            &Cancel::new(),
        )
    };
    assert_eq!(get("/doc", 1 << 20).unwrap(), Some(data));
    assert_eq!(get("/nothing-here", 1 << 20).unwrap(), None);
    let e = format!("{:#}", get("/denied", 1 << 20).unwrap_err());
    assert!(
        e.contains("fetching the test document") && e.contains("403"),
        "{e}"
    );
    let e = format!("{:#}", get("/doc", 1000).unwrap_err());
    assert!(e.contains("larger than 1000 bytes"), "{e}");
}

/// Through a proxy (the only way to the made-up host): a download cut midway resumes through it;
/// a proxy that refuses the credentials, or one that is not there, is named in the error, its
/// password masked.
#[test]
fn downloads_through_a_proxy_resume_and_name_it_when_it_fails() {
    use assisted_installer::image::proxy::{DownloadProxy, ProxySetting};
    use common::http_proxy::TestProxy;
    let data = pattern(3 << 20, 7);
    let srv = TestServer::start();
    let cut = vec![vec![Fault::CutAfter(1 << 20)]];
    srv.route("/img", Route::bytes(data.clone()).with_faults(cut));
    let proxy =
        TestProxy::start(&[("images.example.invalid", srv.addr())]).with_credentials("u", "pw");
    let via = |proxy_url: String| HttpOptions {
        proxy: Some(DownloadProxy {
            http: Some(ProxySetting::new("--http-proxy", proxy_url)),
            ..DownloadProxy::default()
        }),
        ..fast(2)
    };
    let url = "http://images.example.invalid/img";
    let good = proxy.url().replace("http://", "http://u:pw@");
    let mut src = HttpSource::open(url, &via(good), &Cancel::new()).unwrap();
    assert_eq!(read_all(&mut src).unwrap(), data);
    assert_eq!(
        proxy.targets(),
        [url, url],
        "the resume went through the proxy too"
    );
    let ranges = srv.requests_for("/img");
    assert_eq!(ranges.len(), 2);

    let wrong = proxy.url().replace("http://", "http://u:wrong@");
    let e = HttpSource::open(url, &via(wrong), &Cancel::new())
        .err()
        .unwrap();
    let e = format!("{e:#}");
    assert!(e.contains("407 Proxy Authentication Required"), "{e}");
    assert!(e.contains("http://u:<SECRET>@127.0.0.1:"), "{e}");
    assert!(
        e.contains("(from --http-proxy)") && !e.contains("wrong"),
        "{e}"
    );
    assert_eq!(proxy.targets().len(), 3, "a refusal is not retried");

    let gone = format!("http://127.0.0.1:{}", unused_port());
    let e = HttpSource::open(url, &via(gone.clone()), &Cancel::new())
        .err()
        .unwrap();
    let e = format!("{e:#}");
    let said = format!("GET {url} (sent through the proxy {gone} (from --http-proxy)): ");
    assert!(e.contains(&said), "{e}");
}
