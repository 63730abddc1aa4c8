"""``perfpredict calibrate-host``: measure this machine's eager dispatch cost per op kind (no GPU needed)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    p = subparsers.add_parser(
        "calibrate-host",
        parents=parents or [],
        help="time this host's eager dispatch per op kind (seconds; no GPU needed)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="where to store the profile (default: the per-user profile that "
        "predictions read, $XDG_CONFIG_HOME/perfpredict/host_profile.json)",
    )
    p.add_argument("--name", default="this host", help="a name for the profile (default 'this host')")
    p.set_defaults(func=run_calibrate_host)


def run_calibrate_host(args: argparse.Namespace) -> int:
    from perfpredict.predictors.host_calibration import calibrate
    from perfpredict.predictors.host_model import profile_path

    profile = calibrate(args.name)
    out = Path(args.out) if args.out else profile_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(profile.to_json())
    width = max(map(len, profile.dispatch_us))
    for kind, us in sorted(profile.dispatch_us.items()):
        print(f"{kind:<{width}}  {us:7.2f} us")
    print(f"{'module':<{width}}  {profile.module_us:7.2f} us per forward op")
    used = out.resolve() == profile_path().resolve()
    print(
        f"calibrate-host: stored {out}"
        + (
            "; predictions on this machine now use it"
            if used
            else f"; pass it with PERFPREDICT_HOST_PROFILE={out} to use it"
        ),
        file=sys.stderr,
    )
    return 0
