//! The two ends of a disk in memory: its first and last MiB, where every partition table (and
//! the signatures an install wipes) lives. Tables are built over this view with gptman and then
//! reach the device as two aligned 1 MiB writes, instead of the thousands of tiny writes gptman
//! would issue against a file descriptor.

use anyhow::{bail, Result};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::Range;

use super::device::Device;
use super::direct::AlignedBuf;

/// Both ends of the disk that a table (and the wipe of old signatures) covers.
pub const WINDOW: u64 = 1 << 20;

/// A sparse view of a disk of `size` bytes in which only the first and last [`WINDOW`] bytes
/// are held in memory. Reads elsewhere return zeroes; writes elsewhere are refused, which keeps
/// a table builder from touching image data.
pub struct DiskWindows {
    size: u64,
    head: Vec<u8>,
    tail_start: u64,
    tail: Vec<u8>,
    pos: u64,
}

impl DiskWindows {
    /// Zero-filled windows for a disk of `size` bytes (at least two windows long).
    pub fn zeroed(size: u64) -> Result<DiskWindows> {
        if size < 2 * WINDOW {
            bail!("a disk of {size} bytes is too small to hold a GPT and an image (need at least {} bytes)", 2 * WINDOW);
        }
        Ok(DiskWindows {
            size,
            head: vec![0; WINDOW as usize],
            tail_start: size - WINDOW,
            tail: vec![0; WINDOW as usize],
            pos: 0,
        })
    }

    /// Bytes the disk spans.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn head(&self) -> &[u8] {
        &self.head
    }

    pub fn head_mut(&mut self) -> &mut [u8] {
        &mut self.head
    }

    pub fn tail(&self) -> &[u8] {
        &self.tail
    }

    pub fn tail_start(&self) -> u64 {
        self.tail_start
    }

    /// The disk's first and last MiB as they are on `dev` now.
    pub fn load(dev: &Device) -> Result<DiskWindows> {
        let mut w = DiskWindows::zeroed(dev.size())?;
        let mut buf = AlignedBuf::new(WINDOW as usize);
        dev.read_at(buf.as_mut_slice(), 0)?;
        w.head.copy_from_slice(buf.as_slice());
        dev.read_at(buf.as_mut_slice(), w.tail_start)?;
        w.tail.copy_from_slice(buf.as_slice());
        Ok(w)
    }

    /// Zero both windows except the bytes inside `keep` (saved partitions' data).
    pub fn zero_except(&mut self, keep: &[Range<u64>]) {
        let kept = |at: u64| keep.iter().any(|r| r.contains(&at));
        for (start, window) in [(0, &mut self.head), (self.tail_start, &mut self.tail)] {
            for (i, b) in window.iter_mut().enumerate() {
                if !kept(start + i as u64) {
                    *b = 0;
                }
            }
        }
    }

    /// Zero `len` bytes at `offset` if they lie inside a window; whether they did.
    pub fn zero_range(&mut self, offset: u64, len: u64) -> bool {
        let Some((in_head, at)) = self.locate(offset, len as usize) else {
            return false;
        };
        self.window(in_head)[at..at + len as usize].fill(0);
        true
    }

    fn write_window(dev: &Device, data: &[u8], offset: u64) -> Result<()> {
        let mut buf = AlignedBuf::new(data.len());
        buf.as_mut_slice().copy_from_slice(data);
        dev.write_at(buf.as_slice(), offset)
    }

    /// Write both windows to `dev`, the last MiB first and the first MiB last (the primary
    /// table is what makes a disk bootable, so it is the commit point), fsyncing after each.
    pub fn write_to(&self, dev: &Device) -> Result<()> {
        Self::write_window(dev, &self.tail, self.tail_start)?;
        dev.sync()?;
        Self::write_window(dev, &self.head, 0)?;
        dev.sync()
    }

    /// Where `len` bytes at `pos` are: in the head (or else the tail) window, at this index.
    fn locate(&self, pos: u64, len: usize) -> Option<(bool, usize)> {
        let end = pos + len as u64;
        if end <= WINDOW {
            Some((true, pos as usize))
        } else if pos >= self.tail_start && end <= self.size {
            Some((false, (pos - self.tail_start) as usize))
        } else {
            None
        }
    }

    fn window(&mut self, in_head: bool) -> &mut [u8] {
        if in_head {
            &mut self.head
        } else {
            &mut self.tail
        }
    }
}

impl Read for DiskWindows {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = buf.len().min(self.size.saturating_sub(self.pos) as usize);
        let buf = &mut buf[..n];
        match self.locate(self.pos, n) {
            Some((in_head, at)) => buf.copy_from_slice(&self.window(in_head)[at..at + n]),
            None => buf.fill(0),
        }
        self.pos += n as u64;
        Ok(n)
    }
}

impl Write for DiskWindows {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (in_head, at) = self.locate(self.pos, buf.len()).ok_or_else(|| {
            io::Error::other(format!(
                "GPT write of {} bytes at offset {} falls outside the first and last MiB",
                buf.len(),
                self.pos
            ))
        })?;
        self.window(in_head)[at..at + buf.len()].copy_from_slice(buf);
        self.pos += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for DiskWindows {
    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.size.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| io::Error::other("seek out of range"))?;
        Ok(self.pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_refuse_writes_between_the_ends() {
        let mut w = DiskWindows::zeroed(4 << 20).unwrap();
        w.seek(SeekFrom::Start(WINDOW)).unwrap();
        let err = w.write(&[1, 2, 3]).unwrap_err();
        assert!(err.to_string().contains("outside the first and last MiB"));
        let mut b = [9u8; 4];
        w.read_exact(&mut b).unwrap();
        assert_eq!(b, [0; 4], "reads between the windows are zeroes");
        assert!(DiskWindows::zeroed(WINDOW).is_err(), "too small");
    }

    #[test]
    fn zero_except_keeps_saved_bytes() {
        let mut w = DiskWindows::zeroed(4 << 20).unwrap();
        w.head_mut().fill(1);
        w.tail.fill(1);
        let tail_start = w.tail_start();
        w.zero_except(&[100..200, tail_start + 10..tail_start + 20]);
        assert!(w.head()[..100].iter().all(|&b| b == 0));
        assert!(w.head()[100..200].iter().all(|&b| b == 1));
        assert!(w.head()[200..].iter().all(|&b| b == 0));
        assert!(w.tail()[10..20].iter().all(|&b| b == 1));
        assert_eq!(w.tail()[20], 0);
    }
}
