//! Who may talk to a run: one secret per run ([`Secret`]), proven on every connection by a challenge and
//! response in both directions, keyed with HMAC-SHA256 (RFC 2104 over FIPS 180-4), so that the secret never
//! travels and a recorded exchange cannot be replayed.
//!
//! The exchange, on a fresh connection, before anything else (every message has a fixed length):
//!
//! 1. the listener sends its hello (its bytes are `efatop_proto::handshake`'s): the magic (7 bytes), the [`Purpose`] byte, and 32 random bytes (its nonce);
//! 2. the connecting side answers with 32 random bytes of its own and its proof, the HMAC of
//!    `"efatop-client" ‖ purpose ‖ listener's nonce ‖ its nonce`;
//! 3. the listener checks that proof (in constant time) and, only if it holds, sends its own proof, the HMAC of
//!    `"efatop-server" ‖ purpose ‖ listener's nonce ‖ connecting side's nonce`, which the connecting side checks.
//!
//! A listener that fails step 3 sends nothing and closes; a connecting side that fails it closes too: so a
//! stranger who squats a port learns nothing and receives nothing, and a stranger who connects is dropped
//! before its first frame is read. The purpose is bound into both proofs: a proof made for a viewer does not
//! open the telemetry collector.
//!
//! Both sides then hold a [`Session`]: a key per direction, derived from the secret, both nonces and the
//! purpose (HKDF-SHA256, RFC 5869), with which every byte that follows is sealed ([`seal`]). A relay
//! that passed the handshake through untouched holds neither key: it can read nothing after it, and a byte
//! it changes, drops, reorders or replays fails the next record's check (docs/security.md).

use std::fmt;
use std::io::{Read, Write};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use efatop_proto::handshake::{Purpose, ANSWER_LEN, HELLO_LEN, MAGIC, NONCE_LEN, PROOF_LEN};

use crate::seal::{Direction, Opener, SealedReader, SealedWriter, Sealer};

pub mod deadline;
pub mod seal;
pub mod secret;

const SECRET_LEN: usize = 32;

type HmacSha256 = Hmac<Sha256>;

/// Where a run's secret came from; the header and the results file say which.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// Made by `efatop run`'s launcher and handed to the ranks it started.
    Launcher,
    /// Made by rank 0 and broadcast over MPI.
    Mpi,
    /// Made by rank 0 and handed to each rank inside a MUNGE credential only the run's user can decode.
    Munge,
    /// `EFATOP_TOKEN`.
    Environment,
    /// A file readable by its owner alone.
    File(String),
    /// Made for this process alone (a world of one, a local monitor).
    Process,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Launcher => f.write_str("made by the launcher"),
            Self::Mpi => f.write_str("made by rank 0, broadcast over MPI"),
            Self::Munge => f.write_str("made by rank 0, handed over in MUNGE credentials"),
            Self::Environment => f.write_str("EFATOP_TOKEN"),
            Self::File(path) => write!(f, "token file {path}"),
            Self::Process => f.write_str("made by this process"),
        }
    }
}

/// A run's secret: 32 bytes every party of the run holds and no one else.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret([u8; SECRET_LEN]);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Why a handshake or a secret failed.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("the peer does not speak efatop's handshake")]
    NotEfatop,
    #[error("the peer's handshake is for another purpose ({0})")]
    WrongPurpose(u8),
    #[error("the peer did not prove it holds the run's secret")]
    BadProof,
    /// The listener closed (or said nothing) before its hello: a listener whose handshakes are all taken
    /// does so, and a caller may try again.
    #[error("no greeting from the listener ({0})")]
    NoHello(std::io::Error),
    /// The listener took our answer and closed without its proof: it refused ours.
    #[error("the listener refused this proof ({0})")]
    Refused(std::io::Error),
    #[error("handshake: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Token(String),
}

