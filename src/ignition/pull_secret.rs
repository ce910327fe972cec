//! The pull secret taken out of `bootstrap.ign` (the Go `ExtractFromIgnition`).
//!
//! The bootstrap needs it as `/root/.docker/config.json` before anything else runs, so that podman
//! can pull the machine-config-operator image that lays the rest of the ignition down. The bytes
//! are the cluster's registry credentials: they never appear in an error message or a log line;
//! errors name the file and the problem only.

use super::data_url;
use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Where the bootstrap ignition carries the pull secret, and where it is installed on the host.
pub(crate) const PULL_SECRET_PATH: &str = "/root/.docker/config.json";

/// The validated pull secret (the `config.json` bytes) from a bootstrap Ignition config.
///
/// The config may be any spec version that has `storage.files[].contents` (2.2 and all 3.x): the
/// extraction does not depend on anything else in the spec.
pub(crate) fn extract_pull_secret(bootstrap_ignition: &[u8]) -> Result<Vec<u8>> {
    let config = super::config::parse(bootstrap_ignition)
        .context("bootstrap ignition is not an Ignition config")?;
    let secret = file_contents(&config, PULL_SECRET_PATH)
        .context("cannot take the pull secret out of the bootstrap ignition")?;
    validate_pull_secret(&secret)
        .with_context(|| format!("{PULL_SECRET_PATH} in the bootstrap ignition"))?;
    Ok(secret)
}

/// The contents of the first `storage.files[]` entry whose `path` is `path`, decoded from its
/// `contents.source` data URL and decompressed as `contents.compression` says.
///
/// Only embedded (`data:`) contents are supported: the bootstrap ignition embeds everything, and
/// fetching remote sources is not this module's business. `append` fragments are not applied (no
/// file the installer reads has any).
pub(crate) fn file_contents(config: &Value, path: &str) -> Result<Vec<u8>> {
    let file = config
        .pointer("/storage/files")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|file| file.get("path").and_then(Value::as_str) == Some(path))
        .with_context(|| format!("ignition has no storage.files entry for {path}"))?;
    let contents = file.get("contents");
    let source = contents
        .and_then(|c| c.get("source"))
        .and_then(Value::as_str)
        .with_context(|| format!("ignition file {path} has no contents.source"))?;
    if !data_url::is_data_url(source) {
        // The URL itself is not shown: it could carry credentials in its query.
        let scheme = source.split_once(':').map_or("none", |(scheme, _)| scheme);
        bail!("ignition file {path} is not embedded: its source has scheme {scheme:?}, not data:");
    }
    let compression = contents
        .and_then(|c| c.get("compression"))
        .and_then(Value::as_str);
    data_url::decode_with_compression(source, compression)
        .with_context(|| format!("cannot decode the contents of ignition file {path}"))
}

/// A pull secret must be a JSON object with an `auths` object (the docker `config.json` shape
/// podman reads). Errors give a position, never the text.
pub(crate) fn validate_pull_secret(bytes: &[u8]) -> Result<()> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        // serde_json's syntax errors name no input, but keep to the position to be sure.
        anyhow::anyhow!(
            "pull secret is not valid JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    match value.get("auths") {
        Some(Value::Object(_)) => Ok(()),
        Some(_) => bail!("pull secret has an \"auths\" member that is not an object"),
        None if value.is_object() => bail!("pull secret has no \"auths\" object"),
        None => bail!("pull secret is not a JSON object"),
    }
}

#[cfg(test)]
mod tests {
    use super::data_url::tests::{encode_base64, gzip};
    use super::*;
    use serde_json::json;

    /// A bootstrap.ign-like config: several files (plain, percent-encoded, gzip, with `append`),
    /// units and a user, with the pull secret among them.
    const BOOTSTRAP_IGN: &str = include_str!("testdata/bootstrap.ign");
    const PULL_SECRET: &str = include_str!("testdata/pull-secret.json");

