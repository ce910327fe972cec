#![allow(dead_code)]
//! A `newc` cpio writer, the format the kernel unpacks into its initial root, and the copying
//! of host programs into such an archive together with the shared libraries they load, each at
//! its host path, so that the same absolute paths work in the guest.
//!
//! Used by the boot fixture (testdata/boot_parts.rs, which re-exports [`Cpio`]), the guest
//! fixture built on it (testdata/guest_parts.rs) and the QEMU guest rig
//! (tests/common/vm.rs). The rig cannot reach the test data modules (tests/common is
//! built into every test binary, most without them), so it includes this file as a module of
//! its own; it depends on nothing but std and anyhow for that reason.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

const S_IFMT: u32 = 0o170000;
const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;

/// A `newc` cpio archive being written.
pub(crate) struct Cpio {
    out: Vec<u8>,
    ino: u32,
    /// Every name written so far (relative, as written) and its mode.
    names: HashMap<String, u32>,
}

impl Cpio {
    pub(crate) fn new() -> Self {
        Cpio {
            out: Vec::new(),
            ino: 1,
            names: HashMap::new(),
        }
    }

    /// One entry: `name` is relative to the archive's root (`bin/busybox`); `mode` holds the
    /// file type bits; `rdev` is a device node's (major, minor).
    pub(crate) fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() + 1,
            0
        );
        self.ino += 1;
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
        self.names.insert(name.to_string(), mode);
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    pub(crate) fn dir(&mut self, name: &str) {
        self.entry(name, S_IFDIR | 0o755, (0, 0), &[]);
    }

    pub(crate) fn file(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.entry(name, S_IFREG | mode, (0, 0), data);
    }

    pub(crate) fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, S_IFLNK | 0o777, (0, 0), target.as_bytes());
    }

    /// Whether `name` (relative) was written.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.names.contains_key(name)
    }

    fn is_dir(&self, name: &str) -> bool {
        self.names.get(name).is_some_and(|m| m & S_IFMT == S_IFDIR)
    }

    /// Directory entries for every ancestor of `name` (relative) not written yet: the kernel
    /// creates a file only in a directory that exists.
    pub(crate) fn parents(&mut self, name: &str) {
        let mut at = String::new();
        let parts: Vec<&str> = name.split('/').filter(|p| !p.is_empty()).collect();
        for part in parts.iter().take(parts.len().saturating_sub(1)) {
            if !at.is_empty() {
                at.push('/');
            }
            at.push_str(part);
            if !self.has(&at) {
                self.dir(&at);
            }
        }
    }

    /// The file `data` at `name` (relative or absolute), with its parent directories.
    pub(crate) fn file_at(&mut self, name: &str, mode: u32, data: &[u8]) {
        let name = name.trim_start_matches('/');
        self.parents(name);
        self.file(name, mode, data);
    }

    /// The host file `path` (absolute) at the same path in the archive. Symbolic links on the
    /// way are written as links with their host targets (a merged /usr's `/lib -> usr/lib`,
    /// `/lib64/ld-linux-x86-64.so.2 -> /lib/x86_64-linux-gnu/...`) and followed, so the path
    /// resolves in the guest as on the host. A name the archive already has as a directory
    /// stays one. Files already written are not written again.
    pub(crate) fn host_file(&mut self, path: &Path) -> Result<()> {
        if !path.is_absolute() {
            bail!("{} is not an absolute path", path.display());
        }
        let mut rest: Vec<String> = normal_components(path)?;
        rest.reverse();
        let mut at = PathBuf::new();
        let mut links = 0;
        while let Some(part) = rest.pop() {
            if part == ".." {
                at.pop();
                continue;
            }
            let next = at.join(&part);
            let name = next
                .to_str()
                .ok_or_else(|| anyhow!("{} is not UTF-8", next.display()))?
                .to_string();
            let host = Path::new("/").join(&next);
            let meta = fs::symlink_metadata(&host)
                .with_context(|| format!("{} (for {})", host.display(), path.display()))?;
            if meta.file_type().is_symlink() && !self.is_dir(&name) {
                let target = fs::read_link(&host)?;
                let target_text = target
                    .to_str()
                    .ok_or_else(|| anyhow!("{} is not UTF-8", target.display()))?;
                if !self.has(&name) {
                    self.symlink(&name, target_text);
                }
                links += 1;
                if links > 40 {
                    bail!("too many symbolic links resolving {}", path.display());
                }
                if target.is_absolute() {
                    at = PathBuf::new();
                }
                let mut more = normal_components(&target)?;
                more.reverse();
                rest.extend(more);
                continue;
            }
            if rest.is_empty() {
                if !meta.is_file() {
                    bail!("{} is not a regular file", host.display());
                }
                if !self.has(&name) {
                    let data = fs::read(&host).with_context(|| format!("{}", host.display()))?;
                    self.file(&name, meta.permissions().mode() & 0o7777, &data);
                }
            } else {
                if !meta.is_dir() {
                    bail!("{} is not a directory", host.display());
                }
                if !self.has(&name) {
                    self.dir(&name);
                }
                at = next;
            }
        }
        Ok(())
    }

    /// The host program `path` and every shared library it loads (see [`libraries`]), each at
    /// its host path.
    pub(crate) fn host_program(&mut self, path: &Path) -> Result<()> {
        self.host_file(path)?;
        for lib in libraries(path)? {
            self.host_file(&lib)?;
        }
        Ok(())
    }

    /// The archive, ended by its trailer.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.out
    }
}

/// The path's components as strings, `..` kept, the root and `.` dropped.
fn normal_components(path: &Path) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(s) => out.push(
                s.to_str()
                    .ok_or_else(|| anyhow!("{} is not UTF-8", path.display()))?
                    .to_string(),
            ),
            Component::ParentDir => out.push("..".to_string()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}

/// The shared libraries `program` loads, the dynamic loader included, as `ldd` resolves them
/// on this host; empty for a static program.
pub(crate) fn libraries(program: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(program)
        .output()
        .context("running ldd (libc-bin)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        if text.contains("not a dynamic executable") || stderr.contains("not a dynamic executable")
        {
            return Ok(Vec::new());
        }
        bail!("ldd {} failed: {}{}", program.display(), text, stderr);
    }
    parse_ldd(&text).with_context(|| format!("ldd {}", program.display()))
}

/// The paths in `ldd`'s output: `libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)` and
/// the loader's `/lib64/ld-linux-x86-64.so.2 (0x...)`; the kernel's vDSO has no file.
pub(crate) fn parse_ldd(text: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let target = match line.split_once("=>") {
            Some((name, target)) => {
                let target = target.trim();
                if target.starts_with("not found") {
                    bail!("{} is not found on this host", name.trim());
                }
                target
            }
            None => line,
        };
        let path = target.split(" (").next().unwrap_or("").trim();
        if path.starts_with('/') {
            out.push(PathBuf::from(path));
        }
    }
    Ok(out)
}
