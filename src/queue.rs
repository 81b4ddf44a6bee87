//! `efatop queue`: the GPU→CPU request ring measured alone, on one GPU, with no fabric and no ranks.

use std::io::Write;

use crate::cli::{QueueArgs, RingArg};
use efatop_experiments::queue::RingDesign;
use efatop_experiments::queue::{self, QueueOptions};
use efatop_proto::output::Line;
use efatop_proto::results::QueueRow;

pub fn queue(args: &QueueArgs) -> i32 {
    let options = QueueOptions {
        gpu: args.gpu,
        blocks: args.blocks.clone(),
        threads: args.threads.clone(),
        requests: args.requests,
        latency_requests: args.latency_requests,
        slots: args.slots,
        timeout: std::time::Duration::from_secs(args.timeout),
        design: match args.ring {
            RingArg::Warp => RingDesign::Warp,
            RingArg::Seed => RingDesign::Seed,
        },
    };
    let design = options.design;
    let json = args.json;
    let mut header = !json;
    let mut print = |row: &QueueRow| {
        // The header waits for the first row: without a GPU the run ends in one line on stderr.
        if std::mem::take(&mut header) {
            println!("# GPU→CPU request ring: {} slots; open loop for requests/s, closed loop for latency (GPU clock, push → consumer's index passes it)", args.slots);
            println!("# push design `{}`: {}", design.name(), design.describe());
            println!("{:>6} {:>7} {:>9} | {:>10} {:>12} | {:>9} {:>9} {:>9} {:>9}", "Blocks", "Threads", "Producers", "Requests", "Requests/s", "LatReqs", "p50 (us)", "p99 (us)", "max (us)");
        }
        if json {
            if let Ok(line) = Line::<()>::Queue(row.clone()).to_json() {
                println!("{line}");
            }
        } else {
            println!(
                "{:>6} {:>7} {:>9} | {:>10} {:>12.0} | {:>9} {:>9.2} {:>9.2} {:>9.2}",
                row.blocks,
                row.threads,
                u64::from(row.blocks) * u64::from(row.threads),
                row.requests,
                row.requests_per_s,
                row.latency_requests,
                row.latency_p50_us,
                row.latency_p99_us,
                row.latency_max_us
            );
        }
        let _ = std::io::stdout().flush();
    };
    match queue::run(&options, &mut print) {
        Ok(_) => {
            if !json {
                println!("# every request consumed exactly once, in each producer's order");
            }
            0
        }
        Err(err) => {
            eprintln!("efatop: error: {err}");
            err.exit_code()
        }
    }
}
