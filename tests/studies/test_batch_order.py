"""studies/batch_order.py: which batch-1/batch-8 pairs it measures again, and how it reads the outcome."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "studies" / "batch_order.py"
_spec = importlib.util.spec_from_file_location("batch_order", _PATH)
batch_order = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(batch_order)


def _pair(arch: str, ms1: float, ms8: float) -> list[dict]:
    return [
        {
            "status": "ok",
            "arch_key": arch,
            "phase": "inference",
            "seq_len": 128,
            "dtype": "float32",
            "family": "bert",
            "batch_size": b,
            "latency_ms": ms,
            "key": f"{arch}-{b}",
        }
        for b, ms in ((1, ms1), (8, ms8))
    ]


def test_pick_pairs_takes_the_most_inverted_then_typical_controls():
    rows = (
        _pair("a", 1.5, 1.0)
        + _pair("b", 1.2, 1.0)
        + _pair("c", 0.5, 1.0)
        + _pair("d", 0.6, 1.0)
        + _pair("e", 0.2, 1.0)
        + [{**_pair("f", 3.0, 1.0)[0]}]
    )  # f has no batch-8 row
    picked = batch_order.pick_pairs(rows, pairs=1, controls=2)
    assert [p["keys"][1] for p in picked] == ["a-1", "c-1", "d-1"]  # controls nearest the median (0.5) of c, d, e
    assert [p["inverted"] for p in picked] == [True, False, False]
    assert picked[0]["dataset_ratio"] == pytest.approx(1.5)


@pytest.mark.parametrize(
    "first, second, kernels, device_ms, expected",
    [
        ({1: 1.0, 8: 1.0}, {1: 1.0, 8: 1.0}, {1: 10, 8: 10}, {1: 1.0, 8: 1.0}, "none"),
        ({1: 1.5, 8: 1.0}, {1: 1.0, 8: 1.0}, {1: 10, 8: 10}, {1: 1.0, 8: 1.0}, "order"),
        ({1: 1.5, 8: 1.0}, {1: 1.5, 8: 1.0}, {1: 14, 8: 10}, {1: 0.5, 8: 1.0}, "kernels"),
        ({1: 1.5, 8: 1.0}, {1: 1.5, 8: 1.0}, {1: 10, 8: 10}, {1: 1.2, 8: 1.0}, "kernels"),
        ({1: 1.5, 8: 1.0}, {1: 1.5, 8: 1.0}, {1: 10, 8: 10}, {1: 0.5, 8: 1.0}, "host"),
        ({1: 1.0, 8: 1.0}, {1: 1.5, 8: 1.0}, {1: 10, 8: 10}, {1: 1.0, 8: 1.0}, "mixed"),
    ],
)
def test_verdict(first, second, kernels, device_ms, expected):
    assert batch_order.verdict(first, second, kernels, device_ms) == expected


def test_profile_step_counts_the_ops_of_one_cpu_step():
    import torch

    w = torch.randn(8, 8)
    x = torch.randn(4, 8)
    count, ms = batch_order.profile_step(lambda: torch.relu(x @ w).sum(), "cpu")
    assert count >= 3  # mm, relu, sum (and whatever they dispatch to)
    assert ms >= 0
