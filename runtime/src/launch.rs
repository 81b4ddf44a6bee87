//! The launcher (`efatop run --ranks N <experiment>`, a many-node monitor on one host): starts N ranks of
//! this same binary on this host ([`Ranks`], the plan the command line builds), serves their rendezvous,
//! and ends with the worst exit code among them. A rank that fails is named; the others are given a
//! bounded time to notice and are then stopped.

use std::ffi::OsString;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::bootstrap::local::Rendezvous;
use crate::bootstrap::{ENV_RANK, ENV_RENDEZVOUS, ENV_WORLD_SIZE};

/// How long rank 0 gets, once a rank has failed, to name it and save what was measured.
const REPORT_GRACE: Duration = Duration::from_secs(6);
/// Rank 0 ends on its own once a rank failed (its watchdog sees to it) but may show the failure on its
/// dashboard until a key is pressed; it is only stopped if it has not ended this long after the failure.
const RANK0_GRACE: Duration = Duration::from_mins(1);
/// How long the ranks still running get between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// Whether the receiving ranks' CUDA copies are made synchronous (see [`ENV_PEER_COPIES`]), and whether
/// rank 0 is left out because its writer is a persistent kernel whose launch must not block.
#[derive(Clone, Copy, Debug, Default)]
pub struct PeerCopies {
    pub synchronous: bool,
    pub writer_exempt: bool,
}

/// What the launcher starts.
#[derive(Clone, Debug, Default)]
pub struct Ranks {
    /// How many ranks (each a process of this same binary).
    pub count: usize,
    /// Each rank's arguments (the experiment's name on).
    pub args: Vec<OsString>,
    /// Network namespaces the ranks join, round-robin (`--netns`); empty: none.
    pub netns: Vec<String>,
    pub copies: PeerCopies,
    /// Rank 0 may be drawing a dashboard on this terminal: the launcher's own lines wait until it is done.
    pub dashboard_may_be_up: bool,
    /// Stop the ranks once they outlast this, as a stop request to the launcher would (rank 0 first, with
    /// SIGTERM; every rank [`LIMIT_GRACE`] later).
    pub limit: Option<Duration>,
    /// The ranks' output is not this process's: their stdout is discarded and their error lines (and the
    /// launcher's own) are kept, the last one returned in [`Launched::last_error`].
    pub quiet: bool,
}

/// How the ranks ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Launched {
    /// The worst exit code among them (as [`launch_ranks`] returns it).
    pub code: i32,
    /// They outlasted [`Ranks::limit`] and were stopped.
    pub timed_out: bool,
    /// With [`Ranks::quiet`]: the last `efatop: error:` line, its prefix taken off.
    pub last_error: Option<String>,
}

/// With [`Ranks::limit`]: between the stop request to rank 0 and the one to every rank.
pub const LIMIT_GRACE: Duration = Duration::from_secs(4);

/// Starts the ranks and supervises them to their end; the worst exit code among them.
pub fn launch_ranks(plan: &Ranks) -> std::io::Result<i32> {
    launch(plan).map(|launched| launched.code)
}

