//! What skip-MCO reads, as pure functions over bytes: where the host's pointer Ignition config
//! points (its first merge source and the CA that serves it), the MachineConfig the
//! machine-config-server encapsulates in the config it serves (the release OS image and its
//! kernel arguments).
//!
//! Only the few fields used are parsed, leniently, so any Ignition 3.x config works (they have
//! the same shape in every 3.x version). The configs hold secrets (the served one holds the
//! pull secret; a pointer config may hold credentials in its HTTP headers or URL): nothing
//! here logs them, and errors name fields, never values.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::Value;

use crate::ignition::data_url;
use crate::ignition::pull_secret::file_contents;

/// The file of a served config that holds the node's rendered MachineConfig.
pub(crate) const ENCAPSULATED_MC_PATH: &str = "/etc/ignition-machine-config-encapsulated.json";

/// Where the rest of this host's config lives: the pointer config's first merge source, and
/// the CA to trust for it (PEM), if the config gives one.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PointerConfig {
    pub source: String,
    pub ca_pem: Option<String>,
}

// By hand: the source may carry credentials (userinfo, a token in the query).
impl std::fmt::Debug for PointerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PointerConfig")
            .field("source", &display_source(&self.source))
            .field("ca_pem", &self.ca_pem.as_ref().map(|p| p.len()))
            .finish()
    }
}

/// What skip-MCO deploys: the release OS image and the MachineConfig's kernel arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EncapsulatedMc {
    pub os_image_url: String,
    pub kernel_arguments: Vec<String>,
}

