"""Plain text for a ParallelReport (the renderer takes a report; the report never imports it)."""

from __future__ import annotations

from perfpredict.core.units import GIB, MIB
from perfpredict.parallel.plan import ParallelPlan
from perfpredict.parallel.report import ParallelReport


def render_parallel_text(report: ParallelReport) -> str:
    lines = [_header(report), "", *trainer_lines(report), *_step(report), "", *_stages(report), ""]
    lines += [*_collectives(report), "", "Assumptions:"]
    lines += [f"  {key}: {text}" for key, text in report.assumptions.items()]
    lines += [f"warning: {w}" for w in report.warnings]
    lines += [f"note: {n}" for n in report.notes]
    return "\n".join(lines)


def _header(r: ParallelReport) -> str:
    plan = ParallelPlan(**r.plan).describe()
    seq = f", seq {r.seq_len}" if r.seq_len else ""
    tokens = f" ({r.global_batch_size * r.seq_len:,} tokens)" if r.seq_len else ""
    return (
        f"{r.model_name} on {r.device}: {plan} - {r.phase}, micro-batch {r.micro_batch_size}, "
        f"global batch {r.global_batch_size}{tokens}{seq}"
    )


def trainer_lines(r: ParallelReport) -> list[str]:
    """Throughput per GPU, MFU and HFU, and the step split, as trainers state them (a training step only)."""
    from perfpredict.render.limits_text import trainer_lines as lines

    return lines(r) + [""] if r.phase == "training" and r.trainer is not None else []


def _step(r: ParallelReport) -> list[str]:
    fits = "fits" if r.fits_in_memory else "DOES NOT FIT"
    t = r.rank_timeline
    rank = (
        [
            f"bound                {r.bound}",
            f"one rank's step      device {t.device_ms:.2f} ms, host {t.host_ms:.2f} ms, wall {t.wall_ms:.2f} ms "
            f"({t.mode}, host profile {t.host_profile})",
            *_why(r),
        ]
        if t is not None
        else ([f"bound                {r.bound}"] if r.bound else [])
    )
    return rank + [
        f"step time            {r.step_ms:10.2f} ms   ({r.throughput_per_s:,.1f} samples/s)",
        f"compute (slowest)    {r.compute_ms:10.2f} ms",
        f"communication        {r.communication_ms:10.2f} ms   exposed {r.exposed_communication_ms:.2f} ms "
        f"({r.exposed_share:.0%} of the step)",
        f"pipeline bubble      {r.bubble_fraction:10.1%}   of the step ({r.bubble_over_compute:.1%} over the compute, "
        f"{r.plan.get('schedule', '1f1b')})",
        f"one GPU, same batch  {r.single_gpu_step_ms:10.2f} ms   scaling efficiency {r.scaling_efficiency:.0%}",
        f"peak memory per GPU  {r.peak_memory_bytes / GIB:10.2f} GiB  of {r.device_memory_bytes / GIB:.2f} GiB: {fits}"
        + (f" ({r.peak_memory_bytes / r.device_memory_bytes:.0%} of it: tight, see the warning)" if _tight(r) else ""),
    ]


def _why(r: ParallelReport) -> list[str]:
    """Why the step has its bound: exposed communication against compute, the rank's host against its device, or
    where the rank's device time goes (``render.text.bound_reason``)."""
    from perfpredict.render.limits_text import bound_reason

    t = r.rank_timeline
    if r.bound == "communication":
        why = (
            f"exposed communication {r.exposed_communication_ms:.2f} ms outweighs the slowest rank's compute "
            f"{r.compute_ms:.2f} ms"
        )
    elif r.bound == "host":
        why = (
            f"each rank's host dispatch and launches ({t.host_ms:.2f} ms) take longer than its GPU's work "
            f"({t.device_ms:.2f} ms)"
            if t.host_ms >= t.device_ms
            else f"each rank's GPU idles {t.device_idle_share:.0%} of its step waiting for its host's dispatch"
        )
    else:
        why = bound_reason(t, r.device, r.phase)
    return [f"why                  {why}"] if why else []


def _stages(r: ParallelReport) -> list[str]:
    out = ["stage  layers    fwd ms   bwd ms  tp ms  p2p ms  dp ms (exposed)"]
    for s in r.stages:
        layers = f"{s.layers[0]}-{s.layers[-1]}" if s.layers else "-"
        out.append(
            f"{s.stage:5d}  {layers:8s} {s.forward_ms:7.2f}  {s.backward_ms:7.2f} {s.tp_comm_ms:6.2f} "
            f"{s.p2p_comm_ms:6.2f}  {s.dp_comm_ms:6.2f} ({s.dp_exposed_ms:6.2f})"
        )
    out.append("(fwd, bwd, tp, p2p per microbatch; dp per step)")
    return out + [""] + memory_lines(r)


def memory_lines(r: ParallelReport) -> list[str]:
    """Memory per GPU of each stage, every term that any stage holds as a column; each row sums to its total."""
    names = [name for name, _ in r.stages[0].memory.rows()] if r.stages else []
    used = [i for i in range(len(names)) if any(s.memory.rows()[i][1] for s in r.stages)]
    worst = r.worst_stage.stage if r.stages else 0
    where = f" (the worst rank: stage {worst})" if len(r.stages) > 1 else ""
    out = [f"memory per GPU (GiB), term by term; each row sums to its total{where}:"]
    for s in r.stages:
        rows = s.memory.rows()
        terms = " + ".join(f"{rows[i][0]} {rows[i][1] / GIB:.2f}" for i in used)
        n = s.in_flight_microbatches
        flight = f", {n:g} microbatch{'es' if n > 1 else ''} in flight" if r.plan.get("pp", 1) > 1 else ""
        out.append(
            f"  stage {s.stage}{flight}: {terms} = {s.memory.total_bytes / GIB:.2f} GiB"
            + ("" if s.fits_in_memory else " (DOES NOT FIT)")
        )
    return out


def _collectives(r: ParallelReport) -> list[str]:
    out = ["collectives per step (one rank of the slowest stage):"]
    for c in r.collectives:
        out.append(
            f"  {c.group:2s} {c.kind:14s} {c.phase:8s} {c.calls_per_step:5d} calls {c.bytes_per_step / MIB:10.1f} "
            f"MiB (largest {c.bytes_per_call / MIB:.1f})  {c.time_ms_per_step:9.2f} ms  busbw "
            f"{c.bus_bandwidth_gb_per_s:6.1f} GB/s{', ' + c.algorithm if c.algorithm not in ('', 'ring') else ''}  "
            f"({c.link})"
        )
    return out


def _tight(r: ParallelReport) -> bool:
    from perfpredict.core.memory_advice import TIGHT_SHARE

    return r.fits_in_memory and r.peak_memory_bytes > TIGHT_SHARE * r.device_memory_bytes
