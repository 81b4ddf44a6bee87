#!/usr/bin/env python3
"""A PyTorch job timed as the job times itself, with efatop's NCCL profiler plugin loaded: two processes on
one GPU (each its own NCCL_HOSTID, NCCL's socket transport on lo), all_to_all_single and all_reduce from 1 to
32 MiB. Each rank prints `JOB <rank> <op> <bytes> <us> <algbw GB/s>` (algbw: the bytes of one rank's send
buffer over the mean time of a call, nccl-tests' definition) and what the process tells about its NCCL.

usage: torch-alltoall-check.py PLUGIN.so OUTDIR    (the plugin writes OUTDIR/torch-r<rank>.{trace,efanccl})
"""
import ctypes
import os
import subprocess
import sys


def child(rank, world):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda:0"))
    maps = [l.split()[-1] for l in open("/proc/self/maps") if "nccl" in l and "/" in l]
    found = hasattr(ctypes.CDLL(None), "ncclGetVersion")
    print(f"NCCL {rank} torch={torch.__version__} nccl={torch.cuda.nccl.version()} dlsym_default={found} maps={sorted(set(maps))}", flush=True)
    iters = int(os.environ.get("ITERS", "10"))
    for op in ["alltoall", "allreduce"]:
        for mib in [1, 2, 4, 8, 16, 32]:
            size = mib << 20
            x = torch.ones(size // 4, device="cuda")
            y = torch.empty_like(x)

            def call():
                if op == "alltoall":
                    dist.all_to_all_single(y, x)
                else:
                    dist.all_reduce(x)

            for _ in range(2):
                call()
            torch.cuda.synchronize()
            dist.barrier()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                call()
            end.record()
            torch.cuda.synchronize()
            seconds = start.elapsed_time(end) / 1000 / iters
            print(f"JOB {rank} {op} {size} {seconds * 1e6:.1f} {size / seconds / 1e9:.3f}", flush=True)
    dist.destroy_process_group()


def main():
    if os.environ.get("TORCH_CHECK_RANK") is not None:
        child(int(os.environ["TORCH_CHECK_RANK"]), 2)
        return
    plugin, out = sys.argv[1], sys.argv[2]
    procs = []
    for rank in range(2):
        env = dict(os.environ)
        env.update(
            TORCH_CHECK_RANK=str(rank),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT="29533",
            NCCL_HOSTID=f"efatop-host-{rank}",
            NCCL_SOCKET_IFNAME="lo",
            NCCL_IB_DISABLE="1",
            NCCL_NVLS_ENABLE="0",
            NCCL_PROFILER_PLUGIN=plugin,
            EFATOP_PROFILER_TRACE=f"{out}/torch-r{rank}.trace",
            EFATOP_PROFILER_FILE=f"{out}/torch-r{rank}.efanccl",
        )
        env.pop("EFATOP_WATCH", None)
        procs.append(subprocess.Popen([sys.executable, __file__], env=env))
    sys.exit(max(p.wait() for p in procs))


if __name__ == "__main__":
    main()
