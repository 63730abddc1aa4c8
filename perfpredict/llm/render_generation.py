"""A GenerationReport for people: a terminal view (rich) and a self-contained HTML page with tokens/s against batch.

Renderers read a report; they compute nothing the report does not hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Any

from perfpredict.llm.generation_report import GenerationReport
from perfpredict.render.formats import fmt_bytes, fmt_energy_j, fmt_rate, fmt_time_ms, fmt_usd


def summary_rows(r: GenerationReport) -> list[tuple[str, str, str]]:
    cost = "-" if r.cost_per_million_tokens_usd is None else fmt_usd(r.cost_per_million_tokens_usd)
    gpus = _gpus(r)
    n = r.tp * r.pp
    fit = (
        f"fits in {fmt_bytes(r.device_memory_bytes)}"
        if r.fits
        else f"DOES NOT FIT in {fmt_bytes(r.device_memory_bytes)}"
    )
    ttft_detail = f"prefill of {r.prompt_tokens} tokens x batch {r.batch}"
    if r.ttft_max_ms is not None and r.ttft_max_ms > r.ttft_ms * 1.01:
        ttft_detail = (
            f"mean over the batch; the last sequence's {fmt_time_ms(r.ttft_max_ms)} ({r.prefill_steps} prefill steps)"
        )
    rows = [
        ("Time to first token", fmt_time_ms(r.ttft_ms), ttft_detail),
        (
            "Time per output token",
            fmt_time_ms(r.tpot_mean_ms),
            f"mean; first {fmt_time_ms(r.tpot_first_ms)}, last {fmt_time_ms(r.tpot_last_ms)}"
            + (f"; communication {fmt_time_ms(r.tp_communication_ms)} of each step" if n > 1 else ""),
        ),
        ("End to end", fmt_time_ms(r.e2e_ms), f"{r.new_tokens} new tokens" + _engine_detail(r)),
        ("Tokens/s", fmt_rate(r.tokens_per_s, "tokens/s"), f"batch {r.batch}; {decode_alone(r)}"),
        (
            "Memory per GPU" if n > 1 else "Peak memory",
            fmt_bytes(r.peak_memory_bytes),
            _memory_detail(r) + f"; {fit}",
        ),
        ("Largest batch that fits", f"{r.max_batch:,}", f"at {r.prompt_tokens + r.new_tokens} tokens of context"),
        ("Energy per token", fmt_energy_j(r.energy_per_token_j), _energy_detail(r)),
        ("Cost per 1M tokens", cost, f"at the price of {gpus}"),
    ]
    return rows


def _energy_detail(r: GenerationReport) -> str:
    n = r.tp * r.pp
    gpus = f"all {n} GPUs" if n > 1 else ""
    if not r.power_per_gpu_w:
        return gpus
    return ", ".join(x for x in (gpus, f"{r.power_per_gpu_w:.0f} W per GPU at {r.gpu_busy_fraction:.0%} busy") if x)


def decode_alone(r: GenerationReport) -> str:
    """The decode-only rate, with the sequences it counts: those running together, never more than the KV cache
    holds (``running_batch``; a report written before it says the batch)."""
    rate = f"decode alone {fmt_rate(r.decode_tokens_per_s, 'tokens/s')}"
    running = r.running_batch or r.batch
    if running >= r.batch:
        return f"{rate} ({running:,} sequences decoding together)"
    if r.serving:
        return f"{rate} ({running:,} sequences decoding together, as many as the KV cache holds; the rest wait)"
    return f"{rate} (at most {running:,} sequences fit; the batch of {r.batch:,} does not)"


def _memory_detail(r: GenerationReport) -> str:
    if r.serving:
        return (
            f"weights {fmt_bytes(r.weights_bytes)} + KV pool {fmt_bytes(r.kv_pool_bytes)} ({r.kv_capacity_tokens:,} "
            f"tokens; this batch used {fmt_bytes(r.kv_cache_bytes)} at its peak) + start-up activations "
            f"{fmt_bytes(r.activations_bytes)} + runtime {fmt_bytes(r.runtime_bytes)}"
        )
    return (
        f"weights {fmt_bytes(r.weights_bytes)} + KV cache {fmt_bytes(r.kv_cache_bytes)} + activations "
        f"{fmt_bytes(r.activations_bytes)} + runtime {fmt_bytes(r.runtime_bytes)}"
    )


def _engine_detail(r: GenerationReport) -> str:
    if not r.serving:
        return ""
    preempted = f", {r.preemptions} preemption(s)" if r.preemptions else ""
    busy = f"; GPU busy {r.gpu_busy_fraction:.0%} of the time" if r.gpu_busy_fraction else ""
    return (
        f"; {r.prefill_steps} prefill and {r.decode_steps} decode steps, host {fmt_time_ms(r.host_ms)} not hidden "
        f"behind the GPU{preempted}{busy}"
    )


def sweep_rows(r: GenerationReport) -> list[tuple[str, str, str, str, str]]:
    return [
        (
            f"{p.batch:,}",
            fmt_time_ms(p.step_ms),
            fmt_rate(p.tokens_per_s, "tokens/s"),
            p.bound,
            "yes" if p.fits else "no",
        )
        for p in r.batch_sweep
    ]


def bound_line(r: GenerationReport) -> str:
    turn = r.memory_bound_below_batch
    host = r.host_bound_up_to_batch
    if host is not None:
        hint = "" if r.mode in ("cuda_graph", "compiled_cuda_graph") else "; --mode cuda_graph or compiled cuts it"
        span = "over the whole sweep" if host == r.batch_sweep[-1].batch else f"up to batch {host:,}"
        return (
            f"decode is host-bound {span}: launching the step's kernels takes longer than running them, so the "
            f"step time barely moves with the batch{hint}"
        )
    return (
        "decode turns compute-bound at batch " + f"{turn:,}"
        if turn
        else "decode stays memory-bound over the sweep (weights, then the KV cache, are streamed every step)"
    )


def print_generation(r: GenerationReport, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    console.print(Text(f"perfpredict generate: {r.model_name} on {_gpus(r)} ({_engine_name(r)})", style="bold"))
    console.print(
        Text(
            f"prompt {r.prompt_tokens}  new {r.new_tokens}  batch {r.batch}  dtype {r.dtype}  weights "
            f"{r.weights}  kv {r.kv_dtype}  cache {r.cache}  mode {r.mode}  predictor {r.predictor}"
        )
    )
    table = Table(show_header=True)
    for name in ("metric", "value", "detail"):
        table.add_column(name)
    for row in summary_rows(r):
        table.add_row(*row)
    console.print(table)
    title = (
        "Decode steps of the sequences running together (GPU, and the host time not hidden behind it)"
        if r.serving
        else "Decode steps (predicted at these cache lengths, interpolated between)"
    )
    steps = Table(title=title, title_justify="left")
    for name in ("context", "step", "device", "host", "weight-streaming bound"):
        steps.add_column(name, justify="right")
    for p in r.decode_points:
        steps.add_row(
            f"{p.context:,}",
            fmt_time_ms(p.step_ms),
            fmt_time_ms(p.device_ms),
            fmt_time_ms(p.host_ms),
            fmt_time_ms(p.weight_streaming_ms),
        )
    console.print(steps)
    sweep = Table(title=f"Tokens/s against batch ({bound_line(r)})", title_justify="left")
    for name in ("batch", "step", "tokens/s", "bound", "fits"):
        sweep.add_column(name, justify="right")
    for row in sweep_rows(r):
        sweep.add_row(*row)
    console.print(sweep)
    console.print(Text("assumptions:\n" + "\n".join(f"  {k}: {v}" for k, v in r.assumptions.items()), style="cyan"))
    for w in r.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))
    for n in r.notes:
        console.print(Text(f"note: {n}", style="dim"))


def _gpus(r: GenerationReport) -> str:
    """``tp x device``, or ``pp x tp x device`` with pipeline stages."""
    if r.pp > 1:
        return f"{r.pp} x {r.tp} x {r.device}"
    return f"{r.tp} x {r.device}" if r.tp > 1 else r.device


def _engine_name(r: GenerationReport) -> str:
    """The engine and its version (a report written before versions says "vLLM-class engine")."""
    if not r.serving:
        return "transformers generate"
    if not r.engine_version:
        return "vLLM-class engine"
    from perfpredict.llm.engine_versions import ENGINE_NAMES

    behind = ", behind its OpenAI server" if r.frontend == "openai-server" else ""
    return f"{ENGINE_NAMES.get(r.engine, r.engine)} {r.engine_version}{behind}"


def render_generation_html(r: GenerationReport) -> str:
    def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
        cells = "".join(f"<tr>{''.join(f'<td>{escape(c)}</td>' for c in row)}</tr>" for row in rows)
        return f"<table><thead><tr>{''.join(f'<th>{escape(h)}</th>' for h in head)}</tr></thead>{cells}</table>"

    title = f"perfpredict generate: {r.model_name} on {_gpus(r)} ({_engine_name(r)})"
    parts = [
        f"<h1>{escape(title)}</h1>",
        table(("metric", "value", "detail"), summary_rows(r)),
        f"<h2>Tokens/s against batch</h2><p>{escape(bound_line(r))}</p>",
        _plot(r),
        table(("batch", "step", "tokens/s", "bound", "fits"), sweep_rows(r)),
        "<h2>Assumptions</h2><ul>"
        + "".join(f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in r.assumptions.items())
        + "</ul>",
        "".join(f"<p>{escape(n)}</p>" for n in (*r.warnings, *r.notes)),
    ]
    style = "body{font-family:sans-serif;max-width:60rem;margin:2rem auto}td,th{padding:.2rem .6rem}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{style}</style>"
        f"</head><body>{''.join(parts)}</body></html>"
    )


def _plot(r: GenerationReport) -> str:
    return batch_sweep_svg([r])


def batch_sweep_svg(reports: Sequence[GenerationReport]) -> str:
    """Tokens/s against batch as inline SVG (matplotlib, a core dependency): one line per report, labelled by its
    GPUs and engine where there are several (the web page's comparison)."""
    import io

    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.5), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    for r in reports:
        xs = [p.batch for p in r.batch_sweep]
        ax.plot(xs, [p.tokens_per_s for p in r.batch_sweep], marker="o", label=f"{_gpus(r)} ({_engine_name(r)})")
        for p in r.batch_sweep:
            if not p.fits:
                ax.plot([p.batch], [p.tokens_per_s], marker="x", color="red")
    if len(reports) > 1:
        ax.legend(fontsize="small")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch (red x: does not fit)")
    ax.set_ylabel("tokens/s")
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]
