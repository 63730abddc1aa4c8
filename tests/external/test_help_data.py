"""HELP's FBNet set: the converter round-trips HELP's files, and the committed tables hold what HELP published."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from perfpredict.core.errors import InvalidInputError
from perfpredict.external import help as help_data

pytest.importorskip("pyarrow")


def _fake_help(root, archs, dataset="cifar100"):
    """A folder laid out as HELP's repository, with made-up latencies (for the converter only)."""
    src = root / "data" / "fbnet"
    (src / "latency").mkdir(parents=True)
    torch.save(archs, src / "arch.pt")
    torch.save(
        {"dataset": dataset, "num_classes": 100, "arch": [{"op_idx_list": a} for a in archs]}, src / "metainfo.pt"
    )
    for k, prefix in enumerate(help_data.GPUS):
        for batch in help_data.BATCHES:
            torch.save(
                [float(k * 100 + batch + i) for i in range(len(archs))], src / "latency" / f"{prefix}_{batch}.pt"
            )
    return root


def test_the_converter_round_trips(tmp_path):
    archs = [[i % 9] * 22 for i in range(4)]
    archs_n, rows = help_data.convert(_fake_help(tmp_path / "help", archs), tmp_path / "out")
    assert (archs_n, rows) == (4, 4 * 15)
    data = help_data.load_fbnet(tmp_path / "out")
    assert data.choices.tolist() == archs and len(data.settings) == 15
    assert data.latency_ms[("TITAN-RTX", 32)].tolist() == [232.0, 233.0, 234.0, 235.0]  # titan_rtx is HELP's third
    assert data.settings[0] == ("GTX-1080-Ti", 1) and data.settings[-1] == ("TITAN-Xp", 64)


def test_the_converter_refuses_a_mismatch(tmp_path):
    root = _fake_help(tmp_path / "help", [[0] * 22, [1] * 22])
    torch.save([[2] * 22, [1] * 22], root / "data" / "fbnet" / "arch.pt")
    with pytest.raises(InvalidInputError, match="different architectures"):
        help_data.convert(root, tmp_path / "out")
    with pytest.raises(InvalidInputError, match="convert HELP"):
        help_data.load_fbnet(tmp_path / "nowhere")


def test_the_committed_set_is_helps():
    data = help_data.load_fbnet()
    assert data.choices.shape == (5000, 22) and data.choices.min() == 0 and data.choices.max() == 8
    assert data.choices[0].tolist() == [7, 8, 1, 8, 4, 8, 8, 8, 7, 4, 1, 4, 7, 3, 2, 7, 3, 2, 4, 2, 4, 5]
    assert len(data.latency_ms) == 15 and all(v.shape == (5000,) and (v > 0).all() for v in data.latency_ms.values())
    # HELP's titan_rtx_32.pt and 1080ti_1.pt start with these values
    assert data.latency_ms[("TITAN-RTX", 32)][0] == pytest.approx(8.559367674477398, rel=1e-12)
    assert data.latency_ms[("GTX-1080-Ti", 1)][0] == pytest.approx(10.615349732488394, rel=1e-12)
    # a larger batch is slower on the median candidate of every GPU
    for device, _ in help_data.GPUS.values():
        medians = [np.median(data.latency_ms[(device, b)]) for b in help_data.BATCHES]
        assert medians == sorted(medians)
