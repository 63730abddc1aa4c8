"""The entry point: a ParallelReport for an OpGraph, a device and a parallel plan.

``parallel_report(graph, {"dp": 2, "tp": 4}, device="H100-SXM")`` is what ``perfpredict.pipeline.predict`` calls
for a Request with a ``parallel`` plan (every door: ``perfpredict.predict(..., parallel=...)``, the CLI's
``--dp/--tp/--pp/--fsdp/--sp/--microbatches``, the backend's ``parallel`` option, the web page). The graph is one
rank's micro-batch: capture the model at the micro-batch size. Each rank's compute comes from
``perfpredict.graph_report.report_for_graph``, the pipeline's single-GPU path.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from perfpredict.parallel import build
from perfpredict.parallel import memory as mem
from perfpredict.parallel.bound import host_bound_note, step_bound
from perfpredict.parallel.plan import ParallelPlan, check_phase, parse_plan, resolve_batch
from perfpredict.parallel.report import ParallelReport
from perfpredict.parallel.schedules import idle_share
from perfpredict.parallel.timing import analytical_node_s, rank_report, rank_request
from perfpredict.request import Request


def parallel_report(
    graph,
    parallel: ParallelPlan | Mapping[str, Any] | None = None,
    request: Request | None = None,
    *,
    interconnect: Any = None,
    **fields: Any,
) -> ParallelReport:
    """Predict one step of ``graph`` (a training or inference OpGraph at the micro-batch size) spread over GPUs as
    ``parallel`` says (the keys of :class:`ParallelPlan`; None: ``request.parallel``), run as ``request`` with
    ``fields`` (Request field names) changed: ``device``, ``predictor``, ``optimizer``, ``mode``, ``tf32``, ``host``,
    ``model_name``, and ``precision``, a recipe of perfpredict.hardware.precision or ``master-bf16``/``master-fp16``
    (the ZeRO paper's 2+2+12 bytes per parameter; None keeps the graph's dtype). ``interconnect``: an
    ``Interconnect`` to use in place of the catalog's (another cluster)."""
    from perfpredict.hardware.devices import get_device
    from perfpredict.parallel.interconnect import interconnect_for
    from perfpredict.parallel.simulate import links_of, run_stages

    request = (request or Request()).but(**fields)
    plan = resolve_batch(parse_plan(parallel if parallel is not None else request.parallel), graph.batch_size)
    training = graph.phase == "training"
    check_phase(plan, graph.phase)
    mem.check_options(plan, request)
    from perfpredict.hardware.power_limit import power_limited

    dev = power_limited(
        get_device(request.device) if isinstance(request.device, str) else request.device, request.power_limit_w
    )
    ic = interconnect or interconnect_for(dev)
    if plan.inter_node_gbps:
        ic = ic.with_network(plan.inter_node_gbps, plan.gpus_per_node)
    precision, optimizer = request.precision, request.optimizer
    each = mem.per_param(graph, precision, optimizer, plan, request) if training else None
    options = rank_request(request, training)
    links = links_of(ic, plan)
    reduce_bytes, gather_bytes = comm_bytes(plan, each)
    runs = run_stages(graph, plan, dev, options, links, reduce_bytes, gather_bytes)
    memories = [build.rank_memory(r, plan, each, dev) for r in runs]
    stages = tuple(build.stage_report(r, plan, m, dev) for r, m in zip(runs, memories))
    # with neither tp, pp nor cp the one stage's graph is the whole graph: its report is the single GPU's too
    whole = runs[0].time.report if len(runs) == 1 and runs[0].stage.graph is graph and plan.cp == 1 else None
    single_s, single_fits = _single_gpu(graph, dev, options, plan, whole)
    report = _report(graph, plan, dev, ic, runs, stages, links, (single_s, single_fits), request)
    return _with_memory_assumptions(report, plan, each, precision, runs[0].time.report.assumptions)


