"""The same model through torch.compile (FX), TVM Relax and ONNX gives the same OpGraph totals and prediction.

Total FLOPs agree within 1%, bytes within 5%, the analytical latency within 5% and the shipped H100 XGBoost
model's latency within 1% for the CNN and 20% for the transformers (see the test); a failure prints the
per-op-kind breakdown of all three frontends. For speed the default run uses reduced-depth BERT-base and GPT-2
(2 layers, full widths) and a ResNet-50-style bottleneck CNN of reduced depth; every layer is the same shape as
in the full model, so the per-layer agreement is what the full-size models get. The full-size check is in
benchmarks/relax_overhead.py (BERT-base, 12 layers).
"""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

pytestmark = [pytest.mark.tvm, pytest.mark.slow]
pytest.importorskip("tvm")
pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

import perfpredict  # noqa: E402
from perfpredict.compiler_hooks.onnx_frontend import graph_from_onnx  # noqa: E402
from perfpredict.compiler_hooks.relax_frontend import graph_from_relax  # noqa: E402
from perfpredict.graph_report import report_for_graph  # noqa: E402

DEVICE = "H100-SXM"


class Bottleneck(torch.nn.Module):
    def __init__(self, cin, mid, stride):
        super().__init__()
        cout = 4 * mid
        self.c1, self.b1 = torch.nn.Conv2d(cin, mid, 1, bias=False), torch.nn.BatchNorm2d(mid)
        self.c2, self.b2 = torch.nn.Conv2d(mid, mid, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(mid)
        self.c3, self.b3 = torch.nn.Conv2d(mid, cout, 1, bias=False), torch.nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = torch.nn.Sequential(
                torch.nn.Conv2d(cin, cout, 1, stride, bias=False), torch.nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        y = torch.relu(self.b2(self.c2(y)))
        y = self.b3(self.c3(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNetLike(torch.nn.Module):
    """ResNet-50's stem, first two stages (one bottleneck each) and head."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            torch.nn.BatchNorm2d(64),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(3, 2, 1),
        )
        self.layers = torch.nn.Sequential(Bottleneck(64, 64, 1), Bottleneck(256, 128, 2))
        self.fc = torch.nn.Linear(512, 1000)

    def forward(self, x):
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


def _resnet():
    return ResNetLike().eval(), (torch.randn(2, 3, 224, 224),)


def _bert():
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(num_hidden_layers=2)).eval(), (torch.randint(0, 1000, (4, 128)),)


def _gpt2():
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config(n_layer=2, use_cache=False)
    # NB: batch 1: at batch > 1 GPT-2's Conv1D ``x.view(-1, d)`` after SDPA fails inside torch.export's
    # decompositions (a non-contiguous view); that is a torch/transformers limitation, not a frontend one.
    return GPT2Model(cfg).eval(), (torch.randint(0, 1000, (1, 256)),)


def _has_xgboost():
    try:
        import xgboost  # noqa: F401
    except ImportError:
        return False
    return True


def _fx(model, args):
    return perfpredict.featurize(model, args)


def _relax(model, args):
    from tvm.relax.frontend.torch import from_exported_program

    mod = from_exported_program(torch.export.export(model, args), keep_params_as_input=False)
    return graph_from_relax(mod)


def _onnx(model, args, optimize=True):
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # NB: for the CNN, optimize=False: the exporter's optimizer folds eval-mode BatchNorm into the preceding
        # Conv, which changes the computation itself; unoptimised, the file holds the ops the others see.
        program = torch.onnx.export(model, args, dynamo=True, verbose=False, optimize=optimize)
    return graph_from_onnx(program.model_proto)


def _breakdown(graphs: dict) -> str:
    kinds = sorted({n.op for g in graphs.values() for n in g.nodes})
    lines = [
        f"{'op kind':<12}" + "".join(f"{name:>38}" for name in graphs),
        f"{'':<12}" + "".join(f"{'count':>8}{'GFLOP':>12}{'MB moved':>18}" for _ in graphs),
    ]
    for kind in kinds:
        row = f"{kind:<12}"
        for g in graphs.values():
            sel = [n for n in g.nodes if n.op == kind]
            row += (
                f"{len(sel):>8}{sum(n.flops for n in sel) / 1e9:>12.4f}"
                f"{sum(n.bytes_read + n.bytes_written for n in sel) / 1e6:>18.3f}"
            )
        lines.append(row)
    for name, g in graphs.items():
        extra = sorted({n.target for n in g.nodes if n.op not in ("view",)})
        lines.append(f"{name} targets: {', '.join(extra)}")
    return "\n".join(lines)


@pytest.mark.parametrize("build", [_resnet, _bert, _gpt2], ids=["resnet50-like", "bert-base-2L", "gpt2-2L"])
def test_fx_relax_onnx_agree(build):
    torch.manual_seed(0)
    model, args = build()
    graphs = {
        "fx": _fx(model, args),
        "relax": _relax(model, args),
        "onnx": _onnx(model, args, optimize=build is not _resnet),
    }
    # the analytical roofline, whose inputs the frontends must agree on ("auto" would pick a learned model on H100)
    latency = {
        k: report_for_graph(g, device=DEVICE, predictor="analytical").latency_ms.value for k, g in graphs.items()
    }
    # and the shipped learned model, whose features leave views out so the frontends' spellings do not matter
    learned = (
        {k: report_for_graph(g, device=DEVICE, predictor="xgboost").latency_ms.value for k, g in graphs.items()}
        if _has_xgboost()
        else {}
    )
    ref = graphs["fx"]
    problems = []
    for name in ("relax", "onnx"):
        g = graphs[name]
        checks = (
            ("FLOPs", g.total_flops, ref.total_flops, 0.01),
            ("bytes", g.total_bytes, ref.total_bytes, 0.05),
            ("latency", latency[name], latency["fx"], 0.05),
        )
        if learned:
            # The CNN's three graphs differ only in views, which the features leave out: the same prediction.
            # The transformers' graphs differ in real, tiny work (Relax's BERT builds and applies an attention
            # mask that dynamo's elides: 5 more elementwise and creation ops), and trees trained on 442 rows step
            # on such op counts, so 20% is allowed there.
            checks += (("latency (xgboost)", learned[name], learned["fx"], 0.01 if build is _resnet else 0.20),)
        for what, got, want, tol in checks:
            if abs(got - want) > tol * want:
                problems.append(f"{name} {what} {got:.6g} vs fx {want:.6g} ({got / want - 1:+.2%}, allowed {tol:.0%})")
    # GPT-2 builds its causal mask from ~20 tiny integer ops. torch.onnx's optimizer constant-folds them (37
    # kernels against dynamo's 57); Relax keeps them plus a few int casts and index copies (62). FLOPs and bytes
    # agree (checked above); the roofline's latency moves by each kernel's host cost alone (launch 6.7 us plus
    # dispatch on the h100-server profile, under 10 us): ONNX -0.136 ms for 20 kernels, Relax +0.033 ms for 5.
    if build is _gpt2:
        problems = [p for p in problems if not p.startswith(("onnx latency ", "relax latency "))]
        kernels = {k: sum(n.op != "view" for n in g.nodes) for k, g in graphs.items()}
        for name in ("relax", "onnx"):
            gap_ms, launches = abs(latency[name] - latency["fx"]), abs(kernels[name] - kernels["fx"])
            if gap_ms > launches * 0.010 + 0.02 * latency["fx"]:
                problems.append(f"{name}: a latency gap of {gap_ms:.4f} ms is more than {launches} kernels' host cost")
    assert not problems, (
        "\n".join(problems)
        + "\n"
        + _breakdown(graphs)
        + "\nlatency ms: "
        + ", ".join(f"{k}={v:.4f}" for k, v in latency.items())
        + "\nxgboost latency ms: "
        + ", ".join(f"{k}={v:.4f}" for k, v in learned.items())
    )
    for g in graphs.values():
        assert g.coverage == 1.0, g.unknown_targets
