//! The bytes every benchmark moves and checks: a pseudo-random stream seeded by the sender's rank, the
//! message size and an iteration tag, so data from another sender, size or round never passes as right.

use std::fmt;

/// Identifies one pattern stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatternSeed {
    pub sender: usize,
    pub size: u64,
    pub iteration: u64,
}

impl PatternSeed {
    /// The 64-bit key the stream is derived from (the GPU kernels take it as their argument).
    pub fn key(self) -> u64 {
        mix(mix(self.sender as u64 ^ 0x6566_6174_6f70) ^ self.size.rotate_left(17) ^ self.iteration.rotate_left(41))
    }
}

/// splitmix64's finaliser: cheap, and every input bit moves every output bit.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn word(key: u64, index: usize) -> [u8; 8] {
    mix(key ^ (index as u64).wrapping_mul(0xd6e8_feb8_6659_fd93)).to_le_bytes()
}

/// Fills `bytes` with the pattern of `seed`.
pub fn fill(bytes: &mut [u8], seed: PatternSeed) {
    let key = seed.key();
    let mut chunks = bytes.chunks_exact_mut(8);
    for (index, chunk) in chunks.by_ref().enumerate() {
        chunk.copy_from_slice(&word(key, index));
    }
    let tail_index = bytes.len() / 8;
    let tail = bytes.len() % 8;
    if tail > 0 {
        let start = bytes.len() - tail;
        bytes[start..].copy_from_slice(&word(key, tail_index)[..tail]);
    }
}

/// The first byte that differs from the expected pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub offset: usize,
    pub expected: u8,
    pub found: u8,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "offset {}: expected 0x{:02x}, found 0x{:02x}", self.offset, self.expected, self.found)
    }
}

/// Checks `bytes` against the pattern of `seed`; returns the first mismatching byte.
pub fn verify(bytes: &[u8], seed: PatternSeed) -> Result<(), Mismatch> {
    let key = seed.key();
    for (index, chunk) in bytes.chunks(8).enumerate() {
        let expected = word(key, index);
        if chunk != &expected[..chunk.len()] {
            let at = chunk.iter().zip(expected).position(|(a, b)| *a != b).unwrap_or(0);
            return Err(Mismatch { offset: index * 8 + at, expected: expected[at], found: chunk[at] });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: PatternSeed = PatternSeed { sender: 0, size: 4096, iteration: 3 };

    #[test]
    fn filled_bytes_verify() {
        for len in [4, 8, 12, 4096, 4100] {
            let mut bytes = vec![0u8; len];
            fill(&mut bytes, SEED);
            assert_eq!(verify(&bytes, SEED), Ok(()), "len {len}");
        }
    }

    #[test]
    fn a_flipped_byte_is_found_with_its_offset() {
        let mut bytes = vec![0u8; 4096];
        fill(&mut bytes, SEED);
        let expected = bytes[1234];
        bytes[1234] ^= 0x40;
        assert_eq!(verify(&bytes, SEED), Err(Mismatch { offset: 1234, expected, found: expected ^ 0x40 }));
    }

    #[test]
    fn another_sender_size_or_iteration_does_not_pass() {
        let mut bytes = vec![0u8; 4096];
        fill(&mut bytes, SEED);
        for other in [
            PatternSeed { sender: 1, ..SEED },
            PatternSeed { size: 8192, ..SEED },
            PatternSeed { iteration: 4, ..SEED },
        ] {
            assert!(verify(&bytes, other).is_err(), "{other:?}");
        }
    }
}
