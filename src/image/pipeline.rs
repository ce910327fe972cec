//! The streaming write. Stages run on their own threads, joined by bounded channels:
//!
//! ```text
//! fetch (+sha256 of compressed, +signature) -> decode -> [sha256 of uncompressed] -> writers (O_DIRECT pwrite) x N
//!                                      \-> first MiB held back by the coordinator
//! ```
//!
//! A raw image made locally (the live image rebuilt from osmet, [`Input::Raw`]) has no fetch
//! stage: the decode stage reads it directly and the sha256 stage always runs.
//!
//! Uncompressed data lives in a fixed pool of page-aligned 1 MiB buffers that circulate from the
//! decoder to the writers and back, so memory stays bounded whatever the image size. The first
//! MiB (MBR and primary GPT) is written last, only after every byte is on disk, every digest
//! matched and the signature (when there is one) verified: until then the disk holds an empty,
//! valid GPT written (and fsynced) before streaming, so an interrupted or failed write never
//! leaves a bootable, unverified disk.

use anyhow::{bail, Context, Result};
use crossbeam_channel::{bounded, select};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::cancel::{Cancel, CancelOnDrop, Interrupted, POLL};
use super::digest::{check, Expected, Sha256Sum};
use super::format::{Format, XzSettings};
use super::osmet::LiveSource;
use super::progress::{Progress, ProgressSink};
use super::signing::ImageSignature;
use super::source::ImageSource;
use super::stages::{
    decode_stage, fetch_stage, hash_stage, joined, write_stage, Block, DecodeInput, Msg, Next,
    Router, Shared, BLOCK,
};
use super::verify::{read_back, ReadBack};
use super::zeros::{ZeroSummary, Zeroing, ZERO_CHUNK};
use crate::disk::device::Device;
use crate::disk::direct::AlignedBuf;
use crate::disk::gpt::{self, ImageLayout};
use crate::disk::saved::SavedPartitions;

#[derive(Clone, Debug)]
pub struct WriteOptions {
    pub expected: Expected,
    pub xz: XzSettings,
    /// Writes in flight (writer threads).
    pub writers: usize,
    /// Aligned 1 MiB buffers circulating between decoder and writers.
    pub buffers: usize,
    /// Leave the disk as it is on failure instead of resetting it to an empty GPT.
    pub preserve_on_error: bool,
    /// Partitions of the old table to keep (read from the disk before the write).
    pub saved: SavedPartitions,
    /// Read the image back from the disk after the write and check its SHA-256 (`--verify`).
    pub verify: bool,
    /// Runs of zeros zeroed by the kernel instead of written (off: `--write-zeros`).
    pub zeroing: bool,
    /// The image's OpenPGP signature, checked over the bytes as read (an encoded input only).
    pub signature: Option<ImageSignature>,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            expected: Expected::default(),
            xz: XzSettings::default(),
            writers: 4,
            buffers: 8,
            preserve_on_error: false,
            saved: SavedPartitions::none(),
            verify: false,
            zeroing: true,
            signature: None,
        }
    }
}

/// What the pipeline reads.
pub enum Input {
    /// Bytes as stored or downloaded: hashed as they arrive, then sniffed and decoded.
    Encoded(Box<dyn ImageSource>),
    /// The live image rebuilt from its osmet file: hashed on its own thread.
    Raw(Box<LiveSource>),
}

impl From<Box<dyn ImageSource>> for Input {
    fn from(s: Box<dyn ImageSource>) -> Input {
        Input::Encoded(s)
    }
}

impl<S: ImageSource + 'static> From<Box<S>> for Input {
    fn from(s: Box<S>) -> Input {
        Input::Encoded(s)
    }
}

#[derive(Clone, Debug)]
pub struct WriteSummary {
    pub format: Format,
    pub sector_size: u64,
    /// Uncompressed bytes written.
    pub image_bytes: u64,
    /// Compressed bytes read.
    pub source_bytes: u64,
    pub elapsed: Duration,
    pub sha256: Sha256Sum,
    pub uncompressed_sha256: Option<Sha256Sum>,
    pub expected: Expected,
    /// Where the image came from (URL, file, or the live image).
    pub source: String,
    /// The image was rebuilt locally (the live image) and checked against its own checksum.
    pub rebuilt: bool,
    /// The `--verify` read-back, when it ran (it matched, or the write failed).
    pub read_back: Option<ReadBack>,
    /// How the image's zeros reached the disk.
    pub zeros: ZeroSummary,
    /// The OpenPGP signature that verified the image: where it came from, and its key.
    pub signature: Option<(String, String)>,
}

