//! Real multi-process runs over real providers, with both launchers, checking the printed table, the JSON
//! results and that every size was verified.

mod common;

use common::{efatop, mpirun, serial, table_rows, Run};

fn assert_complete(run: &Run, configs: &[&str], sizes: &[&str]) {
    assert_eq!(run.code, Some(0), "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let rows = table_rows(&run.stdout);
    let printed: Vec<&str> = rows.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(printed, sizes, "{}", run.stdout);
    for config in configs {
        assert!(run.stdout.contains(&format!("{config} (Gbps)")), "no {config} column:\n{}", run.stdout);
    }
    for row in &rows {
        assert_eq!(row.len(), 2 + 5 * configs.len(), "{row:?}");
        for (i, cell) in row.iter().enumerate().skip(2).step_by(5) {
            let gbps: f64 = cell.parse().unwrap_or_else(|_| panic!("column {i} of {row:?} is not a number"));
            assert!(gbps > 0.0, "{row:?}");
        }
    }
    assert!(run.stdout.contains("every size verified"), "{}", run.stdout);
}

const WRITE_CONFIGS: [&str; 3] = ["SinglePin", "MultiPin", "RoundRobinPin"];
const SIZES: [&str; 4] = ["4K", "8K", "16K", "32K"];

fn write_args<'a>(provider: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["write", "--provider", provider, "--min-size", "4K", "--max-size", "32K", "--iters", "5", "--warmup", "1"];
    args.extend_from_slice(extra);
    args
}

fn sendrecv_args(provider: &str) -> Vec<&str> {
    vec!["sendrecv", "--provider", provider, "--min-size", "4K", "--max-size", "32K", "--iters", "5", "--warmup", "1"]
}

fn local(ranks: &str, args: &[&str]) -> Run {
    let mut full = vec!["run", "--ranks", ranks];
    full.extend_from_slice(args);
    efatop(&full)
}

#[test]
fn write_two_ranks_shm() {
    let _one = serial();
    let run = local("2", &write_args("shm", &[]));
    assert_complete(&run, &WRITE_CONFIGS, &SIZES);
    assert!(run.stdout.contains("provider shm"), "{}", run.stdout);
}

#[test]
fn write_two_ranks_tcp_with_link_speed_flag() {
    let _one = serial();
    let run = local("2", &write_args("tcp", &["--link-gbps", "100"]));
    assert_complete(&run, &WRITE_CONFIGS, &SIZES);
    // Which stack `tcp` resolves to is libfabric's business (1.17: `tcp;ofi_rxm`, 2.x: the native `tcp`).
    assert!(run.stdout.contains("provider tcp"), "{}", run.stdout);
    assert!(run.stdout.contains("100 Gbps per channel (from --link-gbps)"), "{}", run.stdout);
    // What a window of 1 means on tcp, beside the figures that depend on it: by default an operation completes
    // once the peer has it (two_endpoints.rs shows the provider holding it until the target progresses).
    assert!(run.stdout.contains("# note: tcp: operations complete once the peer has them (FI_DELIVERY_COMPLETE)"), "{}", run.stdout);
    // BusBW = Gbps / link for Single.
    let row = &table_rows(&run.stdout)[3];
    let gbps: f64 = row[2].parse().expect("gbps");
    let busbw: f64 = row[3].parse().expect("busbw");
    assert!((busbw - gbps).abs() < 0.06, "{row:?}");
}

#[test]
fn write_four_ranks_shm_and_tcp() {
    let _one = serial();
    for provider in ["shm", "tcp"] {
        // tcp with the provider's own completion, as before FI_DELIVERY_COMPLETE became its default.
        let run = local("4", &write_args(provider, &["--channels", "2", "--completion", if provider == "tcp" { "transmit" } else { "auto" }]));
        assert_complete(&run, &WRITE_CONFIGS, &SIZES);
        assert!(run.stdout.contains("4 ranks"), "{}", run.stdout);
        let said = run.stdout.contains("once the kernel has taken its bytes (--completion transmit)");
        assert_eq!(said, provider == "tcp", "{}", run.stdout);
    }
}

