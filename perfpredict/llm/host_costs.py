"""The engine's host time per step, and whether it overlaps the GPU: the seam every serving model calls.

A serving engine's step is GPU work plus CPU work: schedule the step, prepare its inputs, sample, detokenize and
process its outputs, and (behind an API server) stream each new token to its client and take each new request.
Where that CPU work runs decides what it costs:

- ``serial``: in the engine's loop, in turn with the GPU (vLLM V0's scheduler, an API server in the engine's
  process): it adds to the step;
- ``beside_gpu``: in the engine's process while the GPU runs the step (vLLM 0.6's asynchronous output processing,
  SGLang's overlap scheduler): the step takes the longer of the GPU and it;
- ``other_process``: in another process (vLLM V1's frontend, vLLM 0.6's API server, SGLang's detokenizer): the
  step takes the longer of the whole engine loop and it (a pipeline is as fast as its slowest stage).

So a step with ``gpu_s`` of GPU time lasts ``max(serial + max(gpu_s, beside_gpu), other_process)``
(:meth:`HostStep.wall_s`). Each phase costs a fixed part per step, a part per running sequence, per prefill token,
per output token (streamed to a client), per new request, and, with more than one GPU worker, a fixed part per step
and a part per worker beyond the driver (the driver broadcasts each step's inputs to its workers, vLLM's
multiprocessing executor, and waits for the slowest); multi-step scheduling runs the scheduling phases once per
``every_steps`` steps. With pipeline parallelism the driver runs the host work of ``pp`` virtual engines in turn,
so a step is never shorter than pp times its engine-process part.

Who calls it: the scheduler (``scheduler.Scheduler``), per step, through :func:`host_cost`, which assembles the
phases of one engine version (``engine_versions``) with its fitted figures (``data/engine_host_costs.json``, each
with the public profile and the version it came from) and the frontend (``offline`` or ``openai-server``, in the
engine's process or its own)::

    cost = host_cost(get_version("vllm", "0.6"), frontend="openai-server")
    step = cost.step(seqs=64, prefill_tokens=0, output_tokens=64, workers=1)
    step.wall_s(gpu_s=0.008), step.exposed_s(0.008)   # the step's time, and the host's part of it
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError

WHERE = ("serial", "beside_gpu", "other_process")
FRONTENDS = ("offline", "openai-server")
FRONTEND_PROCESSES = ("engine", "separate")
COSTS_FILE = Path(__file__).resolve().parents[1] / "data" / "engine_host_costs.json"
TERMS = ("step_s", "per_seq_s", "per_prefill_token_s", "per_output_token_s", "per_new_request_s", "tp_step_s",
         "per_worker_s")  # fmt: skip


def _terms(seqs: int, prefill_tokens: int, output_tokens: int, new_requests: int, workers: int) -> tuple:
    """What each of :data:`TERMS` multiplies in one step."""
    return (1.0, seqs, prefill_tokens, output_tokens, new_requests, float(workers > 1), max(workers - 1, 0))


@dataclass(frozen=True)
class HostPhase:
    """One kind of CPU work per step, and where it runs (one of :data:`WHERE`)."""

    name: str
    where: str = "serial"
    step_s: float = 0.0
    per_seq_s: float = 0.0
    per_prefill_token_s: float = 0.0
    per_output_token_s: float = 0.0
    per_new_request_s: float = 0.0
    tp_step_s: float = 0.0  # once per step with several GPU workers (broadcasting the step to them, gathering back)
    per_worker_s: float = 0.0  # per GPU worker beyond the driver's own, per step
    every_steps: int = 1  # multi-step scheduling: the phase runs once per this many steps
    source: str = ""

    def __post_init__(self) -> None:
        if self.where not in WHERE:
            raise InvalidInputError(f"host phase {self.name!r}: where {self.where!r} is not one of {WHERE}")

    def seconds(self, seqs: int, prefill_tokens: int, output_tokens: int, new_requests: int, workers: int) -> float:
        x = _terms(seqs, prefill_tokens, output_tokens, new_requests, workers)
        return sum(getattr(self, t) * v for t, v in zip(TERMS, x)) / self.every_steps


@dataclass(frozen=True)
class HostStep:
    """The host's seconds in one step, by where they run (``HostCost.breakdown`` gives them by phase)."""

    serial_s: float = 0.0
    beside_gpu_s: float = 0.0
    other_process_s: float = 0.0

    def wall_s(self, gpu_s: float, pp: int = 1) -> float:
        """The step's wall time with ``gpu_s`` of GPU work, one of ``pp`` virtual engines (see the module
        docstring: the driver runs every virtual engine's engine-process part in turn)."""
        engine_s = self.serial_s + max(gpu_s, self.beside_gpu_s)
        return max(engine_s, pp * (self.serial_s + self.beside_gpu_s), self.other_process_s)

    def exposed_s(self, gpu_s: float, pp: int = 1) -> float:
        """The part of the step the GPU is idle, waiting for the host."""
        return self.wall_s(gpu_s, pp) - gpu_s


