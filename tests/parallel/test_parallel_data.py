"""Data parallelism per step: which reductions run every microbatch, the optimizer step on a shard, per-rank memory
through parallel_report against ZeRO's byte counts, and the slowest group's link where groups straddle nodes."""

from __future__ import annotations

import pytest

from perfpredict.parallel import data_parallel as dpm
from perfpredict.parallel.dp_timing import data_parallel_time
from perfpredict.parallel.interconnect import interconnect_for
from perfpredict.parallel.plan import ParallelPlan
from perfpredict.parallel.simulate import links_of
from perfpredict.parallel.structure import POST, PRE

# the root (embedding, head) and two layers of 4M parameters in two tensors each; seconds per forward/backward
UNITS = [
    dpm.Unit(PRE, 1000, (1000,), 1e-3, 2e-3),
    dpm.Unit(0, 4_000_000, (2_000_000, 2_000_000), 5e-3, 1e-2),
    dpm.Unit(1, 4_000_000, (2_000_000, 2_000_000), 5e-3, 1e-2),
    dpm.Unit(POST, 1000, (1000,), 1e-3, 2e-3),
]


@pytest.mark.parametrize("stage, reductions", [(0, 1), (1, 1), (2, 4), (3, 4)])
def test_sharded_gradients_are_reduced_every_microbatch(stage, reductions):
    # DDP (no_sync) and ZeRO-1 keep whole gradients and reduce once per step; ZeRO-2 and FSDP keep only their
    # shard, so each of the 4 microbatches reduce-scatters (DeepSpeed's allreduce_gradients, FSDP2's default)
    link = interconnect_for("H100-SXM").group(8, 1, 8)
    one = data_parallel_time(UNITS, stage, 8, link, 2.0, 2.0, 25.0, 1)
    four = data_parallel_time(UNITS, stage, 8, link, 2.0, 2.0, 25.0, 4)
    kind = "all_reduce" if stage == 0 else "reduce_scatter"

    def gradient_bytes(t):
        return sum(c.size_bytes * n for (c, _), n in zip(t.comms, t.calls_per_step) if c.kind == kind)

    params = sum(u.params for u in UNITS)
    assert gradient_bytes(one) == pytest.approx(2 * params, abs=8)  # 2 bytes per gradient, once
    assert gradient_bytes(four) == pytest.approx(reductions * 2 * params, abs=32)
    if reductions > 1:  # what the step loses is paid per microbatch
        assert four.per_microbatch_exposed_s > 0 and four.last_microbatch_exposed_s == 0
    else:
        assert four.per_microbatch_exposed_s == 0 and four.last_microbatch_exposed_s > 0
    lost = 4 * four.per_microbatch_exposed_s + four.last_microbatch_exposed_s
    assert lost == pytest.approx(
        (reductions if reductions > 1 else 1) * (one.per_microbatch_exposed_s + one.last_microbatch_exposed_s)
    )


def test_a_group_that_straddles_a_node_boundary_paces_its_kind():
    ic = interconnect_for("H100-SXM")
    # dp=6, pp=2 on 8-GPU nodes: stage 0's replicas (ranks 0-5) share a node, stage 1's (6-11) do not, and rank
    # 5 sends its activations to rank 11 on the other node
    links = links_of(ic, ParallelPlan(dp=6, pp=2))
    assert (links.dp.nodes, links.pp.nodes, links.tp.nodes) == (2, 2, 1)
    # ranks 6, 7 on node 0 and 8-11 on node 1: the two GPUs' NICs (50 GB/s each, 94%) carry the ring
    assert links.dp.bus_bandwidth_gb_per_s == pytest.approx(2 * 50 * 0.94)
    assert ic.group(6, 1, 8).nodes == 1  # rank 0's group alone would have said NVLink
    aligned = links_of(ic, ParallelPlan(dp=4, pp=2))  # sizes that divide the node stay inside it
    assert (aligned.dp.nodes, aligned.pp.nodes) == (1, 1)


