"""The model zoo: deterministic ModelSpecs that rebuild the exact model on a CPU-only machine.

A :class:`ModelSpec` names a family, its architecture parameters, the phase, batch, sequence length and dtype. It
serialises to a one-line JSON key (:meth:`ModelSpec.to_key`) and back (:meth:`ModelSpec.from_key`), and
:meth:`ModelSpec.build` rebuilds the same model, with the same weights (seeded from the key), from a transformers
config or plain torch: no download, no timm, no torchvision.

Every family's model has a task head, and a training step is ``loss = model(x, labels=y).loss; backward; AdamW
step`` (HF sequence classification, causal LM with labels, image classification; plain-torch and T5-encoder models
get a linear classification head and cross-entropy). Inference runs the same model without labels under
``torch.no_grad()``.

Variants are sampled NAS-style (depth, width, heads, kernel, expansion) by :func:`sample_arch` from a seeded
``random.Random``; :func:`sample_specs` expands architectures over phases, dtypes and a batch sweep. Two size
profiles exist: ``"cpu"`` (small models, so one row takes about a second on a 2-core host) and ``"gpu"``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perfpredict.errors import InvalidInputError, close_matches

ZOO_VERSION = 1
PHASES = ("inference", "training")
DTYPES = ("float32", "float16", "bfloat16")
DEVICE_DTYPES = {"cpu": ("float32", "bfloat16"), "cuda": ("float32", "float16", "bfloat16")}
_SMALL = ("tiny", "cpu")
PROFILES = ("tiny", "cpu", "gpu")  # tiny: for small shared hosts, where cpu-sized rows take 5-15 s
NUM_LABELS = 10
SEQ_RANGE = (32, 4096)
BATCH_RANGE = (1, 512)
BATCHES = {"tiny": (1, 2, 4, 8, 16, 32, 64), "cpu": (1, 2, 4, 8, 16, 32, 64), "gpu": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)}
SEQS = {"tiny": (32, 64, 128), "cpu": (32, 64, 128, 256), "gpu": (128, 256, 512, 1024, 2048, 4096)}
IMAGES = {"tiny": (64, 80), "cpu": (64, 96, 128), "gpu": (128, 160, 192, 224, 256)}


@dataclass(frozen=True)
class Family:
    """One architecture family: how to sample, build and feed it."""

    name: str
    kind: str  # "text", "vision" or "vector"
    source: str  # "transformers" or "torch"
    params: tuple[str, ...]  # the parameter names a spec must give
    sample: Callable[[random.Random, str], dict[str, Any]]
    build: Callable[[Mapping[str, Any], Mapping[str, Any]], Any]  # (params, spec info) -> nn.Module
    smallest: dict[str, Any] = field(default_factory=dict)
    max_seq: Callable[[Mapping[str, Any]], int | None] = lambda p: None

    @property
    def needs_seq(self) -> bool:
        return self.kind == "text"


_FAMILIES: dict[str, Family] = {}


def _register(family: Family) -> Family:
    _FAMILIES[family.name] = family
    return family


def list_families() -> list[str]:
    """The zoo's family names, in registration order (the collector's round-robin order)."""
    return list(_FAMILIES)


def get_family(name: str) -> Family:
    try:
        return _FAMILIES[name]
    except KeyError:
        hint = close_matches(str(name), _FAMILIES)
        near = f" (did you mean {hint}?)" if hint else ""
        raise InvalidInputError(f"unknown model family {name!r}{near}; valid families: {', '.join(_FAMILIES)}") from None


# -- the spec ------------------------------------------------------------------------------------------------
def _canon(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_canon(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value
    raise InvalidInputError(f"spec parameter value {value!r} is not a number, string, bool or list of them")


@dataclass(frozen=True)
class ModelSpec:
    """One measurable configuration. ``params`` is the architecture; ``seq`` is None for vision/vector families."""

    family: str
    params: Mapping[str, Any]
    phase: str = "inference"
    batch: int = 1
    seq: int | None = None
    dtype: str = "float32"

    def __post_init__(self) -> None:
        fam = get_family(self.family)
        if not isinstance(self.params, Mapping):
            raise InvalidInputError(f"spec params must be a mapping, got {self.params!r}")
        canon = {str(k): _canon(v) for k, v in sorted(self.params.items())}
        missing = [p for p in fam.params if p not in canon]
        extra = [p for p in canon if p not in fam.params]
        if missing or extra:
            raise InvalidInputError(f"{self.family} spec params: missing {missing!r}, unexpected {extra!r}; "
                                    f"a {self.family} spec takes exactly {', '.join(fam.params)}")
        object.__setattr__(self, "params", canon)
        if self.phase not in PHASES:
            raise InvalidInputError(f"phase {self.phase!r} is not one of {', '.join(PHASES)}")
        if self.dtype not in DTYPES:
            raise InvalidInputError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise InvalidInputError(f"batch {self.batch!r} must be a positive integer")
        if fam.needs_seq:
            if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 1:
                raise InvalidInputError(f"{self.family} is a text family: seq must be a positive integer, "
                                        f"got {self.seq!r}")
            limit = fam.max_seq(canon)
            if limit is not None and self.seq > limit:
                raise InvalidInputError(f"seq {self.seq} is longer than this {self.family} allows ({limit})")
        elif self.seq is not None:
            raise InvalidInputError(f"{self.family} is a {fam.kind} family: seq must be null, got {self.seq!r}")

    # -- keys ----------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "params": dict(self.params), "phase": self.phase, "batch": self.batch,
                "seq": self.seq, "dtype": self.dtype}

    def to_key(self) -> str:
        """A one-line JSON key, stable across runs and machines (sorted keys, no spaces)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_key(cls, key: str | Mapping[str, Any]) -> ModelSpec:
        """Parse a key from :meth:`to_key` (or its dict); a malformed key raises InvalidInputError."""
        if isinstance(key, Mapping):
            data = dict(key)
        else:
            try:
                data = json.loads(key)
            except (TypeError, ValueError) as err:
                raise InvalidInputError(f"model spec key {str(key)[:120]!r} is not JSON ({err})") from err
        if not isinstance(data, dict):
            raise InvalidInputError(f"model spec key {str(key)[:120]!r} is not a JSON object")
        allowed = {"family", "params", "phase", "batch", "seq", "dtype"}
        unknown = sorted(set(data) - allowed)
        if unknown or "family" not in data or "params" not in data:
            raise InvalidInputError(f"model spec {str(key)[:120]!r}: needs 'family' and 'params'; fields allowed: "
                                    f"{', '.join(sorted(allowed))}; unexpected: {unknown!r}")
        return cls(**data)

    def arch_key(self) -> str:
        """Family and architecture only: equal for every phase, batch, seq and dtype of one model."""
        return json.dumps({"family": self.family, "params": dict(self.params)}, sort_keys=True, separators=(",", ":"))

    def group_key(self) -> str:
        """Everything but the batch: the rows of one batch sweep (OOM skipping and the feature cache use it)."""
        d = self.to_dict()
        d.pop("batch")
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    def with_batch(self, batch: int) -> ModelSpec:
        return ModelSpec(self.family, self.params, self.phase, batch, self.seq, self.dtype)

    def seed(self) -> int:
        """The weight-initialisation seed: a hash of the architecture, so every phase/batch has the same weights."""
        return int(hashlib.sha256(self.arch_key().encode()).hexdigest()[:8], 16)

    # -- building ------------------------------------------------------------------------------------------
    def build(self, device: Any = "cpu") -> Any:
        """The model, in this spec's dtype, on ``device`` ("meta" costs no memory), in train/eval mode by phase."""
        import torch

        fam = get_family(self.family)
        torch_dtype = getattr(torch, self.dtype)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed())
            with torch.device(device):
                model = fam.build(self.params, {"seq": self.seq})
        model = model.to(dtype=torch_dtype)
        model.train(self.phase == "training")
        return model

    def inputs(self, device: Any = "cpu") -> tuple[Any, Any]:
        """``(x, labels)`` for one call, deterministic: token ids, pixel values or feature vectors."""
        import torch

        fam = get_family(self.family)
        p = self.params
        if str(device) == "meta":  # shapes only: a batch-512 image tensor is never materialised
            return self._meta_inputs(fam, torch)
        gen = torch.Generator().manual_seed(self.seed() ^ self.batch)
        if fam.kind == "text":
            vocab = int(p["vocab"])
            x = torch.randint(0, vocab, (self.batch, self.seq), generator=gen)
            labels = x.clone() if fam.name in _CAUSAL else torch.randint(0, NUM_LABELS, (self.batch,), generator=gen)
        elif fam.kind == "vision":
            size = int(p["image"])
            x = torch.randn((self.batch, 3, size, size), generator=gen).to(getattr(torch, self.dtype))
            labels = torch.randint(0, NUM_LABELS, (self.batch,), generator=gen)
        else:
            x = torch.randn((self.batch, int(p["in_dim"])), generator=gen).to(getattr(torch, self.dtype))
            labels = torch.randint(0, NUM_LABELS, (self.batch,), generator=gen)
        return x.to(device), labels.to(device)

    def _meta_inputs(self, fam: Family, torch: Any) -> tuple[Any, Any]:
        p, b = self.params, self.batch
        if fam.kind == "text":
            x = torch.zeros((b, self.seq), dtype=torch.long, device="meta")
            labels = x if fam.name in _CAUSAL else torch.zeros((b,), dtype=torch.long, device="meta")
            return x, labels
        shape = (b, 3, int(p["image"]), int(p["image"])) if fam.kind == "vision" else (b, int(p["in_dim"]))
        return (torch.zeros(shape, dtype=getattr(torch, self.dtype), device="meta"),
                torch.zeros((b,), dtype=torch.long, device="meta"))


