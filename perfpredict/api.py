"""The Python API: ``predict`` for one model and config, ``predict_many`` for many configs of one model.

Both capture the model into an OpGraph without running its arithmetic (``compiler_hooks/capture.py``: an inference
forward is recorded on meta stand-ins in milliseconds; a training step is that recording traced by AOTAutograd),
then ask a predictor. Real weights are never copied and a model built on the meta device costs no
memory, which is how a 70B model is predicted on a laptop. Captured graphs are cached per (model, input shapes,
phase, dtype, capture), so asking about another device is cheap. Many candidate models: ``perfpredict.nas``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfpredict.compiler_hooks.featurize import featurize
from perfpredict.core.errors import FrontendError, InvalidInputError
from perfpredict.predictors.base import MEASURED_BUILD_DTYPE
from perfpredict.request import DEFAULT_DEVICE, Captured, Request, default, request_signature


@dataclass(frozen=True)
class ModuleSource:
    """A torch module in hand, called as ``model(*example_inputs, **example_kwargs)``: the source of a Request that
    the Python API builds. ``capture`` is how it is traced (see :func:`predict`)."""

    model: Any
    example_inputs: Any = ()
    example_kwargs: Mapping[str, Any] | None = None
    capture: str = "meta"

    def graph_for(self, request: Request, device: Any) -> Captured:
        """The module's OpGraph at ``request``'s phase and dtype (and batch, where given: the inputs re-batched)."""
        if request.seq is not None:
            raise InvalidInputError(
                f"seq={request.seq!r} sets a config's sequence length; a module's comes from its inputs: pass "
                "example inputs of that length instead"
            )
        args = tuple(self.example_inputs) if isinstance(self.example_inputs, (list, tuple)) else (self.example_inputs,)
        if request.model_class is not None:
            raise InvalidInputError(
                f"model_class={request.model_class!r} builds a HuggingFace config; a module in hand has its head: "
                "drop model_class, or build the module with the head wanted"
            )
        if request.batch is not None:
            args = rebatch(args, request.batch, self.capture)
        name = request.model_name or type(self.model).__name__
        dtype = _traced_dtype(request, device)
        model, args, kwargs = self._with_lora(request, args, dtype)
        graph = featurize(
            model,
            args,
            phase=request.phase or "inference",
            dtype=dtype,
            example_kwargs=kwargs,
            name=name,
            capture=self.capture,
            attn_implementation=request.attn_implementation,
        )
        return Captured(graph, name, request.precision, None, built_in(self.model))

    def _with_lora(self, request: Request, args: tuple, dtype: str | None) -> tuple[Any, tuple, Any]:
        """The model to capture, with the request's LoRA adapters on a meta copy of it (the caller's model is not
        touched), and the inputs to call it with."""
        from perfpredict.model_sources import lora_of

        lora = lora_of(request)
        if lora is None:
            return self.model, args, self.example_kwargs
        from perfpredict.compiler_hooks.capture import meta_twin
        from perfpredict.compiler_hooks.lora import with_lora

        twin, meta_args, meta_kwargs = meta_twin(self.model, args, dict(self.example_kwargs or {}), dtype)
        return with_lora(twin, *lora), meta_args, meta_kwargs


def _traced_dtype(request: Request, device: Any) -> str | None:
    """The dtype the module is traced in: ``dtype``, or a training ``precision``'s compute dtype (under
    ``amp-bf16`` the matmuls and activations run in bfloat16, autocast's copies of the float32 weights), else the
    module's own (None). A precision is refused in inference, and a dtype that contradicts it, as the HF path does."""
    if request.precision is None:
        return request.dtype
    from perfpredict.hardware.precision import resolve_run_dtype

    training = (request.phase or "inference") == "training"
    return resolve_run_dtype(None, request.dtype, request.precision, training, device).dtype


def built_in(model: Any) -> str | None:
    """What ``weights_built_in="auto"`` means for a module in hand: float32, torch's default dtype, for one with
    weights (``Model(config).to(torch.bfloat16)`` builds them so before the cast); None for one built on the meta
    device, which has no weights to copy: its weights are loaded in the dtype its parameters carry, or in the run
    dtype asked for (``from_pretrained(..., dtype=...)``), and no float32 copy ever exists."""
    params = list(model.parameters()) if hasattr(model, "parameters") else []
    return None if params and all(p.is_meta for p in params) else MEASURED_BUILD_DTYPE


