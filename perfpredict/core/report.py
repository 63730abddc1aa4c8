"""Prediction and PerfReport: what every predictor returns and every renderer shows.

Names carry units. A :class:`PerfReport` is plain data: renderers (``render_text``, ``render_html``) never compute,
and :meth:`PerfReport.to_dict` gives the JSON form with a schema version.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from perfpredict.core.trainer import StepSplit, TrainerMetrics
from perfpredict.core.units import GIB

#: 2: the JSON ``memory`` holds disjoint terms (``activations_bytes`` in place of ``activations_peak_bytes``, which
#: held the workspace and optimizer temporaries listed beside it), so its ``*_bytes`` values sum to the peak
REPORT_SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Prediction:
    """One predicted quantity with an interval. ``ood`` is the distance from the predictor's data (None: n/a)."""

    value: float
    unit: str
    low: float
    high: float
    predictor: str
    predictor_version: str = "1"
    ood: float | None = None

    def scaled(self, factor: float, unit: str | None = None) -> Prediction:
        """The same prediction times a positive factor (an interval stays an interval)."""
        lo, hi = sorted((self.low * factor, self.high * factor))
        return dataclasses.replace(self, value=self.value * factor, low=lo, high=hi, unit=unit or self.unit)


@dataclass(frozen=True)
class OpContribution:
    """One op's share of the predicted time, with the roofline bound that limits it."""

    name: str
    op: str
    target: str
    module_path: str
    time_ms: float
    share: float
    bound: str  # "compute", "memory" or "overhead" (launch-bound)
    flops: int
    bytes_moved: int
    arithmetic_intensity_flop_per_byte: float


