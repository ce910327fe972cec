//! The service token: the Secret mounted as a file, with the environment's
//! `PULL_SECRET_TOKEN` only when that file does not exist.
//!
//! - A file that exists but cannot be read is an error (Go: fatal).
//! - The result is trimmed of surrounding whitespace; an existing file that is empty (or only
//!   whitespace) gives an empty token, without the environment fallback.

use anyhow::{Context, Result};
use std::io::ErrorKind;
use std::path::Path;

/// Where the Job mounts the Secret's `pull-secret-token` item.
pub const TOKEN_PATH: &str = "/etc/assisted-installer-controller/token";

/// The token from `path`, or `env_fallback` (unset: empty) when `path` does not exist.
pub fn read_token(path: &Path, env_fallback: Option<&str>) -> Result<String> {
    let raw = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == ErrorKind::NotFound => env_fallback.unwrap_or_default().to_string(),
        Err(e) => {
            return Err(e).with_context(|| format!("reading the token file {}", path.display()))
        }
    };
    Ok(raw.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_wins_and_is_trimmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "  from-file\n").unwrap();
        assert_eq!(read_token(&path, Some("from-env")).unwrap(), "from-file");
    }

    #[test]
    fn the_environment_only_when_the_file_does_not_exist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        assert_eq!(read_token(&path, Some(" from-env\n")).unwrap(), "from-env");
        assert_eq!(read_token(&path, None).unwrap(), "");
        std::fs::write(&path, " \n\t").unwrap();
        assert_eq!(
            read_token(&path, Some("from-env")).unwrap(),
            "",
            "an empty file gives an empty token, no fallback"
        );
    }

    #[test]
    fn an_unreadable_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        // A directory exists but cannot be read as a file (whoever runs the test).
        let e = read_token(dir.path(), Some("from-env")).unwrap_err();
        let text = format!("{e:#}");
        assert!(text.starts_with("reading the token file "), "{text}");
        assert!(text.contains(&dir.path().display().to_string()), "{text}");
    }
}
