//! NIC counters against application bytes (`efatop_proto::counters`) as text: one line per configuration
//! and size for the header, the log and the plain tables.

use std::fmt::Write as _;

use efatop_proto::counters::StepCounters;
use efatop_proto::results::{Measurement, RunResults};
use efatop_proto::sizes::format_size;

/// `SinglePin 16M: NIC/app 1.03 (rdma_write_bytes)`; `None` for a measurement without counters.
pub fn step_line(measurement: &Measurement) -> Option<String> {
    let counters: &StepCounters = measurement.counters.as_ref()?;
    Some(format!("{} {}: {}", measurement.config, format_size(measurement.size), counters.summary()))
}

/// Every step's line and each channel's ratio, after the table.
pub fn render_counters(results: &RunResults) -> String {
    let mut text = String::new();
    for measurement in &results.measurements {
        let (Some(line), Some(counters)) = (step_line(measurement), &measurement.counters) else { continue };
        let _ = writeln!(text, "# {line}");
        let channels: Vec<String> = counters
            .channels
            .iter()
            .filter(|c| c.app_bytes > 0)
            .map(|c| {
                let ratio = c.ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.3}"));
                format!("r{}c{} {} {ratio}", c.rank, c.channel, c.nic.as_deref().unwrap_or("no NIC"))
            })
            .collect();
        if !channels.is_empty() {
            let _ = writeln!(text, "#   {}", channels.join(", "));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use efatop_proto::counters::{ChannelCounters, CounterSource, StepCounters};

    use super::*;

    #[test]
    fn steps_with_counters_get_a_line_and_their_channels() {
        // Rank 1's channel 0 as rank 0 reconciles it (efatop_experiments::reconcile): 1000 application
        // bytes, efa0's tx_bytes+rx_bytes grew by 1030.
        let channel = ChannelCounters {
            rank: 1,
            channel: 0,
            nic: Some("efa0".into()),
            source: CounterSource::Net { interface: "efa0".into() },
            app_bytes: 1000,
            nic_bytes: Some(1030),
            counter: Some("tx_bytes+rx_bytes".into()),
            ratio: Some(1.03),
            deltas: [("tx_bytes".to_string(), 30), ("rx_bytes".to_string(), 1000)].into_iter().collect(),
        };
        let step = StepCounters { channels: vec![channel], ratio: Some(1.03), counter: Some("tx_bytes+rx_bytes".into()), warnings: Vec::new() };
        let mut results = crate::text::table::tests::sample();
        results.measurements[0].counters = Some(step);
        let text = render_counters(&results);
        let first = &results.measurements[0];
        assert!(text.starts_with(&format!("# {} {}: NIC/app 1.030 (tx_bytes+rx_bytes)\n#   r1c0 efa0 1.030\n", first.config, format_size(first.size))), "{text}");
        assert_eq!(text.lines().count(), 2, "measurements without counters print nothing: {text}");
    }
}
