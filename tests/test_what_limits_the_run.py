"""Every report says what limits the run: device, host and wall time and the bound, in text, JSON and HTML; a
host-bound step says what cuda_graph and compiled would take; the host is a choice the report names; multi-GPU
reports say when their ranks are host-bound."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from perfpredict.graph_report import report_for_graph
from perfpredict.predictors import host_model
from perfpredict.render.formats import fmt_time_ms
from perfpredict.render.limits_text import timeline_lines


@pytest.fixture(scope="module")
def bert_b1():
    """BERT-base at batch 1, seq 128, bf16: eager on an H100 it waits on its host."""
    from perfpredict.api import featurize
    from perfpredict.compiler_hooks.hf_frontend import model_from_hf

    model, inputs, _ = model_from_hf("bert-base-uncased", 1, 128, dtype="bfloat16")
    return featurize(model, inputs)


def test_a_host_bound_bert_report_says_what_cuda_graph_and_compiled_would_take_everywhere(bert_b1):
    from perfpredict.render.html import render_html

    report = report_for_graph(bert_b1, device="H100-SXM", weights_built_in=None)
    t = report.timeline
    assert t.bound == "host" and t.launch_bound and t.host_ms > t.device_ms
    assert t.wall_ms == pytest.approx(report.latency_ms.value)
    # a CUDA graph replays the device timeline without the host's dispatch; compile fuses and drops ATen dispatch
    assert t.other_modes_ms["cuda_graph"] < t.wall_ms / 1.5 and t.other_modes_ms["compiled"] < t.wall_ms / 1.5
    lines = timeline_lines(report)
    assert lines[0].startswith("timelines (eager): device ") and "bound: host" in lines[0]
    advice = lines[1]
    for mode in ("cuda_graph", "compiled", "compiled_cuda_graph"):
        assert f"{mode} {fmt_time_ms(t.other_modes_ms[mode])}" in advice
    html = render_html(report)
    assert 'id="timeline"' in html and "What limits the run" in html
    assert f"cuda_graph {fmt_time_ms(t.other_modes_ms['cuda_graph'])}" in html and "host-bound" in html
    data = json.loads(report.to_json())["timeline"]
    assert {"device_ms", "host_ms", "wall_ms", "bound", "other_modes_ms"} <= set(data)
    assert data["bound"] == "host" and set(data["other_modes_ms"]) == {"cuda_graph", "compiled", "compiled_cuda_graph"}
    # a CUDA graph run is no longer host-bound: no advice line, and the bound is the GPU's
    graphed = report_for_graph(bert_b1, device="H100-SXM", weights_built_in=None, mode="cuda_graph")
    assert graphed.timeline.bound in ("compute", "memory")
    assert (
        timeline_lines(graphed)[1].startswith(f"{graphed.timeline.bound}-bound: ") and len(timeline_lines(graphed)) == 2
    )


def test_a_big_gemm_is_bound_by_the_gpu_and_says_which():
    import torch

    from perfpredict.api import predict, predict_many

    layer, x = torch.nn.Linear(4096, 4096), (torch.randn(8192, 4096),)
    report = predict(layer, x, device="H100-SXM")
    # 2*8192*4096*4096 = 550 GFLOP over 64 MiB + 128 MiB + 128 MiB moved: far above the H100's ridge point
    assert report.timeline.bound == "compute" and not report.timeline.launch_bound
    assert "bound: compute" in timeline_lines(report)[0] and len(timeline_lines(report)) == 2  # no host-bound line
    assert timeline_lines(report)[1].startswith("compute-bound: ")
    # predict_many takes the host too: a batch-1 layer is host-bound, and the dev VM's host is slower
    small = [{"device": "H100-SXM", "batch_size": 1}]
    server = predict_many(layer, x, small)["latency_ms"][0]
    dev_vm = predict_many(layer, x, small, host="dev-vm")["latency_ms"][0]
    assert dev_vm > server


def test_the_host_is_a_choice_that_moves_host_time_and_is_named_in_the_assumptions(bert_b1):
    server = report_for_graph(bert_b1, device="H100-SXM", weights_built_in=None)
    dev_vm = report_for_graph(bert_b1, device="H100-SXM", weights_built_in=None, host="dev-vm")
    named = report_for_graph(bert_b1, device="H100-SXM", weights_built_in=None, host="h100-server")
    assert server.timeline.host_profile == named.timeline.host_profile == "h100-server"  # the GPU default
    assert named.timeline.host_ms == pytest.approx(server.timeline.host_ms)
    # the same GPU work; the dev VM's profile dispatches each op about twice as slowly (dispatch scale 11.3 vs 5.7)
    assert dev_vm.timeline.device_ms == pytest.approx(server.timeline.device_ms)
    assert dev_vm.timeline.host_ms > 1.5 * server.timeline.host_ms
    assert dev_vm.latency_ms.value > server.latency_ms.value
    assert "'h100-server'" in server.assumptions["host"] and "16-vCPU Intel Xeon" in server.assumptions["host"]
    assert "'dev-vm'" in dev_vm.assumptions["host"] and "development VM" in dev_vm.assumptions["host"]
    assert "--host" in server.assumptions["host"]


def test_the_cli_takes_host_and_an_unknown_one_is_one_line_and_exit_2(capsys):
    from perfpredict.cli import main

    base = ["predict", "--hf", "distilbert-base-uncased", "--device", "H100-SXM", "--top", "0", "--json", "-"]
    assert main([*base, "--host", "dev-vm"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["timeline"]["host_profile"] == "dev-vm" and "dev-vm" in out["assumptions"]["host"]
    assert main([*base, "--host", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown host 'nope'" in err[0] and "h100-server, dev-vm, calibrated" in err[0]
    assert main([*base, "--host", "calibrated"]) == 2  # none on this machine yet: says how to make one
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calibrate-host" in err[0]
    assert main(["explain", "--hf", "distilbert-base-uncased", "--device", "H100-SXM", "--top", "1"]) == 0
    assert "timelines (eager): device " in capsys.readouterr().out  # explain shows the timelines too
    cpu = ["predict", "--hf", "distilbert-base-uncased", "--device", "cpu", "--top", "0", "--host", "h100-server"]
    assert main(cpu) == 2  # a GPU server's profile has no CPU op model
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--host dev-vm" in err[0]


def test_a_cpu_is_its_own_host_the_dev_vm_by_default(bert_b1):
    report = report_for_graph(bert_b1, device="cpu", weights_built_in=None)
    assert report.timeline.host_profile == "dev-vm" and report.timeline.bound


def test_multi_gpu_reports_say_when_ranks_are_host_bound_and_what_it_does_to_scaling(bert_b1):
    from perfpredict.parallel import parallel_report, render_parallel_text
    from perfpredict.parallel.report import ParallelReport

    tp = parallel_report(bert_b1, {"tp": 2}, device="H100-SXM")
    assert tp.bound == "host" and tp.rank_timeline is not None and tp.rank_timeline.launch_bound
    # each rank still dispatches every op: two GPUs barely beat one
    assert tp.scaling_efficiency < 0.6
    (note,) = tp.notes
    assert "host-bound" in note and "tp=2" in note and f"{tp.scaling_efficiency:.0%}" in note and "--mode" in note
    text = render_parallel_text(tp)
    assert f"note: {note}" in text and "bound                host" in text
    t = tp.rank_timeline
    assert f"why                  each rank's host dispatch and launches ({t.host_ms:.2f} ms) take longer" in text
    again = ParallelReport.from_dict(json.loads(tp.to_json()))
    assert again.rank_timeline == tp.rank_timeline and again.notes == tp.notes
    # with CUDA graphs the ranks are no longer host-bound, and nothing claims they are
    graphed = parallel_report(bert_b1, {"tp": 2}, device="H100-SXM", mode="cuda_graph")
    assert graphed.bound != "host" and graphed.notes == ()


MEASURED_H100 = Path(__file__).resolve().parents[1] / "perfpredict" / "data" / "measured" / "h100-sxm.json"
H100_ROWS = Path(__file__).resolve().parents[1] / "data" / "v3" / "nvidia-h100-80gb-hbm3"


def test_the_shipped_server_profile_is_what_the_h100_host_measured(tmp_path):
    """h100-server, re-derived from the measurements it names rather than checked against its own file: the launch
    cost from the H100 roofline run's raw samples, the GPU dispatch scale from the host time of the nine eager steps
    measured on the H100's host (data/v3), each step's against its graph's bare dispatch
    (benchmarks/host_profile_h100.py's fit), and the median step's graph traced again with today's code."""
    from dataclasses import replace

    from perfpredict.learning.training_data import GraphCache, arrays_for
    from perfpredict.profiling import zoo
    from perfpredict.profiling.dataset import load_dataset

    server = host_model.load_profile(host="h100-server")
    # launch: 10,000 empty kernels back to back, timed whole 30 times; the fastest, 0.066980 s / 10,000 = 6.698 us
    (launch,) = [k for k in json.loads(MEASURED_H100.read_text())["kernels"] if k["kernel"] == "launch_back_to_back"]
    launch_s = min(launch["times_s"]) / launch["params"]["launches"]
    assert server.gpu_launch_us == pytest.approx(launch_s * 1e6, abs=5e-4) and 6.6 < launch_s * 1e6 < 6.8

    # dispatch scale: per batch-1 eager step measured there, (host time - kernels x launch) / bare dispatch (the dev
    # VM's per-op figures at scale 1, which the profile records per step); the profile holds the median
    measured = {
        r["family"]: r
        for r in load_dataset(H100_ROWS).rows
        if r.get("host_dispatch_ms") and r["batch_size"] == 1 and r["phase"] == "inference"
    }
    recorded = {x["family"]: x for x in server.details["rows"]}
    assert len(measured) == 9 and set(recorded) == set(measured)
    scales = {}
    for family, x in recorded.items():
        host_s = measured[family]["host_dispatch_ms"] * 1e-3
        assert x["host_dispatch_ms"] == pytest.approx(host_s * 1e3, abs=5e-4)  # the step it names was measured
        scales[family] = (host_s - x["graph_kernels"] * launch_s) / (x["bare_dispatch_ms"] * 1e-3)
    # BERT's step is the median of the nine: (10.593 ms - 322 kernels x 6.698 us) / 1.488 ms = 5.669
    assert statistics.median(scales.values()) == scales["bert"]
    assert server.dispatch_scale["gpu"] == pytest.approx(scales["bert"], abs=2e-3)  # bare dispatch rounded to 1 us
    assert server.dispatch_scale["gpu"] == pytest.approx(5.669, abs=1e-3)
    # and that step's graph is what today's code traces (on meta, at the sweep's anchor batch, as the fit did)
    graph = arrays_for(zoo.ModelSpec.from_key(measured["bert"]["key"]), GraphCache(tmp_path)).graph
    unit = replace(host_model.HostProfile.from_file(host_model.REFERENCE), dispatch_scale={"gpu": 1.0})
    bare_ms = float(host_model.node_host_s(graph, unit, 0.0, gpu=True).sum()) * 1e3
    assert sum(not n.is_view for n in graph.nodes) == recorded["bert"]["graph_kernels"] == 322
    assert bare_ms == pytest.approx(recorded["bert"]["bare_dispatch_ms"], abs=5e-4)
    assert "16 vCPUs" in server.cpu_model and "host_dispatch_ms" in server.source
    for name in host_model.HOSTS:
        profile = host_model.load_profile(host=name)
        assert profile.name == name and len(profile.source) > 40


# the bound follows the two timelines (issue 45, item 4): a Llama-7B training step whose host time exceeded its
# device time was labelled "compute", and the optimizer step's device time was left out of compute-vs-memory
def _mlp(width: int, blocks: int, dtype=None):
    import torch

    layers = [torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.GELU()) for _ in range(blocks)]
    return torch.nn.Sequential(*layers).to(dtype or torch.float32)


