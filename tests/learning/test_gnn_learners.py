"""The GNN learners (graphsage, gae_gnn) on a small traced set.

The graphs are real (tiny MLPs and conv nets traced with perfpredict.featurize); the TARGETS ARE SYNTHETIC: a
fixed, deterministic function of the analytical prediction, so the tests check that learning happens and that
the machinery (artifacts, intervals, OOD) works. They are no statement about accuracy on measured data.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch_geometric")
pytest.importorskip("safetensors")

import torch
from synthetic_graphs import mlp
from torch import nn

FAST = {"members": 2, "target_steps": 150, "min_epochs": 4, "max_epochs": 40, "min_holdout_rows": 8}
FAST_GAE = {**FAST, "gae_epochs": 4}


@pytest.fixture(scope="module")
def traced(synthetic_traced):
    return synthetic_traced


def _split(n: int) -> tuple[np.ndarray, np.ndarray]:
    perm = np.random.default_rng(1).permutation(n)
    return np.sort(perm[n // 5 :]), np.sort(perm[: n // 5])


def _mape(pred: np.ndarray, y: np.ndarray) -> float:
    return float(np.mean(np.abs(pred / y - 1.0)) * 100)


@pytest.fixture(scope="module")
def fitted(traced):
    from perfpredict.learning.gae_learner import GAEGNNLearner
    from perfpredict.learning.graphsage_learner import GraphSAGELearner

    ts, _ = traced
    train, _ = _split(len(ts.rows))
    out = {}
    for cls, hp in ((GraphSAGELearner, FAST), (GAEGNNLearner, FAST_GAE)):
        learner = cls(**hp)
        learner.fit(ts.subset(train), ["latency_ms", "peak_memory_bytes", "energy_per_sample_j"], seed=0)
        out[cls.name] = learner
    return out


@pytest.mark.parametrize("name", ["graphsage", "gae_gnn"])
def test_training_learns(traced, fitted, name):
    ts, _ = traced
    learner = fitted[name]
    assert learner.targets == ["latency_ms", "peak_memory_bytes"]  # energy has no rows on a CPU set: dropped
    for losses in learner.fit_info["member_losses"]:
        assert losses[-1] < 0.5 * losses[0]
    if name == "gae_gnn":
        gae = learner.fit_info["gae"]
        assert gae["graphs"] > 0 and gae["losses"][-1] < gae["losses"][0]
    train, test = _split(len(ts.rows))
    for idx, bound in ((train, 25.0), (test, 40.0)):  # loose: a learning check on synthetic targets
        pred = learner.predict(ts.subset(idx))
        for t in learner.targets:
            assert _mape(pred[t].value, ts.y[t][idx]) < bound, (t, learner.modes, learner.holdout_mape)
    assert set(learner.modes.values()) <= {"log", "residual"}


@pytest.mark.parametrize("name", ["graphsage", "gae_gnn"])
def test_artifact_round_trip_and_interval(traced, fitted, name):
    from perfpredict.learning.gae_learner import GAEGNNLearner
    from perfpredict.learning.graphsage_learner import GraphSAGELearner

    ts, _ = traced
    learner = fitted[name]
    files = learner.to_files()
    assert set(files) == {"weights.safetensors", "ood.safetensors", "config.json"}
    assert all(not k.endswith((".pkl", ".pt")) for k in files)
    cls = {"graphsage": GraphSAGELearner, "gae_gnn": GAEGNNLearner}[name]
    again = cls.from_files(None, files)
    a, b = learner.predict(ts), again.predict(ts)
    for t in learner.targets:
        np.testing.assert_array_equal(a[t].value, b[t].value)
        np.testing.assert_array_equal(a[t].ood, b[t].ood)
        assert np.all(a[t].low <= a[t].value) and np.all(a[t].value <= a[t].high)
        assert np.all(a[t].high > a[t].low)
    assert again.to_files() == files


def test_damaged_artifact_raises(fitted):
    from perfpredict.core.errors import ArtifactError
    from perfpredict.learning.graphsage_learner import GraphSAGELearner

    files = dict(fitted["graphsage"].to_files())
    del files["weights.safetensors"]
    with pytest.raises(ArtifactError, match="retrain"):
        GraphSAGELearner.from_files(None, files)
    with pytest.raises(ArtifactError, match="retrain"):
        GraphSAGELearner.from_files(None, fitted["gae_gnn"].to_files())  # another predictor's files


def test_fit_is_reproducible(traced):
    from perfpredict.learning.graphsage_learner import GraphSAGELearner

    ts, _ = traced
    small = ts.subset(np.arange(0, len(ts.rows), 2))
    files = []
    for _ in range(2):
        learner = GraphSAGELearner(**{**FAST, "target_steps": 20, "min_epochs": 2, "max_epochs": 4})
        learner.fit(small, ["latency_ms"], seed=3)
        files.append(learner.to_files())
    assert files[0] == files[1]


def test_gae_fit_is_reproducible_whatever_python_random_holds_and_leaves_it_as_it_was(traced):
    # torch_geometric's negative sampling draws from Python's `random`, which torch.manual_seed does not reach
    import random

    from perfpredict.learning.gae_learner import GAEGNNLearner

    ts, _ = traced
    small = ts.subset(np.arange(0, len(ts.rows), 2))
    files = []
    for caller_seed in (1, 2):
        random.seed(caller_seed)
        expected_next = random.Random(caller_seed).random()
        learner = GAEGNNLearner(**{**FAST_GAE, "gae_epochs": 2, "target_steps": 20, "min_epochs": 2, "max_epochs": 4})
        learner.fit(small, ["latency_ms"], seed=3)
        files.append(learner.to_files())
        assert random.random() == expected_next
    assert files[0] == files[1]


def test_ood_is_high_for_an_absurd_graph(traced, fitted):
    import perfpredict
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.feature_rows import single_row_set
    from perfpredict.predictors.learned import OOD_WARN_ABOVE

    ts, device = traced
    layer = nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True)
    absurd = nn.Sequential(nn.TransformerEncoder(layer, num_layers=4), nn.LayerNorm(256), nn.Linear(256, 30_000))
    graph = perfpredict.featurize(absurd, (torch.randn(64, 128, 256),), name="absurd")
    one = single_row_set(graph, device, RunConfig())
    _, held_out = _split(len(ts.rows))
    for name, learner in fitted.items():
        # held-out rows: drawn like the training rows but not trained on (training rows sit at distance ~0)
        # Not "above every held-out row": held-out rows are unseen architectures, and CPU training is not
        # bit-reproducible (two runs in a row scored this graph 8.9 and 8.7), so one of ten held-out rows can
        # itself land far out (9.7 once, in a full-suite run, beside 8.4 for this graph).
        unseen = learner.predict(ts.subset(held_out))["latency_ms"].ood
        far = learner.predict(one)["latency_ms"].ood
        assert far[0] > OOD_WARN_ABOVE and far[0] > 2 * np.median(unseen), (name, far, unseen)
        assert np.mean(unseen <= OOD_WARN_ABOVE) >= 0.7, (name, unseen)  # the warning is not raised on everything


def test_served_through_the_registry(traced, fitted, tmp_path, monkeypatch):
    import perfpredict
    import perfpredict.predictors.gae
    import perfpredict.predictors.graphsage
    from perfpredict.predictors.artifacts import Manifest, artifact_path, save_artifact
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.registry import get_predictor

    ts, device = traced
    monkeypatch.setenv("PERFPREDICT_ARTIFACTS", str(tmp_path))
    graph = perfpredict.featurize(mlp(64, 3), (torch.randn(8, 64),), name="mlp")
    for name, learner in fitted.items():
        manifest = Manifest(
            predictor=name,
            version=learner.version,
            device=device.name,
            feature_schema_hash=learner.schema,
            data_hash="synthetic",
            targets=learner.targets,
        )
        save_artifact(artifact_path(name, device.name, tmp_path), manifest, learner.to_files())
        predictor = get_predictor(name)
        out = predictor.predict(graph, device, RunConfig())
        assert out.latency_ms.predictor == name
        assert out.latency_ms.low <= out.latency_ms.value <= out.latency_ms.high
        assert out.peak_memory_bytes.predictor == name
