//! What protects a connection after its handshake: every byte either side sends travels in records, each
//! encrypted and authenticated with AES-256-GCM (NIST SP 800-38D; the `RustCrypto` project's `aes-gcm`,
//! with AES-NI and carry-less multiply where the CPU has them) under a key of its direction, derived from
//! the run's secret, both handshake nonces and the purpose
//! ([`crate::Session`]). A relay that passed the handshake through untouched can then neither read
//! what follows nor change, drop, reorder or replay a byte of it unseen: each record's nonce is its
//! direction and its number in the stream (a 64-bit counter, never reused: a stream that would need a
//! 2^64-th record ends instead), so a record out of its place fails as a forged one does.
//!
//! A record: a 4-byte big-endian length `L`, then `L` bytes: the ciphertext and its 16-byte tag. The length
//! is authenticated too (it is the record's associated data). A record carries at most [`MAX_PLAINTEXT`]
//! bytes, so a reader holds at most [`MAX_RECORD`] bytes of one before it can judge it; a longer message
//! is several records (the plaintext is a byte stream: the framing inside is the protocol's own).
//!
//! The record layer is pure ([`Sealer::seal`], [`Opener::open`], [`Opener::open_front`]): an event loop
//! uses it over its own buffers. [`SealedReader`] and [`SealedWriter`] adapt it to blocking `Read` and
//! `Write` for threaded code. A record that fails is a refusal ([`SealError`], "frame failed
//! authentication"), never data, and the opener that saw it opens nothing more.

use std::io::{ErrorKind, Read, Write};
use std::ops::Range;

use aes_gcm::aead::AeadInPlace;
use aes_gcm::aead::consts::U12;
use aes_gcm::{Aes256Gcm, Key, KeyInit, Nonce, Tag};

use efatop_proto::handshake::{HEADER_LEN, MAX_PLAINTEXT, MAX_RECORD, OVERHEAD, TAG_LEN};

/// Which way a record travels: bound into its nonce (and its key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Direction {
    /// From the listener to the side that connected.
    ToCaller = 1,
    /// From the side that connected to the listener.
    ToListener = 2,
}

/// Why a record was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    /// Its tag does not hold: changed, out of order, replayed, of the other direction, or under other keys.
    #[error("frame failed authentication")]
    Forged,
    #[error("frame failed authentication (a record announcing {0} bytes; a record holds at most {max})", max = MAX_RECORD - HEADER_LEN)]
    TooLong(usize),
    #[error("frame failed authentication (a record announcing {0} bytes, shorter than its tag)")]
    TooShort(usize),
    #[error("frame failed authentication (the stream ended inside a record)")]
    Truncated,
    /// A record after one that failed: a failed stream is over.
    #[error("frame failed authentication (an earlier record of this stream failed)")]
    Failed,
    #[error("the stream is used up (2^64 records): it ends")]
    Exhausted,
}

impl SealError {
    /// The error as I/O code sees it, naming the peer.
    pub fn io(&self, peer: &str) -> std::io::Error {
        std::io::Error::new(ErrorKind::InvalidData, format!("{peer}: {self}"))
    }
}

fn nonce(direction: Direction, counter: u64) -> Nonce<U12> {
    let mut bytes = [0u8; 12];
    bytes[0] = direction as u8;
    bytes[4..].copy_from_slice(&counter.to_be_bytes());
    Nonce::from(bytes)
}

/// Seals what one side sends: one per direction of a connection.
pub struct Sealer {
    cipher: Aes256Gcm,
    direction: Direction,
    counter: u64,
}

impl Sealer {
    pub fn new(key: &[u8; 32], direction: Direction) -> Self {
        Self {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key)),
            direction,
            counter: 0,
        }
    }

    /// Appends `plaintext`, sealed, to `out`: one record per [`MAX_PLAINTEXT`] bytes (none for none).
    /// Allocates nothing when `out` has room for `plaintext.len()` plus [`OVERHEAD`] a record.
    pub fn seal(&mut self, plaintext: &[u8], out: &mut Vec<u8>) -> Result<(), SealError> {
        for chunk in plaintext.chunks(MAX_PLAINTEXT) {
            self.seal_record(chunk, out)?;
        }
        Ok(())
    }

    /// Records `plaintext.len()` bytes become: what `out` should have room for.
    pub fn sealed_len(plaintext: usize) -> usize {
        plaintext + plaintext.div_ceil(MAX_PLAINTEXT) * OVERHEAD
    }

    fn seal_record(&mut self, chunk: &[u8], out: &mut Vec<u8>) -> Result<(), SealError> {
        if self.counter == u64::MAX {
            return Err(SealError::Exhausted);
        }
        let header = u32::try_from(chunk.len() + TAG_LEN)
            .map_err(|_| SealError::TooLong(chunk.len()))?
            .to_be_bytes();
        let start = out.len();
        out.extend_from_slice(&header);
        out.extend_from_slice(chunk);
        let tag = self
            .cipher
            .encrypt_in_place_detached(
                &nonce(self.direction, self.counter),
                &header,
                &mut out[start + HEADER_LEN..],
            )
            .map_err(|_| SealError::TooLong(chunk.len()))?;
        out.extend_from_slice(&tag);
        self.counter += 1;
        Ok(())
    }
}

