//! `--prometheus ADDR` on a benchmark run: rank 0's view of the job (every rank's per-channel bytes,
//! rates and p50/p99) at `http://ADDR/metrics`, from the telemetry rank 0 already collects
//! (`efatop_monitor::run_metrics`). Rank 0's loop folds each sample batch in ([`RunMetrics::observe`]); the
//! endpoint gets the folded view by `try_send`, so a scrape never holds up the telemetry.

use std::net::SocketAddr;
use std::time::Duration;

use efatop_experiments::ExperimentError;
use efatop_monitor::prometheus::Exporter;
use efatop_monitor::run_metrics::RunView;

use crate::collector::CollectorEvent;

/// The run's endpoint and the view it serves.
pub struct RunMetrics {
    exporter: Exporter<RunView>,
    view: RunView,
    experiment: String,
}

impl RunMetrics {
    /// Serves `address`.
    pub fn start(address: SocketAddr, experiment: &str, hosts: &[String]) -> Result<Self, ExperimentError> {
        let exporter: Exporter<RunView> =
            Exporter::start(address).map_err(|message| ExperimentError::InvalidInput { flag: "--prometheus", message })?;
        eprintln!("efatop: serving http://{}/metrics", exporter.address);
        Ok(Self { exporter, view: RunView::new(experiment, hosts.to_vec()), experiment: experiment.to_string() })
    }

    /// The ranks' hosts, once the world is up (labels `host`).
    pub fn set_hosts(&mut self, hosts: &[String]) {
        self.view = RunView::new(&self.experiment, hosts.to_vec());
    }

    /// The channels' NIC names of every rank, once telemetry has gathered them (labels `nic`).
    pub fn set_nics(&mut self, nics: Vec<Vec<String>>) {
        self.view.set_nics(nics);
    }

    /// Folds one telemetry batch in and offers the view to the endpoint.
    pub fn observe(&mut self, batch: &[CollectorEvent]) {
        let mut changed = false;
        for telemetry in batch {
            if let CollectorEvent::Sample(sample) = telemetry {
                self.view.ingest(sample);
                changed = true;
            }
        }
        if changed {
            self.exporter.offer(self.view.clone());
        }
    }

    /// The run is over: the endpoint keeps answering with the final figures for `linger`, then closes.
    pub fn finish(self, linger: Duration) {
        self.exporter.offer(self.view.clone());
        std::thread::sleep(linger);
    }
}

/// Pushes the run's final figures to a Pushgateway (`--pushgateway URL`).
pub fn push(url: &str, results: &efatop_proto::results::RunResults) -> Result<(), String> {
    let _ = results;
    Err(format!("pushing to {url} is not built yet"))
}
