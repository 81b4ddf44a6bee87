//! `efatop run --ranks N <experiment>`: starts N ranks of this same binary on this host, serves their
//! rendezvous, and ends with the worst exit code among them. A rank that fails is named; the others are
//! given a bounded time to notice and are then stopped.

use std::ffi::OsString;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::bootstrap::local::Rendezvous;
use crate::bootstrap::{ENV_RANK, ENV_RENDEZVOUS, ENV_WORLD_SIZE};
use crate::cli::RunArgs;

/// How long rank 0 gets, once a rank has failed, to name it and save what was measured.
const REPORT_GRACE: Duration = Duration::from_secs(6);
/// Rank 0 ends on its own once a rank failed (its watchdog sees to it) but may show the failure on its
/// dashboard until a key is pressed; it is only stopped if it has not ended this long after the failure.
const RANK0_GRACE: Duration = Duration::from_mins(1);
/// How long the ranks still running get between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);

pub fn launch(run: &RunArgs) -> i32 {
    let ranks = usize::from(run.ranks);
    if ranks < 2 {
        eprintln!(
            "efatop: error: --ranks {ranks}: {} needs at least 2 ranks (rank 0 and a peer)",
            run.experiment.name()
        );
        return 2;
    }
    if let Err(message) = run.experiment.validate() {
        eprintln!("efatop: error: {message}");
        return 2;
    }
    let descriptor = run.experiment.descriptor();
    let copies = PeerCopies {
        synchronous: descriptor.copies_into_gpu_memory() && std::env::var_os(CUDA_LAUNCH_BLOCKING).is_none(),
        writer_exempt: descriptor.persistent_writer_kernel(),
    };
    match launch_ranks(ranks, &experiment_args(), &run.netns, copies) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("efatop: error: launching {ranks} ranks: {err}");
            1
        }
    }
}

/// The arguments each rank gets: everything from the experiment's name on.
fn experiment_args() -> Vec<OsString> {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let after_run = args.iter().position(|a| a == "run").map_or(0, |i| i + 1);
    // The experiments `run` knows, as the command line defines them: a new one needs no change here.
    let experiments = crate::cli::Cli::experiments();
    let experiment = args[after_run..]
        .iter()
        .position(|a| experiments.iter().any(|name| a == name.as_str()))
        .map_or(after_run, |i| after_run + i);
    args[experiment..].to_vec()
}

/// Whether the receiving ranks' CUDA copies are made synchronous (see [`ENV_PEER_COPIES`]), and whether
/// rank 0 is left out because its writer is a persistent kernel whose launch must not block.
#[derive(Clone, Copy, Debug, Default)]
pub struct PeerCopies {
    pub synchronous: bool,
    pub writer_exempt: bool,
}

pub fn launch_ranks(ranks: usize, args: &[OsString], netns: &[String], copies: PeerCopies) -> std::io::Result<i32> {
    // The run's secret: every rank proves it to the rendezvous, and then to rank 0's collector.
    let secret = crate::secret::Keyed::generate(efatop_proto::auth::Source::Launcher).map_err(std::io::Error::other)?;
    let rendezvous = Rendezvous::bind(ranks, secret.secret.clone())?;
    let address = rendezvous.address()?;
    std::thread::spawn(move || {
        if let Err(err) = rendezvous.serve(Duration::from_mins(1)) {
            eprintln!("efatop: error: rendezvous: {err}");
        }
    });
    let exe = std::env::current_exe()?;
    let mut children: Vec<Child> = Vec::with_capacity(ranks);
    for rank in 0..ranks {
        let mut command = Command::new(&exe);
        if copies.synchronous {
            command.env(ENV_PEER_COPIES, "synchronous");
            if !copies.writer_exempt || rank != 0 {
                command.env(CUDA_LAUNCH_BLOCKING, "1");
            }
        }
        let child = command
            .args(args)
            .env(ENV_RENDEZVOUS, &address)
            .env(crate::secret::ENV_RUN_SECRET, secret.secret.to_hex())
            .env(ENV_RANK, rank.to_string())
            .env(ENV_WORLD_SIZE, ranks.to_string())
            .env(efatop_experiments::world::ENV_NETNS, if netns.is_empty() { "" } else { &netns[rank % netns.len()] })
            .spawn();
        match child {
            Ok(child) => children.push(child),
            Err(err) => {
                stop_all(&mut children);
                return Err(err);
            }
        }
    }
    let stop_requests = watch_stop_requests();
    Ok(supervise(children, &stop_requests))
}

