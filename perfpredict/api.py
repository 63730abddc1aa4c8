"""The Python API: ``predict`` for one model and config, ``predict_many`` for NAS loops.

Both capture the model with torch.compile (dynamo, plus AOTAutograd for a training step) into an OpGraph, then
ask a predictor. Models on the meta device work and cost no memory, which is how a 7B model is predicted on a
laptop. Captured graphs are cached per (model, input shapes, phase), so asking about another device is cheap.
"""

from __future__ import annotations

import copy
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

from perfpredict.errors import FrontendError, InvalidInputError
from perfpredict.graph import OpGraph, merge_graphs
from perfpredict.pipeline import DEFAULT_DEVICE, report_for_graph
from perfpredict.predictors.base import MEASURED_BUILD_DTYPE

_DTYPES = ("float32", "float16", "bfloat16", "float64")
_CACHE: OrderedDict[tuple, tuple[Any, OpGraph]] = OrderedDict()
_CACHE_SIZE = 32


def predict(
    model: Any,
    example_inputs: Any = (),
    *,
    device: str = DEFAULT_DEVICE,
    phase: str = "inference",
    dtype: str | None = None,
    predictor: str = "auto",
    optimizer: str = "adamw",
    tf32: bool = False,
    model_name: str | None = None,
    max_latency_ms: float | None = None,
    min_throughput_per_s: float | None = None,
    grid_g_per_kwh: float | None = None,
    workload_calls: int | None = None,
    top_ops: int = 25,
    example_kwargs: Mapping[str, Any] | None = None,
    weights_built_in: str | None = MEASURED_BUILD_DTYPE,
    mode: str = "eager",
    precision: str | None = None,
    parallel: Mapping[str, Any] | None = None,
) -> Any:
    """Predict ``model`` called as ``model(*example_inputs, **example_kwargs)`` on ``device``.

    ``phase="training"`` predicts one step: forward, backward and an ``optimizer`` step. ``dtype`` casts a copy
    of the model and its floating inputs first. The batch size is the leading dimension of the first input.
    ``weights_built_in`` is the dtype the weights exist in before their cast to the run dtype ("float32", as
    ``Model(config).to(torch.bfloat16)`` builds them); ``None`` for weights loaded straight in the run dtype.
    ``mode`` is how the step runs: "eager", "cuda_graph", "compiled" or "compiled_cuda_graph" (the two-timeline
    predictor, ``predictor="two_timeline"``, reads it). ``precision`` is a training recipe of
    :mod:`perfpredict.precision` ("fp32", "bf16", "amp-bf16", "amp-fp16"): the weights, gradients and optimizer
    state it holds per parameter; ``None`` keeps the model's dtype for all of them.

    ``parallel`` spreads one step over several GPUs (``{"dp": 8, "tp": 2, "pp": 2, "fsdp": True, "sp": True,
    "microbatches": 8}``; see :mod:`perfpredict.parallel`) and returns a ``ParallelReport`` instead: per-rank time
    and memory, communication, the pipeline bubble and the scaling efficiency. The batch of ``example_inputs`` is
    then one rank's micro-batch.
    """
    from perfpredict.delivery import forget

    forget()  # a prediction that fails must not leave the previous model's report as last_report()
    graph = featurize(
        model,
        example_inputs,
        phase=phase,
        dtype=dtype,
        example_kwargs=example_kwargs,
        name=model_name or type(model).__name__,
    )
    if parallel is not None:
        from perfpredict.parallel import parallel_report

        return parallel_report(
            graph,
            parallel,
            device=device,
            predictor=predictor,
            optimizer=optimizer,
            precision=precision,
            mode=mode,
            tf32=tf32,
            model_name=model_name or graph.name,
        )
    return report_for_graph(
        graph,
        device=device,
        phase=phase,
        predictor=predictor,
        optimizer=optimizer,
        tf32=tf32,
        max_latency_ms=max_latency_ms,
        min_throughput_per_s=min_throughput_per_s,
        grid_g_per_kwh=grid_g_per_kwh,
        workload_calls=workload_calls,
        top_ops=top_ops,
        model_name=model_name,
        weights_built_in=weights_built_in,
        mode=mode,
        precision=precision,
    )


