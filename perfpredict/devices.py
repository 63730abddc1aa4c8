"""Device catalog: datasheet specs, MIG profiles and the local CPU; measured ceilings merged in where they exist.

The catalog is built once (and cached) from, in order:

1. ``perfpredict/data/devices.json``: NVIDIA datasheet peaks and MIG tables (units in the key names there);
2. the local CPU, detected from ``/proc`` (``cpu``, alias ``local-cpu``);
3. user files named in ``PERFPREDICT_DEVICES`` (``os.pathsep``-separated, YAML or JSON), then files passed to
   :func:`load_device_file`; a record naming an existing device overrides it field by field;
4. prices from ``data/prices.json``, a device file, or ``PERFPREDICT_PRICES`` (which wins);
5. measured ceilings (the roofline suite's DeviceCeilings JSON) from ``perfpredict/data/measured/*.json`` and
   ``$PERFPREDICT_MEASURED_DIR/*.json``: measured beats hard-coded, and is labelled as measured.

Names are matched case-insensitively, ignoring ``-``, ``_`` and spaces, and a leading ``NVIDIA``/``Tesla``/
``GeForce`` (so ``torch.cuda.get_device_name()`` output resolves). ``"H100-SXM/1g.10gb"`` names a MIG slice.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import platform
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any

from perfpredict.errors import InvalidInputError, MissingDependencyError, UnknownDeviceError, close_matches

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())

# Keys of Device.peak_flops_per_s. "*_tensor" are dense tensor-core rates (sparse rates are never used).
FLOP_KEYS = ("fp64", "fp32", "fp16", "bf16", "fp64_tensor", "tf32_tensor", "fp16_tensor", "bf16_tensor",
             "fp8_tensor", "int8_tensor")

GIB = 2**30
MIB = 2**20
DATA_DIR = Path(__file__).parent / "data"
DEVICES_FILE = DATA_DIR / "devices.json"
MEASURED_DIR = DATA_DIR / "measured"
ENV_DEVICES = "PERFPREDICT_DEVICES"
ENV_MEASURED_DIR = "PERFPREDICT_MEASURED_DIR"
PRICES_FILE = DATA_DIR / "prices.json"
ENV_PRICES = "PERFPREDICT_PRICES"


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
        keys = {"bfloat16": ("bf16", "bf16_tensor"), "float16": ("fp16", "fp16_tensor"),
                "float8_e4m3fn": ("fp8_tensor",), "float8_e5m2": ("fp8_tensor",)}.get(dtype)
        return keys is None or any(self.peak_flops_per_s.get(k) for k in keys)

    def __hash__(self) -> int:
        # The generated hash would fail on the mapping field; equal devices still hash equal (a subset of fields).
        return hash((self.name, self.memory_bytes, self.memory_bandwidth_bytes_per_s, self.source,
                     tuple(sorted(self.peak_flops_per_s.items()))))

    def mig_profile(self, profile_name: str) -> MigProfile:
        """The MIG profile called ``profile_name`` (case-insensitive); InvalidInputError lists the valid ones."""
        for p in self.mig_profiles:
            if p.name.lower() == profile_name.strip().lower():
                return p
        if not self.mig_profiles:
            raise InvalidInputError(f"device {self.name!r} has no MIG profiles (MIG exists on A100, H100, H200 "
                                    f"and B200); drop the {profile_name!r} suffix")
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
            self, name=f"{self.name}/{p.name}",
            parent=self.name, aliases=(), mig_profiles=(),
            memory_bytes=p.memory_bytes, sm_count=p.sm_count, l2_bytes=int(self.l2_bytes * memory_fraction),
            memory_bandwidth_bytes_per_s=self.memory_bandwidth_bytes_per_s * memory_fraction,
            peak_flops_per_s=frozen_mapping({k: v * sm_fraction for k, v in self.peak_flops_per_s.items()}),
            tdp_w=self.tdp_w * compute_fraction, idle_power_w=self.idle_power_w * compute_fraction,
            price_usd_per_hour=price,
            price_source="" if price is None else f"{self.price_source}; MIG slice: full price x {p.compute_slices}/7",
            notes=(f"MIG slice {p.name}: {p.sm_count}/{self.sm_count} SMs, {p.memory_slices}/8 of bandwidth "
                   f"and L2, power x {p.compute_slices}/7. {p.note}").strip(),
        )


def frozen_mapping(d: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(d))


# ----------------------------------------------------------------------------------------------------------------
# Public API


def get_device(name: str | Device) -> Device:
    """The catalog device called ``name`` (or one of its aliases); ``"<device>/<profile>"`` gives a MIG slice."""
    if isinstance(name, Device):
        return name
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError(f"device name must be a non-empty string, got {name!r}; "
                                f"run `perfpredict devices` to list them")
    base, profile = _split_mig(name)
    catalog = _catalog()
    canonical = _resolve(catalog, base)
    if canonical is None:
        choices = [n for d in catalog.devices.values() for n in (d.name, *d.aliases)]
        close = close_matches(base, choices)
        hint = f" Did you mean: {close}?" if close else ""
        raise UnknownDeviceError(
            f"unknown device {name!r}.{hint} Run `perfpredict devices` to list all {len(catalog.devices)} "
            f"devices, or add yours with load_device_file() or ${ENV_DEVICES}.")
    device = catalog.devices[canonical]
    return device.with_mig(profile) if profile else device


def list_devices() -> list[Device]:
    """Every catalog device: datasheet GPUs in catalog order, the local CPU, then user-added devices."""
    return list(_catalog().devices.values())


def local_cpu() -> Device:
    """This machine's CPU as a Device (with any user override or measured ceilings for ``cpu`` applied)."""
    return get_device("cpu")


