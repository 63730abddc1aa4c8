"""HF ``generate`` timed on this machine: time to first token, per-token decode time and tokens/s.

The GPU lease's generation rows (``benchmarks/gpu_lease.sh``, stage ``generation``), the measured side of
``perfpredict generate`` (the hf engine). A decoder is built from a shipped config with random weights (no network),
optionally with fields changed (``overrides``, such as fewer layers), and run with transformers' ``generate`` and a
static KV cache, greedy, every sequence forced to ``new_tokens`` (``min_new_tokens``), in one of two modes:

- ``eager``: ``disable_compile=True`` (transformers otherwise compiles the decode step of a static cache by itself);
- ``compiled``: transformers' own compilation of the decode step (``CompileConfig()``: inductor, ``reduce-overhead``,
  so CUDA graphs on a GPU), what a user of ``cache_implementation="static"`` gets; ``perfpredict generate``'s
  ``compiled_cuda_graph`` mode models it.

Timing (:func:`time_generation`), each call synced before and after and timed on the host clock:
one warm-up call of ``new_tokens`` (its time is ``first_call_ms``: in compiled mode it holds the compilation), one of
a single token, then ``ttft_reps`` single-token calls (``ttft_ms``: prefill plus the first token) and ``reps`` calls of
``new_tokens`` (``e2e_ms``). ``decode_ms_per_token = (e2e_ms - ttft_ms) / (new_tokens - 1)``, the mean time of one
decode step; ``tokens_per_s = batch * new_tokens / e2e``; ``decode_tokens_per_s = batch / decode step``. Medians over
the repetitions, each repetition kept beside them.

Rows (``<folder>/rows.jsonl``, one per :class:`GenSpec`, resumable by ``key``; schema in data/README.md): the spec,
the effective config (``config_json``, which ``perfpredict generate --config`` reads), the timings, the peak memory,
and the environment.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError

GEN_SCHEMA_VERSION = 1
GEN_FOLDER = "generation"
ROWS_JSONL = "rows.jsonl"
PLAN_JSON = "plan.json"
MODES = ("eager", "compiled")
#: seconds a first compiled call is assumed to take before one has been seen (the budget check's guess)
COMPILE_GUESS_S = 60.0


@dataclass(frozen=True)
class GenSpec:
    """One generation row: a shipped model (with ``overrides`` applied to its config), a mode and a workload."""

    model: str  # a shipped HF id: "Qwen/Qwen2-0.5B"
    overrides: tuple[tuple[str, Any], ...] = ()  # config fields changed: (("num_hidden_layers", 8),)
    mode: str = "eager"
    batch: int = 1
    prompt_tokens: int = 512
    new_tokens: int = 128
    dtype: str = "bfloat16"
    cache: str = "static"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise InvalidInputError(f"generation mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.new_tokens < 2 or self.prompt_tokens < 1 or self.batch < 1:
            raise InvalidInputError(
                f"generation spec needs batch >= 1, prompt_tokens >= 1 and new_tokens >= 2, got {self.batch}, "
                f"{self.prompt_tokens}, {self.new_tokens}"
            )

    def to_key(self) -> str:
        fields = {
            "model": self.model,
            "overrides": dict(self.overrides),
            "mode": self.mode,
            "batch": self.batch,
            "prompt_tokens": self.prompt_tokens,
            "new_tokens": self.new_tokens,
            "dtype": self.dtype,
            "cache": self.cache,
        }
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))

    @property
    def model_key(self) -> tuple[str, tuple[tuple[str, Any], ...], str]:
        """What one built model serves: the same weights run every mode and batch."""
        return (self.model, self.overrides, self.dtype)


def lease_plan(prompt_tokens: int = 512, new_tokens: int = 128, batches: Sequence[int] = (1, 8, 32)) -> list[GenSpec]:
    """The lease's generation rows, most valuable first: eager Qwen2-0.5B (its shipped config), eager Llama-2-7B's
    layers at 8 of its 32 (1.9B parameters: the same kernels per layer), then both compiled at the two smallest
    batches. ``benchmarks/generation.py`` predicts batch 1 at prompt 512 with 128 new tokens."""
    qwen = ("Qwen/Qwen2-0.5B", ())
    llama8 = ("meta-llama/Llama-2-7b-hf", (("num_hidden_layers", 8),))
    plan = []
    for (model, overrides), mode, bs in (
        (qwen, "eager", batches),
        (llama8, "eager", batches),
        (qwen, "compiled", batches[:2]),
        (llama8, "compiled", batches[:2]),
    ):
        plan += [GenSpec(model, overrides, mode, b, prompt_tokens, new_tokens) for b in bs]
    return plan


def dry_run_plan() -> list[GenSpec]:
    """A CPU-sized plan through the same code: Qwen2-0.5B's config shrunk to 2 layers of width 64."""
    tiny = (
        ("hidden_size", 64),
        ("intermediate_size", 128),
        ("num_attention_heads", 4),
        ("num_hidden_layers", 2),
        ("num_key_value_heads", 2),
        ("vocab_size", 512),
        ("bos_token_id", 1),
        ("eos_token_id", 2),
    )
    return [GenSpec("Qwen/Qwen2-0.5B", tiny, "eager", b, 16, 6, "float32") for b in (1, 2)]


