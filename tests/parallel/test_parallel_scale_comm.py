"""Communication at scale by hand: NCCL's tree and the hierarchical all-reduce against the ring at small and large
messages, the NVLink domain and the network rate per GPU, context parallelism's KV ring, async TP's overlap, and
FSDP's strategies and prefetch."""

from __future__ import annotations

import pytest

from perfpredict.core.units import GIB, KIB, MIB
from perfpredict.parallel import async_tp, context_parallel
from perfpredict.parallel import data_parallel as dpm
from perfpredict.parallel.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    REDUCE_SCATTER,
    algorithm_of,
    algorithm_times,
    collective_s,
    hierarchical_parts,
)
from perfpredict.parallel.interconnect import interconnect_for
from perfpredict.parallel.plan import ParallelPlan
from perfpredict.parallel.simulate import links_of
from perfpredict.parallel.structure import POST, PRE
from perfpredict.parallel.timing import RankTime

# H100: NVLink 450 GB/s x 0.80 = 360 GB/s; each GPU's NDR NIC 400 Gb/s = 50 GB/s x 0.94 = 47 GB/s
NVLINK, NIC = 360e9, 47e9


def test_hierarchical_all_reduce_costs_each_fabric_apart():
    link = interconnect_for("H100-SXM").group(16, 1, 8)  # 2 nodes x 8 GPUs
    intra, inter = hierarchical_parts(ALL_REDUCE, GIB, 16, link)
    # inside: reduce-scatter + all-gather of 1 GiB over 8 GPUs, Simple: 8.4 + 7 x 3.4 = 32.2 us and 7/8 GiB / 360 GB/s
    assert intra == pytest.approx(2 * (32.2e-6 + GIB * 7 / 8 / NVLINK), rel=1e-6)
    # between: an all-reduce of 1/8 GiB over 2 nodes on each GPU's NIC: 8.4 + 2 x 14 = 36.4 us, (GiB/8) x 2(1/2) / 47
    assert inter == pytest.approx(36.4e-6 + GIB / 8 / NIC, rel=1e-6)
    # large messages: the flat ring pipelines both fabrics, min(360, 8 x 47) = 360 GB/s bus bandwidth, and wins
    ring = 131.6e-6 + GIB * 2 * 15 / 16 / NVLINK  # 8.4 + 28 x 3.4 + 2 x 14 us
    assert collective_s(ALL_REDUCE, GIB, 16, link) == pytest.approx(ring, rel=1e-6)
    assert algorithm_of(ALL_REDUCE, GIB, 16, link) == "ring"


def test_small_messages_over_many_nodes_take_nccls_tree():
    link = interconnect_for("H100-SXM").group(512, 1, 8)  # 64 nodes
    times = algorithm_times(ALL_REDUCE, 64 * KIB, 512, link)
    # ring, LL: 6.6 + (1022 - 126) x 0.6 + 126 x 2.7 = 6.6 + 537.6 + 340.2 = 884.4 us (+ 64 KiB x 2 x 511/512 / (0.5 x 360 GB/s))
    assert times["ring"] == pytest.approx(884.4e-6 + 64 * KIB * 2 * 511 / 512 / (0.5 * NVLINK), rel=1e-6)
    # tree, LL: 6.8 + 2 x (7 x 0.6 + log2(64) x 5.0) = 75.2 us (+ 2 x 64 KiB / (360 GB/s x 0.92 / 3.8))
    assert times["tree"] == pytest.approx(75.2e-6 + 2 * 64 * KIB / (NVLINK * 0.92 / 3.8), rel=1e-6)
    assert algorithm_of(ALL_REDUCE, 64 * KIB, 512, link) == "tree"
    # all-gathers and reduce-scatters stay on the ring
    assert set(algorithm_times(ALL_GATHER, 64 * KIB, 512, link)) == {"ring"}
    assert hierarchical_parts(REDUCE_SCATTER, 64 * KIB, 8, interconnect_for("H100-SXM").group(8, 1, 8))[1] == 0


def test_the_nvlink_domain_and_the_network_rate_per_gpu():
    ic = interconnect_for("H100-SXM")
    assert links_of(ic, ParallelPlan(dp=16)).dp.nodes == 2  # two 8-GPU HGX nodes
    nvl = links_of(ic, ParallelPlan(dp=16, gpus_per_node=4, nvlink_domain=72)).dp  # GB200 NVL72-style rack
    assert nvl.nodes == 1 and nvl.bus_bandwidth_gb_per_s == pytest.approx(360)
    # llm-foundry's A100 clusters: 1,600 Gb/s per 8-GPU node = 200 Gb/s per GPU: 8 x 25 GB/s x 0.94 = 188 GB/s
    slow = links_of(ic.with_network(200, 8), ParallelPlan(dp=16)).dp
    assert slow.bus_bandwidth_gb_per_s == pytest.approx(8 * 25 * 0.94)