def test_a_step_whose_host_outlasts_its_device_is_host_bound_though_the_gpu_idles_under_a_third():
    import torch

    from perfpredict.api import predict

    report = predict(_mlp(1024, 4), (torch.randn(384, 1024),), device="H100-SXM")
    t = report.timeline
    # the case the old rule (device idle over a third of the wall) missed: the host takes longer than the device
    assert t.host_ms > t.device_ms and t.device_idle_share < 1 / 3
    assert t.bound == "host" and t.launch_bound
    advice = timeline_lines(report)[-1]
    assert f"dispatch and launches take {fmt_time_ms(t.host_ms)}, the GPU's work {fmt_time_ms(t.device_ms)}" in advice
    graphed = predict(_mlp(1024, 4), (torch.randn(384, 1024),), device="H100-SXM", mode="cuda_graph")
    assert graphed.timeline.host_ms < graphed.timeline.device_ms and graphed.timeline.bound != "host"


def test_the_optimizer_steps_device_time_counts_toward_memory_bound():
    import torch

    from perfpredict.api import predict

    layer = torch.nn.Linear(4096, 4096)
    report = predict(layer, (torch.randn(64, 4096),), device="H100-SXM", phase="training", top_ops=1000)
    t, rows = report.timeline, report.per_op
    # fp32 GEMMs of 64 x 4096 x 4096: 2.1 GFLOP over 69 MB, 31 FLOP/byte, above the FP32 ridge of
    # 66.9 TFLOP/s x 0.85 / (3.35 TB/s x 0.9) = 18.9 FLOP/byte: compute-bound; the AdamW step streams 16.8 M
    # parameters' weights, gradients and two moments: memory-bound, and the largest row
    assert t.ridge_flop_per_byte == pytest.approx(66.9e12 * 0.85 / (3.35e12 * 0.9), rel=2e-3)
    assert {o.bound for o in rows if o.op == "matmul"} == {"compute"} and rows[0].op == "optimizer"
    compute = sum(o.time_ms for o in rows if o.bound == "compute")
    assert t.compute_share == pytest.approx(compute / sum(o.time_ms for o in rows)) and t.compute_share < 0.5
    # without the optimizer (as the old rule counted) the GEMMs hold most of the device time
    assert compute > sum(o.time_ms for o in rows if o.bound != "compute" and o.op != "optimizer")
    assert t.bound == "memory"
    reason = timeline_lines(report)[1]
    assert f"memory-bound: {t.compute_share:.0%} of the device time is in compute-bound ops" in reason
    assert "(the optimizer step among them)" in reason and "above 19 FLOP/byte" in reason


