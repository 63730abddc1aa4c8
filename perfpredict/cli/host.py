"""``perfpredict calibrate-host``: measure this machine's dispatch per op kind and its CPU op model (no GPU needed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    p = subparsers.add_parser(
        "calibrate-host",
        parents=parents or [],
        help="time this host's eager dispatch per op kind and its CPU's op classes (10-20 s; no GPU needed)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="where to store the profile (default: the per-user profile that "
        "predictions read, $XDG_CONFIG_HOME/perfpredict/host_profile.json)",
    )
    p.add_argument("--name", default="this host", help="a name for the profile (default 'this host')")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a few probes in one round (a few seconds): checks that calibration runs, too coarse to predict with",
    )
    p.set_defaults(func=run_calibrate_host)


def run_calibrate_host(args: argparse.Namespace) -> int:
    from perfpredict.learning.host_calibration import calibrate
    from perfpredict.predictors.host_model import profile_path

    profile = calibrate(args.name, quick=args.quick, say=lambda msg: print(msg, file=sys.stderr, flush=True))
    out = Path(args.out) if args.out else profile_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(profile.to_json())
    width = max(map(len, profile.dispatch_us))
    for kind, us in sorted(profile.dispatch_us.items()):
        print(f"{kind:<{width}}  {us:7.2f} us")
    print(f"{'module':<{width}}  {profile.module_us:7.2f} us per forward op")
    for line in summary(profile):
        print(line)
    used = out.resolve() == profile_path().resolve()
    print(
        f"calibrate-host: stored {out} in {profile.details.get('seconds', 0):.0f} s"
        + (
            "; predictions on this machine now use it (host profile and the cpu device's ceilings)"
            if used
            else f"; pass it with PERFPREDICT_HOST_PROFILE={out} to use it"
        ),
        file=sys.stderr,
    )
    busy = busy_host(profile)
    if busy:
        print(f"calibrate-host: {busy}", file=sys.stderr)
    return 0


def summary(profile: Any) -> list[str]:
    """The ceilings the probes reached and the threads they ran with, one line each."""
    ceilings = profile.cpu_ceilings or {}
    lines = []
    for key, label, scale, unit in (
        ("fp32_flops_per_s", "float32 GEMM", 1e9, "GFLOP/s"),
        ("bf16_flops_per_s", "bfloat16 GEMM", 1e9, "GFLOP/s"),
        ("dram_bandwidth_bytes_per_s", "elementwise bandwidth", 1e9, "GB/s"),
    ):
        if key in ceilings:
            lines.append(f"{label:<22} {ceilings[key]['max'] / scale:8.1f} {unit}")
    model = profile.cpu_op_model()
    if model is not None:
        speedup = profile.details.get("thread_speedup", {})
        lines.append(
            f"{'threads':<22} {model.threads:8d}  (speed-up over one thread: "
            + ", ".join(f"{k} {v:.2f}x" for k, v in speedup.items())
            + f"); {len(model.fits)} op classes fitted"
        )
    return lines


def busy_host(profile: Any) -> str:
    """A warning when the load average exceeded the threads during calibration, else ''."""
    model = profile.cpu_op_model()
    loads = [x for x in (profile.details.get("load_average_before"), profile.details.get("load_average_after")) if x]
    if model is None or not loads:
        return ""
    peak = max(load[0] for load in loads)
    if peak <= model.threads:
        return ""
    return (
        f"the host was busy (load average {peak:.1f} on {model.threads} threads): the calibration measured it under "
        "that contention; run it again when the host is as quiet as when you will run your models"
    )
