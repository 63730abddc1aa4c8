"""Which results the README and docs/accuracy.md quote: each figure, the page that gives it, the result file it
comes from, and the text in that result it is read from.

``python -m benchmarks stale`` fails while any of these results is stale (its inputs changed since it ran) or has
no digest, and ``tests/benchmark_suite/test_quoted.py`` checks both ends of every row: the page still gives the
figure, names the result file, and the result still holds the text. A rerun that moves a quoted figure fails that
test until the page is updated. Add a row here with every figure a page starts quoting.
"""

from __future__ import annotations

from typing import NamedTuple

README = "README.md"
ACCURACY = "docs/accuracy.md"
RESULTS = "benchmarks/results"


class Quote(NamedTuple):
    page: str  # the page, relative to the repository root
    figure: str  # the figure as the page gives it (a literal substring of the page, its line breaks as spaces)
    result: str  # the result file, relative to the repository root
    source: str  # where the result gives it (a literal substring of the result)


NEUSIGHT = f"{RESULTS}/external_neusight.md"
LLM_SERVING = f"{RESULTS}/llm_serving.md"
H100_ACCURACY = f"{RESULTS}/accuracy_nvidia-h100-80gb-hbm3.md"
CPU_ACCURACY = f"{RESULTS}/accuracy_v3-cpu-amd-epyc-2c.md"
CPU_CALIBRATED = f"{RESULTS}/cpu_calibrated.md"
GPU_OPS = f"{RESULTS}/gpu_op_efficiency.md"
GPU_OP_SPLITS = f"{RESULTS}/gpu_op_efficiency_splits.md"
LLM_FOUNDRY = f"{RESULTS}/external_llm_foundry.md"
COLLECTIVES = f"{RESULTS}/collective_validation.md"
TP_SCALING = f"{RESULTS}/tp_scaling.md"
FRAMEWORKS = f"{RESULTS}/llm_frameworks.md"
POWER = f"{RESULTS}/llm_power.md"

