"""Derive the shipped ``h100-server`` host profile from what was measured on the H100 rows' own host.

    python benchmarks/host_profile_h100.py data/v3/nvidia-h100-80gb-hbm3 \
        --out perfpredict/data/host_profiles/h100-server.json

The H100 rows (``data/nvidia-h100-80gb-hbm3``, ``data/v3/nvidia-h100-80gb-hbm3``) were measured on leased H100 SXM
machines whose host is a 16-vCPU Intel Xeon (``env_cpu_model``, ``env_cpu_count``; the lease's ``env/before.json``),
torch 2.11.0+cu130. Three things were measured there about the host:

- ``host_dispatch_ms`` of each protocol-v3 model row: the host time one eager step takes to return, started on an
  idle GPU (``profiling/timing.py``, ``host_enqueue_ms``): the host timeline of the two-timeline model, measured;
- the back-to-back kernel launch of the H100 roofline run (``perfpredict/data/measured/h100-sxm.json``,
  ``launch_back_to_back``, same platform and torch): ``gpu_launch_us``;
- the sentinel's dispatch part (50 tiny CUDA elementwise ops), kept in ``details`` as a cross-check.

No bare-call calibration (``perfpredict calibrate-host``) ran there, so the per-kind shape of ``dispatch_us`` and
``module_us`` are the development VM's (the reference profile's); the GPU dispatch scale is fitted so that the
predicted host timeline of each v3 row's graph matches its measured ``host_dispatch_ms``: per row,
``(host_dispatch_ms - kernels x gpu_launch_us) / bare dispatch``, and the median over rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from dataclasses import asdict, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from timeline_accuracy import sweeps_of

from perfpredict.hardware.devices import get_device
from perfpredict.learning.training_data import GraphCache
from perfpredict.predictors import host_model
from perfpredict.profiling.dataset import load_dataset

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import command

MEASURED_LAUNCH = Path(__file__).resolve().parents[1] / "perfpredict" / "data" / "measured" / "h100-sxm.json"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", help="protocol-v3 H100 rows (with host_dispatch_ms)")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    rows = [r for r in load_dataset(args.folder).rows if r.get("status") == "ok" and r.get("host_dispatch_ms")]
    launch = next(
        (k for k in json.loads(MEASURED_LAUNCH.read_text())["kernels"] if k.get("kernel") == "launch_back_to_back"),
        None,
    )
    if launch is None:
        raise SystemExit(f"no launch_back_to_back kernel in {MEASURED_LAUNCH}")
    launch_s = float(launch["min"])
    reference = host_model.HostProfile.from_file(host_model.REFERENCE)
    unit = replace(reference, dispatch_scale={"gpu": 1.0})
    device = get_device("H100-SXM")
    per_row = []
    for idx, arrays, _, _ in sweeps_of(rows, device, GraphCache()):
        graph = arrays.graph
        bare_s = float(host_model.node_host_s(graph, unit, 0.0, gpu=True).sum())
        kernels = sum(1 for n in graph.nodes if not n.is_view)
        for i in idx:
            r = rows[i]
            scale = (r["host_dispatch_ms"] * 1e-3 - kernels * launch_s) / bare_s
            per_row.append(
                {
                    "family": r["family"],
                    "batch": r["batch_size"],
                    "host_dispatch_ms": round(r["host_dispatch_ms"], 3),
                    "eager_ms": round(r["eager_ms"], 3),
                    "graph_kernels": kernels,
                    "bare_dispatch_ms": round(bare_s * 1e3, 3),
                    "scale": round(scale, 3),
                }
            )
    scale = statistics.median(x["scale"] for x in per_row)
    sentinel = sorted(r["env_sentinel_dispatch_ms"] for r in rows if r.get("env_sentinel_dispatch_ms"))
    first = rows[0]
    profile = replace(
        reference,
        name="h100-server",
        source=(
            "the host of the H100 SXM rows (16-vCPU Intel Xeon, torch 2.11.0+cu130): GPU dispatch scale fitted on "
            f"the host time of {len(per_row)} eager steps measured there (host_dispatch_ms, "
            f"{Path(args.folder).as_posix()}), launch {launch_s * 1e6:.1f} us from its roofline run; per-op-kind "
            "shape from the dev VM's calibrate-host (benchmarks/host_profile_h100.py)"
        ),
        dispatch_scale={"gpu": round(scale, 3)},
        gpu_launch_us=round(launch_s * 1e6, 3),
        cpu_model=f"{first.get('env_cpu_model')} ({int(first.get('env_cpu_count') or 0)} vCPUs)",
        torch_version=str(first.get("env_torch_version")),
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        cpu_ops=None,
        cpu_ceilings=None,
        details={
            "command": command(__file__, argv),
            "rows": per_row,
            "scale": "median of the rows' scales",
            "launch_source": f"{MEASURED_LAUNCH.name}: launch_back_to_back min ({launch.get('method', '')})",
            "sentinel_dispatch_ms_50_ops": sentinel,
            "dispatch_us_shape_from": reference.name,
        },
    )
    Path(args.out).write_text(json.dumps(asdict(profile), indent=2, sort_keys=True) + "\n")
    print(f"dispatch scale {scale:.3f} (rows: {', '.join(str(x['scale']) for x in per_row)}); wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
