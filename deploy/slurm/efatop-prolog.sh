#!/bin/bash
# Slurm Prolog running efatop's node check before each job (slurm.conf: Prolog=/etc/slurm/efatop-prolog.sh;
# add PrologFlags=Alloc to run it when the allocation starts rather than at the first step). Within 30 s:
# healthy, exit 0; something wrong that calls for a reset, reboot or replacement, the node is drained with
# efatop's reason (`sinfo -R`: `efatop: reboot: rdmap80s0 port 1 DOWN`) and the prolog exits 1, so Slurm
# requeues the job elsewhere; a problem whose action is only `watch` (the reason's first word after
# `efatop: `) is logged and the job runs (efatop does not drain for it, and a failed prolog would make
# Slurm drain the node itself); efatop could not tell (exit 2: no EFA visible, say), the job runs. tests/slurm.rs runs it as the emulated cluster's Prolog
# (scripts/cluster/slurm-cluster up --prolog): Slurm 22.05 keeps efatop's reason, and an srun on that node fails
# with `Job prolog failed` (an interactive step is not requeued; batch jobs are).
EFATOP=${EFATOP:-/opt/efatop/bin/efatop}
# shellcheck disable=SC2086 # EFATOP_CHECK_ARGS is a list of flags (e.g. --instance-type p5.48xlarge)
reason=$("$EFATOP" check --format slurm --drain --node-name "${SLURMD_NODENAME:-$(hostname -s)}" ${EFATOP_CHECK_ARGS:-} 2>/dev/null)
case $? in
  1)
    if [[ $reason == "efatop: watch: "* ]]; then
      echo "efatop prolog: ${reason} (action watch: not drained)" >&2
      exit 0
    fi
    echo "efatop prolog: ${reason}" >&2
    exit 1
    ;;
  *) exit 0 ;;
esac
