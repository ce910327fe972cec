//! Page-aligned buffers and the rules of O_DIRECT. This is the one place that knows alignment:
//! O_DIRECT needs the memory address, the file offset and the length to be multiples of the
//! device's logical block size; we align memory to 4096 (enough for every logical block size
//! Linux supports here) and round lengths up to the sector size.

/// Memory alignment of every buffer handed to an O_DIRECT write.
pub(crate) const MEMORY_ALIGN: usize = 4096;

/// A zero-initialised buffer whose first byte sits on a 4096-byte boundary. Built on a slightly
/// larger `Vec` so no `unsafe` allocation is needed: the Vec's heap block never moves while the
/// buffer lives, so the aligned window stays aligned.
pub(crate) struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub(crate) fn new(len: usize) -> AlignedBuf {
        let storage = vec![0u8; len + MEMORY_ALIGN];
        let start = storage.as_ptr().align_offset(MEMORY_ALIGN);
        assert!(start < MEMORY_ALIGN, "cannot align a heap buffer");
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

/// Round `len` up to a whole number of `sector`s.
pub(crate) fn round_up(len: u64, sector: u64) -> u64 {
    len.div_ceil(sector) * sector
}

/// Prepare the first `len` bytes of `buf` for an O_DIRECT write: when `len` is not a whole
/// number of sectors (the tail of an image), zero the bytes up to the next sector boundary
/// (the buffer is reused, so they hold stale data) and return the padded length. Everything past
/// the image's end but inside its last sector belongs to nobody, so padding it with zeroes is
/// what a buffered write of the same bytes would do to the page cache.
pub(crate) fn pad_to_sector(buf: &mut AlignedBuf, len: usize, sector: usize) -> usize {
    let padded = round_up(len as u64, sector as u64) as usize;
    assert!(
        padded <= buf.len(),
        "buffer of {} bytes cannot hold a padded tail of {padded}",
        buf.len()
    );
    buf.as_mut_slice()[len..padded].fill(0);
    padded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_page_aligned_and_zeroed() {
        for len in [512, 4096, 1 << 20] {
            let b = AlignedBuf::new(len);
            assert_eq!(b.as_slice().as_ptr() as usize % MEMORY_ALIGN, 0);
            assert_eq!(b.len(), len);
            assert!(b.as_slice().iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn tail_is_padded_to_the_sector_with_zeroes() {
        let mut b = AlignedBuf::new(8192);
        b.as_mut_slice().fill(0xaa);
        assert_eq!(pad_to_sector(&mut b, 1000, 512), 1024);
        assert!(b.as_slice()[..1000].iter().all(|&x| x == 0xaa));
        assert!(b.as_slice()[1000..1024].iter().all(|&x| x == 0));
        assert_eq!(
            b.as_slice()[1024],
            0xaa,
            "bytes past the padding are untouched"
        );
        assert_eq!(pad_to_sector(&mut b, 4097, 4096), 8192);
        assert_eq!(
            pad_to_sector(&mut b, 4096, 4096),
            4096,
            "aligned lengths stay"
        );
    }

    #[test]
    fn round_up_works_at_both_sector_sizes() {
        assert_eq!(round_up(0, 512), 0);
        assert_eq!(round_up(1, 512), 512);
        assert_eq!(round_up(513, 512), 1024);
        assert_eq!(round_up(4096, 4096), 4096);
        assert_eq!(round_up(4097, 4096), 8192);
    }
}
