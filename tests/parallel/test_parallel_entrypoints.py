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


# Llama-3-8B's config (perfpredict/data/hf_configs), 4 of its 32 layers: one per model chunk of pp 2 x 2 virtual
# stages, so the capture stays small while every width is the real model's
LLAMA3_8B_STYLE = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 4,
    "vocab_size": 128256,
    "max_position_embeddings": 8192,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
COMBINED_FLAGS = [
    *("--tp", "4", "--sp", "--async-tp", "--cp", "2", "--pp", "2", "--schedule", "interleaved"),
    *("--virtual-stages", "2", "--microbatches", "4", "--dp", "2", "--fsdp", "hybrid_shard"),
    *("--activation-checkpointing", "selective-op"),
]
COMBINED_PLAN = {
    "tp": 4,
    "sp": True,
    "async_tp": True,
    "cp": 2,
    "pp": 2,
    "schedule": "interleaved",
    "virtual_stages": 2,
    "microbatches": 4,
    "dp": 2,
    "fsdp": True,
    "fsdp_strategy": "hybrid_shard",
}


def _check_the_combined_plan(report: ParallelReport) -> None:
    """The step split sums to the step, each rank's memory terms to its peak, and every option is an assumption."""
    assert report.world_size == 4 * 2 * 2 * 2 and report.global_batch_size == 1 * 4 * 2
    split = report.step_split.rows()
    assert sum(ms for _, ms in split) == pytest.approx(report.step_ms, rel=1e-9)
    assert all(ms >= 0 for _, ms in split) and dict(split)["pipeline bubble"] > 0 and dict(split)["recompute"] > 0
    for stage in report.stages:
        assert sum(b for _, b in stage.memory.rows()) == stage.memory.total_bytes
    assert max(s.memory.total_bytes for s in report.stages) == report.peak_memory_bytes
    said = report.assumptions
    assert "sequence parallelism" in said["tensor_parallel"]  # tp 4 with sp
    assert said["async_tp"].startswith("async TP: each sequence-parallel all-gather and reduce-scatter cut into tp")
    assert said["context_parallel"].startswith("ring attention over cp=2")
    assert said["pipeline"].startswith("interleaved 1F1B with 2 model chunks per rank")
    assert "HYBRID_SHARD" in said["overlap"] and said["memory"].startswith("FSDP HYBRID_SHARD")
    assert said["activation checkpointing"].startswith("selective-op")


def test_one_plan_with_every_axis_through_the_cli_and_the_api(tmp_path, capsys):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = tmp_path / "config.json"
    config.write_text(json.dumps(LLAMA3_8B_STYLE))
    argv = ["predict", "--config", str(config), "--seq", "256", "--batch", "1", "--device", "H100-SXM", "--training"]
    assert main([*argv, *COMBINED_FLAGS, "--json", "-"]) == 0
    cli = ParallelReport.from_dict(json.loads(capsys.readouterr().out))
    _check_the_combined_plan(cli)

    fields = {k: v for k, v in LLAMA3_8B_STYLE.items() if k not in ("model_type", "architectures", "torch_dtype")}
    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**fields)).to(torch.bfloat16)
    api = perfpredict.predict(
        model,
        (torch.zeros(1, 256, dtype=torch.long),),
        device="H100-SXM",
        phase="training",
        parallel=COMBINED_PLAN,
        activation_checkpointing="selective-op",
    )
    _check_the_combined_plan(api)
    assert {k: api.plan[k] for k in COMBINED_PLAN} == {k: cli.plan[k] for k in COMBINED_PLAN} == COMBINED_PLAN
