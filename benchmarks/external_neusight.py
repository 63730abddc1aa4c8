"""NeuSight's published end-to-end table, reproduced: perfpredict beside NeuSight, roofline and Habitat.

    python benchmarks/external_neusight.py          # writes benchmarks/results/external_neusight.md

The table (``data/external/neusight/e2e_published.csv``, from NeuSight's ``scripts/asplos/summary/summary.csv``) holds
the measured latency of fp32 HuggingFace models (BERT-Large, GPT2-Large, GPT3-XL, GPT3-2.7B, OPT-1.3B, Switch
Transformers) on NVIDIA and AMD GPUs, forward passes and training steps (forward + backward, no optimizer step), beside
NeuSight's, a roofline's and Habitat's predictions. **It is scored, never fitted**: nothing in perfpredict is trained
or tuned on these labels. perfpredict predicts each row from the model's config alone, as a user would: the program
NeuSight ran (:mod:`perfpredict.external.neusight_models`), on the catalog GPU, with the default predictor
(``two_timeline``: the learned GPU device time and the default host profile), fp32 without TF32, eager mode; the
``fusion`` rows in ``compiled`` mode (torch.compile); the 4-GPU rows through the multi-GPU model
(``perfpredict.parallel``: dp4 over 4 ranks of batch/4, tp4, and ``pp4_1``: 4 stages, one micro-batch, as
NeuSight's ``run_label_distributed.py`` launched Megatron-LM). The AMD GPUs are not in the
catalog and are listed, not predicted.

Errors are |predicted - measured| / measured per row; NeuSight's, roofline's and Habitat's come from their predictions
in the same table, on the same rows.

Two perfpredict columns. **perfpredict** is the shipped model, whose device time is learned from op rows of every
GPU here: NeuSight's own op rows of these GPUs, its test split included, which holds most of these rows' layer
GEMMs (the report counts them: :mod:`benchmarks.neusight_overlap`). **GPU unseen** scores each GPU with the same fit
made without any op row of that GPU, from any source (:mod:`benchmarks.unseen_gpu`): the answer a user of a GPU
that no row covers gets. ``--no-unseen`` leaves that column out (the refits take minutes each, once per code). One
trace of a held-out GPU stays: NeuSight's per-call timing overhead of a GPU without elementwise rows (the H100) is
the median of the other GPUs' (``gpu_training_rows.neusight_timing``), the held-out one among them.
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks import neusight_overlap, unseen_gpu
from benchmarks.provenance import header, write_result

TABLE = Path(__file__).resolve().parents[1] / "data" / "external" / "neusight" / "e2e_published.csv"
RESULT = Path(__file__).resolve().parent / "results" / "external_neusight.md"
PEERS = ("neusight", "roofline", "habitat")
UNSEEN = "unseen"  # the perfpredict column of a model fitted without the row's GPU
#: read beyond perfpredict and this script: the table, the overlap count, and what the unseen-GPU refits read
HELPERS = ("benchmarks/neusight_overlap.py", *unseen_gpu.FIT_SCRIPTS)
PUBLISHED_OVERALL = 8.3  # NeuSight's own overall figure across its NVIDIA rows


def rows() -> list[dict]:
    with TABLE.open() as f:
        return list(csv.DictReader(f))


def catalog(name: str) -> str | None:
    from perfpredict.core.errors import UnknownDeviceError
    from perfpredict.hardware.devices import get_device

    try:
        return get_device(name.replace("_", " ")).name
    except UnknownDeviceError:
        return None


class Graphs:
    """Captured OpGraphs, one per (model, batch, sequence, phase), kept in the on-disk graph store (keyed by the
    capture code's digest) so that a rerun traces nothing."""

    def __init__(self) -> None:
        self.cache: dict[tuple, object] = {}

    def get(self, model: str, batch: int, seq: int, phase: str):
        from perfpredict.caching import graph_store
        from perfpredict.external import neusight_models

        key = (model, batch, seq, phase)
        if key not in self.cache:
            store = graph_store.key(neusight=model, batch=batch, seq=seq, phase=phase, code=_digest())
            graph = graph_store.load(store)
            if graph is None:
                graph = neusight_models.capture(model, batch, seq, phase)
                graph_store.save(store, graph)
            self.cache[key] = graph
        return self.cache[key]


def _digest() -> str:
    """The NeuSight program builder's code (graph_store's own digest covers the frontends)."""
    import hashlib

    from perfpredict.external import neusight_models

    return hashlib.sha256(Path(neusight_models.__file__).read_bytes()).hexdigest()[:16]


def predict_ms(row: dict, device: str, graphs: Graphs, predictor: str = "auto") -> float:
    """perfpredict's prediction for one row of the table (milliseconds), with ``predictor``."""
    from perfpredict.graph_report import report_for_graph
    from perfpredict.parallel.api import parallel_report

    phase = "training" if row["mode"] == "train" else "inference"
    batch, seq, option = int(row["batch"]), int(row["seqlen"]), row["option"]
    if option in ("", "fusion"):
        graph = graphs.get(row["model_name"], batch, seq, phase)
        mode = "compiled" if option == "fusion" else "eager"
        return report_for_graph(graph, device=device, optimizer="none", mode=mode, predictor=predictor).latency_ms.value
    degree = int(option[2])
    # pp<degree>_<micro-batches>: run_label_distributed.py passes --megatron_lm_num_micro_batches 1
    chunks = int(option.split("_")[1]) if "_" in option else 1
    plans = {"dp": ({"dp": degree}, batch // degree), "tp": ({"tp": degree}, batch)}
    plan, micro = plans.get(option[:2], ({"pp": degree, "microbatches": chunks}, batch // chunks))
    graph = graphs.get(row["model_name"], micro, seq, phase)
    return parallel_report(graph, plan, device=device, optimizer="none", predictor=predictor).step_ms


def section(title: str, scored: list[dict], by: str = "device") -> list[str]:
    """MAPE per GPU (or other key) and overall: perfpredict beside the peers, on the rows every one answered."""
    lines = [
        f"### {title}",
        "",
        "| | rows | perfpredict | GPU unseen | NeuSight | roofline | Habitat |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in scored:
        groups[r[by]].append(r)
    groups["all"] = scored
    for name, group in sorted(groups.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        cells = [_mape(group, who) for who in ("perfpredict", UNSEEN, *PEERS)]
        lines.append(f"| {name} | {len(group)} | " + " | ".join(cells) + " |")
    return lines


def _mape(group: list[dict], who: str) -> str:
    errors = [r[f"{who}_err"] for r in group if r.get(f"{who}_err") is not None]
    return f"{100 * np.mean(errors):.1f}%" if errors else "-"


def score(row: dict, predicted_ms: float | None, unseen_ms: float | None = None) -> dict:
    measured = float(row["label_e2e_ms"])
    out = {**row, "measured_ms": measured, "perfpredict_ms": predicted_ms, f"{UNSEEN}_ms": unseen_ms}
    for who, ms in (("perfpredict", predicted_ms), (UNSEEN, unseen_ms)):
        out[f"{who}_err"] = None if ms is None else abs(ms - measured) / measured
    for p in PEERS:
        value = row.get(f"{p}_e2e_ms")
        out[f"{p}_err"] = abs(float(value) - measured) / measured if value not in ("", None) else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULT)
    p.add_argument("--limit", type=int, default=None, help="score only the first N NVIDIA rows (a smoke run)")
    p.add_argument("--no-unseen", action="store_true", help="leave out the unseen-GPU column (no refits)")
    args = p.parse_args(argv)
    started = time.time()
    graphs, scored = Graphs(), []
    named = [{**r, "device": catalog(r["device"])} for r in rows()]
    skipped = [r for r, n in zip(rows(), named) if n["device"] is None]
    table = [r for r in named if r["device"] is not None][: args.limit]
    without = {} if args.no_unseen else unseen_gpu.models_without(sorted({r["device"] for r in table}))
    for row in table:
        device, model = row["device"], without.get(row["device"])
        unseen = None if model is None else predict_ms(row, device, graphs, unseen_gpu.predictor_without(device, model))
        scored.append(score(row, predict_ms(row, device, graphs), unseen))
        r = scored[-1]
        print(
            f"{row['model_name']:>10} {row['mode']:5} b{row['batch']:>2} {device:15} {row['option']:6} "
            f"measured {r['measured_ms']:9.1f} ms  predicted {r['perfpredict_ms']:9.1f} ms  "
            f"({100 * r['perfpredict_err']:.1f}%)" + (f", GPU unseen {unseen:9.1f} ms" if unseen else ""),
            flush=True,
        )
    overlap = neusight_overlap.overlap(
        [r for r in table if r["option"] == ""], lambda m, b, s: graphs.get(m, b, s, "inference")
    )
    text = report(scored, skipped, started, argv, overlap, unseen=not args.no_unseen)
    write_result(text, args.out)
    return 0


def report(scored: list[dict], skipped: list[dict], started: float, argv, overlap: list[dict], unseen: bool) -> str:
    single = [r for r in scored if r["option"] == ""]
    inputs = (TABLE.parent, *HELPERS, *(unseen_gpu.fit_inputs()[1:] if unseen else ()))
    lines = [
        "# NeuSight's end-to-end table, reproduced",
        "",
        f"{header(__file__, argv, seconds=time.time() - started, packages=(), inputs=inputs)}. Scored, never "
        "fitted: no perfpredict model has seen these end-to-end labels. But NeuSight's op rows of these GPUs, its "
        "test split included, train the shipped device-time model (last section): **perfpredict** is that model; "
        "**GPU unseen** scores each GPU with the same fit made without any op row of that GPU, from any source "
        "(`benchmarks/unseen_gpu.py`), the answer for a GPU no row covers"
        + ("" if unseen else " (left out of this run: `--no-unseen`)")
        + ". MAPE per GPU; NeuSight, roofline and Habitat from their predictions in the same table (NeuSight's "
        f"published overall figure: {PUBLISHED_OVERALL}%).",
        "",
    ]
    lines += section("Single GPU, inference (forward)", [r for r in single if r["mode"] == "inf"]) + [""]
    lines += section("Single GPU, training (forward + backward)", [r for r in single if r["mode"] == "train"]) + [""]
    lines += section("Single GPU, all rows", single) + [""]
    lines += section("Single GPU, per model", single, by="model_name") + [""]
    lines += section(
        "torch.compile (NeuSight's fusion rows; perfpredict --mode compiled)",
        [r for r in scored if r["option"] == "fusion"],
    ) + [""]
    lines += section(
        "4 GPUs (dp4, tp4, pp4 through perfpredict.parallel)",
        [r for r in scored if r["option"][:2] in ("dp", "tp", "pp")],
        by="option",
    ) + [""]
    lines += [
        "### Every row",
        "",
        "| model | mode | seq | batch | GPU | option | measured ms | perfpredict ms | error | GPU unseen ms | error "
        "| NeuSight error |",
        "|---|---|---:|---:|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in scored:
        lines.append(
            f"| {r['model_name']} | {r['mode']} | {r['seqlen']} | {r['batch']} | {r['device']} | {r['option'] or '-'} | "
            f"{r['measured_ms']:.1f} | {r['perfpredict_ms']:.1f} | {_pct(r['perfpredict_err'])} | "
            f"{_ms(r[f'{UNSEEN}_ms'])} | {_pct(r[f'{UNSEEN}_err'])} | {_pct(r['neusight_err'])} |"
        )
    if skipped:
        gpus = sorted({r["device"] for r in skipped})
        lines += ["", f"Not predicted: {len(skipped)} rows on {', '.join(gpus)} (AMD GPUs are not in the catalog)."]
    lines += ["", *neusight_overlap.section(overlap, *neusight_overlap.op_row_counts())]
    return "\n".join(lines) + "\n"


def _pct(err: float | None) -> str:
    return "-" if err is None else f"{100 * err:.1f}%"


def _ms(ms: float | None) -> str:
    return "-" if ms is None else f"{ms:.1f}"


if __name__ == "__main__":
    sys.exit(main())
