"""The zoo's plain-torch families (no transformers class): VGG, DenseNet, MnasNet and an MLP."""

from __future__ import annotations

from typing import Any

from perfpredict.profiling.zoo_family import SMALL_PROFILES, Family, classification_head, image_size


def _vgg(p, info):
    import torch

    nn = torch.nn
    layers: list[Any] = []
    c_in = 3
    for width, convs in zip(p["widths"], p["convs"]):
        for _ in range(convs):
            layers += [nn.Conv2d(c_in, width, p["kernel"], padding=p["kernel"] // 2), nn.ReLU(inplace=True)]
            if p["batchnorm"]:
                layers.insert(len(layers) - 1, nn.BatchNorm2d(width))
            c_in = width
        layers.append(nn.MaxPool2d(2))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c_in, p["fc"]), nn.ReLU(inplace=True)]
    return classification_head(nn.Sequential(*layers), p["fc"], pool="none", torch=torch)


def _vgg_sample(rng, profile):
    stages = rng.choice((2, 3, 4, 5))
    w0 = rng.choice((8, 16, 32) if profile in SMALL_PROFILES else (32, 64))
    return {
        "image": image_size(rng, profile),
        "widths": [min(w0 * 2**i, 512) for i in range(stages)],
        "convs": [rng.choice((1, 2, 3)) for _ in range(stages)],
        "kernel": rng.choice((3, 5)),
        "batchnorm": rng.random() < 0.5,
        "fc": rng.choice((64, 128, 256) if profile in SMALL_PROFILES else (512, 1024, 4096)),
    }


def _densenet(p, info):
    import torch

    nn = torch.nn
    growth, bn_size = p["growth"], p["bn_size"]

    class DenseLayer(nn.Module):
        def __init__(self, c_in: int) -> None:
            super().__init__()
            self.f = nn.Sequential(
                nn.BatchNorm2d(c_in),
                nn.ReLU(),
                nn.Conv2d(c_in, bn_size * growth, 1, bias=False),
                nn.BatchNorm2d(bn_size * growth),
                nn.ReLU(),
                nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False),
            )

        def forward(self, x):
            return torch.cat([x, self.f(x)], 1)

    c = 2 * growth
    layers: list[Any] = [nn.Conv2d(3, c, 3, padding=1, bias=False)]
    for i, n in enumerate(p["blocks"]):
        for _ in range(n):
            layers.append(DenseLayer(c))
            c += growth
        if i < len(p["blocks"]) - 1:
            out = int(c * p["compression"])
            layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.Conv2d(c, out, 1, bias=False), nn.AvgPool2d(2)]
            c = out
    layers += [nn.BatchNorm2d(c), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return classification_head(nn.Sequential(*layers), c, pool="none", torch=torch)


def _densenet_sample(rng, profile):
    blocks = rng.choice((2, 3, 4))
    return {
        "image": image_size(rng, profile),
        "growth": rng.choice((8, 12, 16) if profile in SMALL_PROFILES else (24, 32, 48)),
        "blocks": [rng.choice((2, 3, 4) if profile in SMALL_PROFILES else (6, 12, 24)) for _ in range(blocks)],
        "bn_size": rng.choice((2, 4)),
        "compression": 0.5,
    }


def _mnasnet(p, info):
    import torch

    nn = torch.nn

    class InvertedResidual(nn.Module):
        def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, expand: int) -> None:
            super().__init__()
            mid = c_in * expand
            self.residual = stride == 1 and c_in == c_out
            self.f = nn.Sequential(
                nn.Conv2d(c_in, mid, 1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(inplace=True),
                nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(inplace=True),
                nn.Conv2d(mid, c_out, 1, bias=False),
                nn.BatchNorm2d(c_out),
            )

        def forward(self, x):
            return x + self.f(x) if self.residual else self.f(x)

    c = p["stem"]
    layers: list[Any] = [nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
    for width, repeats, kernel, expand in zip(p["widths"], p["repeats"], p["kernels"], p["expansions"]):
        for r in range(repeats):
            layers.append(InvertedResidual(c, width, kernel, 2 if r == 0 else 1, expand))
            c = width
    layers += [
        nn.Conv2d(c, p["head"], 1, bias=False),
        nn.BatchNorm2d(p["head"]),
        nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
    ]
    return classification_head(nn.Sequential(*layers), p["head"], pool="none", torch=torch)


def _mnasnet_sample(rng, profile):
    stages = rng.choice((3, 4, 5))
    w0 = rng.choice((8, 16) if profile in SMALL_PROFILES else (16, 24, 32))
    return {
        "image": image_size(rng, profile),
        "stem": w0,
        "widths": [w0 * (i + 2) for i in range(stages)],
        "repeats": [rng.choice((1, 2, 3)) for _ in range(stages)],
        "kernels": [rng.choice((3, 5, 7)) for _ in range(stages)],
        "expansions": [rng.choice((3, 6)) for _ in range(stages)],
        "head": rng.choice((128, 256) if profile in SMALL_PROFILES else (1280,)),
    }


def _mlp(p, info):
    import torch

    nn = torch.nn
    acts = {"relu": nn.ReLU, "gelu": nn.GELU, "silu": nn.SiLU}
    layers: list[Any] = []
    c = p["in_dim"]
    for _ in range(p["layers"]):
        layers += [nn.Linear(c, p["width"]), acts[p["activation"]]()]
        if p["layernorm"]:
            layers.append(nn.LayerNorm(p["width"]))
        c = p["width"]
    return classification_head(nn.Sequential(*layers), c, pool="none", torch=torch)


def _mlp_sample(rng, profile):
    return {
        "in_dim": rng.choice((64, 256, 784, 1024) if profile in SMALL_PROFILES else (784, 1024, 4096)),
        "width": rng.choice((128, 256, 512, 1024) if profile in SMALL_PROFILES else (1024, 2048, 4096, 8192)),
        "layers": rng.choice((1, 2, 3, 4, 6)),
        "activation": rng.choice(("relu", "gelu", "silu")),
        "layernorm": rng.random() < 0.5,
    }


# Registered by perfpredict.profiling.zoo, in this order. Each smallest architecture lists the parameters in the
# order `perfpredict zoo families` shows them (sorted).
_TINY_VGG = {"batchnorm": False, "convs": [1, 1], "fc": 32, "image": 32, "kernel": 3, "widths": [8, 16]}
_TINY_DENSENET = {"blocks": [1, 1], "bn_size": 2, "compression": 0.5, "growth": 8, "image": 32}
_TINY_MNASNET = {
    "expansions": [3, 3],
    "head": 32,
    "image": 64,
    "kernels": [3, 5],
    "repeats": [1, 1],
    "stem": 8,
    "widths": [16, 24],
}
_TINY_MLP = {"activation": "relu", "in_dim": 16, "layernorm": False, "layers": 1, "width": 32}
FAMILIES: list[Family] = [
    Family("vgg", "vision", _vgg_sample, _vgg, _TINY_VGG),
    Family("densenet", "vision", _densenet_sample, _densenet, _TINY_DENSENET),
    Family("mnasnet", "vision", _mnasnet_sample, _mnasnet, _TINY_MNASNET),
    Family("mlp", "vector", _mlp_sample, _mlp, _TINY_MLP),
]
