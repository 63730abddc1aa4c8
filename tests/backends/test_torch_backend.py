"""The perfpredict torch.compile backend observes and never changes results."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

import perfpredict
from perfpredict.compiler_hooks import fx_frontend
from perfpredict.render.text import render_text


class Block(torch.nn.Module):
    def __init__(self, dim: int = 32):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class Broken(torch.nn.Module):
    """Two blocks with a graph break between them."""

    def __init__(self):
        super().__init__()
        self.a, self.b = Block(), Block()

    def forward(self, x):
        x = self.a(x)
        torch._dynamo.graph_break()
        return self.b(x)


def test_compiled_output_equals_eager_and_report_is_delivered():
    model, x = Block().eval(), torch.randn(4, 16, 32)
    got = torch.compile(model, backend="perfpredict", options={"device": "A100-40GB"})(x)
    assert torch.equal(got, model(x))
    report = perfpredict.last_report()
    assert report.device == "A100-40GB" and report.batch_size == 4
    assert report.coverage == 1.0 and report.latency_ms.low <= report.latency_ms.value <= report.latency_ms.high
    # fc1: 2*64*32*128 = 524,288; fc2 the same
    assert sum(op.flops for op in report.per_op if op.op == "matmul") == 2 * 524_288


def test_backend_found_through_entry_point_without_import():
    code = textwrap.dedent("""
        import sys, torch
        m = torch.nn.Linear(8, 8)
        x = torch.randn(2, 8)
        assert "perfpredict" not in sys.modules
        y = torch.compile(m, backend="perfpredict")(x)
        assert torch.equal(y, m(x))
        import perfpredict
        print(perfpredict.last_report().latency_ms.value)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip().splitlines()[-1]) > 0


def test_graph_breaks_are_summed_into_one_report():
    model, x = Broken().eval(), torch.randn(2, 8, 32)
    single = perfpredict.featurize(Block().eval(), (x,))
    got = torch.compile(model, backend="perfpredict")(x)
    assert torch.equal(got, model(x))
    report = perfpredict.last_report()
    assert report.graph.subgraphs == 2
    assert report.graph.total_flops == 2 * single.total_flops
    assert any("graph breaks" in n for n in report.notes)


def test_a_new_model_starts_a_new_report():
    torch.compile(Broken().eval(), backend="perfpredict")(torch.randn(2, 8, 32))
    torch.compile(Block().eval(), backend="perfpredict")(torch.randn(2, 8, 32))
    assert perfpredict.last_report().graph.subgraphs == 1


def test_dynamic_shapes_resolved_with_hints_and_said_so():
    model = Block().eval()
    compiled = torch.compile(model, backend="perfpredict", dynamic=True)
    x = torch.randn(3, 16, 32)
    assert torch.equal(compiled(x), model(x))
    report = perfpredict.last_report()
    assert report.batch_size == 3
    assert any("dynamic shapes" in n for n in report.notes)


@pytest.fixture
def fresh_warnings(monkeypatch):
    from perfpredict.backends import torch_backend

    monkeypatch.setattr(torch_backend, "_WARNED", set())


def test_internal_error_warns_once_and_falls_back(monkeypatch, fresh_warnings):
    def boom(*args, **kwargs):
        raise RuntimeError("boom inside perfpredict")

    monkeypatch.setattr(fx_frontend, "graph_from_fx", boom)
    model, x = Broken().eval(), torch.randn(2, 4, 32)  # two subgraphs: the second failure must stay silent
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(model, backend="perfpredict")(x)
    assert torch.equal(got, model(x))
    messages = [str(w.message) for w in caught if "perfpredict could not predict" in str(w.message)]
    assert len(messages) == 1 and "boom inside perfpredict" in messages[0]


