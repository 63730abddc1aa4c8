"""GPU variants a user describes in a device file (``base:`` inheritance) and power caps (``--power-limit``,
``power_limit_w``), issue 46 item 9: the clock model against hand arithmetic, the refusals, and a variant predicted
end to end."""

from __future__ import annotations

import json

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.hardware import devices
from perfpredict.hardware.devices import get_device, load_device_file
from perfpredict.hardware.host_link import host_link_bytes_per_s
from perfpredict.hardware.power_limit import clock_share, power_limited


@pytest.fixture(autouse=True)
def _fresh_catalog(monkeypatch):
    for var in ("PERFPREDICT_DEVICES", "PERFPREDICT_MEASURED_DIR"):
        monkeypatch.delenv(var, raising=False)
    devices.reset_catalog()
    yield
    devices.reset_catalog()


def test_a_power_cap_lowers_the_clock_as_dynamic_power_goes_with_its_cube():
    h100 = get_device("H100-SXM")
    # 700 W board, 87.5 W idle: at 500 W the dynamic part is (500 - 87.5) / (700 - 87.5) = 0.6735 of full, so the
    # clock is 0.6735^(1/3) = 0.8765 of its top
    assert clock_share(h100, 500) == pytest.approx(0.8765, abs=1e-4)
    capped = power_limited(h100, 500)
    ratio = (412.5 / 612.5) ** (1 / 3)
    assert capped.peak_flops_per_s["bf16_tensor"] == pytest.approx(h100.peak_flops_per_s["bf16_tensor"] * ratio)
    assert capped.memory_bandwidth_bytes_per_s == h100.memory_bandwidth_bytes_per_s  # the memory clock stays
    assert (capped.tdp_w, capped.power_limit_w) == (500, 500)
    assert power_limited(capped, 500) is capped  # once is enough


def test_a_power_cap_outside_the_boards_range_is_refused_in_one_line():
    with pytest.raises(InvalidInputError, match="below L4's minimum power limit, 40 W; choose 40 to 72 W"):
        power_limited(get_device("L4"), 30)
    with pytest.raises(InvalidInputError, match="above H100-SXM's board power"):
        power_limited(get_device("H100-SXM"), 800)


def test_the_host_link_is_the_pcie_generations_rate():
    # PCIe Gen5 x16: 32 GT/s x 16 lanes x 128/130 / 8 bits = 63.0 GB/s each way, at the 80% copies reach
    assert host_link_bytes_per_s(get_device("H100-SXM")) == pytest.approx(32 * 16 * 128 / 130 / 8 * 0.8 * 1e9)
    # Gen3 x16 on a V100: 15.75 GB/s
    assert host_link_bytes_per_s(get_device("V100-SXM2-16GB")) == pytest.approx(15.75e9 * 0.8, rel=1e-3)


def test_a_variant_inherits_its_base_and_overrides_what_it_names(tmp_path):
    path = tmp_path / "mine.json"
    variants = [
        {
            "name": "H100-96GB",
            "base": "H100-SXM",
            "memory_gib": 96,
            "memory_bandwidth_gb_per_s": 2400,
            "memory_type": "HBM2e",
        },
        {"name": "H100-500W", "base": "H100-SXM", "power_limit_w": 500},
    ]
    path.write_text(json.dumps({"devices": variants}))
    assert load_device_file(path) == ["H100-96GB", "H100-500W"]
    big, capped, h100 = get_device("H100-96GB"), get_device("H100-500W"), get_device("H100-SXM")
    assert (big.memory_bytes, big.memory_bandwidth_bytes_per_s, big.memory_type) == (96 * 2**30, 2.4e12, "HBM2e")
    assert big.peak_flops_per_s["bf16_tensor"] == 989.4e12  # the base's datasheet peak
    assert big.sm_count == h100.sm_count and big.host_link == "PCIe Gen5 x16" and big.base == "H100-SXM"
    assert capped.peak_flops_per_s["fp8_tensor"] == pytest.approx(1978.9e12 * (412.5 / 612.5) ** (1 / 3))
    from perfpredict.parallel.interconnect import interconnect_for

    assert interconnect_for(big).intra_per_direction_gb_per_s == 450  # the base's NVLink


def test_a_variant_of_an_unknown_base_names_the_close_ones(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"name": "mine", "base": "H100-SMX"}]))
    with pytest.raises(InvalidInputError, match="not in the catalog; did you mean"):
        load_device_file(path)


def test_a_variant_and_a_power_limit_are_predicted_end_to_end(tmp_path):
    pytest.importorskip("torch")
    import torch

    import perfpredict

    path = tmp_path / "mine.json"
    path.write_text(
        json.dumps([{"name": "H100-96GB", "base": "H100-SXM", "memory_gib": 96, "memory_bandwidth_gb_per_s": 2400}])
    )
    load_device_file(path)
    model, x = torch.nn.Sequential(torch.nn.Linear(512, 4096), torch.nn.Linear(4096, 512)), torch.randn(4096, 512)
    base = perfpredict.predict(model, x, device="H100-SXM", predictor="analytical")
    variant = perfpredict.predict(model, x, device="H100-96GB", predictor="analytical")
    capped = perfpredict.predict(model, x, device="H100-SXM", predictor="analytical", power_limit_w=300)
    assert variant.device_memory_bytes == 96 * 2**30 and variant.latency_ms.value > 0
    assert capped.latency_ms.value > base.latency_ms.value  # matmul-bound: the lower clock shows
    assert "300 W" in capped.assumptions["power limit"]
