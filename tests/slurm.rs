//! A real Slurm cluster on the emulated nodes: scripts/cluster/emulate-cluster (4 nodes × 4 NICs at 1 Gbit/s) and
//! scripts/cluster/slurm-cluster (munged, slurmctld, one slurmd per node in its own network namespace with its own
//! host name and `NodeName`, efatop check as `HealthCheckProgram` on a fake p5 tree per node). Under the
//! cluster lock, one test at a time:
//!
//! - `srun -N 4 --ntasks-per-node=1 efatop write --provider tcp --channels all` verifies across the four
//!   nodes through efatop's Slurm bootstrap (no MPI), then through MPI over Slurm's `PMIx` plugin
//!   (`--mpi=pmix`, Debian's Open MPI), then with 2 ranks per node;
//! - `srun -w efatop-node0,efatop-node1 ... efatop sweep` with one NIC shaped down names it, exit 3;
//! - the sbatch script users copy (docs/slurm/efatop-sweep.sbatch), on 2 nodes, runs the check and a sweep:
//!   nothing found on a healthy cluster, exit 0. (Two nodes: what Slurm adds is the same on two as on four,
//!   and tests/sweep.rs judges four; a sweep of four nodes here took 74 to 77 s, half of this file's time.)
//! - as `HealthCheckProgram`, a planted fault drains that node with efatop's reason (`sinfo -R`), removing it
//!   resumes the node; a node an operator drained stays drained;
//! - as `Prolog` (deploy/slurm/efatop-prolog.sh), a planted fault drains the node with efatop's reason and
//!   the job does not start there.
//!
//! Needs root and Debian's slurmctld, slurmd, slurm-client and munge (scripts/build/setup-debian): where they
//! are missing the tests say SKIPPED, and fail under CI=true.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{SLURM_DIR, SlurmCluster, cluster_script, efatop_path, run_program, serial};
use efatop_testkit::data_of;

const NODES: [&str; 4] = ["efatop-node0", "efatop-node1", "efatop-node2", "efatop-node3"];

/// `srun args` without the tests' `EFATOP_TOKEN`: the ranks of a step without MPI then prove themselves and
/// take the run's secret through the cluster's MUNGE, as on a real cluster (the test's srun reaches the
/// cluster's munged through `SLURM_CONF`'s `AuthInfo`).
fn srun(args: &[&str], limit: Duration) -> common::Run {
    let mut without_token = vec!["-u", "EFATOP_TOKEN", "srun"];
    without_token.extend_from_slice(args);
    run_program("env", &without_token, limit)
}


/// `srun ... efatop write` across the nodes: exit 0, every rank on its own node (`hosts` in the run's
/// metadata), every size verified (the summary's state is complete).
fn write_across(srun_args: &[&str], hosts: &[&str], what: &str) {
    let efatop = efatop_path();
    // --kill-on-bad-exit: every task should end 0, and one that crashes (CI once saw a task segfault under
    // --mpi=pmix) then ends the step at once rather than leaving the others in a collective until the limit.
    // (Not for a sweep that finds a NIC: rank 0's exit 3 would have Slurm kill the ranks still closing.)
    let mut args: Vec<&str> = vec!["--kill-on-bad-exit=1"];
    args.extend_from_slice(srun_args);
    args.extend([
        efatop.to_str().expect("utf-8"),
        "write",
        "--provider",
        "tcp",
        "--channels",
        "all",
        "--min-size",
        "1M",
        "--max-size",
        "4M",
        "--iters",
        "10",
        "--json",
    ]);
    let run = srun(&args, Duration::from_mins(3));
    println!("{what}: exit {:?} after {:.1} s", run.code, run.elapsed.as_secs_f64());
    assert_eq!(run.code, Some(0), "{what}: {}\n{}", run.stdout, run.stderr);
    let summary = data_of(&run.stdout, "summary");
    assert_eq!(summary.len(), 1, "{what}: one summary: {}", run.stdout);
    let metadata = &summary[0]["metadata"];
    assert_eq!(metadata["hosts"], serde_json::json!(hosts), "{what}: {metadata}");
    assert_eq!(metadata["channels"], 4, "{what}: four NICs a node: {metadata}");
    // Where the run's secret came from: MPI's broadcast under PMIx, else MUNGE.
    let notes = metadata["notes"].to_string();
    let source = if srun_args.iter().any(|a| a.starts_with("--mpi=pmi")) { "broadcast over MPI" } else { "MUNGE credentials" };
    assert!(notes.contains("connections into this run prove its secret") && notes.contains(source), "{what}: {notes}");
    assert_eq!(summary[0]["status"]["state"], "complete", "{what}");
    assert!(!summary[0]["measurements"].as_array().expect("measurements").is_empty(), "{what}");
}

