//! `embed`: the post-install steps on a disk written earlier (the single-node flow writes the
//! image while the control plane forms and embeds the Ignition config once it exists).

use anyhow::{bail, Context, Result};

use crate::cli::embed::EmbedArgs;
use crate::disk::boot::find_boot;
use crate::disk::gpt::{self, DiskWindows};
use crate::disk::partitions::PartitionSpec;
use crate::disk::saved::SavedPartitions;
use crate::disk::Device;
use crate::embed;

pub fn run(args: &EmbedArgs) -> Result<()> {
    let post = args.post.to_post_install()?;
    if post.is_empty() {
        bail!("nothing to embed: pass -i/--ignition-file, --append-karg, --delete-karg, -n, --platform, --console or --firstboot-args");
    }
    let dev = Device::open_for_write(&args.device)?;
    let mut w = DiskWindows::load(&dev)?;
    let gpt = match dev.sector_size() {
        Some(ss) => gptman::GPT::read_from(&mut w, ss),
        None => gptman::GPT::find_from(&mut w),
    }
    .map_err(|e| {
        anyhow::anyhow!(
            "{} has no readable GPT ({e}): write the image first",
            dev.path().display()
        )
    })?;
    let ss = gpt.sector_size;
    let table = PartitionSpec::from_gpt(&gpt);
    // Refuse a disk without a CoreOS /boot before anything changes (it would not be reset).
    find_boot(&dev, &table)?;
    let path = dev.path().to_path_buf();
    match embed::apply_to_disk(dev, &table, ss, &post) {
        Ok(dev) => {
            dev.sync()?;
            embed::refresh_kernel_view(&dev);
            Ok(())
        }
        Err(e) if args.preserve_on_error => Err(e),
        Err(e) => {
            // A half-applied configuration must not boot: same rule as a failed write.
            let dev = Device::open_for_write(&path).with_context(|| {
                format!("{e:#}; and reopening {} to reset it failed", path.display())
            })?;
            tracing::info!("resetting {} to an empty partition table", path.display());
            if let Err(reset) = gpt::write_reset_table(&dev, ss, &SavedPartitions::none()) {
                return Err(e.context(format!("and resetting the disk failed too: {reset:#}")));
            }
            Err(e)
        }
    }
}
