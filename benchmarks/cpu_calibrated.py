"""Real HuggingFace models on this CPU: calibrated, measured and predicted in one run.

    python benchmarks/cpu_calibrated.py --out benchmarks/results/cpu_calibrated.md

1. **Calibrate**: ``perfpredict calibrate-host``'s measurement (dispatch per op kind, and the CPU op probes at the
   thread count torch uses), written to ``benchmarks/results/cpu_calibrated/profile-<stamp>.json``, never to the
   user's config folder. ``--profile FILE`` reuses a stored one.
2. **Predict**: each model captured on the meta device the way ``perfpredict predict --hf`` does, and predicted by
   the default (``two_timeline``) with that profile, the ``cpu`` device's ceilings from it. Beside it: the model
   before this calibration existed (the learned per-op efficiency of ``artifacts/op-efficiency-cpu`` at the
   catalog's estimated ceilings, with the calibrated dispatch: what ``calibrate-host`` gave until now), and the
   whole-model ``xgboost`` trained on the CPU rows.
3. **Measure**: every model built on the CPU with random weights and random inputs, eager, ``no_grad``, float32,
   subnormal floats flushed to zero (random weights make EfficientNet-B0's activations subnormal, which trained
   weights do not).
   Interleaved rounds: each round times every (model, batch) once, each time the median of at least 3 calls
   (filling 0.3 s); the label is the median of the round values, the spread ``(max - min) / label`` of the rounds.
   The load average is recorded per round. ``--measured FILE`` reuses a stored measurement
   (``benchmarks/results/cpu_calibrated/measured-<stamp>.json``).

Models: the shipped configs that fit in memory in float32 (the 7B LLMs do not), text at sequence 128, images at
their config's size, batches 1 and 4. Nothing is fitted on these rows: the op model's figures come from the probes,
the dispatch scale from the committed CPU rows. The structure of the CPU op model (its classes and fits) was chosen
looking at ``TUNING`` models only; the others (``HELD_OUT``) were first measured after it was fixed, and the report
gives both groups apart.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
STORE = RESULTS / "cpu_calibrated"
sys.path.insert(0, str(Path(__file__).parent))  # the sibling report module, however this file is run
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import command, digest_text, inputs_of, write_result  # noqa: E402

#: one model of each kind the CPU model's structure was tuned on
TUNING = (
    "bert-base-uncased",
    "gpt2",
    "google/vit-base-patch16-224",
    "microsoft/resnet-50",
    "google/mobilenet_v2_1.0_224",
)
#: scored only: encoders, decoders, a T5 encoder, vision transformers and CNNs
HELD_OUT = (
    "bert-large-uncased",
    "roberta-base",
    "distilbert-base-uncased",
    "microsoft/deberta-v3-base",
    "gpt2-medium",
    "Qwen/Qwen2-0.5B",
    "google-t5/t5-base",
    "facebook/deit-base-patch16-224",
    "facebook/convnext-tiny-224",
    "microsoft/swin-tiny-patch4-window7-224",
    "google/efficientnet-b0",
)
TEXT_SEQ = 128
CLOCKS = {"wall": time.perf_counter_ns, "cpu": time.process_time_ns}
MIN_CALLS, WINDOW_S = 3, 0.3


def calibrate_profile(path: Path, clock) -> dict:
    from perfpredict.learning.host_calibration import calibrate

    t0 = time.perf_counter()
    profile = calibrate("cpu_calibrated benchmark", say=lambda m: print(m, file=sys.stderr, flush=True), clock=clock)
    seconds = time.perf_counter() - t0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile.to_json())
    print(f"calibrated in {seconds:.1f} s: {path}", file=sys.stderr, flush=True)
    return {
        "seconds": round(seconds, 1),
        "path": str(path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path),
    }


def seq_of(model_id: str) -> int | None:
    from perfpredict.compiler_hooks.hf_frontend import load_config

    return TEXT_SEQ if getattr(load_config(model_id), "vocab_size", None) else None


def spread_probes(probe_rounds: list[list[dict]]) -> list[dict]:
    """The probe rounds timed between the measurement rounds as one calibration: each probe's median round."""
    from perfpredict.profiling.rounds import label

    out = []
    for same in zip(*probe_rounds):
        lab = label([p["seconds"] for p in same])
        out.append({**same[0], "seconds": lab.value, "spread": round(lab.spread, 4), "rounds": lab.rounds})
    return out