#[test]
fn sendrecv_two_and_four_ranks() {
    let _one = serial();
    for (ranks, provider) in [("2", "shm"), ("2", "tcp"), ("4", "shm"), ("4", "tcp")] {
        let run = local(ranks, &sendrecv_args(provider));
        assert_complete(&run, &["SingleHost"], &SIZES);
    }
}

#[test]
fn more_channels_than_nics_is_said() {
    let _one = serial();
    let run = local("2", &write_args("shm", &["--channels", "3", "--configs", "multi"]));
    assert_complete(&run, &["MultiPin"], &SIZES);
    assert!(run.stdout.contains("3 channels share 1 NIC"), "{}", run.stdout);
}

#[test]
fn json_results_match_the_table() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("results.json");
    let out_arg = out.to_str().expect("utf-8");
    let run = local("3", &write_args("tcp", &["--out", out_arg, "--configs", "single,roundrobin"]));
    assert_complete(&run, &["SinglePin", "RoundRobinPin"], &SIZES);
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("results file")).expect("json");
    let meta = &results["metadata"];
    assert_eq!(meta["provider"], "tcp");
    // The stack is whatever libfabric resolved `tcp` to (1.17: `tcp;ofi_rxm`, 2.x: `tcp`): its core provider
    // is tcp, and the header names the same stack as the file.
    let stack = meta["provider_stack"].as_str().expect("provider_stack");
    assert_eq!(stack.split(';').next(), Some("tcp"), "{stack}");
    assert!(run.stdout.contains(&format!("provider {stack}")), "header and results file disagree on {stack}:\n{}", run.stdout);
    assert_eq!(meta["ranks"], 3);
    assert_eq!(meta["completion"], "delivery", "tcp's default, as the header says");
    assert_eq!(meta["hosts"].as_array().map(Vec::len), Some(3));
    assert!(meta["libfabric_version"].as_str().is_some_and(|v| v.starts_with('1') || v.starts_with('2')));
    let placements = meta["placements"].as_array().expect("placements");
    assert_eq!(placements.len(), 3, "one placement per rank");
    for (rank, placement) in placements.iter().enumerate() {
        assert_eq!(placement["rank"], rank);
        assert_eq!(placement["nics"].as_array().map(Vec::len), Some(1), "one channel, one NIC: {placement}");
    }
    let measurements = results["measurements"].as_array().expect("measurements");
    assert_eq!(measurements.len(), 2 * SIZES.len());
    let rows = table_rows(&run.stdout);
    for m in measurements {
        assert_eq!(m["verified"], true);
        let size = m["size"].as_u64().expect("size");
        assert_eq!(m["count"].as_u64(), Some(size / 4));
        let row = rows.iter().find(|r| efatop_size(size) == r[0]).expect("row for size");
        let column = if m["config"] == "SinglePin" { 2 } else { 7 };
        // As the table shows a rate (a loaded machine once measured 0.0082 Gbps here, shown with four decimals).
        assert_eq!(row[column], efatop_report::text::table::gbps(m["gbps"].as_f64().expect("gbps")));
        // RoundRobin from rank 0 to ranks 1 and 2 runs as one group of both peers.
        if m["config"] == "RoundRobinPin" {
            assert_eq!(m["pairs"][0]["peers"], serde_json::json!([1, 2]));
        } else {
            assert_eq!(m["pairs"].as_array().map(Vec::len), Some(2));
        }
    }
}

fn efatop_size(size: u64) -> String {
    format!("{}K", size >> 10)
}

#[test]
fn mpirun_write_four_ranks_tcp_and_shm() {
    let _one = serial();
    for provider in ["tcp", "shm"] {
        let run = mpirun(4, &write_args(provider, &[]));
        assert_complete(&run, &WRITE_CONFIGS, &SIZES);
        assert!(run.stdout.contains("4 ranks"), "{}", run.stdout);
    }
}

