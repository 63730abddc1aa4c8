"""The GPU lease's stages that are not an existing command: the environment snapshot, the planned op rows and the
generation rows. Each runs in its own process (``python benchmarks/gpu_lease.py stage NAME ...``), started and cut
by :mod:`benchmarks.lease_runner`. ``--device cpu`` is the dry run: the same code on plans sized for a CPU.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.provenance import git_commit
from perfpredict.core.units import MIB

#: nvidia-smi --query-gpu fields of the environment snapshot (clocks and power limit before and after the lease)
NVSMI_FIELDS = (
    "name",
    "driver_version",
    "pstate",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "clocks.max.mem",
    "power.draw",
    "power.limit",
    "enforced.power.limit",
    "temperature.gpu",
    "memory.used",
    "memory.total",
    "utilization.gpu",
)
#: the dry run's op caps: ops a 2-core CPU times in milliseconds
CPU_MAX_IO_BYTES = 8 * MIB
CPU_MAX_FLOPS = 5e7
#: the dry run checks the wiring, not the labels: it measures the plan's first ops and the collector's first rows,
#: then gives its time to the next stage (a GPU stage fills its share)
CPU_OPS = 16
CPU_MODEL_ROWS = 2
ROUND_BLOCK = {"cpu": 8, "cuda": 32}  # ops whose rounds interleave (and whose tensors live together)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _run(argv: list[str], timeout_s: float = 30.0) -> str:
    """A command's output, or a line saying why there is none (the snapshot records it either way)."""
    if shutil.which(argv[0]) is None:
        return f"{argv[0]}: not found\n"
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{' '.join(argv)}: {err}\n"
    return done.stdout + done.stderr


