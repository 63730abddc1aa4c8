"""Mixture-of-experts decode: a step streams the weights of the experts its tokens reach, not all of them.

With E experts per layer and k chosen per token, T tokens routed independently and uniformly reach on average
E x (1 - (1 - k/E)^T) distinct experts: k at T = 1 (a batch-1 decode step), all E at a large prefill. The traced
graph's grouped expert GEMMs (``_grouped_mm``; ``grouped_mm_fallback`` in float32) read every expert's weight; ``apply`` scales that read to the
expected distinct experts. Real routers are not uniform (some experts are hot), which lowers the figure: it is
stated in the report as an assumption.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from perfpredict.core.graph import OpGraph


def experts_of(config: Any) -> tuple[int, int] | None:
    """(experts per layer, experts per token) of a MoE config, or None for a dense model."""
    experts = (
        getattr(config, "num_local_experts", None)
        or getattr(config, "num_experts", None)
        or getattr(config, "n_routed_experts", None)
    )
    top_k = getattr(config, "num_experts_per_tok", None)
    return (int(experts), int(top_k)) if experts and top_k else None


def expected_experts(experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts reached by ``tokens`` tokens, each choosing ``top_k`` of ``experts``."""
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def apply(graph: OpGraph, config: Any, tokens: int) -> OpGraph:
    """``graph`` with each grouped expert GEMM reading only the expected distinct experts' weights."""
    moe = experts_of(config)
    if moe is None:
        return graph
    share = expected_experts(*moe, tokens) / moe[0]
    nodes = list(graph.nodes)
    for i, n in enumerate(nodes):
        if n.target in ("_grouped_mm", "grouped_mm_fallback") and len(n.inputs) > 1:
            weight = n.inputs[1].nbytes
            nodes[i] = replace(n, bytes_read=int(n.bytes_read - weight * (1.0 - share)))
    return replace(graph, nodes=tuple(nodes))