#[test]
fn mpirun_sendrecv_two_ranks() {
    let _one = serial();
    for provider in ["shm", "tcp"] {
        let run = mpirun(2, &sendrecv_args(provider));
        assert_complete(&run, &["SingleHost"], &SIZES);
    }
}

#[test]
fn planted_corruption_is_caught_with_its_offset() {
    let _one = serial();
    let run = local("3", &write_args("shm", &["--debug-corrupt-byte", "1000"]));
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    let errors: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(errors.len(), 1, "one line from the whole run: {errors:?}");
    assert!(
        errors[0].contains("data verification failed: rank 1 received from rank 0 (SinglePin, size 4K): offset 1000: expected 0x"),
        "{errors:?}"
    );
    assert!(!run.stdout.contains("every size verified"), "{}", run.stdout);

    let run = mpirun(2, &["sendrecv", "--provider", "tcp", "--max-size", "8K", "--iters", "2", "--debug-corrupt-byte", "7"]);
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("rank 1 received from rank 0 (SingleHost, size 4K): offset 7"), "{}", run.stderr);
}

/// `--telemetry-ab`: each size's timed iterations in blocks, the samplers of every rank paused in every
/// other block; the results file holds both arms' rates and the halves of each, next to the usual figure.
#[test]
fn telemetry_ab_times_both_arms_of_write_and_alltoall() {
    let _one = serial();
    let dir = tempfile::tempdir().expect("tempdir");
    for (ranks, experiment, block) in [("2", "write", "1"), ("3", "alltoall", "2")] {
        let out = dir.path().join(format!("{experiment}.json"));
        let args = [
            experiment, "--provider", "shm", "--configs", "single", "--min-size", "64K", "--max-size", "128K", "--iters",
            "32", "--warmup", "1", "--telemetry-ab", block, "--out", out.to_str().expect("utf-8"),
        ];
        let run = local(ranks, &args);
        assert_eq!(run.code, Some(0), "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
        assert!(run.stdout.contains("every size verified"), "{}", run.stdout);
        let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("results")).expect("json");
        let measurements = results["measurements"].as_array().expect("measurements");
        assert_eq!(measurements.len(), 2, "{experiment}");
        let block: u64 = block.parse().expect("block");
        for m in measurements {
            let ab = &m["telemetry_ab"];
            assert_eq!(ab["block_iterations"].as_u64(), Some(block), "{experiment}: {m}");
            assert_eq!(ab["blocks"].as_u64(), Some(32 / block), "{experiment}: {m}");
            let rates = ["on_gbps", "off_gbps"].iter().map(|k| &ab[*k]).chain(ab["on_halves_gbps"].as_array().expect("on halves")).chain(ab["off_halves_gbps"].as_array().expect("off halves"));
            // Whole units only (two cycles, one of each order): 32 blocks hold 4, 16 blocks 2.
            let units = ab["unit_gbps"].as_array().expect("unit rates");
            assert_eq!(units.len() as u64, 32 / block / 8, "{experiment}: {m}");
            let unit_rates = units.iter().flat_map(|u| u.as_array().expect("[on, off]"));
            for rate in rates.chain(unit_rates) {
                assert!(rate.as_f64().is_some_and(|r| r > 0.0), "{experiment}: {m}");
            }
        }
    }
}

/// Runs `scripts/bench/NAME` against this build (`--efatop`) with `args`, within `limit`.
fn bench(name: &str, args: &[&str], limit: std::time::Duration) -> Run {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench").join(name);
    let efatop = common::efatop_path();
    let args = [&["--efatop", efatop.to_str().expect("utf-8")][..], args].concat();
    common::run_program(script.to_str().expect("utf-8"), &args, limit)
}

