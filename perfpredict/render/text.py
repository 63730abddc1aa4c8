"""Terminal rendering of a PerfReport with rich: a header, the headline table, per-op contributors, MIG advice.

Renderers never compute: every number shown is a field of the report, only formatted here. The ``fmt_*`` helpers
are shared with :mod:`perfpredict.render.html` so both outputs read the same.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from perfpredict.render.formats import (
    NA,
    fmt_bytes,
    fmt_carbon_g,
    fmt_count,
    fmt_energy_j,
    fmt_interval,
    fmt_power_w,
    fmt_rate,
    fmt_share,
    fmt_sig,
    fmt_time_ms,
    fmt_usd,
)
from perfpredict.render.limits_text import timeline_line, trainer_lines

if TYPE_CHECKING:
    from perfpredict.core.report import OpContribution, PerfReport, Prediction


def estimate_label(report: PerfReport) -> str:
    """What kind of number this is, so nobody mistakes a roofline estimate for a measurement."""
    name = report.predictor
    version = report.latency_ms.predictor_version
    if name == "analytical":
        return f"analytical estimate (roofline model v{version}, not a measurement)"
    return f"{name} estimate (learned model v{version}, not a measurement)"


def throughput_unit(report: PerfReport) -> str:
    unit = report.throughput_per_s.unit
    return unit if "/" in unit else "samples/s"


def header_lines(report: PerfReport) -> list[tuple[str, str]]:
    """(label, value) pairs describing the run; the HTML renderer shows the same pairs."""
    seq = NA if report.seq_len is None else str(report.seq_len)
    return [
        ("model", report.model_name),
        ("device", f"{report.device} ({report.device_source} specs, {fmt_bytes(report.device_memory_bytes)})"),
        ("phase", report.phase),
        ("batch", str(report.batch_size)),
        ("seq", seq),
        ("dtype", report.dtype),
        ("predictor", f"{report.predictor} v{report.latency_ms.predictor_version}"),
        ("kind", estimate_label(report)),
    ]


def memory_terms(report: PerfReport) -> str:
    """The peak's terms, each named as it is (``MemoryBreakdown.rows``); they sum to the peak."""
    return " + ".join(f"{name} {fmt_bytes(v)}" for name, v in report.memory.rows() if v) or "0 B"


def fits_text(report: PerfReport) -> str:
    from perfpredict.core.memory_advice import TIGHT_SHARE

    verdict = "fits in" if report.fits_in_memory else "DOES NOT FIT in"
    tight = report.fits_in_memory and report.memory_share > TIGHT_SHARE
    return f"{verdict} {fmt_bytes(report.device_memory_bytes)} of device memory" + (
        f" ({fmt_share(report.memory_share)} of it: tight, see the warning)" if tight else ""
    )


def summary_rows(report: PerfReport) -> list[tuple[str, str, str, str]]:
    """(metric, value, [low, high], detail) rows of the headline table, shared with the HTML renderer."""
    r = report
    rate = throughput_unit(r)
    per_call = "forward pass" if r.phase == "inference" else "forward + backward + optimizer step"
    price = NA if r.price_usd_per_hour is None else f"{fmt_usd(r.price_usd_per_hour)}/h"

    def row(label: str, pred: Prediction, fmt, detail: str, interval_fmt=None) -> tuple[str, str, str, str]:
        return label, fmt(pred.value), fmt_interval(pred, interval_fmt or fmt), detail

    return [
        row("Latency", r.latency_ms, fmt_time_ms, f"per call ({per_call})"),
        *recompute_rows(r),
        row(
            "Throughput",
            r.throughput_per_s,
            lambda v: fmt_rate(v, rate),
            f"{rate}, batch {r.batch_size}",
            lambda v: fmt_rate(v, ""),
        ),
        row("Peak memory", r.peak_memory_bytes, fmt_bytes, f"{memory_terms(r)}; {fits_text(r)}"),
        row("Energy / call", r.energy_j, fmt_energy_j, "one call"),
        row("Energy / sample", r.energy_per_sample_j, fmt_energy_j, f"energy per call / batch {r.batch_size}"),
        row("Average power", r.avg_power_w, fmt_power_w, "while running"),
        row(
            "Carbon (CO2e)",
            r.carbon_g,
            fmt_carbon_g,
            f"workload: {r.workload}; grid {r.grid_intensity_g_per_kwh:g} g CO2e/kWh",
        ),
        row("Cost", r.cost_usd, fmt_usd, f"workload: {r.workload}; price {price}"),
    ]


