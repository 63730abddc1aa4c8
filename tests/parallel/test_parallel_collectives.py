"""Collective time: nccl-tests' formulas, NCCL's latency model, and predicted bus bandwidth against the figures
NVIDIA's NCCL maintainers have published for DGX A100 and DGX H100."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from perfpredict.core.errors import InvalidInputError
from perfpredict.core.units import GIB
from perfpredict.parallel.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    BROADCAST,
    REDUCE_SCATTER,
    SEND_RECV,
    bus_bandwidth_gb_per_s,
    bus_factor,
    collective_s,
    ring_steps,
)
from perfpredict.parallel.interconnect import INTERCONNECTS_FILE, interconnect_for

# Published nccl-tests bus bandwidths at large sizes, with their sources: the table the benchmark prints
# (benchmarks/parallel_validation.py); each is a maintainer's statement, not a run of ours.
_BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "parallel_validation.py"
_spec = importlib.util.spec_from_file_location("parallel_validation", _BENCH)
_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_bench)
PUBLISHED = _bench.PUBLISHED
# NVLink SHARP, the default 8-GPU all-reduce on Hopper, reaches ~480 GB/s; it is not modelled, so the prediction
# stays at the ring's (~370 GB/s published): a known, stated gap of about -25%.
NVLS = (_bench.NVLS[1], _bench.NVLS[2], _bench.NVLS[4], _bench.NVLS[5])


@pytest.mark.parametrize(
    "system, device, ranks, per_node, kind, published, source",
    PUBLISHED,
    ids=[f"{row[0]}-{row[4]}" for row in PUBLISHED],
)
def test_large_message_bus_bandwidth_within_5_percent(system, device, ranks, per_node, kind, published, source):
    link = interconnect_for(device).group(ranks, 1, per_node)
    predicted = bus_bandwidth_gb_per_s(kind, 8 * GIB, ranks, link)
    assert predicted == pytest.approx(published, rel=0.05), f"{system}: {predicted:.0f} vs {published} ({source})"


def test_nvlink_sharp_is_not_modelled_and_the_gap_is_the_stated_one():
    device, ranks, kind, nvls_published = NVLS
    predicted = bus_bandwidth_gb_per_s(kind, 8 * GIB, ranks, interconnect_for(device).group(ranks, 1, 8))
    # Without NVLS an 8-GPU all-reduce is a ring, and nccl-tests report a ring's bus bandwidth on the same scale
    # for every collective: the maintainer's ~370 GB/s "for non-allreduce collectives or NCCL_ALGO=RING"
    # (nccl-tests#212, the DGX H100 all-gather row of PUBLISHED) is the ring all-reduce's figure too.
    (ring_published,) = [row[5] for row in PUBLISHED if row[1] == device and row[4] == "all_gather"]
    assert ring_published == 370.0
    assert predicted == pytest.approx(ring_published, rel=0.05)
    # so the gap to NVLS is the published one, 370 / 480 - 1 = -22.9%, give or take the ring's 5% above
    assert (predicted - nvls_published) / nvls_published == pytest.approx(370 / 480 - 1, abs=0.05 * 370 / 480)


def test_nccl_tests_bus_factors():
    assert bus_factor(ALL_REDUCE, 8) == 2 * 7 / 8
    assert bus_factor(ALL_GATHER, 8) == bus_factor(REDUCE_SCATTER, 8) == 7 / 8
    assert bus_factor(BROADCAST, 8) == bus_factor(SEND_RECV, 2) == 1.0
    assert bus_factor(ALL_REDUCE, 1) == 0.0
    assert (ring_steps(ALL_REDUCE, 8), ring_steps(ALL_GATHER, 8), ring_steps(SEND_RECV, 2)) == (14, 7, 1)


def test_time_is_bandwidth_bound_for_large_and_latency_bound_for_small_messages():
    link = interconnect_for("H100-SXM").group(8, 1, 8)
    size = 4 * GIB
    wire_s = size * 2 * 7 / 8 / (link.bus_bandwidth_gb_per_s * 1e9)
    # Simple protocol: 8.4 us + 14 steps x 3.4 us of latency on top of the wire time
    assert collective_s(ALL_REDUCE, size, 8, link) == pytest.approx(wire_s + (8.4 + 14 * 3.4) * 1e-6)
    # a few bytes: NCCL's LL protocol, 6.6 us + 14 steps x 0.6 us
    assert collective_s(ALL_REDUCE, 8, 8, link) == pytest.approx((6.6 + 14 * 0.6) * 1e-6, rel=1e-3)
    assert collective_s(ALL_REDUCE, size, 1, link) == 0.0


def test_a_group_that_spans_nodes_runs_at_its_nics():
    ic = interconnect_for("H100-SXM")
    inside = ic.group(8, 1, 8)
    one_per_node = ic.group(4, 8, 8)  # dp=4 with tp=8: one GPU of each of 4 nodes
    two_per_node = ic.group(4, 4, 8)  # dp=4 with tp=4: 2 nodes, 2 GPUs each
    assert (inside.nodes, one_per_node.nodes, two_per_node.nodes) == (1, 4, 2)
    # one NDR NIC per GPU (8 x 400 Gb/s per node = 50 GB/s per GPU) at 94%
    assert one_per_node.bus_bandwidth_gb_per_s == pytest.approx(50 * 0.94)
    assert two_per_node.bus_bandwidth_gb_per_s == pytest.approx(2 * 50 * 0.94)
    assert inside.bus_bandwidth_gb_per_s == pytest.approx(450 * 0.80)
    assert collective_s(ALL_REDUCE, GIB, 4, one_per_node) > 5 * collective_s(ALL_REDUCE, GIB, 4, ic.group(4, 1, 8))


def test_every_catalog_gpu_has_a_sourced_interconnect():
    from perfpredict.hardware.devices import list_devices

    data = json.loads(INTERCONNECTS_FILE.read_text())
    for device in (d for d in list_devices() if d.kind == "gpu" and not d.parent):
        ic = interconnect_for(device)
        assert ic.intra_per_direction_gb_per_s > 0 and ic.nic_gbit_per_s > 0, device.name
        assert "[src]" in ic.sources or "[calc]" in ic.sources or "[assumption]" in ic.sources, device.name
    for link in data["links"].values():
        assert 0 < link["achievable_fraction"] <= 1 and link["fraction_source"] and link["latency_source"]
    # the datasheet figures (per direction): NVLink3 300, NVLink4 450, NVLink5 900 GB/s; PCIe Gen4 x16 31.5
    assert [
        interconnect_for(d).intra_per_direction_gb_per_s for d in ("A100-40GB", "H100-SXM", "H200", "B200", "L4")
    ] == [300, 450, 450, 900, 31.5]


def test_a_device_without_an_interconnect_is_refused():
    from perfpredict.hardware.devices import local_cpu

    with pytest.raises(InvalidInputError, match="no interconnect is known"):
        interconnect_for(local_cpu())