def featurize(
    model: Any,
    example_inputs: Any = (),
    *,
    phase: str = "inference",
    dtype: str | None = None,
    example_kwargs: Mapping[str, Any] | None = None,
    name: str = "",
) -> OpGraph:
    """Capture ``model`` into one OpGraph (subgraphs of graph breaks merged), cached by model and shapes."""
    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    kwargs = dict(example_kwargs or {})
    _check(phase, dtype)
    key = (id(model), _signature(args), _signature(tuple(sorted(kwargs.items()))), phase, dtype)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is model:
        _CACHE.move_to_end(key)
        return hit[1]
    original = model  # the cache holds the caller's model, never the cast copy (which dies right away)
    if dtype is not None:
        model, args, kwargs = _cast(model, args, kwargs, dtype)
    graph = _capture(model, args, kwargs, phase, name)
    _CACHE[key] = (weakref.ref(original) if _weakrefable(original) else (lambda: None), graph)
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return graph


def _capture(model: Any, args: tuple, kwargs: dict, phase: str, name: str) -> OpGraph:
    import torch

    from perfpredict.compiler_hooks.fx_frontend import graph_from_fx
    from perfpredict.compiler_hooks.torch_backend import BackendOptions, _training

    graphs: list[OpGraph] = []
    if phase == "training":

        def backend(gm: Any, ex: list) -> Any:
            return _training(gm, ex, BackendOptions(phase="training", strict=True, model_name=name), graphs.append)
    else:

        def backend(gm: Any, ex: list) -> Any:
            graphs.append(graph_from_fx(gm, ex, name=name))
            return gm.forward

    was_training = getattr(model, "training", None)
    limits = {"recompile_limit": 1_000_000, "accumulated_recompile_limit": 1_000_000}
    try:
        if hasattr(model, "train"):
            model.train(phase == "training")
        with torch._dynamo.config.patch(**limits), torch.set_grad_enabled(phase == "training"):
            torch.compile(model, backend=backend, dynamic=False)(*args, **kwargs)
    finally:
        if was_training is not None:
            model.train(was_training)
    if not graphs:
        raise FrontendError(
            f"torch.compile captured no graph from {name or type(model).__name__!r}; "
            "check that it runs eagerly with these inputs"
        )
    return merge_graphs(graphs, name=name)


#: the columns predict_many returns, one value per configuration, in the order the configurations were given
MANY_COLUMNS = (
    "device",
    "batch_size",
    "latency_ms",
    "throughput_per_s",
    "peak_memory_bytes",
    "fits_in_memory",
    "energy_j",
    "avg_power_w",
)


class ManyPredictions(dict):
    """predict_many's answer: a dict of numpy columns (``MANY_COLUMNS``), one entry per configuration.

    ``to_pandas()`` gives a DataFrame (pandas must be installed); ``records()`` gives one dict per configuration.
    """

    def to_pandas(self) -> Any:
        from perfpredict.errors import require

        return require("pandas", "data").DataFrame(dict(self))

    def records(self) -> list[dict[str, Any]]:
        return [
            {k: v[i].item() if hasattr(v[i], "item") else v[i] for k, v in self.items()}
            for i in range(len(self["latency_ms"]))
        ]


