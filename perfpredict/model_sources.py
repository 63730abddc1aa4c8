"""The sources a Request can name besides a torch module in hand: a HuggingFace id or config, and an ONNX file.

The CLI and the web page both build these, so the run dtype is chosen one way for both: what the user asked
(``dtype``, ``precision``), else what the config declares (``torch_dtype``; an ONNX file: its own tensors' dtype),
else float32, and in training the device's usual recipe (:func:`perfpredict.hardware.precision.resolve_run_dtype`;
an ONNX file keeps its own dtype unless one is asked for). Both load their weights straight in the run dtype:
``weights_built_in="auto"`` means None here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfpredict.request import Captured, Request


@dataclass(frozen=True)
class HFSource:
    """A shipped HuggingFace id or alias, a config.json path (or a folder holding one), or a config's fields."""

    model: Any
    use_cache: bool = True  # read the on-disk graph cache (False: capture again and refresh it)

    def graph_for(self, request: Request, device: Any) -> Captured:
        from perfpredict.compiler_hooks.hf_capture import cached
        from perfpredict.compiler_hooks.hf_frontend import declared_dtype, raw_config
        from perfpredict.hardware.precision import resolve_run_dtype

        fields = self.model if isinstance(self.model, dict) else raw_config(self.model)[0]
        phase = request.phase or "inference"
        run = resolve_run_dtype(declared_dtype(fields), request.dtype, request.precision, phase == "training", device)
        # built in the run dtype on the meta device (a deep layer stack traced with two layers and copied), or read
        # from the on-disk graph cache
        graph, name = cached(
            self.model,
            batch_size=request.batch or 1,
            seq_len=request.seq,
            dtype=run.dtype,
            phase=phase,
            use_cache=self.use_cache,
            attn_implementation=request.attn_implementation,
            lora=lora_of(request),
            model_class=request.model_class,
        )
        return Captured(graph, name, run.precision, {"dtype": run.source}, None)


def lora_of(request: Request) -> tuple[int, str | None] | None:
    """The request's LoRA adapters as (rank, targets), or None; refused in one line where they cannot apply."""
    from perfpredict.core.errors import InvalidInputError

    if request.lora_rank is None:
        if request.lora_targets is not None:
            raise InvalidInputError(
                f"lora_targets={request.lora_targets!r} names where LoRA adapters go: add lora_rank (--lora-rank 16)"
            )
        return None
    if (request.phase or "inference") != "training":
        raise InvalidInputError(
            "lora_rank fine-tunes LoRA adapters in a training step: add --training (phase='training')"
        )
    return request.lora_rank, request.lora_targets


@dataclass(frozen=True)
class OnnxSource:
    """An ONNX file (any exporter; external data is read too), with ``NAME=DIMS`` shapes for dynamic inputs."""

    path: str
    input_shapes: tuple[str, ...] = ()

    def graph_for(self, request: Request, device: Any) -> Captured:
        """The file's graph with ``batch`` and ``seq`` applied to its dynamic batch and sequence dimensions (a static
        one that disagrees is refused: ``onnx_file``), and its floating tensors and weights costed in the dtype
        asked for (``dtype``, or a training ``precision``'s compute dtype); none asked for keeps the file's own."""
        from perfpredict.compiler_hooks.onnx_file import graph_from_onnx_args
        from perfpredict.core.errors import InvalidInputError
        from perfpredict.hardware.precision import resolve_run_dtype

        if request.attn_implementation is not None:
            raise InvalidInputError(
                f"attn_implementation={request.attn_implementation!r} cannot change an ONNX file's attention (its "
                "exporter fixed it): drop --attn-implementation, or export the model with the implementation wanted"
            )
        if request.model_class is not None:
            raise InvalidInputError(
                f"model_class={request.model_class!r} builds a HuggingFace config; an ONNX file's head is in it: "
                "drop --model-class, or export the model with the head wanted"
            )
        phase = request.phase or "inference"
        run = resolve_run_dtype(None, request.dtype, request.precision, phase == "training", device)
        asked = request.dtype is not None or request.precision is not None
        graph = graph_from_onnx_args(
            self.path,
            list(self.input_shapes),
            phase=phase,
            batch=request.batch,
            seq=request.seq,
            dtype=run.dtype if asked else None,
        )
        assumed = {"dtype": f"{run.source}: the file's floating tensors and weights costed in it"} if asked else {}
        return Captured(graph, Path(self.path).stem, run.precision if asked else None, assumed, None)
