"""The collectors' shared engine: the budget (paused time left out) and the device label."""

from __future__ import annotations

from perfpredict.profiling import collect_engine as engine


def test_the_budget_stops_after_its_minutes_and_never_without_one(tmp_path, monkeypatch):
    now = [100.0]
    monkeypatch.setattr(engine.time, "monotonic", lambda: now[0])
    budget = engine.Budget(tmp_path, budget_minutes=1.0)
    unlimited = engine.Budget(tmp_path, budget_minutes=None)
    now[0] += 59.0
    assert not budget.exhausted()
    now[0] += 1.0  # 60 s of collecting
    assert budget.exhausted() and budget.elapsed_s() == 60.0
    now[0] += 1e6
    assert not unlimited.exhausted()


def test_paused_time_does_not_count_against_the_budget(tmp_path, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(engine.time, "monotonic", lambda: now[0])
    (tmp_path / engine.PAUSE_FILE).touch()

    def sleep(seconds: float) -> None:  # whoever paused the run resumes it after 500 s
        assert (tmp_path / "PAUSED").exists()  # no row is in flight while it waits
        now[0] += 500.0
        (tmp_path / engine.PAUSE_FILE).unlink()

    monkeypatch.setattr(engine.time, "sleep", sleep)
    budget = engine.Budget(tmp_path, budget_minutes=1.0)
    now[0] += 30.0
    assert not budget.exhausted()  # 530 s since the start, 500 of them paused
    assert budget.paused_s == 500.0 and not (tmp_path / "PAUSED").exists()
    now[0] += 30.0
    assert budget.exhausted()


def test_the_label_is_the_given_one_else_the_device_slug(tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "device_slug", lambda device: f"slug-of-{device}")
    assert engine.CollectConfig(out=tmp_path).label() == "slug-of-cpu"
    assert engine.CollectConfig(out=tmp_path, device_label="my-box").label() == "my-box"
    cfg = engine.CollectConfig(out=tmp_path, budget_minutes=2.0)
    assert cfg.budget().budget_s == 120.0 and cfg.budget().folder == tmp_path
