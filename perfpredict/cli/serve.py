"""``perfpredict serve``: the web page to compare GPUs (Gradio, in the extra ``[ui]``)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    p = subparsers.add_parser("serve", parents=parents or [], help="a web page to compare GPUs for one model")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    p.set_defaults(func=run_serve)


def run_serve(args: argparse.Namespace) -> int:
    from perfpredict.core.errors import require

    require("gradio", "ui")
    from perfpredict.web.app import serve

    serve(args.host, args.port)
    return 0
