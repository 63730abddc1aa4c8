"""The two-timeline latency model: the simulation, the host profile, modes, and coherence across the catalog."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfpredict.api import MANY_COLUMNS
from perfpredict.core import op_kinds, ops
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.graph import OpGraph, OpNode, TensorMeta
from perfpredict.core.units import MIB
from perfpredict.hardware.devices import get_device
from perfpredict.predictors import host_model, timeline
from perfpredict.predictors.base import RunConfig
from perfpredict.predictors.two_timeline import TwoTimelinePredictor, fused_groups


# -- the simulation ----------------------------------------------------------------------------------------------
def test_a_host_bound_step_shows_up_as_device_idle_time():
    tl = timeline.overlapped(np.array([1.0, 1.0, 1.0]), np.array([0.1, 0.1, 0.1]), sync_s=0.05)
    # the device starts op i when the host has enqueued it (t = 1, 2, 3) and runs 0.1: it ends at 3.1
    assert tl.wall_s[0] == pytest.approx(3.1 + 0.05)
    assert tl.device_s[0] == pytest.approx(0.3) and tl.host_s[0] == pytest.approx(3.0)
    assert tl.device_idle_share[0] == pytest.approx(1 - 0.3 / 3.15)


def test_a_device_bound_step_hides_the_host():
    tl = timeline.overlapped(np.array([0.1, 0.1, 0.1]), np.array([1.0, 1.0, 1.0]))
    assert tl.wall_s[0] == pytest.approx(0.1 + 3.0)  # only the first enqueue is exposed
    # mixed: host 0.5 per op, device 1, 0.1, 1: op 0 runs 0.5-1.5; op 1 (enqueued at 1.0) waits for it and runs
    # 1.5-1.6; op 2 (enqueued at 1.5) waits for op 1 and runs 1.6-2.6
    tl = timeline.overlapped(np.array([0.5, 0.5, 0.5]), np.array([1.0, 0.1, 1.0]))
    assert tl.wall_s[0] == pytest.approx(2.6)


def test_a_full_launch_queue_blocks_the_host_but_not_the_device():
    h, d = np.full(6, 0.01), np.full(6, 1.0)
    assert timeline.overlapped(h, d, queue_depth=2).wall_s[0] == pytest.approx(0.01 + 6.0)


def test_columns_are_independent_configs():
    h = np.array([[1.0, 0.1], [1.0, 0.1]])
    d = np.array([[0.1, 1.0], [0.1, 1.0]])
    tl = timeline.overlapped(h, d)
    assert tl.wall_s == pytest.approx([2.1, 2.1])


def test_a_cpu_step_adds_its_times_and_a_graph_replays_without_the_host():
    assert timeline.serial(np.array([1.0, 2.0]), np.array([3.0, 4.0])).wall_s[0] == 10.0
    tl = timeline.graph_replay(np.array([1.0, 2.0]), launch_s=0.5, node_gap_s=0.1, kernels=np.array([2]))
    assert tl.wall_s[0] == pytest.approx(0.5 + 3.0 + 0.2)


# -- host profiles -----------------------------------------------------------------------------------------------
def test_the_reference_profile_loads_and_covers_every_kind():
    ref = host_model.HostProfile.from_file(host_model.REFERENCE)
    assert set(op_kinds.BUILTIN_KINDS) <= set(ref.dispatch_us)
    assert all(0 < v < 200 for v in ref.dispatch_us.values()) and ref.module_us >= 0


def test_a_calibrated_profile_wins_over_the_shipped_defaults(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    # uncalibrated: a GPU is driven by the GPU server the H100 rows ran on; a CPU is the dev VM (its op model)
    assert host_model.load_profile().name == "h100-server"
    assert host_model.load_profile(kind="cpu").name == host_model.HostProfile.from_file(host_model.REFERENCE).name
    with pytest.raises(InvalidInputError, match="calibrate-host"):
        host_model.load_profile(host="calibrated")  # none yet: says how to make one
    mine = host_model.HostProfile("mine", {k: 1.0 for k in op_kinds.BUILTIN_KINDS}, 0.5, "test")
    host_model.profile_path().parent.mkdir(parents=True)
    host_model.profile_path().write_text(mine.to_json())
    assert host_model.load_profile().name == "mine"
    assert host_model.load_profile(kind="cpu", host="calibrated").name == "mine"
    assert host_model.load_profile(host="dev-vm").name == "dev-vm"  # a name wins over the calibration
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "x"}))
    with pytest.raises(InvalidInputError, match="calibrate-host"):
        host_model.load_profile(bad)


def test_calibrate_host_times_every_kind(tmp_path, capsys):
    from perfpredict.cli import main

    out = tmp_path / "host.json"
    assert main(["calibrate-host", "--out", str(out), "--name", "ci", "--quick"]) == 0
    prof = host_model.HostProfile.from_file(out)
    assert prof.name == "ci" and set(op_kinds.BUILTIN_KINDS) <= set(prof.dispatch_us)
    assert all(0 < v < 1000 for v in prof.dispatch_us.values())
    assert prof.dispatch_us[ops.VIEW] < prof.dispatch_us[ops.CONV]  # a view dispatches less than a convolution
    assert "us" in capsys.readouterr().out


def _node(name, kind, *, target=None, flops=0, moved=1024, view=False):
    t = TensorMeta((8, 8), "float32")
    return OpNode(
        name,
        ops.VIEW if view else kind,
        target or kind,
        (t,),
        (t,),
        flops=flops,
        bytes_read=moved // 2,
        bytes_written=moved // 2,
    )


def _graph(nodes, phase="inference"):
    return OpGraph(
        nodes=tuple(nodes), edges=(), phase=phase, batch_size=1, seq_len=None, dtype="float32", source="fx", name="toy"
    )


def test_host_time_per_node_pays_module_python_only_forward():
    prof = host_model.HostProfile("p", {k: 2.0 for k in op_kinds.BUILTIN_KINDS}, 10.0, "test")
    g = _graph(
        [
            _node("a", ops.MATMUL),
            _node("v", ops.VIEW, view=True),
            _node("b", ops.MATMUL, target="mm_backward"),
            _node("c", ops.ELEMENTWISE),
        ],
        phase="training",
    )
    h = host_model.node_host_s(g, prof, launch_s=5e-6, gpu=True)
    # forward: 2 + 10 us, plus a 5 us launch; the view launches nothing; backward ops pay no module Python
    assert h * 1e6 == pytest.approx([17.0, 12.0, 7.0, 7.0])


def test_fusion_groups_runs_of_pointwise_ops():
    g = _graph(
        [
            _node("m", ops.MATMUL),
            _node("a", ops.ELEMENTWISE),
            _node("v", ops.VIEW, view=True),
            _node("n", ops.NORM),
            _node("m2", ops.MATMUL),
            _node("s", ops.SOFTMAX),
        ]
    )
    assert fused_groups(g) == [[0], [1, 3], [4], [5]]


# -- real models ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert_bf16():
    from perfpredict.api import featurize
    from perfpredict.compiler_hooks.hf_frontend import model_from_hf

    model, inputs, _ = model_from_hf("bert-base-uncased", 1, 128, dtype="bfloat16")
    return featurize(model, inputs)


def test_bert_batch_1_is_launch_bound_and_cuda_graphs_help(bert_bf16):
    p = TwoTimelinePredictor(host_model.HostProfile.from_file(host_model.REFERENCE))
    out = p.predict(bert_bf16, get_device("H100-SXM"), RunConfig())
    t = out.timeline
    assert t.mode == "eager" and t.wall_ms == pytest.approx(out.latency_ms.value)
    assert t.host_ms > t.device_ms and t.launch_bound and t.device_idle_share > 0.5
    assert t.other_modes_ms["cuda_graph"] < t.wall_ms / 2
    assert t.other_modes_ms["compiled_cuda_graph"] <= t.other_modes_ms["cuda_graph"] * 1.05
    assert t.other_modes_ms["compiled"] < t.wall_ms
    assert out.latency_ms.low <= out.latency_ms.value <= out.latency_ms.high


def test_the_host_is_the_same_for_every_gpu_so_launch_bound_answers_agree(bert_bf16):
    """Measured launch overhead lives in the host model: the H100's 6.7 us is no longer a penalty other GPUs miss."""
    p = TwoTimelinePredictor(host_model.HostProfile.from_file(host_model.REFERENCE))
    h100 = p.predict(bert_bf16, get_device("H100-SXM"), RunConfig()).timeline
    a100 = p.predict(bert_bf16, get_device("A100-80GB"), RunConfig()).timeline
    assert h100.device_ms < a100.device_ms
    assert h100.wall_ms == pytest.approx(a100.wall_ms, rel=0.15)  # host-bound on both: about the same wall time


