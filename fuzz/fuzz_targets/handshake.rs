//! Bytes a stranger sends into a run's handshake (`efatop_auth`), on either side: as a connecting
//! side's answer to a listener's fresh challenge, and as a listener's hello and proof to a connecting side.
//! Whatever arrives, each side answers with a result, never a panic, and no bytes the fuzzer makes up pass
//! as a proof of a secret they were not made with.

#![no_main]

use efatop_auth::{Answer, Challenge, Secret};
use efatop_proto::handshake::{ANSWER_LEN, HELLO_LEN, PROOF_LEN, Purpose};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let secret = Secret::from_bytes([7u8; 32]);
    // As a listener: the stranger answers our challenge.
    if let Some(answer) = data.first_chunk::<ANSWER_LEN>() {
        let (challenge, _hello) = Challenge::new(Purpose::Telemetry).expect("random source");
        assert!(challenge.check(&secret, answer).is_err(), "a made-up answer passed a fresh challenge");
    }
    // As a connecting side: the stranger is the listener (a squatter on the port).
    if let Some(hello) = data.first_chunk::<HELLO_LEN>() {
        if let Ok((pending, _answer)) = Answer::new(&secret, Purpose::Rendezvous, hello) {
            let proof = data[HELLO_LEN..].first_chunk::<PROOF_LEN>().copied().unwrap_or([0u8; PROOF_LEN]);
            assert!(pending.verify(&secret, &proof).is_err(), "a squatter's made-up proof was believed");
        }
    }
});
