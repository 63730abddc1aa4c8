"""torch.compile(backend="perfpredict") on seeded random architectures: it observes, never changes results.

Each model (tests/robustness_models.py) mixes convs, attention, norms, pooling, einsum, indexing, odd dtypes and
shapes, and graph breaks; tests/robustness_check.py checks one: the compiled output equals eager bit for bit (the
eager inner backend runs the same kernels), no exception, no "perfpredict could not predict" warning, and a sane
report. The test runs the first len(BLOCKS) = 17 seeds, which by construction cover every block of the catalogue as
a primary block, every dtype and every graph-break kind (asserted below); the study of 100 seeds is the benchmark
``python -m benchmarks robustness`` (benchmarks/results/robustness.md).
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from robustness_check import capturing_graphs, check_seed, summary  # noqa: E402 - tests/ is on pythonpath (pyproject)
from robustness_models import BLOCKS, BREAKS, DTYPES, build_case  # noqa: E402

SEEDS = range(len(BLOCKS))  # seed % len(BLOCKS) is the primary block: each block once


def test_generator_covers_the_catalogue():
    assert len(BLOCKS) >= 10
    a, b = build_case(7), build_case(7)
    assert a.describe() == b.describe()  # seeded: the same seed rebuilds the same case
    assert all(torch.equal(x, y) for x, y in zip(a.inputs, b.inputs))
    cases = [build_case(seed) for seed in SEEDS]
    assert {f"{stream}:{name}" for name, stream in BLOCKS} <= {b for c in cases for b in c.blocks}
    assert {b for c in cases for b in c.breaks} == set(BREAKS)
    assert {str(c.dtype).removeprefix("torch.") for c in cases} == set(DTYPES)
    assert sum(c.has_break for c in cases) == 10 and sum(c.grad for c in cases) == 3  # breaks and autograd sampled


@pytest.fixture
def captured():
    """Every graph the backend captures, through a spy on the FX frontend."""
    with capturing_graphs() as graphs:
        yield graphs


def test_random_architectures_compile_unchanged_and_predict(captured):
    start = time.perf_counter()
    results = [check_seed(seed, captured) for seed in SEEDS]
    text = summary(results, time.perf_counter() - start)
    print(text)
    failures = [f"{r.described}: {r.problems}" for r in results if r.problems]
    assert not failures, text + "\n" + "\n".join(failures)
    assert sum(r.has_break for r in results) == 10, text
    assert min(r.coverage for r in results) == 1.0, text
