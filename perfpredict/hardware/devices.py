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
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfpredict.core.errors import InvalidInputError, UnknownDeviceError, close_matches
from perfpredict.core.units import GIB, MIB
from perfpredict.hardware import user_config
from perfpredict.hardware.cpu_detection import detect_local_cpu
from perfpredict.hardware.device_records import (
    DATA_DIR,
    DEVICES_FILE,
    build_device,
    normalize_record,
    read_device_file,
    read_price_file,
)
from perfpredict.hardware.device_types import FLOP_KEYS, Device, MigProfile, frozen_mapping
from perfpredict.settings import ENV_DEVICES, ENV_PRICES, settings

logger = logging.getLogger(__name__)
logger.addHandler(logging.NullHandler())


MEASURED_DIR = DATA_DIR / "measured"
PRICES_FILE = DATA_DIR / "prices.json"
# the names other modules import from here (the catalog's own, and the device types it hands out)
__all__ = [
    "Device",
    "MigProfile",
    "FLOP_KEYS",
    "GIB",
    "MIB",
    "DATA_DIR",
    "DEVICES_FILE",
    "MEASURED_DIR",
    "PRICES_FILE",
    "get_device",
    "list_devices",
    "local_cpu",
    "load_device_file",
    "reset_catalog",
    "apply_ceilings",
    "datasheet_device",
    "catalog_generation",
    "detect_local_cpu",
    "read_price_file",
    "frozen_mapping",
]


# ----------------------------------------------------------------------------------------------------------------
# Public API


def get_device(name: str | Device) -> Device:
    """The catalog device called ``name`` (or one of its aliases); ``"<device>/<profile>"`` gives a MIG slice."""
    if isinstance(name, Device):
        return name
    if not isinstance(name, str) or not name.strip():
        raise InvalidInputError(
            f"device name must be a non-empty string, got {name!r}; run `perfpredict devices` to list them"
        )
    base, profile = _split_mig(name)
    catalog = _catalog()
    canonical = _resolve(catalog, base)
    if canonical is None:
        choices = [n for d in catalog.devices.values() for n in (d.name, *d.aliases)]
        close = close_matches(base, choices)
        hint = f" Did you mean: {close}?" if close else ""
        raise UnknownDeviceError(
            f"unknown device {name!r}.{hint} Run `perfpredict devices` to list all {len(catalog.devices)} "
            f"devices, or add yours with load_device_file() or ${ENV_DEVICES}."
        )
    device = catalog.devices[canonical]
    return device.with_mig(profile) if profile else device


def list_devices() -> list[Device]:
    """Every catalog device: datasheet GPUs in catalog order, the local CPU, then user-added devices."""
    return list(_catalog().devices.values())


def catalog_generation() -> int:
    """A number that changes whenever the catalog is rebuilt (a device file added, a reset): a memo of anything
    derived from the whole catalog keys on it (a counter, never an object's id, which a rebuild may reuse)."""
    _catalog()
    return _BUILDS[0]


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
    records = read_device_file(Path(path))
    _USER_FILES.append((Path(path), records))
    _catalog.cache_clear()
    try:
        catalog = _catalog()  # build now so a bad file fails here, not at some later lookup
    except Exception:
        _USER_FILES.pop()
        _catalog.cache_clear()
        raise
    return [_resolve(catalog, r["name"]) or r["name"] for r in records]


def datasheet_device(device: Device) -> Device:
    """``device`` as the catalog's datasheet describes it, before measured ceilings were merged in (a MIG slice of
    a measured GPU: the same slice of the datasheet GPU). A device with no datasheet record is returned as it is."""
    if not device.measured:
        return device
    catalog = _catalog()
    name = _resolve(catalog, device.parent or device.name)
    sheet = catalog.datasheet.get(name) if name else None
    if sheet is None:
        return device
    if device.power_limit_w:  # the same cap on the datasheet basis (of the whole GPU, before any MIG slice)
        from perfpredict.hardware.power_limit import power_limited

        sheet = power_limited(sheet, device.power_limit_w)
    return sheet.with_mig(device.name.split("/", 1)[1]) if device.parent else sheet


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
            warnings.warn(
                f"ceilings in {label} were measured on {named!r} but are applied to {device.name!r}", stacklevel=2
            )
    return _apply_ceilings(device, data, label)


