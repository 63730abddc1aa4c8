"""LLM-Inference-Bench (Argonne, BSD-3): its ``Plots/All_results.csv`` as one compact parquet table.

Each row of the source is one batch through an engine's generate call: ``Latency`` is the wall time in seconds of
``batch`` requests of ``input`` prompt tokens and as many new tokens (input = output length), and ``Throughput`` is
(input + output) x batch / latency. The table is converted as it is (every engine and accelerator), with the
columns renamed to carry their units, the catalog device each NVIDIA GPU maps to, and the source's line number:

    python -m perfpredict.external.llm_inference_bench <a clone or git directory of argonne-lcf/LLM-Inference-Bench>

Which GPUs: the A100 rows come from ALCF's Polaris (the A100 scripts' PBS directives name its file systems and
project), whose nodes hold four A100-SXM4-40GB; the H100 rows from an H100 node of ALCF's JLSE testbed, taken as
the SXM part (80 GB HBM3; a PCIe H100 could not stream Llama-2-7B's 13.5 GB of weights in the 7.7 ms per token
measured at batch 1 at any achievable bandwidth, with the engine's own time on top).
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from pathlib import Path

SOURCE = "github.com/argonne-lcf/LLM-Inference-Bench"
CSV_IN_REPO = "Plots/All_results.csv"
POWER_IN_REPO = "Plots/Fig_16_a_b/power_results.csv"  # the same runs' mean power (the paper's Fig. 16)
POWER = "power.csv"
OUT_DIR = Path(__file__).resolve().parents[2] / "data" / "external" / "llm_inference_bench"
TABLE = "all_results.parquet"
DEVICE_OF = {"Nvidia H100 GPU": "H100-SXM", "Nvidia A100 GPU": "A100-40GB", "Nvidia GH200 GPU": "GH200"}
COLUMNS = (
    ("hardware", "Hardware", str),
    ("gpus", "Num of Hardware", int),
    ("framework", "Framework", str),
    ("model", "Model", str),
    ("input_tokens", "Input Output Length", int),
    ("batch", "Batch Size", int),
    ("latency_s", "Latency", float),
    ("throughput_tokens_per_s", "Throughput", float),
)


def rows_of(text: str) -> list[dict]:
    """The source CSV's rows with perfpredict's column names (``output_tokens`` equals ``input_tokens``)."""
    out = []
    for line, raw in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        row = {name: kind(raw[src].strip()) for name, src, kind in COLUMNS}
        row["output_tokens"] = row["input_tokens"]
        row["device"] = DEVICE_OF.get(row["hardware"], "")
        row["source_line"] = line
        out.append(row)
    return out


def power_rows(text: str) -> list[dict]:
    """The power table's rows (``avg_power`` is milliwatts, NVML's unit: here ``power_w``, watts per GPU), its
    blank separator lines dropped."""
    out = []
    for line, raw in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        if not (raw.get("Hardware") or "").strip():
            continue
        row = {name: kind(raw[src].strip()) for name, src, kind in COLUMNS}
        row.update(output_tokens=row["input_tokens"], device=DEVICE_OF.get(row["hardware"], ""), source_line=line,
                   power_w=float(raw["avg_power"]) / 1e3)  # fmt: skip
        out.append(row)
    return out


def write_power(rows: list[dict], out_dir: Path = OUT_DIR) -> Path:
    path = out_dir / POWER
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_power(path: Path = OUT_DIR / POWER) -> list[dict]:
    with path.open() as f:
        return [{k: (int(v) if k in ("gpus", "input_tokens", "output_tokens", "batch", "source_line") else
                     float(v) if k in ("latency_s", "throughput_tokens_per_s", "power_w") else v)
                 for k, v in r.items()} for r in csv.DictReader(f)]  # fmt: skip


def write(rows: list[dict], commit: str, out_dir: Path = OUT_DIR) -> Path:
    """The rows as ``all_results.parquet`` (the source commit in the file's metadata)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows)
    table = table.replace_schema_metadata({"source": SOURCE, "path": CSV_IN_REPO, "commit": commit})
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / TABLE
    pq.write_table(table, path, compression="zstd")
    return path


def read(path: Path = OUT_DIR / TABLE) -> list[dict]:
    """The converted rows (what the benchmark scores)."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def main(argv: list[str] | None = None) -> int:
    from perfpredict.external.source_tree import SourceTree

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path", help="the fetched repository: a clone or a git directory")
    p.add_argument("--commit", default="", help="the source commit (read from a git directory when left out)")
    p.add_argument("--out", type=Path, default=OUT_DIR)
    args = p.parse_args(argv)
    tree = SourceTree.open(args.path)
    commit = args.commit or tree.commit()
    rows = rows_of(tree.read_text(CSV_IN_REPO))
    path = write(rows, commit, args.out)
    print(f"{len(rows)} rows from {SOURCE}@{commit[:12] or '?'} -> {path}")
    power = power_rows(tree.read_text(POWER_IN_REPO))
    print(f"{len(power)} power rows -> {write_power(power, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