def recompute_rows(report: PerfReport) -> list[tuple[str, str, str, str]]:
    """The activation-checkpointing recompute as a row of its own (part of the latency above it)."""
    c = report.recompute
    if c is None:
        return []
    return [
        (
            "  of which recompute",
            fmt_time_ms(c.time_ms),
            "",
            f"activation checkpointing ({c.policy}): {c.regions} region(s) recompute their forward in the backward, "
            f"{c.flops / 1e9:,.1f} GFLOP, {fmt_share(c.share)} of the latency",
        )
    ]


def sorted_ops(report: PerfReport, top_ops: int | None) -> list[OpContribution]:
    ops = sorted(report.per_op, key=lambda o: o.time_ms, reverse=True)
    return ops if top_ops is None else ops[: max(top_ops, 0)]


def op_row(op: OpContribution) -> tuple[str, ...]:
    return (
        op.op,
        op.target,
        op.module_path or "-",
        fmt_time_ms(op.time_ms),
        fmt_share(op.share),
        op.bound,
        fmt_sig(op.arithmetic_intensity_flop_per_byte),
    )


OP_COLUMNS = ("op", "target", "module path", "time", "share", "bound", "FLOP/byte")
GROUP_COLUMNS = ("op", "target", "module path", "count", "time each", "time", "share", "bound", "FLOP/byte")


def group_row(group) -> tuple[str, ...]:
    """A row of identical ops (``perfpredict.core.breakdown.group_ops``): count, time of one, time and share of all."""
    op = group.first
    return (
        op.op,
        op.target,
        group.module_path or "-",
        f"{group.count}",
        fmt_time_ms(op.time_ms),
        fmt_time_ms(group.time_ms),
        fmt_share(group.share),
        op.bound,
        fmt_sig(op.arithmetic_intensity_flop_per_byte),
    )


MIG_COLUMNS = ("profile", "memory", "fits", "latency", "throughput", "instances/GPU", "meets targets", "reason")


def _has_targets(report: PerfReport) -> bool:
    mig = report.mig
    return mig is not None and (mig.max_latency_ms is not None or mig.min_throughput_per_s is not None)


def mig_columns(report: PerfReport) -> tuple[str, ...]:
    """The MIG table's columns; "meets targets" only when a latency or throughput target was given."""
    return MIG_COLUMNS if _has_targets(report) else tuple(c for c in MIG_COLUMNS if c != "meets targets")


def mig_rows(report: PerfReport) -> list[tuple[str, ...]]:
    if report.mig is None:
        return []
    rate = throughput_unit(report)
    targets = _has_targets(report)
    return [
        (
            o.profile,
            fmt_bytes(o.memory_bytes),
            "yes" if o.fits else "no",
            fmt_time_ms(o.latency_ms),
            fmt_rate(o.throughput_per_s, rate),
            str(o.instances_per_gpu),
            *(("yes" if o.meets_targets else "no",) if targets else ()),
            o.reason,
        )
        for o in report.mig.options
    ]


def mig_targets(report: PerfReport) -> str:
    mig = report.mig
    if mig is None:
        return ""
    targets = []
    if mig.max_latency_ms is not None:
        targets.append(f"latency <= {fmt_time_ms(mig.max_latency_ms)}")
    if mig.min_throughput_per_s is not None:
        targets.append(f"throughput >= {fmt_rate(mig.min_throughput_per_s, throughput_unit(report))}")
    return "targets: " + ", ".join(targets) if targets else "no latency or throughput target given"


