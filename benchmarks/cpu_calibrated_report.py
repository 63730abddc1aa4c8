"""The markdown report of ``benchmarks/cpu_calibrated.py``: per row, then MAPE per group and predictor."""

from __future__ import annotations

import statistics

PREDICTORS = (
    ("two_timeline", "two_timeline (default, calibrated)"),
    ("before", "before: learned op efficiency, estimated ceilings"),
    ("xgboost", "xgboost (whole model, CPU rows)"),
    ("spread", "two_timeline, calibrated by the probe rounds between the measurement rounds"),
)


def _ape(pred: float | None, true: float) -> float | None:
    return None if pred is None else abs(pred - true) / true


def _mape(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    return f"{100 * statistics.fmean(got):.1f}%" if got else "-"


def render(run: dict, measured: dict, predicted: dict, items: list[tuple[str, int]], tuning: tuple[str, ...]) -> str:
    rows = measured["rows"]
    shown = [k for k, _ in PREDICTORS if any(predicted[i].get(k) is not None for i in items) or k != "spread"]
    loads = measured.get("load_average_per_round", [])
    cal = run["calibration"]
    lines = [
        "# Real models on this CPU, predicted after `perfpredict calibrate-host`",
        "",
        f"Command: `{run['command']}` ({run['started']} UTC"
        + (f"; {run['inputs']}" if run.get("inputs") else "")
        + "). Calibration: "
        + (f"{cal['seconds']} s, stored in `{cal['path']}`" if cal.get("seconds") else f"reused `{cal['path']}`")
        + f". Measured {measured.get('created', '?')} UTC with {measured.get('threads')} torch threads"
        + (" by CPU time (`--clock cpu`)" if measured.get("clock") == "cpu" else "")
        + ", "
        f"{len(measured.get('load_average_per_round', []))} interleaved rounds, load average per round "
        f"{', '.join(f'{x:.2f}' for x in loads)}.",
        "",
        "| model | batch | group | measured ms | round spread | "
        + " | ".join(f"{key} ms | error" for key in shown)
        + " |",
        "|---|---:|---|---:|---:|" + "---:|---:|" * len(shown),
    ]
    errors: dict[str, dict[str, list]] = {}
    spreads = []
    for model_id, batch in items:
        m = rows[f"{model_id}|{batch}"]
        p = predicted[(model_id, batch)]
        group = "tuning" if model_id in tuning else "held out"
        cells = []
        for key in shown:
            pred = p.get(key)
            e = None if pred is None else (pred - m["ms"]) / m["ms"]
            errors.setdefault(key, {}).setdefault(group, []).append(None if e is None else abs(e))
            cells += ["-" if pred is None else f"{pred:.1f}", "-" if e is None else f"{100 * e:+.0f}%"]
        spreads.append(m["spread"])
        lines.append(
            f"| {model_id} | {batch} | {group} | {m['ms']:.1f} | {100 * m['spread']:.0f}% | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "## MAPE",
        "",
        "| predictor | held out | tuning | all |",
        "|---|---:|---:|---:|",
    ]
    for key, title in PREDICTORS:
        if key not in shown:
            continue
        e = errors[key]
        held, tune = e.get("held out", []), e.get("tuning", [])
        lines.append(f"| {title} | {_mape(held)} | {_mape(tune)} | {_mape(held + tune)} |")
    lines += [
        "",
        f"Label noise: the median round spread is {100 * statistics.median(spreads):.0f}% "
        f"(90th percentile {100 * sorted(spreads)[int(0.9 * (len(spreads) - 1))]:.0f}%).",
        "",
    ]
    return "\n".join(lines)