@pytest.mark.slow
def test_device_time_ranks_gpus_by_their_ceilings_for_llama_7b():
    from perfpredict.api import featurize
    from perfpredict.compiler_hooks.hf_frontend import model_from_hf

    model, inputs, _ = model_from_hf("llama-2-7b", 1, 2048, dtype="bfloat16")
    graph = featurize(model, inputs)
    p = TwoTimelinePredictor(host_model.HostProfile.from_file(host_model.REFERENCE))
    dev = {
        name: p.predict(graph, get_device(name), RunConfig()).timeline.device_ms
        for name in ("B200", "H200", "H100-SXM", "A100-80GB", "L4")
    }
    assert dev["B200"] < dev["H200"] <= dev["H100-SXM"] < dev["A100-80GB"] < dev["L4"], dev


def test_unknown_mode_is_refused_with_the_choices():
    with pytest.raises(InvalidInputError, match="cuda_graph"):
        RunConfig(mode="turbo")


def test_the_shipped_cpu_efficiency_model_loads_and_respects_its_bounds():
    from perfpredict.predictors import op_efficiency as oe

    cpu, h100 = get_device("cpu"), get_device("H100-SXM")
    model = oe.load_model(cpu)
    assert model is not None and "op rows" in model.source
    assert oe.load_model(h100) is None  # a GPU's per-op efficiency is gpu_efficiency's (its own artifact), not this one
    shapes = [
        oe.OpShape(ops.MATMUL, "float32", 2 * 256**3, 3 * 256 * 256 * 4, (256, 256), ((256, 256), (256, 256))),
        oe.OpShape(ops.ELEMENTWISE, "float32", 1e6, 8e6, (1000, 1000), ((1000, 1000),)),
    ]
    seconds = model.device_s(shapes, cpu)
    bounds = np.array([oe.bound_s(s, cpu)[0] for s in shapes])
    assert (seconds > 0).all() and (seconds >= bounds / oe.CPU_MAX_RATIO).all()
    # a GPU op that does not fit in L2 is never predicted faster than its roofline bound
    big = oe.OpShape(ops.ELEMENTWISE, "bfloat16", 1e9, 4e9, (10**9,), ((10**9,),))
    assert oe.max_efficiency(big, h100) == 1.0 and oe.max_efficiency(shapes[0], h100) == oe.L2_SPEEDUP