def predict_many(
    model: Any,
    example_inputs: Any,
    configs: Sequence[Mapping[str, Any]],
    *,
    phase: str = "inference",
    dtype: str | None = None,
    optimizer: str = "adamw",
    tf32: bool = False,
    predictor: str = "auto",
    weights_built_in: str | None = MEASURED_BUILD_DTYPE,
    frame: bool = False,
) -> Any:
    """Predict many (device, batch_size) configurations of one architecture in one call.

    The model is captured twice (at its example batch b and at b+1); every per-op FLOP and byte count is
    affine in the batch, so those two captures give exact figures for any batch size. Configurations are then
    evaluated as numpy columns, grouped by device. Returns a :class:`ManyPredictions`, a dict of numpy columns
    (``MANY_COLUMNS``) in the order of ``configs``; ``frame=True`` returns a pandas DataFrame instead.
    """
    import numpy as np

    from perfpredict.devices import get_device
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.memory_model import peak_tensor_bytes
    from perfpredict.predictors.registry import get_predictor, resolve_predictor

    arrays = _batch_affine_arrays(model, example_inputs, phase, dtype)
    model_predictor = get_predictor(resolve_predictor(predictor, "")[0])
    if not hasattr(model_predictor, "evaluate"):
        raise InvalidInputError(f"predictor {predictor!r} has no vectorised path; use perfpredict.predict")
    config = RunConfig(phase=phase, optimizer=optimizer, tf32=tf32, weights_built_in=weights_built_in)
    n = len(configs)
    types = {"device": object, "batch_size": np.int64, "fits_in_memory": bool}
    out = ManyPredictions({c: np.zeros(n, dtype=types.get(c, float)) for c in MANY_COLUMNS})
    by_device: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        by_device.setdefault(str(cfg.get("device", DEFAULT_DEVICE)), []).append(i)
    for device_name, idx in by_device.items():
        device = get_device(device_name)
        batches = np.array([_batch_of(configs[i], arrays.graph.batch_size) for i in idx], dtype=float)
        ev = model_predictor.evaluate(arrays, device, config, batches)
        peak = peak_tensor_bytes(arrays.graph, config, ev.activations_bytes) + device.runtime_overhead_bytes
        out["device"][idx] = device.name
        out["batch_size"][idx] = batches.astype(np.int64)
        out["latency_ms"][idx] = ev.latency_s * 1e3
        out["throughput_per_s"][idx] = batches / ev.latency_s
        out["peak_memory_bytes"][idx] = peak
        out["fits_in_memory"][idx] = peak <= device.memory_bytes
        out["energy_j"][idx] = ev.power_w * ev.latency_s
        out["avg_power_w"][idx] = ev.power_w
    return out.to_pandas() if frame else out


def _batch_affine_arrays(model: Any, example_inputs: Any, phase: str, dtype: str | None) -> Any:
    from perfpredict.predictors.cost_arrays import CostArrays

    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)
    base = featurize(model, args, phase=phase, dtype=dtype)
    b = base.batch_size
    try:
        other = featurize(model, _rebatch(args, b + 1), phase=phase, dtype=dtype)
        return CostArrays.fit(base, other)
    except FrontendError:
        return CostArrays.from_graph(base)


def _rebatch(args: tuple, batch: int) -> tuple:
    """The same inputs with ``batch`` rows: rows are repeated cyclically, so token ids stay valid."""
    import torch

    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.dim() > 0:
            index = torch.arange(batch, device=a.device) % a.shape[0]
            out.append(a.index_select(0, index))
        else:
            out.append(a)
    return tuple(out)


def _batch_of(cfg: Mapping[str, Any], default: int) -> int:
    batch = int(cfg.get("batch_size", default))
    if batch < 1:
        raise InvalidInputError(f"batch_size {batch!r} must be at least 1")
    return batch


def _check(phase: str, dtype: str | None) -> None:
    if phase not in ("inference", "training"):
        raise InvalidInputError(f"phase {phase!r} is not one of 'inference', 'training'")
    if dtype is not None and dtype not in _DTYPES:
        raise InvalidInputError(f"dtype {dtype!r} is not one of {', '.join(_DTYPES)}")


def _cast(model: Any, args: tuple, kwargs: dict, dtype: str) -> tuple[Any, tuple, dict]:
    """A copy of the model and its floating inputs in ``dtype`` (the caller's model is left as it was)."""
    import torch

    target = getattr(torch, dtype)

    def cast(x: Any) -> Any:
        return x.to(target) if isinstance(x, torch.Tensor) and x.is_floating_point() else x

    model = copy.deepcopy(model).to(target)
    return model, tuple(cast(a) for a in args), {k: cast(v) for k, v in kwargs.items()}


def _signature(values: Any) -> tuple:
    out = []
    for v in values:
        if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
            out.append((v[0], *_signature((v[1],))))
        elif hasattr(v, "shape") and hasattr(v, "dtype"):
            out.append((tuple(v.shape), str(v.dtype), str(getattr(v, "device", ""))))
        else:
            out.append(repr(v)[:64])
    return tuple(out)


def _weakrefable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
        return True
    except TypeError:
        return False
