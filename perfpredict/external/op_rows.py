"""External op rows: one public GPU measurement of one op, in the project's op-row schema.

A row carries what the device-time model needs and what ``perfpredict collect --ops`` writes for our own GPU rows:
the catalog ``device``, the canonical ``kind``, ``dtype``, ``flops``, ``in_bytes``, ``out_bytes`` and the measured
``device_ms``, plus the op's ``target`` (its aten or fused-kernel name), its tensor shapes (``out_shape``,
``in_shapes``, JSON) and, where the op is a plain aten call, its :class:`~perfpredict.profiling.op_instances.OpInstance`
``key`` (so a GPU lease can re-time the very same op). FLOPs and bytes follow the frontends' own rules
(:func:`perfpredict.core.op_kinds.op_flops` and ``op_bytes``; every input read once, every output written once), so a
feature computed from a row equals the one computed from an OpGraph node of the same shape.

Provenance columns: ``source``, ``source_file``, ``source_split`` (the source's own train/test split, where it has
one), ``source_op``, ``env_device_name`` (the GPU's name as the source wrote it), ``env_torch_version`` and
``device_method`` (how the source timed it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from perfpredict.compiler_hooks.op_table import classify
from perfpredict.core import op_kinds, ops
from perfpredict.core.graph import TensorMeta

#: where converted sources live, one folder each (``data/external/<source>/ops.parquet``)
EXTERNAL_DIR = Path(__file__).resolve().parents[2] / "data" / "external"
OPS_FILE = "ops.parquet"
SCHEMA_VERSION = 1
COLUMNS = (
    "schema_version",
    "row_kind",
    "status",
    "source",
    "source_file",
    "source_split",
    "source_op",
    "device",
    "env_device_name",
    "env_torch_version",
    "device_method",
    "target",
    "kind",
    "dtype",
    "out_shape",
    "in_shapes",
    "flops",
    "in_bytes",
    "out_bytes",
    "device_ms",
    "model",
    "tensor_parallel",
    "key",
)


def op_row(
    *,
    target: str,
    inputs: Sequence[tuple[Sequence[int], str]],
    output: tuple[Sequence[int], str],
    device_ms: float,
    kind: str | None = None,
    args: Sequence[Any] = (),
    flops: int | None = None,
    **provenance: Any,
) -> dict[str, Any]:
    """One row: ``inputs`` and ``output`` are (shape, dtype); ``args`` are the call's non-tensor arguments where the
    FLOP rule needs them (a convolution's stride and padding); ``flops`` overrides the rule for fused kernels."""
    metas = [TensorMeta(tuple(int(d) for d in shape), dtype) for shape, dtype in inputs]
    out = TensorMeta(tuple(int(d) for d in output[0]), output[1])
    kind = kind or classify(target)
    if flops is None:
        flops = op_kinds.op_flops(kind, target, metas, list(args), {}, [out])
    read, written = op_kinds.op_bytes(kind, target, metas, [out], metas)
    row = dict.fromkeys(COLUMNS)
    row.update(provenance)
    row.update(
        schema_version=SCHEMA_VERSION,
        row_kind="op",
        status="ok",
        target=target,
        kind=kind,
        dtype=out.dtype if out.dtype in ops.FLOAT_DTYPES else metas[0].dtype,
        out_shape=json.dumps(list(out.shape)),
        in_shapes=json.dumps([list(m.shape) for m in metas]),
        flops=int(flops),
        in_bytes=int(read),
        out_bytes=int(written),
        device_ms=float(device_ms),
    )
    return row


def write_rows(rows: Iterable[dict[str, Any]], folder: Path) -> Path:
    """Write rows as ``folder/ops.parquet`` (zstd), sorted for a stable diff; returns the path."""
    import pandas as pd

    frame = pd.DataFrame(list(rows), columns=list(COLUMNS))
    frame = frame.sort_values(["device", "source_op", "source_split", "out_shape", "in_shapes"], kind="stable")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / OPS_FILE
    frame.to_parquet(path, index=False, compression="zstd", compression_level=19)
    return path


def load_rows(sources: Sequence[str] | None = None, root: Path = EXTERNAL_DIR) -> Any:
    """Every converted op row (a DataFrame) of ``sources`` (default: every folder of ``root`` with rows)."""
    import pandas as pd

    folders = [root / s for s in sources] if sources else sorted(p for p in root.iterdir() if p.is_dir())
    frames = [pd.read_parquet(f / OPS_FILE) for f in folders if (f / OPS_FILE).is_file()]
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.concat(frames, ignore_index=True)


def numel(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)
