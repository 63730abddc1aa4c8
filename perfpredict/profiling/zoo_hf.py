"""A zoo family built by transformers: a field map from spec parameters to config fields, then ``from_config``.

Every transformers family of the zoo differs only in which config class it fills, under which field names, and
which ``AutoModelFor*`` class turns the config into a model with a task head. :class:`HfModel` holds those three
things as data, so the families in :mod:`.zoo_text` and :mod:`.zoo_vision` are table rows, not builders.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from perfpredict.profiling.zoo_family import NUM_LABELS, classification_head, hf

# A config field's value: the name of a spec parameter, or a function of all the spec's parameters.
Field = str | Callable[[Mapping[str, Any]], Any]

LABELS = {"num_labels": NUM_LABELS}  # the classification families' heads


def ffn_width(p: Mapping[str, Any]) -> int:
    """The feed-forward width: the spec gives it as a multiple of the hidden width."""
    return p["hidden"] * p["expansion"]


# The names most transformer configs (BERT-style encoders, ViT, the decoders) give their shape.
TRANSFORMER_FIELDS: dict[str, Field] = {
    "hidden_size": "hidden",
    "num_hidden_layers": "layers",
    "num_attention_heads": "heads",
    "intermediate_size": ffn_width,
}


@dataclass(frozen=True)
class HfModel:
    """How one family's spec becomes a transformers model; called as the family's ``build(params, info)``."""

    config: str  # the transformers config class, e.g. "BertConfig"
    auto: str  # the AutoModelFor* class that builds the model with its task head from that config
    fields: Mapping[str, Field]  # config field -> spec parameter (or a function of the parameters)
    fixed: Mapping[str, Any] = field(default_factory=dict)  # config fields every spec of the family shares
    # A model without a classification head (the T5 encoder) gets the zoo's mean-pooled head over this width.
    head_width: str | None = None
    # Adjusts the config where a field depends on the config itself (EfficientNet's head width).
    finish: Callable[[Any], None] | None = None

    source: ClassVar[str] = "transformers"

    def make_config(self, p: Mapping[str, Any]) -> Any:
        values = {name: p[f] if isinstance(f, str) else f(p) for name, f in self.fields.items()}
        # lists are copied: a config must not share a list with the spec's (frozen) parameters or another config
        values = {k: list(v) if isinstance(v, (list, tuple)) else v for k, v in values.items()}
        cfg = getattr(hf(), self.config)(**values, **copy.deepcopy(dict(self.fixed)))
        if self.finish is not None:
            self.finish(cfg)
        return cfg

    def __call__(self, p: Mapping[str, Any], info: Mapping[str, Any]) -> Any:
        model = getattr(hf(), self.auto).from_config(self.make_config(p))
        if self.head_width is None:
            return model
        import torch

        return classification_head(model, p[self.head_width], pool="mean", torch=torch)
