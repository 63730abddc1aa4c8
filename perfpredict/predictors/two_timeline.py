"""The two-timeline predictor: per-op device time and host time, joined by simulation (``timeline.py``).

- **Device time** d_i: the op's roofline time at the device's attainable ceilings (measured where a roofline run
  exists, else datasheet x the achieved fractions of ``analytical.ACHIEVED_FRACTION``), never under
  ``MIN_KERNEL_S`` for an op that launches a kernel. No launch overhead is in it: that is the host's.
- **Host time** h_i: the host profile's dispatch cost per op kind, the module Python of forward ops, and the
  device's launch cost per kernel (``host_model.node_host_s``).
- **Modes** (``RunConfig.mode``): ``eager`` overlaps the two timelines (the wall time is where the device finishes);
  ``cuda_graph`` replays the device timeline after one launch; ``compiled`` fuses each run of elementwise,
  reduction, norm and softmax ops into one kernel and launches kernels from generated code (no ATen dispatch, no
  module Python); ``compiled_cuda_graph`` is both (``torch.compile(mode="reduce-overhead")``).

Memory and power come from the analytical model (the same ops, the same ceilings). The per-op table is each op's
device time in the mode asked for (a fused kernel's time split over its ops by their own device time), so the op
rows sum to the device timeline, and the wall time beyond it is the report's "host time not hidden under device
time" line (``outside_ops_ms``). Energy is power x wall time. The device time per op is the roofline bound over an
efficiency learned from op rows (``op_efficiency``) where a model exists for the device's kind, else the analytical
fixed fractions.
"""

from __future__ import annotations

import copy
import functools
import json
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from perfpredict.core import breakdown, op_kinds, ops
from perfpredict.core.report import OpContribution, Prediction, TimelineSummary, step_bound
from perfpredict.predictors import (
    attention_kernels,
    gpu_device_time,
    host_model,
    op_efficiency,
    optimizer_step,
    timeline,
)
from perfpredict.predictors.analytical import (
    HIGH_FACTOR,
    AnalyticalPredictor,
    attainable_bandwidth,
    op_contribution,
    recompute_s,
    ridge_flop_per_byte,
)
from perfpredict.predictors.base import PredictorOutput, RunConfig
from perfpredict.predictors.cost_arrays import CostArrays
from perfpredict.predictors.gpu_efficiency import GpuEfficiencyModel

NAME = "two_timeline"
VERSION = "1"
MODES = ("eager", "cuda_graph", "compiled", "compiled_cuda_graph")
MIN_KERNEL_S = 2e-6  # the shortest a GPU kernel takes, launch to completion on the device (gpus.md)
GRAPH_LAUNCH_S = 10e-6  # host cost of one cudaGraphLaunch
GRAPH_NODE_GAP_S = 1e-6  # device-side gap between kernels of a replayed graph
COMPILED_KERNEL_HOST_US = 3.0  # inductor's generated wrapper per kernel, before the launch itself
#: distinct batches at which predict_many reads the learned efficiency (others are interpolated)
EFFICIENCY_ANCHORS = 8
#: per device kind: the 80% latency interval (x/÷ a factor, split conformal on held-out rows) and the device-time
#: scale fitted on measured rows with the host's dispatch scale (benchmarks/timeline_accuracy.py --save); one
#: scale per kind, so every GPU of the catalog gets the same correction and their ranking stays the ceilings'
CALIBRATION = Path(__file__).resolve().parents[1] / "data" / "two_timeline_calibration.json"


@lru_cache(maxsize=1)
def _calibration() -> dict:
    try:
        return json.loads(CALIBRATION.read_text())
    except (OSError, ValueError):
        return {}


def calibration(device, key: str, default: float) -> float:
    """A calibrated figure for this kind of device ("interval_factor", "device_time_scale"), else ``default``."""
    try:
        return float(_calibration()[device.kind][key])
    except (KeyError, TypeError, ValueError):
        return default


def interval_factor(device) -> float:
    """The multiplicative half-width of the 80% latency interval on this kind of device."""
    return calibration(device, "interval_factor", HIGH_FACTOR)