impl Secret {
    /// 32 bytes from the operating system's random source.
    pub fn generate() -> Result<Self, AuthError> {
        let mut bytes = [0u8; SECRET_LEN];
        getrandom::fill(&mut bytes).map_err(|e| AuthError::Token(format!("no random source: {e}")))?;
        Ok(Self(bytes))
    }

    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }

    /// A token as a person or a tool writes it (`EFATOP_TOKEN`, a token file): any text of at least 16
    /// characters, surrounding white space ignored, hashed into a secret.
    pub fn from_token(token: &str) -> Result<Self, AuthError> {
        let token = token.trim();
        if token.chars().count() < 16 {
            return Err(AuthError::Token(format!("a token has at least 16 characters, this one {}", token.chars().count())));
        }
        let mut hash = Sha256::new();
        hash.update(b"efatop-token\0");
        hash.update(token.as_bytes());
        Ok(Self(hash.finalize().into()))
    }

    /// The secret as 64 hexadecimal digits, as the launcher hands it to its ranks.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn from_hex(text: &str) -> Result<Self, AuthError> {
        let mut bytes = [0u8; SECRET_LEN];
        hex::decode_to_slice(text.trim(), &mut bytes).map_err(|_| AuthError::Token("not a run secret (64 hex digits)".into()))?;
        Ok(Self(bytes))
    }

    fn proof(&self, side: &[u8], purpose: u8, listener_nonce: &[u8], caller_nonce: &[u8]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(side);
        mac.update(&[purpose]);
        mac.update(listener_nonce);
        mac.update(caller_nonce);
        mac
    }
}

/// Which end of a connection this side is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The side that listened and sent the hello.
    Listener,
    /// The side that connected and answered.
    Caller,
}

/// What a handshake leaves both sides: the keys that seal what this side sends and open what the other
/// side sends, bound to the run's secret, both nonces and the purpose.
pub struct Session {
    pub sealer: Sealer,
    pub opener: Opener,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Session(…)")
    }
}

impl Session {
    /// The keys of one connection: HKDF-SHA256 with both nonces as the salt and the secret as the input
    /// keying material, one key per direction, each labelled with the purpose and the direction.
    pub fn derive(
        secret: &Secret,
        purpose: Purpose,
        listener_nonce: &[u8; NONCE_LEN],
        caller_nonce: &[u8; NONCE_LEN],
        side: Side,
    ) -> Self {
        let mut salt = [0u8; 2 * NONCE_LEN];
        salt[..NONCE_LEN].copy_from_slice(listener_nonce);
        salt[NONCE_LEN..].copy_from_slice(caller_nonce);
        let keys = hkdf::Hkdf::<Sha256>::new(Some(&salt), &secret.0);
        let key = |direction: Direction| {
            let mut key = [0u8; 32];
            keys.expand_multi_info(&[SEAL_LABEL, &[purpose as u8, direction as u8]], &mut key)
                .expect("32 bytes is a valid HKDF-SHA256 length");
            key
        };
        let (to_caller, to_listener) = (key(Direction::ToCaller), key(Direction::ToListener));
        match side {
            Side::Listener => Self {
                sealer: Sealer::new(&to_caller, Direction::ToCaller),
                opener: Opener::new(&to_listener, Direction::ToListener),
            },
            Side::Caller => Self {
                sealer: Sealer::new(&to_listener, Direction::ToListener),
                opener: Opener::new(&to_caller, Direction::ToCaller),
            },
        }
    }

    /// Blocking adapters over a connection's two halves (`reader` and `writer`: the same socket, cloned),
    /// naming `peer` in their refusals.
    pub fn wrap<R: Read, W: Write>(
        self,
        reader: R,
        writer: W,
        peer: &str,
    ) -> (SealedReader<R>, SealedWriter<W>) {
        (
            SealedReader::new(reader, self.opener, peer),
            SealedWriter::new(writer, self.sealer, peer),
        )
    }
}

/// Labels the keys a session derives: the protocol and its version.
const SEAL_LABEL: &[u8] = b"efatop-seal 1";

fn nonce() -> Result<[u8; NONCE_LEN], AuthError> {
    let mut bytes = [0u8; NONCE_LEN];
    getrandom::fill(&mut bytes).map_err(|e| AuthError::Token(format!("no random source: {e}")))?;
    Ok(bytes)
}