def predict_all(
    items: list[tuple[str, int]], profile_path: Path, spread: list[dict] | None = None
) -> dict[tuple[str, int], dict]:
    """Predicted milliseconds per (model, batch): the calibrated default, the learned efficiency before, xgboost,
    and with ``spread`` the default calibrated with the probe rounds timed between the measurement rounds."""
    from perfpredict.compiler_hooks.hf_capture import capture
    from perfpredict.graph_report import report_for_graph
    from perfpredict.hardware import devices
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.host_model import HostProfile
    from perfpredict.predictors.two_timeline import TwoTimelinePredictor

    profile = refit(HostProfile.from_file(profile_path))
    os.environ["PERFPREDICT_HOST_PROFILE"] = str(profile_path)
    devices.reset_catalog()
    calibrated = devices.get_device("cpu")
    before = TwoTimelinePredictor(replace(profile, cpu_ops=None, cpu_ceilings=None))
    now = TwoTimelinePredictor(profile)
    spread_model = TwoTimelinePredictor(refit(profile, spread)) if spread else None
    out = {}
    for model_id, batch in items:
        graph, _ = capture(model_id, batch_size=batch, seq_len=seq_of(model_id), dtype="float32", phase="inference")
        config = RunConfig(phase="inference")
        row = {
            "two_timeline": now.predict(graph, calibrated, config).latency_ms.value,
            "before": before.predict(graph, devices.detect_local_cpu(), config).latency_ms.value,
            "spread": spread_model.predict(graph, calibrated, config).latency_ms.value if spread_model else None,
            "nodes": len(graph.nodes),
            "gflop": round(graph.total_flops / 1e9, 2),
        }
        try:
            row["xgboost"] = report_for_graph(graph, device="cpu", predictor="xgboost").latency_ms.value
        except Exception as err:  # noqa: BLE001 - the learned predictor is optional here
            row["xgboost"] = None
            print(f"xgboost: {type(err).__name__}: {err}", file=sys.stderr)
        out[(model_id, batch)] = row
        print(f"predict {model_id} b{batch}: {row}", file=sys.stderr, flush=True)
    return out


def refit(profile, probes: list[dict] | None = None):
    """The profile with its CPU op model fitted again by this code (the same fit calibrate-host makes) from its
    stored probes, or from ``probes``, so a stored calibration scores the current model."""
    from perfpredict.kernels.cpu_op_probes import ProbeResult
    from perfpredict.learning import cpu_op_model_fit
    from perfpredict.predictors import cpu_op_model

    results = [ProbeResult(**p) for p in (probes or profile.details["probes"])]
    old = cpu_op_model.CpuOpModel.from_dict(profile.cpu_ops)
    model = cpu_op_model_fit.fit(cpu_op_model_fit.device_samples(results, profile.dispatch_us), old.threads, old.source)
    return replace(profile, cpu_ops=model.to_dict())


def measure_all(items: list[tuple[str, int]], rounds: int, save, probe_rounds: bool, clock) -> dict:
    import torch

    from perfpredict.compiler_hooks.hf_frontend import load_config, model_from_hf
    from perfpredict.kernels import cpu_op_probes

    built, models = {}, {}
    for model_id, batch in items:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            if model_id not in models:  # one model per id, shared by its batches
                models[model_id] = model_from_hf(model_id, batch_size=1, seq_len=seq_of(model_id), device="cpu")[0]
                models[model_id].eval()
            _, inputs, _ = model_from_hf(model_id, batch_size=batch, seq_len=seq_of(model_id), device="meta")
        built[(model_id, batch)] = (models[model_id], random_inputs(inputs, load_config(model_id)))
        print(f"built {model_id} b{batch}", file=sys.stderr, flush=True)
    samples: dict[tuple[str, int], list[float]] = {k: [] for k in items}
    loads, probes = [], []
    with torch.no_grad():
        for model, x in built.values():
            model(*x)  # warm-up: oneDNN's primitive caches, the allocator
        for r in range(rounds):
            order = items if r % 2 == 0 else items[::-1]  # alternate, so drift does not favour either end
            if probe_rounds:  # one round of the calibration's probes before each round of the models
                timed = cpu_op_probes.time_probes(cpu_op_probes.probe_set(), rounds=1, clock=clock)
                probes.append([p.as_dict() for p in timed])
            loads.append(os.getloadavg()[0])
            for key in order:
                samples[key].append(time_step(*built[key], clock))
            print(f"round {r + 1}/{rounds}, load {loads[-1]:.2f}", file=sys.stderr, flush=True)
            save({**labels(samples, loads), "probe_rounds": probes})
    return {**labels(samples, loads), "probe_rounds": probes}


