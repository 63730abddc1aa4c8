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
from perfpredict.parallel.plan import ParallelPlan, check_phase, parse_plan
from perfpredict.parallel.report import ParallelReport
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
    ``parallel`` says (``{"dp", "tp", "pp", "fsdp", "sp", "microbatches", "zero_stage", "gpus_per_node",
    "bucket_mb"}``; None: ``request.parallel``), run as ``request`` with ``fields`` (Request field names) changed:
    ``device``, ``predictor``, ``optimizer``, ``mode``, ``tf32``, ``host``, ``model_name``, and ``precision``, a recipe
    of perfpredict.hardware.precision or ``master-bf16``/``master-fp16`` (the ZeRO paper's 2+2+12 bytes per
    parameter; None keeps the graph's dtype). ``interconnect``: an ``Interconnect`` to use in place of the
    catalog's (another cluster)."""
    from perfpredict.hardware.devices import get_device
    from perfpredict.parallel.interconnect import interconnect_for
    from perfpredict.parallel.simulate import links_of, run_stages, step_s

    request = (request or Request()).but(**fields)
    plan = parse_plan(parallel if parallel is not None else request.parallel)
    training = graph.phase == "training"
    check_phase(plan, graph.phase)
    mem.check_options(plan, request)
    from perfpredict.hardware.power import power_limited

    dev = power_limited(
        get_device(request.device) if isinstance(request.device, str) else request.device, request.power_limit_w
    )
    ic = interconnect or interconnect_for(dev)
    precision, optimizer = request.precision, request.optimizer
    each = mem.per_param(graph, precision, optimizer, plan, request) if training else None
    options = rank_request(request, training)
    links = links_of(ic, plan)
    runs = run_stages(graph, plan, dev, options, links, each.gradients if each else 0.0, each.gathered if each else 0.0)
    step = step_s(runs, plan.microbatches)
    memories = [build.rank_memory(r, plan, each, dev) for r in runs]
    stages = tuple(build.stage_report(r, plan, m, dev) for r, m in zip(runs, memories))
    slowest = max(runs, key=lambda r: r.microbatch_s)
    # with neither tp nor pp the one stage's graph is the whole graph: its report is the single GPU's too
    whole = runs[0].time.report if len(runs) == 1 and runs[0].stage.graph is graph else None
    single_s, single_fits = _single_gpu(graph, dev, options, plan, whole)
    report = _report(
        graph,
        plan,
        dev,
        ic,
        runs,
        slowest,
        stages,
        links,
        step,
        single_s,
        single_fits,
        request.model_name,
        precision,
        optimizer,
    )
    return _with_memory_assumptions(report, plan, each, precision, runs[0].time.report.assumptions)


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


def _report(
    graph, plan, dev, ic, runs, slowest, stages, links, step, single_s, single_fits, model_name, precision, optimizer=""
) -> ParallelReport:
    m = plan.microbatches
    compute = m * (slowest.time.forward_s + slowest.time.backward_s) + slowest.time.optimizer_s
    exposed = max(step - compute - _bubble_s(runs, m), 0.0)
    comm = m * (slowest.tp_forward_s + slowest.tp_backward_s + slowest.p2p_s) + slowest.dp.comm_s_per_step
    global_batch = graph.batch_size * m * plan.dp
    peak = max(s.memory.total_bytes for s in stages)
    efficiency = single_s / (plan.world_size * step) if step else 0.0
    rank = slowest.time.report.timeline
    host_note = host_bound_note(rank, plan, efficiency)
    warn = _warnings(plan, stages, dev, links, graph.phase, optimizer)
    for text in warn:
        warnings.warn(text, stacklevel=3)
    return ParallelReport(
        model_name=model_name or graph.name or "model",
        device=dev.name,
        phase=graph.phase,
        plan=plan.to_dict(),
        world_size=plan.world_size,
        nodes=plan.nodes,
        micro_batch_size=graph.batch_size,
        global_batch_size=global_batch,
        seq_len=graph.seq_len,
        dtype=graph.dtype,
        precision=precision,
        step_ms=step * 1e3,
        compute_ms=compute * 1e3,
        communication_ms=comm * 1e3,
        exposed_communication_ms=exposed * 1e3,
        exposed_share=exposed / step if step else 0.0,
        bubble_fraction=pipeline_bubble(plan),
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
        assumptions=build.assumptions(plan, links, ic.describe(), graph.phase == "training"),
        warnings=tuple(warn),
        bound=step_bound(rank, exposed, compute),
        rank_timeline=rank,
        notes=(host_note,) if host_note else (),
    )


def pipeline_bubble(plan: ParallelPlan) -> float:
    from perfpredict.parallel.pipeline_parallel import bubble_fraction

    return bubble_fraction(plan.pp, plan.microbatches) if plan.pp > 1 else 0.0


def _bubble_s(runs, microbatches: int) -> float:
    """The slowest stage's idle time in the 1F1B schedule (the others' fill and drain)."""
    times = [r.microbatch_s for r in runs]
    return sum(times) - max(times)


def _warnings(plan: ParallelPlan, stages, dev, links, phase: str = "training", optimizer: str = "") -> list[str]:
    out = []
    if links.tp.nodes > 1:
        out.append(
            f"tp={plan.tp} spans nodes ({plan.gpus_per_node} GPUs each): tensor-parallel all-reduces then "
            "run over the network on the critical path; keep tp within a node (a divisor of the node size)"
        )
    if plan.pp > 1 and plan.microbatches < plan.pp:
        out.append(
            f"microbatches={plan.microbatches} < pp={plan.pp}: the pipeline is idle "
            f"{pipeline_bubble(plan):.0%} of the step; use at least {plan.pp} microbatches (4x is common)"
        )
    from perfpredict.core.memory_advice import memory_warning

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
            sharded=plan.dp > 1 and plan.shard_stage >= 3,
        )
        if text:
            out.append(text)
    return out