def fused_groups(graph) -> list[list[int]]:
    """Runs of consecutive fusible non-view ops (inductor's pointwise/reduction fusion, approximately); every other
    op is a group of its own; views belong to no group."""
    groups: list[list[int]] = []
    run: list[int] = []
    for i, node in enumerate(graph.nodes):
        if node.is_view:
            continue
        if op_kinds.is_fusible(node.op):
            run.append(i)
            continue
        if run:
            groups.append(run)
            run = []
        groups.append([i])
    if run:
        groups.append(run)
    return groups


def _on_configs_host(method):
    """Run ``method`` on the host its RunConfig argument names (``RunConfig.host``), when it names one."""

    @functools.wraps(method)
    def on_host(self, *args, **kwargs):
        config = next((a for a in (*args, *kwargs.values()) if isinstance(a, RunConfig)), None)
        return method(self.for_host(config.host) if config is not None else self, *args, **kwargs)

    return on_host


class TwoTimelinePredictor:
    name = NAME
    version = VERSION

    def __init__(
        self,
        host_profile: host_model.HostProfile | None = None,
        learned: bool = True,
        gpu_efficiency: GpuEfficiencyModel | None = None,
    ) -> None:
        """``gpu_efficiency``: the GPU device-time model to read instead of the shipped one (a model refitted
        without some GPU's rows, to score that GPU as an unseen one: ``benchmarks/unseen_gpu.py``)."""
        self._host_profile = host_profile
        self._host_name: str | None = None  # the RunConfig.host this twin was made for (``for_host``)
        self.learned = learned
        self._efficiency: dict[str, object] = {} if gpu_efficiency is None else {"gpu": gpu_efficiency}
        self._cpu_ops: dict[int, tuple[object, object]] = {}  # id(profile): (the profile, its CpuOpModel)

    @property
    def host_profile(self) -> host_model.HostProfile:
        """The profile given, else the one a GPU uses now (``host_model.load_profile``: a calibration made after
        this predictor was built counts). A CPU's may differ: :meth:`profile_for`."""
        return self._host_profile or host_model.load_profile()

    def profile_for(self, device) -> host_model.HostProfile:
        """The host profile for ``device``: the one given (or named by ``RunConfig.host``), else the default for
        its kind. A GPU server's profile cannot time a CPU: it has no CPU model (one line saying what to use)."""
        profile = self._host_profile or host_model.load_profile(kind=device.kind)
        if device.kind == "cpu" and "cpu" not in profile.dispatch_scale:
            from perfpredict.core.errors import InvalidInputError

            raise InvalidInputError(
                f"host profile {profile.name!r} has no CPU model (it times a GPU's host only); for the cpu device "
                f"use --host {host_model.DEFAULT_HOST['cpu']} or --host calibrated"
            )
        return profile

    def for_host(self, host: str | None) -> TwoTimelinePredictor:
        """This predictor on the host ``host`` names (None: as it is), sharing its loaded models."""
        if host is None or host == self._host_name:
            return self
        twin = copy.copy(self)
        twin._host_profile = host_model.load_profile(host=host)
        twin._host_name = host
        return twin

    def launch_s(self, device) -> float:
        """One kernel launch on ``device`` from this host (``host_model.launch_s``)."""
        return host_model.launch_s(self.profile_for(device), device)

    def efficiency_model(self, device):
        """The learned per-op efficiency for this kind of device (a GPU's: ``gpu_efficiency``, trained on GPU op
        rows; a CPU's: ``op_efficiency``), or None (then the analytical fractions)."""
        if not self.learned:
            return None
        if device.kind not in self._efficiency:
            gpu = device.kind == "gpu"
            self._efficiency[device.kind] = GpuEfficiencyModel.load() if gpu else op_efficiency.load_model(device)
        return self._efficiency[device.kind]

    def device_scale(self, device) -> float:
        """The device-time scale: none (1) where a GPU's time is learned from GPU op rows, which put every GPU on
        one basis; the calibrated scale of the device's kind otherwise."""
        if device.kind == "gpu" and self.efficiency_model(device) is not None:
            return 1.0
        return calibration(device, "device_time_scale", 1.0)

    def cpu_op_model(self, device):
        """The host profile's CPU op model where ``device`` is a CPU and the model is the learned one, else None."""
        if device.kind != "cpu" or not self.learned:
            return None
        profile = self.profile_for(device)
        cached = self._cpu_ops.get(id(profile))
        if cached is None or cached[0] is not profile:
            cached = self._cpu_ops[id(profile)] = (profile, profile.cpu_op_model())
        return cached[1]

    @_on_configs_host
    def device_node_s(
        self, arrays: CostArrays, device, config: RunConfig, batches: np.ndarray, ev, scale: float | None = None
    ) -> np.ndarray:
        """Device seconds per node and config: roofline bound / learned efficiency where a model exists, else the
        analytical attainable time, times the calibrated device-time scale of the device's kind (``scale``
        overrides it); zero for views, never under MIN_KERNEL_S for a GPU kernel."""
        scale = self.device_scale(device) if scale is None else scale
        return floor_kernels(self.raw_device_s(arrays, device, config, batches, ev) * scale, device, arrays.graph)

    @_on_configs_host
    def raw_device_s(self, arrays: CostArrays, device, config: RunConfig, batches: np.ndarray, ev) -> np.ndarray:
        """Device seconds per node and config before the calibrated scale and the kernel floor (views: 0)."""
        graph = arrays.graph
        gpu = device.kind == "gpu"
        cpu_ops = self.cpu_op_model(device)
        if cpu_ops is not None:  # this CPU's op classes, as calibrate-host timed them here
            flops, moved, _, _ = arrays.at(batches)
            return cpu_ops.node_seconds(graph.nodes, flops, moved)
        views = np.array([n.is_view for n in graph.nodes], dtype=bool)[:, None]
        model = self.efficiency_model(device)
        if model is None:
            work = np.maximum(ev.compute_s, ev.memory_s)
        elif gpu:
            efficiency = gpu_device_time.efficiency_fn(model, device, config)
            bound = gpu_device_time.bound_s(arrays, device, config, batches)
            work = bound / self._efficiency_at(efficiency, arrays, np.asarray(batches, dtype=float))
            work = work * gpu_device_time.float8_shares(graph, device)[:, None]
        else:
            shapes = [op_efficiency.node_shape(n) for n in graph.nodes]
            rates = np.array(
                [
                    op_kinds.attainable_rate(s.kind, s.dtype, device, tf32=config.tf32, conv_tf32=config.conv_tf32)[0]
                    for s in shapes
                ]
            )
            flops, moved, _, _ = arrays.at(batches)
            bound = np.maximum(flops / rates[:, None], moved / device.memory_bandwidth_bytes_per_s)
            work = bound / self._efficiency_at(_cpu_efficiency(model, device), arrays, np.asarray(batches, dtype=float))
        if gpu:  # the flash_attn package's kernel on a Hopper GPU runs no faster than its published rate
            work = np.maximum(
                work, arrays.at(batches)[0] * attention_kernels.seconds_per_graph_flop(graph, device)[:, None]
            )
        return np.where(views, 0.0, work)

    def _efficiency_at(self, efficiency, arrays: CostArrays, batches: np.ndarray) -> np.ndarray:
        """Efficiency [node, config]: read at each batch's shapes where there are at most ``EFFICIENCY_ANCHORS``
        distinct batches, else at that many batches spread geometrically and interpolated in log batch (a
        feature row per op and batch would cost predict_many its speed)."""
        unique = np.unique(batches)
        anchors = (
            unique
            if len(unique) <= EFFICIENCY_ANCHORS
            else np.unique(np.round(np.geomspace(unique[0], unique[-1], EFFICIENCY_ANCHORS)))
        )
        flops, moved, _, _ = arrays.at(anchors)
        nodes = arrays.graph.nodes
        kernels = [i for i, n in enumerate(nodes) if not n.is_view]  # views run nothing: no efficiency to read
        log_eff = np.zeros((len(nodes), len(anchors)))
        for j, b in enumerate(anchors):
            dims = arrays.shapes_at(float(b))
            shapes = [op_efficiency.node_shape(nodes[i], flops[i, j], moved[i, j], dims[i]) for i in kernels]
            if shapes:
                log_eff[kernels, j] = np.log(efficiency(shapes))
        if len(anchors) == 1:
            return np.exp(np.repeat(log_eff, len(batches), axis=1))
        x = np.log(anchors)
        return np.exp(np.stack([np.interp(np.log(batches), x, row) for row in log_eff]))

    @_on_configs_host
    def timelines(
        self,
        arrays: CostArrays,
        device,
        config: RunConfig,
        batches: np.ndarray,
        ev=None,
        node_s: np.ndarray | None = None,
    ):
        """(Timeline for ``config.mode``, the analytical Evaluation it used)."""
        ev = ev if ev is not None else AnalyticalPredictor().evaluate(arrays, device, config, batches)
        gpu = device.kind == "gpu"
        node_s = node_s if node_s is not None else self.device_node_s(arrays, device, config, batches, ev)
        h, d = self._eager_rows(arrays.graph, device, ev, node_s, config)
        mode = config.mode
        if mode in ("compiled", "compiled_cuda_graph") and gpu:
            d, h = self._fuse(arrays.graph, ev, arrays, batches, device, node_s)
            opt_d, opt_h = self._optimizer(ev, device, gpu, d.shape[1], arrays.graph, config)
            d, h = np.vstack([d, opt_d]), np.vstack([h, opt_h])
        if not gpu:
            return timeline.serial(h, d), ev
        launched = timeline.overlapped(h, d)
        if mode in ("cuda_graph", "compiled_cuda_graph"):
            kernels = (d > 0).sum(axis=0)
            replay = timeline.graph_replay(d, launch_s=GRAPH_LAUNCH_S, node_gap_s=GRAPH_NODE_GAP_S, kernels=kernels)
            # a graph only takes the host's launches away: where the device was already the bottleneck, the same
            # kernels launched one by one run no slower (cuda_graph <= eager, compiled_cuda_graph <= compiled)
            return replace(replay, wall_s=np.minimum(replay.wall_s, launched.wall_s)), ev
        return launched, ev

    @_on_configs_host
    def eager_walls(
        self,
        arrays: CostArrays,
        device,
        config: RunConfig,
        batches: np.ndarray,
        scales: np.ndarray,
        ev=None,
        device_scales: np.ndarray = (1.0,),
    ) -> tuple[np.ndarray, np.ndarray]:
        """(eager wall seconds [host scale, device scale, batch] with the host's dispatch scaled by each of
        ``scales`` and the device time by each of ``device_scales``, unscaled device seconds [batch]): one
        simulation for every pair (fitting both to measured rows, ``two_timeline_fit``)."""
        ev = ev if ev is not None else AnalyticalPredictor().evaluate(arrays, device, config, batches)
        raw = self.raw_device_s(arrays, device, config, batches, ev)
        gpu = device.kind == "gpu"
        unit = replace(self.profile_for(device), dispatch_scale={"gpu" if gpu else "cpu": 1.0})
        dispatch = host_model.node_host_s(arrays.graph, unit, 0.0, gpu=gpu)  # at scale 1, without launches
        launch = host_model.node_host_s(arrays.graph, unit, self.launch_s(device), gpu=gpu) - dispatch
        opt_d, opt_h = self._optimizer(ev, device, gpu, len(batches), arrays.graph, config)
        d = np.hstack(
            [
                np.vstack([floor_kernels(raw * float(k), device, arrays.graph), opt_d])
                for _ in scales
                for k in device_scales
            ]
        )
        h = np.hstack(
            [
                np.vstack([np.repeat((float(g) * dispatch + launch)[:, None], len(batches), axis=1), opt_h])
                for g in scales
                for _ in device_scales
            ]
        )
        tl = timeline.overlapped(h, d) if device.kind == "gpu" else timeline.serial(h, d)
        unscaled = floor_kernels(raw, device, arrays.graph).sum(axis=0)
        return tl.wall_s.reshape(len(scales), len(device_scales), len(batches)), unscaled

    def _eager_rows(self, graph, device, ev, node_s: np.ndarray, config) -> tuple[np.ndarray, np.ndarray]:
        """(host, device) seconds [op, config] of an eager step, the optimizer step as the last row."""
        gpu = device.kind == "gpu"
        h = np.repeat(
            host_model.node_host_s(graph, self.profile_for(device), self.launch_s(device), gpu=gpu)[:, None],
            node_s.shape[1],
            axis=1,
        )
        opt_d, opt_h = self._optimizer(ev, device, gpu, node_s.shape[1], graph, config)
        return np.vstack([h, opt_h]), np.vstack([node_s, opt_d])

    def _optimizer(self, ev, device, gpu: bool, configs: int, graph, config) -> tuple[np.ndarray, np.ndarray]:
        """The optimizer step as one row: its memory-bound device time, and its host dispatch and launches."""
        if not ev.optimizer_s.any():
            return np.zeros((1, configs)), np.zeros((1, configs))
        if config.offload_optimizer and gpu:  # the host's step and the copies: the GPU waits for them
            return np.asarray(ev.optimizer_s, dtype=float)[None, :], np.zeros((1, configs))
        dispatches = optimizer_step.host_dispatches(graph, config)
        launches = dispatches * (self.launch_s(device) if gpu else 0.0)
        host = dispatches * self.profile_for(device).op_us(ops.OPTIMIZER) * 1e-6 + launches
        folded = optimizer_step.device_launches(graph, config) * device.launch_overhead_s  # analytical folds them in
        device_s = np.maximum(ev.optimizer_s - folded, 0.0)
        model = self.efficiency_model(device) if gpu else None
        if model is not None:  # the same bytes at the learned memory-bound efficiency, on the datasheet basis
            moved = device_s * attainable_bandwidth(device)
            efficiency = gpu_device_time.efficiency_fn(model, device, RunConfig())
            device_s = gpu_device_time.memory_s(efficiency, device, moved, "float32")
        return device_s[None, :], np.full((1, configs), host)

    def _fuse(
        self, graph, ev, arrays: CostArrays, batches: np.ndarray, device, node_s: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Device and host time per fused kernel: a group's intermediates stay on chip (each is written and read
        once less), and each kernel is launched from generated code. A kernel of one op keeps that op's time
        (``node_s``); a fused group streams its traffic at the learned memory-bound efficiency (GPU rows), or at
        the attainable bandwidth times the calibrated scale where no GPU model is loaded."""
        _, moved, out_bytes, _ = arrays.at(batches)
        scale = self.device_scale(device)
        groups = fused_groups(graph)
        d = np.zeros((len(groups), len(batches)))
        for g, members in enumerate(groups):
            if len(members) == 1:
                d[g] = node_s[members[0]]
                continue
            traffic = np.maximum(
                moved[members].sum(axis=0) - 2 * out_bytes[members[:-1]].sum(axis=0), moved[members].max(axis=0)
            )
            dtype = graph.nodes[members[-1]].outputs[0].dtype if graph.nodes[members[-1]].outputs else graph.dtype
            memory = self.stream_s(device, traffic, dtype)
            d[g] = np.maximum(np.maximum(ev.compute_s[members].sum(axis=0) * scale, memory), MIN_KERNEL_S)
        host = COMPILED_KERNEL_HOST_US * 1e-6 + self.launch_s(device)
        return d, np.full_like(d, host)

    def stream_s(self, device, moved_bytes, dtype: str) -> np.ndarray:
        """Seconds to stream ``moved_bytes`` (one value per config) through one memory-bound kernel on ``device``:
        at the learned memory-bound efficiency where a GPU model is loaded, else at the attainable bandwidth times
        the calibrated scale. A fused group costs this (``_fuse``), and so does the vLLM-class engine's decode
        attention (``llm.step_costs``)."""
        moved = np.atleast_1d(np.asarray(moved_bytes, dtype=float))
        model = self.efficiency_model(device) if device.kind == "gpu" else None
        if model is None:
            return moved / attainable_bandwidth(device) * self.device_scale(device)
        return gpu_device_time.memory_s(gpu_device_time.efficiency_fn(model, device, RunConfig()), device, moved, dtype)

    @_on_configs_host
    def evaluate(self, arrays: CostArrays, device, config: RunConfig, batches: np.ndarray):
        """The analytical Evaluation of ``batches`` with this model's wall time and power in place of the
        roofline's: the vectorised path of ``predict_many``."""
        ev = AnalyticalPredictor().evaluate(arrays, device, config, batches)
        tl, _ = self.timelines(arrays, device, config, batches, ev)
        return replace(ev, latency_s=tl.wall_s, power_w=busy_power_w(ev.power_w, tl, device))

    @_on_configs_host
    def latency_s(self, graph, device, config: RunConfig) -> float:
        """The wall time alone (the MIG advice asks it once per slice): no report, no other modes."""
        arrays = CostArrays.from_graph(graph)
        tl, _ = self.timelines(arrays, device, config, np.array([graph.batch_size]))
        return float(tl.wall_s[0])

    @_on_configs_host
    def predict(self, graph, device, config: RunConfig) -> PredictorOutput:
        arrays = CostArrays.from_graph(graph)
        batches = np.array([graph.batch_size])
        analytical = AnalyticalPredictor()
        ev = analytical.evaluate(arrays, device, config, batches)
        node_s = self.device_node_s(arrays, device, config, batches, ev)  # once, for every mode below
        tl, _ = self.timelines(arrays, device, config, batches, ev, node_s)
        base = analytical.output(graph, device, config, ev)  # memory: the same ops
        wall_s = float(tl.wall_s[0])
        op_s, optimizer_s = self.op_device_s(arrays, device, config, batches, ev, node_s)
        rows = device_contributions(graph, device, config, ev, op_s, optimizer_s, wall_s)
        power_w = float(busy_power_w(ev.power_w, tl, device)[0])
        energy_j = power_w * wall_s
        factor = interval_factor(device)
        return PredictorOutput(
            latency_ms=Prediction(wall_s * 1e3, "ms", wall_s * 1e3 / factor, wall_s * factor * 1e3, NAME, VERSION),
            peak_memory_bytes=base.peak_memory_bytes,
            memory=base.memory,
            energy_j=Prediction(energy_j, "J", energy_j * 0.7, energy_j * HIGH_FACTOR, NAME, VERSION),
            avg_power_w=Prediction(
                power_w, "W", power_w * 0.7, max(power_w, min(device.tdp_w, power_w * 1.3)), NAME, VERSION
            ),
            per_op=rows[: config.top_ops],
            by_kind=breakdown.by_kind(rows, wall_s * 1e3),
            blocks=breakdown.repeated_blocks(rows, latency_ms=wall_s * 1e3),
            timeline=self.summary(arrays, device, config, batches, tl, ev, node_s, breakdown.compute_share(rows)),
            outside_ops_label=outside_label(device, config.mode),
            recompute_ms=recompute_s(graph, op_s) * 1e3,
        )

    @_on_configs_host
    def op_device_s(self, arrays: CostArrays, device, config: RunConfig, batches: np.ndarray, ev, node_s):
        """(device seconds per graph node, the optimizer step's device seconds) at the first config, in
        ``config.mode``: what the device timeline sums. A fused kernel's time (``compiled`` modes on a GPU) is split
        over its ops in proportion to their own device time."""
        opt_d, _ = self._optimizer(ev, device, device.kind == "gpu", node_s.shape[1], arrays.graph, config)
        per_node = node_s[:, 0].copy()
        if config.mode in ("compiled", "compiled_cuda_graph") and device.kind == "gpu":
            fused, _ = self._fuse(arrays.graph, ev, arrays, batches, device, node_s)
            per_node[:] = 0.0
            for g, members in enumerate(fused_groups(arrays.graph)):
                own = node_s[members, 0]
                weights = own / own.sum() if own.sum() > 0 else np.full(len(members), 1 / len(members))
                per_node[members] = fused[g, 0] * weights
        return per_node, float(opt_d[0, 0])

    @_on_configs_host
    def summary(self, arrays, device, config, batches, tl, ev, node_s, compute_share: float) -> TimelineSummary:
        """The report's view: this mode's device, host and wall time, what the other modes would give, and what
        bounds the step (``step_bound``: ``compute_share`` is that of the per-op rows' device time, the optimizer
        step's included)."""
        others = {}
        if device.kind == "gpu":
            for mode in MODES:
                if mode != config.mode:
                    other, _ = self.timelines(arrays, device, _with_mode(config, mode), batches, ev, node_s)
                    others[mode] = float(other.wall_s[0]) * 1e3
        device_ms, host_ms, idle = (
            float(tl.device_s[0]) * 1e3,
            float(tl.host_s[0]) * 1e3,
            float(tl.device_idle_share[0]),
        )
        return TimelineSummary(
            mode=config.mode,
            device_ms=device_ms,
            host_ms=host_ms,
            wall_ms=float(tl.wall_s[0]) * 1e3,
            device_idle_share=idle,
            other_modes_ms=others,
            host_profile=self.profile_for(device).name,
            device_model=self.describe_device_model(arrays.graph, device, config),
            bound=step_bound(device_ms, host_ms, idle, compute_share),
            host_source=self.profile_for(device).source,
            compute_share=compute_share,
            ridge_flop_per_byte=ridge_flop_per_byte(arrays.graph, device, config),
        )

    def describe_device_model(self, graph, device, config: RunConfig) -> str:
        """Where this device's per-op time comes from, for the report's assumptions."""
        cpu_ops = self.cpu_op_model(device)
        if cpu_ops is not None:
            return getattr(cpu_ops, "source", "") or "this host's CPU op model (calibrate-host)"
        model = self.efficiency_model(device)
        if device.kind == "gpu" and model is not None:
            return gpu_device_time.describe(model, graph, device, config)
        if model is not None:
            return f"learned per-op efficiency ({getattr(model, 'source', 'op-efficiency-cpu')})"
        scale = self.device_scale(device)
        return "datasheet x fixed achieved fractions (analytical.ACHIEVED_FRACTION)" + (
            f" x a calibrated scale of {scale:.2f}" if scale != 1.0 else ""
        )


