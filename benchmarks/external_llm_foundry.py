"""MosaicML llm-foundry's published MPT training throughput, reproduced: tokens/s per GPU, MFU and HFU.

    python benchmarks/external_llm_foundry.py            # writes benchmarks/results/external_llm_foundry.md

The table (``data/external/llm_foundry/runs.csv``, converted from llm-foundry's
``scripts/train/benchmarking/README.md`` by ``python -m perfpredict.external.llm_foundry``; Apache-2.0) holds 216
training runs of MPT 125M-70B on H100 80GB (bf16 and fp8) and A100 80GB and 40GB (bf16), 8 to 512 GPUs, FSDP
``FULL_SHARD`` or ``SHARD_GRAD_OP``, activation checkpointing on and off, sequences of 512 to 65,536 tokens.
**It is scored, never fitted**: nothing in perfpredict is trained or tuned on it. Each row is predicted from its
settings alone, as a user would ask (:func:`plan_of`):

- the model: llm-foundry's MPT at the row's size and sequence length (``perfpredict.external.llm_foundry_models``:
  learned positional embeddings, biases, flash attention as one fused op), captured at the row's micro-batch;
- ``parallel``: ``dp`` = the GPUs, ``fsdp`` with the row's sharding strategy, ``microbatches`` = the gradient
  accumulation, 8 GPUs per node; Composer's FSDP mixed precision (``PURE``: gathers and reduces in bf16;
  ``DEFAULT``: gathers in bf16, reduces in fp32); the A100 tables' stated 1,600 Gb/s per node (200 Gb/s per GPU),
  the H100's the catalog's (8 x 400 Gb/s NDR per node);
- ``precision="amp-bf16"``, AdamW, eager (Composer ran eager PyTorch), the default predictor;
- activation checkpointing ``full`` where the row has it, and for the ``amp_fp8`` rows float8 as they ran it:
  Transformer Engine's linears (Composer's ``amp_fp8``), which is ``float8="delayed"`` here (delayed scaling: no
  amax pass before each cast, and each weight's float8 copy kept for the step), not torchao's ``tensorwise``.

Where a feature the row needs is not in this checkout (a Request field the memory side of issue 46 adds:
``activation_checkpointing``, ``float8``), the row is still predicted, and marked: activation checkpointing is then
timed by the multi-GPU model's own recompute seam (``perfpredict.parallel.recompute``: each block's forward again
before its backward), float8 rows at bf16. Every row is answered; the summary states which rows carry a mark.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import sys
import time
import warnings
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header, write_result

RESULT = Path(__file__).resolve().parent / "results" / "external_llm_foundry.md"
TARGET_MAPE = 10.0  # issue 46: tokens/s/GPU MAPE <= 10% overall and per GPU and precision
#: Composer's FSDP mixed precision with amp_bf16 (composer/distributed/mosaic_parallelism.py): what it gathers
#: and reduces in
MP_MODES = {"PURE": ("bfloat16", "bfloat16"), "DEFAULT": ("bfloat16", "float32"), "FULL": ("float32", "float32")}
AC_MARK, FP8_MARK = "activation checkpointing by the recompute seam", "float8 predicted at bf16"
#: the float8 recipe of the ``amp_fp8`` rows: Composer's amp_fp8 runs Transformer Engine's linears, with delayed
#: scaling (data/external/llm_foundry/README.md)
FP8_RECIPE = "delayed"


def plan_of(row: dict) -> dict:
    """The parallel plan that asks the row's question."""
    gather, reduce = MP_MODES[row["mp_mode"]]
    plan = {
        "dp": row["gpus"],
        "fsdp": True,
        "fsdp_strategy": row["sharding"].lower(),
        "microbatches": row["grad_accum"],
        "gpus_per_node": 8,
        "fsdp_param_dtype": gather,
        "fsdp_reduce_dtype": reduce,
    }
    if row["inter_node_gbit_per_s"]:
        plan["inter_node_gbps"] = row["inter_node_gbit_per_s"]
    return plan


