//! Test doubles of the kexec boundaries: a loader that records what it was handed or refuses
//! with an errno, and an installed-system loader reading a directory that stands for /boot.

use anyhow::Result;
use std::ffi::CStr;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::{load_from_boot, InstalledLoader, KexecLoader, Loaded};

/// What one load was handed: the files' contents and the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadCall {
    pub kernel: Vec<u8>,
    pub initrd: Option<Vec<u8>>,
    pub cmdline: String,
}

/// Records each load; refuses every one with `refuse` (an errno) when set.
#[derive(Default)]
pub struct RecordingLoader {
    pub refuse: Option<i32>,
    calls: Mutex<Vec<LoadCall>>,
}

impl RecordingLoader {
    pub fn refusing(errno: i32) -> Self {
        RecordingLoader {
            refuse: Some(errno),
            ..Self::default()
        }
    }

    pub fn calls(&self) -> Vec<LoadCall> {
        self.calls.lock().unwrap().clone()
    }
}

fn contents(mut file: &File) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

impl KexecLoader for RecordingLoader {
    fn load(&self, kernel: &File, initrd: Option<&File>, cmdline: &CStr) -> io::Result<()> {
        self.calls.lock().unwrap().push(LoadCall {
            kernel: contents(kernel)?,
            initrd: initrd.map(contents).transpose()?,
            cmdline: cmdline.to_string_lossy().into_owned(),
        });
        match self.refuse {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }
}

/// Loads from `root`, a directory laid out as /boot, whatever the device; records the
/// devices asked for.
pub struct FromBootDir {
    pub root: PathBuf,
    pub loader: Arc<RecordingLoader>,
    devices: Mutex<Vec<PathBuf>>,
}

impl FromBootDir {
    pub fn new(root: &Path, loader: Arc<RecordingLoader>) -> Self {
        FromBootDir {
            root: root.to_path_buf(),
            loader,
            devices: Mutex::default(),
        }
    }

    pub fn devices(&self) -> Vec<PathBuf> {
        self.devices.lock().unwrap().clone()
    }
}

impl InstalledLoader for FromBootDir {
    fn load(&self, device: &Path) -> Result<Loaded> {
        self.devices.lock().unwrap().push(device.to_path_buf());
        load_from_boot(&self.root, self.loader.as_ref())
    }
}

/// A /boot as CoreOS writes it, under `root`: one BLS entry whose options start with
/// `$ignition_firstboot`, its kernel and initramfs, and `ignition.firstboot` setting
/// `network` (none: the file is absent, as after the first boot).
pub fn coreos_boot(root: &Path, network: Option<&str>) {
    let dir = root.join("ostree/rhcos-1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(root.join("loader/entries")).unwrap();
    std::fs::write(dir.join("vmlinuz"), b"kernel image").unwrap();
    std::fs::write(dir.join("initramfs.img"), vec![7u8; 3 << 19]).unwrap();
    std::fs::write(
        root.join("loader/entries/ostree-1-rhcos.conf"),
        "title RHCOS\nversion 1\nlinux /ostree/rhcos-1/vmlinuz\ninitrd /ostree/rhcos-1/initramfs.img\n\
         options $ignition_firstboot ostree=/ostree/boot.1/rhcos/1/0 console=ttyS0\n",
    )
    .unwrap();
    if let Some(network) = network {
        std::fs::write(
            root.join("ignition.firstboot"),
            format!("# Remove this file to rerun Ignition\nset ignition_network_kcmdline=\"{network}\"\n"),
        )
        .unwrap();
    }
}
