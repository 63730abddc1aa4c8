"""Training at scale through the report: MFU and HFU by hand on a known model, the step split, the global batch,
FSDP's strategies and HYBRID_SHARD, context parallelism and async TP end to end, and the plan keys at every door
(Python, CLI flags, the web page's fields)."""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")

from parallel_models import BATCH, HEADS, HIDDEN, SEQ  # noqa: E402

from perfpredict.core.errors import InvalidInputError  # noqa: E402
from perfpredict.parallel import ParallelReport, parallel_report, parse_plan, render_parallel_text  # noqa: E402
from perfpredict.parallel.plan import resolve_batch  # noqa: E402

H100_BF16_DENSE = 989.4e12  # the H100 SXM datasheet: 132 SMs x 4096 FLOP/clock x 1.83 GHz


@pytest.fixture(scope="module")
def sequence_graph(decoder_graphs):
    """The two-layer decoder's training graph, marked as a sequence model of SEQ tokens."""
    return dataclasses.replace(decoder_graphs[0], seq_len=SEQ)


def test_mfu_and_hfu_by_hand(sequence_graph, monkeypatch):
    g = sequence_graph
    attention = sum(n.flops for n in g.nodes[: _start(g)] if n.op == "attention")
    assert attention == 2 * 4 * BATCH * HEADS * SEQ * SEQ * (HIDDEN // HEADS)  # 2 layers x 4 b h s^2 d = 115,200
    plan = {"dp": 2, "microbatches": 3}
    report = parallel_report(g, plan, device="H100-SXM", predictor="analytical", precision="amp-bf16")
    t = report.trainer
    # 6 N per token over the global batch (3 x 10 tokens x 3 microbatches x 2 replicas), plus 3 x the attention
    model = (6 * g.param_count * BATCH * SEQ + 3 * attention) * 3 * 2
    assert t.model_flops_per_step == pytest.approx(model)
    assert t.peak_flops_per_s == pytest.approx(H100_BF16_DENSE, rel=1e-3)  # the datasheet's, not the measured 823
    step_s = report.step_ms / 1e3
    assert t.mfu == pytest.approx(model / (step_s * 2 * t.peak_flops_per_s))
    assert t.hfu == pytest.approx(t.mfu)  # nothing recomputed
    assert t.tokens_per_s_per_gpu == pytest.approx(BATCH * SEQ * 3 * 2 / step_s / 2)
    split = report.step_split
    assert sum(ms for _, ms in split.rows()) == pytest.approx(report.step_ms)
    # full activation checkpointing: the graph rewrite recomputes each block's forward in its backward; HFU adds
    # those FLOPs once per microbatch (3 microbatches x 2 replicas), and the recompute is its own part of the step
    from perfpredict.compiler_hooks import recompute

    again = parallel_report(
        g, plan, device="H100-SXM", predictor="analytical", precision="amp-bf16", activation_checkpointing="full"
    )
    recomputed = recompute.recompute_summary(recompute.apply(g, "full"))[2]
    layers = sum(n.flops for i, n in enumerate(g.nodes[: _start(g)]) if _labels(g)[i] >= 0)
    assert 0.5 * layers < recomputed <= layers  # the blocks' forward, less what non-reentrant checkpointing skips
    hardware = model + recomputed * 3 * 2
    assert again.trainer.hardware_flops_per_step == pytest.approx(hardware)
    assert again.trainer.hfu / again.trainer.mfu == pytest.approx(hardware / model)
    assert again.step_split.recompute_ms > 0 and again.step_ms > report.step_ms
    assert "full" in again.assumptions["activation checkpointing"]


def _start(graph):
    from perfpredict.parallel.structure import backward_start

    return backward_start(graph)


def _labels(graph):
    from perfpredict.parallel.structure import layer_labels

    return layer_labels(graph)


def test_the_report_reads_like_a_recipe_and_round_trips(sequence_graph):
    plan = {"dp": 2, "pp": 2, "global_batch": 24, "schedule": "interleaved", "virtual_stages": 2}
    report = parallel_report(sequence_graph, plan, device="A100-80GB", predictor="analytical", precision="amp-bf16")
    # 24 samples = micro-batch 3 x 4 microbatches x dp 2; interleaved bubble (p-1)/(v m) = 1/8 of the compute
    assert report.plan["microbatches"] == 4 and report.global_batch_size == 24
    assert report.bubble_over_compute == pytest.approx(1 / 8)
    assert ParallelReport.from_dict(json.loads(report.to_json())) == report
    text = render_parallel_text(report)
    assert "tokens/s per GPU" in text and "MFU" in text and f"({24 * SEQ:,} tokens)" in text
    assert "interleaved" in report.assumptions["pipeline"] and "worst rank" in text


def test_global_batch_and_plan_keys_are_checked():
    assert resolve_batch(parse_plan({"dp": 4, "global_batch": 48}), 3).microbatches == 4  # 48 / (3 x 4)
    with pytest.raises(InvalidInputError, match="choose a global batch of 36 or 48"):
        resolve_batch(parse_plan({"dp": 4, "global_batch": 40}), 3)
    plan = parse_plan({"dp": 8, "fsdp": True, "sharding_strategy": "HYBRID_SHARD", "pipeline_schedule": "ZB-1P"})
    assert (plan.fsdp_strategy, plan.schedule, plan.shard_ranks) == ("hybrid_shard", "zb1p", 8)
    assert parse_plan({"dp": 16, "fsdp": True, "fsdp_strategy": "hybrid_shard"}).shard_ranks == 8  # a node's share
    for bad, message in [
        ({"schedule": "1f2b"}, "not one of 1f1b, gpipe"),
        ({"pp": 2, "schedule": "interleaved", "microbatches": 4}, "virtual_stages >= 2"),
        ({"pp": 4, "schedule": "interleaved", "virtual_stages": 2, "microbatches": 6}, "multiple of pp=4"),
        ({"dp": 2, "fsdp_strategy": "shard_grad_op"}, "add fsdp=True"),
        ({"tp": 2, "async_tp": True}, "needs tp > 1 and sp=True"),
        ({"dp": 6, "fsdp": True, "fsdp_strategy": "hybrid_shard", "shard_group": 4}, "choose the shard group"),
        ({"inter_node_gbps": -1}, "positive line rate"),
    ]:
        with pytest.raises(InvalidInputError, match=message):
            parse_plan(bad)


def _dp_bytes(report, kind, phase):
    return sum(c.bytes_per_step for c in report.collectives if (c.group, c.kind, c.phase) == ("dp", kind, phase))


def test_fsdp_strategies_in_the_report(decoder_graphs):
    def run(**plan):
        return parallel_report(
            decoder_graphs[0], {"dp": 16, "fsdp": True, **plan}, device="H100-SXM", predictor="analytical"
        )

    full, grad_op = run(), run(fsdp_strategy="shard_grad_op")
    assert _dp_bytes(full, "all_gather", "backward") > 0 and _dp_bytes(grad_op, "all_gather", "backward") == 0
    assert _dp_bytes(full, "all_gather", "forward") == _dp_bytes(grad_op, "all_gather", "forward")
    # bf16 gathers (a MixedPrecisionPolicy) move half the float32 bytes
    half = run(fsdp_param_dtype="bfloat16")
    assert _dp_bytes(half, "all_gather", "forward") == pytest.approx(
        _dp_bytes(full, "all_gather", "forward") / 2, rel=1e-3
    )
    # HYBRID_SHARD over 2 nodes: shards in the node, the shards' all-reduce across the 2 replicas over the network
    hybrid = run(fsdp_strategy="hybrid_shard")
    assert {c.group for c in hybrid.collectives} == {"dp", "replicate"}
    assert hybrid.stages[0].memory.optimizer_state_bytes == pytest.approx(
        2 * full.stages[0].memory.optimizer_state_bytes, rel=1e-3
    )  # sharded 8 ways, not 16
    assert "2 replicas" in hybrid.assumptions["overlap"]


def test_context_parallel_and_async_tp_end_to_end(decoder_graphs):
    one = parallel_report(decoder_graphs[0], {"dp": 1}, device="H100-SXM", predictor="analytical")
    cp = parallel_report(decoder_graphs[0], {"cp": 2}, device="H100-SXM", predictor="analytical")
    assert cp.world_size == 2 and cp.stages[0].forward_ms == pytest.approx(one.stages[0].forward_ms / 2)
    assert any(c.group == "cp" and c.kind == "send_recv" for c in cp.collectives)
    assert "ring attention" in cp.assumptions["context_parallel"]


def test_async_tp_hides_the_collectives_behind_large_matmuls(big_training_graph):
    plan = {"tp": 2, "sp": True}
    sp = parallel_report(big_training_graph, plan, device="H100-SXM", predictor="analytical")
    overlapped = parallel_report(
        big_training_graph, {**plan, "async_tp": True}, device="H100-SXM", predictor="analytical"
    )
    # 8 x 2048 tokens x 2048 x 2 bytes = 64 MiB per collective: 11.8 us + 32 MiB / 360 GB/s = 105 us on NVLink,
    # beside the q, k, v matmuls (2 x 16384 x 2048 x (1024 + 512 + 512) FLOPs, ~170 us at 823 TFLOP/s) or gate and
    # up (2 x 2 x 16384 x 2048 x 2816, ~460 us): hidden but for the chunks' launches
    assert overlapped.stages[0].tp_comm_ms < 0.5 * sp.stages[0].tp_comm_ms
    assert overlapped.step_ms < sp.step_ms and "async TP" in overlapped.assumptions["async_tp"]


def test_one_gpu_training_reports_say_it_as_trainers_do(decoder_graphs):
    from perfpredict.graph_report import report_for_graph
    from perfpredict.render.text import render_text

    report = report_for_graph(decoder_graphs[0], device="H100-SXM", predictor="analytical", precision="amp-bf16")
    assert report.trainer.mfu > 0 and report.trainer.samples_per_s_per_gpu == pytest.approx(
        BATCH / report.latency_ms.value * 1e3
    )
    assert sum(ms for _, ms in report.step_split.rows()) == pytest.approx(report.latency_ms.value)
    assert "MFU" in render_text(report)
    from perfpredict.render.html import render_html

    assert 'id="trainer"' in render_html(report) and "tokens/s per GPU" not in render_html(report)  # no sequence
    assert report_for_graph(decoder_graphs[1], device="H100-SXM", predictor="analytical").trainer is None


def test_cli_flags_and_web_fields_make_the_plan():
    import argparse

    from perfpredict.cli.parallel import add_parallel_args, plan_from_args
    from perfpredict.web.app import parallel_plan

    p = argparse.ArgumentParser()
    add_parallel_args(p)
    args = p.parse_args(
        [
            "--dp",
            "64",
            "--fsdp",
            "hybrid_shard",
            "--shard-group",
            "8",
            "--pp",
            "2",
            "--schedule",
            "zb1p",
            "--global-batch",
            "512",
            "--cp",
            "2",
            "--tp",
            "2",
            "--sp",
            "--async-tp",
            "--inter-node-gbps",
            "400",
            "--nvlink-domain",
            "72",
            "--fsdp-dtype",
            "bfloat16",
        ]
    )
    assert plan_from_args(args) == {
        "dp": 64,
        "tp": 2,
        "pp": 2,
        "cp": 2,
        "schedule": "zb1p",
        "global_batch": 512,
        "shard_group": 8,
        "nvlink_domain": 72,
        "inter_node_gbps": 400.0,
        "sp": True,
        "async_tp": True,
        "fsdp": True,
        "fsdp_strategy": "hybrid_shard",
        "fsdp_param_dtype": "bfloat16",
    }
    assert plan_from_args(p.parse_args(["--fsdp"])) == {"fsdp": True}
    assert parallel_plan(8, 1, 2, True, fsdp_strategy="shard_grad_op", schedule="gpipe", inter_node_gbps=200) == {
        "dp": 8,
        "pp": 2,
        "fsdp": True,
        "fsdp_strategy": "shard_grad_op",
        "schedule": "gpipe",
        "inter_node_gbps": 200.0,
    }