/// The bench that judges telemetry's cost (`scripts/bench/bench-telemetry-cost`) still runs against this
/// build and reads its files: each size's pooled units, with their interval, rest on every run's units, and
/// `--control` pools as many from the same blocks run with no telemetry at all.
#[test]
fn the_telemetry_cost_bench_pools_every_runs_units_into_an_interval() {
    let _one = serial();
    let args = [
        "--experiments", "alltoall", "--ranks", "2", "--channels", "1",
        "--min-size", "64K", "--max-size", "128K", "--seconds", "0.2", "--repeats", "2", "--min-cycles", "8", "--control",
    ];
    let run = bench("bench-telemetry-cost", &args, std::time::Duration::from_secs(300));
    assert_eq!(run.code, Some(0), "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let rows = table_rows(&run.stdout);
    let sizes: Vec<&Vec<String>> = rows.iter().filter(|r| r[0] == "64K" || r[0] == "128K").collect();
    assert_eq!(sizes.len(), 2, "{}", run.stdout);
    for row in sizes {
        // "+0.52% (-1.20..+2.31%, 8)": at least 8 cycles a run, two cycles a unit, two runs.
        for pooled in [&row[7], &row[9]] {
            assert!(pooled.ends_with(", 8)") && pooled.contains(".."), "{pooled}: {}", run.stdout);
        }
    }
    assert!(run.stdout.contains("# alltoall single, 2 ranks, 1 channel a rank: median cost"), "{}", run.stdout);
    assert!(run.stdout.contains("pooled units: highest upper end"), "{}", run.stdout);
    assert!(run.stdout.contains("control (no telemetry): widest interval"), "{}", run.stdout);
}

/// The bench that shows where telemetry's time goes (`scripts/bench/bench-telemetry-cpu`) still finds every
/// rank's threads in this build and reads the kernel's accounting of them: with telemetry off there is no
/// sampler or collector thread, and their CPU is zero; with it on, both used CPU, so each sample has a cost
/// per thread; the hot threads polled through both windows.
#[test]
fn the_telemetry_cpu_bench_accounts_for_every_ranks_threads() {
    let _one = serial();
    let args = [
        "--experiment", "write", "--ranks", "2", "--channels", "1",
        "--size", "1M", "--interval", "20ms", "--seconds", "1", "--settle", "0.5", "--repeats", "1",
    ];
    let run = bench("bench-telemetry-cpu", &args, std::time::Duration::from_secs(120));
    assert_eq!(run.code, Some(0), "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let rows = table_rows(&run.stdout);
    let arm = |name: &str| rows.iter().find(|r| r[0] == name).unwrap_or_else(|| panic!("no {name} row: {}", run.stdout)).clone();
    let number = |cell: &str| cell.parse::<f64>().unwrap_or_else(|_| panic!("{cell} is not a number: {}", run.stdout));
    let (off, on) = (arm("off"), arm("on"));
    assert!(number(&off[2]) > 10.0 && number(&on[2]) > 10.0, "the hot threads poll: {}", run.stdout);
    assert!(number(&off[5]) == 0.0 && number(&off[7]) == 0.0 && off[6] == "-", "no telemetry, no telemetry threads: {}", run.stdout);
    assert!(number(&on[5]) > 0.0 && number(&on[6]) > 0.0, "every rank's sampler worked: {}", run.stdout);
    assert!(number(&on[7]) > 0.0 && number(&on[8]) > 0.0 && number(&on[9]) > 0.0, "rank 0's collector worked, woken: {}", run.stdout);
    assert!(number(&off[9]) == 0.0, "no collector, no wake-ups: {}", run.stdout);
    assert!(run.stdout.contains("hot threads, off -> on: run-queue wait"), "{}", run.stdout);
}

fn alltoall_args<'a>(provider: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["alltoall", "--provider", provider, "--min-size", "4K", "--max-size", "32K", "--iters", "5", "--warmup", "1"];
    args.extend_from_slice(extra);
    args
}

#[test]
fn alltoall_four_ranks_shm_and_tcp_verify_every_peer() {
    let _one = serial();
    for (provider, channels) in [("shm", "1"), ("tcp", "2")] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("alltoall.json");
        let run = local("4", &alltoall_args(provider, &["--channels", channels, "--out", out.to_str().expect("utf-8")]));
        // The seed's table first, then nccl-tests' busbw in a table of its own, then the verdict.
        let (seed_table, busbw_table) =
            run.stdout.split_once("nccl-tests alltoall busbw, (N-1) x size per iteration time, N = 4 ranks").expect("busbw table");
        let verdict = busbw_table.lines().filter(|l| l.starts_with('#')).collect::<Vec<_>>().join("\n");
        let seed_only = Run { stdout: format!("{seed_table}{verdict}"), stderr: run.stderr.clone(), ..run };
        assert_complete(&seed_only, &WRITE_CONFIGS, &SIZES);
        let busbw_sizes: Vec<String> = table_rows(busbw_table).into_iter().map(|r| r[0].clone()).filter(|s| s != "Size").collect();
        assert_eq!(busbw_sizes, SIZES, "{busbw_table}");
        let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("results")).expect("json");
        let matrices = results["pair_matrices"].as_array().expect("pair matrices");
        assert_eq!(matrices.len(), WRITE_CONFIGS.len() * SIZES.len());
        for matrix in matrices {
            let rows = matrix["gbps"].as_array().expect("rows");
            assert_eq!(rows.len(), 4);
            for (sender, row) in rows.iter().enumerate() {
                for (receiver, cell) in row.as_array().expect("row").iter().enumerate() {
                    if sender == receiver {
                        assert!(cell.is_null(), "a rank does not write to itself: {matrix}");
                    } else {
                        assert!(cell.as_f64().is_some_and(|g| g > 0.0), "pair {sender}→{receiver} not measured: {matrix}");
                    }
                }
            }
        }
        // The seed's Gbps and nccl-tests' busbw differ by N-1 exactly.
        for m in results["measurements"].as_array().expect("measurements") {
            let (gbps, busbw) = (m["gbps"].as_f64().expect("gbps"), m["nccl_busbw_gbps"].as_f64().expect("busbw"));
            assert!((busbw - 3.0 * gbps).abs() < 1e-9 * busbw.max(1.0), "{m}");
        }
    }
}

