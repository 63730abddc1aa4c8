"""The device types every predictor reads: Device (one accelerator or the local CPU) and its MIG profiles.

Plain data, units in every name. The catalog that builds them from files is :mod:`perfpredict.hardware.devices`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from perfpredict.core.errors import InvalidInputError

# Keys of Device.peak_flops_per_s. "*_tensor" are dense tensor-core rates (sparse rates are never used).
FLOP_KEYS = (
    "fp64",
    "fp32",
    "fp16",
    "bf16",
    "fp64_tensor",
    "tf32_tensor",
    "fp16_tensor",
    "bf16_tensor",
    "fp8_tensor",
    "int8_tensor",
)


@dataclass(frozen=True)
class MigProfile:
    """One MIG GPU-instance profile: usable memory, SMs, slices of the full GPU, and how many fit."""

    name: str
    memory_bytes: int
    sm_count: int
    compute_slices: int  # sevenths of the GPU's compute
    memory_slices: int  # eighths of the GPU's memory (and L2, and bandwidth)
    max_instances: int
    note: str = ""  # provenance: estimated memory, derived SM count, +me meaning

    @property
    def is_media_extension(self) -> bool:
        """``+me`` profiles add the media engines; otherwise they equal the plain profile (one per GPU)."""
        return self.name.endswith("+me")


@dataclass(frozen=True)
class Device:
    """One accelerator (or the local CPU) as the predictors see it. Every number carries its unit."""

    name: str
    kind: str  # "gpu" or "cpu"
    vendor: str
    arch: str
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    peak_flops_per_s: Mapping[str, float]
    tdp_w: float
    idle_power_w: float
    launch_overhead_s: float
    runtime_overhead_bytes: int
    sm_count: int = 0
    boost_clock_mhz: float = 0.0
    l2_bytes: int = 0
    compute_capability: str = ""
    mig_profiles: tuple[MigProfile, ...] = ()
    aliases: tuple[str, ...] = ()
    price_usd_per_hour: float | None = None
    measured: frozenset[str] = frozenset()
    source: str = "datasheet"
    notes: str = ""
    parent: str | None = None  # for a MIG slice, the full device's name
    sources: str = ""  # where the datasheet numbers come from
    price_source: str = ""  # where price_usd_per_hour comes from
    memory_type: str = ""  # "HBM3", "GDDR6", ... as the datasheet names it; "" when unknown
    # the GPU's link to its host ("PCIe Gen5 x16"): ZeRO-Offload's copies run on it (hardware/host_link.py reads it)
    host_link: str = ""
    min_power_limit_w: float | None = None  # the lowest board power limit the driver accepts (nvidia-smi -pl)
    power_limit_w: float | None = (
        None  # a board power cap below tdp_w, clocks lowered to meet it (hardware/power_limit.py)
    )
    base: str = ""  # a variant's catalog device (a device file's ``base:``): its fields unless the record gives them

    @property
    def memory_label(self) -> str:
        """What to call the device memory in a report: its technology (an L4's is GDDR6, not HBM)."""
        return self.memory_type or ("DRAM" if self.kind == "cpu" else "device memory")

    def peak_flops(self, dtype: str, tensor_core: bool) -> tuple[float, str]:
        """Peak FLOP/s for ``dtype`` and the key it came from; tensor-core rates only when ``tensor_core``.

        float32 matmuls use TF32 tensor cores only when the caller says so (torch's default is full FP32).
        """
        p = self.peak_flops_per_s
        order = {
            "float64": ["fp64_tensor", "fp64"] if tensor_core else ["fp64"],
            "float32": ["tf32_tensor", "fp32"] if tensor_core else ["fp32"],
            "float16": ["fp16_tensor", "fp16", "fp32"] if tensor_core else ["fp16", "fp32"],
            # no bf16 hardware (V100, T4): PyTorch emulates bfloat16 with float32 math
            "bfloat16": ["bf16_tensor", "bf16", "fp32"] if tensor_core else ["bf16", "fp32"],
            "float8_e4m3fn": ["fp8_tensor", "fp16_tensor", "fp16", "fp32"] if tensor_core else ["fp16", "fp32"],
            "float8_e5m2": ["fp8_tensor", "fp16_tensor", "fp16", "fp32"] if tensor_core else ["fp16", "fp32"],
        }.get(dtype, ["fp32"])
        for key in order:
            if p.get(key):
                return float(p[key]), key
        return float(p.get("fp32", 1e12)), "fp32"

    def supports_dtype(self, dtype: str) -> bool:
        """Whether the device computes in ``dtype`` natively (a datasheet rate for it), not emulated."""
        keys = {
            "bfloat16": ("bf16", "bf16_tensor"),
            "float16": ("fp16", "fp16_tensor"),
            "float8_e4m3fn": ("fp8_tensor",),
            "float8_e5m2": ("fp8_tensor",),
        }.get(dtype)
        return keys is None or any(self.peak_flops_per_s.get(k) for k in keys)

    def __hash__(self) -> int:
        # The generated hash would fail on the mapping field; equal devices still hash equal (a subset of fields).
        return hash(
            (
                self.name,
                self.memory_bytes,
                self.memory_bandwidth_bytes_per_s,
                self.source,
                tuple(sorted(self.peak_flops_per_s.items())),
            )
        )

    def mig_profile(self, profile_name: str) -> MigProfile:
        """The MIG profile called ``profile_name`` (case-insensitive); InvalidInputError lists the valid ones."""
        for p in self.mig_profiles:
            if p.name.lower() == profile_name.strip().lower():
                return p
        if not self.mig_profiles:
            raise InvalidInputError(
                f"device {self.name!r} has no MIG profiles (MIG exists on A100, H100, H200 "
                f"and B200); drop the {profile_name!r} suffix"
            )
        names = ", ".join(p.name for p in self.mig_profiles)
        raise InvalidInputError(f"unknown MIG profile {profile_name!r} for {self.name}; choose one of: {names}")

    def with_mig(self, profile_name: str) -> Device:
        """This GPU reduced to one MIG slice.

        Model (gpus.md section 3.3): compute peaks scale with the slice's SMs over the full GPU's SMs; memory
        bandwidth and L2 with memory_slices/8; memory is the profile's usable memory; clocks are unchanged.
        Power (TDP and idle) is attributed by compute_slices/7, as is a set price.
        """
        p = self.mig_profile(profile_name)
        sm_fraction = p.sm_count / self.sm_count if self.sm_count else p.compute_slices / 7
        memory_fraction = p.memory_slices / 8
        compute_fraction = p.compute_slices / 7
        price = None if self.price_usd_per_hour is None else self.price_usd_per_hour * compute_fraction
        return dataclasses.replace(
            self,
            name=f"{self.name}/{p.name}",
            parent=self.name,
            aliases=(),
            mig_profiles=(),
            memory_bytes=p.memory_bytes,
            sm_count=p.sm_count,
            l2_bytes=int(self.l2_bytes * memory_fraction),
            memory_bandwidth_bytes_per_s=self.memory_bandwidth_bytes_per_s * memory_fraction,
            peak_flops_per_s=frozen_mapping({k: v * sm_fraction for k, v in self.peak_flops_per_s.items()}),
            tdp_w=self.tdp_w * compute_fraction,
            idle_power_w=self.idle_power_w * compute_fraction,
            price_usd_per_hour=price,
            price_source="" if price is None else f"{self.price_source}; MIG slice: full price x {p.compute_slices}/7",
            notes=(
                f"MIG slice {p.name}: {p.sm_count}/{self.sm_count} SMs, {p.memory_slices}/8 of bandwidth "
                f"and L2, power x {p.compute_slices}/7. {p.note}"
            ).strip(),
        )


def frozen_mapping(d: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(d))
