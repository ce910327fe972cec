//! The runner of the controller's commands, which all run the OpenShift client `oc` (directly,
//! or through `bash` as Go's do: the reboot count, must-gather and its tarball, the OLM
//! manifests). The image built offline (`make image`) has no `oc`, since nothing can be
//! downloaded there: in it each of those steps fails with a message that says so, not with
//! bash's "command not found".

use std::sync::Arc;

use crate::host::commands::{CommandRunner, ExecError};

/// Why a step that needs `oc` cannot run in this image.
const NO_OC: &str = "the OpenShift client `oc` is not on PATH: this image was built offline \
    (`make image`), which cannot download it; build it with `make image-upstream` (or install \
    `oc` in /usr/bin) for the controller's reboot count, must-gather and OLM manifests";

/// Runs the controller's `oc` commands through `inner`, or refuses them all when there is no
/// `oc` to run.
pub(crate) struct OcRunner {
    inner: Arc<dyn CommandRunner>,
    has_oc: bool,
}

impl OcRunner {
    /// `has_oc`: whether `oc` is on PATH (looked up once, at start).
    pub(crate) fn new(inner: Arc<dyn CommandRunner>, has_oc: bool) -> OcRunner {
        if !has_oc {
            tracing::warn!("{NO_OC}");
        }
        OcRunner { inner, has_oc }
    }
}

impl CommandRunner for OcRunner {
    fn run_streaming(
        &self,
        program: &str,
        args: &[&str],
        sink: &mut dyn FnMut(&[u8]),
    ) -> Result<String, ExecError> {
        if self.has_oc {
            return self.inner.run_streaming(program, args, sink);
        }
        Err(ExecError::new(program, args, NO_OC, None, ""))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::commands::RecordingRunner;

    #[test]
    fn without_oc_every_command_fails_saying_so_and_none_runs() {
        let recorder = Arc::new(RecordingRunner::new());
        recorder.ok("oc version", "4.17");
        let without = OcRunner::new(recorder.clone(), false);
        let e = without
            .run("bash", &["-c", "oc adm must-gather"])
            .unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with("failed executing bash [-c oc adm must-gather], Error the OpenShift client `oc` is not on PATH"), "{text}");
        assert!(text.contains("make image-upstream"), "{text}");
        assert!(recorder.calls().is_empty());
        let with = OcRunner::new(recorder.clone(), true);
        assert_eq!(with.run("oc", &["version"]).unwrap(), "4.17");
        assert_eq!(recorder.calls().len(), 1);
    }
}
