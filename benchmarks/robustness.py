"""torch.compile(backend="perfpredict") on 100 seeded random architectures: it observes, never changes results.

    python benchmarks/robustness.py [--models 100] [--out benchmarks/results/robustness.md]

The full study behind ``tests/test_robustness.py`` (which runs the first 17 seeds, one per block of the catalogue):
every model of ``tests/robustness_models.py`` (convs, attention, norms, pooling, einsum, indexing, odd dtypes and
shapes, graph breaks) is compiled with the perfpredict backend and checked by ``tests/robustness_check.py``: the
compiled output equals eager bit for bit (or dynamo's own ``eager`` backend, where dynamo picks other kernels), no
exception, no "could not predict" warning, a sane report with every compute op's FLOPs counted. The result lists
the failures (none expected), the graph-break count, the lowest coverage and the seeds where dynamo itself differs
from eager by rounding. Exit status 1 when any model fails. About a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the generator and the check are the test's own
sys.path.insert(0, str(ROOT))  # as a script too: benchmarks.* from this checkout

from benchmarks.provenance import header, write_result  # noqa: E402

RESULT = ROOT / "benchmarks" / "results" / "robustness.md"


def run(models: int) -> tuple[list, float]:
    import logging

    import torch
    from robustness_check import capturing_graphs, check_seed

    torch._logging.set_logs(dynamo=logging.ERROR)  # dynamo reports each graph break; breaking is what they are for

    start = time.perf_counter()
    with capturing_graphs() as graphs:
        results = [check_seed(seed, graphs) for seed in range(models)]
    return results, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=100, help="seeds 0..N-1 (default 100)")
    p.add_argument("--out", default=str(RESULT))
    args = p.parse_args(argv)
    results, seconds = run(args.models)
    from robustness_check import summary

    failed = [r for r in results if r.problems]
    covered = [r.coverage for r in results if r.coverage is not None]
    lines = [
        "# Robustness: random architectures through torch.compile(backend='perfpredict')",
        "",
        header(__file__, argv, seconds=seconds),
        "",
        "| models | with graph breaks | output changed, crashed or warned | min coverage | dynamo differs from eager |",
        "|---:|---:|---:|---:|---:|",
        f"| {len(results)} | {sum(r.has_break for r in results)} | {len(failed)} | "
        f"{min(covered) if covered else float('nan'):.3f} | {sum(r.dynamo_differs for r in results)} |",
        "",
        summary(results, seconds),
        "",
        *(f"- FAILED {r.described}: {r.problems}" for r in failed),
    ]
    write_result("\n".join(lines).rstrip() + "\n", args.out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
