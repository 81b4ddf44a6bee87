//! Prints what the monitor's GPU panel reads on this machine: two NVML reads a second apart, as JSON.
//! For checking the NVML path on a GPU machine without the rest of efatop (libfabric).

use std::time::Duration;

use efatop_node::GpuReader;

fn main() {
    let mut reader = GpuReader::open();
    for _ in 0..2 {
        let panel = reader.read();
        println!("{}", serde_json::to_string(&panel).unwrap_or_else(|err| format!("{{\"error\":\"{err}\"}}")));
        std::thread::sleep(Duration::from_secs(1));
    }
}
