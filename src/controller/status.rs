//! Shared state of the controller's tasks (`ControllerStatus`): an error counter and the set of operators
//! that ended in error. Post-install and the completion wait count errors, the OLM wait names
//! the operators it gave up on, and the log upload reads both (must-gather or not, which image).
//! Shared between threads behind an `Arc`.

use std::collections::BTreeSet;
use std::sync::Mutex;

#[derive(Debug, Default)]
pub(crate) struct ControllerStatus {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    errors: u64,
    operators_in_error: BTreeSet<String>,
}

impl ControllerStatus {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // The state stays consistent whatever panicked while holding the lock.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts one error (Go `Error()`).
    pub(crate) fn error(&self) {
        self.lock().errors += 1;
    }

    /// Whether any error was counted.
    pub(crate) fn has_error(&self) -> bool {
        self.lock().errors > 0
    }

    /// Adds `name` to the operators in error (Go `OperatorError`).
    pub(crate) fn operator_error(&self, name: &str) {
        self.lock().operators_in_error.insert(name.to_string());
    }

    pub(crate) fn has_operator_error(&self) -> bool {
        !self.lock().operators_in_error.is_empty()
    }

    /// The operators in error, sorted (Go returns them in map order).
    pub(crate) fn operators_in_error(&self) -> Vec<String> {
        self.lock().operators_in_error.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_and_operators_are_independent() {
        let s = ControllerStatus::default();
        assert!(!s.has_error() && !s.has_operator_error());
        assert!(s.operators_in_error().is_empty());
        s.operator_error("lso");
        assert!(s.has_operator_error());
        assert!(!s.has_error(), "an operator error is not an error");
        s.error();
        assert!(s.has_error());
        s.operator_error("cnv");
        s.operator_error("lso");
        assert_eq!(s.operators_in_error(), ["cnv", "lso"]);
    }
}
