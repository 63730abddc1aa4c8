"""Which code a result came from: the inputs' digest (``benchmarks/inputs_digest.py``), and ``python -m benchmarks
stale`` (``benchmarks/stale.py``) listing the results whose inputs changed since they ran."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import inputs_digest, provenance, quoted, stale

SCRIPT = "benchmarks/bench.py"
RESULT = "benchmarks/results/bench.md"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A small repository: a package with code, data and an artifact, a benchmark, a test and a results folder."""
    files = {
        "perfpredict/__init__.py": "",
        "perfpredict/model.py": "SCALE = 2\n",
        "perfpredict/data/devices.json": '{"H100": 1}\n',
        "perfpredict/predictors/artifacts/trees.npz": b"\x00\x01binary\r\n",
        SCRIPT: "print('bench')\n",
        "data/external/rows.csv": "a,b\n1,2\n",
        "tests/test_model.py": "def test(): pass\n",
        RESULT: "# old result\n",
    }
    for rel, body in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body if isinstance(body, bytes) else body.encode())
    return tmp_path


def _write_result(root: Path, inputs: tuple[str, ...] = (SCRIPT,)) -> None:
    """A result as a benchmark writes it: its header names today's digest of its inputs."""
    names = inputs_digest.normalise(inputs)
    line = provenance.digest_text(names, inputs_digest.digest(names, root))
    (root / RESULT).write_text(f"# Bench\n\n`python {SCRIPT}`; commit abc; {line}.\n\n| all | 6.4% |\n")


def test_digest_follows_package_code_and_data_but_not_results_or_tests(repo):
    before = inputs_digest.digest([SCRIPT], repo)
    (repo / RESULT).write_text("# a new result\n")
    (repo / "tests/test_model.py").write_text("def test(): assert False\n")
    (repo / "perfpredict/__pycache__").mkdir()
    (repo / "perfpredict/__pycache__/model.cpython-311.pyc").write_bytes(b"compiled")
    assert inputs_digest.digest([SCRIPT], repo) == before  # none of these is an input
    (repo / "perfpredict/model.py").write_text("SCALE = 3\n")
    after_code = inputs_digest.digest([SCRIPT], repo)
    assert after_code != before
    (repo / "perfpredict/predictors/artifacts/trees.npz").write_bytes(b"\x00\x02binary\r\n")
    assert inputs_digest.digest([SCRIPT], repo) != after_code  # a shipped artifact is an input too


def test_digest_covers_declared_data_only_where_declared(repo):
    plain, with_data = inputs_digest.digest([SCRIPT], repo), inputs_digest.digest([SCRIPT, "data/external"], repo)
    assert plain != with_data
    (repo / "data/external/rows.csv").write_text("a,b\n1,3\n")
    assert inputs_digest.digest([SCRIPT], repo) == plain
    assert inputs_digest.digest([SCRIPT, "data/external"], repo) != with_data


def test_digest_is_of_contents_not_line_endings_mtimes_or_paths_order(repo, tmp_path_factory):
    lf = inputs_digest.digest([SCRIPT, "data/external"], repo)
    crlf = tmp_path_factory.mktemp("crlf")  # the same files, checked out elsewhere with CRLF, created in reverse
    for f in reversed(inputs_digest.files(inputs_digest.normalise([SCRIPT, "data/external"]), repo)):
        body = (repo / f).read_bytes()
        text = b"\0" not in body
        (crlf / f).parent.mkdir(parents=True, exist_ok=True)
        (crlf / f).write_bytes(body.replace(b"\n", b"\r\n") if text else body)
    assert inputs_digest.digest(["data/external", SCRIPT], crlf) == lf
    # a binary file keeps its bytes: its CRLF is data
    (crlf / "perfpredict/predictors/artifacts/trees.npz").write_bytes(b"\x00\x01binary\n")
    assert inputs_digest.digest([SCRIPT, "data/external"], crlf) != lf


def test_a_missing_input_no_longer_matches(repo):
    before = inputs_digest.digest([SCRIPT, "data/external"], repo)
    (repo / "data/external/rows.csv").unlink()
    (repo / "data/external").rmdir()
    assert inputs_digest.digest([SCRIPT, "data/external"], repo) != before


def test_stale_lists_a_result_after_a_code_change_and_fails_where_it_is_quoted(repo, capsys):
    quote = (quoted.Quote("README.md", "6.4%", RESULT, "| all | 6.4% |"),)
    _write_result(repo, (SCRIPT, "data/external"))
    assert [s.state for s in stale.check(repo)] == [stale.CURRENT]
    assert stale.main([], repo, quote) == 0
    assert "1 results: 1 current" in capsys.readouterr().out

    (repo / "perfpredict/model.py").write_text("SCALE = 3\n")
    (found,) = stale.check(repo)
    assert found.state == stale.STALE and found.inputs == ("perfpredict", SCRIPT, "data/external")
    assert stale.main([], repo, quote) == 1
    out = capsys.readouterr()
    assert f"stale      {RESULT}" in out.out and "[quoted by README.md]" in out.out and RESULT in out.err
    assert stale.main([], repo, ()) == 0  # listed, but nothing quotes it


def test_stale_lists_a_result_without_a_digest(repo, capsys):
    (found,) = stale.check(repo)
    assert found.state == stale.NONE
    assert stale.main([], repo, (quoted.Quote("README.md", "x", RESULT, "x"),)) == 1
    assert f"no digest  {RESULT}" in capsys.readouterr().out


def test_a_report_joining_runs_of_different_code_is_not_current(repo):
    names = inputs_digest.normalise([SCRIPT])
    (repo / RESULT).write_text(f"header; {provenance.digest_text(names, provenance.MIXED)}\n")
    assert stale.check(repo)[0].state == stale.MIXED


def test_header_names_the_inputs_and_todays_digest():
    line = provenance.header(provenance.ROOT / "benchmarks" / "speed.py", [], packages=(), inputs=("data/external",))
    found = provenance.DIGEST_LINE.search(line)
    assert found["inputs"] == "perfpredict, benchmarks/speed.py, data/external"
    assert found["digest"] == inputs_digest.digest(("perfpredict", "benchmarks/speed.py", "data/external"))
    with pytest.raises(FileNotFoundError, match="do not exist"):
        provenance.inputs_of("benchmarks/speed.py", ["data/no-such-folder"])
