"""What every command shares: the program name, exit codes, argument types, and the one-line error format.

Bad input ends with one line on stderr (``perfpredict: error: ...``) and exit code 2; a bug ends with one line
and exit code 1 unless ``--debug`` asks for the traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfpredict.core.errors import InvalidInputError

PROG = "perfpredict"
DTYPE_CHOICES = ("float32", "float16", "bfloat16")
EXIT_OK, EXIT_BUG, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """An argparse complaint, raised instead of argparse's print-and-exit so main() owns the output."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise UsageError(message)


def positive_int(what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1 or str(value) != text.strip().lstrip("+"):
            raise argparse.ArgumentTypeError(f"{what} must be a positive integer, got {text!r}")
        return value

    return parse


def non_negative_int(text: str) -> int:
    if not text.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def console():
    from perfpredict.render.text import terminal_console

    # Piped output gets a fixed width, so tables do not squeeze into 80 columns.
    return terminal_console()


def write_text(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as err:
        raise InvalidInputError(f"cannot write {path!r}: {err.strerror or err}") from err


def one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def fail(message: str) -> None:
    print(f"{PROG}: error: {message}", file=sys.stderr)


def shown(args: argparse.Namespace, warnings: tuple[str, ...] | list[str]) -> None:
    """Record that the report printed ``warnings`` itself, so the CLI's warning summary does not print them again."""
    args.shown_warnings = (*getattr(args, "shown_warnings", ()), *warnings)