const CLIENT: &[u8] = b"efatop-client";
const SERVER: &[u8] = b"efatop-server";

/// The listener's side of one handshake, between its hello and the connecting side's answer.
pub struct Challenge {
    purpose: Purpose,
    nonce: [u8; NONCE_LEN],
}

impl Challenge {
    /// A fresh challenge and the hello that carries it.
    pub fn new(purpose: Purpose) -> Result<(Self, [u8; HELLO_LEN]), AuthError> {
        let nonce = nonce()?;
        let mut hello = [0u8; HELLO_LEN];
        hello[..MAGIC.len()].copy_from_slice(MAGIC);
        hello[MAGIC.len()] = purpose as u8;
        hello[MAGIC.len() + 1..].copy_from_slice(&nonce);
        Ok((Self { purpose, nonce }, hello))
    }

    /// Checks the connecting side's answer; the listener's proof to send back when it holds.
    pub fn check(&self, secret: &Secret, answer: &[u8; ANSWER_LEN]) -> Result<[u8; PROOF_LEN], AuthError> {
        let (caller_nonce, proof) = answer.split_at(NONCE_LEN);
        secret
            .proof(CLIENT, self.purpose as u8, &self.nonce, caller_nonce)
            .verify_slice(proof)
            .map_err(|_| AuthError::BadProof)?;
        Ok(secret.proof(SERVER, self.purpose as u8, &self.nonce, caller_nonce).finalize().into_bytes().into())
    }

    /// The listener's keys for the connection whose `answer` [`Challenge::check`] accepted.
    pub fn session(&self, secret: &Secret, answer: &[u8; ANSWER_LEN]) -> Session {
        let mut caller_nonce = [0u8; NONCE_LEN];
        caller_nonce.copy_from_slice(&answer[..NONCE_LEN]);
        Session::derive(
            secret,
            self.purpose,
            &self.nonce,
            &caller_nonce,
            Side::Listener,
        )
    }
}

/// The connecting side of one handshake, between its answer and the listener's proof.
pub struct Answer {
    purpose: Purpose,
    listener_nonce: [u8; NONCE_LEN],
    nonce: [u8; NONCE_LEN],
}

impl Answer {
    /// Reads the listener's hello and makes the answer to send.
    pub fn new(secret: &Secret, purpose: Purpose, hello: &[u8; HELLO_LEN]) -> Result<(Self, [u8; ANSWER_LEN]), AuthError> {
        if &hello[..MAGIC.len()] != MAGIC {
            return Err(AuthError::NotEfatop);
        }
        let offered = hello[MAGIC.len()];
        if Purpose::from_byte(offered) != Some(purpose) {
            return Err(AuthError::WrongPurpose(offered));
        }
        let mut listener_nonce = [0u8; NONCE_LEN];
        listener_nonce.copy_from_slice(&hello[MAGIC.len() + 1..]);
        let nonce = nonce()?;
        let proof = secret.proof(CLIENT, purpose as u8, &listener_nonce, &nonce).finalize().into_bytes();
        let mut answer = [0u8; ANSWER_LEN];
        answer[..NONCE_LEN].copy_from_slice(&nonce);
        answer[NONCE_LEN..].copy_from_slice(&proof);
        Ok((Self { purpose, listener_nonce, nonce }, answer))
    }

    /// Checks that the listener holds the secret too.
    pub fn verify(&self, secret: &Secret, proof: &[u8; PROOF_LEN]) -> Result<(), AuthError> {
        secret
            .proof(SERVER, self.purpose as u8, &self.listener_nonce, &self.nonce)
            .verify_slice(proof)
            .map_err(|_| AuthError::BadProof)
    }

    /// The connecting side's keys, once [`Answer::verify`] held.
    pub fn session(&self, secret: &Secret) -> Session {
        Session::derive(
            secret,
            self.purpose,
            &self.listener_nonce,
            &self.nonce,
            Side::Caller,
        )
    }
}

