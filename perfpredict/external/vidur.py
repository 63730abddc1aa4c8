"""Vidur's fp16 operator profiles (github microsoft/vidur, MIT) as op rows.

What Vidur timed (``vidur/profiling/mlp/``): one transformer layer's operators in vLLM's (sarathi's) kernels, fp16,
for ``num_tokens`` tokens at tensor-parallel degree 1-8 (the layer's shard on one GPU; no communication): 2 warm-up
steps, then 20 timed steps with ``torch.profiler`` (kineto), the CUDA time of each operator's kernels; the profile
keeps min, max, mean, median and std, and a row here is the **median**. The GPUs are an A100 80GB (DGX), an H100 (DGX)
and an A40 (``data/profiling/compute/{a100,h100,a40}/<model>/mlp.csv``).

Operators per row of ``mlp.csv``: ``emb`` (vocab-parallel embedding lookup), ``input_layernorm`` and
``post_attention_layernorm`` (fused RMSNorm, or LayerNorm for phi-2), ``attn_pre_proj`` (the QKV projection),
``attn_rope`` (fused rotary embedding, in place on q and k), ``attn_post_proj`` (the output projection),
``mlp_up_proj`` (gate and up projections together where the MLP is gated), ``mlp_act`` (fused SiLU-and-mul, or
GELU), ``mlp_down_proj`` and ``add`` (the residual add). phi-2's ``add`` is two adds in one timer (attention, MLP
and residual summed) and is left out.

**Held out, never read:** the profiles of 70B-and-larger models (Llama-2-70B, Meta-Llama-3-70B, Qwen-72B) are a
test set kept apart. :data:`MODELS` is an allow-list, and :func:`held_out` refuses any path naming such a model
before it is opened.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from perfpredict.core import ops
from perfpredict.external.op_rows import op_row
from perfpredict.external.source_tree import SourceTree

SOURCE = "vidur"
COMPUTE = "data/profiling/compute"
GPUS = {"a100": "A100-80GB", "h100": "H100-SXM", "a40": "A40"}  # Vidur's SKU folders: DGX A100 80GB, DGX H100, A40
DEVICE_METHOD = "kineto_cuda_time_median_of_20"
F16 = "float16"
_HELD_OUT = re.compile(r"(^|[^0-9])(7[0-9]|[89][0-9]|[1-9][0-9]{2,})b", re.IGNORECASE)  # 70B and larger


@dataclass(frozen=True)
class ModelSpec:
    """The parts of a Vidur model config that shape its operators (``vidur/config/model_config.py``)."""

    bias: bool = False
    qkv_bias: bool = False
    norm: str = "rms_norm"
    post_attn_norm: bool = True
    rotary_fraction: float = 1.0


MODELS = {  # the allowed models: everything else in the folder is skipped, the 70B+ ones refused
    "meta-llama/Llama-2-7b-hf": ModelSpec(),
    "meta-llama/Meta-Llama-3-8B": ModelSpec(),
    "codellama/CodeLlama-34b-Instruct-hf": ModelSpec(),
    "internlm/internlm-20b": ModelSpec(),
    "microsoft/phi-2": ModelSpec(True, True, "layer_norm", False, 0.4),
}


def held_out(path: str) -> bool:
    """Whether ``path`` names a model of 70B parameters or more (Vidur's held-out test set)."""
    return bool(_HELD_OUT.search(path))


def convert(tree: SourceTree, device_name: Any = None) -> Iterator[dict[str, Any]]:
    """Every op row of the allowed models' ``mlp.csv`` profiles (``device_name`` is unused: the SKU folders map
    to catalog names through :data:`GPUS`)."""
    for path in tree.files(COMPUTE):
        if held_out(path):
            continue  # never opened
        parts = path.split("/")
        if not path.endswith("/mlp.csv") or len(parts) < 7 or parts[3] not in GPUS:
            continue
        model = "/".join(parts[4:6])
        if model not in MODELS:
            continue
        for rec in csv.DictReader(io.StringIO(tree.read_text(path))):
            for row in layer_rows(rec, MODELS[model]):
                row.update(
                    source=SOURCE,
                    source_file=path,
                    source_split="-",
                    device=GPUS[parts[3]],
                    env_device_name=parts[3],
                    env_torch_version="",
                    device_method=DEVICE_METHOD,
                    model=model,
                    tensor_parallel=int(rec["num_tensor_parallel_workers"]),
                )
                yield row


def layer_rows(rec: dict[str, str], spec: ModelSpec) -> Iterator[dict[str, Any]]:
    """One row per timed operator of one profile record (the layer's shard at one token count and TP degree)."""
    tp = int(rec["num_tensor_parallel_workers"])
    tokens, embed = int(rec["num_tokens"]), int(rec["n_embd"])
    head = embed // int(rec["n_head"])
    q, kv = int(rec["n_head"]) // tp * head, max(int(rec["n_kv_head"]) // tp, 1) * head
    hidden = int(rec["n_expanded_embd"]) // tp
    gated = rec["use_gated_mlp"].strip().lower() == "true"
    shapes = {
        "emb": ("embedding", [([int(rec["vocab_size"]) // tp, embed], F16), ([tokens], "int64")], [tokens, embed]),
        "attn_pre_proj": _linear(tokens, embed, q + 2 * kv, spec.qkv_bias or spec.bias),
        "attn_post_proj": _linear(tokens, q, embed, spec.bias),
        "mlp_up_proj": _linear(tokens, embed, 2 * hidden if gated else hidden, spec.bias),
        "mlp_down_proj": _linear(tokens, hidden, embed, spec.bias),
        "input_layernorm": _norm(tokens, embed, spec.norm),
        "post_attention_layernorm": _norm(tokens, embed, spec.norm),
        "add": ("add", [([tokens, embed], F16)] * 2, [tokens, embed]),
    }
    if not spec.post_attn_norm:
        shapes.pop("add")  # phi-2: two adds under one timer
    for name, (target, inputs, out) in shapes.items():
        ms = _median(rec, name)
        if ms is not None:
            yield op_row(target=target, inputs=inputs, output=(out, F16), device_ms=ms, source_op=name)
    act = _median(rec, "mlp_act")
    if act is not None:  # fused SiLU-and-mul reads the gate and up halves and writes one; GELU one in, one out
        width = 2 * hidden if gated else hidden
        per_element = (
            ops.ELEMENTWISE_FLOPS_PER_ELEMENT["silu"] + 1 if gated else ops.ELEMENTWISE_FLOPS_PER_ELEMENT["gelu"]
        )
        yield op_row(
            target="silu_and_mul" if gated else "gelu",
            kind=ops.ELEMENTWISE,
            inputs=[([tokens, width], F16)],
            output=([tokens, hidden], F16),
            flops=per_element * tokens * hidden,
            device_ms=act,
            source_op="mlp_act",
        )
    rope = _median(rec, "attn_rope")
    if rope is not None:  # in place on q and k: each element read and written once (the positions are tiny)
        yield op_row(
            target="rotary_embedding",
            kind=ops.ELEMENTWISE,
            inputs=[([tokens, q], F16), ([tokens, kv], F16), ([tokens], "int64")],
            output=([tokens, q + kv], F16),
            flops=int(4 * tokens * (q + kv) * spec.rotary_fraction),
            device_ms=rope,
            source_op="attn_rope",
        )


def _linear(tokens: int, k: int, n: int, bias: bool) -> tuple[str, list, list[int]]:
    inputs = [([tokens, k], F16), ([n, k], F16)] + ([([n], F16)] if bias else [])
    return "linear", inputs, [tokens, n]


def _norm(tokens: int, embed: int, norm: str) -> tuple[str, list, list[int]]:
    inputs = [([tokens, embed], F16), ([embed], F16)] + ([([embed], F16)] if norm == "layer_norm" else [])
    return norm, inputs, [tokens, embed]


def _median(rec: dict[str, str], op: str) -> float | None:
    raw = rec.get(f"time_stats.{op}.median")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None
