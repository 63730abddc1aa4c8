"""A measured op row's shape (the op collector's rows, ``profiling/collect_ops.py``), as the op-efficiency models
take it: the fitters of the GPU, CPU and per-op efficiency models all read their rows through this.
"""

from __future__ import annotations

from typing import Any

from perfpredict.predictors.op_efficiency import OpShape


def row_shape(row: dict[str, Any]) -> OpShape:
    """An op row's OpShape; the output shape comes from running its key on the meta device."""
    from perfpredict.profiling.op_instances import OpInstance

    op = OpInstance.from_key(row["key"])
    out = op.build("meta")()
    first = out[0] if isinstance(out, (list, tuple)) and out else out
    shape = tuple(int(s) for s in getattr(first, "shape", ()))
    ins = tuple(tuple(t["t"]) for t in op.tensors()[:2])
    groups = 1
    if op.name in ("convolution", "convolution_backward"):  # aten's groups argument, by position
        pos = 8 if op.name == "convolution" else 9
        groups = int(op.args[pos]) if len(op.args) > pos and isinstance(op.args[pos], int) else 1
    return OpShape(
        row["kind"],
        row["dtype"],
        float(row.get("flops") or 0),
        float((row.get("in_bytes") or 0) + (row.get("out_bytes") or 0)),
        shape,
        ins,
        groups,
    )