@dataclass(frozen=True)
class MemoryBreakdown:
    """Peak memory, term by term. ``total_bytes`` is their sum.

    ``load_transient_bytes`` is how far the weights' load rises above the step's own peak: a model built in
    float32 and cast to half precision holds its float32 weights for a moment (RunConfig.weights_built_in).
    ``activations_peak_bytes`` is what the step's peak adds to the other terms. On a GPU training step the
    gradients are born during the backward and the optimizer's scratch joins them at the end
    (memory_model.backward_born_peak), so there it can be less than the activations alive at the peak.
    Two parts of it are not activations, and are named apart: ``workspace_bytes`` (a kernel's scratch at the peak)
    and ``optimizer_temporaries_bytes`` (the optimizer step's scratch, AdamW's temporary copy, where the peak is at
    that step); :attr:`activations_bytes` is the rest. ``peak_at`` says where in the step the peak falls
    ("forward", "backward", "optimizer step"): at the optimizer step, the activations are only the outputs kept
    to the end (the loss, an LM's logits). :meth:`rows` names every term as a report shows it, and :meth:`to_dict`
    is the JSON form: disjoint terms whose ``*_bytes`` values sum to :attr:`total_bytes`.
    """

    params_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    activations_peak_bytes: int
    runtime_overhead_bytes: int
    load_transient_bytes: int = 0
    weight_copies_bytes: int = 0  # autocast's half-precision copies of the weights (AMP training)
    workspace_bytes: int = 0  # part of activations_peak_bytes
    optimizer_temporaries_bytes: int = 0  # part of activations_peak_bytes
    peak_at: str = ""
    # a whole-model predictor's peak less the terms above (signed): the terms are the structural model's
    unattributed_bytes: int = 0
    float8_copies_bytes: int = 0  # Transformer Engine's cached float8 weights and their transposes

    @property
    def activations_bytes(self) -> int:
        """The activation term less its workspace and optimizer temporaries: the tensors themselves."""
        return max(0, self.activations_peak_bytes - self.workspace_bytes - self.optimizer_temporaries_bytes)

    @property
    def activations_label(self) -> str:
        """What the activation row holds, said as it is."""
        if self.peak_at == "optimizer step":
            return "outputs kept to the optimizer step (loss, logits)"
        if self.peak_at == "backward" or (self.gradients_bytes and not self.peak_at):
            return "activations saved for backward"
        return "activations"

    def rows(self) -> list[tuple[str, int]]:
        """(name, bytes) for every term, in the order a report lists them; they sum to :attr:`total_bytes`."""
        return [
            ("weights", self.params_bytes),
            ("gradients", self.gradients_bytes),
            ("optimizer state", self.optimizer_state_bytes),
            ("optimizer temporaries", self.optimizer_temporaries_bytes),
            (self.activations_label, self.activations_bytes),
            ("workspace", self.workspace_bytes),
            ("autocast copies", self.weight_copies_bytes),
            ("float8 weight copies", self.float8_copies_bytes),
            ("weights load (cast)", self.load_transient_bytes),
            ("runtime (CUDA context, allocator)", self.runtime_overhead_bytes),
            (
                "rest of the learned peak"
                if self.unattributed_bytes >= 0
                else "learned peak below these terms (correction)",  # the learned model knows less than the sum
                self.unattributed_bytes,
            ),
        ]

    @property
    def total_bytes(self) -> int:
        return (
            self.params_bytes
            + self.gradients_bytes
            + self.optimizer_state_bytes
            + self.activations_peak_bytes
            + self.runtime_overhead_bytes
            + self.load_transient_bytes
            + self.weight_copies_bytes
            + self.float8_copies_bytes
            + self.unattributed_bytes
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: each ``*_bytes`` value one term of the peak, none inside another (``activations_bytes``
        is the activations less the workspace and optimizer temporaries listed beside it), so they sum to
        :attr:`total_bytes`, as :meth:`rows` do."""
        d = dataclasses.asdict(self)
        return {
            ("activations_bytes" if k == "activations_peak_bytes" else k): (
                self.activations_bytes if k == "activations_peak_bytes" else v
            )
            for k, v in d.items()
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryBreakdown:
        """From :meth:`to_dict` (schema 2), or a schema-1 report's dict (``activations_peak_bytes``)."""
        d = dict(data)
        if "activations_peak_bytes" not in d:
            parts = d.get("workspace_bytes", 0) + d.get("optimizer_temporaries_bytes", 0)
            d["activations_peak_bytes"] = d.pop("activations_bytes") + parts
        return cls(**d)


@dataclass(frozen=True)
class MigOption:
    """One MIG profile for the model: does it fit, how fast would it run, how many fit on one GPU."""

    profile: str
    memory_bytes: int
    sm_count: int
    fits: bool
    latency_ms: float | None
    throughput_per_s: float | None
    instances_per_gpu: int
    meets_targets: bool
    reason: str


@dataclass(frozen=True)
class MigAdvice:
    """MIG advice for one device: every profile, and the smallest one that fits and meets the targets."""

    device: str
    options: tuple[MigOption, ...]
    recommended: str | None
    reason: str
    max_latency_ms: float | None = None
    min_throughput_per_s: float | None = None


@dataclass(frozen=True)
class MeasuredVsPredicted:
    """The profiler's measurement beside the prediction (``options={"measure": True}``): the honest check."""

    device: str  # where it was measured: "cpu" or a CUDA device name
    latency_ms: float
    latency_min_ms: float
    latency_cv: float | None
    peak_memory_bytes: float | None
    energy_j: float | None
    avg_power_w: float | None
    runs: int
    latency_error_pct: float  # (predicted - measured) / measured * 100, for the median
    note: str = ""


#: a step is host-bound (launch-bound) when its device idles more than this share of the wall time
HOST_BOUND_IDLE_SHARE = 1 / 3


def host_bound(device_ms: float, host_ms: float, device_idle_share: float) -> bool:
    """The host's timeline is the step's critical path: its dispatch and launches take at least the device's busy
    time (a faster GPU would not shorten the step), or the device idles more than :data:`HOST_BOUND_IDLE_SHARE` of
    the step waiting for them."""
    return host_ms >= device_ms or device_idle_share > HOST_BOUND_IDLE_SHARE


def step_bound(device_ms: float, host_ms: float, device_idle_share: float, compute_share: float) -> str:
    """What limits a step: "host" (:func:`host_bound`), else where the device time goes: "compute" where the
    compute-bound ops (their FLOPs take longer than their bytes at the device's ceilings) hold at least half of
    it, else "memory" (memory-bound ops, the optimizer step among them, and the shortest kernels)."""
    if host_bound(device_ms, host_ms, device_idle_share):
        return "host"
    return "compute" if compute_share >= 0.5 else "memory"


@dataclass(frozen=True)
class TimelineSummary:
    """The two timelines of one step (``predictors/two_timeline.py``): the device's busy time, the host's dispatch
    time, the wall time in ``mode``, the share of it the device idles waiting for the host, and the wall time the
    other modes would give (a GPU only)."""

    mode: str
    device_ms: float
    host_ms: float
    wall_ms: float
    device_idle_share: float
    other_modes_ms: dict[str, float] = field(default_factory=dict)
    host_profile: str = ""
    device_model: str = ""  # where the per-op device time comes from (which GPUs' rows, which dtypes)
    # what limits the step (:func:`step_bound`): "host" (dispatch and launches, ``launch_bound``), else "compute"
    # or "memory" (the bound of the ops holding most of the device time); multi-GPU adds "communication"
    bound: str = ""
    host_source: str = ""  # where the host profile's figures come from (its file's ``source``)
    # the share of the device time in compute-bound ops (the per-op table's "compute" rows; the rest is memory-bound
    # ops, the optimizer step among them, and the shortest kernels), and the arithmetic intensity above which a
    # GEMM of the run's dtype is compute-bound on this device (its attainable FLOP/s over its attainable bandwidth):
    # why one GPU's step is compute-bound and another's memory-bound (0.0 in a report written before them)
    compute_share: float = 0.0
    ridge_flop_per_byte: float = 0.0

    @property
    def launch_bound(self) -> bool:
        """The host, not the GPU, sets the pace (:func:`host_bound`)."""
        return host_bound(self.device_ms, self.host_ms, self.device_idle_share)


@dataclass(frozen=True)
class TimeShare:
    """Time summed over ops: per op kind (``share`` of the latency), or per part of a block (of the block). An op
    kind's row also sums its ops' FLOPs and bytes, so its predicted achieved rate (``flops / time``) and intensity
    are the report's own numbers (the roofline plot places the kind there)."""

    name: str
    time_ms: float
    share: float
    ops: int
    flops: int = 0
    bytes_moved: int = 0


@dataclass(frozen=True)
class BlockShare:
    """A repeated block (``model.layers.*``): its repeats, its time summed over them (``share`` of the latency),
    and its parts."""

    path: str
    repeats: int
    time_ms: float
    share: float
    parts: tuple[TimeShare, ...]


@dataclass(frozen=True)
class RecomputeShare:
    """What activation checkpointing recomputes in one step: its policy ("full", "selective-op", "every-2", or
    "model": the model's own checkpoint regions), the regions recomputed, their FLOPs (part of the graph's, so the
    hardware FLOPs) and their time (the predictor's per-op time, ``share`` of the latency)."""

    policy: str
    regions: int
    flops: int
    time_ms: float
    share: float


@dataclass(frozen=True)
class GraphSummary:
    nodes: int
    edges: int
    subgraphs: int
    total_flops: int
    total_bytes: int
    param_count: int
    source: str


class JsonReport:
    """The JSON form of a report dataclass (PerfReport, ParallelReport, GenerationReport): its fields, nested
    dataclasses as dicts. JSON has lists where a report has tuples; :meth:`restore_messages` turns them back."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]  # each subclass is a dataclass

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @staticmethod
    def restore_messages(d: dict[str, Any]) -> None:
        """In a report's dict from JSON: ``warnings`` and ``notes`` as tuples, ``assumptions`` as a dict."""
        d["warnings"] = tuple(d.get("warnings", ()))
        d["notes"] = tuple(d.get("notes", ()))
        d["assumptions"] = dict(d.get("assumptions", {}))


@dataclass(frozen=True)
class PerfReport(JsonReport):
    """Everything perfpredict predicts for one model on one device and run config.

    ``latency_ms`` is one call: a forward pass (inference) or forward + backward + optimizer step (training).
    ``energy_j`` is per call. ``carbon_g`` and ``cost_usd`` are for ``workload`` (``workload_calls`` calls).
    """

    model_name: str
    device: str
    phase: str
    batch_size: int
    seq_len: int | None
    dtype: str
    latency_ms: Prediction
    throughput_per_s: Prediction
    peak_memory_bytes: Prediction
    memory: MemoryBreakdown
    fits_in_memory: bool
    device_memory_bytes: int
    energy_j: Prediction
    energy_per_sample_j: Prediction
    avg_power_w: Prediction
    carbon_g: Prediction
    grid_intensity_g_per_kwh: float
    cost_usd: Prediction
    price_usd_per_hour: float | None
    workload: str
    workload_calls: int
    per_op: tuple[OpContribution, ...]
    coverage: float
    graph: GraphSummary
    mig: MigAdvice | None = None
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    device_source: str = "datasheet"
    measured: MeasuredVsPredicted | None = None
    timeline: TimelineSummary | None = None
    # the per-op time totalled over every op: per op kind, and per repeated block (perfpredict.core.breakdown); every
    # share is of latency_ms, and sum(by_kind) + outside_ops_ms == latency_ms
    by_kind: tuple[TimeShare, ...] = ()
    blocks: tuple[BlockShare, ...] = ()
    # the latency beyond the summed per-op time, and what it is (host time not hidden under device time, ...)
    outside_ops_ms: float = 0.0
    outside_ops_label: str = ""
    # what the answer assumes that the user did not say (dtype, weights' load, precision, optimizer, TF32, ...)
    assumptions: dict[str, str] = field(default_factory=dict)
    # a training step as trainers state it (perfpredict.core.trainer): tokens/s per GPU, MFU, HFU, the step split
    trainer: TrainerMetrics | None = None
    step_split: StepSplit | None = None
    # activation checkpointing's recompute (None: nothing recomputed); its time is part of latency_ms
    recompute: RecomputeShare | None = None
    schema_version: int = field(default=REPORT_SCHEMA_VERSION)

    @property
    def predictor(self) -> str:
        return self.latency_ms.predictor

    @property
    def memory_share(self) -> float:
        """The peak's share of the device's memory (above ``memory_advice.TIGHT_SHARE``: tight, with a warning)."""
        return self.peak_memory_bytes.value / self.device_memory_bytes if self.device_memory_bytes else 0.0

    @property
    def op_time_ms(self) -> float:
        """The per-op time summed over every op (the op-kind rows' total)."""
        return sum(k.time_ms for k in self.by_kind)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (a dict), the memory terms disjoint (:meth:`MemoryBreakdown.to_dict`)."""
        return {**super().to_dict(), "memory": self.memory.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PerfReport:
        """Rebuild a report from :meth:`to_dict` output (a JSON file written by ``--json`` or ``report=path``)."""
        d = dict(data)
        for key in (
            "latency_ms",
            "throughput_per_s",
            "peak_memory_bytes",
            "energy_j",
            "energy_per_sample_j",
            "avg_power_w",
            "carbon_g",
            "cost_usd",
        ):
            d[key] = Prediction(**d[key])
        d["memory"] = MemoryBreakdown.from_dict(d["memory"])
        d["graph"] = GraphSummary(**d["graph"])
        d["per_op"] = tuple(OpContribution(**o) for o in d["per_op"])
        if d.get("mig"):
            mig = dict(d["mig"])
            mig["options"] = tuple(MigOption(**o) for o in mig["options"])
            d["mig"] = MigAdvice(**mig)
        if d.get("measured"):
            d["measured"] = MeasuredVsPredicted(**d["measured"])
        if d.get("timeline"):
            d["timeline"] = TimelineSummary(**d["timeline"])
        if d.get("trainer"):
            d["trainer"] = TrainerMetrics(**d["trainer"])
        if d.get("step_split"):
            d["step_split"] = StepSplit(**d["step_split"])
        if d.get("recompute"):
            d["recompute"] = RecomputeShare(**d["recompute"])
        cls.restore_messages(d)
        d["by_kind"] = tuple(TimeShare(**t) for t in d.get("by_kind", ()))
        d["blocks"] = tuple(
            BlockShare(**{**b, "parts": tuple(TimeShare(**t) for t in b["parts"])}) for b in d.get("blocks", ())
        )
        return cls(**d)

    def __str__(self) -> str:
        """One line of the headline numbers; the full tables are a renderer's job (``perfpredict.show(report)``)."""
        fits = "fits" if self.fits_in_memory else "does not fit"
        return (
            f"{self.model_name} on {self.device} ({self.phase}, batch {self.batch_size}, {self.dtype}): "
            f"latency {self.latency_ms.value:.4g} ms [{self.latency_ms.low:.4g}, {self.latency_ms.high:.4g}], "
            f"peak memory {self.peak_memory_bytes.value / GIB:.3g} GiB ({fits}), "
            f"energy {self.energy_j.value:.3g} J; predictor {self.predictor}"
        )
