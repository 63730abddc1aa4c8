#!/usr/bin/env bash
# The one prepared GPU lease script (benchmarks/gpu_lease.py): the first command of a session that gets a GPU.
#
#   run(command="bash benchmarks/gpu_lease.sh \"$OUT\"", timeout_s=570)    # the device tool: one call, <= 9 minutes
#   python benchmarks/gpu_lease.py import <files_at>                         # here, then commit data/v3/<gpu-slug>/
#
# Stages (env 15 s, ops 240 s, models 90 s, generation 155 s, env_after 15 s, packing 15 s: 530 s in all), each cut
# cleanly at the end of its share; OUT gets lease.tgz, lease.log and summary.txt after every stage. Extra arguments
# go to `gpu_lease.py run` (for example --budget-s 300, --stages ops, or --device cpu for the dry run).
set -u
export PERFPREDICT_LEASE_COMMAND="bash benchmarks/gpu_lease.sh $*"  # recorded in run.json
OUT_DIR=${1:?usage: bash benchmarks/gpu_lease.sh OUT_DIR [gpu_lease.py run options]}
shift
cd "$(dirname "$0")/.." || exit 1
PY=${PY:-python3}
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 exec "$PY" benchmarks/gpu_lease.py run "$OUT_DIR" "$@"
