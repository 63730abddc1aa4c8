"""The model's own activation checkpointing, seen by the meta capture: ``torch.utils.checkpoint`` regions.

A capture on meta stand-ins records torch-level calls; a ``torch.utils.checkpoint`` call would only run its
function, and the region would be lost (so HF's ``gradient_checkpointing_enable()`` changed nothing). While a trace
runs, the two entry points ``checkpoint`` dispatches to (``CheckpointFunction.apply``, reentrant, and
``_checkpoint_without_reentrant_generator``, the default since PyTorch 2.4 and transformers' choice) are replaced by
stand-ins that run the function as it is and mark every op it records with the region (``meta["recompute"]`` and
``meta["ac_graph_id"]``, the tags dynamo's ``tag_activation_checkpoint`` leaves). AOTAutograd copies both tags onto
the joint graph's forward ops (``torch.fx.proxy._COPY_META_FIELDS``), where the frontend reads them
(``attrs["checkpoint"]``) and ``recompute.apply`` rewrites the step. A selective policy (``context_fn``) decides per
aten op, below what a meta capture records: its region is recomputed whole, and the graph's notes say so.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

SELECTIVE_NOTE = (
    "a torch.utils.checkpoint region with a selective policy (context_fn) is predicted as recomputing its whole "
    "forward; activation_checkpointing='selective-op' applies perfpredict's selective policy to every block"
)
_IDS = itertools.count(1)


def PREFER_RECOMPUTE() -> Any:  # noqa: N802 - named as the torch enum member it returns
    from torch.utils.checkpoint import CheckpointPolicy

    return CheckpointPolicy.PREFER_RECOMPUTE


@contextlib.contextmanager
def recorded(regions: list[int]) -> Iterator[None]:
    """While the block runs, ``torch.utils.checkpoint`` calls run their function with ``regions`` naming the open
    region (the innermost last). The caller's torch is restored afterwards."""
    import torch.utils.checkpoint as cp

    original_reentrant, original_generator = cp.CheckpointFunction, cp._checkpoint_without_reentrant_generator

    class Reentrant:
        @staticmethod
        def apply(function: Any, _preserve: Any, *args: Any) -> Any:
            regions.append(next(_IDS))
            try:
                return function(*args)
            finally:
                regions.pop()

    def without_reentrant(_fn: Any, _preserve: Any, context_fn: Any, *_rest: Any, **_kwargs: Any) -> Iterator[None]:
        regions.append(next(_IDS) if context_fn is cp.noop_context_fn else -next(_IDS))
        try:
            yield  # checkpoint() runs the function here; its second next() ends the generator
        finally:
            regions.pop()

    cp.CheckpointFunction, cp._checkpoint_without_reentrant_generator = Reentrant, without_reentrant
    try:
        yield
    finally:
        cp.CheckpointFunction, cp._checkpoint_without_reentrant_generator = original_reentrant, original_generator
