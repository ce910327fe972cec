//! The SSH MachineConfig manifest the HA bootstrap drops into the installer manifests (the Go
//! `CreateOpenshiftSshManifest`): it authorises the bootstrap's freshly generated key for `core`
//! on every master, so that log gathering can ssh from the bootstrap into the masters.
//!
//! The YAML is written by hand (the shape is fixed and tiny); the key is the only variable and is
//! emitted as a double-quoted YAML scalar so that no character in it can change the structure.

use anyhow::{bail, Result};

/// `metadata.name` of the MachineConfig.
const SSH_MANIFEST_NAME: &str = "99-assisted-installer-master-ssh";

/// File name under `/opt/openshift/openshift/`, in the openshift-installer manifest naming scheme.
pub(crate) const SSH_MANIFEST_FILE_NAME: &str =
    "99_openshift-machineconfig_99-assisted-installer-master-ssh.yaml";

/// Render the MachineConfig for `public_key` (the contents of `id_rsa.pub`).
///
/// Surrounding whitespace, including the trailing newline `ssh-keygen` writes, is trimmed. An empty
/// key is refused, and so is one with a line break or another control character inside: an
/// `authorized_keys` entry is one line, so such input is not a public key.
pub(crate) fn render_ssh_manifest(public_key: &str) -> Result<String> {
    let key = public_key.trim();
    if key.is_empty() {
        bail!("cannot render the SSH manifest: the public key is empty");
    }
    if key.contains(['\n', '\r']) {
        bail!("cannot render the SSH manifest: the public key spans several lines");
    }
    if key.chars().any(char::is_control) {
        bail!("cannot render the SSH manifest: the public key contains control characters");
    }
    Ok(format!(
        "apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  labels:
    machineconfiguration.openshift.io/role: master
  name: {SSH_MANIFEST_NAME}
spec:
  config:
    ignition:
      version: 3.1.0
    passwd:
      users:
      - name: core
        sshAuthorizedKeys:
        - {}
",
        // A JSON string is a YAML double-quoted scalar: only `"` and `\` are escaped once control
        // characters are refused; `#`, `:` and non-ASCII stay literal.
        serde_json::to_string(key)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str =
        "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQDfakekeyfortestsonly+/= root@bootstrap";

    #[test]
    fn exact_output_whatever_whitespace_surrounds_the_key() {
        let expected = r#"apiVersion: machineconfiguration.openshift.io/v1
kind: MachineConfig
metadata:
  labels:
    machineconfiguration.openshift.io/role: master
  name: 99-assisted-installer-master-ssh
spec:
  config:
    ignition:
      version: 3.1.0
    passwd:
      users:
      - name: core
        sshAuthorizedKeys:
        - "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQDfakekeyfortestsonly+/= root@bootstrap"
"#;
        // Surrounding whitespace is trimmed.
        for key in [KEY.to_string(), format!("  {KEY}\n"), format!("{KEY}\r\n")] {
            assert_eq!(render_ssh_manifest(&key).unwrap(), expected);
        }
        assert!(SSH_MANIFEST_FILE_NAME.ends_with(&format!("_{SSH_MANIFEST_NAME}.yaml")));
    }

    #[test]
    fn quotes_and_backslashes_are_escaped() {
        let key = r#"ssh-ed25519 AAAAC3Nz "quoted" back\slash # not: a comment"#;
        let manifest = render_ssh_manifest(key).unwrap();
        let last = manifest.lines().last().unwrap();
        assert_eq!(
            last,
            r#"        - "ssh-ed25519 AAAAC3Nz \"quoted\" back\\slash # not: a comment""#
        );
    }

    #[test]
    fn empty_and_multi_line_keys_are_refused() {
        for key in ["", "   ", "\n"] {
            let err = render_ssh_manifest(key).unwrap_err();
            assert!(err.to_string().contains("empty"), "{err}");
        }
        for key in [
            "ssh-rsa AAAA\nssh-rsa BBBB",
            "ssh-rsa AAAA\r\nkind: Secret",
            "ssh-rsa A\rB",
        ] {
            let err = render_ssh_manifest(key).unwrap_err();
            assert!(err.to_string().contains("several lines"), "{err}");
        }
        let err = render_ssh_manifest("ssh-rsa AAAA\u{0}x").unwrap_err();
        assert!(err.to_string().contains("control characters"), "{err}");
    }
}
