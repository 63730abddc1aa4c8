"""Carbon (grid intensity) and cost (prices) advisors."""

from __future__ import annotations

import json

import pytest

from perfpredict.core.errors import InvalidInputError, UnknownDeviceError
from perfpredict.hardware import devices
from perfpredict.hardware.carbon import DEFAULT_GRID, carbon_g, grid_intensity_g_per_kwh, resolve_grid
from perfpredict.hardware.cost import (
    cost_per_1k_inferences_usd,
    cost_usd,
    load_prices,
    price_for,
    price_usd_per_hour,
    training_run_cost_usd,
)
from perfpredict.hardware.devices import get_device, load_device_file


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for var in ("PERFPREDICT_DEVICES", "PERFPREDICT_MEASURED_DIR", "PERFPREDICT_PRICES", "PERFPREDICT_GRID_G_PER_KWH"):
        monkeypatch.delenv(var, raising=False)
    devices.reset_catalog()
    yield
    devices.reset_catalog()


# -- carbon ---------------------------------------------------------------------------------------------------------


def test_default_grid_is_world_average_with_source():
    assert grid_intensity_g_per_kwh() == 480.0
    assert "Ember" in DEFAULT_GRID.source and "2023" in DEFAULT_GRID.source


def test_carbon_arithmetic():
    assert carbon_g(3.6e6, 480) == pytest.approx(480.0)  # 1 kWh x 480 g/kWh
    assert carbon_g(1000.0, 100) == pytest.approx(1000 / 3.6e6 * 100)  # 0.0278 g
    assert carbon_g(3.6e6) == pytest.approx(480.0)  # default grid
    assert carbon_g(3.6e6, "France") == pytest.approx(grid_intensity_g_per_kwh("france"))


def test_grid_env_override_number_and_region(monkeypatch):
    monkeypatch.setenv("PERFPREDICT_GRID_G_PER_KWH", "100")
    assert grid_intensity_g_per_kwh() == 100.0
    assert grid_intensity_g_per_kwh(50) == 50.0  # the argument beats the environment
    monkeypatch.setenv("PERFPREDICT_GRID_G_PER_KWH", "sweden")
    assert resolve_grid().region == "sweden"


@pytest.mark.parametrize("bad", ["abc", "-5", "nan"])
def test_bad_grid_env_says_what_to_set(monkeypatch, bad):
    monkeypatch.setenv("PERFPREDICT_GRID_G_PER_KWH", bad)
    with pytest.raises(InvalidInputError, match="PERFPREDICT_GRID_G_PER_KWH"):
        carbon_g(1.0)


def test_negative_energy_or_grid_raises():
    with pytest.raises(InvalidInputError):
        carbon_g(-1.0, 480)
    with pytest.raises(InvalidInputError):
        carbon_g(1.0, -480)


# -- cost -----------------------------------------------------------------------------------------------------------


def test_catalog_prices_exist_for_gpus_not_cpu():
    assert price_usd_per_hour("H100-SXM") > 0 and price_usd_per_hour("h100") == price_usd_per_hour("H100-SXM")
    assert price_usd_per_hour("cpu") is None
    assert "illustrative" in price_for("T4").source


def test_mig_slice_price_is_a_share_of_the_gpu():
    full = price_usd_per_hour("H100-SXM")
    assert price_usd_per_hour("H100-SXM/1g.10gb") == pytest.approx(full / 7)  # 1 of 7 compute slices
    assert price_usd_per_hour("H100-SXM/3g.40gb") == pytest.approx(full * 3 / 7)
    assert "3/7" in price_for("H100-SXM/3g.40gb").source


def test_price_overrides_env_and_argument(tmp_path, monkeypatch):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"H100": 2.0, "_comment": "ours"}))
    monkeypatch.setenv("PERFPREDICT_PRICES", str(path))
    devices.reset_catalog()  # the catalog reads the environment when it is (re)built
    assert price_usd_per_hour("H100-SXM") == 2.0
    assert "PERFPREDICT_PRICES" in price_for("H100-SXM").source
    assert price_usd_per_hour("H100-SXM/1g.10gb") == pytest.approx(2.0 / 7)
    assert price_usd_per_hour("H100-SXM", prices={"H100-SXM": 1.0}) == 1.0  # the argument beats the env
    assert load_prices()["H100-SXM"] == 2.0


def test_price_set_in_device_file_is_used_unless_env_sets_one(tmp_path, monkeypatch):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"L4": {"price_usd_per_hour": 0.25}}))
    load_device_file(path)
    assert price_for("L4").usd_per_hour == 0.25 and get_device("L4").price_usd_per_hour == 0.25
    env = tmp_path / "prices.json"
    env.write_text(json.dumps({"usd_per_gpu_hour": {"L4": 0.3}}))
    monkeypatch.setenv("PERFPREDICT_PRICES", str(env))
    devices._catalog.cache_clear()  # rebuild, keeping the loaded device file
    assert price_usd_per_hour("L4") == 0.3


def test_catalog_devices_carry_prices():
    h100 = get_device("H100-SXM")
    assert h100.price_usd_per_hour == price_usd_per_hour("H100-SXM") and "prices.json" in h100.price_source
    assert h100.with_mig("1g.10gb").price_usd_per_hour == pytest.approx(h100.price_usd_per_hour / 7)


def test_bad_price_inputs_raise(tmp_path, monkeypatch):
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"H100-SXM": "cheap"}))
    monkeypatch.setenv("PERFPREDICT_PRICES", str(path))
    devices.reset_catalog()
    with pytest.raises(InvalidInputError, match="H100-SXM"):
        price_usd_per_hour("H100-SXM")
    monkeypatch.setenv("PERFPREDICT_PRICES", str(tmp_path / "missing.json"))
    with pytest.raises(InvalidInputError, match="PERFPREDICT_PRICES"):
        price_usd_per_hour("H100-SXM")
    monkeypatch.delenv("PERFPREDICT_PRICES")
    with pytest.raises(UnknownDeviceError):
        price_usd_per_hour("Z9000")


def test_cost_arithmetic():
    assert cost_usd(3600, 2.0) == pytest.approx(2.0)  # one hour at $2/h
    # 1000 samples / batch 8 = 125 batches x 10 ms = 1.25 s; 1.25 / 3600 x $3.6/h = $0.00125
    assert cost_per_1k_inferences_usd(10.0, 8, 3.6) == pytest.approx(0.00125)
    # 1000 steps x 0.5 s = 500 s per GPU; 500 / 3600 x $3/h x 8 GPUs = $3.33
    assert training_run_cost_usd(500.0, 1000, 3.0, num_gpus=8) == pytest.approx(500 / 3600 * 3.0 * 8)


@pytest.mark.parametrize(
    "call",
    [
        lambda: cost_usd(-1, 2.0),
        lambda: cost_usd(1, float("nan")),
        lambda: cost_per_1k_inferences_usd(1.0, 0, 1.0),
        lambda: training_run_cost_usd(1.0, 10, 1.0, num_gpus=0),
    ],
)
def test_bad_cost_inputs_raise(call):
    with pytest.raises(InvalidInputError):
        call()