def comm_bytes(plan: ParallelPlan, each: mem.PerParam | None) -> tuple[float, float]:
    """(bytes per parameter a gradient reduction moves, bytes per parameter a parameter gather moves): the stored
    dtypes, or under FSDP a MixedPrecisionPolicy's ``param_dtype`` and ``reduce_dtype`` (which defaults to the
    param dtype, as torch's does)."""
    from perfpredict.core.ops import DTYPE_BYTES

    if each is None:
        return 0.0, 0.0
    gather = DTYPE_BYTES[plan.fsdp_param_dtype] if plan.fsdp and plan.fsdp_param_dtype else each.gathered
    reduce = each.gradients
    if plan.fsdp and plan.fsdp_reduce_dtype:
        reduce = DTYPE_BYTES[plan.fsdp_reduce_dtype]
    elif plan.fsdp and plan.fsdp_param_dtype and not plan.fsdp_param_dtype.startswith("float8"):
        reduce = DTYPE_BYTES[plan.fsdp_param_dtype]
    return reduce, gather


#: the single-GPU report's assumptions a rank's memory rests on too
_RANK_ASSUMPTIONS = ("activation checkpointing", "fine-tuning", "float8", "optimizer step", "power limit")


def _with_memory_assumptions(report, plan, each, precision, rank_assumptions) -> ParallelReport:
    """The report with what its memory per rank rests on: the strategy's bytes per parameter and their sharding,
    and the rank's training options (checkpointing, LoRA, float8, the optimizer step, a power cap)."""
    import dataclasses

    extra = {"memory": mem.describe(plan, each, precision)} if each is not None else {}
    extra.update({k: rank_assumptions[k] for k in _RANK_ASSUMPTIONS if k in rank_assumptions})
    return dataclasses.replace(report, assumptions={**report.assumptions, **extra})


def _single_gpu(graph, device, options: Request, plan: ParallelPlan, single=None) -> tuple[float, bool]:
    """Seconds for one GPU to run the whole global batch (gradient accumulation over dp x microbatches
    micro-batches, one optimizer step), and whether one micro-batch fits on it. ``single``: the whole graph's
    report when it is already known."""
    single = single or rank_report(graph, device, options)
    total_s = single.latency_ms.value / 1e3
    optimizer_s = min(analytical_node_s(graph, device, options)[1], total_s) if graph.phase == "training" else 0.0
    micro_batches = plan.microbatches * plan.dp
    return micro_batches * (total_s - optimizer_s) + optimizer_s, single.fits_in_memory


def _report(graph, plan, dev, ic, runs, stages, links, single, request) -> ParallelReport:
    from perfpredict.parallel import recompute, trainer_metrics
    from perfpredict.parallel.simulate import bubble_s, step_s
    from perfpredict.parallel.structure import backward_start

    m = plan.microbatches
    training = graph.phase == "training"
    step = step_s(runs, plan)
    slowest = max(runs, key=lambda r: r.microbatch_s)
    bubble = bubble_s(runs, plan)
    redo = m * slowest.recompute_s
    compute = m * (slowest.time.forward_s + slowest.time.backward_s) + slowest.time.optimizer_s  # recompute inside
    exposed = max(step - compute - bubble, 0.0)
    ring = slowest.ring.send_s_per_microbatch if slowest.ring else 0.0
    comm = m * (slowest.tp_forward_s + slowest.tp_backward_s + slowest.p2p_s + ring) + slowest.dp.comm_s_per_step
    global_batch = graph.batch_size * m * plan.dp
    single_s, single_fits = single
    peak = max(s.memory.total_bytes for s in stages)
    efficiency = single_s / (plan.world_size * step) if step else 0.0
    rank = slowest.time.report.timeline
    host_note = host_bound_note(rank, plan, efficiency)
    warn = _warnings(plan, stages, dev, links, graph, request.optimizer)
    for text in warn:
        warnings.warn(text, stacklevel=3)
    start = backward_start(graph)
    trainer = trainer_metrics.metrics(
        graph,
        plan,
        step,
        recompute.flops_per_microbatch(runs, plan.tp) if training else 0.0,
        dev,
        trainer_metrics.compute_dtype(graph, request.precision, request),
        request.tf32,
        start,
    )
    host = m * _host_idle_s(rank) / plan.cp
    return ParallelReport(
        model_name=request.model_name or graph.name or "model",
        device=dev.name,
        phase=graph.phase,
        plan=plan.to_dict(),
        world_size=plan.world_size,
        nodes=plan.nodes,
        micro_batch_size=graph.batch_size,
        global_batch_size=global_batch,
        seq_len=graph.seq_len,
        dtype=graph.dtype,
        precision=request.precision,
        step_ms=step * 1e3,
        compute_ms=compute * 1e3,
        communication_ms=comm * 1e3,
        exposed_communication_ms=exposed * 1e3,
        exposed_share=exposed / step if step else 0.0,
        bubble_fraction=idle_share(pipeline_bubble(plan, slowest)),
        throughput_per_s=global_batch / step if step else 0.0,
        single_gpu_step_ms=single_s * 1e3,
        scaling_efficiency=efficiency,
        peak_memory_bytes=peak,
        device_memory_bytes=dev.memory_bytes,
        fits_in_memory=all(s.fits_in_memory for s in stages),
        single_gpu_fits_in_memory=single_fits,
        stages=stages,
        collectives=build.summaries(slowest, plan, links),
        interconnect=ic.describe(),
        assumptions=build.assumptions(plan, links, ic.describe(), training),
        warnings=tuple(warn),
        bound=step_bound(rank, exposed, compute),
        rank_timeline=rank,
        notes=(host_note,) if host_note else (),
        bubble_over_compute=pipeline_bubble(plan, slowest),
        trainer=trainer,
        step_split=trainer_metrics.split(step, exposed, bubble, redo, host),
    )


