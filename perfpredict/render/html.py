"""HTML rendering of a PerfReport: one self-contained page (inline CSS, no scripts, no external links).

The page shows what the terminal table shows; the rows come from the same helpers in
:mod:`perfpredict.render.text`. ``extra_sections`` embeds trusted HTML such as an inline SVG roofline plot.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from perfpredict.core.errors import InvalidInputError
from perfpredict.render.limits_text import bound_reason, host_bound_advice, timeline_lines, trainer_lines
from perfpredict.render.text import (
    GROUP_COLUMNS,
    block_lines,
    coverage_line,
    estimate_label,
    group_row,
    header_lines,
    kind_rows,
    kinds_title,
    mig_columns,
    mig_recommendation,
    mig_rows,
    mig_targets,
    ops_title,
    sorted_ops,
    summary_rows,
    unknown_op_counts,
)

if TYPE_CHECKING:
    from perfpredict.core.report import PerfReport

REPORT_SUFFIXES = (".json", ".html", ".htm", ".txt")

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 72rem;
       color: #1d232a; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.label { display: inline-block; background: #fff4d6; border: 1px solid #e5c35c; border-radius: 4px;
         padding: .1rem .5rem; font-size: .9rem; }
dl.run { display: grid; grid-template-columns: max-content auto; gap: .15rem 1rem; }
dl.run dt { font-weight: 600; } dl.run dd { margin: 0; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; }
th, td { border-bottom: 1px solid #dde1e6; padding: .3rem .5rem; text-align: left; vertical-align: top; }
th { background: #f3f5f7; } td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
tr.bad td { color: #b42318; font-weight: 600; } tr.dim td { color: #7a828c; }
.bar { background: #4f7cff; height: .6rem; display: inline-block; vertical-align: middle; margin-right: .3rem; }
code { font-size: .85rem; overflow-wrap: anywhere; }
.warn { color: #8a5a00; } .note { color: #555e68; } .rec { font-weight: 600; }
footer { margin-top: 2rem; font-size: .8rem; color: #7a828c; }
"""


def _table(
    columns: tuple[str, ...], rows: list[tuple[str, ...]], numeric: set[str] = frozenset(), row_class=None
) -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cls = row_class(row) if row_class else ""
        cells = "".join(
            f'<td class="num">{escape(v)}</td>' if c in numeric else f"<td>{escape(v)}</td>"
            for c, v in zip(columns, row)
        )
        body.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _header(report: PerfReport) -> str:
    pairs = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in header_lines(report))
    return (
        f"<h1>perfpredict: {escape(report.model_name)} on {escape(report.device)}</h1>"
        f'<p><span class="label">{escape(estimate_label(report))}</span></p><dl class="run">{pairs}</dl>'
    )


def _summary(report: PerfReport) -> str:
    rows = summary_rows(report)
    columns = ("metric", "value", "interval [low, high]", "detail")
    return "<h2>Predicted performance</h2>" + _table(
        columns,
        rows,
        numeric={"value", "interval [low, high]"},
        row_class=lambda r: "bad" if r[0] == "Peak memory" and not report.fits_in_memory else "",
    )


def _timeline(report: PerfReport) -> str:
    """The device, host and wall time, the bound, and (host-bound) what the other modes would take; then a training
    step as trainers state it (throughput per GPU, MFU, HFU, the step split)."""
    trainer = "".join(f"<p>{escape(line)}</p>" for line in trainer_lines(report))
    trainer = f'<section id="trainer">{trainer}</section>' if trainer else ""
    lines = timeline_lines(report)
    if not lines:
        return trainer
    t = report.timeline
    rows = [(t.mode, f"{t.device_ms:.3g} ms", f"{t.host_ms:.3g} ms", f"{t.wall_ms:.3g} ms", t.bound or "-")]
    table = _table(("mode", "device", "host", "wall", "bound"), rows, numeric={"device", "host", "wall"})
    reason = bound_reason(t, report.device, report.phase)
    advice = host_bound_advice(t)
    return (
        f'<h2>What limits the run</h2><section id="timeline">{table}<p>{escape(lines[0])}</p>'
        + (f'<p id="bound-reason">{escape(reason)}</p>' if reason else "")
        + (f'<p class="rec" id="host-bound">{escape(advice)}</p>' if advice else "")
        + "</section>"
        + trainer
    )


