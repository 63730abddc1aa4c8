"""Where this machine's calibration lives: the user's config folder, and the host profile predictions use.

``perfpredict calibrate-host`` writes one file, the host profile ($XDG_CONFIG_HOME/perfpredict/host_profile.json).
Two consumers read it: the host model (dispatch costs, the CPU op model) and the device catalog (the ``cpu`` device's
ceilings, measured by the same calibration). Both find it here, so they cannot disagree on which file is in use.
"""

from __future__ import annotations

from pathlib import Path

from perfpredict.settings import settings


def config_dir() -> Path:
    """$XDG_CONFIG_HOME/perfpredict, else ~/.config/perfpredict."""
    return settings().config_dir


def default_profile_path() -> Path:
    """Where ``perfpredict calibrate-host`` stores this machine's profile by default."""
    return config_dir() / "host_profile.json"


def calibrated_profile_path() -> Path | None:
    """The calibrated profile predictions use: $PERFPREDICT_HOST_PROFILE, else this machine's default one if it
    exists, else None (then a shipped profile is used: ``predictors.host_model.DEFAULT_HOST``)."""
    env = settings()
    if env.host_profile is not None:
        return env.host_profile
    mine = env.config_dir / "host_profile.json"  # default_profile_path(), with the settings in hand
    return mine if mine.exists() else None
