"""What brings a generation under the device's memory: the flags ``perfpredict generate`` takes (``--batch``,
``--weights``, ``--tp``), each with about what one GPU would hold after it (``core.memory_advice.Remedy``).

transformers' generate (``hf_remedies``) holds the weights, the KV cache, the activations and the runtime; a
vLLM-class engine (``vllm_remedies``) must first fit its weights, its profiling activations and its runtime in its
``gpu_memory_utilization`` share before it reserves any KV cache, so its remedies are weight formats and more GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from perfpredict.core.memory_advice import GPUS_PER_NODE, Remedy

#: the smaller weight formats offered, smallest last; fp8 only where the GPU computes in it (else int8 is the same)
HF_FORMATS = ("int8", "nf4")


@dataclass(frozen=True)
class GenerationMemory:
    """One GPU's memory in transformers' generate, in bytes, and what the flags can change."""

    weights_bytes: float
    layer_weights_bytes: float  # of the weights, the layers' linears that --weights converts
    bytes_per_weight: float  # of those linears, now
    kv_bytes: float
    activations_bytes: float
    runtime_bytes: float
    batch: int
    tp: int
    tp_splits: Callable[[int], bool]  # whether a tensor-parallel degree splits the heads evenly
    gpu: bool

    @property
    def peak_bytes(self) -> float:
        return self.weights_bytes + self.kv_bytes + self.activations_bytes + self.runtime_bytes


def hf_remedies(m: GenerationMemory, target_bytes: float) -> list[Remedy]:
    """A smaller batch (the largest that fits under ``target_bytes``), a smaller weight format, more GPUs."""
    from perfpredict.llm.weight_formats import FORMATS

    multi = m.tp > 1
    found = []
    per_seq = (m.kv_bytes + m.activations_bytes) / m.batch
    fixed = m.weights_bytes + m.runtime_bytes
    if m.batch > 1 and per_seq > 0:
        batch = max(1, min(m.batch - 1, int((target_bytes - fixed) // per_seq)))
        why = "the KV cache and the activations scale with it"
        found.append(Remedy(f"--batch {batch}", why, fixed + batch * per_seq, multi))
    for name in HF_FORMATS:
        fmt = FORMATS[name]
        if fmt.bytes_per_weight >= m.bytes_per_weight or (fmt.gpu_only and not m.gpu):
            continue
        saved = m.layer_weights_bytes * (1 - fmt.bytes_per_weight / m.bytes_per_weight)
        why = f"the layers' weights in {_bytes(fmt.bytes_per_weight)} each, not {_bytes(m.bytes_per_weight)}"
        found.append(Remedy(f"--weights {name}", why, m.peak_bytes - saved, multi))
    if m.gpu:
        split = m.weights_bytes + m.kv_bytes  # the activations are counted whole (the residual is not split)
        after = lambda n: m.peak_bytes - split + split * m.tp / n
        remedy = _more_gpus(m.tp, m.tp_splits, after, target_bytes, "the weights and the KV cache")
        if remedy:
            found.append(remedy)
    return found


def vllm_remedies(
    need_bytes: Callable[[int, str], float],
    tp: int,
    tp_splits: Callable[[int], bool],
    formats: list[str],
    budget: float,
) -> list[Remedy]:
    """The weight formats of ``formats`` and the tensor-parallel degrees that leave room for a KV cache in
    ``budget`` bytes; ``need_bytes(tp, format)``: the bytes one GPU needs before any KV cache."""
    from perfpredict.llm.weight_formats import FORMATS

    found = []
    for name in formats:
        why = f"the layers' weights in {_bytes(FORMATS[name].bytes_per_weight)} each"
        found.append(Remedy(f"--weights {name}", why, need_bytes(tp, name), tp > 1))
    remedy = _more_gpus(tp, tp_splits, lambda n: need_bytes(n, ""), budget, "the weights")
    if remedy:
        found.append(remedy)
    return found


def _more_gpus(
    tp: int, splits: Callable[[int], bool], after: Callable[[int], float], target: float, what: str
) -> Remedy | None:
    """``--tp N`` for the smallest N (a multiple of ``tp`` within a node that splits the heads) under ``target``."""
    degrees = [n for n in (tp * 2, tp * 4, tp * 8) if n <= GPUS_PER_NODE and splits(n)]
    if not degrees:
        return None
    n = next((d for d in degrees if after(d) <= target), degrees[-1])
    over = f"over {n} GPUs, not {tp}" if tp > 1 else f"over {n} GPUs"
    return Remedy(f"--tp {n}", f"splits {what} {over}", after(n), True)


def _bytes(count: float) -> str:
    return "1 byte" if count == 1 else f"{count:.2g} bytes"