def model_config(spec: GenSpec) -> dict[str, Any]:
    """The effective config fields: the shipped config's, with ``overrides`` applied."""
    from perfpredict.compiler_hooks.hf_frontend import raw_config

    data, name = raw_config(spec.model)
    data = {**data, **dict(spec.overrides)}
    if "max_window_layers" in data and "num_hidden_layers" in dict(spec.overrides):
        data["max_window_layers"] = data["num_hidden_layers"]  # Qwen2's sliding-window layer count follows depth
    data["_name_or_path"] = name
    return data


def build_model(spec: GenSpec, device: str) -> Any:
    """The causal LM of ``spec`` on ``device`` with random weights, in eval mode."""
    import torch
    import transformers

    from perfpredict.compiler_hooks.hf_frontend import config_from_dict, torch_dtype

    fields = model_config(spec)
    config = config_from_dict({k: v for k, v in fields.items() if k != "_name_or_path"}, fields["_name_or_path"])
    torch.manual_seed(0)  # the same random weights each time a spec's model is built
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch_dtype(spec.dtype))
    return model.eval()


def _generate_kwargs(spec: GenSpec, device: str, compile_backend: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"do_sample": False, "cache_implementation": spec.cache, "pad_token_id": 0}
    if spec.mode == "eager":
        kwargs["disable_compile"] = True
    else:
        import transformers

        config = transformers.CompileConfig(backend=compile_backend)
        if device == "cpu":
            config._compile_all_devices = True  # transformers compiles on accelerators only unless told
        kwargs["compile_config"] = config
    return kwargs


def compile_settings(spec: GenSpec, compile_backend: str) -> dict[str, Any] | None:
    """The compiled mode's CompileConfig fields, as recorded in the row."""
    if spec.mode == "eager":
        return None
    import transformers

    config = transformers.CompileConfig(backend=compile_backend)
    return {k: getattr(config, k, None) for k in ("fullgraph", "dynamic", "backend", "mode")}


def perfpredict_mode(spec: GenSpec, compile_backend: str) -> str:
    """The ``perfpredict generate --mode`` that models this run."""
    if spec.mode == "eager":
        return "eager"
    settings = compile_settings(spec, compile_backend) or {}
    graphs = settings.get("mode") == "reduce-overhead" and settings.get("backend") == "inductor"
    return "compiled_cuda_graph" if graphs else "compiled"


def time_generation(
    model: Any, spec: GenSpec, device: str, *, reps: int = 2, ttft_reps: int = 3, compile_backend: str = "inductor"
) -> dict[str, Any]:
    """The timings of one spec on a built model (see the module docstring); raises on a short output."""
    import torch

    from perfpredict.profiling.timing import synchronizer

    sync = synchronizer(device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    vocab = int(model.config.vocab_size)
    ids = torch.randint(0, vocab, (spec.batch, spec.prompt_tokens), generator=gen).to(device)
    mask = torch.ones_like(ids)
    kwargs = _generate_kwargs(spec, device, compile_backend)

    def call(new: int) -> float:
        sync()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, **kwargs)
        sync()
        ms = (time.perf_counter() - t0) * 1e3
        if out.shape[-1] != spec.prompt_tokens + new:
            raise RuntimeError(f"generate returned {out.shape[-1] - spec.prompt_tokens} new tokens, not {new}")
        return ms

    first_ms = call(spec.new_tokens)  # warm-up; in compiled mode, the compilation
    call(1)
    if device != "cpu":
        torch.cuda.reset_peak_memory_stats(device)
    ttft = [call(1) for _ in range(max(1, ttft_reps))]
    e2e = [call(spec.new_tokens) for _ in range(max(1, reps))]
    ttft_ms, e2e_ms = statistics.median(ttft), statistics.median(e2e)
    step_ms = max(e2e_ms - ttft_ms, 0.0) / (spec.new_tokens - 1)
    return {
        "first_call_ms": first_ms,
        "ttft_ms": ttft_ms,
        "ttft_ms_reps": ttft,
        "e2e_ms": e2e_ms,
        "e2e_ms_reps": e2e,
        "decode_ms_per_token": step_ms,
        "tokens_per_s": spec.batch * spec.new_tokens / (e2e_ms / 1e3),
        "decode_tokens_per_s": spec.batch / (step_ms / 1e3) if step_ms > 0 else None,
        "peak_memory_bytes": int(torch.cuda.max_memory_allocated(device)) if device != "cpu" else None,
    }


def _env(device: str) -> dict[str, Any]:
    import platform

    import torch
    import transformers

    return {
        "env_device_name": torch.cuda.get_device_name(device) if device != "cpu" else platform.processor() or "cpu",
        "env_torch_version": torch.__version__,
        "env_cuda_version": torch.version.cuda,
        "env_transformers_version": transformers.__version__,
        "env_python_version": platform.python_version(),
    }


