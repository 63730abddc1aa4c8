"""The host model: what it costs the host (Python, ATen dispatch, the CUDA launch) to enqueue each op.

The host timeline depends on the host's CPU and the framework, not on the GPU (DESIGN.md, "Latency: two
timelines"). A :class:`HostProfile` holds, per canonical op kind, the microseconds eager PyTorch spends dispatching
one op of that kind, plus the per-op cost of the ``nn.Module`` Python around a forward op. It is measured on any CPU,
no GPU needed, by ``perfpredict calibrate-host`` (:mod:`perfpredict.predictors.host_calibration`), which stores it
where predictions find it (:func:`profile_path`); without one, the shipped reference profile is used, and the report
says which.

For an op i on a GPU: ``h_i = dispatch_us[kind] + module_us (forward ops) + launch`` where ``launch`` is the device's
launch cost (its roofline entry, ``Device.launch_overhead_s``) for ops that launch a kernel. Views launch nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfpredict import ops
from perfpredict.errors import InvalidInputError

HOST_PROFILE_VERSION = 2  # 2: dispatch scales re-fitted with the device-time scale; gpu_launch_us
REFERENCE = Path(__file__).resolve().parents[1] / "data" / "host_profiles" / "reference.json"


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
    # "gpu"), fitted on measured model rows (benchmarks/timeline_accuracy.py --fit --save); calibrate-host
    # keeps the reference's values.
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
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "perfpredict" / "host_profile.json"


def load_profile(path: str | os.PathLike[str] | None = None) -> HostProfile:
    """The host profile: ``path``, else $PERFPREDICT_HOST_PROFILE, else this machine's calibrated one, else the
    shipped reference."""
    path = path or os.environ.get("PERFPREDICT_HOST_PROFILE") or None
    if path is not None:
        return HostProfile.from_file(path)
    mine = profile_path()
    return HostProfile.from_file(mine if mine.exists() else REFERENCE)


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
    scale = profile.dispatch_scale.get("gpu" if gpu else "cpu", 1.0)
    for i, node in enumerate(graph.nodes):
        us = profile.op_us(ops.VIEW if node.is_view else node.op) + (profile.module_us if forward[i] else 0.0)
        out[i] = scale * us * 1e-6 + (launch_s if gpu and not node.is_view else 0.0)
    return out


def forward_mask(graph: Any) -> np.ndarray:
    """True for the forward ops (those before ``OpGraph.backward_start``)."""
    return np.arange(len(graph.nodes)) < graph.backward_start