def load_device_file(path: str | os.PathLike[str]) -> list[str]:
    """Add or override devices from a YAML or JSON file; returns the canonical names it touched.

    Accepted shapes: ``{"devices": [{"name": ..., ...}, ...]}``, a list of such records, or a mapping of
    name to fields. Fields use Device names (``memory_bytes``...) or the catalog's unit-named shortcuts
    (``memory_gib``, ``memory_bandwidth_gb_per_s``, ``l2_mib``, ``peak_tflops``, ``launch_overhead_us``,
    ``runtime_overhead_mib``). A record naming an existing device (or alias) merges into it field by field
    (``peak_flops_per_s`` key by key); a new device needs memory, bandwidth, peak FLOP/s and TDP.
    """
    records = _read_device_file(Path(path))
    _USER_FILES.append((Path(path), records))
    _catalog.cache_clear()
    try:
        catalog = _catalog()  # build now so a bad file fails here, not at some later lookup
    except Exception:
        _USER_FILES.pop()
        _catalog.cache_clear()
        raise
    return [_resolve(catalog, r["name"]) or r["name"] for r in records]


def reset_catalog() -> None:
    """Forget files given to :func:`load_device_file`; the environment is re-read on the next lookup."""
    _USER_FILES.clear()
    _catalog.cache_clear()
    detect_local_cpu.cache_clear()


def apply_ceilings(device: Device, ceilings: str | os.PathLike[str] | Mapping[str, Any]) -> Device:
    """``device`` with its ceilings replaced by measured ones (the roofline suite's DeviceCeilings JSON).

    Each ceiling is ``{"min", "median", "max"}`` (a bare number is accepted). Throughputs take the max, the
    best sustained value; ``launch_overhead_s`` takes the min, its best. Overridden fields are listed in
    ``Device.measured`` (FLOP keys as ``peak_flops_per_s.<key>``) and ``source`` becomes ``measured:<file>``.
    """
    data, label = _read_ceilings(ceilings)
    named = data.get("device")
    if isinstance(named, str) and named.strip():
        target = _resolve(_catalog(), _split_mig(named)[0])
        own = _resolve(_catalog(), device.parent or device.name)
        if target is not None and own is not None and target != own:
            warnings.warn(f"ceilings in {label} were measured on {named!r} but are applied to {device.name!r}",
                          stacklevel=2)
    return _apply_ceilings(device, data, label)


