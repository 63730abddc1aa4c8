"""The web page's question and answer, without the web: one model, several devices, one comparison table.

``compare`` captures the model once per run dtype (through the CLI's graph cache, ``hf_capture.cached``) and asks
every device the same question with the default model, so a second identical request is answered from the cache.
A model is a shipped HuggingFace id, a config.json's fields (parsed as JSON: no pickle, no remote code) or an ONNX
file. Every failure the user can fix is a ``PerfPredictError`` with one line that says what to do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.units import MIB
from perfpredict.request import DEFAULT_DEVICE, EVERY_OP, Request, field_names

MAX_CONFIG_BYTES = MIB  # a config.json is a few KB; anything near this is not one
MAX_ONNX_BYTES = 512 << 20
PHASES = ("inference", "training", "generation")


@dataclass(frozen=True)
class Question:
    model: str | dict | None = None  # a shipped id, or a config.json's fields
    onnx_path: str | None = None
    phase: str = "inference"
    batch: int = 1
    seq: int | None = None
    dtype: str | None = None
    precision: str | None = None
    devices: tuple[str, ...] = (DEFAULT_DEVICE,)
    max_latency_ms: float | None = None
    min_throughput_per_s: float | None = None
    new_tokens: int = 128
    parallel: dict | None = None  # {"dp", "tp", "pp", "fsdp", "cp", ...}: one step over GPUs (perfpredict.parallel)
    engine: str = "auto"  # generation: a serving engine (vllm, sglang, ...), "hf" (transformers' generate) or "auto"
    engine_version: str | None = None  # generation: the serving engine's version; None: its current one
    frontend: str = "offline"  # generation: "offline" or "openai-server"
    # how a step runs: eager, cuda_graph, compiled, compiled_cuda_graph; None: eager for a step, and for generation
    # the engine's own (as `perfpredict generate` without --mode: a mode given picks transformers' generate)
    mode: str | None = None
    weights: str | None = None  # generation: the layers' weight format (llm.weight_formats.FORMATS); None: the dtype
    host: str | None = None  # the host profile (predictors.host_model.HOSTS or "calibrated"); None: the default
    attn_implementation: str | None = None  # a HuggingFace model's attention (sdpa, eager, flash_attention_2)
    disable_custom_all_reduce: bool = False  # generation (vLLM-class): NCCL for every all-reduce
    enable_expert_parallel: bool = False  # generation (vLLM-class): a MoE's experts split whole over the tp GPUs
    # Request fields the page has no input for (optimizer, tf32, predictor, ...), for callers of compare()
    options: Mapping[str, Any] = field(default_factory=dict)

    def request(self, device: Any) -> Request:
        """The Request of one step (inference or training) of this question on ``device``: the fields named as
        the Request's are copied across by name, so a new run option on the page needs no code here."""
        from perfpredict.model_sources import HFSource, OnnxSource

        if self.onnx_path:
            source: Any = OnnxSource(self.onnx_path)
        elif self.model:
            source = HFSource(self.model)
        else:
            raise InvalidInputError("give a model: a shipped HuggingFace id, or upload a config.json or an ONNX file")
        fields = {name: getattr(self, name) for name in field_names() if hasattr(self, name)}
        fields.update(self.options)
        fields.update(
            source=source,
            device=device,
            mode=self.mode or self.options.get("mode") or Request().mode,
            parallel=self.parallel or None,  # compare() reads an empty plan as one GPU: so does the Request
        )
        return Request.of(**fields)


@dataclass(frozen=True)
class Answer:
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    reports: tuple[Any, ...] = ()  # PerfReport or GenerationReport, one per device
    graph: Any = None  # the first device's graph (for the roofline plot)
    notes: tuple[str, ...] = field(default_factory=tuple)


def config_from_upload(data: bytes) -> dict:
    """The fields of an uploaded config.json, or one line saying what is wrong with it."""
    if len(data) > MAX_CONFIG_BYTES:
        raise InvalidInputError(f"the config is {len(data):,} bytes; a HuggingFace config.json is a few KB")
    try:
        fields = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InvalidInputError(f"the uploaded file is not a JSON config.json ({err})") from err
    if not isinstance(fields, dict) or "model_type" not in fields:
        raise InvalidInputError("the uploaded JSON is not a HuggingFace config: it has no 'model_type' field")
    return fields


