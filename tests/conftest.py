"""Shared fixtures. Tests run on a CPU-only machine; GPU tests are marked and skipped there."""

from __future__ import annotations

import os

import pytest

# OpenMP threads (torch's intra-op pool, xgboost's) that wait at a barrier sleep instead of spinning: on a shared,
# busy 2-core machine a spinning thread burns the time its descheduled partner needs (an xgboost fit of 90 rows
# took 82 s of CPU spinning under load, 6 s passive). Set before any test module imports torch or xgboost.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from scratch, so one test's cached graphs never satisfy another's."""
    import torch

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(autouse=True)
def _datasheet_catalog(monkeypatch, tmp_path_factory):
    """Tests reason from datasheet numbers, so the measured ceilings shipped in ``perfpredict/data/measured/``
    (which change whenever a GPU is re-measured) are kept out; ``shipped_ceilings`` lets a test see them."""
    from perfpredict.hardware import devices

    monkeypatch.setattr(devices, "MEASURED_DIR", tmp_path_factory.mktemp("no_measured"))
    devices.reset_catalog()
    yield
    devices.reset_catalog()


@pytest.fixture(autouse=True)
def _no_user_calibration(monkeypatch, tmp_path_factory):
    """No test sees this machine's calibration (``perfpredict calibrate-host`` writes it to the user's config
    folder): predictions use the shipped reference profile and the detected CPU unless a test calibrates."""
    from perfpredict.hardware import devices

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.delenv("PERFPREDICT_HOST_PROFILE", raising=False)
    devices.reset_catalog()
    yield
    devices.reset_catalog()


@pytest.fixture
def shipped_ceilings(monkeypatch):
    """The catalog as users get it: with the measured ceilings shipped in the package."""
    from perfpredict.hardware import devices

    monkeypatch.setattr(devices, "MEASURED_DIR", devices.DATA_DIR / "measured")
    devices.reset_catalog()
    yield
    devices.reset_catalog()


@pytest.fixture(autouse=True)
def _no_cli_graph_cache(monkeypatch):
    """Every CLI test captures its model: the user's on-disk graph cache (perfpredict.caching.graph_store) is off unless a
    test turns it on for itself."""
    monkeypatch.setenv("PERFPREDICT_NO_GRAPH_CACHE", "1")


def pytest_collection_finish(session):
    """Collection imported torch, transformers and every test module: hundreds of thousands of objects that live
    until the end. Moved out of the garbage collector's sight, so that each ``gc.collect()`` (the collector calls
    one per row) walks only what the tests allocate since: 1.4 s a call becomes milliseconds."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True, scope="module")
def _freeze_what_lives_on():
    """The same at each test module's start, for what the modules before it imported lazily (a transformers model
    class, torch's compiler stack). The garbage they left is collected first, so freezing keeps only live objects."""
    import gc

    gc.collect()
    gc.freeze()