/// SIGTERM, SIGHUP and SIGINT to the launcher (a batch system ending the job, a closed terminal, Ctrl-C)
/// are passed on as mpirun does, so that no rank outlives it and the run still ends with its tables: the
/// first goes to rank 0 alone, as SIGTERM (it ends the run through its ordinary ending, its peers following
/// its abort); a second, to every rank still running. Counted here, acted on by [`supervise`].
fn watch_stop_requests() -> std::sync::Arc<StopRequests> {
    let count = std::sync::Arc::new(StopRequests::default());
    let counted = std::sync::Arc::clone(&count);
    let watched = crate::rank_zero::Stop::watch("efatop-launcher-signals", move |stop| {
        if counted.count.load(Ordering::SeqCst) == 0 {
            counted.first_was_interrupt.store(stop == crate::rank_zero::Stop::Interrupt, Ordering::SeqCst);
        }
        counted.count.fetch_add(1, Ordering::SeqCst);
        true
    });
    if let Err(err) = watched {
        eprintln!("efatop: warning: no SIGTERM handler in the launcher ({err}): a SIGTERM would leave the ranks running");
    }
    count
}

/// The launcher's stop requests so far, and whether the first was SIGINT (passed on as SIGINT, so rank 0
/// says it was interrupted; otherwise as SIGTERM).
#[derive(Default)]
struct StopRequests {
    count: AtomicUsize,
    first_was_interrupt: std::sync::atomic::AtomicBool,
}

const CUDA_LAUNCH_BLOCKING: &str = "CUDA_LAUNCH_BLOCKING";
/// Set to `synchronous` in every rank when the launcher made the receiving ranks' CUDA copies synchronous.
pub const ENV_PEER_COPIES: &str = "EFATOP_PEER_COPIES";