QUOTES: tuple[Quote, ...] = (
    # README.md, "How accurate is it?"
    Quote(README, "80 single-GPU runs | 7.4% / 11.3% | NeuSight 8.9%", NEUSIGHT, "| all | 80 | 7.4% | 11.3% | 8.9% |"),
    Quote(
        README, "11 runs on 4 GPUs (dp, tp, pp) | 2.8% / 4.1% | NeuSight 7.7%", NEUSIGHT, "| all | 11 | 2.8% | 4.1% |"
    ),
    Quote(README, "every layer GEMM of 43 of the 80 single-GPU runs", NEUSIGHT, "| all | 80 | 43 | 71 | 79 | 1 |"),
    Quote(README, "| 18.9% (A100 12.5-12.6%, H100 31%) |", LLM_FOUNDRY, "| **all** | 216 | **18.9%** |"),
    Quote(README, "| 18.9% (A100 12.5-12.6%, H100 31%) |", LLM_FOUNDRY, "| H100-SXM bf16 | 70 | 30.8% |"),
    Quote(README, "7.0% (median 5.4%)", LLM_SERVING, "| **all** | | | 171 / 171 | **7.0%** | **5.4%** |"),
    Quote(
        README,
        "9.9%, 12.7%, 8.4%; 6.4% (medians 7.1%, 8.8%, 6.6%; 4.7%)",
        FRAMEWORKS,
        "**TensorRT-LLM 0.11 (C++ runtime)**, test half: MAPE **9.9%**, median **7.1%**",
    ),  # fmt: skip
    Quote(
        README,
        "9.9%, 12.7%, 8.4%; 6.4% (medians 7.1%, 8.8%, 6.6%; 4.7%)",
        FRAMEWORKS,
        "**DeepSpeed-MII (FastGen)**, test half: MAPE **12.7%**, median **8.8%**",
    ),  # fmt: skip
    Quote(
        README,
        "9.9%, 12.7%, 8.4%; 6.4% (medians 7.1%, 8.8%, 6.6%; 4.7%)",
        FRAMEWORKS,
        "**llama.cpp (llama-bench)**, test half: MAPE **8.4%**, median **6.6%**",
    ),  # fmt: skip
    Quote(
        README,
        "9.9%, 12.7%, 8.4%; 6.4% (medians 7.1%, 8.8%, 6.6%; 4.7%)",
        FRAMEWORKS,
        "**vLLM 0.5.3 on GH200 (nothing fitted)**, every row: MAPE **6.4%**, median **4.7%**",
    ),  # fmt: skip
    Quote(README, "| 16.6% (median 13.9%) |", POWER, "48 runs: MAPE **16.6%**, median 13.9%"),
    Quote(
        README,
        "52% of sizes within 10% (median 9.1%)",
        COLLECTIVES,
        "a decade held out: 52% within 10% (median error 9.1%",
    ),
    Quote(README, "H100 SXM eager latency 24.9% / 25.1%", H100_ACCURACY, "| two_timeline | random_5fold | 24.94 |"),
    Quote(
        README, "H100 SXM eager latency 24.9% / 25.1%", H100_ACCURACY, "| two_timeline | leave_one_family_out | 25.06 |"
    ),
    Quote(README, "CPU 22.5% / 22.9%", CPU_ACCURACY, "| two_timeline | random_5fold | 22.54 |"),
    Quote(README, "CPU 22.5% / 22.9%", CPU_ACCURACY, "| two_timeline | leave_one_family_out | 22.91 |"),
    Quote(README, "(xgboost 23.1% / 22.4%", CPU_ACCURACY, "| xgboost | random_5fold | 23.14 |"),
    Quote(README, "(xgboost 23.1% / 22.4%", CPU_ACCURACY, "| xgboost | leave_one_family_out | 22.41 |"),
    Quote(
        README,
        "after `calibrate-host`, 21.3%",
        CPU_CALIBRATED,
        "| two_timeline (default, calibrated) | 21.0% | 21.9% | 21.3% |",
    ),
    # docs/accuracy.md, NeuSight's end-to-end table
    Quote(
        ACCURACY,
        "171,174 of the training split",
        NEUSIGHT,
        "| labelled, train | 23,377 | 4,122 | 0 | 0 | 31,005 | 42,576 | 39,404 | 30,690 | 171,174 |",
    ),
    Quote(
        ACCURACY,
        "26,847 of the test split",
        NEUSIGHT,
        "| labelled, test | 4,097 | 4,260 | 3,307 | 3,934 | 3,761 | 1,760 | 3,803 | 1,925 | 26,847 |",
    ),
    Quote(
        ACCURACY,
        "every layer GEMM (the distinct GEMMs a forward pass repeats) of 43 of the 80 single-GPU rows, at least half their layer-GEMM FLOPs in 71, and some of them in 79",
        NEUSIGHT,
        "| all | 80 | 43 | 71 | 79 | 1 |",
    ),
    Quote(
        ACCURACY,
        "| single GPU, inference (54) | **6.8%** | 11.6% | 9.7% |",
        NEUSIGHT,
        "| all | 54 | 6.8% | 11.6% | 9.7% |",
    ),
    Quote(
        ACCURACY,
        "| single GPU, training (26) | 8.9% | 10.5% | **7.3%** |",
        NEUSIGHT,
        "| all | 26 | 8.9% | 10.5% | 7.3% |",
    ),
    Quote(
        ACCURACY, "| single GPU, all (80) | **7.4%** | 11.3% | 8.9% |", NEUSIGHT, "| all | 80 | 7.4% | 11.3% | 8.9% |"
    ),
    Quote(
        ACCURACY,
        "| torch.compile, inference (12) | **5.2%** | 12.0% | 14.9% |",
        NEUSIGHT,
        "| all | 12 | 5.2% | 12.0% | 14.9% |",
    ),
    Quote(
        ACCURACY,
        "| 4 GPUs: dp4, tp4, pp4 (11) | **2.8%** | 4.1% | 7.7% |",
        NEUSIGHT,
        "| all | 11 | 2.8% | 4.1% | 7.7% |",
    ),
    Quote(ACCURACY, "A100-40GB PCIe 4.2% / 5.8% (6.5%)", NEUSIGHT, "| A100-40GB-PCIe | 12 | 4.2% | 5.8% | 6.5% |"),
    Quote(ACCURACY, "A100-80GB PCIe 12.1% / 9.6% (7.6%)", NEUSIGHT, "| A100-80GB-PCIe | 10 | 12.1% | 9.6% | 7.6% |"),
    Quote(ACCURACY, "H100 SXM 5.1% / 7.3% (6.3%)", NEUSIGHT, "| H100-SXM | 22 | 5.1% | 7.3% | 6.3% |"),
    Quote(ACCURACY, "L4 10.4% / 17.4% (12.4%)", NEUSIGHT, "| L4 | 10 | 10.4% | 17.4% | 12.4% |"),
    Quote(ACCURACY, "P100 2.4% / 15.5% (7.1%)", NEUSIGHT, "| P100-PCIe-16GB | 5 | 2.4% | 15.5% | 7.1% |"),
    Quote(ACCURACY, "P4 34.8% / 13.8% (27.1%)", NEUSIGHT, "| P4 | 3 | 34.8% | 13.8% | 27.1% |"),
    Quote(ACCURACY, "T4 4.3% / 16.3% (18.5%)", NEUSIGHT, "| T4 | 5 | 4.3% | 16.3% | 18.5% |"),
    Quote(ACCURACY, "V100 5.5% / 15.3% (6.6%)", NEUSIGHT, "| V100-PCIe-32GB | 13 | 5.5% | 15.3% | 6.6% |"),
    # docs/accuracy.md, llm-foundry's training table
    Quote(ACCURACY, "| all (216) | **18.9%** |", LLM_FOUNDRY, "| **all** | 216 | **18.9%** |"),
    Quote(ACCURACY, "| H100-SXM bf16 (70) | 30.8% | +30.8% |", LLM_FOUNDRY, "| H100-SXM bf16 | 70 | 30.8% | +30.8% |"),
    Quote(
        ACCURACY, "all 216 rows to 5.5% and the held-out 7B rows to 4.2%", LLM_FOUNDRY, "| **all** | 26 | **4.2%** |"
    ),
    # docs/parallel.md (every multi-GPU report's validation line names the results, not their figures)
    Quote("docs/parallel.md", "18.9% over all 216", LLM_FOUNDRY, "| **all** | 216 | **18.9%** |"),
    Quote(
        "docs/parallel.md",
        "llm-foundry's 216 runs (18.9% tokens/s/GPU MAPE",
        LLM_FOUNDRY,
        "| **all** | 216 | **18.9%** |",
    ),
    Quote("docs/parallel.md", "NeuSight's 11 4-GPU runs (2.8%", NEUSIGHT, "| all | 11 | 2.8% | 4.1% |"),
    # docs/accuracy.md, GPU device time per op
    Quote(
        ACCURACY, "319,790 labelled rows", GPU_OPS, "Labelled rows (NeuSight's floor-dominated rows left out): 319790"
    ),
    Quote(ACCURACY, "24.0% / 12.3% (2,189)", GPU_OPS, "24.0% / 12.3% (2189)"),
    Quote(ACCURACY, "fp16 GEMMs 17.3%, median 8.9%", GPU_OPS, "17.3% / 8.9% (1006)"),
    Quote(
        ACCURACY,
        "leave one GPU out, all GPUs | 22.7% / 14.4%",
        GPU_OP_SPLITS,
        "| all | 114.6% / 77.9% (114) | 30.7% / 23.4% (22654) |",
    ),
    Quote(ACCURACY, "leave one GPU out, all GPUs | 22.7% / 14.4%", GPU_OP_SPLITS, "22.7% / 14.4% (165640)"),
    # docs/accuracy.md, our own measurements
    Quote(
        ACCURACY, "24.9% / 25.1% (tau 0.855", H100_ACCURACY, "| two_timeline | random_5fold | 24.94 | 64.17 | 0.855 |"
    ),
    Quote(
        ACCURACY, "22.5% / 22.9% (tau 0.86)", CPU_ACCURACY, "| two_timeline | random_5fold | 22.54 | 2.166 | 0.864 |"
    ),
    Quote(ACCURACY, "59.5% off", H100_ACCURACY, "| analytical | random_5fold | 59.52 |"),
    Quote(
        ACCURACY,
        "the default is 21.3% off",
        CPU_CALIBRATED,
        "| two_timeline (default, calibrated) | 21.0% | 21.9% | 21.3% |",
    ),
    Quote(
        ACCURACY,
        "against 49.8% before",
        CPU_CALIBRATED,
        "| before: learned op efficiency, estimated ceilings | 49.6% | 50.0% | 49.8% |",
    ),
    # docs/accuracy.md, tensor-parallel serving
    Quote(
        ACCURACY,
        "H100-SXM 31.8 / 19.0 / 14.0 ms at tp 2 / 4 / 8",
        TP_SCALING,
        "| Llama-2-70b-hf | H100-SXM | 1 | 8 | 13.98 |",
    ),
)


def quoted_results(quotes: tuple[Quote, ...] = QUOTES) -> dict[str, list[str]]:
    """Each result file quoted, with the pages that quote it."""
    out: dict[str, list[str]] = {}
    for q in quotes:
        pages = out.setdefault(q.result, [])
        if q.page not in pages:
            pages.append(q.page)
    return dict(sorted(out.items()))
