//! Which proxy the downloads (image, signature, stream metadata, Ignition config) go through.
//!
//! `write-image` and `embed` read the standard environment, as coreos-installer does:
//! `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (for both when the scheme's own is unset) and
//! `NO_PROXY`, each also in lowercase (the uppercase one first). The installer downloads with
//! what the Go installer gave its coreos-installer child: its own environment with
//! `--http-proxy`, `--https-proxy` and `--no-proxy` on top (see
//! `InstallerConfig::download_proxy`). Its assisted-service client is not affected: as in Go,
//! that one reads only the environment.
//!
//! Proxy URLs may carry a password: [`DownloadProxy::describe`] and `Debug` mask it, and a bad
//! URL is refused without showing it.

use anyhow::{bail, Result};
use std::fmt;

/// One proxy setting and where it came from (`HTTPS_PROXY`, `--http-proxy`), for messages.
#[derive(Clone, PartialEq, Eq)]
pub struct ProxySetting {
    pub from: String,
    pub value: String,
}

impl ProxySetting {
    pub fn new(from: impl Into<String>, value: impl Into<String>) -> ProxySetting {
        ProxySetting {
            from: from.into(),
            value: value.into(),
        }
    }

    /// `value (from NAME)` with any password masked.
    fn shown(&self) -> String {
        format!("{} (from {})", mask_url_password(&self.value), self.from)
    }
}

impl fmt::Debug for ProxySetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown())
    }
}

/// The proxies for http and https URLs, and the hosts that bypass them. Empty: direct.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DownloadProxy {
    pub http: Option<ProxySetting>,
    pub https: Option<ProxySetting>,
    /// Comma-separated host names, domains (`.example.com`), IP addresses and networks, or `*`.
    pub no_proxy: Option<ProxySetting>,
}

impl DownloadProxy {
    /// The settings the variables looked up by `get` give. An empty variable counts as unset.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> DownloadProxy {
        let first = |names: [&str; 2]| {
            names.into_iter().find_map(|name| {
                get(name)
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| ProxySetting::new(name, v))
            })
        };
        let all = first(["ALL_PROXY", "all_proxy"]);
        DownloadProxy {
            http: first(["HTTP_PROXY", "http_proxy"]).or_else(|| all.clone()),
            https: first(["HTTPS_PROXY", "https_proxy"]).or(all),
            no_proxy: first(["NO_PROXY", "no_proxy"]),
        }
    }

    /// The settings of this process's environment.
    pub fn from_env() -> DownloadProxy {
        DownloadProxy::from_vars(|name| std::env::var(name).ok())
    }

    pub fn is_direct(&self) -> bool {
        self.http.is_none() && self.https.is_none()
    }

    /// For the log, passwords masked: `http: URL (from NAME); https: …; not for: LIST (from NAME)`.
    pub fn describe(&self) -> String {
        if self.is_direct() {
            return "direct (no proxy set)".to_string();
        }
        let mut parts = Vec::new();
        for (scheme, setting) in [("http", &self.http), ("https", &self.https)] {
            parts.push(match setting {
                Some(s) => format!("{scheme} URLs through {}", s.shown()),
                None => format!("{scheme} URLs direct"),
            });
        }
        if let Some(no) = &self.no_proxy {
            parts.push(format!("not for {}", no.shown()));
        }
        parts.join("; ")
    }

    /// The proxy `scheme` URLs are given, for messages (password masked): `URL (from NAME),
    /// unless NO_PROXY lists the host` when there is a no-proxy list, as it may.
    pub(crate) fn for_scheme(&self, scheme: &str) -> Option<String> {
        let setting = match scheme {
            "http" => self.http.as_ref(),
            "https" => self.https.as_ref(),
            _ => None,
        }?;
        Some(match &self.no_proxy {
            Some(no) => format!("{}, unless {} lists the host", setting.shown(), no.from),
            None => setting.shown(),
        })
    }

    /// `builder` sending http and https downloads through these proxies (reqwest's own reading
    /// of the environment is off: what these settings say is what happens).
    pub(crate) fn apply(
        &self,
        mut builder: reqwest::ClientBuilder,
    ) -> Result<reqwest::ClientBuilder> {
        builder = builder.no_proxy();
        let no_proxy = self
            .no_proxy
            .as_ref()
            .and_then(|n| reqwest::NoProxy::from_string(&n.value));
        for (scheme, setting) in [("http", &self.http), ("https", &self.https)] {
            let Some(setting) = setting else { continue };
            let proxy = match scheme {
                "http" => reqwest::Proxy::http(&setting.value),
                _ => reqwest::Proxy::https(&setting.value),
            };
            // reqwest's error may quote the URL, password and all: not shown.
            let Ok(proxy) = proxy else {
                bail!(
                    "the proxy for {scheme} downloads, {}, is not a proxy URL: give it as \
                     http://[user:password@]host:port",
                    setting.shown()
                );
            };
            builder = builder.proxy(proxy.no_proxy(no_proxy.clone()));
        }
        Ok(builder)
    }
}

