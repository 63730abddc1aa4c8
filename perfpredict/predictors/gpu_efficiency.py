"""The GPU device-time model: per-op time = roofline bound / an efficiency learned from GPU op rows.

The bound is physics at the datasheet (``gpu_op_features``); the efficiency (how much of it an op of this kind
and shape reaches on this GPU) is learned by gradient-boosted trees on ``log(bound / measured device time)`` from
public op rows (NeuSight's fp32 ops on eight GPUs, Vidur's fp16 projections on three) and the project's own GPU op
rows. Nothing is predicted faster than its bound, but for an op whose bytes fit in L2 (``L2_SPEEDUP``).

Each op belongs to an **efficiency class**, and each class knows which GPUs its rows came from:
- ``simt32``: GEMM-like ops (matmul, convolution, attention) on the FP32 (or FP16 vector) units;
- ``tensor``: GEMM-like ops on tensor cores in half precision (fp16, bf16, fp8);
- ``tf32``: GEMM-like fp32 ops as TF32 on tensor cores (no public rows yet: read as ``tensor``, see FALLBACK);
- ``memory``: every other op (elementwise, norms, softmax, reductions, copies...), all dtypes.

The learned efficiency has two parts. A GPU's **level** in a class is the median log efficiency of its larger ops
there (bound over ``LEVEL_BOUND_S``): how much of the datasheet its FP32 units, tensor cores or memory sustain (the
70 W cards' FP32 GEMMs reach about 40% of it, the 250-700 W boards 65-90%). The **shape** part, the trees, learns
the rest (tile and wave quantisation, alignment, small ops) on every GPU's rows at once, as a residual from the
level. A GPU with rows in a class is read at its own level. A GPU without them (an unseen GPU, a dtype its rows lack)
takes a level from its nearest covered neighbours (:func:`nearest_levels`: board power first, then compute
capability), and a MIG slice its parent's; the report says so (:meth:`GpuEfficiencyModel.sources`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict.predictors import gpu_op_features as gf
from perfpredict.predictors.op_efficiency import OpShape
from perfpredict.predictors.tree_ensemble import TreeEnsemble

CLASSES = ("simt32", "tensor", "tf32", "memory")
#: the classes read at a per-GPU level (GEMM units); memory-bound ops are read by the trees alone
LEVELLED = frozenset({"simt32", "tensor", "tf32"})
#: a class with no rows of its own is read as this one (TF32 GEMMs run on the same tensor cores as fp16)
FALLBACK = {"tf32": "tensor"}
EFFICIENCY_FLOOR = 1e-3
#: an op whose bytes fit in L2 can stream faster than the HBM bound (about 3x on Ampere and Hopper)
L2_SPEEDUP = 3.0
LEVEL_BOUND_S = 20e-6  # a GPU's level in a class is read on ops at least this long at the bound
NEIGHBOURS = 2
MEMO_OPS = 200_000  # distinct (device, op, unit) efficiencies kept before the memo starts again
ARTIFACT = Path(__file__).resolve().parent / "artifacts" / "op-efficiency-gpu"
TREES = "trees.npz"
PARAMS = {
    "n_estimators": 700,
    "max_depth": 8,
    "learning_rate": 0.05,
    "subsample": 0.8,
    "colsample_bytree": 0.8,
    "min_child_weight": 5,
    "n_jobs": 2,
    "random_state": 0,
}
LABELS = {
    "simt32": "fp32 GEMMs (CUDA cores)",
    "tensor": "fp16/bf16 GEMMs (tensor cores)",
    "tf32": "TF32 GEMMs (tensor cores)",
    "memory": "memory-bound ops",
}


def efficiency_class(op: OpShape, unit: gf.Unit) -> str:
    if op.kind not in gf.GEMM_KINDS:
        return "memory"
    if unit.tensor_core:
        return "tf32" if unit.tf32 else "tensor"
    return "simt32"


def max_efficiency(op: OpShape, device: Any) -> float:
    """The largest bound / time an op may reach: 1, or L2_SPEEDUP for an op whose bytes fit in L2."""
    return L2_SPEEDUP if op.bytes <= float(device.l2_bytes or 0) else 1.0


@dataclass
class GpuEfficiencyModel:
    """Learned efficiency = exp(level of the GPU in the op's class + the trees' shape residual); fitted by
    ``perfpredict.learning.gpu_efficiency_fit``.

    ``levels[class][gpu]`` is the GPU's level (a log efficiency) in each class it has rows in; ``dtypes`` the dtypes
    of those rows. Both name what the model has seen, for the report."""

    trees: Any = None  # a TreeEnsemble: the fitted xgboost trees, read with numpy alone
    levels: dict[str, dict[str, float]] = field(default_factory=dict)
    dtypes: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=lambda: dict(PARAMS))
    _memo: dict[tuple, float] = field(default_factory=dict, repr=False, compare=False)  # (device, op, unit) -> eff

    def level(self, device: Any, cls: str) -> tuple[float, str]:
        """(the log-efficiency level of ``device`` in class ``cls``, where it came from: a GPU name, or the
        neighbours it was read from)."""
        if cls not in LEVELLED:
            return 0.0, device.name
        read = cls if self.levels.get(cls) else FALLBACK.get(cls, cls)
        known = self.levels.get(read, {})
        for name in (device.name, device.parent):
            if name and name in known:
                return known[name], name
        if not known:
            return 0.0, "none"
        names = nearest_levels(device, list(known))
        weights = [1.0 / (distance(device, n) + 0.1) for n in names]
        value = sum(w * known[n] for w, n in zip(weights, names)) / sum(weights)
        return value, "+".join(names)

    def efficiency(self, shapes: Sequence[OpShape], device: Any, units: Sequence[gf.Unit]) -> np.ndarray:
        """Learned efficiency per op on ``device`` (datasheet basis), clipped to [EFFICIENCY_FLOOR, max], and held
        in order with the GPUs of its architecture it matches or beats on every datasheet figure, or that match or
        beat it (:mod:`perfpredict.hardware.dominance`, :meth:`_held_in_order`). Each (device, op, unit) is
        evaluated once per model (a report asks again for every mode and MIG slice)."""
        from perfpredict.hardware.devices import catalog_generation

        if not shapes:
            return np.zeros(0)
        generation = catalog_generation()  # the GPUs it is held to are the catalog's: a device file can add one
        keys = [(generation, device, op, u) for op, u in zip(shapes, units)]
        if len(self._memo) > MEMO_OPS:  # before the lookup: cleared after it, the hits it found would be gone
            self._memo.clear()
        missing = list({k: None for k in keys if k not in self._memo})
        if missing:
            ops_, units_ = [k[2] for k in missing], [k[3] for k in missing]
            self._memo.update(zip(missing, self._held_in_order(ops_, device, units_)))
        return np.array([self._memo[k] for k in keys])

    def _held_in_order(self, shapes: Sequence[OpShape], device: Any, units: Sequence[gf.Unit]) -> np.ndarray:
        """The learned efficiency, with no op slower than on a GPU ``device`` is at least as fast as, nor faster
        than on one at least as fast as ``device``, each read as an efficiency on ``device``'s bound.

        Where the two disagree the GPU whose efficiency in the op's class comes from its own measured rows is
        believed, and the other moves: a GPU read from its neighbours (an A100 40GB PCIe's tensor cores, from the
        A40's and the A100 SXM's rows) can land a few percent faster than a better card measured (the A100 80GB
        SXM, Vidur's kernel traces), and lifting the better card to that guess would make every A100 answer as
        optimistic as the guess. Between two measured GPUs, or two read from neighbours, the better card is lifted
        to the other's time."""
        from perfpredict.hardware.dominance import dominating

        values = self._lifted(shapes, device, units)
        faster = dominating(device)
        if not faster:
            return values
        measured, bounds = self._measured(shapes, device, units), self._bounds(shapes, device, units)
        for other in faster:  # never faster than a measured GPU that beats this one, where this one was not
            held = self._lifted(shapes, other, units) * (bounds / np.maximum(self._bounds(shapes, other, units), 1e-30))
            values = np.where(self._measured(shapes, other, units) & ~measured, np.minimum(values, held), values)
        return values

    def _lifted(self, shapes: Sequence[OpShape], device: Any, units: Sequence[gf.Unit]) -> np.ndarray:
        """The learned efficiency, lifted to no op slower than on a GPU ``device`` is at least as fast as, unless
        only ``device`` was measured there (the first half of :meth:`_held_in_order`; the second holds a GPU to its
        betters as lifted: two measured cards on two protocols may have lifted the better one)."""
        from perfpredict.hardware.dominance import dominated

        values = self._raw(shapes, device, units)
        slower = dominated(device)
        if not slower:
            return values
        measured, bounds = self._measured(shapes, device, units), self._bounds(shapes, device, units)
        for other in slower:
            held = self._raw(shapes, other, units) * (bounds / np.maximum(self._bounds(shapes, other, units), 1e-30))
            values = np.where(measured & ~self._measured(shapes, other, units), values, np.maximum(values, held))
        return values

    @staticmethod
    def _bounds(shapes: Sequence[OpShape], device: Any, units: Sequence[gf.Unit]) -> np.ndarray:
        """Per op, ``device``'s bound in seconds: an efficiency on another GPU times this one's bound over that one's
        is the same time read as an efficiency here."""
        return np.array([gf.bound_s(op, device, u)[0] for op, u in zip(shapes, units)])

    def _measured(self, shapes: Sequence[OpShape], device: Any, units: Sequence[gf.Unit]) -> np.ndarray:
        return np.array([self.has_rows(device, efficiency_class(op, u)) for op, u in zip(shapes, units)])

    def has_rows(self, device: Any, cls: str) -> bool:
        """Whether ``device`` (or its parent) has measured rows of its own in efficiency class ``cls``."""
        read = cls if self.levels.get(cls) else FALLBACK.get(cls, cls)
        covered = self.levels.get(read, {}) if read in LEVELLED else self.dtypes.get(read, {})
        return any(n and n in covered for n in (device.name, getattr(device, "parent", None)))

    def _raw(self, shapes: Sequence[OpShape], device: Any, units: Sequence[gf.Unit]) -> np.ndarray:
        """The learned efficiency alone (no GPU it must not be slower than), memoised like :meth:`efficiency`."""
        keys = [("raw", device, op, u) for op, u in zip(shapes, units)]
        missing = list({k: None for k in keys if k not in self._memo})
        if missing:
            self._memo.update(zip(missing, self._evaluate([k[2] for k in missing], device, [k[3] for k in missing])))
        return np.array([self._memo[k] for k in keys])

    def _evaluate(self, shapes: Sequence[OpShape], device: Any, units: Sequence[gf.Unit]) -> np.ndarray:
        X = np.asarray([gf.features(op, device, u) for op, u in zip(shapes, units)], dtype=float)
        cache: dict[str, float] = {}
        offset = np.array([self._cached_level(device, efficiency_class(op, u), cache) for op, u in zip(shapes, units)])
        unique, where = np.unique(X, axis=0, return_inverse=True)  # a deep stack repeats its layers' ops
        pred = np.exp(offset + self.trees.predict(unique)[where.ravel()])
        caps = np.array([max_efficiency(op, device) for op in shapes])
        return np.clip(pred, EFFICIENCY_FLOOR, caps)

    def _cached_level(self, device: Any, cls: str, cache: dict[str, float]) -> float:
        if cls not in cache:
            cache[cls] = self.level(device, cls)[0]
        return cache[cls]

    def device_s(self, shapes: Sequence[OpShape], device: Any, units: Sequence[gf.Unit]) -> np.ndarray:
        """Predicted device seconds per op: bound / efficiency, at the datasheet basis."""
        basis = gf.datasheet_basis(device)
        bounds = np.array([gf.bound_s(op, basis, u)[0] for op, u in zip(shapes, units)])
        return bounds / self.efficiency(shapes, basis, units)

    def sources(self, device: Any, classes: set[str]) -> list[str]:
        """One line per class used: whose rows stand behind this device's efficiency in it."""
        out = []
        for cls in sorted(classes):
            if cls not in LEVELLED:
                out.append(self._unlevelled_source(device, cls))
                continue
            read = cls if self.levels.get(cls) else FALLBACK.get(cls, cls)
            _, origin = self.level(device, cls)
            label = LABELS.get(cls, cls)
            via = "" if read == cls else f"no {LABELS[cls]} rows on any GPU yet, read as {LABELS[read]}; "
            if origin in (device.name, device.parent):
                dtypes = "/".join(self.dtypes.get(read, {}).get(origin, [])) or "-"
                out.append(f"{label}: {via}learned from {origin}'s own {dtypes} op rows")
            else:
                out.append(f"{label}: {via}no {device.name} rows; level from {origin.replace('+', ' and ')}")
        return out

    def _unlevelled_source(self, device: Any, cls: str) -> str:
        """A class the trees read alone: the device's own rows, or its datasheet against other GPUs' rows."""
        covered = self.dtypes.get(cls, {})
        own = next((n for n in (device.name, device.parent) if n and n in covered), None)
        if own:
            return f"{LABELS[cls]}: learned from {own}'s own {'/'.join(covered[own])} op rows"
        return f"{LABELS[cls]}: no {device.name} rows; read from its datasheet by trees fitted on {len(covered)} GPUs' rows"

    def save(self, folder: Path, manifest: dict[str, Any]) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.trees.save(folder / TREES)
        full = {
            **manifest,
            "features": list(gf.FEATURE_NAMES),
            "levels": self.levels,
            "dtypes": self.dtypes,
            "params": self.params,
        }
        (folder / "manifest.json").write_text(json.dumps(full, indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, folder: Path = ARTIFACT) -> GpuEfficiencyModel | None:
        """The shipped model, or None (no artifact, or one made for other features). Reads with numpy alone."""
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
            trees = TreeEnsemble.load(folder / TREES)
        except (OSError, ValueError, KeyError):
            return None
        if manifest.get("features") != list(gf.FEATURE_NAMES):
            return None
        return cls(trees, manifest.get("levels", {}), manifest.get("dtypes", {}), manifest.get("params", dict(PARAMS)))


def distance(device: Any, name: str) -> float:
    """How unlike two GPUs are for the level of their efficiency: board power (log2 watts: the 70 W cards run far
    below boost) first, then compute capability (half a point per generation)."""
    from perfpredict.hardware.devices import get_device

    other = get_device(name)
    power = abs(math.log2(max(float(device.tdp_w), 1.0) / max(float(other.tdp_w), 1.0)))
    return power + abs(_cc(device) - _cc(other)) / 2


def nearest_levels(device: Any, names: Sequence[str], k: int = NEIGHBOURS) -> list[str]:
    """The ``k`` covered GPUs nearest ``device`` (:func:`distance`)."""
    return sorted(sorted(names), key=lambda n: distance(device, n))[:k]


def _cc(device: Any) -> float:
    try:
        return float(device.compute_capability or 0)
    except ValueError:
        return 0.0
