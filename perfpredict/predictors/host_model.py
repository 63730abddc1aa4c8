"""The host model: what it costs the host (Python, ATen dispatch, the CUDA launch) to enqueue each op.

The host timeline depends on the host's CPU and the framework, not on the GPU (DESIGN.md, "Latency: two
timelines"). A :class:`HostProfile` holds, per canonical op kind, the microseconds eager PyTorch spends dispatching
one op of that kind, plus the per-op cost of the ``nn.Module`` Python around a forward op. It is measured on any CPU,
no GPU needed, by ``perfpredict calibrate-host`` (:mod:`perfpredict.learning.host_calibration`), which stores it
where predictions find it (:func:`profile_path`). Several hosts ship (:data:`HOSTS`, each with its source in the
file): without a calibration, a GPU is driven by :data:`DEFAULT_HOST`'s GPU server, the host its H100 rows were
measured on, and a CPU is the development VM's (the only CPU with a shipped op model). ``host=`` (``--host``) names
one, or ``"calibrated"``; the report says which.

For an op i on a GPU: ``h_i = dispatch_us[kind] + module_us (forward ops) + launch`` where ``launch`` is the device's
launch cost (its roofline entry, ``Device.launch_overhead_s``) for ops that launch a kernel. Views launch nothing.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict.core import ops
from perfpredict.core.errors import InvalidInputError
from perfpredict.hardware import user_config

HOST_PROFILE_VERSION = 3  # 2: dispatch scales re-fitted with the device-time scale, gpu_launch_us; 3: cpu_ops
HOST_PROFILES_DIR = Path(__file__).resolve().parents[1] / "data" / "host_profiles"
REFERENCE = HOST_PROFILES_DIR / "reference.json"  # the development VM's: calibrate-host there, its CPU op model
#: the shipped host profiles by name (each file states its source; data/host_profiles/README.md says how)
HOSTS = {"h100-server": "h100-server.json", "dev-vm": "reference.json"}
CALIBRATED = "calibrated"  # this machine's profile, written by ``perfpredict calibrate-host``
#: the host assumed when none is named and none is calibrated, per device kind: a GPU's is a GPU server (the host
#: of the H100 rows); a CPU is its own host, and the development VM's is the only CPU with a shipped op model
DEFAULT_HOST = {"gpu": "h100-server", "cpu": "dev-vm"}


@dataclass(frozen=True)
class HostProfile:
    """Microseconds per op kind on one host. ``source`` says where the figures came from."""

    name: str
    dispatch_us: dict[str, float]
    module_us: float  # Python of the nn.Module forward around each forward op
    source: str
    # A real model's step costs the host more per op than the bare calls calibrate-host times: the model's own
    # Python between ops (HF's masks and reshapes), autograd's bookkeeping, and on a GPU the CUDA dispatch key, the
    # caching allocator and the stream. Dispatch and module time are multiplied by this per device kind ("cpu",
    # "gpu", and "cpu_training" for a CPU's training steps: see ``dispatch_scale``), fitted on measured model rows
    # (benchmarks/timeline_accuracy.py --fit --save); calibrate-host keeps the reference's values.
    dispatch_scale: dict[str, float] = field(default_factory=dict)
    # The CUDA launch cost per kernel on this host, the same for every GPU it drives (a property of the host, the
    # driver and the runtime, not of the GPU's silicon): one GPU measured on a slower VM host must not lose to
    # another on paper for it. None: each device's own catalog figure.
    gpu_launch_us: float | None = None
    cpu_model: str = ""
    torch_version: str = ""
    created_at: str = ""
    version: int = HOST_PROFILE_VERSION
    details: dict[str, Any] = field(default_factory=dict)
    # This CPU's op model (``cpu_op_model.CpuOpModel.to_dict``): each op class's time here, fitted on the probes
    # calibrate-host timed, at the thread count it ran with. None: the CPU's device time falls back to the learned
    # per-op efficiency at the catalog's ceilings.
    cpu_ops: dict[str, Any] | None = None
    # The ceilings the same probes reached (DeviceCeilings' "ceilings" mapping: the best GEMM rate per dtype, the
    # bandwidth of the largest elementwise op, the smallest op's time), which the catalog applies to the ``cpu``
    # device when this is the profile predictions use (``devices``).
    cpu_ceilings: dict[str, Any] | None = None

    def cpu_op_model(self) -> Any:
        """The :class:`~perfpredict.predictors.cpu_op_model.CpuOpModel` of this host, or None."""
        if not self.cpu_ops:
            return None
        from perfpredict.predictors.cpu_op_model import CpuOpModel

        return CpuOpModel.from_dict(self.cpu_ops)

    def op_us(self, kind: str) -> float:
        """Dispatch microseconds of one op of ``kind`` (unknown kinds cost what an elementwise op does)."""
        return float(self.dispatch_us.get(kind, self.dispatch_us.get(ops.ELEMENTWISE, 5.0)))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> HostProfile:
        try:
            data = json.loads(Path(path).read_text())
            profile = cls(**data)
        except (OSError, ValueError, TypeError) as err:
            raise InvalidInputError(
                f"host profile {str(path)!r} cannot be read ({err}); run "
                "`perfpredict calibrate-host` to write a new one"
            ) from err
        if profile.version != HOST_PROFILE_VERSION:
            raise InvalidInputError(
                f"host profile {str(path)!r} has version {profile.version}, this perfpredict "
                f"reads {HOST_PROFILE_VERSION}; run `perfpredict calibrate-host` again"
            )
        return profile


def profile_path() -> Path:
    """Where ``perfpredict calibrate-host`` stores this machine's profile ($XDG_CONFIG_HOME/perfpredict)."""
    return user_config.default_profile_path()


