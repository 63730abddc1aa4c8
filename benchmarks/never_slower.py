"""A GPU at least as fast on every datasheet figure, in its architecture, against the GPUs it beats: never slower?

    python benchmarks/never_slower.py [--out benchmarks/results/never_slower.md]

Every pair of catalog GPUs (a, b) of one architecture where a matches or beats b on every datasheet figure
(``hardware/dominance.py``), on a CNN (ResNet-50, batch 256 training, 64 inference), an encoder (BERT-large
training at batch 32 x 512, BERT-base inference at 32 x 128) and a decoder (GPT-2 training at 8 x 1,024,
inference at 8 x 512), each in fp32, TF32 and AMP (fp16): the predicted latency of a against b's. An inversion is a
faster card predicted slower. ``tests/predictors/test_never_slower.py`` holds the same rule on smaller graphs.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # as a script too: benchmarks.* from this checkout
from benchmarks.provenance import header, write_result

CASES = {
    "ResNet-50 training, batch 256": ("microsoft/resnet-50", {"batch": 256, "phase": "training"}),
    "BERT-large training, 32 x 512": ("bert-large-uncased", {"batch": 32, "seq": 512, "phase": "training"}),
    "GPT-2 training, 8 x 1,024": ("gpt2", {"batch": 8, "seq": 1024, "phase": "training"}),
    "ResNet-50 inference, batch 64": ("microsoft/resnet-50", {"batch": 64}),
    "BERT-base inference, 32 x 128": ("bert-base-uncased", {"batch": 32, "seq": 128}),
    "GPT-2 inference, 8 x 512": ("gpt2", {"batch": 8, "seq": 512}),
}
PRECISIONS = {"fp32": {"dtype": "float32"}, "TF32": {"dtype": "float32", "tf32": True}, "AMP": {"dtype": "float16"}}
TRAINING = {
    "fp32": {"precision": "fp32"},
    "TF32": {"precision": "fp32", "tf32": True},
    "AMP": {"precision": "amp-fp16"},
}


def pairs() -> list[tuple[str, str]]:
    from perfpredict.hardware.devices import datasheet_device, list_devices
    from perfpredict.hardware.dominance import at_least_as_fast

    gpus = [datasheet_device(d) for d in list_devices() if d.kind == "gpu"]
    return [(a.name, b.name) for a in gpus for b in gpus if a.name != b.name and at_least_as_fast(a, b)]


def scan(found: list[tuple[str, str]]) -> list[tuple[str, str, str, str, float, float]]:
    """Every (case, precision, a, b, a's ms, b's ms) checked."""
    from perfpredict import pipeline
    from perfpredict.model_sources import HFSource
    from perfpredict.request import Request

    names = sorted({n for p in found for n in p})
    out = []
    for (case, (hf, shape)), precision in itertools.product(CASES.items(), PRECISIONS):
        run = (TRAINING if shape.get("phase") == "training" else PRECISIONS)[precision]
        ms = {
            n: pipeline.predict(Request(source=HFSource(hf), device=n, **shape, **run)).latency_ms.value for n in names
        }
        out += [(case, precision, a, b, ms[a], ms[b]) for a, b in found]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "never_slower.md")
    args = p.parse_args()
    t0 = time.perf_counter()
    found = pairs()
    rows = scan(found)
    bad = [r for r in rows if r[4] > r[5] * (1 + 1e-9)]  # equal figures give equal times, to rounding
    lines = [
        "# A GPU at least as fast on every datasheet figure is never predicted slower",
        "",
        f"- {header(__file__, seconds=time.perf_counter() - t0)}",
        f"- {len(found)} pairs of catalog GPUs (same architecture, the first matching or beating the second on every "
        f"datasheet figure), {len(CASES)} cases x {len(PRECISIONS)} precisions: **{len(bad)} of {len(rows)} "
        "comparisons inverted** (the faster card predicted slower).",
        "",
        "Pairs: " + ", ".join(f"{a} >= {b}" for a, b in found) + ".",
        "",
        "| case | precision | faster card | ms | slower card | ms |",
        "|---|---|---|---:|---|---:|",
    ]
    lines += [f"| {c} | {p} | {a} | {x:.2f} | {b} | {y:.2f} |" for c, p, a, b, x, y in bad] or ["| none | | | | | |"]
    write_result("\n".join(lines) + "\n", args.out)
    print(f"{len(bad)} inversions of {len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
