"""One answer per question, whatever the door: the Python API, the torch.compile backend, an ONNX file through the
CLI and the TVM Relax pass predict the same small CNN with the same default predictor and mode, within 5%; and every
interval brackets its point, never degenerate at one end."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import warnings

import pytest
import torch
from torch import nn

import perfpredict
from perfpredict.core.report import Prediction
from perfpredict.predictors.base import DEFAULT_MODE, DEFAULT_PREDICTOR

DEVICE = "H100-SXM"


def _cnn():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    ).eval()
    return model, torch.randn(8, 3, 32, 32)


def _brackets(report) -> None:
    for f in dataclasses.fields(report):
        p = getattr(report, f.name)
        if isinstance(p, Prediction) and p.value > 0:
            if f.name == "avg_power_w":  # the TDP caps it: its high end may be its point there
                assert p.low < p.value <= p.high, (f.name, p)
            else:
                assert p.low < p.value < p.high, (f.name, p)


def _torch_doors(model, x) -> dict:
    api = perfpredict.predict(model, (x,), device=DEVICE)
    torch._dynamo.reset()
    got = []
    compiled = torch.compile(model, backend="perfpredict", options={"device": DEVICE, "report": got.append})
    compiled(x)
    return {"api": api, "backend": got[-1]}


def _onnx_door(model, x, tmp_path, capsys) -> dict:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    from perfpredict.cli import main

    path = tmp_path / "cnn.onnx"
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # NB: optimize=False: the exporter's optimizer folds eval-mode BatchNorm into the Conv before it, a
        # different (smaller) graph; unoptimised, the file holds the ops the other doors see
        torch.onnx.export(model, (x,), str(path), dynamo=True, verbose=False, optimize=False)
    capsys.readouterr()
    assert main(["predict", "--onnx", str(path), "--device", DEVICE, "--json", "-"]) == 0
    return {"onnx (CLI)": json.loads(capsys.readouterr().out)}


def _relax_door(model, x) -> dict:
    pytest.importorskip("tvm")
    from tvm.relax.frontend.torch import from_exported_program

    from perfpredict.backends.relax_pass import PredictPerformance

    mod = from_exported_program(torch.export.export(model, (x,)))
    got = []
    PredictPerformance(device=DEVICE, report=got.append, strict=True)(mod)
    return {"relax": got[-1]}


def _latency(r) -> tuple[float, float, float, str, str]:
    if isinstance(r, dict):  # the CLI's JSON
        lat = r["latency_ms"]
        return lat["value"], lat["low"], lat["high"], lat["predictor"], r["assumptions"]["mode"]
    lat = r.latency_ms
    return lat.value, lat.low, lat.high, lat.predictor, r.assumptions["mode"]


def test_every_door_defaults_to_the_same_predictor_and_mode():
    from perfpredict.backends import relax_pass
    from perfpredict.backends.torch_backend import BackendOptions
    from perfpredict.cli.predict import parse_predict
    from perfpredict.request import default

    assert (default("predictor"), default("mode")) == (DEFAULT_PREDICTOR, DEFAULT_MODE)
    backend = BackendOptions.parse({}).request
    assert (backend.predictor, backend.mode) == (DEFAULT_PREDICTOR, DEFAULT_MODE)
    for fn in (perfpredict.predict, perfpredict.predict_many, relax_pass.predict_module):
        params = inspect.signature(fn).parameters
        assert params["predictor"].default == DEFAULT_PREDICTOR and params["mode"].default == DEFAULT_MODE, fn
    params = inspect.signature(relax_pass.PredictPerformance).parameters
    assert params["predictor"].default == DEFAULT_PREDICTOR and params["mode"].default == DEFAULT_MODE
    args = parse_predict(["--hf", "gpt2"])
    assert (args.predictor, args.mode) == (DEFAULT_PREDICTOR, DEFAULT_MODE)
    # a compiled module (Relax, ONNX) and a config (the CLI) load their weights in their own dtype: no float32 copy
    assert inspect.signature(relax_pass.predict_module).parameters["weights_built_in"].default is None
    assert args.weights_built_in == "auto"


@pytest.mark.tvm
def test_a_small_cnn_gets_one_answer_through_torch_onnx_and_relax(tmp_path, capsys, shipped_ceilings):
    model, x = _cnn()
    reports = {**_torch_doors(model, x), **_onnx_door(model, x, tmp_path, capsys), **_relax_door(model, x)}
    answers = {door: _latency(r) for door, r in reports.items()}
    ref = answers["api"][0]
    for door, (value, low, high, predictor, mode) in answers.items():
        assert predictor == "two_timeline" and mode.startswith(DEFAULT_MODE), (door, predictor, mode)
        assert abs(value / ref - 1) <= 0.05, f"{door}: {value:.4f} ms vs the API's {ref:.4f} ms"
        assert low < value < high, (door, low, value, high)
    for r in reports.values():
        if not isinstance(r, dict):
            _brackets(r)
    assert reports["relax"].assumptions["weights"] == reports["onnx (CLI)"]["assumptions"]["weights"]


@pytest.mark.parametrize("predictor", ["analytical", "two_timeline", "xgboost"])
@pytest.mark.parametrize("device", [DEVICE, "L4", "cpu"])
def test_intervals_bracket_their_point_for_every_predictor(predictor, device, shipped_ceilings):
    """A launch-bound step's roofline low end is its point (the Relax pass's [0.048, 0.077] around 0.048 ms), and
    xgboost's quantile models can cross (its median above its q90): both ends now bracket the point."""
    from perfpredict.core.errors import ArtifactError, MissingDependencyError

    model, x = _cnn()
    without_norm = nn.Sequential(*(m for m in model if not isinstance(m, nn.BatchNorm2d)))  # launch-bound on H100
    for m, inputs in ((model, x), (without_norm, x)):
        for phase in ("inference", "training"):
            try:
                report = perfpredict.predict(m, (inputs,), device=device, predictor=predictor, phase=phase)
            except MissingDependencyError as err:
                pytest.skip(str(err))
            except ArtifactError as err:  # only a device it was never trained for; a broken artifact fails
                if "artifact trained for" not in str(err):
                    raise
                pytest.skip(str(err))
            _brackets(report)


def test_bracket_repairs_only_an_end_that_does_not_bracket():
    from perfpredict.predictors.intervals import MIN_RATIO, bracket

    assert bracket(1.0, 0.7, 1.3) == (0.7, 1.3)  # already bracketing: unchanged
    assert bracket(1.0, 1.0, 1.6) == pytest.approx((1 / 1.6, 1.6))  # the roofline's low end on the point
    assert bracket(2.0, 1.0, 1.5) == pytest.approx((1.0, 4.0))  # crossed quantiles: the high end mirrors the low
    assert bracket(1.0, 1.0, 1.0) == pytest.approx((1 / MIN_RATIO, MIN_RATIO))  # no width: +-10%
