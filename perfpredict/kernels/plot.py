"""The roofline plot: a device's ceilings, with a model's ops placed by arithmetic intensity.

x: arithmetic intensity (FLOP per byte moved, from the OpGraph's ``flops`` and ``bytes_read + bytes_written``);
y: FLOP/s. Compute ceilings are horizontal lines (FP32, FP16, BF16/FP16/TF32/FP8 tensor cores, ...), bandwidth
ceilings are diagonals (the device memory named by its type, HBM3 or GDDR6, or DRAM, and L2 / L1 / L3 when a
DeviceCeilings file has them).

With a report, every op is placed at its **predicted achieved rate**, ``flops / predicted time`` (the per-op device
time of the report's rows, the time its tables show), so the distance below the roof is the inefficiency the
prediction holds: a GEMM predicted at twice its roofline time sits at half the roof (``report_points``). Each op
kind is one marker at its FLOPs over its time (the report's op-kind row), its area the kind's share of the latency.
A report keeps its top ``top_ops`` rows: the doors that draw the plot (``predict --html``, the web page) keep every
op, and a plot of a trimmed report says in its legend how many ops it shows. Without a report (``perfpredict
roofline``'s plot of a graph), ops sit at their attainable bound ``min(peak for its dtype, AI x bandwidth)`` and the
legend says so (``roofline_points``, ``kind_points``). Measured per-op times (profiler data), when given, add a
marker at ``flops / time``. A GPU's roofs are its datasheet peaks, the basis every GPU's device time is read at, so
two GPUs' plots compare; where a roofline run measured a ceiling its label says what was measured ("datasheet;
measured 823 TF, 83%"). Every label sits in the legend, outside the axes, so none overlaps another or a marker.

Renders with matplotlib's object API (no pyplot global state; the Agg/SVG backends only), imported lazily.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError, MissingDependencyError

COMPUTE_CEILINGS = (
    ("fp8_tensor", "FP8 tensor"),
    ("bf16_tensor", "BF16 tensor"),
    ("fp16_tensor", "FP16 tensor"),
    ("tf32_tensor", "TF32 tensor"),
    ("fp16", "FP16 vector"),
    ("bf16", "BF16 vector"),
    ("fp32", "FP32"),
    ("fp64", "FP64"),
)
BANDWIDTH_EXTRAS = (
    ("l1_bandwidth_bytes_per_s", "L1"),
    ("shared_bandwidth_bytes_per_s", "shared"),
    ("l2_bandwidth_bytes_per_s", "L2"),
    ("l3_bandwidth_bytes_per_s", "L3"),
)
_MARKERS = {"compute": "o", "memory": "s", "overhead": "^"}


def roofline_points(graph: Any, device: Any, *, tf32: bool = False, conv_tf32: bool = True) -> list[dict[str, Any]]:
    """One row per op with FLOPs and bytes: intensity, attainable FLOP/s, the ceiling that binds it. The op's
    unit is the report's (``op_kinds.attainable_rate``, with RunConfig's TF32 switches and their defaults)."""
    from perfpredict.core import op_kinds

    rows = []
    device = _basis(device)
    bw = device.memory_bandwidth_bytes_per_s
    for node in graph.nodes:
        moved = node.bytes_read + node.bytes_written
        if node.is_view or node.flops <= 0 or moved <= 0:
            continue
        dtype = node.outputs[0].dtype if node.outputs else graph.dtype
        peak, key = op_kinds.attainable_rate(node.op, dtype, device, tf32=tf32, conv_tf32=conv_tf32)
        ai = node.flops / moved
        attainable = min(peak, ai * bw)
        rows.append(
            {
                "name": node.name,
                "op": node.op,
                "dtype": dtype,
                "flops": node.flops,
                "bytes": moved,
                "intensity_flop_per_byte": ai,
                "attainable_flops_per_s": attainable,
                "peak_key": key,
                "bound": "compute" if peak <= ai * bw else "memory",
            }
        )
    return rows


def kind_points(points: list[dict[str, Any]], device: Any) -> list[dict[str, Any]]:
    """The ops aggregated per op kind, without a prediction: total FLOPs over total bytes (intensity), total FLOPs
    over the kind's roofline time (its attainable FLOP/s), and the kind's share of the summed roofline time (what a
    marker's size shows). With a report, :func:`report_kinds` gives the predicted ones."""
    bw = _basis(device).memory_bandwidth_bytes_per_s
    kinds: dict[str, dict[str, float]] = {}
    for p in points:
        k = kinds.setdefault(p["op"], {"flops": 0.0, "bytes": 0.0, "time_s": 0.0, "ops": 0})
        peak = p["attainable_flops_per_s"] if p["bound"] == "compute" else float("inf")
        k["flops"] += p["flops"]
        k["bytes"] += p["bytes"]
        k["time_s"] += max(p["flops"] / peak, p["bytes"] / bw)
        k["ops"] += 1
    total = sum(k["time_s"] for k in kinds.values()) or 1.0
    return sorted(
        (
            {
                "op": op,
                "ops": int(k["ops"]),
                "intensity_flop_per_byte": k["flops"] / k["bytes"],
                "achieved_flops_per_s": k["flops"] / k["time_s"],
                "time_share": k["time_s"] / total,
            }
            for op, k in kinds.items()
            if k["time_s"] > 0
        ),
        key=lambda k: -k["time_share"],
    )


def _ceilings_from(device: Any, extra: Mapping[str, Any] | None) -> tuple[list, list]:
    """The roofs: a GPU's datasheet peaks (the basis every GPU is read at, so two GPUs' plots compare), each label
    naming what a roofline run measured of it where one did; a CPU's own ceilings, measured or estimated."""
    measured, basis = device.measured, _basis(device)
    compute = []
    seen = set()
    for key, label in COMPUTE_CEILINGS:
        value = basis.peak_flops_per_s.get(key)
        if not value or round(value, -9) in seen:
            continue
        seen.add(round(value, -9))
        got = device.peak_flops_per_s.get(key) if f"peak_flops_per_s.{key}" in measured else None
        compute.append((label, float(value), _tag(basis, value, got, 1e12, "TF")))
    mem_label = device.memory_label
    got = device.memory_bandwidth_bytes_per_s if "memory_bandwidth_bytes_per_s" in measured else None
    value = float(basis.memory_bandwidth_bytes_per_s)
    bandwidth = [(mem_label, value, _tag(basis, value, got, 1e9, "GB/s"))]
    for key, label in BANDWIDTH_EXTRAS:
        entry = (extra or {}).get(key)
        if isinstance(entry, Mapping) and entry.get("max"):
            bandwidth.append((label, float(entry["max"]), "measured"))
    return compute, bandwidth


def _basis(device: Any) -> Any:
    if device.kind != "gpu":
        return device
    from perfpredict.hardware.devices import datasheet_device

    return datasheet_device(device)


def _tag(basis: Any, value: float, got: float | None, unit: float, name: str) -> str:
    if basis.kind != "gpu":
        return "measured" if got is not None else "datasheet"
    if got is None:
        return "datasheet"
    return f"datasheet; measured {got / unit:,.0f} {name}, {got / value:.0%}"


def report_points(report: Any) -> list[dict[str, Any]]:
    """One row per op of ``report.per_op`` with FLOPs, bytes and time: its intensity and its predicted achieved
    rate, ``flops / time`` (the report's own per-op time: nothing is recomputed here)."""
    return [
        {
            "name": o.name,
            "op": o.op,
            "flops": o.flops,
            "bytes": o.bytes_moved,
            "intensity_flop_per_byte": o.flops / o.bytes_moved,
            "achieved_flops_per_s": o.flops / (o.time_ms * 1e-3),
            "bound": o.bound if o.bound in _MARKERS else "memory",
        }
        for o in report.per_op
        if o.flops > 0 and o.bytes_moved > 0 and o.time_ms > 0
    ]


def report_kinds(report: Any) -> list[dict[str, Any]]:
    """One marker per op kind of the report: its FLOPs over its bytes and over its predicted time (summed over every
    op of the kind, trimmed rows or not), sized by its share of the latency."""
    return [
        {
            "op": k.name,
            "ops": k.ops,
            "intensity_flop_per_byte": k.flops / k.bytes_moved,
            "achieved_flops_per_s": k.flops / (k.time_ms * 1e-3),
            "time_share": k.share,
        }
        for k in report.by_kind
        if k.flops > 0 and k.bytes_moved > 0 and k.time_ms > 0
    ]


def _figure(
    graph: Any,
    device: Any,
    ceilings: Mapping[str, Any] | None,
    measured: Mapping[str, float] | None,
    title: str | None,
    tf32: bool,
    report: Any = None,
    conv_tf32: bool = True,
):
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise MissingDependencyError(
            "the roofline plot needs matplotlib, a perfpredict dependency: pip install matplotlib"
        ) from err
    extra = ceilings.get("ceilings", ceilings) if isinstance(ceilings, Mapping) else None
    compute, bandwidth = _ceilings_from(device, extra)
    graph_points = roofline_points(graph, device, tf32=tf32, conv_tf32=conv_tf32) if graph is not None else []
    if report is not None and report.by_kind:
        points = [{**p, "rate": p["achieved_flops_per_s"]} for p in report_points(report)]
        kinds = report_kinds(report)
        listed, every = len(report.per_op), sum(k.ops for k in report.by_kind)
        where = "at their predicted rate (FLOPs / predicted time)" + (
            f"; the report's top {listed} of {every} ops" if listed < every else ""
        )
        of, rest = "of the latency", report_rest(report)
    else:
        points = [{**p, "rate": p["attainable_flops_per_s"]} for p in graph_points]
        kinds = kind_points(graph_points, device)
        where, of, rest = "at their roofline bound (no prediction)", "of the roofline time", None
    peak = max(v for _, v, _ in compute)
    xs = [p["intensity_flop_per_byte"] for p in points + kinds] or [1.0]
    x_lo = min(0.01, min(xs) / 2)
    x_hi = max(1e4, max(xs) * 2, 4 * peak / min(b for _, b, _ in bandwidth))
    fig = Figure(figsize=(11, 6), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    import numpy as np

    grid = np.logspace(np.log10(x_lo), np.log10(x_hi), 256)
    colors = ["#1f77b4", "#2ca02c", "#9467bd", "#8c564b", "#17becf"]
    for i, (label, bw, tag) in enumerate(bandwidth):
        ax.plot(
            grid,
            np.minimum(grid * bw, peak),
            color=colors[i % len(colors)],
            lw=1.6,
            ls="-" if tag.startswith("measured") else "--",
            label=f"{label} {bw / 1e9:,.0f} GB/s ({tag})",
        )
    for label, value, tag in compute:
        ax.axhline(
            value,
            color="#d62728" if "tensor" in label else "#ff7f0e",
            lw=1.0,
            ls="-" if tag.startswith("measured") else "--",
            alpha=0.8,
            label=f"{label} {value / 1e12:,.1f} TF ({tag})",
        )
    for bound, marker in _MARKERS.items():
        sel = [p for p in points if p["bound"] == bound]
        if sel:
            ax.scatter(
                [p["intensity_flop_per_byte"] for p in sel],
                [p["rate"] for p in sel],
                s=8,
                marker=marker,
                alpha=0.25,
                color="0.4",
                label=f"single ops, {bound}-bound, {where}",
            )
    # one marker per op kind, its area the kind's share of the time: where the time goes, at a glance; named in
    # the legend (labels beside the markers overlap wherever two kinds sit close)
    for k in kinds:
        ax.scatter(
            [k["intensity_flop_per_byte"]],
            [k["achieved_flops_per_s"]],
            s=30 + 900 * k["time_share"],
            alpha=0.7,
            edgecolors="k",
            linewidths=0.6,
            label=f"{k['op']}: {k['time_share']:.1%} {of}",
        )
    if rest is not None and rest[1] > 0:  # the latency's part outside the ops: a legend line, no marker
        ax.plot([], [], " ", label=f"{rest[0]}: {rest[1]:.1%} of the latency")
    if measured:
        mx = [
            (p["intensity_flop_per_byte"], p["flops"] / measured[p["name"]])
            for p in graph_points
            if measured.get(p["name"], 0) > 0
        ]
        if mx:
            ax.scatter(*zip(*mx), marker="x", color="k", s=20, label="ops (measured)")
    ax.set_xlim(x_lo, x_hi)
    rates = [p["rate"] for p in points] + [k["achieved_flops_per_s"] for k in kinds]
    lowest = min(rates + [x_lo * min(b for _, b, _ in bandwidth)])
    ax.set_ylim(max(lowest / 2, peak * 1e-7), peak * 3)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("FLOP/s")
    name = getattr(graph, "name", "") or ""
    ax.set_title(
        title or f"Roofline: {device.name}" + (f", {name}" if name else "") + f" ({device.source})", fontsize=10
    )
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, markerscale=0.5)
    fig.tight_layout()
    return fig


def plot_roofline(
    graph: Any,
    device: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    ceilings: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    measured: Mapping[str, float] | None = None,
    title: str | None = None,
    tf32: bool = False,
    conv_tf32: bool = True,
    report: Any = None,
) -> list[Path]:
    """Draw the roofline of ``device`` with ``graph``'s ops (``graph`` may be None) and save it.

    ``path`` ending in .png or .svg writes that file; without a suffix both ``path.png`` and ``path.svg``.
    ``ceilings`` (a DeviceCeilings dict or file) adds L1/L2/L3 diagonals; ``measured`` maps op names to seconds.
    ``report`` (a PerfReport of ``graph`` on ``device``): each op at its predicted rate, the op kinds' shares its
    own (``by_kind``).
    ``tf32`` and ``conv_tf32`` are the run's TF32 switches (RunConfig's, with its defaults), so each op sits on the
    ceiling the report used.
    Returns the written paths.
    """
    from perfpredict.hardware.devices import get_device

    device = get_device(device)
    if isinstance(ceilings, (str, os.PathLike)):
        from perfpredict.kernels.ceilings import read_ceilings

        ceilings = read_ceilings(ceilings)
    fig = _figure(graph, device, ceilings, measured, title, tf32, report, conv_tf32)
    path = Path(path or "roofline")
    targets = (
        [path] if path.suffix.lower() in (".png", ".svg") else [path.with_suffix(".png"), path.with_suffix(".svg")]
    )
    if path.suffix and path.suffix.lower() not in (".png", ".svg"):
        raise InvalidInputError(f"roofline plot path must end in .png or .svg (or have no suffix), got {str(path)!r}")
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(target, format=target.suffix[1:].lower())
    return targets


def roofline_svg(
    graph: Any,
    device: Any,
    *,
    ceilings: Mapping[str, Any] | None = None,
    measured: Mapping[str, float] | None = None,
    tf32: bool = False,
    conv_tf32: bool = True,
    report: Any = None,
) -> str:
    """The roofline as inline SVG text (no XML prolog), for embedding in the HTML report. With ``report``, each op
    sits at its predicted rate and the op kinds' shares are the report's (the numbers of its op-kind table)."""
    from perfpredict.hardware.devices import get_device

    fig = _figure(graph, get_device(device), ceilings, measured, None, tf32, report, conv_tf32)
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


def report_rest(report: Any) -> tuple[str, float] | None:
    """(what the latency holds beyond the ops, its share of the latency) from a report, or None."""
    label = getattr(report, "outside_ops_label", "") if report is not None else ""
    if not label or not report.latency_ms.value:
        return None
    return label, report.outside_ops_ms / report.latency_ms.value
