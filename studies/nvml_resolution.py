"""How finely NVML's energy counter and power reading move on this GPU, under a steady load.

    python studies/nvml_resolution.py --seconds 3 --out nvml.json      # on a GPU host

The collector's energy protocol (NVML's total-energy counter over a window of at least 1 s) assumes the counter
moves in steps much shorter than the window. This script keeps the GPU busy with bf16 matrix products while a
host thread polls the counter and the power reading as fast as it can, and reports the median interval between
changes of each, the step size, and the power that the counter implies against the one NVML reports.

The committed result (benchmarks/results/gpu_campaign/nvml_resolution.json) came from the first version of this
script, which called pynvml directly; it now reads through perfpredict's NvmlDevice, the same two NVML calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time


def _intervals(samples: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Times between changes of the value, and the sizes of the changes."""
    times, steps = [], []
    last_t, last_v = samples[0]
    for t, v in samples[1:]:
        if v != last_v:
            times.append(t - last_t)
            steps.append(v - last_v)
            last_t, last_v = t, v
    return times, steps


def probe(seconds: float) -> dict:
    import torch

    from perfpredict.profiling.nvml import NvmlDevice

    nvml = NvmlDevice.open(0)
    if nvml is None or nvml.energy_mj() is None:
        raise SystemExit("nvml_resolution: NVML or its energy counter is not available on this GPU")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            for _ in range(8):
                a @ a
            torch.cuda.synchronize()

    worker = threading.Thread(target=load)
    worker.start()
    time.sleep(0.5)  # let clocks and power settle
    energy, power = [], []
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t = time.perf_counter()
        e, w = nvml.energy_mj(), nvml.power_w()
        if e is not None and w is not None:  # a missed read is skipped, never counted as zero
            energy.append((t, float(e)))
            power.append((t, w))
    stop.set()
    worker.join()
    e_times, e_steps = _intervals(energy)
    p_times, _ = _intervals(power)
    span_s = energy[-1][0] - energy[0][0]
    return {
        "device": torch.cuda.get_device_name(0),
        "polls": len(energy),
        "seconds": span_s,
        "energy_changes": len(e_times),
        "energy_median_interval_ms": 1e3 * statistics.median(e_times) if e_times else None,
        "energy_median_step_mj": statistics.median(e_steps) if e_steps else None,
        "power_changes": len(p_times),
        "power_median_interval_ms": 1e3 * statistics.median(p_times) if p_times else None,
        "counter_power_w": (energy[-1][1] - energy[0][1]) / 1e3 / span_s if span_s > 0 else None,
        "reported_power_w_mean": statistics.mean(v for _, v in power),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    result = probe(args.seconds)
    text = json.dumps(result, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