#[test]
fn alltoall_corruption_names_every_receiver_side() {
    let _one = serial();
    let run = local("3", &alltoall_args("shm", &["--debug-corrupt-byte", "100", "--configs", "multi"]));
    assert_eq!(run.code, Some(1), "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("data verification failed: rank 1 received from rank 0 (MultiPin, size 4K): offset 100: expected 0x"),
        "{}",
        run.stderr
    );
    assert!(!run.stdout.contains("every size verified"), "{}", run.stdout);
}

/// The libfabric versions whose shm segfaults in `smr_ep_ctrl` instead of failing `fi_enable` when
/// `smr_create` fails with anything but EBUSY (see docs/running.md, "Troubleshooting").
fn shm_segfaults_when_a_region_cannot_be_created() -> bool {
    let version = efatop_fabric::runtime_version();
    let (major, minor) = version.split_once('.').expect("major.minor");
    let (major, minor): (u32, u32) = (major.parse().expect("major"), minor.parse().expect("minor"));
    major == 2 && (2..=6).contains(&minor)
}

/// libfabric's shm names a region `/dev/shm/<pid>:<uid>:<endpoint index>` (1.17 and 2.x alike) and cannot
/// open an endpoint whose name is taken by something it cannot reuse. A rank killed by a signal leaves its regions; with pids reused, a later rank that gets
/// that pid must still start (efatop removes the dead one's region first), and a rank that really cannot
/// open its endpoint is named by rank 0 while every rank ends at once (not one gone and three waiting).
#[test]
fn a_stale_shm_region_is_cleared_and_an_endpoint_that_cannot_open_ends_every_rank() {
    let _one = serial();
    let efatop = common::efatop_path();
    let efatop = efatop.to_str().expect("utf-8 path");
    // Rank 3 leaves something under its own pid before efatop (exec keeps the pid) opens its endpoint.
    let run_with = |prepare: &str, out: &str| {
        let script = format!(
            "if [ \"$OMPI_COMM_WORLD_RANK\" = 3 ]; then {prepare}; fi; exec {efatop} write --provider shm \
             --min-size 4K --max-size 8K --iters 2 --warmup 1 --no-tui --out {out}"
        );
        common::run_program(
            "mpirun",
            &["--allow-run-as-root", "--oversubscribe", "-np", "4", "sh", "-c", &script],
            std::time::Duration::from_mins(1),
        )
    };
    let dir = std::env::temp_dir().join(format!("efatop-stale-shm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let pid_file = dir.join("pid");

    // A stale region (a plain file, as a killed rank leaves it): removed, and the run completes.
    let out = dir.join("stale.json");
    let run = run_with("touch /dev/shm/$$:0:0", out.to_str().expect("utf-8"));
    assert_eq!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("every size verified"), "{}", run.stdout);

    // Something that cannot be removed as a region (a directory): rank 3's endpoint fails, rank 0 names
    // it, and the run ends within seconds.
    let out = dir.join("busy.json");
    let prepare = format!("mkdir /dev/shm/$$:0:0; echo $$ > {}", pid_file.display());
    let run = run_with(&prepare, out.to_str().expect("utf-8"));
    if let Ok(pid) = std::fs::read_to_string(&pid_file) {
        let _ = std::fs::remove_dir(format!("/dev/shm/{}:0:0", pid.trim()));
    }
    assert_ne!(run.code, Some(0), "{}\n{}", run.stdout, run.stderr);
    let enable_failed = run.stderr.contains("rank 3 (") && run.stderr.contains("fi_enable failed");
    if shm_segfaults_when_a_region_cannot_be_created() {
        // 2.2–2.6: smr_create fails with EISDIR (not EBUSY) and smr_ep_ctrl dereferences the missing region.
        // The rank dies by SIGSEGV: it must still be named (by rank 0 or by mpirun), within the same bound.
        let died_by_signal =
            (run.stderr.contains("rank 3 (") || run.stderr.contains("process rank 3 ")) && run.stderr.contains("signal");
        assert!(enable_failed || died_by_signal, "{}", run.stderr);
    } else {
        assert!(enable_failed, "{}", run.stderr);
    }
    assert!(run.elapsed < std::time::Duration::from_secs(30), "took {:?}", run.elapsed);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The CPUs this test process may run on, from /proc (what taskset or a cgroup left it).
fn allowed_cpus() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).expect("Cpus_allowed_list").trim().to_string();
    efatop_proto::topology::parse_cpu_list(&list)
}

