"""One frozen ``Request``: what to predict (the model source), how it runs, and what the report should hold.

Every entry point builds one and hands it to :func:`perfpredict.pipeline.predict`: the Python API
(``perfpredict.predict(model, inputs, **fields)``), the CLI (each flag's ``dest`` is a field name), the torch.compile
backend (its ``options`` are field names plus the backend's own), the web page and the parallel path. The defaults
are written once, here, so every door gives the same answer to the same question.

A new run option is a field below (with what its default means); the API and the backend accept it at once, the
CLI needs its flag (``cli/model_args.py``), and whatever reads it gets it from :meth:`Request.run_config` (and
``RunConfig``, where a predictor reads it) or from the Request.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from perfpredict.compiler_hooks import attention_choice
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import DTYPES, PHASES
from perfpredict.predictors.base import DEFAULT_MODE, DEFAULT_PREDICTOR, MEASURED_BUILD_DTYPE, RunConfig

#: the device a question is about when none is named (every door: API, CLI, backend, Relax pass, web, parallel)
DEFAULT_DEVICE = "H100-SXM"
DEFAULT_OPTIMIZER = "adamw"
#: ``weights_built_in`` left to the source: see :meth:`Request.resolved_weights_built_in`
AUTO = "auto"
#: a ``top_ops`` that keeps every op's row (``explain``, and the doors that draw every op on the roofline plot)
EVERY_OP = 1_000_000


_SOURCE, _RUN, _REPORT = ({"group": g} for g in ("source", "run", "report"))


@dataclass(frozen=True)
class Request:
    """One question: ``source`` (what to predict), the run, and the report options. Build it with keywords."""

    # what to predict: an OpGraph, perfpredict.api.ModuleSource (a torch module and its inputs), or
    # perfpredict.model_sources.HFSource / OnnxSource; anything with ``graph_for(request, device) -> Captured``
    source: Any = field(default=None, metadata=_SOURCE)
    # the run
    device: Any = field(default=DEFAULT_DEVICE, metadata=_RUN)  # a catalog name (or MIG slice), or a Device
    phase: str | None = field(default=None, metadata=_RUN)  # None: a graph's own phase, else inference
    dtype: str | None = field(default=None, metadata=_RUN)  # weights and activations; None: the model's own
    batch: int | None = field(default=None, metadata=_RUN)  # where the source takes one; None: 1, or the inputs'
    seq: int | None = field(default=None, metadata=_RUN)  # a config's sequence length; None: its default
    predictor: str = field(default=DEFAULT_PREDICTOR, metadata=_RUN)
    mode: str = field(default=DEFAULT_MODE, metadata=_RUN)  # eager, cuda_graph, compiled, compiled_cuda_graph
    precision: str | None = field(default=None, metadata=_RUN)  # a training recipe; None: the model's dtype
    optimizer: str = field(default=DEFAULT_OPTIMIZER, metadata=_RUN)
    tf32: bool = field(default=False, metadata=_RUN)  # float32 matmuls may use TF32 (torch's default: no)
    host: str | None = field(default=None, metadata=_RUN)  # None: the calibrated host, else h100-server
    # a HuggingFace model's attention: sdpa, eager or flash_attention_2; None: the model's own (a config: sdpa)
    attn_implementation: str | None = field(default=None, metadata=_RUN)
    # the transformers class a config is built with ("AutoModelForSequenceClassification", "BertForPreTraining",
    # "AutoModelForSeq2SeqLM", ...); None: the head a config declares where it is deployed as is, else its base model
    model_class: str | None = field(default=None, metadata=_RUN)
    # the dtype the weights exist in before their cast to the run dtype; None: loaded in it; "auto": the source's
    weights_built_in: str | None = field(default=AUTO, metadata=_RUN)
    parallel: Mapping[str, Any] | None = field(default=None, metadata=_RUN)  # {"dp", "tp", "pp", ...}; None: 1 GPU
    # training memory and fine-tuning (docs/parallel.md, "Memory, checkpointing and fine-tuning")
    # None: the model's own checkpoint regions; "none", "full", "selective-op", "every-<k>" (compiler_hooks/recompute)
    activation_checkpointing: str | None = field(default=None, metadata=_RUN)
    float8: str = field(default="none", metadata=_RUN)  # "tensorwise", "rowwise" (torchao), "delayed" (TE)
    optimizer_impl: str | None = field(default=None, metadata=_RUN)  # for-loop, foreach, fused; None: the framework's
    offload_optimizer: bool = field(default=False, metadata=_RUN)  # ZeRO-Offload: state and step on the host CPU
    lora_rank: int | None = field(default=None, metadata=_RUN)  # LoRA adapters of this rank (peft); None: full
    lora_targets: str | None = field(default=None, metadata=_RUN)  # "q_proj,v_proj" or "all-linear"; None: peft's
    qlora: bool = field(default=False, metadata=_RUN)  # the frozen base in 4-bit NF4 (QLoRA); needs lora_rank
    power_limit_w: float | None = field(default=None, metadata=_RUN)  # a board power cap (nvidia-smi -pl)
    # the report
    model_name: str | None = field(default=None, metadata=_REPORT)
    max_latency_ms: float | None = field(default=None, metadata=_REPORT)  # MIG advice targets
    min_throughput_per_s: float | None = field(default=None, metadata=_REPORT)
    grid_g_per_kwh: float | None = field(default=None, metadata=_REPORT)  # None: $PERFPREDICT_GRID_G_PER_KWH
    workload_calls: int | None = field(default=None, metadata=_REPORT)  # None: 1,000 inferences or steps
    top_ops: int = field(default=25, metadata=_REPORT)  # per-op rows kept

    def __post_init__(self) -> None:
        # what RunConfig checks (mode, optimizer, precision, host, ...) it checks when the pipeline builds it
        if self.phase is not None and self.phase not in PHASES:
            raise InvalidInputError(f"phase {self.phase!r} is not one of 'inference', 'training'")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise InvalidInputError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        attention_choice.check(self.attn_implementation)
        for name in ("batch", "seq", "lora_rank"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InvalidInputError(f"{name} {value!r} must be a whole number of at least 1")
        self._check_training_options()

    def _check_training_options(self) -> None:
        """The training-memory options, each refused in one line with its valid values (the device-dependent checks,
        float8 tensor cores and the power limit's range, run where the device is known)."""
        from perfpredict.compiler_hooks.recompute import parse_policy
        from perfpredict.hardware.precision import check_training_options

        parse_policy(self.activation_checkpointing)
        check_training_options(
            float8=self.float8,
            optimizer_impl=self.optimizer_impl,
            lora_targets=self.lora_targets,
            power_limit_w=self.power_limit_w,
        )

    @classmethod
    def of(cls, **fields: Any) -> Request:
        """A Request from keywords, naming the valid ones when a keyword is not a field (instead of TypeError)."""
        return cls(**_known(fields))

    def but(self, **changes: Any) -> Request:
        """This request with ``changes`` (field names, checked as :meth:`of` checks them)."""
        return dataclasses.replace(self, **_known(changes)) if changes else self

    def resolved_weights_built_in(self, source_default: str | None) -> str | None:
        """``weights_built_in``, with "auto" resolved to the source's: a torch module in hand (the API, the
        torch.compile backend, a graph captured from one) was built in float32, torch's default dtype, before any
        cast; a HuggingFace config or an ONNX file is loaded straight in its own dtype (None)."""
        return source_default if self.weights_built_in == AUTO else self.weights_built_in

    def run_config(self, phase: str, weights_built_in: str | None) -> RunConfig:
        """The predictors' RunConfig for this request (``phase`` and ``weights_built_in`` resolved by the caller):
        every RunConfig field the Request has is copied by name, so a new one reaches the predictors unnamed here."""
        shared = {f.name: getattr(self, f.name) for f in dataclasses.fields(RunConfig) if hasattr(self, f.name)}
        return RunConfig(**{**shared, "phase": phase, "weights_built_in": weights_built_in})


@dataclass(frozen=True)
class Captured:
    """What a source gives the pipeline: its graph, the name to show, the precision its run resolved, what the
    report should say was assumed for the user, and the dtype its weights were built in ("auto" resolved)."""

    graph: Any
    name: str
    precision: str | None = None
    assumed: Mapping[str, str] | None = None
    weights_built_in: str | None = MEASURED_BUILD_DTYPE


def _known(fields: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(fields) - set(field_names()))
    if unknown:
        raise InvalidInputError(f"unknown option(s) {unknown!r}; valid: {', '.join(field_names())}")
    return fields


def field_names(group: str | None = None) -> tuple[str, ...]:
    """The Request's field names (those of one ``group``: "source", "run" or "report")."""
    return tuple(f.name for f in dataclasses.fields(Request) if group is None or f.metadata.get("group") == group)


def default(name: str) -> Any:
    """The one default of field ``name``."""
    return next(f.default for f in dataclasses.fields(Request) if f.name == name)


def request_signature(fn: Callable) -> Callable:
    """Give ``fn``, which takes the Request's fields as ``**options``, a signature that lists them with their
    defaults (for ``help()``, IDEs and ``inspect``), generated here so it can never disagree with the Request."""
    sig = inspect.signature(fn)
    own = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    taken = {p.name for p in own}
    fields = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
        for f in dataclasses.fields(Request)
        if f.name != "source" and f.name not in taken
    ]
    fn.__signature__ = sig.replace(parameters=[*own, *fields])  # type: ignore[attr-defined]
    return fn
