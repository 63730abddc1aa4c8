"""``perfpredict devices`` and ``perfpredict models``: the device catalog and the shipped HuggingFace configs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from perfpredict.cli.args import EXIT_OK, console
from perfpredict.core.units import GIB


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    p = subparsers.add_parser("devices", parents=parents or [], help="list the device catalog")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    p.add_argument("--wide", action="store_true", help="every column (arch, FP32, MIG profiles, source)")
    p.set_defaults(func=cmd_devices)

    p = subparsers.add_parser("models", parents=parents or [], help="list the shipped HuggingFace configs")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=cmd_models)


def _device_row(d: Any) -> dict[str, Any]:
    peaks = dict(d.peak_flops_per_s)
    return {
        "name": d.name,
        "kind": d.kind,
        "arch": d.arch,
        "memory_bytes": d.memory_bytes,
        "memory_type": d.memory_type,
        "memory_bandwidth_bytes_per_s": d.memory_bandwidth_bytes_per_s,
        "peak_flops_per_s": peaks,
        "tdp_w": d.tdp_w,
        "mig_profiles": [m.name for m in d.mig_profiles],
        "price_usd_per_hour": d.price_usd_per_hour,
        "source": d.source,
        "measured": sorted(d.measured),
        "aliases": list(d.aliases),
        "interconnect": _link(d),
    }


def _link(d: Any) -> dict[str, Any] | None:
    """The GPU's links to its peers (perfpredict/data/interconnects.json), for multi-GPU plans; None for a CPU or a
    device without an entry."""
    from perfpredict.core.errors import PerfPredictError
    from perfpredict.parallel.interconnect import interconnect_for

    if d.kind != "gpu":
        return None
    try:
        ic = interconnect_for(d)
    except PerfPredictError:
        return None
    return {
        "intra_node": ic.intra_generation,
        "intra_node_per_direction_gb_per_s": ic.intra_per_direction_gb_per_s,
        "inter_node": f"{ic.nics_per_node}x {ic.nic_gbit_per_s:g} Gb/s {ic.inter_generation}",
    }


def _link_cell(link: dict[str, Any] | None) -> str:
    """'NVLink4 450': the peer link's generation and its bandwidth per direction."""
    if link is None:
        return "-"
    return f"{link['intra_node'].split(' ')[0]} {link['intra_node_per_direction_gb_per_s']:g}"


def _tflops(value: float | None) -> str:
    return "-" if not value else f"{value / 1e12:,.1f}"


def cmd_devices(args: argparse.Namespace) -> int:
    from rich.table import Table

    from perfpredict.hardware.devices import list_devices

    devices = list_devices()
    if args.json:
        sys.stdout.write(json.dumps([_device_row(d) for d in devices], indent=2) + "\n")
        return EXIT_OK
    wide = args.wide
    table = Table(
        title="Device catalog (TFLOP/s: dense peaks; BF16 TC: bf16 on tensor cores)"
        + ("" if wide else "; --wide for every column"),
        title_justify="left",
    )
    columns = (
        "name",
        "arch",
        "memory GiB",
        "memory type",
        "bandwidth TB/s",
        "FP32 TFLOP/s",
        "BF16 TC TFLOP/s",
        "TDP W",
        "MIG profiles",
        "GPU link GB/s",
        "price $/h",
        "source",
    )
    # 80 columns hold these; the others are for --wide
    shown = columns if wide else ("name", "memory GiB", "bandwidth TB/s", "BF16 TC TFLOP/s", "TDP W", "price $/h")
    for name in shown:
        text = name in ("name", "arch", "source")
        table.add_column(
            name.replace(" TFLOP/s", "\nTFLOP/s").replace(" TB/s", "\nTB/s") if not wide else name,
            justify="left" if text else "right",
            no_wrap=True,
        )
    for d in devices:
        peaks = dict(d.peak_flops_per_s)
        # the measured keys would make this no-wrap cell wider than a terminal: name the file, count the ceilings
        source = f"{d.source} ({len(d.measured)} ceilings)" if d.measured else d.source
        price = "-" if d.price_usd_per_hour is None else f"{d.price_usd_per_hour:.2f}"
        cells = dict(
            zip(
                columns,
                (
                    d.name,
                    d.arch,
                    f"{d.memory_bytes / GIB:,.0f}",
                    d.memory_label,
                    f"{d.memory_bandwidth_bytes_per_s / 1e12:.2f}",
                    _tflops(peaks.get("fp32")),
                    _tflops(peaks.get("bf16_tensor")),
                    f"{d.tdp_w:,.0f}",
                    str(len(d.mig_profiles)),
                    _link_cell(_link(d)) if wide else "",
                    price,
                    source,
                ),
            )
        )
        table.add_row(*(cells[c] for c in shown))
    from rich.console import Console

    # wide rows are never cut to a pipe's width; the default view fits 80 columns
    wide_console = Console(highlight=False, width=None if sys.stdout.isatty() else (240 if wide else 80))
    wide_console.print(table)
    return EXIT_OK


def cmd_models(args: argparse.Namespace) -> int:
    from rich.table import Table

    from perfpredict.compiler_hooks import hf_frontend as hf

    aliases: dict[str, list[str]] = {}
    for alias, model_id in hf.model_aliases().items():
        aliases.setdefault(model_id, []).append(alias)
    rows = []
    for model_id in hf.known_models():
        entry = hf.shipped_entry(model_id)
        size = entry.get("default_seq_len") or entry.get("default_image_size")
        rows.append(
            {
                "id": model_id,
                "aliases": aliases.get(model_id, []),
                "model_class": entry["model_class"],
                "input": entry["input"],
                "default_size": size,
            }
        )
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return EXIT_OK
    table = Table(
        title="Shipped HuggingFace configs (use --hf ID or an alias; others: --config config.json)",
        title_justify="left",
    )
    table.add_column("id", no_wrap=True, min_width=max(len(r["id"]) for r in rows))
    for name in ("input", "default size", "built as", "aliases"):
        table.add_column(name, overflow="fold")
    for r in rows:
        table.add_row(r["id"], r["input"], str(r["default_size"]), r["model_class"], ", ".join(r["aliases"]))
    console().print(table)
    return EXIT_OK
