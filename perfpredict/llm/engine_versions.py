"""The serving engines and versions perfpredict models, and what each one does differently.

Every engine below runs the same kind of step (``engine_graph``: paged or blocked KV cache, fused kernels, one
launch per kernel or a CUDA graph) under its own scheduler, its own defaults and its own host cost
(``host_costs``). What is written here is each version's design as its documentation and source describe it:
how the scheduler fills a step, which steps replay a CUDA graph, how much memory the KV cache gets, and which
process runs the frontend. The fitted figures (host time per step and per sequence, kernel scales) are data,
in ``perfpredict/data/engine_host_costs.json``, each with the public profile and the version it came from.

- **vLLM V0** (0.4-0.6): one Python process schedules, builds the inputs, samples and processes the outputs of
  every step, in turn with the GPU. 0.4-0.5 ran the OpenAI server's coroutines in that same process (they
  contended for the GIL); 0.6 moved the server to its own process (ZeroMQ), processes a step's outputs while the
  next step runs on the GPU (asynchronous output processing, on by default) and can schedule ``n`` steps at once
  (``--num-scheduler-steps``, multi-step scheduling). Prefill-first scheduling unless chunked prefill is on (by
  default only past 32K tokens of context); CUDA graphs for decode steps of up to 256 sequences.
- **vLLM V1** (0.8 on): an engine-core process runs the scheduler and the model; the frontend (tokenization,
  detokenization, streaming) runs in the caller's process. Chunked prefill and prefix caching are always on, the
  inputs are a persistent batch updated by diffs, and ``torch.compile`` with piecewise CUDA graphs runs every
  step of up to 512 tokens (attention between the captured pieces).
- **SGLang** (0.4): the scheduler prepares the next batch while the GPU runs this one (the overlap scheduler);
  tokenizer and detokenizer run in their own processes; radix-tree prefix cache; chunked prefill of 8,192 tokens;
  CUDA graphs for decode steps of up to 160 sequences.
- **TensorRT-LLM** (0.11, the C++ runtime): in-flight batching from C++ (little host time per step), whole
  prompts mixed into generation steps under ``max_num_tokens``, a KV cache of 90% of the memory left after the
  engine, and the GUARANTEED_NO_EVICT policy (a request is admitted only when its prompt and all its new tokens fit,
  so nothing is preempted); its fused kernels and fp8 on Hopper.
- **DeepSpeed-MII** (FastGen, 0.2-0.3): Dynamic SplitFuse (each step a fixed budget of 768 tokens: the decodes
  first, then chunks of prompts), blocked KV cache, no CUDA graphs (its Python launches every kernel).
- **llama.cpp**: one sequence per GPU context in C++ (``llama-bench``: the prompt in chunks of ``n_batch``
  tokens, then one token per step), GGUF weights (q4_k_m, q8_0, ...), CUDA graphs for one-token steps, layers
  split over the GPUs one after the other (``--split-mode layer``), and layers left on the CPU
  (``--n-gpu-layers``).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfpredict.core.errors import InvalidInputError

#: the engines ``--engine`` names (``auto`` picks one, ``hf`` is transformers' generate, the rest are servers)
SERVING_ENGINES = ("vllm", "sglang", "trtllm", "mii", "llamacpp")
ENGINES = ("auto", "hf", *SERVING_ENGINES)
ENGINE_NAMES = {
    "hf": "transformers generate",
    "vllm": "vLLM",
    "sglang": "SGLang",
    "trtllm": "TensorRT-LLM",
    "mii": "DeepSpeed-MII",
    "llamacpp": "llama.cpp",
}


@dataclass(frozen=True)
class EngineVersion:
    """One version of one engine: the design decisions that change its speed and memory."""

    engine: str
    version: str
    label: str
    released: str  # when it was current (YYYY-MM)
    # -- the scheduler
    policy: str  # "prefill-first", "chunked" (decodes first, then prompt chunks), "mixed" (whole prompts mixed in)
    chunked_default: str = "long-context"  # "long-context" (V0: over 32K positions, no window), "always", "never"
    budget_tokens: int | None = None  # tokens per step (None: the version's rule, ``vllm_config.resolve``)
    max_num_seqs: int = 256
    admission: str = "prompt"  # "prompt": blocks for the prompt, preempt when short; "reserve": prompt + new tokens
    prefix_caching: bool = False
    # -- memory
    memory: str = "utilization"  # "utilization" x the GPU's memory; "free-fraction" of what the weights leave
    memory_fraction: float = 0.9
    block_size: int = 16
    # -- the step
    graphs: str = "decode"  # "decode" (full graphs), "piecewise" (any step, attention between), "none", "one-token"
    graph_max: int = 256  # the largest step (sequences, or tokens for "piecewise") captured
    runtime: str = "python"  # "python" (launches from Python: host profile's dispatch) or "c++" (launches only)
    attention: str = "flash_attn"
    # -- processes and overlap
    frontend_process: str = "engine"  # where the OpenAI server runs by default: "engine" or "separate"
    async_output: bool = False  # the outputs of step n processed while step n+1 runs on the GPU
    overlap_schedule: bool = False  # the next step scheduled and prepared while this one runs on the GPU
    detokenize_in_frontend: bool = False  # detokenization runs in the frontend's process (V1), not the engine's
    tensor_parallel: bool = True  # False: several GPUs split the layers and run one after another (llama.cpp)
    note: str = ""

    @property
    def key(self) -> str:
        """The key of this version's fitted figures in ``engine_host_costs.json``."""
        return f"{self.engine}-{self.version}"

    @property
    def name(self) -> str:
        return f"{ENGINE_NAMES[self.engine]} {self.version}"