/// The whole exchange as the listener, over a blocking stream (whose caller set its timeouts): the keys
/// that seal what follows.
pub fn accept_session(stream: &mut (impl Read + Write), secret: &Secret, purpose: Purpose) -> Result<Session, AuthError> {
    let (challenge, hello) = Challenge::new(purpose)?;
    stream.write_all(&hello)?;
    stream.flush()?;
    let mut answer = [0u8; ANSWER_LEN];
    stream.read_exact(&mut answer)?;
    let proof = challenge.check(secret, &answer)?;
    stream.write_all(&proof)?;
    stream.flush()?;
    Ok(challenge.session(secret, &answer))
}

/// The whole exchange as the connecting side, over a blocking stream (whose caller set its timeouts): the
/// keys that seal what follows. The magic is read, and checked, before the rest of the hello: a peer that
/// is not efatop is told apart at its first bytes, not after a wait for bytes it will never send
/// ([`AuthError::NotEfatop`]). A listener that closes before its hello ([`AuthError::NoHello`]) may be tried
/// again; one that closes after our answer refused it ([`AuthError::Refused`]).
pub fn connect_session(stream: &mut (impl Read + Write), secret: &Secret, purpose: Purpose) -> Result<Session, AuthError> {
    let mut hello = [0u8; HELLO_LEN];
    stream.read_exact(&mut hello[..MAGIC.len()]).map_err(AuthError::NoHello)?;
    if &hello[..MAGIC.len()] != MAGIC {
        return Err(AuthError::NotEfatop);
    }
    stream.read_exact(&mut hello[MAGIC.len()..]).map_err(AuthError::NoHello)?;
    let (pending, answer) = Answer::new(secret, purpose, &hello)?;
    stream.write_all(&answer)?;
    stream.flush()?;
    let mut proof = [0u8; PROOF_LEN];
    stream.read_exact(&mut proof).map_err(AuthError::Refused)?;
    pending.verify(secret, &proof)?;
    Ok(pending.session(secret))
}

/// [`accept_session`] with the keys thrown away: for tests of the handshake alone. Every surface seals
/// what follows its handshake, and so uses [`accept_session`].
pub fn accept(
    stream: &mut (impl Read + Write),
    secret: &Secret,
    purpose: Purpose,
) -> Result<(), AuthError> {
    accept_session(stream, secret, purpose).map(drop)
}

