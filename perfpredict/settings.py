"""Every environment variable perfpredict reads, read here and nowhere else.

Modules ask :func:`settings` instead of ``os.environ``, so the list below is the whole of what the environment can
change. The environment is read on each call (cheap: a few dictionary lookups), so a variable set or cleared at run
time, as tests and notebooks do, takes effect at the next lookup.

=============================== ===================================================================================
``PERFPREDICT_CACHE_DIR``       root of the on-disk caches: the one graph cache (``<dir>/graph-store``, shared by the
                                CLI, the web page, generation and the training data) and the generation answers
                                (``<dir>/answer-store``)
``PERFPREDICT_NO_GRAPH_CACHE``  ``1``, ``true`` or ``yes``: read and write no cached graph or generation answer
``PERFPREDICT_ARTIFACTS``       folders (``os.pathsep``-separated) of the user's own predictor artifacts, searched
                                before the user folder and the shipped ones
``PERFPREDICT_GRID_G_PER_KWH``  the grid's carbon intensity: a number (gCO2e/kWh) or a region name
``PERFPREDICT_DEVICES``         device files (YAML or JSON, ``os.pathsep``-separated) added to the catalog
``PERFPREDICT_PRICES``          a JSON file of $/hour per device; it beats every other price
``PERFPREDICT_MEASURED_DIR``    a folder of measured-ceilings JSON files, merged into the catalog (measured wins)
``PERFPREDICT_HOST_PROFILE``    the calibrated host profile to use instead of this machine's default one
``XDG_CACHE_HOME``              where caches go when ``PERFPREDICT_CACHE_DIR`` is not set (else ``~/.cache``)
``XDG_CONFIG_HOME``             where ``perfpredict calibrate-host`` keeps its profile (else ``~/.config``)
``XDG_DATA_HOME``               where ``perfpredict adapt`` registers artifacts (else ``~/.local/share``)
=============================== ===================================================================================
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_CACHE_DIR = "PERFPREDICT_CACHE_DIR"
ENV_NO_GRAPH_CACHE = "PERFPREDICT_NO_GRAPH_CACHE"
ENV_ARTIFACTS = "PERFPREDICT_ARTIFACTS"
ENV_GRID = "PERFPREDICT_GRID_G_PER_KWH"
ENV_DEVICES = "PERFPREDICT_DEVICES"
ENV_PRICES = "PERFPREDICT_PRICES"
ENV_MEASURED_DIR = "PERFPREDICT_MEASURED_DIR"
ENV_HOST_PROFILE = "PERFPREDICT_HOST_PROFILE"
_TRUE = ("1", "true", "yes")
_XDG = ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME")
#: what a Settings depends on: its variables, and HOME (the XDG folders' fallback, through Path.home())
_READ = (
    ENV_CACHE_DIR,
    ENV_NO_GRAPH_CACHE,
    ENV_ARTIFACTS,
    ENV_GRID,
    ENV_DEVICES,
    ENV_PRICES,
    ENV_MEASURED_DIR,
    ENV_HOST_PROFILE,
    *_XDG,
    "HOME",
)


@dataclass(frozen=True)
class Settings:
    """What the environment says, each value parsed once (empty means unset)."""

    cache_dir: Path | None = None
    graph_cache: bool = True
    artifact_dirs: tuple[Path, ...] = ()
    grid: str = ""
    device_files: tuple[Path, ...] = ()
    prices_file: Path | None = None
    measured_dir: Path | None = None
    host_profile: Path | None = None
    xdg_cache_home: Path | None = None
    xdg_config_home: Path | None = None
    xdg_data_home: Path | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ

        def path(name: str) -> Path | None:
            value = env.get(name, "").strip()
            return Path(value) if value else None

        def paths(name: str) -> tuple[Path, ...]:
            return tuple(Path(p) for p in env.get(name, "").split(os.pathsep) if p.strip())

        return cls(
            cache_dir=path(ENV_CACHE_DIR),
            graph_cache=env.get(ENV_NO_GRAPH_CACHE, "") not in _TRUE,
            artifact_dirs=paths(ENV_ARTIFACTS),
            grid=env.get(ENV_GRID, "").strip(),
            device_files=paths(ENV_DEVICES),
            prices_file=path(ENV_PRICES),
            measured_dir=path(ENV_MEASURED_DIR),
            host_profile=path(ENV_HOST_PROFILE),
            xdg_cache_home=path("XDG_CACHE_HOME"),
            xdg_config_home=path("XDG_CONFIG_HOME"),
            xdg_data_home=path("XDG_DATA_HOME"),
        )

    @functools.cached_property
    def user_cache_dir(self) -> Path:
        """$XDG_CACHE_HOME/perfpredict, else ~/.cache/perfpredict."""
        return (self.xdg_cache_home or Path.home() / ".cache") / "perfpredict"

    @functools.cached_property
    def config_dir(self) -> Path:
        """$XDG_CONFIG_HOME/perfpredict, else ~/.config/perfpredict."""
        return (self.xdg_config_home or Path.home() / ".config") / "perfpredict"

    @functools.cached_property
    def data_dir(self) -> Path:
        """$XDG_DATA_HOME/perfpredict, else ~/.local/share/perfpredict."""
        return (self.xdg_data_home or Path.home() / ".local" / "share") / "perfpredict"


def settings() -> Settings:
    """The settings the environment holds now: parsed once per distinct environment, since one prediction asks a
    few dozen times (its host profile, devices, caches) and a fresh parse each time was a tenth of its cost."""
    return _parsed(tuple(os.environ.get(name) for name in _READ))


@functools.lru_cache(maxsize=8)
def _parsed(values: tuple[str | None, ...]) -> Settings:
    return Settings.from_environment({name: v for name, v in zip(_READ, values, strict=True) if v is not None})
