"""``perfpredict predict --devices A,B`` (or ``all``): one question on several devices, one row each: its peak
memory, whether it fits, its step time. "Which single GPU can fine-tune Llama-3-8B with QLoRA at 2,048 tokens?"
is ``perfpredict predict --hf meta-llama/Meta-Llama-3-8B --training --lora-rank 16 --qlora --seq 2048 --devices
all``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from perfpredict.cli.args import EXIT_OK, console


def device_names(text: str) -> list[str]:
    """The devices ``--devices`` names: a comma list, or ``all`` for every GPU of the catalog (MIG slices left out)."""
    from perfpredict.hardware.devices import get_device, list_devices

    if text.strip().lower() == "all":
        return [d.name for d in list_devices() if d.kind == "gpu" and not d.parent]
    return [get_device(name.strip()).name for name in text.split(",") if name.strip()]


def show_fits(args: argparse.Namespace, request: Any) -> int:
    """Predict ``request`` on each device of ``--devices`` and print the table (or its JSON with ``--json -``)."""
    import json

    from rich.table import Table

    from perfpredict.core.units import GIB
    from perfpredict.pipeline import predict
    from perfpredict.render.text import fmt_time_ms

    rows, model = [], request.model_name
    for name in device_names(args.devices):
        report = predict(request.but(device=name))
        model = model or report.model_name
        parallel = request.parallel is not None
        rows.append(
            {
                "device": report.device,
                "memory_gib": report.device_memory_bytes / GIB,
                "peak_memory_gib": (report.peak_memory_bytes if parallel else report.peak_memory_bytes.value) / GIB,
                "fits": report.fits_in_memory,
                "step_ms": report.step_ms if parallel else report.latency_ms.value,
            }
        )
    if args.json == "-":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return EXIT_OK
    what = ", peak memory per GPU" if request.parallel is not None else ""
    table = Table(title=f"{model}: does it fit?{what}", title_justify="left")
    for column in ("device", "memory", "peak memory", "fits", "step"):
        table.add_column(column, justify="left" if column == "device" else "right")
    for r in sorted(rows, key=lambda r: (not r["fits"], r["step_ms"])):
        table.add_row(
            r["device"],
            f"{r['memory_gib']:.1f} GiB",
            f"{r['peak_memory_gib']:.2f} GiB",
            "yes" if r["fits"] else "NO",
            fmt_time_ms(r["step_ms"]),
        )
    console().print(table)
    return EXIT_OK
