"""Mixture-of-experts layers captured on meta tensors, with one static, balanced route at every door.

How many tokens an expert gets depends on the router's values, which meta and fake tensors do not have. transformers
runs its MoE layers two ways, and both are captured with the same assumption, that the router is balanced:

- Switch Transformers' ``SwitchTransformersExperts`` loops over its experts and gathers each one's tokens with a
  boolean mask: the capture would fail at ``nonzero``. While capturing, :func:`static_routing` gives each such layer
  a forward that routes a fixed, balanced share of the tokens: each expert takes ``tokens x top_k / experts`` of
  them, capped by the router's capacity (tokens per expert per sequence) where it has one. It runs the same kernels
  as the real layer (a gather, the expert MLP, the weighting, a scatter-add), on balanced shapes.
- Mixtral, Qwen2-MoE, DeepSeek-V2/V3, OLMoE and the other ``@use_experts_implementation`` layers sort the
  ``tokens x top_k`` (token, expert) pairs by expert and run one grouped matmul per projection
  (transformers' ``grouped_mm``): its shapes are static, so it is captured as it is, one grouped matmul over
  ``tokens x top_k`` rows and every expert's weights, the rows split evenly (the kernel's cost assumes no expert
  gets more than its share).

Real routers are not balanced; every graph of an MoE model carries :data:`ROUTING_NOTE`, and the report states it
among its assumptions. The capture (``capture.capture_graph``) applies this for the Python API, the CLI's configs,
generation and NeuSight's programs alike.
"""

from __future__ import annotations

import contextlib
import math
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: the prefix of :data:`ROUTING_NOTE` (the report lifts the note into its assumptions)
NOTE_PREFIX = "MoE routing: "
ROUTING_NOTE = (
    f"{NOTE_PREFIX}static and balanced: each expert takes tokens x top-k / experts of the tokens (capped by its "
    "capacity where the router has one, as Switch Transformers'), and every expert's weights are read; real routers "
    "are not balanced"
)


@dataclass(frozen=True)
class Routing:
    """What a balanced route needs: experts per layer, experts per token, tokens per expert per sequence (or
    None), and the sequences in the batch."""

    experts: int
    top_k: int
    capacity: int | None
    sequences: int

    def rows(self, tokens: int) -> int:
        """Tokens each expert takes out of ``tokens`` routed."""
        balanced = math.ceil(tokens * self.top_k / self.experts)
        return max(1, min(balanced, self.capacity * self.sequences) if self.capacity else balanced)


def _switch_forward(self: Any, routing: Routing, hidden_states: Any, selected_experts: Any, routing_weights: Any):
    """``SwitchTransformersExperts.forward`` with a balanced, static route."""
    import torch

    out = torch.zeros_like(hidden_states)
    rows = routing.rows(hidden_states.shape[0])
    index = torch.arange(rows, device=hidden_states.device)
    for name in sorted(self.keys()):
        taken = hidden_states.index_select(0, index)
        done = self[name](taken) * routing_weights.index_select(0, index)
        out.index_add_(0, index, done.to(hidden_states.dtype))
    return out


#: module class name -> (balanced forward, how to read its Routing from the model config)
SHIMS: dict[str, tuple[Callable[..., Any], Callable[[Any, int], Routing]]] = {
    "SwitchTransformersExperts": (
        _switch_forward,
        lambda cfg, batch: Routing(
            int(cfg.num_experts), 1, int(getattr(cfg, "expert_capacity", 0) or 0) or None, batch
        ),
    ),
}


@contextlib.contextmanager
def static_routing(model: Any, batch_size: int, config: Any = None) -> Iterator[bool]:
    """While inside, every data-routed MoE layer of ``model`` routes a balanced share statically (sizes read from
    ``config``, else the model's own); yields whether ``model`` holds MoE layers of either kind (then the graph
    should carry :data:`ROUTING_NOTE`)."""
    patched, moe = [], False
    modules = list(model.modules()) if hasattr(model, "modules") else []
    if config is None:  # the model's, or a wrapper's inner model's (generation's decode step)
        config = next((m.config for m in modules if getattr(m, "config", None) is not None), None)
    for module in modules:
        name = type(module).__name__
        moe = moe or name.endswith("Experts")
        shim = SHIMS.get(name)
        if shim is not None:
            forward, read = shim
            routing = read(config, batch_size)
            module.forward = types.MethodType(lambda self, *a, _f=forward, _r=routing: _f(self, _r, *a), module)
            patched.append(module)
    try:
        yield moe
    finally:
        for module in patched:
            del module.forward  # back to the class's own forward
