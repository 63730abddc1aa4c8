"""ParallelReport: what perfpredict predicts for one step spread over several GPUs (data only; ``render`` shows it).

Times are per step (one optimizer step over the global batch) unless a name says per microbatch. Every rank of a
pipeline stage runs the same graph, so there is one entry per stage; ``step_ms`` is the slowest rank's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from perfpredict.core.report import JsonReport, TimelineSummary
from perfpredict.core.trainer import StepSplit, TrainerMetrics

PARALLEL_SCHEMA_VERSION = 2  # 2: trainer metrics (tokens/s per GPU, MFU, HFU), the step split, schedules


@dataclass(frozen=True)
class RankMemory:
    """Peak memory of one rank, term by term; ``total_bytes`` is their sum."""

    weights_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    activations_bytes: int
    gathered_weights_bytes: int  # FSDP: the all-gathered layers in use (and one layer's unsharded gradients)
    comm_buffers_bytes: int  # DDP's gradient buckets
    weight_copies_bytes: int  # autocast's half-precision weight copies
    runtime_overhead_bytes: int
    workspace_bytes: int = 0  # a kernel's scratch at the peak
    optimizer_temporaries_bytes: int = 0  # the optimizer step's scratch, where the peak is at that step
    peak_at: str = ""  # "forward", "backward" or "optimizer step"

    def rows(self) -> list[tuple[str, int]]:
        """(name, bytes) for every term, named as it is; they sum to :attr:`total_bytes`."""
        activations = (
            "outputs kept to the optimizer step"
            if self.peak_at == "optimizer step"
            else "activations saved for backward"
            if self.gradients_bytes
            else "activations"
        )
        return [
            ("weights", self.weights_bytes),
            ("gradients", self.gradients_bytes),
            ("optimizer state", self.optimizer_state_bytes),
            ("optimizer temporaries", self.optimizer_temporaries_bytes),
            (activations, self.activations_bytes),
            ("workspace", self.workspace_bytes),
            ("FSDP gathered weights", self.gathered_weights_bytes),
            ("communication buffers", self.comm_buffers_bytes),
            ("autocast copies", self.weight_copies_bytes),
            ("runtime (CUDA context, allocator)", self.runtime_overhead_bytes),
        ]

    @property
    def total_bytes(self) -> int:
        return sum(value for _, value in self.rows())


@dataclass(frozen=True)
class StageReport:
    """One pipeline stage (every rank of it alike): its layers, times and memory."""

    stage: int
    layers: tuple[int, ...]
    param_count: int  # parameters on one rank of the stage, before data-parallel sharding
    forward_ms: float  # per microbatch
    backward_ms: float  # per microbatch
    optimizer_ms: float  # per step
    tp_comm_ms: float  # per microbatch, on the critical path
    p2p_comm_ms: float  # per microbatch, sending and receiving activations and their gradients
    dp_comm_ms: float  # per step, all data-parallel collectives
    dp_exposed_ms: float  # per step, what they add to the step
    in_flight_microbatches: float  # an interleaved chunk counts 1/v
    memory: RankMemory
    fits_in_memory: bool


@dataclass(frozen=True)
class CollectiveSummary:
    """Collectives of one kind in one group, on one rank, per step."""

    group: str  # "tp", "dp" or "pp"
    kind: str
    phase: str
    calls_per_step: int
    bytes_per_call: int  # the largest call (nccl-tests' S)
    bytes_per_step: int
    time_ms_per_step: float
    ranks: int
    bus_bandwidth_gb_per_s: float
    link: str
    algorithm: str = ""  # NCCL's ring or tree, or the hierarchical split, for the largest call


@dataclass(frozen=True)
class ParallelReport(JsonReport):
    model_name: str
    device: str
    phase: str
    plan: dict[str, Any]
    world_size: int
    nodes: int
    micro_batch_size: int
    global_batch_size: int
    seq_len: int | None
    dtype: str
    precision: str | None
    step_ms: float
    compute_ms: float  # the slowest rank's compute in one step (all microbatches, optimizer included)
    communication_ms: float  # all its collectives' time, overlapped or not
    exposed_communication_ms: float  # what communication adds to the step
    exposed_share: float  # exposed_communication_ms / step_ms
    bubble_fraction: float
    throughput_per_s: float  # samples per second over the whole world
    single_gpu_step_ms: float  # one GPU running the same global batch (gradient accumulation)
    scaling_efficiency: float  # throughput per GPU over the single GPU's
    peak_memory_bytes: int  # the fullest rank
    device_memory_bytes: int
    fits_in_memory: bool
    single_gpu_fits_in_memory: bool
    stages: tuple[StageReport, ...]
    collectives: tuple[CollectiveSummary, ...]
    interconnect: str
    assumptions: dict[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    # what limits the step ("communication", or the slowest rank's "host", "compute" or "memory"), that rank's two
    # timelines for one step of its graph (one microbatch), and what they mean for scaling (``parallel.bound``)
    bound: str = ""
    rank_timeline: TimelineSummary | None = None
    notes: tuple[str, ...] = ()
    # issue 46: the schedule's bubble over the ideal compute ((p-1)/m for 1F1B), the run as trainers state it,
    # and the step split into compute, exposed communication, bubble, recompute and host
    bubble_over_compute: float = 0.0
    trainer: TrainerMetrics | None = None
    step_split: StepSplit | None = None
    schema_version: int = PARALLEL_SCHEMA_VERSION

    @property
    def worst_stage(self) -> StageReport:
        """The stage whose ranks hold the most memory."""
        return max(self.stages, key=lambda s: s.memory.total_bytes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ParallelReport:
        d = dict(data)
        d["stages"] = tuple(
            StageReport(**{**s, "layers": tuple(s["layers"]), "memory": RankMemory(**s["memory"])}) for s in d["stages"]
        )
        d["collectives"] = tuple(CollectiveSummary(**c) for c in d["collectives"])
        cls.restore_messages(d)
        if d.get("rank_timeline"):
            d["rank_timeline"] = TimelineSummary(**d["rank_timeline"])
        if d.get("trainer"):
            d["trainer"] = TrainerMetrics(**d["trainer"])
        if d.get("step_split"):
            d["step_split"] = StepSplit(**d["step_split"])
        return cls(**d)