def mig_recommendation(report: PerfReport) -> str:
    mig = report.mig
    if mig is None:
        return ""
    if mig.recommended:
        return f"Recommended MIG profile on {mig.device}: {mig.recommended} ({mig.reason})"
    return f"No MIG profile on {mig.device} is recommended: {mig.reason}"


def coverage_line(report: PerfReport) -> str:
    g = report.graph
    return (
        f"Coverage: {report.coverage * 100:.1f}% of ops have a cost model. Graph ({g.source}): {g.nodes:,} "
        f"nodes, {g.edges:,} edges, {g.subgraphs} subgraph(s), {fmt_count(g.total_flops, 'FLOP')}, "
        f"{fmt_bytes(g.total_bytes)} moved, {fmt_count(g.param_count)} parameters"
    )


def unknown_op_counts(report: PerfReport) -> dict[str, int]:
    """Targets of the per-op rows that have no cost model (as many as the report lists)."""
    counts: dict[str, int] = {}
    for o in report.per_op:
        if o.op == "unknown":
            counts[o.target] = counts.get(o.target, 0) + 1
    return counts


def measured_line(report: PerfReport) -> str:
    """Predicted vs actual, in one line (shown when the backend measured the compiled model)."""
    m = report.measured
    if m is None:
        return ""
    cv = f", CV {m.latency_cv:.1%}" if m.latency_cv is not None else ""
    energy = f"; energy {m.energy_j:.3g} J" if m.energy_j is not None else "; energy not measurable here"
    return (
        f"Predicted vs measured on {m.device}: predicted {fmt_time_ms(report.latency_ms.value)}, measured "
        f"{fmt_time_ms(m.latency_ms)} (median of {m.runs}, min {fmt_time_ms(m.latency_min_ms)}{cv}): "
        f"error {m.latency_error_pct:+.1f}%{energy}" + (f". {m.note}" if m.note else "")
    )


def renderables(report: PerfReport, top_ops: int | None = 10) -> list[Any]:
    """The rich objects that make up the report, in order (printed by render_text and print_report)."""
    from rich.text import Text

    title = Text(f"perfpredict: {report.model_name} on {report.device}", style="bold")
    pairs = dict(header_lines(report))
    info = Text(
        "  ".join(f"{k}={pairs[k]}" for k in ("phase", "batch", "seq", "dtype", "predictor"))
        + f"\ndevice: {pairs['device']}"
    )
    label = Text(estimate_label(report), style="italic yellow")
    parts: list[Any] = [title, info, label, _summary_table(report)]
    if report.timeline is not None:
        parts.append(Text(timeline_line(report)))
    if trainer_lines(report):
        parts.append(Text("\n".join(trainer_lines(report))))
    if report.assumptions:
        parts.append(
            Text("assumptions:\n" + "\n".join(f"  {k}: {v}" for k, v in report.assumptions.items()), style="cyan")
        )
    if report.per_op and top_ops != 0:
        parts += _ops_parts(report, top_ops)
    if report.mig is not None:
        parts += [_mig_table(report), Text(mig_recommendation(report), style="bold")]
    if report.measured is not None:
        parts.append(Text(measured_line(report), style="bold"))
    parts.append(Text(coverage_line(report)))
    parts += [Text(f"warning: {w}", style="yellow") for w in report.warnings]
    parts += [Text(f"note: {n}", style="dim") for n in report.notes]
    return parts


def _plain(text: str):
    from rich.text import Text

    return Text(text)


def _cells(values) -> list:
    return [_plain(v) for v in values]


