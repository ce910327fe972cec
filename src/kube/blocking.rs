//! The transport both Kubernetes clients share (the installer's [`super::client::KubeClient`],
//! the controller's `controller::cluster::kube_impl::KubeCluster`): kube-rs on a current-thread
//! tokio runtime the client owns and blocks on for each call.
//!
//! - It must be created and used outside any async runtime (from the plain threads of the flows
//!   and tasks); doing otherwise is an error instead of a panic.
//! - Every call opens its own connection (`Connection: close`): nothing drives the runtime
//!   between calls, so a pooled connection closed meanwhile by the server or a load balancer
//!   would go unnoticed and fail the next call ("connection closed before message completed").
//! - The API server is always reached directly: `HTTP(S)_PROXY` from the environment is not
//!   applied (the controller even sets them from the cluster Proxy, which is for egress).

use anyhow::{bail, Context, Result};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::future::Future;
use std::time::Duration;

/// Time to establish a connection (TCP and TLS) to the API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A kube-rs client with its own runtime; see the module documentation.
pub struct BlockingKube {
    runtime: tokio::runtime::Runtime,
    client: Client,
    server: String,
}

impl std::fmt::Debug for BlockingKube {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingKube")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

/// An error when called from inside an async runtime (blocking there would panic).
pub fn ensure_outside_runtime() -> Result<()> {
    if tokio::runtime::Handle::try_current().is_ok() {
        bail!("the Kubernetes client blocks and must not be used inside an async runtime");
    }
    Ok(())
}

impl BlockingKube {
    /// A client for `kubeconfig`'s current context; a response must come within `read_timeout`.
    pub fn new(kubeconfig: Kubeconfig, read_timeout: Duration) -> Result<BlockingKube> {
        ensure_outside_runtime().context("creating the Kubernetes client")?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("building the runtime of the Kubernetes client")?;
        let mut config = runtime
            .block_on(Config::from_custom_kubeconfig(
                kubeconfig,
                &KubeConfigOptions::default(),
            ))
            .context("loading the kubeconfig")?;
        if config.root_cert.as_ref().is_some_and(Vec::is_empty) {
            bail!("the certificate authority of the cluster holds no PEM certificate");
        }
        config.proxy_url = None;
        config.connect_timeout = Some(CONNECT_TIMEOUT);
        config.read_timeout = Some(read_timeout);
        config.reset_reader_on_write = true;
        config.headers.push((
            http::header::CONNECTION,
            http::HeaderValue::from_static("close"),
        ));
        let server = config.cluster_url.to_string();
        let client = {
            let _inside = runtime.enter();
            Client::try_from(config).context("building the Kubernetes client")?
        };
        tracing::debug!(server = %server, "Kubernetes client ready");
        Ok(BlockingKube {
            runtime,
            client,
            server,
        })
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The kube-rs client, for building requests (run them with [`BlockingKube::block_on`]).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Runs one request on the client's runtime.
    pub fn block_on<F: Future>(&self, fut: F) -> Result<F::Output> {
        ensure_outside_runtime()?;
        Ok(self.runtime.block_on(fut))
    }
}
