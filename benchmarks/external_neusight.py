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
from benchmarks.provenance import header, write_result

TABLE = Path(__file__).resolve().parents[1] / "data" / "external" / "neusight" / "e2e_published.csv"
RESULT = Path(__file__).resolve().parent / "results" / "external_neusight.md"
PEERS = ("neusight", "roofline", "habitat")
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


def predict_ms(row: dict, device: str, graphs: Graphs) -> float:
    """perfpredict's prediction for one row of the table (milliseconds)."""
    from perfpredict.graph_report import report_for_graph
    from perfpredict.parallel.api import parallel_report

    phase = "training" if row["mode"] == "train" else "inference"
    batch, seq, option = int(row["batch"]), int(row["seqlen"]), row["option"]
    if option in ("", "fusion"):
        graph = graphs.get(row["model_name"], batch, seq, phase)
        mode = "compiled" if option == "fusion" else "eager"
        return report_for_graph(graph, device=device, optimizer="none", mode=mode).latency_ms.value
    degree = int(option[2])
    # pp<degree>_<micro-batches>: run_label_distributed.py passes --megatron_lm_num_micro_batches 1
    chunks = int(option.split("_")[1]) if "_" in option else 1
    plans = {"dp": ({"dp": degree}, batch // degree), "tp": ({"tp": degree}, batch)}
    plan, micro = plans.get(option[:2], ({"pp": degree, "microbatches": chunks}, batch // chunks))
    graph = graphs.get(row["model_name"], micro, seq, phase)
    return parallel_report(graph, plan, device=device, optimizer="none").step_ms


def section(title: str, scored: list[dict], by: str = "device") -> list[str]:
    """MAPE per GPU (or other key) and overall: perfpredict beside the peers, on the rows every one answered."""
    lines = [
        f"### {title}",
        "",
        "| | rows | perfpredict | NeuSight | roofline | Habitat |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in scored:
        groups[r[by]].append(r)
    groups["all"] = scored
    for name, group in sorted(groups.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        cells = [_mape(group, "perfpredict")] + [_mape(group, p) for p in PEERS]
        lines.append(f"| {name} | {len(group)} | " + " | ".join(cells) + " |")
    return lines


def _mape(group: list[dict], who: str) -> str:
    errors = [r[f"{who}_err"] for r in group if r.get(f"{who}_err") is not None]
    return f"{100 * np.mean(errors):.1f}%" if errors else "-"


def score(row: dict, predicted_ms: float | None) -> dict:
    measured = float(row["label_e2e_ms"])
    out = {**row, "measured_ms": measured, "perfpredict_ms": predicted_ms}
    out["perfpredict_err"] = None if predicted_ms is None else abs(predicted_ms - measured) / measured
    for p in PEERS:
        value = row.get(f"{p}_e2e_ms")
        out[f"{p}_err"] = abs(float(value) - measured) / measured if value not in ("", None) else None
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=RESULT)
    p.add_argument("--limit", type=int, default=None, help="score only the first N NVIDIA rows (a smoke run)")
    args = p.parse_args(argv)
    started = time.time()
    graphs, scored, skipped = Graphs(), [], []
    for row in rows():
        device = catalog(row["device"])
        if device is None:
            skipped.append(row)
            continue
        if args.limit is not None and len(scored) >= args.limit:
            break
        row = {**row, "device": device}
        scored.append(score(row, predict_ms(row, device, graphs)))
        r = scored[-1]
        print(
            f"{row['model_name']:>10} {row['mode']:5} b{row['batch']:>2} {device:15} {row['option']:6} "
            f"measured {r['measured_ms']:9.1f} ms  predicted {r['perfpredict_ms']:9.1f} ms  "
            f"({100 * r['perfpredict_err']:.1f}%)",
            flush=True,
        )
    text = report(scored, skipped, started, argv)
    write_result(text, args.out)
    return 0


def report(scored: list[dict], skipped: list[dict], started: float, argv) -> str:
    single = [r for r in scored if r["option"] == ""]
    lines = [
        "# NeuSight's end-to-end table, reproduced",
        "",
        f"{header(__file__, argv, seconds=time.time() - started, packages=())}. Scored, never fitted: "
        "no perfpredict model has seen these labels. MAPE per GPU; NeuSight, roofline and Habitat from their "
        f"predictions in the same table (NeuSight's published overall figure: {PUBLISHED_OVERALL}%).",
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
        "| model | mode | seq | batch | GPU | option | measured ms | perfpredict ms | error | NeuSight error |",
        "|---|---|---:|---:|---|---|---:|---:|---:|---:|",
    ]
    for r in scored:
        ns = f"{100 * r['neusight_err']:.1f}%" if r["neusight_err"] is not None else "-"
        lines.append(
            f"| {r['model_name']} | {r['mode']} | {r['seqlen']} | {r['batch']} | {r['device']} | {r['option'] or '-'} | "
            f"{r['measured_ms']:.1f} | {r['perfpredict_ms']:.1f} | {100 * r['perfpredict_err']:.1f}% | {ns} |"
        )
    if skipped:
        gpus = sorted({r["device"] for r in skipped})
        lines += ["", f"Not predicted: {len(skipped)} rows on {', '.join(gpus)} (AMD GPUs are not in the catalog)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