def _apply_ceilings(device: Device, data: Mapping[str, Any], label: str) -> Device:
    ceilings = data.get("ceilings")
    if not isinstance(ceilings, Mapping):
        raise InvalidInputError(f"ceilings in {label} must be a mapping of ceiling name to {{min, median, max}}, "
                                f"got {ceilings!r}")
    updates, peaks, measured = {}, dict(device.peak_flops_per_s), set()
    for key, raw in ceilings.items():
        field_name = _CEILING_FIELDS.get(key)
        flop_key = key.removesuffix("_flops_per_s") if key.endswith("_flops_per_s") else None
        if field_name is None and flop_key not in FLOP_KEYS:
            logger.debug("ignoring ceiling %r in %s: no matching Device field", key, label)
            continue
        value = _best_ceiling(key, raw, label)
        if field_name is not None:
            updates[field_name] = value
            measured.add(field_name)
        else:
            peaks[flop_key] = value
            measured.update({"peak_flops_per_s", f"peak_flops_per_s.{flop_key}"})
    if not measured:
        raise InvalidInputError(f"no usable ceilings in {label}: expected a 'ceilings' mapping with keys such as "
                                f"'hbm_bandwidth_bytes_per_s' or 'fp32_flops_per_s'")
    return dataclasses.replace(device, **updates, peak_flops_per_s=frozen_mapping(peaks),
                               measured=device.measured | frozenset(measured), source=f"measured:{label}")


# ----------------------------------------------------------------------------------------------------------------
# Catalog building


@dataclass(frozen=True)
class _Catalog:
    devices: dict[str, Device]  # canonical name -> Device, in catalog order
    index: dict[str, str]  # normalized name or alias -> canonical name


_USER_FILES: list[tuple[Path, list[dict[str, Any]]]] = []
_VENDOR_PREFIXES = ("nvidia", "tesla", "geforce")
# DeviceCeilings keys that map to a Device field; "<flop key>_flops_per_s" maps to peak_flops_per_s[<flop key>].
_CEILING_FIELDS = {"hbm_bandwidth_bytes_per_s": "memory_bandwidth_bytes_per_s",
                   "dram_bandwidth_bytes_per_s": "memory_bandwidth_bytes_per_s",
                   "memory_bandwidth_bytes_per_s": "memory_bandwidth_bytes_per_s",
                   "launch_overhead_s": "launch_overhead_s"}
# Catalog-file shortcut -> (Device field, factor to the field's unit).
_UNIT_KEYS = {"memory_gib": ("memory_bytes", GIB), "memory_total_mib": ("memory_bytes", MIB), "l2_mib": ("l2_bytes", MIB),
              "memory_bandwidth_gb_per_s": ("memory_bandwidth_bytes_per_s", 1e9),
              "launch_overhead_us": ("launch_overhead_s", 1e-6),
              "runtime_overhead_mib": ("runtime_overhead_bytes", MIB)}
_DEVICE_FIELDS = {f.name for f in dataclasses.fields(Device)}
_INT_FIELDS = {"memory_bytes", "runtime_overhead_bytes", "sm_count", "l2_bytes"}
_NUMERIC_FIELDS = {"memory_bytes", "memory_bandwidth_bytes_per_s", "tdp_w", "idle_power_w", "launch_overhead_s",
                   "runtime_overhead_bytes", "sm_count", "boost_clock_mhz", "l2_bytes", "price_usd_per_hour"}
_REQUIRED = ("memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops_per_s", "tdp_w")


def _key(name: str) -> str:
    """Lookup key: lower case without '-', '_' and whitespace ("H100_SXM" == "h100-sxm" == "H100 SXM")."""
    return re.sub(r"[\s_\-]+", "", name.lower())


def _split_mig(name: str) -> tuple[str, str]:
    """("H100-SXM", "1g.10gb") from "H100-SXM/1g.10gb" or nvidia-smi's "NVIDIA H100 80GB HBM3 MIG 1g.10gb"."""
    if "/" in name:
        base, _, profile = name.partition("/")
        return base.strip(), profile.strip()
    parts = re.split(r"\s+mig\s+", name.strip(), maxsplit=1, flags=re.IGNORECASE)
    return (parts[0], parts[1].strip()) if len(parts) == 2 else (name.strip(), "")


def _resolve(catalog: _Catalog, name: str) -> str | None:
    return _lookup(catalog.index, name)


def _lookup(index: Mapping[str, str], name: str) -> str | None:
    """Canonical name for ``name``, retrying without a leading vendor word ("NVIDIA GeForce RTX 4090")."""
    key = _key(name)
    while key:
        if key in index:
            return index[key]
        prefix = next((p for p in _VENDOR_PREFIXES if key.startswith(p)), None)
        if prefix is None:
            return None
        key = key[len(prefix):]
    return None


