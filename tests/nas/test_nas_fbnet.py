"""The FBNet space: the layer plan, each choice's block, the variants, and refusals."""

from __future__ import annotations

import pytest
import torch

import perfpredict
from perfpredict.core.errors import InvalidInputError
from perfpredict.nas import fbnet


def test_the_layer_plan_follows_the_stages():
    plan = fbnet.layer_plan()
    assert len(plan) == 22
    assert plan[0] == (16, 16, 1) and plan[1] == (16, 24, 1) and plan[5] == (24, 32, 2) and plan[21] == (184, 352, 1)
    assert [s for _, _, s in fbnet.layer_plan("imagenet")].count(2) == 4  # stages 2, 3, 4 and 6 halve the side


def test_each_choice_builds_its_block():
    net = fbnet.build(["k5_e6", "k3_e1_g2", *["skip"] * 20])
    first, second = net[1], net[2]
    assert first.depthwise.kernel_size == (5, 5) and first.expand.out_channels == 16 * 6 and first.residual
    assert second.groups == 2 and second.expand.groups == 2 and not second.residual  # 16 -> 24 channels
    assert net[3].reshape is None and net[6].reshape is not None  # skip: identity, then a strided 1x1 conv
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 100)


def test_an_all_skip_candidate_is_the_stem_the_stage_changes_and_the_head():
    graph = perfpredict.featurize(fbnet.build([8] * 22), (fbnet.example_input(1),))
    convs = [n for n in graph.nodes if n.op == "conv"]
    # stem + the six skips that change the shape (layers 1, 5, 9, 13, 17, 21) + the header
    assert len(convs) == 8
    assert convs[0].flops == 2 * 3 * 9 * 16 * 32 * 32  # 884,736: 3x3 over 3 channels to 16, on 32x32


def test_the_imagenet_variant_ends_at_7x7():
    net = fbnet.build([0] * 22, dataset="imagenet", device="meta")
    graph = perfpredict.featurize(net, (fbnet.example_input(1, "imagenet"),))
    header = [n for n in graph.nodes if n.op == "conv"][-1]
    assert header.outputs[0].shape == (1, 1984, 7, 7) and graph.nodes[-1].outputs[0].shape == (1, 1000)


@pytest.mark.parametrize("choices", [[0] * 21, [0] * 21 + [9], [0] * 21 + ["k7_e6"], [0] * 21 + [True]])
def test_bad_candidates_are_refused(choices):
    with pytest.raises(InvalidInputError):
        fbnet.build(choices)
    with pytest.raises(InvalidInputError, match="dataset"):
        fbnet.build([0] * 22, dataset="mnist")


def test_a_batch_1_candidate_is_host_bound_on_helps_gpus_as_measured():
    # HELP's five GPUs run a batch of 32 in at most 1.3x a batch of 1's time (median over its 5,000 candidates):
    # at batch 1 the GPU idles behind the host. The learned device time agrees: a small convolution or norm is not
    # charged NeuSight's per-call host time (50-130 us, learning/gpu_training_rows.py) as kernel time, which had
    # made the GTX TITAN X device-bound at batch 1 and its zero-shot ranking 0.76 (benchmarks/nas_help_fbnet.py)
    import numpy as np

    from perfpredict.external.help import GPUS, load_fbnet
    from perfpredict.hardware.devices import get_device
    from perfpredict.nas import adapt
    from perfpredict.nas.candidates import Candidates

    data = load_fbnet()
    run = Candidates(batch_sizes=[1])
    arrays = [run.arrays(fbnet.build(data.choices[i].tolist()), (fbnet.example_input(1),)) for i in range(2)]
    for gpu, _ in GPUS.values():
        one, many = np.median(data.latency_ms[(gpu, 1)]), np.median(data.latency_ms[(gpu, 32)])
        assert many < 1.3 * one, gpu
        for a in arrays:
            parts = adapt.node_parts(a, get_device(gpu), [1])
            device_s, host_s = parts.device_s[:, 0].sum(), (parts.dispatch_s + parts.launch_s).sum()
            assert device_s < 0.3 * host_s, (
                f"{gpu}: {device_s * 1e3:.2f} ms on the device, {host_s * 1e3:.2f} ms on the host"
            )