def make_step(model: Any, x: Any, labels: Any, phase: str, *, lr: float = 1e-4,
              capturable: bool = False) -> Callable[[], Any]:
    """One call of the measured work: a forward (inference) or forward + backward + AdamW step (training).

    The AdamW state is created by the first call (warm-up), so it counts in the peak memory like in training.
    ``capturable=True`` builds AdamW so that the step can be captured in a CUDA graph (its step counter stays on
    the GPU), as protocol v3 does on CUDA; the update is the same.
    """
    import torch

    if phase == "inference":
        model.eval()

        def infer() -> Any:
            with torch.no_grad():
                return model(x)

        return infer
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, **({"capturable": True} if capturable else {}))

    def train() -> Any:
        opt.zero_grad(set_to_none=True)
        loss = _loss(model(x, labels=labels))
        loss.backward()
        opt.step()
        return loss

    return train


def _loss(out: Any) -> Any:
    loss = getattr(out, "loss", None)
    if loss is None:
        if isinstance(out, dict) and "loss" in out:
            return out["loss"]
        return out
    return loss


# -- NAS-style sampling ----------------------------------------------------------------------------------------
def _heads_for(rng: random.Random, hidden: int, choices: Sequence[int] = (2, 4, 8, 12, 16)) -> int:
    ok = [h for h in choices if hidden % h == 0 and hidden // h >= 16]
    return rng.choice(ok or [1])


def _text_sample(widths: dict[str, Sequence[int]], depths: dict[str, Sequence[int]]):
    def sample(rng: random.Random, profile: str) -> dict[str, Any]:
        hidden = rng.choice(widths[profile])
        return {"hidden": hidden, "layers": rng.choice(depths[profile]), "heads": _heads_for(rng, hidden),
                "expansion": rng.choice((2, 3, 4)), "vocab": rng.choice(_VOCAB[profile])}
    return sample


_VOCAB = {"tiny": (1024, 4096), "cpu": (1024, 4096, 8192), "gpu": (30522, 32000, 50257)}
_TEXT_W = {"tiny": (32, 64, 96, 128), "cpu": (64, 128, 192, 256), "gpu": (256, 512, 768, 1024, 1536, 2048)}
_TEXT_D = {"tiny": (1, 2), "cpu": (1, 2, 3, 4), "gpu": (2, 4, 6, 8, 12, 16, 24)}


def _max_pos(p: Mapping[str, Any]) -> int:
    return SEQ_RANGE[1]


def _tf():
    from perfpredict.errors import require

    return require("transformers", "hf")


def _bert(p, info):
    t = _tf()
    cfg = t.BertConfig(hidden_size=p["hidden"], num_hidden_layers=p["layers"], num_attention_heads=p["heads"],
                       intermediate_size=p["hidden"] * p["expansion"], vocab_size=p["vocab"],
                       max_position_embeddings=SEQ_RANGE[1], num_labels=NUM_LABELS)
    return t.BertForSequenceClassification(cfg)


def _roberta(p, info):
    t = _tf()
    cfg = t.RobertaConfig(hidden_size=p["hidden"], num_hidden_layers=p["layers"], num_attention_heads=p["heads"],
                          intermediate_size=p["hidden"] * p["expansion"], vocab_size=p["vocab"], pad_token_id=1,
                          max_position_embeddings=SEQ_RANGE[1] + 2, num_labels=NUM_LABELS)
    return t.RobertaForSequenceClassification(cfg)


def _distilbert(p, info):
    t = _tf()
    cfg = t.DistilBertConfig(dim=p["hidden"], n_layers=p["layers"], n_heads=p["heads"],
                             hidden_dim=p["hidden"] * p["expansion"], vocab_size=p["vocab"],
                             max_position_embeddings=SEQ_RANGE[1], num_labels=NUM_LABELS)
    return t.DistilBertForSequenceClassification(cfg)


def _deberta(p, info):
    t = _tf()
    cfg = t.DebertaV2Config(hidden_size=p["hidden"], num_hidden_layers=p["layers"], num_attention_heads=p["heads"],
                            intermediate_size=p["hidden"] * p["expansion"], vocab_size=p["vocab"],
                            max_position_embeddings=SEQ_RANGE[1], relative_attention=True,
                            pos_att_type=["p2c", "c2p"], position_buckets=256, max_relative_positions=-1,
                            num_labels=NUM_LABELS)
    return t.DebertaV2ForSequenceClassification(cfg)


def _gpt2(p, info):
    t = _tf()
    cfg = t.GPT2Config(n_embd=p["hidden"], n_layer=p["layers"], n_head=p["heads"], n_inner=p["hidden"] * p["expansion"],
                       vocab_size=p["vocab"], n_positions=SEQ_RANGE[1], use_cache=False, bos_token_id=0,
                       eos_token_id=0)
    return t.GPT2LMHeadModel(cfg)


def _decoder(cls_name: str, cfg_name: str):
    def build(p, info):
        t = _tf()
        cfg = getattr(t, cfg_name)(hidden_size=p["hidden"], num_hidden_layers=p["layers"],
                                   num_attention_heads=p["heads"], num_key_value_heads=p["kv_heads"],
                                   intermediate_size=p["hidden"] * p["expansion"], vocab_size=p["vocab"],
                                   max_position_embeddings=SEQ_RANGE[1], use_cache=False, tie_word_embeddings=False)
        return getattr(t, cls_name)(cfg)
    return build


def _decoder_sample(rng: random.Random, profile: str) -> dict[str, Any]:
    p = _text_sample(_TEXT_W, _TEXT_D)(rng, profile)
    p["kv_heads"] = rng.choice([k for k in (1, 2, 4, 8) if p["heads"] % k == 0])
    return p


def _t5(p, info):
    import torch

    t = _tf()
    d_kv = p["hidden"] // p["heads"]
    cfg = t.T5Config(d_model=p["hidden"], d_kv=d_kv, d_ff=p["hidden"] * p["expansion"], num_layers=p["layers"],
                     num_heads=p["heads"], vocab_size=p["vocab"], use_cache=False)
    return _Head(t.T5EncoderModel(cfg), p["hidden"], pool="mean", torch=torch)


_CAUSAL = {"gpt2", "llama", "mistral", "qwen2"}



def _Head(body: Any, width: int, pool: str, torch: Any):
    """Wrap a body with a linear classification head; ``forward(x, labels=None)`` gives logits or the CE loss."""
    nn = torch.nn

    class Head(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = body
            self.head = nn.Linear(width, NUM_LABELS)

        def forward(self, x, labels=None):
            h = self.body(x)
            if hasattr(h, "last_hidden_state"):
                h = h.last_hidden_state
            if pool == "mean" and h.dim() == 3:
                h = h.mean(dim=1)
            logits = self.head(h)
            if labels is None:
                return logits
            return nn.functional.cross_entropy(logits.float(), labels)

    return Head()


def _vision_sample(rng: random.Random, profile: str) -> int:
    return rng.choice(IMAGES[profile])


def _vit_like(cls_name: str, cfg_name: str):
    def build(p, info):
        t = _tf()
        cfg = getattr(t, cfg_name)(hidden_size=p["hidden"], num_hidden_layers=p["layers"],
                                   num_attention_heads=p["heads"], intermediate_size=p["hidden"] * p["expansion"],
                                   image_size=p["image"], patch_size=p["patch"], num_labels=NUM_LABELS)
        return getattr(t, cls_name)(cfg)
    return build


def _vit_sample(rng: random.Random, profile: str) -> dict[str, Any]:
    image = _vision_sample(rng, profile)
    hidden = rng.choice(_TEXT_W[profile])
    max_tokens = {"tiny": 64, "cpu": 256}.get(profile, 1024)
    if profile == "tiny":
        image = rng.choice((32, 64))
    patch = rng.choice([q for q in (4, 8, 14, 16, 32) if image % q == 0 and 2 <= image // q
                        and (image // q) ** 2 <= max_tokens])
    return {"hidden": hidden, "layers": rng.choice(_TEXT_D[profile]), "heads": _heads_for(rng, hidden),
            "expansion": rng.choice((2, 3, 4)), "image": image, "patch": patch}


def _swin(p, info):
    t = _tf()
    stages = len(p["depths"])
    cfg = t.SwinConfig(image_size=p["image"], patch_size=4, embed_dim=p["embed"], depths=list(p["depths"]),
                       num_heads=[max(1, p["embed"] * 2**i // 32) for i in range(stages)], window_size=p["window"],
                       mlp_ratio=float(p["expansion"]), num_labels=NUM_LABELS)
    return t.SwinForImageClassification(cfg)


def _swin_sample(rng: random.Random, profile: str) -> dict[str, Any]:
    image = _vision_sample(rng, profile)
    stages = rng.choice((2, 3, 4))
    final = image // 4 // 2 ** (stages - 1)  # the last stage's feature map side
    windows = [w for w in (2, 4, 7, 8) if final % w == 0] or [final]
    depth_choices = (1, 2) if profile in _SMALL else (2, 4, 6)
    return {"image": image, "embed": rng.choice((32, 64, 96) if profile in _SMALL else (96, 128, 192)),
            "depths": [rng.choice(depth_choices) for _ in range(stages)], "window": rng.choice(windows),
            "expansion": rng.choice((2, 4))}


def _stage_sample(rng: random.Random, profile: str, base: Sequence[int], max_stages: int = 4) -> tuple[list, list]:
    stages = rng.choice(range(2, max_stages + 1))
    w0 = rng.choice(base)
    widths = [w0 * 2**i for i in range(stages)]
    depths = [rng.choice((1, 2) if profile in _SMALL else (1, 2, 3, 4, 6)) for _ in range(stages)]
    return widths, depths


def _convnext(p, info):
    t = _tf()
    cfg = t.ConvNextConfig(hidden_sizes=list(p["widths"]), depths=list(p["depths"]), num_stages=len(p["widths"]),
                           num_labels=NUM_LABELS)
    return t.ConvNextForImageClassification(cfg)


def _convnext_sample(rng, profile):
    widths, depths = _stage_sample(rng, profile, (16, 24, 32) if profile in _SMALL else (64, 96, 128))
    return {"image": _vision_sample(rng, profile), "widths": widths, "depths": depths}


def _resnet(p, info):
    t = _tf()
    cfg = t.ResNetConfig(embedding_size=p["stem"], hidden_sizes=list(p["widths"]), depths=list(p["depths"]),
                         layer_type=p["block"], num_labels=NUM_LABELS)
    return t.ResNetForImageClassification(cfg)


def _resnet_sample(rng, profile):
    block = rng.choice(("basic", "bottleneck"))
    base = (16, 32) if profile in _SMALL else (64, 128, 256)
    widths, depths = _stage_sample(rng, profile, [b * (4 if block == "bottleneck" else 1) for b in base])
    return {"image": _vision_sample(rng, profile), "stem": rng.choice((16, 32) if profile in _SMALL else (32, 64)),
            "widths": widths, "depths": depths, "block": block}


def _efficientnet(p, info):
    t = _tf()
    cfg = t.EfficientNetConfig(image_size=p["image"], width_coefficient=p["width_mult"],
                               depth_coefficient=p["depth_mult"], kernel_sizes=list(p["kernels"]),
                               expand_ratios=list(p["expansions"]), num_labels=NUM_LABELS)
    from transformers.models.efficientnet.modeling_efficientnet import round_filters

    cfg.hidden_dim = round_filters(cfg, 1280)  # NB: HF's default (2560) only matches width_coefficient 2.0
    return t.EfficientNetForImageClassification(cfg)


def _efficientnet_sample(rng, profile):
    kernels = [rng.choice((3, 5)) for _ in range(7)]
    expansions = [1] + [rng.choice((3, 4, 6)) for _ in range(6)]
    return {"image": _vision_sample(rng, profile),
            "width_mult": rng.choice((0.25, 0.35, 0.5) if profile in _SMALL else (0.75, 1.0, 1.1, 1.2, 1.4)),
            "depth_mult": rng.choice((0.25, 0.5) if profile in _SMALL else (1.0, 1.1, 1.2, 1.4)),
            "kernels": kernels, "expansions": expansions}


def _mobilenet_v2(p, info):
    t = _tf()
    cfg = t.MobileNetV2Config(image_size=p["image"], depth_multiplier=p["width_mult"], expand_ratio=p["expansion"],
                              num_labels=NUM_LABELS)
    return t.MobileNetV2ForImageClassification(cfg)


def _mobilenet_sample(rng, profile):
    return {"image": _vision_sample(rng, profile),
            "width_mult": rng.choice((0.25, 0.35, 0.5) if profile in _SMALL else (0.75, 1.0, 1.4)),
            "expansion": float(rng.choice((2, 4, 6)))}


def _regnet(p, info):
    t = _tf()
    cfg = t.RegNetConfig(embedding_size=p["stem"], hidden_sizes=list(p["widths"]), depths=list(p["depths"]),
                         groups_width=p["group_width"], layer_type=p["block"], num_labels=NUM_LABELS)
    return t.RegNetForImageClassification(cfg)


def _regnet_sample(rng, profile):
    gw = rng.choice((8, 16) if profile in _SMALL else (16, 24, 48))
    widths, depths = _stage_sample(rng, profile, (gw * 2, gw * 3) if profile in _SMALL else (gw * 4, gw * 6), 4)
    return {"image": _vision_sample(rng, profile), "stem": 32, "widths": widths, "depths": depths,
            "group_width": gw, "block": rng.choice(("x", "y"))}


def _poolformer(p, info):
    t = _tf()
    cfg = t.PoolFormerConfig(hidden_sizes=list(p["widths"]), depths=list(p["depths"]), pool_size=p["pool"],
                             mlp_ratio=float(p["expansion"]), num_encoder_blocks=len(p["widths"]),
                             patch_sizes=[7, 3, 3, 3][: len(p["widths"])], strides=[4, 2, 2, 2][: len(p["widths"])],
                             padding=[2, 1, 1, 1][: len(p["widths"])], num_labels=NUM_LABELS)
    return t.PoolFormerForImageClassification(cfg)


def _poolformer_sample(rng, profile):
    widths, depths = _stage_sample(rng, profile, (16, 32) if profile in _SMALL else (64, 96), 4)
    return {"image": _vision_sample(rng, profile), "widths": widths, "depths": depths, "pool": rng.choice((3, 5)),
            "expansion": rng.choice((2, 4))}


# -- plain torch families -----------------------------------------------------------------------------------
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
    return _Head(nn.Sequential(*layers), p["fc"], pool="none", torch=torch)


def _vgg_sample(rng, profile):
    stages = rng.choice((2, 3, 4, 5))
    w0 = rng.choice((8, 16, 32) if profile in _SMALL else (32, 64))
    return {"image": _vision_sample(rng, profile), "widths": [min(w0 * 2**i, 512) for i in range(stages)],
            "convs": [rng.choice((1, 2, 3)) for _ in range(stages)], "kernel": rng.choice((3, 5)),
            "batchnorm": rng.random() < 0.5, "fc": rng.choice((64, 128, 256) if profile in _SMALL else (512, 1024, 4096))}


def _densenet(p, info):
    import torch

    nn = torch.nn
    growth, bn_size = p["growth"], p["bn_size"]

    class DenseLayer(nn.Module):
        def __init__(self, c_in: int) -> None:
            super().__init__()
            self.f = nn.Sequential(nn.BatchNorm2d(c_in), nn.ReLU(), nn.Conv2d(c_in, bn_size * growth, 1, bias=False),
                                   nn.BatchNorm2d(bn_size * growth), nn.ReLU(),
                                   nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False))

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
    return _Head(nn.Sequential(*layers), c, pool="none", torch=torch)


def _densenet_sample(rng, profile):
    blocks = rng.choice((2, 3, 4))
    return {"image": _vision_sample(rng, profile), "growth": rng.choice((8, 12, 16) if profile in _SMALL else (24, 32, 48)),
            "blocks": [rng.choice((2, 3, 4) if profile in _SMALL else (6, 12, 24)) for _ in range(blocks)],
            "bn_size": rng.choice((2, 4)), "compression": 0.5}


def _mnasnet(p, info):
    import torch

    nn = torch.nn

    class InvertedResidual(nn.Module):
        def __init__(self, c_in: int, c_out: int, kernel: int, stride: int, expand: int) -> None:
            super().__init__()
            mid = c_in * expand
            self.residual = stride == 1 and c_in == c_out
            self.f = nn.Sequential(nn.Conv2d(c_in, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
                                   nn.Conv2d(mid, mid, kernel, stride, kernel // 2, groups=mid, bias=False),
                                   nn.BatchNorm2d(mid), nn.ReLU(inplace=True), nn.Conv2d(mid, c_out, 1, bias=False),
                                   nn.BatchNorm2d(c_out))

        def forward(self, x):
            return x + self.f(x) if self.residual else self.f(x)

    c = p["stem"]
    layers: list[Any] = [nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
    for width, repeats, kernel, expand in zip(p["widths"], p["repeats"], p["kernels"], p["expansions"]):
        for r in range(repeats):
            layers.append(InvertedResidual(c, width, kernel, 2 if r == 0 else 1, expand))
            c = width
    layers += [nn.Conv2d(c, p["head"], 1, bias=False), nn.BatchNorm2d(p["head"]), nn.ReLU(inplace=True),
               nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    return _Head(nn.Sequential(*layers), p["head"], pool="none", torch=torch)


def _mnasnet_sample(rng, profile):
    stages = rng.choice((3, 4, 5))
    w0 = rng.choice((8, 16) if profile in _SMALL else (16, 24, 32))
    return {"image": _vision_sample(rng, profile), "stem": w0, "widths": [w0 * (i + 2) for i in range(stages)],
            "repeats": [rng.choice((1, 2, 3)) for _ in range(stages)],
            "kernels": [rng.choice((3, 5, 7)) for _ in range(stages)],
            "expansions": [rng.choice((3, 6)) for _ in range(stages)],
            "head": rng.choice((128, 256) if profile in _SMALL else (1280,))}


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
    return _Head(nn.Sequential(*layers), c, pool="none", torch=torch)


def _mlp_sample(rng, profile):
    return {"in_dim": rng.choice((64, 256, 784, 1024) if profile in _SMALL else (784, 1024, 4096)),
            "width": rng.choice((128, 256, 512, 1024) if profile in _SMALL else (1024, 2048, 4096, 8192)),
            "layers": rng.choice((1, 2, 3, 4, 6)), "activation": rng.choice(("relu", "gelu", "silu")),
            "layernorm": rng.random() < 0.5}


_TEXT_PARAMS = ("expansion", "heads", "hidden", "layers", "vocab")
_TINY_TEXT = {"hidden": 32, "layers": 1, "heads": 2, "expansion": 2, "vocab": 128}
for _name, _build in (("bert", _bert), ("roberta", _roberta), ("distilbert", _distilbert), ("deberta_v2", _deberta),
                      ("gpt2", _gpt2)):
    _register(Family(_name, "text", "transformers", _TEXT_PARAMS, _text_sample(_TEXT_W, _TEXT_D), _build,
                     dict(_TINY_TEXT), _max_pos))
for _name, _cls, _cfg in (("llama", "LlamaForCausalLM", "LlamaConfig"),
                          ("mistral", "MistralForCausalLM", "MistralConfig"),
                          ("qwen2", "Qwen2ForCausalLM", "Qwen2Config")):
    _register(Family(_name, "text", "transformers", _TEXT_PARAMS + ("kv_heads",), _decoder_sample,
                     _decoder(_cls, _cfg), {**_TINY_TEXT, "kv_heads": 1}, _max_pos))
_register(Family("t5_encoder", "text", "transformers", _TEXT_PARAMS, _text_sample(_TEXT_W, _TEXT_D), _t5,
                 dict(_TINY_TEXT), lambda p: None))
_VIT_PARAMS = ("expansion", "heads", "hidden", "image", "layers", "patch")
_register(Family("vit", "vision", "transformers", _VIT_PARAMS, _vit_sample,
                 _vit_like("ViTForImageClassification", "ViTConfig"),
                 {"hidden": 32, "layers": 1, "heads": 2, "expansion": 2, "image": 32, "patch": 8}))
_register(Family("deit", "vision", "transformers", _VIT_PARAMS, _vit_sample,
                 _vit_like("DeiTForImageClassification", "DeiTConfig"),
                 {"hidden": 32, "layers": 1, "heads": 2, "expansion": 2, "image": 32, "patch": 8}))
_register(Family("swin", "vision", "transformers", ("depths", "embed", "expansion", "image", "window"), _swin_sample,
                 _swin, {"image": 32, "embed": 32, "depths": [1, 1], "window": 2, "expansion": 2}))
_register(Family("convnext", "vision", "transformers", ("depths", "image", "widths"), _convnext_sample, _convnext,
                 {"image": 32, "widths": [16, 32], "depths": [1, 1]}))
_register(Family("resnet", "vision", "transformers", ("block", "depths", "image", "stem", "widths"), _resnet_sample,
                 _resnet, {"image": 64, "stem": 16, "widths": [16, 32], "depths": [1, 1], "block": "basic"}))
_register(Family("efficientnet", "vision", "transformers",
                 ("depth_mult", "expansions", "image", "kernels", "width_mult"), _efficientnet_sample, _efficientnet,
                 {"image": 64, "width_mult": 0.25, "depth_mult": 0.25, "kernels": [3, 3, 5, 3, 5, 5, 3],
                  "expansions": [1, 6, 6, 6, 6, 6, 6]}))
_register(Family("mobilenet_v2", "vision", "transformers", ("expansion", "image", "width_mult"), _mobilenet_sample,
                 _mobilenet_v2, {"image": 64, "width_mult": 0.25, "expansion": 6.0}))
_register(Family("regnet", "vision", "transformers", ("block", "depths", "group_width", "image", "stem", "widths"),
                 _regnet_sample, _regnet,
                 {"image": 64, "stem": 32, "widths": [16, 32], "depths": [1, 1], "group_width": 8, "block": "x"}))
_register(Family("poolformer", "vision", "transformers", ("depths", "expansion", "image", "pool", "widths"),
                 _poolformer_sample, _poolformer,
                 {"image": 32, "widths": [16, 32], "depths": [1, 1], "pool": 3, "expansion": 2}))
_register(Family("vgg", "vision", "torch", ("batchnorm", "convs", "fc", "image", "kernel", "widths"), _vgg_sample,
                 _vgg, {"image": 32, "widths": [8, 16], "convs": [1, 1], "kernel": 3, "batchnorm": False, "fc": 32}))
_register(Family("densenet", "vision", "torch", ("blocks", "bn_size", "compression", "growth", "image"),
                 _densenet_sample, _densenet,
                 {"image": 32, "growth": 8, "blocks": [1, 1], "bn_size": 2, "compression": 0.5}))
_register(Family("mnasnet", "vision", "torch", ("expansions", "head", "image", "kernels", "repeats", "stem", "widths"),
                 _mnasnet_sample, _mnasnet,
                 {"image": 64, "stem": 8, "widths": [16, 24], "repeats": [1, 1], "kernels": [3, 5],
                  "expansions": [3, 3], "head": 32}))
_register(Family("mlp", "vector", "torch", ("activation", "in_dim", "layernorm", "layers", "width"), _mlp_sample,
                 _mlp, {"in_dim": 16, "width": 32, "layers": 1, "activation": "relu", "layernorm": False}))


def smallest_spec(family: str, phase: str = "inference", dtype: str = "float32") -> ModelSpec:
    """The family's smallest spec (what the tests build): batch 1, sequence 32 for text."""
    fam = get_family(family)
    return ModelSpec(family, fam.smallest, phase, 1, 32 if fam.needs_seq else None, dtype)


def sample_arch(family: str, rng: random.Random, profile: str = "cpu") -> dict[str, Any]:
    if profile not in PROFILES:
        raise InvalidInputError(f"profile {profile!r} is not one of {', '.join(PROFILES)}")
    return get_family(family).sample(rng, profile)


def _rng(seed: int, *parts: Any) -> random.Random:
    return random.Random(hashlib.sha256(":".join(map(str, (seed, *parts))).encode()).hexdigest())


def family_plan(family: str, *, seed: int = 0, profile: str = "cpu", device: str = "cpu", archs: int = 50,
                phases: Sequence[str] = PHASES, dtypes: Sequence[str] | None = None,
                batches: Sequence[int] | None = None, arch_block: int = 5) -> Iterator[ModelSpec]:
    """One family's specs in collection order: blocks of ``arch_block`` architectures, each block batch-major
    (then architecture, phase, dtype), so a short budget sees several architectures, not one batch sweep.

    Batches ascend within each (architecture, phase, dtype) group, which lets the collector skip larger batches
    after an OOM. The specs (keys) do not depend on the order: architecture ``i`` is always sampled the same way.
    """
    fam = get_family(family)
    dtypes = tuple(dtypes or DEVICE_DTYPES["cuda" if device.startswith("cuda") else "cpu"])
    batches = tuple(batches or BATCHES[profile])
    arch_specs = []
    for i in range(archs):
        rng = _rng(seed, family, profile, i)
        params = sample_arch(family, rng, profile)
        arch_specs.append((params, rng.choice(SEQS[profile]) if fam.needs_seq else None))
    for start in range(0, archs, max(1, arch_block)):
        block = arch_specs[start:start + max(1, arch_block)]
        for b in batches:
            for params, seq in block:
                for phase in phases:
                    for dtype in dtypes:
                        yield ModelSpec(family, params, phase, b, seq, dtype)


def round_robin(plans: Sequence[Iterator[ModelSpec]]) -> Iterator[ModelSpec]:
    """Interleave per-family plans one spec at a time, so a short budget spans every family."""
    live = list(plans)
    while live:
        nxt = []
        for it in live:
            spec = next(it, None)
            if spec is not None:
                yield spec
                nxt.append(it)
        live = nxt


def sample_specs(families: Sequence[str] | None = None, *, seed: int = 0, profile: str = "cpu", device: str = "cpu",
                 archs: int = 50, **kwargs: Any) -> Iterator[ModelSpec]:
    """The collection order over ``families`` (default: all): round-robin over per-family plans."""
    names = list(families or list_families())
    for name in names:
        get_family(name)
    return round_robin([family_plan(n, seed=seed, profile=profile, device=device, archs=archs, **kwargs)
                        for n in names])


def graph_corpus_specs(n: int = 10_000, *, seed: int = 0, profile: str = "gpu") -> list[ModelSpec]:
    """``n`` unlabelled specs for graph pretraining: architectures, phases, batches, seqs and dtypes all sampled."""
    specs: list[ModelSpec] = []
    names = list_families()
    i = 0
    while len(specs) < n:
        family = names[i % len(names)]
        rng = _rng(seed, "corpus", family, i)
        fam = get_family(family)
        params = sample_arch(family, rng, profile)
        seq = rng.choice(SEQS[profile]) if fam.needs_seq else None
        specs.append(ModelSpec(family, params, rng.choice(PHASES), rng.choice(BATCHES[profile]), seq,
                               rng.choice(DTYPES)))
        i += 1
    return specs
