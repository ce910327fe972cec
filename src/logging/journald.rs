//! Log entries to journald, as the Go installer sends them: the agent's logs_sender collects
//! journal entries by `TAG=installer`, so this is how our logs reach the bundle uploaded to
//! the assisted-service. Native protocol over the datagram socket (the installer container
//! mounts /run/systemd/journal/socket); no socket, no journald logging. Never fatal.
//!
//! Written by hand rather than with `tracing-journald`: logs_sender's bundle shows the journal's
//! `MESSAGE` only, and ours carries the event's fields in it (`cleaning failed device=/dev/sda`)
//! as the text logs do; `tracing-journald` sends each field as a journal field of its own (so
//! they would vanish from the bundle), maps INFO to priority 5 instead of 6, and only talks to
//! the fixed socket path, so it cannot be tested against a local socket.
//!
//! An entry larger than one datagram (journald's limit is the socket's send buffer) goes the
//! way journald's own client sends it: written to a sealed memfd whose descriptor is passed
//! with `SCM_RIGHTS`.

use nix::fcntl::{fcntl, FcntlArg, SealFlag};
use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags, UnixAddr};
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

pub(crate) const SOCKET: &str = "/run/systemd/journal/socket";

pub(crate) struct JournaldLayer {
    socket: UnixDatagram,
    path: PathBuf,
    /// Extra fields on every entry (`TAG=installer`, and `DRY_AGENT_ID` in dry-run mode).
    fields: Vec<(String, String)>,
}

impl JournaldLayer {
    /// A layer sending to `path`, or `None` when there is no journal there.
    pub(crate) fn new(path: &Path, fields: Vec<(String, String)>) -> Option<JournaldLayer> {
        if !path.exists() {
            return None;
        }
        let socket = UnixDatagram::unbound().ok()?;
        // A journald that does not read (stuck, or its queue full) must never stop the install:
        // an entry it cannot take at once is left out of the journal (the log file and stderr
        // have it), instead of blocking the thread that logged it.
        socket.set_nonblocking(true).ok()?;
        Some(JournaldLayer {
            socket,
            path: path.to_path_buf(),
            fields,
        })
    }
}

/// One field in the native format: `KEY=value\n`, or, when the value holds a newline,
/// `KEY\n` + little-endian u64 length + value + `\n`.
pub(crate) fn append_field(buf: &mut Vec<u8>, key: &str, value: &str) {
    buf.extend_from_slice(key.as_bytes());
    if value.contains('\n') {
        buf.push(b'\n');
        buf.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        buf.push(b'=');
    }
    buf.extend_from_slice(value.as_bytes());
    buf.push(b'\n');
}

fn priority(level: &Level) -> &'static str {
    match *level {
        Level::ERROR => "3",
        Level::WARN => "4",
        Level::INFO => "6",
        _ => "7",
    }
}

