"""How a search captures its candidates: each model to CostArrays, affine in the batch where several batches are
asked for, with the search's block cache (``compiler_hooks/block_reuse.py``) shared across candidates."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfpredict.api import affine_arrays
from perfpredict.compiler_hooks.block_reuse import BlockCache
from perfpredict.core.errors import InvalidInputError


@dataclass
class Candidates:
    """``batch_sizes``: the batches to predict (None: each candidate's own); ``reuse``: the block cache, or None."""

    batch_sizes: Sequence[int] | None = None
    phase: str = "inference"
    dtype: str | None = None
    capture: str = "meta"
    reuse: BlockCache | None = field(default_factory=BlockCache)

    def __post_init__(self) -> None:
        if self.batch_sizes is not None:
            batches = [int(b) for b in self.batch_sizes]
            if not batches or min(batches) < 1:
                raise InvalidInputError(f"batch_sizes {list(self.batch_sizes)!r} must be one or more sizes >= 1")
            self.batch_sizes = batches

    def arrays(self, model: Any, inputs: Any) -> Any:
        """The candidate's CostArrays: one capture at its own batch where no batch sizes are asked for, else two
        (at its batch b and b+1), which make every per-op count affine in the batch."""
        from perfpredict.compiler_hooks.capture import capture_graph
        from perfpredict.predictors.cost_arrays import CostArrays

        if self.reuse is not None:
            self.reuse.next_candidate()
        args = tuple(inputs) if isinstance(inputs, (list, tuple)) else (inputs,)

        def capture(a: tuple) -> Any:
            return capture_graph(
                model,
                a,
                {},
                phase=self.phase,
                dtype=self.dtype,
                name=type(model).__name__,
                capture=self.capture,
                reuse=self.reuse,
            )

        if self.batch_sizes is None or list(self.batch_sizes) == [_leading(args)]:
            return CostArrays.from_graph(capture(args))
        return affine_arrays(capture, args, self.capture)

    def batches_for(self, arrays: Any) -> np.ndarray:
        """The batches to evaluate a candidate at: those asked for, else its own."""
        own = [arrays.graph.batch_size] if arrays is not None else [1]
        return np.array(self.batch_sizes or own, dtype=float)


def _leading(args: tuple) -> int | None:
    """The batch the graph will report: the first dimension of the first input with one."""
    first = next((a for a in args if getattr(a, "dim", lambda: 0)() > 0), None)
    return int(first.shape[0]) if first is not None else None
