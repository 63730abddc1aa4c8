"""The ``perfpredict`` command line: predict, explain, devices, models, demo.

Bad input ends with one line on stderr (``perfpredict: error: ...``) and exit code 2; a bug ends with one line
and exit code 1 unless ``--debug`` asks for the traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from perfpredict.errors import InvalidInputError, PerfPredictError
from perfpredict.precision import OPTIMIZERS, PRECISIONS

PROG = "perfpredict"
DTYPE_CHOICES = ("float32", "float16", "bfloat16")
DEMO_MODELS = (("bert-base-uncased", 8, 128), ("microsoft/resnet-50", 32, None))
DEMO_DEVICES = ("H100-SXM", "A100-40GB-SXM")
EXIT_OK, EXIT_BUG, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """An argparse complaint, raised instead of argparse's print-and-exit so main() owns the output."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message)


def _positive_int(what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1 or str(value) != text.strip().lstrip("+"):
            raise argparse.ArgumentTypeError(f"{what} must be a positive integer, got {text!r}")
        return value

    return parse


def _non_negative_int(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def _add_model_args(p: argparse.ArgumentParser, top_default: int | None) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", metavar="ID", help="a shipped HuggingFace id or alias (see `perfpredict models`)")
    src.add_argument("--config", metavar="PATH", help="a HuggingFace config.json (or a folder holding one)")
    src.add_argument("--onnx", metavar="PATH", help="an ONNX file (any exporter; external data is read too)")
    p.add_argument("--input-shape", action="append", metavar="NAME=DIMS", default=None,
                   help="ONNX input shape for dynamic dimensions, e.g. input_ids=1x128 (repeatable)")
    p.add_argument("--device", default="H100-SXM", help="catalog device name (see `perfpredict devices`)")
    p.add_argument("--batch", type=_positive_int("batch size"), default=1, help="batch size (default 1)")
    p.add_argument("--seq", type=_positive_int("sequence length"), default=None,
                   help="sequence length for text models (default: the model's shipped default)")
    p.add_argument("--dtype", choices=DTYPE_CHOICES, default=None,
                   help="weights and activations dtype (default: the config's torch_dtype, else float32; in "
                        "training, the --precision's compute dtype)")
    p.add_argument("--training", action="store_true", help="predict a training step (fwd + bwd + optimizer)")
    p.add_argument("--precision", choices=tuple(PRECISIONS), default=None,
                   help="training recipe (default on a GPU: amp-bf16, bf16 compute with fp32 master weights, or "
                        "amp-fp16 where the GPU has no bf16; on a CPU: fp32; --dtype float32 means fp32)")
    p.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default="adamw",
                   help="training optimizer (default adamw; its state bytes: see the docs' memory section)")
    p.add_argument("--tf32", action="store_true",
                   help="let float32 matmuls use TF32 (torch.backends.cuda.matmul.allow_tf32; convolutions do by "
                        "default)")
    p.add_argument("--weights-built-in", choices=(*DTYPE_CHOICES, "none"), default="none",
                   help="dtype the weights are built in before the cast to --dtype ('none', the default: loaded "
                        "straight in --dtype, as from_pretrained(dtype=...) does; float32: Model(config).to(dtype))")
    p.add_argument("--predictor", default="auto",
                   help="auto (default: two_timeline, the same model for every device), analytical, two_timeline, "
                        "or a learned whole-model predictor where trained: xgboost, graphsage, gae_gnn")
    p.add_argument("--mode", choices=("eager", "cuda_graph", "compiled", "compiled_cuda_graph"), default="eager",
                   help="how the step runs, for the two-timeline predictor: eager (default), cuda_graph, compiled "
                        "(torch.compile), compiled_cuda_graph (torch.compile mode='reduce-overhead')")
    p.add_argument("--max-latency-ms", type=_positive_float, default=None, help="latency target for MIG advice")
    p.add_argument("--min-throughput", type=_positive_float, default=None,
                   help="throughput target (samples/s) for MIG advice")
    p.add_argument("--no-cache", action="store_true",
                   help="capture the model again instead of reading the on-disk graph cache (and refresh it)")
    p.add_argument("--top", type=_non_negative_int, default=top_default,
                   help="per-op rows to show" + (f" (default {top_default})" if top_default else " (default all)"))


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    parser = _Parser(prog=PROG, parents=[common], description="Predict a model's latency, memory, energy, carbon, "
                     "cost and MIG fit on an accelerator, without running it there.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("predict", parents=[common], help="predict one model on one device")
    _add_model_args(p, top_default=10)
    p.add_argument("--json", metavar="PATH", help="write the report as JSON to PATH ('-': stdout, nothing else)")
    p.add_argument("--html", metavar="PATH", help="write a self-contained HTML report to PATH")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("explain", parents=[common], help="the full per-op breakdown, coverage and unknown ops")
    _add_model_args(p, top_default=None)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("devices", parents=[common], help="list the device catalog")
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    p.add_argument("--wide", action="store_true", help="every column (arch, FP32, MIG profiles, source)")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("models", parents=[common], help="list the shipped HuggingFace configs")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("demo", parents=[common], help="BERT-base and ResNet-50 on H100 and A100")
    p.set_defaults(func=cmd_demo)
    from perfpredict import cli_adapt, cli_collect, cli_generate, cli_host, cli_roofline, cli_serve, cli_train

    cli_generate.register(sub, parents=[common])
    cli_serve.register(sub, parents=[common])
    cli_roofline.register(sub, parents=[common])
    cli_host.register(sub, parents=[common])
    cli_collect.register(sub, parents=[common])
    cli_train.register(sub, parents=[common])
    cli_adapt.register(sub, parents=[common])
    return parser


def _console():
    from rich.console import Console

    # Piped output gets a fixed width, so tables do not squeeze into 80 columns.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def _graph_from_args(args: argparse.Namespace, phase: str) -> tuple[Any, str]:
    """The OpGraph of the model the arguments name (an ONNX file, or a HuggingFace id or config)."""
    if args.onnx:
        from perfpredict.cli_onnx import graph_from_onnx_args

        return graph_from_onnx_args(args.onnx, args.input_shape or [], phase=phase), Path(args.onnx).stem
    from perfpredict.hf_capture import cached

    # built in the run dtype on the meta device (a deep layer stack traced with two layers and copied), or read
    # from the on-disk graph cache
    return cached(args.hf or args.config, batch_size=args.batch, seq_len=args.seq, dtype=args.run.dtype,
                  phase=phase, use_cache=not args.no_cache)


def _run_dtype(args: argparse.Namespace, device: Any) -> Any:
    """The run dtype and training precision (perfpredict.precision.resolve_run_dtype), kept on ``args.run``."""
    from perfpredict.precision import resolve_run_dtype

    declared = None
    if not args.onnx:
        from perfpredict.compiler_hooks.hf_frontend import declared_dtype, raw_config

        declared = declared_dtype(raw_config(args.hf or args.config)[0])
    return resolve_run_dtype(declared, args.dtype, args.precision, args.training, device)


def _predict_from_args(args: argparse.Namespace, keep_ops: int = 25) -> tuple[Any, Any]:
    """(PerfReport, OpGraph) for the model and device the arguments name."""
    from perfpredict.api import report_for_graph
    from perfpredict.devices import get_device

    device = get_device(args.device)  # fail fast, before a model is built
    phase = "training" if args.training else "inference"
    args.run = _run_dtype(args, device)
    graph, name = _graph_from_args(args, phase)
    assumed = {} if args.onnx else {"dtype": args.run.source}
    report = report_for_graph(graph, device=device, phase=phase, predictor=args.predictor, model_name=name,
                              max_latency_ms=args.max_latency_ms, min_throughput_per_s=args.min_throughput,
                              top_ops=keep_ops, mode=args.mode, optimizer=args.optimizer, tf32=args.tf32,
                              precision=args.run.precision if not args.onnx or args.precision else None,
                              weights_built_in=None if args.weights_built_in == "none" else args.weights_built_in,
                              assumed=assumed)
    return report, graph


def _roofline_section(graph: Any, device_name: str) -> dict[str, str]:
    """The model's ops on the device's roofline, as inline SVG for the HTML report (a line saying why, if the plot
    cannot be drawn: never a section that silently disappears)."""
    from perfpredict.devices import get_device
    from perfpredict.errors import MissingDependencyError
    from perfpredict.kernels.plot import roofline_svg

    try:
        return {"Roofline": roofline_svg(graph, get_device(device_name))}
    except (ImportError, MissingDependencyError) as err:
        return {"Roofline": f"<p>The roofline plot could not be drawn: {err}</p>"}


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise InvalidInputError(f"cannot write {path!r}: {err.strerror or err}") from err


def cmd_predict(args: argparse.Namespace) -> int:
    from perfpredict.render_html import render_html
    from perfpredict.render_text import print_report

    report, graph = _predict_from_args(args)
    if args.json == "-":
        sys.stdout.write(report.to_json() + "\n")
    else:
        print_report(report, console=_console(), top_ops=args.top)
    if args.json and args.json != "-":
        _write(args.json, report.to_json() + "\n")
    if args.html:
        _write(args.html, render_html(report, extra_sections=_roofline_section(graph, report.device)))
    written = [p for p in (args.json, args.html) if p and p != "-"]
    if written:
        print(f"{PROG}: wrote {', '.join(written)}", file=sys.stderr)
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from perfpredict.render_text import explain_renderables

    report, _ = _predict_from_args(args, keep_ops=1_000_000)  # explain shows every op
    console = _console()
    for part in explain_renderables(report, top_ops=args.top):
        console.print(part)
    return EXIT_OK


def _device_row(d: Any) -> dict[str, Any]:
    peaks = dict(d.peak_flops_per_s)
    return {"name": d.name, "kind": d.kind, "arch": d.arch, "memory_bytes": d.memory_bytes,
            "memory_bandwidth_bytes_per_s": d.memory_bandwidth_bytes_per_s, "peak_flops_per_s": peaks,
            "tdp_w": d.tdp_w, "mig_profiles": [m.name for m in d.mig_profiles],
            "price_usd_per_hour": d.price_usd_per_hour, "source": d.source,
            "measured": sorted(d.measured), "aliases": list(d.aliases)}


def _tflops(value: float | None) -> str:
    return "-" if not value else f"{value / 1e12:,.1f}"


def cmd_devices(args: argparse.Namespace) -> int:
    from rich.table import Table

    from perfpredict.devices import list_devices

    devices = list_devices()
    if args.json:
        sys.stdout.write(json.dumps([_device_row(d) for d in devices], indent=2) + "\n")
        return EXIT_OK
    wide = args.wide
    table = Table(title="Device catalog (TFLOP/s: dense peaks; BF16 TC: bf16 on tensor cores)"
                  + ("" if wide else "; --wide for every column"), title_justify="left")
    columns = ("name", "arch", "memory GiB", "bandwidth TB/s", "FP32 TFLOP/s", "BF16 TC TFLOP/s", "TDP W",
               "MIG profiles", "price $/h", "source")
    # 80 columns hold these; the others are for --wide
    shown = columns if wide else ("name", "memory GiB", "bandwidth TB/s", "BF16 TC TFLOP/s", "TDP W", "price $/h")
    for name in shown:
        text = name in ("name", "arch", "source")
        table.add_column(name.replace(" TFLOP/s", "\nTFLOP/s").replace(" TB/s", "\nTB/s") if not wide else name,
                         justify="left" if text else "right", no_wrap=True)
    for d in devices:
        peaks = dict(d.peak_flops_per_s)
        # the measured keys would make this no-wrap cell wider than a terminal: name the file, count the ceilings
        source = f"{d.source} ({len(d.measured)} ceilings)" if d.measured else d.source
        price = "-" if d.price_usd_per_hour is None else f"{d.price_usd_per_hour:.2f}"
        cells = dict(zip(columns, (d.name, d.arch, f"{d.memory_bytes / 2**30:,.0f}",
                                   f"{d.memory_bandwidth_bytes_per_s / 1e12:.2f}", _tflops(peaks.get("fp32")),
                                   _tflops(peaks.get("bf16_tensor")), f"{d.tdp_w:,.0f}", str(len(d.mig_profiles)),
                                   price, source)))
        table.add_row(*(cells[c] for c in shown))
    from rich.console import Console

    # wide rows are never cut to a pipe's width; the default view fits 80 columns
    console = Console(highlight=False, width=None if sys.stdout.isatty() else (240 if wide else 80))
    console.print(table)
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
        rows.append({"id": model_id, "aliases": aliases.get(model_id, []), "model_class": entry["model_class"],
                     "input": entry["input"], "default_size": size})
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return EXIT_OK
    table = Table(title="Shipped HuggingFace configs (use --hf ID or an alias; others: --config config.json)",
                  title_justify="left")
    table.add_column("id", no_wrap=True, min_width=max(len(r["id"]) for r in rows))
    for name in ("input", "default size", "built as", "aliases"):
        table.add_column(name, overflow="fold")
    for r in rows:
        table.add_row(r["id"], r["input"], str(r["default_size"]), r["model_class"], ", ".join(r["aliases"]))
    _console().print(table)
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from rich.rule import Rule

    from perfpredict.devices import get_device
    from perfpredict.render_text import print_report

    console = _console()
    devices = [get_device(name).name for name in DEMO_DEVICES]
    summary = []
    for model_id, batch, seq in DEMO_MODELS:
        for device in devices:
            # Parsed like a user's `predict` line, so the demo can never drift from the real options.
            argv = ["predict", "--hf", model_id, "--device", device, "--batch", str(batch), "--predictor", "auto"]
            ns = build_parser().parse_args(argv + (["--seq", str(seq)] if seq else []))
            console.print(Rule(f"{model_id}, batch {batch}, on {device}"))
            report, _ = _predict_from_args(ns)
            print_report(report, console=console, top_ops=5)
            summary.append(report)
    console.print(_demo_summary(summary))
    return EXIT_OK


def _demo_summary(reports: Sequence[Any]):
    from rich.table import Table

    from perfpredict.render_text import fmt_bytes, fmt_energy_j, fmt_rate, fmt_time_ms

    # "auto" is the two-timeline model on every device, so the rows compare like with like
    table = Table(title="Demo summary (predictor: two_timeline, the same model on every device; latency is eager "
                        "wall time, host included)", title_justify="left")
    for name in ("model", "device", "batch", "predictor", "latency", "throughput", "peak memory", "energy/sample",
                 "MIG pick"):
        table.add_column(name)
    for r in reports:
        pick = (r.mig.recommended or "none") if r.mig else "-"
        table.add_row(r.model_name, r.device, str(r.batch_size), r.predictor, fmt_time_ms(r.latency_ms.value),
                      fmt_rate(r.throughput_per_s.value), fmt_bytes(r.peak_memory_bytes.value),
                      fmt_energy_j(r.energy_per_sample_j.value), pick)
    return table


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _fail(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def _report_warnings(caught: list, debug: bool) -> None:
    """Show our own warnings once, on stderr; library noise (torch, transformers) only under --debug."""
    seen = set()
    for w in caught:
        ours = w.category.__module__.startswith("perfpredict") or "perfpredict" in str(w.filename)
        text = _one_line(w.message)
        if (ours or debug) and text not in seen:
            seen.add(text)
            print(f"{PROG}: warning: {text}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 bug, 2 bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(f"choose a command: predict, explain, devices, models, demo, roofline, collect, zoo, train, "
                             f"calibrate-host (`{PROG} --help`)")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            code = args.func(args)
        _report_warnings(caught, debug)
        return code
    except SystemExit as exit_:  # --help and --version end here
        return exit_.code if isinstance(exit_.code, int) else EXIT_OK
    except UsageError as err:
        _fail(_one_line(err))
        return EXIT_USAGE
    except PerfPredictError as err:
        if debug:
            raise
        _fail(_one_line(err))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as err:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if debug:
            raise
        _fail(f"unexpected {type(err).__name__}: {_one_line(err)} (rerun with --debug for the traceback)")
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
