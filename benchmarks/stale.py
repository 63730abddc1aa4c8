"""``python -m benchmarks stale``: the committed results that no longer come from today's code.

Each result under ``benchmarks/results/`` (its top-level ``*.md`` files) names the digest of the inputs it ran with
(``benchmarks.provenance``: ``perfpredict``, the script, the data it read). A result is

- ``current`` when today's digest of the same inputs matches it;
- ``stale`` when it does not (a ``perfpredict`` file, the script or its data changed since the run);
- ``mixed`` when a report joins runs made from different code (``benchmarks/accuracy.py``'s stored runs);
- ``no digest`` when it names none (written before digests, or by a script that writes none).

Every result that is not current is listed. The exit status is 1 when a result the README or docs/accuracy.md
quotes (``benchmarks.quoted``) is not current, else 0: a figure on those pages comes from today's code.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NamedTuple

from benchmarks import inputs_digest, provenance, quoted

CURRENT, STALE, MIXED, NONE = "current", "stale", "mixed", "no digest"


class Status(NamedTuple):
    result: str  # relative to the repository root
    state: str
    recorded: str | None = None  # the digest the result names
    today: str | None = None  # today's digest of the same inputs
    inputs: tuple[str, ...] = ()


def result_files(root: Path) -> list[Path]:
    """The committed results: ``benchmarks/results/*.md`` (their folders hold stored runs and raw data)."""
    return sorted((root / quoted.RESULTS).glob("*.md"))


def status(path: Path, root: Path, cache: dict[tuple[str, ...], str] | None = None) -> Status:
    """Whether the result at ``path`` matches today's digest of the inputs it names."""
    cache = {} if cache is None else cache
    rel = path.relative_to(root).as_posix()
    found = provenance.DIGEST_LINE.search(path.read_text(errors="replace"))
    if found is None:
        return Status(rel, NONE)
    inputs = tuple(s.strip() for s in found["inputs"].split(",") if s.strip())
    if inputs not in cache:
        cache[inputs] = inputs_digest.digest(inputs, root)
    recorded, today = found["digest"], cache[inputs]
    state = MIXED if recorded == provenance.MIXED else CURRENT if recorded == today else STALE
    return Status(rel, state, recorded, today, inputs)


def check(root: Path = provenance.ROOT) -> list[Status]:
    cache: dict[tuple[str, ...], str] = {}
    return [status(p, root, cache) for p in result_files(root)]


def describe(s: Status, pages: list[str]) -> str:
    quoted_by = f"  [quoted by {', '.join(pages)}]" if pages else ""
    if s.state == NONE:
        return f"{s.state:9}  {s.result}{quoted_by}"
    return f"{s.state:9}  {s.result}  (ran with {s.recorded}, today {s.today}; {', '.join(s.inputs)}){quoted_by}"


def main(
    argv: list[str] | None = None, root: Path = provenance.ROOT, quotes: tuple[quoted.Quote, ...] = quoted.QUOTES
) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks stale", description=__doc__.splitlines()[0])
    p.add_argument("--all", action="store_true", help="list the current results too")
    args = p.parse_args(argv)
    pages = quoted.quoted_results(quotes)
    statuses = check(root)
    for s in statuses:
        if args.all or s.state != CURRENT:
            print(describe(s, pages.get(s.result, [])))
    counts = {state: sum(s.state == state for s in statuses) for state in (CURRENT, STALE, MIXED, NONE)}
    print(f"{len(statuses)} results: " + ", ".join(f"{n} {state}" for state, n in counts.items()))
    by_name = {s.result: s for s in statuses}
    failing = [r for r in pages if by_name.get(r, Status(r, NONE)).state != CURRENT]
    if failing:
        print(
            f"not current, and quoted by README.md or docs/accuracy.md: {', '.join(failing)}; rerun each "
            "(its header names the command) before its figures are quoted",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
