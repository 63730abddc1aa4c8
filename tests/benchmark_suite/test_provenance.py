"""The header line of every benchmark result: how to rerun it, when, where, with what, from which commit and inputs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from benchmarks import provenance


def test_command_names_the_script_from_the_repository_root_and_quotes_arguments():
    script = provenance.ROOT / "benchmarks" / "speed.py"
    assert provenance.command(script, ["--runs", "5", "a b"]) == "python benchmarks/speed.py --runs 5 'a b'"
    assert provenance.command(str(script), []) == "python benchmarks/speed.py"


def test_header_has_command_date_machine_versions_and_commit(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["speed.py", "--runs", "3"])
    line = provenance.header(provenance.ROOT / "benchmarks" / "speed.py", seconds=12.4, packages=("json",))
    assert line.startswith("`python benchmarks/speed.py --runs 3`, ")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC, 12 s; ", line)
    assert "cores visible" in line and "load average" in line and "; python 3." in line and ", json " in line
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=provenance.ROOT)
    expected = head.stdout.strip()[:12] if head.returncode == 0 else "unknown"
    assert f"; commit {expected}; inputs digest " in line


def test_git_commit_is_none_outside_a_repository(tmp_path):
    assert provenance.git_commit(tmp_path) is None


def test_write_result_prints_and_writes_into_a_new_folder(tmp_path, capsys):
    out = tmp_path / "results" / "x.md"
    provenance.write_result("# result\n", out)
    assert out.read_text() == "# result\n"
    captured = capsys.readouterr()
    assert captured.out == "# result\n\n" and str(out) in captured.err
    provenance.write_result("only shown", None)
    assert capsys.readouterr().out == "only shown\n" and not (Path.cwd() / "None").exists()
