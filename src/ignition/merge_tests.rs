//! Tests of `ignition::merge` (kept apart: the rules file is long enough on its own).

use super::*;
use serde_json::json;

fn config(version: &str, rest: Value) -> Value {
    let mut config = json!({"ignition": {"version": version}});
    config
        .as_object_mut()
        .unwrap()
        .extend(rest.as_object().unwrap().clone());
    config
}

fn v32(rest: Value) -> Value {
    config("3.2.0", rest)
}

// ----- versions -----

/// Every supported version is accepted; the others are refused, naming them (shortened when
/// long). The shape checks (JSON, object, string `ignition.version`) are `config::parse`'s,
/// tested in `config::tests::not_an_ignition_config`; this is the v3 range the merge adds.
#[test]
fn accepts_the_supported_versions_and_rejects_others_naming_them() {
    for version in SUPPORTED_VERSIONS {
        assert_eq!(spec_version(&config(version, json!({}))).unwrap(), version);
    }
    for (version, expected) in [
        (
            json!("2.2.0"),
            "spec version \"2.2.0\", which is not supported: only Ignition v3",
        ),
        (json!("3.5.0"), "unsupported spec version \"3.5.0\""),
        (json!("3.4.0-experimental"), "unsupported spec version"),
        (json!("3.2"), "unsupported spec version"),
        (json!(320), "not a string"),
    ] {
        let err = spec_version(&json!({"ignition": {"version": version}})).unwrap_err();
        assert!(
            format!("{err:#}").contains(expected),
            "{err:#} / {expected}"
        );
    }
    let err = spec_version(&json!({"storage": {}})).unwrap_err();
    assert!(err.to_string().contains("no ignition.version"), "{err}");
    let err = spec_version(&config(&"9".repeat(10_000), json!({}))).unwrap_err();
    assert!(err.to_string().len() < 200, "{err}");
}

#[test]
fn result_has_the_higher_version_of_two_checked_ones() {
    let older = config("3.1.0", json!({}));
    let newer = config("3.4.0", json!({}));
    for (parent, child) in [(&older, &newer), (&newer, &older)] {
        let merged = merge(parent, child).unwrap();
        assert_eq!(merged["ignition"]["version"], "3.4.0");
    }
    let merged = merge(&config("3.0.0", json!({})), &config("3.0.0", json!({}))).unwrap();
    assert_eq!(merged["ignition"]["version"], "3.0.0");
    // Both versions are checked.
    let good = v32(json!({}));
    let bad = config("2.2.0", json!({}));
    assert!(format!("{:#}", merge(&bad, &good).unwrap_err()).starts_with("parent ignition config"));
    assert!(format!("{:#}", merge(&good, &bad).unwrap_err()).starts_with("child ignition config"));
}

// ----- the rules, each as parent + child = merged -----