def _summary_table(report: PerfReport):
    from rich.table import Table

    table = Table(title="Predicted performance", title_justify="left", expand=False)
    table.add_column("metric", style="bold", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    table.add_column(_plain("interval [low, high]"), justify="right", no_wrap=True)
    table.add_column("detail")
    for metric, value, interval, detail in summary_rows(report):
        style = "red" if metric == "Peak memory" and not report.fits_in_memory else None
        table.add_row(*_cells((metric, value, interval, detail)), style=style)
    return table


def _ops_parts(report: PerfReport, top_ops: int | None) -> list[Any]:
    """The per-op table, and below it the ops it leaves out ("... and 213 more ops, 2.15 ms") when it cuts."""
    from rich.text import Text

    more = more_ops_line(report, len(sorted_ops(report, top_ops)))
    return [_ops_table(report, top_ops)] + ([Text(more)] if more else [])


def more_ops_line(report: PerfReport, listed: int) -> str:
    """``... and N more ops, X ms (S of the latency)`` for the ops past the ``listed`` ones; "" when none is left."""
    left = ops_in_graph(report) - listed
    if left <= 0:
        return ""
    rest_ms = max(sum(k.time_ms for k in report.by_kind) - sum(o.time_ms for o in sorted_ops(report, listed)), 0.0)
    latency = report.latency_ms.value
    share = f", {fmt_share(rest_ms / latency)} of the latency" if latency else ""
    return f"... and {left:,} more op{'s' if left != 1 else ''}, {fmt_time_ms(rest_ms)}{share} (--top all lists them)"


def _ops_table(report: PerfReport, top_ops: int | None):
    from rich.table import Table

    ops = sorted_ops(report, top_ops)
    table = Table(title=_plain(ops_title(report, len(ops))), title_justify="left")
    for name in OP_COLUMNS:
        right = name in ("time", "share", "FLOP/byte")
        table.add_column(
            name, justify="right" if right else "left", overflow="fold", no_wrap=name in ("time", "share", "bound")
        )
    for op in ops:
        table.add_row(*_cells(op_row(op)))
    return table


def _kinds_table(report: PerfReport):
    from rich.table import Table

    table = Table(title=_plain(kinds_title(report)), title_justify="left")
    for name, right in (("op kind", False), ("ops", True), ("time", True), ("share", True)):
        table.add_column(name, justify="right" if right else "left")
    for row in kind_rows(report):
        table.add_row(*_cells(row))
    return table


def _mig_table(report: PerfReport):
    from rich.table import Table

    table = Table(title=_plain(f"MIG profiles on {report.mig.device} ({mig_targets(report)})"), title_justify="left")
    widest_profile = max((len(o.profile) for o in report.mig.options), default=7)
    for name in mig_columns(report):
        table.add_column(
            name, overflow="fold", no_wrap=name != "reason", min_width=widest_profile if name == "profile" else None
        )
    for row in mig_rows(report):
        table.add_row(*_cells(row), style=None if row[2] == "yes" else "dim")
    return table


def render_text(report: PerfReport, top_ops: int | None = 10, width: int = 110) -> str:
    """The report as plain text (no colour codes), ``width`` columns wide.

    ``top_ops``: how many per-op rows to show, by time (None: all of them; 0: no per-op table).
    """
    from rich.console import Console

    console = Console(
        record=True, file=io.StringIO(), width=width, color_system=None, force_terminal=False, soft_wrap=False
    )
    for part in renderables(report, top_ops):
        console.print(part)
    return console.export_text()


#: the width of a report written to a pipe or a file (a terminal uses its own width)
PIPED_WIDTH = 120


def terminal_console() -> Any:
    """A rich Console for stdout: the terminal's width, or :data:`PIPED_WIDTH` when piped (rich would fall back to
    80 columns and fold or cut the tables)."""
    import sys

    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else PIPED_WIDTH)


def print_report(report: PerfReport, console: Any = None, top_ops: int | None = 10) -> None:
    """Print the report, with colour where the terminal has it, on ``console`` (default: :func:`terminal_console`)."""
    if console is None:
        console = terminal_console()
    for part in renderables(report, top_ops):
        console.print(part)


def ops_in_graph(report: PerfReport) -> int:
    """How many ops the per-op figures cover (every op with time, not only the listed ones)."""
    return sum(k.ops for k in report.by_kind) or len(report.per_op)


