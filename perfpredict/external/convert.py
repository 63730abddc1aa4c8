"""Convert a fetched public repository into ``data/external/<source>/``: ``python -m perfpredict.external.convert``.

    python -m perfpredict.external.convert neusight /path/to/NeuSight      # a clone, or a bare git directory
    python -m perfpredict.external.convert vidur /path/to/vidur

Writes ``ops.parquet`` (the op rows) and, for NeuSight, ``e2e_published.csv`` (its end-to-end table, for scoring
only), for Vidur ``collectives.parquet`` (its measured NCCL all-reduce and send/recv, ``vidur_network``) into the
source's folder, and prints the row counts the folder's README quotes.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path

from perfpredict.core.units import MIB
from perfpredict.external import neusight, neusight_models, vidur, vidur_network
from perfpredict.external.op_rows import EXTERNAL_DIR, write_rows
from perfpredict.external.source_tree import SourceTree

CONVERTERS = {"neusight": neusight.convert, "vidur": vidur.convert}


def catalog_name(gpu: str) -> str:
    """The catalog name of a GPU as a source wrote it (``NVIDIA H100 80GB HBM3`` -> ``H100-SXM``)."""
    from perfpredict.hardware.devices import get_device

    return get_device(gpu.replace("_", " ")).name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", choices=sorted(CONVERTERS))
    p.add_argument("path", help="the fetched repository: a clone or a git directory")
    p.add_argument("--out", type=Path, default=None, help="default: data/external/<source>")
    args = p.parse_args(argv)
    tree = SourceTree.open(args.path)
    out = args.out or EXTERNAL_DIR / args.source
    rows = list(CONVERTERS[args.source](tree, catalog_name))
    path = write_rows(rows, out)
    print(f"{len(rows)} op rows -> {path} ({path.stat().st_size / MIB:.1f} MiB)")
    for (device, split), n in sorted(Counter((r["device"], r["source_split"]) for r in rows).items()):
        print(f"  {device:16s} {split:6s} {n}")
    for (kind, dtype), n in sorted(Counter((r["kind"], r["dtype"]) for r in rows).items()):
        print(f"  {kind:12s} {dtype:9s} {n}")
    if args.source == "neusight":
        for path in neusight_models.copy_configs(tree, out / "configs"):
            print(f"model config -> {path}")
        table = neusight.e2e_table(tree)
        with (out / "e2e_published.csv").open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(table[0]))
            writer.writeheader()
            writer.writerows(table)
        print(f"{len(table)} end-to-end rows -> {out / 'e2e_published.csv'} (scoring only)")
    if args.source == "vidur":
        network = vidur_network.convert(tree)
        path = vidur_network.write(network, out, tree.commit())
        print(f"{len(network)} collective rows -> {path} ({path.stat().st_size / MIB:.2f} MiB)")
        for key, n in sorted(
            Counter((r["system"], r["collective"], r["ranks"], r["ranks_per_node"]) for r in network).items()
        ):
            print(f"  {key[0]:22s} {key[1]:10s} {key[2]:2d} ranks, {key[3]} per node: {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
