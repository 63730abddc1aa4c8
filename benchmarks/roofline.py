"""Run the roofline suite and write the committed results: JSON, a Markdown table and the plot (PNG + SVG).

    .venv/bin/python benchmarks/roofline.py --device cpu            # this machine's CPU (runs anywhere)
    .venv/bin/python benchmarks/roofline.py --device cuda --name h100   # on a GPU host, with perfpredict[gpu]

Writes benchmarks/results/roofline_<name>.{json,md,png,svg}; for the CPU also data/measured_cpu/<name>.json (not
perfpredict/data/measured/, which the catalog auto-loads on every machine: a CPU's ceilings belong to one host).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks import provenance

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _fmt(key: str, c: dict) -> str:
    unit = c.get("unit", "")
    best = c["min"] if unit == "s" else c["max"]
    if unit == "s":
        return f"{best * 1e6:.2f} us (median {c['median'] * 1e6:.2f})"
    scale, prefix = (1e12, "T") if best >= 1e12 else (1e9, "G")
    return f"{best / scale:,.1f} {prefix}{unit} (median {c['median'] / scale:,.1f})"


def markdown(data: dict, command: str, plot_name: str) -> str:
    env = data.get("environment", {})
    clocks = data.get("clocks", {})
    lines = [
        f"# Roofline: {data.get('device_name_reported', data['device'])} ({data['target']})",
        "",
        f"Command: `{command}`",
        "",
        f"Measured {data.get('created', '')}; {'quick' if data.get('quick') else 'full'} mode. "
        f"Device: {data.get('device_name_reported')}"
        + (
            f" (LLVM cpu `{data.get('llvm_cpu')}`, {data.get('threads')} threads, {data.get('vector_bits')}-bit "
            f"vectors, caches {data.get('caches_bytes')})"
            if data["target"] == "cpu"
            else ""
        )
        + ".",
        f"Environment: python {env.get('python')}, numba {env.get('numba')}, numpy {env.get('numpy')}, "
        f"torch {env.get('torch')}; {env.get('platform')}.",
        "",
    ]
    if data["target"] == "cpu":
        b, a = clocks.get("before", {}), clocks.get("after", {})
        lines += [
            f"Clock (dependent-multiply probe): before {(b.get('clock_hz') or 0) / 1e9:.2f} GHz, after "
            f"{(a.get('clock_hz') or 0) / 1e9:.2f} GHz; load average before {b.get('loadavg')}, after "
            f"{a.get('loadavg')}.",
            "",
        ]
    lines += [
        "| ceiling | best (median) | kernel | of datasheet | at observed clock | spread | samples |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, c in data["ceilings"].items():
        fd, fo = c.get("fraction_of_datasheet"), c.get("fraction_at_observed_clock")
        lines.append(
            f"| `{key}` | {_fmt(key, c)} | {c.get('kernel')} ({c.get('implementation')}) | "
            f"{'-' if fd is None else f'{fd:.1%}'} | {'-' if fo is None else f'{fo:.1%}'} | "
            f"{c['spread']:.1%}{' **>5%**' if c.get('spread_flagged') else ''} | {c.get('samples')} |"
        )
    lines += ["", "Method per ceiling:", ""]
    lines += [f"- `{k}`: {c.get('method')}" for k, c in data["ceilings"].items()]
    if data.get("notes"):
        lines += ["", "Notes:", ""] + [f"- {n}" for n in data["notes"]]
    if data.get("warnings"):
        lines += ["", "Warnings (spread over 5% or failed checks):", ""] + [f"- {w}" for w in data["warnings"]]
    lines += ["", f"![roofline]({plot_name}.png)", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--name", default=None, help="results name (default cpu, or the catalog device slug)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--hf", default="bert-base-uncased", help="model placed on the plot ('' for none)")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    args = p.parse_args(argv)
    command = provenance.command(__file__, argv)

    from perfpredict.hardware.devices import apply_ceilings, get_device, local_cpu
    from perfpredict.kernels.ceilings import write_ceilings
    from perfpredict.kernels.plot import plot_roofline
    from perfpredict.kernels.suite import run_roofline

    data = run_roofline(args.device, quick=args.quick, progress=lambda m: print(m, file=sys.stderr), command=command)
    name = args.name or (
        "cpu" if args.device == "cpu" else "".join(ch if ch.isalnum() else "-" for ch in data["device"].lower())
    )
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_ceilings(data, RESULTS / f"roofline_{name}.json")
    if args.device == "cpu":
        write_ceilings(data, ROOT / "data" / "measured_cpu" / f"{name}.json")
    device = apply_ceilings(local_cpu() if args.device == "cpu" else get_device(data["device"]), data)
    graph = None
    if args.hf:
        from perfpredict.api import featurize
        from perfpredict.compiler_hooks.hf_frontend import model_from_hf

        model, inputs, model_name = model_from_hf(args.hf, batch_size=args.batch, seq_len=args.seq)
        graph = featurize(model, inputs).with_run(name=f"{model_name} b{args.batch} s{args.seq}")
    plot_roofline(graph, device, RESULTS / f"roofline_{name}", ceilings=data)
    (RESULTS / f"roofline_{name}.md").write_text(markdown(data, command, f"roofline_{name}"))
    print(f"wrote {RESULTS}/roofline_{name}.{{json,md,png,svg}}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