@functools.cache
def _catalog() -> _Catalog:
    builtin = json.loads(DEVICES_FILE.read_text())
    defaults, tables = builtin.get("defaults", {}), builtin.get("mig_tables", {})
    records: dict[str, dict[str, Any]] = {}
    index: dict[str, str] = {}
    for raw in builtin["devices"]:
        _add_record(records, index, _normalize_record({**defaults, **raw}, tables, str(DEVICES_FILE)))
    _add_record(records, index, _cpu_record(detect_local_cpu()))
    for path in _env_device_files():
        for rec in _read_device_file(path, env=True):
            _add_record(records, index, rec)
    for _path, recs in _USER_FILES:
        for rec in recs:
            _add_record(records, index, rec)
    _fill_prices(records, index)
    devices = {name: _build_device(rec) for name, rec in records.items()}
    catalog = _Catalog(devices, index)
    for path in _measured_files():
        _apply_measured_file(catalog, path)
    return catalog


def _add_record(records: dict[str, dict[str, Any]], index: dict[str, str], rec: dict[str, Any]) -> None:
    """Insert ``rec``, or merge it field by field into the device its name already resolves to.

    Only the record's name is matched: a new device that lists an existing alias must not overwrite that device.
    """
    existing = _lookup(index, rec["name"])
    if existing is not None:
        old = records[existing]
        merged = {**old, **rec, "name": existing,
                  "peak_flops_per_s": {**old.get("peak_flops_per_s", {}), **rec.get("peak_flops_per_s", {})},
                  "aliases": tuple(dict.fromkeys((*old.get("aliases", ()), *rec.get("aliases", ()))))}
        if _key(rec["name"]) != _key(existing):
            merged["aliases"] = (*merged["aliases"], rec["name"])
        records[existing] = merged
        name = existing
    else:
        records[rec["name"]] = rec
        name = rec["name"]
    for alias in records[name].get("aliases", ()):
        index.setdefault(_key(alias), name)  # an earlier device keeps an alias it already owns
    for canonical in records:
        index[_key(canonical)] = canonical  # canonical names always beat aliases