/// Each case's whole merged config (all version 3.2.0 but the kernel arguments, 3.3.0).
#[test]
fn merges_by_the_rules() {
    let v33 = |rest| config("3.3.0", rest);
    let cases = [
        (
            "a child scalar wins when set, an explicit false too; an unset or null one keeps the parent's",
            v32(json!({"ignition": {"version": "3.2.0", "timeouts": {"httpTotal": 10, "httpResponseHeaders": 5}},
                "storage": {"files": [{"path": "/a", "overwrite": true, "mode": 420}]}})),
            v32(json!({"ignition": {"version": "3.2.0", "timeouts": {"httpTotal": 60, "httpResponseHeaders": null}},
                "storage": {"files": [{"path": "/a", "overwrite": false}]}})),
            v32(json!({"ignition": {"version": "3.2.0", "timeouts": {"httpTotal": 60, "httpResponseHeaders": 5}},
                "storage": {"files": [{"path": "/a", "overwrite": false, "mode": 420}]}})),
        ),
        (
            "objects merge recursively; on a type mismatch the child's value wins",
            v32(json!({"ignition": {"version": "3.2.0", "proxy": {"httpProxy": "http://p:3128", "noProxy": ["a"]}},
                "x-extension": {"keep": 1, "list": [1]}})),
            v32(json!({"ignition": {"version": "3.2.0", "proxy": {"httpsProxy": "http://q:3128", "noProxy": ["b", "a"]}},
                "x-extension": {"list": "not a list"}})),
            v32(json!({"ignition": {"version": "3.2.0", "proxy": {"httpProxy": "http://p:3128",
                "httpsProxy": "http://q:3128", "noProxy": ["a", "b"]}}, "x-extension": {"keep": 1, "list": "not a list"}})),
        ),
        (
            "files merge by path: the child's contents win, the fields it leaves out stay",
            v32(json!({"storage": {"files": [
                {"path": "/etc/kubernetes/kubelet.conf", "mode": 420, "contents": {"source": "data:,kubelet"}},
                {"path": "/etc/hostname", "mode": 420, "overwrite": true, "user": {"name": "root"},
                 "contents": {"source": "data:,localhost"}}]}})),
            v32(json!({"storage": {"files": [
                {"path": "/etc/hostname", "contents": {"source": "data:,master-0"}},
                {"path": "/etc/new", "contents": {"source": "data:,new"}}]}})),
            v32(json!({"storage": {"files": [
                {"path": "/etc/kubernetes/kubelet.conf", "mode": 420, "contents": {"source": "data:,kubelet"}},
                {"path": "/etc/hostname", "mode": 420, "overwrite": true, "user": {"name": "root"},
                 "contents": {"source": "data:,master-0"}},
                {"path": "/etc/new", "contents": {"source": "data:,new"}}]}})),
        ),
        (
            "files, directories and links share paths; a replacing entry inherits nothing",
            v32(json!({"storage": {
                "files": [{"path": "/etc/a"}, {"path": "/etc/keep-file"}],
                "directories": [{"path": "/etc/b", "mode": 493}, {"path": "/etc/keep-dir"}],
                "links": [{"path": "/etc/c", "target": "/x"}]}})),
            v32(json!({"storage": {
                "directories": [{"path": "/etc/a"}],
                "links": [{"path": "/etc/b", "target": "/y"}],
                "files": [{"path": "/etc/c", "contents": {"source": "data:,c"}}]}})),
            v32(json!({"storage": {
                "files": [{"path": "/etc/keep-file"}, {"path": "/etc/c", "contents": {"source": "data:,c"}}],
                "directories": [{"path": "/etc/keep-dir"}, {"path": "/etc/a"}],
                "links": [{"path": "/etc/b", "target": "/y"}]}})),
        ),
        (
            "units and their dropins merge by name",
            v32(json!({"systemd": {"units": [
                {"name": "kubelet.service", "enabled": true, "contents": "[Unit]\nDescription=Kubelet\n",
                 "dropins": [{"name": "10-mco-default-env.conf", "contents": "[Service]\n"},
                             {"name": "20-logging.conf", "contents": "[Service]\nEnvironment=V=2\n"}]},
                {"name": "crio.service", "enabled": true}]}})),
            v32(json!({"systemd": {"units": [
                {"name": "kubelet.service", "enabled": false,
                 "dropins": [{"name": "20-logging.conf", "contents": "[Service]\nEnvironment=V=4\n"},
                             {"name": "30-extra.conf", "contents": "[Service]\n"}]},
                {"name": "agent.service", "mask": true}]}})),
            v32(json!({"systemd": {"units": [
                {"name": "kubelet.service", "enabled": false, "contents": "[Unit]\nDescription=Kubelet\n",
                 "dropins": [{"name": "10-mco-default-env.conf", "contents": "[Service]\n"},
                             {"name": "20-logging.conf", "contents": "[Service]\nEnvironment=V=4\n"},
                             {"name": "30-extra.conf", "contents": "[Service]\n"}]},
                {"name": "crio.service", "enabled": true},
                {"name": "agent.service", "mask": true}]}})),
        ),
        (
            "a child node removes the parent's node even without its own list in the parent",
            v32(json!({"storage": {"directories": [{"path": "/opt/x"}]}})),
            v32(json!({"storage": {"files": [{"path": "/opt/x"}]}})),
            v32(json!({"storage": {"directories": [], "files": [{"path": "/opt/x"}]}})),
        ),
        (
            "file append fragments are concatenated",
            v32(json!({"storage": {"files": [{"path": "/etc/motd", "append": [{"source": "data:,a"}]}]}})),
            v32(json!({"storage": {"files": [{"path": "/etc/motd", "append": [{"source": "data:,a"}, {"source": "data:,b"}]}]}})),
            v32(json!({"storage": {"files": [{"path": "/etc/motd",
                "append": [{"source": "data:,a"}, {"source": "data:,a"}, {"source": "data:,b"}]}]}})),
        ),
        (
            "users and groups by name; SSH keys and groups appended without duplicates",
            v32(json!({"passwd": {
                "users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA key-a", "ssh-rsa BBBB key-b"], "groups": ["wheel"]}],
                "groups": [{"name": "admins", "gid": 1001}]}})),
            v32(json!({"passwd": {
                "users": [
                    {"name": "core", "sshAuthorizedKeys": ["ssh-rsa BBBB key-b", "ssh-ed25519 CCCC key-c"], "groups": ["sudo", "wheel"],
                     "passwordHash": "$6$x"},
                    {"name": "operator", "sshAuthorizedKeys": ["ssh-ed25519 DDDD key-d"]}],
                "groups": [{"name": "admins", "gid": 1002}, {"name": "ops"}]}})),
            v32(json!({"passwd": {
                "users": [
                    {"name": "core",
                     "sshAuthorizedKeys": ["ssh-ed25519 AAAA key-a", "ssh-rsa BBBB key-b", "ssh-ed25519 CCCC key-c"],
                     "groups": ["wheel", "sudo"], "passwordHash": "$6$x"},
                    {"name": "operator", "sshAuthorizedKeys": ["ssh-ed25519 DDDD key-d"]}],
                "groups": [{"name": "admins", "gid": 1002}, {"name": "ops"}]}})),
        ),
        (
            "config merges and certificate authorities are keyed by source",
            v32(json!({"ignition": {"version": "3.2.0",
                "config": {"merge": [{"source": "https://a/config", "verification": {"hash": "sha512-aa"}}]},
                "security": {"tls": {"certificateAuthorities": [{"source": "data:,ca1"}]}}}})),
            v32(json!({"ignition": {"version": "3.2.0",
                "config": {"merge": [{"source": "https://a/config", "verification": {"hash": "sha512-bb"}}, {"source": "https://b/config"}]},
                "security": {"tls": {"certificateAuthorities": [{"source": "data:,ca2"}, {"source": "data:,ca1"}]}}}})),
            v32(json!({"ignition": {"version": "3.2.0",
                "config": {"merge": [{"source": "https://a/config", "verification": {"hash": "sha512-bb"}}, {"source": "https://b/config"}]},
                "security": {"tls": {"certificateAuthorities": [{"source": "data:,ca1"}, {"source": "data:,ca2"}]}}}})),
        ),
        (
            "HTTP headers are replaced, or removed when the child's has no value, by name",
            v32(json!({"storage": {"files": [{"path": "/a", "contents": {"source": "https://s/a", "httpHeaders": [
                {"name": "Authorization", "value": "Bearer old"}, {"name": "X-Drop", "value": "1"}, {"name": "X-Keep", "value": "k"}]}}]}})),
            v32(json!({"storage": {"files": [{"path": "/a", "contents": {"httpHeaders": [
                {"name": "Authorization", "value": "Bearer new"}, {"name": "X-Drop"}, {"name": "X-New", "value": "n"}]}}]}})),
            v32(json!({"storage": {"files": [{"path": "/a", "contents": {"source": "https://s/a", "httpHeaders": [
                {"name": "Authorization", "value": "Bearer new"}, {"name": "X-Keep", "value": "k"}, {"name": "X-New", "value": "n"}]}}]}})),
        ),
        (
            "kernel arguments are sets sharing one key space",
            v33(json!({"kernelArguments": {"shouldExist": ["a", "b=1"], "shouldNotExist": ["c", "d"]}})),
            v33(json!({"kernelArguments": {"shouldExist": ["c", "e", "a"], "shouldNotExist": ["b=1"]}})),
            v33(json!({"kernelArguments": {"shouldExist": ["a", "c", "e"], "shouldNotExist": ["d", "b=1"]}})),
        ),
        (
            "unknown lists are sets of values, or appended when they hold objects",
            v32(json!({"x-future": {"names": ["a", 1], "things": [{"id": 1}]}})),
            v32(json!({"x-future": {"names": ["1", "a", 1], "things": [{"id": 1}]}})),
            v32(json!({"x-future": {"names": ["a", 1, "1"], "things": [{"id": 1}, {"id": 1}]}})),
        ),
        (
            "entries without a key are kept apart",
            v32(json!({"storage": {"disks": [{"device": "/dev/sda", "partitions": [{"sizeMiB": 1}]}]}})),
            v32(json!({"storage": {"disks": [{"device": "/dev/sda", "partitions": [{"sizeMiB": 2}, {"number": 0, "label": "x"}]}]}})),
            v32(json!({"storage": {"disks": [{"device": "/dev/sda",
                "partitions": [{"sizeMiB": 1}, {"sizeMiB": 2}, {"number": 0, "label": "x"}]}]}})),
        ),
    ];
    for (rule, parent, child, expected) in cases {
        assert_eq!(merge(&parent, &child).unwrap(), expected, "{rule}");
    }
}

