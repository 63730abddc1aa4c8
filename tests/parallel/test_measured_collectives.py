"""The measured collective model: Vidur's curves at small and large messages, rescaled where they do not cover the
question, NVLink against PCIe, and what it refuses to answer (the caller then uses NCCL's constants)."""

from __future__ import annotations

import numpy as np
import pytest

from perfpredict.parallel import collective_fit, measured_collectives
from perfpredict.parallel.measured_collectives import Curve


def test_a_curve_costs_its_latency_term_below_its_anchors_and_its_bandwidth_above():
    c = Curve.of([1e4, 1e5, 1e6, 1e7], [20e-6, 20e-6, 40e-6, 220e-6])
    assert c.seconds(2e3) == 20e-6 and c.latency_s == 20e-6  # below the first anchor: the latency term
    assert c.seconds(1e6) == pytest.approx(40e-6)  # an anchor is read as it is
    # above the last anchor: the slope of the last decade's anchors (1 MB, 40 us) and (10 MB, 220 us),
    # 180 us / 9e6 B = 2e-11 s/B: 100 MB costs 220 us + 9e7 B x 2e-11 s/B = 2,020 us
    assert c.seconds(1e8) == pytest.approx(2020e-6)
    assert c.busbw_gb_per_s("send_recv", 2) == pytest.approx(50.0)  # 1 / 2e-11 B/s
    between = c.seconds(3e6)
    assert 40e-6 < between < 220e-6  # monotone between anchors, never past them


def test_the_shipped_dgx_h100_curve_reads_vidurs_rows_at_small_and_large_messages():
    c = measured_collectives.curve("all_reduce", 8, "H100-SXM")
    # Vidur h100_dgx/all_reduce.csv, 8 ranks on one node: the one row in [8 KiB, 16 KiB) is 10,240 bytes at a
    # median of 0.023 ms, and the one row of 64 MiB at 0.322 ms
    assert c.seconds(4096) == pytest.approx(23e-6) and c.seconds(10240) == pytest.approx(23e-6)
    assert c.seconds(64 * 2**20) == pytest.approx(322e-6)
    # a large message runs between NCCL's ring (~370 GB/s busbw) and NVLink SHARP (~480) on 8 H100s
    assert 370 < c.busbw_gb_per_s("all_reduce", 8) < 480
    assert "Vidur h100_dgx all_reduce 8x8" in c.source


def test_anchors_are_octave_medians_made_non_decreasing():
    sizes = np.array([10_000, 12_000, 14_000, 20_000, 40_000, 70_000], dtype=float)
    seconds = np.array([30, 10, 20, 12, 40, 50], dtype=float) * 1e-6
    s, t = collective_fit.octaves(sizes, seconds)
    # octaves [8 Ki, 16 Ki): 10k, 12k, 14k -> median size 12k, median time 20 us; [16 Ki, 32 Ki): 20k at 12 us; ...
    assert s.tolist() == [12_000, 20_000, 40_000, 70_000] and t * 1e6 == pytest.approx([20, 12, 40, 50])
    assert collective_fit.non_decreasing(np.array([3.0, 1.0, 2.0, 5.0])).tolist() == [2.0, 2.0, 2.0, 5.0]
    a_s, a_t = collective_fit.anchors(sizes, seconds)
    assert np.all(np.diff(a_t) >= 0)
    assert a_t[0] == pytest.approx(np.sqrt(20e-6 * 12e-6))  # the pooled pair: their mean in log time


def test_another_group_size_in_a_node_scales_the_latency_as_nccls_ring_and_the_wire_time_by_the_factor():
    six, eight = (measured_collectives.curve("all_reduce", n, "H100-SXM") for n in (6, 8))
    # 6 ranks read the 8-rank curve (nearest; a tie goes to the larger): NCCL's LL ring latency on NVLink is
    # 6.6 + 2(n-1) x 0.6 us, so 12.6 / 15.0; the time above it by 2(5)/6 over 2(7)/8 = 1.6667 / 1.75
    assert six.latency_s == pytest.approx(eight.latency_s * 12.6 / 15.0)
    big = 64 * 2**20
    assert six.seconds(big) - six.latency_s == pytest.approx((eight.seconds(big) - eight.latency_s) * (10 / 6) / 1.75)
    gather = measured_collectives.curve("all_gather", 8, "H100-SXM")  # (n-1)/n of the bytes against 2(n-1)/n
    assert gather.seconds(big) - gather.latency_s == pytest.approx((eight.seconds(big) - eight.latency_s) / 2)


def test_nvlink_against_pcie_and_what_the_measurements_do_not_cover():
    big = 64 * 2**20
    nvlink = measured_collectives.seconds("all_reduce", big, 4, "A100-80GB")
    pcie = measured_collectives.seconds("all_reduce", big, 4, "A100-80GB-PCIe")
    l4 = measured_collectives.curve("all_reduce", 4, "L4")
    assert pcie > 5 * nvlink  # NVSwitch against the PCIe Gen4 ring of Vidur's 4-GPU A100 pairs
    assert l4.busbw_gb_per_s("all_reduce", 4) < 31.5  # under the PCIe Gen4 x16 line rate
    t4 = measured_collectives.curve("all_reduce", 4, "T4")  # PCIe Gen3: the Gen4 ring at half the bandwidth
    # (the anchors are rescaled, then interpolated in log time: between anchors the ratio is 2 to within 0.1%)
    assert t4.seconds(big) - t4.latency_s == pytest.approx(2 * (l4.seconds(big) - l4.latency_s), rel=1e-3)
    assert measured_collectives.curve("all_reduce", 4, "V100-SXM2-16GB") is None  # no measured NVLink2 mesh
    assert measured_collectives.curve("all_reduce", 16, "H100-SXM") is None  # Vidur timed no H100 across nodes
    assert measured_collectives.curve("all_reduce", 16, "A100-80GB").source.endswith("16x8")  # but A100's
    assert measured_collectives.curve("send_recv", 2, "L4", 2) is None  # no measured same-node PCIe copy
    across = measured_collectives.curve("send_recv", 2, "H100-SXM", 1)
    assert across.source.endswith("send_recv 2x1") and across.seconds(2**20) > measured_collectives.curve(
        "send_recv", 2, "H100-SXM", 2
    ).seconds(2**20)
