"""Memory per rank against the ZeRO paper's documented per-parameter byte counts, and the terms a plan adds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.parallel import memory as mem

# Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC'20, Figure 1:
# a 7.5B-parameter model, mixed-precision Adam (K = 12), data parallel over N_d = 64 GPUs, memory per GPU; the
# table the benchmark prints (benchmarks/parallel_validation.py).
_BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "parallel_validation.py"
_spec = importlib.util.spec_from_file_location("parallel_validation", _BENCH)
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)
ZERO_FIGURE_1_GB = _bench.ZERO_FIGURE_1_GB
PARAMS, RANKS = _bench.ZERO_PARAMS, _bench.ZERO_RANKS


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_paper_figure_1_within_5_percent(decoder_graphs, stage):
    each = mem.per_param(decoder_graphs[0], "master-fp16", "adam")
    assert (each.weights, each.gradients, each.optimizer_state) == (2, 2, 12)  # 2 + 2 + K, K = 4 + 4 + 4
    predicted_gb = mem.zero_bytes_per_param(stage, RANKS, each) * PARAMS / 1e9
    assert predicted_gb == pytest.approx(ZERO_FIGURE_1_GB[stage], rel=0.05)


@pytest.mark.parametrize("ranks", [2, 8, 64])
def test_zero_stage_formulas(decoder_graphs, ranks):
    each = mem.per_param(decoder_graphs[0], "master-bf16", "adamw")
    n = ranks
    assert [mem.zero_bytes_per_param(s, n, each) for s in range(4)] == pytest.approx(
        [16, 4 + 12 / n, 2 + 14 / n, 16 / n]
    )


def test_amp_recipe_under_fsdp_is_sixteen_bytes_over_n(decoder_graphs):
    # perfpredict's amp-bf16 (torch.autocast): float32 weights and gradients, two float32 AdamW states, and the
    # bf16 copies autocast caches; FSDP2 shards the first three (its gloo test checks the local shards)
    each = mem.per_param(decoder_graphs[0], "amp-bf16", "adamw")
    assert (each.weights, each.gradients, each.optimizer_state, each.weight_copies) == pytest.approx((4, 4, 8, 2))
    assert mem.zero_bytes_per_param(3, 8, each) == pytest.approx(16 / 8)


def test_saved_activations_are_what_the_backward_reads(decoder_graphs):
    from perfpredict.parallel.structure import backward_start

    training, inference = decoder_graphs
    saved = mem.saved_activation_bytes(training, backward_start(training))
    assert 0 < saved < sum(n.output_bytes for n in training.nodes)
    assert mem.saved_activation_bytes(inference, len(inference.nodes)) == 0


def test_unknown_precision_lists_the_recipes(decoder_graphs):
    with pytest.raises(InvalidInputError, match="master-bf16"):
        mem.per_param(decoder_graphs[0], "fp8", "adamw")
