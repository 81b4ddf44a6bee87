//! Bytes as rank 0's collector reads them off a rank's connection: frames back to back, each a `u32` length
//! prefix and a body. Whatever arrives, the decoder answers with a sample or a `WireError`, never a panic;
//! a body that decodes re-encodes to a frame that decodes to the same sample (rank samples with a GPU section,
//! kind 3, included: the proxy's queue and NVLink pairs, whose decoded peaks are positive rates or none); and
//! the latency queries rank 0 runs on every decoded histogram (percentiles, max, merging into a rank's total)
//! and the rates it computes from a GPU section hold up too. Node
//! snapshots (`efatop monitor` across nodes) share the stream: one that decodes re-encodes to the same bytes
//! (compared as bytes: a rate may be NaN, which equals nothing). So do phase reports and a relay's word that a
//! rank it carried closed: each decodes back to itself.

#![no_main]

use efatop_proto::telemetry::wire;
use efatop_proto::telemetry::IntervalHistogram;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|stream: &[u8]| {
    let mut rest = stream;
    // The collector and a host's relay split a stream as this does: they hang up on a length they cannot
    // trust, and wait for more bytes on a short body.
    while let Ok(Some((len, body))) = wire::split_frame(rest, wire::MAX_FRAME as usize) {
        rest = &rest[len..];
        let sample = match wire::decode_frame(body) {
            Ok(wire::Frame::Rank(sample)) => sample,
            Ok(wire::Frame::Node(node)) => {
                let mut first = Vec::new();
                if wire::encode_node(&node, &mut first).is_ok() {
                    let Ok(wire::Frame::Node(again)) = wire::decode_frame(&first[4..]) else {
                        panic!("a re-encoded node frame does not decode")
                    };
                    let mut second = Vec::new();
                    wire::encode_node(&again, &mut second).expect("what decoded encodes");
                    assert_eq!(first, second, "node frame changes on a round trip");
                }
                continue;
            }
            Ok(wire::Frame::Phase(report)) => {
                let again = wire::decode_frame(&wire::encode_phase(&report)[4..]);
                assert_eq!(again, Ok(wire::Frame::Phase(report)), "phase report changes on a round trip");
                continue;
            }
            Ok(wire::Frame::Gone(rank)) => {
                assert_eq!(wire::decode_frame(&wire::encode_gone(rank)[4..]), Ok(wire::Frame::Gone(rank)), "rank gone changes on a round trip");
                continue;
            }
            Err(_) => continue,
        };

        let mut frame = Vec::new();
        wire::encode(&sample, &mut frame);
        let (length, reencoded_body) = frame.split_first_chunk::<4>().expect("a frame starts with its length");
        assert_eq!(u32::from_le_bytes(*length) as usize, reencoded_body.len(), "length prefix of the re-encoded frame");
        assert_eq!(wire::decode(reencoded_body).as_ref(), Ok(&sample), "re-encoded frame decodes to another sample");

        // What the dashboard and JSON lines compute from a GPU section (kind 3): rates of any interval.
        if let Some(queue) = &sample.queue {
            let _ = (queue.requests_per_s(sample.interval_ns), queue.quiet_calls_per_s(sample.interval_ns));
        }
        for pair in &sample.nvlink {
            let _ = pair.gbytes_per_s(sample.interval_ns);
            assert!(pair.peak_gbytes_per_s.is_none_or(|peak| peak.is_finite() && peak > 0.0), "a decoded peak is a rate");
        }

        let mut all_channels = IntervalHistogram::default();
        let histograms = sample.channels.iter().map(|c| &c.latency).chain(sample.peers.iter().map(|p| &p.latency));
        for histogram in histograms {
            for quantile in [0.0, 0.5, 0.99, 1.0] {
                let _ = histogram.quantile_us(quantile);
            }
            let _ = histogram.max_us();
            all_channels.merge(histogram);
        }
        let _ = all_channels.quantile_us(0.5);
    }
});
