"""The two-stream model: what a collective costs depends on when it may start and who waits for it."""

from __future__ import annotations

import pytest

from perfpredict.parallel.overlap import Comm, simulate


def test_a_reduction_released_early_hides_behind_the_rest_of_the_backward():
    assert simulate([1.0, 1.0, 1.0], [Comm(0.5, ready_after=0), Comm(0.5, ready_after=1)]).exposed_s == 0.0


def test_the_last_bucket_cannot_hide():
    result = simulate([1.0, 1.0], [Comm(0.3, ready_after=0), Comm(0.5, ready_after=1)])
    assert result.exposed_s == pytest.approx(0.5)
    assert (result.compute_s, result.comm_s) == (2.0, pytest.approx(0.8))


def test_collectives_queue_on_one_stream():
    # three 0.8 s reductions released at 1 s: the stream is busy until 3.4 s, 0.4 s after the compute ends
    comms = [Comm(0.8, ready_after=0)] * 3
    assert simulate([1.0, 1.0, 1.0], comms).exposed_s == pytest.approx(0.4)


def test_prefetching_hides_all_but_the_first_gather():
    # FSDP: layer k's gather is issued when layer k-1 starts and layer k waits for it
    gathers = [Comm(0.5, ready_after=k - 2, needed_by=k) for k in range(4)]
    assert simulate([1.0] * 4, gathers).exposed_s == pytest.approx(0.5)
    slow = [Comm(1.5, ready_after=k - 2, needed_by=k) for k in range(4)]
    # 1.5 s gathers behind 1 s layers: the first is exposed whole, each later one by 0.5 s
    assert simulate([1.0] * 4, slow).exposed_s == pytest.approx(1.5 + 3 * 0.5)