def _apply_ceilings(device: Device, data: Mapping[str, Any], label: str) -> Device:
    ceilings = data.get("ceilings")
    if not isinstance(ceilings, Mapping):
        raise InvalidInputError(
            f"ceilings in {label} must be a mapping of ceiling name to {{min, median, max}}, got {ceilings!r}"
        )
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
            if device.kind == "cpu" and f"{flop_key}_tensor" in peaks:
                # a CPU's half-precision ceiling is measured through nn.Linear, which runs on AMX where the CPU
                # has it: the measured rate is that unit's, and replaces its estimate
                peaks[f"{flop_key}_tensor"] = value
                measured.add(f"peak_flops_per_s.{flop_key}_tensor")
    if not measured:
        raise InvalidInputError(
            f"no usable ceilings in {label}: expected a 'ceilings' mapping with keys such as "
            f"'hbm_bandwidth_bytes_per_s' or 'fp32_flops_per_s'"
        )
    if device.kind == "cpu":  # a CPU's GEMM ceilings are measured through torch, on AMX where the CPU has it
        for key in [k for k in peaks if f"peak_flops_per_s.{k}" in measured]:
            if f"{key}_tensor" in peaks and f"peak_flops_per_s.{key}_tensor" not in measured:
                peaks[f"{key}_tensor"] = peaks[key]  # the estimate (cores x clock x 1024 for AMX) gives way
    return dataclasses.replace(
        device,
        **updates,
        peak_flops_per_s=frozen_mapping(peaks),
        measured=device.measured | frozenset(measured),
        source=f"measured:{label}",
    )


# ----------------------------------------------------------------------------------------------------------------
# Catalog building


@dataclass(frozen=True)
class _Catalog:
    devices: dict[str, Device]  # canonical name -> Device, in catalog order
    index: dict[str, str]  # normalized name or alias -> canonical name
    datasheet: dict[str, Device]  # canonical name -> Device before measured ceilings were merged in


_USER_FILES: list[tuple[Path, list[dict[str, Any]]]] = []
_VENDOR_PREFIXES = ("nvidia", "tesla", "geforce")
# DeviceCeilings keys that map to a Device field; "<flop key>_flops_per_s" maps to peak_flops_per_s[<flop key>].
_CEILING_FIELDS = {
    "hbm_bandwidth_bytes_per_s": "memory_bandwidth_bytes_per_s",
    "dram_bandwidth_bytes_per_s": "memory_bandwidth_bytes_per_s",
    "memory_bandwidth_bytes_per_s": "memory_bandwidth_bytes_per_s",
    "launch_overhead_s": "launch_overhead_s",
}


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
        key = key[len(prefix) :]
    return None


_BUILDS = [0]  # catalogs built so far (catalog_generation)


@functools.cache
def _catalog() -> _Catalog:
    _BUILDS[0] += 1
    builtin = json.loads(DEVICES_FILE.read_text())
    defaults, tables = builtin.get("defaults", {}), builtin.get("mig_tables", {})
    records: dict[str, dict[str, Any]] = {}
    index: dict[str, str] = {}
    for raw in builtin["devices"]:
        _add_record(records, index, normalize_record({**defaults, **raw}, tables, str(DEVICES_FILE)))
    _add_record(records, index, _cpu_record(detect_local_cpu()))
    for path in _env_device_files():
        for rec in read_device_file(path, env=True):
            _add_record(records, index, rec)
    for _path, recs in _USER_FILES:
        for rec in recs:
            _add_record(records, index, rec)
    _fill_prices(records, index)
    devices = {name: build_device(rec) for name, rec in records.items()}
    catalog = _Catalog(devices, index, dict(devices))
    for path in _measured_files():
        _apply_measured_file(catalog, path)
    _apply_calibrated_cpu(catalog)
    _apply_power_limits(catalog)
    return catalog


