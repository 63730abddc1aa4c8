"""The zoo's vision families on transformers: ViT, DeiT, Swin, ConvNeXt, ResNet, EfficientNet, MobileNetV2, RegNet, PoolFormer."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from perfpredict.profiling.zoo_family import SMALL_PROFILES, TEXT_DEPTHS, TEXT_WIDTHS, Family, heads_for, image_size
from perfpredict.profiling.zoo_hf import LABELS, TRANSFORMER_FIELDS, HfModel


def _vit_sample(rng: random.Random, profile: str) -> dict[str, Any]:
    image = image_size(rng, profile)
    hidden = rng.choice(TEXT_WIDTHS[profile])
    max_tokens = {"tiny": 64, "cpu": 256}.get(profile, 1024)
    if profile == "tiny":
        image = rng.choice((32, 64))
    patch = rng.choice(
        [q for q in (4, 8, 14, 16, 32) if image % q == 0 and image // q >= 2 and (image // q) ** 2 <= max_tokens]
    )
    return {
        "hidden": hidden,
        "layers": rng.choice(TEXT_DEPTHS[profile]),
        "heads": heads_for(rng, hidden),
        "expansion": rng.choice((2, 3, 4)),
        "image": image,
        "patch": patch,
    }


def _swin_sample(rng: random.Random, profile: str) -> dict[str, Any]:
    image = image_size(rng, profile)
    stages = rng.choice((2, 3, 4))
    final = image // 4 // 2 ** (stages - 1)  # the last stage's feature map side
    windows = [w for w in (2, 4, 7, 8) if final % w == 0] or [final]
    depth_choices = (1, 2) if profile in SMALL_PROFILES else (2, 4, 6)
    return {
        "image": image,
        "embed": rng.choice((32, 64, 96) if profile in SMALL_PROFILES else (96, 128, 192)),
        "depths": [rng.choice(depth_choices) for _ in range(stages)],
        "window": rng.choice(windows),
        "expansion": rng.choice((2, 4)),
    }


def _stage_sample(rng: random.Random, profile: str, base: Sequence[int], max_stages: int = 4) -> tuple[list, list]:
    stages = rng.choice(range(2, max_stages + 1))
    w0 = rng.choice(base)
    widths = [w0 * 2**i for i in range(stages)]
    depths = [rng.choice((1, 2) if profile in SMALL_PROFILES else (1, 2, 3, 4, 6)) for _ in range(stages)]
    return widths, depths


def _convnext_sample(rng, profile):
    widths, depths = _stage_sample(rng, profile, (16, 24, 32) if profile in SMALL_PROFILES else (64, 96, 128))
    return {"image": image_size(rng, profile), "widths": widths, "depths": depths}


def _resnet_sample(rng, profile):
    block = rng.choice(("basic", "bottleneck"))
    base = (16, 32) if profile in SMALL_PROFILES else (64, 128, 256)
    widths, depths = _stage_sample(rng, profile, [b * (4 if block == "bottleneck" else 1) for b in base])
    return {
        "image": image_size(rng, profile),
        "stem": rng.choice((16, 32) if profile in SMALL_PROFILES else (32, 64)),
        "widths": widths,
        "depths": depths,
        "block": block,
    }


def _efficientnet_sample(rng, profile):
    kernels = [rng.choice((3, 5)) for _ in range(7)]
    expansions = [1] + [rng.choice((3, 4, 6)) for _ in range(6)]
    return {
        "image": image_size(rng, profile),
        "width_mult": rng.choice((0.25, 0.35, 0.5) if profile in SMALL_PROFILES else (0.75, 1.0, 1.1, 1.2, 1.4)),
        "depth_mult": rng.choice((0.25, 0.5) if profile in SMALL_PROFILES else (1.0, 1.1, 1.2, 1.4)),
        "kernels": kernels,
        "expansions": expansions,
    }


def _mobilenet_sample(rng, profile):
    return {
        "image": image_size(rng, profile),
        "width_mult": rng.choice((0.25, 0.35, 0.5) if profile in SMALL_PROFILES else (0.75, 1.0, 1.4)),
        "expansion": float(rng.choice((2, 4, 6))),
    }


def _regnet_sample(rng, profile):
    gw = rng.choice((8, 16) if profile in SMALL_PROFILES else (16, 24, 48))
    widths, depths = _stage_sample(rng, profile, (gw * 2, gw * 3) if profile in SMALL_PROFILES else (gw * 4, gw * 6), 4)
    return {
        "image": image_size(rng, profile),
        "stem": 32,
        "widths": widths,
        "depths": depths,
        "group_width": gw,
        "block": rng.choice(("x", "y")),
    }


def _poolformer_sample(rng, profile):
    widths, depths = _stage_sample(rng, profile, (16, 32) if profile in SMALL_PROFILES else (64, 96), 4)
    return {
        "image": image_size(rng, profile),
        "widths": widths,
        "depths": depths,
        "pool": rng.choice((3, 5)),
        "expansion": rng.choice((2, 4)),
    }


def _stages(p: Mapping[str, Any]) -> int:
    return len(p["widths"])


def _swin_heads(p: Mapping[str, Any]) -> list[int]:
    return [max(1, p["embed"] * 2**i // 32) for i in range(len(p["depths"]))]


def _efficientnet_head(cfg: Any) -> None:
    from transformers.models.efficientnet.modeling_efficientnet import round_filters

    cfg.hidden_dim = round_filters(cfg, 1280)  # NB: HF's default (2560) only matches width_coefficient 2.0


def _first_stages(*values: int):
    """A per-stage config list cut to the spec's stage count."""
    return lambda p: list(values[: _stages(p)])


