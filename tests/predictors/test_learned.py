"""Learned predictors: learning happens on measured rows, artifacts round-trip, the registry picks them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import perfpredict
from perfpredict.core.errors import ArtifactError, InvalidInputError, UnknownPredictorError
from perfpredict.core.units import GIB
from perfpredict.learning.evaluation import metrics
from perfpredict.learning.training_data import GraphCache, load_training_set
from perfpredict.predictors import artifacts, registry
from perfpredict.settings import ENV_ARTIFACTS

pytest.importorskip("xgboost")
DATA = Path(__file__).resolve().parents[2] / "data" / "cpu-amd-epyc-2c"
FAMILIES = ["mlp", "vgg", "bert"]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    """The training steps of three families in the committed CPU dataset (real measurements, quiet host only): 27
    batch sweeps of batches 1-16, 115 rows, traced into a temporary graph cache (one trace per sweep)."""
    from perfpredict.profiling.dataset import load_dataset

    if not (DATA / "rows.jsonl").exists() and not (DATA / "rows.parquet").exists():
        pytest.skip("the committed CPU dataset is missing")
    picked = [r for r in load_dataset(DATA).rows if r.get("family") in FAMILIES and r.get("phase") == "training"]
    folder = tmp_path_factory.mktemp("rows")
    (folder / "rows.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in picked))
    return load_training_set([folder], cache=GraphCache(tmp_path_factory.mktemp("graphs")))


@pytest.fixture(scope="module")
def held_out(rows):
    """The middle batch of every sweep (4 of 1, 2, 4, 8, 16) is held out; the learner fits the others."""
    from perfpredict.profiling import zoo

    return np.array([zoo.ModelSpec.from_key(k).batch == 4 for k in rows.keys])


@pytest.fixture(scope="module")
def fitted(rows, held_out):
    from perfpredict.learning.xgboost_learner import XGBoostLearner

    learner = XGBoostLearner()
    learner.fit(rows.subset(np.flatnonzero(~held_out)), ["latency_ms", "peak_memory_bytes"])
    return learner


def test_xgboost_learns_the_measured_latency(rows, held_out, fitted):
    # On rows it never trained on (each sweep's batch 4, between the 2 and the 8 it saw: the research's row split;
    # benchmarks/accuracy.py scores new architectures on the whole dataset). The analytical roofline is 52.9% off
    # on these CPU training steps, the booster 14.5%; on the memory peak, 42.2% and 11.7%.
    held = rows.subset(np.flatnonzero(held_out))
    assert len(held.keys) == 24 and set(held.families) == set(FAMILIES)  # a row of every sweep that measured a 4
    pred = fitted.predict(held)
    for target in ("latency_ms", "peak_memory_bytes"):
        analytical = metrics(held.y[target], held.analytical(target))["mape"]
        fit = metrics(held.y[target], pred[target].value)["mape"]
        assert fit < 25 and fit < analytical / 2, (target, fit, analytical)


def test_interval_contains_the_point_and_ood_grows_far_from_data(rows, fitted):
    pred = fitted.predict(rows)["latency_ms"]
    assert np.all(pred.low <= pred.value) and np.all(pred.value <= pred.high)
    absurd = rows.subset(np.arange(1))
    absurd.X = absurd.X * 1000.0  # a graph a thousand times beyond anything measured
    with np.errstate(over="ignore", invalid="ignore"):
        far = fitted.predict(absurd)["latency_ms"].ood[0]
    assert far > 3 * max(1.0, float(np.median(pred.ood)))


def test_artifact_round_trip_and_schema_mismatch(rows, fitted, tmp_path):
    from perfpredict.learning.xgboost_learner import XGBoostLearner

    manifest = artifacts.Manifest("xgboost", "1", "cpu", XGBoostLearner.schema, rows.data_hash, fitted.targets)
    folder = artifacts.save_artifact(tmp_path / "xgboost-cpu", manifest, fitted.to_files())
    loaded_manifest, files = artifacts.load_files(folder, XGBoostLearner.schema)
    again = XGBoostLearner.from_files(loaded_manifest, files)
    np.testing.assert_allclose(again.predict(rows)["latency_ms"].value, fitted.predict(rows)["latency_ms"].value)
    with pytest.raises(ArtifactError, match="feature schema"):
        artifacts.load_files(folder, "0000000000000000")
    (folder / "latency_ms.ubj").write_bytes(b"tampered")
    with pytest.raises(ArtifactError, match="does not match its manifest hash"):
        artifacts.load_files(folder, XGBoostLearner.schema)


def test_a_gpu_artifact_trained_under_older_physics_is_refused_and_auto_skips_it(rows, fitted, tmp_path, monkeypatch):
    # GPU memory model 2 changed the H100 rows' physics features without changing the feature schema: an artifact
    # trained before it would feed its trees inputs they never saw, so it must not load, and auto must not pick it.
    from perfpredict.learning.xgboost_learner import XGBoostLearner
    from perfpredict.predictors.memory_model import GPU_MEMORY_MODEL_VERSION

    manifest = artifacts.Manifest(
        "xgboost",
        "1",
        "H100-SXM",
        XGBoostLearner.schema,
        rows.data_hash,
        fitted.targets,
        metrics={"random_5fold": {"latency_ms": {"mape": 12.0}}},
        extra={"dataset": "nvidia-h100-80gb-hbm3"},
    )
    folder = artifacts.save_artifact(tmp_path / "xgboost-h100-sxm", manifest, fitted.to_files())
    assert artifacts.read_manifest(folder).physics == {"gpu_memory_model": GPU_MEMORY_MODEL_VERSION}
    artifacts.load_files(folder, XGBoostLearner.schema)  # today's physics: loads
    cpu = artifacts.save_artifact(
        tmp_path / "xgboost-cpu",
        artifacts.Manifest("xgboost", "1", "cpu", XGBoostLearner.schema, rows.data_hash, fitted.targets),
        fitted.to_files(),
    )
    assert artifacts.read_manifest(cpu).physics == {}  # a CPU's features do not depend on the GPU memory model

    old = json.loads((folder / artifacts.MANIFEST).read_text())
    del old["physics"]  # written before perfpredict recorded the physics: GPU memory model 1
    (folder / artifacts.MANIFEST).write_text(json.dumps(old))
    with pytest.raises(
        ArtifactError,
        match=f"gpu_memory_model 1 \\(now {GPU_MEMORY_MODEL_VERSION}\\).*"
        "perfpredict train --device nvidia-h100-80gb-hbm3 --predictor xgboost",
    ):
        artifacts.load_files(folder, XGBoostLearner.schema)
    # The stale user artifact shadows no current one.
    monkeypatch.setattr(artifacts, "SHIPPED_DIR", tmp_path / "nothing-shipped")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "no-user-artifacts"))
    monkeypatch.setenv(ENV_ARTIFACTS, str(tmp_path))
    assert artifacts.best_predictor("H100-SXM") is None
    assert artifacts.best_predictor("H100-SXM", current_only=False) == "xgboost"  # found, but stale
    # A current artifact further down the search path is found past the stale one.
    fresh_root = tmp_path / "fresh"
    artifacts.save_artifact(fresh_root / "xgboost-h100-sxm", manifest, fitted.to_files())
    monkeypatch.setenv(ENV_ARTIFACTS, f"{tmp_path}:{fresh_root}")
    assert artifacts.find_artifact("xgboost", "H100-SXM") == fresh_root / "xgboost-h100-sxm"
    assert artifacts.best_predictor("H100-SXM") == "xgboost"


def test_search_keeps_the_scaled_physics_when_trees_only_add_noise(rows, tmp_path):
    # A target that is the analytical prediction times 1.3, with independent noise: no feature explains the noise,
    # so the trees can only fit it on the training rows, and the scaled physics (one constant) wins out of fold.
    import dataclasses

    from perfpredict.learning.xgboost_learner import XGBoostLearner

    noise = np.exp(np.random.default_rng(0).normal(0.0, 0.1, len(rows.X)))
    target = rows.analytical("latency_ms") * 1.3 * noise
    scaled = dataclasses.replace(rows, y={**rows.y, "latency_ms": target})
    learner = XGBoostLearner()
    learner.fit(scaled, ["latency_ms"])
    assert learner.model_.choice["latency_ms"]["params"] is None and learner.model_.choice["latency_ms"]["residual"]
    pred = learner.predict(scaled)["latency_ms"]
    ratio = pred.value / scaled.analytical("latency_ms")
    np.testing.assert_allclose(ratio, np.median(target / scaled.analytical("latency_ms")), rtol=1e-9)
    assert np.all(pred.low < pred.value) and np.all(pred.value < pred.high)
    manifest = artifacts.Manifest("xgboost", "1", "cpu", XGBoostLearner.schema, rows.data_hash, learner.targets)
    folder = artifacts.save_artifact(tmp_path / "xgboost-cpu", manifest, learner.to_files())
    again = XGBoostLearner.from_files(*artifacts.load_files(folder, XGBoostLearner.schema))
    np.testing.assert_allclose(again.predict(scaled)["latency_ms"].value, pred.value)


def test_auto_is_two_timeline_everywhere_and_a_trained_model_answers_by_name(rows, fitted, tmp_path, monkeypatch):
    from perfpredict.learning.xgboost_learner import XGBoostLearner

    manifest = artifacts.Manifest(
        "xgboost",
        "1",
        "cpu",
        XGBoostLearner.schema,
        rows.data_hash,
        fitted.targets,
        metrics={"random_5fold": {"latency_ms": {"mape": 12.0}}},
    )
    artifacts.save_artifact(tmp_path / "xgboost-cpu", manifest, fitted.to_files())
    monkeypatch.setenv(ENV_ARTIFACTS, str(tmp_path))
    monkeypatch.setattr(registry, "_INSTANCES", {})  # predictors cache loaded artifacts: an earlier test's stay
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)).eval()
    x = torch.randn(8, 256)
    # A trained whole-model predictor no longer takes over "auto": every device answers with the same model.
    for device in ("cpu", "A100-40GB"):
        report = perfpredict.predict(model, (x,), device=device)
        assert report.predictor == "two_timeline" and report.timeline is not None
        assert any("two_timeline" in n and "on every device" in n for n in report.notes)
    on_cpu = perfpredict.predict(model, (x,), device="cpu", predictor="xgboost")
    assert on_cpu.predictor == "xgboost" and on_cpu.latency_ms.ood is not None
    assert on_cpu.latency_ms.low <= on_cpu.latency_ms.value <= on_cpu.latency_ms.high
    json.loads(on_cpu.to_json())  # the OOD score and intervals serialise
    # Without the learned predictors' packages a named one cannot run: the error says how to fix it.
    monkeypatch.setattr(registry, "can_run", lambda name: False)
    monkeypatch.setattr(registry, "_FACTORIES", {k: v for k, v in registry._FACTORIES.items() if k != "xgboost"})
    with pytest.raises(UnknownPredictorError, match=r"pip install 'perfpredict\[gnn\]'"):
        registry.get_predictor("xgboost")


def test_rows_from_a_busy_host_are_left_out_unless_asked_for(tmp_path):
    from perfpredict.profiling.dataset import load_dataset, quiet_host

    committed = [r for r in load_dataset(DATA).rows if r.get("status") == "ok" and r.get("family") == "mlp"]
    quiet = next(r for r in committed if quiet_host(r))
    busy = {**quiet, "key": committed[1]["key"], "env_load_avg_1m_before": 5.9}  # 3 jobs per core
    unknown = {**quiet, "key": committed[2]["key"], "env_load_avg_1m_before": None}  # a CPU row: not known quiet
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (quiet, busy, unknown)))
    cache = GraphCache(tmp_path / "graphs")
    kept = load_training_set([folder], cache=cache)
    assert kept.keys == [quiet["key"]]
    assert any("2 rows measured on a busy host" in p for p in kept.problems)
    assert len(load_training_set([folder], cache=cache, include_busy_host=True).keys) == 3
    (folder / "rows.jsonl").write_text(json.dumps(busy) + "\n")
    with pytest.raises(InvalidInputError, match="--include-busy-host"):  # says why nothing is left, and the way out
        load_training_set([folder], cache=cache)


def test_a_failed_trace_is_remembered_not_retried(tmp_path, monkeypatch):
    # Every row of a batch sweep shares one anchor trace: an untraceable architecture (DeBERTa's relative positions
    # call nonzero, which the meta device cannot run) must fail once per load, not once per row.
    from perfpredict.learning import training_data
    from perfpredict.profiling import zoo

    calls = []

    def broken(spec):
        calls.append(spec.to_key())
        raise NotImplementedError("nonzero on meta")

    monkeypatch.setattr(training_data, "_trace", broken)
    cache = GraphCache(tmp_path / "graphs")
    spec = zoo.ModelSpec("mlp", {"in_dim": 8, "width": 16, "layers": 1, "activation": "relu", "layernorm": False})
    for _ in range(3):
        with pytest.raises(NotImplementedError, match="nonzero on meta"):
            cache.graph(spec)
    assert len(calls) == 1
    with pytest.raises(NotImplementedError):  # remembered in memory only: a new cache (a later torch) tries again
        GraphCache(tmp_path / "graphs").graph(spec)
    assert len(calls) == 2


def test_gpu_memory_is_learned_as_tensors_and_reported_with_the_runtime_overhead(rows, fitted, tmp_path, monkeypatch):
    # The collector measures torch's allocator peak, which holds no CUDA context: the physics feature leaves the
    # device's runtime overhead out, and the report adds it back to the learned figure.
    import dataclasses

    from perfpredict.hardware.devices import get_device
    from perfpredict.learning.xgboost_learner import XGBoostLearner
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.feature_rows import single_row_set
    from perfpredict.predictors.features import TABULAR_FEATURES, tabular_matrix

    h100 = get_device("H100-SXM")
    bigger = dataclasses.replace(h100, runtime_overhead_bytes=h100.runtime_overhead_bytes + GIB)
    col = TABULAR_FEATURES.index("log_analytical_memory")
    arrays, config, batch = rows.arrays[0], RunConfig(), np.array([4])
    assert tabular_matrix(arrays, h100, config, batch)[0, col] == tabular_matrix(arrays, bigger, config, batch)[0, col]

    manifest = artifacts.Manifest("xgboost", "1", "H100-SXM", XGBoostLearner.schema, rows.data_hash, fitted.targets)
    artifacts.save_artifact(tmp_path / "xgboost-h100-sxm", manifest, fitted.to_files())
    monkeypatch.setenv(ENV_ARTIFACTS, str(tmp_path))
    monkeypatch.setattr(registry, "_INSTANCES", {})  # predictors cache loaded artifacts: an earlier test's stay
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)).eval()
    report = perfpredict.predict(model, (torch.randn(8, 256),), device="H100-SXM", predictor="xgboost")
    graph = perfpredict.featurize(model, (torch.randn(8, 256),))
    tensors = fitted.predict(single_row_set(graph, h100, RunConfig()))["peak_memory_bytes"]
    assert report.peak_memory_bytes.value == pytest.approx(float(tensors.value[0]) + h100.runtime_overhead_bytes)
    assert report.peak_memory_bytes.low <= report.peak_memory_bytes.value <= report.peak_memory_bytes.high


def test_learned_memory_of_a_model_loaded_in_its_run_dtype_drops_the_float32_load(rows, fitted, tmp_path, monkeypatch):
    # Every measured row built its model in float32 and then cast it, so the trees always see that protocol; a
    # model loaded straight in bfloat16 swaps the load's analytical transient out of the learned peak.
    from perfpredict.hardware.devices import get_device
    from perfpredict.learning.xgboost_learner import XGBoostLearner
    from perfpredict.predictors.base import RunConfig
    from perfpredict.predictors.feature_rows import single_row_set

    h100 = get_device("H100-SXM")
    manifest = artifacts.Manifest("xgboost", "1", "H100-SXM", XGBoostLearner.schema, rows.data_hash, fitted.targets)
    artifacts.save_artifact(tmp_path / "xgboost-h100-sxm", manifest, fitted.to_files())
    monkeypatch.setenv(ENV_ARTIFACTS, str(tmp_path))
    monkeypatch.setattr(registry, "_INSTANCES", {})
    model = torch.nn.Sequential(torch.nn.Linear(2048, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 10)).eval()
    x = (torch.randn(2, 2048),)
    built = perfpredict.predict(model, x, device="H100-SXM", dtype="bfloat16", predictor="xgboost")
    loaded = perfpredict.predict(
        model, x, device="H100-SXM", dtype="bfloat16", predictor="xgboost", weights_built_in=None
    )
    graph = perfpredict.featurize(model, x, dtype="bfloat16")
    tensors = fitted.predict(single_row_set(graph, h100, RunConfig()))["peak_memory_bytes"]
    assert built.memory.load_transient_bytes > 0 and loaded.memory.load_transient_bytes == 0
    assert built.peak_memory_bytes.value == pytest.approx(float(tensors.value[0]) + h100.runtime_overhead_bytes)
    expected = max(
        built.peak_memory_bytes.value - built.memory.load_transient_bytes,
        graph.param_bytes + h100.runtime_overhead_bytes,
    )
    assert loaded.peak_memory_bytes.value == pytest.approx(expected)
    assert loaded.latency_ms.value == pytest.approx(built.latency_ms.value)  # only the load differs


def test_rows_measured_under_another_transformers_are_named_in_the_problems():
    from importlib import metadata

    from perfpredict.learning.training_data import _library_mismatches

    local = metadata.version("transformers")
    rows = [{"env_transformers_version": "5.17.0"}] * 3 + [{"env_transformers_version": local}, {}]
    problems = _library_mismatches(rows)
    assert len(problems) == 1 and problems[0].startswith("3 rows were measured with transformers 5.17.0")
    assert local in problems[0]
    assert _library_mismatches(rows[3:]) == []  # the same release, or not recorded: nothing to say


def test_two_timeline_learner_recovers_the_scales_its_labels_were_made_with(rows):
    import dataclasses

    from perfpredict.learning.two_timeline_fit import DEVICE_GRID, SCALE_GRID, TwoTimelineLearner

    learner = TwoTimelineLearner()
    host, dev = 9, 12  # labels simulated at SCALE_GRID[9] and DEVICE_GRID[12], with 5% noise: fit finds them again
    walls = learner.simulate(rows)["wall_s"][host, dev]
    noise = np.exp(np.random.default_rng(0).normal(0.0, 0.05, len(walls)))
    made = dataclasses.replace(rows, y={**rows.y, "latency_ms": walls * 1e3 * noise})
    assert learner.fit(made) is learner
    assert abs(learner.scale_index - host) <= 2 and abs(learner.device_index - dev) <= 2
    assert learner.scale == pytest.approx(SCALE_GRID[host], rel=0.3)
    assert learner.device_scale == pytest.approx(DEVICE_GRID[dev], rel=0.3)
    pred = learner.predict(made)
    assert metrics(made.y["latency_ms"], pred["latency_ms"].value)["mape"] < 10
    assert set(pred) == {"latency_ms", "peak_memory_bytes", "avg_power_w", "energy_per_sample_j"}
    # on the real CPU labels, the fitted scales beat the unscaled host and device
    learner.fit(rows)
    fitted = metrics(rows.y["latency_ms"], learner.predict(rows)["latency_ms"].value)["mape"]
    one = learner.simulate(rows)["wall_s"][np.argmin(abs(SCALE_GRID - 1)), np.argmin(abs(DEVICE_GRID - 1))]
    assert fitted < metrics(rows.y["latency_ms"], one * 1e3)["mape"]
