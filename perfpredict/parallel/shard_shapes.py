"""Shapes of a shard: one dimension of a tensor divided by the number of ranks that share it.

An op inside a split region gets its inputs' shard shapes from the ops that produced them. Its outputs are
split along the dimension the inputs were split along where that can be seen (the same shape, or the same size at
the same position); otherwise along a dimension whose size was split upstream or is a head count, else the
largest divisible one. NB: for a reshape this can pick the wrong one of two equal sizes; a reshape is a view and
costs nothing, and the FLOP and byte counts of every op scale with the sizes, whichever dimension was divided.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace

from perfpredict.core.graph import OpNode, TensorMeta


def divide(meta: TensorMeta, dim: int, parts: int) -> TensorMeta:
    """``meta`` with dimension ``dim`` divided into ``parts`` (rounded up: a padded shard, as Megatron pads)."""
    shape = list(meta.shape)
    shape[dim] = -(-shape[dim] // parts)
    return TensorMeta(tuple(shape), meta.dtype)


def split_dim(old: TensorMeta, new: TensorMeta) -> int | None:
    """The dimension in which ``new`` is smaller than ``old`` (None when they are the same shape)."""
    for d, (a, b) in enumerate(zip(old.shape, new.shape)):
        if a != b:
            return d
    return None


def choose_dim(
    meta: TensorMeta,
    parts: int,
    sources: Sequence[tuple[TensorMeta, TensorMeta]],
    head_counts: Iterable[int],
) -> int | None:
    """The dimension of an output ``meta`` to split, given its op's split inputs ``sources`` ((old, new) pairs)."""
    shape = meta.shape
    if not shape:
        return None
    for old, new in sources:  # same rank, same size at the split position: an elementwise or broadcast op
        d = split_dim(old, new)
        if d is not None and len(old.shape) == len(shape) and shape[d] == old.shape[d]:
            return d
    for old, new in sources:  # a reshape: the dimension that starts where the split one did
        d = split_dim(old, new)
        if d is not None and old.numel == meta.numel and len(old.shape) != len(shape):
            lead = math.prod(old.shape[:d])
            hits = [e for e in range(len(shape)) if math.prod(shape[:e]) == lead and shape[e] % parts == 0]
            if hits:
                return hits[0]
    sizes = {old.shape[d] for old, new in sources if (d := split_dim(old, new)) is not None}
    for wanted in (sizes, set(head_counts)):
        hits = [d for d, n in enumerate(shape) if n in wanted and n % parts == 0]
        if hits:
            return ([d for d in hits if d > 0] or hits)[0]  # dim 0 is most often the batch
    divisible = [d for d, n in enumerate(shape) if n % parts == 0 and n >= parts]
    return max(divisible, key=lambda d: (shape[d], d)) if divisible else None


def ratio(old: Iterable[TensorMeta], new: Iterable[TensorMeta]) -> float:
    """Bytes of the new tensors over the old (1.0 where there were none)."""
    before = sum(t.nbytes for t in old)
    return sum(t.nbytes for t in new) / before if before else 1.0


def rescaled(
    node: OpNode,
    inputs: Sequence[TensorMeta],
    outputs: Sequence[TensorMeta],
    flops_ratio: float | None = None,
    params_ratio: float = 1.0,
) -> OpNode:
    """``node`` with new tensor shapes, its bytes scaled with its tensors' bytes and its FLOPs with its largest
    output (a reduction's with its largest input: side outputs such as attention's log-sum-exp do not count),
    unless ``flops_ratio`` says otherwise."""
    read = ratio(node.inputs, inputs)
    written = ratio(node.outputs, outputs)
    if flops_ratio is None:
        old, new = (node.inputs, inputs) if node.op == "reduction" else (node.outputs, outputs)
        flops_ratio = _largest_ratio(old, new)
    return replace(
        node,
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        flops=round(node.flops * flops_ratio),
        bytes_read=round(node.bytes_read * read),
        bytes_written=round(node.bytes_written * written),
        params=round(node.params * params_ratio),
    )


def _largest_ratio(old: Sequence[TensorMeta], new: Sequence[TensorMeta]) -> float:
    if not old:
        return 1.0
    j = max(range(len(old)), key=lambda k: old[k].numel)
    return new[j].numel / old[j].numel if old[j].numel else 1.0
