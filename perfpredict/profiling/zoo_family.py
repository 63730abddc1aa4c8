"""What a zoo family is, and what every family's builder shares: sizes, the classification head, transformers.

:mod:`perfpredict.profiling.zoo` registers the families of :mod:`.zoo_text`, :mod:`.zoo_vision` and
:mod:`.zoo_torch`, in that order (the collector's round-robin order). The transformers families are built by
:class:`~perfpredict.profiling.zoo_hf.HfModel` (a field map and ``AutoModelFor*.from_config``).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NUM_LABELS = 10
SEQ_RANGE = (32, 4096)
SMALL_PROFILES = ("tiny", "cpu")  # the size profiles of small shared hosts
TEXT_WIDTHS = {"tiny": (32, 64, 96, 128), "cpu": (64, 128, 192, 256), "gpu": (256, 512, 768, 1024, 1536, 2048)}
TEXT_DEPTHS = {"tiny": (1, 2), "cpu": (1, 2, 3, 4), "gpu": (2, 4, 6, 8, 12, 16, 24)}
IMAGES = {"tiny": (64, 80), "cpu": (64, 96, 128), "gpu": (128, 160, 192, 224, 256)}


@dataclass(frozen=True)
class Family:
    """One architecture family: how to sample, build and feed it."""

    name: str
    kind: str  # "text", "vision" or "vector"
    sample: Callable[[random.Random, str], dict[str, Any]]
    build: Callable[[Mapping[str, Any], Mapping[str, Any]], Any]  # (params, spec info) -> nn.Module
    # The smallest architecture (what the tests build): it names every parameter, in the order `params` lists them.
    smallest: dict[str, Any]
    max_seq: Callable[[Mapping[str, Any]], int | None] = lambda p: None

    @property
    def params(self) -> tuple[str, ...]:
        """The parameter names a spec must give (``perfpredict zoo families`` lists them in this order)."""
        return tuple(self.smallest)

    @property
    def source(self) -> str:
        """The library that builds the model: "transformers" for an :class:`~.zoo_hf.HfModel`, else "torch"."""
        return getattr(self.build, "source", "torch")

    @property
    def needs_seq(self) -> bool:
        return self.kind == "text"


def hf():
    from perfpredict.core.errors import require

    return require("transformers", "hf")


def heads_for(rng: random.Random, hidden: int, choices: Sequence[int] = (2, 4, 8, 12, 16)) -> int:
    ok = [h for h in choices if hidden % h == 0 and hidden // h >= 16]
    return rng.choice(ok or [1])


def classification_head(body: Any, width: int, pool: str, torch: Any):
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


def image_size(rng: random.Random, profile: str) -> int:
    return rng.choice(IMAGES[profile])
