"""The FBNet search space (Wu et al., CVPR'19) as HW-NAS-Bench and HELP define it, in plain PyTorch.

A candidate is 22 choices, one per searchable layer, each an index into :data:`OPS`: an inverted-residual block
of kernel 3 or 5, expansion 1, 3 or 6, and 1 or 2 groups in its pointwise convolutions (with a channel shuffle
after the first when there are two), or ``skip``. The 22 layers form seven stages of 1, 4, 4, 4, 4, 4 and 1
layers with 16, 24, 32, 64, 112, 184 and 352 channels; a stage's first layer takes its stride. A 3x3 stem of 16
channels comes first, and a 1x1 header convolution, global average pooling and a linear classifier last. A block
adds its input back when its shape is unchanged; ``skip`` is the identity, or a strided 1x1 convolution where the
stage changes the shape.

HELP's FBNet latencies (``data/external/help/``) are of the CIFAR-100 variant: 32x32 inputs, stem and first two
stages at stride 1, a 1,504-channel header and 100 classes. ``dataset="imagenet"`` builds the ImageNet variant
(224x224, stride 2 in the stem and in the second, third, fourth and sixth stages, a 1,984-channel header).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from perfpredict.core.errors import InvalidInputError

#: the nine choices per layer, in the order HELP's and HW-NAS-Bench's encodings index them
OPS = ("k3_e1", "k3_e1_g2", "k3_e3", "k3_e6", "k5_e1", "k5_e1_g2", "k5_e3", "k5_e6", "skip")
LAYERS = 22
STAGE_LAYERS = (1, 4, 4, 4, 4, 4, 1)
STAGE_CHANNELS = (16, 24, 32, 64, 112, 184, 352)
STEM_CHANNELS = 16
#: per dataset: (stem stride, stage strides, header channels, classes, input side)
VARIANTS = {
    "cifar100": (1, (1, 1, 2, 2, 1, 2, 1), 1504, 100, 32),
    "cifar10": (1, (1, 1, 2, 2, 1, 2, 1), 1504, 10, 32),
    "imagenet": (2, (1, 2, 2, 2, 1, 2, 1), 1984, 1000, 224),
}


def build(choices: Sequence[int | str], dataset: str = "cifar100", device: Any = None) -> nn.Module:
    """The candidate network for 22 ``choices`` (indices into :data:`OPS`, or their names), in eval mode.

    ``device="meta"`` builds it without allocating its weights, which is all a loop that only predicts needs.
    """
    indices = _indices(choices)
    stem_stride, _, header, classes, _ = _variant(dataset)
    with torch.device(device) if device is not None else contextlib.nullcontext():
        blocks = [_layer(OPS[op], *shape) for op, shape in zip(indices, layer_plan(dataset))]
        net = nn.Sequential(
            _conv_bn_relu(3, STEM_CHANNELS, 3, stem_stride),
            *blocks,
            _conv_bn_relu(STAGE_CHANNELS[-1], header, 1, 1),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(header, classes),
        )
    return net.eval()


def example_input(batch_size: int, dataset: str = "cifar100", device: Any = "meta") -> torch.Tensor:
    """An input batch for the variant, on the meta device by default (a prediction never reads its values)."""
    side = _variant(dataset)[4]
    return torch.empty(batch_size, 3, side, side, device=device)


def layer_plan(dataset: str = "cifar100") -> list[tuple[int, int, int]]:
    """(input channels, output channels, stride) of each of the 22 searchable layers."""
    strides = _variant(dataset)[1]
    plan, channels = [], STEM_CHANNELS
    for width, count, stride in zip(STAGE_CHANNELS, STAGE_LAYERS, strides):
        for i in range(count):
            plan.append((channels, width, stride if i == 0 else 1))
            channels = width
    return plan


def _indices(choices: Sequence[int | str]) -> list[int]:
    if len(choices) != LAYERS:
        raise InvalidInputError(f"an FBNet candidate has {LAYERS} choices, got {len(choices)}: {list(choices)!r}")
    out = []
    for c in choices:
        if isinstance(c, str) and c in OPS:
            out.append(OPS.index(c))
        elif isinstance(c, int) and not isinstance(c, bool) and 0 <= c < len(OPS):
            out.append(int(c))
        else:
            raise InvalidInputError(f"FBNet choice {c!r} is not an index 0-{len(OPS) - 1} or one of {', '.join(OPS)}")
    return out


def _variant(dataset: str) -> tuple:
    if dataset not in VARIANTS:
        raise InvalidInputError(f"dataset {dataset!r} is not one of {', '.join(VARIANTS)}")
    return VARIANTS[dataset]


def _layer(op: str, c_in: int, c_out: int, stride: int) -> nn.Module:
    if op == "skip":
        return _Skip(c_in, c_out, stride)
    parts = op.split("_")  # "k5_e6" or "k3_e1_g2"
    groups = int(parts[2][1:]) if len(parts) == 3 else 1
    return _InvertedResidual(c_in, c_out, stride, kernel=int(parts[0][1:]), expansion=int(parts[1][1:]), groups=groups)


def _conv_bn_relu(c_in: int, c_out: int, kernel: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride, kernel // 2, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class _InvertedResidual(nn.Module):
    """1x1 (grouped) expansion, k x k depthwise at the stride, 1x1 (grouped) projection; BN after each."""

    def __init__(self, c_in: int, c_out: int, stride: int, *, kernel: int, expansion: int, groups: int) -> None:
        super().__init__()
        mid = c_in * expansion
        self.groups = groups
        self.residual = c_in == c_out and stride == 1
        self.expand = nn.Conv2d(c_in, mid, 1, groups=groups, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.depthwise = nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.project = nn.Conv2d(mid, c_out, 1, groups=groups, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.expand(x)))
        if self.groups > 1:  # channel shuffle, so the projection's groups see each other's channels
            n, c, h, w = out.shape
            out = out.view(n, self.groups, c // self.groups, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
        out = self.relu(self.bn2(self.depthwise(out)))
        out = self.bn3(self.project(out))
        if self.residual:
            out += x
        return out


class _Skip(nn.Module):
    """The identity where the shape is kept, else a strided 1x1 convolution, BN and ReLU."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.reshape = _conv_bn_relu(c_in, c_out, 1, stride) if stride != 1 or c_in != c_out else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.reshape is None else self.reshape(x)
