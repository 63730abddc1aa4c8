"""A ``DeployReport`` for people: the ranked table (``perfpredict deploy``), the frontier plot, an HTML page."""

from __future__ import annotations

from html import escape
from typing import Any

from perfpredict.llm.deploy_search import MEETS, DeployReport, Outcome

COLUMNS = ("configuration", "verdict", "replicas", "GPUs", "$/hour", "$ per 1M tokens", "TTFT", "TPOT", "goodput/s")


def verdict_line(r: DeployReport) -> str:
    best = r.best
    if best is None:
        return f"no configuration meets {r.slo} at {r.rate_per_s:g} requests/s: relax the SLO or widen the grid"
    return (
        f"cheapest meeting {r.slo} at {r.rate_per_s:g} requests/s: {best.label} x {best.replicas} replica(s) "
        f"({best.gpus} GPUs, ${best.usd_per_hour:.2f}/hour, ${best.cost_per_million_tokens_usd:.3f} per 1M tokens)"
    )


def rows(r: DeployReport) -> list[tuple[str, ...]]:
    def num(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    out = []
    for o in r.outcomes:
        verdict = o.status if not o.reason or o.status == MEETS else f"{o.status}: {o.reason}"
        out.append(
            (
                o.label,
                verdict,
                num(o.replicas, "d"),
                num(o.gpus, "d"),
                num(o.usd_per_hour, ".2f"),
                num(o.cost_per_million_tokens_usd, ".3f"),
                num(o.ttft_ms, ".1f") + (" ms" if o.ttft_ms is not None else ""),
                num(o.tpot_ms, ".2f") + (" ms" if o.tpot_ms is not None else ""),
                num(o.goodput_per_s, ".2f"),
            )
        )
    return out


def print_deploy(r: DeployReport, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    console.print(Text(f"perfpredict deploy: {r.model_name}, {r.load}", style="bold"))
    console.print(Text(verdict_line(r), style="green" if r.best else "red"))
    table = Table(title="Configurations, cheapest first (latencies at the SLO's percentile, per replica)",
                  title_justify="left")  # fmt: skip
    for name in COLUMNS:
        table.add_column(name, justify="left" if name in ("configuration", "verdict") else "right")
    for row in rows(r):
        table.add_row(*row)
    console.print(table)
    console.print(Text("assumptions:\n" + "\n".join(f"  {k}: {v}" for k, v in r.assumptions.items()), style="cyan"))
    for n in r.notes:
        console.print(Text(f"note: {n}", style="dim"))


def frontier(outcomes: tuple[Outcome, ...]) -> list[Outcome]:
    """The configurations meeting the SLO that no other beats on both cost and TPOT, cheapest first."""
    meets = sorted((o for o in outcomes if o.status == MEETS), key=lambda o: (o.cost_per_million_tokens_usd, o.tpot_ms))
    out: list[Outcome] = []
    for o in meets:
        if not out or o.tpot_ms < out[-1].tpot_ms:
            out.append(o)
    return out


def frontier_svg(r: DeployReport, tpot_target_ms: float | None = None) -> str:
    """Cost per 1M tokens against TPOT at the SLO's percentile, one point per configuration that carries the load
    (the frontier joined, the cheapest starred), as inline SVG (matplotlib, as the batch-sweep plot)."""
    import io

    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.8), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    meets = [o for o in r.outcomes if o.status == MEETS]
    ax.scatter([o.tpot_ms for o in meets], [o.cost_per_million_tokens_usd for o in meets], color="#4c72b0", zorder=2)
    for o in meets:
        ax.annotate(o.label.split(",")[0], (o.tpot_ms, o.cost_per_million_tokens_usd), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")  # fmt: skip
    line = frontier(r.outcomes)
    if line:
        ax.plot([o.tpot_ms for o in line], [o.cost_per_million_tokens_usd for o in line], color="#dd8452",
                label="frontier", zorder=1)  # fmt: skip
        best = line[0]
        ax.plot([best.tpot_ms], [best.cost_per_million_tokens_usd], marker="*", markersize=14, color="#c44e52",
                linestyle="none", label="cheapest meeting the SLO")  # fmt: skip
    if tpot_target_ms is not None:
        ax.axvline(tpot_target_ms, color="grey", linestyle="--", label="TPOT target")
    ax.set_xlabel("TPOT at the SLO's percentile, ms")
    ax.set_ylabel("$ per 1M output tokens")
    ax.grid(True, alpha=0.3)
    if line or tpot_target_ms is not None:
        ax.legend(fontsize="small")
    fig.tight_layout()
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]


def render_deploy_html(r: DeployReport, tpot_target_ms: float | None = None, svg: str | None = None) -> str:
    """The page ``deploy --html`` writes (``svg``: the frontier already drawn)."""
    head = "".join(f"<th>{escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows(r))
    title = f"perfpredict deploy: {r.model_name}"
    parts = [
        f"<h1>{escape(title)}</h1><p>{escape(r.load)}</p>",
        f'<p id="verdict"><b>{escape(verdict_line(r))}</b></p>',
        svg or frontier_svg(r, tpot_target_ms),
        f'<table id="deployments"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>',
        "<h2>Assumptions</h2><ul>"
        + "".join(f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in r.assumptions.items())
        + "</ul>",
    ]
    style = "body{font-family:sans-serif;max-width:70rem;margin:2rem auto}td,th{padding:.2rem .6rem}"
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title><style>{style}</style>"
        f"</head><body>{''.join(parts)}</body></html>"
    )
