"""What an answer assumes that the user did not say, stated in every report (``PerfReport.assumptions``).

Memory and speed answers rest on choices a user may not know were made for them: the dtype, whether the weights
were built in float32 before a cast, the training precision and optimizer, TF32, the run mode and the host. Each
report lists them in one block (terminal, JSON and HTML alike), and warns where the device cannot do what was asked
natively (bfloat16 on a V100 or T4).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from perfpredict.compiler_hooks import attention_choice, moe_routing
from perfpredict.core import op_kinds
from perfpredict.core.units import GIB
from perfpredict.hardware.precision import OPTIMIZERS, PRECISIONS, bytes_per_parameter

if TYPE_CHECKING:
    from perfpredict.core.graph import OpGraph
    from perfpredict.hardware.devices import Device
    from perfpredict.predictors.base import PredictorOutput, RunConfig


def assumptions(
    graph: OpGraph, device: Device, config: RunConfig, out: PredictorOutput, given: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The report's assumptions block. ``given`` (from the caller: where the dtype came from, ...) goes first."""
    found = dict(given or {})
    found.setdefault("dtype", f"{graph.dtype} (the model's own)")
    found.update(capture_assumptions(graph))
    amp = (
        config.phase == "training"
        and config.precision is not None
        and PRECISIONS[config.precision].weight_dtype != graph.dtype
    )
    if amp:
        found["weights"] = (
            f"held in {PRECISIONS[config.precision].weight_dtype} (AMP's master copy); autocast "
            f"runs the step in {graph.dtype}"
        )
    elif config.weights_built_in in (None, graph.dtype):
        found["weights"] = f"loaded in {graph.dtype} (from_pretrained(..., dtype=...)); no float32 copy at load"
    else:
        found["weights"] = (
            f"built in {config.weights_built_in}, then cast to {graph.dtype} (Model(config).to(...)): "
            f"the load peaks at the {config.weights_built_in} size"
        )
    if config.phase == "training":
        found["precision"] = _precision(graph, config)
        states, value_bytes = OPTIMIZERS[config.optimizer]
        found["optimizer"] = f"{config.optimizer}: {states} state(s) per parameter" + (
            f", {value_bytes} byte each" if value_bytes else ""
        )
    if device.kind == "gpu" and any(
        op_kinds.lookup(n.op).tensor_cores and (n.outputs and n.outputs[0].dtype == "float32") for n in graph.nodes
    ):
        found["tf32"] = (
            f"float32 convolutions {'as TF32' if config.conv_tf32 else 'in FP32'} (cuDNN's default: "
            f"allowed), matmuls {'as TF32' if config.tf32 else 'in FP32'} (torch's default: not; "
            "--tf32 / tf32=True allows it)"
        )
    if out.timeline is not None:
        found["mode"] = f"{config.mode} (what --mode / mode= changes)"
        source = f": {out.timeline.host_source}" if out.timeline.host_source else ""
        found["host"] = (
            f"host profile {out.timeline.host_profile!r}{source} (--host / host= picks another: "
            f"{', '.join(_host_names())}; `perfpredict calibrate-host` measures yours)"
        )
        if device.kind == "cpu":
            found["host"] = _cpu_calibration(device, out.timeline)
        elif out.timeline.device_model:
            found["device time"] = out.timeline.device_model
    if device.kind == "gpu":
        found["ceilings"] = ceilings_basis(device)
    if device.runtime_overhead_bytes:
        found["runtime"] = f"{device.runtime_overhead_bytes / GIB:.2f} GiB of framework and context memory"
    found.update(training_memory(graph, device, config))
    return found


def ceilings_basis(device: Device) -> str:
    """Which peaks a GPU's roofline figures stand on (``hardware/attainable.py``): one basis for every GPU."""
    from perfpredict.hardware.attainable import MEMORY, measured_fractions

    fractions, runs = measured_fractions(device)
    text = "datasheet peaks, as for every GPU (the roofline plot's roofs, MFU, the learned device time's basis)"
    if not fractions:
        return text + "; no GPU's roofline run is on record, so the roofline reads typical achieved fractions"
    shown = ", ".join(f"{'HBM' if k == MEMORY else k} {v:.0%}" for k, v in sorted(fractions.items()) if k in _SHOWN)
    whose = (
        "its own roofline run" if runs == (device.parent or device.name,) else f"{' and '.join(runs)}'s roofline run"
    )
    return f"{text}; the roofline attains the shares measured on {whose} ({shown})"


_SHOWN = ("bf16_tensor", "fp32", "fp8_tensor", "memory")


