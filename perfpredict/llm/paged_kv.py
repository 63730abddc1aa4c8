"""A paged KV cache as vLLM v0.6 sizes it: the blocks it allocates at start-up, and the sequences they hold.

At start-up vLLM loads the weights, runs one forward of ``max_num_batched_tokens`` dummy tokens over
``max_num_seqs`` sequences to find the activations' peak, and gives the KV cache what is left of
``gpu_memory_utilization`` x the GPU's memory::

    kv_bytes = utilization x memory - weights - activation peak of that forward - memory outside torch
    blocks   = kv_bytes // block_bytes,  block_bytes = 2 (K, V) x block_size x kv_heads/rank x head_dim x layers x dtype

Other engines size it their way (``engine_versions``): SGLang gives ``mem_fraction_static`` (0.88) of the memory
to weights and cache the same way; TensorRT-LLM gives the KV cache ``kv_cache_free_gpu_mem_fraction`` (0.9) of
the memory left once the engine is loaded (``memory="free-fraction"``), DeepSpeed-MII all but a reserve, and
llama.cpp the context it is asked for. With llama.cpp's layer split each GPU holds its share of the layers.

A sequence of t tokens holds ceil(t / block_size) blocks (at most ceil(window / block_size) + 1 with a sliding
window). vLLM refuses to start when one sequence of ``max_model_len`` tokens would not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.ops import DTYPE_BYTES
from perfpredict.core.units import GIB


@dataclass(frozen=True)
class KvPlan:
    """One rank's memory as the engine lays it out (bytes), and the KV blocks that gives."""

    memory_bytes: int  # the GPU's
    budget_bytes: int  # gpu_memory_utilization x memory
    weights_bytes: int
    activation_bytes: int  # the start-up profile's peak
    runtime_bytes: int  # outside torch's allocator: CUDA context, cuBLAS workspace, NCCL buffers
    block_bytes: int
    block_size: int
    blocks: int
    window: int | None

    @property
    def kv_pool_bytes(self) -> int:
        return self.blocks * self.block_bytes

    @property
    def capacity_tokens(self) -> int:
        return self.blocks * self.block_size

    def blocks_for(self, tokens: int) -> int:
        """Blocks a sequence of ``tokens`` tokens holds."""
        blocks = -(-tokens // self.block_size)
        if self.window is not None:
            blocks = min(blocks, -(-self.window // self.block_size) + 1)
        return blocks

    def max_seqs_at(self, tokens: int) -> int:
        """Sequences of ``tokens`` tokens each that the pool holds at once."""
        return self.blocks // max(self.blocks_for(tokens), 1)


def block_bytes(layers: int, kv_heads: int, head_dim: int, block_size: int, kv_dtype: str) -> int:
    return 2 * block_size * kv_heads * head_dim * layers * DTYPE_BYTES[kv_dtype]


def profile_activation_bytes(spec, rank, tokens: int, seqs: int, dtype: str) -> int:
    """The peak of vLLM's start-up forward (``tokens`` dummy tokens in ``seqs`` sequences): inside the MLP, the
    residual, the normed input, gate+up's output and SiLU-and-mul's output are live at once (attention's q/k/v and
    output are fewer); then the sampled sequences' logits, in float32, with the sampler's sort of them."""
    act = DTYPE_BYTES[dtype]
    inter = rank.intermediate * (spec.experts_per_token if spec.experts else 1)
    width = 2 * spec.hidden + max(
        3 * inter, (rank.heads + 2 * rank.kv_heads) * spec.head_dim + rank.heads * spec.head_dim
    )
    logits = seqs * rank.vocab * rank.tp * (act + 4 + 4 + 8)  # gathered logits, fp32 probs, sorted values and indices
    return tokens * width * act + logits


def plan(spec, rank, *, device, utilization: float, weights_bytes: int, activation_bytes: int, runtime_bytes: int,
         block_size: int, kv_dtype: str, memory: str = "utilization", layers: int | None = None) -> KvPlan:  # fmt: skip
    """The KV pool of one rank (see the module docstring): ``memory`` "utilization" gives the cache ``utilization``
    x the GPU's memory less the rest, "free-fraction" ``utilization`` x what the rest leaves; ``layers``: the
    layers this GPU holds (default all)."""
    size = block_bytes(layers or spec.layers, rank.kv_heads, spec.head_dim, block_size, kv_dtype)
    taken = weights_bytes + activation_bytes + runtime_bytes
    if memory == "free-fraction":
        budget = device.memory_bytes
        free = int((device.memory_bytes - taken) * utilization)
    else:
        budget = int(device.memory_bytes * utilization)
        free = budget - taken
    return KvPlan(
        memory_bytes=device.memory_bytes,
        budget_bytes=budget,
        weights_bytes=weights_bytes,
        activation_bytes=activation_bytes,
        runtime_bytes=runtime_bytes,
        block_bytes=size,
        block_size=block_size,
        blocks=max(free // size, 0),
        window=spec.window,
    )


def check_starts(kv: KvPlan, *, max_model_len: int, name: str, device: str, tp: int, utilization: float,
                 engine: str = "vLLM", remedies: str = "") -> None:  # fmt: skip
    """Refuse, as the engine does at start-up, a plan with no room for the KV cache or for one full-length sequence;
    ``remedies``: what would make room (the caller's flags, each with what one GPU then needs)."""
    if kv.blocks <= 0:
        need = kv.weights_bytes + kv.activation_bytes + kv.runtime_bytes
        fix = f"; what makes room: {remedies}" if remedies else "; use a GPU with more memory"
        raise InvalidInputError(
            f"{name} does not fit: each of {tp} GPU(s) needs {need / GIB:.1f} GiB for weights, activations and "
            f"runtime before any KV cache, more than the {kv.budget_bytes / GIB:.1f} GiB {engine} may use on a "
            f"{device} (memory share {utilization:g}){fix}"
        )
    if kv.capacity_tokens < max_model_len:
        raise InvalidInputError(
            f"{engine.split()[0]} would not start: max_model_len {max_model_len} is more than the "
            f"{kv.capacity_tokens} tokens the KV cache holds on a {device} x {tp}; set --max-model-len {kv.capacity_tokens} or less, raise "
            "--gpu-memory-utilization, or use a larger --tp"
        )