    fn config_with_files(files: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({"ignition": {"version": "3.2.0"}, "storage": {"files": files}}))
            .unwrap()
    }

    #[test]
    fn extracts_the_pull_secret_and_the_other_files_from_the_fixture() {
        let secret = extract_pull_secret(BOOTSTRAP_IGN.as_bytes()).unwrap();
        assert_eq!(secret, PULL_SECRET.as_bytes());
        let parsed: Value = serde_json::from_slice(&secret).unwrap();
        assert!(parsed["auths"]["quay.io"]["auth"].is_string());
        // Its other files decode too.
        let config: Value = serde_json::from_str(BOOTSTRAP_IGN).unwrap();
        let kubeconfig = file_contents(&config, "/opt/openshift/auth/kubeconfig").unwrap();
        assert!(String::from_utf8(kubeconfig)
            .unwrap()
            .starts_with("apiVersion: v1\n"));
        assert_eq!(
            file_contents(&config, "/etc/hostname").unwrap(),
            b"bootstrap\n"
        );
        let err = file_contents(&config, "/etc/motd").unwrap_err();
        assert_eq!(
            err.to_string(),
            "ignition file /etc/motd has no contents.source"
        );
    }

    /// `storage.files` entries, or whole configs, and the pull secret or the error they give.
    #[test]
    fn where_the_pull_secret_comes_from() {
        let gzipped = encode_base64(&gzip(PULL_SECRET.as_bytes()));
        let auths = "data:,%7B%22auths%22%3A%7B%7D%7D";
        let files =
            |files: Value| json!({"ignition": {"version": "3.2.0"}, "storage": {"files": files}});
        let cases: [(Value, Result<&[u8], &str>); 7] = [
            (
                files(json!([{"path": PULL_SECRET_PATH,
                    "contents": {"compression": "gzip", "source": format!("data:;base64,{gzipped}")}}])),
                Ok(PULL_SECRET.as_bytes()),
            ),
            // Percent-encoded; the first entry for the path wins.
            (
                files(
                    json!([{"path": "/etc/other", "contents": {"source": "data:,x"}},
                    {"path": PULL_SECRET_PATH, "contents": {"source": auths}},
                    {"path": PULL_SECRET_PATH, "contents": {"source": "data:,ignored"}}]),
                ),
                Ok(br#"{"auths":{}}"#),
            ),
            // The spec 2 layout.
            (
                json!({"ignition": {"version": "2.2.0"}, "storage": {"files": [{"filesystem": "root",
                    "path": PULL_SECRET_PATH, "contents": {"source": auths, "verification": {}}}]}}),
                Ok(br#"{"auths":{}}"#),
            ),
            (
                files(json!([{"path": "/etc/motd", "contents": {"source": "data:,hi"}}])),
                Err("no storage.files entry for /root/.docker/config.json"),
            ),
            (
                json!({"ignition": {"version": "3.1.0"}}),
                Err("no storage.files entry for /root/.docker/config.json"),
            ),
            (
                json!({"storage": {"files": []}}),
                Err("no ignition.version"),
            ),
            // Not shown: the URL may carry credentials.
            (
                files(json!([{"path": PULL_SECRET_PATH,
                    "contents": {"source": "https://example.com/ps?token=s3cr3t"}}])),
                Err("scheme \"https\""),
            ),
        ];
        for (config, expected) in cases {
            let got = extract_pull_secret(&serde_json::to_vec(&config).unwrap());
            match expected {
                Ok(bytes) => assert_eq!(got.unwrap(), bytes, "{config}"),
                Err(text) => {
                    let err = format!("{:#}", got.unwrap_err());
                    assert!(err.contains(text) && !err.contains("s3cr3t"), "{err}");
                }
            }
        }
        let err = extract_pull_secret(b"not json").unwrap_err();
        assert!(format!("{err:#}").contains("not valid JSON"));
    }

    #[test]
    fn invalid_secrets_are_rejected_without_leaking_them() {
        let secret = "hunter2-registry-token";
        for (contents, expected) in [
            (format!("{{\"auths\": \"{secret}\"}}"), "not an object"),
            (
                format!("{{\"credsStore\": \"{secret}\"}}"),
                "no \"auths\" object",
            ),
            (format!("[\"{secret}\"]"), "not a JSON object"),
            (format!("{{\"auths\": {{\"{secret}\""), "not valid JSON"),
            (
                format!("auths {secret}"),
                "not valid JSON (line 1, column 1)",
            ),
        ] {
            let source = format!("data:;base64,{}", encode_base64(contents.as_bytes()));
            let ign = config_with_files(
                json!([{"path": PULL_SECRET_PATH, "contents": {"source": source}}]),
            );
            let text = format!("{:#}", extract_pull_secret(&ign).unwrap_err());
            assert!(text.contains(expected), "{text}");
            assert!(!text.contains(secret), "{text}");
            assert!(
                !text.contains(&encode_base64(contents.as_bytes())),
                "{text}"
            );
        }
    }
}