def test_tensor_parallel_across_a_node_boundary_warns(decoder_graphs):
    from perfpredict.parallel import parallel_report

    # 6-GPU nodes: ranks 0-3 share node 0, ranks 4-7 straddle nodes 0 and 1, though tp=4 < 6
    with pytest.warns(UserWarning, match="tp=4 spans nodes"):
        report = parallel_report(decoder_graphs[1], {"tp": 4, "dp": 3, "gpus_per_node": 6}, device="H100-SXM")
    assert "2 nodes" in report.assumptions["tp_link"]


@pytest.mark.parametrize("plan", [{"zero_stage": 1}, {"zero_stage": 2}, {"fsdp": True}])
def test_each_rank_steps_the_optimizer_on_its_shard(decoder_graphs, plan):
    from perfpredict.parallel import parallel_report

    ddp = parallel_report(decoder_graphs[0], {"dp": 8}, device="H100-SXM", predictor="analytical")
    sharded = parallel_report(decoder_graphs[0], {"dp": 8, **plan}, device="H100-SXM", predictor="analytical")
    assert ddp.stages[0].optimizer_ms > 0
    assert sharded.stages[0].optimizer_ms == pytest.approx(ddp.stages[0].optimizer_ms / 8)
    assert "1/8 shard" in sharded.assumptions["optimizer"]


# per trainable parameter on one rank of N = 64, mixed-precision Adam (2 + 2 + 12 bytes): the ZeRO paper's counts
ZERO_BYTES = {0: 16, 1: 4 + 12 / 64, 2: 2 + 14 / 64, 3: 16 / 64}


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_a_rank_holds_zeros_bytes_per_parameter(decoder_graphs, stage):
    from perfpredict.parallel import parallel_report

    training = decoder_graphs[0]
    report = parallel_report(
        training, {"dp": 64, "zero_stage": stage}, device="H100-SXM", predictor="analytical", precision="master-fp16"
    )
    m = report.stages[0].memory
    held = (m.weights_bytes + m.gradients_bytes + m.optimizer_state_bytes) / training.trainable_param_count
    assert held == pytest.approx(ZERO_BYTES[stage], rel=0.05)


def test_an_fsdp2_rank_holds_sixteen_bytes_over_n(decoder_graphs):
    from perfpredict.parallel import parallel_report

    # float32 weights and gradients, AdamW's two float32 states: (4 + 4 + 8) / N, as fully_shard holds them
    training = decoder_graphs[0]
    report = parallel_report(training, {"dp": 4, "fsdp": True}, device="H100-SXM", predictor="analytical")
    m = report.stages[0].memory
    held = (m.weights_bytes + m.gradients_bytes + m.optimizer_state_bytes) / training.trainable_param_count
    assert held == pytest.approx(16 / 4, rel=0.05)
    assert m.comm_buffers_bytes == 0 and m.gathered_weights_bytes > 0


def test_fsdp_shards_frozen_weights_too():
    import torch
    from parallel_models import TinyDecoder, capture

    from perfpredict.parallel import parallel_report

    torch.manual_seed(0)
    model = TinyDecoder()
    for p in model.layers[0].parameters():  # half the weights frozen, as in adapter fine-tuning
        p.requires_grad_(False)
    graph = capture(model, "training")
    frozen = graph.param_count - graph.trainable_param_count
    assert frozen > 0
    ddp = parallel_report(graph, {"dp": 4}, device="H100-SXM", predictor="analytical").stages[0].memory
    fsdp = parallel_report(graph, {"dp": 4, "fsdp": True}, device="H100-SXM", predictor="analytical").stages[0].memory
    # float32: DDP holds every weight (4 bytes each); fully_shard holds a quarter of each, frozen or not
    assert ddp.weights_bytes == pytest.approx(4 * graph.param_count, rel=1e-3)
    assert fsdp.weights_bytes == pytest.approx(4 * graph.param_count / 4, rel=1e-3)
    assert fsdp.gradients_bytes == pytest.approx(4 * graph.trainable_param_count / 4, rel=1e-3)
