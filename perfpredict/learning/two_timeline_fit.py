"""The two-timeline model as a learner, for held-out evaluation beside the whole-model predictors.

The two-timeline model has two free parameters per kind of device: the host profile's dispatch scale (how much more
a real model's step costs the host per op than the bare ATen calls ``calibrate-host`` times; ``host_model``) and a
device-time scale (how far the device's per-op times sit from the ceilings' figure, the same for every device of the
kind, so GPUs keep the ranking their ceilings give; on a GPU whose device time is learned from GPU op rows, there is
no device-time scale: it stays 1). ``fit`` picks both on the training rows alone (the median
absolute log error over a grid), so a held-out fold's figure is honest; everything else (device ceilings, the per-op
efficiency model, the host profile) comes from elsewhere. Memory is the analytical model's; energy is the busy power
times the wall time.

Every row's wall time at every pair of the grid is simulated once per dataset and kept (the simulation does not
depend on the fold), so cross-validation costs one simulation, not one per fold.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, ClassVar

import numpy as np

from perfpredict.learning.learner import Params, not_fitted

#: dispatch scales tried (the reference profile's fitted values, 6.35 on a CPU and 11.31 on a GPU, are inside)
SCALE_GRID = np.geomspace(0.5, 64, 43)
#: device-time scales tried (1: the ceilings' figure as it is)
DEVICE_GRID = np.geomspace(0.5, 4.0, 19)


class TwoTimelineLearner(Params):
    """``fit`` chooses the dispatch scale on the training rows; ``predict`` simulates the held-out rows with it."""

    name: ClassVar[str] = "two_timeline"
    _cache: ClassVar[dict[tuple[int, int, str], dict[str, np.ndarray]]] = {}

    def __init__(
        self, grid: np.ndarray = SCALE_GRID, learned: bool = True, device_grid: np.ndarray = DEVICE_GRID
    ) -> None:
        self.grid = np.asarray(grid, dtype=float)
        self.device_grid = np.asarray(device_grid, dtype=float)
        self.learned = learned
        self.scale_index = int(np.argmin(np.abs(np.log(self.grid / 8.0))))
        self.device_index = int(np.argmin(np.abs(np.log(self.device_grid))))
        self.training_index: int | None = None  # a CPU's training steps' own dispatch scale (fit)
        self.fitted_ = False

    def fit(self, train: Any, targets: Any = (), seed: int = 0) -> TwoTimelineLearner:
        """Choose the scales on ``train``'s rows (no row with a measured latency: the default scales stay)."""
        self.fitted_ = True
        sim = self.simulate(train)
        y = train.y["latency_ms"] * 1e-3
        err = np.abs(np.log(sim["wall_s"] / y))
        ok = np.isfinite(err).all(axis=(0, 1))
        if not ok.any():
            return self
        training = _training_rows(train)
        if _device_kind(train) == "cpu" and (training & ok).any() and (~training & ok).any():
            self._fit_by_phase(err, ok, training)
            return self
        score = np.median(err[:, :, ok], axis=2)
        if self.device_time_learned(train):  # a GPU's learned device time has no free scale: 1 it is
            score[:, np.abs(np.log(self.device_grid)) > 1e-9] = np.inf
        self.scale_index, self.device_index = (int(i) for i in np.unravel_index(np.argmin(score), score.shape))
        return self

    def _fit_by_phase(self, err: np.ndarray, ok: np.ndarray, training: np.ndarray) -> None:
        """A CPU's training steps get their own dispatch scale (``host_model.dispatch_scale``): for each device
        scale, the best host scale of each phase, and the device scale whose pair errs least over all rows."""
        best = None
        for d in range(err.shape[1]):
            inf = int(np.argmin(np.median(err[:, d][:, ok & ~training], axis=1)))
            tr = int(np.argmin(np.median(err[:, d][:, ok & training], axis=1)))
            total = float(np.median(np.where(training, err[tr, d], err[inf, d])[ok]))
            if best is None or total < best[0]:
                best = (total, inf, tr, d)
        _, self.scale_index, self.training_index, self.device_index = best

    @property
    def training_scale(self) -> float:
        """The dispatch scale of training steps (the inference one where it was not fitted apart)."""
        return float(self.grid[self.scale_index if self.training_index is None else self.training_index])

    def device_time_learned(self, data: Any) -> bool:
        """Whether the rows' device has its device time learned from GPU op rows (then only the host is fitted)."""
        from perfpredict.hardware.devices import get_device
        from perfpredict.predictors.two_timeline import TwoTimelinePredictor

        device = get_device(data.devices[0])
        return device.kind == "gpu" and TwoTimelinePredictor(learned=self.learned).efficiency_model(device) is not None

    @property
    def scale(self) -> float:
        return float(self.grid[self.scale_index])

    @property
    def device_scale(self) -> float:
        return float(self.device_grid[self.device_index])

    def predict(self, data: Any) -> dict[str, Any]:
        from perfpredict.hardware.devices import get_device
        from perfpredict.predictors.learned import TargetPrediction
        from perfpredict.predictors.timeline import Timeline
        from perfpredict.predictors.two_timeline import busy_power_w

        if not self.fitted_:
            raise not_fitted(self)
        sim = self.simulate(data)
        wall = sim["wall_s"][self.scale_index, self.device_index]
        if self.training_index is not None:
            wall = np.where(_training_rows(data), sim["wall_s"][self.training_index, self.device_index], wall)
        device = get_device(data.devices[0])
        busy = sim["device_s"] * self.device_scale
        power = busy_power_w(sim["power_w"], Timeline(busy, np.zeros_like(wall), wall), device)
        batch = np.array([max(1, int(r.get("batch_size") or 1)) for r in data.rows], dtype=float)
        values = {
            "latency_ms": wall * 1e3,
            "peak_memory_bytes": data.analytical("peak_memory_bytes"),
            "avg_power_w": power,
            "energy_per_sample_j": power * wall / batch,
        }
        return {t: TargetPrediction(v, v, v, np.zeros(len(v))) for t, v in values.items()}

    def simulate(self, data: Any) -> dict[str, np.ndarray]:
        """Per row: ``wall_s`` [host scale, device scale, row], the unscaled ``device_s`` and the roofline's
        ``power_w`` [row]."""
        from perfpredict.hardware.devices import get_device
        from perfpredict.predictors.analytical import AnalyticalPredictor
        from perfpredict.predictors.base import RunConfig
        from perfpredict.predictors.two_timeline import TwoTimelinePredictor
        from perfpredict.profiling import zoo

        device = get_device(data.devices[0])
        predictor = TwoTimelinePredictor(learned=self.learned)
        out = {
            "wall_s": np.full((len(self.grid), len(self.device_grid), len(data.rows)), np.nan),
            "device_s": np.full(len(data.rows), np.nan),
            "power_w": np.full(len(data.rows), np.nan),
        }
        groups: dict[tuple[int, str], list[int]] = defaultdict(list)
        for i, (arrays, row) in enumerate(zip(data.arrays, data.rows)):
            groups[(id(arrays), zoo.ModelSpec.from_key(row["key"]).phase)].append(i)
        for (arrays_id, phase), idx in groups.items():
            arrays = data.arrays[idx[0]]
            batches = np.array([max(1, int(data.rows[i].get("batch_size") or 1)) for i in idx])
            key = (
                arrays_id,
                hash((tuple(batches), device.name, self.learned, tuple(self.grid), tuple(self.device_grid))),
                phase,
            )
            if key not in self._cache or self._cache[key]["arrays"] is not arrays:
                config = RunConfig(phase=phase)
                ev = AnalyticalPredictor().evaluate(arrays, device, config, batches)
                wall_s, device_s = predictor.eager_walls(
                    arrays, device, config, batches, self.grid, ev, self.device_grid
                )
                # the arrays are kept, so their id cannot be reused by another object while the entry lives
                self._cache[key] = {"arrays": arrays, "wall_s": wall_s, "device_s": device_s, "power_w": ev.power_w}
            got = self._cache[key]
            out["wall_s"][:, :, idx], out["device_s"][idx], out["power_w"][idx] = (
                got["wall_s"],
                got["device_s"],
                got["power_w"],
            )
        return out


def _training_rows(data: Any) -> np.ndarray:
    return np.array([r.get("phase") == "training" for r in data.rows], dtype=bool)


def _device_kind(data: Any) -> str:
    from perfpredict.hardware.devices import get_device

    return get_device(data.devices[0]).kind