@request_signature
def predict(
    model: Any,
    example_inputs: Any = (),
    *,
    example_kwargs: Mapping[str, Any] | None = None,
    capture: str = "meta",
    **options: Any,
) -> Any:
    """Predict ``model`` called as ``model(*example_inputs, **example_kwargs)``; ``options`` are the fields of
    :class:`perfpredict.request.Request` (its defaults are this function's).

    ``phase="training"`` predicts one step: forward, backward and an ``optimizer`` step. ``dtype`` is the run
    dtype of the weights and floating inputs (the capture makes meta stand-ins in it; nothing is copied).
    ``capture`` is how the model is traced (:mod:`perfpredict.compiler_hooks.capture`): "meta" (default, never
    runs the model), "dynamo" (torch.compile's graph, on a meta twin) or "real" (runs it; for forwards that read
    tensor values). The batch size is the leading dimension of the first input (``batch`` re-batches the inputs).
    ``weights_built_in`` is the dtype the weights exist in before their cast to the run dtype ("auto", the
    default, is "float32" for a model with weights: ``Model(config).to(torch.bfloat16)`` builds them so; and None
    for a model on the meta device, which has no weights to copy); ``None`` for weights loaded straight in the run
    dtype. ``attn_implementation`` is the attention a HuggingFace model runs: "sdpa", "eager" or
    "flash_attention_2" (captured as one fused attention op; None: the model's own).
    ``mode`` is how the step runs: "eager", "cuda_graph", "compiled" or "compiled_cuda_graph" (the two-timeline
    predictor, ``predictor="two_timeline"``, reads it). ``precision`` is a training recipe of
    :mod:`perfpredict.hardware.precision` ("fp32", "bf16", "amp-bf16", "amp-fp16"): the weights, gradients and optimizer
    state it holds per parameter; ``None`` keeps the model's dtype for all of them. ``host`` is the CPU host that
    drives the GPU (its dispatch and launch cost set an eager step's host timeline): a shipped profile's name
    ("h100-server", "dev-vm") or "calibrated" (``perfpredict calibrate-host``); None: this machine's calibrated
    profile where there is one, else "h100-server". The report's assumptions name it.

    ``parallel`` spreads one step over several GPUs (``{"dp": 8, "tp": 2, "pp": 2, "fsdp": True, "sp": True,
    "microbatches": 8}``; see :mod:`perfpredict.parallel`) and returns a ``ParallelReport`` instead: per-rank time
    and memory, communication, the pipeline bubble and the scaling efficiency. The batch of ``example_inputs`` is
    then one rank's micro-batch.
    """
    from perfpredict.pipeline import predict as answer

    return answer(Request.of(source=ModuleSource(model, example_inputs, example_kwargs, capture), **options))


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
        from perfpredict.core.errors import require

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
    optimizer: str = default("optimizer"),
    tf32: bool = default("tf32"),
    predictor: str = default("predictor"),
    weights_built_in: str | None = default("weights_built_in"),
    frame: bool = False,
    capture: str = "meta",
    mode: str = default("mode"),
    host: str | None = default("host"),
    attn_implementation: str | None = default("attn_implementation"),
) -> Any:
    """Predict many (device, batch_size) configurations of one architecture in one call (``host``,
    ``weights_built_in`` and ``attn_implementation``: as :func:`predict`'s).

    The model is captured twice (at its example batch b and at b+1); every per-op FLOP and byte count is
    affine in the batch, so those two captures give exact figures for any batch size. Configurations are then
    evaluated as numpy columns, grouped by device. Returns a :class:`ManyPredictions`, a dict of numpy columns
    (``MANY_COLUMNS``) in the order of ``configs``; ``frame=True`` returns a pandas DataFrame instead.
    """
    import numpy as np

    from perfpredict.hardware.devices import get_device

    request = Request(
        phase=phase,
        optimizer=optimizer,
        tf32=tf32,
        weights_built_in=weights_built_in,
        mode=mode,
        host=host,
        attn_implementation=attn_implementation,
    )
    arrays = _batch_affine_arrays(model, example_inputs, phase, dtype, capture, attn_implementation)
    model_predictor = vector_predictor(predictor)
    config = request.run_config(phase, request.resolved_weights_built_in(built_in(model)))
    out = many_columns(len(configs))
    by_device: dict[str, list[int]] = {}
    for i, cfg in enumerate(configs):
        by_device.setdefault(str(cfg.get("device", DEFAULT_DEVICE)), []).append(i)
    for device_name, idx in by_device.items():
        batches = np.array([_batch_of(configs[i], arrays.graph.batch_size) for i in idx], dtype=float)
        fill_columns(out, idx, model_predictor, arrays, get_device(device_name), config, batches)
    return out.to_pandas() if frame else out