def test_training_phase_leaves_autograd_alone():
    # AOTAutograd refuses double backward; the backend only observes with AOT, so eager semantics remain.
    model, x = Block(), torch.randn(2, 4, 32, requires_grad=True)
    out = torch.compile(model, backend="perfpredict", options={"phase": "training"})(x)
    (grad,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    (grad2,) = torch.autograd.grad(grad.pow(2).sum(), x)
    (ref,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
    (ref2,) = torch.autograd.grad(ref.pow(2).sum(), x)
    torch.testing.assert_close(grad2, ref2, rtol=0, atol=1e-6)


def test_two_models_compiled_one_after_the_other_on_the_same_input_get_their_own_reports():
    # The second call's wrapper frame may reuse the first one's id, and the input is the same tensor: only the
    # torch.compile context tells the calls apart. It once added the first model's graph to the second's report.
    x = torch.randn(4, 16)
    torch.compile(torch.nn.Linear(16, 16).eval(), backend="perfpredict")(x)
    first = perfpredict.last_report()
    torch.compile(torch.nn.Linear(16, 64).eval(), backend="perfpredict")(x)
    second = perfpredict.last_report()
    # 2 x 4 x 16 x 16 = 2,048 and 2 x 4 x 16 x 64 = 8,192 FLOPs of matmul, one subgraph each
    assert (first.graph.subgraphs, first.graph.total_flops) == (1, 2048)
    assert (second.graph.subgraphs, second.graph.total_flops) == (1, 8192)


def test_backend_keeps_no_reference_to_user_inputs():
    import gc
    import weakref

    compiled = torch.compile(Block().eval(), backend="perfpredict")
    x = torch.randn(2, 4, 32)
    compiled(x)
    ref = weakref.ref(x)
    del x
    gc.collect()
    assert ref() is None


def test_strict_reraises(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("boom inside perfpredict")

    monkeypatch.setattr(fx_frontend, "graph_from_fx", boom)
    with pytest.raises(Exception, match="boom inside perfpredict"):
        torch.compile(Block(), backend="perfpredict", options={"strict": True})(torch.randn(2, 4, 32))


def test_bad_option_warns_and_runs_unchanged():
    model, x = Block().eval(), torch.randn(2, 4, 32)
    with pytest.warns(RuntimeWarning, match="unknown perfpredict option"):
        got = torch.compile(model, backend="perfpredict", options={"devcie": "H100"})(x)
    assert torch.equal(got, model(x))


def test_training_phase_reports_forward_backward_and_optimizer_state():
    torch.manual_seed(0)
    model, x = Block(), torch.randn(4, 8, 32)
    reference = Block()
    reference.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="perfpredict", options={"phase": "training"})
    compiled(x).sum().backward()
    reference(x).sum().backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-6)
    report = perfpredict.last_report()
    params = sum(p.numel() for p in model.parameters())
    assert report.phase == "training" and report.graph.source == "aot"
    assert report.memory.gradients_bytes == 4 * params
    assert report.memory.optimizer_state_bytes == 2 * 4 * params  # AdamW: exp_avg and exp_avg_sq
    assert any(op.op == "optimizer" for op in report.per_op)


def test_weights_built_in_option_reaches_the_memory_model():
    model, x = Block().to(torch.bfloat16).eval(), torch.randn(1, 1, 32, dtype=torch.bfloat16)
    peaks = {}
    for built in ("float32", None):
        torch._dynamo.reset()
        torch.compile(model, backend="perfpredict", options={"weights_built_in": built, "predictor": "analytical"})(x)
        peaks[built] = perfpredict.last_report().memory
    assert peaks["float32"].load_transient_bytes > 0 and peaks[None].load_transient_bytes == 0
    assert peaks["float32"].total_bytes > peaks[None].total_bytes


def test_report_to_path_and_callable(tmp_path):
    seen = []
    path = tmp_path / "report.json"
    x = torch.randn(2, 4, 32)
    torch.compile(Block(), backend="perfpredict", options={"report": seen.append})(x)
    torch._dynamo.reset()
    torch.compile(Block(), backend="perfpredict", options={"report": str(path)})(x)
    assert len(seen) == 1 and seen[0].latency_ms.value > 0
    data = json.loads(path.read_text())
    from perfpredict.core.report import REPORT_SCHEMA_VERSION

    assert data["schema_version"] == REPORT_SCHEMA_VERSION and data["device"] == "H100-SXM"


@pytest.mark.slow
def test_inner_inductor_gives_the_same_result():
    model, x = torch.nn.Linear(16, 16).eval(), torch.randn(4, 16)
    got = torch.compile(model, backend="perfpredict", options={"inner": "inductor"})(x)
    torch.testing.assert_close(got, model(x))
    inductor = perfpredict.last_report()
    torch._dynamo.reset()
    torch.compile(model, backend="perfpredict")(x)  # the default inner backend, eager
    eager = perfpredict.last_report()
    # perfpredict reads dynamo's graph before the inner compiler sees it: the inner backend changes no answer
    assert inductor.graph == eager.graph and inductor.graph.source == "fx" and inductor.per_op == eager.per_op
    assert inductor.latency_ms == eager.latency_ms and inductor.memory == eager.memory
    # and that graph is the Linear alone: 2 x 4 x 16 x 16 = 2,048 FLOPs (its bias is costed with the GEMM)
    assert inductor.graph.total_flops == 2 * 4 * 16 * 16 and inductor.graph.subgraphs == 1


def test_import_is_light():
    code = (
        "import sys, perfpredict; heavy = [m for m in ('torch', 'tvm', 'xgboost', 'torch_geometric', "
        "'transformers', 'numba', 'cupy', 'pynvml') if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_measure_puts_the_measurement_beside_the_prediction():
    model, x = Block().eval(), torch.randn(4, 16, 32)
    got = torch.compile(model, backend="perfpredict", options={"device": "cpu", "measure": True})(x)
    assert torch.equal(got, model(x))
    report = perfpredict.last_report()
    m = report.measured
    assert m is not None and m.runs >= 5 and m.latency_min_ms <= m.latency_ms
    assert m.latency_error_pct == pytest.approx((report.latency_ms.value - m.latency_ms) / m.latency_ms * 100)
    assert "Predicted vs measured" in render_text(report)
    assert perfpredict.PerfReport.from_dict(json.loads(report.to_json())).measured == m


def test_last_report_names_the_compiled_module_and_is_none_after_a_failed_prediction():
    import warnings

    class TinyNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            return self.fc(x).relu()

    torch._dynamo.reset()
    torch.compile(TinyNet(), backend="perfpredict")(torch.randn(2, 8))
    report = perfpredict.last_report()
    assert report is not None and report.model_name == "TinyNet"
    # torch.compile enters a Sequential through its own wrapper, whose frame is called "inner": the report was too
    torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()), backend="perfpredict")(torch.randn(2, 8))
    assert perfpredict.last_report().model_name == "Sequential"

    class Terse(torch.nn.Module):
        def forward(me, x):  # noqa: N805 - the module is the first argument, whatever its name
            return x.sin()

    torch.compile(Terse(), backend="perfpredict")(torch.randn(2, 8))
    assert perfpredict.last_report().model_name == "Terse"

    def scaled(x):
        return x * 2 + 1

    torch.compile(scaled, backend="perfpredict")(torch.randn(2, 8))
    assert perfpredict.last_report().model_name == "scaled"
    with pytest.raises(perfpredict.PerfPredictError):
        perfpredict.predict(TinyNet(), (torch.randn(2, 8),), device="no-such-gpu")
    assert perfpredict.last_report() is None  # never the previous model's report
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        perfpredict.predict(TinyNet(), (torch.randn(2, 8),), device="L4")
    assert perfpredict.last_report().model_name == "TinyNet"
