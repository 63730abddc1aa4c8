"""Roofline microkernels that measure a device's real ceilings (DeviceCeilings JSON).

- :mod:`.table`: the kernels as table rows (bytes and FLOPs per element, dtype, ceiling key);
- :mod:`.ceilings`: statistics, fractions of peak, the DeviceCeilings JSON that ``apply_ceilings`` reads;
- :mod:`.suite`: ``run_roofline(target, quick=..., kernels=...)``;
- :mod:`.cpu_kernels` / :mod:`.cpu_suite`: the CPU roofline (Numba-jitted SIMD FMA chains, STREAM);
- :mod:`.numba_kernels`, :mod:`.cupy_kernels`, :mod:`.gpu_suite`: the CUDA roofline (Numba CUDA, CuPy RawKernel);
- ``cuda/``: the native CUDA C++ versions, built by the top-level CMakeLists.txt into ``perfpredict-roofline``;
- :mod:`.plot`: the roofline plot (PNG/SVG) and inline SVG for the HTML report.

Nothing heavy is imported here: numba, cupy, torch and matplotlib load inside the functions that need them.
"""

from __future__ import annotations
