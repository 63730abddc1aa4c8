"""The links between GPUs: NVLink/NVSwitch or PCIe inside a node, InfiniBand or Ethernet between nodes.

``perfpredict/data/interconnects.json`` holds, per device of the catalog, the per-GPU bandwidth of each fabric (one
direction, the line rate) and the share of it NCCL reaches, with sources. A group of ranks that fits in one node
runs at the intra-node bus bandwidth. A group that spans nodes is limited by the NICs: each GPU's share of its
node's NICs, pooled over the group's GPUs in that node (NCCL runs one ring per NIC), and never more than the
intra-node rate. NB: NVLink SHARP (NVLS), which lifts an 8-GPU all-reduce on Hopper above the ring's bus bandwidth,
is not modelled: the prediction is the ring's (or, for an all-reduce across nodes, NCCL's tree where it is faster).

Two plan keys reshape the fabric: ``nvlink_domain`` (GPUs that reach each other over NVLink: a node, or a GB200 NVL72
rack of 72) sets which groups stay on NVLink, and ``inter_node_gbps`` the network's line rate per GPU
(:meth:`Interconnect.with_network`, e.g. 400 Gb/s: one NDR NIC per GPU; llm-foundry's A100 clusters: 1,600 Gb/s
per 8-GPU node, 200 per GPU).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError

INTERCONNECTS_FILE = Path(__file__).resolve().parents[1] / "data" / "interconnects.json"


@dataclass(frozen=True)
class LinkKind:
    """A kind of link: the share of its line rate NCCL reaches and NCCL's latency constants for it."""

    name: str
    achievable_fraction: float
    latency_us: dict[str, float]
    tree_latency_us: dict[str, float] = field(default_factory=dict)  # NCCL's tree: base and per-hop costs


@dataclass(frozen=True)
class GroupLink:
    """What one communication group runs on: its bus bandwidth and how many nodes it spans."""

    bus_bandwidth_gb_per_s: float
    nodes: int
    intra: LinkKind
    inter: LinkKind
    description: str
    intra_gb_per_s: float = 0.0  # the NVLink/PCIe bus bandwidth of one GPU (0: as bus_bandwidth_gb_per_s)
    nic_gb_per_s: float = 0.0  # one GPU's share of its node's NICs (achievable; 0 inside one node)

    def inter_steps(self, kind: str) -> int:
        """Ring steps that cross nodes: 2(nodes-1) for an all-reduce, nodes-1 for the others (as NCCL counts)."""
        if self.nodes <= 1:
            return 0
        return 2 * (self.nodes - 1) if kind == "all_reduce" else self.nodes - 1

    def base_us(self, proto: str, tree: bool = False) -> float:
        table = self.intra.tree_latency_us if tree else self.intra.latency_us
        return table[f"base_{proto}"]

    def step_us(self, proto: str, inter: bool, tree: bool = False) -> float:
        kind = self.inter if inter else self.intra
        return (kind.tree_latency_us if tree else kind.latency_us)[f"step_{proto}"]

    @property
    def intra_bus_gb_per_s(self) -> float:
        return self.intra_gb_per_s or self.bus_bandwidth_gb_per_s


