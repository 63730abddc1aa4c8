"""The programs behind NeuSight's end-to-end table, captured as OpGraphs: its model configs, heads and inputs.

NeuSight timed (``neusight/Tracing/trace.py``, ``measure_e2e``) HuggingFace models built from its own configs
(``scripts/asplos/data/DLmodel_configs``, copied to ``data/external/neusight/configs``) with
``attn_implementation="eager"``, in fp32, on ``input_ids`` of ones:
- inference: ``model.eval()`` under ``torch.no_grad()``, one forward; BERT with a sequence-classification head, GPT-2,
  GPT-3 and OPT as causal LMs, Switch Transformers as a seq2seq LM;
- training: ``model.train()`` (dropout on), the forward and then ``loss.backward()`` timed apart and summed, with the
  loss (cross-entropy on the logits) computed between the two timings and no optimizer step; BERT with its
  pre-training heads.
Switch Transformers got ``(input_ids, ones, ones)`` positionally: an all-ones attention mask and decoder inputs of
the same length; its experts ran on ``batch x expert_capacity`` padded rows each, which is what the balanced route
of :mod:`perfpredict.compiler_hooks.moe_routing` captures for its config (capacity 64 of 512 tokens per sequence).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfpredict.core.graph import OpGraph
from perfpredict.external.op_rows import EXTERNAL_DIR

CONFIGS = EXTERNAL_DIR / "neusight" / "configs"
MODELS = ("bert_large", "gpt2_large", "gpt3_xl", "gpt3_27", "opt_13", "switchxl4")
#: (inference head, training head) per architecture family, as NeuSight's get_model picks them
HEADS = {
    "bert": ("AutoModelForSequenceClassification", "AutoModelForPreTraining"),
    "gpt2": ("AutoModelForCausalLM", "AutoModelForCausalLM"),
    "opt": ("AutoModelForCausalLM", "AutoModelForCausalLM"),
    "switch_transformers": ("AutoModelForSeq2SeqLM", "AutoModelForSeq2SeqLM"),
}


def config(model: str) -> Any:
    """The transformers config of one of NeuSight's models (``MODELS``), with the cache off."""
    from perfpredict.compiler_hooks.hf_frontend import config_from_dict

    if model not in MODELS:
        raise ValueError(f"unknown NeuSight model {model!r}; choose one of {', '.join(MODELS)}")
    cfg = config_from_dict(json.loads((CONFIGS / f"{model}.json").read_text()), name=f"neusight/{model}")
    cfg.use_cache = False
    return cfg


def build(cfg: Any, phase: str) -> Any:
    """The model NeuSight ran, on the meta device, fp32, eager attention."""
    import torch
    import transformers

    head = HEADS[cfg.model_type][phase == "training"]
    with torch.device("meta"):
        model = getattr(transformers, head).from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    return model.train(phase == "training")


def inputs(cfg: Any, batch: int, seq: int) -> tuple:
    """NeuSight's positional inputs on meta: ``input_ids`` of ones (Switch: ids, mask, decoder ids)."""
    import torch

    ids = torch.ones((batch, seq), dtype=torch.long, device="meta")
    return (ids, torch.ones_like(ids), ids) if cfg.model_type == "switch_transformers" else (ids,)


def capture(model: str, batch: int, seq: int, phase: str) -> OpGraph:
    """The OpGraph of one NeuSight row's program (a deep stack traced with two layers and copied where alike)."""
    from perfpredict.compiler_hooks.featurize import featurize
    from perfpredict.compiler_hooks.hf_capture import traced_stack

    cfg = config(model)

    def trace(m: Any, c: Any) -> OpGraph:  # an MoE routes statically and balanced (compiler_hooks.moe_routing)
        return featurize(m, inputs(c, batch, seq), phase=phase, name=model)

    return traced_stack(cfg, lambda c: build(c, phase), trace)


def copy_configs(tree: Any, folder: Path = CONFIGS) -> list[Path]:
    """Copy NeuSight's model configs (the models of its end-to-end table) from a source tree."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for model in MODELS:
        path = folder / f"{model}.json"
        path.write_text(tree.read_text(f"scripts/asplos/data/DLmodel_configs/{model}.json"))
        out.append(path)
    return out
