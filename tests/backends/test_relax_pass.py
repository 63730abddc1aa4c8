"""The TVM Relax pass PredictPerformance: observes inside a real build and changes nothing."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.tvm
tvm = pytest.importorskip("tvm")
relax = pytest.importorskip("tvm.relax")

import perfpredict  # noqa: E402
from perfpredict.backends.relax_pass import (  # noqa: E402
    ATTR_NAME,
    PredictPerformance,
    instrument,
    register_pipeline,
    report_from_module,
)
from perfpredict.compiler_hooks.relax_frontend import graph_from_relax  # noqa: E402


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def _relax_module(model, args):
    from tvm.relax.frontend.torch import from_exported_program

    return from_exported_program(torch.export.export(model, args), keep_params_as_input=False)


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    model, x = SmallCNN().eval(), torch.randn(2, 3, 8, 8)
    return model, x, _relax_module(model, (x,))


def _run(ex, x):
    vm = relax.VirtualMachine(ex, tvm.cpu())
    make = getattr(tvm.runtime, "tensor", None) or tvm.nd.array
    out = vm["main"](make(x.numpy()))
    out = out[0] if not hasattr(out, "numpy") else out
    return out.numpy()


def test_pass_inside_tvm_compile_builds_runs_and_matches_torch(cnn):
    model, x, mod = cnn
    seen = []
    seq = tvm.transform.Sequential(
        [PredictPerformance(device="A100-40GB", report=seen.append), relax.get_pipeline("default")]
    )
    ex = tvm.compile(mod, target="llvm", relax_pipeline=seq)
    np.testing.assert_allclose(_run(ex, x), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)
    assert len(seen) == 1 and perfpredict.last_report() is seen[0]
    report = seen[0]
    assert report.device == "A100-40GB" and report.batch_size == 2 and report.coverage == 1.0
    # conv: 2*2*(8*8)*(3*3)*8*3 = 55,296; fc: 2*2*512*10 = 20,480 (bias adds folded in, not counted)
    assert sum(op.flops for op in report.per_op if op.op in ("conv", "matmul")) == 55_296 + 20_480


def test_attribute_attached_and_module_otherwise_structurally_equal(cnn):
    _, _, mod = cnn
    out = PredictPerformance(device="H100-SXM")(mod)
    attached = report_from_module(out)
    assert attached is not None and attached["device"] == "H100-SXM"
    assert json.loads(str(out.attrs[ATTR_NAME]))["latency_ms"]["value"] > 0
    tvm.ir.assert_structural_equal(out.without_attr(ATTR_NAME), mod)
    assert report_from_module(mod) is None  # the input module is not mutated


def test_registered_pipeline_and_pass_instrument(cnn):
    model, x, mod = cnn
    name = register_pipeline()
    assert register_pipeline() == name  # idempotent
    ex = tvm.compile(mod, target="llvm", relax_pipeline=relax.get_pipeline(name, device="L4"))
    assert perfpredict.last_report().device == "L4"
    np.testing.assert_allclose(_run(ex, x), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)
    with tvm.transform.PassContext(instruments=[instrument(device="T4")]):
        tvm.compile(mod, target="llvm")
    assert perfpredict.last_report().device == "T4"


def test_after_legalisation_the_pass_says_so_and_does_not_guess(cnn):
    _, _, mod = cnn
    legal = relax.transform.LegalizeOps()(mod)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = PredictPerformance()(legal)
    assert any("already been legalised" in str(w.message) for w in caught)
    assert any("LegalizeOps" in n for n in report_from_module(out)["notes"])


def _symbolic_module(bound: int | None):
    from tvm.script import ir as I
    from tvm.script import relax as R

    if bound is None:

        @I.ir_module
        class Mod:
            @R.function
            def main(x: R.Tensor(("n", 64), "float32"), w: R.Tensor((64, 32), "float32")):
                with R.dataflow():
                    y = R.matmul(x, w)
                    z = R.nn.relu(y)
                    R.output(z)
                return z
    else:

        @I.ir_module
        class BoundedMod:
            @R.function
            def main(x: R.Tensor(("n", 64), "float32"), w: R.Tensor((64, 32), "float32")):
                R.func_attr({"tir_var_upper_bound": {"n": 256}})
                with R.dataflow():
                    y = R.matmul(x, w)
                    z = R.nn.relu(y)
                    R.output(z)
                return z

        return BoundedMod
    return Mod


def test_symbolic_shapes_use_hints_then_bounds_then_warn():
    g = graph_from_relax(_symbolic_module(None), shape_hints={"n": 128})
    assert g.total_flops == 2 * 128 * 64 * 32 + 128 * 32  # matmul 2*n*64*32, relu n*32
    assert any("'n' predicted at 128 (shape_hints)" in note for note in g.notes)
    g = graph_from_relax(_symbolic_module(256))
    assert g.nodes[0].flops == 2 * 256 * 64 * 32  # the upper bound: worst case
    assert any("upper bound 256" in note for note in g.notes)
    with pytest.warns(UserWarning, match="shape_hints"):
        g = graph_from_relax(_symbolic_module(None))
    assert g.nodes[0].flops == 2 * 1 * 64 * 32
    out = PredictPerformance(shape_hints={"n": 64})(_symbolic_module(None))
    assert report_from_module(out)["batch_size"] == 64


def test_unsupported_op_lowers_coverage_and_warns_without_crashing():
    from tvm.script import ir as I
    from tvm.script import relax as R

    @I.ir_module
    class Mod:
        @R.function
        def main(x: R.Tensor((4, 16), "int32"), y: R.Tensor((4, 16), "int32")):
            with R.dataflow():
                a = R.add(x, y)
                b = R.bitwise_xor(a, y)
                R.output(b)
            return b

    with pytest.warns(UserWarning, match="relax.bitwise_xor"):
        out = PredictPerformance()(Mod)
    report = report_from_module(out)
    assert report["coverage"] == pytest.approx(0.5)
    tvm.ir.assert_structural_equal(out.without_attr(ATTR_NAME), Mod)


def test_bad_options_fail_early_and_prediction_errors_never_break_the_build(cnn):
    _, _, mod = cnn
    with pytest.raises(perfpredict.core.errors.PerfPredictError):
        PredictPerformance(device="no-such-gpu")
    with pytest.raises(perfpredict.core.errors.InvalidInputError):
        PredictPerformance(phase="serving")
    with pytest.warns(UserWarning, match="passed on unchanged"):
        out = PredictPerformance(predictor="no-such-predictor")(mod)
    tvm.ir.assert_structural_equal(out, mod)
    with pytest.raises(Exception, match="no-such-predictor"):
        PredictPerformance(predictor="no-such-predictor", strict=True)(mod)