def _normalize_record(raw: Mapping[str, Any], tables: Mapping[str, Any], origin: str) -> dict[str, Any]:
    """Turn a catalog/user record into Device field names and units; reject unknown keys."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str) or not raw["name"].strip():
        raise InvalidInputError(f"each device record in {origin} needs a 'name' string, got {raw!r}")
    rec: dict[str, Any] = {}
    for key, value in raw.items():
        if key in _UNIT_KEYS:
            field_name, factor = _UNIT_KEYS[key]
            rec[field_name] = _scaled(_number(value, key, raw["name"], origin), factor)
        elif key == "peak_tflops":
            rec["peak_flops_per_s"] = _peaks(value, 1e12, raw["name"], origin)
        elif key == "peak_flops_per_s":
            rec["peak_flops_per_s"] = _peaks(value, 1.0, raw["name"], origin)
        elif key == "mig_table":
            rec["mig_profiles"] = _mig_profiles(_mig_table(tables, value, origin), raw, origin)
        elif key == "mig_profiles":
            rec["mig_profiles"] = _mig_profiles(value, raw, origin)
        elif key == "aliases":
            rec["aliases"] = tuple(str(a) for a in (value or ()))
        elif key == "price_usd_per_hour" and value is None:
            rec[key] = None
        elif key in _NUMERIC_FIELDS:
            rec[key] = _number(value, key, raw["name"], origin)
        elif key in _DEVICE_FIELDS:
            rec[key] = value
        else:
            valid = sorted(_DEVICE_FIELDS | set(_UNIT_KEYS) | {"peak_tflops", "mig_table"})
            close = close_matches(key, valid)
            raise InvalidInputError(f"unknown field {key!r} for device {raw['name']!r} in {origin}"
                                    + (f"; did you mean: {close}?" if close else f"; valid fields: {valid}"))
    return rec


def _number(value: Any, key: str, device: str, origin: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidInputError(f"{key} of device {device!r} in {origin} must be a non-negative number, "
                                f"got {value!r}")
    return float(value)


def _peaks(value: Any, factor: float, device: str, origin: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"peak FLOP/s of device {device!r} in {origin} must map keys {FLOP_KEYS} to "
                                f"numbers, got {value!r}")
    bad = [k for k in value if k not in FLOP_KEYS]
    if bad:
        raise InvalidInputError(f"unknown FLOP key(s) {bad!r} for device {device!r} in {origin}; "
                                f"valid keys: {', '.join(FLOP_KEYS)}")
    return {k: _scaled(_number(v, k, device, origin), factor) for k, v in value.items()}


def _scaled(value: float, factor: float) -> float:
    """value x factor rounded once, in decimal: 66.9 TF becomes exactly the float 66.9e12, not 66.90000000000001e12."""
    return float(Decimal(repr(value)) * Decimal(repr(factor)))


def _mig_table(tables: Mapping[str, Any], name: Any, origin: str) -> list[Any]:
    if name not in tables:
        raise InvalidInputError(f"unknown mig_table {name!r} in {origin}; choose one of: {', '.join(tables)}")
    return tables[name]["profiles"]


def _mig_profiles(rows: Any, device: Mapping[str, Any], origin: str) -> tuple[MigProfile, ...]:
    """MigProfiles from rows; an unknown sm_count is derived as floor(compute_slices x SMs(7g) / 7)."""
    if not isinstance(rows, list):
        raise InvalidInputError(f"mig_profiles of {device['name']!r} in {origin} must be a list, got {rows!r}")
    full = next((r.get("sm_count") for r in rows if r.get("compute_slices") == 7), None) or device.get("sm_count")
    profiles = []
    for r in rows:
        try:
            memory = int(r["usable_gib"] * GIB) if "usable_gib" in r else int(r["memory_bytes"])
            sms, note = r.get("sm_count"), str(r.get("note", ""))
            if sms is None:
                sms = math.floor(int(r["compute_slices"]) * int(full) / 7)
                note = f"{note}; SM count derived as {r['compute_slices']} x {full} / 7 (unknown)".lstrip("; ")
            profiles.append(MigProfile(str(r["name"]), memory, int(sms), int(r["compute_slices"]),
                                       int(r["memory_slices"]), int(r["max_instances"]), note))
        except (KeyError, TypeError, ValueError) as err:
            raise InvalidInputError(
                f"bad MIG profile {r!r} for {device['name']!r} in {origin}: needs name, usable_gib (or "
                f"memory_bytes), sm_count, compute_slices, memory_slices, max_instances") from err
    return tuple(profiles)


def _build_device(rec: Mapping[str, Any]) -> Device:
    missing = [f for f in _REQUIRED if not rec.get(f)]  # zero memory, bandwidth or TDP is as bad as none
    if missing or not rec.get("peak_flops_per_s", {}).get("fp32"):
        raise InvalidInputError(
            f"device {rec['name']!r} lacks positive {missing or ['peak_flops_per_s.fp32']}: a device that is not "
            f"in the catalog needs memory_gib, memory_bandwidth_gb_per_s, peak_tflops (with fp32) and tdp_w")
    fields = {k: v for k, v in rec.items() if k in _DEVICE_FIELDS}
    fields.setdefault("kind", "gpu")
    fields.setdefault("vendor", "")
    fields.setdefault("arch", "")
    fields.setdefault("launch_overhead_s", 3e-6)  # back-to-back kernel launch, gpus.md section 2
    fields.setdefault("runtime_overhead_bytes", 512 * MIB)  # CUDA context + allocator slack (assumption)
    fields.setdefault("idle_power_w", max(0.125 * float(fields["tdp_w"]), 10.0))  # rule of thumb, not measured
    for k in _INT_FIELDS & fields.keys():
        fields[k] = int(fields[k])
    fields["peak_flops_per_s"] = frozen_mapping(fields["peak_flops_per_s"])
    fields["aliases"] = tuple(fields.get("aliases", ()))
    fields["mig_profiles"] = tuple(fields.get("mig_profiles", ()))
    fields["measured"] = frozenset(fields.get("measured", ()))
    return Device(**fields)


def _env_device_files() -> list[Path]:
    value = os.environ.get(ENV_DEVICES, "")
    return [Path(p) for p in value.split(os.pathsep) if p.strip()]


def _read_device_file(path: Path, env: bool = False) -> list[dict[str, Any]]:
    """Normalized records from a user YAML/JSON device file."""
    where = f"{path} (from ${ENV_DEVICES})" if env else str(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise InvalidInputError(f"cannot read device file {where}: {err}; fix the path"
                                + (f" or unset {ENV_DEVICES}" if env else "")) from err
    data = _parse_structured(text, path, where)
    if isinstance(data, Mapping) and "devices" in data:
        data = data["devices"]
    if isinstance(data, Mapping):  # {name: {fields}}
        data = [{"name": name, **(fields or {})} for name, fields in data.items()]
    if not isinstance(data, list):
        raise InvalidInputError(f"device file {where} must hold a list of devices, {{'devices': [...]}} or "
                                f"{{name: fields}}; got {type(data).__name__}")
    tables = json.loads(DEVICES_FILE.read_text()).get("mig_tables", {})  # user files may reuse a table
    return [_normalize_record(r, tables, where) for r in data]


def _parse_structured(text: str, path: Path, where: str) -> Any:
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            try:
                import yaml  # lazily: only user YAML files need it
            except ImportError as err:
                raise MissingDependencyError(f"reading {where} needs PyYAML: pip install pyyaml "
                                             f"(or write the file as JSON)") from err
            return yaml.safe_load(text)
        return json.loads(text)
    except (ValueError, ImportError) as err:
        if isinstance(err, MissingDependencyError):
            raise
        raise InvalidInputError(f"cannot parse device file {where}: {err}") from err


# ----------------------------------------------------------------------------------------------------------------
# Prices ($/GPU-hour; perfpredict.cost uses them)


def read_price_file(path: Path, where: str = "") -> dict[str, float]:
    """{device name as written: $/GPU-hour} from a prices JSON file (``{"usd_per_gpu_hour": {...}}`` or flat)."""
    where = where or str(path)
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise InvalidInputError(f"cannot read prices from {where}: {err}; it must be a JSON file like "
                                f'{{"H100-SXM": 3.0}}') from err
    if isinstance(data, Mapping) and "usd_per_gpu_hour" in data:
        data = data["usd_per_gpu_hour"]
    if not isinstance(data, Mapping):
        raise InvalidInputError(f"prices in {where} must be a JSON object of device name to $/GPU-hour")
    return {str(k): _number(v, "price", str(k), where) for k, v in data.items() if not str(k).startswith("_")}


def _fill_prices(records: dict[str, dict[str, Any]], index: Mapping[str, str]) -> None:
    """Set price_usd_per_hour: $PERFPREDICT_PRICES beats a price in a device file, which beats prices.json."""
    env = os.environ.get(ENV_PRICES, "").strip()
    as_of = json.loads(PRICES_FILE.read_text()).get("as_of", "undated")
    tables = [(read_price_file(PRICES_FILE), f"prices.json (illustrative on-demand, {as_of})", False)]
    if env:
        tables.append((read_price_file(Path(env), f"{env} (from ${ENV_PRICES})"), f"${ENV_PRICES}", True))
    for rec in records.values():
        if rec.get("price_usd_per_hour") is not None and not rec.get("price_source"):
            rec["price_source"] = "set in a device file"
    for table, label, wins in tables:
        for name, price in table.items():
            canonical = _lookup(index, name)
            if canonical is not None and (wins or records[canonical].get("price_usd_per_hour") is None):
                records[canonical].update(price_usd_per_hour=price, price_source=label)


# ----------------------------------------------------------------------------------------------------------------
# Measured ceilings


def _read_ceilings(ceilings: str | os.PathLike[str] | Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    if isinstance(ceilings, Mapping):
        return ceilings, str(ceilings.get("device") or "dict")
    path = Path(ceilings)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise InvalidInputError(f"cannot read ceilings JSON {str(path)!r}: {err}") from err
    if not isinstance(data, Mapping):
        raise InvalidInputError(f"ceilings file {path} must hold a JSON object, got {type(data).__name__}")
    return data, path.name


def _best_ceiling(key: str, raw: Any, label: str) -> float:
    """Best sustained value: max for throughputs, min for an overhead."""
    pick = "min" if key.endswith("_s") and not key.endswith("_per_s") else "max"
    value = raw.get(pick, raw.get("median")) if isinstance(raw, Mapping) else raw
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidInputError(f"ceiling {key!r} in {label} needs a positive {pick!r} value, got {raw!r}")
    return float(value)


def _measured_files() -> list[Path]:
    dirs = [MEASURED_DIR] + ([Path(os.environ[ENV_MEASURED_DIR])] if os.environ.get(ENV_MEASURED_DIR) else [])
    return [p for d in dirs if d.is_dir() for p in sorted(d.glob("*.json"))]


def _apply_measured_file(catalog: _Catalog, path: Path) -> None:
    """Apply one auto-discovered ceilings file; a bad file is skipped with a warning, never fatal."""
    try:
        data = json.loads(path.read_text())
        base, profile = _split_mig(str(data.get("device", ""))) if isinstance(data, dict) else ("", "")
        name = _resolve(catalog, base) if base else None
        if name is None or profile:  # a slice's ceilings must not replace the full GPU's
            logger.debug("measured file %s names no full catalog device; skipped", path)
            return
        catalog.devices[name] = _apply_ceilings(catalog.devices[name], data, path.name)
    except (OSError, ValueError) as err:  # InvalidInputError is a ValueError
        warnings.warn(f"skipping measured ceilings {path}: {err}", stacklevel=2)


# ----------------------------------------------------------------------------------------------------------------
# Local CPU detection (no psutil)

_CPU_CLOCK_FALLBACK_HZ = 2.5e9  # when neither cpufreq nor /proc/cpuinfo reports a clock
_CPU_BANDWIDTH_PER_CHANNEL_BYTES_PER_S = 20e9  # ~DDR4-2666/DDR5 sustained per channel: an ESTIMATE
_CPU_W_PER_CORE = 10.0  # package power per active core: an ESTIMATE (no RAPL read at catalog time)
_CPU_IDLE_W_PER_CORE = 3.0
# Without AVX512_BF16 (or AMX) there is no bf16 arithmetic: oneDNN widens every operand to fp32 and narrows the
# result, so bf16 matmuls run far below the fp32 peak (not at it, as the fallback to the fp32 key would say). On a
# Zen 3 (AVX2) host, torch 2.13's bf16 nn.Linear reached 18 GFLOP/s against 121-143 in fp32, and bf16 conv2d 3.8
# against 97: an ESTIMATE from those; the roofline suite's cpu_gemm_bf16 measures the host's own.
_EMULATED_BF16_FRACTION = 0.15


@functools.cache
def detect_local_cpu() -> Device:
    """The CPU this process runs on, from /proc/cpuinfo, /proc/meminfo and /sys; every peak is an estimate.

    Peak FP32 = cores x clock x FLOP/cycle/core from the ISA flags (see :func:`_fp32_flop_per_cycle`). Cores are
    the CPUs this process may use (affinity) divided by SMT threads per core, since SMT siblings share FMA units.
    """
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("features") or "").split())
    logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cores = max(1, logical // _threads_per_core(info))
    clock_hz = _cpu_clock_hz(info)
    fp32 = cores * clock_hz * _fp32_flop_per_cycle(flags)
    peaks = {"fp32": fp32, "fp64": fp32 / 2}  # half the SIMD lanes in double precision
    if "avx512_bf16" in flags:
        peaks["bf16"] = 2 * fp32  # VDPBF16PS: two bf16 products per fp32 lane
    else:
        peaks["bf16"] = _EMULATED_BF16_FRACTION * fp32
    if "amx_bf16" in flags:
        peaks["bf16_tensor"] = cores * clock_hz * 1024  # Sapphire Rapids AMX: 1024 bf16 FLOP/cycle/core (estimate)
    channels = min(8, max(2, cores // 4))  # we cannot see DIMM channels from userspace: a guess
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(info.get("vendor_id", ""), platform.machine())
    return Device(
        name="cpu", kind="cpu", vendor=vendor, arch=platform.machine() or "unknown",
        memory_bytes=_memory_bytes(), memory_bandwidth_bytes_per_s=channels * _CPU_BANDWIDTH_PER_CHANNEL_BYTES_PER_S,
        peak_flops_per_s=frozen_mapping(peaks), tdp_w=cores * _CPU_W_PER_CORE,
        idle_power_w=cores * _CPU_IDLE_W_PER_CORE,
        launch_overhead_s=5e-6,  # per-op dispatch cost of eager PyTorch on CPU (a few us): estimate
        runtime_overhead_bytes=0,  # CPU peak memory is measured as RSS increase, so the baseline is excluded
        sm_count=cores, boost_clock_mhz=clock_hz / 1e6, l2_bytes=_last_level_cache_bytes(),
        aliases=("local-cpu",), source="estimate",
        sources="detected from /proc/cpuinfo, /proc/meminfo and /sys/devices/system/cpu",
        notes=(f"{info.get('model name', 'unknown CPU')}; {cores} cores x {clock_hz / 1e9:.2f} GHz x "
               f"{_fp32_flop_per_cycle(flags)} FP32 FLOP/cycle; bandwidth estimate {channels} channels x 20 GB/s; "
               f"TDP estimate {_CPU_W_PER_CORE:.0f} W/core; l2_bytes is the last-level cache. All estimates: "
               f"measure with the roofline suite for real ceilings."),
    )


def _cpu_record(cpu: Device) -> dict[str, Any]:
    rec = {f.name: getattr(cpu, f.name) for f in dataclasses.fields(Device)}
    rec["peak_flops_per_s"] = dict(cpu.peak_flops_per_s)
    return rec


def _read_text(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _cpuinfo() -> dict[str, str]:
    """The first processor block of /proc/cpuinfo, keys lower-cased."""
    info: dict[str, str] = {}
    for line in _read_text("/proc/cpuinfo").splitlines():
        if not line.strip():
            if info:
                break
            continue
        key, _, value = line.partition(":")
        info.setdefault(key.strip().lower(), value.strip())
    return info


def _threads_per_core(info: Mapping[str, str]) -> int:
    try:
        return max(1, int(info["siblings"]) // int(info["cpu cores"]))
    except (KeyError, ValueError, ZeroDivisionError):
        return 1


def _cpu_clock_hz(info: Mapping[str, str]) -> float:
    """Max clock from cpufreq (kHz) if exposed, else /proc/cpuinfo's current MHz, else 2.5 GHz."""
    khz = _read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").strip()
    if khz.isdigit() and int(khz) > 0:
        return int(khz) * 1e3
    try:
        mhz = float(info.get("cpu mhz", ""))
        return mhz * 1e6 if mhz > 0 else _CPU_CLOCK_FALLBACK_HZ
    except ValueError:
        return _CPU_CLOCK_FALLBACK_HZ