/// [`connect_session`] with the keys thrown away: for tests of the handshake alone (see [`accept`]).
pub fn connect(
    stream: &mut (impl Read + Write),
    secret: &Secret,
    purpose: Purpose,
) -> Result<(), AuthError> {
    connect_session(stream, secret, purpose).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    fn pair(server_secret: Secret, client_secret: &Secret, server_purpose: Purpose, client_purpose: Purpose) -> (Result<(), AuthError>, Result<(), AuthError>) {
        let (mut a, mut b) = UnixStream::pair().expect("pair");
        let timeout = Some(std::time::Duration::from_secs(5));
        a.set_read_timeout(timeout).expect("timeout");
        b.set_read_timeout(timeout).expect("timeout");
        let server = std::thread::spawn(move || {
            let result = accept(&mut a, &server_secret, server_purpose);
            drop(a);
            result
        });
        let client = connect(&mut b, client_secret, client_purpose);
        (server.join().expect("server"), client)
    }

    #[test]
    fn both_sides_prove_the_same_secret() {
        let secret = Secret::generate().expect("secret");
        let (server, client) = pair(secret.clone(), &secret, Purpose::Telemetry, Purpose::Telemetry);
        server.expect("server accepts");
        client.expect("client accepts");
    }

    #[test]
    fn both_sides_derive_the_same_keys_bound_to_the_handshake_and_purpose() {
        let secret = Secret::generate().expect("secret");
        let (challenge, hello) = Challenge::new(Purpose::Telemetry).expect("challenge");
        let (pending, answer) = Answer::new(&secret, Purpose::Telemetry, &hello).expect("answer");
        challenge.check(&secret, &answer).expect("proof");
        let mut listener = challenge.session(&secret, &answer);
        let mut caller = pending.session(&secret);
        let mut record = Vec::new();
        caller.sealer.seal(b"rank 3", &mut record).expect("seal");
        assert_eq!(
            listener
                .opener
                .open(&mut record.clone())
                .expect("the listener opens the caller's"),
            b"rank 3"
        );
        let mut back = Vec::new();
        listener.sealer.seal(b"ack", &mut back).expect("seal");
        assert_eq!(
            caller
                .opener
                .open(&mut back)
                .expect("the caller opens the listener's"),
            b"ack"
        );

        // Another purpose, another handshake's nonces, the other side's keys: none opens the record.
        let (l, c) = (challenge.nonce, pending.nonce);
        for (purpose, listener_nonce, side) in [
            (Purpose::Viewer, l, Side::Listener),
            (Purpose::Telemetry, [0u8; NONCE_LEN], Side::Listener),
            (Purpose::Telemetry, l, Side::Caller),
        ] {
            let mut other = Session::derive(&secret, purpose, &listener_nonce, &c, side);
            assert!(
                other.opener.open(&mut record.clone()).is_err(),
                "{purpose:?} {side:?} opened it"
            );
        }
        let mut other = Session::derive(
            &Secret::generate().expect("secret"),
            Purpose::Telemetry,
            &l,
            &c,
            Side::Listener,
        );
        assert!(
            other.opener.open(&mut record).is_err(),
            "another secret opened it");
    }

    #[test]
    fn another_secret_is_refused_and_the_listener_proves_nothing() {
        let (server, client) = pair(Secret::generate().unwrap(), &Secret::generate().unwrap(), Purpose::Telemetry, Purpose::Telemetry);
        assert!(matches!(server, Err(AuthError::BadProof)), "{server:?}");
        // The listener closed without a proof: the client reads end of file, never a proof to test.
        assert!(matches!(client, Err(AuthError::Refused(_))), "{client:?}");
    }

    #[test]
    fn a_proof_for_one_purpose_opens_no_other() {
        let secret = Secret::generate().expect("secret");
        let (server, client) = pair(secret.clone(), &secret, Purpose::Telemetry, Purpose::Viewer);
        assert!(matches!(client, Err(AuthError::WrongPurpose(2))), "{client:?}");
        assert!(server.is_err());
    }

    #[test]
    fn a_replayed_answer_fails_a_fresh_challenge() {
        let secret = Secret::generate().expect("secret");
        let (first, hello) = Challenge::new(Purpose::Viewer).expect("challenge");
        let (_, answer) = Answer::new(&secret, Purpose::Viewer, &hello).expect("answer");
        first.check(&secret, &answer).expect("the real answer holds");
        let (second, _) = Challenge::new(Purpose::Viewer).expect("challenge");
        assert!(matches!(second.check(&secret, &answer), Err(AuthError::BadProof)));
    }

    #[test]
    fn a_listener_without_the_secret_is_not_believed() {
        // A squatter on the port: it speaks the protocol but must guess the proof.
        let secret = Secret::generate().expect("secret");
        let (_, hello) = Challenge::new(Purpose::Rendezvous).expect("challenge");
        let (pending, _) = Answer::new(&secret, Purpose::Rendezvous, &hello).expect("answer");
        assert!(matches!(pending.verify(&secret, &[0u8; PROOF_LEN]), Err(AuthError::BadProof)));
        assert!(matches!(Answer::new(&secret, Purpose::Rendezvous, &[0u8; HELLO_LEN]), Err(AuthError::NotEfatop)));
    }

    #[test]
    fn tokens_hash_to_secrets_and_short_ones_are_refused() {
        let a = Secret::from_token(" a-long-enough-token \n").expect("token");
        assert_eq!(a, Secret::from_token("a-long-enough-token").expect("token"));
        assert_ne!(a, Secret::from_token("another-long-token").expect("token"));
        assert!(Secret::from_token("short").is_err());
        let hex = a.to_hex();
        assert_eq!(Secret::from_hex(&hex).expect("hex"), a);
        assert!(Secret::from_hex("zz").is_err());
        assert_eq!(format!("{a:?}"), "Secret(…)", "a secret never prints");
    }
}
