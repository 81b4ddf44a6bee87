//! The bytes of the handshake every connection into a run opens with, and of the sealed records that follow
//! it: their layout only. What proves the secret and what seals the records is `efatop_auth`'s
//! (docs/security.md has the exchange step by step).
//!
//! The listener's hello is [`MAGIC`], the [`Purpose`] byte and its nonce ([`HELLO_LEN`]); the connecting side
//! answers with its nonce and its proof ([`ANSWER_LEN`]); the listener's proof closes it ([`PROOF_LEN`]).
//! A sealed record is a [`HEADER_LEN`]-byte big-endian length, then the ciphertext and its [`TAG_LEN`]-byte
//! tag, at most [`MAX_PLAINTEXT`] bytes of plaintext a record.

/// Opens every listener's hello: the protocol and its version.
pub const MAGIC: &[u8; 7] = b"EFATOP\x01";
/// Bytes of each side's nonce.
pub const NONCE_LEN: usize = 32;
/// The listener's proof (an HMAC-SHA256).
pub const PROOF_LEN: usize = 32;
/// The listener's hello: magic, purpose, nonce.
pub const HELLO_LEN: usize = MAGIC.len() + 1 + NONCE_LEN;
/// The connecting side's answer: its nonce, its proof.
pub const ANSWER_LEN: usize = NONCE_LEN + PROOF_LEN;

/// What a connection is for: the hello's byte after the magic, bound into both proofs, so that one surface's
/// proof opens no other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Purpose {
    /// A rank joining the run's rendezvous (`efatop run`'s launcher, the Slurm bootstrap).
    Rendezvous = 1,
    /// A rank's sampler, or a node's monitor, streaming to rank 0's collector.
    Telemetry = 2,
    /// A viewer of a run or monitor served with `--serve` (`efatop attach`).
    Viewer = 3,
    /// An NCCL job's profiler plugin streaming to `efatop watch`.
    Nccl = 4,
}

impl Purpose {
    /// The purpose a hello's byte names, if any.
    pub fn from_byte(byte: u8) -> Option<Self> {
        [Self::Rendezvous, Self::Telemetry, Self::Viewer, Self::Nccl].into_iter().find(|p| *p as u8 == byte)
    }
}

/// Bytes of a sealed record's length prefix.
pub const HEADER_LEN: usize = 4;
/// Bytes of a sealed record's authentication tag.
pub const TAG_LEN: usize = 16;
/// The most plaintext one record carries: small enough that a reader holding thousands of connections
/// holds little for each (TLS's record is 16 KiB too).
pub const MAX_PLAINTEXT: usize = 16 << 10;
/// The most bytes of one record, prefix included: what a reader may have to hold before it can open it.
pub const MAX_RECORD: usize = HEADER_LEN + MAX_PLAINTEXT + TAG_LEN;
/// Bytes a sealed message takes beyond its plaintext, per record.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_purpose_reads_back_from_its_byte_and_no_other_byte_is_one() {
        for purpose in [Purpose::Rendezvous, Purpose::Telemetry, Purpose::Viewer, Purpose::Nccl] {
            assert_eq!(Purpose::from_byte(purpose as u8), Some(purpose));
        }
        assert_eq!(Purpose::from_byte(0), None);
        assert_eq!(Purpose::from_byte(5), None);
    }
}
