"""Pipeline stages' memory against a hand computation (issue 40, section 2): under 1F1B stage s holds min(p - s, m)
microbatches' saved activations, the weights' transposes are not activations, and every stage's terms are shown and
sum to its total."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from parallel_models import TinyDecoder, capture  # noqa: E402

from perfpredict.core.units import GIB  # noqa: E402
from perfpredict.parallel import memory as mem  # noqa: E402
from perfpredict.parallel import parallel_report, render_parallel_text  # noqa: E402

# TinyDecoder: batch 3, seq 10, hidden 48, 8 query heads and 4 KV heads of 6, MLP 80, float32. What one layer's
# forward saves for its backward, by hand:
B, S, H, F = 3, 10, 48, 80
LAYER_SAVED = (
    2 * B * S * 4  # the two RMSNorms' rsqrt: 3*10*1*4 = 120 each
    + 2 * B * S * H * 4  # their normalised inputs: 3*10*48*4 = 5760 each
    + B * S * H * 4  # q: 5760
    + 2 * B * 8 * S * 6 * 4  # k and v repeated to the 8 heads: 3*8*10*6*4 = 5760 each
    + (B * 8 * S * 6 * 4 + B * 8 * 32 * 4 + 2 * 8)  # attention out 5760, logsumexp padded to 32 rows 3072, seed+offset
    + B * S * H * 4  # the residual after attention: 5760
    + 4 * B * S * F * 4  # gate, silu(gate), up and their product: 3*10*80*4 = 9600 each
)  # = 82,048 bytes


@pytest.fixture(scope="module")
def training_graph():
    torch.manual_seed(0)
    return capture(TinyDecoder(), "training")


def test_a_layers_saved_activations_are_the_hand_count_without_the_weights(training_graph):
    from perfpredict.parallel.structure import backward_start

    assert LAYER_SAVED == 82_048
    # two layers and the second's input (the first's output, 3*10*48*4 = 5760; the first's input is the graph's);
    # the weights' transposes (weight.t(), read again by the backward) are the weights' storage, not saved
    saved = mem.saved_activation_bytes(training_graph, backward_start(training_graph))
    assert saved == 2 * LAYER_SAVED + B * S * H * 4


#: what a stage keeps per microbatch: its layer's saved activations, and the activation it received (stage 1: the
#: first layer's output, 3*10*48*4 = 5760; stage 0's input is the graph's)
STAGE_SAVED = (LAYER_SAVED, LAYER_SAVED + B * S * H * 4)


@pytest.mark.parametrize("microbatches, flights", [(4, (2, 1)), (1, (1, 1))])
def test_one_f_one_b_stages_hold_their_in_flight_microbatches(training_graph, microbatches, flights):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # microbatches < pp warns; not what this checks
        report = parallel_report(training_graph, {"pp": 2, "microbatches": microbatches}, optimizer="adamw-8bit")
    for stage, flight, saved in zip(report.stages, flights, STAGE_SAVED):
        assert stage.in_flight_microbatches == flight  # min(p - s, m)
        assert stage.memory.peak_at == "backward"
        assert stage.memory.activations_bytes == flight * saved  # one layer per stage


def test_gradient_accumulation_keeps_one_microbatchs_activations_beside_the_gradients(training_graph):
    # dp with 4 microbatches: the gradients accumulate from the first backward on, so the later backwards hold one
    # microbatch's saved activations on top of them (the whole model's: two layers and the second's input)
    report = parallel_report(training_graph, {"dp": 2, "microbatches": 4}, optimizer="adamw-8bit")
    (stage,) = report.stages
    assert stage.memory.peak_at == "backward"
    assert stage.memory.activations_bytes == 2 * LAYER_SAVED + B * S * H * 4


def test_every_stage_term_is_shown_and_sums_to_its_total(training_graph):
    report = parallel_report(training_graph, {"pp": 2, "microbatches": 4}, precision="amp-bf16")
    text = render_parallel_text(report)
    for stage in report.stages:
        rows = stage.memory.rows()
        assert sum(v for _, v in rows) == stage.memory.total_bytes
        line = next(x for x in text.splitlines() if x.startswith(f"  stage {stage.stage},"))
        for name, value in rows:
            if value:
                assert name in line
        assert line.endswith(f"= {stage.memory.total_bytes / GIB:.2f} GiB")
    assert report.peak_memory_bytes == max(s.memory.total_bytes for s in report.stages)


def test_adamws_temporaries_set_the_peak_where_they_outweigh_the_activations(training_graph):
    parts = mem.pipeline_stage_activations(100, 2, 50, 10, 500)
    assert (parts.activations, parts.optimizer_temporaries, parts.peak_at) == (0, 500, "optimizer step")
    parts = mem.pipeline_stage_activations(100, 3, 150, 10, 200)
    assert (parts.activations, parts.workspace, parts.peak_at) == (3 * 100 + 50, 10, "backward")
