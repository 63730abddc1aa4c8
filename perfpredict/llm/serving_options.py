"""A server under load, as frozen values: the request stream, the SLO, prefix caching and speculative decoding.

Each is a field of one :class:`Serving` question (with the device, tp, numerics and engine settings a
``generate`` question has), so every door builds the same value: ``perfpredict serve-sim`` (its flags are the
fields' names, their help the fields' metadata), ``perfpredict.predict_serving(model, **fields)`` and the web
page's serving view. :meth:`Serving.of` takes the fields flat (``rate_per_s=4, ttft_ms=2000, ...``) and puts each
in its place.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from perfpredict.core.errors import InvalidInputError
from perfpredict.llm.engine_versions import SERVING_ENGINES
from perfpredict.llm.host_costs import FRONTEND_PROCESSES, FRONTENDS
from perfpredict.llm.weight_formats import FORMATS
from perfpredict.request import DEFAULT_DEVICE

ARRIVALS = ("poisson", "uniform", "burst")
LENGTHS = ("fixed", "sharegpt", "file")
SPEC_METHODS = ("draft", "ngram")
#: acceptance rates a speculation method is assumed to reach when none is given (docs/llm.md says why):
#: a draft model of the target's family, Leviathan et al. 2023 (ICML), Table 3: 0.6-0.8 for neural drafts;
#: n-gram prompt lookup only hits where the output repeats the prompt: an assumption for chat, not a measurement
DEFAULT_ACCEPTANCE = {"draft": 0.7, "ngram": 0.3}
DEFAULT_SPEC_TOKENS = 5  # num_speculative_tokens in vLLM's speculative-decoding examples


def meta(help: str, choices: tuple | None = None, flag: str | None = None) -> dict:
    """A field's metadata: its help line, its choices and its flag where it is not ``--field-name``."""
    return {"help": help, "choices": choices, "flag": flag}


def _positive(name: str, value: Any, *, whole: bool = False, zero: bool = False) -> None:
    bad = isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
    bad = bad or (whole and not isinstance(value, int)) or value < 0 or (value == 0 and not zero)
    if bad:
        least = "0" if zero else "above 0"
        raise InvalidInputError(f"{name} {value!r} must be a {'whole ' if whole else ''}number {least}")


@dataclass(frozen=True)
class RequestStream:
    """The load: when requests arrive and how long their prompts and outputs are."""

    rate_per_s: float | None = field(default=None, metadata=meta(
        "requests per second (with --arrival poisson or uniform); left out: all arrive at t = 0",
        flag="--request-rate"))  # fmt: skip
    arrival: str | None = field(default=None, metadata=meta(
        "poisson (seeded exponential gaps), uniform (evenly spaced) or burst (all at t = 0); default: poisson with "
        "a rate, burst without", ARRIVALS))  # fmt: skip
    num_requests: int = field(default=1000, metadata=meta("requests in the stream"))
    seed: int = field(default=0, metadata=meta("seed of the arrival gaps and the sampled lengths"))
    lengths: str = field(default="fixed", metadata=meta(
        "fixed (--prompt-tokens, --new-tokens), sharegpt (a lognormal fit to ShareGPT's published means) or file "
        "(--lengths-file)", LENGTHS))  # fmt: skip
    prompt_tokens: int = field(default=512, metadata=meta("prompt tokens per request (--lengths fixed)"))
    new_tokens: int = field(default=128, metadata=meta("output tokens per request (--lengths fixed)"))
    lengths_file: str | None = field(default=None, metadata=meta(
        "a CSV or JSONL of prompt_tokens and output_tokens per request (and arrival_s, to replay a trace)"))  # fmt: skip

    def __post_init__(self) -> None:
        if self.arrival is not None and self.arrival not in ARRIVALS:
            raise InvalidInputError(f"arrival {self.arrival!r} is not one of {', '.join(ARRIVALS)}")
        if self.lengths not in LENGTHS:
            raise InvalidInputError(f"lengths {self.lengths!r} is not one of {', '.join(LENGTHS)}")
        if self.rate_per_s is not None:
            _positive("--request-rate", self.rate_per_s)
        if self.resolved_arrival != "burst" and self.rate_per_s is None:
            raise InvalidInputError(f"--arrival {self.arrival} needs --request-rate R (requests per second)")
        for name in ("num_requests", "prompt_tokens", "new_tokens"):
            _positive(f"--{name.replace('_', '-')}", getattr(self, name), whole=True)
        _positive("--seed", self.seed, whole=True, zero=True)
        if (self.lengths == "file") != (self.lengths_file is not None):
            raise InvalidInputError("--lengths file and --lengths-file PATH go together: give both, or neither")

    @property
    def resolved_arrival(self) -> str:
        return self.arrival or ("poisson" if self.rate_per_s is not None else "burst")

    def describe(self) -> str:
        arrival = self.resolved_arrival
        when = "all at t = 0" if arrival == "burst" else f"{arrival} at {self.rate_per_s:g} requests/s"
        return f"{self.num_requests:,} requests, {when} (seed {self.seed})"


