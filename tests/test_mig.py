"""MIG advisor: fit, latency targets and the recommendation's reason."""

from __future__ import annotations

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.hardware import devices
from perfpredict.hardware.devices import Device
from perfpredict.hardware.mig import advise_mig


@pytest.fixture(autouse=True)
def clean_catalog(monkeypatch):
    for var in ("PERFPREDICT_DEVICES", "PERFPREDICT_MEASURED_DIR"):
        monkeypatch.delenv(var, raising=False)
    devices.reset_catalog()
    yield
    devices.reset_catalog()


def ten_ms_on_h100(d: Device) -> float:
    """A fake predictor: 10 ms on all 132 SMs, scaling with 1/sm_count."""
    return 10.0 * 132 / d.sm_count


def test_small_model_on_a100_40gb_gets_1g_5gb():
    advice = advise_mig("A100-40GB", 3e9, lambda d: 5.0, batch_size=1)
    first = advice.options[0]
    # 3e9 B = 2.79 GiB <= 4.75 GiB usable in 1g.5gb
    assert first.profile == "1g.5gb" and first.fits and first.meets_targets
    assert first.instances_per_gpu == 7 and first.sm_count == 14
    assert first.throughput_per_s == pytest.approx(200.0)  # 1 / 5 ms x 1000
    assert advice.recommended == "1g.5gb"
    assert "1g.5gb" in advice.reason and "smallest" in advice.reason


def test_options_sorted_by_memory_then_sms_and_me_listed():
    advice = advise_mig("A100-40GB", 3e9, lambda d: 5.0, batch_size=1)
    names = [o.profile for o in advice.options]
    assert names == ["1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    me = advice.options[1]
    assert me.fits and me.instances_per_gpu == 1 and "+me" in me.reason


def test_90gb_model_fits_no_h100_slice(mocker):
    latency = mocker.Mock(side_effect=ten_ms_on_h100)
    advice = advise_mig("H100-SXM", 90e9, latency, batch_size=1)
    assert advice.recommended is None
    assert not any(o.fits for o in advice.options)
    # 90e9 B = 83.82 GiB > 79.25 GiB, the largest slice
    assert "fits no H100-SXM slice" in advice.reason and "7g.80gb with 79.25 GiB" in advice.reason
    assert advice.options[0].reason == "needs 83.82 GiB, slice has 9.75 GiB"
    latency.assert_not_called()  # no latency for a slice the model does not fit


def test_60gb_model_only_fits_7g_80gb():
    advice = advise_mig("H100-SXM", 60e9, ten_ms_on_h100, batch_size=1)
    # 60e9 B = 55.88 GiB: more than 39.5 GiB (4g.40gb), less than 79.25 GiB (7g.80gb)
    assert [o.profile for o in advice.options if o.fits] == ["7g.80gb"]
    assert advice.recommended == "7g.80gb"


def test_latency_target_changes_recommendation():
    # 10 ms x 132 / SMs: 1g.10gb (16) 82.5, 1g.20gb (26) 50.8, 2g.20gb (32) 41.25, 3g.40gb (60) 22.0,
    # 4g.40gb (64) 20.6, 7g.80gb (132) 10.0 ms
    assert advise_mig("H100-SXM", 3e9, ten_ms_on_h100, 8).recommended == "1g.10gb"
    assert advise_mig("H100-SXM", 3e9, ten_ms_on_h100, 8, max_latency_ms=25).recommended == "3g.40gb"
    assert advise_mig("H100-SXM", 3e9, ten_ms_on_h100, 8, max_latency_ms=15).recommended == "7g.80gb"
    missed = advise_mig("H100-SXM", 3e9, ten_ms_on_h100, 8, max_latency_ms=5)
    assert missed.recommended is None and missed.max_latency_ms == 5
    assert "no slice reaches 5 ms" in missed.reason and "7g.80gb" in missed.reason
    assert "82.5 ms > 5 ms target" in missed.options[0].reason


def test_throughput_target_changes_recommendation():
    # batch 8: 8 / 41.25 ms = 194/s (2g.20gb), 8 / 22 ms = 364/s (3g.40gb)
    advice = advise_mig("H100-SXM", 3e9, ten_ms_on_h100, 8, min_throughput_per_s=300)
    assert advice.recommended == "3g.40gb"
    two_g = next(o for o in advice.options if o.profile == "2g.20gb")
    assert two_g.throughput_per_s == pytest.approx(8 / 41.25 * 1000) and not two_g.meets_targets


def test_me_profile_is_never_recommended():
    for gb in (1, 9, 15, 30, 60):
        advice = advise_mig("H100-SXM", gb * 1e9, ten_ms_on_h100, 1)
        assert advice.recommended is None or not advice.recommended.endswith("+me")


def test_latency_callable_gets_the_slice_device(mocker):
    latency = mocker.Mock(return_value=1.0)
    advise_mig("H100-SXM", 3e9, latency, 1)
    seen = {call.args[0].name: call.args[0] for call in latency.call_args_list}
    assert seen["H100-SXM/3g.40gb"].sm_count == 60 and seen["H100-SXM/3g.40gb"].parent == "H100-SXM"


def test_no_mig_device_gives_none():
    assert advise_mig("L4", 3e9, ten_ms_on_h100, 1) is None
    assert advise_mig("cpu", 3e9, ten_ms_on_h100, 1) is None


@pytest.mark.parametrize(
    "kwargs", [{"peak_memory_bytes": -1}, {"batch_size": 0}, {"max_latency_ms": 0}, {"min_throughput_per_s": -5.0}]
)
def test_bad_inputs_raise(kwargs):
    args = {"peak_memory_bytes": 3e9, "batch_size": 1, **kwargs}
    with pytest.raises(InvalidInputError):
        advise_mig("H100-SXM", latency_ms_for=ten_ms_on_h100, **args)


def test_bad_latency_from_predictor_raises():
    with pytest.raises(InvalidInputError, match="latency_ms_for"):
        advise_mig("H100-SXM", 3e9, lambda d: 0.0, 1)
