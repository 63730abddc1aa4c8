"""Mixture-of-experts layers that route with data (``nonzero``, ``torch.where`` on a mask), captured on meta tensors.

Some MoE layers loop over their experts and gather each expert's tokens with a boolean mask (Switch Transformers'
``SwitchTransformersExperts``): how many tokens an expert gets depends on the router's values, which meta and
fake tensors do not have, so the capture fails at ``nonzero``. While capturing, :func:`static_routing` gives each
such layer a forward that routes a fixed, balanced share of the tokens: each expert takes
``tokens x top_k / experts`` of them, capped by the router's capacity (tokens per expert per sequence) where it has
one. It runs the same kernels as the real layer (a gather, the expert MLP, the weighting, a scatter-add), on
balanced shapes. Real routers are not balanced; the graph carries a note saying what was assumed.
"""

from __future__ import annotations

import contextlib
import math
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

ROUTING_NOTE = (
    "MoE routing: each expert of a data-routed MoE layer takes a balanced share of the tokens (tokens x top-k / "
    "experts, capped by its capacity); real routers are not balanced"
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
def static_routing(model: Any, config: Any, batch_size: int) -> Iterator[bool]:
    """While inside, every data-routed MoE layer of ``model`` routes a balanced share statically; yields whether
    any layer was changed (then the graph should carry :data:`ROUTING_NOTE`)."""
    patched = []
    for module in model.modules():
        shim = SHIMS.get(type(module).__name__)
        if shim is not None:
            forward, read = shim
            routing = read(config, batch_size)
            module.forward = types.MethodType(lambda self, *a, _f=forward, _r=routing: _f(self, _r, *a), module)
            patched.append(module)
    try:
        yield bool(patched)
    finally:
        for module in patched:
            del module.forward  # back to the class's own forward