def vector_predictor(predictor: str) -> Any:
    """The predictor object behind ``predictor`` ("auto" resolved), which must have a vectorised ``evaluate``."""
    from perfpredict.predictors.registry import get_predictor, resolve_predictor

    model_predictor = get_predictor(resolve_predictor(predictor, "")[0])
    if not hasattr(model_predictor, "evaluate"):
        raise InvalidInputError(f"predictor {predictor!r} has no vectorised path; use perfpredict.predict")
    return model_predictor


def many_columns(n: int, extra: Mapping[str, Any] | None = None) -> ManyPredictions:
    """Empty columns for ``n`` rows: ``MANY_COLUMNS`` and any ``extra`` (name -> numpy dtype)."""
    import numpy as np

    types = {"device": object, "batch_size": np.int64, "fits_in_memory": bool, **(extra or {})}
    return ManyPredictions({c: np.zeros(n, dtype=types.get(c, float)) for c in (*MANY_COLUMNS, *(extra or {}))})


def fill_columns(
    out: ManyPredictions, rows: Any, model_predictor: Any, arrays: Any, device: Any, config: Any, batches: Any
) -> Any:
    """Evaluate ``arrays`` on ``device`` at ``batches`` (one per row) and write the rows; returns the Evaluation."""
    import numpy as np

    from perfpredict.predictors.memory_model import peak_tensor_bytes

    ev = model_predictor.evaluate(arrays, device, config, batches)
    peak = peak_tensor_bytes(arrays.graph, config, ev.activations_bytes) + device.runtime_overhead_bytes
    out["device"][rows] = device.name
    out["batch_size"][rows] = batches.astype(np.int64)
    out["latency_ms"][rows] = ev.latency_s * 1e3
    out["throughput_per_s"][rows] = batches / ev.latency_s
    out["peak_memory_bytes"][rows] = peak
    out["fits_in_memory"][rows] = peak <= device.memory_bytes
    out["energy_j"][rows] = ev.power_w * ev.latency_s
    out["avg_power_w"][rows] = ev.power_w
    return ev


def _batch_affine_arrays(
    model: Any, example_inputs: Any, phase: str, dtype: str | None, capture: str, attn: str | None = None
) -> Any:
    args = tuple(example_inputs) if isinstance(example_inputs, (list, tuple)) else (example_inputs,)

    def capture_at(a: tuple) -> Any:
        return featurize(model, a, phase=phase, dtype=dtype, capture=capture, attn_implementation=attn)

    return affine_arrays(capture_at, args, capture)


def affine_arrays(capture_at: Any, args: tuple, capture: str) -> Any:
    """CostArrays affine in the batch from two captures, ``capture_at(args)`` at the inputs' batch b and at b+1;
    from the first alone where the graph changes its structure with the batch."""
    from perfpredict.predictors.cost_arrays import CostArrays

    base = capture_at(args)
    try:
        return CostArrays.fit(base, capture_at(rebatch(args, base.batch_size + 1, capture)))
    except FrontendError as err:
        # said, not silent: the arrays below cost every batch as batch b
        warnings.warn(
            f"perfpredict: no second capture at batch {base.batch_size + 1} ({err}); every batch is costed as batch "
            f"{base.batch_size}: predict other batches one by one with perfpredict.predict",
            stacklevel=3,
        )
        return CostArrays.from_graph(base)


def rebatch(args: tuple, batch: int, capture: str = "meta") -> tuple:
    """The same inputs with ``batch`` rows: meta tensors where the capture reads no values, else the rows
    repeated cyclically (so token ids stay valid)."""
    import torch

    out = []
    for a in args:
        if isinstance(a, torch.Tensor) and a.dim() > 0 and capture != "real":
            out.append(torch.empty((batch, *a.shape[1:]), dtype=a.dtype, device="meta"))
        elif isinstance(a, torch.Tensor) and a.dim() > 0:
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
