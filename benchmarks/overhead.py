"""How much time perfpredict adds to torch.compile, relative to dynamo's own graph capture.

For ResNet-50 (batch 8, 224x224), BERT-base and GPT-2 (batch 8, seq 128), built from default transformers
configs with real (random) weights on CPU, in eval mode under no_grad:

- eager: one eager forward (median of a few, after warm-up);
- dynamo capture: the first call of ``torch.compile(model, backend=noop)`` minus the mean of the eager calls
  just before and after it, after ``torch._dynamo.reset()`` (median over reps); the no-op backend returns
  ``gm.forward``, so this is dynamo's tracing and guards; dynamo's own ``_compile.compile_inner`` timer is
  reported beside it as a less noisy figure;
- perfpredict: ``graph_from_fx`` + ``report_for_graph`` on every captured subgraph, with its example inputs
  (exactly what the backend runs per subgraph), median of 5;
- cross-check: the first call of ``backend="perfpredict"`` minus the first call of the no-op backend.

The ratio perfpredict / dynamo capture is the figure of merit (target: under 5%).

    python benchmarks/overhead.py [--reps 3] [--out benchmarks/results/overhead.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

import perfpredict
from perfpredict.compiler_hooks.fx_frontend import graph_from_fx
from perfpredict.graph_report import report_for_graph

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header, write_result

BATCH, SEQ, IMAGE = 8, 128, 224


def build_models() -> dict[str, tuple[torch.nn.Module, tuple[torch.Tensor, ...]]]:
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, ResNetConfig, ResNetModel

    torch.manual_seed(0)
    ids = torch.randint(0, 1000, (BATCH, SEQ))
    return {
        "ResNet-50": (ResNetModel(ResNetConfig()).eval(), (torch.randn(BATCH, 3, IMAGE, IMAGE),)),
        "BERT-base": (BertModel(BertConfig()).eval(), (ids,)),
        "GPT-2": (GPT2Model(GPT2Config()).eval(), (ids,)),
    }


def _now() -> float:
    return time.perf_counter()


def eager_time(model: torch.nn.Module, inputs: tuple, reps: int = 3, warm: bool = True) -> float:
    if warm:
        model(*inputs)
    times = []
    for _ in range(reps):
        t = _now()
        model(*inputs)
        times.append(_now() - t)
    return statistics.median(times)


def first_call(model: torch.nn.Module, inputs: tuple, backend: Any) -> tuple[float, float, float]:
    """Seconds of the first compiled call, and dynamo's own timers for it: its whole compile, and the backend."""
    from torch._dynamo.utils import compilation_time_metrics

    torch._dynamo.reset()
    compilation_time_metrics.clear()
    compiled = torch.compile(model, backend=backend)
    t = _now()
    compiled(*inputs)
    wall = _now() - t
    metrics = {k: sum(v) for k, v in compilation_time_metrics.items()}
    return (
        wall,
        metrics.get("_compile.compile_inner", float("nan")),
        metrics.get("OutputGraph.call_user_compiler", float("nan")),
    )


def capture(model: torch.nn.Module, inputs: tuple) -> list[tuple[Any, list]]:
    """Every subgraph dynamo hands a backend, with its example inputs."""
    graphs: list[tuple[Any, list]] = []

    def keep(gm: Any, example_inputs: list) -> Any:
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(model, backend=keep)(*inputs)
    return graphs