def shown_ops(report: PerfReport, listed: int) -> str:
    total = ops_in_graph(report)
    return f"top {listed} of {total}" if listed < total else f"all {listed}"


def kind_rows(report: PerfReport) -> list[tuple[str, str, str, str]]:
    """(op kind, ops, time, share) per op kind, over every op; then the time outside the ops (host time not hidden
    under device time) where there is any, and the total, which is the latency."""
    rows = [(k.name, f"{k.ops:,}", fmt_time_ms(k.time_ms), fmt_share(k.share)) for k in report.by_kind]
    latency = report.latency_ms.value
    if report.outside_ops_label:
        rows.append(
            (
                report.outside_ops_label,
                "",
                fmt_time_ms(report.outside_ops_ms),
                fmt_share(report.outside_ops_ms / latency if latency else 0.0),
            )
        )
    rows.append(("total = latency", f"{ops_in_graph(report):,}", fmt_time_ms(latency), fmt_share(1.0)))
    return rows


def kinds_title(report: PerfReport) -> str:
    """The op-kind table's title: what it covers and the latency it adds up to."""
    latency = fmt_time_ms(report.latency_ms.value)
    return f"Time by op kind (all {ops_in_graph(report):,} ops; total = the {latency} latency)"


def ops_title(report: PerfReport, listed: int) -> str:
    """The per-op table's title: how many ops it lists, their time, and the latency it is a share of."""
    shown = sum(o.time_ms for o in sorted_ops(report, listed))
    return (
        f"Per-op contributors ({shown_ops(report, listed)}, by predicted time: {fmt_time_ms(shown)}, "
        f"{fmt_share(shown / report.latency_ms.value if report.latency_ms.value else 0.0)} of the "
        f"{fmt_time_ms(report.latency_ms.value)} latency)"
    )


def block_lines(report: PerfReport) -> list[str]:
    """One line per repeated block: "12 x encoder.layer.*: 3.1 ms, 41% of the latency (attention 40%, output
    30% of the block)"."""
    return [
        f"{b.repeats} x {b.path}: {fmt_time_ms(b.time_ms)}, {fmt_share(b.share)} of the latency ("
        + ", ".join(f"{p.name} {fmt_share(p.share)}" for p in b.parts[:5])
        + " of the block)"
        for b in report.blocks
    ]


def explain_renderables(report: PerfReport, top_ops: int | None = None) -> list[Any]:
    """The per-op breakdown view (``perfpredict explain``): all ops or the top ones, coverage, unknown ops."""
    from rich.text import Text

    pairs = dict(header_lines(report))
    parts: list[Any] = [
        Text(f"perfpredict explain: {report.model_name} on {report.device}", style="bold"),
        Text("  ".join(f"{k}={pairs[k]}" for k in ("phase", "batch", "seq", "dtype", "predictor"))),
        Text(f"{estimate_label(report)}; latency {fmt_time_ms(report.latency_ms.value)} per call", style="italic"),
    ]
    if report.timeline is not None:
        parts.append(Text(timeline_line(report)))
    if report.by_kind:
        parts.append(_kinds_table(report))
    if report.blocks:
        parts.append(
            Text(
                "Repeated blocks (device time summed over the repeats, then split by the module under them):\n"
                + "\n".join(f"  {line}" for line in block_lines(report))
            )
        )
    if report.per_op:
        parts += _ops_parts(report, top_ops)
    else:
        parts.append(Text("The report lists no per-op contributions."))
    parts.append(Text(coverage_line(report)))
    unknown = unknown_op_counts(report)
    if unknown:
        listed = ", ".join(f"{t} x{n}" for t, n in sorted(unknown.items(), key=lambda kv: -kv[1]))
        parts.append(Text(f"ops without a cost model among the listed ops: {listed}", style="yellow"))
    parts += [Text(f"warning: {w}", style="yellow") for w in report.warnings]
    return parts
