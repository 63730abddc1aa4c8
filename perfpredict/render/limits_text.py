"""What limits the run, in words: the step's two timelines and its bound, why it is compute- or memory-bound, what
the other modes would take when the host sets the pace, and a training step as trainers state it. Every door shows
these lines (terminal, HTML, web page, the parallel report); like every renderer, they only format report fields."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from perfpredict.render.formats import fmt_time_ms

if TYPE_CHECKING:
    from perfpredict.core.report import PerfReport


BOUND_LABELS = {"host": "host (dispatch and launches)", "compute": "compute", "memory": "memory bandwidth"}


def trainer_lines(report: Any) -> list[str]:
    """A training step as trainers state it: throughput per GPU, MFU and HFU against the dense peak, and the step
    split into compute, exposed communication, bubble, recompute and host (a PerfReport or a ParallelReport; every
    door shows these lines)."""
    t, split = getattr(report, "trainer", None), getattr(report, "step_split", None)
    if t is None:
        return []
    rate = (
        f"{t.tokens_per_s_per_gpu:,.0f} tokens/s per GPU ({t.samples_per_s_per_gpu:,.2f} samples/s per GPU)"
        if t.tokens_per_s_per_gpu is not None
        else f"{t.samples_per_s_per_gpu:,.2f} samples/s per GPU"
    )
    lines = [f"throughput: {rate}"]
    if t.peak_flops_per_s:
        lines.append(
            f"MFU {t.mfu:.1%}, HFU {t.hfu:.1%} of {t.peak_flops_per_s / 1e12:,.0f} TFLOP/s (the dense {t.compute_dtype} "
            f"peak; model FLOPs {t.model_flops_rule})"
        )
    if split is not None:
        parts = [f"{name} {fmt_time_ms(ms)}" for name, ms in split.rows() if ms > 0 or name == "compute"]
        lines.append(f"step: {' + '.join(parts)} = {fmt_time_ms(sum(ms for _, ms in split.rows()))}")
    return lines


def timeline_lines(report: PerfReport) -> list[str]:
    """Device, host and wall time of the step and what bounds it; when the host sets the pace, what CUDA graphs
    and torch.compile would take it to (every door shows these lines: terminal, HTML, web page)."""
    t = report.timeline
    if t is None:
        return []
    bound = f"; bound: {BOUND_LABELS.get(t.bound, t.bound)}" if t.bound else ""
    lines = [
        f"timelines ({t.mode}): device {fmt_time_ms(t.device_ms)}, host {fmt_time_ms(t.host_ms)}, "
        f"wall {fmt_time_ms(t.wall_ms)}{bound}; host profile: {t.host_profile}"
    ]
    why = bound_reason(t, report.device, report.phase)
    return lines + [line for line in (why, host_bound_advice(t)) if line]


def bound_reason(t, device: str, phase: str) -> str:
    """Why a device-bound step is compute- or memory-bound: where its device time goes, and the intensity above
    which an op is compute-bound on ``device`` (a GPU with fewer FLOP/s per byte/s of bandwidth calls more ops so)."""
    if t.bound not in ("compute", "memory") or not t.ridge_flop_per_byte:
        return ""
    return (
        f"{t.bound}-bound: {t.compute_share:.0%} of the device time is in compute-bound ops, the rest in memory-bound "
        f"ones{' (the optimizer step among them)' if phase == 'training' else ''} and the shortest kernels; on the "
        f"{device} the step's heaviest op is compute-bound above {t.ridge_flop_per_byte:,.0f} FLOP/byte (the "
        "FLOP/s it can attain over the memory bandwidth), so a device with fewer FLOP/s per byte/s calls more ops "
        "compute-bound"
    )


def host_bound_advice(t) -> str:
    """One line for a host-bound step: its host and device time, the device's idle share and the wall time of every
    other mode."""
    if not (t.launch_bound and t.other_modes_ms):
        return ""
    others = ", ".join(f"{mode} {fmt_time_ms(ms)}" for mode, ms in t.other_modes_ms.items())
    best = min(t.other_modes_ms, key=t.other_modes_ms.get)
    return (
        f"host-bound: dispatch and launches take {fmt_time_ms(t.host_ms)}, the GPU's work {fmt_time_ms(t.device_ms)}, "
        f"and the GPU idles {t.device_idle_share:.0%} of the {t.mode} step ({fmt_time_ms(t.wall_ms)}); "
        f"the other modes would take: {others} (best: {best}, --mode {best})"
    )


def timeline_line(report: PerfReport) -> str:
    """:func:`timeline_lines` as one text block."""
    return "\n".join(timeline_lines(report))
