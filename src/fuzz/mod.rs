//! Property-based tests of the parsers that read bytes we do not control (a disk's old GPT, the
//! live image's osmet files, Ignition configs, the assisted-service's JSON, `lsblk` output, the
//! machine-config-server's log, `--installer-args`). Each target takes the seeds kept in
//! `testdata/fuzz/<target>/`, mutates them ([`mutated`]) and also tries arbitrary bytes, and
//! checks three things of every input: the parser does not panic, no single allocation it makes
//! is larger than a bound tied to the input's size ([`largest_allocation`]), and its error names
//! what was wrong. Failing cases are kept in `testdata/fuzz/regressions/<target>.txt` and
//! replayed first on every run.
//!
//! This module is the lib's test binary only; it holds the one `unsafe` outside `disk::sys`: a
//! global allocator must be an `unsafe impl`.
#![allow(unsafe_code)]

mod gpt;
mod ignition;
mod json;
mod mcs;
mod osmet;
mod squashfs;

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, FileFailurePersistence};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Cases per target when `PROPTEST_CASES` is not set: enough for the mutations to reach every
/// field of every seed in a few runs, few enough that all targets run in seconds in a debug
/// build (`make test`).
const CASES: u32 = 256;

/// The test binary's allocator: the system's, noting the largest single request made on a thread
/// while that thread is armed. Thread-local so that the other tests running in parallel do not
/// count; `const` thread-locals of `Cell`s need no allocation or destructor, so the allocator
/// can read them. A length field of 2^60 would make a parser ask for 2^60 bytes at once, and a
/// count of 2^30 would grow a vector to gigabytes by doubling: both show up as one large request
/// (`realloc` counts its new size).
struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    // `try_with`: the allocator also runs while a thread's locals are being torn down.
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            LARGEST.with(|l| l.set(l.get().max(size)));
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Disarms the thread even when the parser panics (proptest catches the panic and shrinks).
struct Armed;

impl Drop for Armed {
    fn drop(&mut self) {
        ARMED.with(|a| a.set(false));
    }
}

/// Run `f` and return its result with the largest single allocation it made on this thread.
pub(crate) fn largest_allocation<R>(f: impl FnOnce() -> R) -> (R, usize) {
    LARGEST.with(|l| l.set(0));
    ARMED.with(|a| a.set(true));
    let guard = Armed;
    let r = f();
    drop(guard);
    (r, LARGEST.with(Cell::get))
}

/// What a parser may allocate at once for an input of `len` bytes: a fixed 64 KiB (buffers,
/// small tables) plus 64 bytes per input byte (a JSON array `[0,0,…]` is 2 bytes per element and
/// 32 bytes per parsed value, doubled by a vector's growth).
pub(crate) fn allowance(len: usize) -> usize {
    (64 << 10) + 64 * len
}

/// Run `parse` on `input` and fail the case when one allocation exceeds [`allowance`] plus
/// `extra` (what the caller can justify beyond the input's size, e.g. the image a table
/// describes).
pub(crate) fn bounded<R>(input_len: usize, extra: usize, parse: impl FnOnce() -> R) -> R {
    let (r, largest) = largest_allocation(parse);
    let bound = allowance(input_len) + extra;
    assert!(
        largest <= bound,
        "one allocation of {largest} bytes for an input of {input_len} bytes (bound {bound})"
    );
    r
}

/// The proptest configuration of `target`: [`CASES`] cases unless `PROPTEST_CASES` says how
/// many, and failures kept in `testdata/fuzz/regressions/<target>.txt` (replayed first).
pub(crate) fn config(regressions: &'static str) -> Config {
    let mut config = Config::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = CASES;
    }
    config.failure_persistence = Some(Box::new(FileFailurePersistence::Direct(regressions)));
    config
}

/// The seed inputs of `target`, from `testdata/fuzz/<target>/`, in name order.
pub(crate) fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/fuzz")
        .join(target);
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading the seed corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    let seeds: Vec<_> = paths.iter().map(|p| std::fs::read(p).unwrap()).collect();
    assert!(!seeds.is_empty(), "no seed in {}", dir.display());
    seeds
}

/// Values a length or count field is set to: the largest of each width, just past the limits
/// parsers check, and 2^60.
const HUGE: [u64; 8] = [
    u64::MAX,
    1 << 60,
    i64::MAX as u64,
    u32::MAX as u64,
    1 << 31,
    u16::MAX as u64,
    (64 << 10) + 1,
    0,
];

/// Text that changes a JSON document's or a log line's structure.
const TOKENS: [&str; 16] = [
    "\"",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "null",
    "1152921504606846976",
    "-1",
    "1e400",
    "\\u0000",
    "é",
    "\u{1F980}",
    "[[[[[[[[[[[[[[[[",
    " User-Agent:\"Ignition",
];