def _fp32_flop_per_cycle(flags: set[str]) -> int:
    """FP32 FLOP/cycle/core from ISA flags. Assumptions (documented, not detected):

    - avx512f: 16 lanes x 2 (FMA) x 1 512-bit FMA port = 32; Xeons with a second 512-bit FMA port reach 64,
      Zen 4 double-pumps 256-bit units to 32;
    - avx2 + fma: 8 lanes x 2 (FMA) x 2 256-bit FMA ports = 32;
    - avx without fma: 8 lanes x (1 add + 1 mul) = 16;
    - otherwise (SSE, NEON...): 4 lanes x 2 = 8.
    """
    if "avx512f" in flags:
        return 32
    if "avx2" in flags and "fma" in flags:
        return 32
    if "avx" in flags:
        return 16
    return 8


def _memory_bytes() -> int:
    """Physical memory (MemTotal), capped by a cgroup v2 memory limit when one is set."""
    total = 0
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", _read_text("/proc/meminfo"), flags=re.MULTILINE)
    if match:
        total = int(match.group(1)) * 1024
    elif hasattr(os, "sysconf"):
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            total = 0
    limit = _read_text("/sys/fs/cgroup/memory.max").strip()
    if limit.isdigit() and (total == 0 or int(limit) < total):
        total = int(limit)
    return total or 8 * GIB  # nothing readable: assume 8 GiB rather than claim zero memory


def _last_level_cache_bytes() -> int:
    sizes = []
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        match = re.fullmatch(r"(\d+)([KMG]?)", _read_text(str(d / "size")).strip())
        if match:
            sizes.append(int(match.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)])
    return max(sizes, default=0)
