"""Cloud cost: $/GPU-hour prices and the cost of a predicted workload.

Prices, first match wins: the ``prices`` argument (a mapping or a JSON file), then the catalog's
``Device.price_usd_per_hour``, which the catalog takes from ``PERFPREDICT_PRICES`` (a JSON file), a price set in a
user device file, or ``perfpredict/data/prices.json``: illustrative late-2025 on-demand prices, not quotes.
A MIG slice costs the full GPU's price x compute_slices/7 (the share of the GPU it takes from other tenants).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from perfpredict.core.errors import InvalidInputError, UnknownDeviceError
from perfpredict.hardware.devices import PRICES_FILE, Device, get_device, list_devices, read_price_file
from perfpredict.settings import ENV_PRICES

SECONDS_PER_HOUR = 3600.0
__all__ = [
    "PRICES_FILE",
    "Price",
    "cost_per_1k_inferences_usd",
    "cost_usd",
    "load_prices",
    "price_for",
    "price_usd_per_hour",
    "training_run_cost_usd",
]


@dataclass(frozen=True)
class Price:
    """A $/hour price (None: unknown) and where it came from."""

    usd_per_hour: float | None
    source: str


def price_for(device: str | Device, prices: Mapping[str, float] | str | os.PathLike[str] | None = None) -> Price:
    """The price of ``device`` (a name, a MIG slice name or a Device) with its source; see the module doc."""
    device = get_device(device)
    table = _argument_table(prices)
    if device.name in table:
        return Price(table[device.name], "prices argument")
    if device.parent is not None:  # MIG slice: a share of the full GPU's price
        parent = get_device(device.parent)
        profile = parent.mig_profile(device.name.rsplit("/", 1)[-1])
        full = price_for(parent, prices)
        if full.usd_per_hour is None:
            return full
        return Price(
            full.usd_per_hour * profile.compute_slices / 7,
            f"{full.source}; MIG slice {profile.name}: full price x {profile.compute_slices}/7",
        )
    if device.price_usd_per_hour is not None:
        return Price(device.price_usd_per_hour, device.price_source or "set on the device")
    return Price(None, f"no price for {device.name!r}: pass prices={{...}} or set ${ENV_PRICES} to a JSON file")


def price_usd_per_hour(
    device: str | Device, prices: Mapping[str, float] | str | os.PathLike[str] | None = None
) -> float | None:
    """$/hour for ``device`` (None when no price is known, e.g. the local CPU)."""
    return price_for(device, prices).usd_per_hour


def load_prices(prices: Mapping[str, float] | str | os.PathLike[str] | None = None) -> dict[str, float]:
    """Every known price by canonical device name (the catalog's, with the ``prices`` argument on top)."""
    merged = {d.name: d.price_usd_per_hour for d in list_devices() if d.price_usd_per_hour is not None}
    merged.update(_argument_table(prices))
    return merged


def cost_usd(seconds: float, price_usd_per_hour: float) -> float:
    """Cost of ``seconds`` of device time: seconds / 3600 x $/hour."""
    _check_non_negative(seconds, "seconds")
    _check_non_negative(price_usd_per_hour, "price_usd_per_hour")
    return seconds / SECONDS_PER_HOUR * price_usd_per_hour


def cost_per_1k_inferences_usd(latency_ms: float, batch_size: int, price_usd_per_hour: float) -> float:
    """Cost of 1000 samples served in batches of ``batch_size``, each batch taking ``latency_ms`` (one instance)."""
    _check_non_negative(latency_ms, "latency_ms")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidInputError(f"batch_size must be a positive integer, got {batch_size!r}")
    seconds_per_1k = 1000 / batch_size * latency_ms / 1000
    return cost_usd(seconds_per_1k, price_usd_per_hour)


def training_run_cost_usd(step_latency_ms: float, steps: int, price_usd_per_hour: float, num_gpus: int = 1) -> float:
    """Cost of ``steps`` training steps of ``step_latency_ms`` each on ``num_gpus`` GPUs billed per GPU-hour."""
    _check_non_negative(step_latency_ms, "step_latency_ms")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise InvalidInputError(f"steps must be a non-negative integer, got {steps!r}")
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or num_gpus < 1:
        raise InvalidInputError(f"num_gpus must be a positive integer, got {num_gpus!r}")
    return cost_usd(steps * step_latency_ms / 1000, price_usd_per_hour) * num_gpus


def _argument_table(prices: Mapping[str, float] | str | os.PathLike[str] | None) -> dict[str, float]:
    """The ``prices`` argument keyed by canonical device name (names not in the catalog are kept as given)."""
    if prices is None:
        return {}
    if isinstance(prices, Mapping):
        raw = {str(k): v for k, v in prices.items()}
    else:
        raw = read_price_file(Path(prices), f"the prices argument ({os.fspath(prices)!r})")
    out = {}
    for name, value in raw.items():
        _check_non_negative(value, f"price of {name!r} in the prices argument")
        try:
            out[get_device(name).name] = float(value)
        except UnknownDeviceError:
            out[name] = float(value)
    return out


def _check_non_negative(value: object, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidInputError(f"{name} must be a non-negative number, got {value!r}")
