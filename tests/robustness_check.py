"""The check of one random architecture through ``torch.compile(backend="perfpredict")``, shared by the test (a
sample that covers the catalogue) and ``benchmarks/robustness.py`` (the full 100-architecture study).

For one seed of ``robustness_models.build_case``: the compiled output equals eager bit for bit (or, where dynamo
itself picks other kernels, dynamo's plain ``eager`` backend bit for bit), no exception, no "perfpredict could not
predict" warning, and a sane report: finite, non-negative figures, coverage in [0, 1], a graph-break model reported
as several subgraphs, and every compute op counted with its FLOPs.

Not a test file: ``tests/test_robustness.py`` and the benchmark import it.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from robustness_models import build_case

_MUST_COUNT_FLOPS = ("matmul", "conv", "attention", "norm", "softmax")


@contextlib.contextmanager
def capturing_graphs() -> Iterator[list]:
    """Every graph the backend captures while inside, through a spy on the FX frontend (restored on the way out)."""
    from perfpredict.compiler_hooks import fx_frontend

    graphs: list = []
    real = fx_frontend.graph_from_fx

    def spy(*args, **kwargs):
        graph = real(*args, **kwargs)
        graphs.append(graph)
        return graph

    fx_frontend.graph_from_fx = spy
    try:
        yield graphs
    finally:
        fx_frontend.graph_from_fx = real


@dataclass
class CaseResult:
    seed: int
    described: str
    has_break: bool
    problems: list[str] = field(default_factory=list)
    coverage: float | None = None
    dynamo_differs: bool = False  # dynamo's own kernels differ from eager by rounding (not perfpredict's doing)
    unknown_warnings: list[str] = field(default_factory=list)


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _close(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        tol = {torch.bfloat16: 2e-2, torch.float16: 1e-3, torch.float64: 1e-12}.get(a.dtype, 1e-5)
        return torch.allclose(a, b, rtol=tol, atol=tol)
    return all(_close(x, y) for x, y in zip(a, b))


def _finite(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def report_problems(report) -> list[str]:
    problems = []
    if not 0.0 <= report.coverage <= 1.0:
        problems.append(f"coverage {report.coverage!r} outside [0, 1]")
    for name in ("latency_ms", "throughput_per_s", "peak_memory_bytes", "energy_j", "avg_power_w"):
        pred = getattr(report, name)
        for what in ("value", "low", "high"):
            value = getattr(pred, what)
            if not _finite(value):
                problems.append(f"{name}.{what} = {value!r}")
        if _finite(pred.value) and pred.value < 0:
            problems.append(f"{name}.value = {pred.value!r} is negative")
    if not report.latency_ms.value > 0:
        problems.append(f"latency {report.latency_ms.value!r} is not positive")
    if not _finite(float(report.memory.total_bytes)):
        problems.append(f"memory breakdown total {report.memory.total_bytes!r}")
    return problems


def zero_flop_compute(graphs) -> list[str]:
    """Compute nodes whose FLOPs came out 0: op_kinds.op_flops swallows an unknown argument layout as 0 FLOPs."""
    return [
        f"{n.target}{[m.shape for m in n.inputs]}"
        for g in graphs
        for n in g.nodes
        if n.op in _MUST_COUNT_FLOPS and n.flops <= 0 and all(m.numel > 0 for m in n.outputs)
    ]


def check_seed(seed: int, graphs: list) -> CaseResult:
    """Compile and run ``build_case(seed)``; ``graphs`` is the list a spy on ``fx_frontend.graph_from_fx`` appends
    each captured graph to (the caller installs it, with pytest's monkeypatch or by hand)."""
    from perfpredict.backends import torch_backend

    case = build_case(seed)
    result = CaseResult(seed, case.describe(), case.has_break)
    torch._dynamo.reset()
    torch_backend._WARNED.clear()  # the backend warns once per message; each model must be able to warn
    reports: list = []
    graphs.clear()
    grad = torch.enable_grad() if case.grad else torch.no_grad()
    with warnings.catch_warnings(record=True) as caught, grad:
        warnings.simplefilter("always")
        try:
            expected = case.model(*case.inputs)
            compiled = torch.compile(case.model, backend="perfpredict", options={"report": reports.append})
            got = compiled(*case.inputs)
        except Exception as err:  # noqa: BLE001 - every failure is reported, with the case that raised it
            result.problems.append(f"raised {type(err).__name__}: {err}")
            return result
    bad_warnings = [str(w.message) for w in caught if "perfpredict could not predict" in str(w.message)]
    if bad_warnings:
        result.problems.append(f"warned {bad_warnings}")
    if not _same(expected, got):
        # Dynamo itself can pick other kernels than eager (nn.MultiheadAttention's fused fast path is skipped under
        # tracing). The contract is that perfpredict adds no difference of its own: the output must equal dynamo's
        # plain "eager" backend bit for bit, and eager to rounding.
        torch._dynamo.reset()
        with grad:
            reference = torch.compile(case.model, backend="eager")(*case.inputs)
        if not _same(reference, got):
            result.problems.append("output differs from backend='eager' (perfpredict changed it)")
        elif not _close(expected, got):
            result.problems.append("dynamo's output is not close to eager")
        else:
            result.dynamo_differs = True
    if not reports:
        result.problems.append("no report delivered")
        return result
    report = reports[-1]
    result.problems += report_problems(report)
    if case.has_break and report.graph.subgraphs <= 1:
        result.problems.append(f"graph-break model reports {report.graph.subgraphs} subgraph(s)")
    zero = zero_flop_compute(graphs)
    if zero:
        result.problems.append(f"compute ops counted as 0 FLOPs: {zero}")
    result.coverage = report.coverage
    result.unknown_warnings = [w for w in report.warnings if "cost model" in w]
    return result


def summary(results: list[CaseResult], seconds: float) -> str:
    covered = {r.seed: r.coverage for r in results if r.coverage is not None}
    worst = min(covered, key=covered.get) if covered else None
    unknown: dict[str, int] = {}
    for r in results:
        for w in r.unknown_warnings:
            unknown[w] = unknown.get(w, 0) + 1
    return (
        f"{len(results)} models in {seconds:.1f} s, {sum(r.has_break for r in results)} with graph breaks; min "
        f"coverage {covered.get(worst, float('nan')):.3f} (seed {worst}); unknown-op warnings: {unknown or 'none'}; "
        f"seeds where dynamo itself (backend='eager') differs from eager by rounding: "
        f"{[r.seed for r in results if r.dynamo_differs]}"
    )
