#!/usr/bin/env bash
# For a short lease, run benchmarks/gpu_lease.sh first (the one prepared lease script); this one is for a
# collection spread over several device calls of one lease.
# A dataset collection that outlives one device call. The device tool caps a command at 10 minutes but keeps a
# process started with setsid running while the machine stays held, so one lease can collect for ~25 minutes
# without restarting Python or re-sending rows:
#
#   bash benchmarks/gpu_detached.sh start 21   # copy the repo to $WORK, start the collector for 21 minutes
#   bash benchmarks/gpu_detached.sh wait 560   # wait up to 560 s (or until it ends), snapshot into $OUT
#
# The collector is protocol v3 (rounds; device_ms by CUDA-graph replay, eager_ms, host_dispatch_ms) into
# data/v3/<gpu-slug>/. COLLECT_MODE=ops collects single-op rows instead (data/v3/<gpu-slug>/ops/), and
# COLLECT_MODE=both spends the first OPS_MINUTES (default 6) on ops, then the rest on model rows.
# Each `wait` packs data/v3/<gpu-slug>/ and the log into $OUT/snapshot.tgz, so a machine lost between calls costs
# only the rows since the last snapshot. The collector runs in a copy ($WORK) because each call re-syncs the
# working tree over the repository and would overwrite the rows files under it.
set -u
WORK=${WORK:-/tmp/pp_detached}
COLLECT_ARGS=${COLLECT_ARGS:-"--dtypes float32,bfloat16 --batches 1,2,8,32,128,256 --arch-block 1 --max-latency-ms 400 --min-seconds 0.6"}
OPS_ARGS=${OPS_ARGS:-"--dtypes float32,bfloat16 --batches 1,8,32,128 --archs-per-family 3 --ops-variants 3 --round-block 64"}
COLLECT_MODE=${COLLECT_MODE:-both}
OPS_MINUTES=${OPS_MINUTES:-6}
cmd=${1:?start MINUTES | wait SECONDS}
case "$cmd" in
  start)
    rm -rf "$WORK"; mkdir -p "$WORK"
    cp -r perfpredict benchmarks data pyproject.toml "$WORK"/
    cd "$WORK" || exit 1
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv \
      >"$WORK/env.csv" 2>&1
    minutes=${2:?minutes}
    ops_min=0; models_min=$minutes
    case "$COLLECT_MODE" in
      ops) ops_min=$minutes; models_min=0 ;;
      both) ops_min=$OPS_MINUTES; models_min=$(( minutes - OPS_MINUTES )) ;;
    esac
    # shellcheck disable=SC2086 - COLLECT_ARGS and OPS_ARGS are word lists on purpose
    PYTHONPATH="$WORK" PYTHONUNBUFFERED=1 setsid nohup bash -c "
      if (( $ops_min > 0 )); then python3 -m perfpredict collect --ops --device cuda --budget-minutes $ops_min $OPS_ARGS; fi
      if (( $models_min > 0 )); then python3 -m perfpredict collect --device cuda --graph-features deferred \
        --budget-minutes $models_min $COLLECT_ARGS; fi" >"$WORK/collect.log" 2>&1 </dev/null &
    echo $! >"$WORK/collect.pid"
    echo "started collector pid $(cat "$WORK/collect.pid") for $minutes minutes ($ops_min on ops, $models_min on models)"
    ;;
  wait)
    t_end=$(( $(date +%s) + ${2:?seconds} ))
    while kill -0 "$(cat "$WORK/collect.pid")" 2>/dev/null && (( $(date +%s) < t_end )); do sleep 5; done
    kill -0 "$(cat "$WORK/collect.pid")" 2>/dev/null && echo "collector still running" || echo "collector ended"
    tail -n 4 "$WORK/collect.log"
    if [[ -n "${OUT:-}" ]]; then
      tar czf "$OUT/snapshot.tgz" -C "$WORK" $(cd "$WORK" && ls -d data/v3/nvidia-* collect.log env.csv 2>/dev/null)
    fi
    ;;
  *) echo "usage: $0 start MINUTES | wait SECONDS" >&2; exit 2 ;;
esac
