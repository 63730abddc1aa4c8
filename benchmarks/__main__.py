"""``python -m benchmarks [NAME [ARGS...]]``: list the suite, run one benchmark, or ``all`` of the CPU ones;
``python -m benchmarks stale`` lists the results that no longer come from today's code (:mod:`benchmarks.stale`).

Each benchmark is a script that also runs as ``python benchmarks/NAME.py``; it writes
``benchmarks/results/NAME*.md`` with the command and the environment that produced it. Without ARGS a benchmark
runs with the arguments that produced its committed result on this project's CPU host (the table below).
"""

from __future__ import annotations

import runpy
import sys
import time
from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent


class Benchmark(NamedTuple):
    what: str  # the figure it reproduces
    default_args: tuple[str, ...]  # the committed result's arguments on the CPU host
    in_all: bool  # part of `python -m benchmarks all` (`make bench`): runs on a CPU in minutes


SUITE = {
    "accuracy": Benchmark(
        "held-out latency/memory accuracy per predictor and split",
        ("--device", "data/v3/cpu-amd-epyc-2c", "--predictors", "two_timeline,analytical,flops_linear,xgboost"),
        True,
    ),
    "timeline_accuracy": Benchmark(
        "two-timeline fit and interval coverage",
        (
            "data/v3/cpu-amd-epyc-2c",
            "--device",
            "cpu",
            "--fit",
            "--out",
            "benchmarks/results/timeline_accuracy-cpu-amd-epyc-2c.md",
        ),
        True,
    ),
    "speed": Benchmark("predict and predict_many latency", (), True),
    "cli_speed": Benchmark("CLI answer time as a multiple of `import torch`", (), True),
    "overhead": Benchmark("the torch.compile hook's share of compile time", (), True),
    "generation": Benchmark("LLM prefill/decode predictions against their bounds", (), True),
    "roofline": Benchmark("this host's measured ceilings", ("--device", "cpu"), True),
    "parallel_validation": Benchmark("multi-GPU collectives and memory against published figures", (), True),
    "tp_scaling": Benchmark(
        "decode time against tensor parallelism: LLM-Inference-Bench's H100 tp 1-4 rows, 70B TPOT at tp 2-8",
        ("--before", "benchmarks/results/tp_scaling_before.json"),
        True,
    ),
    "never_slower": Benchmark(
        "a GPU at least as fast on every datasheet figure, in its architecture, is never predicted slower", (), True
    ),
    "collective_validation": Benchmark(
        "measured collective curves held out by size decade against Vidur's NCCL timings; vLLM's custom all-reduce",
        (),
        True,
    ),
    "llm_serving": Benchmark("LLM serving (vLLM-class, transformers) against public measurements", (), True),
    "serving_sim": Benchmark(
        "serve-sim: a 1,000-request simulation's time, its step-time surface against exact costs, a deploy search",
        (),
        True,
    ),
    "robustness": Benchmark(
        "torch.compile(backend='perfpredict') on 100 random architectures: outputs unchanged, reports sane", (), True
    ),
    "nas_speed": Benchmark("NAS: ms per candidate, ratio to a dynamo trace, 1,000 candidates", (), True),
    "nas_help_fbnet": Benchmark("NAS: rank on HELP's FBNet latencies and our H100 timings", (), False),
    "nas_measure_fbnet": Benchmark("NAS: time FBNet candidates on a local GPU (GPU)", ("--out", "fbnet.json"), False),
    "repeatability": Benchmark(
        "label repeatability of the collector",
        ("--device", "cpu", "--min-seconds", "0.3", "--warmup-max-seconds", "1.0"),
        False,
    ),
    "collector": Benchmark(
        "collector rows per minute",
        ("--device", "cpu", "--minutes", "2", "--out", "benchmarks/results/collector-cpu.md"),
        False,
    ),
    "op_efficiency": Benchmark(
        "learned per-op efficiency on op rows", ("data/v3/cpu-amd-epyc-2c/ops", "--device", "cpu"), False
    ),
    "speed_learned": Benchmark("learned predictors' inference speed", ("--device", "cpu"), False),
    "cpu_calibrated": Benchmark(
        "real HF models on this CPU: calibrate-host, measure and predict in one run (minutes, a quiet host)",
        ("--out", "benchmarks/results/cpu_calibrated.md"),
        False,
    ),
    "relax_overhead": Benchmark(
        "the TVM Relax pass's share of build time", ("--layers", "12", "--seq", "128", "--repeats", "3"), False
    ),
    "gnn_llm": Benchmark("GNN+LLM predictor ablation (hours)", ("ablation", "--device", "cpu-amd-epyc-2c"), False),
    "predicted_vs_actual": Benchmark(
        "predictions taken without a GPU against a GPU lease's measurements (GPU)", (), False
    ),
    "measurement_v3": Benchmark("protocol v3 collection and its report (GPU lease)", (), False),
    "gpu_op_efficiency": Benchmark(
        "GPU device time per op: public rows predicting ours, and the shipped artifact (3 minutes)",
        ("--splits", "own", "--cap", "1500", "--trees", "300", "--save"),
        False,
    ),
    "external_neusight": Benchmark("NeuSight's published end-to-end table, reproduced (minutes, cached)", (), False),
}


def run(name: str, args: list[str]) -> int:
    bench = SUITE[name]
    argv = args or list(bench.default_args)
    print(f"== python benchmarks/{name}.py {' '.join(argv)}", file=sys.stderr, flush=True)
    sys.argv = [str(HERE / f"{name}.py"), *argv]
    t0 = time.perf_counter()
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    else:
        code = 0
    print(f"== {name}: exit {code} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return code


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        width = max(map(len, SUITE))
        for name, bench in SUITE.items():
            print(f"{name:<{width}}  {'all ' if bench.in_all else '    '} {bench.what}")
        print("\npython -m benchmarks NAME [ARGS...] | all   (results: benchmarks/results/NAME*.md)")
        print("python -m benchmarks stale                   (the results whose inputs changed since they ran)")
        return 0
    if argv[0] == "stale":
        from benchmarks import stale

        return stale.main(argv[1:])
    if argv[0] == "all":
        failed = [name for name, bench in SUITE.items() if bench.in_all and run(name, []) != 0]
        return 1 if failed else 0
    if argv[0] not in SUITE:
        print(
            f"unknown benchmark {argv[0]!r}; choose one of: {', '.join(SUITE)} (studies/ holds the one-off studies)",
            file=sys.stderr,
        )
        return 2
    return run(argv[0], argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