/// Each thread of `pid` with its name and the CPUs it may run on.
fn threads_of(pid: u32) -> Vec<(String, String)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten();
    tasks
        .filter_map(|task| {
            let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
            let status = std::fs::read_to_string(task.path().join("status")).ok()?;
            let cpus = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?.trim().to_string();
            Some((comm.trim().to_string(), cpus))
        })
        .collect()
}

/// Under `taskset` with two CPUs, each rank's hot thread runs alone on one of them (rank 0 on the first,
/// rank 1 on the second), its sampler on the other, and the results file and header say so; `--no-pin`
/// leaves them unpinned.
#[test]
fn ranks_pin_their_hot_threads_within_the_cpus_they_were_given() {
    let _one = serial();
    let allowed = allowed_cpus();
    if allowed.len() < 2 {
        eprintln!("SKIPPED ranks_pin_their_hot_threads_within_the_cpus_they_were_given: this process may use only CPUs {allowed:?}");
        return;
    }
    let Some(taskset) = common::required("taskset", "util-linux") else { return };
    let (first, second) = (allowed[allowed.len() - 2], allowed[allowed.len() - 1]);
    let dir = common::scratch();
    let out = dir.path().join("pinned.json");
    let cpus = format!("{first},{second}");
    let efatop_path = common::efatop_path();
    // Long enough (a few seconds of 4 MiB writes) to read the threads' affinity while it runs.
    let args = ["-c", &cpus, efatop_path.to_str().expect("path"), "run", "--ranks", "2", "write", "--provider", "shm",
        "--configs", "single", "--min-size", "4M", "--max-size", "4M", "--iters", "4000", "--warmup", "1", "--no-tui",
        "--out", out.to_str().expect("path")];
    let mut child = common::command_in(&taskset, dir.path()).args(args).stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped()).spawn().expect("taskset efatop");
    // Per rank process: its threads' names and CPUs, once both hot threads are pinned (one CPU each).
    let mut seen: Vec<Vec<(String, String)>> = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_mins(1);
    while std::time::Instant::now() < deadline && child.try_wait().expect("wait").is_none() {
        let ranks: Vec<Vec<(String, String)>> = common::descendants(child.id())
            .into_iter()
            .map(threads_of)
            .filter(|threads| threads.iter().any(|(name, _)| name == "efatop-rank"))
            .collect();
        // Pinned: the rank thread on one CPU and its sampler started elsewhere. (Between the two steps the
        // rank thread briefly has the helpers' CPUs, which under two CPUs is also a single one.)
        let pinned = |threads: &Vec<(String, String)>| {
            let cpus_of = |prefix: &str| threads.iter().find(|(name, _)| name.starts_with(prefix)).map(|(_, cpus)| cpus.as_str());
            matches!((cpus_of("efatop-rank"), cpus_of("efatop-sampler")), (Some(hot), Some(sampler)) if hot.parse::<u32>().is_ok() && hot != sampler)
        };
        if ranks.len() == 2 && ranks.iter().all(pinned) {
            seen = ranks;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("efatop's output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    assert!(!seen.is_empty(), "never saw both ranks' hot threads pinned to one CPU each:\n{stdout}");
    let cpu_of = |threads: &Vec<(String, String)>, prefix: &str| {
        threads.iter().find(|(name, _)| name.starts_with(prefix)).map(|(_, cpus)| cpus.clone()).expect("thread")
    };
    let mut hot: Vec<String> = seen.iter().map(|threads| cpu_of(threads, "efatop-rank")).collect();
    hot.sort();
    assert_eq!(hot, vec![first.to_string(), second.to_string()], "{seen:?}");
    for threads in &seen {
        let mine = cpu_of(threads, "efatop-rank");
        let other = if mine == first.to_string() { second } else { first };
        assert_eq!(cpu_of(threads, "efatop-sampler"), other.to_string(), "the sampler should run away from its rank's hot thread: {threads:?}");
    }
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).expect("results")).expect("json");
    let placements = results["metadata"]["placements"].as_array().expect("placements");
    let recorded: Vec<u64> = placements.iter().map(|p| p["hot_cpu"].as_u64().expect("hot_cpu")).collect();
    assert_eq!(recorded, vec![u64::from(first), u64::from(second)], "{placements:?}");
    assert!(stdout.contains(&format!("its hot path alone on CPU {first}")), "{stdout}");

    let unpinned = efatop(&["run", "--ranks", "2", "write", "--no-pin", "--provider", "shm", "--configs", "single", "--min-size", "4K",
        "--max-size", "4K", "--iters", "5", "--warmup", "1", "--no-tui"]);
    assert_eq!(unpinned.code, Some(0), "{}", unpinned.stderr);
    assert!(unpinned.stdout.contains("not pinned"), "{}", unpinned.stdout);
}
