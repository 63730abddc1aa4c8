"""Device records from files: the shipped catalog's JSON, user YAML/JSON files and price tables.

Each record is a dict of Device field names in Device units (GiB, TFLOP/s and GB/s are converted here), checked
field by field so a typo in a user's file gets one line naming the field and the closest valid one.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError, MissingDependencyError, close_matches
from perfpredict.core.units import GIB, MIB
from perfpredict.hardware.device_types import FLOP_KEYS, Device, MigProfile, frozen_mapping
from perfpredict.settings import ENV_DEVICES

DATA_DIR = Path(__file__).parent.parent / "data"
DEVICES_FILE = DATA_DIR / "devices.json"

# Catalog-file shortcut -> (Device field, factor to the field's unit).
_UNIT_KEYS = {
    "memory_gib": ("memory_bytes", GIB),
    "memory_total_mib": ("memory_bytes", MIB),
    "l2_mib": ("l2_bytes", MIB),
    "memory_bandwidth_gb_per_s": ("memory_bandwidth_bytes_per_s", 1e9),
    "launch_overhead_us": ("launch_overhead_s", 1e-6),
    "runtime_overhead_mib": ("runtime_overhead_bytes", MIB),
}
_DEVICE_FIELDS = {f.name for f in dataclasses.fields(Device)}
_INT_FIELDS = {"memory_bytes", "runtime_overhead_bytes", "sm_count", "l2_bytes"}
_NUMERIC_FIELDS = {
    "memory_bytes",
    "memory_bandwidth_bytes_per_s",
    "tdp_w",
    "idle_power_w",
    "launch_overhead_s",
    "runtime_overhead_bytes",
    "sm_count",
    "boost_clock_mhz",
    "l2_bytes",
    "price_usd_per_hour",
    "min_power_limit_w",
    "power_limit_w",
}
_REQUIRED = ("memory_bytes", "memory_bandwidth_bytes_per_s", "peak_flops_per_s", "tdp_w")


def normalize_record(raw: Mapping[str, Any], tables: Mapping[str, Any], origin: str) -> dict[str, Any]:
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
            raise InvalidInputError(
                f"unknown field {key!r} for device {raw['name']!r} in {origin}"
                + (f"; did you mean: {close}?" if close else f"; valid fields: {valid}")
            )
    return rec


def _number(value: Any, key: str, device: str, origin: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidInputError(f"{key} of device {device!r} in {origin} must be a non-negative number, got {value!r}")
    return float(value)


def _peaks(value: Any, factor: float, device: str, origin: str) -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            f"peak FLOP/s of device {device!r} in {origin} must map keys {FLOP_KEYS} to numbers, got {value!r}"
        )
    bad = [k for k in value if k not in FLOP_KEYS]
    if bad:
        raise InvalidInputError(
            f"unknown FLOP key(s) {bad!r} for device {device!r} in {origin}; valid keys: {', '.join(FLOP_KEYS)}"
        )
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
            profiles.append(
                MigProfile(
                    str(r["name"]),
                    memory,
                    int(sms),
                    int(r["compute_slices"]),
                    int(r["memory_slices"]),
                    int(r["max_instances"]),
                    note,
                )
            )
        except (KeyError, TypeError, ValueError) as err:
            raise InvalidInputError(
                f"bad MIG profile {r!r} for {device['name']!r} in {origin}: needs name, usable_gib (or "
                f"memory_bytes), sm_count, compute_slices, memory_slices, max_instances"
            ) from err
    return tuple(profiles)


def build_device(rec: Mapping[str, Any]) -> Device:
    missing = [f for f in _REQUIRED if not rec.get(f)]  # zero memory, bandwidth or TDP is as bad as none
    if missing or not rec.get("peak_flops_per_s", {}).get("fp32"):
        raise InvalidInputError(
            f"device {rec['name']!r} lacks positive {missing or ['peak_flops_per_s.fp32']}: a device that is not "
            f"in the catalog needs memory_gib, memory_bandwidth_gb_per_s, peak_tflops (with fp32) and tdp_w"
        )
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


def read_device_file(path: Path, env: bool = False) -> list[dict[str, Any]]:
    """Normalized records from a user YAML/JSON device file."""
    where = f"{path} (from ${ENV_DEVICES})" if env else str(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise InvalidInputError(
            f"cannot read device file {where}: {err}; fix the path" + (f" or unset {ENV_DEVICES}" if env else "")
        ) from err
    data = _parse_structured(text, path, where)
    if isinstance(data, Mapping) and "devices" in data:
        data = data["devices"]
    if isinstance(data, Mapping):  # {name: {fields}}
        data = [{"name": name, **(fields or {})} for name, fields in data.items()]
    if not isinstance(data, list):
        raise InvalidInputError(
            f"device file {where} must hold a list of devices, {{'devices': [...]}} or "
            f"{{name: fields}}; got {type(data).__name__}"
        )
    tables = json.loads(DEVICES_FILE.read_text()).get("mig_tables", {})  # user files may reuse a table
    return [normalize_record(r, tables, where) for r in data]


def _parse_structured(text: str, path: Path, where: str) -> Any:
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            try:
                import yaml  # lazily: only user YAML files need it
            except ImportError as err:
                raise MissingDependencyError(
                    f"reading {where} needs PyYAML: pip install pyyaml (or write the file as JSON)"
                ) from err
            return yaml.safe_load(text)
        return json.loads(text)
    except (ValueError, ImportError) as err:
        if isinstance(err, MissingDependencyError):
            raise
        raise InvalidInputError(f"cannot parse device file {where}: {err}") from err


def read_price_file(path: Path, where: str = "") -> dict[str, float]:
    """{device name as written: $/GPU-hour} from a prices JSON file (``{"usd_per_gpu_hour": {...}}`` or flat)."""
    where = where or str(path)
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise InvalidInputError(
            f'cannot read prices from {where}: {err}; it must be a JSON file like {{"H100-SXM": 3.0}}'
        ) from err
    if isinstance(data, Mapping) and "usd_per_gpu_hour" in data:
        data = data["usd_per_gpu_hour"]
    if not isinstance(data, Mapping):
        raise InvalidInputError(f"prices in {where} must be a JSON object of device name to $/GPU-hour")
    return {str(k): _number(v, "price", str(k), where) for k, v in data.items() if not str(k).startswith("_")}