def training_memory(graph: OpGraph, device: Device, config: RunConfig) -> dict[str, str]:
    """The training-memory options a report rests on: checkpointing, LoRA and QLoRA, float8, the optimizer's
    implementation and ZeRO-Offload, a power cap (docs/parallel.md, "Memory, checkpointing and fine-tuning")."""
    from perfpredict.compiler_hooks.recompute import recompute_summary
    from perfpredict.hardware.power_limit import describe
    from perfpredict.hardware.precision import FLOAT8_RECIPES

    found: dict[str, str] = {}
    if config.phase == "training":
        policy, regions, flops = recompute_summary(graph)
        found["activation checkpointing"] = (
            f"{policy}: {regions} region(s) keep their inputs (selective-op: and their matmul and attention outputs) "
            f"and recompute the rest of their forward in the backward, {flops / 1e9:,.1f} GFLOP"
            if regions
            else "none: every activation the backward reads is kept from the forward"
        )
        if graph.trainable_param_count < graph.param_count * 0.5:
            found["fine-tuning"] = (
                f"{graph.trainable_param_count:,} of {graph.param_count:,} parameters train (LoRA adapters, or a "
                "frozen base): the frozen ones have no gradient and no optimizer state"
                + (
                    "; QLoRA: the frozen linears in NF4 (4.127 bits), dequantized before each matmul"
                    if config.qlora
                    else ""
                )
            )
        impl = config.optimizer_impl or "foreach"
        found["optimizer step"] = (
            "ZeRO-Offload: the optimizer state, the float32 master weights and the step on the host CPU; the "
            "gradients leave through one bucket, the updated weights come back over the host link"
            if config.offload_optimizer
            else f"torch.optim's {impl} implementation"
            + {"foreach": " (one temporary copy of the updated values)", "fused": " (no temporary)"}.get(
                impl, " (one parameter's temporary at a time)"
            )
        )
    if config.float8 != "none":
        found["float8"] = (
            f"{FLOAT8_RECIPES[config.float8]}: the blocks' linear GEMMs at the float8 tensor rate, at the share of it "
            "half-precision GEMMs of the same shapes reach; each operand's amax and cast are ops of their own"
        )
    capped = describe(device)
    if capped:
        found["power limit"] = capped
    return found


#: graph notes that state a capture's assumption, by the prefix they start with: the report's key for each
CAPTURE_NOTES = {attention_choice.NOTE_PREFIX: "attention", moe_routing.NOTE_PREFIX: "MoE routing"}


def capture_assumptions(graph: OpGraph) -> dict[str, str]:
    """What the capture assumed, from the graph's notes (``compiler_hooks.attention_choice``, ``moe_routing``):
    the attention a HuggingFace model ran, and the route its MoE layers took."""
    found = {}
    for note in graph.notes:
        for prefix, key in CAPTURE_NOTES.items():
            if note.startswith(prefix):
                found[key] = note.removeprefix(prefix)
    return found


def _host_names() -> tuple[str, ...]:
    from perfpredict.predictors.host_model import host_names

    return host_names()


def _cpu_calibration(device: Device, timeline) -> str:
    """Where a CPU's answer comes from: the host profile (dispatch and op model) and the device's ceilings."""
    ops_from = f"; op times: {timeline.device_model}" if timeline.device_model else ""
    if "calibrate-host" in device.source:
        ceilings = "the cpu device's ceilings measured by the same calibration"
    else:
        ceilings = "the cpu device's ceilings estimated from /proc (perfpredict calibrate-host measures them)"
    return f"host profile {timeline.host_profile!r}{ops_from}; {ceilings}"


def _precision(graph: OpGraph, config: RunConfig) -> str:
    if config.precision is None:
        return f"{graph.dtype} throughout: weights, gradients and optimizer state (precision=None)"
    p = PRECISIONS[config.precision]
    per = bytes_per_parameter(config.precision, config.optimizer)
    master = "float32 master weights" if p.weight_dtype == "float32" else f"{p.weight_dtype} weights"
    return (
        f"{config.precision}: compute in {p.compute_dtype}, {master} and gradients, "
        f"{per:.1f} bytes per trainable parameter with {config.optimizer}"
    )


def dtype_warnings(graph: OpGraph, device: Device) -> tuple[str, ...]:
    """A dtype the device has no hardware for: PyTorch emulates it, and we cost it at the rate that runs it."""
    if device.kind != "gpu" or device.supports_dtype(graph.dtype):
        return ()
    fix = "use float16 (with a GradScaler when training)" if graph.dtype == "bfloat16" else "use bfloat16 or float16"
    _, unit = device.peak_flops(graph.dtype, True)
    return (f"{device.name} has no {graph.dtype} hardware: PyTorch emulates it, costed here at the {unit} rate; {fix}",)
