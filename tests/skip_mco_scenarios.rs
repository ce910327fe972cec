//! `--enable-skip-mco-reboot` in the master and worker flows, against the in-memory fake
//! assisted-service, with recorded host commands, a fake clock and a scripted disk writer: the
//! machine-config-server over https with a CA of its own (and with another CA), over http, and
//! a stop while it never answers.
//! The deploy's host commands are compared command by command with Go's `OverwriteOsImage`.

mod common;

use anyhow::Result;
use assisted_installer::flow::node::run_installer;
use assisted_installer::flow::testing::{FlowBuilder, HOST};
use assisted_installer::image::Cancel;
use base64::Engine;
use common::flow_builder::{installed_as, s, two_masters, Harness, LSBLK_VDA};
use common::http_server::{Fault, Reply, Request, Route, TestServer};
use common::tls_server::Pki;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const IMAGE: &str = "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:5e1f";
const ACCEPT: &str = "application/vnd.coreos.ignition+json; version=3.4.0";
const TWENTY_MINUTES: Duration = Duration::from_secs(20 * 60);

fn base64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// What the MCS serves: a config holding the pull secret and the encapsulated MachineConfig.
fn served_config(kargs: &[&str]) -> Vec<u8> {
    let mc = serde_json::json!({
        "apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig",
        "metadata": {"name": "rendered-master-0123"},
        "spec": {"osImageURL": IMAGE, "kernelArguments": kargs}
    });
    let mc = serde_json::to_vec(&mc).unwrap();
    serde_json::to_vec(&serde_json::json!({
        "ignition": {"version": "3.4.0"},
        "storage": {"files": [
            {"path": "/var/lib/kubelet/config.json",
             "contents": {"source": "data:,%7B%22auths%22%3A%7B%7D%7D"}},
            {"path": "/etc/ignition-machine-config-encapsulated.json",
             "contents": {"source": format!("data:;base64,{}", base64(&mc))}}
        ]}
    }))
    .unwrap()
}

/// A machine-config-server over HTTPS with `pki`'s certificate, serving the config on every path.
fn https_mcs(pki: &Pki, kargs: &[&str]) -> TestServer {
    let config = served_config(kargs);
    let app = move |_: &Request| Reply {
        content_type: Some("application/json"),
        body: config.clone(),
        ..Reply::empty(200)
    };
    TestServer::with_app_tls(app, &pki.cert, &pki.key)
}

/// The host's pointer Ignition config, as the service makes it.
fn pointer(source: &str, ca_pem: Option<&str>) -> String {
    let mut ign = serde_json::json!({
        "ignition": {
            "version": "3.2.0",
            "config": {"merge": [{"source": source,
                "httpHeaders": [{"name": "Authorization", "value": "Bearer s3cret-header"}]}]}
        }
    });
    if let Some(pem) = ca_pem {
        ign["ignition"]["security"] = serde_json::json!({"tls": {"certificateAuthorities": [
            {"source": format!("data:text/plain;charset=utf-8;base64,{}", base64(pem.as_bytes()))}
        ]}});
    }
    ign.to_string()
}

/// The deploy on /dev/vda (`partx` to the last `umount`, 14 commands as deploy's
/// the_go_sequence_on_each_kind_of_disk checks them) with Go's `ostree` run tenth, carrying the
/// live platform, the `--installer-args` karg and the MachineConfig's.
fn assert_deployed(deploy: &[String], mc_kargs: &[&str]) {
    let mut ostree = format!(
        "ostree container image deploy --sysroot /mnt --authfile /root/.docker/config.json \
         --imgref ostree-unverified-registry:{IMAGE} --karg ignition.platform.id=openstack \
         --karg $ignition_firstboot --stateroot rhcos --karg nameserver=8.8.8.8"
    );
    for k in mc_kargs {
        ostree.push_str(&format!(" --karg {k}"));
    }
    let got = (deploy.len(), deploy[0].as_str(), deploy[9].as_str());
    assert_eq!(
        got,
        (14, "partx --update /dev/vda", ostree.as_str()),
        "{deploy:#?}"
    );
}