@dataclass(frozen=True)
class Slo:
    """Targets a request must meet to count in the goodput, and the percentile a deployment must meet them at."""

    ttft_ms: float | None = field(default=None, metadata=meta("time-to-first-token target, ms (none: no target)"))
    tpot_ms: float | None = field(default=None, metadata=meta("time-per-output-token target, ms (none: no target)"))
    percentile: float = field(default=90.0, metadata=meta(
        "the percentile of TTFT and TPOT a deployment must keep under the targets", flag="--slo-percentile"))  # fmt: skip

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tpot_ms"):
            if getattr(self, name) is not None:
                _positive(f"--{name.replace('_', '-')}", getattr(self, name))
        if not 0 < self.percentile <= 100:
            raise InvalidInputError(f"--slo-percentile {self.percentile!r} must be in (0, 100], e.g. 90 or 99")

    @property
    def given(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None

    def describe(self) -> str:
        parts = [f"{n} p{self.percentile:g} <= {v:g} ms" for n, v in (("TTFT", self.ttft_ms), ("TPOT", self.tpot_ms))
                 if v is not None]  # fmt: skip
        return " and ".join(parts) or "none"


@dataclass(frozen=True)
class PrefixCache:
    """Automatic prefix caching: prompts that start with tokens already in the KV cache skip computing them.

    ``shared_tokens``: a prefix common to the prompts (a system prompt); its whole blocks are computed by the first
    request and held once by the cache from then on, and a request that finds them (``hit_rate`` of the requests,
    default all) computes and holds only the rest. ``hit_rate`` alone: each prompt finds that share of its tokens
    (whole blocks) cached, vLLM's "prefix cache hit rate"; they are not computed, but with no shared length to
    count once, each request holds all its blocks."""

    shared_tokens: int = field(default=0, metadata=meta(
        "tokens at the start of every prompt that are the same (a system prompt)", flag="--prefix-tokens"))  # fmt: skip
    hit_rate: float | None = field(default=None, metadata=meta(
        "with --prefix-tokens: the share of requests that carry that prefix (default 1); alone: the share of each "
        "prompt's tokens found in the cache", flag="--prefix-hit-rate"))  # fmt: skip

    def __post_init__(self) -> None:
        _positive("--prefix-tokens", self.shared_tokens, whole=True, zero=True)
        if self.hit_rate is not None and not 0 <= self.hit_rate <= 1:
            raise InvalidInputError(f"--prefix-hit-rate {self.hit_rate!r} must be in [0, 1]")
        if not self.shared_tokens and self.hit_rate is None:
            raise InvalidInputError("prefix caching needs --prefix-tokens N or --prefix-hit-rate H (or both)")

    def describe(self, block_size: int) -> str:
        if self.shared_tokens:
            blocks = self.shared_tokens // block_size
            share = 1.0 if self.hit_rate is None else self.hit_rate
            return (
                f"a {self.shared_tokens}-token prefix shared by {share:.0%} of the prompts: its {blocks} whole "
                f"blocks ({blocks * block_size} tokens) are computed once, held once, and skipped by every later "
                "request that carries it"
            )
        return (
            f"{self.hit_rate:.0%} of each prompt's tokens (whole blocks) found in the cache and not computed; each "
            "request still holds all its blocks (no shared length given to count them once)"
        )


@dataclass(frozen=True)
class Speculative:
    """Speculative decoding: ``tokens`` (k) proposed per step by a draft model or by n-gram lookup in the prompt,
    verified by the target in one pass. With acceptance rate a, a step emits (1 - a^(k+1)) / (1 - a) tokens per
    sequence on average (Leviathan et al. 2023)."""

    method: str = field(default="draft", metadata=meta(
        "draft (a smaller model of the same family proposes) or ngram (lookup in the prompt, no model)",
        SPEC_METHODS, flag="--speculative"))  # fmt: skip
    draft_model: str | None = field(default=None, metadata=meta(
        "the draft model: a shipped id or a config.json (--speculative draft)"))  # fmt: skip
    tokens: int = field(default=DEFAULT_SPEC_TOKENS, metadata=meta(
        "k, tokens proposed per step (num_speculative_tokens)", flag="--spec-tokens"))  # fmt: skip
    acceptance_rate: float | None = field(default=None, metadata=meta(
        "the chance each proposed token is accepted (default: 0.7 for a draft model, 0.3 for n-gram)",
        flag="--acceptance-rate"))  # fmt: skip

    def __post_init__(self) -> None:
        if self.method not in SPEC_METHODS:
            raise InvalidInputError(f"--speculative {self.method!r} is not one of {', '.join(SPEC_METHODS)}")
        if (self.method == "draft") != (self.draft_model is not None):
            raise InvalidInputError(
                "--speculative draft needs --draft-model ID (a smaller model of the target's family); "
                "--speculative ngram takes none"
            )
        _positive("--spec-tokens", self.tokens, whole=True)
        if self.acceptance_rate is not None and not 0 <= self.acceptance_rate < 1:
            raise InvalidInputError(f"--acceptance-rate {self.acceptance_rate!r} must be in [0, 1)")

    @property
    def acceptance(self) -> float:
        return DEFAULT_ACCEPTANCE[self.method] if self.acceptance_rate is None else self.acceptance_rate

    @property
    def tokens_per_step(self) -> float:
        """Expected tokens a sequence gains per step: the accepted run of proposals plus the target's own token,
        sum over i = 0..k of a^i = (1 - a^(k+1)) / (1 - a)."""
        a, k = self.acceptance, self.tokens
        return (1 - a ** (k + 1)) / (1 - a)


@dataclass(frozen=True)
class Serving:
    """One serving question: the GPUs, numerics and engine settings, the load, the SLO, and the engine options."""

    device: str = field(default=DEFAULT_DEVICE, metadata=meta("catalog device name (see `perfpredict devices`)"))
    tp: int = field(default=1, metadata=meta("tensor-parallel GPUs per replica"))
    pp: int = field(default=1, metadata=meta(
        "pipeline stages per replica, each of --tp GPUs (vLLM's virtual engines, as generate --pp runs them)"))  # fmt: skip
    dtype: str | None = field(default=None, metadata=meta(
        "compute dtype (default: the config's)", ("bfloat16", "float16", "float32")))  # fmt: skip
    weights: str | None = field(default=None, metadata=meta(
        "weight format of the layers (default: the dtype)", tuple(FORMATS)))  # fmt: skip
    kv_dtype: str | None = field(default=None, metadata=meta(
        "KV cache dtype (default: the compute dtype)", ("bfloat16", "float16", "float32", "float8_e4m3fn")))  # fmt: skip
    host: str | None = field(default=None, metadata=meta("the host CPU profile that drives the GPU"))
    price_usd_per_hour: float | None = field(default=None, metadata=meta("price per GPU-hour (default: catalog)"))
    engine: str = field(default="vllm", metadata=meta("the serving engine", SERVING_ENGINES))
    engine_version: str | None = field(default=None, metadata=meta(
        "the engine's version (default: its current one; vllm: 0.5, 0.6, 0.8, 0.10 (V1))"))  # fmt: skip
    frontend: str = field(default="offline", metadata=meta(
        "offline: the engine's generate loop; openai-server: behind its API server, streaming every token",
        FRONTENDS))  # fmt: skip
    frontend_process: str | None = field(default=None, metadata=meta(
        "where the API server runs: the engine's process (vLLM 0.4-0.5) or a separate one (default: the version's)",
        FRONTEND_PROCESSES))  # fmt: skip
    scheduler_steps: int = field(default=1, metadata=meta(
        "vLLM 0.6's multi-step scheduling: the scheduling phases' host cost once per this many steps (admission "
        "is still simulated every step)", flag="--num-scheduler-steps"))  # fmt: skip
    async_output: bool | None = field(default=None, metadata=meta(
        "vLLM 0.6's asynchronous output processing (default on in 0.6; off in 0.4-0.5)"))  # fmt: skip
    async_scheduling: bool = field(default=False, metadata=meta(
        "vLLM V1's --async-scheduling: the next step scheduled while this one runs on the GPU"))  # fmt: skip
    engine_config: Any = field(default=None, metadata=meta("the engine's settings, a vllm_config.EngineConfig"))
    stream: RequestStream = field(default_factory=RequestStream, metadata=meta("the load"))
    slo: Slo = field(default_factory=Slo, metadata=meta("the targets"))
    prefix_cache: PrefixCache | None = field(default=None, metadata=meta("automatic prefix caching (None: off)"))
    speculative: Speculative | None = field(default=None, metadata=meta("speculative decoding (None: off)"))

    def __post_init__(self) -> None:
        _positive("--tp", self.tp, whole=True)
        _positive("--pp", self.pp, whole=True)
        if self.pp > 1 and self.speculative is not None:
            raise InvalidInputError(
                f"--pp {self.pp} with speculative decoding is not modelled (the draft's steps would pass every stage "
                "too): drop --speculative, or use --tp alone"
            )
        self.engine_options()  # an unknown engine, version or frontend fails here, in one line

    def engine_options(self):
        """The ``generation_options.EngineOptions`` this question runs the engine with (its version's defaults)."""
        from perfpredict.llm.engine_versions import get_version
        from perfpredict.llm.generation_options import EngineOptions

        get_version(self.engine, self.engine_version)
        return EngineOptions(engine=self.engine, version=self.engine_version, frontend=self.frontend,
                             frontend_process=self.frontend_process, scheduler_steps=self.scheduler_steps,
                             async_output=self.async_output, async_scheduling=self.async_scheduling)  # fmt: skip

    @classmethod
    def of(cls, **options: Any) -> Serving:
        """A Serving from flat keywords: its own fields, and those of the stream, the SLO, the prefix cache and
        speculation by their names (a nested value may also be given whole)."""
        parts = {"stream": RequestStream, "slo": Slo, "prefix_cache": PrefixCache, "speculative": Speculative}
        nested: dict[str, dict] = {name: {} for name in parts}
        own = {f.name for f in dataclasses.fields(cls)}
        given: dict[str, Any] = {}
        for key, value in options.items():
            owner = next((n for n, c in parts.items() if key in {f.name for f in dataclasses.fields(c)}), None)
            if key in own:
                given[key] = value
            elif owner is not None:
                nested[owner][key] = value
            else:
                valid = sorted(own | {f.name for c in parts.values() for f in dataclasses.fields(c)})
                raise InvalidInputError(f"unknown serving option {key!r}; valid: {', '.join(valid)}")
        if "lengths_file" in nested["stream"]:
            nested["stream"].setdefault("lengths", "file")  # a lengths file says what the lengths are
        for name, values in nested.items():
            if values:
                base = given.get(name)
                given[name] = dataclasses.replace(base, **values) if base is not None else parts[name](**values)
        return cls(**given)

    def but(self, **changes: Any) -> Serving:
        """This question with ``changes`` (flat, as :meth:`of` takes them)."""
        if not changes:
            return self
        return Serving.of(**({f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | changes))


def field_help(cls: type) -> dict[str, dict]:
    """Each field's metadata (help, choices, flag) by name: what the CLI's flags and the web page's fields say."""
    return {f.name: dict(f.metadata) for f in dataclasses.fields(cls)}
