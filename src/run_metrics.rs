//! `--prometheus ADDR` on a benchmark run: rank 0's view of the job (every rank's per-channel bytes,
//! rates and p50/p99) at `http://ADDR/metrics`, from the telemetry rank 0 already collects
//! (`efatop_monitor::run_metrics`). A thread between the collector and the watchdog folds each sample
//! batch in and passes the batch on unchanged; the endpoint gets the folded view by `try_send`, so a
//! scrape never holds up the telemetry.

use std::net::SocketAddr;
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, OnceLock};

use efatop_experiments::ExperimentError;
use efatop_monitor::prometheus::Exporter;
use efatop_monitor::run_metrics::RunView;

use crate::collector::CollectorEvent;
use crate::event::ConsumerEvent;

/// The tee, for as long as the collector sends.
pub struct RunMetrics {
    nics: Arc<OnceLock<Vec<Vec<String>>>>,
}

impl RunMetrics {
    /// Gives the channels' NIC names of every rank, once telemetry has gathered them (labels `nic`).
    pub fn set_nics(&self, nics: Vec<Vec<String>>) {
        let _ = self.nics.set(nics);
    }
}

/// Serves `address` and returns the sender the collector should use in place of `downstream`.
pub fn tee(
    address: SocketAddr,
    experiment: &str,
    hosts: &[String],
    downstream: Sender<ConsumerEvent>,
) -> Result<(Sender<ConsumerEvent>, RunMetrics), ExperimentError> {
    let exporter: Exporter<RunView> =
        Exporter::start(address).map_err(|message| ExperimentError::InvalidInput { flag: "--prometheus", message })?;
    eprintln!("efatop: serving http://{}/metrics", exporter.address);
    let (upstream, incoming) = mpsc::channel::<ConsumerEvent>();
    let nics: Arc<OnceLock<Vec<Vec<String>>>> = Arc::new(OnceLock::new());
    let known = nics.clone();
    let mut view = RunView::new(experiment, hosts.to_vec());
    std::thread::Builder::new()
        .name("efatop-run-metrics".into())
        .spawn(move || {
            let mut labelled = false;
            // Ends when every sender (the collector's, the watchdog's copy) is gone.
            for event in incoming {
                if let ConsumerEvent::Telemetry(batch) = &event {
                    if !labelled {
                        if let Some(nics) = known.get() {
                            view.set_nics(nics.clone());
                            labelled = true;
                        }
                    }
                    for telemetry in batch {
                        if let CollectorEvent::Sample(sample) = telemetry {
                            view.ingest(sample);
                        }
                    }
                    exporter.offer(view.clone());
                }
                if downstream.send(event).is_err() {
                    break;
                }
            }
        })
        .map_err(|err| ExperimentError::Bootstrap(format!("--prometheus: cannot start its thread: {err}")))?;
    Ok((upstream, RunMetrics { nics }))
}