#[derive(Deserialize)]
struct MachineConfig {
    #[serde(default)]
    spec: MachineConfigSpec,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct MachineConfigSpec {
    #[serde(rename = "osImageURL")]
    os_image_url: String,
    kernel_arguments: Option<Vec<String>>,
}

fn parse_config(bytes: &[u8]) -> Result<Value> {
    // serde_json's errors give a line and column, not the text around them.
    let value: Value = serde_json::from_slice(bytes).context("not JSON")?;
    if !value.is_object() {
        bail!("not an Ignition config: the JSON is not an object");
    }
    Ok(value)
}

/// The first non-empty `ignition.config.merge[].source` and the first
/// `ignition.security.tls.certificateAuthorities[]` with a source (a `data:` URL, decoded to
/// PEM). Go's `getPointedIgnitionAndCA`; a CA's `compression` is honoured as well.
pub(crate) fn pointer_config(bytes: &[u8]) -> Result<PointerConfig> {
    let config = parse_config(bytes)?;
    let list = |path| config.pointer(path).and_then(Value::as_array).into_iter();
    let source_of = |r: &Value| r.get("source").and_then(Value::as_str).map(String::from);
    let Some(source) = list("/ignition/config/merge")
        .flatten()
        .filter_map(source_of)
        .find(|s| !s.is_empty())
    else {
        bail!("the pointer Ignition config has no ignition.config.merge source");
    };
    let cas = list("/ignition/security/tls/certificateAuthorities");
    let ca_pem = match cas.flatten().find_map(|r| Some((source_of(r)?, r))) {
        Some((url, ca)) => {
            if !data_url::is_data_url(&url) {
                bail!(
                    "the CA of the pointer Ignition config is not a data: URL ({})",
                    display_source(&url)
                );
            }
            let compression = ca.get("compression").and_then(Value::as_str);
            let pem = data_url::decode_with_compression(&url, compression)
                .context("decoding the CA of the pointer Ignition config")?;
            Some(
                String::from_utf8(pem)
                    .context("the CA of the pointer Ignition config is not text")?,
            )
        }
        None => None,
    };
    Ok(PointerConfig { source, ca_pem })
}

/// The MachineConfig in `/etc/ignition-machine-config-encapsulated.json` of a config the
/// machine-config-server served: its `spec.osImageURL` and `spec.kernelArguments`.
pub(crate) fn encapsulated_mc(served: &[u8]) -> Result<EncapsulatedMc> {
    let what = "the served Ignition config";
    let config = parse_config(served).context(what)?;
    let bytes = file_contents(&config, ENCAPSULATED_MC_PATH).context(what)?;
    let mc: MachineConfig = serde_json::from_slice(&bytes)
        .with_context(|| format!("{ENCAPSULATED_MC_PATH} is not a MachineConfig"))?;
    Ok(EncapsulatedMc {
        os_image_url: mc.spec.os_image_url,
        kernel_arguments: mc.spec.kernel_arguments.unwrap_or_default(),
    })
}

/// A source fit for a log line: `scheme://host[:port]/path` without userinfo, query or
/// fragment; a `data:` URL by its size only.
pub(crate) fn display_source(source: &str) -> String {
    if data_url::is_data_url(source) {
        return format!("an embedded data: URL ({} bytes)", source.len());
    }
    match reqwest::Url::parse(source) {
        Ok(mut url) => {
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.set_fragment(None);
            url.to_string()
        }
        Err(_) => "an unparsable URL".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ignition::data_url::tests::{encode_base64, gzip};

    const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

    fn data(bytes: &[u8]) -> String {
        format!("data:;base64,{}", encode_base64(bytes))
    }

    /// A served config holding `mc` as the encapsulated MachineConfig.
    pub(crate) fn served_config(mc: &serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "ignition": {"version": "3.4.0"},
            "storage": {"files": [
                {"path": "/etc/kubernetes/kubeconfig", "contents": {"source": "data:,secret"}},
                {"path": ENCAPSULATED_MC_PATH,
                 "contents": {"source": data(&serde_json::to_vec(mc).unwrap())}}
            ]}
        }))
        .unwrap()
    }

    #[test]
    fn the_first_non_empty_merge_source_and_the_first_ca_if_any_gzipped_or_not() {
        let ign = serde_json::json!({
            "ignition": {
                "version": "3.2.0",
                "config": {"merge": [
                    {"source": ""},
                    {"verification": {}},
                    {"source": "https://api-int.example.com:22623/config/worker"},
                    {"source": "https://second.example.com/config"}
                ]},
                "security": {"tls": {"certificateAuthorities": [
                    {"verification": {}},
                    {"source": data(CA.as_bytes())},
                    {"source": "data:,other"}
                ]}}
            }
        });
        let p = pointer_config(&serde_json::to_vec(&ign).unwrap()).unwrap();
        assert_eq!(p.source, "https://api-int.example.com:22623/config/worker");
        assert_eq!(p.ca_pem.as_deref(), Some(CA));
        // Without a CA, or with a gzipped one.
        let ign = r#"{"ignition":{"version":"3.1.0","config":{"merge":[{"source":"http://10.0.0.1:22624/config/master"}]}}}"#;
        let p = pointer_config(ign.as_bytes()).unwrap();
        assert_eq!(p.ca_pem, None);
        let gz = serde_json::json!({"ignition": {
            "config": {"merge": [{"source": "https://x/config"}]},
            "security": {"tls": {"certificateAuthorities": [
                {"source": data(&gzip(CA.as_bytes())), "compression": "gzip"}
            ]}}
        }});
        let p = pointer_config(&serde_json::to_vec(&gz).unwrap()).unwrap();
        assert_eq!(p.ca_pem.as_deref(), Some(CA));
    }

    #[test]
    fn pointer_errors() {
        let err = |ign: &str| format!("{:#}", pointer_config(ign.as_bytes()).unwrap_err());
        assert!(err("{").contains("not JSON"));
        assert!(err("[]").contains("not an object"));
        assert!(err(r#"{"ignition":{"version":"3.2.0"}}"#).contains("no ignition.config.merge"));
        assert!(err(r#"{"ignition":{"config":{"merge":[{"source":""}]}}}"#).contains("no ignition"));
        let https_ca = r#"{"ignition":{"config":{"merge":[{"source":"https://x/c"}]},
            "security":{"tls":{"certificateAuthorities":[{"source":"https://ca.example/ca.pem?token=s3cret"}]}}}}"#;
        let e = err(https_ca);
        assert!(e.contains("not a data: URL"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn the_pointers_debug_hides_credentials() {
        let p = PointerConfig {
            source: "https://user:pa55@api-int.example:22623/config/master?token=t0ken".into(),
            ca_pem: None,
        };
        let text = format!("{p:?}");
        assert!(!text.contains("pa55") && !text.contains("t0ken"), "{text}");
        assert!(
            text.contains("https://api-int.example:22623/config/master"),
            "{text}"
        );
    }

    #[test]
    fn the_encapsulated_machine_config() {
        let mc = serde_json::json!({
            "apiVersion": "machineconfiguration.openshift.io/v1",
            "kind": "MachineConfig",
            "spec": {
                "osImageURL": "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:abc",
                "kernelArguments": ["arg1", "arg2=val2"]
            }
        });
        assert_eq!(
            encapsulated_mc(&served_config(&mc)).unwrap(),
            EncapsulatedMc {
                os_image_url: "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:abc".into(),
                kernel_arguments: vec!["arg1".into(), "arg2=val2".into()],
            }
        );
        let no_kargs = serde_json::json!({"spec": {"osImageURL": "img", "kernelArguments": null}});
        assert_eq!(
            encapsulated_mc(&served_config(&no_kargs))
                .unwrap()
                .kernel_arguments,
            Vec::<String>::new()
        );
        // A compressed encapsulated file is read too.
        let mc = br#"{"spec":{"osImageURL":"img@sha256:1"}}"#;
        let served = serde_json::json!({"storage": {"files": [{
            "path": ENCAPSULATED_MC_PATH,
            "contents": {"source": data(&gzip(mc)), "compression": "gzip"}
        }]}});
        let got = encapsulated_mc(&serde_json::to_vec(&served).unwrap()).unwrap();
        assert_eq!(got.os_image_url, "img@sha256:1");
    }

    #[test]
    fn served_config_errors_do_not_echo_its_contents() {
        let err = |b: &[u8]| format!("{:#}", encapsulated_mc(b).unwrap_err());
        assert!(err(b"<html>502 Bad Gateway</html>").contains("not JSON"));
        let without = br#"{"storage":{"files":[{"path":"/etc/x","contents":{"source":"data:,pull-s3cret"}}]}}"#;
        let e = err(without);
        assert!(
            e.contains(
                "has no storage.files entry for /etc/ignition-machine-config-encapsulated.json"
            ),
            "{e}"
        );
        assert!(!e.contains("pull-s3cret"), "{e}");
        let not_mc = serde_json::json!({"storage": {"files": [{
            "path": ENCAPSULATED_MC_PATH, "contents": {"source": "data:,s3cret-not-json"}
        }]}});
        let e = err(&serde_json::to_vec(&not_mc).unwrap());
        assert!(e.contains("is not a MachineConfig"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn sources_in_logs() {
        assert_eq!(
            display_source("https://core:pa55@api-int.example:22623/config/master?t=1#x"),
            "https://api-int.example:22623/config/master"
        );
        assert_eq!(
            display_source("http://10.0.0.1:22624/config/worker"),
            "http://10.0.0.1:22624/config/worker"
        );
        assert_eq!(
            display_source("data:,secret"),
            "an embedded data: URL (12 bytes)"
        );
        assert_eq!(display_source("not a url s3cret"), "an unparsable URL");
    }
}
