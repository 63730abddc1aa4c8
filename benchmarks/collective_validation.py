"""The measured collective model against Vidur's NCCL timings, held out by decade; vLLM's custom all-reduce against
its published timings; the curves' large-message bus bandwidth against nccl-tests figures.

    python benchmarks/collective_validation.py            # writes benchmarks/results/collective_validation.md
    python benchmarks/collective_validation.py --write    # also rebuilds perfpredict/data/measured_collectives.json

Needs the converted rows (``data/external/vidur/collectives.parquet``; pyarrow and pandas: ``perfpredict[data]``).
The target (issue 47): the collective model within 10% at every message size from 16 KB to 256 MB. What is fitted
on what: each curve (a system, collective, number of ranks and ranks per node) is built from its own rows' octave
medians (``perfpredict/parallel/collective_fit.py``); scoring leaves out one decade of sizes at a time, rebuilds
the curve from the rest, and predicts the held-out octaves, so every scored octave is predicted by a curve that
never saw it. The reference at an octave is the median of Vidur's rows in it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.provenance import header, write_result  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "collective_validation.md"
# nccl-tests bus bandwidths stated by NCCL's maintainers (large messages), against each curve's large-message busbw
NCCL_TESTS = (
    ("a100_dgx", "all_reduce", "8x8", 230.0, "~230 GB/s all-reduce busbw at 8 GB on DGX A100 (S. Jeaugey, "
     "github.com/NVIDIA/nccl-tests/issues/149, 2023-07-05)"),
    ("h100_dgx", "all_reduce", "8x8", 370.0, "~370 GB/s ring busbw, ~480 GB/s with NVLink SHARP, on 8 H100 (S. "
     "Jeaugey, github.com/NVIDIA/nccl-tests/issues/212, 2024-05-06)"),
)  # fmt: skip


def held_out_rows(frame) -> list[dict]:
    from perfpredict.parallel import collective_fit as cf

    out = []
    for (system, kind, ranks, per_node), (sizes, seconds) in sorted(cf.curves(frame).items()):
        scored = cf.held_out(sizes, seconds, "decade")
        octave = {r["size_bytes"]: r["held_out_s"] for r in cf.held_out(sizes, seconds, "octave")}
        for r in scored:
            r["octave_out_s"] = octave[r["size_bytes"]]
        out.append({"system": system, "kind": kind, "layout": f"{ranks}x{per_node}", "rows": scored,
                    "scatter": _scatter(sizes, seconds)})  # fmt: skip
    return out


def _scatter(sizes: np.ndarray, seconds: np.ndarray) -> float:
    """The median relative distance of a row from its octave's median, over rows from 16 KB to 256 MB."""
    octave = np.floor(np.log2(sizes))
    keep = (sizes >= 16e3) & (sizes <= 256e6)
    dist = [abs(t / np.median(seconds[octave == o]) - 1) for t, o in zip(seconds[keep], octave[keep])]
    return float(np.median(dist)) if dist else 0.0