# Config fields, per config class.
_VIT = {**TRANSFORMER_FIELDS, "image_size": "image", "patch_size": "patch"}
_SWIN = {
    "image_size": "image",
    "embed_dim": "embed",
    "depths": "depths",
    "num_heads": _swin_heads,
    "window_size": "window",
    "mlp_ratio": lambda p: float(p["expansion"]),
}
_CONVNEXT = {"hidden_sizes": "widths", "depths": "depths", "num_stages": _stages}
_RESNET = {"embedding_size": "stem", "hidden_sizes": "widths", "depths": "depths", "layer_type": "block"}
_EFFICIENTNET = {
    "image_size": "image",
    "width_coefficient": "width_mult",
    "depth_coefficient": "depth_mult",
    "kernel_sizes": "kernels",
    "expand_ratios": "expansions",
}
_MOBILENET_V2 = {"image_size": "image", "depth_multiplier": "width_mult", "expand_ratio": "expansion"}
_REGNET = {**_RESNET, "groups_width": "group_width"}
_POOLFORMER = {
    "hidden_sizes": "widths",
    "depths": "depths",
    "pool_size": "pool",
    "mlp_ratio": lambda p: float(p["expansion"]),
    "num_encoder_blocks": _stages,
    "patch_sizes": _first_stages(7, 3, 3, 3),
    "strides": _first_stages(4, 2, 2, 2),
    "padding": _first_stages(2, 1, 1, 1),
}


def _classifier(config: str, fields: Mapping[str, Any], finish: Any = None, **more: Any) -> HfModel:
    return HfModel(config, "AutoModelForImageClassification", fields, {**more, **LABELS}, finish=finish)


def _vision(name: str, sample: Any, build: HfModel, smallest: dict[str, Any]) -> Family:
    return Family(name, "vision", sample, build, smallest)


# Registered by perfpredict.profiling.zoo, in this order. Each smallest architecture lists the parameters in the
# order `perfpredict zoo families` shows them (sorted).
_TINY_VIT = {"expansion": 2, "heads": 2, "hidden": 32, "image": 32, "layers": 1, "patch": 8}
_TINY_EFFICIENTNET = {
    "depth_mult": 0.25,
    "expansions": [1, 6, 6, 6, 6, 6, 6],
    "image": 64,
    "kernels": [3, 3, 5, 3, 5, 5, 3],
    "width_mult": 0.25,
}
FAMILIES: list[Family] = [
    _vision("vit", _vit_sample, _classifier("ViTConfig", _VIT), _TINY_VIT),
    # DeiT has two image classifiers (with and without a distillation token's head): the auto class picks by name
    _vision(
        "deit", _vit_sample, _classifier("DeiTConfig", _VIT, architectures=["DeiTForImageClassification"]), _TINY_VIT
    ),
    _vision(
        "swin",
        _swin_sample,
        _classifier("SwinConfig", _SWIN, patch_size=4),
        {"depths": [1, 1], "embed": 32, "expansion": 2, "image": 32, "window": 2},
    ),
    _vision(
        "convnext",
        _convnext_sample,
        _classifier("ConvNextConfig", _CONVNEXT),
        {"depths": [1, 1], "image": 32, "widths": [16, 32]},
    ),
    _vision(
        "resnet",
        _resnet_sample,
        _classifier("ResNetConfig", _RESNET),
        {"block": "basic", "depths": [1, 1], "image": 64, "stem": 16, "widths": [16, 32]},
    ),
    _vision(
        "efficientnet",
        _efficientnet_sample,
        HfModel(
            "EfficientNetConfig", "AutoModelForImageClassification", _EFFICIENTNET, LABELS, finish=_efficientnet_head
        ),
        _TINY_EFFICIENTNET,
    ),
    _vision(
        "mobilenet_v2",
        _mobilenet_sample,
        _classifier("MobileNetV2Config", _MOBILENET_V2),
        {"expansion": 6.0, "image": 64, "width_mult": 0.25},
    ),
    _vision(
        "regnet",
        _regnet_sample,
        _classifier("RegNetConfig", _REGNET),
        {"block": "x", "depths": [1, 1], "group_width": 8, "image": 64, "stem": 32, "widths": [16, 32]},
    ),
    _vision(
        "poolformer",
        _poolformer_sample,
        _classifier("PoolFormerConfig", _POOLFORMER),
        {"depths": [1, 1], "expansion": 2, "image": 32, "pool": 3, "widths": [16, 32]},
    ),
]
