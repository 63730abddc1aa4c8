"""The parallel options where users ask them: Python (predict(parallel=)), the CLI (--dp/--tp/--pp/--fsdp) and the
web page's question. Each must answer the same plan the library answers, and refuse bad plans in one line."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import perfpredict  # noqa: E402
from perfpredict.cli import main  # noqa: E402
from perfpredict.parallel import ParallelReport, parallel_report  # noqa: E402
from perfpredict.parallel.build import VALIDATION_FIGURES, VALIDATION_NOTE  # noqa: E402

TINY = ["--hf", "llama-2-7b", "--seq", "128", "--batch", "1"]


def test_cli_json_is_the_library_report_for_the_same_plan(capsys):
    code = main(["predict", *TINY, "--device", "H100-SXM", "--training", "--tp", "4", "--dp", "2", "--json", "-"])
    out = capsys.readouterr().out
    assert code == 0
    got = ParallelReport.from_dict(json.loads(out))
    assert got.world_size == 8 and got.plan["tp"] == 4 and got.plan["dp"] == 2
    assert got.global_batch_size == 2 and got.fits_in_memory
    # the single-GPU baseline of a 7B AdamW step does not fit; split over 8 GPUs it does
    assert not got.single_gpu_fits_in_memory
    assert any(c.group == "tp" for c in got.collectives) and any(c.group == "dp" for c in got.collectives)


def test_cli_text_and_one_line_errors(capsys):
    assert main(["predict", *TINY, "--device", "H100-SXM", "--tp", "2"]) == 0
    text = capsys.readouterr().out
    # the validation line names what the step times are scored on (llm-foundry's and NeuSight's runs)
    assert "tp=2" in text and f"validation: {VALIDATION_NOTE}" in text and "not validated on hardware" not in text
    assert main(["predict", *TINY, "--device", "H100-SXM", "--tp", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "tp=3" in err[0] and "choose tp from" in err[0]
    assert main(["predict", *TINY, "--tp", "2", "--html", "x.html"]) == 2


def test_python_predict_with_parallel_matches_the_graph_api():
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64))
    x = torch.randn(8, 64)
    got = perfpredict.predict(model, (x,), device="A100-80GB", phase="training", parallel={"dp": 4})
    assert isinstance(got, ParallelReport) and got.world_size == 4 and got.global_batch_size == 32
    graph = perfpredict.featurize(model, (x,), phase="training")
    again = parallel_report(graph, {"dp": 4}, device="A100-80GB", model_name=got.model_name)
    assert again.step_ms == pytest.approx(got.step_ms) and again.peak_memory_bytes == got.peak_memory_bytes
    assert [c.group for c in got.collectives] == ["dp"]  # plain DDP: gradient all-reduce only


def test_the_web_question_carries_the_plan():
    from perfpredict.core.errors import InvalidInputError
    from perfpredict.web.app import parallel_plan
    from perfpredict.web.compare import Question, compare

    assert parallel_plan(1, 1, 1, False) is None
    assert parallel_plan(2, 4, 1, True) == {"dp": 2, "tp": 4, "fsdp": True}
    ans = compare(
        Question(
            model="llama-2-7b",
            phase="training",
            batch=1,
            seq=128,
            devices=("H100-SXM", "L4"),
            parallel={"tp": 4, "dp": 2},
        )
    )
    assert [r[0] for r in ans.rows] == ["H100-SXM", "L4"] and all(r[1] == "8" for r in ans.rows)
    assert ans.rows[0][7] == "yes" and ans.rows[1][7] == "NO"  # 41 GiB per GPU: no L4 holds it
    assert f"Multi-GPU step times are scored on {VALIDATION_FIGURES}" in ans.notes[0]
    assert "llm-foundry" in ans.notes[0] and "NeuSight" in ans.notes[0] and "not validated" not in ans.notes[0]
    gen = compare(Question(model="llama-2-7b", phase="generation", devices=("H100-SXM",), parallel={"tp": 2}))
    assert gen.rows[0][0] == "2 x H100-SXM" and gen.rows[0][1].startswith("vLLM 0.10") and gen.reports[0].tp == 2
    with pytest.raises(
        InvalidInputError,
        match="generation runs over tensor-parallel GPUs in pipeline stages: keep tp and pp, clear dp",
    ):
        compare(Question(model="llama-2-7b", phase="generation", devices=("H100-SXM",), parallel={"dp": 2}))