/// Opens what the other side sent: one per direction of a connection.
pub struct Opener {
    cipher: Aes256Gcm,
    direction: Direction,
    counter: u64,
    failed: bool,
}

impl Opener {
    pub fn new(key: &[u8; 32], direction: Direction) -> Self {
        Self {
            cipher: Aes256Gcm::new(Key::<Aes256Gcm>::from_slice(key)),
            direction,
            counter: 0,
            failed: false,
        }
    }

    /// The whole length of the record at the front of `bytes`, prefix included, once its prefix is in
    /// (`None` before); refused when no record is that long or that short.
    pub fn record_len(bytes: &[u8]) -> Result<Option<usize>, SealError> {
        let Some(header) = bytes.first_chunk::<HEADER_LEN>() else {
            return Ok(None);
        };
        let len = u32::from_be_bytes(*header) as usize;
        if len > MAX_RECORD - HEADER_LEN {
            return Err(SealError::TooLong(len));
        }
        if len < TAG_LEN {
            return Err(SealError::TooShort(len));
        }
        Ok(Some(HEADER_LEN + len))
    }

    /// Opens one whole record (prefix, ciphertext, tag), in place: its plaintext.
    pub fn open<'a>(&mut self, record: &'a mut [u8]) -> Result<&'a [u8], SealError> {
        let range = self.open_record(record)?;
        Ok(&record[range])
    }

    /// Opens the record at the front of `bytes` if it is whole: how many bytes it took, and where its
    /// plaintext lies in `bytes` (decrypted in place). `None` while the record is still arriving.
    pub fn open_front(
        &mut self,
        bytes: &mut [u8],
    ) -> Result<Option<(usize, Range<usize>)>, SealError> {
        if self.failed {
            return Err(SealError::Failed);
        }
        let len = match Self::record_len(bytes) {
            Ok(Some(len)) => len,
            Ok(None) => return Ok(None),
            Err(err) => {
                self.failed = true;
                return Err(err);
            }
        };
        if bytes.len() < len {
            return Ok(None);
        }
        let range = self.open_record(&mut bytes[..len])?;
        Ok(Some((len, range)))
    }

    fn open_record(&mut self, record: &mut [u8]) -> Result<Range<usize>, SealError> {
        if self.failed {
            return Err(SealError::Failed);
        }
        let outcome = (|| {
            let len = Self::record_len(record)?.ok_or(SealError::Truncated)?;
            if record.len() != len {
                return Err(SealError::Truncated);
            }
            if self.counter == u64::MAX {
                return Err(SealError::Exhausted);
            }
            let (header, body) = record.split_at_mut(HEADER_LEN);
            let (ciphertext, tag) = body.split_at_mut(body.len() - TAG_LEN);
            self.cipher
                .decrypt_in_place_detached(
                    &nonce(self.direction, self.counter),
                    header,
                    ciphertext,
                    Tag::from_slice(tag),
                )
                .map_err(|_| SealError::Forged)?;
            Ok(HEADER_LEN..len - TAG_LEN)
        })();
        match outcome {
            Ok(range) => {
                self.counter += 1;
                Ok(range)
            }
            Err(err) => {
                self.failed = true;
                Err(err)
            }
        }
    }
}

/// The opening side of a sealed connection as a blocking [`Read`]: reads whole records from `inner` (its
/// progress kept across a timed-out read), hands their plaintext out. A record that fails is an
/// [`ErrorKind::InvalidData`] error naming the peer; the stream's end inside a record is one too.
pub struct SealedReader<R> {
    inner: R,
    opener: Opener,
    peer: String,
    /// Bytes read and not yet handed out: `buffer[..filled]`; the record at its front, once opened, spans
    /// `..taken` with its plaintext at `plain`.
    buffer: Vec<u8>,
    filled: usize,
    taken: usize,
    plain: Range<usize>,
}

