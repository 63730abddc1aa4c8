"""The ``perfpredict`` command line: the parser of every command, and the one place errors become exit codes."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Sequence

from perfpredict.cli import (
    adapt,
    collect,
    demo,
    deploy,
    devices,
    generate,
    host,
    predict,
    roofline,
    serve,
    serve_sim,
    train,
)
from perfpredict.cli.args import EXIT_BUG, EXIT_OK, EXIT_USAGE, PROG, Parser, UsageError, fail, one_line
from perfpredict.core.errors import PerfPredictError

# in `perfpredict --help` order; each module's register() adds its commands
COMMANDS = (predict, devices, demo, generate, serve_sim, deploy, serve, roofline, host, collect, train, adapt)


def build_parser() -> argparse.ArgumentParser:
    common = Parser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    parser = Parser(
        prog=PROG,
        parents=[common],
        description="Predict a model's latency, memory, energy, carbon, "
        "cost and MIG fit on an accelerator, without running it there.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for command in COMMANDS:
        command.register(sub, parents=[common])
    return parser


def version() -> str:
    """The installed distribution's version (its metadata), else the package's own (run from a source tree)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed(PROG)
    except PackageNotFoundError:
        from perfpredict import __version__

        return __version__


def command_names(parser: argparse.ArgumentParser) -> list[str]:
    """Every command the parser knows, in `--help` order: the error for a missing command lists these, so it
    cannot go stale when a command is added."""
    for action in parser._actions:  # argparse has no public accessor for its subparsers
        if isinstance(action, argparse._SubParsersAction):
            return list(action.choices)
    return []


def report_warnings(caught: list, debug: bool, shown: tuple[str, ...] = ()) -> None:
    """Show our own warnings once, on stderr, unless the report printed them (``shown``); library noise (torch,
    transformers) only under --debug."""
    seen = {one_line(text) for text in shown}
    for w in caught:
        ours = w.category.__module__.startswith("perfpredict") or "perfpredict" in str(w.filename)
        text = one_line(w.message)
        if (ours or debug) and text not in seen and text.removeprefix(f"{PROG}: ") not in seen:
            seen.add(text)
            print(f"{PROG}: warning: {text}", file=sys.stderr)


#: libraries whose log warnings (transformers': "add `is_decoder=True`" on every layer, a config's label count)
#: are about their own API, not about the prediction: quiet while a command runs, shown under --debug
QUIET_LOGGERS = ("transformers", "huggingface_hub")


@contextlib.contextmanager
def quiet_libraries(debug: bool):
    """The libraries' loggers at ERROR for one command, restored after it (a library user's logging is never
    touched: only the CLI enters this). transformers sets its logger's level when it is first imported, from
    $TRANSFORMERS_VERBOSITY: a command that imports it meets the variable, one that finds it imported the level."""
    if debug:
        yield
        return
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [log.level for log in loggers]
    verbosity = os.environ.get("TRANSFORMERS_VERBOSITY")
    os.environ["TRANSFORMERS_VERBOSITY"] = "error"
    for log in loggers:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)
        if verbosity is None:
            os.environ.pop("TRANSFORMERS_VERBOSITY", None)
        else:
            os.environ["TRANSFORMERS_VERBOSITY"] = verbosity


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 bug, 2 bad input)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            raise UsageError(f"choose a command: {', '.join(command_names(parser))} (`{PROG} --help`)")
        with warnings.catch_warnings(record=True) as caught, quiet_libraries(debug):
            warnings.simplefilter("always")
            code = args.func(args)
        report_warnings(caught, debug, getattr(args, "shown_warnings", ()))
        return code
    except SystemExit as exit_:  # --help and --version end here
        return exit_.code if isinstance(exit_.code, int) else EXIT_OK
    except UsageError as err:
        fail(one_line(err))
        return EXIT_USAGE
    except PerfPredictError as err:
        if debug:
            raise
        fail(one_line(err))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        if debug:
            raise
        fail(f"unexpected {type(err).__name__}: {one_line(err)} (rerun with --debug for the traceback)")
        return EXIT_BUG


if __name__ == "__main__":
    sys.exit(main())