def request_fields(row: dict) -> tuple[dict, list[str]]:
    """(Request fields beyond the plan, the marks for features this checkout lacks)."""
    from perfpredict.request import field_names

    have = set(field_names())
    fields, marks = {}, []
    if row["activation_checkpointing"]:
        if "activation_checkpointing" in have:
            fields["activation_checkpointing"] = "full"
        else:
            marks.append(AC_MARK)
    if row["precision"] == "amp_fp8":
        if "float8" in have:
            fields["float8"] = FP8_RECIPE
        else:
            marks.append(FP8_MARK)
    return fields, marks


@contextmanager
def _seam(mode: str):
    """Activation checkpointing through the multi-GPU model's recompute seam, where the Request has no field yet."""
    from perfpredict.parallel import recompute

    original = recompute.mode_of
    recompute.mode_of = lambda request: mode
    try:
        yield
    finally:
        recompute.mode_of = original


class Graphs:
    """Captured training graphs, one per (size, micro-batch, sequence), in the on-disk graph store."""

    def __init__(self) -> None:
        self.cache: dict[tuple, object] = {}
        self.share = 0.0  # the last graph's attention share of the roofline time

    def get(self, size: str, batch: int, seq: int):
        from perfpredict.caching import graph_store
        from perfpredict.external import llm_foundry_models

        key = (size, batch, seq)
        if key not in self.cache:
            code = hashlib.sha256(Path(llm_foundry_models.__file__).read_bytes()).hexdigest()[:16]
            store = graph_store.key(llm_foundry=size, batch=batch, seq=seq, code=code)
            graph = graph_store.load(store)
            if graph is None:
                graph = llm_foundry_models.capture(size, batch, seq)
                graph_store.save(store, graph)
            self.cache = {key: graph}  # one at a time: a 70B graph at 65k tokens is large
        return self.cache[key]


