//! The plugin's own thread: drains the ring every millisecond or two (at once again only when a drain was a
//! quarter of the ring), folds, writes the trace, and every interval
//! (`EFATOP_PROFILER_INTERVAL_MS`, 1000 by default) sends each communicator's figures, the node's EFA
//! counters and the plugin's health.

use std::io::Write;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use efatop_proto::nccl::PluginMessage;

use crate::fold::Fold;
use crate::runtime::{CommEvent, Runtime, RING_RECORDS};
use crate::sink::Sink;
use crate::trace;

pub fn spawn(runtime: &'static Runtime) {
    let _ = std::thread::Builder::new().name("efatop-nccl".into()).spawn(move || run(runtime));
}

fn trace_file(abi: u32, origin: &efatop_proto::nccl::Origin) -> Option<std::io::BufWriter<std::fs::File>> {
    // `%p` stands for the process id, so that the ranks of one job (one environment) write a trace each.
    let path = std::env::var("EFATOP_PROFILER_TRACE").ok()?.replace("%p", &origin.pid.to_string());
    match efatop_files::create_for_appending(std::path::Path::new(&path)) {
        Ok(file) => {
            let mut file = std::io::BufWriter::new(file);
            let version = origin.nccl_version.as_deref().unwrap_or("unknown");
            let _ = writeln!(file, "{}\n# nccl {version} abi {abi} plugin {} host {} pid {}", trace::HEADER, origin.plugin_version, origin.host, origin.pid);
            Some(file)
        }
        Err(err) => {
            eprintln!("efatop-nccl: EFATOP_PROFILER_TRACE: {err}");
            None
        }
    }
}

fn run(runtime: &'static Runtime) {
    // NCCL's threads first: this thread and those it starts (the sink's sender, the host's relay) run at
    // the lowest priority, on the CPU time NCCL's threads leave. Were it at theirs, a drain that woke on a
    // CPU where NCCL's proxy thread was running would take its turn from it.
    crate::host::lowest_priority();
    let interval = std::env::var("EFATOP_PROFILER_INTERVAL_MS").ok().and_then(|v| v.parse::<u64>().ok()).unwrap_or(1000).max(20);
    let interval = Duration::from_millis(interval);
    let abi = runtime.abi.load(Ordering::Relaxed);
    let origin = crate::identity::origin(abi);
    let mut trace = trace_file(abi, &origin);
    let mut sink = Sink::from_env(&origin);
    let mut fold = Fold::default();
    fold.epoch_base_ns = runtime.epoch_base_ns;
    let mut batch = Vec::with_capacity(4096);
    // Records taken from the ring so far: with the ring's drops, the events NCCL reported (the health line).
    let mut taken: u64 = 0;
    let mut text = String::new();
    let mut last = Instant::now();
    let mut dropped_told = 0;
    // The NICs' counters as the job starts, before any of its traffic: the watcher's join needs a reading
    // on each side of what NCCL moves (a job shorter than one interval would otherwise show no window).
    sink.send(&PluginMessage::Nics { t_ms: runtime.now_ns() / 1_000_000, nics: crate::identity::nics() });
    sink.flush();
    loop {
        // Records first, then the communicators: every record drained was pushed after its communicator
        // registered, so its init is in this take or an earlier one.
        while batch.len() < RING_RECORDS {
            match runtime.ring.pop() {
                Some(record) => batch.push(record),
                None => break,
            }
        }
        taken += batch.len() as u64;
        let comms = runtime.take_comms();
        text.clear();
        for event in &comms {
            if let CommEvent::Init { ctx, info, t_ns } = event {
                fold.comm_started(*ctx, info.clone());
                sink.comm(info);
                let name = info.name.as_deref().filter(|n| !n.is_empty() && !n.contains(char::is_whitespace)).unwrap_or("-");
                let _ = std::fmt::Write::write_fmt(&mut text, format_args!("I {} {ctx} {:x} {} {} {} {name}\n", t_ns / 1000, info.comm, info.rank, info.nranks, info.nnodes));
            }
        }
        for record in &batch {
            if trace.is_some() {
                trace::line(record, &mut text);
            }
            fold.add(record);
        }
        let idle = batch.is_empty();
        let heavy = batch.len() >= RING_RECORDS / 4;
        batch.clear();
        let mut ended = 0;
        for event in &comms {
            if let CommEvent::Finalize { ctx, t_ns } = event {
                fold.comm_ended(*ctx);
                ended += 1;
                let _ = std::fmt::Write::write_fmt(&mut text, format_args!("F {} {ctx}\n", t_ns / 1000));
            }
        }
        let dropped = runtime.dropped.load(Ordering::Relaxed);
        if dropped != dropped_told {
            dropped_told = dropped;
            let _ = std::fmt::Write::write_fmt(&mut text, format_args!("D {dropped}\n"));
        }
        if let Some(file) = trace.as_mut() {
            let _ = file.write_all(text.as_bytes());
        }
        if ended > 0 || last.elapsed() >= interval {
            last = Instant::now();
            let now_ns = runtime.now_ns();
            let t_ms = now_ns / 1_000_000;
            for (message, bye) in fold.intervals(t_ms, now_ns) {
                sink.send(&message);
                if let Some(bye) = bye {
                    sink.send(&bye);
                }
            }
            sink.send(&PluginMessage::Nics { t_ms, nics: crate::identity::nics() });
            let health = PluginMessage::Health { t_ms, events: taken + dropped, dropped, unsent: sink.unsent(), unmatched: fold.unmatched };
            sink.send(&health);
            sink.flush();
            if let Some(file) = trace.as_mut() {
                let _ = file.flush();
            }
            // `finalize` waits for this (FINALIZE_WAIT at most): the last figures on their way.
            if ended > 0 {
                sink.drain(crate::runtime::FINALIZE_WAIT);
                runtime.finalizes_sent.fetch_add(ended, Ordering::Release);
            }
        }
        // Between drains the thread sleeps, records or none: a drain at each record as it comes would read the
        // ring's next slot and tail while NCCL's thread writes them, and each of its pushes would wait for those
        // lines to come back. Only a drain of a quarter of the ring or more goes on at once (16 million records a
        // second at a drain a millisecond).
        if !heavy {
            std::thread::sleep(Duration::from_millis(if idle { 2 } else { 1 }));
        }
    }
}
