"""``perfpredict roofline``: measure a device's ceilings (DeviceCeilings JSON) and plot a model on its roofline.

    perfpredict roofline --device cpu --quick --out data/measured_cpu/cpu.json
    perfpredict roofline --device cuda --out measured/h100.json              # needs a GPU + perfpredict[gpu]
    perfpredict roofline --native ./build/perfpredict-roofline --out measured/h100.json
    perfpredict roofline --plot --hf bert-base-uncased --device-name H100-SXM --plot-out roofline.png

:func:`run` returns the exit code: 0 ok, 2 bad input or no CUDA device (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from typing import Any

from perfpredict.cli.args import EXIT_OK, EXIT_USAGE, PROG
from perfpredict.request import DEFAULT_DEVICE


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "roofline",
        parents=parents or [],
        help="measure a device's ceilings (roofline microkernels) and plot a model's ops on its roofline",
        description="Run the roofline microkernels on this machine's CPU or CUDA GPU and write DeviceCeilings "
        "JSON, which the device catalog picks up (measured beats datasheet); or plot a model's ops "
        "on a device's roofline.",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default=None,
        help="what to measure: cpu (runs anywhere) or cuda (needs an NVIDIA GPU); default cuda",
    )
    p.add_argument("--quick", action="store_true", help="smaller sizes and fewer reps (CPU: < 30 s)")
    p.add_argument(
        "--kernels",
        nargs="+",
        metavar="NAME",
        help="kernel names or prefixes (hbm, gemm, fp32_fma, cpu_stream...); default all",
    )
    p.add_argument(
        "--impl",
        default="auto",
        choices=("auto", "all", "cupy", "numba", "torch"),
        help="GPU implementation: auto (CuPy, + Numba cross-checks), all, or one",
    )
    p.add_argument("--reps", type=int, default=None, help="timed repetitions per kernel (default 10 quick, 20-30)")
    p.add_argument("--out", metavar="PATH", help="write DeviceCeilings JSON here (e.g. measured/h100.json)")
    p.add_argument("--native", metavar="EXE", help="run the native perfpredict-roofline executable instead")
    p.add_argument("--list", action="store_true", help="list the kernels (the BabelStream-style table) and exit")
    p.add_argument("--plot", action="store_true", help="draw the roofline plot (with a model's ops if given)")
    p.add_argument("--hf", metavar="ID", help="with --plot: a shipped HuggingFace id or alias to place on the plot")
    p.add_argument("--batch", type=int, default=1, help="with --hf: batch size (default 1)")
    p.add_argument("--seq", type=int, default=None, help="with --hf: sequence length")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32")
    p.add_argument(
        "--device-name",
        metavar="NAME",
        default=None,
        help="with --plot: catalog device for the ceilings (default: the measured one, or H100-SXM)",
    )
    p.add_argument("--ceilings", metavar="PATH", help="with --plot: a DeviceCeilings JSON to apply and draw")
    p.add_argument(
        "--plot-out",
        metavar="PATH",
        default="roofline",
        help="with --plot: .png, .svg, or no suffix for both (default ./roofline.png + .svg)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    """Entry point for the subcommand; returns the exit code."""
    from perfpredict.core.errors import PerfPredictError

    try:
        if args.list:
            return _list(args)
        if args.plot and not (args.device or args.native):
            return _plot(args, None)
        if args.native:
            data = _native(args)
        else:
            data = _measure(args)
        if args.out:
            from perfpredict.kernels.ceilings import write_ceilings

            write_ceilings(data, args.out)
            print(f"{PROG}: wrote {args.out}", file=sys.stderr)
        else:
            sys.stdout.write(json.dumps(data, indent=1, default=str) + "\n")
        _summary(data)
        if args.plot:
            return _plot(args, data)
        return EXIT_OK
    except PerfPredictError as err:
        print(f"{PROG}: error: {' '.join(str(err).split())}", file=sys.stderr)
        return EXIT_USAGE


def _measure(args: argparse.Namespace) -> dict[str, Any]:
    from perfpredict.kernels.suite import run_roofline

    target = args.device or "cuda"
    command = "perfpredict " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv else ""
    return run_roofline(
        target,
        quick=args.quick,
        kernels=args.kernels,
        implementation=args.impl,
        reps=args.reps,
        progress=lambda m: print(m, file=sys.stderr),
        command=command,
    )


def _native(args: argparse.Namespace) -> dict[str, Any]:
    """Run perfpredict-roofline and finish its JSON (catalog name, datasheet fractions) in Python."""
    from perfpredict.core.errors import InvalidInputError
    from perfpredict.kernels.native import finish_native

    cmd = (
        [args.native]
        + (["--quick"] if args.quick else [])
        + (["--kernels", ",".join(args.kernels)] if args.kernels else [])
        + (["--reps", str(args.reps)] if args.reps else [])
    )
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    except OSError as err:
        raise InvalidInputError(
            f"cannot run {args.native!r}: {err}; build it with cmake -DPERFPREDICT_BUILD_CUDA=ON (see CMakeLists.txt)"
        ) from err
    if proc.returncode != 0:
        raise InvalidInputError(f"{args.native} failed (exit {proc.returncode}): {proc.stderr.strip()[:300]}")
    return finish_native(json.loads(proc.stdout), command=" ".join(cmd))


def _list(args: argparse.Namespace) -> int:
    from perfpredict.kernels.table import KERNELS

    rows = [k for k in KERNELS if args.device in (None, k.target)]
    print(f"{'kernel':22} {'target':6} {'kind':9} {'dtype':14} {'B/elem':>6} {'FLOP/elem':>9}  ceiling")
    for k in rows:
        print(
            f"{k.name:22} {k.target:6} {k.kind:9} {k.dtype:14} {k.bytes_per_element:>6} "
            f"{k.flops_per_element:>9}  {k.ceiling or '-'}  [{', '.join(k.implementations)}]"
        )
    return EXIT_OK


def _summary(data: dict[str, Any]) -> None:
    print(f"{PROG}: {data.get('device')} ({data.get('device_name_reported', '')}) ceilings:", file=sys.stderr)
    for key, c in data.get("ceilings", {}).items():
        best = c["min"] if c.get("unit") == "s" else c["max"]
        value = f"{best * 1e6:.2f} us" if c.get("unit") == "s" else f"{best / 1e9:,.1f} G{c.get('unit', '')}"
        frac = c.get("fraction_of_datasheet")
        at = c.get("fraction_at_observed_clock")
        extra = "".join(
            [
                f", {frac:.0%} of datasheet" if frac else "",
                f", {at:.0%} at observed clock" if at else "",
                " [spread > 5%]" if c.get("spread_flagged") else "",
            ]
        )
        print(f"  {key:36} {value:>16}  ({c.get('kernel')}{extra})", file=sys.stderr)
    for w in data.get("warnings", []):
        print(f"{PROG}: warning: {w}", file=sys.stderr)


def _plot(args: argparse.Namespace, data: dict[str, Any] | None) -> int:
    from perfpredict.hardware.devices import apply_ceilings, get_device, local_cpu
    from perfpredict.kernels.ceilings import read_ceilings
    from perfpredict.kernels.plot import plot_roofline

    ceilings = data if data is not None else (read_ceilings(args.ceilings) if args.ceilings else None)
    if args.device_name:
        device = get_device(args.device_name)
    elif ceilings is not None and ceilings.get("device") == "cpu":
        device = local_cpu()
    elif ceilings is not None:
        device = get_device(ceilings.get("device") or DEFAULT_DEVICE)
    else:
        device = get_device(DEFAULT_DEVICE)
    if ceilings is not None:
        device = apply_ceilings(device, ceilings)
    graph = None
    if args.hf:
        from perfpredict.compiler_hooks.featurize import featurize
        from perfpredict.compiler_hooks.hf_frontend import model_from_hf

        model, inputs, name = model_from_hf(args.hf, batch_size=args.batch, seq_len=args.seq, dtype=args.dtype)
        graph = featurize(model, inputs, dtype=args.dtype).with_run(name=name)
    written = plot_roofline(graph, device, args.plot_out, ceilings=ceilings)
    print(f"{PROG}: wrote {', '.join(str(p) for p in written)}", file=sys.stderr)
    return EXIT_OK
