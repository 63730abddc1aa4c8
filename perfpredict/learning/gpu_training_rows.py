"""GPU op rows for the device-time model: the public sets (``data/external``) and our own GPU op rows, each
turned into (features, log efficiency) with its measured device time.

Labels are device time, the GPU's part of the two timelines:
- Vidur's rows (kineto CUDA time) and ours (CUDA-graph replay, ``collect --ops``) are device time as measured;
- NeuSight timed each call alone between a CUDA event pair (:mod:`perfpredict.external.neusight`), so a row holds the
  host's launch latency too: tiny ops read a floor of 25-50 us, and larger ones about 12-26 us above their kernel
  time. Per GPU (:func:`neusight_timing`), the floor is the median time of ops whose bound is under 2 us, and the
  overhead the intercept of a robust line through mid-sized elementwise rows (time against bytes / bandwidth); rows
  under 1.5x the floor say little about the kernel and are left out, and the others lose the overhead. A GPU
  without such rows (NeuSight's H100 has only GEMMs) takes the median of the others.
- The host part also depends on the op's kind: a call into cuDNN or cuBLAS does more on the host than an
  elementwise launch. A kind's floor (the median time of its ops under 5 us at the bound) stands above the
  elementwise floor by that extra host time: 2-12 us for a GEMM, 15-25 us for a norm, 50-100 us for a cuDNN
  convolution. Each kind's rows lose it too (:attr:`Timing.kind_extra_ms`; a GPU with too few small ops takes the
  other GPUs' median), else a small convolution's label keeps about 100 us of host time, which every GPU without
  rows of its own (HELP's five) reads as kernel time at batch 1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict.core import ops
from perfpredict.core.op_kinds.builtin import EMBEDDING_LOOKUPS, embedding_lookup_read_bytes
from perfpredict.predictors import gpu_efficiency as ge
from perfpredict.predictors import gpu_op_features as gf
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.op_efficiency import OpShape

#: how the public rows ran: half precision on tensor cores, float32 without TF32 (NeuSight turned cuDNN's off)
AS_MEASURED = RunConfig(tf32=False, conv_tf32=False)
FLOOR_BOUND_S = 2e-6  # ops this small show the timing floor, not their kernel
KEEP_BOUND_OVER_FLOOR = 0.5  # a row is kept where its bound is at least half its kind's per-call floor
MIN_MID_ROWS = 100
KIND_FLOOR_BOUND_S = 5e-6  # a kind's floor: the median time of its ops this small at the bound
MIN_KIND_ROWS = 10
DATA_DIR = Path(__file__).resolve().parents[2] / "data"


@dataclass(frozen=True)
class Timing:
    """A per-call timing's host part on one GPU's host: the floor of a tiny op and the overhead added to others."""

    floor_ms: float
    overhead_ms: float
    kind_extra_ms: dict[str, float] = field(default_factory=dict)  # a kind's host time beyond an elementwise call

    def host_ms(self, kind: str) -> tuple[float, float]:
        """(the floor, the overhead) of one call of ``kind``."""
        extra = self.kind_extra_ms.get(kind, 0.0)
        return self.floor_ms + extra, self.overhead_ms + extra


def load_frame(sources: tuple[str, ...] = ("neusight", "vidur"), own: bool = True) -> Any:
    """The external rows of ``sources`` and (``own``) the project's GPU op rows, as one DataFrame with the label
    ``device_s`` (NaN where a row is left out) and ``source`` naming where each came from."""
    import pandas as pd

    from perfpredict.external.op_rows import load_rows

    frame = load_rows(list(sources)) if sources else pd.DataFrame()
    if own:
        frame = pd.concat([frame, own_rows()], ignore_index=True)
    frame = frame[frame["status"] == "ok"].reset_index(drop=True)
    frame["bytes"] = frame["in_bytes"].astype(float) + frame["out_bytes"].astype(float)
    frame["device_s"] = frame["device_ms"].astype(float) * 1e-3
    neusight = frame["source"] == "neusight"
    if neusight.any():
        rows = frame[neusight]
        timing = neusight_timing(rows)
        frame.loc[neusight, "device_s"] = [
            _less_overhead(ms, bound_ms, *timing[d].host_ms(k))
            for ms, bound_ms, d, k in zip(rows["device_ms"], fp32_bound_s(rows) * 1e3, rows["device"], rows["kind"])
        ]
    return frame


def _less_overhead(ms: float, bound_ms: float, floor_ms: float, overhead_ms: float) -> float:
    """A NeuSight row's kernel seconds, or NaN for a row too small to tell its kernel from the host's part. The
    choice reads the op's bound, never its measured time: keeping the small ops that happened to time slowly would
    teach the trees that small ops are slow."""
    if bound_ms < KEEP_BOUND_OVER_FLOOR * floor_ms:
        return float("nan")
    return max(ms - overhead_ms, 0.5 * ms) * 1e-3


def fp32_bound_s(rows: Any) -> np.ndarray:
    """Each row's roofline bound on its GPU's datasheet at float32 without tensor cores (how NeuSight's rows ran)."""
    from perfpredict.hardware.devices import datasheet_device, get_device

    out = np.empty(len(rows))
    for name in rows["device"].unique():
        device = datasheet_device(get_device(name))
        mine = (rows["device"] == name).to_numpy()
        memory_s = rows["bytes"].to_numpy(float)[mine] / device.memory_bandwidth_bytes_per_s
        compute_s = rows["flops"].to_numpy(float)[mine] / device.peak_flops("float32", False)[0]
        out[mine] = np.maximum(memory_s, compute_s)
    return out


def neusight_timing(frame: Any) -> dict[str, Timing]:
    """Per GPU of NeuSight's rows: the per-call timing floor and overhead (milliseconds), see the module doc."""
    from scipy.stats import siegelslopes

    from perfpredict.hardware.devices import get_device

    floors, overheads, kind_floors = {}, {}, {}
    for name, rows in frame.groupby("device"):
        device = get_device(name)
        bound_s = fp32_bound_s(rows)
        tiny = rows["device_ms"][bound_s < FLOOR_BOUND_S]
        launches = tiny[rows["kind"][bound_s < FLOOR_BOUND_S] == "elementwise"]  # the plainest call: a launch
        tiny = launches if len(launches) >= 20 else tiny
        floors[name] = float(tiny.median()) if len(tiny) >= 20 else float(rows["device_ms"].min())
        small = rows[bound_s < KIND_FLOOR_BOUND_S]
        kind_floors[name] = {
            str(k): float(ms.median()) for k, ms in small.groupby("kind")["device_ms"] if len(ms) >= MIN_KIND_ROWS
        }
        mid = rows[(rows["kind"] == "elementwise") & rows["device_ms"].between(2 * floors[name], 30 * floors[name])]
        if len(mid) >= MIN_MID_ROWS:
            fit = siegelslopes(mid["device_ms"], (mid["bytes"] / device.memory_bandwidth_bytes_per_s) * 1e3)
            overheads[name] = float(np.clip(fit.intercept, 0.0, floors[name]))
    typical = float(np.median(list(overheads.values()))) if overheads else 0.0
    extras = _kind_extras(kind_floors, set(frame["kind"]))
    return {
        name: Timing(floors[name], overheads.get(name, min(typical, floors[name])), extras[name]) for name in floors
    }


def _kind_extras(kind_floors: dict[str, dict[str, float]], kinds: set[str]) -> dict[str, dict[str, float]]:
    """Per GPU and kind: the kind's floor over the elementwise one, where the GPU has enough small ops of both;
    elsewhere the median of the GPUs where it has (the same software stack timed every GPU)."""
    measured: dict[str, dict[str, float]] = {}
    for name, floors in kind_floors.items():
        if "elementwise" in floors:
            measured[name] = {k: max(f - floors["elementwise"], 0.0) for k, f in floors.items() if k != "elementwise"}
    out = {}
    for name in kind_floors:
        mine = measured.get(name, {})
        out[name] = {}
        for kind in sorted(kinds - {"elementwise"}):
            others = [m[kind] for m in measured.values() if kind in m]
            extra = mine.get(kind, float(np.median(others)) if others else 0.0)
            if extra > 0:
                out[name][kind] = extra
    return out


def own_rows() -> Any:
    """The project's GPU op rows (``data/<gpu>/ops/rows.*`` of ``perfpredict collect --ops --device cuda``), in the
    external rows' columns, or an empty frame."""
    import pandas as pd

    from perfpredict.hardware.devices import get_device
    from perfpredict.learning.op_row_shapes import row_shape
    from perfpredict.profiling.dataset import load_dataset

    found = []
    for folder in sorted(DATA_DIR.glob("*/ops")) + sorted(DATA_DIR.glob("v3/*/ops")):
        rows = [r for r in load_dataset(folder, join_features=False).rows if r.get("status") == "ok"]
        gpu_rows = [r for r in rows if r.get("device_type") in ("cuda", "gpu") and r.get("device_ms")]
        for r in gpu_rows:
            shape = row_shape(r)
            found.append(
                {
                    "source": "perfpredict",
                    "source_file": str(folder.relative_to(DATA_DIR.parent)),
                    "source_split": "-",
                    "source_op": r.get("op"),
                    "device": get_device(r.get("env_device_name") or r["device"]).name,
                    "device_method": r.get("device_method"),
                    "kind": shape.kind,
                    "dtype": shape.dtype,
                    "flops": shape.flops,
                    "in_bytes": _in_bytes(r, shape),
                    "out_bytes": r.get("out_bytes") or 0,
                    "out_shape": json.dumps(list(shape.out_shape)),
                    "in_shapes": json.dumps([list(s) for s in shape.in_shapes]),
                    "device_ms": r["device_ms"],
                    "status": "ok",
                    "key": r.get("key"),
                }
            )
    return pd.DataFrame(found)


def _in_bytes(row: dict, shape: Any) -> int:
    """Bytes read, by the embedding kind's byte rule (``op_kinds.builtin``): the collector records an embedding's
    whole table as read, but a lookup reads only the rows it gathers (the output's size) and its int64 indices."""
    lookup = str(row.get("op") or "").split("::")[-1].split(".")[0]  # aten::embedding.default -> embedding
    if shape.kind != ops.EMBEDDING or lookup not in EMBEDDING_LOOKUPS:
        return int(row.get("in_bytes") or 0)  # a backward (embedding_dense_backward) writes the whole table
    indices = int(np.prod(shape.in_shapes[1])) if len(shape.in_shapes) > 1 else 0
    return embedding_lookup_read_bytes(int(row.get("out_bytes") or 0), 8 * indices)


def shapes_of(frame: Any) -> list[OpShape]:
    """Each row's OpShape (a convolution's groups from its key, where it has one)."""
    out = []
    for kind, dtype, flops, nbytes, out_shape, in_shapes, key in zip(
        frame["kind"],
        frame["dtype"],
        frame["flops"],
        frame["bytes"],
        frame["out_shape"],
        frame["in_shapes"],
        frame["key"],
    ):
        ins = tuple(tuple(s) for s in json.loads(in_shapes))[:2]
        out.append(OpShape(kind, dtype, float(flops), float(nbytes), tuple(json.loads(out_shape)), ins, _groups(key)))
    return out


def _groups(key: Any) -> int:
    if not isinstance(key, str) or "convolution" not in key:
        return 1
    args = json.loads(key).get("args", [])
    return int(args[8]) if len(args) > 8 and isinstance(args[8], int) else 1


@dataclass(frozen=True)
class Arrays:
    """The labelled rows as the model trains on them, row-aligned."""

    X: np.ndarray
    log_eff: np.ndarray
    device_s: np.ndarray
    bound_s: np.ndarray
    shapes: list[OpShape]
    units: list[gf.Unit]
    classes: list[str]
    devices: list[str]


def arrays(frame: Any) -> Arrays:
    """The labelled rows of ``frame``, featurised on each GPU's datasheet basis; units as the rows ran (no TF32:
    NeuSight turned it off; half precision on tensor cores)."""
    from perfpredict.hardware.devices import get_device

    frame = frame[frame["device_s"].notna()]
    shapes = shapes_of(frame)
    X, y, bounds, units = [], [], [], []
    devices = {name: gf.datasheet_basis(get_device(name)) for name in frame["device"].unique()}
    for op, name, seconds in zip(shapes, frame["device"], frame["device_s"]):
        device = devices[name]
        unit = gf.unit_of(op, device, AS_MEASURED)
        bound = gf.bound_s(op, device, unit)[0]
        X.append(gf.features(op, device, unit))
        y.append(np.log(np.clip(bound / seconds, ge.EFFICIENCY_FLOOR, ge.max_efficiency(op, device))))
        bounds.append(bound)
        units.append(unit)
    classes = [ge.efficiency_class(op, u) for op, u in zip(shapes, units)]
    return Arrays(
        np.asarray(X),
        np.asarray(y),
        frame["device_s"].to_numpy(float),
        np.asarray(bounds),
        shapes,
        units,
        classes,
        list(frame["device"]),
    )


def dtypes_seen(a: Arrays) -> dict[str, dict[str, list[str]]]:
    """Per efficiency class: the GPUs with rows in it and their dtypes."""
    out: dict[str, dict[str, set[str]]] = {}
    for op, cls, name in zip(a.shapes, a.classes, a.devices):
        out.setdefault(cls, {}).setdefault(name, set()).add(op.dtype)
    return {cls: {d: sorted(v) for d, v in sorted(devs.items())} for cls, devs in sorted(out.items())}


def weights(frame: Any) -> np.ndarray:
    """Row weights that give every (GPU, kind) group the same total weight up to a square root of its size, so
    100,000 elementwise rows do not drown 3,000 GEMM rows of another GPU."""
    labelled = frame[frame["device_s"].notna()]
    size = labelled.groupby(["device", "kind"])["kind"].transform("size").to_numpy(float)
    w = 1.0 / np.sqrt(size)
    return w / w.mean()


def leave_one_out(keys: Any) -> Any:
    """``(held key, train rows, test rows)`` for each distinct key (a GPU, a model): every row of the held key is
    out of training, and only its rows are tested."""
    keys = np.asarray(keys)
    rows = np.arange(len(keys))
    for held in sorted(np.unique(keys)):
        yield str(held), rows[keys != held], rows[keys == held]