/// A host of `role` whose live kernel command line names the openstack platform.
fn harness(role: &str) -> Harness {
    let h = Harness::new(role, &["--append-karg", "nameserver=8.8.8.8"]);
    h.runner.ok("lsblk --bytes --json /dev/vda", LSBLK_VDA);
    std::fs::write(
        h.path("cmdline"),
        "BOOT_IMAGE=/images/pxeboot/vmlinuz coreos.liveiso=rhcos-416 ignition.firstboot ignition.platform.id=openstack\n",
    )
    .unwrap();
    h
}

fn flow(h: &Harness, role: &str) -> FlowBuilder {
    h.flow(role).cfg(|c| c.enable_skip_mco_reboot = true)
}

/// The commands of the skip-MCO step (from `partx` to the last `umount`), checked to come
/// after the disk cleanup and before the boot order.
fn deploy_commands(h: &Harness) -> Vec<String> {
    let lines = h.runner.lines();
    let Some(start) = lines.iter().position(|l| l.starts_with("partx ")) else {
        return Vec::new();
    };
    let end = lines
        .iter()
        .rposition(|l| l.starts_with("umount "))
        .unwrap();
    let wipefs = lines.iter().position(|l| l.starts_with("wipefs ")).unwrap();
    let boot_order = lines.iter().position(|l| l == "test -f /usr/sbin/bootlist");
    assert!(wipefs < start && end < boot_order.unwrap(), "{lines:#?}");
    lines[start..=end].to_vec()
}

/// The host's pointer config names `source` (no CA of its own).
fn pointer_to(h: &Harness, source: &str) {
    h.svc.set_host_ignition(HOST, pointer(source, None));
}

/// Runs the flow of `role`, its logs captured.
fn run(h: &Harness, role: &str) -> (Result<()>, String) {
    run_logged(flow(h, role))
}

/// Runs the flow with its logs captured.
fn run_logged(flow: FlowBuilder) -> (Result<()>, String) {
    let (subscriber, logs) = common::log_capture(tracing::Level::DEBUG);
    let result = tracing::subscriber::with_default(subscriber, || run_installer(&flow.build()));
    (result, logs())
}

#[test]
fn https_with_its_own_ca_deploys_the_release_image_fetched_while_the_disk_is_written() {
    let h = harness("master");
    let pki = Pki::new(h.dir.path(), "mcs");
    let mcs = Arc::new(https_mcs(&pki, &["arg1", "arg2=val2"]));
    let source = format!(
        "https://core:s3cret-pass@127.0.0.1:{}/config/master?token=s3cret-token",
        mcs.addr().port()
    );
    h.svc
        .set_host_ignition(HOST, pointer(&source, Some(&pki.ca_pem)));
    // Before the write, wait (up to 10 s) for the fetch to be under way.
    let (watched, saw) = (mcs.clone(), Arc::new(AtomicBool::new(false)));
    let seen = saw.clone();
    *h.writer.before_write.lock().unwrap() = Some(Box::new(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        while watched.requests().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        seen.store(!watched.requests().is_empty(), Ordering::SeqCst);
    }));
    let (result, logs) = run(&h, "master");
    result.unwrap();
    let saw = saw.load(Ordering::SeqCst);
    assert!(saw, "the MCS was asked while the disk was written");
    assert_deployed(&deploy_commands(&h), &["arg1", "arg2=val2"]);
    assert_eq!(h.reports(), installed_as("master"));
    let requests = mcs.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    let r = &requests[0];
    let (method, path, query) = (r.method.as_str(), r.path.as_str(), r.query.as_str());
    assert_eq!(
        (method, path, query),
        ("GET", "/config/master", "token=s3cret-token")
    );
    // The Ignition Accept header, and no User-Agent (the MCS log would take it for Ignition's).
    assert_eq!(
        (r.header("Accept"), r.header("User-Agent")),
        (Some(ACCEPT), None)
    );
    assert!(
        h.clock.sleeps().is_empty(),
        "nothing waited: {:?}",
        h.clock.sleeps()
    );
    // The source is logged without its credentials; the pointer's headers never.
    assert!(logs.contains(&mcs.url("/config/master")), "{logs}");
    assert!(!logs.contains("s3cret"), "{logs}");
}