def test_mode_reaches_the_report_through_the_cli_and_json(tmp_path):
    from perfpredict.cli import main

    out = tmp_path / "r.json"
    assert (
        main(
            [
                "predict",
                "--hf",
                "distilbert",
                "--seq",
                "32",
                "--device",
                "H100-SXM",
                "--predictor",
                "two_timeline",
                "--mode",
                "cuda_graph",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    t = report["timeline"]
    assert t["mode"] == "cuda_graph" and set(t["other_modes_ms"]) == {"eager", "compiled", "compiled_cuda_graph"}
    assert report["latency_ms"]["value"] == pytest.approx(t["wall_ms"])
    assert t["other_modes_ms"]["eager"] > t["wall_ms"]  # a graph replay skips the host's dispatch


def test_launch_overhead_is_host_time_never_device_time(bert_bf16):
    """A measured launch overhead (the H100's 6.7 us) moves the host timeline only: device time is physics."""
    from dataclasses import replace

    reference = host_model.HostProfile.from_file(host_model.REFERENCE)
    p = TwoTimelinePredictor(replace(reference, gpu_launch_us=None))  # each device's own launch figure
    h100 = get_device("H100-SXM")
    slow_launch = replace(h100, launch_overhead_s=h100.launch_overhead_s * 3)
    a, b = (p.predict(bert_bf16, d, RunConfig()).timeline for d in (h100, slow_launch))
    assert a.device_ms == pytest.approx(b.device_ms, rel=1e-12)
    kernels = sum(1 for n in bert_bf16.nodes if not n.is_view)
    assert b.host_ms - a.host_ms == pytest.approx(kernels * 2 * h100.launch_overhead_s * 1e3, rel=1e-6)


def test_auto_answers_every_catalog_device_with_the_same_model():
    import torch

    import perfpredict

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).eval()
    x = torch.randn(4, 64)
    for name in (d.name for d in perfpredict.list_devices()):
        report = perfpredict.predict(model, (x,), device=name)
        assert report.predictor == "two_timeline", name
        t = report.timeline
        assert t is not None and t.wall_ms == pytest.approx(report.latency_ms.value)
        assert t.wall_ms >= max(t.device_ms, t.host_ms) * (1 - 1e-9)


def test_predict_many_with_two_timeline_matches_predict_per_config():
    """The vectorised path is the same model: on a CPU the learned efficiency is read at each batch's own shapes
    (CostArrays.shapes_at), so predict_many agrees with a capture at that batch."""
    import torch

    import perfpredict

    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 8)).eval()
    configs = [{"device": d, "batch_size": b} for d in ("H100-SXM", "L4", "cpu") for b in (1, 2, 64)]
    many = perfpredict.predict_many(model, (torch.randn(2, 64),), configs, predictor="two_timeline")
    assert isinstance(many["latency_ms"], np.ndarray) and many["latency_ms"].shape == (len(configs),)
    for cfg, got in zip(configs, many.records()):
        one = perfpredict.predict(
            model, (torch.randn(cfg["batch_size"], 64),), device=cfg["device"], predictor="two_timeline"
        )
        assert got["latency_ms"] == pytest.approx(one.latency_ms.value, rel=1e-6), cfg
        assert got["avg_power_w"] == pytest.approx(one.avg_power_w.value, rel=1e-6), cfg
    frame = perfpredict.predict_many(model, (torch.randn(2, 64),), configs, frame=True)
    assert list(frame.columns) == list(MANY_COLUMNS) and len(frame) == len(configs)
    assert frame["device"].tolist() == [get_device(c["device"]).name for c in configs]