impl std::fmt::Display for WriteSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verdict = |expected: Option<Sha256Sum>| match expected {
            Some(_) => "verified",
            None => "not checked",
        };
        let bytes = self.image_bytes as f64;
        write!(
            f,
            "wrote {} bytes ({:.1} MiB, {}-byte sectors)",
            self.image_bytes,
            bytes / 1048576.0,
            self.sector_size
        )?;
        if !self.rebuilt {
            write!(f, " from {} bytes of {}", self.source_bytes, self.format)?;
        }
        let secs = self.elapsed.as_secs_f64();
        writeln!(
            f,
            " in {secs:.2} s: {:.0} MB/s",
            bytes / secs.max(1e-9) / 1e6
        )?;
        if self.rebuilt {
            write!(
                f,
                "from {}\nsha256 of the image: {} (verified against the osmet checksum)",
                self.source, self.sha256
            )?;
        } else {
            let raw = self.format == Format::Raw;
            let (kind, want) = if raw {
                let want = self.expected.compressed.or(self.expected.uncompressed);
                ("raw", want)
            } else {
                ("compressed", self.expected.compressed)
            };
            write!(
                f,
                "sha256 of the {kind} image: {} ({})",
                self.sha256,
                verdict(want)
            )?;
            if let (Some(u), false) = (self.uncompressed_sha256, raw) {
                write!(
                    f,
                    "\nsha256 of the uncompressed image: {u} ({})",
                    verdict(self.expected.uncompressed)
                )?;
            }
            if let Some((source, key)) = &self.signature {
                write!(f, "\nOpenPGP signature {source}: good, by {key}")?;
            }
        }
        write!(f, "\n{}", self.zeros)?;
        match &self.read_back {
            Some(r) => write!(f, "\n{r}"),
            None => Ok(()),
        }
    }
}

/// Checks on the first MiB before the disk is touched: a GPT image whose sector size matches
/// the device and which fits on it.
fn plan(
    head: &[u8],
    dev: &Device,
    source_len: Option<u64>,
    format: Format,
    saved: &SavedPartitions,
) -> Result<ImageLayout> {
    let layout = ImageLayout::parse(head)?;
    if let Some(ss) = dev.sector_size() {
        if ss != layout.sector_size {
            let (kind, metal) = match ss {
                4096 => ("4Kn (4k.raw)", "metal4k"),
                _ => ("512-byte", "metal"),
            };
            bail!(
                "the image has {}-byte sectors but {} has {ss}-byte sectors: use the {kind} image (rhcos-…-{metal}.x86_64.raw.gz)",
                layout.sector_size,
                dev.path().display(),
            );
        }
    }
    let needed = match (format, source_len) {
        (Format::Raw, Some(len)) => layout.size.max(len),
        _ => layout.size,
    };
    if needed > dev.size() {
        bail!(
            "the image needs {} bytes ({} MiB) but {} holds only {} bytes ({} MiB); nothing was written",
            needed,
            needed >> 20,
            dev.path().display(),
            dev.size(),
            dev.size() >> 20
        );
    }
    if let Some((n, label, start)) = saved.first() {
        if needed > start {
            bail!(
                "the image needs {needed} bytes but saved partition {n} ({label:?}) starts at byte {start}: \
                 writing the image would overwrite it; nothing was written"
            );
        }
    }
    saved.trial(dev.size())?;
    Ok(layout)
}

/// An image streamed and verified on the disk, whose partition table is not written yet: the
/// disk still holds an empty GPT (plus saved partitions) and cannot boot. Post-install steps run
/// in this state; [`Staged::commit`] then writes the first MiB.
pub struct Staged {
    head: AlignedBuf,
    layout: ImageLayout,
    summary: WriteSummary,
    started: Instant,
}

