"""Binary byte units: memory sizes are quoted in them (an "80 GB" GPU has 80 GiB), so bytes divide by these."""

from __future__ import annotations

KIB = 2**10
MIB = 2**20
GIB = 2**30
TIB = 2**40
