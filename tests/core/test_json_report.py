"""JsonReport: the JSON form every report shares (fields, nested dataclasses as dicts) and its way back."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from perfpredict.core.report import JsonReport


@dataclass(frozen=True)
class _Part:
    ms: float


@dataclass(frozen=True)
class _Report(JsonReport):
    part: _Part
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    assumptions: dict[str, str] = field(default_factory=dict)


def test_to_json_nests_dataclasses_and_restore_messages_brings_tuples_back():
    report = _Report(_Part(1.5), warnings=("slow",), assumptions={"batch": "1"})
    d = json.loads(report.to_json(indent=None))
    assert d == {"part": {"ms": 1.5}, "warnings": ["slow"], "notes": [], "assumptions": {"batch": "1"}}
    JsonReport.restore_messages(d)
    assert _Report(**{**d, "part": _Part(**d["part"])}) == report


def test_restore_messages_fills_what_an_older_json_lacks():
    d = {"part": {"ms": 0.0}}
    JsonReport.restore_messages(d)
    assert (d["warnings"], d["notes"], d["assumptions"]) == ((), (), {})


def test_every_report_has_the_json_form():
    from perfpredict.core.report import PerfReport
    from perfpredict.llm.generation_report import GenerationReport
    from perfpredict.parallel.report import ParallelReport

    assert all(issubclass(cls, JsonReport) for cls in (PerfReport, ParallelReport, GenerationReport))