impl Staged {
    pub fn layout(&self) -> &ImageLayout {
        &self.layout
    }

    /// The table the disk will get on commit (fixed up for a disk of `disk_size` bytes, saved
    /// partitions merged), computed in memory.
    pub fn final_table(&self, disk_size: u64, saved: &SavedPartitions) -> Result<gptman::GPT> {
        let mut w = gpt::DiskWindows::zeroed(disk_size)?;
        w.head_mut().copy_from_slice(self.head.as_slice());
        gpt::fix_image_table(&mut w, self.layout.sector_size, saved)
    }

    /// Write the partition table: from here on the disk boots the image.
    pub fn commit(self, dev: &Device, saved: &SavedPartitions) -> Result<WriteSummary> {
        gpt::commit_image_table(dev, self.head.as_slice(), &self.layout, saved)
            .context("writing the partition table (the first MiB)")?;
        Ok(WriteSummary {
            elapsed: self.started.elapsed(),
            ..self.summary
        })
    }
}

/// After a failure once the disk was touched: reset it to an empty GPT (keeping saved
/// partitions) unless `preserve_on_error`; returns the error to report.
pub fn reset_after_failure(
    dev: &Device,
    sector_size: u64,
    opts: &WriteOptions,
    e: anyhow::Error,
) -> anyhow::Error {
    if opts.preserve_on_error {
        tracing::warn!(
            "--preserve-on-error: leaving {} as the failed write left it (it is not bootable: its first MiB was never written)",
            dev.path().display()
        );
        return e;
    }
    tracing::info!(
        "resetting {} to an empty partition table",
        dev.path().display()
    );
    match gpt::write_reset_table(dev, sector_size, &opts.saved) {
        Ok(()) => e,
        Err(reset) => e.context(format!("and resetting the disk failed too: {reset:#}")),
    }
}

/// Stream `source` onto `dev` and verify it, without writing the partition table. On failure
/// the disk is reset (see [`reset_after_failure`]), or untouched when the failure came before
/// the first write. `stop` is the caller's cancellation (signals): the write then fails with
/// [`Interrupted`].
pub fn stream_image(
    input: impl Into<Input>,
    dev: &Device,
    opts: &WriteOptions,
    progress: &dyn ProgressSink,
    stop: &Cancel,
) -> Result<Staged> {
    let start = Instant::now();
    // Set once the disk has been written to, with the sector size a reset must use.
    let mut touched: Option<u64> = None;
    let result = run(input.into(), dev, opts, progress, stop, start, &mut touched);
    progress.finish();
    match (result, touched) {
        (Ok(staged), _) => Ok(staged),
        (Err(e), Some(ss)) => Err(reset_after_failure(dev, ss, opts, e)),
        (Err(e), None) => Err(e),
    }
}