def spec_row(spec: GenSpec, label: str, device: str) -> dict[str, Any]:
    """The identity columns of a row (before it is measured)."""
    return {
        "schema_version": GEN_SCHEMA_VERSION,
        "row_kind": "generation",
        "key": spec.to_key(),
        "device": label,
        "device_type": "cpu" if device == "cpu" else "cuda",
        "model": spec.model,
        "config_overrides": json.dumps(dict(spec.overrides), sort_keys=True),
        "mode": spec.mode,
        "cache": spec.cache,
        "dtype": spec.dtype,
        "batch_size": spec.batch,
        "prompt_tokens": spec.prompt_tokens,
        "new_tokens": spec.new_tokens,
        "started_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


@dataclass
class GenSummary:
    measured: int = 0
    errors: int = 0
    skipped_existing: int = 0
    skipped_budget: list[str] = field(default_factory=list)
    stopped_by: str = "plan done"


def collect_generation(
    folder: Path,
    specs: Sequence[GenSpec],
    device: str,
    label: str,
    *,
    budget_s: float | None = None,
    reps: int = 2,
    ttft_reps: int = 3,
    compile_backend: str = "inductor",
    clock: Callable[[], float] = time.monotonic,
) -> GenSummary:
    """Measure ``specs`` in order into ``folder/rows.jsonl`` (resumable: keys already there are skipped). A spec
    whose expected time (its model and mode's last row, scaled by the batch; a compile guess before the first
    compiled row) no longer fits ``budget_s`` is skipped, so later, cheaper specs still run."""
    from perfpredict.profiling import dataset as ds

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ROWS_JSONL
    done = {r["key"] for r in ds.read_jsonl(path, required=("key",))[0]}
    summary = GenSummary()
    t0 = clock()
    built: dict[Any, Any] = {}
    seen_s: dict[tuple[Any, str], tuple[float, int]] = {}  # (model, mode) -> (seconds, batch) of the last row
    env = _env(device)
    with ds.JsonlAppender(path) as out:
        for spec in specs:
            if spec.to_key() in done:
                summary.skipped_existing += 1
                continue
            left = None if budget_s is None else budget_s - (clock() - t0)
            expect = _expected_s(spec, seen_s)
            if left is not None and left < expect:
                summary.skipped_budget.append(spec.to_key())
                summary.stopped_by = "budget"
                continue
            row = spec_row(spec, label, device)
            start = clock()
            try:
                if spec.model_key not in built:
                    _release(built, device)
                    built[spec.model_key] = build_model(spec, device)
                model = built[spec.model_key]
                row["param_count"] = sum(p.numel() for p in model.parameters())
                row["weight_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
                row["config_json"] = json.dumps(model_config(spec), sort_keys=True)
                row["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
                row["compile_config"] = json.dumps(compile_settings(spec, compile_backend))
                row["perfpredict_mode"] = perfpredict_mode(spec, compile_backend)
                row.update(
                    time_generation(
                        model, spec, device, reps=reps, ttft_reps=ttft_reps, compile_backend=compile_backend
                    )
                )
                row.update(status="ok", error=None)
                summary.measured += 1
            except Exception as err:  # noqa: BLE001 - failures are data: the spec ends as a row
                row.update(status="oom" if "out of memory" in str(err).lower() else "error")
                row["error"] = f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"
                summary.errors += 1
            row["row_seconds"] = round(clock() - start, 3)
            row.update(env)
            out.append(row)
            seen_s[(spec.model_key, spec.mode)] = (row["row_seconds"], spec.batch)
            print(_line(row), file=sys.stderr, flush=True)
    return summary


def _expected_s(spec: GenSpec, seen: dict[tuple[Any, str], tuple[float, int]]) -> float:
    """A spec's expected seconds: the last row of its model and mode, scaled by the batch (decode is host-bound at
    small batches, so at most linearly); before any, a compile guess for compiled mode and nothing for eager."""
    last = seen.get((spec.model_key, spec.mode))
    if last is None:
        return COMPILE_GUESS_S if spec.mode == "compiled" else 0.0
    seconds, batch = last
    return seconds * max(1.0, (spec.batch / batch) ** 0.5)


def _release(built: dict[Any, Any], device: str) -> None:
    built.clear()
    if device != "cpu":
        import torch

        torch.cuda.empty_cache()


def _line(row: dict[str, Any]) -> str:
    what = f"generation: {row['model']} {row['config_overrides']} {row['mode']} batch {row['batch_size']}"
    if row["status"] != "ok":
        return f"{what}: {row['status']} ({row['error']})"
    return (
        f"{what}: ttft {row['ttft_ms']:.1f} ms, {row['decode_ms_per_token']:.2f} ms/token, "
        f"{row['tokens_per_s']:.0f} tokens/s (first call {row['first_call_ms'] / 1e3:.1f} s) in {row['row_seconds']:.0f} s"
    )
