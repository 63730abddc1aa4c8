"""``perfpredict calibrate-host``: time this machine's eager dispatch per op kind, on the CPU, in seconds.

Two measurements, both on tiny CPU tensors, so the work inside each op is negligible and what is timed is the
framework's cost of one call:

1. ``dispatch_us[kind]``: one representative ATen call per op kind, called back to back (each kind's
   ``host_probe``, registered with it in :mod:`perfpredict.core.op_kinds`); the median of several blocks.
2. ``module_us``: the Python of ``nn.Module`` forwards around each op. A small stack of ``Linear``/``LayerNorm``/
   ``GELU`` modules is timed as a module call and as the same ATen calls made directly; the difference per op is the
   modules' share.

A user predicting for their own server runs it there; the profile lands in :func:`host_model.profile_path` and
predictions use it from then on. NB: a CUDA build dispatches through more layers (stream, caching allocator) than
the CPU path timed here; the kernel launch itself is the device's part (``Device.launch_overhead_s``).
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Callable
from typing import Any

from perfpredict.core import op_kinds, ops
from perfpredict.hardware import cpu_detection
from perfpredict.predictors.host_model import DEFAULT_HOST, HostProfile


def time_call_us(
    fn: Callable[[], Any], *, calls: int = 400, blocks: int = 5, clock: Callable[[], int] = time.perf_counter_ns
) -> float:
    """Median over ``blocks`` of the mean microseconds per call of ``calls`` back-to-back calls."""
    fn()
    out = []
    for _ in range(blocks):
        t0 = clock()
        for _ in range(calls):
            fn()
        out.append((clock() - t0) / 1e3 / calls)
    return statistics.median(out)


def module_overhead_us(layers: int = 8, clock: Callable[[], int] = time.perf_counter_ns) -> float:
    """Microseconds per op that ``nn.Module`` Python adds: a module stack against the same ATen calls made bare."""
    import torch

    stack = torch.nn.Sequential(
        *[torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.GELU()) for _ in range(layers)]
    ).eval()
    x = torch.randn(1, 8)
    mods = list(stack.modules())
    lin = [m for m in mods if isinstance(m, torch.nn.Linear)]
    norm = [m for m in mods if isinstance(m, torch.nn.LayerNorm)]

    def bare() -> Any:
        h = x
        for a, b in zip(lin, norm):
            h = torch.nn.functional.gelu(
                torch.nn.functional.layer_norm(torch.nn.functional.linear(h, a.weight, a.bias), (8,), b.weight, b.bias)
            )
        return h

    with torch.no_grad():
        wrapped = time_call_us(lambda: stack(x), calls=100, clock=clock)
        plain = time_call_us(bare, calls=100, clock=clock)
    return max(0.0, (wrapped - plain) / (3 * layers))


def measure_dispatch(clock: Callable[[], int] = time.perf_counter_ns) -> tuple[dict[str, float], float]:
    """(dispatch microseconds per op kind, module microseconds per forward op), on one thread (a host dispatches
    from one thread)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            dispatch = {kind: round(time_call_us(fn, clock=clock), 3) for kind, fn in op_kinds.host_probes().items()}
        module = round(module_overhead_us(clock=clock), 3)
    finally:
        torch.set_num_threads(threads)
    dispatch[ops.UNKNOWN] = dispatch[ops.ELEMENTWISE]
    return dispatch, module


def calibrate(
    name: str = "this host",
    *,
    quick: bool = False,
    say: Callable[[str], None] = lambda m: None,
    clock: Callable[[], int] = time.perf_counter_ns,
):
    """This machine's host profile: its dispatch per op kind, and its CPU op model (the probes of
    :mod:`perfpredict.kernels.cpu_op_probes`, at the thread count torch uses here, fitted by
    :mod:`perfpredict.learning.cpu_op_model_fit`), with the ceilings they reached. ``quick``: a few probes in one
    round (seconds; for tests), not a calibration to predict with. The dispatch scales (a real model's per-op host
    cost over the bare calls) are fitted on model rows, which this machine has not: the CPU's are the reference's
    (the dev VM's, fitted on its CPU rows), the GPU's and the launch cost the default GPU host's (fitted on the host
    time measured on the H100 rows' host)."""
    import torch

    from perfpredict.kernels import cpu_op_probes
    from perfpredict.learning import cpu_op_model_fit
    from perfpredict.predictors.host_model import REFERENCE, load_profile

    t0 = time.perf_counter()
    load_before = cpu_op_probes.load_average()
    dispatch, module = measure_dispatch(clock)
    say(f"dispatch: {len(dispatch)} op kinds, {time.perf_counter() - t0:.1f} s")
    threads = torch.get_num_threads()
    with torch.no_grad():
        results = cpu_op_probes.time_probes(
            cpu_op_probes.probe_set(quick), rounds=1 if quick else 3, say=say, clock=clock
        )
        speedup = cpu_op_probes.thread_speedup(threads, clock=clock)
    load_after = cpu_op_probes.load_average()
    details = {
        "seconds": round(time.perf_counter() - t0, 1),
        "quick": quick,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "thread_speedup": speedup,
        "probes": [r.as_dict() for r in results],
    }
    model = cpu_op_model_fit.fit(
        cpu_op_model_fit.device_samples(results, dispatch),
        threads,
        source=f"perfpredict calibrate-host: {len(results)} probes, {threads} threads",
    )
    reference = HostProfile.from_file(REFERENCE)
    server = load_profile(host=DEFAULT_HOST["gpu"])
    return HostProfile(
        name=name,
        dispatch_us=dispatch,
        module_us=module,
        source=f"perfpredict calibrate-host (dispatch: tiny CPU tensors, one thread; ops: probes at {threads} threads)",
        dispatch_scale={**reference.dispatch_scale, "gpu": server.dispatch_scale["gpu"]},
        gpu_launch_us=server.gpu_launch_us,
        cpu_model=cpu_detection.cpu_model(),
        torch_version=torch.__version__,
        created_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        details=details,
        cpu_ops=model.to_dict(),
        cpu_ceilings=cpu_op_probes.ceilings(results),
    )
