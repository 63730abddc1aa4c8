"""The CUDA roofline: CuPy RawKernels (+ Numba CUDA rows, + cuBLAS GEMM through torch or cupy), CUDA events.

Protocol per kernel: compile and run once with ``store=1`` to check the result, warm up, then ``reps`` timed
launches, each between its own pair of CUDA events on one stream, sized to run >= ~1 ms (event resolution is
~0.5 us). GEMM: MAMF-style shape search, an L2-sized buffer rewritten between timed iterations. Clocks, power and
temperature from NVML before and after. Not runnable without a GPU; the GPU-free tests cover its pieces (PTX,
simulator, accounting), and the ``gpu``-marked tests run it for real.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

from perfpredict.core.units import MIB
from perfpredict.kernels import gpu_cupy_runners as cupy_runners
from perfpredict.kernels import gpu_numba_runners as numba_runners
from perfpredict.kernels.ceilings import KernelResult, build_ceilings, gpu_theoretical
from perfpredict.kernels.gpu_gemm import gemm
from perfpredict.kernels.table import KernelSpec


def nvml_state(index: int = 0) -> dict[str, Any]:
    """SM and memory clocks (MHz), power (W), power limit, temperature and throttle reasons; {} without NVML."""
    try:
        import pynvml
    except ImportError:
        return {"nvml": "not installed (pip install nvidia-ml-py)"}
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        state = {
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "max_sm_clock_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1e3,
            "power_limit_w": pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3,
            "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "driver": pynvml.nvmlSystemGetDriverVersion(),
        }
        with contextlib.suppress(pynvml.NVMLError):
            state["throttle_reasons"] = int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
        return state
    except Exception as err:  # noqa: BLE001 - NVML missing on MIG/containers is not fatal
        return {"nvml": f"unavailable: {err}"}


class _Clock:
    """Samples the SM clock while kernels run (the clock under load is what 'observed' means)."""

    def __init__(self) -> None:
        self.samples: list[float] = []

    def sample(self) -> None:
        s = nvml_state()
        if "sm_clock_mhz" in s:
            self.samples.append(float(s["sm_clock_mhz"]))


def run(
    specs: Sequence[KernelSpec],
    *,
    quick: bool,
    reps: int | None,
    implementation: str,
    say: Callable[[str], None],
    started: str,
    command: str = "",
) -> dict[str, Any]:
    import cupy

    from perfpredict.core.errors import UnknownDeviceError
    from perfpredict.hardware.devices import get_device
    from perfpredict.kernels.environment import environment

    reps = reps or (10 if quick else 30)
    dev = cupy.cuda.Device()
    attrs = dev.attributes
    props = cupy.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    cc = f"{props['major']}.{props['minor']}"
    info = {
        "name": name,
        "cc": cc,
        "sms": attrs["MultiProcessorCount"],
        "l2_bytes": attrs["L2CacheSize"],
        "bus_width_bits": attrs.get("GlobalMemoryBusWidth"),
        "max_threads_per_sm": attrs["MaxThreadsPerMultiProcessor"],
    }
    try:
        catalog = get_device(name)
        catalog_name = catalog.name
    except UnknownDeviceError:
        catalog, catalog_name = None, name
    before = nvml_state()
    clock = _Clock()
    say(
        f"cuda: {name} (sm_{cc.replace('.', '')}, {info['sms']} SMs, L2 {info['l2_bytes'] // MIB} MiB), "
        f"catalog {catalog_name!r}, {before.get('sm_clock_mhz', '?')} MHz"
    )
    ctx = {"quick": quick, "reps": reps, "info": info, "clock": clock, "impl": implementation}
    results: list[KernelResult] = []
    warnings_: list[str] = []
    for spec in specs:
        impls = [i for i in spec.implementations if implementation in ("auto", "all", i)]
        if implementation == "auto":
            impls = (
                impls[:1]
                if spec.name not in ("fp32_fma", "hbm_triad")
                else [i for i in impls if i in ("cupy", "numba")]
            )
        for impl in impls:
            runner = _RUNNERS.get((spec.name, impl)) or _RUNNERS.get((spec.kind, impl))
            if runner is None:
                continue
            try:
                for r in runner(spec, ctx):
                    results.append(r)
                    say(
                        f"  {spec.name} [{impl}]: best {r.best():.4g} {spec.unit}"
                        + ("" if r.check_ok else "  (RESULT CHECK FAILED)")
                    )
            except Exception as err:  # noqa: BLE001 - one kernel failing must not lose the others
                warnings_.append(f"{spec.name} [{impl}] failed: {type(err).__name__}: {err}")
                say(f"  {spec.name} [{impl}]: FAILED ({type(err).__name__}: {err})")
    after = nvml_state()
    sm_clock = max(clock.samples) if clock.samples else after.get("sm_clock_mhz")
    mem_clock = after.get("mem_clock_mhz") or before.get("mem_clock_mhz")
    theo_keys = [
        "fp32_flops_per_s",
        "fp64_flops_per_s",
        "fp16_flops_per_s",
        "bf16_flops_per_s",
        "fp16_tensor_flops_per_s",
        "bf16_tensor_flops_per_s",
        "tf32_tensor_flops_per_s",
        "fp8_tensor_flops_per_s",
        "l1_bandwidth_bytes_per_s",
        "shared_bandwidth_bytes_per_s",
        "hbm_bandwidth_bytes_per_s",
        "hbm_copy_bandwidth_bytes_per_s",
        "hbm_triad_bandwidth_bytes_per_s",
        "hbm_write_bandwidth_bytes_per_s",
        "hbm_read_bandwidth_bytes_per_s",
    ]
    theo = {
        k: gpu_theoretical(
            k,
            cc=cc,
            sm_count=info["sms"],
            sm_clock_mhz=sm_clock,
            mem_clock_mhz=mem_clock,
            bus_width_bits=info["bus_width_bits"],
        )
        for k in theo_keys
    }
    meta = {
        "created": started,
        "command": command,
        "quick": quick,
        "device_name_reported": name,
        "device_attributes": info,
        "clocks": {
            "before": before,
            "after": after,
            "sm_clock_samples_mhz": clock.samples,
            "observed_sm_clock_mhz": sm_clock,
        },
        "environment": {**environment(), "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion()},
    }
    data = build_ceilings(
        results, target="cuda", device_name=catalog_name, catalog_device=catalog, theoretical=theo, meta=meta
    )
    data["warnings"] = warnings_ + data["warnings"]
    return data


_RUNNERS: dict[tuple[str, str], Callable[..., Any]] = {
    ("fp32_fma", "cupy"): cupy_runners.fma_cupy,
    ("fp64_fma", "cupy"): cupy_runners.fma_cupy,
    ("fp16_hfma2", "cupy"): cupy_runners.fma_cupy,
    ("bf16_hfma2", "cupy"): cupy_runners.fma_cupy,
    ("fp32_fma", "numba"): numba_runners.fma_numba,
    ("fp64_fma", "numba"): numba_runners.fma_numba,
    ("hbm_read", "cupy"): cupy_runners.stream_cupy,
    ("hbm_write", "cupy"): cupy_runners.stream_cupy,
    ("hbm_copy", "cupy"): cupy_runners.stream_cupy,
    ("hbm_triad", "cupy"): cupy_runners.stream_cupy,
    ("hbm_read", "numba"): numba_runners.stream_numba,
    ("hbm_write", "numba"): numba_runners.stream_numba,
    ("hbm_copy", "numba"): numba_runners.stream_numba,
    ("hbm_triad", "numba"): numba_runners.stream_numba,
    ("l2_read", "cupy"): cupy_runners.l2_cupy,
    ("l1_read", "cupy"): cupy_runners.l1_cupy,
    ("shared_read", "cupy"): cupy_runners.l1_cupy,
    ("tensor", "torch"): gemm,
    ("tensor", "cupy"): gemm,
    ("pcie_h2d", "cupy"): cupy_runners.pcie,
    ("pcie_d2h", "cupy"): cupy_runners.pcie,
    ("launch_back_to_back", "cupy"): cupy_runners.launch,
    ("launch_graph", "cupy"): cupy_runners.launch,
}
