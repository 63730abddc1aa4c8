"""Predicted vs measured for well-known models at their official configs, on a real GPU.

The prediction is taken first, on a machine without the GPU, and committed; the measurement comes after, on the GPU:

    python benchmarks/predicted_vs_actual.py predict --device-name H100-SXM        # here, no GPU needed
    python benchmarks/predicted_vs_actual.py measure --device cuda --out m.json     # on the GPU host
    python benchmarks/predicted_vs_actual.py report --device-name H100-SXM --measured m.json

``predict`` captures each model on the meta device and writes
``benchmarks/results/predicted_vs_actual/predictions_<device>.json``. ``measure`` rebuilds the same models on the
GPU with random weights and random inputs (token ids, pixel values) and measures them eagerly, under ``no_grad``,
with the collector's protocol (:meth:`perfpredict.profiling.monitor.Monitor.measure`). ``report`` joins both into
``benchmarks/results/predicted_vs_actual_<device>.md``. Inference only: the shipped configs are base models or
task heads without labels, so a training step would need a loss we would have to invent.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

from perfpredict.core.units import GIB, MIB

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import command, git_commit

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PRED_DIR = RESULTS / "predicted_vs_actual"

MODELS = (
    "bert-base-uncased",
    "bert-large-uncased",
    "distilbert-base-uncased",
    "roberta-base",
    "gpt2",
    "gpt2-medium",
    "google-t5/t5-base",
    "Qwen/Qwen2-0.5B",
    "meta-llama/Llama-2-7b-hf",
    "microsoft/resnet-50",
    "google/vit-base-patch16-224",
    "facebook/convnext-tiny-224",
    "microsoft/swin-tiny-patch4-window7-224",
    "google/efficientnet-b0",
    "google/mobilenet_v2_1.0_224",
)
# (dtype, batch): latency-bound single requests, a throughput batch in bf16, and an fp32 batch.
CONFIGS = (("bfloat16", 1), ("bfloat16", 32), ("float32", 8))
LLM_CONFIGS = (("bfloat16", 1), ("bfloat16", 8))  # 7B models: fp32 batches are not how anyone serves them


def configs_for(model_id: str) -> tuple:
    return LLM_CONFIGS if "7b" in model_id.lower() else CONFIGS


def _value(pred) -> float | None:
    return None if pred is None else float(pred.value)


def predict_all(device_name: str, models: list[str], predictor: str = "auto") -> dict:
    import torch

    from perfpredict.api import featurize
    from perfpredict.compiler_hooks.hf_frontend import model_from_hf
    from perfpredict.graph_report import report_for_graph

    rows = []
    for model_id in models:
        for dtype, batch in configs_for(model_id):
            t0 = time.perf_counter()
            model, inputs, _ = model_from_hf(model_id, batch_size=batch, dtype=dtype)
            graph = featurize(model, inputs, dtype=dtype, name=model_id)
            # `measure` builds each model straight in its dtype (from_config(dtype=...)): no float32 load to predict
            rep = report_for_graph(
                graph, device=device_name, phase="inference", predictor=predictor, weights_built_in=None
            )
            rows.append(
                {
                    "model": model_id,
                    "dtype": dtype,
                    "batch": batch,
                    "seq_len": rep.seq_len,
                    "predictor": rep.predictor,
                    "latency_ms": _value(rep.latency_ms),
                    "latency_low_ms": rep.latency_ms.low,
                    "latency_high_ms": rep.latency_ms.high,
                    "peak_memory_bytes": _value(rep.peak_memory_bytes),
                    "energy_j": _value(rep.energy_j),
                    "avg_power_w": _value(rep.avg_power_w),
                    "fits_in_memory": rep.fits_in_memory,
                    "flops": int(graph.total_flops),
                    "seconds": round(time.perf_counter() - t0, 2),
                }
            )
            print(
                f"predict: {model_id} {dtype} b{batch}: {rows[-1]['latency_ms']:.3f} ms ({rows[-1]['predictor']})",
                file=sys.stderr,
                flush=True,
            )
            torch._dynamo.reset()
    return {
        "device_name": device_name,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "commit": (git_commit(ROOT) or "")[:12],
        "torch_version": torch.__version__,
        "phase": "inference",
        "rows": rows,
    }


def _random_inputs(inputs: tuple, config, device: str) -> tuple:
    """The example inputs' shapes with random contents: never time on zeros."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x = inputs[0]
    if x.dtype == torch.long:
        vocab = int(getattr(config, "vocab_size", 1000) or 1000)
        return (torch.randint(0, vocab, tuple(x.shape), generator=gen).to(device),)
    return (torch.randn(tuple(x.shape), generator=gen).to(dtype=x.dtype, device=device),)