#[derive(Default)]
struct Message {
    text: String,
    rest: String,
}

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.text, "{value:?}");
        } else {
            let _ = write!(self.rest, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.text.push_str(value);
        } else {
            let _ = write!(self.rest, " {}={value}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for JournaldLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut msg = Message::default();
        event.record(&mut msg);
        let mut buf = Vec::with_capacity(256);
        append_field(&mut buf, "MESSAGE", &format!("{}{}", msg.text, msg.rest));
        append_field(&mut buf, "PRIORITY", priority(event.metadata().level()));
        append_field(&mut buf, "SYSLOG_IDENTIFIER", "assisted-installer");
        for (k, v) in &self.fields {
            append_field(&mut buf, k, v);
        }
        // Best effort: a full or missing journal must not stop the install.
        let _ = self.send(&buf);
    }
}

impl JournaldLayer {
    fn send(&self, entry: &[u8]) -> std::io::Result<()> {
        match self.socket.send_to(entry, &self.path) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::EMSGSIZE | libc::ENOBUFS)) => {
                self.send_through_memfd(entry)
            }
            other => other.map(drop),
        }
    }

    /// journald reads an entry from a memfd passed alone in a datagram, once the memfd is sealed
    /// (so that the sender can no longer change what journald reads).
    fn send_through_memfd(&self, entry: &[u8]) -> std::io::Result<()> {
        let fd = memfd_create(
            c"journal-entry",
            MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
        )?;
        let mut file = File::from(fd);
        file.write_all(entry)?;
        let seals = SealFlag::F_SEAL_SHRINK
            | SealFlag::F_SEAL_GROW
            | SealFlag::F_SEAL_WRITE
            | SealFlag::F_SEAL_SEAL;
        fcntl(file.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals))?;
        let to = UnixAddr::new(&self.path)?;
        sendmsg(
            self.socket.as_raw_fd(),
            &[],
            &[ControlMessage::ScmRights(&[file.as_raw_fd()])],
            MsgFlags::empty(),
            Some(&to),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn fields_use_the_native_format() {
        let mut b = Vec::new();
        append_field(&mut b, "TAG", "installer");
        assert_eq!(b, b"TAG=installer\n");
        let mut b = Vec::new();
        append_field(&mut b, "MESSAGE", "a\nb");
        let mut want = b"MESSAGE\n".to_vec();
        want.extend_from_slice(&3u64.to_le_bytes());
        want.extend_from_slice(b"a\nb\n");
        assert_eq!(b, want);
        // No socket, no layer.
        assert!(JournaldLayer::new(Path::new("/nonexistent/journal.sock"), vec![]).is_none());
    }

    /// A datagram socket standing in for journald's, after `log` ran with a layer sending to it
    /// (tagged `TAG=installer`).
    fn journal(log: impl FnOnce()) -> (tempfile::TempDir, UnixDatagram) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.sock");
        let server = UnixDatagram::bind(&path).unwrap();
        let layer = JournaldLayer::new(&path, vec![("TAG".into(), "installer".into())]).unwrap();
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), log);
        (dir, server)
    }

    #[test]
    fn a_journal_that_does_not_read_never_blocks_the_logging_thread() {
        // Far more entries than a datagram socket queues (10 by default): were the sends
        // blocking, the test would hang at the eleventh.
        let (_dir, server) = journal(|| {
            for i in 0..1000 {
                tracing::info!("entry {i}");
            }
        });
        let mut buf = [0u8; 4096];
        let n = server.recv(&mut buf).unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).contains("MESSAGE=entry 0\n"));
    }

    #[test]
    fn events_reach_the_socket_with_the_tag() {
        let (_dir, server) = journal(|| tracing::warn!(device = "/dev/sda", "cleaning failed"));
        let mut buf = [0u8; 4096];
        let n = server.recv(&mut buf).unwrap();
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(
            text.contains("MESSAGE=cleaning failed device=/dev/sda\n"),
            "{text}"
        );
        assert!(
            text.contains("PRIORITY=4\n") && text.contains("TAG=installer\n"),
            "{text}"
        );
    }

    #[test]
    fn an_entry_too_large_for_a_datagram_goes_through_a_sealed_memfd() {
        use nix::sys::socket::{recvmsg, ControlMessageOwned};
        use std::io::IoSliceMut;

        // Beyond any datagram socket's send buffer (the kernel caps it at a few hundred KiB).
        let big = "x".repeat(8 << 20);
        let (_dir, server) = journal(|| tracing::info!(step = "gather", "{big}"));

        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let mut data = [0u8; 16];
        let mut iov = [IoSliceMut::new(&mut data)];
        let msg = recvmsg::<UnixAddr>(
            server.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::empty(),
        )
        .unwrap();
        assert_eq!(
            msg.bytes, 0,
            "the entry is in the memfd, not in the datagram"
        );
        let fd = msg
            .cmsgs()
            .unwrap()
            .find_map(|c| match c {
                ControlMessageOwned::ScmRights(fds) => fds.first().copied(),
                _ => None,
            })
            .expect("a passed descriptor");
        let seals = SealFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GET_SEALS).unwrap());
        assert!(seals
            .contains(SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW | SealFlag::F_SEAL_WRITE));
        // Read it as journald does, from the start (a new open file description, no unsafe).
        let entry = std::fs::read(format!("/proc/self/fd/{fd}")).unwrap();
        nix::unistd::close(fd).unwrap();
        let mut want = Vec::new();
        append_field(&mut want, "MESSAGE", &format!("{big} step=gather"));
        assert!(entry.starts_with(&want), "the whole message, not cut");
        let text = String::from_utf8_lossy(&entry[want.len()..]);
        assert!(
            text.contains("PRIORITY=6\n") && text.contains("TAG=installer\n"),
            "{text}"
        );
    }
}
