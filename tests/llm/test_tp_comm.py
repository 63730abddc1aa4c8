"""A serving step's collectives: vLLM's custom all-reduce against NCCL, NVLink against PCIe, the sends between
pipeline stages, and the rules of vLLM 0.6's custom all-reduce."""

from __future__ import annotations

import pytest

from perfpredict.llm import custom_allreduce
from perfpredict.llm.tp_comm import CommModel
from perfpredict.parallel import measured_collectives
from perfpredict.parallel.collectives import ALL_REDUCE, SEND_RECV, collective_s

KIB, MIB = 1024, 2**20


def test_vllm_takes_its_custom_all_reduce_only_where_its_v0_6_rules_allow():
    assert custom_allreduce.why_not(8 * MIB - 16, 8, "H100-SXM") is None  # under the 8 MiB buffer
    assert "not under its 8 MiB buffer" in custom_allreduce.why_not(8 * MIB, 8, "H100-SXM")
    assert "supports 2, 4, 6, 8" in custom_allreduce.why_not(16 * KIB, 3, "H100-SXM")
    assert "spans nodes" in custom_allreduce.why_not(16 * KIB, 16, "H100-SXM", nodes=2)
    assert "multiple of 16" in custom_allreduce.why_not(16 * KIB + 8, 2, "A100-80GB")
    assert "peer-to-peer" in custom_allreduce.why_not(16 * KIB, 2, "L4")  # a PCIe box [assumption]
    assert custom_allreduce.why_not(16 * KIB, 2, "H100-NVL") is None  # a bridged pair
    assert "without full NVLink" in custom_allreduce.why_not(16 * KIB, 4, "H100-NVL")


def test_one_shot_for_two_gpus_and_small_messages_two_shot_above():
    # custom_all_reduce.cuh: 2 GPUs always one-shot; up to 4 under 512 KiB; up to 8 under 256 KiB
    assert custom_allreduce.kernel(8 * MIB - 16, 2) == "one-shot"
    assert [custom_allreduce.kernel(s, 4) for s in (512 * KIB - 16, 512 * KIB)] == ["one-shot", "two-shot"]
    assert [custom_allreduce.kernel(s, 8) for s in (256 * KIB - 16, 256 * KIB)] == ["one-shot", "two-shot"]


@pytest.mark.parametrize("family, device", [("hopper", "H100-SXM"), ("ampere", "A100-80GB")])
def test_the_custom_all_reduce_time_follows_its_published_timings(family, device):
    points = custom_allreduce._data()["points"][family]
    for ranks, rows in points.items():
        for size, us in rows:  # sglang's PRs #2904 (H100) and #2688 (A100): vLLM's kernel, eager, per call
            assert custom_allreduce.seconds(size, int(ranks), device) * 1e6 == pytest.approx(us, rel=0.12)


def test_decode_messages_take_the_custom_kernel_and_prefill_messages_nccls_measured_curve():
    comm = CommModel("H100-SXM", tp=8)
    small, large = 16 * KIB, 16 * MIB  # a decode step's 1 x 8,192 x fp16; a prefill of 1,024 tokens
    assert comm.all_reduce_s(small) == custom_allreduce.seconds(small, 8, "H100-SXM")
    assert comm.all_reduce_s(large) == measured_collectives.seconds(ALL_REDUCE, large, 8, "H100-SXM")
    nccl = CommModel("H100-SXM", tp=8, custom_all_reduce=False)
    assert nccl.all_reduce_s(small) == measured_collectives.seconds(ALL_REDUCE, small, 8, "H100-SXM")
    assert comm.all_reduce_s(small) < nccl.all_reduce_s(small)  # ~9 us against Vidur's ~26 us NCCL kernel
    assert "custom all-reduce (one-shot" in comm.describe(small, large) and "NCCL (" in comm.describe(small, large)


def test_a_pcie_box_runs_nccls_pcie_ring_and_an_unmeasured_link_nccls_constants():
    l4 = CommModel("L4", tp=4)
    assert l4.all_reduce_s(MIB) == measured_collectives.seconds(ALL_REDUCE, MIB, 4, "L4")
    assert l4.all_reduce_s(MIB) > 3 * CommModel("A100-80GB", tp=4).all_reduce_s(MIB)  # PCIe against NVLink
    v100 = CommModel("V100-SXM2-16GB", tp=4)  # no measured curve: NCCL's own latency model on the catalog link
    from perfpredict.parallel.interconnect import interconnect_for

    link = interconnect_for("V100-SXM2-16GB").group(4, 1, 4)
    assert v100.all_reduce_s(MIB) == collective_s(ALL_REDUCE, MIB, 4, link)


def test_a_stage_boundary_crosses_a_node_once_the_stages_fill_it():
    inside, across = CommModel("H100-SXM", tp=4, pp=2), CommModel("H100-SXM", tp=8, pp=2)
    assert not inside.stage_crosses_node and across.stage_crosses_node
    act = 64 * 8192 * 2
    assert inside.send_recv_s(act) == measured_collectives.seconds(SEND_RECV, act, 2, "H100-SXM", 2)
    assert across.send_recv_s(act) == measured_collectives.seconds(SEND_RECV, act, 2, "H100-SXM", 1)
    assert across.send_recv_s(act) > inside.send_recv_s(act)  # InfiniBand against NVLink
    assert CommModel("H100-SXM", tp=4).send_recv_s(act) == 0.0  # one stage: nothing to send
