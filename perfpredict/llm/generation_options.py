"""One generation question as one frozen value: ``Generation`` (the workload) holding ``EngineOptions`` (the engine).

Every door builds one ``Generation`` and hands it down whole: ``perfpredict generate`` (its flags' ``dest`` are
the field names, their help and choices come from the fields' metadata), ``perfpredict.predict_generation(model,
**fields)`` (keywords are the field names), and the web page's generation view. The answer cache keys on it. A new
generation option is a field here (with ``help`` and, where it has them, ``choices`` in its metadata); the doors
pick it up from :func:`field_help` and :meth:`Generation.of`. (Issue 48's ``Request`` will hold this as its
generation workload.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from perfpredict.compiler_hooks.attention_choice import ATTN_IMPLEMENTATIONS
from perfpredict.core.errors import InvalidInputError
from perfpredict.llm.engine_versions import ENGINES
from perfpredict.llm.host_costs import FRONTEND_PROCESSES, FRONTENDS
from perfpredict.request import DEFAULT_DEVICE


def _meta(help: str, choices: tuple | None = None, flag: str | None = None) -> dict:
    return {"help": help, "choices": choices, "flag": flag}


@dataclass(frozen=True)
class EngineOptions:
    """Which engine answers, at which version, behind which frontend, and its settings."""

    engine: str = field(default="auto", metadata=_meta(
        "vllm, sglang, trtllm, mii or llamacpp: a serving engine; hf: transformers' generate; auto (default): "
        "vllm for a decoder it covers on a GPU, hf when --mode, --cache or --quant-kernel is given", ENGINES))  # fmt: skip
    version: str | None = field(default=None, metadata=_meta(
        "the engine's version (default: its current one; vllm: 0.5 (0.4-0.5), 0.6, 0.8, 0.10 (V1, the default))",
        flag="--engine-version"))  # fmt: skip
    frontend: str = field(default="offline", metadata=_meta(
        "offline: the engine's generate call in a script; openai-server: behind its OpenAI-compatible API server, "
        "streaming every token", FRONTENDS))  # fmt: skip
    frontend_process: str | None = field(default=None, metadata=_meta(
        "where the API server runs: in the engine's process (vLLM 0.4-0.5) or a separate one (vLLM 0.6 on, SGLang, "
        "TensorRT-LLM); default: the version's", FRONTEND_PROCESSES))  # fmt: skip
    scheduler_steps: int = field(
        default=1,
        metadata=_meta("vLLM 0.6's multi-step scheduling (--num-scheduler-steps): schedule once per this many steps"),
    )
    async_output: bool | None = field(
        default=None, metadata=_meta("vLLM 0.6's asynchronous output processing (default on in 0.6; off in 0.4-0.5)")
    )
    async_scheduling: bool = field(
        default=False,
        metadata=_meta("vLLM V1's --async-scheduling: the next step scheduled while this one runs on the GPU"),
    )
    settings: Any = field(
        default=None,
        metadata=_meta(
            "the engine's own settings, a ``vllm_config.EngineConfig`` (block size, memory utilization, ...)"
        ),
    )

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise InvalidInputError(f"engine {self.engine!r} is not one of {', '.join(ENGINES)}")
        if self.frontend not in FRONTENDS:
            raise InvalidInputError(f"frontend {self.frontend!r} is not one of {', '.join(FRONTENDS)}")
        if self.frontend_process is not None and self.frontend_process not in FRONTEND_PROCESSES:
            raise InvalidInputError(
                f"frontend process {self.frontend_process!r} is not one of {', '.join(FRONTEND_PROCESSES)}"
            )
        if not isinstance(self.scheduler_steps, int) or self.scheduler_steps < 1:
            raise InvalidInputError(
                f"scheduler steps {self.scheduler_steps!r} (--num-scheduler-steps) must be a whole number of at least 1"
            )

    @property
    def serving(self) -> bool:
        """Whether a serving engine answers (not transformers' generate)."""
        return self.engine not in ("auto", "hf")

    def host_choices(self):
        from perfpredict.llm.host_costs import HostChoices

        return HostChoices(self.frontend, self.frontend_process, self.async_output, self.scheduler_steps,
                           self.async_scheduling)  # fmt: skip


@dataclass(frozen=True)
class Generation:
    """One generation question: lengths, batch, device, numerics, parallelism, host and engine."""

    prompt_tokens: int = field(default=512, metadata=_meta("prompt tokens per sequence"))
    new_tokens: int = field(default=128, metadata=_meta("tokens generated per sequence"))
    batch: int = field(default=1, metadata=_meta("sequences generated together"))
    device: str = field(default=DEFAULT_DEVICE, metadata=_meta("catalog device name (see `perfpredict devices`)"))
    dtype: str | None = field(default=None, metadata=_meta(
        "compute dtype (default: the config's torch_dtype, else bf16 where the device has it)",
        ("bfloat16", "float16", "float32")))  # fmt: skip
    weights: str | None = field(
        default=None,
        metadata=_meta("weight format of the layers (default: the compute dtype); GGUF formats with llamacpp"),
    )
    kv_dtype: str | None = field(
        default=None,
        metadata=_meta(
            "KV cache dtype (default: the compute dtype)", ("bfloat16", "float16", "float32", "float8_e4m3fn")
        ),
    )
    tp: int = field(default=1, metadata=_meta("tensor-parallel GPUs (memory is then per GPU)"))
    pp: int = field(default=1, metadata=_meta(
        "a serving engine's pipeline stages, each of --tp GPUs (vLLM's virtual engines; memory is per GPU)"))  # fmt: skip
    mode: str | None = field(default=None, metadata=_meta(
        "transformers' generate: eager (default), cuda_graph, compiled, compiled_cuda_graph",
        ("eager", "cuda_graph", "compiled", "compiled_cuda_graph")))  # fmt: skip
    cache: str | None = field(
        default=None,
        metadata=_meta("transformers' generate: HF cache object, dynamic or static", ("dynamic", "static")),
    )
    quant_kernel: str | None = field(
        default=None,
        metadata=_meta("transformers' generate: how int8/nf4/int4 weights are widened", ("fused", "dequantize")),
    )
    attn_implementation: str | None = field(default=None, metadata=_meta(
        "transformers' generate: the attention it runs (default: the model's own); a serving engine runs its own",
        ATTN_IMPLEMENTATIONS))  # fmt: skip
    host: str | None = field(
        default=None, metadata=_meta("the host CPU that drives the GPU (a profile name, or calibrated)")
    )
    price_usd_per_hour: float | None = field(
        default=None, metadata=_meta("price per GPU-hour (default: the catalog's)")
    )
    engine: EngineOptions = field(default_factory=EngineOptions, metadata=_meta("the engine"))

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "new_tokens", "batch", "tp", "pp"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidInputError(f"--{name.replace('_', '-')} {value!r} must be a whole number of at least 1")

    @classmethod
    def of(cls, **options: Any) -> Generation:
        """A Generation from keywords: its own fields, and the engine's (``engine`` a name or EngineOptions,
        ``engine_version``/``version``, ``frontend``, ..., ``engine_config`` the engine's settings)."""
        own = {f.name for f in dataclasses.fields(cls)} - {"engine"}
        engine_fields = {f.name for f in dataclasses.fields(EngineOptions)}
        renamed = {"engine_version": "version", "engine_config": "settings"}
        given, engine = {}, {}
        for key, value in options.items():
            name = renamed.get(key, key)
            if key == "engine" and isinstance(value, EngineOptions):
                engine = {**dataclasses.asdict(value), "settings": value.settings, **engine}
            elif name in own:
                given[name] = value
            elif name in engine_fields:
                engine[name] = value
            else:
                valid = sorted(own | engine_fields | set(renamed))
                raise InvalidInputError(f"unknown generation option {key!r}; valid: {', '.join(valid)}")
        return cls(**given, engine=EngineOptions(**engine))

    def but(self, **changes: Any) -> Generation:
        """This question with ``changes`` (Generation or EngineOptions field names)."""
        engine = {k: v for k, v in changes.items() if k in {f.name for f in dataclasses.fields(EngineOptions)}}
        own = {k: v for k, v in changes.items() if k not in engine}
        base = dataclasses.replace(self, **own) if own else self
        return dataclasses.replace(base, engine=dataclasses.replace(base.engine, **engine)) if engine else base


def field_help(cls: type) -> dict[str, dict]:
    """Each field's metadata (help, choices, flag) by name: what the CLI's flags and the web page's fields say."""
    return {f.name: dict(f.metadata) for f in dataclasses.fields(cls)}
