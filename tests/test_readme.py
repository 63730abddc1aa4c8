"""The README's quickstart runs as written: its Python snippets, in order, in one namespace (a reader's session).
Only the TVM snippet gets what it says the reader brings: ``mod``, a Relax IRModule."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SNIPPETS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


def _snippet(word: str) -> str:
    return next(s for s in SNIPPETS if word in s)


@pytest.fixture(scope="module")
def session() -> dict:
    namespace: dict = {}
    torch._dynamo.reset()
    exec(_snippet("torch.compile("), namespace)
    return namespace


def test_torch_compile_snippet_runs_and_shows_a_report(session, capsys):
    exec(_snippet("torch.compile("), session)
    out = capsys.readouterr().out
    assert "Predicted performance" in out and "H100-SXM" in out
    assert tuple(session["out"].shape) == (64, 512)


def test_python_snippet_defines_its_input_and_uses_the_meta_device(session):
    code = _snippet("perfpredict.predict(")
    assert 'device="meta"' in code and "ids =" in code
    exec(code, session)
    report, cols = session["report"], session["cols"]
    assert report.phase == "training" and report.batch_size == 8 and report.latency_ms.value > 0
    assert len(cols["latency_ms"]) == 256


def test_nas_snippet_runs_and_keeps_some_candidates_not_all(session):
    exec(_snippet("predict_models("), session)
    assert len(session["cols"]["latency_ms"]) == len(session["space"]) == 9
    assert 0 < len(session["fast"]) < 9, session["cols"]["latency_ms"]  # it kept 0 of 9 under a fixed 8 ms


@pytest.mark.tvm
def test_tvm_snippet_imports_what_it_uses(session, capsys):
    pytest.importorskip("tvm")
    from tvm.relax.frontend.torch import from_exported_program

    code = _snippet("PredictPerformance(")
    assert "import tvm" in code and "from tvm import relax" in code and "import PredictPerformance" in code
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session["mod"] = from_exported_program(torch.export.export(model, (torch.randn(1, 3, 16, 16),)))
    exec(code, session)
    assert "Predicted performance" in capsys.readouterr().out


def test_the_shipped_config_count_is_the_folders():
    """The README said 18 shipped configs while 24 were shipped: the count is the config files'."""
    import json

    folder = ROOT / "perfpredict" / "data" / "hf_configs"
    files = {p.name for p in folder.glob("*.json")} - {"index.json", "defaults.json"}  # the index, the class defaults
    index = json.loads((folder / "index.json").read_text())["models"]
    assert files == {entry["file"] for entry in index.values()}  # one file per shipped id, none unlisted
    readme = re.search(r"\((\d+) shipped HuggingFace configs", (ROOT / "README.md").read_text())
    usage = re.search(r"`--hf` takes one of (\d+) shipped offline configs", (ROOT / "docs" / "usage.md").read_text())
    assert int(readme.group(1)) == int(usage.group(1)) == len(files)
