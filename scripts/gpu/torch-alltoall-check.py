#!/usr/bin/env python3
"""A PyTorch job timed as the job times itself, with efatop's NCCL profiler plugin loaded: two processes on
one GPU (each its own NCCL_HOSTID, NCCL's socket transport on lo), every collective PyTorch issues through
NCCL (all_to_all_single, all_reduce, all_gather_into_tensor, reduce_scatter_tensor, broadcast, and a
batch_isend_irecv pair: send/recv) from 1 to 32 MiB. Each rank prints `JOB <rank> <op> <bytes> <us> <algbw
GB/s> <us over every call>` and `WARM <rank> <op> <bytes> <us>...` (each warm-up call's own time): us is the mean of the timed calls (after two warm-up calls, as a job times
itself), the last field the mean over every call of that size, the warm-ups included (each timed alone):
the calls efatop watch folds; bytes is nccl-tests' size column (the whole buffer: allgather's output, reducescatter's input; a
send/recv pair's bytes sent), as efatop watch's `coll` lines give it; algbw is those bytes over the mean
time of a call. It also prints what the process tells about its NCCL.

usage: torch-alltoall-check.py PLUGIN.so OUTDIR    (the plugin writes OUTDIR/torch-r<rank>.{trace,efanccl})
       torch-alltoall-check.py --cost-ab BLOCKS PLUGIN.so OUTDIR
           the plugin's cost inside one job: per collective and size, BLOCKS blocks of ITERS calls (default 10)
           with the plugin on and off alternating in pairs (its efatop_profiler_active switch); the cost is the
           pairs' mean difference with its 95 % confidence band, and their Hodges-Lehmann median with its
           Wilcoxon band; every block's time is printed first (AB lines). No spread between two jobs enters it.
       torch-alltoall-check.py --ab-table LOG
           --cost-ab's table from the AB lines a log kept (a job cut short by its timeout included: a block
           only one rank finished is left out); LOG may be gzipped (its name ending .gz).
       torch-alltoall-check.py --cost ROUNDS PLUGIN.so OUTDIR
           the plugin's cost: ROUNDS jobs with the plugin and ROUNDS without, alternating, at 16-64 MiB
           (ITERS calls a size, default 40); per collective and size, each arm's mean call time and the
           difference (the mean of the paired rounds' differences) with its band: the 95 % confidence
           interval of that mean, and the paired rounds' lowest and highest. Needs no watcher.
environment: OPS (comma-separated, default every one), ITERS, SIZES_MIB (comma-separated), CONNECT_FIRST
(default 1: each collective called once at 1 MiB before the sizes, so that no size holds NCCL's connection),
COST_AB_VS (--cost-ab's other arm: off, the default; idle: NCCL calls the plugin, whose hooks return at once,
so the cost splits into NCCL's profiler path and the plugin's own; nosteps, noproxy, nokernel: the plugin on
without the proxy's steps, or without its operations and steps, or without the kernels' channels and phases;
nopush, noclock, neither: the plugin on, its hooks doing all their work but the push into the ring, or but
reading the clock, or both: efatop_profiler_skip; same: both arms the plugin on, an A/A that shows the A/B's own
floor), COST_TRACE (1: the cost modes' plugin also writes its trace,
as every cost run did before the twenty-first session; default 0, as a watched job runs), TORCH_CHECK_CHILD (a
program each rank runs in place of this script, with TORCH_CHECK_RANK set: tests/nccl_plugin.rs's stand-in
ranks, which need no GPU)
"""
import ctypes
import gzip
import os
import statistics
import subprocess
import sys
import threading

OPS = ["alltoall", "allreduce", "allgather", "reducescatter", "broadcast", "sendrecv"]
# --cost-ab's other arm (COST_AB_VS): the event bits it keeps (NCCL's ncclProfile* types: 1 << 3 proxy
# operations, 1 << 4 proxy steps, 1 << 6 kernel channels, 1 << 15 kernel phases: NCCL times a kernel's
# channels through a profiler connection of their own, the kernel writing its timers to host memory);
# "idle" keeps every event with the plugin's hooks returning at once.
VS_KEEP = {"off": 0, "nosteps": ~(1 << 4), "noproxy": ~((1 << 3) | (1 << 4)), "nokernel": ~((1 << 6) | (1 << 15))}
# The arms that keep every event and leave part of the hooks' work out (efatop_profiler_skip's bits); "same"
# leaves nothing out (an A/A).
VS_SKIP = {"nopush": 1, "noclock": 2, "neither": 3, "same": 0}
# Whether the cost modes' plugin writes its trace (every record timed, pushed and written as a line): not as
# a job runs watched, so not by default.
COST_TRACE = os.environ.get("COST_TRACE", "0") == "1"


