"""Flags from the serving options' fields (``llm.serving_options``): one flag per field, named as its metadata says
(else ``--field-name``), its help and choices from the metadata, so the CLI never restates an option."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

#: Serving's fields that are values, not flags (the nested options, the engine's settings object)
NOT_FLAGS = frozenset({"stream", "slo", "prefix_cache", "speculative", "engine_config"})


def flag(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def add_fields(group: Any, cls: type, skip: frozenset[str] = frozenset()) -> None:
    """One flag per field of ``cls``, each with dest = the field's name and default None (left out: the
    field's own default, which the help names)."""
    for f in dataclasses.fields(cls):
        if f.name in skip or f.name in NOT_FLAGS:
            continue
        kind = str(f.type)
        default = f.default if f.default is not dataclasses.MISSING else None
        shown = f" (default {default})" if default not in (None, "") else ""
        name = flag(f)
        options: dict[str, Any] = {"dest": f.name, "default": None, "help": f.metadata.get("help", "") + shown}
        if f.metadata.get("choices"):
            options["choices"] = f.metadata["choices"]
        elif kind.startswith("bool"):
            options["action"] = argparse.BooleanOptionalAction
        else:
            options["type"] = float if "float" in kind else int if kind.startswith("int") else str
            options["metavar"] = name.lstrip("-").replace("-", "_").upper()
        group.add_argument(name, **options)


def given(args: argparse.Namespace, *classes: type) -> dict[str, Any]:
    """The fields of ``classes`` the command line gave (a flag left out is not passed: its default applies)."""
    names = {f.name for cls in classes for f in dataclasses.fields(cls)} - NOT_FLAGS
    return {name: getattr(args, name) for name in names if getattr(args, name, None) is not None}
