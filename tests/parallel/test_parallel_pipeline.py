"""Pipeline parallelism: balanced contiguous stages, the 1F1B formulas, and stage graphs that partition the model."""

from __future__ import annotations

import itertools
import random

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.parallel import pipeline_parallel
from perfpredict.parallel.structure import POST, PRE, backward_start, layer_labels


def _brute_force(weights, parts):
    best = float("inf")
    for cuts in itertools.combinations(range(1, len(weights)), parts - 1):
        bounds = [0, *cuts, len(weights)]
        best = min(best, max(sum(weights[a:b]) for a, b in itertools.pairwise(bounds)))
    return best


def test_balanced_cuts_minimise_the_slowest_stage():
    rng = random.Random(0)
    for _ in range(30):
        weights = [rng.uniform(0.1, 5.0) for _ in range(rng.randint(3, 9))]
        parts = rng.randint(2, len(weights))
        bounds = [0, *pipeline_parallel.balanced_cuts(weights, parts), len(weights)]
        assert len(bounds) == parts + 1 and all(a < b for a, b in itertools.pairwise(bounds))
        worst = max(sum(weights[a:b]) for a, b in itertools.pairwise(bounds))
        assert worst == pytest.approx(_brute_force(weights, parts))


def test_one_f_one_b_formulas():
    assert pipeline_parallel.bubble_fraction(4, 12) == pytest.approx(3 / 15)  # (p-1)/(m+p-1)
    assert pipeline_parallel.pipeline_s([2.0] * 4, 12) == pytest.approx((12 + 4 - 1) * 2.0)  # equal stages: (m+p-1) t
    assert pipeline_parallel.pipeline_s([1.0, 3.0], 5) == pytest.approx(1 + 3 + 4 * 3)  # the slowest stage paces it
    assert [pipeline_parallel.in_flight(s, 4, 8) for s in range(4)] == [4, 3, 2, 1]
    assert [pipeline_parallel.in_flight(s, 4, 2) for s in range(4)] == [2, 2, 2, 1]


def test_stages_partition_the_graph(decoder_graphs):
    from parallel_models import BATCH, HIDDEN, SEQ

    training, _ = decoder_graphs
    labels = layer_labels(training)
    stages = pipeline_parallel.split_stages(training, 2, labels, [1.0] * len(labels))
    seen = sorted(i for s in stages for i in s.nodes)
    assert seen == list(range(len(training.nodes)))  # every op in exactly one stage
    assert [s.layers for s in stages] == [(0,), (1,)]
    assert sum(s.graph.param_count for s in stages) == training.param_count
    assert stages[0].send_bytes == BATCH * SEQ * HIDDEN * 4 and stages[1].send_bytes == 0  # the residual stream
    start = backward_start(training)
    # the last stage runs the first backward ops; the first stage's backward ends the step
    assert min(i for i in stages[1].nodes if i >= start) == start
    assert all(labels[i] != POST for i in stages[0].nodes) and all(labels[i] != PRE for i in stages[1].nodes)


def test_more_stages_than_layers_is_refused(decoder_graphs):
    training, _ = decoder_graphs
    labels = layer_labels(training)
    with pytest.raises(InvalidInputError, match="pp=3 needs at least 3 layers.*choose pp <= 2"):
        pipeline_parallel.split_stages(training, 3, labels, [1.0] * len(labels))