@dataclass(frozen=True)
class Interconnect:
    device: str
    intra: LinkKind
    intra_per_direction_gb_per_s: float
    intra_generation: str
    inter: LinkKind
    nic_gbit_per_s: float
    nics_per_node: int
    inter_generation: str
    sources: str

    def group(
        self, ranks: int, stride: int, gpus_per_node: int, first: int = 0, domain: int | None = None
    ) -> GroupLink:
        """The link of a group of ``ranks`` ranks ``stride`` apart (ranks first + k*stride), nodes of
        ``gpus_per_node`` (which share the node's NICs) and NVLink domains of ``domain`` GPUs (None: a node). Across
        domains, the domain with the fewest of the group's GPUs (the fewest NICs) paces it."""
        domain = domain or gpus_per_node
        counts = Counter((first + k * stride) // domain for k in range(ranks))
        nodes = len(counts)
        per_node = min(counts.values())
        intra_gb_per_s = self.intra_per_direction_gb_per_s * self.intra.achievable_fraction
        fabric = self.intra_generation + (f" ({domain}-GPU NVLink domain)" if domain != gpus_per_node else "")
        if nodes == 1:
            return GroupLink(
                intra_gb_per_s,
                1,
                self.intra,
                self.inter,
                f"{fabric}, {intra_gb_per_s:.0f} GB/s bus bandwidth",
                intra_gb_per_s,
            )
        nic_gb_per_s = self.nic_gb_per_s_per_gpu(gpus_per_node)
        bandwidth = min(per_node * nic_gb_per_s, intra_gb_per_s if per_node > 1 else float("inf"))
        where = "NVLink domains" if domain != gpus_per_node else "nodes"
        return GroupLink(
            bandwidth,
            nodes,
            self.intra,
            self.inter,
            f"{nodes} {where} over {self.inter_generation} ({per_node} GPU(s) each), "
            f"{bandwidth:.0f} GB/s bus bandwidth",
            intra_gb_per_s,
            nic_gb_per_s,
        )

    def nic_gb_per_s_per_gpu(self, gpus_per_node: int) -> float:
        """One GPU's achievable share of its node's NICs, GB/s one way."""
        return self.nic_gbit_per_s * self.nics_per_node / 8 / gpus_per_node * self.inter.achievable_fraction

    def with_network(self, per_gpu_gbit_per_s: float, gpus_per_node: int) -> Interconnect:
        """The same GPUs on a network of ``per_gpu_gbit_per_s`` per GPU (one NIC of that rate per GPU)."""
        return replace(
            self,
            nic_gbit_per_s=float(per_gpu_gbit_per_s),
            nics_per_node=gpus_per_node,
            inter_generation=f"{per_gpu_gbit_per_s:g} Gb/s per GPU ({self.inter.name}, given)",
        )

    def describe(self) -> str:
        return (
            f"{self.intra_generation} {self.intra_per_direction_gb_per_s:g} GB/s per direction per GPU at "
            f"{self.intra.achievable_fraction:.0%}; between nodes {self.nics_per_node}x "
            f"{self.nic_gbit_per_s:g} Gb/s {self.inter_generation} at {self.inter.achievable_fraction:.0%}"
        )


@functools.lru_cache(maxsize=1)
def _catalog() -> dict[str, Any]:
    return json.loads(INTERCONNECTS_FILE.read_text())


def interconnect_for(device: Any) -> Interconnect:
    """The interconnect of a catalog device (a Device or its name; a MIG slice uses its parent's, a variant in a
    device file its base's)."""
    from perfpredict.hardware.devices import get_device

    dev = get_device(device) if isinstance(device, str) else device
    name = dev.parent or dev.name
    data = _catalog()
    if name not in data["devices"] and getattr(dev, "base", ""):
        name = dev.base
    entry = data["devices"].get(name)
    if entry is None:
        known = ", ".join(data["devices"])
        raise InvalidInputError(
            f"no interconnect is known for device {name!r}; multi-GPU prediction covers "
            f"{known}. Add it to perfpredict/data/interconnects.json"
        )
    entry = _resolved(data["devices"], entry)
    intra, inter = entry["intra"], entry["inter"]
    links = {
        k: LinkKind(k, float(v["achievable_fraction"]), dict(v["nccl_latency_us"]), dict(v["nccl_tree_latency_us"]))
        for k, v in data["links"].items()
    }
    return Interconnect(
        device=name,
        intra=links[intra["link"]],
        intra_per_direction_gb_per_s=float(intra["per_direction_gb_per_s"]),
        intra_generation=intra["generation"],
        inter=links[inter["link"]],
        nic_gbit_per_s=float(inter["nic_gbit_per_s"]),
        nics_per_node=int(inter["nics_per_node"]),
        inter_generation=inter["generation"],
        sources=f"intra: {intra['source']}; inter: {inter['source']}",
    )


def _resolved(devices: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    while "same_as" in entry:
        entry = devices[entry["same_as"]]
    return entry
