"""The settings of a vLLM-class engine that decide a generation's speed and memory, with each version's defaults.

Other versions and engines differ where ``engine_versions`` says (V1's chunked prefill always on and its batch
defaults, SGLang's and TensorRT-LLM's token budgets, their block sizes and memory shares); the rules below are
vLLM 0.6's, the version the public rows validate. The defaults follow vLLM v0.6 (the V0 engine of Sept.-Dec. 2024; LLM-Inference-Bench's vLLM runs used it: its
requirements pin vllm-flash-attn 2.6.1 and xformers 0.0.27.post2, vLLM 0.6.0/0.6.1's pins):

- ``block_size`` 16 tokens per KV block; ``gpu_memory_utilization`` 0.9 of the GPU's memory for the engine;
  ``max_num_seqs`` 256 sequences in flight; the block manager keeps a watermark of 1% of the blocks free when it
  admits a prompt.
- ``max_model_len``: the config's ``max_position_embeddings`` unless set.
- chunked prefill is on by default only for a model whose ``max_model_len`` is over 32,000 tokens with no sliding
  window (to keep the start-up memory profile small); then ``max_num_batched_tokens`` is 512, else
  ``max(max_model_len, 2048)``.
- CUDA graphs are captured for decode steps of 1, 2, 4 and 8 to 256 sequences in steps of 8 (a batch runs in the
  graph of the next size up, padded); a batch above the largest, or a context over ``max_seq_len_to_capture``
  (8,192), runs eagerly, and so does every prefill.
- the attention backend is FlashAttention-2 unless the model has a sliding window, the KV cache is fp8, the block
  size is not a multiple of 16, the dtype is float32 or the GPU is older than Ampere: then XFormers, whose decode
  runs vLLM's own PagedAttention kernel (v1 or v2, see ``paged_attention_kernel``).
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass, replace
from typing import Any

from perfpredict.core.errors import InvalidInputError

VLLM_VERSION = "0.6"
LONG_CONTEXT_TOKENS = 32_000  # above it, chunked prefill is on by default (v0.6's arg_utils)
CHUNKED_PREFILL_TOKENS = 512  # max_num_batched_tokens with chunked prefill on (v0.6's SchedulerConfig)
FLASH_HEAD_SIZES = frozenset({32, 64, 96, 128, 160, 192, 224, 256})
PARTITION_TOKENS = 512  # PagedAttention v2's partition of the context
V1_MAX_CONTEXT = 8192  # v1 is used up to this context when the grid is already large enough


@dataclass(frozen=True)
class EngineConfig:
    """What a user sets on ``vllm.LLM(...)``/``vllm serve`` (or the same knob of another engine) that changes speed
    or memory. None: the engine version's default (``engine_versions``; vLLM 0.6's are 16, 0.9 and 256)."""

    block_size: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    chunked_prefill: bool | None = None
    enforce_eager: bool = False
    max_seq_len_to_capture: int = 8192
    watermark: float = 0.01
    disable_custom_all_reduce: bool = False  # NCCL for every all-reduce (vLLM's --disable-custom-all-reduce)
    enable_expert_parallel: bool = False  # a MoE's experts split whole over the tp GPUs (--enable-expert-parallel)
    n_gpu_layers: int | None = None  # llama.cpp: layers on the GPU(s), the rest on the host CPU (None: all)

    def __post_init__(self) -> None:
        u = self.gpu_memory_utilization
        if u is not None and not 0.05 <= u <= 1.0:
            raise InvalidInputError(f"gpu_memory_utilization {u!r} must be in (0.05, 1]; vLLM's default is 0.9")
        if self.block_size is not None and self.block_size not in (1, 8, 16, 32, 64, 128, 256):
            raise InvalidInputError(
                f"block_size {self.block_size!r} is not one of 8, 16, 32 (vLLM), 1 (SGLang), 64 or 128 (TensorRT-LLM)"
            )
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise InvalidInputError(f"max_num_seqs {self.max_num_seqs!r} must be at least 1")
        if self.n_gpu_layers is not None and self.n_gpu_layers < 0:
            raise InvalidInputError(f"n_gpu_layers {self.n_gpu_layers!r} must be 0 or more")


@dataclass(frozen=True)
class ResolvedEngine:
    """The engine settings with every default decided for one model, one GPU and one engine version."""

    config: EngineConfig
    max_model_len: int
    chunked_prefill: bool
    max_num_batched_tokens: int
    backend: str  # "flash_attn", "xformers", or the engine's own kernels ("flashinfer", "trtllm_fmha", ...)
    backend_reason: str
    max_num_seqs: int = 256
    block_size: int = 16
    memory_fraction: float = 0.9
    version: Any = None  # the EngineVersion (None: vLLM 0.6)

    @property
    def engine_version(self):
        from perfpredict.llm.engine_versions import get_version

        return self.version or get_version("vllm", "0.6")


def resolve(config: EngineConfig, *, max_positions: int | None, window: int | None, head_dim: int,
            kv_dtype: str, dtype: str, device, version=None, frontend: str = "offline") -> ResolvedEngine:  # fmt: skip
    """The derived settings for a model on ``device`` with engine ``version`` (an EngineVersion; None: vLLM
    0.6, see the module docstring); ``frontend`` picks vLLM V1's defaults for an API server."""
    from perfpredict.llm.engine_versions import get_version

    v = version or get_version("vllm", "0.6")
    max_len = config.max_model_len or max_positions or 4096
    if max_positions and max_len > max_positions:
        raise InvalidInputError(
            f"max_model_len {max_len} is beyond the model's {max_positions} positions; lower --max-model-len"
        )
    chunked = config.chunked_prefill
    if chunked is None:
        long_context = max_len > LONG_CONTEXT_TOKENS and window is None
        chunked = {"long-context": long_context, "always": True, "never": False}[v.chunked_default]
    seqs, budget = _batch_defaults(v, device, frontend, chunked, max_len)
    batched = config.max_num_batched_tokens or budget
    if not chunked and batched < max_len and v.policy == "prefill-first":
        raise InvalidInputError(
            f"max_num_batched_tokens {batched} is below max_model_len {max_len}: vLLM refuses this without "
            "chunked prefill; raise it or turn chunked prefill on"
        )
    block = config.block_size or v.block_size
    if v.engine == "vllm" and v.version in ("0.5", "0.6"):
        backend, reason = attention_backend(block, window, head_dim, kv_dtype, dtype, device)
    else:
        backend, reason = v.attention, f"{v.name}'s attention kernels"
    return ResolvedEngine(replace(config), max_len, chunked, batched, backend, reason,
                          max_num_seqs=config.max_num_seqs or seqs, block_size=block,
                          memory_fraction=config.gpu_memory_utilization or v.memory_fraction, version=v)  # fmt: skip