// ----- storage and systemd -----

#[test]
fn disks_partitions_raid_filesystems_luks() {
    let parent = v32(json!({"storage": {
        "disks": [{"device": "/dev/sda", "wipeTable": false, "partitions": [
            {"number": 4, "label": "root", "sizeMiB": 0},
            {"label": "var", "sizeMiB": 1000},
        ]}],
        "raid": [{"name": "md0", "level": "raid1", "devices": ["/dev/sda1", "/dev/sdb1"], "options": ["--metadata=1.0"]}],
        "filesystems": [{"device": "/dev/md0", "format": "xfs", "options": ["-m", "crc=1"], "mountOptions": ["ro"]}],
        "luks": [{"name": "root", "device": "/dev/sda4", "options": ["--cipher", "aes"],
                  "clevis": {"tang": [{"url": "http://t1", "thumbprint": "a"}]}}],
    }}));
    let child = v32(json!({"storage": {
        "disks": [
            {"device": "/dev/sda", "partitions": [
                {"number": 4, "resize": true},
                {"label": "var", "sizeMiB": 2000},
                {"number": 5, "label": "data"},
            ]},
            {"device": "/dev/sdb", "wipeTable": true},
        ],
        "raid": [{"name": "md0", "devices": ["/dev/sdb1", "/dev/sdc1"], "options": ["--force"]}],
        "filesystems": [{"device": "/dev/md0", "options": ["-m", "crc=1"], "mountOptions": ["noatime"]}],
        "luks": [{"name": "root", "options": ["--pbkdf", "pbkdf2"],
                  "clevis": {"tang": [{"url": "http://t1", "thumbprint": "b"}, {"url": "http://t2"}]}}],
    }}));
    assert_eq!(
        merge(&parent, &child).unwrap()["storage"],
        json!({
            "disks": [
                {"device": "/dev/sda", "wipeTable": false, "partitions": [
                    {"number": 4, "label": "root", "sizeMiB": 0, "resize": true},
                    {"label": "var", "sizeMiB": 2000},
                    {"number": 5, "label": "data"},
                ]},
                {"device": "/dev/sdb", "wipeTable": true},
            ],
            "raid": [{"name": "md0", "level": "raid1", "devices": ["/dev/sda1", "/dev/sdb1", "/dev/sdc1"],
                      "options": ["--metadata=1.0", "--force"]}],
            "filesystems": [{"device": "/dev/md0", "format": "xfs", "options": ["-m", "crc=1", "-m", "crc=1"],
                             "mountOptions": ["ro", "noatime"]}],
            "luks": [{"name": "root", "device": "/dev/sda4", "options": ["--cipher", "aes", "--pbkdf", "pbkdf2"],
                      "clevis": {"tang": [{"url": "http://t1", "thumbprint": "b"}, {"url": "http://t2"}]}}],
        })
    );
}