/// `scheme://user:password@host` → `scheme://user:<SECRET>@host`.
pub(crate) fn mask_url_password(url: &str) -> String {
    let auth_start = url.find("://").map_or(0, |i| i + 3);
    let auth_end = url[auth_start..]
        .find('/')
        .map_or(url.len(), |i| auth_start + i);
    let authority = &url[auth_start..auth_end];
    let Some(at) = authority.rfind('@') else {
        return url.to_string();
    };
    let userinfo = &authority[..at];
    let Some(colon) = userinfo.find(':') else {
        return url.to_string();
    };
    format!(
        "{}{}:<SECRET>{}",
        &url[..auth_start],
        &userinfo[..colon],
        &url[auth_start + at..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn from(s: &Option<ProxySetting>) -> Option<(&str, &str)> {
        s.as_ref().map(|s| (s.from.as_str(), s.value.as_str()))
    }

    #[test]
    fn the_environment_is_read_as_coreos_installer_reads_it() {
        let p = DownloadProxy::from_vars(vars(&[]));
        assert!(p.is_direct());
        assert_eq!(p, DownloadProxy::default());
        // Uppercase first; lowercase when the uppercase one is unset or empty.
        let p = DownloadProxy::from_vars(vars(&[
            ("HTTP_PROXY", "http://up:1"),
            ("http_proxy", "http://low:1"),
            ("HTTPS_PROXY", ""),
            ("https_proxy", "http://low:2"),
            ("no_proxy", ".local"),
        ]));
        assert_eq!(from(&p.http), Some(("HTTP_PROXY", "http://up:1")));
        assert_eq!(from(&p.https), Some(("https_proxy", "http://low:2")));
        assert_eq!(from(&p.no_proxy), Some(("no_proxy", ".local")));
        // ALL_PROXY stands in for a scheme without its own.
        let p = DownloadProxy::from_vars(vars(&[
            ("all_proxy", "http://all:3"),
            ("HTTPS_PROXY", "http://s:4"),
        ]));
        assert_eq!(from(&p.http), Some(("all_proxy", "http://all:3")));
        assert_eq!(from(&p.https), Some(("HTTPS_PROXY", "http://s:4")));
    }

    #[test]
    fn passwords_never_show() {
        let p = DownloadProxy {
            http: Some(ProxySetting::new("--http-proxy", "http://u:s3cret@p:3128")),
            https: None,
            no_proxy: Some(ProxySetting::new("--no-proxy", ".svc,10.0.0.0/8")),
        };
        let d = p.describe();
        assert_eq!(
            d,
            "http URLs through http://u:<SECRET>@p:3128 (from --http-proxy); https URLs direct; \
             not for .svc,10.0.0.0/8 (from --no-proxy)"
        );
        assert!(!format!("{p:?}").contains("s3cret"), "{p:?}");
        assert_eq!(DownloadProxy::default().describe(), "direct (no proxy set)");
        assert_eq!(
            p.for_scheme("http").unwrap(),
            "http://u:<SECRET>@p:3128 (from --http-proxy), unless --no-proxy lists the host"
        );
        assert_eq!(p.for_scheme("https"), None);
        // A URL reqwest refuses is named by where it came from, never shown.
        let bad = DownloadProxy {
            https: Some(ProxySetting::new("HTTPS_PROXY", "http://u:s3cret@[bad")),
            ..DownloadProxy::default()
        };
        let e = bad
            .apply(reqwest::Client::builder())
            .unwrap_err()
            .to_string();
        assert!(e.contains("HTTPS_PROXY") && e.contains("host:port"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        p.apply(reqwest::Client::builder())
            .unwrap()
            .build()
            .unwrap();
    }

    #[test]
    fn masks_url_passwords() {
        assert_eq!(
            mask_url_password("http://user:pa55@proxy:3128"),
            "http://user:<SECRET>@proxy:3128"
        );
        assert_eq!(
            mask_url_password("user:pw@proxy2:3129/x"),
            "user:<SECRET>@proxy2:3129/x"
        );
        assert_eq!(mask_url_password("http://proxy:3128"), "http://proxy:3128");
        assert_eq!(mask_url_password("http://user@proxy"), "http://user@proxy");
        assert_eq!(mask_url_password(""), "");
    }
}