def compare(q: Question) -> Answer:
    """The comparison table of ``q`` across its devices."""
    from perfpredict.compiler_hooks.hf_frontend import resolve_id
    from perfpredict.hardware.devices import get_device

    if isinstance(q.model, str) and resolve_id(q.model) is None:  # never a path on the server's disk
        raise InvalidInputError(f"{q.model!r} is not a shipped model id; upload its config.json instead")

    if q.phase not in PHASES:
        raise InvalidInputError(f"phase {q.phase!r} is not one of {', '.join(PHASES)}")
    if not q.devices:
        raise InvalidInputError("choose at least one device")
    if q.batch < 1 or (q.seq is not None and q.seq < 1):
        raise InvalidInputError("batch and sequence length must be at least 1")
    devices = [get_device(d) for d in q.devices]  # an unknown name fails here, with close names
    if q.phase == "generation":
        return _generation(q, devices, *_generation_gpus(q.parallel))
    if q.parallel:
        return _parallel(q, devices)
    return _step(q, devices)


def _parallel(q: Question, devices: list) -> Answer:
    """One step over ``q.parallel``'s GPUs, per device: step time, communication, bubble, memory per GPU."""
    from perfpredict.parallel.build import VALIDATION_FIGURES
    from perfpredict.pipeline import predict
    from perfpredict.render.formats import fmt_bytes, fmt_rate, fmt_share, fmt_time_ms

    reports = [predict(q.request(device)) for device in devices]
    columns = (
        "device",
        "GPUs",
        "step",
        "throughput",
        "exposed communication",
        "pipeline bubble",
        "memory per GPU",
        "fits",
        "scaling efficiency",
        "bound",
        "interconnect",
        "tokens/s per GPU",
        "MFU",
        "HFU",
    )
    rows = tuple(
        (
            r.device,
            str(r.world_size),
            fmt_time_ms(r.step_ms),
            fmt_rate(r.throughput_per_s),
            fmt_share(r.exposed_share),
            fmt_share(r.bubble_fraction),
            fmt_bytes(r.peak_memory_bytes),
            "yes" if r.fits_in_memory else "NO",
            fmt_share(r.scaling_efficiency),
            r.bound or "-",
            r.interconnect,
            *_trainer_cells(r),
        )
        for r in reports
    )
    note = (
        f"{reports[0].world_size} GPUs; the batch is one GPU's micro-batch (global batch "
        f"{reports[0].global_batch_size}). Multi-GPU step times are scored on {VALIDATION_FIGURES} (docs: training "
        "at scale, Validation)."
    )
    host_notes = tuple(f"{r.device}: {n}" for r in reports for n in r.notes)
    return Answer(columns, rows, tuple(reports), None, (note, *host_notes))


def _trainer_cells(r: Any) -> tuple[str, str, str]:
    """Tokens/s per GPU, MFU and HFU of a training step ("-" where they do not apply)."""
    t = getattr(r, "trainer", None)
    if t is None or r.phase != "training":
        return ("-", "-", "-")
    rate = f"{t.tokens_per_s_per_gpu:,.0f}" if t.tokens_per_s_per_gpu is not None else "-"
    return (rate, f"{t.mfu:.1%}", f"{t.hfu:.1%}")


def _step(q: Question, devices: list) -> Answer:
    from perfpredict.pipeline import predict_with_graph
    from perfpredict.render.formats import fmt_bytes, fmt_carbon_g, fmt_energy_j, fmt_rate, fmt_time_ms, fmt_usd

    reports, first_graph = [], None
    for device in devices:
        request = q.request(device)
        if "top_ops" not in q.options:  # the roofline draws every op at its predicted rate: keep every op's row
            request = request.but(top_ops=EVERY_OP)
        report, graph = predict_with_graph(request)
        first_graph = first_graph or graph
        reports.append(report)
    per = "1k inferences" if q.phase == "inference" else "training run"
    columns = (
        "device",
        "latency",
        "80% interval",
        "throughput",
        "peak memory",
        "fits",
        "energy/sample",
        "carbon",
        f"cost per {per}",
        "MIG pick",
        "bound",
        "predictor",
    )
    rows = []
    for r in reports:
        lat = r.latency_ms
        ood = " (outside its data)" if lat.ood is not None and lat.ood > 3 else ""
        rows.append(
            (
                r.device,
                fmt_time_ms(lat.value),
                f"{fmt_time_ms(lat.low)} - {fmt_time_ms(lat.high)}",
                fmt_rate(r.throughput_per_s.value),
                fmt_bytes(r.peak_memory_bytes.value),
                "yes" if r.fits_in_memory else "NO",
                fmt_energy_j(r.energy_per_sample_j.value),
                fmt_carbon_g(r.carbon_g.value),
                fmt_usd(r.cost_usd.value),
                (r.mig.recommended or "none") if r.mig else "-",
                r.timeline.bound if r.timeline is not None and r.timeline.bound else "-",
                f"{r.predictor}{ood}",
            )
        )
    return Answer(columns, tuple(rows), tuple(reports), first_graph)


