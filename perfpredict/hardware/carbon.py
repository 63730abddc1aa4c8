"""Carbon: grid carbon intensity (gCO2e per kWh) and the emissions of a predicted energy.

The default is the world average. Pick a region (``grid="france"``), pass a number, or set
``PERFPREDICT_GRID_G_PER_KWH`` (a number or a region name). Regional values are rounded annual averages for
electricity generation, approximate, and years old by the time you read this: look up your provider's or grid's
current figure (Ember, Electricity Maps) for anything you report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfpredict.core.errors import InvalidInputError, close_matches
from perfpredict.settings import ENV_GRID, settings

J_PER_KWH = 3.6e6


@dataclass(frozen=True)
class GridIntensity:
    """One grid carbon intensity with where it came from."""

    region: str
    g_per_kwh: float
    source: str


DEFAULT_GRID = GridIntensity(
    "world",
    480.0,
    "world average carbon intensity of electricity generation in 2023: 480 gCO2/kWh "
    "(Ember, Global Electricity Review 2024)",
)

# Approximate 2023 annual averages of generation intensity, rounded to 10 g; Ember data (Global Electricity
# Review 2024 and its country data). Indicative only: they move every year.
_EMBER_2023 = "Ember 2023 annual average, approximate (rounded)"
REGIONS: dict[str, GridIntensity] = {
    g.region: g
    for g in (
        DEFAULT_GRID,
        GridIntensity("eu", 250.0, _EMBER_2023),
        GridIntensity("us", 370.0, _EMBER_2023),
        GridIntensity("china", 580.0, _EMBER_2023),
        GridIntensity("india", 710.0, _EMBER_2023),
        GridIntensity("germany", 380.0, _EMBER_2023),
        GridIntensity("uk", 240.0, _EMBER_2023),
        GridIntensity("france", 60.0, _EMBER_2023),
        GridIntensity("sweden", 40.0, _EMBER_2023),
    )
}


def resolve_grid(grid: float | str | None = None) -> GridIntensity:
    """The grid intensity to use: ``grid`` (a number or region name), else the environment, else the world mean."""
    if grid is not None:
        return _parse(grid, "the grid argument")
    env = settings().grid
    if env:
        return _parse(env, f"${ENV_GRID}")
    return DEFAULT_GRID


def grid_intensity_g_per_kwh(grid: float | str | None = None) -> float:
    """gCO2e per kWh for ``grid``; see :func:`resolve_grid`."""
    return resolve_grid(grid).g_per_kwh


def carbon_g(energy_j: float, grid_g_per_kwh: float | str | None = None) -> float:
    """Grams CO2e for ``energy_j`` joules: energy_j / 3.6e6 J/kWh x g/kWh (grid resolved by :func:`resolve_grid`)."""
    if not _finite(energy_j) or energy_j < 0:
        raise InvalidInputError(f"energy_j must be a non-negative number of joules, got {energy_j!r}")
    return energy_j / J_PER_KWH * grid_intensity_g_per_kwh(grid_g_per_kwh)


def _parse(value: float | str, where: str) -> GridIntensity:
    if isinstance(value, str):
        region = value.strip().lower()
        if region in REGIONS:
            return REGIONS[region]
        try:
            number = float(region)
        except ValueError:
            close = close_matches(region, REGIONS)
            raise InvalidInputError(
                f"{where} is {value!r}: set it to grams CO2e per kWh (for example 480) or a region: "
                f"{', '.join(REGIONS)}" + (f" (did you mean {close}?)" if close else "")
            ) from None
    else:
        number = value
    if not _finite(number) or number < 0:
        raise InvalidInputError(
            f"{where} is {value!r}: grid intensity must be a non-negative number of grams CO2e "
            f"per kWh, for example 480 (world average) or 60 (France)"
        )
    return GridIntensity("custom", float(number), f"set by {where}")


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
