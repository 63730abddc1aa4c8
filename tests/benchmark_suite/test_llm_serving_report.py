"""``benchmarks/llm_serving.py``'s verdict line: the issue's targets, MAPE <= 10% and median <= 7% on the test half."""

from __future__ import annotations

from benchmarks.llm_serving_report import _verdict


def _rows(*errors_pct):
    return [{"error_pct": e} for e in errors_pct]


def test_the_verdict_holds_the_test_half_to_mape_10_and_median_7():
    # |errors| 3, 7.1, 18.7: MAPE (3 + 7.1 + 18.7) / 3 = 9.6%, median 7.1%: the MAPE target met, the median's not
    line = _verdict(_rows(3.0, -7.1, 18.7))
    assert "MAPE 9.6% (target <= 10%: met)" in line and "median error 7.1% (target <= 7%: NOT met)" in line
    # 12, 6, 6: MAPE 8.0%, median 6.0%: both met; a row refused (None) is counted as not answered
    line = _verdict(_rows(12.0, 6.0, -6.0, None))
    assert "(target <= 10%: met)" in line and "(target <= 7%: met)" in line and "1 rows NOT answered" in line
