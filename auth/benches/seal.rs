//! What sealing costs a telemetry frame (a benchmark, not a test): a rank's sample encoded as its sampler
//! encodes it, then sealed (`efatop_auth::seal`), against the encoding itself as the peer in the same run;
//! and on rank 0's side, opening the record against decoding the frame. Three shapes: a 1-channel rank with
//! one peer, a p5-like rank (4 channels, 8 peers), and a wide one (32 channels, 64 peers).
//!
//! Run: `cargo bench -p efatop-auth --bench seal` (options after `--`: `--frames N`).

use std::hint::black_box;
use std::time::Instant;

use efatop_auth::seal::{Direction, Opener, Sealer};
use efatop_proto::telemetry::wire;
use efatop_proto::telemetry::{ChannelSample, IntervalHistogram, PeerSample, RankSample};

fn sample(channels: usize, peers: usize) -> RankSample {
    let latency = IntervalHistogram { buckets: vec![(200, 40), (210, 9), (250, 1)].into() };
    RankSample {
        rank: 3,
        seq: 7,
        interval_ns: 100_000_000,
        channels: (0..channels)
            .map(|channel| ChannelSample { channel: channel as u16, bytes: 1_187_500_000, ops: 141, in_flight: 4, latency: latency.clone() })
            .collect(),
        peers: (0..peers).map(|peer| PeerSample { peer: peer as u32, bytes: 1_250_000_000, ops: 50, latency: latency.clone() }).collect(),
        ..RankSample::default()
    }
}

/// Nanoseconds per call of `each`: the best of rounds of 200 calls over `frames` calls in all (after a round
/// to warm up). The best round, since this machine's other work preempts some rounds; it does not speed one.
fn per_call(frames: usize, mut each: impl FnMut()) -> f64 {
    const ROUND: usize = 200;
    let mut best = f64::INFINITY;
    for round in 0..=frames.div_ceil(ROUND) {
        let started = Instant::now();
        for _ in 0..ROUND {
            each();
        }
        if round > 0 {
            best = best.min(started.elapsed().as_nanos() as f64 / ROUND as f64);
        }
    }
    best
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let frames = args.iter().position(|a| a == "--frames").and_then(|at| args.get(at + 1)?.parse().ok()).unwrap_or(200_000usize);
    println!("{:<28} {:>7} {:>10} {:>10} {:>10} {:>10}", "frame", "bytes", "encode ns", "seal ns", "decode ns", "open ns");
    for (name, channels, peers) in [("1 channel, 1 peer", 1, 1), ("4 channels, 8 peers", 4, 8), ("32 channels, 64 peers", 32, 64)] {
        let sample = sample(channels, peers);
        let mut frame = Vec::with_capacity(64 << 10);
        let encode = per_call(frames, || {
            frame.clear();
            wire::encode(black_box(&sample), &mut frame);
        });
        let mut sealer = Sealer::new(&[7; 32], Direction::ToListener);
        let mut sealed = Vec::with_capacity(Sealer::sealed_len(frame.len()));
        let seal = per_call(frames, || {
            sealed.clear();
            sealer.seal(black_box(&frame), &mut sealed).expect("seal");
        });
        // Records to open, each sealed in turn (every record has its own number).
        let mut sealer = Sealer::new(&[7; 32], Direction::ToListener);
        let records: Vec<Vec<u8>> = (0..1000)
            .map(|_| {
                let mut record = Vec::new();
                sealer.seal(&frame, &mut record).expect("seal");
                record
            })
            .collect();
        let mut opener = Opener::new(&[7; 32], Direction::ToListener);
        let mut scratch = records[0].clone();
        let mut next = 0usize;
        let open = per_call(frames, || {
            // A fresh opener each pass over the records, so that each record opens at its own number.
            if next == records.len() {
                next = 0;
                opener = Opener::new(&[7; 32], Direction::ToListener);
            }
            scratch.clear();
            scratch.extend_from_slice(&records[next]);
            next += 1;
            black_box(opener.open(&mut scratch).expect("open"));
        });
        let body = &frame[4..];
        let decode = per_call(frames, || {
            black_box(wire::decode_frame(black_box(body)).expect("decode"));
        });
        println!("{name:<28} {:>7} {encode:>10.0} {seal:>10.0} {decode:>10.0} {open:>10.0}", frame.len());
    }
}