def _ops(report: PerfReport, top_ops: int | None) -> str:
    from perfpredict.core.breakdown import group_ops

    ops = sorted_ops(report, top_ops)
    if not ops:
        return ""
    head = "".join(f"<th>{escape(c)}</th>" for c in GROUP_COLUMNS)
    body = []
    for group in group_ops(ops):  # identical ops (one per repeated layer) as one row with their count
        cells = group_row(group)
        # The share bar is drawn with CSS width alone, so the page needs no script or image.
        bar = f'<span class="bar" style="width:{max(0.0, min(group.share, 1.0)) * 6:.2f}rem"></span>'
        tds = [
            f"<td>{escape(cells[0])}</td>",
            f"<td><code>{escape(cells[1])}</code></td>",
            f"<td><code>{escape(cells[2])}</code></td>",
            *(f'<td class="num">{escape(c)}</td>' for c in cells[3:6]),
            f'<td class="num">{bar}{escape(cells[6])}</td>',
            f"<td>{escape(cells[7])}</td>",
            f'<td class="num">{escape(cells[8])}</td>',
        ]
        body.append(f"<tr>{''.join(tds)}</tr>")
    kinds = _table(("op kind", "ops", "time", "share"), kind_rows(report), numeric={"ops", "time", "share"})
    blocks = "".join(f"<li>{escape(line)}</li>" for line in block_lines(report))
    return (
        f"<h2>{escape(kinds_title(report))}</h2>{kinds}"
        + (f"<h2>Repeated blocks</h2><ul>{blocks}</ul>" if blocks else "")
        + f"<h2>{escape(ops_title(report, len(ops)))}; identical ops grouped</h2>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _mig(report: PerfReport) -> str:
    if report.mig is None:
        return ""
    table = _table(
        mig_columns(report),
        mig_rows(report),
        numeric={"memory", "latency", "throughput", "instances/GPU"},
        row_class=lambda r: "" if r[2] == "yes" else "dim",
    )
    return (
        f"<h2>MIG profiles on {escape(report.mig.device)}</h2><p>{escape(mig_targets(report))}</p>{table}"
        f'<p class="rec">{escape(mig_recommendation(report))}</p>'
    )


def _coverage(report: PerfReport) -> str:
    parts = [f"<h2>Coverage</h2><p>{escape(coverage_line(report))}</p>"]
    unknown = unknown_op_counts(report)
    if unknown:
        items = "".join(f"<li><code>{escape(t)}</code> x{n}</li>" for t, n in sorted(unknown.items()))
        parts.append(f"<p>Ops without a cost model among the listed ops:</p><ul>{items}</ul>")
    if report.assumptions:
        parts.append(
            "<h2>Assumptions</h2><ul>"
            + "".join(f"<li><b>{escape(k)}</b>: {escape(v)}</li>" for k, v in report.assumptions.items())
            + "</ul>"
        )
    if report.warnings:
        parts.append(
            "<h2>Warnings</h2><ul>" + "".join(f'<li class="warn">{escape(w)}</li>' for w in report.warnings) + "</ul>"
        )
    if report.notes:
        parts.append(
            "<h2>Notes</h2><ul>" + "".join(f'<li class="note">{escape(n)}</li>' for n in report.notes) + "</ul>"
        )
    return "".join(parts)


def render_html(report: PerfReport, extra_sections: dict[str, str] | None = None, top_ops: int | None = 25) -> str:
    """One self-contained HTML page for the report.

    ``extra_sections`` maps a section title (escaped) to trusted HTML inserted as is, e.g. an inline ``<svg>``.
    ``top_ops`` limits the per-op table as in :func:`perfpredict.render.text.render_text`.
    """
    extra = "".join(
        f"<section><h2>{escape(title)}</h2>{body}</section>" for title, body in (extra_sections or {}).items()
    )
    title = escape(f"perfpredict: {report.model_name} on {report.device}")
    body = (
        _header(report)
        + _summary(report)
        + _timeline(report)
        + _ops(report, top_ops)
        + _mig(report)
        + extra
        + _coverage(report)
        + f"<footer>perfpredict report, schema version {report.schema_version}. Every number here is a "
        f"prediction, not a measurement.</footer>"
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<style>{_CSS}</style></head><body>{body}</body></html>\n"
    )


def write_report(report: PerfReport, path: str | Path) -> Path:
    """Write the report as JSON, HTML or text, chosen by the file suffix; returns the path written."""
    from perfpredict.render.text import render_text

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in REPORT_SUFFIXES:
        raise InvalidInputError(
            f"cannot write a report to {str(path)!r}: unknown suffix {suffix!r}; "
            f"use one of {', '.join(REPORT_SUFFIXES)}"
        )
    if suffix == ".json":
        text = report.to_json() + "\n"
    elif suffix in (".html", ".htm"):
        text = render_html(report)
    else:
        text = render_text(report, top_ops=None)
    path.write_text(text, encoding="utf-8")
    return path