def outside_label(device, mode: str) -> str:
    """What a step's wall time holds beyond its ops' device time, in ``mode``."""
    if device.kind != "gpu":
        return "host dispatch (serial on a CPU)"
    if mode in ("cuda_graph", "compiled_cuda_graph"):
        return "graph launch + kernel gaps"
    return "host, not hidden by the GPU"


def device_contributions(
    graph, device, config: RunConfig, ev, op_s: np.ndarray, optimizer_s: float, wall_s: float
) -> tuple[OpContribution, ...]:
    """Every op with device time (``op_s``, seconds per node) as a per-op row, the optimizer step last, largest
    first; shares of the wall time. An op at the shortest kernel time is launch-bound ("overhead")."""
    gpu = device.kind == "gpu"
    rows = []
    for i, node in enumerate(graph.nodes):
        t = float(op_s[i])
        if t <= 0:
            continue
        compute_s, memory_s = float(ev.compute_s[i, 0]), float(ev.memory_s[i, 0])
        floored = gpu and t <= MIN_KERNEL_S * (1 + 1e-9) and max(compute_s, memory_s) < MIN_KERNEL_S
        bound = "overhead" if floored else ("compute" if compute_s >= memory_s else "memory")
        rows.append(op_contribution(node, t, t / wall_s if wall_s else 0.0, bound))
    if optimizer_s > 0:
        from perfpredict.predictors.analytical import optimizer_row

        rows.append(optimizer_row(graph, config, optimizer_s, wall_s))
    rows.sort(key=lambda r: r.time_ms, reverse=True)
    return tuple(rows)