def test_many_batches_read_the_efficiency_at_anchors_and_interpolate_between():
    from perfpredict.predictors.analytical import AnalyticalPredictor
    from perfpredict.predictors.cost_arrays import CostArrays
    from perfpredict.predictors.two_timeline import EFFICIENCY_ANCHORS

    a, b = (_linear_graph(batch) for batch in (3, 4))
    arrays, cpu, p = CostArrays.fit(a, b), get_device("cpu"), TwoTimelinePredictor()
    assert arrays.shapes_at(10)[0][0] == (10, 32)  # the output's batch dimension follows the batch
    batches = np.arange(1, 41, dtype=float)  # more distinct batches than anchors
    config = RunConfig()
    node_s = p.device_node_s(arrays, cpu, config, batches, AnalyticalPredictor().evaluate(arrays, cpu, config, batches))
    anchors = np.unique(np.round(np.geomspace(1, 40, EFFICIENCY_ANCHORS)))
    for j in (0, len(batches) - 1):  # the ends are anchors: read exactly
        one = p.device_node_s(
            arrays,
            cpu,
            config,
            batches[j : j + 1],
            AnalyticalPredictor().evaluate(arrays, cpu, config, batches[j : j + 1]),
        )
        np.testing.assert_allclose(node_s[:, j], one[:, 0], rtol=1e-9)
    assert 1.0 in anchors and 40.0 in anchors and np.isfinite(node_s).all() and (node_s[~_views(a)] > 0).all()