#[derive(Clone, Debug)]
enum Mutation {
    FlipBit(Index, u8),
    Truncate(Index),
    Delete(Index, usize),
    Insert(Index, Vec<u8>),
    /// A slice of another seed inserted here.
    Splice(Index, Index, Index, usize),
    /// A little-endian field of 1, 2, 4 or 8 bytes overwritten with a huge value.
    Huge(Index, usize, usize),
    /// A bincode varint of a huge value (tag 253 and 8 bytes) written over the input.
    HugeVarint(Index, usize),
    Token(Index, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 0..8u8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => (any::<Index>(), 1..64usize).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => (any::<Index>(), prop::collection::vec(any::<u8>(), 1..16))
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => (any::<Index>(), any::<Index>(), any::<Index>(), 1..256usize)
            .prop_map(|(a, s, f, n)| Mutation::Splice(a, s, f, n)),
        3 => (any::<Index>(), 0..4usize, 0..HUGE.len()).prop_map(|(i, w, v)| Mutation::Huge(i, w, v)),
        2 => (any::<Index>(), 0..HUGE.len()).prop_map(|(i, v)| Mutation::HugeVarint(i, v)),
        2 => (any::<Index>(), 0..TOKENS.len()).prop_map(|(i, t)| Mutation::Token(i, t)),
    ]
}

fn overwrite(input: &mut [u8], at: usize, bytes: &[u8]) {
    let end = (at + bytes.len()).min(input.len());
    input[at..end].copy_from_slice(&bytes[..end - at]);
}

fn apply(mut input: Vec<u8>, m: &Mutation, seeds: &[Vec<u8>]) -> Vec<u8> {
    // Positions are drawn as fractions of the current length: every byte of a large seed is
    // reachable, and an empty input stays valid.
    let at = |i: &Index, len: usize| if len == 0 { 0 } else { i.index(len) };
    let len = input.len();
    match m {
        Mutation::FlipBit(i, bit) if len > 0 => input[i.index(len)] ^= 1 << bit,
        Mutation::FlipBit(..) => {}
        Mutation::Truncate(i) => input.truncate(at(i, len)),
        Mutation::Delete(i, n) => {
            let from = at(i, len);
            input.drain(from..(from + n).min(len));
        }
        Mutation::Insert(i, bytes) => {
            input.splice(at(i, len)..at(i, len), bytes.iter().copied());
        }
        Mutation::Splice(to, seed, from, n) => {
            let other = seed.get(seeds);
            let from = at(from, other.len());
            let piece = &other[from..(from + n).min(other.len())];
            input.splice(at(to, len)..at(to, len), piece.iter().copied());
        }
        Mutation::Huge(i, width, v) if len > 0 => {
            let bytes = HUGE[*v].to_le_bytes();
            overwrite(&mut input, i.index(len), &bytes[..1 << width]);
        }
        Mutation::Huge(..) => {}
        Mutation::HugeVarint(i, v) if len > 0 => {
            let mut bytes = vec![253];
            bytes.extend_from_slice(&HUGE[*v].to_le_bytes());
            overwrite(&mut input, i.index(len), &bytes);
        }
        Mutation::HugeVarint(..) => {}
        Mutation::Token(i, t) => {
            input.splice(at(i, len)..at(i, len), TOKENS[*t].bytes());
        }
    }
    input
}

/// Inputs for a parser: mostly a seed with one to four mutations, sometimes a seed as it is, and
/// sometimes arbitrary bytes.
pub(crate) fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let n = seeds.len();
    prop_oneof![
        1 => (0..n).prop_map({
            let seeds = seeds.clone();
            move |i| seeds[i].clone()
        }),
        8 => (0..n, prop::collection::vec(mutation(), 1..5)).prop_map(move |(i, ms)| {
            ms.iter()
                .fold(seeds[i].clone(), |input, m| apply(input, m, &seeds))
        }),
        1 => prop::collection::vec(any::<u8>(), 0..1024),
    ]
}

/// [`mutated`] as text (invalid UTF-8 replaced), for parsers that take `&str`.
pub(crate) fn mutated_text(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = String> {
    mutated(seeds).prop_map(|b| String::from_utf8_lossy(&b).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allocation_probe_sees_one_large_request_and_only_while_armed() {
        let (v, largest) = largest_allocation(|| vec![0u8; 3 << 20]);
        assert!(largest >= 3 << 20, "{largest}");
        drop(v);
        let (_, largest) = largest_allocation(|| 1 + 1);
        assert_eq!(largest, 0);
        // A vector grown by doubling shows its last capacity.
        let (_, largest) = largest_allocation(|| (0..100_000u32).collect::<Vec<_>>().len());
        assert!(largest >= 400_000, "{largest}");
    }

    #[test]
    fn an_overwrite_past_the_end_keeps_the_length() {
        let mut input = b"0123456789".to_vec();
        overwrite(&mut input, 9, &u64::MAX.to_le_bytes());
        assert_eq!(input, b"012345678\xff");
        overwrite(&mut input, 0, b"ab");
        assert_eq!(input, b"ab2345678\xff");
    }
}