/// Starts the ranks and supervises them to their end; how they ended.
pub fn launch(plan: &Ranks) -> std::io::Result<Launched> {
    let Ranks { count: ranks, args, netns, copies, dashboard_may_be_up, limit, quiet } = plan;
    let (ranks, copies) = (*ranks, *copies);
    // The run's secret: every rank proves it to the rendezvous, and then to rank 0's collector.
    let secret = efatop_auth::secret::Keyed::generate(efatop_auth::Source::Launcher).map_err(std::io::Error::other)?;
    // Set once a rank fails or the run is stopped: a rendezvous still gathering then ends without a word.
    let ending = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rendezvous = Rendezvous::bind(ranks, secret.secret.clone())?.ending_with(ending.clone());
    let address = rendezvous.address()?;
    std::thread::spawn(move || {
        if let Err(err) = rendezvous.serve(crate::bootstrap::local::JOIN_WITHIN) {
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
        if *quiet {
            command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
        }
        let child = command
            .args(args)
            .env(ENV_RENDEZVOUS, &address)
            .env(efatop_auth::secret::ENV_RUN_SECRET, secret.secret.to_hex())
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
    // Each quiet rank's error lines, read as they come so that a full pipe never stalls it.
    let last_error = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    for child in children.iter_mut().filter(|_| *quiet) {
        let Some(stderr) = child.stderr.take() else { continue };
        let last_error = last_error.clone();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(error) = line.strip_prefix("efatop: error: ") {
                    *last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(error.to_string());
                }
            }
        });
    }
    let stop_requests = watch_stop_requests();
    let told = |line: String| {
        if *quiet {
            let error = line.strip_prefix("efatop: error: ").map(str::to_string);
            *last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = error;
        } else {
            eprintln!("{line}");
        }
    };
    // Each rank named as rank 0 names it: an emulated node's rank by its namespace too.
    let machine = efatop_experiments::world::hostname();
    let machine = efatop_experiments::world::machine(&machine);
    let hosts: Vec<String> = (0..ranks)
        .map(|rank| if netns.is_empty() { machine.to_string() } else { format!("{machine}:{}", netns[rank % netns.len()]) })
        .collect();
    let (code, timed_out) = supervise(children, &hosts, &stop_requests, *dashboard_may_be_up, *limit, &ending, told);
    // The readers end with their ranks' pipes; a moment for the last line.
    std::thread::sleep(Duration::from_millis(20));
    let last_error = last_error.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    Ok(Launched { code, timed_out, last_error })
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

pub const CUDA_LAUNCH_BLOCKING: &str = "CUDA_LAUNCH_BLOCKING";
/// Set to `synchronous` in every rank when the launcher made the receiving ranks' CUDA copies synchronous.
pub const ENV_PEER_COPIES: &str = "EFATOP_PEER_COPIES";

/// Waits for every rank. Once one fails, rank 0 gets `REPORT_GRACE` to name it and save the results (its
/// watchdog notices a dead or silent rank within seconds); then the ranks still running are asked to stop
/// (SIGCONT for a stopped one, then SIGTERM) and killed `KILL_GRACE` later. Every rank has ended within
/// `REPORT_GRACE + KILL_GRACE` of the first failure.
/// Past `limit` the launcher stops the ranks as if asked twice, [`LIMIT_GRACE`] apart (the second flag of the
/// result). Its own lines go to `told`.
fn supervise(
    mut children: Vec<Child>,
    hosts: &[String],
    stop_requests: &StopRequests,
    dashboard_may_be_up: bool,
    limit: Option<Duration>,
    ending: &std::sync::atomic::AtomicBool,
    told: impl Fn(String),
) -> (i32, bool) {
    let launched = Instant::now();
    let mut timed_out = false;
    let mut codes: Vec<Option<i32>> = vec![None; children.len()];
    let mut failed_at: Option<Instant> = None;
    // When the other ranks, and (much later, if ever) rank 0, were sent SIGTERM.
    let mut others_terminated_at: Option<Instant> = None;
    let mut rank0_terminated_at: Option<Instant> = None;
    // How many of the launcher's stop requests (SIGTERM, SIGHUP) were passed on.
    let mut stops_passed_on = 0;
    // While rank 0 may be drawing its dashboard, lines written now would land on top of it: they are kept
    // and printed once rank 0 has left the screen.
    let mut held: Vec<String> = Vec::new();
    let mut say = |line: String, rank0_running: bool| {
        if dashboard_may_be_up && rank0_running {
            held.push(line);
        } else {
            told(line);
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
                        say(format!("efatop: error: rank {rank} ({}) was killed by signal {signal}", hosts[rank]), rank0_running && rank != 0);
                    }
                    128 + signal
                });
                codes[rank] = Some(code);
                // A sweep that found something suspect (3) ran well: it is no failure to end the others for.
                if code != 0 && code != crate::rank_zero::SUSPECTS_FOUND && failed_at.is_none() {
                    failed_at = Some(Instant::now());
                }
            }
        }
        if codes.iter().all(Option::is_some) {
            break;
        }
        // Past the limit: one stop request, and a second LIMIT_GRACE later.
        let limited = limit.map_or(0, |limit| {
            let over = launched.elapsed().checked_sub(limit);
            usize::from(over.is_some()) + usize::from(over.is_some_and(|over| over > LIMIT_GRACE))
        });
        timed_out |= limited > 0;
        let requests = stop_requests.count.load(Ordering::SeqCst) + limited;
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
            ending.store(true, Ordering::SeqCst);
            let rank0_done = codes[0].is_some();
            if others_terminated_at.is_none() && (rank0_done || failed.elapsed() > REPORT_GRACE) {
                terminate(&children, &codes, 1..children.len());
                others_terminated_at = Some(Instant::now());
            }
            if others_terminated_at.is_some_and(|at| at.elapsed() > KILL_GRACE) {
                for line in kill_running(&mut children, &mut codes, 1.., hosts) {
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
                        for line in kill_running(&mut children, &mut codes, 0..1, hosts) {
                            say(line, false);
                        }
                    }
                    Some(_) => {}
                }
            }
        }
        // A run stopped for outlasting its limit does not get rank 0's minute: it is killed with the others.
        if limited == 2 && others_terminated_at.is_some_and(|at| at.elapsed() > KILL_GRACE) {
            for line in kill_running(&mut children, &mut codes, 0..1, hosts) {
                say(line, false);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for line in held {
        told(line);
    }
    // A rank killed by a signal leaves its shm regions behind, and a later process given its pid could not
    // open an shm endpoint; every rank has been reaped, so whatever is left under its pid is stale.
    for child in &children {
        efatop_fabric::shm_regions::remove_regions_of_ended_process(child.id());
    }
    let codes: Vec<i32> = codes.into_iter().flatten().collect();
    // Bad input (2) speaks for the run; otherwise rank 0's verdict (it names the failed rank), else the
    // first failure's own code (130 for a user's stop).
    let code = if codes.contains(&2) {
        2
    } else if codes[0] != 0 {
        codes[0]
    } else {
        codes.into_iter().find(|c| *c != 0).unwrap_or(0)
    };
    (code, timed_out)
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
    hosts: &[String],
) -> Vec<String> {
    let mut said = Vec::new();
    for (rank, child) in children.iter_mut().enumerate().filter(|(rank, _)| which.contains(rank)) {
        if codes[rank].is_none() {
            said.push(format!("efatop: error: rank {rank} ({}) did not stop after SIGTERM; killed", hosts[rank]));
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