impl<R: Read> SealedReader<R> {
    pub fn new(inner: R, opener: Opener, peer: impl Into<String>) -> Self {
        Self {
            inner,
            opener,
            peer: peer.into(),
            buffer: Vec::new(),
            filled: 0,
            taken: 0,
            plain: 0..0,
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// Whether plaintext (or a part of a record) is held here already: a reader about to wait on the
    /// socket for more should not.
    pub fn holds_bytes(&self) -> bool {
        !self.plain.is_empty() || self.filled > self.taken
    }

    /// Opens the next record into `plain`; false at the stream's clean end.
    fn next_record(&mut self) -> std::io::Result<bool> {
        if self.taken > 0 {
            self.buffer.copy_within(self.taken..self.filled, 0);
            self.filled -= self.taken;
            self.taken = 0;
        }
        loop {
            match self.opener.open_front(&mut self.buffer[..self.filled]) {
                Ok(Some((took, plain))) => {
                    self.taken = took;
                    self.plain = plain;
                    return Ok(true);
                }
                Ok(None) => {}
                Err(err) => return Err(err.io(&self.peer)),
            }
            // Room for the record being read (its whole length once its prefix is in), and a little beyond to
            // take the next ones in the same read: never more than one record's most.
            let need = Opener::record_len(&self.buffer[..self.filled])
                .ok()
                .flatten()
                .unwrap_or(HEADER_LEN);
            let room = need.max(4096);
            if self.buffer.len() < room {
                self.buffer.resize(room, 0);
            }
            let n = self.inner.read(&mut self.buffer[self.filled..])?;
            if n == 0 {
                return if self.filled == 0 {
                    Ok(false)
                } else {
                    Err(SealError::Truncated.io(&self.peer))
                };
            }
            self.filled += n;
        }
    }
}

impl<R: Read> Read for SealedReader<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        while self.plain.is_empty() {
            if !self.next_record()? {
                return Ok(0);
            }
        }
        let n = out.len().min(self.plain.len());
        out[..n].copy_from_slice(&self.buffer[self.plain.start..self.plain.start + n]);
        self.plain.start += n;
        Ok(n)
    }
}

/// The sealing side of a connection as a blocking [`Write`]: each `write` seals up to [`MAX_PLAINTEXT`]
/// bytes into one record and writes it whole (put a `BufWriter` in front to gather small writes). A
/// record half written (a write timed out) breaks the stream: later writes fail.
pub struct SealedWriter<W> {
    inner: W,
    sealer: Sealer,
    peer: String,
    out: Vec<u8>,
    broken: bool,
}

impl<W: Write> SealedWriter<W> {
    pub fn new(inner: W, sealer: Sealer, peer: impl Into<String>) -> Self {
        Self {
            inner,
            sealer,
            peer: peer.into(),
            out: Vec::new(),
            broken: false,
        }
    }

    pub fn get_ref(&self) -> &W {
        &self.inner
    }
}

