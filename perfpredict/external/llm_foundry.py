"""MosaicML llm-foundry's published MPT training throughput tables (Apache-2.0), as one compact CSV.

``scripts/train/benchmarking/README.md`` lists 216 training runs of MPT 125M-70B on the MosaicML platform: H100
80GB in bf16 and fp8, A100 80GB and 40GB in bf16, 8 to 512 GPUs, FSDP ``FULL_SHARD`` or ``SHARD_GRAD_OP``,
activation checkpointing on and off, sequences of 512 to 65,536 tokens; with the measured throughput (samples/s,
tokens/s, tokens/s per GPU), MFU and HFU. The tables are converted as they are, with the columns renamed to carry
their units, the catalog device each GPU maps to, the section (table) each row is from, its line in the README,
and the inter-node bandwidth per GPU the section's heading states (the A100 tables: "1600 Gbps node-node
interconnect (RoCE)", 200 Gb/s per GPU on 8-GPU nodes; the H100 tables state none):

    python -m perfpredict.external.llm_foundry <a clone or git directory of mosaicml/llm-foundry>
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

SOURCE = "github.com/mosaicml/llm-foundry"
README_IN_REPO = "scripts/train/benchmarking/README.md"
LICENSE_IN_REPO = "LICENSE"
OUT_DIR = Path(__file__).resolve().parents[2] / "data" / "external" / "llm_foundry"
TABLE = "runs.csv"
DEVICE_OF = {"h100_80gb": "H100-SXM", "a100_80gb": "A100-80GB", "a100_40gb": "A100-40GB"}
GPUS_PER_NODE = 8  # the MosaicML platform's 8-GPU nodes
#: (our column, the README's header, type)
COLUMNS = (
    ("model", "Model", str),
    ("seq_len", "SeqLen (T)", int),
    ("gpus", "# GPUs", int),
    ("gpu", "GPU", str),
    ("mfu_percent", "MFU", float),
    ("hfu_percent", "HFU", float),
    ("model_tflop_per_s_per_gpu", "Model TFLOP", int),
    ("micro_batch", "MicroBatchSize", int),
    ("grad_accum", "GradAccum", int),
    ("global_batch", "GlobalBatchSize", int),
    ("samples_per_s", "Throughput (S/s)", int),
    ("tokens_per_s", "Throughput (T/s)", int),
    ("tokens_per_s_per_gpu", "Throughput (T/s/GPU)", int),
    ("global_batch_tokens", "GlobalBatchSize (T)", int),
    ("precision", "Precision", str),
    ("mp_mode", "MP Mode", str),
    ("sharding", "Sharding Strategy", str),
    ("activation_checkpointing", "Activation Checkpointing", str),
    ("activation_cpu_offload", "Activation CPUOffload", str),
    ("num_params", "NumParams", int),
)
FIELDS = ("section", "source_line", "device", "inter_node_gbit_per_s", *(name for name, _, _ in COLUMNS))
_NODE_GBPS = re.compile(r"(\d[\d,]*)\s*Gbps node-node", re.IGNORECASE)


def rows_of(text: str) -> list[dict]:
    """Every run of every table in the README, under the heading of its table."""
    out: list[dict] = []
    section, header = "", None
    for line_no, line in enumerate(text.splitlines(), start=1):
        if line.startswith("## "):
            section, header = line[3:].strip(), None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.lstrip().startswith("|") else None
        if cells is None:
            continue
        if header is None and "Model" in cells:
            header = cells
        elif header is not None and cells and cells[0][:1].isdigit():
            raw = dict(zip(header, cells))
            row = {name: kind(raw[src]) for name, src, kind in COLUMNS}
            row.update(section=section, source_line=line_no, device=DEVICE_OF.get(row["gpu"], ""))
            row["inter_node_gbit_per_s"] = _per_gpu_gbps(section)
            out.append(row)
    return out


def _per_gpu_gbps(section: str) -> str:
    """The section heading's node-to-node bandwidth over the node's GPUs ("" when the heading states none)."""
    m = _NODE_GBPS.search(section)
    return f"{int(m.group(1).replace(',', '')) / GPUS_PER_NODE:g}" if m else ""


def write(rows: list[dict], out_dir: Path = OUT_DIR) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / TABLE
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def read(path: Path = OUT_DIR / TABLE) -> list[dict]:
    """The converted runs, typed as in :data:`COLUMNS` (``activation_checkpointing`` a bool)."""
    kinds = {name: kind for name, _, kind in COLUMNS}
    out = []
    with path.open() as f:
        for raw in csv.DictReader(f):
            row = {k: (kinds[k](v) if k in kinds else v) for k, v in raw.items()}
            row["source_line"] = int(row["source_line"])
            row["inter_node_gbit_per_s"] = float(row["inter_node_gbit_per_s"]) if row["inter_node_gbit_per_s"] else None
            for flag in ("activation_checkpointing", "activation_cpu_offload"):
                row[flag] = row[flag] == "True"
            out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    from perfpredict.external.source_tree import SourceTree

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", help="the fetched repository: a clone or a git directory")
    p.add_argument("--out", type=Path, default=OUT_DIR)
    args = p.parse_args(argv)
    tree = SourceTree.open(args.path)
    rows = rows_of(tree.read_text(README_IN_REPO))
    path = write(rows, args.out)
    (args.out / "LICENSE").write_text(tree.read_text(LICENSE_IN_REPO))
    print(f"{len(rows)} runs from {SOURCE}@{tree.commit()[:12] or '?'} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