def _host_idle_s(timeline) -> float:
    """Seconds per microbatch the rank's GPU waits on the host (its wall time beyond its device time)."""
    if timeline is None:
        return 0.0
    return max(timeline.wall_ms - timeline.device_ms, 0.0) / 1e3


def pipeline_bubble(plan: ParallelPlan, slowest=None) -> float:
    """The schedule's bubble over the ideal compute, with equal stages: (p-1)/m for GPipe and 1F1B, (p-1)/(v m)
    interleaved, ZB-1P's share of it from the slowest stage's forward, backward and weight-gradient times."""
    from perfpredict.parallel import schedules
    from perfpredict.parallel.simulate import stage_times

    if plan.pp == 1:
        return 0.0
    share = schedules.zero_bubble_share(stage_times([slowest])[0]) if slowest is not None else 1 / 3
    return schedules.bubble_over_compute(plan.schedule, plan.pp, plan.microbatches, plan.virtual_stages, share)


def _warnings(plan: ParallelPlan, stages, dev, links, graph, optimizer: str = "") -> list[str]:
    phase, batch, dtype = graph.phase, graph.batch_size, graph.dtype
    out = []
    if links.tp.nodes > 1:
        out.append(
            f"tp={plan.tp} spans nodes ({plan.gpus_per_node} GPUs each): tensor-parallel all-reduces then "
            "run over the network on the critical path; keep tp within a node (a divisor of the node size)"
        )
    if plan.pp > 1 and plan.microbatches < plan.pp:
        out.append(
            f"microbatches={plan.microbatches} < pp={plan.pp}: the pipeline is idle "
            f"{idle_share(pipeline_bubble(plan)):.0%} of the step; use at least {plan.pp} microbatches (4x is common)"
        )
    from perfpredict.core.memory_advice import Levers, memory_warning

    levers = Levers(
        batch=batch,
        dtype=dtype,
        half_dtype="bfloat16" if dev.supports_dtype("bfloat16") else "float16",
        tp=plan.tp,
        dp=plan.dp,
        shard_stage=plan.shard_stage,
        zero=plan.zero_stage > 0 and not plan.fsdp,
        multi_gpu=dev.kind == "gpu",
    )
    for s in stages:
        m = s.memory
        text = memory_warning(
            m.total_bytes,
            dev.memory_bytes,
            phase,
            {
                "weights": m.weights_bytes,
                "gradients": m.gradients_bytes,
                "optimizer state": m.optimizer_state_bytes,
                "optimizer temporaries": m.optimizer_temporaries_bytes,
                "activations": m.activations_bytes,
            },
            optimizer=optimizer,
            where=f"stage {s.stage} on each {dev.name}: " if len(stages) > 1 else f"each {dev.name}: ",
            levers=levers,
        )
        if text:
            out.append(text)
    return out