def _rank_time(attention_fwd_s: float, attention_bwd_s: float) -> RankTime:
    return RankTime(1.0, 2.0, 0.0, {0: 1.0}, {0: 2.0}, None, layer_attention_s={0: (attention_fwd_s, attention_bwd_s)})


def test_context_parallel_ring_hides_sends_behind_the_block_in_hand():
    link = interconnect_for("H100-SXM").group(4, 1, 8)
    # cp = 4, one layer whose K and V over the whole sequence are 64 MiB: a 16 MiB block per rank.
    # Forward send, Simple: 8.4 + 3.4 = 11.8 us + 16 MiB / 360 GB/s = 46.60 us -> 58.40 us; the rank's attention
    # (already 1/cp) is 0.1 ms, 25 us per block: 3 steps expose 3 x (58.40 - 25) us
    ring = context_parallel.ring_time(_rank_time(100e-6, 400e-6), {0: 64 * MIB}, 4, link)
    send_f = 11.8e-6 + 16 * MIB / NVLINK
    assert ring.forward_s[0] == pytest.approx(3 * (send_f - 25e-6), rel=1e-6)
    # backward: K/V and their gradients, 32 MiB: 11.8 + 93.2 = 105.0 us against 100 us of block: 3 x 5.0 us
    send_b = 11.8e-6 + 32 * MIB / NVLINK
    assert ring.backward_s[0] == pytest.approx(3 * (send_b - 100e-6), rel=1e-6)
    # a long enough block hides every send
    assert context_parallel.ring_time(_rank_time(1e-3, 4e-3), {0: 64 * MIB}, 4, link).forward_s[0] == 0.0
    assert ring.sends_per_microbatch == 2 * 3 and ring.block_bytes == 16 * MIB


def test_async_tp_exposes_what_the_matmul_cannot_cover():
    # 1 ms of all-gather beside a 0.8 ms matmul in 8 chunks of 5 us overhead: 0.2 ms + 40 us
    assert async_tp.exposed_s(1e-3, 0.8e-3, 8, 5e-6) == pytest.approx(0.24e-3)
    assert async_tp.exposed_s(1e-3, 3e-3, 8, 5e-6) == pytest.approx(40e-6)  # hidden: only the chunks' overhead


UNITS = [
    dpm.Unit(PRE, 1000, (1000,), 1e-3, 2e-3),
    dpm.Unit(0, 4_000_000, (4_000_000,), 5e-3, 1e-2),
    dpm.Unit(1, 4_000_000, (4_000_000,), 5e-3, 1e-2),
    dpm.Unit(POST, 1000, (1000,), 1e-3, 2e-3),
]


def _count(comms, kind, phase=None, group="dp"):
    return sum(1 for c in comms if c.kind == kind and (phase is None or c.phase == phase) and c.group == group)


def test_fsdp_strategies_and_prefetch():
    full = dpm.fsdp_comms(UNITS, 2.0, 4.0, reduce=True)
    grad_op = dpm.fsdp_comms(UNITS, 2.0, 4.0, reduce=True, reshard=False)
    # FULL_SHARD gathers each layer before its forward and its backward; SHARD_GRAD_OP keeps it: forward only
    assert (_count(full, ALL_GATHER, "backward"), _count(grad_op, ALL_GATHER, "backward")) == (2, 0)
    assert _count(full, ALL_GATHER, "forward") == _count(grad_op, ALL_GATHER, "forward") == 3  # root + 2 layers
    # prefetch 1: layer 1 (task 2) is released by task 0; none: by task 1, the layer before it
    layer1 = [c for c in full if c.what == "layer 0" and c.phase == "forward"][0]
    late = [
        c for c in dpm.fsdp_comms(UNITS, 2.0, 4.0, True, prefetch=0) if c.what == "layer 0" and c.phase == "forward"
    ]
    assert (layer1.ready_after, late[0].ready_after) == (-1, 0)
    # HYBRID_SHARD over groups of 8: each reduce-scatter is followed by an all-reduce of its 1/8 across replicas
    hybrid = dpm.fsdp_comms(UNITS, 2.0, 4.0, True, replicate_shard=8)
    shards = [c for c in hybrid if c.group == "replicate"]
    assert len(shards) == 3 and shards[0].size_bytes == 4_000_000 * 4 // 8 and shards[0].kind == ALL_REDUCE
