"""``predict_models``: many candidate models, each on several devices and batch sizes, as numpy columns.

A search loop scores thousands of candidates. Each one is captured on meta stand-ins (never run; see
``compiler_hooks/capture.py``), in milliseconds; blocks a candidate shares with one seen before (the same module
structure on the same input shapes) are replayed from the first capture instead of traced again
(``compiler_hooks/block_reuse.py``). Its costs are made affine in the batch from two captures, so every
(device, batch) pair is one vectorised evaluation of the same predictor ``perfpredict.predict`` uses.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfpredict.api import fill_columns, many_columns, vector_predictor
from perfpredict.compiler_hooks.block_reuse import BlockCache
from perfpredict.core.errors import InvalidInputError, PerfPredictError
from perfpredict.nas.candidates import Candidates
from perfpredict.predictors.base import MEASURED_BUILD_DTYPE
from perfpredict.request import DEFAULT_DEVICE

#: columns predict_models adds to predict_many's: the candidate's position, its FLOPs at the row's batch, and the
#: parameters and buffers its forward reads (as a report counts them)
EXTRA_COLUMNS = {"model": np.int64, "flops": float, "params": np.int64}


@dataclass
class ModelsRun:
    """What one ``predict_models`` call shares across its candidates."""

    devices: list[Any]
    candidates: Candidates
    adapted: dict[str, Any] = field(default_factory=dict)  # device name -> AdaptedLatency
    errors: dict[int, str] = field(default_factory=dict)


def predict_models(
    models: Iterable[Any],
    example_inputs: Any = (),
    *,
    device: str | Sequence[str] = DEFAULT_DEVICE,
    batch_sizes: Sequence[int] | None = None,
    phase: str = "inference",
    dtype: str | None = None,
    mode: str = "eager",
    predictor: str = "auto",
    optimizer: str = "adamw",
    tf32: bool = False,
    weights_built_in: str | None = MEASURED_BUILD_DTYPE,
    reuse: bool = True,
    capture: str = "meta",
    on_error: str = "raise",
    adapted: Any = None,
    frame: bool = False,
) -> Any:
    """Predict every model of ``models`` on every ``device`` at every batch of ``batch_sizes``.

    ``models`` is any iterable (a generator keeps one candidate alive at a time); build them on the meta device
    (``with torch.device("meta"):``) and nothing is allocated at all. ``example_inputs`` are shared by every
    candidate, or a callable ``model -> inputs``; ``batch_sizes=None`` predicts the inputs' own batch. Returns
    predict_many's columns (``perfpredict.api.MANY_COLUMNS``) plus ``model`` (the candidate's position), ``flops``
    and ``params``, one row per (model, device, batch) in that order; ``frame=True`` gives a DataFrame.
    ``on_error="skip"`` fills a candidate that cannot be captured with NaN and keeps its one-line reason in
    ``result.errors`` (``{position: message}``) instead of raising. ``adapted`` (one or several
    ``perfpredict.nas.adapt.AdaptedLatency``, from ``perfpredict.nas.adapt.adapt``) gives the latency on its
    device from the model fitted to measured candidates instead of zero-shot (eager inference only).
    """
    from perfpredict.hardware.devices import get_device
    from perfpredict.predictors.base import RunConfig

    if on_error not in ("raise", "skip"):
        raise InvalidInputError(f"on_error {on_error!r} is not one of 'raise', 'skip'")
    names = [device] if isinstance(device, str) else list(device)
    run = ModelsRun(
        devices=[get_device(d) for d in names],
        candidates=Candidates(batch_sizes, phase, dtype, capture, BlockCache() if reuse else None),
        adapted=_by_device(adapted, names, phase, mode),
    )
    model_predictor = vector_predictor(predictor)
    config = RunConfig(phase=phase, optimizer=optimizer, tf32=tf32, weights_built_in=weights_built_in, mode=mode)
    parts = []
    for i, model in enumerate(models):
        inputs = example_inputs(model) if callable(example_inputs) else example_inputs
        parts.append(_one(i, model, inputs, run, model_predictor, config, on_error))
    out = _concatenate(parts)
    out.errors = run.errors
    return out.to_pandas() if frame else out


def _one(i: int, model: Any, inputs: Any, run: ModelsRun, model_predictor: Any, config: Any, on_error: str) -> Any:
    """The rows of candidate ``i``: every device at every batch."""
    try:
        arrays = run.candidates.arrays(model, inputs)
    except PerfPredictError as err:
        if on_error == "raise":
            raise type(err)(f"candidate {i}: {err}") from err
        run.errors[i] = str(err)
        arrays = None
    batches = run.candidates.batches_for(arrays)
    n = len(batches)
    out = many_columns(n * len(run.devices), EXTRA_COLUMNS)
    out["model"][:] = i
    for d, device in enumerate(run.devices):
        rows = slice(d * n, (d + 1) * n)
        if arrays is None:
            _fill_missing(out, rows, device, batches)
            continue
        fill_columns(out, rows, model_predictor, arrays, device, config, batches)
        if device.name in run.adapted:
            _adapted_rows(out, rows, run.adapted[device.name], arrays, device, batches)
        flops, _, _, _ = arrays.at(batches)
        out["flops"][rows] = flops.sum(axis=0)
        out["params"][rows] = arrays.graph.param_count
    return out


def _by_device(adapted: Any, names: list[str], phase: str, mode: str) -> dict[str, Any]:
    from perfpredict.hardware.devices import get_device

    if adapted is None:
        return {}
    models = [adapted] if hasattr(adapted, "queue_depth") else list(adapted)
    if models and (phase != "inference" or mode != "eager"):
        raise InvalidInputError("an adapted latency model predicts eager inference; drop adapted= or phase/mode")
    by_device = {get_device(m.device).name: m for m in models}
    missing = sorted(set(by_device) - {get_device(n).name for n in names})
    if missing:
        raise InvalidInputError(f"adapted models for {missing} but device= does not list them; add them to device=")
    return by_device


def _adapted_rows(out: Any, rows: slice, model: Any, arrays: Any, device: Any, batches: np.ndarray) -> None:
    """The latency (and what follows from it) of the adapted model in place of the zero-shot one."""
    from perfpredict.nas.adapt import node_parts, walls_ms

    latency = walls_ms(node_parts(arrays, device, batches, learned_device=model.learned_device), [model])[:, 0]
    out["latency_ms"][rows] = latency
    out["throughput_per_s"][rows] = batches / (latency * 1e-3)
    out["energy_j"][rows] = out["avg_power_w"][rows] * latency * 1e-3


def _fill_missing(out: Any, rows: slice, device: Any, batches: np.ndarray) -> None:
    out["device"][rows] = device.name
    out["batch_size"][rows] = batches.astype(np.int64)
    for column in ("latency_ms", "throughput_per_s", "peak_memory_bytes", "energy_j", "avg_power_w", "flops"):
        out[column][rows] = np.nan


def _concatenate(parts: list[Any]) -> Any:
    out = many_columns(0, EXTRA_COLUMNS)
    if parts:
        for column in out:
            out[column] = np.concatenate([p[column] for p in parts])
    return out
