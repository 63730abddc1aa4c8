"""A ``ServingReport`` for people: the terminal's tables (``perfpredict serve-sim``) and an HTML page."""

from __future__ import annotations

from html import escape
from typing import Any

from perfpredict.llm.serving_report import ServingReport
from perfpredict.render.formats import fmt_time_ms


def title(r: ServingReport) -> str:
    gpus = f"{r.pp} x {r.tp} x {r.device}" if r.pp > 1 else f"{r.tp} x {r.device}" if r.tp > 1 else r.device
    return f"perfpredict serve-sim: {r.model_name} on {gpus} ({engine_name(r)}), {r.load}"


def engine_name(r: ServingReport) -> str:
    """The engine and its version, and its server where one fronts it ("TensorRT-LLM 0.11")."""
    from perfpredict.llm.engine_versions import ENGINE_NAMES

    behind = ", behind its OpenAI server" if r.frontend == "openai-server" else ""
    return f"{ENGINE_NAMES.get(r.engine, r.engine)} {r.engine_version}".rstrip() + behind


def latency_rows(r: ServingReport) -> list[tuple[str, str, str, str, str]]:
    """(latency, p50, p90, p99, mean) for TTFT, TPOT and end to end."""
    names = (("time to first token", r.ttft), ("time per output token", r.tpot), ("end to end", r.e2e))
    return [(n, *(fmt_time_ms(v) for v in (p.p50_ms, p.p90_ms, p.p99_ms, p.mean_ms))) for n, p in names]


def summary_rows(r: ServingReport) -> list[tuple[str, str, str]]:
    rows = [
        ("throughput", f"{r.requests_per_s:.2f} requests/s", f"{r.output_tokens_per_s:,.0f} output tokens/s"),
        (
            "goodput",
            "-" if r.goodput_per_s is None else f"{r.goodput_per_s:.2f} requests/s",
            f"meeting {r.slo}" + ("" if r.slo_met is None else f"; at that percentile: {_met(r.slo_met)}"),
        ),
        ("mean running batch", f"{r.mean_running_batch:.1f}", f"peak {r.peak_running_batch}; time-weighted over steps"),
        ("preemptions", f"{r.preemptions:,}", f"{r.steps:,} steps, {r.prefill_steps:,} with a prefill"),
        (
            "KV cache",
            f"peak {r.peak_kv_tokens:,} tokens",
            f"of {r.kv_capacity_tokens:,} the pool holds (over the replica's GPUs)",
        ),
        ("engine busy", f"{r.busy_share:.0%}", f"GPU running kernels {r.gpu_busy_share:.0%} of {r.makespan_s:.1f} s"),
        (
            "energy per token",
            f"{r.energy_per_token_j:.3f} J",
            f"per output token, {r.tp * r.pp} GPU(s), idle time included",
        ),
        (
            "cost per 1M tokens",
            "-" if r.cost_per_million_tokens_usd is None else f"${r.cost_per_million_tokens_usd:.3f}",
            "output tokens, one replica at this load",
        ),
        ("lengths", f"{r.mean_prompt_tokens:.0f} in, {r.mean_output_tokens:.0f} out", "mean tokens per request"),
    ]
    if r.cached_prompt_share:
        rows.append(("prefix cache", f"{r.cached_prompt_share:.0%}", "of the prompt tokens skipped"))
    if r.tokens_per_step != 1.0:
        rows.append(("speculative decoding", f"{r.tokens_per_step:.2f}", "tokens per sequence per decode step"))
    return rows


def _met(met: bool) -> str:
    return "met" if met else "NOT met"


def print_serving(r: ServingReport, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    console.print(Text(title(r), style="bold"))
    latency = Table(title="Latency", title_justify="left")
    for name in ("", "p50", "p90", "p99", "mean"):
        latency.add_column(name, justify="right" if name else "left")
    for row in latency_rows(r):
        latency.add_row(*row)
    console.print(latency)
    table = Table(show_header=True)
    for name in ("metric", "value", "detail"):
        table.add_column(name)
    for row in summary_rows(r):
        table.add_row(*row)
    console.print(table)
    console.print(Text("assumptions:\n" + "\n".join(f"  {k}: {v}" for k, v in r.assumptions.items()), style="cyan"))
    for w in r.warnings:
        console.print(Text(f"warning: {w}", style="yellow"))


def render_serving_html(r: ServingReport) -> str:
    def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
        cells = "".join(f"<tr>{''.join(f'<td>{escape(c)}</td>' for c in row)}</tr>" for row in rows)
        return f"<table><thead><tr>{''.join(f'<th>{escape(h)}</th>' for h in head)}</tr></thead>{cells}</table>"

    parts = [
        f"<h1>{escape(title(r))}</h1>",
        table(("latency", "p50", "p90", "p99", "mean"), latency_rows(r)),
        table(("metric", "value", "detail"), summary_rows(r)),
        "<h2>Assumptions</h2><ul>"
        + "".join(f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in r.assumptions.items())
        + "</ul>",
        "".join(f"<p>{escape(w)}</p>" for w in r.warnings),
    ]
    style = "body{font-family:sans-serif;max-width:60rem;margin:2rem auto}td,th{padding:.2rem .6rem}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title(r))}</title><style>{style}</style>"
        f"</head><body>{''.join(parts)}</body></html>"
    )
