"""The rounds logs are kept gzipped (issue 45: 20.8 MB of the 59.7 MB tree, against the device tool's 64 MiB), and
every reader reads the archive and the live log as one log."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from perfpredict.profiling import dataset as ds
from perfpredict.profiling import log_archive

REPO = Path(__file__).resolve().parents[2]


def _write(path: Path, records: list[dict], torn: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + torn)


def test_archiving_keeps_every_line_once_and_readers_see_one_log(tmp_path):
    log = tmp_path / "rounds.jsonl"
    first = [{"key": "a", "device": "d", "round": 0}, {"key": "a", "device": "d", "round": 1}]
    _write(log, first)
    assert log_archive.archive(log) == 2 and not log.exists()
    assert gzip.decompress(log_archive.archive_of(log).read_bytes()) == b"".join(
        json.dumps(r).encode() + b"\n" for r in first
    )
    # a resumed collector appends to the live log again; a reader sees the archive, then the live lines
    _write(log, [*first, {"key": "b", "device": "d", "round": 0}], torn='{"key": "b", "rou')
    rows, lost, problems = ds.read_jsonl(log, required=("key",))
    assert [r["key"] for r in rows] == ["a", "a", "a", "a", "b"] and lost == 1  # the torn line is lost, said once
    # folding again adds only what the archive does not hold (the two lines it has are not doubled), as a 2nd member
    assert log_archive.archive(log) == 1 and not log.exists()
    rows, lost, problems = ds.read_jsonl(log, required=("key",))
    assert [(r["key"], r["round"]) for r in rows] == [("a", 0), ("a", 1), ("b", 0)] and lost == 0 and not problems
    assert log_archive.archive(log) == 0  # nothing live: nothing to do


def test_a_damaged_archive_keeps_the_members_before_the_damage(tmp_path):
    log = tmp_path / "rounds.jsonl"
    _write(log, [{"key": "a", "round": 0}])
    log_archive.archive(log)
    with open(log_archive.archive_of(log), "ab") as f:
        f.write(gzip.compress(b'{"key": "b", "round": 0}\n' * 1000)[:-40])  # a second member cut short
    rows, _, problems = ds.read_jsonl(log, required=("key",))
    assert rows[0] == {"key": "a", "round": 0} and len(rows) < 1001
    assert len(problems) == 1 and problems[0].startswith("rounds.jsonl.gz damaged after")


def test_compaction_archives_the_rounds_and_resume_reads_them(tmp_path):
    import pytest

    pytest.importorskip("pyarrow")
    _write(tmp_path / "rows.jsonl", [{"schema_version": 2, "key": "a", "device": "d", "status": "ok"}])
    _write(tmp_path / "rounds.jsonl", [{"key": "a", "device": "d", "round": 0}])
    assert ds.compact(tmp_path) == 1
    assert not (tmp_path / "rounds.jsonl").exists() and (tmp_path / "rounds.jsonl.gz").is_file()
    recs, _, _ = ds.read_jsonl_all(tmp_path, "rounds.jsonl", required=("key", "device", "round"))  # a resume's read
    assert recs == [{"key": "a", "device": "d", "round": 0}]


def test_the_committed_rounds_are_archived_and_complete():
    """No committed rounds log is plain text, and each archive holds every round its rows count (the H100's ops)."""
    assert not list((REPO / "data").glob("v3/**/rounds.jsonl"))
    assert len(list((REPO / "data").glob("v3/**/rounds.jsonl.gz"))) >= 4
    folder = REPO / "data" / "v3" / "nvidia-h100-80gb-hbm3" / "ops"
    rounds, lost, _ = ds.read_jsonl(folder / "rounds.jsonl", required=("key",))
    counts: dict[str, int] = {}
    for r in rounds:
        counts[r["key"]] = counts.get(r["key"], 0) + 1
    rows = [r for r in ds.load_dataset(folder, join_features=False).rows if r.get("rounds")]
    assert lost == 0 and len(rows) > 1000
    assert all(counts.get(r["key"]) == r["rounds"] for r in rows)