def host_names() -> tuple[str, ...]:
    """What ``host=`` / ``--host`` accepts: the shipped profiles' names and ``"calibrated"``."""
    return (*HOSTS, CALIBRATED)


def load_profile(
    path: str | os.PathLike[str] | None = None, *, host: str | None = None, kind: str = "gpu"
) -> HostProfile:
    """The host profile: ``path``; else ``host`` (a shipped name or ``"calibrated"``); else
    $PERFPREDICT_HOST_PROFILE, else this machine's calibrated one, else the default for a ``kind`` device
    (:data:`DEFAULT_HOST`). Read once per file version (the same object while the file is unchanged)."""
    path = Path(path or profile_file(host, kind))
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        stamp = None  # from_file says what is wrong
    return _read(str(path), stamp)


def profile_file(host: str | None = None, kind: str = "gpu") -> Path:
    """The file of ``host`` (see :func:`load_profile`); an unknown name raises, listing the choices."""
    if host is None:
        return (
            user_config.calibrated_profile_path()
            or HOST_PROFILES_DIR / HOSTS[DEFAULT_HOST.get(kind, DEFAULT_HOST["gpu"])]
        )
    if host == CALIBRATED:
        mine = user_config.calibrated_profile_path()
        if mine is None:
            raise InvalidInputError(
                f"host 'calibrated': this machine has no host profile yet ({user_config.default_profile_path()}); "
                "run `perfpredict calibrate-host` first, or name a shipped host: " + ", ".join(HOSTS)
            )
        return mine
    if host in HOSTS:
        return HOST_PROFILES_DIR / HOSTS[host]
    raise InvalidInputError(
        f"unknown host {host!r}; choose one of {', '.join(host_names())} "
        "(`perfpredict calibrate-host` measures this machine's)"
    )


@functools.lru_cache(maxsize=8)
def _read(path: str, stamp: int | None) -> HostProfile:
    return HostProfile.from_file(path)


def launch_s(profile: HostProfile, device: Any) -> float:
    """Seconds to launch one kernel on ``device`` from this host: the profile's GPU launch cost where it has one."""
    if device.kind == "gpu" and profile.gpu_launch_us is not None:
        return profile.gpu_launch_us * 1e-6
    return device.launch_overhead_s


def node_host_s(graph: Any, profile: HostProfile, launch_s: float, *, gpu: bool) -> np.ndarray:
    """Host seconds to enqueue each node of ``graph``: dispatch, module Python for forward ops, and a launch for
    each kernel on a GPU. Backward ops run from autograd's C++ engine, so they pay no module Python."""
    forward = forward_mask(graph)
    out = np.empty(len(graph.nodes))
    scale = dispatch_scale(profile, "gpu" if gpu else "cpu", graph.phase)
    for i, node in enumerate(graph.nodes):
        us = profile.op_us(ops.VIEW if node.is_view else node.op) + (profile.module_us if forward[i] else 0.0)
        out[i] = scale * us * 1e-6 + (launch_s if gpu and not node.is_view else 0.0)
    return out


def dispatch_scale(profile: HostProfile, kind: str, phase: str) -> float:
    """The profile's dispatch scale for a step of ``phase`` on a ``kind`` device: ``"<kind>_training"`` where the
    profile fits one for training steps (autograd records every forward op and runs every backward op through its
    engine, which bare calls do not pay), else ``kind``'s."""
    scales = profile.dispatch_scale
    return float(scales.get(f"{kind}_{phase}", scales.get(kind, 1.0)) if phase == "training" else scales.get(kind, 1.0))


def forward_mask(graph: Any) -> np.ndarray:
    """True for the forward ops (those before ``OpGraph.backward_start``)."""
    return np.arange(len(graph.nodes)) < graph.backward_start