def labels(samples: dict[tuple[str, int], list[float]], loads: list[float]) -> dict:
    """The measurement as stored: per row the median of its rounds, the rounds and their spread."""
    import torch

    from perfpredict.hardware import cpu_detection

    rows = {}
    for (model_id, batch), values in samples.items():
        label = statistics.median(values)
        rows[f"{model_id}|{batch}"] = {"ms": label, "rounds_ms": values, "spread": (max(values) - min(values)) / label}
    return {
        "rows": rows,
        "load_average_per_round": loads,
        "threads": torch.get_num_threads(),
        "cpu_model": cpu_detection.cpu_model(),
        "torch_version": torch.__version__,
    }


def time_step(model, inputs: tuple, clock) -> float:
    """Milliseconds of ``model(*inputs)`` by ``clock``: the median of at least MIN_CALLS calls, as many as fill
    WINDOW_S."""
    times = []
    start = time.perf_counter()
    while len(times) < MIN_CALLS or time.perf_counter() - start < WINDOW_S:
        t0 = clock()
        model(*inputs)
        times.append((clock() - t0) / 1e6)
    return statistics.median(times)


def random_inputs(inputs: tuple, config) -> tuple:
    """The example inputs' shapes with random contents (token ids in the vocabulary, normal pixels)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x = inputs[0]
    if x.dtype == torch.long:
        return (torch.randint(0, int(config.vocab_size), tuple(x.shape), generator=gen),)
    return (torch.randn(tuple(x.shape), generator=gen, dtype=x.dtype),)


def main(argv: list[str] | None = None) -> int:
    from cpu_calibrated_report import render

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(TUNING + HELD_OUT))
    p.add_argument("--batches", default="1,4")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", default=None, help="a stored calibration to reuse (else calibrate now)")
    p.add_argument("--measured", default=None, help="a stored measurement to reuse (else measure now)")
    p.add_argument("--out", default=None, help="the markdown report (default: print it)")
    p.add_argument("--store", default=str(STORE), help="where the calibration and the measurement are written")
    p.add_argument("--skip-predict", action="store_true", help="calibrate and measure only (predict later)")
    p.add_argument(
        "--probe-rounds",
        action="store_true",
        help="also time one round of the calibration's probes before each measurement round, and predict with "
        "those rounds as a second calibration (a busy host drifts between the two halves of one run)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, every core)")
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall time (default), or this process's CPU time (with --threads 1 only): on a busy host, what one "
        "thread takes when it runs, which checks the model's structure without the other tenants' share",
    )
    args = p.parse_args(argv)
    if args.clock == "cpu" and args.threads != 1:
        p.error("--clock cpu counts every thread's CPU time: use it with --threads 1")
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)  # before the calibration: it probes at the threads the models run with
    # Random weights drive some layers of EfficientNet-B0 into subnormal floats (|x| ~ 1e-43 after its
    # squeeze-excitation), which x86 computes 7x slower (527 ms against 70 at one thread); trained weights do not.
    # Flushing them to zero times the models as trained ones run (the probes' normal inputs are unaffected).
    torch.set_flush_denormal(True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%d-%H%M")
    store = Path(args.store)
    store.mkdir(parents=True, exist_ok=True)
    items = [(m, int(b)) for m in args.models.split(",") for b in args.batches.split(",")]
    run = {"started": stamp, "command": command(__file__)}
    profile = Path(args.profile) if args.profile else store / f"profile-{stamp}.json"
    clock = CLOCKS[args.clock]
    run["calibration"] = {"path": args.profile, "seconds": None} if args.profile else calibrate_profile(profile, clock)
    run["clock"] = args.clock
    if args.measured:
        measured = json.loads(Path(args.measured).read_text())
    else:
        path = store / f"measured-{stamp}.json"

        def save(data: dict) -> None:
            path.write_text(
                json.dumps({**data, "created": stamp, "calibration": run["calibration"], "clock": args.clock}, indent=1)
                + "\n"
            )

        measured = measure_all(items, args.rounds, save, args.probe_rounds, clock)
        save(measured)
        measured = json.loads(path.read_text())
    if args.skip_predict:
        return 0
    spread = spread_probes(measured["probe_rounds"]) if measured.get("probe_rounds") else None
    predicted = predict_all(items, profile, spread)
    run["inputs"] = digest_text(inputs_of(__file__, ("benchmarks/cpu_calibrated_report.py",)))
    text = render(run, measured, predicted, items, TUNING)
    write_result(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