@dataclass(frozen=True)
class HostCost:
    """An engine's host phases (one version, one frontend): :meth:`step` is the seam."""

    phases: tuple[HostPhase, ...]
    label: str = ""

    def step(self, seqs: int, prefill_tokens: int = 0, output_tokens: int | None = None, workers: int = 1,
             new_requests: int = 0) -> HostStep:  # fmt: skip
        """The host time of a step running ``seqs`` sequences, computing ``prefill_tokens`` prompt tokens and
        emitting ``output_tokens`` new tokens (default: one per sequence), with ``new_requests`` admitted, driving
        ``workers`` GPU workers."""
        out = seqs if output_tokens is None else output_tokens
        x = _terms(seqs, prefill_tokens, out, new_requests, workers)
        serial, beside, other = (sum(c * v for c, v in zip(coef, x)) for coef in self._coefficients)
        return HostStep(serial, beside, other)

    def breakdown(self, seqs: int, prefill_tokens: int = 0, output_tokens: int | None = None, workers: int = 1,
                  new_requests: int = 0) -> tuple[tuple[str, str, float], ...]:  # fmt: skip
        """(phase, where, seconds) of each phase of such a step."""
        out = seqs if output_tokens is None else output_tokens
        return tuple(
            (p.name, p.where, p.seconds(seqs, prefill_tokens, out, new_requests, workers)) for p in self.phases
        )

    @cached_property
    def _coefficients(self) -> tuple[tuple[float, ...], ...]:
        """Per place (serial, beside the GPU, another process): the summed terms, each over its phase's
        ``every_steps`` (the scheduler asks this for every step: a few multiplications, not a loop of phases)."""
        out = []
        for where in WHERE:
            terms = [0.0] * len(TERMS)
            for p in (p for p in self.phases if p.where == where):
                terms = [t + getattr(p, name) / p.every_steps for t, name in zip(terms, TERMS)]
            out.append(tuple(terms))
        return tuple(out)

    def serial(self) -> HostCost:
        """The same work with nothing overlapped (what an engine without those features would pay)."""
        return replace(self, phases=tuple(replace(p, where="serial") for p in self.phases))

    def describe(self, workers: int = 1) -> str:
        """One line per place: the fixed (with ``workers`` GPU workers) and per-sequence parts of the phases running
        there."""
        out = []
        for where in WHERE:
            ps = [p for p in self.phases if p.where == where]
            if not ps:
                continue
            step = sum(p.seconds(0, 0, 0, 0, workers) for p in ps) * 1e3
            per_seq = sum((p.per_seq_s + p.per_output_token_s) / p.every_steps for p in ps) * 1e6
            names = ", ".join(p.name + (f" (every {p.every_steps} steps)" if p.every_steps > 1 else "") for p in ps)
            out.append(f"{where.replace('_', ' ')}: {names}: {step:.2f} ms + {per_seq:.1f} us per sequence")
        return "; ".join(out)


def serial_host(step_s: float, per_seq_s: float, per_prefill_token_s: float = 0.0, tp_step_s: float = 0.0,
                per_worker_s: float = 0.0, label: str = "serial host time") -> HostCost:  # fmt: skip
    """A host cost that is all serial, one phase (a fit's trial values, a test's engine): the simplest case."""
    phase = HostPhase("engine", "serial", step_s, per_seq_s, per_prefill_token_s, tp_step_s=tp_step_s,
                      per_worker_s=per_worker_s)  # fmt: skip
    return HostCost((phase,), label)