def _linear_graph(batch: int) -> OpGraph:
    x = TensorMeta((batch, 64), "float32")
    y = TensorMeta((batch, 32), "float32")
    w = TensorMeta((32, 64), "float32")
    node = OpNode(
        "linear",
        ops.MATMUL,
        "aten.addmm",
        (x, w),
        (y,),
        flops=2 * batch * 64 * 32,
        bytes_read=(batch * 64 + 32 * 64) * 4,
        bytes_written=batch * 32 * 4,
        params=32 * 64,
    )
    return OpGraph((node,), (), batch_size=batch, name="lin")


def _views(graph: OpGraph) -> np.ndarray:
    return np.array([n.is_view for n in graph.nodes])


def test_the_launch_cost_is_the_hosts_so_a_measured_gpu_does_not_lose_on_paper(bert_bf16, shipped_ceilings):
    """The H100's launch cost was measured from its VM's host (6.7 us); the catalog says 3 us for other GPUs. The
    host profile's one launch cost serves every GPU, so launch-bound BERT is never slower on the H100 than the A100."""
    p = TwoTimelinePredictor(host_model.HostProfile.from_file(host_model.REFERENCE))
    h100, a100 = get_device("H100-SXM"), get_device("A100-80GB")
    assert h100.launch_overhead_s > 2 * a100.launch_overhead_s  # the measured figure is in the shipped catalog
    assert p.launch_s(h100) == p.launch_s(a100) == pytest.approx(6.698e-6)
    t_h100, t_a100 = (p.predict(bert_bf16, d, RunConfig()).timeline for d in (h100, a100))
    assert t_h100.host_ms == pytest.approx(t_a100.host_ms) and t_h100.wall_ms <= t_a100.wall_ms


def test_the_fast_latency_the_mig_advice_uses_is_the_reports_latency(bert_bf16):
    p = TwoTimelinePredictor(host_model.HostProfile.from_file(host_model.REFERENCE))
    for name in ("H100-SXM", "H100-SXM/1g.10gb", "cpu"):
        device = get_device(name)
        for mode in ("eager", "cuda_graph"):
            config = RunConfig(mode=mode)
            assert p.latency_s(bert_bf16, device, config) * 1e3 == pytest.approx(
                p.predict(bert_bf16, device, config).latency_ms.value, rel=1e-12
            )


@pytest.mark.parametrize("flops", [0, 10**9, 10**11])  # launch-bound to device-bound
def test_a_cuda_graph_never_makes_a_step_slower(flops):
    """A graph takes the host's launches away and adds nothing: cuda_graph <= eager, compiled_cuda_graph <=
    compiled, whether the host or the device is the bottleneck (a device-bound step's graph-node gaps used to make
    compiled_cuda_graph slower than compiled)."""
    graph = _graph(
        [_node(f"m{i}", ops.MATMUL, flops=flops, moved=MIB) for i in range(40)]
        + [_node(f"e{i}", ops.ELEMENTWISE, moved=MIB) for i in range(40)]
    )
    p = TwoTimelinePredictor(host_model.HostProfile.from_file(host_model.REFERENCE))
    device = get_device("H100-SXM")
    wall = {
        m: p.predict(graph, device, RunConfig(mode=m)).latency_ms.value
        for m in ("eager", "cuda_graph", "compiled", "compiled_cuda_graph")
    }
    assert wall["cuda_graph"] <= wall["eager"] * (1 + 1e-9)
    assert wall["compiled_cuda_graph"] <= wall["compiled"] * (1 + 1e-9)
