//! `efatop queue`: the GPU→CPU request ring measured alone, on one GPU, with no fabric and no ranks.

use std::io::Write;

use clap::Args;
use efatop_experiments::queue::{self, QueueOptions, QueueRow};

#[derive(Debug, Clone, Args)]
pub struct QueueArgs {
    /// GPU whose kernel pushes the requests
    #[arg(long, default_value_t = 0)]
    pub gpu: usize,
    /// Producer blocks to try (the kernel's grid)
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 8, 64, 132], value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub blocks: Vec<u32>,
    /// Producer threads per block to try
    #[arg(long, value_delimiter = ',', default_values_t = [1u32, 32, 256], value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub threads: Vec<u32>,
    /// Requests per shape in the open-loop (requests/s) pass; each producer pushes at least 16
    #[arg(long, default_value_t = 1 << 20, value_parser = clap::value_parser!(u64).range(1..=1 << 32))]
    pub requests: u64,
    /// Requests per shape in the closed-loop (latency) pass; each producer pushes at least 4
    #[arg(long, default_value_t = 1 << 16, value_parser = clap::value_parser!(u64).range(1..=1 << 28))]
    pub latency_requests: u64,
    /// Ring slots (a power of two); producers wait when the consumer is this far behind
    #[arg(long, default_value_t = 1024, value_parser = parse_slots)]
    pub slots: u64,
    /// Seconds without a request before the run is declared hung
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub timeout: u64,
    /// One JSON object per shape instead of a table
    #[arg(long)]
    pub json: bool,
}

fn parse_slots(text: &str) -> Result<u64, String> {
    match text.parse::<u64>() {
        Ok(n) if n.is_power_of_two() && (2..=1 << 20).contains(&n) => Ok(n),
        _ => Err(format!("`{text}` is not a ring size; use a power of two from 2 to 1048576")),
    }
}

pub fn queue(args: &QueueArgs) -> i32 {
    let options = QueueOptions {
        gpu: args.gpu,
        blocks: args.blocks.clone(),
        threads: args.threads.clone(),
        requests: args.requests,
        latency_requests: args.latency_requests,
        slots: args.slots,
        timeout: std::time::Duration::from_secs(args.timeout),
    };
    let json = args.json;
    let mut header = !json;
    let mut print = |row: &QueueRow| {
        // The header waits for the first row: without a GPU the run ends in one line on stderr.
        if std::mem::take(&mut header) {
            println!("# GPU→CPU request ring: {} slots; open loop for requests/s, closed loop for latency (GPU clock, push → consumer's index passes it)", args.slots);
            println!("{:>6} {:>7} {:>9} | {:>10} {:>12} | {:>9} {:>9} {:>9} {:>9}", "Blocks", "Threads", "Producers", "Requests", "Requests/s", "LatReqs", "p50 (us)", "p99 (us)", "max (us)");
        }
        if json {
            println!("{}", serde_json::json!({"type": "queue", "data": row}));
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