def parse_nvsmi_csv(text: str, fields: tuple[str, ...] = NVSMI_FIELDS) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits``: numbers as floats, '[N/A]' as None."""
    out = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(fields):
            continue
        row: dict[str, Any] = {}
        for name, value in zip(fields, values):
            if value in ("[N/A]", "N/A", "[Not Supported]", ""):
                row[name] = None
                continue
            try:
                row[name] = float(value)
            except ValueError:
                row[name] = value
        out.append(row)
    return out


def snapshot_env(into: Path, when: str, device: str) -> dict[str, Any]:
    """Write ``<into>/<when>.json`` (versions, device, clocks, power limit, temperature) and
    ``<into>/<when>-nvidia-smi.txt``; returns the JSON. Raises SystemExit(3) when CUDA was asked for and is absent."""
    import torch

    from perfpredict.hardware import cpu_detection
    from perfpredict.profiling import cpu as cpu_probe
    from perfpredict.profiling.collect_engine import device_slug

    into.mkdir(parents=True, exist_ok=True)
    query = ",".join(NVSMI_FIELDS)
    smi = _run(["nvidia-smi"]) + _run(["nvidia-smi", "-q", "-d", "CLOCK,POWER,PERFORMANCE,TEMPERATURE"])
    csv = _run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"])
    (into / f"{when}-nvidia-smi.txt").write_text(smi + csv)
    info: dict[str, Any] = {
        "when": when,
        "at": _now(),
        "device": device,
        "gpus": parse_nvsmi_csv(csv),
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": cpu_detection.cpu_model(),
        "cpu_count": cpu_probe.cpu_count(),
        "load_avg_1m": cpu_probe.load_avg_1m(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "cudnn_version": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "transformers_version": _version("transformers"),
        "repo_commit": git_commit(),
    }
    if device != "cpu" and not torch.cuda.is_available():
        info["error"] = "CUDA asked for but torch.cuda.is_available() is False"
        (into / f"{when}.json").write_text(json.dumps(info, indent=1) + "\n")
        print(f"env: {info['error']}; the GPU stages are skipped", file=sys.stderr)
        raise SystemExit(3)
    if device != "cpu":
        props = torch.cuda.get_device_properties(device)
        info.update(
            device_name=props.name,
            capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            total_memory_bytes=props.total_memory,
            l2_cache_bytes=getattr(props, "L2_cache_size", None),
        )
    else:
        info["device_name"] = cpu_detection.cpu_model()
    info["slug"] = device_slug(device)
    (into / f"{when}.json").write_text(json.dumps(info, indent=1) + "\n")
    gpu = info["gpus"][0] if info["gpus"] else {}
    print(
        f"env {when}: {info['device_name']} ({info['slug']}), torch {info['torch_version']}, "
        f"SM clock {gpu.get('clocks.sm')} MHz, power limit {gpu.get('power.limit')} W",
        file=sys.stderr,
    )
    return info


def _version(package: str) -> str | None:
    try:
        module = __import__(package)
    except ImportError:
        return None
    return getattr(module, "__version__", None)


def run_ops(folder: Path, device: str, budget_s: float) -> Any:
    """The planned op rows (:func:`perfpredict.profiling.op_plan.lease_plan`) into ``folder/ops``, resumably; the
    plan's counts go to ``folder/ops/plan.json`` first. The CPU dry run measures the plan's first ``CPU_OPS``."""
    import torch

    from perfpredict.profiling import op_plan
    from perfpredict.profiling.collect_engine import CollectConfig
    from perfpredict.profiling.collect_ops import OPS_FOLDER, collect_ops

    t0 = time.monotonic()
    dry = device == "cpu"
    plan = op_plan.lease_plan(
        max_io_bytes=CPU_MAX_IO_BYTES if dry else op_plan.MAX_IO_BYTES, max_flops=CPU_MAX_FLOPS if dry else None
    )
    (folder / OPS_FOLDER).mkdir(parents=True, exist_ok=True)
    header = {
        **op_plan.plan_summary(plan),
        "device": device,
        "torch_version": torch.__version__,
        "plan_seconds": round(time.monotonic() - t0, 2),
        "written_at": _now(),
    }
    (folder / OPS_FOLDER / "plan.json").write_text(json.dumps(header, indent=1) + "\n")
    print(f"ops: plan of {len(plan)} ops built in {header['plan_seconds']} s", file=sys.stderr, flush=True)
    left_s = max(budget_s - (time.monotonic() - t0), 1.0)
    cfg = CollectConfig(
        out=folder,
        device=device,
        budget_minutes=left_s / 60,
        round_block=ROUND_BLOCK["cpu" if dry else "cuda"],
        compact=False,
    )
    todo = plan[:CPU_OPS] if dry else plan
    summary = collect_ops(cfg, plan=((p.op, p.source, False) for p in todo), build_on_device=True)
    print(
        f"ops: {summary.measured} op rows ({summary.errors} failed, {summary.skipped_existing} already there) in "
        f"{summary.seconds:.0f} s ({summary.rows_per_minute:.0f} rows/min); stopped by {summary.stopped_by}",
        file=sys.stderr,
    )
    return summary


def run_generation(folder: Path, device: str, budget_s: float) -> Any:
    """The generation rows (:mod:`perfpredict.profiling.generation_timing`) into ``folder``, resumably; the plan
    goes to ``folder/plan.json`` first."""
    from perfpredict.profiling import generation_timing as gt
    from perfpredict.profiling.collect_engine import device_slug

    t0 = time.monotonic()
    specs = gt.dry_run_plan() if device == "cpu" else gt.lease_plan()
    folder.mkdir(parents=True, exist_ok=True)
    header = {"schema_version": gt.GEN_SCHEMA_VERSION, "device": device, "written_at": _now()}
    header["specs"] = [s.to_key() for s in specs]
    (folder / gt.PLAN_JSON).write_text(json.dumps(header, indent=1) + "\n")
    summary = gt.collect_generation(
        folder, specs, device, device_slug(device), budget_s=max(budget_s - (time.monotonic() - t0), 1.0)
    )
    print(
        f"generation: {summary.measured} rows ({summary.errors} failed, {summary.skipped_existing} already there, "
        f"{len(summary.skipped_budget)} left for a later lease); stopped by {summary.stopped_by}",
        file=sys.stderr,
    )
    return summary


def models_argv(python: str, device: str, folder: Path, budget_s: float) -> list[str]:
    """The model-row stage: ``perfpredict collect`` (protocol v3) with a small budget, bf16 transformers and
    vision models on a GPU; the smallest zoo models on a CPU (the dry run)."""
    common = [python, "-m", "perfpredict", "collect", "--device", device, "--out", str(folder)]
    common += ["--arch-block", "1", "--graph-features", "deferred", "--no-compact", "--no-progress"]
    common += ["--budget-minutes", f"{max(budget_s, 6.0) / 60:.3f}"]
    if device == "cpu":
        return [
            *common,
            *("--profile", "tiny", "--families", "mlp", "--dtypes", "float32", "--batches", "1,2"),
            *("--min-seconds", "0.05", "--warmup-max-seconds", "0.2", "--round-block", "1"),
            *("--min-rounds", "1", "--max-rounds", "1", "--max-rows", str(CPU_MODEL_ROWS)),  # the wiring, not labels
            *("--power-sample-interval-s", "0"),
        ]
    return [
        *common,
        *("--dtypes", "bfloat16", "--batches", "1,8,32"),
        *("--families", "llama,qwen2,bert,vit,resnet,convnext,gpt2,swin,efficientnet"),
        *("--min-seconds", "0.3", "--warmup-max-seconds", "1", "--max-latency-ms", "400", "--round-block", "3"),
    ]