def measure_one(row: dict, monitor, device: str) -> dict:
    import torch

    from perfpredict.compiler_hooks.hf_frontend import load_config, model_from_hf
    from perfpredict.profiling.collect_engine import is_oom

    out = {k: row[k] for k in ("model", "dtype", "batch")}
    model = inputs = None
    try:
        monitor.begin_window("pva")  # opened before the build, so the peak counts the weights
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model, inputs, _ = model_from_hf(row["model"], batch_size=row["batch"], dtype=row["dtype"], device=device)
        model.eval()
        inputs = _random_inputs(inputs, load_config(row["model"]), device)

        def step():
            with torch.no_grad():
                return model(*inputs)

        m = monitor.measure(step, name="pva", begin=False, batch_size=row["batch"])
        out.update(
            status="ok",
            latency_ms=m.latency_ms,
            latency_cv=m.latency_cv,
            runs=m.runs,
            peak_memory_bytes=m.peak_memory_bytes,
            energy_j=m.energy_j,
            avg_power_w=m.avg_power_w,
            energy_method=m.energy_method,
            device_name=m.env.device_name,
        )
    except Exception as err:  # noqa: BLE001 - one failed model must not lose the others
        monitor.abort_window("pva")
        out.update(status="oom" if is_oom(err) else "error", error=f"{type(err).__name__}: {str(err)[:200]}")
    finally:
        model = inputs = None  # drop the model before the next one is built
        if device != "cpu":
            torch.cuda.empty_cache()
    return out


def measure_all(predictions: dict, device: str) -> dict:
    import torch

    from perfpredict.profiling.monitor import Monitor

    monitor = Monitor(device)
    rows = []
    for row in predictions["rows"]:
        rows.append(measure_one(row, monitor, device))
        r = rows[-1]
        print(
            f"measure: {r['model']} {r['dtype']} b{r['batch']}: "
            + (f"{r['latency_ms']:.3f} ms, cv {r['latency_cv']:.3f}" if r["status"] == "ok" else r["error"]),
            file=sys.stderr,
            flush=True,
        )
    return {
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "torch_version": torch.__version__,
        "cuda": torch.version.cuda,
        "device_name": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "predictions_created": predictions["created"],
        "rows": rows,
    }


