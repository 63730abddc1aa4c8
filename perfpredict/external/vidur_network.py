"""Vidur's measured NCCL collectives (github microsoft/vidur, MIT) as one compact table.

What Vidur timed (``vidur/profiling/collectives/``): ``torch.distributed.all_reduce`` (and a ``send``/``recv`` pair)
of a float16 buffer over NCCL, one Ray actor per GPU, ranks packed in order on each node (``devices_per_node`` of
a node's ``max_devices_per_node`` GPUs; more ranks than that span nodes). Per configuration: a barrier, then 11
collectives launched back to back without CUDA graphs (``DISABLE_GRAPH``), under ``torch.profiler`` (kineto); a
timing is the **median over the 11 of each NCCL kernel's CUDA time** (kernels whose name starts with ``nccl``), and
that is repeated 3 times: the profile keeps min, max, mean, median and std of the 3 (min, median and max are
converted), and rank 0's row is written.
So a row is a kernel's device time, without the host's launch cost, and includes a rank's wait for its peers inside
the kernel. ``size`` is bytes (Vidur's element count x 2): 2 KiB to 64 MiB in most folders, 512 MiB for the A100
NVLink pairs.

The systems (``data/profiling/network/<system>/``): ``a100_dgx`` and ``h100_dgx`` (8 GPUs per node on NVSwitch,
nodes over InfiniBand), ``a100_pairwise_nvlink`` and ``h100_pairwise_nvlink`` (4 GPUs per node, NVLink-bridged in
pairs, PCIe between pairs), ``a40_pairwise_nvlink`` (send/recv only; its ``all_reduce.csv`` is empty). NB: the
``send_recv.csv`` of ``h100_pairwise_nvlink`` is byte-identical to ``a100_pairwise_nvlink``'s (the same git blob):
it is kept, marked ``duplicate_of``, and left out of every fit.

    python -m perfpredict.external.convert vidur /path/to/vidur    # also writes collectives.parquet
"""

from __future__ import annotations

import csv
import hashlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from perfpredict.external.source_tree import SourceTree

NETWORK = "data/profiling/network"
COLLECTIVES_FILE = "collectives.parquet"
KINDS = ("all_reduce", "send_recv")
STATS = ("min", "median", "max")  # of the 3 repeats (mean and std are left out: 3 values)
#: Vidur's system folders -> (catalog device, what the machine is)
SYSTEMS = {
    "a100_dgx": ("A100-80GB", "DGX A100: 8 A100-SXM4-80GB on NVSwitch per node, HDR InfiniBand between nodes"),
    "h100_dgx": ("H100-SXM", "DGX H100: 8 H100-SXM5 on NVSwitch per node, NDR InfiniBand between nodes"),
    "a100_pairwise_nvlink": ("A100-80GB-PCIe", "4 A100 PCIe per node, NVLink bridges join pairs, PCIe between"),
    "h100_pairwise_nvlink": ("H100-NVL", "4 H100 NVL per node, NVLink bridges join pairs, PCIe between"),
    "a40_pairwise_nvlink": ("A40", "4 A40 per node, NVLink bridges join pairs, PCIe between"),
}
COLUMNS = (
    "system", "device", "collective", "ranks", "ranks_per_node", "nodes", "size_bytes",
    *(f"{s}_ms" for s in STATS), "source_file", "duplicate_of",
)  # fmt: skip


def convert(tree: SourceTree) -> list[dict[str, Any]]:
    """Every row of every ``all_reduce.csv`` and ``send_recv.csv`` under the network profiles."""
    seen: dict[str, str] = {}  # content digest -> first file with it
    out: list[dict[str, Any]] = []
    for path in tree.files(NETWORK):
        parts = path.split("/")
        name = parts[-1].removesuffix(".csv")
        if len(parts) != 5 or name not in KINDS or parts[3] not in SYSTEMS:
            continue
        text = tree.read_text(path)
        if not text.strip():
            continue  # a40_pairwise_nvlink/all_reduce.csv is empty
        digest = hashlib.sha256(text.encode()).hexdigest()
        duplicate = seen.setdefault(digest, path)
        out.extend(rows_of(text, parts[3], name, path, "" if duplicate == path else duplicate))
    return out


def rows_of(text: str, system: str, kind: str, path: str, duplicate_of: str = "") -> Iterator[dict[str, Any]]:
    """One row per configuration of one profile file, times in milliseconds as Vidur wrote them."""
    device = SYSTEMS[system][0]
    for rec in csv.DictReader(io.StringIO(text)):
        ranks, per_node = int(rec["num_workers"]), int(rec["devices_per_node"])
        row = {
            "system": system,
            "device": device,
            "collective": kind,
            "ranks": ranks,
            "ranks_per_node": min(per_node, ranks),
            "nodes": max(1, -(-ranks // per_node)),
            "size_bytes": int(rec["size"]),
            "source_file": path,
            "duplicate_of": duplicate_of,
        }
        row.update({f"{s}_ms": float(rec[f"time_stats.{kind}.{s}"]) for s in STATS})
        yield row


def write(rows: list[dict[str, Any]], folder: Path, commit: str = "") -> Path:
    """``folder/collectives.parquet`` (zstd; sorted for a stable diff; the source commit in its metadata)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = sorted(rows, key=lambda r: (r["system"], r["collective"], r["ranks"], r["ranks_per_node"], r["size_bytes"]))
    table = pa.Table.from_pylist([{c: r[c] for c in COLUMNS} for r in rows])
    table = table.replace_schema_metadata({"source": "github.com/microsoft/vidur", "path": NETWORK, "commit": commit})
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / COLLECTIVES_FILE
    pq.write_table(table, path, compression="zstd", compression_level=19)
    return path


def read(folder: Path | None = None) -> Any:
    """The converted table as a DataFrame (needs ``pyarrow`` and ``pandas``: ``pip install "perfpredict[data]"``)."""
    import pandas as pd

    from perfpredict.external.op_rows import EXTERNAL_DIR

    return pd.read_parquet((folder or EXTERNAL_DIR / "vidur") / COLLECTIVES_FILE)