# -- the fitted figures -----------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _file() -> dict[str, Any]:
    try:
        return json.loads(COSTS_FILE.read_text())
    except (OSError, ValueError):
        return {}


def figures(key: str) -> dict[str, Any]:
    """The saved figures of one engine version (``engine-version``) or frontend (``frontend-<name>``)."""
    data = _file()
    if key not in data:
        raise InvalidInputError(
            f"no host-cost figures for {key!r} in {COSTS_FILE.name}; run `python benchmarks/engine_host_costs.py` "
            f"(known: {', '.join(sorted(k for k in data if not k.startswith('_')))})"
        )
    return data[key]


def save(values: dict[str, Any]) -> None:
    """Write figures (the fitting benchmarks'); the cached copy is dropped."""
    COSTS_FILE.write_text(json.dumps(_file() | values, indent=1, sort_keys=True) + "\n")
    _file.cache_clear()


def phases_of(entry: dict[str, Any]) -> tuple[HostPhase, ...]:
    return tuple(
        HostPhase(name, **{k: v for k, v in p.items() if k in (*TERMS, "where", "source")})
        for name, p in entry["phases"].items()
    )


@dataclass(frozen=True)
class HostChoices:
    """The options that move host work between places (each None: the version's default)."""

    frontend: str = "offline"
    frontend_process: str | None = None  # "engine" or "separate"
    async_output: bool | None = None  # vLLM 0.6's asynchronous output processing
    scheduler_steps: int = 1  # vLLM 0.6's multi-step scheduling
    async_scheduling: bool = False  # vLLM V1's --async-scheduling: the next step prepared during this one
    overrides: dict = field(default_factory=dict)  # phase name -> {term: seconds}: a refit's trial values


def host_cost(version: Any, choices: HostChoices | None = None) -> HostCost:
    """The host phases of ``version`` (an ``EngineVersion``) with ``choices`` applied."""
    c = choices or HostChoices()
    phases = list(phases_of(figures(version.key)))
    async_out = version.async_output if c.async_output is None else c.async_output
    out = []
    for p in phases:
        if p.name in c.overrides:
            p = replace(p, **c.overrides[p.name])
        if p.name == "process_outputs" and not (version.overlap_schedule or version.detokenize_in_frontend):
            p = replace(p, where="beside_gpu" if async_out else "serial")  # V0: in the engine's loop
        if c.scheduler_steps > 1 and p.name in ("schedule", "prepare_inputs"):
            p = replace(p, every_steps=c.scheduler_steps)
        if c.async_scheduling and p.where == "serial" and p.name in ("schedule", "prepare_inputs", "sample"):
            p = replace(p, where="beside_gpu")
        out.append(p)
    out.extend(frontend_phases(version, c))
    where = frontend_where(version, c)
    label = f"{version.label}; frontend {c.frontend}" + (f" ({where})" if c.frontend != "offline" else "")
    return HostCost(tuple(out), label)


def frontend_where(version: Any, c: HostChoices) -> str:
    process = c.frontend_process or version.frontend_process
    if process not in FRONTEND_PROCESSES:
        raise InvalidInputError(f"frontend process {process!r} is not one of {', '.join(FRONTEND_PROCESSES)}")
    return "serial" if process == "engine" else "other_process"


def frontend_phases(version: Any, c: HostChoices) -> list[HostPhase]:
    """The frontend's phases: an offline ``LLM.generate`` adds none (its detokenization is the engine's, or V1's
    output processor's, already counted); the OpenAI server streams every new token as a server-sent event and
    takes every request (validation, tokenization of the prompt), in its process."""
    if c.frontend not in FRONTENDS:
        raise InvalidInputError(f"frontend {c.frontend!r} is not one of {', '.join(FRONTENDS)}")
    if c.frontend == "offline":
        return []
    where = frontend_where(version, c)
    return [replace(p, where=where) for p in phases_of(figures(f"frontend-{c.frontend}"))]