def _err(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or meas <= 0:
        return None
    return (pred - meas) / meas


def report(predictions: dict, measured: dict, command: str) -> str:
    from perfpredict.hardware.devices import get_device

    # The prediction's peak memory includes the device's runtime overhead (CUDA context, allocator slack); the
    # measurement is the torch allocator's peak above the level before the build. Compare tensors with tensors.
    overhead = get_device(predictions["device_name"]).runtime_overhead_bytes
    meas = {(r["model"], r["dtype"], r["batch"]): r for r in measured["rows"]}
    lines = [
        f"# Predicted vs measured: {predictions['device_name']} (inference)",
        "",
        f"Predictions: {predictions['created']}, commit {predictions['commit']}, torch "
        f"{predictions['torch_version']}, taken without the GPU{_after(predictions, measured)}. Measured: "
        f"{measured['created']} on "
        f"{measured['device_name']}, torch {measured['torch_version']}, CUDA {measured.get('cuda')}; eager "
        "PyTorch, random weights and inputs, `no_grad`, the collector's protocol (median of timed runs, "
        "CUDA events; NVML energy over at least 1 s).",
        "",
        f"Memory: the predicted peak minus the device's runtime overhead ({overhead / MIB:.0f} MiB of CUDA "
        "context and allocator slack, which the report adds), against torch's allocator peak above the level "
        "before the model was built.",
        "",
        f"Command: `{command}`",
        "",
        "| model | dtype | batch | predictor | latency predicted (ms) | measured (ms) | error | tensor memory "
        "predicted (GiB) | measured (GiB) | error | energy predicted (J) | measured (J) | error |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    errs: dict[str, list[float]] = {"latency": [], "memory": [], "energy": []}
    for p in predictions["rows"]:
        m = meas.get((p["model"], p["dtype"], p["batch"]), {"status": "not measured"})
        if m.get("status") != "ok":
            lines.append(
                f"| {p['model']} | {p['dtype']} | {p['batch']} | {p['predictor']} | {p['latency_ms']:.3f} | "
                f"{m.get('status')} | | | | | | | |"
            )
            continue
        tensors = None if p.get("peak_memory_bytes") is None else p["peak_memory_bytes"] - overhead
        cells = []
        for what, pred, got, scale in (
            ("latency", p.get("latency_ms"), m.get("latency_ms"), 1.0),
            ("memory", tensors, m.get("peak_memory_bytes"), GIB),
            ("energy", p.get("energy_j"), m.get("energy_j"), 1.0),
        ):
            e = _err(pred, got)
            if e is not None:
                errs[what].append(abs(e))
            cells += [_fmt(pred, scale), _fmt(got, scale), "-" if e is None else f"{e:+.0%}"]
        lines.append(f"| {p['model']} | {p['dtype']} | {p['batch']} | {p['predictor']} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Mean absolute percentage error over the measured rows: "
        + ", ".join(f"{k} {100 * sum(v) / len(v):.1f}% ({len(v)} rows)" for k, v in errs.items() if v)
        + ".",
        "",
    ]
    return "\n".join(lines)


def _after(predictions: dict, measured: dict) -> str:
    """Predictions re-taken after the measurement (a model change checked against it) must say so."""
    if dt.datetime.fromisoformat(predictions["created"]) <= dt.datetime.fromisoformat(measured["created"]):
        return ""
    return (
        " **after the measurement** (a later model checked against the same measurements: a post-hoc check, "
        "not a forecast)"
    )


def _fmt(value: float | None, scale: float) -> str:
    return "-" if value is None else f"{value / scale:.3f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    a = sub.add_parser("predict")
    a.add_argument("--device-name", default="H100-SXM")
    a.add_argument("--models", default=",".join(MODELS))
    a.add_argument("--predictor", default="auto", help="auto (the device's default), analytical, xgboost, ...")
    b = sub.add_parser("measure")
    b.add_argument("--device", default="cuda")
    b.add_argument("--device-name", default="H100-SXM", help="which predictions file to measure")
    b.add_argument("--out", required=True)
    c = sub.add_parser("report")
    c.add_argument("--device-name", default="H100-SXM")
    c.add_argument("--measured", required=True)
    for parser in (a, b, c):
        parser.add_argument(
            "--tag",
            default="",
            help="a second predictions file beside the first, e.g. one re-taken "
            "after a model change: predictions_<device>-<tag>.json, predicted_vs_actual_<device>-<tag>.md",
        )
    args = p.parse_args(argv)
    slug = args.device_name.lower() + (f"-{args.tag}" if args.tag else "")
    pred_path = PRED_DIR / f"predictions_{slug}.json"
    if args.command == "predict":
        PRED_DIR.mkdir(parents=True, exist_ok=True)
        predictions = predict_all(args.device_name, args.models.split(","), args.predictor)
        pred_path.write_text(json.dumps(predictions, indent=1) + "\n")
        print(f"wrote {pred_path}", file=sys.stderr)
    elif args.command == "measure":
        device = "cuda:0" if args.device == "cuda" else args.device
        Path(args.out).write_text(json.dumps(measure_all(json.loads(pred_path.read_text()), device), indent=1) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        text = report(json.loads(pred_path.read_text()), json.loads(Path(args.measured).read_text()), command(__file__))
        out = RESULTS / f"predicted_vs_actual_{slug}.md"
        out.write_text(text)
        print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
