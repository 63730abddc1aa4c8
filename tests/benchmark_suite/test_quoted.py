"""The figures README.md and docs/accuracy.md quote (``benchmarks/quoted.py``): each is on its page, the page names
the result it comes from, and the result still gives it. A rerun that moves a quoted figure fails here until the
page says the new one."""

from __future__ import annotations

import re

import pytest

from benchmarks import provenance, quoted


@pytest.mark.parametrize("quote", quoted.QUOTES, ids=lambda q: f"{q.page}:{q.figure[:40]}")
def test_a_quoted_figure_is_on_its_page_and_in_the_result_the_page_names(quote):
    page = " ".join((provenance.ROOT / quote.page).read_text().split())  # a figure may wrap across lines
    assert quote.figure in page, f"{quote.page} no longer says {quote.figure!r}: update benchmarks/quoted.py"
    assert quote.result in page, f"{quote.page} quotes {quote.result} without naming it"
    result = (provenance.ROOT / quote.result).read_text()
    assert quote.source in result, f"{quote.result} no longer gives {quote.source!r}: update {quote.page}"


def test_every_result_a_page_names_is_a_quoted_one_or_further_reading():
    """Each result file README.md or docs/accuracy.md names is in the table, so `stale` checks it, unless the page
    names it as further reading only, without a figure (listed here)."""
    further_reading = {"benchmarks/results/host_profiles-h100.md", "benchmarks/results/vllm_posts.md"}
    for page in (quoted.README, quoted.ACCURACY):
        named = set(re.findall(r"benchmarks/results/[\w.-]+\.md", (provenance.ROOT / page).read_text()))
        assert named - further_reading <= set(quoted.quoted_results()), f"{page} names results quoted.py lacks"