def predict(row: dict, graphs: Graphs):
    """perfpredict's ParallelReport for one row, and the marks it carries."""
    from perfpredict.parallel.api import parallel_report

    graph = graphs.get(row["model"], row["micro_batch"], row["seq_len"])
    graphs.share = attention_share(graph, row["device"])
    fields, marks = request_fields(row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # memory advice: this benchmark scores time
        if AC_MARK in marks:
            with _seam("full"):
                report = parallel_report(graph, plan_of(row), device=row["device"], precision="amp-bf16", **fields)
        else:
            report = parallel_report(graph, plan_of(row), device=row["device"], precision="amp-bf16", **fields)
    return report, marks


def attention_share(graph, device: str) -> float:
    """The attention ops' share of the step's roofline time on ``device`` (for the calibration diagnostic)."""
    from perfpredict.parallel.timing import analytical_node_s, rank_request
    from perfpredict.request import Request

    node_s, _ = analytical_node_s(graph, device, rank_request(Request(device=device, precision="amp-bf16"), True))
    attention = sum(s for n, s in zip(graph.nodes, node_s) if n.op == "attention")
    return float(attention / node_s.sum()) if node_s.sum() else 0.0


def score(row: dict, report, marks: list[str], share: float = 0.0) -> dict:
    t = report.trainer
    predicted = t.tokens_per_s_per_gpu
    measured = float(row["tokens_per_s_per_gpu"])
    return {
        **row,
        "predicted_tokens_per_s_per_gpu": predicted,
        "error": (predicted - measured) / measured,
        "predicted_mfu_percent": 100 * t.mfu,
        "predicted_hfu_percent": 100 * t.hfu,
        "predicted_step_s": report.step_ms / 1e3,
        "exposed_comm_share": report.exposed_share,
        "marks": "; ".join(marks),
        "attention_share": share,
        "precision_group": "fp8" if row["precision"] == "amp_fp8" else "bf16",
    }


def mape(rows: list[dict]) -> float:
    return 100 * sum(abs(r["error"]) for r in rows) / len(rows) if rows else float("nan")


def summary(scored: list[dict], key) -> list[str]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in scored:
        groups[key(r)].append(r)
    lines = ["| | rows | MAPE | mean error | worst |", "|---|---:|---:|---:|---:|"]
    for name, group in sorted(groups.items()):
        worst = max(group, key=lambda r: abs(r["error"]))["error"]
        mean = 100 * sum(r["error"] for r in group) / len(group)
        lines.append(f"| {name} | {len(group)} | {mape(group):.1f}% | {mean:+.1f}% | {100 * worst:+.1f}% |")
    lines.append(f"| **all** | {len(scored)} | **{mape(scored):.1f}%** | | |")
    return lines


FAMILIES = {"H100-SXM": "H100", "A100-40GB": "A100", "A100-80GB": "A100"}
HELD_OUT = "7b"


def calibrate(scored: list[dict], held_out: str = HELD_OUT) -> dict[str, tuple[float, float]]:
    """A diagnostic, not the prediction: per GPU family, the two numbers (k, a) that best turn the predicted step
    into the measured one as ``measured / predicted = k x (1 - attention share) + a x attention share`` (least
    squares), fitted on the bf16 rows of every size but ``held_out``."""
    import numpy as np

    out = {}
    for family in sorted(set(FAMILIES.values())):
        rows = [
            r
            for r in scored
            if FAMILIES[r["device"]] == family and r["model"] != held_out and r["precision_group"] == "bf16"
        ]
        if len(rows) < 2:
            continue
        x = np.array([[1 - r["attention_share"], r["attention_share"]] for r in rows])
        y = np.array([r["predicted_tokens_per_s_per_gpu"] / r["tokens_per_s_per_gpu"] for r in rows])
        k, a = np.linalg.lstsq(x, y, rcond=None)[0]
        out[family] = (float(k), float(a))
    return out


def calibrated(scored: list[dict], factors: dict[str, tuple[float, float]]) -> list[dict]:
    out = []
    for r in scored:
        k, a = factors.get(FAMILIES[r["device"]], (1.0, 1.0))
        predicted = r["predicted_tokens_per_s_per_gpu"] / (k * (1 - r["attention_share"]) + a * r["attention_share"])
        out.append({**r, "error": (predicted - r["tokens_per_s_per_gpu"]) / r["tokens_per_s_per_gpu"]})
    return out


def calibration_lines(scored: list[dict]) -> list[str]:
    factors = calibrate(scored)
    fixed = calibrated(scored, factors)
    held = [r for r in fixed if r["model"] == HELD_OUT]
    lines = [
        "### Diagnostic: a two-number calibration per GPU family (fitted here; not what perfpredict predicts)",
        "",
        "How far the raw error is a systematic offset of the source's 2024 software stack: per GPU family, the "
        "step time's non-attention and attention parts scaled by k and a, fitted (least squares on the time "
        f"ratio) on the bf16 rows of every model size but {HELD_OUT}, which is held out and scored alone.",
        "",
        "| family | k (non-attention) | a (attention) |",
        "|---|---:|---:|",
        *(f"| {f} | {k:.3f} | {a:.3f} |" for f, (k, a) in sorted(factors.items())),
        "",
        *summary(fixed, lambda r: f"{r['device']} {r['precision_group']} (calibrated)"),
        "",
        *summary(held, lambda r: f"{r['device']} {r['precision_group']} (held-out {HELD_OUT})"),
    ]
    return lines


def report_text(scored: list[dict], started: float, argv) -> str:
    clean = [r for r in scored if not r["marks"]]
    lines = [
        "# llm-foundry's MPT training throughput, reproduced",
        "",
        f"{header(__file__, argv, seconds=time.time() - started, packages=())}. Scored, never fitted: no "
        "perfpredict model has seen these rows. Error = (predicted - measured) / measured tokens/s per GPU; "
        f"target MAPE <= {TARGET_MAPE:.0f}% overall and per GPU and precision (issue 46).",
        "",
        f"{len(scored)} rows answered; {len(scored) - len(clean)} carry a mark (a feature this checkout lacks, "
        "see the module docstring).",
        "",
        "### Per GPU and precision",
        "",
        *summary(scored, lambda r: f"{r['device']} {r['precision_group']}"),
        "",
        "### Per table",
        "",
        *summary(scored, lambda r: r["section"]),
        "",
        "### Per model size",
        "",
        *summary(scored, lambda r: r["model"]),
        "",
        "### By activation checkpointing, and rows without a mark",
        "",
        *summary(scored, lambda r: f"checkpointing {r['activation_checkpointing']}"),
        "",
        *summary(clean, lambda r: f"{r['device']} {r['precision_group']} (no mark)"),
        "",
        *calibration_lines(scored),
        "",
        "### Every row",
        "",
        "| model | seq | GPUs | GPU | prec | shard | AC | mb x acc | measured T/s/GPU | predicted | error | MFU meas/pred "
        "| HFU meas/pred | exposed comm | mark |",
        "|---|---:|---:|---|---|---|---|---|---:|---:|---:|---|---|---:|---|",
    ]
    for r in scored:
        lines.append(
            f"| {r['model']} | {r['seq_len']} | {r['gpus']} | {r['device']} | {r['precision']} | {r['sharding']} | "
            f"{'on' if r['activation_checkpointing'] else 'off'} | {r['micro_batch']} x {r['grad_accum']} | "
            f"{r['tokens_per_s_per_gpu']:,} | {r['predicted_tokens_per_s_per_gpu']:,.0f} | {100 * r['error']:+.1f}% | "
            f"{r['mfu_percent']:.1f} / {r['predicted_mfu_percent']:.1f} | {r['hfu_percent']:.1f} / "
            f"{r['predicted_hfu_percent']:.1f} | {100 * r['exposed_comm_share']:.1f}% | {r['marks'] or '-'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from perfpredict.external import llm_foundry

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULT)
    p.add_argument("--limit", type=int, default=None, help="score only the first N rows (a smoke run)")
    p.add_argument("--models", nargs="*", default=None, help="only these sizes (e.g. 1b 7b)")
    p.add_argument("--precision", nargs="*", default=None, help="only these precisions (amp_bf16, bf16, amp_fp8)")
    args = p.parse_args(argv)
    started = time.time()
    rows = llm_foundry.read()
    if args.models:
        rows = [r for r in rows if r["model"] in args.models]
    if args.precision:
        rows = [r for r in rows if r["precision"] in args.precision]
    # one graph at a time: rows sharing a capture run together
    rows.sort(key=lambda r: (r["model"], r["seq_len"], r["micro_batch"]))
    rows = rows[: args.limit] if args.limit else rows
    graphs, scored = Graphs(), []
    for row in rows:
        report, marks = predict(row, graphs)
        scored.append(score(row, report, marks, graphs.share))
        r = scored[-1]
        print(
            f"{row['model']:>5} s{row['seq_len']:<6} {row['gpus']:>3}x{row['device']:10} {row['precision']:8} "
            f"mb{row['micro_batch']:<3} measured {row['tokens_per_s_per_gpu']:>7,} predicted "
            f"{r['predicted_tokens_per_s_per_gpu']:>9,.0f} ({100 * r['error']:+.1f}%) {r['marks']}",
            flush=True,
        )
    text = report_text(scored, started, argv)
    write_result(text, args.out)
    with args.out.with_suffix(".csv").open("w", newline="") as f:  # beside the text: a smoke run's --out keeps both
        writer = csv.DictWriter(f, fieldnames=list(scored[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(scored)
    return 0


if __name__ == "__main__":
    sys.exit(main())