impl<W: Write> Write for SealedWriter<W> {
    fn write(&mut self, plaintext: &[u8]) -> std::io::Result<usize> {
        if self.broken {
            return Err(std::io::Error::new(
                ErrorKind::BrokenPipe,
                format!("{}: the stream broke mid-record", self.peer),
            ));
        }
        if plaintext.is_empty() {
            return Ok(0);
        }
        let n = plaintext.len().min(MAX_PLAINTEXT);
        self.out.clear();
        self.sealer
            .seal(&plaintext[..n], &mut self.out)
            .map_err(|err| err.io(&self.peer))?;
        if let Err(err) = self.inner.write_all(&self.out) {
            self.broken = true;
            return Err(err);
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (Sealer, Opener) {
        (
            Sealer::new(&[7; 32], Direction::ToListener),
            Opener::new(&[7; 32], Direction::ToListener),
        )
    }

    fn sealed(sealer: &mut Sealer, plaintext: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        sealer.seal(plaintext, &mut out).expect("seal");
        out
    }

    #[test]
    fn records_open_in_order_and_hide_their_plaintext() {
        let (mut sealer, mut opener) = pair();
        let mut first = sealed(&mut sealer, b"host p5-001 app_bytes 4096");
        let mut second = sealed(&mut sealer, b"host p5-001 app_bytes 4096");
        assert_eq!(first.len(), b"host p5-001 app_bytes 4096".len() + OVERHEAD);
        assert!(
            !first.windows(5).any(|w| w == b"p5-00"),
            "the plaintext shows through"
        );
        assert_ne!(first, second, "the same plaintext twice seals apart");
        assert_eq!(
            opener.open(&mut first).expect("first"),
            b"host p5-001 app_bytes 4096"
        );
        assert_eq!(
            opener.open(&mut second).expect("second"),
            b"host p5-001 app_bytes 4096"
        );
    }

    #[test]
    fn a_changed_byte_anywhere_fails_and_ends_the_stream() {
        for at in [0, 3, 4, 10, 40] {
            let (mut sealer, mut opener) = pair();
            let mut record = sealed(&mut sealer, b"twenty-seven bytes of data.");
            record[at] ^= 1;
            assert!(
                opener.open(&mut record).is_err(),
                "byte {at} changed went unseen"
            );
            let mut next = sealed(&mut sealer, b"next");
            assert_eq!(
                opener.open(&mut next),
                Err(SealError::Failed),
                "a failed stream opens nothing more"
            );
        }
    }

    #[test]
    fn a_reordered_replayed_or_dropped_record_fails() {
        let (mut sealer, mut opener) = pair();
        let first = sealed(&mut sealer, b"one");
        let second = sealed(&mut sealer, b"two");
        assert_eq!(
            opener.open(&mut second.clone()),
            Err(SealError::Forged),
            "the second record first (the first dropped)"
        );

        let (mut sealer, mut opener) = pair();
        let mut first_again = sealed(&mut sealer, b"one");
        let replay = first_again.clone();
        opener.open(&mut first_again).expect("first");
        assert_eq!(
            opener.open(&mut replay.clone()),
            Err(SealError::Forged),
            "the first record again"
        );
        drop((first, second));
    }

    #[test]
    fn the_other_direction_and_other_keys_fail() {
        let mut to_listener = Sealer::new(&[7; 32], Direction::ToListener);
        let mut record = sealed(&mut to_listener, b"reflected");
        assert_eq!(
            Opener::new(&[7; 32], Direction::ToCaller).open(&mut record.clone()),
            Err(SealError::Forged),
            "reflected back"
        );
        assert_eq!(
            Opener::new(&[8; 32], Direction::ToListener).open(&mut record),
            Err(SealError::Forged),
            "other keys"
        );
    }

    #[test]
    fn truncated_and_outsized_records_are_refused_before_any_wait() {
        let (mut sealer, mut opener) = pair();
        let record = sealed(&mut sealer, b"some bytes");
        let mut cut = record[..record.len() - 1].to_vec();
        assert_eq!(opener.open_front(&mut cut), Ok(None), "still arriving");
        assert_eq!(opener.open(&mut cut), Err(SealError::Truncated));
        let mut huge = (u32::MAX).to_be_bytes().to_vec();
        assert!(matches!(
            pair().1.open_front(&mut huge),
            Err(SealError::TooLong(_))
        ));
        let mut tiny = 3u32.to_be_bytes().to_vec();
        assert!(matches!(
            pair().1.open_front(&mut tiny),
            Err(SealError::TooShort(3))
        ));
    }

    #[test]
    fn a_long_message_is_several_records_and_sealing_reuses_the_buffer() {
        let (mut sealer, _) = pair();
        let message = vec![5u8; MAX_PLAINTEXT * 2 + 1];
        let mut out = Vec::with_capacity(Sealer::sealed_len(message.len()));
        let room = out.capacity();
        sealer.seal(&message, &mut out).expect("seal");
        assert_eq!(out.len(), Sealer::sealed_len(message.len()));
        assert_eq!(
            out.capacity(),
            room,
            "sealing into a buffer with room allocates nothing"
        );
    }

    #[test]
    fn the_blocking_adapters_carry_a_stream_and_name_the_peer_on_a_forgery() {
        let (sealer, opener) = pair();
        let mut writer = SealedWriter::new(Vec::new(), sealer, "rank 1");
        let message: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        writer.write_all(&message).expect("write");
        writer.write_all(b"tail").expect("write");
        let wire = writer.inner.clone();
        let mut reader = SealedReader::new(std::io::Cursor::new(wire.clone()), opener, "rank 1");
        let mut back = Vec::new();
        reader.read_to_end(&mut back).expect("read");
        assert_eq!(&back[..40_000], &message[..]);
        assert_eq!(&back[40_000..], b"tail");

        let mut forged = wire.clone();
        forged[HEADER_LEN + 100] ^= 0x20;
        let mut reader =
            SealedReader::new(std::io::Cursor::new(forged), pair().1, "127.0.0.1:4000");
        let err = reader
            .read_to_end(&mut Vec::new())
            .expect_err("a forged record is no data");
        assert_eq!(
            err.to_string(),
            "127.0.0.1:4000: frame failed authentication"
        );

        let mut reader = SealedReader::new(
            std::io::Cursor::new(wire[..wire.len() - 2].to_vec()),
            pair().1,
            "rank 1",
        );
        let err = reader.read_to_end(&mut Vec::new()).expect_err("cut short");
        assert!(err.to_string().contains("ended inside a record"), "{err}");
    }
}
