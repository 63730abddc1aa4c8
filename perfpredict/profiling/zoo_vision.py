"""The zoo's vision families on transformers: ViT, DeiT, Swin, ConvNeXt, ResNet, EfficientNet, MobileNetV2, RegNet, PoolFormer."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from perfpredict.profiling.zoo_family import (
    NUM_LABELS,
    SMALL_PROFILES,
    TEXT_DEPTHS,
    TEXT_WIDTHS,
    Family,
    heads_for,
    hf,
    image_size,
)

FAMILIES: list[Family] = []  # registered by perfpredict.profiling.zoo, in this order


def _vit_like(cls_name: str, cfg_name: str):
    def build(p, info):
        t = hf()
        cfg = getattr(t, cfg_name)(
            hidden_size=p["hidden"],
            num_hidden_layers=p["layers"],
            num_attention_heads=p["heads"],
            intermediate_size=p["hidden"] * p["expansion"],
            image_size=p["image"],
            patch_size=p["patch"],
            num_labels=NUM_LABELS,
        )
        return getattr(t, cls_name)(cfg)

    return build


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


def _swin(p, info):
    t = hf()
    stages = len(p["depths"])
    cfg = t.SwinConfig(
        image_size=p["image"],
        patch_size=4,
        embed_dim=p["embed"],
        depths=list(p["depths"]),
        num_heads=[max(1, p["embed"] * 2**i // 32) for i in range(stages)],
        window_size=p["window"],
        mlp_ratio=float(p["expansion"]),
        num_labels=NUM_LABELS,
    )
    return t.SwinForImageClassification(cfg)


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


def _convnext(p, info):
    t = hf()
    cfg = t.ConvNextConfig(
        hidden_sizes=list(p["widths"]), depths=list(p["depths"]), num_stages=len(p["widths"]), num_labels=NUM_LABELS
    )
    return t.ConvNextForImageClassification(cfg)


def _convnext_sample(rng, profile):
    widths, depths = _stage_sample(rng, profile, (16, 24, 32) if profile in SMALL_PROFILES else (64, 96, 128))
    return {"image": image_size(rng, profile), "widths": widths, "depths": depths}


def _resnet(p, info):
    t = hf()
    cfg = t.ResNetConfig(
        embedding_size=p["stem"],
        hidden_sizes=list(p["widths"]),
        depths=list(p["depths"]),
        layer_type=p["block"],
        num_labels=NUM_LABELS,
    )
    return t.ResNetForImageClassification(cfg)


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


def _efficientnet(p, info):
    t = hf()
    cfg = t.EfficientNetConfig(
        image_size=p["image"],
        width_coefficient=p["width_mult"],
        depth_coefficient=p["depth_mult"],
        kernel_sizes=list(p["kernels"]),
        expand_ratios=list(p["expansions"]),
        num_labels=NUM_LABELS,
    )
    from transformers.models.efficientnet.modeling_efficientnet import round_filters

    cfg.hidden_dim = round_filters(cfg, 1280)  # NB: HF's default (2560) only matches width_coefficient 2.0
    return t.EfficientNetForImageClassification(cfg)


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


def _mobilenet_v2(p, info):
    t = hf()
    cfg = t.MobileNetV2Config(
        image_size=p["image"], depth_multiplier=p["width_mult"], expand_ratio=p["expansion"], num_labels=NUM_LABELS
    )
    return t.MobileNetV2ForImageClassification(cfg)


def _mobilenet_sample(rng, profile):
    return {
        "image": image_size(rng, profile),
        "width_mult": rng.choice((0.25, 0.35, 0.5) if profile in SMALL_PROFILES else (0.75, 1.0, 1.4)),
        "expansion": float(rng.choice((2, 4, 6))),
    }


def _regnet(p, info):
    t = hf()
    cfg = t.RegNetConfig(
        embedding_size=p["stem"],
        hidden_sizes=list(p["widths"]),
        depths=list(p["depths"]),
        groups_width=p["group_width"],
        layer_type=p["block"],
        num_labels=NUM_LABELS,
    )
    return t.RegNetForImageClassification(cfg)


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


def _poolformer(p, info):
    t = hf()
    cfg = t.PoolFormerConfig(
        hidden_sizes=list(p["widths"]),
        depths=list(p["depths"]),
        pool_size=p["pool"],
        mlp_ratio=float(p["expansion"]),
        num_encoder_blocks=len(p["widths"]),
        patch_sizes=[7, 3, 3, 3][: len(p["widths"])],
        strides=[4, 2, 2, 2][: len(p["widths"])],
        padding=[2, 1, 1, 1][: len(p["widths"])],
        num_labels=NUM_LABELS,
    )
    return t.PoolFormerForImageClassification(cfg)


def _poolformer_sample(rng, profile):
    widths, depths = _stage_sample(rng, profile, (16, 32) if profile in SMALL_PROFILES else (64, 96), 4)
    return {
        "image": image_size(rng, profile),
        "widths": widths,
        "depths": depths,
        "pool": rng.choice((3, 5)),
        "expansion": rng.choice((2, 4)),
    }


_VIT_PARAMS = ("expansion", "heads", "hidden", "image", "layers", "patch")
FAMILIES.append(
    Family(
        "vit",
        "vision",
        "transformers",
        _VIT_PARAMS,
        _vit_sample,
        _vit_like("ViTForImageClassification", "ViTConfig"),
        {"hidden": 32, "layers": 1, "heads": 2, "expansion": 2, "image": 32, "patch": 8},
    )
)
FAMILIES.append(
    Family(
        "deit",
        "vision",
        "transformers",
        _VIT_PARAMS,
        _vit_sample,
        _vit_like("DeiTForImageClassification", "DeiTConfig"),
        {"hidden": 32, "layers": 1, "heads": 2, "expansion": 2, "image": 32, "patch": 8},
    )
)
FAMILIES.append(
    Family(
        "swin",
        "vision",
        "transformers",
        ("depths", "embed", "expansion", "image", "window"),
        _swin_sample,
        _swin,
        {"image": 32, "embed": 32, "depths": [1, 1], "window": 2, "expansion": 2},
    )
)
FAMILIES.append(
    Family(
        "convnext",
        "vision",
        "transformers",
        ("depths", "image", "widths"),
        _convnext_sample,
        _convnext,
        {"image": 32, "widths": [16, 32], "depths": [1, 1]},
    )
)
FAMILIES.append(
    Family(
        "resnet",
        "vision",
        "transformers",
        ("block", "depths", "image", "stem", "widths"),
        _resnet_sample,
        _resnet,
        {"image": 64, "stem": 16, "widths": [16, 32], "depths": [1, 1], "block": "basic"},
    )
)
FAMILIES.append(
    Family(
        "efficientnet",
        "vision",
        "transformers",
        ("depth_mult", "expansions", "image", "kernels", "width_mult"),
        _efficientnet_sample,
        _efficientnet,
        {
            "image": 64,
            "width_mult": 0.25,
            "depth_mult": 0.25,
            "kernels": [3, 3, 5, 3, 5, 5, 3],
            "expansions": [1, 6, 6, 6, 6, 6, 6],
        },
    )
)
FAMILIES.append(
    Family(
        "mobilenet_v2",
        "vision",
        "transformers",
        ("expansion", "image", "width_mult"),
        _mobilenet_sample,
        _mobilenet_v2,
        {"image": 64, "width_mult": 0.25, "expansion": 6.0},
    )
)
FAMILIES.append(
    Family(
        "regnet",
        "vision",
        "transformers",
        ("block", "depths", "group_width", "image", "stem", "widths"),
        _regnet_sample,
        _regnet,
        {"image": 64, "stem": 32, "widths": [16, 32], "depths": [1, 1], "group_width": 8, "block": "x"},
    )
)
FAMILIES.append(
    Family(
        "poolformer",
        "vision",
        "transformers",
        ("depths", "expansion", "image", "pool", "widths"),
        _poolformer_sample,
        _poolformer,
        {"image": 32, "widths": [16, 32], "depths": [1, 1], "pool": 3, "expansion": 2},
    )
)
