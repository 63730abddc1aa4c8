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
from dataclasses import dataclass
from typing import Any

from perfpredict.core.errors import InvalidInputError, close_matches
from perfpredict.profiling import zoo_text, zoo_torch, zoo_vision
from perfpredict.profiling.zoo_family import NUM_LABELS, Family

ZOO_VERSION = 1
PHASES = ("inference", "training")
DTYPES = ("float32", "float16", "bfloat16")
DEVICE_DTYPES = {"cpu": ("float32", "bfloat16"), "cuda": ("float32", "float16", "bfloat16")}
PROFILES = ("tiny", "cpu", "gpu")  # tiny: for small shared hosts, where cpu-sized rows take 5-15 s
BATCH_RANGE = (1, 512)
BATCHES = {
    "tiny": (1, 2, 4, 8, 16, 32, 64),
    "cpu": (1, 2, 4, 8, 16, 32, 64),
    "gpu": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
}
SEQS = {"tiny": (32, 64, 128), "cpu": (32, 64, 128, 256), "gpu": (128, 256, 512, 1024, 2048, 4096)}


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
        raise InvalidInputError(
            f"unknown model family {name!r}{near}; valid families: {', '.join(_FAMILIES)}"
        ) from None


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
            raise InvalidInputError(
                f"{self.family} spec params: missing {missing!r}, unexpected {extra!r}; "
                f"a {self.family} spec takes exactly {', '.join(fam.params)}"
            )
        object.__setattr__(self, "params", canon)
        if self.phase not in PHASES:
            raise InvalidInputError(f"phase {self.phase!r} is not one of {', '.join(PHASES)}")
        if self.dtype not in DTYPES:
            raise InvalidInputError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise InvalidInputError(f"batch {self.batch!r} must be a positive integer")
        if fam.needs_seq:
            if isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 1:
                raise InvalidInputError(
                    f"{self.family} is a text family: seq must be a positive integer, got {self.seq!r}"
                )
            limit = fam.max_seq(canon)
            if limit is not None and self.seq > limit:
                raise InvalidInputError(f"seq {self.seq} is longer than this {self.family} allows ({limit})")
        elif self.seq is not None:
            raise InvalidInputError(f"{self.family} is a {fam.kind} family: seq must be null, got {self.seq!r}")

    # -- keys ----------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "params": dict(self.params),
            "phase": self.phase,
            "batch": self.batch,
            "seq": self.seq,
            "dtype": self.dtype,
        }

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
            raise InvalidInputError(
                f"model spec {str(key)[:120]!r}: needs 'family' and 'params'; fields allowed: "
                f"{', '.join(sorted(allowed))}; unexpected: {unknown!r}"
            )
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
        return (
            torch.zeros(shape, dtype=getattr(torch, self.dtype), device="meta"),
            torch.zeros((b,), dtype=torch.long, device="meta"),
        )


def make_step(
    model: Any, x: Any, labels: Any, phase: str, *, lr: float = 1e-4, capturable: bool = False
) -> Callable[[], Any]:
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


_CAUSAL = {"gpt2", "llama", "mistral", "qwen2"}


for _family in (*zoo_text.FAMILIES, *zoo_vision.FAMILIES, *zoo_torch.FAMILIES):
    _register(_family)


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


def family_plan(
    family: str,
    *,
    seed: int = 0,
    profile: str = "cpu",
    device: str = "cpu",
    archs: int = 50,
    phases: Sequence[str] = PHASES,
    dtypes: Sequence[str] | None = None,
    batches: Sequence[int] | None = None,
    arch_block: int = 5,
) -> Iterator[ModelSpec]:
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
        block = arch_specs[start : start + max(1, arch_block)]
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


def sample_specs(
    families: Sequence[str] | None = None,
    *,
    seed: int = 0,
    profile: str = "cpu",
    device: str = "cpu",
    archs: int = 50,
    **kwargs: Any,
) -> Iterator[ModelSpec]:
    """The collection order over ``families`` (default: all): round-robin over per-family plans."""
    names = list(families or list_families())
    for name in names:
        get_family(name)
    return round_robin(
        [family_plan(n, seed=seed, profile=profile, device=device, archs=archs, **kwargs) for n in names]
    )


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
        specs.append(
            ModelSpec(family, params, rng.choice(PHASES), rng.choice(BATCHES[profile]), seq, rng.choice(DTYPES))
        )
        i += 1
    return specs