// ----- duplicates -----

#[test]
fn duplicate_keys_in_the_result_are_errors() {
    let empty = v32(json!({}));
    for (child, expected) in [
        (
            v32(
                json!({"storage": {"files": [{"path": "/a"}], "links": [{"path": "/a", "target": "/b"}]}}),
            ),
            "storage.files/directories/links has two entries with the key /a",
        ),
        (
            v32(json!({"systemd": {"units": [{"name": "a.service"}, {"name": "a.service"}]}})),
            "systemd.units has two entries with the key a.service",
        ),
        (
            v32(json!({"passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["k", "k"]}]}})),
            "passwd.users[].sshAuthorizedKeys has two entries with the key \"k\"",
        ),
        (
            v32(
                json!({"systemd": {"units": [{"name": "a.service", "dropins": [{"name": "x.conf"}, {"name": "x.conf"}]}]}}),
            ),
            "systemd.units[].dropins has two entries with the key x.conf",
        ),
        (
            config(
                "3.3.0",
                json!({"kernelArguments": {"shouldExist": ["a"], "shouldNotExist": ["a"]}}),
            ),
            "kernelArguments.shouldExist/shouldNotExist has two entries",
        ),
    ] {
        let err = merge(&empty, &child).unwrap_err();
        assert!(
            format!("{err:#}").contains(expected),
            "{err:#}\nexpected: {expected}"
        );
    }
    // Appended lists may repeat values.
    let options =
        v32(json!({"storage": {"filesystems": [{"device": "/dev/a", "options": ["-f", "-f"]}]}}));
    merge(&empty, &options).unwrap();
}

// ----- pointers and the SNO flow -----

#[test]
fn clearing_pointers_blanks_merge_and_replace_only() {
    // The merge pointer and the CA beside it: host_overrides_survive_the_sno_merge.
    let replace =
        json!({"ignition": {"version": "3.1.0", "config": {"replace": {"source": "https://x/c"}}}});
    for (mut config, expected) in [
        (replace, json!({"ignition": {"version": "3.1.0"}})),
        // Nothing to clear is fine.
        (json!({"storage": {}}), json!({"storage": {}})),
        (json!({"ignition": "x"}), json!({"ignition": "x"})),
    ] {
        clear_config_pointers(&mut config);
        assert_eq!(config, expected);
    }
}

/// What bootkube leaves in /opt/openshift/master.ign on a single node (trimmed).
fn sno_master_ign() -> Value {
    json!({
        "ignition": {"version": "3.2.0"},
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3Nz install-config-key"]}]},
        "storage": {"files": [
            {"path": "/etc/kubernetes/kubelet.conf", "mode": 420, "overwrite": true, "contents": {"source": "data:,kind%3A%20KubeletConfiguration%0A"}},
            {"path": "/etc/hostname", "mode": 420, "overwrite": true, "contents": {"source": "data:,localhost%0A"}},
            {"path": "/etc/mco/proxy.env", "mode": 420, "overwrite": true, "contents": {"source": "data:,"}},
        ]},
        "systemd": {"units": [
            {"name": "kubelet.service", "enabled": true, "contents": "[Unit]\nDescription=Kubernetes Kubelet\n"},
            {"name": "crio.service", "dropins": [{"name": "10-mco-default-madv.conf", "contents": "[Service]\n"}]},
        ]},
    })
}

/// The host ignition the assisted-service serves: a pointer to the MCS plus host specifics.
fn assisted_host_ign() -> Value {
    json!({
        "ignition": {"version": "3.1.0",
            "config": {"merge": [{"source": "https://api-int.sno.example.com:22623/config/master"}]},
            "security": {"tls": {"certificateAuthorities": [{"source": "data:text/plain;charset=utf-8;base64,LS0tLS1CRUdJTg=="}]}}},
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3Nz install-config-key", "ssh-ed25519 AAAAC3Nz debug-key"]}]},
        "storage": {"files": [
            {"path": "/etc/hostname", "mode": 420, "overwrite": true, "contents": {"source": "data:,sno-master-0.example.com"}},
            {"path": "/etc/NetworkManager/system-connections/ens3.nmconnection", "mode": 384, "overwrite": true,
             "contents": {"source": "data:text/plain;charset=utf-8;base64,W2Nvbm5lY3Rpb25dCmlkPWVuczMK"}},
        ]},
        "systemd": {"units": [{"name": "crio.service", "dropins": [{"name": "20-proxy.conf", "contents": "[Service]\n"}]}]},
    })
}

#[test]
fn host_overrides_survive_the_sno_merge() {
    // The SNO config's own pointers are kept; only the host config's are blanked.
    let mut sno = sno_master_ign();
    sno["ignition"]["config"] = json!({"merge": [{"source": "data:,%7B%7D"}]});
    let sno = serde_json::to_vec(&sno).unwrap();
    let host = serde_json::to_vec_pretty(&assisted_host_ign()).unwrap();
    let merged_bytes = merge_host_into_sno(&sno, &host).unwrap();
    // Compact JSON that is itself a valid config.
    assert!(!merged_bytes.contains(&b'\n'));
    let merged = crate::ignition::config::parse(&merged_bytes).unwrap();

    // The SNO config with the host's changes: the host's MCS pointer is gone, its CA stays
    // (only ignition.config is blanked, as in Go), its hostname wins, its keyfile, SSH key and
    // dropin are added.
    let host = assisted_host_ign();
    let mut expected = serde_json::from_slice::<Value>(&sno).unwrap();
    expected["ignition"]["security"] = host["ignition"]["security"].clone();
    expected["passwd"] = host["passwd"].clone();
    let files = &mut expected["storage"]["files"];
    files[1]["contents"]["source"] = json!("data:,sno-master-0.example.com");
    files
        .as_array_mut()
        .unwrap()
        .push(host["storage"]["files"][1].clone());
    let dropins = &mut expected["systemd"]["units"][1]["dropins"];
    dropins
        .as_array_mut()
        .unwrap()
        .push(host["systemd"]["units"][0]["dropins"][0].clone());
    assert_eq!(merged, expected);
}

#[test]
fn sno_merge_errors_name_the_config() {
    let good = serde_json::to_vec(&sno_master_ign()).unwrap();
    let err = merge_host_into_sno(b"{}", &good).unwrap_err();
    assert!(
        format!("{err:#}").starts_with("cannot parse the SNO master ignition"),
        "{err:#}"
    );
    let err = merge_host_into_sno(&good, b"[]").unwrap_err();
    assert!(
        format!("{err:#}").starts_with("cannot parse the host ignition"),
        "{err:#}"
    );
    let err = merge_host_into_sno(&good, br#"{"ignition":{"version":"2.2.0"}}"#).unwrap_err();
    assert!(
        format!("{err:#}").starts_with(
            "cannot merge the host ignition into the SNO master ignition: child ignition config: \
             ignition config has spec version \"2.2.0\""
        ),
        "{err:#}"
    );
}

#[test]
fn merging_is_idempotent_for_the_same_child() {
    let once = merge(&sno_master_ign(), &assisted_host_ign()).unwrap();
    let twice = merge(&once, &assisted_host_ign()).unwrap();
    assert_eq!(once, twice);
}