def timed_ms(call, n):
    """`n` calls back to back on the GPU's stream, timed by CUDA events around them: ms a call."""
    import torch
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        call()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / n


def child(rank, world):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda:0"))
    maps = [l.split()[-1] for l in open("/proc/self/maps") if "nccl" in l and "/" in l]
    found = hasattr(ctypes.CDLL(None), "ncclGetVersion")
    print(f"NCCL {rank} torch={torch.__version__} nccl={torch.cuda.nccl.version()} dlsym_default={found} maps={sorted(set(maps))}", flush=True)
    iters = int(os.environ.get("ITERS", "10"))
    ops = os.environ.get("OPS", ",".join(OPS)).split(",")
    sizes = [int(m) for m in os.environ.get("SIZES_MIB", "1,2,4,8,16,32").split(",")]
    peer = 1 - rank
    # NCCL connects a collective's peers on its first use (runtime connect): that first call took 111 ms of a
    # 16 MiB broadcast against 1.8 ms for the next (H100, NCCL 2.28.9, 2026-12-06), and the watcher times a
    # call from its first proxy step, after the connection. As nccl-tests does its warm-up before the sweep,
    # each collective is called once at 1 MiB first (CONNECT_FIRST=0: not), untimed, unprinted: every size
    # below is then its calls' own.
    first = [(op, 1) for op in ops] if os.environ.get("CONNECT_FIRST", "1") != "0" else []

    def make_call(op, mib):
        size = mib << 20
        n = size // 4
        x = torch.ones(n, device="cuda")
        y = torch.empty_like(x)
        part = torch.ones(n // world, device="cuda")

        def call():
            if op == "alltoall":
                dist.all_to_all_single(y, x)
            elif op == "allreduce":
                dist.all_reduce(x)
            elif op == "allgather":
                dist.all_gather_into_tensor(y, part)
            elif op == "reducescatter":
                dist.reduce_scatter_tensor(part, x)
            elif op == "broadcast":
                dist.broadcast(x, src=0)
            elif op == "sendrecv":
                for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, y, peer)]):
                    work.wait()
            else:
                raise SystemExit(f"OPS: unknown collective {op!r} (allowed: {', '.join(OPS)})")

        return call

    for op, mib in first:
        make_call(op, mib)()
        torch.cuda.synchronize()
        dist.barrier()
    blocks = int(os.environ.get("COST_AB_BLOCKS", "0"))
    if blocks:
        # The plugin's cost inside this job: blocks of ITERS calls with the plugin on and off, in pairs whose
        # order alternates (on-off, off-on, ...), both ranks switching between the same calls. The job goes
        # round every collective and size a pair at a time (each one's pair b, then each one's pair b + 1):
        # every collective's pairs then span the whole job, and a job cut short by its time limit holds as
        # many pairs of each (until 2026-12-07 each took all its blocks in turn, and a device call that ran
        # out of time kept none of the later ones).
        lib = ctypes.CDLL(os.environ["NCCL_PROFILER_PLUGIN"])
        lib.efatop_profiler_events.argtypes = [ctypes.c_uint64]
        versus = os.environ.get("COST_AB_VS", "off")
        calls = [(op, mib << 20, make_call(op, mib)) for op in ops for mib in sizes]
        for _op, _size, call in calls:
            for _ in range(2):
                call()
        torch.cuda.synchronize()
        for pair in range(0, blocks - 1, 2):
            for op, size, call in calls:
                for b in (pair, pair + 1):
                    arm = ("on", "off")[(b + b // 2) % 2]
                    # The "off" arm: the plugin off (mask 0), or idle (NCCL calls it, it does nothing), or on
                    # without some of its events (VS_KEEP: the event bits kept).
                    keep = ~0 if arm == "on" or versus == "idle" or versus in VS_SKIP else VS_KEEP[versus]
                    lib.efatop_profiler_idle(1 if arm == "off" and versus == "idle" else 0)
                    lib.efatop_profiler_skip(VS_SKIP.get(versus, 0) if arm == "off" else 0)
                    if lib.efatop_profiler_events(keep & 0xFFFFFFFFFFFFFFFF) != 0:
                        raise SystemExit("torch-alltoall-check: the plugin has no activation mask to set")
                    dist.barrier()
                    torch.cuda.synchronize()
                    print(f"AB {rank} {op} {size} {b} {arm} {timed_ms(call, iters) * 1e3:.1f}", flush=True)
        lib.efatop_profiler_idle(0)
        lib.efatop_profiler_skip(0)
        lib.efatop_profiler_events(0xFFFFFFFFFFFFFFFF)
        dist.destroy_process_group()
        return
    for op in ops:
        for mib in sizes:
            size = mib << 20
            call = make_call(op, mib)
            # The warm-up calls, each timed alone: efatop watch sees every call, so the job's figure over
            # all of them (the 7th field) is the one to hold the watcher's mean against.
            warm_ms = [timed_ms(call, 1) for _ in range(2)]
            dist.barrier()
            seconds = timed_ms(call, iters) / 1000
            every = (sum(warm_ms) / 1000 + seconds * iters) / (iters + len(warm_ms))
            print(f"JOB {rank} {op} {size} {seconds * 1e6:.1f} {size / seconds / 1e9:.3f} {every * 1e6:.1f}", flush=True)
            print(f"WARM {rank} {op} {size} " + " ".join(f"{ms * 1e3:.1f}" for ms in warm_ms), flush=True)
    dist.destroy_process_group()


def job(plugin, out, port, tag="", trace=True, echo=None):
    """Runs the two ranks once; with `plugin` None, without the profiler. Returns the JOB lines. With `trace`
    the plugin also writes every record (EFATOP_PROFILER_TRACE: each state timed and pushed, its thread
    writing a line a record), which a job watched in production does not: the cost modes leave it out."""
    procs = []
    for rank in range(2):
        env = dict(os.environ)
        env.update(
            TORCH_CHECK_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            NCCL_HOSTID=f"efatop-host-{rank}",
            NCCL_SOCKET_IFNAME="lo",
            NCCL_IB_DISABLE="1",
            NCCL_NVLS_ENABLE="0",
        )
        env.pop("EFATOP_WATCH", None)
        env.pop("NCCL_PROFILER_PLUGIN", None)
        if plugin is not None:
            env.update(
                NCCL_PROFILER_PLUGIN=plugin,
                EFATOP_PROFILER_FILE=f"{out}/torch{tag}-r{rank}.efanccl",
            )
            if trace:
                env.update(EFATOP_PROFILER_TRACE=f"{out}/torch{tag}-r{rank}.trace")
            else:
                env.pop("EFATOP_PROFILER_TRACE", None)
        rank_program = [os.environ["TORCH_CHECK_CHILD"]] if os.environ.get("TORCH_CHECK_CHILD") else [sys.executable, __file__]
        procs.append(subprocess.Popen(rank_program, env=env, stdout=subprocess.PIPE, text=True))
    # Each rank's lines are read as they come; those `echo` picks are printed at once, so that a job its time
    # limit ends keeps them in its log.
    said = [[] for _ in procs]
    printing = threading.Lock()

    def read(proc, into):
        for line in proc.stdout:
            into.append(line.rstrip("\n"))
            if echo is not None and echo(line):
                with printing:
                    sys.stdout.write(line)
                    sys.stdout.flush()

    # Daemons: a rank that failed does not leave this process waiting on its peer's output.
    readers = [threading.Thread(target=read, args=pair, daemon=True) for pair in zip(procs, said)]
    for reader in readers:
        reader.start()
    lines = []
    for p, reader, text in zip(procs, readers, said):
        p.wait()
        reader.join()
        if p.returncode != 0:
            # Its lines, less those already printed; its peers are stopped (they would wait on it).
            sys.stdout.write("".join(line + "\n" for line in text if echo is None or not echo(line)))
            for other in procs:
                if other.poll() is None:
                    other.terminate()
            raise SystemExit(f"torch-alltoall-check: a rank exited {p.returncode}")
        lines += text
    return lines


def cost(rounds, plugin, out):
    """The plugin's cost per collective and size: ROUNDS paired jobs, on and off alternating (which goes
    first alternates too)."""
    os.environ.setdefault("SIZES_MIB", "16,32,64")
    os.environ.setdefault("ITERS", "40")
    times = {}  # (op, size) -> {"on": [...], "off": [...]} of per-job means over both ranks
    for r in range(rounds):
        for arm in (("on", "off") if r % 2 == 0 else ("off", "on")):
            lines = job(plugin if arm == "on" else None, out, 29540 + 2 * r + (arm == "on"), tag=f"-cost{r}", trace=False)
            per = {}
            for line in lines:
                if line.startswith("JOB "):
                    _, _rank, op, size, us, _alg = line.split()[:6]
                    per.setdefault((op, int(size)), []).append(float(us))
            for key, us in per.items():
                times.setdefault(key, {"on": [], "off": []})[arm].append(statistics.mean(us))
            print(f"round {r + 1} {arm}: {len(per)} sizes", flush=True)
    # The band: the 95 % confidence interval of the mean paired difference (Student's t over the rounds),
    # which narrows as rounds are added; the paired rounds' lowest and highest beside it.
    print(f"{'coll':14} {'size':>9} {'off us':>9} {'on us':>9} {'cost':>8} {'95% band':>18} {'width':>7} {'paired lo..hi':>18}")
    for (op, size), arms in sorted(times.items()):
        off, on = statistics.mean(arms["off"]), statistics.mean(arms["on"])
        paired = [(a - b) / b * 100 for a, b in zip(arms["on"], arms["off"])]
        mean = statistics.mean(paired)
        half = t_half(paired)
        print(f"{op:14} {size:>9} {off:>9.1f} {on:>9.1f} {mean:>+7.2f}% "
              f"{f'{mean - half:+.2f}..{mean + half:+.2f}%':>18} {2 * half:>6.2f}% {f'{min(paired):+.2f}..{max(paired):+.2f}%':>18}")


# Student's t, two-sided 95 %, by degrees of freedom (beyond 30, 1.96 is used); scripts/gpu/cost-jobs reads it too.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086,
       21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045, 30: 2.042}


def t_half(xs):
    """Half the width of the 95 % confidence band of the mean of `xs` (Student's t); infinite for fewer than two."""
    if len(xs) < 2:
        return float("inf")
    return T95.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / len(xs) ** 0.5


def cost_ab(blocks, plugin, out):
    """The plugin's cost per collective and size inside one job: `blocks` blocks of ITERS calls (default 10),
    the plugin on and off alternating in pairs (efatop_profiler_active); per pair, the difference of the two
    blocks' mean call time (both ranks' mean); the cost is the pairs' mean with its 95 % band. The off blocks
    leave NCCL's per-channel work counts apart (host and GPU, docs/watch.md): keep a collective last in OPS,
    a job ending in point-to-point blocks may wait at its end."""
    os.environ.setdefault("SIZES_MIB", "16,32,64")
    os.environ.setdefault("ITERS", "10")
    os.environ["COST_AB_BLOCKS"] = str(blocks)
    # Each rank's NCCL line (torch's and NCCL's versions) is printed at once as the blocks are, so that a job
    # its limit cuts still names what it ran on.
    ab_table(job(plugin, out, 29560, tag="-ab", trace=COST_TRACE, echo=lambda line: is_block(line) or line.startswith("NCCL ")), COST_TRACE)


def is_block(line):
    """Whether a rank's line is one block's time (`AB rank op bytes block arm us`)."""
    return line.startswith("AB ")


def ab_table(lines, trace=None):
    """cost_ab's table from the AB lines among `lines` (the job printed each as it came, so that its log keeps
    every block); `--ab-table LOG` reads them back from a log, a run cut short included."""
    times = {}  # (op, size) -> block -> rank -> us, and the block's arm
    arms = {}
    for line in filter(is_block, lines):
        _, rank, op, size, block, arm, us = line.split()
        times.setdefault((op, int(size)), {}).setdefault(int(block), {})[int(rank)] = float(us)
        arms[(op, int(size), int(block))] = arm
    versus = os.environ.get("COST_AB_VS", "off")
    if versus != "off":
        print(f"# the other arm: {versus} (COST_AB_VS), not the plugin off")
    if trace is not None:
        print(f"# the plugin's trace: {'written (COST_TRACE=1)' if trace else 'not written'}")
    print(f"{'coll':14} {'size':>9} {'off us':>9} {'on us':>9} {'cost':>8} {'95% band':>18} {'width':>7} {'pairs':>5}"
          f" {'median':>8} {'its 95% band':>18} {'width':>7}")
    verdicts = []
    for (op, size), blocks_us in sorted(times.items()):
        # A block without both ranks' times (a run cut short) is left out.
        mean = {b: statistics.mean(us.values()) for b, us in blocks_us.items() if set(us) == {0, 1}}
        paired, on_all, off_all = [], [], []
        for b in range(0, max(mean, default=-1) + 1, 2):
            if b in mean and b + 1 in mean:
                by = {arms[(op, size, b)]: mean[b], arms[(op, size, b + 1)]: mean[b + 1]}
                paired.append((by["on"] - by["off"]) / by["off"] * 100)
                on_all.append(by["on"])
                off_all.append(by["off"])
        if len(paired) < 2:
            continue
        m = statistics.mean(paired)
        half = t_half(paired)
        hl, lo, hi = hodges_lehmann(paired)
        print(f"{op:14} {size:>9} {statistics.mean(off_all):>9.1f} {statistics.mean(on_all):>9.1f} {m:>+7.2f}% "
              f"{f'{m - half:+.2f}..{m + half:+.2f}%':>18} {2 * half:>6.2f}% {len(paired):>5}"
              f" {hl:>+7.2f}% {f'{lo:+.2f}..{hi:+.2f}%':>18} {hi - lo:>6.2f}%")
        verdicts.append(goal_verdict(op, size, m, 2 * half))
    if verdicts:
        print(f"# the goal (a cost of at most {GOAL_PCT:g} %, its 95 % band under {GOAL_PCT:g} % wide): " + "; ".join(verdicts))


# Issue 58's goal for the plugin's cost, per collective and size: the mean at most this, its band narrower.
GOAL_PCT = 1.0


def goal_verdict(op, size, cost, width):
    """Whether one row of the table meets the goal, judged on the figures as printed (two decimals): the
    pairs' mean cost and the width of its t band."""
    cost, width = round(cost, 2), round(width, 2)
    why = [f"cost {cost:+.2f} %"] if cost > GOAL_PCT else []
    why += [f"band {width:.2f} % wide"] if width >= GOAL_PCT else []
    return f"{op} {size} " + (f"not met ({', '.join(why)})" if why else "met")


def hodges_lehmann(diffs):
    """The pairs' median difference as Hodges and Lehmann estimate it (the median of every pair of pairs'
    mean, Walsh's averages) with its 95 % band from Wilcoxon's signed-rank test (normal approximation, which
    holds from about 20 pairs). Beside the mean's t band in cost_ab's table: on a GPU two processes share by
    time slices a block now and then spans one slice more than its pair, a tail that widens the mean's band
    and which this estimator weighs less; both are printed, neither is chosen after the fact."""
    n = len(diffs)
    walsh = sorted((diffs[i] + diffs[j]) / 2 for i in range(n) for j in range(i, n))
    k = int(n * (n + 1) / 4 - 1.96 * (n * (n + 1) * (2 * n + 1) / 24) ** 0.5)
    k = max(k, 0)
    return statistics.median(walsh), walsh[k], walsh[len(walsh) - 1 - k]


def main():
    if os.environ.get("TORCH_CHECK_RANK") is not None:
        child(int(os.environ["TORCH_CHECK_RANK"]), 2)
        return
    if sys.argv[1:2] == ["--cost"]:
        os.makedirs(sys.argv[4], exist_ok=True)
        cost(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    if sys.argv[1:2] == ["--ab-table"]:
        path = sys.argv[2]
        with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as log:
            ab_table(log)  # whether that job wrote its trace: not known here
        return
    if sys.argv[1:2] == ["--cost-ab"]:
        if not sys.argv[2].isdigit() or int(sys.argv[2]) < 2 or int(sys.argv[2]) % 2:
            print(f"torch-alltoall-check: --cost-ab BLOCKS: {sys.argv[2]!r} (allowed: an even number of blocks, 2 or more: they run in pairs)", file=sys.stderr)
            sys.exit(2)
        os.makedirs(sys.argv[4], exist_ok=True)
        cost_ab(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        return
    plugin, out = sys.argv[1], sys.argv[2]
    for line in job(plugin, out, 29533):
        print(line, flush=True)


if __name__ == "__main__":
    main()
