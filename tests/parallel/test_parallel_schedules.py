"""Pipeline schedules by hand: each schedule's step time and bubble, the microbatches each stage holds, and the
sends per microbatch (perfpredict.parallel.schedules)."""

from __future__ import annotations

import pytest

from perfpredict.parallel import schedules as sch

# p = 4 equal stages, m = 8 microbatches; per microbatch f = 1, b = 2 (of which the weight gradients w = 1): t = 3
STAGES = [sch.StageTime(1.0, 2.0, 1.0)] * 4
M = 8


def test_gpipe_and_1f1b_take_m_plus_p_minus_1_passes():
    # GPipe: sum f + (m-1) max f + sum b + (m-1) max b = 4 + 7 + 8 + 14 = 33 = (m + p - 1) t = 11 x 3
    assert sch.step_s(sch.GPIPE, STAGES, M) == pytest.approx(33.0)
    # 1F1B: sum t + (m-1) max t = 12 + 21 = 33, the same time at less memory
    assert sch.step_s(sch.ONE_F_ONE_B, STAGES, M) == pytest.approx(33.0)
    assert sch.bubble_s(sch.ONE_F_ONE_B, STAGES) == pytest.approx(9.0)  # (p-1) t
    assert sch.bubble_over_compute(sch.ONE_F_ONE_B, 4, M) == pytest.approx(3 / 8)  # (p-1)/m
    assert sch.bubble_over_compute(sch.GPIPE, 4, M) == pytest.approx(3 / 8)
    assert sch.idle_share(3 / 8) == pytest.approx(3 / 11)  # (p-1)/(m+p-1)


def test_interleaving_divides_the_bubble_by_the_virtual_stages():
    # m t + (p-1) t / v = 24 + 9/2 = 28.5; bubble over the compute (p-1)/(v m) = 3/16
    assert sch.step_s(sch.INTERLEAVED, STAGES, M, virtual=2) == pytest.approx(28.5)
    assert sch.bubble_over_compute(sch.INTERLEAVED, 4, M, virtual=2) == pytest.approx(3 / 16)
    assert sch.sends_per_microbatch(sch.INTERLEAVED, 2) == 2 and sch.sends_per_microbatch(sch.ONE_F_ONE_B) == 1


def test_zero_bubble_leaves_f_plus_b_minus_w_of_the_bubble():
    # ZB-H1: (p-1)(F + B - W) of 1F1B's (p-1)(F + B + W); here B = 2 - 1 = 1 (input gradients), W = 1:
    # (1 + 1 - 1) / (1 + 1 + 1) = 1/3, so the bubble is 9 / 3 = 3 and the step 24 + 3 = 27
    assert sch.zero_bubble_share(STAGES[0]) == pytest.approx(1 / 3)
    assert sch.step_s(sch.ZB1P, STAGES, M) == pytest.approx(27.0)
    assert sch.bubble_over_compute(sch.ZB1P, 4, M, zb_share=1 / 3) == pytest.approx(1 / 8)
    # no weight gradients to defer: no gain
    assert sch.zero_bubble_share(sch.StageTime(1.0, 2.0, 0.0)) == pytest.approx(1.0)


def test_the_first_stage_holds_the_most():
    assert [sch.in_flight(sch.GPIPE, s, 4, M) for s in range(4)] == [8, 8, 8, 8]  # every microbatch
    assert [sch.in_flight(sch.ONE_F_ONE_B, s, 4, M) for s in range(4)] == [4, 3, 2, 1]  # min(p - s, m)
    assert [sch.in_flight(sch.ZB1P, s, 4, M) for s in range(4)] == [4, 3, 2, 1]  # 1F1B's memory
    # interleaved, v = 2: Megatron's warm-up (p - s - 1) x 2 + (v - 1) x p + 1 chunks of half a stage:
    # stage 0: 6 + 4 + 1 = 11 chunks = 5.5 stages' worth; stage 3: 0 + 4 + 1 = 5 = 2.5
    assert [sch.in_flight(sch.INTERLEAVED, s, 4, M, 2) for s in range(4)] == [5.5, 4.5, 3.5, 2.5]


def test_unequal_stages_are_paced_by_the_slowest():
    stages = [sch.StageTime(1.0, 1.0), sch.StageTime(2.0, 4.0)]
    # 1F1B: (2 + 6) + (5 - 1) x 6 = 32; GPipe: (1 + 2) + 4 x 2 + (1 + 4) + 4 x 4 = 32
    assert sch.step_s(sch.ONE_F_ONE_B, stages, 5) == pytest.approx(32.0)
    assert sch.step_s(sch.GPIPE, stages, 5) == pytest.approx(32.0)
