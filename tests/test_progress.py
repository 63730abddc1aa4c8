"""The one progress display: counts right, shows rows per minute and an ETA on a terminal, silent otherwise."""

from __future__ import annotations

import io

import pytest

from perfpredict import progress as progress_mod
from perfpredict.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch):
    """A clock that moves only when told (``clock[0]`` seconds)."""
    now = [1000.0]
    monkeypatch.setattr(progress_mod.time, "monotonic", lambda: now[0])
    return now


def test_it_counts_work_and_skips_apart_and_computes_the_rate_and_eta(clock):
    with Progress("collect", total=10, stream=io.StringIO()) as bar:
        bar.advance(counted=False)  # a row already measured: the bar moves, the rate does not
        clock[0] += 60.0
        bar.advance()
        bar.advance()
        assert (bar.count, bar.counted) == (3, 2)
        assert bar.rows_per_minute == pytest.approx(2.0)  # 2 rows in 60 s
        assert bar.eta_s() == pytest.approx(7 * 30.0)  # 7 left at 30 s each


def test_the_eta_is_capped_by_the_budget_and_unknown_before_the_first_row(clock):
    bar = Progress("collect", total=100, budget_s=120.0, stream=io.StringIO())
    with bar:
        assert bar.eta_s() == pytest.approx(120.0)  # only the budget is known
        clock[0] += 60.0
        bar.advance()
        assert bar.eta_s() == pytest.approx(60.0)  # 99 rows at 60 s each would take longer than the 60 s left
    assert Progress("x", total=5, stream=io.StringIO()).eta_s() is None


def test_it_is_silent_when_the_output_is_not_a_terminal():
    out = io.StringIO()
    with Progress("collect", total=3, stream=out) as bar:
        for _ in range(3):
            bar.advance()
    assert out.getvalue() == "" and not bar.shown and bar.count == 3


def test_it_is_silent_on_a_terminal_when_turned_off(clock):
    # what --json and --no-progress pass: only the answer reaches the output
    out = Terminal()
    with Progress("collect", total=3, enabled=False, stream=out) as bar:
        bar.advance()
    assert out.getvalue() == "" and not bar.shown and bar.counted == 1


def test_on_a_terminal_it_shows_the_count_the_rate_and_the_eta(clock):
    out = Terminal()
    with Progress("collect", total=4, stream=out) as bar:
        clock[0] += 30.0
        bar.advance(note="ok")
        bar.advance(note="oom")
    text = out.getvalue()
    assert bar.shown and "collect" in text and "2/4" in text
    assert "4.0 rows/min" in text  # 2 rows in 30 s
    assert "ETA 0:00:30" in text  # 2 left at 15 s each


def test_track_yields_every_item_once_and_counts_it():
    out = io.StringIO()
    seen = [x for x in Progress("features", total=3, stream=out).track("abc")]
    assert seen == ["a", "b", "c"] and out.getvalue() == ""


def test_track_counts_an_item_that_the_loop_skips_with_continue():
    bar = Progress("features", total=4, stream=io.StringIO())
    kept = []
    for x in bar.track(range(4)):
        if x % 2:
            continue
        kept.append(x)
    assert kept == [0, 2] and bar.count == 4


def test_a_learners_epoch_bars_show_only_where_a_command_asked_for_them():
    from perfpredict.progress import in_fits, shown_in_fits

    def epoch_bar() -> Progress:  # what a learner's fit builds
        return Progress("training", 3, unit="epochs", enabled=in_fits(), stream=Terminal())

    assert not epoch_bar().shown  # a library user fitting in a terminal: quiet
    with shown_in_fits():  # `perfpredict train` / `adapt`
        assert epoch_bar().shown
        with shown_in_fits(False):  # and a nested quiet block wins
            assert not epoch_bar().shown
    assert not epoch_bar().shown