#[test]
fn srun_write_verifies_across_four_nodes_by_slurms_environment_by_pmix_and_two_ranks_a_node() {
    let _one = serial();
    let Some(_slurm) = SlurmCluster::up() else { return };
    // No MPI: efatop's own bootstrap from SLURM_PROCID, SLURM_NTASKS and the step's first node (forced, so
    // that a fall-back would fail rather than pass).
    write_across(&["-N", "4", "--ntasks-per-node=1", "--mpi=none", "--export=ALL,EFATOP_BOOTSTRAP=slurm"], &NODES, "Slurm bootstrap");
    // MPI through Slurm's PMIx plugin (Debian's Open MPI has no PMI-2 support for direct launch).
    write_across(&["-N", "4", "--ntasks-per-node=1", "--mpi=pmix", "--export=ALL,EFATOP_BOOTSTRAP=mpi"], &NODES, "MPI over PMIx");
    // Two ranks a node: ranks 0-1 on the first node, 2-3 on the second (block distribution).
    let two_each: Vec<&str> = NODES.iter().flat_map(|n| [*n, *n]).collect();
    write_across(&["-N", "4", "--ntasks-per-node=2", "--mpi=none"], &two_each, "2 ranks a node");
}

#[test]
fn srun_sweep_names_a_nic_shaped_down_with_exit_3() {
    let _one = serial();
    let Some(_slurm) = SlurmCluster::up() else { return };
    let shaped = Command::new(cluster_script()).args(["shape", "--node", "1", "--nic", "1", "--rate", "250mbit"]).output().expect("shape");
    assert!(shaped.status.success(), "{}", String::from_utf8_lossy(&shaped.stderr));
    let efatop = efatop_path();
    let run = srun(
        &[
            "-w", "efatop-node0,efatop-node1", "--ntasks-per-node=1", efatop.to_str().expect("utf-8"), "sweep", "--provider", "tcp", "--channels", "all",
            "--size", "32M", "--iters", "6", "--warmup", "1", "--json",
        ],
        Duration::from_mins(6),
    );
    println!("srun sweep, efatop-node1 efa1 at 250 Mbit/s: exit {:?} after {:.1} s", run.code, run.elapsed.as_secs_f64());
    assert_eq!(run.code, Some(3), "{}\n{}", run.stdout, run.stderr);
    let verdict = data_of(&run.stdout, "verdict");
    assert_eq!(verdict.len(), 1, "{}", run.stdout);
    let suspects = verdict[0]["suspects"].as_array().expect("suspects");
    assert_eq!(suspects.len(), 1, "exactly the shaped NIC: {}", verdict[0]);
    let s = &suspects[0];
    assert_eq!((&s["scope"], &s["rank"], &s["host"], &s["nic"]), (&"nic".into(), &1.into(), &"efatop-node1".into(), &"efa1".into()), "{s}");
    assert_eq!(verdict[0]["checked"], serde_json::json!({ "nodes": 2, "nics": 8 }));
}

#[test]
fn the_sbatch_script_checks_and_sweeps_a_healthy_cluster_and_finds_nothing() {
    let _one = serial();
    let Some(_slurm) = SlurmCluster::up() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/slurm/efatop-sweep.sbatch");
    let output = dir.path().join("sweep.out");
    let efatop = efatop_path();
    let export = format!(
        "--export=ALL,EFATOP={},EFATOP_CHECK_ROOT={SLURM_DIR}/sysfs,EFATOP_SWEEP_ARGS=--provider tcp --size 32M --iters 6 --warmup 1",
        efatop.display()
    );
    let run = run_program(
        "sbatch",
        &["--wait", "-N", "2", &export, &format!("--output={}", output.display()), script.to_str().expect("utf-8")],
        Duration::from_mins(6),
    );
    let said = std::fs::read_to_string(&output).unwrap_or_default();
    println!("sbatch: exit {:?} after {:.1} s\n{said}", run.code, run.elapsed.as_secs_f64());
    assert_eq!(run.code, Some(0), "{}\n{}\n{said}", run.stdout, run.stderr);
    assert!(said.contains("# efatop check on every node of efatop-node[0-1]"), "{said}");
    assert!(said.contains("# sweep: nothing slow"), "{said}");
    assert!(!said.contains("efatop:"), "no node named: {said}");
}

/// `sinfo -R`'s reasons: (reason, node list).
fn reasons() -> Vec<(String, String)> {
    let run = run_program("sinfo", &["-R", "-h", "-o", "%E|%N"], Duration::from_secs(30));
    run.stdout.lines().filter_map(|l| l.split_once('|')).map(|(r, n)| (r.trim().to_string(), n.trim().to_string())).collect()
}

fn node_state(node: &str) -> String {
    run_program("sinfo", &["-h", "-n", node, "-o", "%t"], Duration::from_secs(30)).stdout.trim().to_string()
}

