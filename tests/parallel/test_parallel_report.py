"""The parallel report end to end: plans, their validation, the report's consistency and its JSON form."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")


from perfpredict.core.errors import InvalidInputError  # noqa: E402
from perfpredict.parallel import ParallelReport, parallel_report, parse_plan, render_parallel_text  # noqa: E402


def test_one_gpu_is_the_single_gpu_prediction(decoder_graphs):
    report = parallel_report(decoder_graphs[0], None, device="H100-SXM")
    assert report.world_size == 1 and report.collectives == ()
    assert report.step_ms == pytest.approx(report.single_gpu_step_ms)
    assert report.scaling_efficiency == pytest.approx(1.0)
    assert report.exposed_communication_ms == pytest.approx(0.0, abs=1e-9)


def test_a_full_plan_is_consistent_and_round_trips(decoder_graphs):
    plan = {"dp": 2, "tp": 2, "pp": 2, "microbatches": 4}
    report = parallel_report(decoder_graphs[0], plan, device="A100-80GB", precision="amp-bf16")
    assert (report.world_size, report.nodes, report.global_batch_size) == (8, 1, 3 * 4 * 2)
    assert report.bubble_fraction == pytest.approx(1 / 5)  # (p-1)/(m+p-1)
    assert report.step_ms >= report.compute_ms > 0 and report.exposed_communication_ms >= 0
    first, last = report.stages
    assert (first.in_flight_microbatches, last.in_flight_microbatches) == (2, 1)
    assert first.memory.activations_bytes > last.memory.activations_bytes
    assert first.memory.comm_buffers_bytes == first.memory.gradients_bytes  # DDP copies gradients to buckets
    assert {(c.group, c.kind) for c in report.collectives} >= {
        ("tp", "all_reduce"),
        ("dp", "all_reduce"),
        ("pp", "send_recv"),
    }
    assert ParallelReport.from_dict(json.loads(report.to_json())) == report
    text = render_parallel_text(report)
    assert "step time" in text and "scaling efficiency" in text
    assert "validation: multi-GPU step times are scored, never fitted, on llm-foundry's 216 MPT training runs" in text


def test_tensor_parallelism_divides_the_compute(big_training_graph):
    one = parallel_report(big_training_graph, None, predictor="analytical")
    four = parallel_report(big_training_graph, {"tp": 4}, predictor="analytical")
    seq = parallel_report(big_training_graph, {"tp": 4, "sp": True}, predictor="analytical")
    # the matmuls and attention run on a quarter of the heads; the norms and residual adds stay whole (Amdahl),
    # unless sequence parallelism splits them too
    assert seq.compute_ms < one.compute_ms / 3 < four.compute_ms < one.compute_ms / 2
    assert four.stages[0].tp_comm_ms > 0
    assert four.exposed_communication_ms == pytest.approx(four.stages[0].tp_comm_ms)  # on the critical path


def test_data_parallelism_overlaps_the_gradient_reduction(big_training_graph):
    report = parallel_report(big_training_graph, {"dp": 8}, predictor="analytical", precision="amp-bf16")
    dp = [c for c in report.collectives if c.group == "dp"]
    stage = report.stages[0]
    assert sum(c.bytes_per_step for c in dp) == pytest.approx(stage.memory.gradients_bytes, rel=1e-6)
    assert 0 < stage.dp_exposed_ms < stage.dp_comm_ms  # buckets overlap the backward; the last one cannot
    assert 0.5 < report.scaling_efficiency < 1.0


def test_fsdp_shards_the_training_state(big_training_graph):
    ddp = parallel_report(big_training_graph, {"dp": 8}, predictor="analytical", precision="amp-bf16")
    fsdp = parallel_report(big_training_graph, {"dp": 8, "fsdp": True}, predictor="analytical", precision="amp-bf16")
    a, b = ddp.stages[0].memory, fsdp.stages[0].memory
    assert b.weights_bytes == pytest.approx(a.weights_bytes / 8, rel=1e-3)
    assert b.optimizer_state_bytes == pytest.approx(a.optimizer_state_bytes / 8, rel=1e-3)
    assert b.gathered_weights_bytes > 0 and b.comm_buffers_bytes == 0
    kinds = {(c.kind, c.phase) for c in fsdp.collectives if c.group == "dp"}
    assert kinds == {("all_gather", "forward"), ("all_gather", "backward"), ("reduce_scatter", "backward")}


def test_inference_splits_with_tensor_parallelism(decoder_graphs):
    report = parallel_report(decoder_graphs[1], {"tp": 2}, device="H100-SXM")
    assert report.phase == "inference" and all(c.phase == "forward" for c in report.collectives)
    assert report.stages[0].memory.gradients_bytes == 0


def test_plans_that_make_no_sense_are_refused(decoder_graphs):
    with pytest.raises(InvalidInputError, match="valid options are"):
        parse_plan({"dp": 2, "tensor_parallel": 2})
    with pytest.raises(InvalidInputError, match="needs tp > 1"):
        parse_plan({"sp": True})
    with pytest.raises(InvalidInputError, match="positive integer"):
        parse_plan({"tp": 0})
    with pytest.raises(InvalidInputError, match="predict a training step"):
        parallel_report(decoder_graphs[1], {"dp": 2, "fsdp": True})
    assert parse_plan({"tp": 2, "pp": 2, "dp": 4}).world_size == 16


@pytest.mark.parametrize(
    "options, message",
    [
        ({"bucket_mb": "25"}, "bucket_mb='25' must be a positive number of MiB"),
        ({"bucket_mb": float("inf")}, "bucket_mb=inf must be a positive number"),
        ({"bucket_mb": True}, "bucket_mb=True must be a positive number"),
        ({"bucket_mb": 0}, "bucket_mb=0 must be a positive number"),
        ({"zero_stage": True}, "zero_stage=True must be 0, 1, 2 or 3"),
        ({"zero_stage": 2.0}, "zero_stage=2.0 must be 0, 1, 2 or 3"),
        ({"microbatches": 0}, "microbatches=0 must be a positive integer$"),
    ],
)
def test_option_values_of_the_wrong_type_are_refused_in_one_line(options, message):
    # a value of the wrong type is the user's to fix, not a TypeError from deep inside
    with pytest.raises(InvalidInputError, match=message) as err:
        parse_plan(options)
    assert "\n" not in str(err.value)
    assert parse_plan({"bucket_mb": 50, "zero_stage": 2, "dp": 2}).bucket_mb == 50


def test_a_pipeline_short_of_microbatches_warns(decoder_graphs):
    with pytest.warns(UserWarning, match="microbatches=1 < pp=2"):
        report = parallel_report(decoder_graphs[0], {"pp": 2})
    assert report.bubble_fraction == pytest.approx(0.5)


def test_the_tp_estimate_bounds_what_the_tp_plan_predicts(decoder_graphs):
    """The advice's per-GPU figure for --tp 2 is the plan's own prediction, give or take the activations it counts
    whole (tensor parallelism splits some of them)."""
    import dataclasses

    from perfpredict.core.memory_advice import Levers, remedies
    from perfpredict.hardware.devices import get_device
    from perfpredict.parallel import parallel_report
    from perfpredict.pipeline import predict
    from perfpredict.request import Request

    graph = decoder_graphs[1]
    h100 = dataclasses.replace(get_device("H100-SXM"), runtime_overhead_bytes=0, mig_profiles=())
    one = predict(Request(source=graph, device=h100, top_ops=0))
    small = dataclasses.replace(h100, memory_bytes=int(one.peak_memory_bytes.value / 1.2))  # 120%: does not fit
    one = predict(Request(source=graph, device=small, top_ops=0))
    (warning,) = [w for w in one.warnings if "does not fit" in w]
    assert "--tp 2 (splits the weights" in warning
    m = one.memory
    terms = {"weights": m.params_bytes, "activations": m.activations_bytes}
    peak = one.peak_memory_bytes.value
    levers = Levers(batch=graph.batch_size, multi_gpu=True)
    tp2 = {r.flag: r.after_bytes for r in remedies("inference", terms, peak, 0.9 * small.memory_bytes, "", levers)}
    planned = parallel_report(graph, {"tp": 2}, device=small).peak_memory_bytes  # under 90%: no warning
    assert planned <= tp2["--tp 2"] <= planned + m.activations_bytes
