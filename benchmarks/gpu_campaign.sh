#!/usr/bin/env bash
# For a short lease, run benchmarks/gpu_lease.sh first (the one prepared lease script); this campaign is for the
# roofline suite, the studies and longer collections.
# One GPU lease, used fully: environment, NVML resolution, roofline ceilings, predicted vs measured, then the
# dataset collector until the time is up. Every stage has its own time limit, so one failing stage costs only
# itself. Run from the repository root on the GPU host (python3 there must have torch with CUDA):
#
#   STAGES="env nvml roofline pva memhist batchorder gputest collect" TOTAL_S=560 bash benchmarks/gpu_campaign.sh
#
# Results land where the repository keeps them (benchmarks/results/, data/<gpu-slug>/); with $OUT set (the device
# tool), they are also packed into $OUT/campaign.tgz, and the log into $OUT/campaign.log.
set -u
T0=$(date +%s)
TOTAL_S=${TOTAL_S:-560}
STAGES=${STAGES:-"env nvml roofline pva collect"}
COLLECT_ARGS=${COLLECT_ARGS:-"--dtypes float32,bfloat16 --batches 1,8,32,128 --arch-block 2 --max-latency-ms 400 --sentinel"}
PY=${PY:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
STAGE_DIR=${STAGE_DIR:-/tmp/campaign}
mkdir -p "$STAGE_DIR"
LOG="$STAGE_DIR/campaign.log"

left() { echo $(( TOTAL_S - ($(date +%s) - T0) )); }
say() { echo "[campaign +$(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
stage() {  # stage NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local room=$(( $(left) - 20 ))
  (( limit > room )) && limit=$room
  if (( limit < 10 )); then say "$name: skipped, no time left"; return; fi
  say "$name: start (limit ${limit}s)"
  timeout -s INT -k 15 "$limit" "$@" >>"$LOG" 2>&1
  say "$name: exit $?"
}
has() { [[ " $STAGES " == *" $1 "* ]]; }

if has env; then
  { nvidia-smi; nvidia-smi -q -d CLOCK,POWER,PERFORMANCE | head -80; uname -a; $PY -c "import sys, torch; \
print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"; \
    $PY -m pip list 2>/dev/null | grep -iE "^(torch|cupy|numba|nvidia-ml-py|transformers|pyarrow|matplotlib) "; \
  } >"$STAGE_DIR/env.txt" 2>&1
  say "env: $(grep -m1 -o 'NVIDIA H[0-9]*[^|]*' "$STAGE_DIR/env.txt" | head -1)"
fi
if has noise; then
  stage noise 100 $PY studies/timing_noise.py --rows data/nvidia-h100-80gb-hbm3 --out "$STAGE_DIR/timing_noise.json"
  if grep -q "sampler_off_helps=1" "$LOG"; then
    COLLECT_ARGS="$COLLECT_ARGS --power-sample-interval-s 0"; say "noise: power sampling off for the collector"
  fi
fi
has nvml && stage nvml 30 $PY studies/nvml_resolution.py --seconds 3 --out "$STAGE_DIR/nvml_resolution.json"
has roofline && stage roofline 240 $PY benchmarks/roofline.py --device cuda --name h100-sxm
has pva && stage pva 200 $PY benchmarks/predicted_vs_actual.py measure --device cuda \
  --out "$STAGE_DIR/pva_measured.json"
has memhist && stage memhist 200 $PY studies/memory_history.py \
  --split studies/results/memory_split_nvidia-h100-80gb-hbm3.json --out "$STAGE_DIR/memory_history.json"
has batchorder && stage batchorder 240 $PY studies/batch_order.py --dataset data/nvidia-h100-80gb-hbm3 \
  --out "$STAGE_DIR/batch_order.json"
has gputest && stage gputest 90 $PY -m pytest -q -m gpu -p no:cacheprovider tests/kernels/test_kernels_offline_gpu.py
if has collect; then
  budget_s=$(( $(left) - 80 ))  # room for the config in flight, compaction and packing
  if (( budget_s >= 60 )); then
    # shellcheck disable=SC2086 - COLLECT_ARGS is a word list on purpose
    stage collect $(( budget_s + 60 )) $PY -m perfpredict collect --device cuda --graph-features deferred \
      --budget-minutes "$(awk "BEGIN {print $budget_s / 60}")" $COLLECT_ARGS
  fi
fi
say "done; $(( $(date +%s) - T0 ))s"
if [[ -n "${OUT:-}" ]]; then
  cp "$LOG" "$OUT/campaign.log"
  tar czf "$OUT/campaign.tgz" -C "$STAGE_DIR" . -C "$PWD" $(ls -d data/nvidia-* benchmarks/results/roofline_h100* \
    2>/dev/null)
fi