def test_a_gemm_between_two_gpus_ridge_points_is_memory_bound_on_the_h100_and_compute_bound_on_the_a100():
    """Why the same plan can be memory-bound on an H100 and compute-bound on an A100: the A100 has fewer FLOP/s
    per byte/s of bandwidth, so a GEMM of middling intensity is compute-bound there and memory-bound on the H100;
    every report says its ridge point in words."""
    import torch

    from perfpredict.api import predict

    model, x = _mlp(4096, 4, torch.bfloat16), (torch.randn(256, 4096, dtype=torch.bfloat16),)
    # 256 x 4096 x 4096 in bf16: 8.6 GFLOP over 2 x (1 M + 16.8 M + 1 M) elements = 37.7 MB, 228 FLOP/byte;
    # ridges: H100 989.4 TFLOP/s x 0.8 / (3.35 TB/s x 0.9) = 262.5, A100 312 x 0.8 / (2.039 x 0.9) = 136.0
    h100 = predict(model, x, device="H100-SXM", mode="cuda_graph", top_ops=1000)
    a100 = predict(model, x, device="A100-SXM-80GB", mode="cuda_graph", top_ops=1000)
    assert h100.timeline.ridge_flop_per_byte == pytest.approx(262.5, abs=0.5)
    assert a100.timeline.ridge_flop_per_byte == pytest.approx(136.0, abs=0.5)
    (gemm,) = {round(o.arithmetic_intensity_flop_per_byte) for o in h100.per_op if o.op == "matmul"}
    assert gemm == 228
    assert {o.bound for o in h100.per_op if o.op == "matmul"} == {"memory"}
    assert {o.bound for o in a100.per_op if o.op == "matmul"} == {"compute"}
    assert (h100.timeline.bound, a100.timeline.bound) == ("memory", "compute")
    for report, ridge in ((h100, 263), (a100, 136)):
        why = f"on the {report.device} the step's heaviest op is compute-bound above {ridge} FLOP/byte"
        assert why in timeline_lines(report)[1]