def predict_time(graphs: list[tuple[Any, list]], reps: int = 5) -> tuple[float, float, float, Any]:
    """Median seconds of featurize + predict over all subgraphs, and its two parts."""
    totals, featurize, predict = [], [], []
    report = None
    for _ in range(reps):
        t0 = _now()
        ops = [graph_from_fx(gm, ex) for gm, ex in graphs]
        t1 = _now()
        reports = [report_for_graph(g, device="H100-SXM") for g in ops]
        t2 = _now()
        totals.append(t2 - t0)
        featurize.append(t1 - t0)
        predict.append(t2 - t1)
        report = reports[-1]
    return statistics.median(totals), statistics.median(featurize), statistics.median(predict), report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="first-call compiles per backend (median)")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "overhead.md"))
    args = parser.parse_args()

    def noop(gm: Any, example_inputs: list) -> Any:
        return gm.forward

    rows = []
    with torch.no_grad():
        for name, (model, inputs) in build_models().items():
            eager = eager_time(model, inputs)
            noop_first, pp_first, noop_inner, pp_backend = [], [], [], []
            captures = []
            for _ in range(args.reps):  # alternate, and bracket with eager calls, so drift hits all alike
                before = eager_time(model, inputs, reps=1, warm=False)
                wall, inner, _ = first_call(model, inputs, noop)
                noop_first.append(wall)
                noop_inner.append(inner)
                wall, _, backend_s = first_call(model, inputs, "perfpredict")
                pp_first.append(wall)
                pp_backend.append(backend_s)
                after = eager_time(model, inputs, reps=1, warm=False)
                captures.append(noop_first[-1] - (before + after) / 2)
            report = perfpredict.last_report()
            graphs = capture(model, inputs)
            total, feat, pred, _ = predict_time(graphs)
            capture_s = statistics.median(captures)
            full_delta = statistics.median(pp_first) - statistics.median(noop_first)
            nodes = sum(len(gm.graph.nodes) for gm, _ in graphs)
            rows.append(
                dict(
                    name=name,
                    eager=eager,
                    capture=capture_s,
                    noop_first=statistics.median(noop_first),
                    pp_first=statistics.median(pp_first),
                    total=total,
                    feat=feat,
                    pred=pred,
                    ratio=total / capture_s,
                    full_delta=full_delta,
                    full_ratio=full_delta / capture_s,
                    subgraphs=len(graphs),
                    nodes=nodes,
                    inner=statistics.median(noop_inner),
                    pp_backend=statistics.median(pp_backend),
                    coverage=report.coverage if report else float("nan"),
                )
            )
            r = rows[-1]
            print(
                f"{name}: eager {eager * 1e3:.0f} ms, dynamo capture {capture_s * 1e3:.0f} ms, perfpredict "
                f"{total * 1e3:.1f} ms ({r['ratio']:.2%}); full compile delta {full_delta * 1e3:.0f} ms "
                f"({r['full_ratio']:.2%}); dynamo compile_inner {r['inner'] * 1e3:.0f} ms, perfpredict backend "
                f"in situ {r['pp_backend'] * 1e3:.0f} ms ({r['pp_backend'] / r['inner']:.2%})",
                flush=True,
            )
            del model
    write(rows, args)


def write(rows: list[dict], args: argparse.Namespace) -> None:
    lines = [
        "# perfpredict overhead inside torch.compile",
        "",
        f"- {header(__file__, packages=('torch', 'transformers', 'perfpredict'))} (a shared host)",
        f"- models: transformers default configs, random weights, CPU, eval, no_grad; batch {BATCH}, "
        f"seq {SEQ} (text) or {IMAGE}x{IMAGE} (image)",
        f"- dynamo capture = first call with a no-op backend minus the mean of eager calls just before and after "
        f"it (median of {args.reps}); "
        "perfpredict = `graph_from_fx` + `report_for_graph` (H100-SXM, analytical) over every captured "
        "subgraph, median of 5",
        "",
        "| model | subgraphs | fx nodes | eager call ms | dynamo capture ms | perfpredict ms (featurize + predict) "
        "| **perfpredict / capture** | full compile: perfpredict - no-op first call, ms | full / capture "
        "| coverage |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        "ROWS",
        "",
        "Cross-check from dynamo's own timers (`torch._dynamo.utils.compilation_time_metrics`), which exclude the "
        "eager execution inside the first call and so are far less noisy: `_compile.compile_inner` is dynamo's "
        'whole compile with the no-op backend; `OutputGraph.call_user_compiler` under `backend="perfpredict"` '
        "is the time spent inside the perfpredict backend (featurize, predict, merge subgraphs, deliver the "
        "report, return the eager forward).",
        "",
        "| model | dynamo compile_inner ms (no-op backend) | perfpredict backend in situ ms | in situ / compile_inner |",
        "|---|---:|---:|---:|",
    ]
    main_rows = []
    for r in rows:
        main_rows.append(
            f"| {r['name']} | {r['subgraphs']} | {r['nodes']} | {r['eager'] * 1e3:.0f} | {r['capture'] * 1e3:.0f} | "
            f"{r['total'] * 1e3:.1f} ({r['feat'] * 1e3:.1f} + {r['pred'] * 1e3:.1f}) | **{r['ratio']:.2%}** | "
            f"{r['full_delta'] * 1e3:.0f} | {r['full_ratio']:.1%} | {r['coverage']:.3f} |"
        )
        lines.append(
            f"| {r['name']} | {r['inner'] * 1e3:.0f} | {r['pp_backend'] * 1e3:.0f} | "
            f"{r['pp_backend'] / r['inner']:.2%} |"
        )
    at = lines.index("ROWS")
    lines[at : at + 1] = main_rows
    worst = max(rows, key=lambda r: r["ratio"])
    lines += [
        "",
        f"Worst ratio: {worst['ratio']:.2%} ({worst['name']}); target under 5%: "
        f"{'met' if all(r['ratio'] < 0.05 for r in rows) else 'NOT met'}.",
        "",
        "The full-compile column is a cross-check, not the measure: it is the difference of two first calls, "
        "each of which includes a full eager execution (seconds at batch 8 on 2 cores) and dynamo's tracing, so on "
        "a shared 2-core host its noise (hundreds of ms to seconds) swamps the quantity itself, and it can come "
        "out negative. The same noise hits the 'dynamo capture' column (first call minus eager), in either "
        "direction (it can even come out below dynamo's own compile timer); the in-situ table, which needs no "
        "subtraction, is the one to quote.",
        "",
    ]
    write_result("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
