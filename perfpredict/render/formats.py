"""How every renderer writes a number: times, bytes, energy, power, carbon, money, rates, counts and shares, each
scaled to a readable unit (the terminal, HTML and web page read the same)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from perfpredict.core.units import GIB, KIB, MIB, TIB

if TYPE_CHECKING:
    from perfpredict.core.report import Prediction


NA = "n/a"


def _bad(value: Any) -> bool:
    return value is None or (isinstance(value, float) and (math.isnan(value) or math.isinf(value)))


def _scaled(value: float, steps: Sequence[tuple[float, str]], digits: int = 3) -> str:
    """Pick the largest unit (factor, name) that keeps the number >= 1, and show ``digits`` significant figures."""
    if _bad(value):
        return NA
    if value == 0:
        return f"0 {steps[-1][1]}"
    for factor, name in steps:  # noqa: B007 - the unit after the loop is the one that matched
        if abs(value) >= factor:
            break
    scaled = value / factor
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(scaled)))))
    return f"{scaled:,.{decimals}f} {name}"


def fmt_time_ms(ms: float | None) -> str:
    """1.5e-3 ms -> '1.50 us'; 1234 ms -> '1.23 s'."""
    return (
        NA
        if _bad(ms)
        else _scaled(ms * 1e-3, [(3600, "h"), (60, "min"), (1, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")])
    )


def fmt_bytes(n: float | None) -> str:
    """Binary units, as device memory is quoted: 1.5 * GIB -> '1.50 GiB'."""
    return NA if _bad(n) else _scaled(float(n), [(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB"), (1, "B")])


def fmt_energy_j(j: float | None) -> str:
    return NA if _bad(j) else _scaled(j, [(3.6e6, "kWh"), (1e3, "kJ"), (1, "J"), (1e-3, "mJ"), (1e-6, "uJ")])


def fmt_power_w(w: float | None) -> str:
    return NA if _bad(w) else _scaled(w, [(1e3, "kW"), (1, "W"), (1e-3, "mW")])


def fmt_carbon_g(g: float | None) -> str:
    """Grams of CO2-equivalent: 1250 -> '1.25 kg'."""
    return NA if _bad(g) else _scaled(g, [(1e6, "t"), (1e3, "kg"), (1, "g"), (1e-3, "mg")])


def fmt_usd(usd: float | None) -> str:
    if _bad(usd):
        return NA
    if usd == 0 or abs(usd) >= 0.01:
        return f"${usd:,.2f}"
    # two significant digits, never an exponent: $0.000091, not $9.1e-05
    return f"${usd:.{1 - math.floor(math.log10(abs(usd)))}f}"


def fmt_rate(per_s: float | None, unit: str = "samples/s") -> str:
    """A rate with thousands separators; ``unit=""`` gives the bare number (for intervals)."""
    if _bad(per_s):
        return NA
    per_s = float(per_s)
    text = f"{per_s:,.0f}" if abs(per_s) >= 100 else f"{per_s:,.3g}"
    return f"{text} {unit}".strip()


def fmt_count(n: float | None, unit: str = "") -> str:
    """Decimal SI prefixes for counts (FLOPs, parameters): 1.2e9 -> '1.20 G'."""
    if _bad(n):
        return NA
    text = _scaled(float(n), [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, "")])
    return f"{text}{unit}".strip()


def fmt_sig(x: float | None) -> str:
    """Three significant figures without exponent noise for ordinary magnitudes: 302.4 -> '302', 0.25 -> '0.25'."""
    if _bad(x):
        return NA
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def fmt_share(share: float | None) -> str:
    return NA if _bad(share) else f"{share * 100:.1f}%"


def fmt_interval(pred: Prediction, fmt) -> str:
    return f"[{fmt(pred.low)}, {fmt(pred.high)}]"
