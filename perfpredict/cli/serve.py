"""``perfpredict serve``: the web page to compare GPUs (Gradio, in the extra ``[ui]``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from perfpredict.cli.args import PROG

DEFAULT_BIND = "127.0.0.1"


def register(subparsers: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    p = subparsers.add_parser("serve", parents=parents or [], help="a web page to compare GPUs for one model")
    p.add_argument(
        "--bind",
        metavar="ADDRESS",
        default=None,
        help=f"address to listen on (default {DEFAULT_BIND}: this machine only)",
    )
    # the old spelling: everywhere else --host names the CPU profile that drives the GPU
    p.add_argument("--host", dest="host_deprecated", metavar="ADDRESS", default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    p.set_defaults(func=run_serve)


def bind_address(args: argparse.Namespace) -> str:
    """``--bind``, or the deprecated ``serve --host`` with a warning on stderr (at once: serving never returns)."""
    if args.host_deprecated is None:
        return args.bind or DEFAULT_BIND
    print(
        f"{PROG}: warning: `serve --host` is deprecated and will be removed: use --bind "
        "(--host names the CPU profile in every other command)",
        file=sys.stderr,
        flush=True,
    )
    if args.bind is not None and args.bind != args.host_deprecated:
        from perfpredict.core.errors import InvalidInputError

        raise InvalidInputError(f"--bind {args.bind!r} and --host {args.host_deprecated!r} disagree; give --bind alone")
    return args.host_deprecated


def run_serve(args: argparse.Namespace) -> int:
    from perfpredict.core.errors import require

    bind = bind_address(args)
    require("gradio", "ui")
    from perfpredict.web.app import serve

    serve(bind, args.port, ready=lambda line: print(f"{PROG}: {line}", flush=True))
    return 0
