"""The host-speed sentinel: its workloads run, its reading cadence, and its speed factor."""

import pytest

from perfpredict.profiling.sentinel import PARTS, Sentinel, speed_factor, time_part, workloads


def test_workloads_compute_what_they_claim_on_cpu():
    fns = workloads("cpu")
    assert set(fns) == set(PARTS)
    assert tuple(fns["matmul"]().shape) == (256, 256)
    buf = fns["stream"]()
    assert float(buf[0]) == 1.0 and float(fns["stream"]()[-1]) == 2.0  # in place: the same buffer each call
    assert float(fns["dispatch"]()[0]) == pytest.approx(1.0001**50)


def test_time_part_takes_at_least_the_minimum_runs():
    calls = []
    ms = time_part(lambda: calls.append(1), "cpu", seconds=0.0, min_runs=7)
    assert len(calls) == 2 + 7  # two warm-up calls, then the timed ones
    assert ms >= 0


def test_reading_refreshes_only_when_older_than_every_s():
    now = [100.0]
    s = Sentinel("cpu", every_s=60.0, seconds_per_part=0.0, clock=lambda: now[0])
    first = s.reading()
    assert set(first) == {f"env_sentinel_{p}_ms" for p in PARTS} | {"env_sentinel_age_s"}
    assert first["env_sentinel_age_s"] == 0
    s._last = {p: -1.0 for p in PARTS}  # a refresh would overwrite this marker
    now[0] = 130.0
    assert s.reading()["env_sentinel_age_s"] == 30 and s.reading()["env_sentinel_matmul_ms"] == -1.0
    now[0] = 160.0
    fresh = s.reading()
    assert fresh["env_sentinel_age_s"] == 0 and fresh["env_sentinel_matmul_ms"] > 0


def test_speed_factor_is_the_geometric_mean_of_part_ratios():
    ref = {"matmul": 1.0, "stream": 2.0, "dispatch": 0.5}
    row = {"env_sentinel_matmul_ms": 2.0, "env_sentinel_stream_ms": 4.0, "env_sentinel_dispatch_ms": 0.5}
    assert speed_factor(row, ref) == pytest.approx((2 * 2 * 1) ** (1 / 3))
    assert speed_factor({**row, "env_sentinel_stream_ms": None}, ref) is None  # a row without a reading
    assert speed_factor(row, {**ref, "stream": 0.0}) is None
