"""Plain text for a ParallelReport (the renderer takes a report; the report never imports it)."""

from __future__ import annotations

from perfpredict.parallel.plan import ParallelPlan
from perfpredict.parallel.report import ParallelReport

GIB = 2**30


def render_parallel_text(report: ParallelReport) -> str:
    lines = [_header(report), "", *_step(report), "", *_stages(report), "", *_collectives(report), "", "Assumptions:"]
    lines += [f"  {key}: {text}" for key, text in report.assumptions.items()]
    lines += [f"warning: {w}" for w in report.warnings]
    return "\n".join(lines)


def _header(r: ParallelReport) -> str:
    plan = ParallelPlan(**r.plan).describe()
    seq = f", seq {r.seq_len}" if r.seq_len else ""
    return (
        f"{r.model_name} on {r.device}: {plan} - {r.phase}, micro-batch {r.micro_batch_size}, "
        f"global batch {r.global_batch_size}{seq}"
    )


def _step(r: ParallelReport) -> list[str]:
    fits = "fits" if r.fits_in_memory else "DOES NOT FIT"
    return [
        f"step time            {r.step_ms:10.2f} ms   ({r.throughput_per_s:,.1f} samples/s)",
        f"compute (slowest)    {r.compute_ms:10.2f} ms",
        f"communication        {r.communication_ms:10.2f} ms   exposed {r.exposed_communication_ms:.2f} ms "
        f"({r.exposed_share:.0%} of the step)",
        f"pipeline bubble      {r.bubble_fraction:10.1%}",
        f"one GPU, same batch  {r.single_gpu_step_ms:10.2f} ms   scaling efficiency {r.scaling_efficiency:.0%}",
        f"peak memory per GPU  {r.peak_memory_bytes / GIB:10.2f} GiB  of {r.device_memory_bytes / GIB:.0f} GiB: {fits}",
    ]


def _stages(r: ParallelReport) -> list[str]:
    out = ["stage  layers    fwd ms   bwd ms  tp ms  p2p ms  dp ms (exposed)   weights  grads  optim  activ  total GiB"]
    for s in r.stages:
        m = s.memory
        layers = f"{s.layers[0]}-{s.layers[-1]}" if s.layers else "-"
        out.append(
            f"{s.stage:5d}  {layers:8s} {s.forward_ms:7.2f}  {s.backward_ms:7.2f} {s.tp_comm_ms:6.2f} "
            f"{s.p2p_comm_ms:6.2f}  {s.dp_comm_ms:6.2f} ({s.dp_exposed_ms:6.2f})  "
            f"{m.weights_bytes / GIB:7.2f} {m.gradients_bytes / GIB:6.2f} {m.optimizer_state_bytes / GIB:6.2f} "
            f"{m.activations_bytes / GIB:6.2f}  {m.total_bytes / GIB:8.2f}" + ("" if s.fits_in_memory else " !")
        )
    out.append("(fwd, bwd, tp, p2p per microbatch; dp per step)")
    return out


def _collectives(r: ParallelReport) -> list[str]:
    out = ["collectives per step (one rank of the slowest stage):"]
    for c in r.collectives:
        out.append(
            f"  {c.group:2s} {c.kind:14s} {c.phase:8s} {c.calls_per_step:5d} calls {c.bytes_per_step / 2**20:10.1f} "
            f"MiB (largest {c.bytes_per_call / 2**20:.1f})  {c.time_ms_per_step:9.2f} ms  busbw "
            f"{c.bus_bandwidth_gb_per_s:6.1f} GB/s  ({c.link})"
        )
    return out