def curve_table(curves: list[dict]) -> tuple[list[str], dict]:
    lines = [
        "| system | collective | ranks x per node | octaves | within 10%: decade out | octave out | in sample | "
        "worst: decade out | octave out | in sample | rows' scatter |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    errs: dict[str, list] = {"held_out_s": [], "octave_out_s": [], "in_sample_s": []}
    ok = {k: 0 for k in errs}
    for c in curves:
        e = {k: np.abs([r[k] / r["measured_s"] - 1 for r in c["rows"]]) for k in errs}
        for k in errs:
            errs[k].extend(e[k])
            ok[k] += bool(np.all(e[k] <= 0.1))
        within = " | ".join(f"{np.mean(e[k] <= 0.1):.0%}" for k in errs)
        worst = " | ".join(f"{np.max(e[k]):.0%}" for k in errs)
        lines.append(
            f"| {c['system']} | {c['kind']} | {c['layout']} | {len(c['rows'])} | {within} | {worst} | "
            f"{c['scatter']:.0%} |"
        )
    summary = {k: {"within": float(np.mean(np.array(v) <= 0.1)), "median": float(np.median(v)),
                   "mean": float(np.mean(v)), "curves_ok": ok[k]} for k, v in errs.items()}  # fmt: skip
    summary["octaves"], summary["curves"] = len(errs["held_out_s"]), len(curves)
    return lines, summary


def _verdict(s: dict) -> str:
    parts = []
    for key, what in (("held_out_s", "a decade held out"), ("octave_out_s", "one octave held out"),
                      ("in_sample_s", "in sample (the runtime's curves)")):  # fmt: skip
        v = s[key]
        parts.append(
            f"{what}: {v['within']:.0%} within 10% (median error {v['median']:.1%}, mean {v['mean']:.1%}), every "
            f"size within 10% on {v['curves_ok']} of {s['curves']} curves"
        )
    met = s["held_out_s"]["curves_ok"] == s["curves"]
    return (
        f"**{s['octaves']} octaves from 16 KB to 256 MB on {s['curves']} curves. " + "; ".join(parts) + ". The "
        f"target (within 10% at every size) is {'met' if met else 'not met'}.**"
    )


def nccl_tests_rows() -> list[str]:
    from perfpredict.parallel import measured_collectives as mc

    lines = [
        "| system | curve | published busbw GB/s | the curve's large-message busbw | source |",
        "|---|---|---:|---:|---|",
    ]
    for system, kind, layout, published, source in NCCL_TESTS:
        n, per = (int(x) for x in layout.split("x"))
        anchors = mc._data()["curves"][system][kind][layout]
        curve = mc.Curve.of(anchors["size_bytes"], np.asarray(anchors["time_us"]) * 1e-6)
        lines.append(
            f"| {system} | {kind} {layout} | {published:.0f} | {curve.busbw_gb_per_s(kind, n):.0f} | {source} |"
        )
    return lines


def custom_rows() -> list[str]:
    from perfpredict.llm import custom_allreduce as ca

    data = ca._data()
    device = {"hopper": "H100-SXM", "ampere": "A100-80GB"}
    lines = [
        "| GPUs | ranks | bytes | kernel | published us | modelled us | error |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    errors = []
    for family, groups in data["points"].items():
        for n, points in groups.items():
            for size, us in points:
                got = ca.seconds(size, int(n), device[family]) * 1e6
                errors.append(abs(got / us - 1))
                lines.append(
                    f"| {device[family]} | {n} | {size:,} | {ca.kernel(size, int(n))} | {us:.1f} | {got:.1f} | "
                    f"{got / us - 1:+.1%} |"
                )
    lines.append(f"\nCustom all-reduce fit: {np.mean(errors):.1%} mean error over {len(errors)} published points "
                 f"(fitted on the same points: 2 bus bandwidths and 5 latency terms per GPU family).")  # fmt: skip
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help="rebuild perfpredict/data/measured_collectives.json")
    p.add_argument("--out", type=Path, default=RESULT)
    args = p.parse_args()
    from perfpredict.external import vidur_network
    from perfpredict.parallel import collective_fit, measured_collectives

    t0 = time.perf_counter()
    frame = vidur_network.read()
    if args.write:
        source = "Vidur commit 7d475133 (2024-11-19), data/profiling/network"
        collective_fit.write_data(frame, measured_collectives.DATA_FILE, source)
        measured_collectives._data.cache_clear()
    curves = held_out_rows(frame)
    table, s = curve_table(curves)
    lines = [
        "# Collectives: the measured model against Vidur's NCCL timings",
        "",
        f"- {header(__file__, seconds=time.perf_counter() - t0, packages=('pandas', 'pyarrow'))}",
        "- Reference: Vidur's kernel times of `torch.distributed` NCCL collectives (fp16, eager, 11 calls back to "
        "back, kineto; rows' medians), `data/external/vidur/collectives.parquet`. An octave's reference is the median "
        "of its rows; a curve is rebuilt without each decade of sizes in turn and predicts it (held out); 'in "
        "sample' is the curve from every octave, which the runtime uses. 'Rows' scatter' is the median distance of "
        "one row from its octave's median: the measurement's own noise.",
        "",
        _verdict(s),
        "",
        "Why not: the measurement scatters more than the target. One row sits a median 9-19% from its octave's "
        "median ('rows' scatter'), and octave medians fall as the size grows in places (a larger message measured "
        "faster than a smaller one by 20-60%, e.g. DGX A100's 4-GPU all-reduce: 62 us at 190 KB, 28 us at 380 KB), "
        "which no curve that never falls can follow: the in-sample column is the best such curve, and even it is "
        "not within 10% everywhere. Leaving a whole decade out takes 3-4 octaves from the middle of a curve's bend "
        "between its latency and its bandwidth regimes.",
        "",
        *table,
        "",
        "## Large-message bus bandwidth against nccl-tests figures",
        "",
        *nccl_tests_rows(),
        "",
        "Vidur's largest message is 64 MiB (512 MiB for the A100 pairs), short of nccl-tests' 8 GB: the busbw here is "
        "the slope of the curve's last decade.",
        "",
        "## vLLM's custom all-reduce against its published timings",
        "",
        *custom_rows(),
        "",
    ]
    write_result("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