fn run(
    input: Input,
    dev: &Device,
    opts: &WriteOptions,
    progress: &dyn ProgressSink,
    stop: &Cancel,
    start: Instant,
    touched: &mut Option<u64>,
) -> Result<Staged> {
    let sh = Shared {
        error: Mutex::new(None),
        format: std::sync::OnceLock::new(),
        cancel: Cancel::new(),
        written: AtomicU64::new(0),
        downloaded: AtomicU64::new(0),
        zeros: Zeroing::new(opts.zeroing),
    };
    let (source_len, source_name, own_digest) = match &input {
        Input::Encoded(s) => (s.total_len(), s.describe(), None),
        Input::Raw(r) => (
            Some(r.size),
            r.describe.clone(),
            Some((r.checksum, r.mismatch.clone())),
        ),
    };
    let rebuilt = matches!(input, Input::Raw(_));
    // A raw input has no fetch stage to hash it: the sha256 stage always runs for it; and for
    // --verify, whose read-back is checked against it.
    let want_uncompressed_hash = rebuilt || opts.expected.uncompressed.is_some() || opts.verify;

    let (comp_tx, comp_rx) = bounded::<Msg>(8);
    let (pool_tx, pool_rx) = bounded::<AlignedBuf>(opts.buffers);
    for _ in 0..opts.buffers.max(2) - 1 {
        pool_tx.send(AlignedBuf::new(BLOCK)).expect("pool has room");
    }
    let (head_tx, head_rx) = bounded::<Block>(1);
    let (write_tx, write_rx) = bounded::<Block>(opts.writers.max(1));
    let (hash_tx, hash_rx) = bounded::<Block>(2);
    let router = Router {
        head: head_tx,
        write: write_tx,
    };

    std::thread::scope(|s| {
        // Whatever happens below, no stage outlives this scope.
        let _guard = CancelOnDrop(&sh.cancel);
        let sh = &sh;

        let (fetch, decode_input) = match input {
            Input::Encoded(mut source) => (
                Some(
                    std::thread::Builder::new()
                        .name("fetch".into())
                        .spawn_scoped(s, move || {
                            fetch_stage(&mut *source, comp_tx, opts.signature.as_ref(), sh)
                        })?,
                ),
                DecodeInput::Channel(comp_rx, opts.xz),
            ),
            Input::Raw(r) => (None, DecodeInput::Raw(r)),
        };
        let (next, hasher) = if want_uncompressed_hash {
            let h = std::thread::Builder::new()
                .name("sha256".into())
                .spawn_scoped(s, move || hash_stage(hash_rx, router, opts.verify, sh))?;
            (Next::Hash(hash_tx), Some(h))
        } else {
            drop(hash_rx);
            (Next::Route(router), None)
        };
        let pool_rx2 = pool_rx.clone();
        let decode = std::thread::Builder::new()
            .name("decode".into())
            .spawn_scoped(s, move || decode_stage(decode_input, pool_rx2, next, sh))?;
        drop(pool_rx);

        let interrupted = || stop.is_cancelled();
        let status = |sh: &Shared| -> Result<()> {
            if interrupted() {
                sh.cancel.cancel();
                return Err(Interrupted.into());
            }
            sh.take_error().map_or(Ok(()), Err)
        };

        // 1. The first MiB, decoded but not written: everything we must know before acting.
        let head = loop {
            status(sh)?;
            select! {
                recv(head_rx) -> b => match b {
                    Ok(b) => break b,
                    Err(_) => {
                        status(sh)?;
                        bail!("the image stream from {source_name} ended before its first MiB");
                    }
                },
                default(POLL) => {}
            }
        };
        let format = *sh
            .format
            .get()
            .expect("the decoder sets the format before the head");
        let layout = plan(
            &head.buf.as_slice()[..head.len],
            dev,
            source_len,
            format,
            &opts.saved,
        )
        .with_context(|| format!("checking the image from {source_name}"))?;
        let sector = layout.sector_size;
        tracing::info!(
            "image from {source_name}: {} MiB, {}-byte sectors, {} partitions; writing to {}",
            layout.size >> 20,
            sector,
            layout.partitions.iter().filter(|p| p.is_used()).count(),
            dev.path().display()
        );
        if opts.zeroing {
            tracing::debug!(
                "runs of zeros (whole {} KiB chunks) are left to the kernel on {} ({})",
                ZERO_CHUNK >> 10,
                dev.path().display(),
                dev.zero_method()
            );
        }

        // 2. Wipe both ends of the disk and leave an empty valid GPT there, durably.
        status(sh)?;
        *touched = Some(sector);
        gpt::write_reset_table(dev, sector, &opts.saved)
            .context("clearing the old partition table and signatures")?;
        sh.written.fetch_add(head.len as u64, Ordering::Relaxed);

        // 3. Stream everything after the first MiB.
        let writers: Vec<_> = (0..opts.writers.max(1))
            .map(|i| {
                let rx = write_rx.clone();
                let pool = pool_tx.clone();
                std::thread::Builder::new()
                    .name(format!("write-{i}"))
                    .spawn_scoped(s, move || {
                        write_stage(dev, sector as usize, opts.saved.first(), rx, pool, sh)
                    })
            })
            .collect::<io::Result<_>>()?;
        drop(write_rx);
        drop(pool_tx);

        let report = |sh: &Shared| {
            progress.update(&Progress {
                written: sh.written.load(Ordering::Relaxed),
                image_size: Some(layout.size),
                downloaded: sh.downloaded.load(Ordering::Relaxed),
                download_size: source_len,
                elapsed: start.elapsed(),
                verify: opts.verify,
                read_back: None,
            })
        };
        while !(decode.is_finished()
            && hasher.as_ref().is_none_or(|h| h.is_finished())
            && writers.iter().all(|w| w.is_finished()))
        {
            status(sh)?;
            report(sh);
            std::thread::sleep(POLL);
        }
        status(sh)?;
        let decoded = joined(decode.join())?;
        let sums = match hasher {
            Some(h) => joined(h.join())?,
            None => None,
        };
        let hashed = sums.as_ref().map(|s| s.sha256);
        // Bytes read and their digest: the fetch stage's, or for a raw input (no fetch stage)
        // the decode and sha256 stages'.
        let fetched = match fetch {
            Some(f) => joined(f.join())?,
            None => decoded.zip(hashed).map(|((n, _), h)| (n, h)),
        };
        for w in writers {
            joined(w.join())?;
        }
        status(sh)?;
        let (Some((source_bytes, sha256)), Some((image_bytes, format))) = (fetched, decoded) else {
            bail!("the pipeline stopped without an error (this is a bug)");
        };

        // 4. Verify, then make the disk bootable.
        let uncompressed_sha256 = if format == Format::Raw {
            Some(sha256)
        } else {
            hashed
        };
        if let Some((want, meaning)) = own_digest {
            check("rebuilt", Some(want), Some(sha256)).map_err(|e| {
                anyhow::Error::new(e).context(format!("the image does not match {meaning}"))
            })?;
        }
        if format == Format::Raw {
            // Compressed and uncompressed are the same bytes: either digest must match them.
            for e in [opts.expected.compressed, opts.expected.uncompressed] {
                check("raw", e, Some(sha256))?;
            }
        } else {
            check("compressed", opts.expected.compressed, Some(sha256))?;
            check("uncompressed", opts.expected.uncompressed, hashed)?;
        }
        if image_bytes < layout.size {
            bail!(
                "the image from {source_name} ended after {image_bytes} bytes, but its partition table says it is {} bytes long: it is truncated",
                layout.size
            );
        }
        dev.sync()?;
        if interrupted() {
            return Err(Interrupted.into());
        }
        report(sh);
        // The disk must now hold the image but its first MiB (written at commit, from `head`):
        // the post-install steps and the commit change it after this.
        let read_back = match (opts.verify, &sums) {
            (true, Some(sums)) => Some(check_on_disk(
                dev,
                &head,
                sums,
                image_bytes,
                sector,
                progress,
                stop,
            )?),
            _ => None,
        };
        Ok(Staged {
            head: head.buf,
            layout,
            summary: WriteSummary {
                format,
                sector_size: sector,
                image_bytes,
                source_bytes,
                elapsed: start.elapsed(),
                sha256,
                uncompressed_sha256,
                expected: opts.expected,
                source: source_name,
                rebuilt,
                read_back,
                zeros: sh.zeros.summary(dev, image_bytes),
                signature: (!rebuilt)
                    .then(|| opts.signature.as_ref().map(|s| (s.source.clone(), s.key())))
                    .flatten(),
            },
            started: start,
        })
    })
}

/// `--verify`: the read-back, reported as a second pass over the image.
fn check_on_disk(
    dev: &Device,
    head: &Block,
    sums: &super::verify::StreamSums,
    image_bytes: u64,
    sector: u64,
    progress: &dyn ProgressSink,
    stop: &Cancel,
) -> Result<ReadBack> {
    tracing::info!(
        "--verify: reading the image back from {}",
        dev.path().display()
    );
    let head = &head.buf.as_slice()[..head.len];
    let threads = super::verify::default_threads();
    let r = read_back(
        dev,
        head,
        sums,
        image_bytes,
        sector,
        threads,
        stop,
        &|n, elapsed| {
            progress.update(&Progress {
                written: image_bytes,
                image_size: Some(image_bytes),
                elapsed,
                verify: true,
                read_back: Some(n),
                ..Progress::default()
            })
        },
    )
    .context("--verify: checking the image on the disk")?;
    tracing::info!("{r}");
    Ok(r)
}