_V0 = dict(policy="prefill-first", chunked_default="long-context", graphs="decode", graph_max=256)
_V1 = dict(
    policy="chunked", chunked_default="always", prefix_caching=True, graphs="piecewise", graph_max=512,
    frontend_process="separate", detokenize_in_frontend=True,
)  # fmt: skip

VERSIONS: tuple[EngineVersion, ...] = (
    EngineVersion(
        "vllm",
        "0.5",
        "vLLM 0.4-0.5, V0 engine, OpenAI server in the engine's process",
        "2024-06",
        **_V0,
        note="Ray workers for tensor parallelism; no asynchronous output processing",
    ),  # fmt: skip
    EngineVersion(
        "vllm",
        "0.6",
        "vLLM 0.6, V0 engine, asynchronous output processing",
        "2024-09",
        **_V0,
        frontend_process="separate",
        async_output=True,
        note="the OpenAI server in its own process (ZeroMQ); multi-step scheduling with --num-scheduler-steps",
    ),  # fmt: skip
    EngineVersion("vllm", "0.8", "vLLM 0.8, V1 engine (engine-core process)", "2025-03", **_V1, budget_tokens=8192),
    EngineVersion(
        "vllm",
        "0.10",
        "vLLM 0.10, V1 engine (engine-core process)",
        "2025-07",
        **_V1,
        note="H100-class GPUs (70 GB or more, not A100) default to 16,384 batched tokens and 1,024 sequences",
    ),  # fmt: skip
    EngineVersion(
        "sglang",
        "0.4",
        "SGLang 0.4, overlap scheduler",
        "2024-12",
        policy="chunked",
        chunked_default="always",
        budget_tokens=8192,
        prefix_caching=True,
        memory_fraction=0.88,
        block_size=1,
        graphs="decode",
        graph_max=160,
        attention="flashinfer",
        frontend_process="separate",
        overlap_schedule=True,
        detokenize_in_frontend=True,
    ),  # fmt: skip
    EngineVersion(
        "trtllm",
        "0.11",
        "TensorRT-LLM 0.11, C++ runtime, in-flight batching",
        "2024-07",
        policy="mixed",
        chunked_default="never",
        budget_tokens=8192,
        admission="reserve",
        memory="free-fraction",
        memory_fraction=0.9,
        block_size=64,
        graphs="none",
        runtime="c++",
        attention="trtllm_fmha",
        frontend_process="separate",
    ),  # fmt: skip
    EngineVersion(
        "mii",
        "0.3",
        "DeepSpeed-MII 0.3 (FastGen), Dynamic SplitFuse",
        "2024-08",
        policy="chunked",
        chunked_default="always",
        budget_tokens=768,
        max_num_seqs=512,
        memory="free-fraction",
        memory_fraction=0.95,
        block_size=64,
        graphs="none",
        attention="ds_blocked_flash",
    ),  # fmt: skip
    EngineVersion(
        "llamacpp",
        "b3600",
        "llama.cpp (mid-2024 builds), llama-bench",
        "2024-08",
        policy="chunked",
        chunked_default="always",
        budget_tokens=512,
        max_num_seqs=1,
        memory="free-fraction",
        memory_fraction=1.0,
        block_size=256,
        graphs="one-token",
        graph_max=1,
        runtime="c++",
        attention="ggml",
        tensor_parallel=False,
        note="the prompt in physical batches of min(n_batch, 512) tokens",
    ),  # fmt: skip
)
#: each engine's current version (the default), and the names a version also answers to
CURRENT = {"vllm": "0.10", "sglang": "0.4", "trtllm": "0.11", "mii": "0.3", "llamacpp": "b3600"}
ALIASES = {
    ("vllm", "0.4"): "0.5",
    ("vllm", "v0"): "0.6",
    ("vllm", "v1"): "0.10",
    ("vllm", "0.9"): "0.10",
    ("vllm", "0.11"): "0.10",
    ("vllm", "latest"): "0.10",
    ("mii", "fastgen"): "0.3",
}


def versions(engine: str) -> tuple[str, ...]:
    return tuple(v.version for v in VERSIONS if v.engine == engine)


def get_version(engine: str, version: str | None = None) -> EngineVersion:
    """The EngineVersion of ``engine`` at ``version`` (None: the current one); refuses an unknown one, listing
    what there is."""
    if engine not in SERVING_ENGINES:
        raise InvalidInputError(
            f"engine {engine!r} has no versions; the serving engines are {', '.join(SERVING_ENGINES)}"
        )
    asked = str(version).strip().lower() if version else ""
    wanted = ALIASES.get((engine, asked), asked.removeprefix("v")) if asked else CURRENT[engine]
    for v in VERSIONS:
        if v.engine == engine and v.version == wanted:
            return v
    known = list(versions(engine)) + [a for (e, a) in ALIASES if e == engine]
    raise InvalidInputError(
        f"{ENGINE_NAMES[engine]} version {version!r} is not modelled; choose one of {', '.join(known)} "
        f"(default {CURRENT[engine]})"
    )


def parse_engine(name: str) -> EngineVersion:
    """An engine named with or without its version: ``vllm`` (its current one), ``vllm-0.6``, ``sglang-0.4``, ...
    (what a deployment grid's engine axis lists)."""
    engine, _, version = str(name).strip().lower().partition("-")
    return get_version(engine, version or None)