fn wait_until<T>(what: &str, limit: Duration, mut done: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = done() {
            println!("{what}: after {:.1} s", started.elapsed().as_secs_f64());
            return value;
        }
        assert!(started.elapsed() < limit, "{what} within {limit:?}; sinfo -R: {:?}", reasons());
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn as_health_check_a_planted_fault_drains_its_node_with_efatops_reason_and_removing_it_resumes_it() {
    let _one = serial();
    let Some(_slurm) = SlurmCluster::up() else { return };
    assert!(reasons().is_empty(), "a healthy cluster: {:?}", reasons());
    // An operator's drain, which efatop must leave alone.
    let operator = run_program(
        "scontrol",
        &["update", "nodename=efatop-node1", "state=drain", "reason=operator: cable swap"],
        Duration::from_secs(30),
    );
    assert_eq!(operator.code, Some(0), "{}", operator.stderr);
    // Node 2's port 1 of rdmap80s0 goes down.
    let node = efatop_node::FakeNode::open(format!("{SLURM_DIR}/sysfs/efatop-node2"), "p5.48xlarge").expect("node 2's tree");
    node.plant(efatop_node::Fault::PortDown).expect("plant");
    let drained = wait_until("efatop-node2 drained by the health check", Duration::from_mins(1), || {
        reasons().into_iter().find(|(_, nodes)| nodes == "efatop-node2")
    });
    assert_eq!(drained.0, "efatop: reboot: rdmap80s0 port 1 DOWN");
    assert!(node_state("efatop-node2").starts_with("drain"), "{}", node_state("efatop-node2"));
    // The port comes back: the next check resumes the node; the operator's drain stays.
    std::fs::write(format!("{SLURM_DIR}/sysfs/efatop-node2/sys/class/infiniband/rdmap80s0/ports/1/state"), "4: ACTIVE\n").expect("port up");
    std::fs::write(format!("{SLURM_DIR}/sysfs/efatop-node2/sys/class/infiniband/rdmap80s0/ports/1/phys_state"), "5: LinkUp\n").expect("link up");
    wait_until("efatop-node2 resumed", Duration::from_mins(1), || (node_state("efatop-node2") == "idle").then_some(()));
    // Two more health-check rounds (every 5 s): the operator's drain is still there.
    std::thread::sleep(Duration::from_secs(12));
    assert_eq!(reasons(), [("operator: cable swap".to_string(), "efatop-node1".to_string())]);
    let log = std::fs::read_to_string(format!("{SLURM_DIR}/log/healthcheck-efatop-node2.log")).unwrap_or_default();
    assert!(log.contains("efatop: drained efatop-node2") && log.contains("efatop: resumed efatop-node2"), "{log}");
}

#[test]
fn as_prolog_a_planted_fault_drains_the_node_and_the_job_does_not_start_there() {
    let _one = serial();
    // The health check off, so that only the prolog can drain.
    let Some(_slurm) = SlurmCluster::up_with(&["--prolog", "--healthcheck-interval", "0"]) else { return };
    let node = efatop_node::FakeNode::open(format!("{SLURM_DIR}/sysfs/efatop-node3"), "p5.48xlarge").expect("node 3's tree");
    node.plant(efatop_node::Fault::PortDown).expect("plant");
    let refused = srun(&["-w", "efatop-node3", "-N", "1", "hostname"], Duration::from_mins(1));
    println!("srun on the faulty node: exit {:?}\n{}", refused.code, refused.stderr);
    assert_ne!(refused.code, Some(0), "{}", refused.stdout);
    assert!(refused.stderr.contains("prolog failed"), "{}", refused.stderr);
    assert!(!refused.stdout.contains("efatop-node3"), "the job ran: {}", refused.stdout);
    assert_eq!(reasons(), [("efatop: reboot: rdmap80s0 port 1 DOWN".to_string(), "efatop-node3".to_string())]);
    let healthy = srun(&["-w", "efatop-node0", "-N", "1", "hostname"], Duration::from_mins(1));
    assert_eq!((healthy.code, healthy.stdout.trim()), (Some(0), "efatop-node0"), "{}", healthy.stderr);
}

/// The reset window under `HealthCheckProgram`: Xid 79 on node 2's GPU 3 drains it (`reboot`); once the
/// NVIDIA driver reloaded (its GPUs reset) and no Xid followed, the next check resumes it.
#[test]
fn as_health_check_an_xid_drains_and_a_driver_reload_resumes() {
    let _one = serial();
    let Some(_slurm) = SlurmCluster::up() else {
        return;
    };
    assert!(reasons().is_empty(), "a healthy cluster: {:?}", reasons());
    let node = efatop_node::FakeNode::open(format!("{SLURM_DIR}/sysfs/efatop-node2"), "p5.48xlarge").expect("node 2's tree");
    node.plant(efatop_node::Fault::Xid(79)).expect("plant");
    let drained = wait_until("efatop-node2 drained by the health check", Duration::from_mins(1), || {
        reasons().into_iter().find(|(_, nodes)| nodes == "efatop-node2")
    });
    assert_eq!(drained.0, "efatop: reboot: GPU 3 Xid 79");
    node.log_driver_load().expect("driver load");
    wait_until("efatop-node2 resumed", Duration::from_mins(1), || (node_state("efatop-node2") == "idle").then_some(()));
    assert!(reasons().is_empty(), "{:?}", reasons());
}