/// Waits for every rank. Once one fails, rank 0 gets `REPORT_GRACE` to name it and save the results (its
/// watchdog notices a dead or silent rank within seconds); then the ranks still running are asked to stop
/// (SIGCONT for a stopped one, then SIGTERM) and killed `KILL_GRACE` later. Every rank has ended within
/// `REPORT_GRACE + KILL_GRACE` of the first failure.
fn supervise(mut children: Vec<Child>, stop_requests: &StopRequests) -> i32 {
    let mut codes: Vec<Option<i32>> = vec![None; children.len()];
    let mut failed_at: Option<Instant> = None;
    // When the other ranks, and (much later, if ever) rank 0, were sent SIGTERM.
    let mut others_terminated_at: Option<Instant> = None;
    let mut rank0_terminated_at: Option<Instant> = None;
    // How many of the launcher's stop requests (SIGTERM, SIGHUP) were passed on.
    let mut stops_passed_on = 0;
    let host = efatop_experiments::world::hostname();
    // While rank 0 may be drawing its dashboard, lines written now would land on top of it: they are kept
    // and printed once rank 0 has left the screen.
    let mut held: Vec<String> = Vec::new();
    let dashboard_may_be_up = crate::term::stdout_is_terminal();
    let mut say = |line: String, rank0_running: bool| {
        if dashboard_may_be_up && rank0_running {
            held.push(line);
        } else {
            eprintln!("{line}");
        }
    };
    loop {
        let rank0_running = codes[0].is_none();
        for (rank, child) in children.iter_mut().enumerate() {
            if codes[rank].is_some() {
                continue;
            }
            if let Ok(Some(status)) = child.try_wait() {
                let code = status.code().unwrap_or_else(|| {
                    use std::os::unix::process::ExitStatusExt;
                    let signal = status.signal().unwrap_or(0);
                    if others_terminated_at.is_none() {
                        say(format!("efatop: error: rank {rank} ({host}) was killed by signal {signal}"), rank0_running && rank != 0);
                    }
                    128 + signal
                });
                codes[rank] = Some(code);
                // A sweep that found something suspect (3) ran well: it is no failure to end the others for.
                if code != 0 && code != crate::experiment::SUSPECTS_FOUND && failed_at.is_none() {
                    failed_at = Some(Instant::now());
                }
            }
        }
        if codes.iter().all(Option::is_some) {
            break;
        }
        let requests = stop_requests.count.load(Ordering::SeqCst);
        if requests > stops_passed_on {
            if stops_passed_on == 0 && codes[0].is_none() {
                let signal = if stop_requests.first_was_interrupt.load(Ordering::SeqCst) {
                    nix::sys::signal::Signal::SIGINT
                } else {
                    nix::sys::signal::Signal::SIGTERM
                };
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(children[0].id() as i32), signal);
                rank0_terminated_at = Some(Instant::now());
            } else {
                terminate(&children, &codes, 0..children.len());
                others_terminated_at.get_or_insert_with(Instant::now);
            }
            failed_at.get_or_insert_with(Instant::now);
            stops_passed_on = requests;
        }
        if let Some(failed) = failed_at {
            let rank0_done = codes[0].is_some();
            if others_terminated_at.is_none() && (rank0_done || failed.elapsed() > REPORT_GRACE) {
                terminate(&children, &codes, 1..children.len());
                others_terminated_at = Some(Instant::now());
            }
            if others_terminated_at.is_some_and(|at| at.elapsed() > KILL_GRACE) {
                for line in kill_running(&mut children, &mut codes, 1.., &host) {
                    say(line, codes[0].is_none());
                }
            }
            if !rank0_done && failed.elapsed() > RANK0_GRACE {
                match rank0_terminated_at {
                    None => {
                        terminate(&children, &codes, 0..1);
                        rank0_terminated_at = Some(Instant::now());
                    }
                    Some(at) if at.elapsed() > KILL_GRACE => {
                        for line in kill_running(&mut children, &mut codes, 0..1, &host) {
                            say(line, false);
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for line in held {
        eprintln!("{line}");
    }
    // A rank killed by a signal leaves its shm regions behind, and a later process given its pid could not
    // open an shm endpoint; every rank has been reaped, so whatever is left under its pid is stale.
    for child in &children {
        efatop_fabric::shm_regions::remove_regions_of_ended_process(child.id());
    }
    let codes: Vec<i32> = codes.into_iter().flatten().collect();
    // Bad input (2) speaks for the run; otherwise rank 0's verdict (it names the failed rank), else the
    // first failure's own code (130 for a user's stop).
    if codes.contains(&2) {
        2
    } else if codes[0] != 0 {
        codes[0]
    } else {
        codes.into_iter().find(|c| *c != 0).unwrap_or(0)
    }
}

/// Asks the ranks in `which` that are still running to stop: SIGCONT first, for a rank that was stopped.
fn terminate(children: &[Child], codes: &[Option<i32>], which: std::ops::Range<usize>) {
    for rank in which.filter(|rank| codes[*rank].is_none()) {
        let pid = nix::unistd::Pid::from_raw(children[rank].id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    }
}

/// Kills the ranks in `which` still running; returns what to tell the user.
fn kill_running(
    children: &mut [Child],
    codes: &mut [Option<i32>],
    which: impl std::ops::RangeBounds<usize>,
    host: &str,
) -> Vec<String> {
    let mut said = Vec::new();
    for (rank, child) in children.iter_mut().enumerate().filter(|(rank, _)| which.contains(rank)) {
        if codes[rank].is_none() {
            said.push(format!("efatop: error: rank {rank} ({host}) did not stop after SIGTERM; killed"));
            let _ = child.kill();
            let _ = child.wait();
            codes[rank] = Some(137);
        }
    }
    said
}

fn stop_all(children: &mut [Child]) {
    for child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
}