def _batch_defaults(v, device, frontend: str, chunked: bool, max_len: int) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) by default. vLLM V0: 256 and 512 with chunked prefill, else
    max(max_model_len, 2048). vLLM 0.8: 8,192 tokens offline, 2,048 behind the API server. vLLM 0.10 (its
    ``get_batch_defaults``): on a GPU of 70 GB or more that is not an A100, 16,384 offline and 8,192 behind the
    server, and 1,024 sequences; else 0.8's. Other engines: their version's budget."""
    if v.engine == "vllm" and v.version in ("0.5", "0.6"):
        return v.max_num_seqs, CHUNKED_PREFILL_TOKENS if chunked else max(max_len, 2048)
    if v.engine == "vllm":
        large = v.version != "0.8" and device.memory_bytes >= 70 * 2**30 and "A100" not in device.name
        offline = frontend == "offline"
        if large:
            return 1024, 16384 if offline else 8192
        return 256, 8192 if offline else 2048
    return v.max_num_seqs, v.budget_tokens or max(max_len, 2048)


def attention_backend(block_size: int, window: int | None, head_dim: int, kv_dtype: str, dtype: str, device):
    """(backend, why) as vLLM v0.6's selector picks it on a CUDA GPU."""
    if not _ampere_or_newer(device):
        return "xformers", f"{device.name} is older than Ampere: FlashAttention-2 needs compute capability 8.0"
    if dtype not in ("float16", "bfloat16"):
        return "xformers", f"FlashAttention-2 runs float16/bfloat16 only, not {dtype}"
    if kv_dtype.startswith("float8"):
        return "xformers", "FlashAttention-2 has no fp8 KV cache in vLLM 0.6"
    if block_size % 16:
        return "xformers", f"block size {block_size} is not a multiple of 16"
    if window is not None:
        return "xformers", f"vLLM 0.6 cannot use FlashAttention-2 with a sliding window ({window} tokens)"
    if head_dim not in FLASH_HEAD_SIZES:
        return "xformers", f"head size {head_dim} is not one FlashAttention-2 supports"
    return "flash_attn", "FlashAttention-2 (vllm-flash-attn)"


def paged_attention_kernel(seqs: int, heads_per_rank: int, max_context: int) -> str:
    """Which PagedAttention kernel XFormers' decode launches (vLLM 0.6's ``_use_v1``): v1 (one thread block per
    sequence and head over the whole context) when the context fits one partition, or when the grid is already
    large (more than 512 sequence-heads) and the context is at most 8,192; v2 (the context split into partitions
    of 512, then reduced) otherwise."""
    partitions = -(-max_context // PARTITION_TOKENS)
    if max_context <= V1_MAX_CONTEXT and (partitions == 1 or seqs * heads_per_rank > 512):
        return "v1"
    return "v2"


def capture_bucket(batch: int, max_num_seqs: int, largest: int = 256) -> int | None:
    """The CUDA graph a step of ``batch`` sequences (tokens, for V1's piecewise graphs) replays (the next captured
    size up), or None: eager. vLLM captures 1, 2, 4 and multiples of 8 up to ``largest`` (256 in V0, 512 in V1,
    160 in SGLang), and in V0 no more than max_num_seqs rounded up to 1, 2, 4 or a multiple of 8."""
    top = max_num_seqs if max_num_seqs <= 4 else -(-max_num_seqs // 8) * 8
    sizes = _capture_sizes(min(top, largest))
    i = bisect.bisect_left(sizes, batch)
    return sizes[i] if i < len(sizes) else None


@functools.lru_cache(maxsize=64)
def _capture_sizes(top: int) -> tuple[int, ...]:
    return tuple(b for b in (1, 2, 4, *range(8, top + 1, 8)) if b <= top) or (1,)


def _ampere_or_newer(device) -> bool:
    try:
        return device.kind == "gpu" and float(device.compute_capability or 0) >= 8.0
    except ValueError:
        return device.kind == "gpu" and device.supports_dtype("bfloat16")