def _cpu_efficiency(model, device):
    """The CPU efficiency model read as a function of op shapes (``_efficiency_at``'s contract)."""

    def efficiency(shapes):
        X = np.array([op_efficiency.features(s, device) for s in shapes])
        return model.efficiency(X, np.array([op_efficiency.max_efficiency(s, device) for s in shapes]))

    return efficiency


def floor_kernels(node_s: np.ndarray, device, graph) -> np.ndarray:
    """No GPU kernel finishes in under MIN_KERNEL_S; views launch none (0 s)."""
    if device.kind != "gpu":
        return node_s
    views = np.array([n.is_view for n in graph.nodes], dtype=bool)[:, None]
    return np.where(views, 0.0, np.maximum(node_s, MIN_KERNEL_S))


def busy_power_w(power_w: np.ndarray, tl, device) -> np.ndarray:
    """A GPU draws its busy power only while it is busy: the roofline's power, scaled by the device's busy share
    of the wall time, never under the idle power."""
    if device.kind == "gpu":
        power_w = power_w * np.minimum(1.0, tl.device_s / np.maximum(tl.wall_s, 1e-30))
    return np.maximum(power_w, device.idle_power_w)


def _with_mode(config: RunConfig, mode: str) -> RunConfig:
    return replace(config, mode=mode)


def make_predictor() -> TwoTimelinePredictor:
    return TwoTimelinePredictor()
