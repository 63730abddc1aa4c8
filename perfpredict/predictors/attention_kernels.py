"""How fast the flash_attn package's FlashAttention-2 kernel runs on a Hopper GPU, from its authors' figures.

The learned GPU efficiency reads a fused attention from the rows it was trained on. On an H100 those rows are
torch's own fused attention, which reaches rates FlashAttention-2 never does there: FA2 was written for Ampere and
uses none of Hopper's asynchronous tensor-core (WGMMA) and copy (TMA) units, so it plateaus near 370 TFLOP/s where
FlashAttention-3 and cuDNN's kernel pass 600. A graph that runs the flash_attn package (``--attn-implementation
flash_attention_2``, llm-foundry's ``attn_impl: flash``) therefore gets, on a Hopper GPU, no more than FA2's
published rate: its time is at least its FLOPs over that rate.

The rates are FlashAttention-3's paper (Shah et al., 2024, arXiv:2407.08608, figures 5 and 6: an H100 80GB SXM5,
bf16, head dim 128, batch x sequence = 16k tokens), by key length, with a causal kernel's FLOPs counted as half the
square, as the paper counts them (the graph's FLOPs count the whole square). The backward figure is not causal; a
causal backward is taken to lose what the causal forward loses against the full one at the same length (0.62 at
512 keys, 0.90 from 8k). Another Hopper part scales the rates by its bf16 tensor peak against the H100 SXM's
989 TFLOP/s; lengths outside the table take its nearest end, lengths between it are interpolated in log length.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: key lengths of the published figures
SEQ_TOKENS = (512, 1024, 2048, 4096, 8192, 16384)
FORWARD_CAUSAL_TFLOP_S = (191, 260, 298, 319, 333, 335)
FORWARD_FULL_TFLOP_S = (309, 350, 362, 368, 370, 370)
BACKWARD_FULL_TFLOP_S = (214, 260, 291, 310, 318, 322)
H100_SXM_BF16_FLOP_S = 989.4e12  # the catalog's H100 SXM datasheet figure
#: the nodes that are the flash_attn package's kernel (attention_choice captures flash_attention_2 as them)
FLASH_ATTN_TARGETS = frozenset({"_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward"})


def fa2_rate_flop_per_s(*, backward: bool, causal: bool, keys: int, peak_bf16_flop_per_s: float) -> float:
    """FA2's rate on a Hopper GPU of that bf16 peak, in the paper's FLOPs (half the square when causal)."""
    x = np.log2(np.clip(keys, SEQ_TOKENS[0], SEQ_TOKENS[-1]))
    grid = np.log2(SEQ_TOKENS)
    rate = np.interp(x, grid, BACKWARD_FULL_TFLOP_S if backward else FORWARD_FULL_TFLOP_S)
    if causal:
        rate *= np.interp(x, grid, FORWARD_CAUSAL_TFLOP_S) / np.interp(x, grid, FORWARD_FULL_TFLOP_S)
    return float(rate) * 1e12 * peak_bf16_flop_per_s / H100_SXM_BF16_FLOP_S


def seconds_per_graph_flop(graph: Any, device: Any) -> np.ndarray:
    """Per node: the fewest seconds per FLOP of the graph's count FA2 allows on ``device`` (0 where it does not
    apply: another op, another kernel, or a GPU that is not a Hopper)."""
    out = np.zeros(len(graph.nodes))
    if getattr(device, "kind", None) != "gpu" or getattr(device, "arch", None) != "hopper":
        return out
    from perfpredict.hardware.devices import datasheet_device

    peak, _ = datasheet_device(device).peak_flops("bfloat16", True)  # the paper's H100 ran at its datasheet's
    for i, node in enumerate(graph.nodes):
        if node.target not in FLASH_ATTN_TARGETS or len(node.inputs) < 2 or len(node.inputs[1].shape) < 2:
            continue
        causal = bool(node.attrs.get("is_causal"))
        keys = int(node.inputs[1].shape[-2])
        rate = fa2_rate_flop_per_s(
            backward=bool(node.attrs.get("backward")), causal=causal, keys=keys, peak_bf16_flop_per_s=peak
        )
        out[i] = (0.5 if causal else 1.0) / rate  # a causal kernel does half the square the graph counts
    return out
