"""Visible defaults: the run dtype, the weights' load, training precision and optimizer state, TF32, and dtypes a
device has no hardware for. The Llama-2-7B answers are the regression tests of issue "Answers a user can act on"."""

from __future__ import annotations

import json

import pytest

from perfpredict.cli import main
from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError
from perfpredict.core.units import GIB
from perfpredict.hardware.precision import bytes_per_parameter, resolve_run_dtype


def _report(tmp_path, *argv: str) -> dict:
    out = tmp_path / "r.json"
    assert main(["predict", *argv, "--top", "0", "--json", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.slow
def test_llama_2_7b_in_bf16_fits_an_l4_because_pretrained_weights_load_in_bf16(tmp_path):
    r = _report(tmp_path, "--hf", "llama-2-7b", "--device", "L4", "--dtype", "bfloat16", "--seq", "128")
    assert r["memory"]["params_bytes"] / GIB == pytest.approx(12.55, abs=0.05)
    assert r["memory"]["load_transient_bytes"] == 0 and r["fits_in_memory"]
    assert "loaded in bfloat16" in r["assumptions"]["weights"]
    # the float32-build case stays an option, and then it does not fit
    built = _report(
        tmp_path,
        "--hf",
        "llama-2-7b",
        "--device",
        "L4",
        "--dtype",
        "bfloat16",
        "--seq",
        "128",
        "--weights-built-in",
        "float32",
    )
    assert not built["fits_in_memory"] and "built in float32" in built["assumptions"]["weights"]


@pytest.mark.slow
def test_llama_2_7b_training_amp_adamw_does_not_fit_an_h100_but_pure_bf16_with_8bit_adamw_does(tmp_path):
    amp = _report(tmp_path, "--hf", "llama-2-7b", "--device", "H100-SXM", "--training", "--seq", "128")
    params = 6_738_415_616
    m = amp["memory"]
    assert amp["dtype"] == "bfloat16" and not amp["fits_in_memory"]
    assert m["params_bytes"] == pytest.approx(params * 4, abs=1024)  # (+ a rotary buffer in bf16)
    assert m["gradients_bytes"] == params * 4
    assert m["optimizer_state_bytes"] == params * 8 and m["weight_copies_bytes"] == params * 2
    assert amp["assumptions"]["precision"].startswith("amp-bf16") and "master" in amp["assumptions"]["weights"]
    small = _report(
        tmp_path,
        "--hf",
        "llama-2-7b",
        "--device",
        "H100-SXM",
        "--training",
        "--seq",
        "128",
        "--precision",
        "bf16",
        "--optimizer",
        "adamw-8bit",
    )
    assert small["fits_in_memory"] and small["memory"]["params_bytes"] == pytest.approx(params * 2, abs=1024)
    assert small["memory"]["optimizer_state_bytes"] == pytest.approx(params * 2, rel=0.01)


def test_the_dtype_defaults_to_the_configs_and_the_report_says_where_it_came_from(tmp_path):
    r = _report(tmp_path, "--hf", "Qwen/Qwen2-0.5B", "--seq", "32")
    assert r["dtype"] == "bfloat16" and "config's torch_dtype" in r["assumptions"]["dtype"]
    r = _report(tmp_path, "--hf", "distilbert", "--seq", "32")
    assert r["dtype"] == "float32" and "declares no torch_dtype" in r["assumptions"]["dtype"]
    r = _report(tmp_path, "--hf", "Qwen/Qwen2-0.5B", "--seq", "32", "--dtype", "float32")
    assert r["dtype"] == "float32" and "--dtype" in r["assumptions"]["dtype"]


def test_precision_choices_that_contradict_are_refused(capsys):
    assert main(["predict", "--hf", "distilbert", "--training", "--dtype", "float32", "--precision", "amp-bf16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "contradicts --precision amp-bf16" in err[0]
    assert main(["predict", "--hf", "distilbert", "--precision", "bf16"]) == 2
    assert "add --training" in capsys.readouterr().err
    with pytest.raises(InvalidInputError):
        resolve_run_dtype(None, None, "fp64", True)


def test_training_precision_follows_the_dtype_given_and_defaults_to_amp_bf16():
    assert resolve_run_dtype(None, None, None, True).precision == "amp-bf16"
    assert resolve_run_dtype("float16", "float32", None, True).precision == "fp32"
    assert resolve_run_dtype(None, "float16", None, True).precision == "amp-fp16"
    assert resolve_run_dtype("float16", None, None, False).dtype == "float16"  # inference: the config's dtype


@pytest.mark.parametrize(
    ("precision", "optimizer", "expected"),
    [
        ("fp32", "adamw", 16),
        ("bf16", "adamw", 8),
        ("amp-bf16", "adamw", 18),
        ("amp-fp16", "sgd", 10),
        ("fp32", "sgd_momentum", 12),
        ("bf16", "adamw-8bit", 6 + 8 / 2048),
        ("fp32", "none", 8),
    ],
)
def test_bytes_per_parameter_of_each_recipe(precision, optimizer, expected):
    assert bytes_per_parameter(precision, optimizer) == pytest.approx(expected)


def test_tf32_follows_pytorchs_defaults_per_op():
    from perfpredict.predictors.base import RunConfig

    default = RunConfig()
    assert default.tensor_cores(ops.CONV, "float32", gpu=True)  # cudnn.allow_tf32 is on by default
    assert not default.tensor_cores(ops.MATMUL, "float32", gpu=True)  # matmul.allow_tf32 is off
    assert RunConfig(tf32=True).tensor_cores(ops.MATMUL, "float32", gpu=True)
    assert default.tensor_cores(ops.MATMUL, "bfloat16", gpu=True) and not default.tensor_cores(
        ops.CONV, "float32", gpu=False
    )


def test_a_convolution_in_float32_is_costed_at_the_tf32_rate_on_a_gpu():
    import torch

    import perfpredict
    from perfpredict.hardware.devices import get_device
    from perfpredict.predictors.analytical import AnalyticalPredictor
    from perfpredict.predictors.base import RunConfig

    conv = torch.nn.Sequential(torch.nn.Conv2d(256, 256, 3, padding=1)).eval()
    graph = perfpredict.featurize(conv, (torch.randn(32, 256, 56, 56),))
    a100 = get_device("A100-80GB")
    tf32 = AnalyticalPredictor().predict(graph, a100, RunConfig()).latency_ms.value
    fp32 = AnalyticalPredictor().predict(graph, a100, RunConfig(conv_tf32=False)).latency_ms.value
    assert fp32 > 4 * tf32  # a compute-bound conv: 156 TF32 TFLOP/s against 19.5 FP32
    report = perfpredict.report_for_graph(graph, device="A100-80GB")
    assert "convolutions as TF32" in report.assumptions["tf32"] and "matmuls in FP32" in report.assumptions["tf32"]


def test_bf16_on_a_gpu_without_bf16_hardware_warns_and_costs_the_emulation(tmp_path):
    bf16 = _report(
        tmp_path,
        "--hf",
        "distilbert",
        "--seq",
        "128",
        "--batch",
        "32",
        "--device",
        "V100",
        "--dtype",
        "bfloat16",
        "--predictor",
        "analytical",
    )
    fp16 = _report(
        tmp_path,
        "--hf",
        "distilbert",
        "--seq",
        "128",
        "--batch",
        "32",
        "--device",
        "V100",
        "--dtype",
        "float16",
        "--predictor",
        "analytical",
    )
    assert any("no bfloat16 hardware" in w for w in bf16["warnings"])
    assert not any("hardware" in w for w in fp16["warnings"])
    assert bf16["latency_ms"]["value"] > 2 * fp16["latency_ms"]["value"]  # FP32 math, not fp16 tensor cores


def test_the_default_training_precision_is_what_runs_on_the_device():
    from perfpredict.hardware.devices import get_device

    assert resolve_run_dtype(None, None, None, True, get_device("H100-SXM")).precision == "amp-bf16"
    v100 = resolve_run_dtype(None, None, None, True, get_device("V100"))
    assert v100.precision == "amp-fp16" and v100.dtype == "float16" and "V100" in v100.source
    assert resolve_run_dtype(None, None, None, True, get_device("cpu")).precision == "fp32"


def test_a_module_in_hand_trains_in_its_precisions_compute_dtype():
    """``precision="amp-bf16"`` on a module (the Python API) traces the step in bfloat16, as autocast runs it and as
    the HF path does; before, the module's float32 was traced and the recipe only moved the memory."""
    import torch

    import perfpredict

    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096))
    x = torch.zeros(64, 4096)

    def matmul_ms(**options):
        r = perfpredict.predict(model, (x,), device="H100-SXM", phase="training", **options)
        return sum(o.time_ms for o in r.per_op if o.op == "matmul")

    # 2 x 64 x 4096 x 4096 = 2.1 GFLOP per matmul: bf16 tensor cores (989 TFLOP/s) against fp32 (67 TFLOP/s), a
    # 15x gap in peaks; the learned efficiency narrows it at this small M, but never below 2x
    assert matmul_ms(precision="amp-bf16") < matmul_ms() / 2
    assert matmul_ms(precision="amp-bf16") == pytest.approx(matmul_ms(dtype="bfloat16", precision="amp-bf16"))
    with pytest.raises(InvalidInputError, match="contradicts"):
        perfpredict.predict(model, (x,), phase="training", precision="amp-bf16", dtype="float16")
    with pytest.raises(InvalidInputError, match="training step"):
        perfpredict.predict(model, (x,), precision="amp-bf16")