#[test]
fn https_with_another_ca_is_given_up_after_twenty_minutes_and_the_install_goes_on() {
    let h = harness("master");
    let pki = Pki::new(h.dir.path(), "mcs");
    let other = Pki::new(h.dir.path(), "other");
    let mcs = https_mcs(&pki, &[]);
    h.svc.set_host_ignition(
        HOST,
        pointer(&mcs.url("/config/master"), Some(&other.ca_pem)),
    );
    let (result, logs) = run(&h, "master");
    result.unwrap();
    assert_eq!(h.reports(), installed_as("master"));
    assert!(mcs.requests().is_empty(), "no request got past TLS");
    assert!(deploy_commands(&h).is_empty(), "{:?}", h.runner.lines());
    assert!(h.clock.elapsed() >= TWENTY_MINUTES);
    assert!(
        logs.contains("failed getting encapsulated machine config")
            && logs.contains("Continuing installation without skipping MCO reboot"),
        "{logs}"
    );
    assert!(
        logs.contains("certificate"),
        "the TLS error is told: {logs}"
    );
}

#[test]
fn over_http_a_worker_deploys_after_its_wait() {
    let h = harness("worker");
    let srv = TestServer::start();
    srv.route("/config/worker", Route::bytes(served_config(&["a=1"])));
    pointer_to(&h, &srv.url("/config/worker"));
    // Two masters are Done at the third poll; until then no deploy command may have run.
    let runner = h.runner.clone();
    let early_deploy = Arc::new(AtomicBool::new(false));
    let seen = early_deploy.clone();
    h.svc.set_hosts_script(move |poll| {
        if runner.lines().iter().any(|l| l.starts_with("partx ")) {
            seen.store(true, Ordering::SeqCst);
        }
        let stage = if poll >= 3 { "Done" } else { "Rebooting" };
        two_masters(stage)
    });
    run(&h, "worker").0.unwrap();
    assert!(
        !early_deploy.load(Ordering::SeqCst),
        "deployed before the wait ended"
    );
    assert_deployed(&deploy_commands(&h), &["a=1"]);
    let requests = srv.requests_for("/config/worker");
    assert_eq!(requests.len(), 1);
    assert!(h.reports().contains(&s("Waiting for control plane", "")));
    assert_eq!(h.reports().last().unwrap(), &s("Rebooting", ""));
}

#[test]
fn a_stop_while_waiting_for_the_mcs_fails_the_install() {
    let h = harness("master");
    // A machine-config-server answering 503 to every request.
    let mcs = TestServer::start();
    let unavailable = Route::bytes(Vec::new()).with_sticky(vec![Fault::Status(503)]);
    mcs.route("/config/master", unavailable);
    pointer_to(&h, &mcs.url("/config/master"));
    let stop = Cancel::new();
    let fire = stop.clone();
    *h.writer.before_write.lock().unwrap() = Some(Box::new(move || fire.cancel()));
    let flow = flow(&h, "master").stop(stop);
    run_logged(flow).0.unwrap_err();
    assert_eq!(
        h.reports().last().unwrap(),
        &s("Failed", "skip-MCO reboot: stop requested")
    );
    assert!(deploy_commands(&h).is_empty());
    assert!(!h.runner.lines().iter().any(|l| l.starts_with("shutdown")));
}