def _apply_power_limits(catalog: _Catalog) -> None:
    """A record's ``power_limit_w`` (a power-capped variant in a device file) lowers its clocks as
    ``--power-limit`` does (hardware/power_limit.py), measured ceilings included."""
    from perfpredict.hardware.power_limit import power_limited

    for name, device in list(catalog.devices.items()):
        if device.power_limit_w:
            catalog.devices[name] = power_limited(dataclasses.replace(device, power_limit_w=None), device.power_limit_w)


def _add_record(records: dict[str, dict[str, Any]], index: dict[str, str], rec: dict[str, Any]) -> None:
    """Insert ``rec``, or merge it field by field into the device its name already resolves to.

    Only the record's name is matched: a new device that lists an existing alias must not overwrite that device.
    """
    existing = _lookup(index, rec["name"])
    if rec.get("base") and existing is None:  # a variant: the base device's record, then this one's fields
        rec = _variant_of(records, index, rec)
    if existing is not None:
        old = records[existing]
        merged = {
            **old,
            **rec,
            "name": existing,
            "peak_flops_per_s": {**old.get("peak_flops_per_s", {}), **rec.get("peak_flops_per_s", {})},
            "aliases": tuple(dict.fromkeys((*old.get("aliases", ()), *rec.get("aliases", ())))),
        }
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


#: a base's fields a variant does not inherit: its own names, and what was measured or priced for the base itself
_NOT_INHERITED = ("aliases", "measured", "price_usd_per_hour", "price_source", "mig_profiles")


def _variant_of(records: dict[str, dict[str, Any]], index: dict[str, str], rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` on top of its ``base`` device's record (``base: H100-SXM`` in a device file)."""
    base = _lookup(index, str(rec["base"]))
    if base is None:
        close = close_matches(str(rec["base"]), list(records))
        raise InvalidInputError(
            f"device {rec['name']!r} names base {rec['base']!r}, which is not in the catalog"
            + (f"; did you mean: {close}?" if close else "; run `perfpredict devices` to list the names")
        )
    inherited = {k: v for k, v in records[base].items() if k not in _NOT_INHERITED}
    sources = f"{rec.get('sources') or 'a user device file'}; other fields from {base}"
    return {
        **inherited,
        **rec,
        "base": base,
        "sources": sources,
        "peak_flops_per_s": {**inherited.get("peak_flops_per_s", {}), **rec.get("peak_flops_per_s", {})},
    }


def _env_device_files() -> list[Path]:
    return list(settings().device_files)


def _fill_prices(records: dict[str, dict[str, Any]], index: Mapping[str, str]) -> None:
    """Set price_usd_per_hour: $PERFPREDICT_PRICES beats a price in a device file, which beats prices.json."""
    prices = settings().prices_file
    env = str(prices) if prices else ""
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
    measured = settings().measured_dir
    dirs = [MEASURED_DIR] + ([measured] if measured else [])
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


def _apply_calibrated_cpu(catalog: _Catalog) -> None:
    """The ``cpu`` device's ceilings from the calibrated host profile in use (``perfpredict calibrate-host``
    measures them with the CPU op model's probes); a profile that cannot be read is skipped with a warning."""
    path = user_config.calibrated_profile_path()
    if path is None or "cpu" not in catalog.devices:
        return
    try:
        ceilings = json.loads(path.read_text()).get("cpu_ceilings")
        if ceilings:
            data = {"device": "cpu", "ceilings": ceilings}
            catalog.devices["cpu"] = _apply_ceilings(catalog.devices["cpu"], data, f"calibrate-host {path.name}")
    except (OSError, ValueError, AttributeError) as err:  # InvalidInputError is a ValueError
        warnings.warn(f"skipping the calibrated CPU ceilings in {path}: {err}", stacklevel=2)


def _cpu_record(cpu: Device) -> dict[str, Any]:
    rec = {f.name: getattr(cpu, f.name) for f in dataclasses.fields(Device)}
    rec["peak_flops_per_s"] = dict(cpu.peak_flops_per_s)
    return rec
