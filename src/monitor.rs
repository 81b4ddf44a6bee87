//! `efatop monitor`: a live view of a node's NIC and GPU-link counters (logic in `efatop-monitor`).

use clap::Args;

#[derive(Debug, Args)]
pub struct MonitorArgs {}

pub fn monitor(_args: &MonitorArgs) -> i32 {
    eprintln!("efatop: error: monitor is not built yet");
    2
}
