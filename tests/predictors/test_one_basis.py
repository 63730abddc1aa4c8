"""One basis for every GPU in every report and plot (issue "trust" item 4).

The H100 SXM carries a roofline run (823 of 989 TFLOP/s bf16, 2.89 of 3.35 TB/s); the H200, the same die with more
and faster memory, has only its datasheet. Reading one at its measurements and the other at its datasheet showed
20% more compute on the H200. Now every GPU is read at its datasheet times the measured share of each ceiling
(``hardware/attainable.py``), the roofline plot draws datasheet roofs, and the H200's gain over the H100 comes from
its memory alone.
"""

from __future__ import annotations

import json

import pytest

from perfpredict.hardware import devices
from perfpredict.hardware.attainable import MEMORY, measured_fractions
from perfpredict.hardware.devices import datasheet_device, get_device, load_device_file
from perfpredict.predictors import analytical

H100_BF16_MEASURED, H100_BF16_SHEET = 823.46e12, 989.4e12
H100_HBM_MEASURED, H100_HBM_SHEET = 2.8856e12, 3.35e12
pytestmark = pytest.mark.usefixtures("shipped_ceilings")  # the H100's roofline run, as users get it


@pytest.fixture(autouse=True)
def _fresh_catalog(monkeypatch):
    for var in ("PERFPREDICT_DEVICES", "PERFPREDICT_MEASURED_DIR"):
        monkeypatch.delenv(var, raising=False)
    devices.reset_catalog()
    yield
    devices.reset_catalog()


def test_a_gpu_without_a_run_is_read_at_the_shares_its_architectures_run_measured():
    h100, h200 = get_device("H100-SXM"), get_device("H200")
    shares, runs = measured_fractions(h200)
    assert runs == ("H100-SXM",)
    # 823.46 / 989.4 = 0.832 of the bf16 tensor peak, 2.886 / 3.35 = 0.861 of the bandwidth
    assert shares["bf16_tensor"] == pytest.approx(H100_BF16_MEASURED / H100_BF16_SHEET, rel=1e-3)
    assert shares[MEMORY] == pytest.approx(H100_HBM_MEASURED / H100_HBM_SHEET, rel=1e-3)
    # the same die attains the same compute; the H200's bandwidth is its own datasheet's 4.8 TB/s x 0.861
    assert analytical._attainable(h200, "bf16_tensor", "tensor") == pytest.approx(
        analytical._attainable(h100, "bf16_tensor", "tensor"), rel=1e-9
    )
    assert analytical._attainable(h100, "bf16_tensor", "tensor") == pytest.approx(H100_BF16_MEASURED, rel=1e-3)
    assert analytical.attainable_bandwidth(h200) == pytest.approx(4.8e12 * 2.8856 / 3.35, rel=1e-3)
    # another architecture takes every run's share where it has none of its own (the B200, an A100)
    assert measured_fractions(get_device("B200"))[1] == ("H100-SXM",)


def test_the_report_says_which_run_a_gpus_shares_come_from():
    from perfpredict.assumptions import ceilings_basis

    assert "its own roofline run" in ceilings_basis(get_device("H100-SXM"))
    said = ceilings_basis(get_device("H200"))
    assert "H100-SXM's roofline run" in said and "bf16_tensor 83%" in said and "HBM 86%" in said


def test_the_roofline_plot_draws_every_gpu_on_its_datasheet_and_names_what_was_measured():
    from perfpredict.kernels.plot import _ceilings_from

    compute, bandwidth = _ceilings_from(get_device("H100-SXM"), None)
    bf16 = next(c for c in compute if c[0] == "BF16 tensor")
    assert bf16[1] == H100_BF16_SHEET and "measured 823 TF, 83%" in bf16[2]
    assert bandwidth[0][1] == H100_HBM_SHEET and "measured 2,886 GB/s, 86%" in bandwidth[0][2]
    h200 = dict((label, value) for label, value, _ in _ceilings_from(get_device("H200"), None)[0])
    assert h200["BF16 tensor"] == bf16[1]  # one die, one roof


def test_float8_and_flash_attention_read_the_datasheet_basis():
    from perfpredict.compiler_hooks.float8_linears import float8_share
    from perfpredict.core.graph import OpNode, TensorMeta
    from perfpredict.predictors.attention_kernels import fa2_rate_flop_per_s

    node = OpNode(
        name="mm",
        op="matmul",
        target="mm",
        inputs=(),
        outputs=(TensorMeta((8, 8), "bfloat16"),),
        attrs={"float8": "tensorwise"},
    )
    # the bf16 / fp8 peaks at their measured shares: 823.5 / 1460.3 = 0.564 on the H100 and on the H200 alike
    assert float8_share(node, get_device("H100-SXM")) == pytest.approx(823.46 / 1460.29, rel=1e-3)
    assert float8_share(node, get_device("H200")) == pytest.approx(float8_share(node, get_device("H100-SXM")))
    # FA2's published H100 rates apply to the H100 as published (its datasheet peak, not its measured one)
    sheet = datasheet_device(get_device("H100-SXM")).peak_flops("bfloat16", True)[0]
    assert fa2_rate_flop_per_s(backward=False, causal=False, keys=16384, peak_bf16_flop_per_s=sheet) == 370e12


@pytest.mark.parametrize("phase", ["inference", "training"])
def test_the_h200s_gain_over_the_h100_comes_from_its_memory_alone(tmp_path, phase):
    # an H100 SXM given the H200's memory (141 GB of HBM3e at 4.8 TB/s) and nothing else is predicted as the H200
    pytest.importorskip("torch")
    import torch

    import perfpredict

    h200 = get_device("H200")
    path = tmp_path / "h100_with_h200_memory.json"
    record = {
        "name": "H100-SXM-141GB",
        "base": "H100-SXM",
        "memory_gib": h200.memory_bytes / 2**30,
        "memory_bandwidth_gb_per_s": h200.memory_bandwidth_bytes_per_s / 1e9,
    }
    path.write_text(json.dumps([record]))
    load_device_file(path)
    layers = [torch.nn.Linear(4096, 4096) for _ in range(4)] + [torch.nn.LayerNorm(4096)]
    model, x = torch.nn.Sequential(*layers), torch.randn(8192, 4096)
    run = {"phase": phase, "dtype": "bfloat16"} if phase == "inference" else {"phase": phase, "precision": "amp-bf16"}
    got = {
        d: perfpredict.predict(model, x, device=d, **run).latency_ms.value
        for d in ("H200", "H100-SXM-141GB", "H100-SXM")
    }
    assert got["H200"] == pytest.approx(got["H100-SXM-141GB"], rel=1e-9)
    assert got["H200"] <= got["H100-SXM"]


def test_a_gpu_given_its_own_ceilings_is_read_at_them_not_at_a_remembered_run():
    from perfpredict.hardware.devices import apply_ceilings, reset_catalog

    h100 = get_device("H100-SXM")
    assert analytical.attainable_bandwidth(h100) == pytest.approx(H100_HBM_MEASURED, rel=1e-3)
    slower = apply_ceilings(h100, {"ceilings": {"hbm_bandwidth_bytes_per_s": 2.0e12}})
    assert analytical.attainable_bandwidth(slower) == pytest.approx(2.0e12)  # its own run, not the shipped one's
    reset_catalog()  # a rebuilt catalog is read afresh, whatever object ids it reuses
    assert analytical.attainable_bandwidth(get_device("H100-SXM")) == pytest.approx(H100_HBM_MEASURED, rel=1e-3)