def _generation_gpus(plan: dict | None) -> tuple[int, int]:
    """Generation runs over tensor-parallel GPUs in pipeline stages: the plan's (tp, pp), refusing data
    parallelism and FSDP."""
    plan = plan or {}
    if plan.get("dp", 1) not in (1, None, False) or plan.get("fsdp"):
        raise InvalidInputError("generation runs over tensor-parallel GPUs in pipeline stages: keep tp and pp, "
                                "clear dp and FSDP")  # fmt: skip
    return int(plan.get("tp") or 1), int(plan.get("pp") or 1)


def _engine_config(q: Question) -> Any:
    """The vLLM settings the page asks for (None: the engine's defaults)."""
    if not (q.disable_custom_all_reduce or q.enable_expert_parallel):
        return None
    from perfpredict.llm.vllm_config import EngineConfig

    return EngineConfig(
        disable_custom_all_reduce=q.disable_custom_all_reduce, enable_expert_parallel=q.enable_expert_parallel
    )


def _generation(q: Question, devices: list, tp: int = 1, pp: int = 1) -> Answer:
    """``perfpredict generate``'s answer on each device, through the same on-disk answer cache (a config uploaded
    as fields is answered afresh)."""
    from perfpredict.llm.answer_cache import cached_generation
    from perfpredict.render.formats import fmt_bytes, fmt_rate, fmt_time_ms, fmt_usd

    if isinstance(q.model, dict):
        from perfpredict.compiler_hooks.hf_frontend import config_from_dict

        source: Any = config_from_dict(q.model, name=str(q.model.get("model_type")))
    elif q.model:
        source = q.model
    else:
        raise InvalidInputError("generation needs a HuggingFace LLM: a shipped id or an uploaded config.json")
    if q.new_tokens < 1:
        raise InvalidInputError("new tokens must be at least 1; generate at least one token")
    from perfpredict.llm.generation_options import EngineOptions, Generation

    # the page's one generation question, built once; each device's answer is the CLI's for it
    engine = EngineOptions(engine=q.engine, version=q.engine_version, frontend=q.frontend, settings=_engine_config(q))
    question = Generation(prompt_tokens=q.seq or 512, new_tokens=q.new_tokens, batch=q.batch, dtype=q.dtype,
                          weights=q.weights, tp=tp, pp=pp, mode=q.mode, host=q.host,
                          attn_implementation=q.attn_implementation, engine=engine)  # fmt: skip
    reports = [cached_generation(source, question.but(device=d.name)) for d in devices]
    columns = (
        "device",
        "engine",
        "weights",
        "time to first token",
        "per output token",
        "tokens/s",
        "memory per GPU",
        "fits",
        "largest batch",
        "cost per 1M tokens",
    )
    rows = tuple(
        (
            f"{r.tp * r.pp} x {r.device}" if r.tp * r.pp > 1 else r.device,
            r.engine_label or f"{r.engine} {r.engine_version}" if r.serving else f"transformers ({r.mode})",
            r.weights,
            fmt_time_ms(r.ttft_ms),
            fmt_time_ms(r.tpot_mean_ms),
            fmt_rate(r.tokens_per_s, "tokens/s"),
            fmt_bytes(r.peak_memory_bytes),
            "yes" if r.fits else "NO",
            f"{r.max_batch:,}",
            "-" if r.cost_per_million_tokens_usd is None else fmt_usd(r.cost_per_million_tokens_usd),
        )
        for r in reports
    )
    notes = (f"prompt {reports[0].prompt_tokens} tokens, {reports[0].new_tokens} new, batch {reports[0].batch}; "
             f"host: {reports[0].assumptions.get('host', '-')}",)  # fmt: skip
    return Answer(columns, rows, tuple(reports), None, notes)
